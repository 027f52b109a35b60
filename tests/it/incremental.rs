//! Incremental snapshots against the real services: tables read in chunks
//! while streaming continues, reconciled with the stream by watermarks,
//! resumable chunk by chunk — asked for with `walrelay snapshot`, or
//! automatically for a table added to the configuration.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

const CATCH_UP: Duration = Duration::from_secs(240);

/// `walrelay snapshot` on `config` for `table`; returns its stdout.
fn request_snapshot(config: &std::path::Path, table: &str, filter: Option<&str>) -> String {
    let mut command = std::process::Command::new(walrelay_bin());
    command
        .args(["snapshot", "--config"])
        .arg(config)
        .args(["--table", table]);
    if let Some(filter) = filter {
        command.args(["--where", filter]);
    }
    let out = command.output().expect("run walrelay snapshot");
    assert!(
        out.status.success(),
        "walrelay snapshot failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn snapshot_header(r: &Consumed) -> Option<String> {
    r.header_str("walrelay.snapshot")
}

/// An outbox with a `seq` column (the writers' commit order per aggregate).
async fn create_outbox(db: &TestDb) {
    db.create_outbox("outbox").await;
    db.client
        .batch_execute("ALTER TABLE outbox ADD COLUMN seq bigserial")
        .await
        .unwrap();
}

async fn prefill(db: &TestDb, table: &str, n: usize) {
    db.client
        .batch_execute(&format!(
            "INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload)
             SELECT gen_random_uuid(), 'order', 'agg-' || (g % 300), 'Created',
                    jsonb_build_object('pre', g, 'pad', repeat('x', 200))
             FROM generate_series(1, {n}) g"
        ))
        .await
        .unwrap();
}

/// What cuts the active instance off in the middle of an incremental
/// snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// `kill -9`, and the same instance started again.
    Kill9,
    /// A standby waits for the lease; the active one is killed (-9) or
    /// stopped (SIGTERM), alternately, and the standby takes over; a new
    /// standby is started after each.
    Takeover,
    /// walrelay's snapshot reader and catalog sessions (not the walsender,
    /// not the lease: losing it drops everything at once) ended by
    /// `pg_terminate_backend`, as a PostgreSQL restart or an administrator
    /// ends them: the same process reconnects and goes on, it does not exit.
    Terminate,
}

/// 30,000 rows that predate the connector (`no_data`: never streamed),
/// read by an incremental snapshot of 500-row chunks that `walrelay
/// snapshot` asks for while 8 writers insert, with walrelay killed (-9)
/// three times mid-snapshot: every existing row arrives from the snapshot,
/// every written row from the stream in commit order per aggregate, and
/// each kill re-sends at most the chunk in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_snapshot_beside_writers_and_kill_9_loses_nothing() {
    incremental_snapshot_through(Cut::Kill9, "inc_kill", false, false).await;
}

/// The same with read-only watermarks: an outbox table's chunks placed by
/// their own snapshots (only inserts count), three kills -9, nothing lost
/// and at most the chunk in flight re-sent per kill. Chunks keep distinct
/// event ids though none has a watermark of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_incremental_snapshot_beside_writers_and_kill_9_loses_nothing() {
    incremental_snapshot_through(Cut::Kill9, "inc_ro_kill", false, true).await;
}

/// The same with a second instance: three takeovers mid-snapshot (kill -9,
/// SIGTERM, kill -9), each by a standby that goes on from the progress the
/// offset store holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_snapshot_through_takeovers_loses_nothing() {
    incremental_snapshot_through(Cut::Takeover, "inc_takeover", false, false).await;
}

/// Walrelay's sessions terminated three times mid-snapshot (a soak run
/// found walrelay exiting when PostgreSQL ended the snapshot reader's
/// session with 57P01, "terminating connection due to administrator
/// command", instead of reconnecting as it does for the stream).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_snapshot_through_terminated_sessions_loses_nothing() {
    incremental_snapshot_through(Cut::Terminate, "inc_term", false, false).await;
}

/// The kill -9 scenario with `delivery = "exactly_once"`: each chunk is
/// committed to Kafka with its progress, so a `read_committed` reader sees
/// no row twice, neither of the snapshot nor of the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_snapshot_with_exactly_once_commits_each_row_once() {
    incremental_snapshot_through(Cut::Kill9, "inc_eos", true, false).await;
}

/// `exactly_once`: `delivery = "exactly_once"`, topics read as a
/// `read_committed` consumer does, and nothing may arrive twice.
/// `read_only`: `[snapshot] watermarks = "read_only"`.
async fn incremental_snapshot_through(cut: Cut, name: &str, exactly_once: bool, read_only: bool) {
    const EXISTING: usize = 30_000;
    const CHUNK: usize = 500;
    const KILLS: usize = 3;
    const ACTIVE: &str = "holding the lease: this instance is the active one";
    const STANDBY: &str = "standby: another instance of this connector holds the lease";
    require_kafka();
    let db = TestDb::new(name).await;
    create_outbox(&db).await;
    prefill(&db, "outbox", EXISTING).await;
    let existing: HashSet<String> = outbox_rows(&db).await.into_keys().collect();
    let names = Names::new(name);
    let mut text = relay_config(
        &db,
        &names,
        "",
        &format!(
            "[snapshot]\nmode = \"no_data\"\nchunk_rows = {CHUNK}\nwatermarks = \"{}\"\n",
            if read_only { "read_only" } else { "messages" }
        ),
    );
    if exactly_once {
        text = text.replace("[kafka]\n", "[kafka]\ndelivery = \"exactly_once\"\n");
    }
    let read = |topics: &[&str]| {
        if exactly_once {
            consume_committed(topics)
        } else {
            consume_to_end(topics)
        }
    };
    let config = write_config(&text);
    let mut relay = RelayProcess::start_with(&config, &[]);
    relay.wait_log("streaming", START).await;
    // Each standby logs to a file of its own.
    let mut standby = match cut {
        Cut::Kill9 | Cut::Terminate => None,
        Cut::Takeover => {
            let mut standby = RelayProcess::start(&text, &[]);
            standby.wait_log(STANDBY, START).await;
            Some(standby)
        }
    };

    let writers = {
        let name = db.name.clone();
        tokio::spawn(async move {
            write_outbox_load(&name, 8, 8_000, 300, Duration::from_millis(5)).await;
        })
    };
    let said = request_snapshot(&config, "public.outbox", None);
    assert!(said.contains("requested incremental snapshot"), "{said}");

    // Cut the active instance off while chunks are being published, three
    // times.
    let topic = names.topic("order");
    for kill in 0..KILLS {
        let before = read(&[topic.as_str()])
            .iter()
            .filter(|r| snapshot_header(r).as_deref() == Some("incremental"))
            .count();
        let log = relay.log_path.clone();
        let progressed = wait_for("more incremental records", CATCH_UP, || {
            let topic = topic.clone();
            let log = log.clone();
            async move {
                let now = read(&[topic.as_str()])
                    .iter()
                    .filter(|r| snapshot_header(r).as_deref() == Some("incremental"))
                    .count();
                if now >= before + 2 * CHUNK {
                    return Some(true);
                }
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                text.contains("incremental snapshot completed")
                    .then_some(false)
            }
        })
        .await;
        assert!(
            progressed,
            "the incremental snapshot ended before cut #{}; the test proves nothing",
            kill + 1
        );
        match standby.as_mut() {
            None if cut == Cut::Terminate => {
                // For 2 s, every 20 ms: most sessions are then ended in
                // the middle of a query (the server's FATAL answers it),
                // not only between queries (the connection just closes).
                let mut ended = 0i64;
                let until = std::time::Instant::now() + Duration::from_secs(2);
                while std::time::Instant::now() < until {
                    let n: i64 = db
                        .client
                        .query_one(
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                             WHERE backend_type = 'client backend' AND application_name = $1",
                            &[&format!("walrelay-{}", names.connector)],
                        )
                        .await
                        .unwrap()
                        .get(0);
                    ended += n;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                eprintln!(
                    "terminated {ended} sessions (#{}) after {before}+ incremental records",
                    kill + 1
                );
                assert!(ended > 0, "walrelay had no session to terminate");
                assert!(relay.is_running(), "walrelay exited:\n{}", relay.log());
            }
            None => {
                eprintln!("kill -9 #{} after {before}+ incremental records", kill + 1);
                relay.kill9();
                relay = RelayProcess::start_with(&config, &[]);
                relay.wait_log("streaming", START).await;
            }
            Some(next) => {
                if kill % 2 == 0 {
                    eprintln!(
                        "takeover #{} (kill -9) after {before}+ incremental records",
                        kill + 1
                    );
                    relay.kill9();
                } else {
                    eprintln!(
                        "takeover #{} (SIGTERM) after {before}+ incremental records",
                        kill + 1
                    );
                    relay.signal("TERM");
                    assert_eq!(
                        relay.wait_exit(Duration::from_secs(60)).map(|s| s.code()),
                        Some(Some(0)),
                        "SIGTERM stops the active instance cleanly:\n{}",
                        relay.log()
                    );
                }
                next.wait_log(ACTIVE, CATCH_UP).await;
                let mut fresh = RelayProcess::start(&text, &[]);
                fresh.wait_log(STANDBY, START).await;
                relay = std::mem::replace(next, fresh);
                relay.wait_log("streaming", START).await;
            }
        }
    }
    writers.await.unwrap();
    relay
        .wait_log("incremental snapshot completed", CATCH_UP)
        .await;

    let rows = outbox_rows(&db).await;
    let invoices = names.topic("invoice");
    let got = wait_for("every row in Kafka", CATCH_UP, || {
        let topics = [topic.clone(), invoices.clone()];
        let rows = &rows;
        async move {
            let got = read(&[topics[0].as_str(), topics[1].as_str()]);
            let ids: HashSet<String> = got.iter().filter_map(|r| r.header_str("id")).collect();
            rows.keys().all(|id| ids.contains(id)).then_some(got)
        }
    })
    .await;
    let mut incremental: HashMap<String, usize> = HashMap::new();
    let mut streamed: HashMap<String, Vec<&Consumed>> = HashMap::new();
    for r in &got {
        let id = r.header_str("id").unwrap();
        let row = rows.get(&id).unwrap_or_else(|| panic!("{id} is not a row"));
        assert_eq!(r.key.as_deref(), Some(row.aggregate_id.as_bytes()));
        assert_eq!(r.value.as_deref(), Some(row.payload.as_bytes()));
        match snapshot_header(r).as_deref() {
            Some("incremental") => *incremental.entry(id).or_default() += 1,
            None => streamed
                .entry(row.aggregate_id.clone())
                .or_default()
                .push(r),
            other => panic!("unexpected walrelay.snapshot {other:?}"),
        }
    }
    let missing = existing
        .iter()
        .filter(|id| !incremental.contains_key(*id))
        .count();
    assert_eq!(missing, 0, "existing rows the snapshot never published");
    // Streamed records keep commit order per aggregate (first copies: a
    // restart re-sends the unconfirmed tail after them).
    for (agg, mut recs) in streamed {
        recs.sort_by_key(|r| r.offset);
        let mut seen = HashSet::new();
        recs.retain(|r| seen.insert(r.header_str("id")));
        let lsns: Vec<u64> = recs
            .iter()
            .map(|r| parse_lsn(&r.header_str("walrelay.lsn").unwrap()))
            .collect();
        assert!(
            lsns.is_sorted(),
            "aggregate {agg}: streamed out of commit order"
        );
    }
    let resent: usize = incremental.values().map(|n| n - 1).sum();
    eprintln!(
        "incremental snapshot: {} rows, {resent} re-sent over {KILLS} kills (chunk {CHUNK})",
        incremental.len()
    );
    assert!(
        resent <= KILLS * CHUNK,
        "{resent} rows re-sent by {KILLS} kills: more than one chunk per kill"
    );
    if exactly_once {
        // Each origin once: the snapshot's copy of a row and its streamed
        // insert are two events by design (the snapshot re-reads rows that
        // exist when their chunk is read, as Debezium's does).
        assert_eq!(resent, 0, "exactly_once: snapshot rows committed twice");
        let mut seen = HashSet::new();
        let streamed_twice = got
            .iter()
            .filter(|r| snapshot_header(r).is_none())
            .filter(|r| !seen.insert(r.header_str("id")))
            .count();
        assert_eq!(
            streamed_twice, 0,
            "exactly_once: streamed records committed twice"
        );
    }
    let (_, status) = {
        let out = std::process::Command::new(walrelay_bin())
            .args(["status", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    assert!(
        status.contains("incremental") && status.contains("completed"),
        "{status}"
    );
    assert!(relay.is_running(), "walrelay exited:\n{}", relay.log());
    assert!(relay.stop().success());
    if let Some(mut standby) = standby {
        assert!(standby.stop().success());
    }
}

/// A second outbox table added to a running connector's configuration: on
/// the restart with the new configuration, its existing rows are published
/// by an incremental snapshot (no full re-snapshot, nothing re-sent of the
/// first table), and new rows of both stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_added_to_the_configuration_gets_its_existing_rows() {
    require_kafka();
    let db = TestDb::new("inc_added").await;
    create_outbox(&db).await;
    db.create_outbox("outbox_b").await;
    prefill(&db, "outbox", 200).await;
    prefill(&db, "outbox_b", 5).await;
    let names = Names::new("inc_added");
    let first = write_config(&relay_config(&db, &names, "", ""));
    let mut relay = RelayProcess::start_with(&first, &[]);
    relay.wait_log("snapshot completed", CATCH_UP).await;
    relay.wait_log("streaming", START).await;
    assert!(relay.stop().success());
    let topic_a = names.topic("order");
    let a_before = consume_to_end(&[topic_a.as_str()]).len();
    assert_eq!(a_before, 200);

    let topic_b = format!("{}.b.order", names.topic_prefix);
    let second = write_config(&format!(
        "{}\n[[outbox]]\ntable = \"public.outbox_b\"\ntopic = \"{}.b.{{aggregatetype}}\"\n",
        relay_config(&db, &names, "", ""),
        names.topic_prefix
    ));
    // `check` says what run will do.
    let (_, report) = check(&second);
    assert!(
        report.contains("run will publish the existing rows of public.outbox_b"),
        "{report}"
    );
    let mut relay = RelayProcess::start_with(&second, &[]);
    relay
        .wait_log("public.outbox_b was added to the configuration", START)
        .await;
    relay
        .wait_log("incremental snapshot completed", CATCH_UP)
        .await;
    let b = consume_to_end(&[topic_b.as_str()]);
    let b_ids: HashSet<String> = b.iter().filter_map(|r| r.header_str("id")).collect();
    let b_rows: HashSet<String> = rows_of(&db.client, "outbox_b").await.into_keys().collect();
    assert_eq!(b_ids, b_rows, "the added table's existing rows");
    assert!(
        b.iter()
            .all(|r| snapshot_header(r).as_deref() == Some("incremental"))
    );
    assert_eq!(
        consume_to_end(&[topic_a.as_str()]).len(),
        a_before,
        "the first table is not snapshotted again"
    );
    // A later start has nothing more to snapshot.
    assert!(relay.stop().success());
    let from = relay.log().len();
    let mut relay = RelayProcess::start_with(&second, &[]);
    relay.wait_log("streaming", START).await;
    prefill(&db, "outbox_b", 3).await;
    wait_for("the new rows streamed", CATCH_UP, || {
        let topic_b = topic_b.clone();
        async move { (consume_to_end(&[topic_b.as_str()]).len() >= 8).then_some(()) }
    })
    .await;
    assert!(
        !relay.log()[from..].contains("was added to the configuration"),
        "{}",
        &relay.log()[from..]
    );
    assert!(relay.stop().success());
}

/// Table change events: an incremental snapshot of a table that writers
/// update, delete from and insert into all along. Folding the topic in
/// partition order (read and change events as upserts, deletes as
/// removals) gives exactly the table's final state: no chunk row is
/// published after a newer change of its key (never stale). `--where`
/// limits the snapshot to the rows it selects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_events_stay_fresh_under_concurrent_updates() {
    require_kafka();
    let db = TestDb::new("inc_fresh").await;
    let names = Names::new("inc_fresh");
    let (config, mut relay, topic, table) = folds_under_updates(&db, &names, "", false).await;

    // --where: only the selected rows are read.
    let reads_by_id = |topic: &str| -> HashMap<i64, usize> {
        let mut reads = HashMap::new();
        for r in consume_to_end(&[topic]) {
            let Some(value) = r.value.as_deref() else {
                continue;
            };
            let v: Value = serde_json::from_slice(value).unwrap();
            if v["op"] == "r" {
                *reads.entry(v["after"]["id"].as_i64().unwrap()).or_insert(0) += 1;
            }
        }
        reads
    };
    let before = reads_by_id(&topic);
    // A condition that could leave its parentheses is refused before any
    // signal is written (issue 24).
    let refused = std::process::Command::new(walrelay_bin())
        .args(["snapshot", "--config"])
        .arg(&config)
        .args([
            "--table",
            "public.items",
            "--where",
            "false) UNION ALL SELECT * FROM pg_roles --",
        ])
        .output()
        .expect("run walrelay snapshot");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{err}");
    assert!(
        err.contains("is refused") && err.contains("closes more"),
        "{err}"
    );
    request_snapshot(&config, "public.items", Some("id <= 50"));
    let selected: Vec<i64> = table.keys().copied().filter(|id| *id <= 50).collect();
    let after = wait_for("the filtered snapshot", CATCH_UP, || {
        let topic = topic.clone();
        let before = &before;
        let selected = &selected;
        async move {
            let now = reads_by_id(&topic);
            selected
                .iter()
                .all(|id| now.get(id) > before.get(id))
                .then_some(now)
        }
    })
    .await;
    relay
        .wait_log("incremental snapshot completed", CATCH_UP)
        .await;
    for (id, n) in &after {
        if *id > 50 {
            assert_eq!(Some(n), before.get(id), "row {id} is outside --where");
        }
    }
    let started = Instant::now();
    assert!(relay.stop().success(), "{:?}", started.elapsed());
}

/// The same with read-only watermarks (`[snapshot] watermarks =
/// "read_only"`): nothing is written for the chunks — no watermark reaches
/// the WAL, a test_decoding slot shows — and the topic still folds to the
/// table; a kill -9 mid-snapshot changes nothing. It fails when a chunk is
/// placed below its horizon, or keeps rows a transaction its snapshot did
/// not see changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_watermarks_keep_table_events_fresh_and_write_nothing() {
    require_kafka();
    let db = TestDb::new("inc_ro_fresh").await;
    let watch = "inc_ro_fresh_watch";
    db.client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'test_decoding')",
            &[&watch],
        )
        .await
        .expect("create the watching slot");
    let names = Names::new("inc_ro_fresh");
    let (config, mut relay, topic, table) =
        folds_under_updates(&db, &names, "watermarks = \"read_only\"\n", true).await;
    // No chunk has a watermark of its own to name its rows by: still, no
    // event id names two rows.
    let mut named: HashMap<String, i64> = HashMap::new();
    for r in consume_to_end(&[topic.as_str()]) {
        let Some(after) = read_event(&r) else {
            continue;
        };
        let id = r.header_str("walrelay.event_id").expect("an event id");
        let row = after["id"].as_i64().expect("items.id");
        assert_eq!(
            *named.entry(id.clone()).or_insert(row),
            row,
            "event id {id} names two rows"
        );
    }
    let check = std::process::Command::new(walrelay_bin())
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .expect("run walrelay check");
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(
        said.contains("incremental snapshots") && said.contains("read-only watermarks"),
        "{said}"
    );
    let watermarks: i64 = db
        .client
        .query_one(
            "SELECT count(*) FROM pg_logical_slot_peek_changes($1, NULL, NULL) \
             WHERE data LIKE '%walrelay.watermark%'",
            &[&watch],
        )
        .await
        .expect("peek the watching slot")
        .get(0);
    db.client
        .execute("SELECT pg_drop_replication_slot($1)", &[&watch])
        .await
        .expect("drop the watching slot");
    assert_eq!(watermarks, 0, "read-only watermarks wrote watermarks");
    assert!(!table.is_empty());
    assert!(relay.stop().success());
}

/// 6,000 items read by an incremental snapshot of 200-row chunks (with
/// `snapshot` settings `extra`) while 4 paced writers update, delete and
/// insert random keys; with `kill`, walrelay is killed (-9) once mid-snapshot. Then
/// the `[[table]]` topic, folded in partition order (read and change events
/// as upserts, deletes as removals), must be exactly the table. Returns the
/// config, the running relay, the topic and the table's state.
async fn folds_under_updates(
    db: &TestDb,
    names: &Names,
    extra: &str,
    kill: bool,
) -> (std::path::PathBuf, RelayProcess, String, HashMap<i64, i64>) {
    create_items(&db.client, 6000).await;
    let prefix = format!("{}_cdc", names.connector);
    let config = write_config(&connector_config(
        db,
        names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\n[[table]]\nname = \"public.items\"\n\
             [snapshot]\nmode = \"no_data\"\nchunk_rows = 200\n{extra}"
        ),
    ));
    let mut relay = RelayProcess::start_with(&config, &[]);
    relay.wait_log("streaming", START).await;

    // Writers: updates, deletes and inserts on random keys, all along —
    // paced (2 ms between statements, up to ~2,000 a second together), so
    // that a loaded machine's debug build keeps up with them: chunks wait
    // for the stream to reach their place, and a stream falling ever
    // further behind unpaced writers would never finish the snapshot.
    let writers = ItemsWriters::start(&db.name, 4, 7000, Duration::from_millis(2));
    request_snapshot(&config, "public.items", None);
    let topic = format!("{prefix}.public.items");
    if kill {
        // Killed once a chunk is published (its records on their way to
        // Kafka, its progress not yet stored).
        relay
            .wait_log("incremental snapshot chunk published", CATCH_UP)
            .await;
        eprintln!("kill -9 mid-snapshot");
        relay.kill9();
        relay = RelayProcess::start_with(&config, &[]);
        relay.wait_log("streaming", START).await;
    }
    relay
        .wait_log("incremental snapshot completed", CATCH_UP)
        .await;
    writers.stop().await;
    let table = items_state(&db.client).await;
    let folded = wait_for("the topic folds to the table", CATCH_UP, || {
        let topic = topic.clone();
        let table = &table;
        async move {
            let (state, reads) = fold_versions(&topic);
            // Keys the snapshot never saw and the stream never touched are
            // absent from both sides only if deleted before; compare on the
            // table's keys.
            (state == *table).then_some(reads)
        }
    })
    .await;
    eprintln!("folded {} keys; {folded} read events", table.len());
    assert!(folded > 0);
    (config, relay, topic, table)
}

/// Whether `record` is a read (`op: "r"`) event; its `after` then.
fn read_event(r: &Consumed) -> Option<Value> {
    let v: Value = serde_json::from_slice(r.value.as_deref()?).ok()?;
    (v["op"] == "r").then(|| v["after"].clone())
}

/// The number of read events in `topic` whose `after[column]` is set.
fn reads_of(topic: &str, column: &str) -> HashSet<i64> {
    consume_to_end(&[topic])
        .iter()
        .filter_map(read_event)
        .filter_map(|after| after[column].as_i64())
        .collect()
}

/// Issue 38, item 1: a table rewritten (`ALTER TABLE … ADD COLUMN …
/// DEFAULT random()`, its lock held 5 s) while its chunks are read, with
/// writers running. PostgreSQL shows a table rewritten after a snapshot as
/// empty to that snapshot; a chunk whose snapshot predated the rewrite read
/// 0 rows, ended the table and the snapshot said "completed" with most rows
/// never sent. Every chunk now locks the table before its snapshot: the
/// topic folds to the table (every row not touched by the writers came
/// from a read event).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_rewritten_while_its_chunks_are_read_is_read_whole() {
    require_kafka();
    let db = TestDb::new("inc_rewrite").await;
    create_items(&db.client, 60_000).await;
    let names = Names::new("inc_rewrite");
    let prefix = format!("{}_cdc", names.connector);
    let config = write_config(&connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\n[[table]]\nname = \"public.items\"\n\
             [snapshot]\nmode = \"no_data\"\nchunk_rows = 500\n\
             [kafka.librdkafka]\n\"client.id\" = \"{}\"\n",
            names.connector
        ),
    ));
    // Kafka takes ~1 MB/s from it: the ~20 MB of read events take long
    // enough that the rewrite lands in the middle of the snapshot.
    let quota = ProduceQuota::set(&names.connector, 1_000_000);
    let mut relay = RelayProcess::start_with(&config, &[]);
    relay.wait_log("streaming", START).await;
    let topic = format!("{prefix}.public.items");
    let writers = ItemsWriters::start(&db.name, 2, 65_000, Duration::from_millis(2));
    request_snapshot(&config, "public.items", None);
    wait_for("a few chunks in Kafka", CATCH_UP, || {
        let topic = topic.clone();
        async move { (reads_of(&topic, "id").len() >= 3000).then_some(()) }
    })
    .await;
    db.client
        .batch_execute(
            "BEGIN; ALTER TABLE items ADD COLUMN x float8 DEFAULT random(); \
             SELECT pg_sleep(5); COMMIT",
        )
        .await
        .unwrap();
    relay
        .wait_log("incremental snapshot completed", CATCH_UP)
        .await;
    writers.stop().await;
    quota.lift();
    let table = items_state(&db.client).await;
    let reads = wait_for("the topic folds to the table", CATCH_UP, || {
        let topic = topic.clone();
        let table = &table;
        async move {
            let (state, reads) = fold_versions(&topic);
            if state != *table {
                let missing = table.keys().filter(|k| !state.contains_key(k)).count();
                eprintln!("{missing} of {} rows not in the topic yet", table.len());
            }
            (state == *table).then_some(reads)
        }
    })
    .await;
    let rewritten = consume_to_end(&[topic.as_str()])
        .iter()
        .filter_map(read_event)
        .filter(|after| after["x"].is_number())
        .count();
    eprintln!(
        "{} rows; {reads} read events, {rewritten} after the rewrite",
        table.len()
    );
    assert!(rewritten > 0, "no chunk was read after the rewrite");
    assert!(relay.stop().success());
}

/// Issue 38, item 3: `key_columns` that are not unique (100 rows per
/// `customer_id`) paged the chunks by a key whose values cross chunk
/// boundaries: 7,199 of 20,000 rows were never sent. Such a key is not
/// used to page: the chunks follow the primary key (said in the log), and
/// every row is read — with writers running. A table with no unique key at
/// all is refused by `walrelay snapshot`, naming the key and the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_columns_that_are_not_unique_do_not_page_the_chunks() {
    require_kafka();
    let db = TestDb::new("inc_nonunique").await;
    db.client
        .batch_execute(
            "CREATE TABLE items (id int8 PRIMARY KEY, version int8 NOT NULL, note text,
                                 customer_id int8 NOT NULL DEFAULT 0);
             ALTER TABLE items OWNER TO walrelay;
             ALTER TABLE items REPLICA IDENTITY FULL;
             -- A row keeps its customer (its Kafka key, so its partition)
             -- when the writers delete and insert it again.
             CREATE FUNCTION customer() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN NEW.customer_id := NEW.id % 200; RETURN NEW; END $$;
             CREATE TRIGGER customer BEFORE INSERT ON items FOR EACH ROW EXECUTE FUNCTION customer();
             INSERT INTO items SELECT g, 0, 'n' FROM generate_series(1, 20000) g;
             CREATE TABLE keyless (customer_id int8 NOT NULL, note text);
             ALTER TABLE keyless OWNER TO walrelay;
             ALTER TABLE keyless REPLICA IDENTITY FULL;
             INSERT INTO keyless SELECT g % 200, 'n' FROM generate_series(1, 1000) g;",
        )
        .await
        .unwrap();
    let names = Names::new("inc_nonunique");
    let prefix = format!("{}_cdc", names.connector);
    let config = write_config(&connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\n\
             [[table]]\nname = \"public.items\"\nkey_columns = [\"customer_id\"]\n\
             [[table]]\nname = \"public.keyless\"\nkey_columns = [\"customer_id\"]\n\
             [snapshot]\nmode = \"no_data\"\nchunk_rows = 64\n"
        ),
    ));
    let refused = std::process::Command::new(walrelay_bin())
        .args(["snapshot", "--config"])
        .arg(&config)
        .args(["--table", "public.keyless"])
        .output()
        .expect("run walrelay snapshot");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{err}");
    assert!(
        err.contains("public.keyless cannot be read in chunks")
            && err.contains("(customer_id)")
            && err.contains("set key_columns"),
        "{err}"
    );

    let mut relay = RelayProcess::start_with(&config, &[]);
    relay.wait_log("streaming", START).await;
    let writers = ItemsWriters::start(&db.name, 2, 20_000, Duration::from_millis(5));
    request_snapshot(&config, "public.items", None);
    relay
        .wait_log("incremental snapshot completed", CATCH_UP)
        .await;
    writers.stop().await;
    assert!(
        relay.own_log().contains(
            "chunked by its primary key (id) instead: no unique index makes (customer_id) unique"
        ),
        "{}",
        relay.own_log()
    );
    let topic = format!("{prefix}.public.items");
    let table: HashMap<i64, i64> = db
        .client
        .query("SELECT id, version FROM items", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    wait_for("the topic folds to the table", CATCH_UP, || {
        let topic = topic.clone();
        let table = &table;
        async move {
            let state = fold_versions(&topic).0;
            let differ: Vec<_> = table
                .iter()
                .filter(|(k, v)| state.get(k) != Some(v))
                .take(5)
                .collect();
            let extra = state.keys().filter(|k| !table.contains_key(k)).count();
            if !differ.is_empty() || extra > 0 {
                eprintln!("differ (first 5): {differ:?}; {extra} ids only in the topic");
            }
            (state == *table).then_some(())
        }
    })
    .await;
    // No writer deletes ids above 20,000's reach, and each row untouched by
    // them exists only through its read event: all 20,000 were read or
    // streamed; at least the untouched ones were read.
    let read = reads_of(&topic, "id");
    assert!(read.len() >= 15_000, "{} rows read", read.len());
    assert!(relay.stop().success());
}

/// Issue 38, item 2: a stored incremental snapshot that can no longer run
/// as planned — its key column renamed, a table removed from the
/// configuration, a `--where` whose column was dropped — stopped every
/// start (exit 1, under a supervisor a crash loop). Each is now given up
/// or re-planned with a warning that names what changed, the connector
/// streams, and `walrelay snapshot --cancel` gives a running snapshot up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_snapshot_that_cannot_go_on_is_given_up_not_a_crash_loop() {
    require_kafka();
    let db = TestDb::new("inc_replan").await;
    for t in ["ren", "gone", "filt"] {
        db.client
            .batch_execute(&format!(
                "CREATE TABLE {t} (id int8 PRIMARY KEY, version int8 NOT NULL, note text);
                 ALTER TABLE {t} OWNER TO walrelay;
                 INSERT INTO {t} SELECT g, 0, 'n' FROM generate_series(1, 5000) g;"
            ))
            .await
            .unwrap();
    }
    let names = Names::new("inc_replan");
    let prefix = format!("{}_cdc", names.connector);
    let tables = |list: &[&str]| {
        list.iter()
            .map(|t| format!("[[table]]\nname = \"public.{t}\"\n"))
            .collect::<String>()
    };
    let config_text = |list: &[&str]| {
        connector_config(
            &db,
            &names,
            &format!(
                "[table_defaults]\ntopic_prefix = \"{prefix}\"\n{}\
                 [snapshot]\nmode = \"no_data\"\nchunk_rows = 50\n",
                tables(list)
            ),
        )
    };
    let config = write_config(&config_text(&["ren", "gone", "filt"]));
    let mut relay = RelayProcess::start_with(&config, &[]);
    relay.wait_log("streaming", START).await;
    request_snapshot(&config, "public.ren", None);
    request_snapshot(&config, "public.gone", None);
    request_snapshot(&config, "public.filt", Some("note = 'n'"));
    let ren = format!("{prefix}.public.ren");
    // A writer bumps random rows of ren all along (by ctid: its key column
    // is renamed below).
    let stop_writer = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (name, stop) = (db.name.clone(), stop_writer.clone());
        tokio::spawn(async move {
            let client = pg_connect(&name).await;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                client
                    .batch_execute(
                        "UPDATE ren SET version = version + 1 WHERE ctid = \
                         (SELECT ctid FROM ren OFFSET (random() * 4999)::int LIMIT 1)",
                    )
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    wait_for("part of ren in Kafka", CATCH_UP, || {
        let ren = ren.clone();
        async move { (reads_of(&ren, "id").len() >= 500).then_some(()) }
    })
    .await;
    relay.kill9();
    // What the stored plan names changes under it.
    db.client
        .batch_execute(
            "ALTER TABLE ren RENAME COLUMN id TO rid; ALTER TABLE filt DROP COLUMN note;",
        )
        .await
        .unwrap();
    std::fs::write(&config, config_text(&["ren", "filt"])).unwrap();

    let mut relay = RelayProcess::start_with(&config, &[]);
    relay.wait_log("streaming", START).await;
    relay
        .wait_log("incremental snapshot ended with tables given up", CATCH_UP)
        .await;
    let log = relay.own_log();
    for needle in [
        "public.gone is no longer a table this connector captures",
        "incremental snapshot of public.filt given up",
        "column \"note\" does not exist",
        "incremental snapshot of public.ren: chunked by its primary key (rid) instead: the key \
         column \"id\" is not a published column of public.ren — read from its first row",
    ] {
        assert!(log.contains(needle), "{needle:?} not in:\n{log}");
    }
    assert!(relay.is_running());
    // ren was read again by its new key, whole and fresh: folding the
    // records written since the rename (read events and the writer's
    // updates, all keyed by rid) gives the table.
    stop_writer.store(true, std::sync::atomic::Ordering::SeqCst);
    writer.await.unwrap();
    let table: HashMap<i64, i64> = db
        .client
        .query("SELECT rid, version FROM ren", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let reads = wait_for("ren folds to the table by rid", CATCH_UP, || {
        let ren = ren.clone();
        let table = &table;
        async move {
            let mut got = consume_to_end(&[ren.as_str()]);
            got.sort_by_key(|r| (r.partition, r.offset));
            let mut state = HashMap::new();
            let mut reads = 0;
            for r in &got {
                let Some(v) = r.value.as_deref() else {
                    continue;
                };
                let v: Value = serde_json::from_slice(v).unwrap();
                if let Some(rid) = v["after"]["rid"].as_i64() {
                    reads += usize::from(v["op"] == "r");
                    state.insert(rid, v["after"]["version"].as_i64().unwrap());
                }
            }
            (state == *table).then_some(reads)
        }
    })
    .await;
    assert!(reads >= 4000, "only {reads} of 5000 rows read by rid");
    assert!(relay.stop().success());

    // A cancelled snapshot is given up, and stays given up: asked for and
    // cancelled while no connector runs, the next one meets both signals
    // in the stream, in that order.
    request_snapshot(&config, "public.ren", None);
    let out = std::process::Command::new(walrelay_bin())
        .args(["snapshot", "--cancel", "--config"])
        .arg(&config)
        .args(["--table", "public.ren"])
        .output()
        .expect("run walrelay snapshot --cancel");
    assert!(out.status.success(), "{out:?}");
    let mut relay = RelayProcess::start_with(&config, &[]);
    relay.wait_log("streaming", START).await;
    relay
        .wait_log("incremental snapshot cancelled for public.ren", CATCH_UP)
        .await;
    relay
        .wait_log("incremental snapshot ended with tables given up", CATCH_UP)
        .await;
    assert!(
        !relay.own_log().contains("cannot go on"),
        "{}",
        relay.own_log()
    );
    assert!(relay.stop().success());
    // The next start has nothing left of either.
    let mut relay = RelayProcess::start_with(&config, &[]);
    relay.wait_log("streaming", START).await;
    let log = relay.own_log();
    assert!(
        !log.contains("incremental snapshot: reading beside the stream")
            && !log.contains("cannot go on"),
        "{log}"
    );
    assert!(relay.stop().success());
}

/// Asked for again while its snapshot runs, a table is read again from its
/// first row: rows inserted since the first request before its position
/// (here negative ids, below every key read) exist at the second request
/// and must be read too. (They were not: the second request was merged
/// into the first unchanged.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_asked_for_again_is_read_again_from_its_first_row() {
    require_kafka();
    let db = TestDb::new("inc_again").await;
    create_items(&db.client, 20_000).await;
    let names = Names::new("inc_again");
    let prefix = format!("{}_cdc", names.connector);
    let config = write_config(&connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\n[[table]]\nname = \"public.items\"\n\
             [snapshot]\nmode = \"no_data\"\nchunk_rows = 200\n\
             [kafka.librdkafka]\n\"client.id\" = \"{}\"\n",
            names.connector
        ),
    ));
    // Slow enough that the second request arrives mid-snapshot.
    let quota = ProduceQuota::set(&names.connector, 300_000);
    let mut relay = RelayProcess::start_with(&config, &[]);
    relay.wait_log("streaming", START).await;
    let topic = format!("{prefix}.public.items");
    request_snapshot(&config, "public.items", None);
    wait_for("part of the table read", CATCH_UP, || {
        let topic = topic.clone();
        async move { (reads_of(&topic, "id").len() >= 1000).then_some(()) }
    })
    .await;
    db.client
        .batch_execute("INSERT INTO items SELECT -g, 0, 'late' FROM generate_series(1, 100) g")
        .await
        .unwrap();
    request_snapshot(&config, "public.items", None);
    relay
        .wait_log("asked for again: read again from its first row", CATCH_UP)
        .await;
    quota.lift();
    relay
        .wait_log("incremental snapshot completed", CATCH_UP)
        .await;
    wait_for("every row read, the late ones too", CATCH_UP, || {
        let topic = topic.clone();
        async move {
            let read = reads_of(&topic, "id");
            (read.len() == 20_100).then_some(())
        }
    })
    .await;
    assert!(relay.stop().success());
}
