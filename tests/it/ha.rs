//! Several instances of one connector (a sidecar in every pod, a rolling
//! update, a copy started by mistake), against the real services, with
//! writers committing the usual outbox pattern (insert, then delete the row
//! in the writer's next transaction) the whole time.
//!
//! What must hold (crate::source::lease, docs/operations.md "Running several
//! instances"):
//! - a second instance started while the first snapshots, streams or stops
//!   waits as a standby (`/healthz` 200 "standby", `walrelay_role`), never
//!   touches the slot, and takes over when the first dies: 0 events lost,
//!   per-aggregate order kept, every duplicate identical;
//! - 20 takeovers in a row (kill -9 and SIGTERM of the active instance,
//!   a new standby started each time) lose nothing.
//!
//! Every event is checked against a ledger table that each writer fills in
//! the same transaction as the outbox row (the outbox row itself is deleted
//! soon after, as applications do).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};
use support::ledger::{CREATE_LEDGER, LedgerWriters, ledger};
use support::message_load::{MessageWriters, verify_message_delivery};
use support::row_load::{VersionWriters, verify_versions};
use support::*;

const CATCH_UP: Duration = Duration::from_secs(120);
const SLOT_CREATED: &str = "created replication slot with an exported snapshot";

/// Outbox and ledger; `prefill` rows present before the connector starts
/// (in both tables: the snapshot publishes them).
async fn setup(prefix: &str, prefill: usize) -> (TestDb, Names) {
    let db = TestDb::new(prefix).await;
    db.create_outbox("outbox").await;
    db.client
        .batch_execute(&format!(
            "{CREATE_LEDGER};
             INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
             SELECT gen_random_uuid(), CASE WHEN g % 50 % 3 = 0 THEN 'invoice' ELSE 'order' END,
                    'agg-' || (g % 50), 'Created', jsonb_build_object('pre', g)
             FROM generate_series(1, {prefill}) g;
             INSERT INTO ledger SELECT id, aggregatetype, aggregateid, payload FROM outbox;"
        ))
        .await
        .expect("outbox, ledger and prefill");
    (db, Names::new(prefix))
}

/// The same configuration for every instance; only `[health] listen`
/// differs (one host here, one pod each in production).
fn config(db: &TestDb, names: &Names, health: &str) -> String {
    relay_config(db, names, "", &format!("[health]\nlisten = \"{health}\"\n"))
}

/// The slot's walsender pid, if a session streams from it.
async fn slot_active_pid(db: &TestDb, slot: &str) -> Option<i32> {
    db.client
        .query_opt(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .expect("read slot")
        .and_then(|r| r.get(0))
}

/// Waits until Kafka holds everything committed so far, then checks every
/// ledger row against it. Returns (events, duplicates).
async fn verify_all(db: &TestDb, names: &Names) -> (usize, usize) {
    let lsn = db.current_wal_lsn().await;
    db.wait_confirmed(&names.slot, lsn, "the slot confirms every write", CATCH_UP)
        .await;
    let rows = ledger(&db.client).await;
    let topics = [names.topic("order"), names.topic("invoice")];
    let consumed = consume_to_end(&[topics[0].as_str(), topics[1].as_str()]);
    let duplicates = verify_outbox_delivery(names, &rows, &consumed);
    (rows.len(), duplicates)
}

/// When the second instance starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// While the first takes its initial snapshot.
    Snapshot,
    /// While the first streams.
    Streaming,
    /// While the first stops gracefully (SIGTERM).
    GracefulStop,
}

async fn second_instance(phase: Phase, seed: u64) {
    require_kafka();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    eprintln!("phase {phase:?}, seed {seed}");
    let (db, names) = setup("ha_second", 30_000).await;
    let (health_a, health_b) = (free_local_addr(), free_local_addr());
    let mut a = RelayProcess::start(&config(&db, &names, &health_a), &[]);
    // Writers from the moment the slot exists (what was committed and
    // deleted before it is nobody's to publish).
    a.wait_log(SLOT_CREATED, CATCH_UP).await;
    let writers = LedgerWriters::start(&db.name, &[pg_port()], 8);
    match phase {
        Phase::Snapshot => {}
        Phase::Streaming | Phase::GracefulStop => {
            wait_for("the first instance streams", CATCH_UP, || async {
                slot_active_pid(&db, &names.slot).await
            })
            .await;
        }
    }
    tokio::time::sleep(Duration::from_millis(rng.random_range(0..1500))).await;
    if phase == Phase::GracefulStop {
        a.signal("TERM");
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
    }
    let mut b = RelayProcess::start(&config(&db, &names, &health_b), &[]);
    if phase != Phase::GracefulStop {
        b.wait_log(
            "standby: another instance of this connector holds the lease",
            CATCH_UP,
        )
        .await;
        let health = http_get(&health_b, "/healthz");
        assert!(
            health.starts_with("HTTP/1.0 200") && health.contains("standby"),
            "a standby is healthy and says so: {health}"
        );
        let metrics = http_get(&health_b, "/metrics");
        assert!(
            metrics.contains("walrelay_role{connector=\"")
                && metrics.lines().any(|l| l.starts_with("walrelay_role{")
                    && l.contains("role=\"standby\"")
                    && l.ends_with(" 1")),
            "walrelay_role says standby:\n{metrics}"
        );
        let (code, status) = status_of(&a);
        let a_name = format!(":{} (backend pid", a.child.id());
        let b_name = format!(":{} (backend pid", b.child.id());
        assert!(
            status
                .lines()
                .any(|l| l.starts_with("active instance") && l.contains(&a_name)),
            "status names the active instance (exit {code:?}):\n{status}"
        );
        assert!(
            status
                .lines()
                .any(|l| l.trim_start().starts_with("standby") && l.contains(&b_name)),
            "status names the standby:\n{status}"
        );
        // The offset store keeps the consistent point the snapshot's slot was
        // created at (what the hand-over checks the slot against).
        let created_at = a
            .log()
            .lines()
            .find(|l| l.contains(SLOT_CREATED))
            .and_then(|l| l.split("lsn=").nth(1))
            .map(|l| l.split_whitespace().next().unwrap_or_default().to_owned())
            .expect("the slot's consistent point in the log");
        assert!(
            status.contains(&format!("its slot was created at {created_at}")),
            "status shows the snapshot's consistent point {created_at}:\n{status}"
        );
        // The first instance finishes its snapshot, if it was taking one,
        // and streams on: the standby changed nothing under it.
        wait_for("the first instance streams", CATCH_UP, || async {
            slot_active_pid(&db, &names.slot).await
        })
        .await;
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..2500))).await;
        assert!(a.is_running(), "the first instance runs on:\n{}", a.log());
        a.kill9();
    } else {
        assert_eq!(
            a.wait_exit(Duration::from_secs(30)).map(|s| s.code()),
            Some(Some(0))
        );
    }
    b.wait_log(
        "holding the lease: this instance is the active one",
        CATCH_UP,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let written = writers.stop().await;
    let (events, duplicates) = verify_all(&db, &names).await;
    eprintln!(
        "{phase:?}: {events} events ({written} by writers after the prefill), {duplicates} duplicates, 0 lost"
    );
    for (who, p) in [("first", &a), ("second", &b)] {
        assert!(
            !p.log().contains("dropped the replication slot"),
            "the {who} instance dropped the slot:\n{}",
            p.log()
        );
    }
    b.stop();
}

/// `walrelay status` for the connector `p` runs: exit code and stdout.
fn status_of(p: &RelayProcess) -> (Option<i32>, String) {
    let out = std::process::Command::new(walrelay_bin())
        .args(["status", "--config"])
        .arg(&p.config_path)
        .output()
        .expect("run walrelay status");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn seed() -> u64 {
    std::env::var("WALRELAY_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_instance_during_the_snapshot_waits_and_nothing_is_lost() {
    second_instance(Phase::Snapshot, seed()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_instance_during_streaming_waits_and_nothing_is_lost() {
    second_instance(Phase::Streaming, seed()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_instance_during_a_graceful_stop_takes_over_and_nothing_is_lost() {
    second_instance(Phase::GracefulStop, seed()).await;
}

/// 20 takeovers under writers, alternating kill -9 and SIGTERM of the
/// active instance; a new standby is started after each. Prints the
/// takeover times (from the signal to the new active instance's walsender
/// streaming), which docs/benchmarks.md reports; asserts only correctness.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_takeovers_lose_nothing() {
    require_kafka();
    let (db, names) = setup("ha_takeover", 1_000).await;
    let mut active = RelayProcess::start(&config(&db, &names, &free_local_addr()), &[]);
    active.wait_log(SLOT_CREATED, CATCH_UP).await;
    let writers = LedgerWriters::start(&db.name, &[pg_port()], 8);
    wait_for("the first instance streams", CATCH_UP, || async {
        slot_active_pid(&db, &names.slot).await
    })
    .await;
    let mut standby = RelayProcess::start(&config(&db, &names, &free_local_addr()), &[]);
    standby
        .wait_log(
            "standby: another instance of this connector holds the lease",
            CATCH_UP,
        )
        .await;
    let mut times: Vec<(bool, Duration)> = Vec::new();
    for i in 0..20 {
        let kill = i % 2 == 0;
        let old_walsender = slot_active_pid(&db, &names.slot).await;
        let t0 = Instant::now();
        if kill {
            active.kill9();
        } else {
            active.signal("TERM");
        }
        wait_for("the standby takes over and streams", CATCH_UP, || async {
            slot_active_pid(&db, &names.slot)
                .await
                .filter(|pid| Some(*pid) != old_walsender)
        })
        .await;
        times.push((kill, t0.elapsed()));
        if !kill {
            assert_eq!(
                active.wait_exit(Duration::from_secs(30)).map(|s| s.code()),
                Some(Some(0)),
                "SIGTERM stops the active instance cleanly:\n{}",
                active.log()
            );
        }
        standby
            .wait_log(
                "holding the lease: this instance is the active one",
                CATCH_UP,
            )
            .await;
        active = std::mem::replace(
            &mut standby,
            RelayProcess::start(&config(&db, &names, &free_local_addr()), &[]),
        );
        standby
            .wait_log(
                "standby: another instance of this connector holds the lease",
                CATCH_UP,
            )
            .await;
    }
    let written = writers.stop().await;
    let (events, duplicates) = verify_all(&db, &names).await;
    let mut ms: Vec<u128> = times.iter().map(|(_, d)| d.as_millis()).collect();
    ms.sort_unstable();
    eprintln!(
        "20 takeovers: {events} events ({written} written during them), {duplicates} duplicates, 0 lost; \
         takeover ms sorted {ms:?}; kill -9 {:?}; SIGTERM {:?}",
        times
            .iter()
            .filter(|(k, _)| *k)
            .map(|(_, d)| d.as_millis())
            .collect::<Vec<_>>(),
        times
            .iter()
            .filter(|(k, _)| !*k)
            .map(|(_, d)| d.as_millis())
            .collect::<Vec<_>>(),
    );
    active.stop();
}

/// Outbox rows with a NULL aggregate id (each goes to the dead-letter
/// topic), one per transaction, until stopped: their ids.
fn dead_letter_writer(
    db_name: &str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<String>> {
    let db_name = db_name.to_owned();
    tokio::spawn(async move {
        let client = pg_connect(&db_name).await;
        let mut ids = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let row = client
                .query_one(
                    "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
                     VALUES (gen_random_uuid(), 'order', NULL, 'Orphan', '{}') RETURNING id::text",
                    &[],
                )
                .await
                .expect("dead-letter row");
            ids.push(row.get(0));
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        ids
    })
}

/// The active instance killed -9 while every kind of record is in flight:
/// outbox rows (some to the dead-letter topic: NULL aggregate id),
/// transactional logical messages routed by `[[message]]`, and `[[table]]`
/// changes with `provide_transaction_metadata` (BEGIN/END records). After
/// the standby takes over, every record of each kind is in Kafka, re-sent
/// copies identical (same ids), per key in commit order, and each
/// transaction of table changes has its BEGIN and its END counting them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_with_messages_table_events_and_dead_letters_in_flight_loses_nothing() {
    require_kafka();
    let (db, names) = setup("ha_kinds", 0).await;
    db.client
        .batch_execute(
            "CREATE TABLE items (id int4 PRIMARY KEY, v int4 NOT NULL);
             ALTER TABLE items OWNER TO walrelay;
             INSERT INTO items SELECT g, 0 FROM generate_series(1, 10) g;",
        )
        .await
        .unwrap();
    let base = &names.topic_prefix;
    let (load, dlq, items, tx) = (
        format!("{base}.load"),
        format!("{base}.dlq"),
        format!("{base}_cdc.public.items"),
        format!("{base}_cdc.transaction"),
    );
    let config = |health: &str| {
        config(&db, &names, health)
            + &format!(
                "[table_defaults]\ntopic_prefix = \"{base}_cdc\"\nprovide_transaction_metadata = true\n\n\
                 [[table]]\nname = \"public.items\"\n\n\
                 [[message]]\nprefix = \"load\"\ntopic = \"{load}\"\nkey_field = \"key\"\n\n\
                 [dead_letter]\ntopic = \"{dlq}\"\n"
            )
    };
    let mut a = RelayProcess::start(&config(&free_local_addr()), &[]);
    a.wait_log(SLOT_CREATED, CATCH_UP).await;
    let outbox = LedgerWriters::start(&db.name, &[pg_port()], 4);
    let messages = MessageWriters::start(&db.name, "load", 2, 8);
    let rows = VersionWriters::start(
        &db.name,
        "items",
        "INSERT INTO items (id, v) VALUES ($1, 0)",
        11,
    );
    let stop_dead = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dead = dead_letter_writer(&db.name, stop_dead.clone());
    wait_for("the first instance streams", CATCH_UP, || async {
        slot_active_pid(&db, &names.slot).await
    })
    .await;
    let mut b = RelayProcess::start(&config(&free_local_addr()), &[]);
    b.wait_log(
        "standby: another instance of this connector holds the lease",
        CATCH_UP,
    )
    .await;
    let all_topics = [
        names.topic("order"),
        names.topic("invoice"),
        load.clone(),
        dlq.clone(),
        items.clone(),
        tx.clone(),
    ];
    let count = |topic: &str| consume_to_end(&[topic]).len();
    wait_for("records of every kind in Kafka", CATCH_UP, || async {
        all_topics.iter().all(|t| count(t) >= 10).then_some(())
    })
    .await;
    a.kill9();
    let at_kill = count(&load);
    b.wait_log(
        "holding the lease: this instance is the active one",
        CATCH_UP,
    )
    .await;
    wait_for("the new active instance publishes", CATCH_UP, || async {
        (count(&load) >= at_kill + 50).then_some(())
    })
    .await;
    let written = outbox.stop().await;
    let emitted = messages.stop().await;
    let committed = rows.stop().await;
    stop_dead.store(true, std::sync::atomic::Ordering::SeqCst);
    let dead = dead.await.unwrap();

    // verify_all waits until the slot confirms every write: then Kafka
    // holds everything.
    let (events, outbox_dups) = verify_all(&db, &names).await;
    let message_dups = verify_message_delivery(&emitted, &consume_to_end(&[&load]));
    let changes = consume_to_end(&[&items]);
    let change_dups = verify_versions(&committed, &changes);
    let (dead_letters, dead_dups) = {
        let consumed = consume_to_end(&[&dlq]);
        // Every dead letter is keyed (these rows have no aggregate id: by
        // their event id), so first_copies checks that each re-sent copy
        // landed on its first copy's partition.
        assert!(
            consumed.iter().all(|c| c.key.is_some()),
            "a dead letter without a key: a re-sent copy could land on another partition"
        );
        let (first, dups) = first_copies(&consumed);
        let ids: std::collections::HashSet<String> =
            first.iter().filter_map(|c| c.header_str("id")).collect();
        assert!(
            dead.iter().all(|id| ids.contains(id)),
            "a dead letter is missing"
        );
        assert_eq!(first.len(), dead.len(), "one dead letter per orphan row");
        (first.len(), dups)
    };
    // Each transaction of table changes: a BEGIN, and an END counting its
    // changes (snapshot rows have neither).
    let tx_records = consume_to_end(&[&tx]);
    let (tx_first, tx_dups) = first_copies(&tx_records);
    let markers: std::collections::HashMap<String, serde_json::Value> = tx_first
        .iter()
        .map(|c| {
            (
                c.header_str("walrelay.event_id").unwrap(),
                serde_json::from_slice(c.value.as_deref().unwrap()).unwrap(),
            )
        })
        .collect();
    let mut per_txn: std::collections::HashMap<String, usize> = Default::default();
    for c in first_copies(&changes).0 {
        let value: serde_json::Value = serde_json::from_slice(c.value.as_deref().unwrap()).unwrap();
        if value["op"] != "r" {
            *per_txn
                .entry(c.header_str("walrelay.lsn").unwrap())
                .or_default() += 1;
        }
    }
    for (lsn, n) in &per_txn {
        assert_eq!(markers[&format!("{lsn}:begin")]["status"], "BEGIN");
        let end = &markers[&format!("{lsn}:end")];
        assert_eq!(
            (&end["status"], end["event_count"].as_u64()),
            (&serde_json::json!("END"), Some(*n as u64)),
            "{lsn}"
        );
    }
    assert_eq!(
        markers.len(),
        2 * per_txn.len(),
        "no BEGIN/END of anything else"
    );
    let resent = outbox_dups + message_dups + change_dups + dead_dups + tx_dups;
    eprintln!(
        "takeover with every kind in flight: {events} outbox events ({written} by writers), \
         {} messages, {} row versions in {} transactions, {dead_letters} dead letters; re-sent: \
         outbox {outbox_dups}, messages {message_dups}, changes {change_dups}, BEGIN/END \
         {tx_dups}, dead letters {dead_dups}",
        emitted.len(),
        committed.len(),
        per_txn.len()
    );
    assert!(
        resent > 0,
        "the takeover re-sent nothing: the kill landed with nothing in flight"
    );
    b.stop();
}

/// The time at the start of the first log line containing `needle`
/// (RFC 3339, as walrelay's text log writes it; sorts as text).
fn logged_at(p: &RelayProcess, needle: &str) -> String {
    p.log()
        .lines()
        .find(|l| l.contains(needle))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no log line with {needle:?}:\n{}", p.log()))
        .to_owned()
}

/// The active instance's lease connection is terminated on the server (as
/// a network cut or an administrator would): PostgreSQL hands the lease to
/// the standby at once. The old holder must stop publishing before the new
/// one starts (fencing), queue again as a standby, and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_lease_stops_the_holder_before_the_standby_starts() {
    require_kafka();
    let (db, names) = setup("ha_fence", 1_000).await;
    let mut a = RelayProcess::start(&config(&db, &names, &free_local_addr()), &[]);
    a.wait_log(SLOT_CREATED, CATCH_UP).await;
    let writers = LedgerWriters::start(&db.name, &[pg_port()], 8);
    wait_for("the first instance streams", CATCH_UP, || async {
        slot_active_pid(&db, &names.slot).await
    })
    .await;
    let mut b = RelayProcess::start(&config(&db, &names, &free_local_addr()), &[]);
    b.wait_log(
        "standby: another instance of this connector holds the lease",
        CATCH_UP,
    )
    .await;
    let holder: i32 = db
        .client
        .query_one(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[],
        )
        .await
        .expect("the lease holder's backend")
        .get(0);
    db.client
        .execute("SELECT pg_terminate_backend($1)", &[&holder])
        .await
        .expect("terminate the lease connection");
    b.wait_log(
        "holding the lease: this instance is the active one",
        CATCH_UP,
    )
    .await;
    a.wait_log("lost the lease", CATCH_UP).await;
    // The old holder queues again, behind the new one.
    wait_for("the old holder waits as a standby", CATCH_UP, || async {
        (a.log()
            .matches("standby: another instance of this connector holds the lease")
            .count()
            >= 1)
            .then_some(())
    })
    .await;
    let stopped = logged_at(&a, "lost the lease");
    let started = logged_at(&b, "holding the lease: this instance is the active one");
    assert!(
        stopped < started,
        "the old holder stopped publishing ({stopped}) before the new one became active ({started})"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    writers.stop().await;
    let (events, duplicates) = verify_all(&db, &names).await;
    eprintln!("lost lease: {events} events, {duplicates} duplicates, 0 lost");
    assert!(a.is_running() && b.is_running());
    b.stop();
    a.stop();
}

/// `(Kafka offset, lease term)` of every offset record of `connector`.
fn offset_terms(connector: &str) -> Vec<(i64, Option<u64>)> {
    let mut records: Vec<(i64, Option<u64>)> = consume_to_end(&["walrelay.offsets"])
        .iter()
        .filter(|r| r.key.as_deref() == Some(connector.as_bytes()))
        .filter_map(|r| {
            let v: serde_json::Value = serde_json::from_slice(r.value.as_deref()?).ok()?;
            Some((r.offset, v["term"].as_u64()))
        })
        .collect();
    records.sort_unstable();
    records
}

/// Issue 38, item 5: the active instance frozen (SIGSTOP) while writers
/// run, its lease connection ended on the server, the standby takes over
/// and streams, and the old holder is thawed 10 s later. The old holder
/// must hand nothing more to Kafka once it returns (its lease is checked
/// by a ping before the next record or offset write), every offset record
/// carries its writer's lease term, the new holder's term is higher, and
/// an offset record the old holder may still have had queued cannot move
/// the stored offset backwards: a third instance starts from the new
/// holder's position (not refused as "slot ahead of the stored offset"),
/// and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_holder_that_returns_after_losing_its_lease_hands_nothing_more_over() {
    require_kafka();
    let (db, names) = setup("ha_return", 1_000).await;
    let mut a = RelayProcess::start(&config(&db, &names, &free_local_addr()), &[]);
    a.wait_log(SLOT_CREATED, CATCH_UP).await;
    let writers = LedgerWriters::start(&db.name, &[pg_port()], 8);
    wait_for("the first instance streams", CATCH_UP, || async {
        slot_active_pid(&db, &names.slot).await
    })
    .await;
    let mut b = RelayProcess::start(&config(&db, &names, &free_local_addr()), &[]);
    b.wait_log(
        "standby: another instance of this connector holds the lease",
        CATCH_UP,
    )
    .await;
    wait_for("the first holder writes offsets", CATCH_UP, || async {
        (!offset_terms(&names.connector).is_empty()).then_some(())
    })
    .await;
    a.signal("STOP");
    let holder: i32 = db
        .client
        .query_one(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[],
        )
        .await
        .expect("the lease holder's backend")
        .get(0);
    db.client
        .execute("SELECT pg_terminate_backend($1)", &[&holder])
        .await
        .expect("terminate the lease connection");
    b.wait_log(
        "holding the lease: this instance is the active one",
        CATCH_UP,
    )
    .await;
    // The new holder streams and stores offsets of its own term.
    let before = offset_terms(&names.connector);
    let a_term = before
        .last()
        .and_then(|(_, t)| *t)
        .expect("offset records carry a term");
    wait_for(
        "the new holder stores offsets of a higher term",
        CATCH_UP,
        || async {
            offset_terms(&names.connector)
                .iter()
                .any(|(_, t)| t.is_some_and(|t| t > a_term))
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    a.signal("CONT");
    a.wait_log("lost the lease", CATCH_UP).await;
    writers.stop().await;
    let (events, duplicates) = verify_all(&db, &names).await;
    let terms = offset_terms(&names.connector);
    let b_term = terms.iter().filter_map(|(_, t)| *t).max().expect("terms");
    let stale_after: Vec<_> = terms
        .iter()
        .skip_while(|(_, t)| *t != Some(b_term))
        .filter(|(_, t)| *t != Some(b_term))
        .collect();
    eprintln!(
        "returning holder: {events} events, {duplicates} duplicates, 0 lost; terms {a_term} -> \
         {b_term}; offset records of the old term after the new one's first: {stale_after:?}"
    );
    assert!(b_term > a_term);
    assert!(
        terms.iter().all(|(_, t)| t.is_some()),
        "an offset record without a term: {terms:?}"
    );
    a.stop();
    assert!(b.stop().success());
    // The stored offset is the new holder's: a third instance streams.
    let mut c = RelayProcess::start(&config(&db, &names, &free_local_addr()), &[]);
    c.wait_log("streaming", CATCH_UP).await;
    assert!(c.is_running(), "{}", c.own_log());
    c.stop();
}
