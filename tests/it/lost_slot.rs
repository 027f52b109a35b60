//! A slot PostgreSQL invalidated (`wal_status = 'lost'`), recovered by
//! following docs/operations.md, "Lost slot", to the letter while writers
//! keep committing (issue 11): walrelay refuses to start with the literal
//! SQL to drop the slot; then status, drop, start with
//! `--accept-slot-position`, `walrelay republish` — and every outbox row is
//! in Kafka.
//!
//! The server gets `max_slot_wal_keep_size = '64MB'` for the length of the
//! test (reset afterwards, also on failure): no other test may run beside
//! it (cargo runs test binaries one at a time; deploy/test.sh runs it after
//! the broker-outage tests it runs in the background). The same holds for
//! PostgreSQL 18's `idle_replication_slot_timeout` below; the two tests of
//! this file take turns (`SERVER_WIDE`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;
use crate::support::runbook;

use std::time::Duration;

use support::*;

/// The tests of this file change server-wide settings that invalidate
/// slots: one at a time.
static SERVER_WIDE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Writes far more WAL than `max_slot_wal_keep_size` lets the slot keep,
/// with checkpoints, until PostgreSQL marks `names.slot` lost.
async fn lose_slot(db: &TestDb, names: &Names, admin: &tokio_postgres::Client) {
    let filler = TestDb::new("lostslot_filler").await;
    wait_for("the slot to be lost", Duration::from_secs(180), || async {
        filler
            .client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS filler (pad text); \
                 INSERT INTO filler SELECT repeat(md5(g::text), 32) FROM generate_series(1, 40000) g; \
                 SELECT pg_switch_wal();",
            )
            .await
            .unwrap();
        admin.batch_execute("CHECKPOINT").await.unwrap();
        let status: Option<String> = db
            .client
            .query_opt(
                "SELECT wal_status::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&names.slot],
            )
            .await
            .unwrap()
            .and_then(|r| r.get(0));
        (status.as_deref() == Some("lost")).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_slot_recovered_by_the_runbook_loses_nothing_while_writers_commit() {
    require_kafka();
    let _turn = SERVER_WIDE.lock().await;
    let _keep = SystemSetting::set("max_slot_wal_keep_size", "64MB").await;
    let db = TestDb::new("lostslot").await;
    db.create_outbox("outbox").await;
    let names = Names::new("lostslot");
    let mut relay = RelayProcess::start(&relay_config(&db, &names, "", ""), &[]);
    relay.wait_log("streaming", START).await;
    let writers = Writers::start(&db);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The incident: walrelay is stopped while far more WAL than the slot
    // may keep is written; a checkpoint then invalidates the slot.
    assert!(relay.stop().success(), "{}", relay.log());
    let admin = pg_connect("postgres").await;
    lose_slot(&db, &names, &admin).await;

    // walrelay refuses, naming the SQL to run and the runbook section.
    let mut refused = RelayProcess::start_with(&relay.config_path, &[]);
    let log = refused.expect_exit(1, START);
    assert!(log.contains("is lost (wal_status = 'lost')"), "{log}");
    assert!(
        log.contains(&format!(
            "SELECT pg_drop_replication_slot('{}');",
            names.slot
        )) && log.contains("\"Lost slot\""),
        "{log}"
    );

    runbook::recover(&db, &names, &relay.config_path, writers, true, "10 minutes").await;
}

/// Issue 24: slots are typically lost *while* walrelay drains a backlog,
/// writing offsets every second for transactions committed long before.
/// The runbook must select the rows to re-publish by the stored
/// offset's commit time, not by when the offset was written: here a broker
/// quota makes walrelay lag by many seconds (scaled down from the minutes
/// of a real incident, with the runbook's margin scaled down alike), the
/// slot is lost while it runs, and the rows a `written_at`-based filter
/// would miss are shown to exist — then the runbook recovers every one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slot_lost_while_walrelay_lags_is_reconciled_from_the_stored_commit_time() {
    require_kafka();
    let _turn = SERVER_WIDE.lock().await;
    let _keep = SystemSetting::set("max_slot_wal_keep_size", "64MB").await;
    let db = TestDb::new("lagslot").await;
    db.create_outbox("outbox").await;
    let names = Names::new("lagslot");
    // The broker lets this connector's producer write 5 kB/s while the
    // writers commit hundreds of rows a second. Kafka throttles by delaying
    // each response, so the drain rate follows the request size as much as
    // the quota: with 5-record batches walrelay drains a few records a
    // second — fewer than the writers commit even when they are slowed, as
    // while the incident's WAL is written below — and its lag keeps growing
    // until the slot is lost. (With 50-record batches it kept up with writers
    // slowed by a loaded machine, and the lag never reached 15 s or shrank
    // again before the slot was lost.) Kafka keeps acknowledging, slowly, as
    // it does for a connector that merely lags.
    let quota = ProduceQuota::set(&names.connector, 5_000);
    let client_id = format!(
        "[kafka.librdkafka]\n\"client.id\" = \"{}\"\n\"batch.num.messages\" = \"5\"\n",
        names.connector
    );
    let mut relay = RelayProcess::start(&relay_config(&db, &names, "", &client_id), &[]);
    relay.wait_log("streaming", START).await;
    let writers = Writers::start(&db);
    const LAG_MS: i64 = 15_000;
    let admin = pg_connect("postgres").await;
    let polls = std::sync::atomic::AtomicU32::new(0);
    wait_for(
        "the stored offset to lag its write by 15 s",
        Duration::from_secs(180),
        || async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let (_, out, err) = runbook::walrelay(&[
                "status",
                "--config",
                relay.config_path.to_str().unwrap(),
                "--json",
            ]);
            // Shown only if the wait times out: how the lag went.
            if polls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 20 == 0 {
                eprintln!("status: {out}{err}");
            }
            let status: serde_json::Value = serde_json::from_str(&out).ok()?;
            let s = &status["stored_offset"];
            let written = s["written_at_ms"].as_i64()?;
            let committed = s["committed_at_ms"].as_i64()?;
            (committed < written - LAG_MS).then_some(())
        },
    )
    .await;

    // The incident: while walrelay runs, far more WAL than the slot may
    // keep is written; a checkpoint invalidates the slot, and walrelay
    // stops, naming it.
    lose_slot(&db, &names, &admin).await;
    let log = relay.expect_exit(1, START);
    assert!(log.contains("is lost (wal_status = 'lost')"), "{log}");
    // The operator finds the cause (the quota) and lifts it.
    quota.lift();

    // What a filter on the write time would have missed: rows that
    // committed before `written_at − margin` and are not in Kafka.
    let stored = runbook::stored_offset(&relay.config_path);
    let written_at_ms = stored["written_at_ms"].as_i64().unwrap();
    let committed_at_ms = stored["committed_at_ms"].as_i64().unwrap();
    assert!(committed_at_ms < written_at_ms - LAG_MS, "{stored}");
    let in_kafka: std::collections::HashSet<String> =
        consume_to_end(&[&names.topic("order"), &names.topic("invoice")])
            .iter()
            .filter_map(|c| c.header_str("id"))
            .collect();
    let old_filter_misses: Vec<String> = db
        .client
        .query(
            "SELECT id::text FROM outbox \
             WHERE created_at < to_timestamp($1::bigint / 1000.0) - interval '2 seconds'",
            &[&written_at_ms],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|id| !in_kafka.contains(id))
        .collect();
    assert!(
        !old_filter_misses.is_empty(),
        "the scenario must hold rows a written_at filter misses"
    );
    eprintln!(
        "stored offset written {} ms after its commit; a written_at filter would miss {} rows",
        written_at_ms - committed_at_ms,
        old_filter_misses.len()
    );

    runbook::recover(&db, &names, &relay.config_path, writers, true, "2 seconds").await;
}

/// PostgreSQL 18: a snapshot's slot is inactive until the snapshot is in
/// Kafka, so `idle_replication_slot_timeout` can invalidate it before
/// streaming starts. With `mode = "when_needed"` walrelay would then take
/// the snapshot again, and lose its slot again, for ever. It refuses
/// instead, naming the setting and the fix; once the setting is off, the
/// next start takes the snapshot again and streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_snapshot_slot_lost_to_the_idle_timeout_is_not_retaken_in_a_loop() {
    require_kafka();
    let major: u32 = pg_major().parse().unwrap_or(18);
    if major < 18 {
        return; // the setting is PostgreSQL 18's
    }
    let _turn = SERVER_WIDE.lock().await;
    let db = TestDb::new("idleslot").await;
    db.create_outbox("outbox").await;
    db.client
        .batch_execute(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
             SELECT gen_random_uuid(), 'order', 'agg-' || g, 'Created', '{}'
             FROM generate_series(1, 20) g",
        )
        .await
        .unwrap();
    let names = Names::new("idleslot");
    // The snapshot is taken and stored `completed`; nothing streams from it.
    let snapshot = relay_config(&db, &names, "", "[snapshot]\nmode = \"initial_only\"\n");
    let mut relay = RelayProcess::start(&snapshot, &[]);
    relay.expect_exit(0, Duration::from_secs(120));

    // The incident: the slot stays inactive past the timeout, and a
    // checkpoint invalidates it.
    let admin = pg_connect("postgres").await;
    {
        let _timeout = SystemSetting::set("idle_replication_slot_timeout", "1s").await;
        wait_for(
            "the idle slot to be invalidated",
            Duration::from_secs(60),
            || async {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                admin.batch_execute("CHECKPOINT").await.unwrap();
                let reason: Option<String> = db
                    .client
                    .query_opt(
                        "SELECT invalidation_reason::text FROM pg_replication_slots \
                     WHERE slot_name = $1",
                        &[&names.slot],
                    )
                    .await
                    .unwrap()
                    .and_then(|r| r.get(0));
                (reason.as_deref() == Some("idle_timeout")).then_some(())
            },
        )
        .await;
        // With the timeout still on, `when_needed` refuses to go round again.
        let when_needed = snapshot.replace("initial_only", "when_needed");
        let path = relay.config_path.clone();
        std::fs::write(&path, &when_needed).unwrap();
        // The log is appended to: only this run's lines from here on.
        std::fs::write(&relay.log_path, "").unwrap();
        let mut refused = RelayProcess::start_with(&path, &[]);
        let log = refused.expect_exit(1, Duration::from_secs(120));
        assert!(
            log.contains("was invalidated by idle_replication_slot_timeout (1s)")
                && log.contains("pg_reload_conf"),
            "{log}"
        );
        assert!(
            !log.contains("created replication slot"),
            "the slot was not taken again:\n{log}"
        );
    }
    // The setting off (reset above): the next start takes the snapshot again.
    let mut again = RelayProcess::start_with(&relay.config_path, &[]);
    again.wait_log("taking a new snapshot", START).await;
    again.wait_log("streaming", START).await;
    assert!(again.stop().success(), "{}", again.log());
}
