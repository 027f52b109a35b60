//! Transactions PostgreSQL streams while they run (`postgres.stream_in_progress`,
//! protocol 2): published at their commit exactly as protocol 1 publishes
//! them whole, aborted ones and aborted savepoints never, held past the
//! memory bound in spill files, and nothing lost when walrelay is killed
//! in the middle of one.
//!
//! The test databases set `logical_decoding_work_mem` to its minimum
//! (64kB) so that a transaction of a few hundred kB is streamed; the
//! slot's `pg_stat_replication_slots` row proves it was.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use crate::support::*;

const START: Duration = Duration::from_secs(120);

/// A database whose walsenders stream (or, under protocol 1, spill) any
/// transaction past 64kB.
async fn small_decoding_memory(prefix: &str) -> TestDb {
    let db = TestDb::new(prefix).await;
    db.create_outbox("outbox").await;
    pg_connect("postgres")
        .await
        .batch_execute(&format!(
            "ALTER DATABASE {} SET logical_decoding_work_mem = '64kB'",
            db.name
        ))
        .await
        .expect("set logical_decoding_work_mem");
    db
}

/// Inserts `rows` outbox rows of ~300 bytes in the current transaction of
/// `client`, numbered from `from`, over 10 aggregates.
fn insert_sql(from: i64, rows: i64) -> String {
    format!(
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
         SELECT gen_random_uuid(), 'order', 'big-' || (g % 10), 'Created', \
                jsonb_build_object('n', g, 'pad', repeat('x', 250)) \
         FROM generate_series({from}, {}) g",
        from + rows - 1
    )
}

/// The slot's counters: (streamed transactions, spilled transactions).
async fn stream_and_spill_txns(db: &TestDb, slot: &str) -> (i64, i64) {
    let row = db
        .client
        .query_opt(
            "SELECT stream_txns, spill_txns FROM pg_stat_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .expect("pg_stat_replication_slots");
    row.map_or((0, 0), |r| (r.get(0), r.get(1)))
}

/// What a consumer sees of a topic, partition by partition in order:
/// key, value and every header.
fn by_partition(consumed: &[Consumed], topic: &str) -> BTreeMap<i32, Vec<String>> {
    let mut out: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for c in consumed.iter().filter(|c| c.topic == topic) {
        out.entry(c.partition).or_default().push(format!(
            "{:?} {:?} {:?}",
            c.key.as_deref().map(String::from_utf8_lossy),
            c.value.as_deref().map(String::from_utf8_lossy),
            c.headers
        ));
    }
    out
}

/// Two connectors on one outbox, one streaming transactions while they
/// run and one taking them whole: a big transaction with an aborted
/// savepoint, a released one, small transactions committed while it ran,
/// and a big transaction that aborts. Both publish the same records, byte
/// for byte, in the same order, and every committed row exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transaction_streamed_while_it_runs_is_published_as_if_sent_whole() {
    require_kafka();
    let db = small_decoding_memory("inprog").await;
    let streaming = Names::new("inprog_on");
    let whole = Names::new("inprog_off");
    let mut on = RelayProcess::start(&relay_config(&db, &streaming, "", ""), &[]);
    let mut off = RelayProcess::start(
        &relay_config(&db, &whole, "", "")
            .replace("[kafka]", "stream_in_progress = false\n\n[kafka]"),
        &[],
    );
    on.wait_log("streaming", START).await;
    off.wait_log("streaming", START).await;

    let big = pg_connect(&db.name).await;
    big.batch_execute(&format!(
        "BEGIN; {}; SAVEPOINT a; {}; ROLLBACK TO SAVEPOINT a; {};",
        insert_sql(1, 1000),
        insert_sql(100_001, 500),
        insert_sql(1001, 1000),
    ))
    .await
    .expect("big transaction, first part");
    // The walsender streams it while it runs: wait until it did.
    wait_for(
        "the open transaction to be streamed to the first connector",
        START,
        || async { (stream_and_spill_txns(&db, &streaming.slot).await.0 > 0).then_some(()) },
    )
    .await;
    // Small transactions commit while it is open (they come first).
    for i in 0..5 {
        db.client
            .batch_execute(&insert_sql(50_000 + i * 10, 10))
            .await
            .expect("small transaction");
    }
    big.batch_execute(&format!(
        "SAVEPOINT b; {}; SAVEPOINT c; {}; RELEASE SAVEPOINT c; RELEASE SAVEPOINT b; \
         SAVEPOINT d; {}; SAVEPOINT e; {}; RELEASE SAVEPOINT e; ROLLBACK TO SAVEPOINT d; COMMIT",
        insert_sql(2001, 300),
        insert_sql(2301, 300),
        insert_sql(200_001, 300),
        insert_sql(200_301, 300),
    ))
    .await
    .expect("big transaction, the rest and its commit");
    // A big transaction that aborts after being streamed (PostgreSQL
    // discards one it already knows aborted without streaming it).
    big.batch_execute(&format!("BEGIN; {}", insert_sql(300_001, 1500)))
        .await
        .expect("a transaction to abort");
    wait_for(
        "the transaction to abort to be streamed to the first connector",
        START,
        || async { (stream_and_spill_txns(&db, &streaming.slot).await.0 > 1).then_some(()) },
    )
    .await;
    big.batch_execute("ROLLBACK").await.expect("abort");
    db.client
        .batch_execute(&insert_sql(60_000, 1))
        .await
        .expect("last transaction");

    let rows = outbox_rows(&db).await;
    assert_eq!(rows.len(), 2000 + 600 + 50 + 1, "the committed rows");
    let (on_topic, off_topic) = (streaming.topic("order"), whole.topic("order"));
    // One topic at a time: both carry the same event ids, which `consume`
    // counts.
    let mut consumed = Vec::new();
    for topic in [&on_topic, &off_topic] {
        consumed.extend(consume(
            &[topic],
            rows.len(),
            Duration::from_secs(180),
            Duration::from_secs(2),
        ));
    }
    let of = |names: &Names, topic: &str| {
        let mine: Vec<Consumed> = consumed
            .iter()
            .filter(|c| c.topic == topic)
            .cloned()
            .collect();
        let duplicates = verify_outbox_delivery(names, &rows, &mine);
        assert_eq!(duplicates, 0, "{topic}: no restart, so no re-sent tail");
        let ids: HashSet<String> = mine.iter().filter_map(|c| c.header_str("id")).collect();
        assert_eq!(ids.len(), rows.len(), "{topic}: every committed row once");
    };
    of(&streaming, &on_topic);
    of(&whole, &off_topic);
    assert_eq!(
        by_partition(&consumed, &on_topic),
        by_partition(&consumed, &off_topic),
        "the same records, headers and order with and without streaming"
    );
    let (streamed, spilled_on) = stream_and_spill_txns(&db, &streaming.slot).await;
    let (streamed_off, spilled_off) = stream_and_spill_txns(&db, &whole.slot).await;
    eprintln!(
        "streaming connector: {streamed} streamed, {spilled_on} spilled on the server; \
         protocol 1: {streamed_off} streamed, {spilled_off} spilled"
    );
    assert!(streamed >= 2, "both big transactions were streamed");
    assert_eq!(
        spilled_on, 0,
        "nothing spilled on the server while streaming"
    );
    assert!(spilled_off >= 1, "protocol 1 spills them on the server");
    assert_eq!(streamed_off, 0);
    on.stop();
    off.stop();
}

/// With a memory bound far below the transaction, walrelay holds it in a
/// spill file; killed (-9) while the transaction is open and streamed,
/// the next instance gets it again from its first block and publishes
/// every row at the commit, with writers committing around it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kill_in_the_middle_of_a_streamed_transaction_loses_nothing() {
    require_kafka();
    let db = small_decoding_memory("inprogkill").await;
    let names = Names::new("inprogkill");
    let config = relay_config(&db, &names, "", "")
        .replace("[kafka]", "stream_memory_limit = \"16KiB\"\n\n[kafka]")
        .replace(
            "[[outbox]]",
            &format!("[health]\nlisten = \"{}\"\n\n[[outbox]]", free_local_addr()),
        );
    let mut relay = RelayProcess::start(&config, &[]);
    let config_path = relay.config_path.clone();
    relay.wait_log("streaming", START).await;
    let writers = Writers::start(&db);

    let big = pg_connect(&db.name).await;
    big.batch_execute(&format!("BEGIN; {}", insert_sql(1, 2000)))
        .await
        .expect("big transaction, first part");
    wait_for("the open transaction to be streamed", START, || async {
        (stream_and_spill_txns(&db, &names.slot).await.0 > 0).then_some(())
    })
    .await;
    // walrelay has held part of it (in its file: 16KiB is far less).
    tokio::time::sleep(Duration::from_millis(300)).await;
    relay.kill9();
    big.batch_execute(&insert_sql(2001, 1000))
        .await
        .expect("big transaction, more while walrelay is down");
    let mut relay = RelayProcess::start_with(&config_path, &[]);
    relay.wait_log("streaming", START).await;
    big.batch_execute(&format!("{}; COMMIT", insert_sql(3001, 1000)))
        .await
        .expect("big transaction, the rest and its commit");
    writers.stop().await;

    let rows = outbox_rows(&db).await;
    let topics = [names.topic("order"), names.topic("invoice")];
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    let consumed = consume(
        &topic_refs,
        rows.len(),
        Duration::from_secs(180),
        Duration::from_secs(2),
    );
    let duplicates = verify_outbox_delivery(&names, &rows, &consumed);
    let ids: HashSet<String> = consumed.iter().filter_map(|c| c.header_str("id")).collect();
    assert_eq!(ids.len(), rows.len(), "every committed row, after the kill");
    eprintln!("{} rows, {duplicates} re-sent after the kill", rows.len());
    let metrics = http_get(&health_addr(&config), "/metrics");
    let counter = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}_total")))
            .and_then(|l| l.split_whitespace().last()?.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {metrics}"))
    };
    assert!(counter("walrelay_streamed_transactions") >= 1.0);
    assert!(
        counter("walrelay_stream_spilled_bytes") > 16.0 * 1024.0,
        "held past the 16KiB bound in a file"
    );
    relay.stop();
}

/// The `[health] listen` address of a configuration.
fn health_addr(config: &str) -> String {
    config
        .lines()
        .find_map(|l| l.strip_prefix("listen = \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("[health] listen")
        .to_owned()
}

/// Every record kind at once, under `exactly_once`: outbox rows, table
/// events of two tables with transaction metadata (BEGIN/END records and
/// each event's `transaction` block), and transactional logical messages,
/// all in one big transaction with aborted savepoints (one before its
/// first published change that survives), a change of an uncaptured table
/// first, and a DDL in the middle (a column added to a captured table
/// between its rows), small
/// transactions committed while it ran. A streaming connector and a
/// protocol-1 connector publish the same records, in the same order, once
/// each for a `read_committed` reader (names of the connector replaced by
/// a placeholder): the BEGIN/END ids too, which name the Begin's position.
///
/// On PostgreSQL 14 a whole transaction's Begin is at its first WAL
/// record, which protocol 2 does not send: there the two compare without
/// metadata, and a third connector with metadata takes every transaction
/// whole (its slot streams nothing) and writes each BEGIN and END once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_record_kind_under_exactly_once_is_published_as_if_sent_whole() {
    require_kafka();
    let db = small_decoding_memory("inprogall").await;
    db.client
        .batch_execute(
            "CREATE TABLE a (id int8 PRIMARY KEY, v text); ALTER TABLE a OWNER TO walrelay;
             CREATE TABLE b (id int8 PRIMARY KEY, v text); ALTER TABLE b OWNER TO walrelay;
             CREATE TABLE uncaptured (id int8);",
        )
        .await
        .expect("tables");
    let version: i32 = db
        .client
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .expect("server_version_num")
        .get(0);
    // From 15 on, the compared pair carries transaction metadata.
    let compared_metadata = version >= 150_000;
    let config = |names: &Names, streaming: bool, metadata: bool| {
        relay_config(
            &db,
            names,
            "",
            &format!(
                "[table_defaults]\ntopic_prefix = \"{p}\"\nprovide_transaction_metadata = {metadata}\n\
                 [[table]]\nname = \"public.a\"\n[[table]]\nname = \"public.b\"\n\
                 [[message]]\nprefix = \"orders\"\ntopic = \"{p}.msg\"\nkey_field = \"order_id\"\n",
                p = names.connector
            ),
        )
        .replace("[kafka]\n", "[kafka]\ndelivery = \"exactly_once\"\n")
        .replace(
            "[kafka]",
            &format!("stream_in_progress = {streaming}\n\n[kafka]"),
        )
    };
    let (on_names, off_names) = (Names::new("inprogall_on"), Names::new("inprogall_off"));
    let meta_names = Names::new("inprogall_meta");
    let mut on = RelayProcess::start(&config(&on_names, true, compared_metadata), &[]);
    let mut off = RelayProcess::start(&config(&off_names, false, compared_metadata), &[]);
    let mut meta =
        (!compared_metadata).then(|| RelayProcess::start(&config(&meta_names, true, true), &[]));
    on.wait_log("streaming", START).await;
    off.wait_log("streaming", START).await;
    if let Some(meta) = meta.as_mut() {
        meta.wait_log("streaming", START).await;
    }

    let big = pg_connect(&db.name).await;
    // Its first change is to a table no connector publishes, and its
    // first published changes are in a savepoint rolled back after they
    // were streamed: the Begin of a whole transaction is at neither.
    big.batch_execute(&format!(
        "BEGIN; INSERT INTO uncaptured VALUES (1); \
         SAVEPOINT s0; \
         INSERT INTO b SELECT g, repeat('gone', 50) FROM generate_series(1, 1000) g; \
         ROLLBACK TO SAVEPOINT s0; {}; \
         INSERT INTO a SELECT g, repeat('a', 200) FROM generate_series(1, 800) g; \
         SELECT pg_logical_emit_message(true, 'orders', \
                json_build_object('order_id', 'o-' || g, 'n', g)::text) \
           FROM generate_series(1, 200) g; \
         SAVEPOINT s; INSERT INTO b SELECT g, 'gone' FROM generate_series(1, 500) g; {}; \
         ROLLBACK TO SAVEPOINT s; \
         UPDATE a SET v = 'updated ' || id WHERE id % 4 = 0; \
         INSERT INTO b SELECT g, repeat('b', 200) FROM generate_series(1, 200) g; \
         ALTER TABLE b ADD COLUMN w text DEFAULT 'w0'; \
         INSERT INTO b SELECT g, repeat('b', 200), 'w' || g FROM generate_series(201, 400) g; \
         UPDATE b SET w = 'changed' WHERE id % 50 = 0;",
        insert_sql(1, 600),
        insert_sql(100_001, 300),
    ))
    .await
    .expect("big transaction, open");
    wait_for("the open transaction to be streamed", START, || async {
        (stream_and_spill_txns(&db, &on_names.slot).await.0 > 0).then_some(())
    })
    .await;
    for i in 0..5 {
        db.client
            .batch_execute(&format!(
                "BEGIN; {}; INSERT INTO a VALUES ({}, 'small'); \
                 SELECT pg_logical_emit_message(true, 'orders', '{{\"order_id\": \"s-{i}\"}}'); \
                 COMMIT",
                insert_sql(50_000 + i * 10, 10),
                // Even: the big transaction's DELETE (id % 10 = 1), which
                // runs after these commit, leaves them.
                10_000 + i * 2
            ))
            .await
            .expect("small transaction");
    }
    big.batch_execute("DELETE FROM a WHERE id % 10 = 1; COMMIT")
        .await
        .expect("commit");

    // outbox 600 + 50; a: 800 inserts, 200 updates, 80 deletes (+ their
    // tombstones) and 5 small; b: 400 inserts, 8 updates; messages 205;
    // with metadata, a BEGIN and an END for each of the 6 transactions.
    let topics = |n: &Names| {
        let p = &n.connector;
        let mut t = vec![
            n.topic("order"),
            format!("{p}.public.a"),
            format!("{p}.public.b"),
            format!("{p}.msg"),
        ];
        if compared_metadata {
            t.push(format!("{p}.transaction"));
        }
        t
    };
    let read = |n: &Names| {
        let topics = topics(n);
        let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
        let mut out = BTreeMap::new();
        for c in consume_committed(&refs) {
            let line = format!(
                "{:?} {:?} {:?}",
                c.key.as_deref().map(String::from_utf8_lossy),
                c.value.as_deref().map(String::from_utf8_lossy),
                c.headers
                    .iter()
                    .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                    .collect::<Vec<_>>()
            )
            .replace(&n.connector, "<c>");
            let topic = c.topic.replace(&n.connector, "<c>");
            out.entry((topic, c.partition))
                .or_insert_with(Vec::new)
                .push(line);
        }
        out
    };
    let expected_records =
        650 + 800 + 200 + 80 * 2 + 5 + 400 + 8 + 205 + if compared_metadata { 12 } else { 0 };
    let count = |m: &BTreeMap<(String, i32), Vec<String>>| m.values().map(Vec::len).sum::<usize>();
    let (mut on_read, mut off_read) = (BTreeMap::new(), BTreeMap::new());
    wait_for("both connectors to publish every record", START, || {
        on_read = read(&on_names);
        off_read = read(&off_names);
        let done = count(&on_read) >= expected_records && count(&off_read) >= expected_records;
        async move { done.then_some(()) }
    })
    .await;
    let per_topic = |m: &BTreeMap<(String, i32), Vec<String>>| {
        let mut t: BTreeMap<&str, usize> = BTreeMap::new();
        for ((topic, _), v) in m {
            *t.entry(topic.as_str()).or_default() += v.len();
        }
        format!("{t:?}")
    };
    eprintln!(
        "streaming {}; protocol 1 {}",
        per_topic(&on_read),
        per_topic(&off_read)
    );
    assert_eq!(count(&on_read), expected_records, "once each, streaming");
    assert_eq!(count(&off_read), expected_records, "once each, protocol 1");
    assert!(
        !on_read.values().flatten().any(|l| l.contains("gone")),
        "the aborted savepoint's rows are not published"
    );
    assert!(
        on_read.values().flatten().any(|l| l.contains("w400")),
        "rows after the DDL carry the added column"
    );
    assert_same(&on_read, &off_read);
    let (streamed, _) = stream_and_spill_txns(&db, &on_names.slot).await;
    assert!(streamed >= 1, "the streaming connector's slot streamed");

    if let Some(mut meta) = meta {
        // PostgreSQL 14, transaction metadata: whole transactions, one
        // BEGIN and one END each (the big one and five small ones).
        let meta_topic = format!("{}.transaction", meta_names.connector);
        let mut markers = Vec::new();
        wait_for(
            "the metadata connector's BEGIN and END records",
            START,
            || {
                markers = consume_committed(&[&meta_topic]);
                let done = markers.len() >= 12;
                async move { done.then_some(()) }
            },
        )
        .await;
        assert_eq!(markers.len(), 12, "a BEGIN and an END per transaction");
        let (meta_streamed, meta_spilled) = stream_and_spill_txns(&db, &meta_names.slot).await;
        assert_eq!(
            meta_streamed, 0,
            "transaction metadata on 14 takes transactions whole"
        );
        assert!(meta_spilled >= 1, "so the server spills the big one");
        meta.stop();
    }
    on.stop();
    off.stop();
}

/// Both reads hold the same records in the same order per partition; a
/// difference is named by topic, partition, position and the two records.
fn assert_same(
    streaming: &BTreeMap<(String, i32), Vec<String>>,
    whole: &BTreeMap<(String, i32), Vec<String>>,
) {
    let keys: Vec<_> = streaming.keys().collect();
    assert_eq!(
        keys,
        whole.keys().collect::<Vec<_>>(),
        "the same partitions"
    );
    for (key, lines) in streaming {
        let other = &whole[key];
        if let Some(i) = (0..lines.len().max(other.len())).find(|&i| lines.get(i) != other.get(i)) {
            panic!(
                "{key:?} differs at record {i} of {}/{}:\nstreaming:  {:?}\nprotocol 1: {:?}",
                lines.len(),
                other.len(),
                lines.get(i),
                other.get(i)
            );
        }
    }
}

/// A spill directory walrelay cannot write: `check` fails naming the key
/// and the fix, `run` stops with them (definite) before streaming; with
/// streaming off, the same file checks clean on that line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_spill_dir_is_named_by_check_and_run() {
    require_kafka();
    let db = TestDb::new("spilldir").await;
    db.create_outbox("outbox").await;
    let names = Names::new("spilldir");
    let config = relay_config(&db, &names, "", "").replace(
        "[kafka]",
        "stream_spill_dir = \"/nonexistent/walrelay-spill\"\n\n[kafka]",
    );
    let path = write_config(&config);
    let (code, report) = check(&path);
    assert_eq!(code, Some(1), "{report}");
    let failed = failures(&report);
    assert!(
        failed
            .iter()
            .any(|f| f.starts_with("postgres.stream_spill_dir")
                && f.contains("/nonexistent/walrelay-spill")),
        "{report}"
    );
    assert!(
        report.contains("fix: point postgres.stream_spill_dir at a writable directory"),
        "{report}"
    );
    run_refuses(&path, "postgres.stream_spill_dir");

    let off = write_config(&config.replace(
        "stream_spill_dir",
        "stream_in_progress = false\nstream_spill_dir",
    ));
    let (_, report) = check(&off);
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("ok    large transactions") && l.contains("protocol 1")),
        "{report}"
    );
}
