//! `[[message]] format = "avro" | "json_schema"` against the real services
//! (PostgreSQL, Kafka, Apicurio Registry 3.3.3): transactional logical
//! decoding messages — a JSON payload, bytes that are no text, an empty
//! payload, non-ASCII text, two prefixes of one pattern, several messages in
//! one transaction beside a row change, then a run of one-message
//! transactions — each decoded by Confluent's own Python client (not ours,
//! `tests/support/sr_decode.py`) and compared with what was emitted:
//! Debezium's `op: "m"` event (key `{"prefix"}`, `message.content` the
//! payload's bytes), under Debezium's `MessageKey` / `MessageValue` schemas
//! as the registry holds them; under each subject name strategy, the
//! subjects it names; the registry asked once per subject, not per record;
//! and a schema the registry lacks (`auto_register = false`) stopping the
//! connector naming the prefix and the subject, nothing sent schema-less,
//! the slot before the message.
//!
//! Needs `WALRELAY_REGISTRY_URL`, `WALRELAY_REGISTRY_LOG` and
//! `WALRELAY_REGISTRY_PYTHON` (`deploy/dev/registry.sh up` prints them).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serde_json::{Value, json};

use crate::schema_registry::{decode, registry_requests, registry_section, registry_url};
use crate::schema_registry_tables::{field, name_of};
use crate::support::*;

/// The messages the first transactions emit: (prefix, payload bytes).
fn first_messages() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("orders", br#"{"order_id":"42","type":"Paid"}"#.to_vec()),
        ("orders", vec![0x00, 0xff, 0x10]),
        ("orders.paid", Vec::new()),
        ("orders.paid", "héllo \"q\" 😀".as_bytes().to_vec()),
    ]
}

/// One-message transactions after them: enough records to show that
/// schema ids are cached.
const RUN: usize = 40;

fn b64(data: &[u8]) -> String {
    let mut out = Vec::new();
    walrelay::router::debezium::base64(&mut out, data);
    String::from_utf8(out).unwrap()
}

/// The id of the latest schema under `subject`, if the registry has it.
fn latest_id(url: &str, subject: &str) -> Option<u64> {
    let out = std::process::Command::new("curl")
        .args(["-sf", &format!("{url}/subjects/{subject}/versions/latest")])
        .output()
        .unwrap();
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v["id"].as_u64())
}

/// Checks the key and value schemas of a record as the registry holds them.
fn check_schemas(format: &str, r: &Value) {
    let key: Value = serde_json::from_str(r["key_schema"].as_str().unwrap()).unwrap();
    assert_eq!(
        name_of(&key),
        "io.debezium.connector.postgresql.MessageKey",
        "{key}"
    );
    assert_eq!(key["connect.version"], 1, "{key}");
    let value: Value = serde_json::from_str(r["value_schema"].as_str().unwrap()).unwrap();
    assert_eq!(
        name_of(&value),
        "io.debezium.connector.postgresql.MessageValue",
        "{value}"
    );
    assert_eq!(
        name_of(field(&value, "source")),
        "io.debezium.connector.postgresql.Source"
    );
    assert_eq!(name_of(field(&value, "transaction")), "event.block");
    let block = field(&value, "message");
    assert_eq!(
        name_of(block),
        "io.debezium.connector.postgresql.Message",
        "{block}"
    );
    let content = field(block, "content");
    if format == "avro" {
        assert_eq!(*field(&key, "prefix"), json!("string"), "{key}");
        assert_eq!(*content, json!("bytes"), "{block}");
        // The block is required: no union around it.
        let message = value["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "message")
            .unwrap();
        assert_eq!(message["type"]["type"], "record", "{message}");
    } else {
        assert_eq!(content["connect.type"], "bytes", "{block}");
        assert_eq!(content["type"], "string", "{block}");
    }
}

/// Messages in `format` under subject name strategy `strategy`, every
/// record decoded by Confluent's client and compared with what was
/// emitted, and the subjects the strategy names holding their schemas.
async fn message_events_decode_with_confluents_client(format: &str, strategy: &str) {
    require_kafka();
    let url = registry_url();
    let mut db = TestDb::new("sr_msg").await;
    let names = Names::new("sr_msg");
    let topic = format!("{}.message", names.connector);
    // Message-only: the publication is created empty.
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[[message]]\nprefix = \"orders*\"\ntopic = \"{topic}\"\nformat = \"{format}\"\n\n\
             {}subject_name_strategy = \"{strategy}\"\n",
            registry_section(&url)
        ),
    );
    db.client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY); ALTER TABLE t OWNER TO walrelay;")
        .await
        .unwrap();
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    let first = first_messages();
    let tx = db.client.transaction().await.unwrap();
    tx.batch_execute("INSERT INTO t VALUES (1)").await.unwrap();
    for (prefix, payload) in &first[..2] {
        tx.execute(
            "SELECT pg_logical_emit_message(true, $1, $2::bytea)",
            &[prefix, payload],
        )
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    for (prefix, payload) in &first[2..] {
        db.client
            .execute(
                "SELECT pg_logical_emit_message(true, $1, $2::bytea)",
                &[prefix, payload],
            )
            .await
            .unwrap();
    }
    // Never published: non-transactional.
    db.client
        .batch_execute("SELECT pg_logical_emit_message(false, 'orders', 'not in a transaction')")
        .await
        .unwrap();
    let mut want = first.clone();
    for i in 0..RUN {
        let payload = format!(r#"{{"order_id":"{i}","type":"Run"}}"#);
        db.client
            .execute(
                "SELECT pg_logical_emit_message(true, 'orders', $1::bytea)",
                &[&payload.as_bytes()],
            )
            .await
            .unwrap();
        want.push(("orders", payload.into_bytes()));
    }
    let got = wait_for(
        &format!("{} records decoded", want.len()),
        Duration::from_secs(120),
        || {
            let (format, url, topic) = (format.to_owned(), url.clone(), topic.clone());
            let n = want.len();
            async move {
                let got = decode(&format!("{format}:schemas"), &url, &[topic]);
                (got.len() >= n).then_some(got)
            }
        },
    )
    .await;
    relay.stop();
    // Ids cached: one request per subject, whatever the number of records
    // (the record strategy's subjects are shared by every topic: not
    // counted by this topic's name). Counted before this test asks the
    // registry itself.
    if strategy != "record" {
        let requests = registry_requests(&topic);
        assert_eq!(requests, 2, "one registry request per subject");
    }
    // All on one partition (one key per prefix), in commit order; two
    // prefixes may hash to two partitions: order by the commit LSN header.
    let mut got = got;
    got.sort_by_key(|r| {
        let h = |n: &str| r["headers"][n].as_str().unwrap_or("").to_owned();
        let lsn = h("walrelay.lsn");
        let (hi, lo) = lsn.split_once('/').unwrap();
        let index: u64 = h("walrelay.event_id")
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        (
            u64::from_str_radix(hi, 16).unwrap() << 32 | u64::from_str_radix(lo, 16).unwrap(),
            index,
        )
    });
    assert_eq!(got.len(), want.len(), "{got:#?}");
    let mut previous_lsn = 0;
    for (i, (r, (prefix, payload))) in got.iter().zip(&want).enumerate() {
        assert_eq!(r["key"], json!({"prefix": prefix}), "record {i}: {r}");
        let v = &r["value"];
        assert_eq!(v["op"], "m", "{r}");
        assert_eq!(
            v["message"],
            json!({"prefix": prefix, "content": b64(payload)}),
            "record {i}: {r}"
        );
        assert_eq!(v["transaction"], Value::Null);
        assert!(v["ts_ms"].as_i64().unwrap() > 1_700_000_000_000, "{v}");
        let s = &v["source"];
        assert_eq!(s["connector"], "postgresql");
        assert_eq!(s["name"], names.connector.as_str());
        assert_eq!(s["db"], db.name.as_str());
        assert_eq!((&s["schema"], &s["table"]), (&json!(""), &json!("")));
        assert_eq!(s["snapshot"], "false");
        assert_eq!(s["ts_ms"], v["ts_ms"], "ts_ms is the commit time");
        assert!(s["txId"].as_i64().unwrap() > 0, "{s}");
        let lsn = s["lsn"].as_i64().unwrap();
        assert!(lsn > previous_lsn, "message LSNs in order: {s}");
        previous_lsn = lsn;
        assert_eq!(
            s["sequence"],
            json!(format!("[null,\"{lsn}\"]")),
            "the sequence names the message's LSN"
        );
        assert_eq!(r["headers"]["walrelay.prefix"], *prefix);
        check_schemas(format, r);
    }
    // The first two messages share their transaction.
    assert_eq!(
        got[0]["value"]["source"]["txId"],
        got[1]["value"]["source"]["txId"]
    );
    assert_ne!(
        got[1]["value"]["source"]["txId"],
        got[2]["value"]["source"]["txId"]
    );
    let ids = |part: &str| -> std::collections::HashSet<u64> {
        got.iter()
            .map(|r| r[format!("{part}_schema_id")].as_u64().unwrap())
            .collect()
    };
    let (key_ids, value_ids) = (ids("key"), ids("value"));
    assert_eq!((key_ids.len(), value_ids.len()), (1, 1), "one schema each");
    // The subjects the strategy names hold those schemas.
    let (key_subject, value_subject) = match strategy {
        "topic" => (format!("{topic}-key"), format!("{topic}-value")),
        "topic_record" => (
            format!("{topic}-io.debezium.connector.postgresql.MessageKey"),
            format!("{topic}-io.debezium.connector.postgresql.MessageValue"),
        ),
        _ => (
            "io.debezium.connector.postgresql.MessageKey".to_owned(),
            "io.debezium.connector.postgresql.MessageValue".to_owned(),
        ),
    };
    assert_eq!(
        latest_id(&url, &key_subject),
        key_ids.iter().next().copied()
    );
    assert_eq!(
        latest_id(&url, &value_subject),
        value_ids.iter().next().copied()
    );
    eprintln!(
        "{format} ({strategy}): {} message records decoded by Confluent's client, each as \
         emitted, under subjects {key_subject} and {value_subject}",
        got.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn avro_message_events_decode_with_confluents_client() {
    message_events_decode_with_confluents_client("avro", "topic").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn json_schema_message_events_decode_with_confluents_client() {
    message_events_decode_with_confluents_client("json_schema", "topic_record").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn avro_message_events_under_the_record_name_strategy() {
    message_events_decode_with_confluents_client("avro", "record").await;
}

/// A message whose schema the registry does not have under its subject
/// (`auto_register = false`, nothing registered): the connector stops
/// naming the message's prefix, the topic and the subject, sends nothing
/// schema-less, and the slot does not pass the message.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_schema_the_registry_lacks_stops_the_connector_naming_the_prefix() {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("sr_msg_refused").await;
    let names = Names::new("sr_msg_refused");
    let topic = format!("{}.message", names.connector);
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[[message]]\nprefix = \"orders\"\ntopic = \"{topic}\"\nformat = \"avro\"\n\n{}\
             auto_register = false\n",
            registry_section(&url)
        ),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    let before = db.current_wal_lsn().await;
    db.client
        .batch_execute("SELECT pg_logical_emit_message(true, 'orders', '{\"order_id\":\"1\"}')")
        .await
        .unwrap();
    let log = relay.expect_exit(1, Duration::from_secs(60));
    let line = log
        .lines()
        .find(|l| l.contains("schema registry refused subject"))
        .unwrap_or_else(|| panic!("no refusal naming the registry in:\n{log}"));
    for needle in [
        "logical message prefix \"orders\"",
        topic.as_str(),
        &format!("{topic}-key"),
        "auto_register",
    ] {
        assert!(line.contains(needle), "{needle:?} missing from: {line}");
    }
    assert_eq!(
        records_in(&[topic.as_str()]),
        0,
        "a record without its schema id"
    );
    let confirmed = db.confirmed_flush(&names.slot).await.unwrap_or(0);
    assert!(
        confirmed <= before,
        "the slot passed the refused message: {confirmed} > {before}"
    );
    eprintln!("refused: {line}");
}
