//! Kafka going away: at start (walrelay waits and says so) and for 20 s
//! under load (walrelay waits, resumes, loses nothing). This file stops the
//! shared broker, so it holds a single test; cargo runs test files one at a
//! time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use support::*;

/// Starts the broker again even if the test fails half-way.
struct RestartKafka;
impl Drop for RestartKafka {
    fn drop(&mut self) {
        kafka_script("start");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waits_for_kafka_and_loses_nothing_across_a_20s_outage() {
    require_kafka();
    let db = TestDb::new("outage").await;
    db.create_outbox("outbox").await;
    let names = Names::new("outage");
    let _guard = RestartKafka;

    // 1. Kafka down at start: walrelay waits, says what for, then streams.
    kafka_script("stop");
    let mut relay = RelayProcess::start(&relay_config(&db, &names, "", ""), &[]);
    relay
        .wait_log("waiting for Kafka", Duration::from_secs(60))
        .await;
    assert!(relay.is_running());
    kafka_script("start");
    relay.wait_log("streaming", Duration::from_secs(120)).await;

    // 2. Kafka down for 20 s under load.
    let writer = tokio::spawn({
        let db_name = db.name.clone();
        async move { write_outbox_load(&db_name, 4, 6_000, 200, Duration::from_millis(20)).await }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    kafka_script("stop");
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(
        relay.is_running(),
        "walrelay must wait for Kafka, not exit:\n{}",
        relay.log()
    );
    kafka_script("start");
    writer.await.expect("writers");

    let rows = outbox_rows(&db).await;
    let consumed = consume(
        &[&names.topic("order"), &names.topic("invoice")],
        rows.len(),
        Duration::from_secs(240),
        Duration::from_secs(2),
    );
    verify_outbox_delivery(&names, &rows, &consumed);
    assert!(
        relay.log().contains("Kafka has not acknowledged"),
        "the stall is reported:\n{}",
        relay.log()
    );
    let end = db.current_wal_lsn().await;
    wait_for(
        "the slot to confirm everything after the outage",
        Duration::from_secs(60),
        || async { (db.confirmed_flush(&names.slot).await? >= end).then_some(()) },
    )
    .await;
    assert!(relay.stop().success(), "{}", relay.log());
}
