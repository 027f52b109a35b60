//! Heartbeats (`[heartbeat]`) against the real PostgreSQL and Kafka: a quiet
//! connector's heartbeats come back through its slot (metrics), land on the
//! heartbeat topic in Debezium's shape, and the slot keeps advancing while
//! only uncaptured tables change; a role that may not execute
//! `pg_logical_emit_message` is refused by `check` and `run` with the GRANT
//! this server needs, and that GRANT works.
//!
//! A heartbeat never lets the slot pass an unacknowledged record: here with
//! an outbox record held in the producer because its topic does not exist
//! yet (auto-creation off for this producer) while heartbeats keep coming
//! back; and in the unit tests of `relay::heartbeat`, which hold records in
//! flight at will.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::{Duration, Instant};

use support::*;

async fn sql(db: &TestDb, sql: &str) {
    db.client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The value of `name{connector="…"}` in a `/metrics` body.
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
}

/// Heartbeats on, nothing written to the outbox, other tables busy: the
/// heartbeats come back (counters, age, round trip), each one is published
/// as Debezium's heartbeat record, and the slot's confirmed position moves
/// past the WAL the other tables wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_connector_sees_its_heartbeats_and_publishes_them() {
    require_kafka();
    let db = TestDb::new("hbquiet").await;
    db.create_outbox("outbox").await;
    sql(
        &db,
        "CREATE TABLE busy (id bigserial PRIMARY KEY, v text); ALTER TABLE busy OWNER TO walrelay;",
    )
    .await;
    let names = Names::new("hbquiet");
    let listen = free_local_addr();
    let topic = format!("{}.heartbeats", names.connector);
    let config = relay_config(
        &db,
        &names,
        "",
        &format!(
            "[health]\nlisten = \"{listen}\"\n\
             [heartbeat]\ninterval = \"200ms\"\npublish = true\ntopic = \"{topic}\"\n"
        ),
    );
    let path = write_config(&config);
    let (code, report) = check(&path);
    assert_eq!(code, Some(0), "{report}");
    assert!(
        report.contains("heartbeat privilege") && report.contains("may execute"),
        "check reports the heartbeat privilege:\n{report}"
    );

    let mut relay = RelayProcess::start_with(&path, &[]);
    relay.wait_log("streaming", START).await;
    let metrics = || http_get(&listen, "/metrics");
    let received = wait_for("heartbeats to come back", Duration::from_secs(30), || {
        let m = metrics();
        async move {
            sample(&m, "walrelay_heartbeats_received_total")
                .filter(|n| *n >= 3.0)
                .map(|_| m)
        }
    })
    .await;
    assert!(
        sample(&received, "walrelay_heartbeats_sent_total").unwrap_or(0.0) >= 3.0,
        "{received}"
    );
    let age = sample(&received, "walrelay_heartbeat_age_seconds").expect("age once one came back");
    assert!(age < 10.0, "age {age}:\n{received}");
    let round_trip = sample(&received, "walrelay_heartbeat_round_trip_seconds")
        .expect("round trip once one came back");
    assert!((0.0..10.0).contains(&round_trip), "{received}");
    assert_eq!(
        sample(&received, "walrelay_heartbeat_write_errors_total"),
        Some(0.0)
    );

    // Only an uncaptured table changes: the slot still moves past it.
    for i in 0..20 {
        sql(&db, &format!("INSERT INTO busy (v) VALUES ('row {i}')")).await;
    }
    let written = db.current_wal_lsn().await;
    wait_for(
        "the slot to pass the uncaptured writes",
        Duration::from_secs(30),
        || async {
            db.confirmed_flush(&names.slot)
                .await
                .filter(|c| *c >= written)
        },
    )
    .await;
    // And the heartbeats keep coming.
    let before = sample(&metrics(), "walrelay_heartbeats_received_total").unwrap_or(0.0);
    wait_for("more heartbeats", Duration::from_secs(30), || {
        let m = metrics();
        async move {
            sample(&m, "walrelay_heartbeats_received_total").filter(|n| *n >= before + 2.0)
        }
    })
    .await;

    let records = consume(&[&topic], 3, Duration::from_secs(60), Duration::ZERO);
    assert!(records.len() >= 3, "{} heartbeat records", records.len());
    for r in &records {
        let key: serde_json::Value = serde_json::from_slice(r.key.as_deref().unwrap()).unwrap();
        assert_eq!(key, serde_json::json!({ "serverName": names.connector }));
        let value: serde_json::Value = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
        let ts = value["ts_ms"].as_i64().expect("ts_ms");
        assert!(ts > 1_700_000_000_000, "{value}");
        assert_eq!(value.as_object().map(|o| o.len()), Some(1), "{value}");
    }
    let outbox_topics = consume(
        &[&names.topic("order")],
        1,
        Duration::from_secs(2),
        Duration::ZERO,
    );
    assert!(
        outbox_topics.is_empty(),
        "nothing was written to the outbox"
    );
    assert!(relay.stop().success(), "{}", relay.log());
}

/// An outbox record waits in the producer for its topic (which this
/// producer may not auto-create, and which does not exist yet) while
/// heartbeats keep coming back and their own records are acknowledged: the
/// slot never passes the outbox transaction. Once the topic exists the
/// record is delivered and the slot moves past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_never_move_the_slot_past_an_unacknowledged_record() {
    require_kafka();
    let db = TestDb::new("hbinflight").await;
    db.create_outbox("outbox").await;
    let names = Names::new("hbinflight");
    let topic = names.topic("order");
    let heartbeat_topic = format!("{}.heartbeats", names.connector);
    create_topic(&heartbeat_topic).await;
    let listen = free_local_addr();
    let config = relay_config(
        &db,
        &names,
        "",
        &format!(
            "[health]\nlisten = \"{listen}\"\n[heartbeat]\ninterval = \"200ms\"\n\
             publish = true\ntopic = \"{heartbeat_topic}\"\n[snapshot]\nmode = \"no_data\"\n"
        ),
    );
    // After [kafka] linger: the producer waits for a missing topic instead of
    // having the broker create it.
    let config = config.replacen(
        "linger = \"2ms\"",
        "linger = \"2ms\"\nlibrdkafka = { \"allow.auto.create.topics\" = \"false\", \
         \"topic.metadata.propagation.max.ms\" = \"120000\" }",
        1,
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", START).await;
    let metric = |name: &str| sample(&http_get(&listen, "/metrics"), name);
    wait_for("a first heartbeat", Duration::from_secs(30), || async {
        metric("walrelay_heartbeats_received_total").filter(|n| *n >= 1.0)
    })
    .await;

    sql(
        &db,
        "INSERT INTO outbox VALUES ('00000000-0000-4000-8000-000000000001', 'order', 'a', \
         'Created', '{}')",
    )
    .await;
    // At or past the end of the outbox transaction's commit record.
    let committed = db.current_wal_lsn().await;
    let received = metric("walrelay_heartbeats_received_total").unwrap_or(0.0);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let confirmed = db.confirmed_flush(&names.slot).await.unwrap_or(0);
        assert!(
            confirmed < committed,
            "the slot passed the unacknowledged outbox record ({confirmed:X} >= \
             {committed:X}):\n{}",
            relay.log()
        );
        let now = metric("walrelay_heartbeats_received_total").unwrap_or(0.0);
        if now >= received + 10.0 {
            break;
        }
        assert!(Instant::now() < deadline, "heartbeats stopped coming back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        metric("walrelay_in_flight_records").unwrap_or(0.0) >= 1.0,
        "the outbox record is still in flight:\n{}",
        relay.log()
    );
    assert!(relay.is_running(), "{}", relay.log());
    // The heartbeats' own records were acknowledged meanwhile.
    let beats = consume(
        &[&heartbeat_topic],
        5,
        Duration::from_secs(30),
        Duration::ZERO,
    );
    assert!(beats.len() >= 5, "{} heartbeat records", beats.len());
    let confirmed = db.confirmed_flush(&names.slot).await.unwrap_or(0);
    assert!(confirmed < committed, "{confirmed:X} >= {committed:X}");

    create_topic(&topic).await;
    wait_for(
        "the slot to pass the delivered record",
        Duration::from_secs(60),
        || async {
            db.confirmed_flush(&names.slot)
                .await
                .filter(|c| *c >= committed)
        },
    )
    .await;
    let events = consume(&[&topic], 1, Duration::from_secs(30), Duration::ZERO);
    assert_eq!(events.len(), 1, "the outbox record was delivered once");
    assert!(relay.stop().success(), "{}", relay.log());
}

/// This server's text variant of `pg_logical_emit_message`, as regprocedure
/// text (its signature gained `flush boolean` in 17).
async fn emit_function(db: &TestDb) -> String {
    db.client
        .query_one(
            "SELECT p.oid::regprocedure::text FROM pg_proc p \
             WHERE proname = 'pg_logical_emit_message' AND proargtypes[2] = 'text'::regtype",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Heartbeat writes that start failing while the connector runs (EXECUTE
/// revoked) are logged once, counted, retried, and never stop the connector;
/// once writing works again it says so once and heartbeats come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_heartbeat_writes_are_logged_once_and_never_stop_the_connector() {
    require_kafka();
    let db = TestDb::new("hbfail").await;
    db.create_outbox("outbox").await;
    let function = emit_function(&db).await;
    let names = Names::new("hbfail");
    let listen = free_local_addr();
    let config = relay_config(
        &db,
        &names,
        "",
        &format!(
            "[health]\nlisten = \"{listen}\"\n[heartbeat]\ninterval = \"200ms\"\n\
             [snapshot]\nmode = \"no_data\"\n"
        ),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", START).await;
    let metric = |name: &'static str| {
        let listen = listen.clone();
        move || {
            let value = sample(&http_get(&listen, "/metrics"), name);
            async move { value }
        }
    };
    let received = metric("walrelay_heartbeats_received_total");
    let errors = metric("walrelay_heartbeat_write_errors_total");
    wait_for("a first heartbeat", Duration::from_secs(30), || {
        let f = received();
        async move { f.await.filter(|n| *n >= 1.0) }
    })
    .await;

    sql(
        &db,
        &format!("REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC"),
    )
    .await;
    wait_for("failing heartbeat writes", Duration::from_secs(30), || {
        let f = errors();
        async move { f.await.filter(|n| *n >= 5.0) }
    })
    .await;
    assert!(relay.is_running(), "{}", relay.log());
    let log = relay.log();
    assert_eq!(
        log.matches("cannot write a heartbeat").count(),
        1,
        "logged once per state change, not per interval:\n{log}"
    );
    assert!(log.contains("permission denied"), "{log}");
    assert!(
        http_get(&listen, "/healthz").starts_with("HTTP/1.0 200"),
        "heartbeats alone do not make the connector unhealthy"
    );

    sql(
        &db,
        &format!("GRANT EXECUTE ON FUNCTION {function} TO PUBLIC"),
    )
    .await;
    relay
        .wait_log("heartbeats are written again", Duration::from_secs(30))
        .await;
    let before = received().await.unwrap_or(0.0);
    wait_for(
        "heartbeats to come back again",
        Duration::from_secs(30),
        || {
            let f = received();
            async move { f.await.filter(|n| *n > before) }
        },
    )
    .await;
    assert_eq!(
        relay.log().matches("cannot write a heartbeat").count(),
        1,
        "{}",
        relay.log()
    );
    assert!(relay.stop().success(), "{}", relay.log());
}

/// With `pg_logical_emit_message` revoked from PUBLIC (in this database
/// only: `pg_proc` is per database), `check` fails and `run` refuses with the
/// GRANT for this server's signature; running that GRANT makes `check` pass.
/// Without heartbeats, incremental snapshots then take read-only watermarks
/// (`watermarks = "auto"`), and `"messages"` is refused with the same GRANT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_execute_grant_is_named_with_the_grant_to_run() {
    require_kafka();
    let db = TestDb::new("hbgrant").await;
    db.create_outbox("outbox").await;
    let function = emit_function(&db).await;
    let major: u32 = pg_major().parse().unwrap();
    let expected_args = if major >= 17 {
        "(boolean,text,text,boolean)"
    } else {
        "(boolean,text,text)"
    };
    assert_eq!(function, format!("pg_logical_emit_message{expected_args}"));
    sql(
        &db,
        &format!("REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC"),
    )
    .await;
    let names = Names::new("hbgrant");
    let config = relay_config(
        &db,
        &names,
        "",
        "[heartbeat]\ninterval = \"1s\"\n[snapshot]\nmode = \"no_data\"\n",
    );
    let path = write_config(&config);
    let grant = format!("GRANT EXECUTE ON FUNCTION pg_catalog.{function} TO \"walrelay\";");
    let (code, report) = check(&path);
    assert_eq!(code, Some(1), "{report}");
    assert!(
        failures(&report)
            .iter()
            .any(|f| f.contains("may not execute") && f.contains(&function)),
        "{report}"
    );
    assert!(report.contains(&grant), "check names {grant:?}:\n{report}");
    run_refuses(&path, &grant);

    // Without heartbeats the function is not needed.
    let off = write_config(&relay_config(
        &db,
        &names,
        "",
        "[snapshot]\nmode = \"no_data\"\n",
    ));
    let (code, report) = check(&off);
    assert_eq!(code, Some(0), "{report}");
    assert!(!report.contains("heartbeat"), "{report}");
    // Incremental snapshots then take read-only watermarks (`auto`)...
    assert!(
        report.contains("read-only watermarks: role walrelay may not execute"),
        "{report}"
    );
    // ... unless told to write watermarks, which needs the same GRANT.
    let messages = write_config(&relay_config(
        &db,
        &names,
        "",
        "[snapshot]\nmode = \"no_data\"\nwatermarks = \"messages\"\n",
    ));
    let (code, report) = check(&messages);
    assert_eq!(code, Some(1), "{report}");
    assert!(
        failures(&report)
            .iter()
            .any(|f| f.contains("[snapshot] watermarks = \"messages\"")),
        "{report}"
    );
    assert!(report.contains(&grant), "check names {grant:?}:\n{report}");
    run_refuses(&messages, &grant);

    // The statement check printed is the fix.
    sql(&db, &grant).await;
    let (code, report) = check(&path);
    assert_eq!(code, Some(0), "{report}");
    let (code, report) = check(&off);
    assert_eq!(code, Some(0), "{report}");
    assert!(
        report.contains("watermarks as logical messages"),
        "{report}"
    );
}
