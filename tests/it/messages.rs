//! `[[message]]`: transactional logical decoding messages
//! (`pg_logical_emit_message(true, prefix, payload)`) routed to Kafka by the
//! real binary against the real services — records of their transaction,
//! interleaved with its outbox rows, identical when re-sent after `kill -9`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use support::*;

/// The relay's config: the outbox, an `orders` route keyed by a payload
/// field with a header, and an `audit.*` pattern keyed by the prefix.
fn config(db: &TestDb, names: &Names, kafka_extra: &str) -> String {
    relay_config(
        db,
        names,
        "",
        &format!(
            r#"
[[message]]
prefix = "orders"
topic = "{base}.msg.{{type}}"
key_field = "order_id"
header_fields = ["type"]

[[message]]
prefix = "audit.*"
topic = "{base}.audit"
"#,
            base = names.topic_prefix
        ),
    )
    .replace(
        "linger = \"2ms\"",
        &format!("linger = \"2ms\"\n{kafka_extra}"),
    )
}

fn header(c: &Consumed, name: &str) -> String {
    c.header_str(name)
        .unwrap_or_else(|| panic!("record on {} lacks header {name}: {c:?}", c.topic))
}

/// `(commit LSN, index)` of a record's `walrelay.event_id`.
fn position(c: &Consumed) -> (String, u64) {
    let id = header(c, "walrelay.event_id");
    let (lsn, index) = id.rsplit_once(':').expect("lsn:index");
    (lsn.to_owned(), index.parse().expect("index"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_become_records_of_their_transaction_beside_its_outbox_rows() {
    require_kafka();
    let db = TestDb::new("messages").await;
    db.create_outbox("outbox").await;
    let names = Names::new("messages");
    let mut relay = RelayProcess::start(&config(&db, &names, ""), &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    // `check` lists the routes.
    let (_, report) = check(&relay.config_path);
    for line in [
        format!(
            "message prefix orders: transactional messages to topic {}.msg.{{type}}, key = payload field order_id, headers from type",
            names.topic_prefix
        ),
        format!(
            "message prefix audit.*: transactional messages to topic {}.audit, key = the prefix",
            names.topic_prefix
        ),
    ] {
        assert!(report.contains(&line), "{line:?} not in:\n{report}");
    }

    // A non-transactional message with a routed prefix: ignored, warned.
    db.client
        .batch_execute(
            r#"SELECT pg_logical_emit_message(false, 'orders', '{"type":"Lost","order_id":"x"}')"#,
        )
        .await
        .unwrap();
    // A rolled-back transaction's message is never decoded.
    db.client
        .batch_execute(
            r#"BEGIN;
               SELECT pg_logical_emit_message(true, 'orders', '{"type":"RolledBack","order_id":"r"}');
               ROLLBACK;"#,
        )
        .await
        .unwrap();
    // One transaction: row, message, message of another route, row, message;
    // and a message no section routes (it still takes an index).
    db.client
        .batch_execute(
            r#"BEGIN;
               INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
                 VALUES ('00000000-0000-0000-0000-000000000001', 'order', '7', 'OrderCreated', '{"n":1}');
               SELECT pg_logical_emit_message(true, 'orders', '{"type":"OrderPaid","order_id":"7","amount":10}');
               SELECT pg_logical_emit_message(true, 'audit.login', 'user 5 logged in');
               SELECT pg_logical_emit_message(true, 'unrouted', 'ignored');
               INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
                 VALUES ('00000000-0000-0000-0000-000000000002', 'order', '7', 'OrderShipped', '{"n":2}');
               SELECT pg_logical_emit_message(true, 'orders', '{"type":"OrderPaid","order_id":"8","amount":3}');
               COMMIT;"#,
        )
        .await
        .unwrap();

    let paid = format!("{}.msg.OrderPaid", names.topic_prefix);
    let audit = format!("{}.audit", names.topic_prefix);
    let outbox = names.topic("order");
    let lost = format!("{}.msg.Lost", names.topic_prefix);
    let rolled_back = format!("{}.msg.RolledBack", names.topic_prefix);
    let topics = [
        paid.as_str(),
        audit.as_str(),
        outbox.as_str(),
        lost.as_str(),
        rolled_back.as_str(),
    ];
    let consumed = consume(&topics, 5, Duration::from_secs(60), Duration::from_secs(1));
    relay
        .wait_log(
            "non-transactional logical decoding message",
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(consumed.len(), 5, "{consumed:#?}");
    let on = |t: &str| -> Vec<&Consumed> { consumed.iter().filter(|c| c.topic == t).collect() };
    let (rows, paid_records, audit_records) = (on(&outbox), on(&paid), on(&audit));
    assert_eq!(
        (rows.len(), paid_records.len(), audit_records.len()),
        (2, 2, 1)
    );

    // All five share the transaction's commit LSN; the messages carry
    // `<commit LSN>:<index>` with the index each has in the transaction.
    let commit = header(rows[0], "walrelay.lsn");
    for c in &consumed {
        assert_eq!(header(c, "walrelay.lsn"), commit, "{c:?}");
    }
    let mut paid_records = paid_records;
    paid_records.sort_by_key(|c| position(c).1);
    let (m1, m2, a) = (paid_records[0], paid_records[1], audit_records[0]);
    assert_eq!(position(m1), (commit.clone(), 1));
    assert_eq!(position(a), (commit.clone(), 2));
    assert_eq!(
        position(m2),
        (commit.clone(), 5),
        "the unrouted message took index 3"
    );

    assert_eq!(m1.key.as_deref(), Some(&b"7"[..]));
    assert_eq!(
        m1.value.as_deref(),
        Some(&br#"{"type":"OrderPaid","order_id":"7","amount":10}"#[..])
    );
    assert_eq!(header(m1, "type"), "OrderPaid");
    assert_eq!(header(m1, "walrelay.prefix"), "orders");
    assert_eq!(m2.key.as_deref(), Some(&b"8"[..]));
    assert_eq!(a.key.as_deref(), Some(&b"audit.login"[..]));
    assert_eq!(a.value.as_deref(), Some(&b"user 5 logged in"[..]));
    assert_eq!(header(a, "walrelay.prefix"), "audit.login");
    assert!(a.header("type").is_none());

    // Per key order: the outbox rows of aggregate 7 keep their order, and
    // the message keyed 7 lands on the same partition as they do.
    let mut row_ids: Vec<(i64, String)> =
        rows.iter().map(|c| (c.offset, header(c, "id"))).collect();
    row_ids.sort();
    assert_eq!(
        row_ids
            .iter()
            .map(|(_, id)| id.as_str())
            .collect::<Vec<_>>(),
        [
            "00000000-0000-0000-0000-000000000001",
            "00000000-0000-0000-0000-000000000002"
        ]
    );
    let log = relay.log();
    assert!(
        log.contains("\"orders\""),
        "the warning names the prefix: {log}"
    );
    assert_eq!(
        log.matches("non-transactional logical decoding message")
            .count(),
        1,
        "one warning per prefix per session"
    );
    relay.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_transaction_re_sends_identical_message_records() {
    require_kafka();
    let db = TestDb::new("messages_kill").await;
    db.create_outbox("outbox").await;
    let names = Names::new("messages_kill");
    // One record in flight at a time: the kill lands mid-transaction.
    let mut relay = RelayProcess::start(&config(&db, &names, "max_in_flight_records = 1"), &[]);
    let config_path = relay.config_path.clone();
    relay.wait_log("streaming", Duration::from_secs(60)).await;

    const N: usize = 1000;
    let commit_lsn = {
        db.client.batch_execute("BEGIN").await.unwrap();
        for i in 0..N {
            db.client
                .execute(
                    "SELECT pg_logical_emit_message(true, 'orders', $1::text)",
                    &[&format!(
                        r#"{{"type":"Bulk","order_id":"k{}","seq":{i}}}"#,
                        i % 3
                    )],
                )
                .await
                .unwrap();
        }
        db.client.batch_execute("COMMIT").await.unwrap();
        db.current_wal_lsn().await
    };
    let topic = format!("{}.msg.Bulk", names.topic_prefix);
    wait_for("some records in Kafka", Duration::from_secs(60), || async {
        (consume_to_end(&[&topic]).len() >= 20).then_some(())
    })
    .await;
    relay.kill9();
    let before_restart = consume_to_end(&[&topic]);
    let confirmed = db.confirmed_flush(&names.slot).await.expect("slot");
    assert!(
        before_restart.len() < N && confirmed < commit_lsn,
        "the kill was meant to land mid-transaction: {} of {N} records, slot at {confirmed:x}",
        before_restart.len()
    );

    let mut relay = RelayProcess::start_with(&config_path, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    let all = wait_for(
        "every message in Kafka",
        Duration::from_secs(90),
        || async {
            let all = consume_to_end(&[&topic]);
            let ids: std::collections::HashSet<String> =
                all.iter().map(|c| header(c, "walrelay.event_id")).collect();
            (ids.len() == N).then_some(all)
        },
    )
    .await;
    relay.stop();

    // Every event id names one record for good: its copies are identical.
    let mut first: HashMap<String, &Consumed> = HashMap::new();
    let mut duplicates = 0;
    for c in &all {
        let id = header(c, "walrelay.event_id");
        match first.get(&id) {
            None => {
                first.insert(id, c);
            }
            Some(f) => {
                duplicates += 1;
                assert_eq!(
                    (&f.key, &f.value, &f.headers, f.partition),
                    (&c.key, &c.value, &c.headers, c.partition),
                    "re-sent {id} differs"
                );
            }
        }
    }
    assert!(
        duplicates >= before_restart.len(),
        "the restart re-sends the whole unconfirmed transaction ({} before the kill, {duplicates} duplicates)",
        before_restart.len()
    );
    // Index i is message i; per key, Kafka holds them in order.
    let mut per_key: HashMap<Vec<u8>, Vec<u64>> = HashMap::new();
    let mut sorted: Vec<&Consumed> = all.iter().collect();
    sorted.sort_by_key(|c| (c.partition, c.offset));
    for c in sorted {
        let (_, index) = position(c);
        let v: serde_json::Value = serde_json::from_slice(c.value.as_deref().unwrap()).unwrap();
        assert_eq!(
            v["seq"].as_u64(),
            Some(index),
            "index = the message's place"
        );
        per_key
            .entry(c.key.clone().unwrap())
            .or_default()
            .push(index);
    }
    for (key, indices) in per_key {
        // Increasing, but for one step back where the re-sent tail starts.
        let steps_back = indices.windows(2).filter(|w| w[1] <= w[0]).count();
        assert!(
            steps_back <= 1,
            "key {}: out of order beyond the one re-sent tail: {indices:?}",
            String::from_utf8_lossy(&key)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_cannot_be_routed_stops_the_connector_naming_it() {
    require_kafka();
    let db = TestDb::new("messages_bad").await;
    db.create_outbox("outbox").await;
    let names = Names::new("messages_bad");
    let mut relay = RelayProcess::start(&config(&db, &names, ""), &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    db.client
        .batch_execute(
            r#"BEGIN;
               SELECT pg_logical_emit_message(true, 'orders', '{"type":"OrderPaid","secret":"S3CRET"}');
               COMMIT;"#,
        )
        .await
        .unwrap();
    let committed = db.current_wal_lsn().await;
    let log = relay.expect_exit(1, Duration::from_secs(60));
    for needle in [
        "prefix \"orders\"",
        "payload field order_id",
        "needed for the key",
        "transaction ends at",
        "pg_replication_slot_advance",
    ] {
        assert!(log.contains(needle), "{needle:?} not in: {log}");
    }
    assert!(!log.contains("S3CRET"), "the payload leaked into the log");
    let confirmed = db.confirmed_flush(&names.slot).await.expect("slot");
    assert!(
        confirmed < committed,
        "the slot moved past the message: {confirmed:x} >= {committed:x}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_commits_a_transactions_messages_with_it_and_only_once() {
    require_kafka();
    let db = TestDb::new("messages_eos").await;
    db.create_outbox("outbox").await;
    let names = Names::new("messages_eos");
    let mut relay = RelayProcess::start(
        &config(
            &db,
            &names,
            "max_in_flight_records = 1\ndelivery = \"exactly_once\"",
        ),
        &[],
    );
    let config_path = relay.config_path.clone();
    relay.wait_log("streaming", Duration::from_secs(60)).await;

    const N: usize = 300;
    db.client.batch_execute("BEGIN").await.unwrap();
    for i in 0..N {
        if i % 100 == 0 {
            db.client
                .batch_execute(&format!(
                    "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
                     VALUES (gen_random_uuid(), 'order', 'k', 'Row', '{{\"seq\":{i}}}')"
                ))
                .await
                .unwrap();
        }
        db.client
            .execute(
                "SELECT pg_logical_emit_message(true, 'orders', $1::text)",
                &[&format!(r#"{{"type":"Bulk","order_id":"k","seq":{i}}}"#)],
            )
            .await
            .unwrap();
    }
    db.client.batch_execute("COMMIT").await.unwrap();
    let bulk = format!("{}.msg.Bulk", names.topic_prefix);
    let rows = names.topic("order");
    let topics = [bulk.as_str(), rows.as_str()];
    // Some records are in Kafka, in the open Kafka transaction.
    uncommitted_records(&bulk, 20, Duration::from_secs(60));
    relay.kill9();
    assert!(
        consume_committed(&topics).is_empty(),
        "a read_committed consumer sees nothing of a PostgreSQL transaction that is not all in Kafka"
    );

    let mut relay = RelayProcess::start_with(&config_path, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    let committed = wait_for(
        "the transaction committed",
        Duration::from_secs(90),
        || async {
            let c = consume_committed(&topics);
            (c.len() >= N + 3).then_some(c)
        },
    )
    .await;
    relay.stop();
    assert_eq!(
        committed.len(),
        N + 3,
        "each record once: {}",
        committed.len()
    );
    let ids: std::collections::HashSet<String> = committed
        .iter()
        .filter(|c| c.topic == bulk)
        .map(|c| header(c, "walrelay.event_id"))
        .collect();
    assert_eq!(ids.len(), N);
}

/// Waits until `n` records of `topic` are readable by a `read_uncommitted`
/// consumer (records of an open Kafka transaction count).
fn uncommitted_records(topic: &str, n: usize, timeout: Duration) {
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", unique("uncommitted_reader"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_uncommitted")
        .set("topic.metadata.refresh.interval.ms", "500")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let deadline = std::time::Instant::now() + timeout;
    let mut seen = 0;
    while seen < n {
        assert!(
            std::time::Instant::now() < deadline,
            "only {seen} of {n} records of {topic} after {timeout:?}"
        );
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(100)) {
            seen += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_dead_letter_topic_an_unroutable_message_goes_there_in_its_place() {
    require_kafka();
    let db = TestDb::new("messages_dlq").await;
    db.create_outbox("outbox").await;
    let names = Names::new("messages_dlq");
    let dlq = format!("{}.dlq", names.topic_prefix);
    let config = config(&db, &names, "") + &format!("\n[dead_letter]\ntopic = \"{dlq}\"\n");
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    db.client
        .batch_execute(
            r#"BEGIN;
               SELECT pg_logical_emit_message(true, 'orders', '{"type":"OrderPaid"}');
               SELECT pg_logical_emit_message(true, 'orders', '{"type":"OrderPaid","order_id":"9"}');
               COMMIT;"#,
        )
        .await
        .unwrap();
    let paid = format!("{}.msg.OrderPaid", names.topic_prefix);
    let got = consume(
        &[&dlq, &paid],
        2,
        Duration::from_secs(60),
        Duration::from_secs(1),
    );
    assert_eq!(got.len(), 2, "{got:#?}");
    let dead = got.iter().find(|c| c.topic == dlq).expect("a dead letter");
    let good = got
        .iter()
        .find(|c| c.topic == paid)
        .expect("the routed message");
    assert_eq!(dead.value.as_deref(), Some(&br#"{"type":"OrderPaid"}"#[..]));
    assert_eq!(
        header(dead, "walrelay.dead_letter.reason"),
        "null_value",
        "{dead:?}"
    );
    assert!(header(dead, "walrelay.dead_letter.error").contains("payload field order_id"));
    assert_eq!(
        dead.key.as_deref(),
        Some(header(dead, "walrelay.event_id").as_bytes()),
        "no key of its own: keyed by its event id"
    );
    let (lsn, index) = position(dead);
    assert_eq!((lsn.clone(), index), (position(good).0, 0));
    assert_eq!(position(good), (lsn, 1));
    assert!(relay.is_running(), "the connector goes on");
    relay.stop();
}

/// A config with only a `[[message]]` section (no outbox, no table): the
/// `load` prefix keyed by the payload's `key` (see support::message_load).
fn messages_only_config(db: &TestDb, names: &Names, postgres_extra: &str) -> String {
    connector_config(
        db,
        names,
        &format!(
            "[[message]]\nprefix = \"load\"\ntopic = \"{}.load\"\nkey_field = \"key\"\n",
            names.topic_prefix
        ),
    )
    .replace(
        "status_interval = \"200ms\"",
        &format!("status_interval = \"200ms\"\n{postgres_extra}"),
    )
}

/// The value of the series of metric `name` whose labels include `label`
/// (e.g. `topic="t"`; "" for any) in `/metrics` at `addr`.
fn metric(addr: &str, name: &str, label: &str) -> Option<f64> {
    http_get(addr, "/metrics").lines().find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        let labels = series.strip_prefix(name)?.strip_prefix('{')?;
        labels.contains(label).then(|| value.parse().ok())?
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_only_config_streams_through_an_empty_publication_across_kill_9() {
    use support::message_load::{MessageWriters, holds_all, verify_message_delivery};
    require_kafka();
    let db = TestDb::new("msgonly").await;
    let names = Names::new("msgonly");
    let addr = free_local_addr();
    let config =
        messages_only_config(&db, &names, "") + &format!("\n[health]\nlisten = \"{addr}\"\n");
    let path = write_config(&config);
    // Before the first run: the publication is to be created without tables.
    let (_, report) = check(&path);
    let create = format!(
        "CREATE PUBLICATION \"{}\" WITH (publish_via_partition_root = true)",
        names.publication
    );
    assert!(
        report.contains(&format!("run will create it: {create}")),
        "{report}"
    );
    assert!(failures(&report).is_empty(), "{report}");

    let mut relay = RelayProcess::start_with(&path, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    let published: i64 = db
        .client
        .query_one(
            "SELECT count(*) FROM pg_publication_tables WHERE pubname = $1",
            &[&names.publication],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(published, 0, "the publication has no table");
    // (Only this line: the slot and the offset store move while it runs.)
    let (_, report) = check(&path);
    assert!(
        report.contains("exists (only [[message]] sections"),
        "{report}"
    );

    // Writers run through a kill -9 and the restart.
    let topic = format!("{}.load", names.topic_prefix);
    let writers = MessageWriters::start(&db.name, "load", 3, 8);
    wait_for(
        "some messages in Kafka",
        Duration::from_secs(60),
        || async { (consume_to_end(&[&topic]).len() >= 50).then_some(()) },
    )
    .await;
    relay.kill9();
    let at_kill = consume_to_end(&[&topic]).len();
    let mut relay = RelayProcess::start_with(&path, &[]);
    wait_for(
        "more messages after the restart",
        Duration::from_secs(60),
        || async { (consume_to_end(&[&topic]).len() >= at_kill + 50).then_some(()) },
    )
    .await;
    let emitted = writers.stop().await;
    let consumed = wait_for(
        "every message in Kafka",
        Duration::from_secs(90),
        || async {
            let got = consume_to_end(&[&topic]);
            holds_all(&emitted, &got).then_some(got)
        },
    )
    .await;
    let duplicates = verify_message_delivery(&emitted, &consumed);
    eprintln!(
        "{} messages, {duplicates} re-sent after the kill",
        emitted.len()
    );

    // Status and metrics know what there is to know.
    let published = metric(
        &addr,
        "walrelay_records_published_by_topic_total",
        &format!("topic=\"{topic}\""),
    );
    assert!(published.is_some_and(|n| n > 0.0), "{published:?}");
    assert_eq!(
        metric(&addr, "walrelay_rows_unclaimed_total", ""),
        Some(0.0)
    );
    let out = std::process::Command::new(walrelay_bin())
        .args(["status", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{status}");
    assert!(status.contains("no tables"), "{status}");
    relay.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_only_config_uses_an_existing_publication_and_drops_its_tables_rows() {
    require_kafka();
    let db = TestDb::new("msgonly_pub").await;
    let names = Names::new("msgonly_pub");
    let addr = free_local_addr();
    let config = messages_only_config(&db, &names, "create_publication = false")
        + &format!("\n[health]\nlisten = \"{addr}\"\n");
    let path = write_config(&config);
    // No publication and walrelay may not create it: the fix is the empty one.
    let (_, report) = check(&path);
    let p = &names.publication;
    assert!(
        failures(&report)
            .iter()
            .any(|f| f.contains(&format!("publication {p} does not exist"))),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "CREATE PUBLICATION \"{p}\" WITH (publish_via_partition_root = true)`"
        )),
        "{report}"
    );
    // A publication of someone else's tables: fine, with a warning.
    db.client
        .batch_execute(&format!(
            "CREATE TABLE noise (id int PRIMARY KEY); CREATE PUBLICATION \"{p}\" FOR TABLE noise"
        ))
        .await
        .unwrap();
    let (_, report) = check(&path);
    assert!(failures(&report).is_empty(), "{report}");
    assert!(
        report.contains("also publishes table(s) public.noise that no section claims"),
        "{report}"
    );

    let mut relay = RelayProcess::start_with(&path, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    db.client
        .batch_execute(
            r#"BEGIN;
               INSERT INTO noise VALUES (1);
               SELECT pg_logical_emit_message(true, 'load', '{"type":"Load","key":"k1","w":0,"s":0}');
               COMMIT;"#,
        )
        .await
        .unwrap();
    let committed = db.current_wal_lsn().await;
    let topic = format!("{}.load", names.topic_prefix);
    let got = consume(
        &[&topic],
        1,
        Duration::from_secs(60),
        Duration::from_secs(1),
    );
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].key.as_deref(), Some(&b"k1"[..]));
    relay
        .wait_log("no [[outbox]] section claims", Duration::from_secs(30))
        .await;
    assert!(relay.log().contains("public.noise"), "{}", relay.log());
    assert_eq!(
        metric(&addr, "walrelay_rows_unclaimed_total", ""),
        Some(1.0)
    );
    // The dropped row does not hold the slot back.
    db.wait_confirmed(
        &names.slot,
        committed,
        "the slot past the transaction",
        Duration::from_secs(60),
    )
    .await;
    relay.stop();
}

/// A message-only connector (empty publication) gets a `[[table]]` section
/// while writers emit messages and change the table the whole time: the
/// restart adds the table to the publication, publishes its existing rows by
/// an incremental snapshot beside the stream, streams its changes from
/// there on, and loses no message across the stop and the new
/// configuration. Folding the table's topic gives the table's final state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_added_to_a_message_only_config_gets_its_rows_and_its_changes() {
    use support::message_load::{MessageWriters, holds_all, verify_message_delivery};
    require_kafka();
    let db = TestDb::new("msgonly_add").await;
    create_items(&db.client, 3000).await;
    let names = Names::new("msgonly_add");
    let messages_only = messages_only_config(&db, &names, "");
    let path = write_config(&messages_only);
    let mut relay = RelayProcess::start_with(&path, &[]);
    relay.wait_log("streaming", START).await;

    // Writers all along: messages, and updates, deletes and inserts of items.
    let messages = MessageWriters::start(&db.name, "load", 2, 8);
    let items_writers = ItemsWriters::start(&db.name, 2, 3500, Duration::from_millis(2));
    let topic = format!("{}.load", names.topic_prefix);
    wait_for("some messages in Kafka", START, || async {
        (consume_to_end(&[&topic]).len() >= 50).then_some(())
    })
    .await;
    assert!(relay.stop().success());

    // The same connector with a [[table]] section.
    let prefix = format!("{}_cdc", names.connector);
    let with_table = write_config(&format!(
        "{messages_only}\n[table_defaults]\ntopic_prefix = \"{prefix}\"\n[[table]]\nname = \"public.items\"\n\
         [snapshot]\nchunk_rows = 500\n"
    ));
    let (_, report) = check(&with_table);
    assert!(
        report.contains("run will publish the existing rows of public.items"),
        "{report}"
    );
    let mut relay = RelayProcess::start_with(&with_table, &[]);
    relay
        .wait_log("public.items was added to the configuration", START)
        .await;
    relay
        .wait_log("incremental snapshot completed", Duration::from_secs(180))
        .await;
    let published: i64 = db
        .client
        .query_one(
            "SELECT count(*) FROM pg_publication_tables WHERE pubname = $1 AND tablename = 'items'",
            &[&names.publication],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(published, 1, "the table was added to the publication");
    tokio::time::sleep(Duration::from_millis(500)).await;
    items_writers.stop().await;
    let emitted = messages.stop().await;

    let table = items_state(&db.client).await;
    let items = format!("{prefix}.public.items");
    let reads = wait_for(
        "the table's topic folds to the table",
        Duration::from_secs(90),
        || {
            let (items, table) = (items.clone(), &table);
            async move {
                let (state, reads) = fold_versions(&items);
                (state == *table).then_some(reads)
            }
        },
    )
    .await;
    assert!(reads > 0, "the existing rows came as read events");
    let consumed = wait_for(
        "every message in Kafka",
        Duration::from_secs(90),
        || async {
            let got = consume_to_end(&[&topic]);
            holds_all(&emitted, &got).then_some(got)
        },
    )
    .await;
    let duplicates = verify_message_delivery(&emitted, &consumed);
    eprintln!(
        "{} keys folded ({reads} read events); {} messages, {duplicates} re-sent",
        table.len(),
        emitted.len()
    );
    assert!(relay.stop().success());
}
