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
//! the broker-outage tests it runs in the background).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/runbook.rs"]
mod runbook;
mod support;

use std::time::Duration;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_slot_recovered_by_the_runbook_loses_nothing_while_writers_commit() {
    require_kafka();
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

    runbook::recover(&db, &names, &relay.config_path, writers, true).await;
}
