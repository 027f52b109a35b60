//! Snapshot, then stream, against the real services: existing outbox rows
//! are published before the changes that follow them, nothing is lost at
//! the handover or after a crash mid-snapshot, and each `[snapshot] mode`
//! does what it says.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use support::*;

const CATCH_UP: Duration = Duration::from_secs(240);

/// An outbox with a `seq` column: the order rows were written in (by one
/// writer), which the snapshot is told to follow — unique, so that an
/// interrupted snapshot resumes each reader's part from where Kafka held
/// it.
async fn create_outbox(db: &TestDb) {
    db.create_outbox("outbox").await;
    db.client
        .batch_execute("ALTER TABLE outbox ADD COLUMN seq bigserial UNIQUE")
        .await
        .expect("seq column");
}

/// `n` rows over `aggregates` aggregates, written in one statement (one
/// writer, so `seq` order is commit order). Payload `{"pre": seq}`.
async fn prefill(db: &TestDb, n: usize, aggregates: usize) {
    db.client
        .batch_execute(&format!(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
             SELECT gen_random_uuid(), CASE WHEN g % 3 = 0 THEN 'invoice' ELSE 'order' END,
                    'agg-' || (g % {aggregates}), 'Created', jsonb_build_object('pre', g)
             FROM generate_series(1, {n}) g"
        ))
        .await
        .expect("prefill");
}

fn config(db: &TestDb, names: &Names, snapshot: &str) -> String {
    relay_config(
        db,
        names,
        "snapshot_order_by = [\"seq\"]",
        &format!("[snapshot]\n{snapshot}\n"),
    )
}

fn topics(names: &Names) -> [String; 2] {
    [names.topic("order"), names.topic("invoice")]
}

fn consumed(names: &Names) -> Vec<Consumed> {
    let t = topics(names);
    consume_to_end(&[t[0].as_str(), t[1].as_str()])
}

fn is_snapshot(r: &Consumed) -> bool {
    r.header_str("walrelay.snapshot").as_deref() == Some("true")
}

/// Waits until every row of the outbox is in Kafka; returns what was read.
async fn all_arrived(db: &TestDb, names: &Names) -> Vec<Consumed> {
    let rows = outbox_rows(db).await;
    wait_for("every outbox row in Kafka", CATCH_UP, || {
        let names = names.clone();
        let rows = &rows;
        async move {
            let got = consumed(&names);
            let ids: HashSet<String> = got.iter().filter_map(|r| r.header_str("id")).collect();
            rows.keys().all(|id| ids.contains(id)).then_some(got)
        }
    })
    .await
}

/// `n` outbox rows inserted (payload `{"gone": n}`) and deleted again in a
/// transaction of their own: what a restarted snapshot that took a new slot
/// would lose. Their ids.
async fn inserted_and_deleted(db: &TestDb, n: usize) -> Vec<String> {
    let ids = db
        .client
        .query(
            &format!(
                "WITH ins AS (
                     INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
                     SELECT gen_random_uuid(), 'order', 'agg-' || (g % 5), 'Created',
                            jsonb_build_object('gone', g)
                     FROM generate_series(1, {n}) g RETURNING id)
                 SELECT id::text FROM ins"
            ),
            &[],
        )
        .await
        .expect("rows to delete")
        .iter()
        .map(|r| r.get(0))
        .collect();
    db.client
        .batch_execute("DELETE FROM outbox WHERE payload ? 'gone'")
        .await
        .expect("delete them again");
    ids
}

/// Every record in Kafka once each of `ids` (rows inserted and deleted
/// again while walrelay was down) arrived as a streamed record. Waited
/// for, not checked once: the rows still in the table can all be in Kafka
/// (from the snapshot) before the stream reaches these. A lost one times
/// out, naming how many never came.
async fn wait_streamed(names: &Names, ids: &[String]) -> Vec<Consumed> {
    let deadline = Instant::now() + CATCH_UP;
    loop {
        let got = consumed(names);
        let streamed: HashSet<String> = got
            .iter()
            .filter(|r| !is_snapshot(r))
            .filter_map(|r| r.header_str("id"))
            .collect();
        let left = ids.iter().filter(|id| !streamed.contains(*id)).count();
        if left == 0 {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{left} of {} rows inserted and deleted while walrelay was down never arrived \
             (waited {CATCH_UP:?})",
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The handover guarantees, per aggregate in partition order: every
/// snapshot record comes before every streamed one; within one snapshot
/// (one consistent point) records follow `seq`; streamed ones follow commit
/// order. Every row arrived; a row's copies agree on topic, key and value.
async fn verify_handover(db: &TestDb, names: &Names, got: &[Consumed]) -> (usize, usize) {
    let rows = outbox_rows(db).await;
    let mut seqs: HashMap<String, i64> = HashMap::new();
    for r in db
        .client
        .query("SELECT id::text, seq FROM outbox", &[])
        .await
        .unwrap()
    {
        seqs.insert(r.get(0), r.get(1));
    }
    let mut seen: HashMap<String, &Consumed> = HashMap::new();
    let (mut snapshot, mut streamed) = (0, 0);
    for rec in got {
        let id = rec.header_str("id").expect("id header");
        let row = rows.get(&id).unwrap_or_else(|| panic!("{id} is not a row"));
        assert_eq!(rec.topic, names.topic(&row.aggregate_type), "topic of {id}");
        assert_eq!(
            rec.key.as_deref(),
            Some(row.aggregate_id.as_bytes()),
            "key of {id}"
        );
        assert_eq!(
            rec.value.as_deref(),
            Some(row.payload.as_bytes()),
            "value of {id}"
        );
        if is_snapshot(rec) {
            snapshot += 1;
        } else {
            streamed += 1;
        }
        seen.entry(id).or_insert(rec);
    }
    let missing: Vec<_> = rows.keys().filter(|id| !seen.contains_key(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} rows never arrived: {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );

    let mut by_agg: HashMap<(String, Vec<u8>), Vec<&Consumed>> = HashMap::new();
    for rec in got {
        by_agg
            .entry((rec.topic.clone(), rec.key.clone().unwrap_or_default()))
            .or_default()
            .push(rec);
    }
    for ((topic, key), mut recs) in by_agg {
        let agg = String::from_utf8_lossy(&key).into_owned();
        let partitions: HashSet<i32> = recs.iter().map(|r| r.partition).collect();
        assert_eq!(
            partitions.len(),
            1,
            "{topic} {agg} spread over {partitions:?}"
        );
        recs.sort_by_key(|r| r.offset);
        let first_streamed = recs.iter().position(|r| !is_snapshot(r));
        if let Some(i) = first_streamed {
            assert!(
                recs[i..].iter().all(|r| !is_snapshot(r)),
                "{topic} {agg}: a snapshot record after a streamed one"
            );
        }
        // Within each snapshot (consistent point): seq order, each row's
        // first copy (a resumed snapshot re-reads at the same point).
        let mut per_point: HashMap<String, Vec<i64>> = HashMap::new();
        let mut first = HashSet::new();
        for r in recs.iter().filter(|r| is_snapshot(r)) {
            let id = r.header_str("id").unwrap();
            let point = r.header_str("walrelay.lsn").unwrap_or_default();
            if first.insert((point.clone(), id.clone())) {
                per_point.entry(point).or_default().push(seqs[&id]);
            }
        }
        for (point, order) in per_point {
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(
                order, sorted,
                "{topic} {agg}: snapshot at {point} out of seq order"
            );
        }
        // Streamed: commit order (lsn, then writer sequence).
        let order: Vec<(u64, i64)> = recs
            .iter()
            .filter(|r| !is_snapshot(r))
            .map(|r| {
                let v: serde_json::Value =
                    serde_json::from_slice(r.value.as_deref().unwrap_or_default()).unwrap();
                (
                    parse_lsn(&r.header_str("walrelay.lsn").unwrap_or_default()),
                    v["s"].as_i64().unwrap_or(-1),
                )
            })
            .collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(
            order, sorted,
            "{topic} {agg}: streamed records out of commit order"
        );
    }
    (snapshot, streamed)
}

/// 200,000 existing rows read by three readers, then 8 writers inserting
/// while the snapshot runs: every row arrives, none is missing at the
/// handover, per aggregate the snapshot's records come before the streamed
/// ones and follow `snapshot_order_by`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_rows_are_published_before_the_changes_that_follow() {
    require_kafka();
    let db = TestDb::new("snap_handover").await;
    create_outbox(&db).await;
    prefill(&db, 200_000, 500).await;
    let names = Names::new("snap_handover");
    // Three readers split the table by aggregate: per-aggregate order must
    // hold across them.
    let mut relay = RelayProcess::start(&config(&db, &names, "parallelism = 3"), &[]);
    relay
        .wait_log("created replication slot with an exported snapshot", START)
        .await;
    // Writers start while the snapshot is read.
    write_outbox_load(&db.name, 8, 4_000, 500, Duration::from_millis(5)).await;
    let got = all_arrived(&db, &names).await;
    relay.wait_log("snapshot completed", START).await;
    let (snapshot, streamed) = verify_handover(&db, &names, &got).await;
    assert_eq!(
        snapshot, 200_000,
        "each existing row once from the snapshot"
    );
    assert!(streamed >= 4_000, "{streamed} streamed");
    relay.stop();
    assert!(
        relay.log().contains("snapshot progress") || relay.log().contains("snapshot: table read")
    );
}

/// The part of `relay`'s log written from byte `from` on (the log file is
/// appended to by every process started on one config).
fn log_since(relay: &RelayProcess, from: usize) -> String {
    relay.log().get(from..).unwrap_or_default().to_owned()
}

/// Waits until the log from byte `from` on contains `needle`.
async fn wait_log_since(relay: &mut RelayProcess, from: usize, needle: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        if log_since(relay, from).contains(needle) {
            return;
        }
        assert!(
            relay.is_running(),
            "walrelay exited before logging {needle:?}; log:\n{}",
            log_since(relay, from)
        );
        assert!(
            Instant::now() < deadline,
            "walrelay did not log {needle:?} within {timeout:?}; log:\n{}",
            log_since(relay, from)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Inserts `n` rows with a 64-byte pad in one statement (no `seq` needed).
async fn insert_rows(db: &TestDb, n: usize) {
    db.client
        .batch_execute(&format!(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
             SELECT gen_random_uuid(), CASE WHEN g % 3 = 0 THEN 'invoice' ELSE 'order' END,
                    'agg-' || (g % 97), 'Created',
                    jsonb_build_object('later', g, 'pad', repeat('x', 64))
             FROM generate_series(1, {n}) g"
        ))
        .await
        .expect("insert rows");
}

/// The ids of every outbox row now.
async fn row_ids(db: &TestDb) -> HashSet<String> {
    outbox_rows(db).await.into_keys().collect()
}

/// Waits until every id of `want` is in Kafka; returns everything read.
async fn wait_for_ids(names: &Names, want: &HashSet<String>) -> Vec<Consumed> {
    wait_for("the rows to arrive in Kafka", CATCH_UP, || {
        let names = names.clone();
        async move {
            let got = consumed(&names);
            let ids: HashSet<String> = got.iter().filter_map(|r| r.header_str("id")).collect();
            want.is_subset(&ids).then_some(got)
        }
    })
    .await
}

/// Inserts a row and deletes it again in a later transaction, over and
/// over until `stop`, on aggregates the prefill uses (the outbox pattern's
/// cleanup); returns the ids, each with the WAL position before its insert.
/// One inserted after a snapshot's consistent point and deleted before the
/// snapshot read it is only in the stream.
async fn insert_then_delete(
    db_name: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<(String, u64)> {
    let client = pg_connect(&db_name).await;
    let mut ids = Vec::new();
    let mut n = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        n += 1;
        let before: String = client
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await
            .expect("wal position")
            .get(0);
        let id: String = client
            .query_one(
                "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
                 VALUES (gen_random_uuid(), 'order', 'agg-' || ($1::int8 % 497), 'Gone',
                         jsonb_build_object('gone', $1::int8))
                 RETURNING id::text",
                &[&(n as i64)],
            )
            .await
            .expect("insert")
            .get(0);
        tokio::time::sleep(Duration::from_millis(15)).await;
        client
            .execute("DELETE FROM outbox WHERE id = $1::text::uuid", &[&id])
            .await
            .expect("delete");
        ids.push((id, parse_lsn(&before)));
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    ids
}

/// `kill -9` three times during the snapshot, at random points (a random
/// delay after the snapshot became resumable, or after a random number of
/// snapshot records reached Kafka), with writers inserting, and a writer
/// inserting and deleting again, meanwhile and during the last attempt.
/// Each restart finds `running` in the offset store and the slot still at
/// the snapshot's consistent point, says so, and *resumes*: the slot is
/// kept (created once), each reader's part goes on after the last row up
/// to which Kafka held every row of it, keeping only the rows the first
/// attempt's exported snapshot saw — never a row written since, which the
/// stream carries — and streaming goes on from the same point. In the end
/// every row arrived, per aggregate in order, and so did every row
/// inserted and deleted while the connector was down (a restart that
/// dropped the slot and took a new snapshot would lose those); each kill
/// re-sent at most what was in flight (`max_in_flight_records`) and about
/// two batches (`fetch_rows`) per reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_killed_three_times_is_resumed_and_loses_nothing() {
    use rand::{RngExt, SeedableRng};
    const ROWS: usize = 150_000;
    require_kafka();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("kill points: seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let db = TestDb::new("snap_kill").await;
    create_outbox(&db).await;
    prefill(&db, ROWS, 500).await;
    let names = Names::new("snap_kill");
    let topics = topics(&names);
    const IN_FLIGHT: usize = 2_000;
    const BATCH: usize = 1_000;
    const READERS: usize = 2;
    let path = write_config(
        &config(
            &db,
            &names,
            &format!("fetch_rows = {BATCH}\nparallelism = {READERS}"),
        )
        .replace(
            "[kafka]\n",
            &format!("[kafka]\nmax_in_flight_records = {IN_FLIGHT}\n"),
        ),
    );
    let mut relay = RelayProcess::start_with(&path, &[]);
    let name = db.name.clone();
    let writers = tokio::spawn(async move {
        write_outbox_load(&name, 2, 3_000, 500, Duration::from_millis(20)).await;
    });
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gone = tokio::spawn(insert_then_delete(db.name.clone(), stop.clone()));
    let mut from = 0;
    for round in 0..3 {
        // Killed once the offset store can resume it (killed before, the
        // snapshot is taken again: `cannot be resumed`, unit-tested).
        let started = if round == 0 {
            "the snapshot is resumable"
        } else {
            "resuming the initial snapshot"
        };
        wait_log_since(&mut relay, from, started, START).await;
        let before = records_in(&topics);
        if round == 0 {
            // A random delay, cut short once a quarter of the rows are in
            // Kafka so a fast machine still kills mid-snapshot.
            let delay = Duration::from_millis(rng.random_range(500..=5_000));
            eprintln!("round {round}: kill {delay:?} after the snapshot was resumable");
            let until = Instant::now() + delay;
            while Instant::now() < until && records_in(&topics) - before < ROWS as i64 / 4 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        } else {
            // Each attempt goes on where the last one's parts were: three
            // kills must fit in one pass over the rows.
            let n = rng.random_range(1..=(ROWS as i64 / 5));
            eprintln!("round {round}: kill after {n} more records are in Kafka");
            wait_for("snapshot records in Kafka", CATCH_UP, || async {
                (records_in(&topics) - before >= n).then_some(())
            })
            .await;
        }
        relay.kill9();
        let log = log_since(&relay, from);
        assert!(
            !log.contains("snapshot completed"),
            "round {round}: the snapshot completed before the kill; it must be killed mid-snapshot \
             (more rows needed?):\n{log}"
        );
        eprintln!(
            "round {round}: killed with {} new records in Kafka",
            records_in(&topics) - before
        );
        // Down for a moment: rows inserted and deleted now are only in WAL.
        tokio::time::sleep(Duration::from_millis(300)).await;
        from = relay.log().len();
        relay = RelayProcess::start_with(&path, &[]);
    }
    wait_log_since(&mut relay, from, "resuming the initial snapshot", START).await;
    // More writes while the last attempt runs: they must be streamed after it.
    write_outbox_load(&db.name, 2, 1_000, 500, Duration::ZERO).await;
    wait_log_since(&mut relay, from, "snapshot completed", CATCH_UP).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let gone = gone.await.expect("insert-then-delete writer");
    writers.await.expect("writers");
    let log = relay.log();
    assert_eq!(
        log.matches("created replication slot with an exported snapshot")
            .count(),
        1,
        "the slot is created once and kept:\n{log}"
    );
    assert!(
        !log.contains("dropped the replication slot")
            && !log.contains("taken again from the start"),
        "a restart took the snapshot again instead of resuming it:\n{log}"
    );
    let got = all_arrived(&db, &names).await;
    let point = got
        .iter()
        .find(|r| is_snapshot(r))
        .and_then(|r| r.header_str("walrelay.lsn"))
        .map(|l| parse_lsn(&l))
        .expect("a snapshot record");
    // Every row inserted after the consistent point and deleted again
    // while the snapshot was interrupted or resumed: streamed. (One
    // inserted before it and deleted before a snapshot attempt read it is
    // in neither, as with an uninterrupted snapshot whose reader comes to
    // it after the delete.)
    let all_gone = gone.len();
    let gone_ids: HashSet<String> = gone
        .into_iter()
        .filter(|(_, before)| *before > point)
        .map(|(id, _)| id)
        .collect();
    let got = wait_for("the inserted-then-deleted rows in Kafka", CATCH_UP, || {
        let names = names.clone();
        let gone_ids = &gone_ids;
        let mut got = Some(got.clone());
        async move {
            let got = got.take().filter(|g| {
                let ids: HashSet<String> = g.iter().filter_map(|r| r.header_str("id")).collect();
                gone_ids.is_subset(&ids)
            });
            got.or_else(|| {
                let g = consumed(&names);
                let ids: HashSet<String> = g.iter().filter_map(|r| r.header_str("id")).collect();
                gone_ids.is_subset(&ids).then_some(g)
            })
        }
    })
    .await;
    eprintln!(
        "{} of {all_gone} rows inserted and deleted meanwhile were inserted after the \
         consistent point: all in Kafka",
        gone_ids.len()
    );
    assert!(
        gone_ids.len() >= 20,
        "only {} inserted-then-deleted rows",
        gone_ids.len()
    );
    // A resumed read keeps only the rows the first attempt's snapshot saw,
    // at its one consistent point: no row is both a snapshot record and a
    // streamed one (committed after that point).
    let snapshot_records: Vec<&Consumed> = got.iter().filter(|r| is_snapshot(r)).collect();
    let points: HashSet<String> = snapshot_records
        .iter()
        .filter_map(|r| r.header_str("walrelay.lsn"))
        .collect();
    assert_eq!(points.len(), 1, "snapshot records at {points:?}");
    let streamed_ids: HashSet<String> = got
        .iter()
        .filter(|r| !is_snapshot(r))
        .filter_map(|r| r.header_str("id"))
        .collect();
    let both: Vec<String> = snapshot_records
        .iter()
        .filter_map(|r| r.header_str("id"))
        .filter(|id| streamed_ids.contains(id))
        .collect();
    assert!(
        both.is_empty(),
        "{} rows committed after the consistent point came as snapshot records too: {:?}",
        both.len(),
        &both[..both.len().min(5)]
    );
    // The rows that still exist: the handover's guarantees.
    let deleted: HashSet<String> = {
        let rows = outbox_rows(&db).await;
        got.iter()
            .filter_map(|r| r.header_str("id"))
            .filter(|id| !rows.contains_key(id))
            .collect()
    };
    let kept: Vec<Consumed> = got
        .into_iter()
        .filter(|r| r.header_str("id").is_none_or(|id| !deleted.contains(&id)))
        .collect();
    let (snapshot, streamed) = verify_handover(&db, &names, &kept).await;
    let distinct: HashSet<String> = kept
        .iter()
        .filter(|r| is_snapshot(r))
        .filter_map(|r| r.header_str("id"))
        .collect();
    let resent = snapshot - distinct.len();
    eprintln!(
        "{snapshot} snapshot records of {} rows: {resent} re-sent over 3 kills, {streamed} streamed",
        distinct.len()
    );
    assert!(distinct.len() >= ROWS, "{} snapshot rows", distinct.len());
    let bound = 3 * (IN_FLIGHT + 2 * BATCH * READERS);
    assert!(
        resent <= bound,
        "{resent} records re-sent over 3 kills: more than in flight and two batches per reader \
         each time ({bound})"
    );
    assert!(
        streamed >= 1_000,
        "{streamed} streamed: the rows written during the last attempt"
    );
    assert!(relay.stop().success());
}

/// `walrelay status` for `config`: its stdout.
fn status(config: &std::path::Path) -> String {
    let out = std::process::Command::new(walrelay_bin())
        .args(["status", "--config"])
        .arg(config)
        .output()
        .expect("run walrelay status");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two tables, `small` (read first) and `outbox` (150,000 rows, slowed by
/// a small in-flight limit). Once the offset store says `small` is done
/// (`walrelay status` shows it), kill -9: the restart resumes and does not
/// read `small` again — its records are in Kafka once. Killed again while
/// resuming, and `VACUUM FULL outbox` while walrelay is down, while rows
/// are inserted (some deleted again, the outbox pattern's cleanup): the
/// rewritten table's `xmin`s can no longer be
/// trusted, so the restart says why and resumes on the same slot reading
/// the table whole, as it is now. Nothing is lost: every row arrives, the
/// rows inserted and deleted while walrelay was down are streamed (taking
/// the snapshot again on a new slot lost them), and `public.small` is not
/// read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_snapshot_skips_tables_done_and_survives_a_rewrite() {
    const ROWS: usize = 150_000;
    const SMALL: usize = 300;
    const IN_FLIGHT: usize = 200;
    const BATCH: usize = 1_000;
    // Records the second attempt publishes before its kill: reading the
    // table again from its first row would re-send at least these.
    const SECOND: i64 = 10_000;
    require_kafka();
    let db = TestDb::new("snap_resume").await;
    create_outbox(&db).await;
    prefill(&db, ROWS, 500).await;
    db.create_outbox("small").await;
    db.client
        .batch_execute(&format!(
            "INSERT INTO small (id, aggregatetype, aggregateid, type, payload)
             SELECT gen_random_uuid(), 'small', 'agg-' || (g % 7), 'Created',
                    jsonb_build_object('pre', g)
             FROM generate_series(1, {SMALL}) g"
        ))
        .await
        .expect("small rows");
    let names = Names::new("snap_resume");
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[[outbox]]\ntable = \"public.small\"\ntopic = \"{p}.{{aggregatetype}}\"\n\n\
             [[outbox]]\ntable = \"public.outbox\"\ntopic = \"{p}.{{aggregatetype}}\"\n\
             snapshot_order_by = [\"seq\"]\n\n[snapshot]\nfetch_rows = {BATCH}\n",
            p = names.topic_prefix
        ),
    )
    .replace(
        "[kafka]\n",
        &format!("[kafka]\nmax_in_flight_records = {IN_FLIGHT}\n"),
    );
    let path = write_config(&config);
    let small_topic = names.topic("small");
    let small_records = || consume_to_end(&[small_topic.as_str()]).len();
    let mut relay = RelayProcess::start_with(&path, &[]);
    wait_for(
        "the offset store to hold public.small done",
        CATCH_UP,
        || {
            relay.is_running().then_some(()).expect("walrelay exited");
            let said = status(&path);
            async move { said.contains("tables done: public.small;").then_some(()) }
        },
    )
    .await;
    assert!(
        !relay.log().contains("snapshot completed"),
        "the snapshot completed before the kill; the test proves nothing"
    );
    relay.kill9();
    assert_eq!(small_records(), SMALL, "public.small in Kafka once");
    let from = relay.log().len();
    relay = RelayProcess::start_with(&path, &[]);
    wait_log_since(&mut relay, from, "resuming the initial snapshot", START).await;
    assert!(
        log_since(&relay, from).contains(
            "snapshot: table done before the interruption, not read again table=public.small"
        ),
        "{}",
        log_since(&relay, from)
    );
    let before = records_in(&topics(&names));
    wait_for("resumed snapshot records in Kafka", CATCH_UP, || async {
        (records_in(&topics(&names)) - before >= SECOND).then_some(())
    })
    .await;
    assert!(
        !log_since(&relay, from).contains("snapshot completed"),
        "the resumed snapshot completed before the second kill"
    );
    relay.kill9();
    assert_eq!(small_records(), SMALL, "public.small not read again");
    // While walrelay is down: rows inserted, some deleted again in their
    // own transaction, and a rewrite (the stored shapes no longer match).
    let gone = inserted_and_deleted(&db, 40).await;
    db.client
        .batch_execute(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
             SELECT gen_random_uuid(), 'invoice', 'agg-' || (g % 5), 'Created',
                    jsonb_build_object('kept', g)
             FROM generate_series(1, 40) g;",
        )
        .await
        .expect("writes while walrelay is down");
    db.client
        .batch_execute("VACUUM FULL outbox")
        .await
        .expect("vacuum full");
    let from = relay.log().len();
    relay = RelayProcess::start_with(&path, &[]);
    wait_log_since(&mut relay, from, "snapshot completed", CATCH_UP).await;
    let log = log_since(&relay, from);
    assert!(
        log.contains("resuming the initial snapshot")
            && log.contains("reads the tables not done unfiltered and as they are now")
            && log.contains("DDL changed the captured tables")
            && !log.contains("dropped the replication slot"),
        "the restart after the rewrite does not say it resumes on the same slot:\n{log}"
    );
    all_arrived(&db, &names).await;
    let got = wait_streamed(&names, &gone).await;
    let kept: Vec<Consumed> = got
        .into_iter()
        .filter(|r| r.header_str("id").is_none_or(|id| !gone.contains(&id)))
        .collect();
    let (snapshot, _) = verify_handover(&db, &names, &kept).await;
    eprintln!(
        "{snapshot} snapshot records of public.outbox over three attempts; {} rows inserted and \
         deleted while down, all streamed",
        gone.len()
    );
    // The rewrite left the columns as they were, so the unfiltered read
    // still went on from the stored key: each kill re-sent at most what was
    // in flight and about two batches, plus the 40 rows kept since (read,
    // and streamed). Reading the table again whole re-sends >= SECOND.
    let bound = ROWS + 40 + 2 * (IN_FLIGHT + 2 * BATCH);
    assert!(
        snapshot <= bound,
        "{snapshot} snapshot records of {ROWS} rows (bound {bound}): the resumed read after the \
         rewrite did not go on from the stored key"
    );
    assert_eq!(small_records(), SMALL, "public.small not read again");
    assert!(relay.stop().success());
}

/// A table read by a `snapshot_order_by` that is NOT NULL but not unique
/// (`bucket`: 25 rows per value) resumes each part *at* the last value
/// Kafka held (its ties read again), not from the first row. Killed once
/// after 20,000 snapshot records, with rows inserted and deleted while
/// down: every row arrives, per aggregate in order, the deleted ones
/// streamed, and the restart re-sent at most what was in flight, about two
/// batches and one value's ties.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_read_by_a_non_unique_key_resumes_at_its_last_value() {
    const ROWS: usize = 60_000;
    const TIES: usize = 25;
    const IN_FLIGHT: usize = 200;
    const BATCH: usize = 1_000;
    const FIRST: i64 = 20_000;
    require_kafka();
    let db = TestDb::new("snap_ties").await;
    create_outbox(&db).await;
    db.client
        .batch_execute(&format!(
            "ALTER TABLE outbox ADD COLUMN bucket int NOT NULL DEFAULT 0;
             INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, bucket)
             SELECT gen_random_uuid(), CASE WHEN g % 3 = 0 THEN 'invoice' ELSE 'order' END,
                    'agg-' || (g % 500), 'Created', jsonb_build_object('pre', g), g / {TIES}
             FROM generate_series(1, {ROWS}) g"
        ))
        .await
        .expect("rows in buckets");
    let names = Names::new("snap_ties");
    let path = write_config(
        &relay_config(
            &db,
            &names,
            "snapshot_order_by = [\"bucket\"]",
            &format!("[snapshot]\nfetch_rows = {BATCH}\n"),
        )
        .replace(
            "[kafka]\n",
            &format!("[kafka]\nmax_in_flight_records = {IN_FLIGHT}\n"),
        ),
    );
    let mut relay = RelayProcess::start_with(&path, &[]);
    wait_for("snapshot records in Kafka", CATCH_UP, || {
        relay.is_running().then_some(()).expect("walrelay exited");
        let names = names.clone();
        async move { (records_in(&topics(&names)) >= FIRST).then_some(()) }
    })
    .await;
    assert!(
        !relay.log().contains("snapshot completed"),
        "the snapshot completed before the kill; the test proves nothing"
    );
    relay.kill9();
    let gone = inserted_and_deleted(&db, 20).await;
    let from = relay.log().len();
    relay = RelayProcess::start_with(&path, &[]);
    wait_log_since(&mut relay, from, "snapshot completed", CATCH_UP).await;
    assert!(
        log_since(&relay, from).contains("resuming the initial snapshot"),
        "{}",
        log_since(&relay, from)
    );
    all_arrived(&db, &names).await;
    let got = wait_streamed(&names, &gone).await;
    let kept: Vec<Consumed> = got
        .into_iter()
        .filter(|r| r.header_str("id").is_none_or(|id| !gone.contains(&id)))
        .collect();
    let (snapshot, _) = verify_handover(&db, &names, &kept).await;
    let bound = ROWS + IN_FLIGHT + 2 * BATCH + TIES;
    eprintln!("{snapshot} snapshot records of {ROWS} rows over two attempts (bound {bound})");
    assert!(
        snapshot <= bound,
        "{snapshot} snapshot records of {ROWS} rows (bound {bound}): the resumed read did not go \
         on at the last key value"
    );
    assert!(relay.stop().success());
}

/// A config change between a kill and the restart: the interrupted
/// snapshot read by `seq` stored each part's last `seq`; the restart reads
/// by `bucket` (same arity, another column). A stored key is used only
/// under the columns it was stored under, so the table is read again whole
/// — applied to `bucket`, the stored `seq` values (all far above any
/// bucket) would have skipped every row not yet published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_order_changed_while_down_reads_the_table_whole() {
    const ROWS: usize = 100_000;
    require_kafka();
    let db = TestDb::new("snap_reorder").await;
    create_outbox(&db).await;
    db.client
        .batch_execute(&format!(
            "ALTER TABLE outbox ADD COLUMN bucket int NOT NULL DEFAULT 0;
             INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, bucket)
             SELECT gen_random_uuid(), CASE WHEN g % 3 = 0 THEN 'invoice' ELSE 'order' END,
                    'agg-' || (g % 500), 'Created', jsonb_build_object('pre', g), g / 25
             FROM generate_series(1, {ROWS}) g"
        ))
        .await
        .expect("rows");
    let names = Names::new("snap_reorder");
    let config = |order: &str| {
        write_config(
            &relay_config(
                &db,
                &names,
                &format!("snapshot_order_by = [\"{order}\"]"),
                "[snapshot]\nfetch_rows = 1000\n",
            )
            .replace("[kafka]\n", "[kafka]\nmax_in_flight_records = 200\n"),
        )
    };
    let mut relay = RelayProcess::start_with(&config("seq"), &[]);
    wait_for("snapshot records in Kafka", CATCH_UP, || {
        relay.is_running().then_some(()).expect("walrelay exited");
        let names = names.clone();
        async move { (records_in(&topics(&names)) >= 5_000).then_some(()) }
    })
    .await;
    assert!(
        !relay.log().contains("snapshot completed"),
        "the snapshot completed before the kill; the test proves nothing"
    );
    relay.kill9();
    // Another config file: the restarted process logs to a new file.
    relay = RelayProcess::start_with(&config("bucket"), &[]);
    relay.wait_log("snapshot completed", CATCH_UP).await;
    assert!(
        relay.log().contains("resuming the initial snapshot"),
        "{}",
        relay.log()
    );
    // Every row, each from the snapshot (nothing was written since).
    let got = all_arrived(&db, &names).await;
    let ids: HashSet<String> = got.iter().filter_map(|r| r.header_str("id")).collect();
    assert_eq!(ids.len(), ROWS);
    assert!(relay.stop().success());
}

/// `[[table]]` snapshot events are named `<consistent point>:snapshot:<n>`:
/// a resumed attempt reads at the same point, but other rows at the same
/// numbers (a table done before the kill is skipped, two readers interleave
/// differently), so it numbers its rows apart. Three tables read by two
/// readers, killed once the offset store holds the first done (a
/// `[[table]]`'s last row waits for the next table, which decides its
/// snapshot marker), resumed without it: every event id names one row, and
/// every row of the three tables arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_table_snapshot_names_each_row_by_its_own_event_id() {
    const ROWS: i64 = 120_000;
    require_kafka();
    let db = TestDb::new("snap_resume_t").await;
    db.client
        .batch_execute(&format!(
            "CREATE TABLE first_t (id int PRIMARY KEY, v text);
             ALTER TABLE first_t OWNER TO walrelay;
             INSERT INTO first_t SELECT g, 'f' || g FROM generate_series(1, 500) g;
             CREATE TABLE second_t (id int PRIMARY KEY, v text);
             ALTER TABLE second_t OWNER TO walrelay;
             INSERT INTO second_t SELECT g, 's' || g FROM generate_series(1, 500) g;
             CREATE TABLE items (id int PRIMARY KEY, v text);
             ALTER TABLE items OWNER TO walrelay;
             INSERT INTO items SELECT g, 'i' || g FROM generate_series(1, {ROWS}) g;"
        ))
        .await
        .expect("tables");
    let names = Names::new("snap_resume_t");
    let prefix = format!("{}_cdc", names.connector);
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\n\n\
             [[table]]\nname = \"public.first_t\"\n\n[[table]]\nname = \"public.second_t\"\n\n\
             [[table]]\nname = \"public.items\"\n\n\
             [snapshot]\nparallelism = 2\n"
        ),
    )
    .replace("[kafka]\n", "[kafka]\nmax_in_flight_records = 200\n");
    let path = write_config(&config);
    let topics = [
        format!("{prefix}.public.first_t"),
        format!("{prefix}.public.second_t"),
        format!("{prefix}.public.items"),
    ];
    let mut relay = RelayProcess::start_with(&path, &[]);
    wait_for(
        "the offset store to hold public.first_t done",
        CATCH_UP,
        || {
            relay.is_running().then_some(()).expect("walrelay exited");
            let said = status(&path);
            async move { said.contains("tables done: public.first_t;").then_some(()) }
        },
    )
    .await;
    assert!(
        !relay.log().contains("snapshot completed"),
        "the snapshot completed before the kill; the test proves nothing"
    );
    relay.kill9();
    let from = relay.log().len();
    relay = RelayProcess::start_with(&path, &[]);
    wait_log_since(&mut relay, from, "resuming the initial snapshot", START).await;
    wait_log_since(&mut relay, from, "snapshot completed", CATCH_UP).await;
    let got = consume_to_end(&[topics[0].as_str(), topics[1].as_str(), topics[2].as_str()]);
    let mut rows_of_id: HashMap<String, HashSet<(String, Vec<u8>)>> = HashMap::new();
    for r in &got {
        let id = r.header_str("walrelay.event_id").expect("an event id");
        rows_of_id
            .entry(id)
            .or_default()
            .insert((r.topic.clone(), r.key.clone().unwrap_or_default()));
    }
    let shared: Vec<_> = rows_of_id
        .iter()
        .filter(|(_, rows)| rows.len() > 1)
        .collect();
    assert!(
        shared.is_empty(),
        "{} event ids name more than one row, e.g. {:?}",
        shared.len(),
        shared.iter().take(3).collect::<Vec<_>>()
    );
    let keys: HashSet<(String, Vec<u8>)> = rows_of_id.into_values().flatten().collect();
    assert_eq!(
        keys.len(),
        1_000 + ROWS as usize,
        "every row of the three tables"
    );
    eprintln!(
        "{} records for {} rows, no event id shared",
        got.len(),
        keys.len()
    );
    assert!(relay.stop().success());
}

/// `no_data`: the rows that exist when the connector starts are not
/// published; rows inserted after it started are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_data_streams_new_rows_and_publishes_no_existing_ones() {
    require_kafka();
    let db = TestDb::new("snap_nodata").await;
    create_outbox(&db).await;
    prefill(&db, 500, 50).await;
    let existing = row_ids(&db).await;
    let names = Names::new("snap_nodata");
    let mut relay = RelayProcess::start(&config(&db, &names, "mode = \"no_data\""), &[]);
    relay.wait_log("streaming", START).await;
    write_outbox_load(&db.name, 2, 200, 50, Duration::ZERO).await;
    let new: HashSet<String> = row_ids(&db).await.difference(&existing).cloned().collect();
    assert_eq!(new.len(), 200);
    let got = wait_for_ids(&names, &new).await;
    let ids: HashSet<String> = got.iter().filter_map(|r| r.header_str("id")).collect();
    assert!(
        ids.is_disjoint(&existing),
        "no_data published {} pre-existing rows",
        ids.intersection(&existing).count()
    );
    assert!(
        !got.iter().any(is_snapshot),
        "a snapshot record under no_data"
    );
    assert_eq!(ids, new, "exactly the new rows");
    let log = relay.log();
    assert!(!log.contains("taking the initial snapshot"), "{log}");
    assert!(relay.stop().success());
}

/// `initial_only`: exits 0 once every existing row is in Kafka, leaving the
/// slot at the snapshot's consistent point; a second `initial_only` run has
/// nothing to do and exits 0 publishing nothing; then `run` without it
/// streams from the consistent point, so the rows written while no
/// walrelay ran arrive too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_only_snapshots_stops_and_a_later_run_streams_from_its_point() {
    require_kafka();
    let db = TestDb::new("snap_only").await;
    create_outbox(&db).await;
    prefill(&db, 5_000, 200).await;
    let existing = row_ids(&db).await;
    let names = Names::new("snap_only");
    let only = write_config(&config(&db, &names, "mode = \"initial_only\""));

    let mut relay = RelayProcess::start_with(&only, &[]);
    let log = relay.expect_exit(0, CATCH_UP);
    assert!(log.contains("snapshot completed"), "{log}");
    let got = consumed(&names);
    let ids: HashSet<String> = got.iter().filter_map(|r| r.header_str("id")).collect();
    assert_eq!(ids, existing, "every existing row, and nothing else");
    assert!(got.iter().all(is_snapshot), "only snapshot records");
    let points: HashSet<String> = got
        .iter()
        .filter_map(|r| r.header_str("walrelay.lsn"))
        .collect();
    assert_eq!(points.len(), 1, "one consistent point: {points:?}");
    let point = parse_lsn(points.iter().next().unwrap());
    assert_eq!(
        db.confirmed_flush(&names.slot).await,
        Some(point),
        "the slot stays at the snapshot's consistent point"
    );

    // Written while no walrelay runs.
    insert_rows(&db, 300).await;
    let from = relay.log().len();
    let mut relay = RelayProcess::start_with(&only, &[]);
    relay.expect_exit(0, START);
    let log = log_since(&relay, from);
    assert!(
        log.contains("initial_only has nothing to do; stopping"),
        "{log}"
    );
    assert!(!log.contains("taking the initial snapshot"), "{log}");
    assert_eq!(
        consumed(&names).len(),
        got.len(),
        "the second initial_only run published nothing"
    );
    assert_eq!(db.confirmed_flush(&names.slot).await, Some(point));

    let stream = write_config(&config(&db, &names, ""));
    let mut relay = RelayProcess::start_with(&stream, &[]);
    relay.wait_log("streaming", START).await;
    write_outbox_load(&db.name, 2, 300, 200, Duration::ZERO).await;
    let got = all_arrived(&db, &names).await;
    let (snapshot, streamed) = verify_handover(&db, &names, &got).await;
    assert_eq!(snapshot, 5_000, "the snapshot was not taken again");
    assert_eq!(streamed, 600, "the rows written between runs and after");
    assert!(!relay.log().contains("taking the initial snapshot"));
    assert!(relay.stop().success());
}

/// The slot was dropped while an offset is stored: with the mode unset,
/// `run` refuses (as before the snapshot existed); `when_needed` snapshots
/// again instead, and the new snapshot holds every row, also those
/// written while the slot was gone; streaming follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_needed_snapshots_again_after_the_slot_was_dropped() {
    require_kafka();
    let db = TestDb::new("snap_needed").await;
    create_outbox(&db).await;
    prefill(&db, 2_000, 100).await;
    let names = Names::new("snap_needed");
    let unset = write_config(&config(&db, &names, ""));
    let mut relay = RelayProcess::start_with(&unset, &[]);
    relay.wait_log("snapshot completed", CATCH_UP).await;
    write_outbox_load(&db.name, 2, 200, 100, Duration::ZERO).await;
    all_arrived(&db, &names).await;
    assert!(relay.stop().success());
    db.client
        .batch_execute(&format!(
            "SELECT pg_drop_replication_slot('{}')",
            names.slot
        ))
        .await
        .unwrap();
    // Committed while the slot is gone: no stream will ever carry these.
    insert_rows(&db, 300).await;

    let from = relay.log().len();
    let mut relay = RelayProcess::start_with(&unset, &[]);
    relay.expect_exit(1, START);
    let log = log_since(&relay, from);
    assert!(
        log.contains("does not exist, but the offset store says"),
        "mode unset must refuse a missing slot with an offset stored:\n{log}"
    );
    assert!(db.confirmed_flush(&names.slot).await.is_none());

    let before: HashSet<(String, i32, i64)> = consumed(&names)
        .into_iter()
        .map(|r| (r.topic, r.partition, r.offset))
        .collect();
    let needed = write_config(&config(&db, &names, "mode = \"when_needed\""));
    let mut relay = RelayProcess::start_with(&needed, &[]);
    relay.wait_log("snapshot completed", CATCH_UP).await;
    let log = relay.log();
    assert!(log.contains("when_needed snapshots again"), "{log}");
    // Not silent: the range no stream carries is named at warn level, and
    // kept in the offset store as an accepted gap that `status` shows.
    let warned = log
        .lines()
        .find(|l| l.contains("were never streamed"))
        .unwrap_or_else(|| panic!("no warning about the gap:\n{log}"));
    assert!(warned.contains("WARN"), "{warned}");
    let status = std::process::Command::new(walrelay_bin())
        .args(["status", "--config"])
        .arg(&needed)
        .output()
        .expect("run walrelay status");
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(status.contains("accepted gap"), "{status}");
    write_outbox_load(&db.name, 2, 200, 100, Duration::ZERO).await;
    all_arrived(&db, &names).await;
    // This session alone: a new snapshot of every row, then the stream.
    let new: Vec<Consumed> = consumed(&names)
        .into_iter()
        .filter(|r| !before.contains(&(r.topic.clone(), r.partition, r.offset)))
        .collect();
    let (snapshot, streamed) = verify_handover(&db, &names, &new).await;
    assert_eq!(snapshot, 2_500, "every row as of the new snapshot");
    assert_eq!(streamed, 200);
    assert!(relay.stop().success());
}

/// `mode = "initial"` set explicitly with a slot that exists and no stored
/// offset: refused by `check` and `run` alike (a snapshot cannot be aligned
/// with a slot walrelay did not create with it), naming the fixes. With the
/// mode unset the same setup streams from the slot without a snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_initial_with_an_existing_slot_is_refused_by_check_and_run() {
    require_kafka();
    let db = TestDb::new("snap_preslot").await;
    create_outbox(&db).await;
    prefill(&db, 100, 10).await;
    let existing = row_ids(&db).await;
    let names = Names::new("snap_preslot");
    db.client
        .batch_execute(&format!(
            "SELECT pg_create_logical_replication_slot('{}', 'pgoutput')",
            names.slot
        ))
        .await
        .unwrap();
    let slot_at = db.confirmed_flush(&names.slot).await;
    let initial = write_config(&config(&db, &names, "mode = \"initial\""));
    let needle = "asks for a snapshot, but replication slot";

    let error = run_refuses(&initial, needle);
    assert!(
        error.contains("pg_drop_replication_slot") && error.contains("no_data"),
        "the error names both fixes: {error}"
    );
    assert_eq!(
        db.confirmed_flush(&names.slot).await,
        slot_at,
        "the slot is left alone"
    );

    let (code, report) = check(&initial);
    let problems = failures(&report);
    assert!(
        code == Some(1) && problems.iter().any(|p| p.contains(needle)),
        "check does not refuse what run refuses ({needle:?}):\n{report}"
    );
    assert!(
        problems.iter().any(|p| error.contains(p.as_str())),
        "run's error is none of check's failures\nrun: {error}\ncheck:\n{report}"
    );

    // Unset: stream-only from the existing slot.
    let unset = write_config(&config(&db, &names, ""));
    let mut relay = RelayProcess::start_with(&unset, &[]);
    relay.wait_log("streaming", START).await;
    write_outbox_load(&db.name, 1, 50, 10, Duration::ZERO).await;
    let new: HashSet<String> = row_ids(&db).await.difference(&existing).cloned().collect();
    let got = wait_for_ids(&names, &new).await;
    assert!(!got.iter().any(is_snapshot), "no snapshot with mode unset");
    assert!(
        got.iter()
            .filter_map(|r| r.header_str("id"))
            .all(|id| !existing.contains(&id)),
        "rows from before the slot were published"
    );
    assert!(relay.stop().success());
}

/// Peak resident memory of a process, from /proc (kB); 0 once it is gone.
fn peak_rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Runs an `initial_only` snapshot of `rows` outbox rows whose payload
/// pads to `pad` characters, with `snapshot` settings and `kafka` lines
/// added to `[kafka]`; returns the process's peak RSS in kB (read from
/// /proc until it exits by itself).
async fn snapshot_peak_rss_kb(
    prefix: &str,
    rows: i64,
    pad: usize,
    snapshot: &str,
    kafka: &str,
) -> u64 {
    require_kafka();
    let db = TestDb::new(prefix).await;
    create_outbox(&db).await;
    db.client
        .batch_execute(&format!(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
             SELECT gen_random_uuid(), CASE WHEN g % 3 = 0 THEN 'invoice' ELSE 'order' END,
                    'agg-' || (g % 1000), 'Created',
                    jsonb_build_object('pre', g, 'pad', repeat('x', {pad}))
             FROM generate_series(1, {rows}) g;
             ANALYZE outbox"
        ))
        .await
        .expect("prefill");
    let names = Names::new(prefix);
    let config = config(&db, &names, &format!("mode = \"initial_only\"\n{snapshot}"))
        .replace("linger = \"2ms\"", &format!("linger = \"2ms\"\n{kafka}"));
    let started = Instant::now();
    let mut relay = RelayProcess::start(&config, &[]);
    let pid = relay.child.id();
    let mut peak_kb = 0;
    let deadline = Instant::now() + Duration::from_secs(900);
    let status = loop {
        peak_kb = peak_kb.max(peak_rss_kb(pid));
        if let Some(status) = relay.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the snapshot took over 15 minutes:\n{}",
            relay.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let took = started.elapsed();
    assert_eq!(status.code(), Some(0), "{}", relay.log());
    assert!(relay.log().contains("snapshot completed"));
    let topics = topics(&names);
    assert!(
        records_in(&topics) >= rows,
        "every row in Kafka: {} records",
        records_in(&topics)
    );
    eprintln!(
        "peak RSS {peak_kb} kB for a {rows}-row snapshot ({snapshot:?}, {kafka:?}), {took:?}"
    );
    peak_kb
}

/// docs/configuration.md's bound on a snapshot's memory, in kB, for a
/// `[kafka]` section that sets both in-flight limits: the process's base,
/// the in-flight record bytes, about 1 KiB of bookkeeping per in-flight
/// record (librdkafka's message and its headers, walrelay's token), the
/// readers' shared 4 MiB read-ahead and the batch each reader fills. The
/// base is about 40 MB on an idle machine; the bound states 56. Until
/// issue 37 the bound left out the per-record term and its base was 40 MB:
/// in CI's conditions a snapshot of ~200-byte rows with 8 MiB in flight
/// (~55,000 records when Kafka lags) peaked at 66,700 and 82,984 kB, where
/// the old formula said 57 MB. The measured peak, which varies with the
/// machine and Kafka's pace, is the benchmark's (docs/benchmarks.md,
/// snapshot pass), not a test's.
fn stated_snapshot_bound_kb(in_flight_mib: u64, in_flight_records: u64, readers: u64) -> u64 {
    const BASE_MIB: u64 = 56;
    (BASE_MIB + in_flight_mib + 4 + readers) * 1024 + in_flight_records
}

/// A snapshot of 1,000,000 rows (~200 MB of row text) stays within the
/// stated bound — 88 MiB with the readers' defaults, 8 MiB and 20,000
/// records in flight — whether Kafka keeps up or not: memory does not grow
/// with the table (a process that kept half of the rows would pass it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_row_snapshot_stays_within_the_stated_memory_bound() {
    let peak_kb = snapshot_peak_rss_kb(
        "snap_mem",
        1_000_000,
        64,
        "",
        "max_in_flight_bytes = \"8MiB\"\nmax_in_flight_records = 20000",
    )
    .await;
    let bound = stated_snapshot_bound_kb(8, 20_000, 1);
    assert!(
        peak_kb > 0 && peak_kb < bound,
        "peak RSS {peak_kb} kB above the stated {bound} kB: memory grew with the snapshot"
    );
}

/// Three readers with small batches and ~430-byte rows, Kafka the
/// bottleneck: memory stays within the stated bound, here with 16 MiB and
/// 20,000 records in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_readers_stay_within_the_stated_memory_bound() {
    let peak_kb = snapshot_peak_rss_kb(
        "snap_mem3",
        200_000,
        330,
        "parallelism = 3\nfetch_rows = 500",
        "max_in_flight_bytes = \"16MiB\"\nmax_in_flight_records = 20000",
    )
    .await;
    let bound = stated_snapshot_bound_kb(16, 20_000, 3);
    assert!(
        peak_kb > 0 && peak_kb < bound,
        "peak RSS {peak_kb} kB above the stated {bound} kB"
    );
}

/// Creating the snapshot's slot waits for every transaction that holds an
/// xid to end. It does not wait silently: the log names the blocking
/// transaction by pid, `walrelay_slot_creation_waiting_transactions` counts
/// it, and `initial_only` stopped meanwhile by SIGTERM exits non-zero (its
/// snapshot is not done). Once the transaction commits, the next run takes
/// the snapshot, with that transaction's row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_creation_names_the_transactions_it_waits_for() {
    require_kafka();
    let db = TestDb::new("snap_wait").await;
    create_outbox(&db).await;
    prefill(&db, 100, 10).await;
    let names = Names::new("snap_wait");
    // An application transaction with an xid, left open (by walrelay's
    // role, so that walrelay may see its query).
    let (app, conn) = tokio_postgres::connect(
        &format!(
            "postgres://walrelay:walrelay@127.0.0.1:{}/{}",
            pg_port(),
            db.name
        ),
        tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let pid: i32 = app
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    app.batch_execute(
        "BEGIN; INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
         VALUES (gen_random_uuid(), 'order', 'open', 'Created', '{\"open\": true}')",
    )
    .await
    .unwrap();

    let health = free_local_addr();
    let only = write_config(&relay_config(
        &db,
        &names,
        "snapshot_order_by = [\"seq\"]",
        &format!("[snapshot]\nmode = \"initial_only\"\n[health]\nlisten = \"{health}\"\n"),
    ));
    let mut relay = RelayProcess::start_with(&only, &[]);
    relay
        .wait_log("creating the snapshot's replication slot waits for", START)
        .await;
    let log = relay.log();
    let line = log
        .lines()
        .find(|l| l.contains("waits for"))
        .unwrap()
        .to_owned();
    assert!(line.contains(&format!("pid {pid} ")), "{line}");
    assert!(line.contains("INSERT INTO outbox"), "{line}");
    let metrics = http_get(&health, "/metrics");
    assert!(
        metrics.contains("walrelay_slot_creation_waiting_transactions{connector=")
            && metrics.lines().any(|l| l
                .starts_with("walrelay_slot_creation_waiting_transactions{")
                && l.ends_with(" 1")),
        "{metrics}"
    );
    // Stopped before its snapshot: not a success.
    let status = relay.stop();
    assert_eq!(status.code(), Some(1), "{}", relay.log());
    assert!(
        relay
            .log()
            .contains("initial_only: stopped before the snapshot completed"),
        "{}",
        relay.log()
    );

    // The walsender of the stopped attempt finishes creating its slot once
    // the transaction ends; the next run drops that slot (the offset store
    // says the snapshot never completed) and takes the snapshot.
    app.batch_execute("COMMIT").await.unwrap();
    let mut relay = RelayProcess::start_with(&only, &[]);
    relay.expect_exit(0, CATCH_UP);
    let got = consumed(&names);
    let ids: HashSet<String> = got.iter().filter_map(|r| r.header_str("id")).collect();
    assert_eq!(ids, row_ids(&db).await, "every row, the committed one too");
}

/// PostgreSQL 18's `idle_replication_slot_timeout` is a server setting
/// walrelay cannot turn off for itself, and the snapshot's slot is inactive
/// until the snapshot is in Kafka: a snapshot started while it is set says
/// so, with the fix. (A day: long enough to invalidate nothing here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_warns_about_idle_replication_slot_timeout() {
    require_kafka();
    let major: u32 = pg_major().parse().unwrap_or(18);
    if major < 18 {
        return; // the setting is PostgreSQL 18's
    }
    let db = TestDb::new("snap_idle").await;
    create_outbox(&db).await;
    prefill(&db, 10, 5).await;
    let names = Names::new("snap_idle");
    let setting = SystemSetting::set("idle_replication_slot_timeout", "1d").await;
    let mut relay = RelayProcess::start(&config(&db, &names, "mode = \"initial_only\""), &[]);
    let log = relay.expect_exit(0, CATCH_UP);
    drop(setting);
    let warned = log
        .lines()
        .find(|l| l.contains("idle_replication_slot_timeout = 1d"))
        .unwrap_or_else(|| panic!("no warning:\n{log}"));
    assert!(
        warned.contains("WARN") && warned.contains("Set it to 0"),
        "{warned}"
    );
}
