//! The relay under concurrent load, against the real services. CI runs this
//! file on every supported PostgreSQL major (14–18).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use support::*;

/// 20,000 outbox rows from 8 concurrent writers over 500 aggregates, 1–10
/// rows per transaction: every event arrives with the right topic, key, id
/// header and value, and per aggregate the partition order is commit order.
/// Afterwards the slot is confirmed exactly up to what Kafka holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_thousand_events_from_concurrent_writers() {
    require_kafka();
    let db = TestDb::new("matrix").await;
    db.create_outbox("outbox").await;
    let names = Names::new("matrix");
    let mut relay = RelayProcess::start(&relay_config(&db, &names, "", ""), &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;

    write_outbox_load(&db.name, 8, 20_000, 500, Duration::ZERO).await;
    let rows = outbox_rows(&db).await;
    assert_eq!(rows.len(), 20_000);
    let end = db.current_wal_lsn().await;

    let consumed = consume(
        &[&names.topic("order"), &names.topic("invoice")],
        rows.len(),
        Duration::from_secs(180),
        Duration::from_secs(1),
    );
    let duplicates = verify_outbox_delivery(&names, &rows, &consumed);
    assert_eq!(
        duplicates, 0,
        "no restart happened, so nothing may be sent twice"
    );

    // Once everything is acked, the slot is confirmed past the last commit.
    db.wait_confirmed(
        &names.slot,
        end,
        "the slot to confirm the whole load",
        Duration::from_secs(30),
    )
    .await;
    assert!(relay.is_running(), "walrelay exited:\n{}", relay.log());
    assert!(
        relay.stop().success(),
        "SIGTERM exits 0; log:\n{}",
        relay.log()
    );
    assert!(
        relay.log().contains("stopped; final position reported"),
        "{}",
        relay.log()
    );
}
