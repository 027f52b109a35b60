//! `[dead_letter]` against the real services (issue 25, item 5): a change
//! that cannot become its record goes to the dead-letter topic instead of
//! stopping the connector, as a record like any other for the checkpoint.
//! (Without the section the connector stops: tests/it/relay.rs,
//! `a_null_aggregate_id_stops_the_connector_before_the_slot_passes_it`.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use support::*;

const DEAD_LETTER_LOG: &str = "goes to the dead-letter topic instead";

/// Reads `topics` with `isolation.level` = `isolation` until `expected`
/// records arrived (not distinct events: duplicates count) or `timeout`.
fn read_records(
    topics: &[&str],
    isolation: &str,
    expected: usize,
    timeout: Duration,
) -> Vec<Consumed> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", unique("dl_reader"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .set("topic.metadata.refresh.interval.ms", "500")
        .create()
        .expect("consumer");
    consumer.subscribe(topics).expect("subscribe");
    let deadline = Instant::now() + timeout;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    while out.len() < expected && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            let rec = Consumed::from_message(&m);
            if seen.insert((rec.topic.clone(), rec.partition, rec.offset)) {
                out.push(rec);
            }
        }
    }
    out
}

/// A record's key, value and headers.
type Identity = (Option<Vec<u8>>, Option<Vec<u8>>, Vec<(String, Vec<u8>)>);

/// The parts of a dead letter, for comparing two copies.
fn identity(c: &Consumed) -> Identity {
    (c.key.clone(), c.value.clone(), c.headers.clone())
}

/// Outbox rows with a NULL aggregate id, an aggregate type that makes an
/// invalid topic and a payload over the producer's limit, a CloudEvents
/// outbox row without a type, and a `[[table]]`
/// row with `infinity` under `special_values = "fail"`, among rows that two
/// writers commit: every good row arrives in order per aggregate, every bad
/// one is in the dead-letter topic with its headers, the connector goes on,
/// the slot is confirmed past them, one log line and a metric per dead
/// letter, no row value in the log; `check` names the dead-letter topic
/// before it exists and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpublishable_changes_go_to_the_dead_letter_topic_and_the_connector_goes_on() {
    require_kafka();
    let db = TestDb::new("dlq").await;
    db.create_outbox("outbox").await;
    db.create_outbox("ce_outbox").await;
    db.client
        .batch_execute(
            "CREATE TABLE events (id int PRIMARY KEY, at timestamptz);
             ALTER TABLE events OWNER TO walrelay;",
        )
        .await
        .expect("events table");
    let names = Names::new("dlq");
    let dlq = format!("{}.dead-letter", names.topic_prefix);
    let addr = free_local_addr();
    let config = relay_config(
        &db,
        &names,
        "",
        &format!(
            "[[outbox]]\ntable = \"public.ce_outbox\"\ntopic = \"{}.ce\"\nformat = \"cloudevents\"\n\
             [outbox.cloudevents]\nsource = \"/shop\"\n\n\
             [[table]]\nname = \"public.events\"\nspecial_values = \"fail\"\n\n\
             [dead_letter]\ntopic = \"{dlq}\"\n\n[health]\nlisten = \"{addr}\"\n",
            names.topic_prefix
        ),
    );
    let path = write_config(&config);

    // `check` before the topic exists: it says so (and whether the broker
    // creates it at the first dead letter).
    let (_, report) = check(&path);
    let line = report
        .lines()
        .find(|l| l.contains("dead-letter topic"))
        .unwrap_or_else(|| panic!("no dead-letter line:\n{report}"));
    assert!(
        line.contains(&dlq) && line.contains("does not exist"),
        "{line}"
    );

    let mut relay = RelayProcess::start_with(&path, &[]);
    relay.wait_log("streaming", START).await;

    // Two writers, 40 transactions each: a good row (seq i of aggregate
    // w<k>) per transaction; every tenth transaction also has a bad row
    // *before* its good one (NULL aggregate id for writer 0, an aggregate
    // type that makes an invalid topic for writer 1).
    let mut tasks = Vec::new();
    for w in 0..2 {
        let client = pg_connect(&db.name).await;
        tasks.push(tokio::spawn(async move {
            for i in 0..40 {
                let bad = match (i % 10, w) {
                    (5, 0) => "INSERT INTO outbox VALUES (gen_random_uuid(), 'order', NULL, \
                               'Created', '{\"card\": \"SECRETPAYLOAD\"}');"
                        .to_owned(),
                    (5, _) => format!(
                        "INSERT INTO outbox VALUES (gen_random_uuid(), 'bad type', 'w{w}', \
                         'Created', '{{\"card\": \"SECRETPAYLOAD\", \"i\": {i}}}');"
                    ),
                    _ => String::new(),
                };
                client
                    .batch_execute(&format!(
                        "BEGIN; {bad} INSERT INTO outbox VALUES (gen_random_uuid(), 'order', \
                         'w{w}', 'Created', '{{\"seq\": {i}}}'); COMMIT;"
                    ))
                    .await
                    .expect("writer");
            }
        }));
    }
    // A payload over the producer's message.max.bytes (1,000,000), and a
    // table row that special_values = "fail" refuses, between good rows.
    db.client
        .batch_execute(
            "INSERT INTO events VALUES (1, now());
             INSERT INTO outbox VALUES (gen_random_uuid(), 'order', 'big', 'Created',
               jsonb_build_object('big', repeat('x', 1100000)));
             INSERT INTO events VALUES (2, 'infinity');
             INSERT INTO events VALUES (3, now());
             INSERT INTO ce_outbox VALUES (gen_random_uuid(), 'order', 'ce-1', '', '{}');",
        )
        .await
        .expect("big and infinity");
    for t in tasks {
        t.await.expect("writer task");
    }

    let good = consume(
        &[&names.topic("order")],
        80,
        Duration::from_secs(120),
        Duration::from_secs(1),
    );
    let mut seqs: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut ids = HashSet::new();
    for c in &good {
        if !ids.insert(c.header_str("id").expect("id")) {
            continue; // a re-sent duplicate
        }
        let key = String::from_utf8(c.key.clone().expect("key")).unwrap();
        let v: serde_json::Value = serde_json::from_slice(c.value.as_deref().unwrap()).unwrap();
        seqs.entry(key)
            .or_default()
            .push(v["seq"].as_u64().unwrap());
    }
    let expected: Vec<u64> = (0..40).collect();
    assert_eq!(seqs.get("w0"), Some(&expected), "writer 0's rows, in order");
    assert_eq!(seqs.get("w1"), Some(&expected), "writer 1's rows, in order");
    assert_eq!(seqs.len(), 2, "{:?}", seqs.keys());

    let table_topic = format!("{}.public.events", names.connector);
    let table_good = consume(
        &[&table_topic],
        2,
        Duration::from_secs(60),
        Duration::from_secs(1),
    );
    let table_ids: HashSet<i64> = table_good
        .iter()
        .filter_map(|c| {
            let v: serde_json::Value = serde_json::from_slice(c.value.as_deref()?).ok()?;
            v["after"]["id"].as_i64()
        })
        .collect();
    assert_eq!(table_ids, HashSet::from([1, 3]));

    let dead = read_records(&[&dlq], "read_committed", 11, Duration::from_secs(60));
    let mut by_reason: BTreeMap<String, Vec<&Consumed>> = BTreeMap::new();
    for c in &dead {
        by_reason
            .entry(c.header_str("walrelay.dead_letter.reason").expect("reason"))
            .or_default()
            .push(c);
    }
    let counts: BTreeMap<&str, usize> = by_reason
        .iter()
        .map(|(k, v)| (k.as_str(), v.len()))
        .collect();
    assert_eq!(
        counts,
        BTreeMap::from([
            ("cloudevents", 1),
            ("invalid_topic", 4),
            ("null_value", 4),
            ("too_large", 1),
            ("unencodable_value", 1)
        ]),
        "{dead:?}"
    );
    let mut newest_lsn = 0;
    for c in &dead {
        let lsn = c.header_str("walrelay.lsn").expect("walrelay.lsn");
        newest_lsn = newest_lsn.max(parse_lsn(&lsn));
        let event_id = c.header_str("walrelay.event_id").expect("event id");
        assert!(
            event_id.starts_with(&format!("{lsn}:")),
            "{event_id} vs {lsn}"
        );
        assert!(c.header_str("walrelay.dead_letter.error").is_some());
    }
    for c in &by_reason["null_value"] {
        assert_eq!(
            c.header_str("walrelay.dead_letter.table").as_deref(),
            Some("public.outbox")
        );
        assert!(c.header_str("id").is_some(), "the row id");
        assert_eq!(
            c.key.as_deref().map(String::from_utf8_lossy),
            c.header_str("walrelay.event_id").map(Into::into),
            "no aggregate id: keyed by its event id"
        );
        assert_eq!(c.header_str("walrelay.dead_letter.key"), None);
        let error = c.header_str("walrelay.dead_letter.error").unwrap();
        assert!(
            error.contains("column aggregateid") && error.contains("NULL"),
            "{error}"
        );
        assert_eq!(
            c.header_str("walrelay.dead_letter.topic"),
            Some(format!("{}.{{aggregatetype}}", names.topic_prefix))
        );
        assert_eq!(
            c.value.as_deref(),
            Some(&b"{\"card\": \"SECRETPAYLOAD\"}"[..])
        );
    }
    for c in &by_reason["invalid_topic"] {
        assert_eq!(c.key.as_deref(), Some(&b"w1"[..]), "the original key");
        assert_eq!(
            c.header_str("walrelay.dead_letter.key").as_deref(),
            Some("w1")
        );
        let v: serde_json::Value = serde_json::from_slice(c.value.as_deref().unwrap()).unwrap();
        assert_eq!(v["card"], "SECRETPAYLOAD", "the payload, as is");
    }
    let big = by_reason["too_large"][0];
    assert_eq!(big.key.as_deref(), Some(&b"big"[..]));
    assert_eq!(big.value, None, "the value is what was too large");
    let size: usize = big
        .header_str("walrelay.dead_letter.value_bytes")
        .unwrap()
        .parse()
        .unwrap();
    assert!(size > 1_100_000, "{size}");
    assert_eq!(
        big.header_str("walrelay.dead_letter.topic"),
        Some(names.topic("order"))
    );
    let inf = by_reason["unencodable_value"][0];
    assert_eq!(
        inf.header_str("walrelay.dead_letter.table").as_deref(),
        Some("public.events")
    );
    assert_eq!(
        inf.header_str("walrelay.dead_letter.topic"),
        Some(table_topic.clone())
    );
    let ce = by_reason["cloudevents"][0];
    assert_eq!(
        ce.header_str("walrelay.dead_letter.table").as_deref(),
        Some("public.ce_outbox")
    );
    assert_eq!(ce.key.as_deref(), Some(&b"ce-1"[..]));
    let row: serde_json::Value = serde_json::from_slice(inf.value.as_deref().unwrap()).unwrap();
    assert_eq!(row, serde_json::json!({"id": "2", "at": "infinity"}));

    // The slot is confirmed past every dead letter, and the connector runs.
    db.wait_confirmed(
        &names.slot,
        newest_lsn + 1,
        "the slot past the dead letters",
        Duration::from_secs(60),
    )
    .await;
    assert!(relay.is_running(), "{}", relay.log());

    let metrics = wait_for("the dead letters in /metrics", Duration::from_secs(30), || {
        let m = http_get(&addr, "/metrics");
        let series = format!(
            "walrelay_dead_letter_records_total{{connector=\"{}\",reason=\"null_value\",table=\"public.outbox\"}} 4\n",
            names.connector
        );
        async move { m.contains(&series).then_some(m) }
    })
    .await;
    assert!(
        metrics.contains(&format!(
            "walrelay_dead_letter_records_total{{connector=\"{}\",reason=\"unencodable_value\",table=\"public.events\"}} 1\n",
            names.connector
        )),
        "{metrics}"
    );
    assert!(!metrics.contains("SECRET"));
    // `check` now finds the topic.
    let (_, report) = check(&path);
    let line = report
        .lines()
        .find(|l| l.contains("dead-letter topic"))
        .unwrap_or_else(|| panic!("no dead-letter line:\n{report}"));
    assert!(line.contains(&format!("{dlq} exists")), "{line}");
    assert!(relay.stop().success(), "{}", relay.log());
    // Read once stopped: the log is complete.
    let log = relay.log();
    assert_eq!(
        log.matches(DEAD_LETTER_LOG).count(),
        11,
        "one line per dead letter:\n{log}"
    );
    assert!(!log.contains("SECRET"), "{log}");
}

/// `exactly_once`: a dead letter is in its transaction's Kafka transaction.
/// walrelay is killed (-9) while that transaction is open (a long
/// `transaction_max_time`): the slot is not confirmed past it, the restart
/// re-sends an identical dead letter (same key, value, headers and event
/// id), and a `read_committed` consumer sees it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_is_resent_identical_after_kill_9_and_committed_once() {
    require_kafka();
    let db = TestDb::new("dlq_eos").await;
    db.create_outbox("outbox").await;
    let names = Names::new("dlq_eos");
    let dlq = format!("{}.dead-letter", names.topic_prefix);
    let config = |max_time: &str| {
        relay_config(
            &db,
            &names,
            "",
            &format!("[dead_letter]\ntopic = \"{dlq}\"\n"),
        )
        .replace(
            "[kafka]\n",
            &format!(
                "[kafka]\ndelivery = \"exactly_once\"\ntransaction_max_time = \"{max_time}\"\n\
                 transaction_timeout = \"120s\"\n"
            ),
        )
    };
    let mut relay = RelayProcess::start(&config("60s"), &[]);
    relay.wait_log("streaming", START).await;
    db.client
        .batch_execute(
            "BEGIN;
             INSERT INTO outbox VALUES ('00000000-0000-4000-8000-0000000000a1', 'order', 'a', 'Created', '{\"n\": 1}');
             INSERT INTO outbox VALUES ('00000000-0000-4000-8000-0000000000a2', 'order', NULL, 'Created', '{\"n\": 2}');
             INSERT INTO outbox VALUES ('00000000-0000-4000-8000-0000000000a3', 'order', 'a', 'Created', '{\"n\": 3}');
             COMMIT;",
        )
        .await
        .expect("insert");
    // The dead letter is written, in a Kafka transaction not yet committed.
    let first = read_records(&[&dlq], "read_uncommitted", 1, Duration::from_secs(60));
    assert_eq!(first.len(), 1, "the dead letter, uncommitted");
    relay.wait_log(DEAD_LETTER_LOG, START).await;
    let lsn = parse_lsn(&first[0].header_str("walrelay.lsn").unwrap());
    relay.kill9();
    let confirmed = db.confirmed_flush(&names.slot).await.expect("slot");
    assert!(
        confirmed <= lsn,
        "slot confirmed {confirmed:X} past the open dead letter at {lsn:X}"
    );

    let mut again = RelayProcess::start(&config("100ms"), &[]);
    db.wait_confirmed(&names.slot, lsn + 1, "the slot past the dead letter", START)
        .await;
    let both = read_records(&[&dlq], "read_uncommitted", 2, Duration::from_secs(60));
    assert_eq!(both.len(), 2, "the first copy and the re-sent one");
    assert_eq!(identity(&both[0]), identity(&both[1]), "re-sent identical");
    assert_eq!(
        both[0].header_str("id").as_deref(),
        Some("00000000-0000-4000-8000-0000000000a2")
    );
    let good = consume_committed(&[&names.topic("order")]);
    let ns: Vec<String> = good
        .iter()
        .map(|c| String::from_utf8_lossy(c.value.as_deref().unwrap()).into_owned())
        .collect();
    assert_eq!(ns, ["{\"n\": 1}", "{\"n\": 3}"]);
    // Committed with the good rows of its transaction: once.
    let committed = consume_committed(&[&dlq]);
    assert_eq!(committed.len(), 1, "read_committed sees it once");
    assert_eq!(identity(&committed[0]), identity(&both[0]));
    assert!(again.stop().success(), "{}", again.log());
}
