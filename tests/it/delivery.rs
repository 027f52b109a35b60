//! How the relay stops when Kafka refuses a record or acknowledges slowly:
//! per-aggregate order, the confirmed position, and the walsender kept alive.
//!
//! Kafka's behaviour is shaped per test on the real broker (a topic with a
//! small `max.message.bytes`, a producer that lingers), never by stopping
//! the shared broker.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::{Duration, Instant};

use support::*;

async fn exec(db: &TestDb, sql: &str) {
    db.client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// A config whose graceful stop may wait long for Kafka.
fn config_with_flush_timeout(db: &TestDb, names: &Names, timeout: &str) -> String {
    let config = relay_config(db, names, "", "");
    assert!(config.contains("shutdown_flush_timeout = \"10s\""));
    config.replace(
        "shutdown_flush_timeout = \"10s\"",
        &format!("shutdown_flush_timeout = \"{timeout}\""),
    )
}

fn outbox_insert(id: &str, aggregate: &str, payload_sql: &str) -> String {
    format!("INSERT INTO outbox VALUES ('{id}', 'order', '{aggregate}', 'Changed', {payload_sql})")
}

fn event_id(i: u32) -> String {
    format!("00000000-0000-4000-8000-{i:012}")
}

/// Kafka refuses one record for good (larger than the topic accepts) while
/// later events of the same aggregate are on their way: the connector stops
/// at once (not after its flush timeout), the slot confirms exactly what
/// Kafka acknowledged before the refused event, and once the cause is fixed
/// a restart sends everything from the refused event on, in commit order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_record_stops_at_once_and_is_resent_first_after_the_fix() {
    require_kafka();
    let db = TestDb::new("refused").await;
    db.create_outbox("outbox").await;
    let names = Names::new("refused");
    let topic = names.topic("order");
    create_topic_with_config(&topic, &[("max.message.bytes", "20000")]).await;
    // Long enough that waiting it out would fail the exit deadline below.
    let mut relay = RelayProcess::start(&config_with_flush_timeout(&db, &names, "300s"), &[]);
    relay.wait_log("streaming", START).await;

    exec(&db, &outbox_insert(&event_id(0), "a", "'{}'")).await;
    let after_first = db.current_wal_lsn().await;
    wait_for("the first event to be confirmed", START, || async {
        (db.confirmed_flush(&names.slot).await.unwrap_or(0) >= after_first).then_some(())
    })
    .await;

    let refused = event_id(1);
    // ~64 KB of hex digits: over the topic's limit even compressed, under
    // the producer's own 1 MB limit, so it is the broker that refuses it.
    exec(
        &db,
        &outbox_insert(
            &refused,
            "a",
            "jsonb_build_object('blob', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 2000) g))",
        ),
    )
    .await;
    for i in 2..40 {
        exec(&db, &outbox_insert(&event_id(i), "a", "'{}'")).await;
    }

    let started = Instant::now();
    let log = relay.expect_exit(1, Duration::from_secs(120));
    assert!(
        log.contains(&refused),
        "the error names the refused event: {log}"
    );
    assert!(
        log.contains("stopped before the failing change"),
        "the stop says where it stopped: {log}"
    );
    assert!(
        !log.contains("shutdown flush timeout reached"),
        "the stop waited for a record that will never be acknowledged: {log}"
    );
    eprintln!("stopped {:?} after the refused event", started.elapsed());

    let consumed = consume(
        &[&topic],
        1,
        Duration::from_secs(20),
        Duration::from_secs(3),
    );
    let first = consumed
        .iter()
        .find(|c| c.header_str("id") == Some(event_id(0)))
        .expect("the event before the refused one is in Kafka");
    let first_commit = parse_lsn(&first.header_str("walrelay.lsn").unwrap());
    let refused_commit = {
        let at = log.find("transaction committed at ").expect("lsn in error");
        let rest = &log[at + "transaction committed at ".len()..];
        parse_lsn(&rest[..rest.find(')').unwrap()])
    };
    let confirmed = db.confirmed_flush(&names.slot).await.unwrap();
    assert!(
        confirmed > first_commit && confirmed <= refused_commit,
        "the slot confirms exactly the acknowledged prefix: {confirmed:X} should be past          {first_commit:X} and not past the refused transaction at {refused_commit:X}"
    );
    // Records already on the wire when the refusal came back may have been
    // written (docs/delivery.md says why); whatever was still queued is not.
    let written_after: Vec<String> = consumed
        .iter()
        .filter_map(|c| c.header_str("id"))
        .filter(|id| *id != event_id(0))
        .collect();
    eprintln!("written after the refused event before it was fixed: {written_after:?}");
    assert!(
        !written_after.contains(&refused),
        "the refused event cannot be in Kafka"
    );

    // The operator fixes the cause; a restart sends everything from the
    // refused event on, in commit order.
    let end_before = consumed.iter().map(|c| c.offset).max().unwrap_or(-1);
    set_topic_config(&topic, "max.message.bytes", "1048588").await;
    let mut fixed = RelayProcess::start_with(&relay.config_path, &[]);
    let all = consume(&[&topic], 40, START, Duration::from_secs(1));
    let mut resent: Vec<String> = Vec::new();
    for c in all.iter().filter(|c| c.offset > end_before) {
        let id = c.header_str("id").unwrap();
        if !resent.contains(&id) {
            resent.push(id);
        }
    }
    let expected: Vec<String> = (1..40).map(event_id).collect();
    assert_eq!(
        resent, expected,
        "after the fix every event from the refused one on arrives, in commit order"
    );
    assert!(fixed.stop().success());
}

/// A graceful stop that waits longer for Kafka than PostgreSQL's
/// `wal_sender_timeout` (10 s on the dev cluster) keeps answering the
/// walsender, so the final position still reaches the slot. Kafka is made
/// slow by the producer itself: a 12 s linger holds the last record and then
/// the final offset write, so the stop waits about 24 s for Kafka.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_flush_at_shutdown_keeps_the_walsender_and_reports_the_final_position() {
    require_kafka();
    let db = TestDb::new("slowflush").await;
    db.create_outbox("outbox").await;
    let names = Names::new("slowflush");
    let topic = names.topic("order");
    let addr = free_local_addr();
    let config = config_with_flush_timeout(&db, &names, "90s");
    assert!(config.contains("linger = \"2ms\""));
    let config = format!(
        "{}\n[health]\nlisten = \"{addr}\"\n",
        config.replace("linger = \"2ms\"", "linger = \"12s\"")
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", START).await;

    exec(&db, &outbox_insert(&event_id(1), "a", "'{}'")).await;
    let published = format!(
        "walrelay_records_published_total{{connector=\"{}\"}} 1\n",
        names.connector
    );
    wait_for("the event to be handed to Kafka", START, || {
        let handed_over = http_get(&addr, "/metrics").contains(&published);
        async move { handed_over.then_some(()) }
    })
    .await;

    relay.signal("TERM");
    // Outlast wal_sender_timeout: a silent client is dropped by then.
    let stop_sent = Instant::now();
    while stop_sent.elapsed() < Duration::from_secs(14) {
        assert!(
            relay.is_running(),
            "walrelay stopped before Kafka acknowledged: {}",
            relay.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let active: bool = db
        .client
        .query_one(
            "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
            &[&names.slot],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        active,
        "the walsender dropped walrelay while it was flushing: {}",
        relay.log()
    );

    let status = relay
        .wait_exit(Duration::from_secs(75))
        .unwrap_or_else(|| panic!("walrelay did not stop: {}", relay.log()));
    assert!(status.success(), "exit status {status:?}: {}", relay.log());
    let consumed = consume(
        &[&topic],
        1,
        Duration::from_secs(20),
        Duration::from_millis(500),
    );
    assert_eq!(consumed.len(), 1, "{consumed:?}");
    let commit = parse_lsn(&consumed[0].header_str("walrelay.lsn").unwrap());
    let confirmed = db.confirmed_flush(&names.slot).await.unwrap();
    assert!(
        confirmed > commit,
        "the final position {confirmed:X} did not reach the slot (the event commits at {commit:X}): {}",
        relay.log()
    );
}

/// The metric `name`'s value for this connector, if /metrics has it.
fn metric(addr: &str, name: &str, connector: &str) -> Option<u64> {
    let prefix = format!("{name}{{connector=\"{connector}\"}} ");
    http_get(addr, "/metrics")
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).and_then(|v| v.trim().parse().ok()))
}

/// walrelay behind its commits sends through the producer that lingers
/// `linger_while_behind`, and through the prompt one once caught up again
/// (`src/relay/pace.rs`). Writers run the whole time; walrelay is paused
/// (SIGSTOP, 2 s) three times so that it falls behind and catches up, and killed
/// -9 once right after switching to the second producer. Every switch is
/// counted, and every event arrives, identical when re-sent, in commit order
/// per aggregate — across every switch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn falling_behind_and_catching_up_switch_producers_without_reordering() {
    require_kafka();
    let db = TestDb::new("pace").await;
    db.create_outbox("outbox").await;
    let names = Names::new("pace");
    let addr = free_local_addr();
    let config = relay_config(&db, &names, "", "");
    assert!(config.contains("linger = \"2ms\""));
    let config = format!(
        "{}\n[health]\nlisten = \"{addr}\"\n",
        config.replace(
            "linger = \"2ms\"",
            "linger = \"0ms\"\nlinger_while_behind = \"100ms\""
        )
    );
    let mut relay = RelayProcess::start(&config, &[]);
    let config_path = relay.config_path.clone();
    relay.wait_log("streaming", START).await;
    let writers = Writers::start(&db);
    let connector = names.connector.clone();
    let switches = |addr: &str| metric(addr, "walrelay_kafka_producer_switches_total", &connector);
    let behind = |addr: &str| metric(addr, "walrelay_kafka_producer_behind", &connector);
    // Streaming first: walrelay estimates the clock difference to the
    // server from the transactions it reads (a paused reader's first reads
    // alone would pass for a clock difference).
    let published = |addr: &str| metric(addr, "walrelay_records_published_total", &connector);
    wait_for("events streamed before the first pause", START, || {
        let some = published(&addr).is_some_and(|n| n >= 100);
        async move { some.then_some(()) }
    })
    .await;
    let mut seen = 0;
    for round in 0..3 {
        relay.signal("STOP");
        tokio::time::sleep(Duration::from_millis(2000)).await;
        relay.signal("CONT");
        // Behind (a switch to the second producer), then caught up (back).
        let expected = seen + 2;
        seen = wait_for(
            &format!("round {round}: a switch to the second producer and back"),
            START,
            || {
                let n = switches(&addr).filter(|n| *n >= expected);
                let prompt = behind(&addr) == Some(0);
                async move { n.filter(|_| prompt) }
            },
        )
        .await;
    }
    // Killed -9 as soon as it switched to the second producer again (how
    // long it stays there is how fast it catches up: not waited for).
    relay.signal("STOP");
    tokio::time::sleep(Duration::from_millis(2000)).await;
    relay.signal("CONT");
    let expected = seen + 1;
    wait_for("a switch to the second producer", START, || {
        let switched = switches(&addr).is_some_and(|n| n >= expected);
        async move { switched.then_some(()) }
    })
    .await;
    relay.kill9();
    let mut relay = RelayProcess::start_with(&config_path, &[]);
    relay.wait_log("streaming", START).await;
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
    eprintln!("{seen} switches before the kill; {duplicates} identical re-sends after it");
    relay.stop();
}
