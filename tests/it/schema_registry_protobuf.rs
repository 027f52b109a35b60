//! `format = "protobuf"` against the real services (PostgreSQL, Kafka,
//! Apicurio Registry 3.3.3): every record decoded by a client that is not
//! ours — confluent-kafka's Python `ProtobufDeserializer` reading the
//! Confluent framing (magic byte, schema id, message indexes), the body
//! parsed by a message class protoc compiled from the schema text the
//! registry holds (`tests/support/sr_decode.py`). The table of many types
//! (NULLs, arrays with a NULL element, a decimal, timestamps) through a
//! snapshot row, an insert, an update, a delete with its tombstone and a
//! row of NULLs is `schema_registry_tables`' (its `protobuf_…` test); here
//! the types whose schemas are more than a scalar (enum,
//! point, bits, interval, times, money, arrays of decimals); an outbox; a
//! `[[message]]` event, BEGIN/END records and
//! heartbeats in one connector; and a DDL: a column added
//! registers the subject's next version before its first record, a type
//! change the registry refuses (Apicurio checks Protobuf fields' types
//! strictly: `int32` → `int64` too) stops the connector before the record,
//! the slot before the change.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::schema_registry::{registry_requests, registry_section, registry_url};
use crate::schema_registry_tables::{versions, wait_decoded};
use crate::support::*;

/// A column added registers version 2 before the first record holding it
/// (the record before keeps version 1's id); `int4` → `int8`, which
/// Apicurio refuses for Protobuf under BACKWARD (a field's type changed),
/// stops the connector naming table, column and subject; nothing of the
/// refused shape reaches Kafka; the slot stays before the change.
#[tokio::test(flavor = "multi_thread")]
async fn ddl_registers_the_next_version_before_its_first_record() {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("srpb_ddl").await;
    db.client
        .batch_execute(
            "CREATE TABLE sr_evo (id int4 PRIMARY KEY, amount int4);
             ALTER TABLE sr_evo OWNER TO walrelay;",
        )
        .await
        .unwrap();
    let names = Names::new("srpb_ddl");
    let prefix = names.connector.clone();
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\nformat = \"protobuf\"\n\n\
             [[table]]\nname = \"public.sr_evo\"\n\n{}",
            registry_section(&url)
        ),
    );
    let topic = format!("{prefix}.public.sr_evo");
    let subject = format!("{topic}-value");
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    db.client
        .batch_execute(
            "INSERT INTO sr_evo VALUES (1, 10);
             ALTER TABLE sr_evo ADD COLUMN note text;
             INSERT INTO sr_evo VALUES (2, 0, 'second');",
        )
        .await
        .unwrap();
    let got = wait_decoded("protobuf", &url, std::slice::from_ref(&topic), 2).await;
    let after: Vec<&Value> = got.iter().map(|r| &r["value"]["after"]).collect();
    // amount 0 is 0, not NULL: optional fields have presence.
    assert_eq!(
        after,
        [
            &json!({"id": 1, "amount": 10}),
            &json!({"id": 2, "amount": 0, "note": "second"}),
        ]
    );
    let ids: Vec<u64> = got
        .iter()
        .map(|r| r["value_schema_id"].as_u64().unwrap())
        .collect();
    assert_ne!(ids[0], ids[1], "a new schema for the new shape");
    assert_eq!(versions(&url, &subject), [1, 2], "{subject}");
    assert!(
        got[1]["value_schema"]
            .as_str()
            .unwrap()
            .contains("optional string note = 3;"),
        "the added column takes the next field number"
    );

    let before = db.current_wal_lsn().await;
    db.client
        .batch_execute(
            "ALTER TABLE sr_evo ALTER COLUMN amount TYPE int8;
             INSERT INTO sr_evo VALUES (3, 30000000000, 'third');",
        )
        .await
        .unwrap();
    let log = relay.expect_exit(1, Duration::from_secs(60));
    let line = log
        .lines()
        .find(|l| l.contains("schema registry") && l.contains("HTTP 409"))
        .unwrap_or_else(|| panic!("no refusal naming the registry in:\n{log}"));
    for needle in [
        "public.sr_evo",
        "column amount: int4 → int8",
        subject.as_str(),
    ] {
        assert!(line.contains(needle), "{needle:?} missing from: {line}");
    }
    assert_eq!(
        records_in(&[topic.as_str()]),
        2,
        "a record of the refused shape"
    );
    assert_eq!(versions(&url, &subject), [1, 2]);
    let confirmed = db.confirmed_flush(&names.slot).await.unwrap_or(0);
    assert!(
        confirmed <= before,
        "the slot passed the refused change: {confirmed} > {before}"
    );
    eprintln!("refused: {line}");
}

/// Outbox rows (snapshot and streamed, text and integer-free keys, JSON
/// payloads) as Protobuf: key `walrelay.outbox.Key { string value }`,
/// value `walrelay.outbox.Value { optional string value }`.
#[tokio::test(flavor = "multi_thread")]
async fn outbox_records_decode_with_confluents_protobuf_deserializer() {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("srpb_ob").await;
    db.create_outbox("outbox").await;
    let names = Names::new("srpb_ob");
    let config = relay_config(
        &db,
        &names,
        "format = \"protobuf\"",
        &registry_section(&url),
    );
    let insert = |n: usize, tag: &'static str| {
        let db = &db;
        async move {
            for i in 0..n {
                db.client
                    .batch_execute(&format!(
                        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
                         VALUES (gen_random_uuid(), 'order', '{tag}-{i}', 'Created', \
                         '{{\"n\": {i}, \"s\": \"é\"}}')"
                    ))
                    .await
                    .unwrap();
            }
        }
    };
    insert(5, "snap").await;
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    insert(20, "live").await;
    let topics = vec![names.topic("order")];
    let got = wait_decoded("protobuf", &url, &topics, 25).await;
    relay.stop();
    let rows = outbox_rows(&db).await;
    let mut seen = HashSet::new();
    for r in &got {
        let id = r["id"].as_str().unwrap();
        let row = rows
            .get(id)
            .unwrap_or_else(|| panic!("a record of no row: {r}"));
        assert_eq!(r["key"], json!({"value": row.aggregate_id}), "{r}");
        let payload: Value = serde_json::from_str(r["value"]["value"].as_str().unwrap()).unwrap();
        assert_eq!(
            payload,
            serde_json::from_str::<Value>(&row.payload).unwrap(),
            "{r}"
        );
        assert!(
            r["key_schema"]
                .as_str()
                .unwrap()
                .contains("package walrelay.outbox;\n\nmessage Key {\n  string value = 1;\n}"),
            "{r}"
        );
        assert!(
            r["value_schema"].as_str().unwrap().contains(
                "optional string value = 1 [(confluent.field_meta) = { params: [{ key: \
                 \"connect.name\", value: \"io.debezium.data.Json\" }"
            ),
            "{r}"
        );
        seen.insert(id.to_owned());
    }
    assert_eq!(seen.len(), 25, "every row, once decoded");
    // Ids cached: one request per subject (key and value), not per record.
    assert_eq!(registry_requests(&names.topic_prefix), 2);
    eprintln!("protobuf: {} outbox records decoded", got.len());
}

/// The fixed-schema records in Protobuf, in one connector: a `[[message]]`
/// event (Debezium's `MessageKey` / `MessageValue`), the BEGIN/END records
/// of `provide_transaction_metadata` (with the table event's `transaction`
/// block) and heartbeats (`ServerNameKey` / `Heartbeat`), each decoded.
#[tokio::test(flavor = "multi_thread")]
async fn message_transaction_and_heartbeat_records_decode() {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("srpb_fix").await;
    db.client
        .batch_execute("CREATE TABLE t (id int4 PRIMARY KEY); ALTER TABLE t OWNER TO walrelay;")
        .await
        .unwrap();
    let names = Names::new("srpb_fix");
    let prefix = names.connector.clone();
    let message_topic = format!("{prefix}.message");
    let heartbeat_topic = format!("{prefix}.heartbeats");
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\nformat = \"protobuf\"\n\
             provide_transaction_metadata = true\n\n\
             [[table]]\nname = \"public.t\"\n\n\
             [[message]]\nprefix = \"orders\"\ntopic = \"{message_topic}\"\nformat = \"protobuf\"\n\n\
             [heartbeat]\ninterval = \"300ms\"\npublish = true\ntopic = \"{heartbeat_topic}\"\n\
             format = \"protobuf\"\n\n{}",
            registry_section(&url)
        ),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    db.client
        .batch_execute(
            "BEGIN; INSERT INTO t VALUES (7);
             SELECT pg_logical_emit_message(true, 'orders', '\\x00ff7b7d'::bytea); COMMIT;",
        )
        .await
        .unwrap();
    let txn_topic = format!("{prefix}.transaction");
    let table_topic = format!("{prefix}.public.t");
    wait_decoded("protobuf", &url, std::slice::from_ref(&txn_topic), 2).await;
    wait_for("2 heartbeat records", Duration::from_secs(60), || {
        let topic = heartbeat_topic.clone();
        async move { (consume_to_end(&[topic.as_str()]).len() >= 2).then_some(()) }
    })
    .await;
    // Stopped first: the decoder reads to the end of a topic, which a
    // heartbeat every 300 ms may never let it reach.
    assert!(relay.stop().success());

    let messages = wait_decoded("protobuf", &url, std::slice::from_ref(&message_topic), 1).await;
    let m = &messages[0];
    assert_eq!(m["key"], json!({"prefix": "orders"}), "{m}");
    assert_eq!(m["value"]["op"], "m", "{m}");
    // 00 ff 7b 7d: the payload's bytes, whatever they are.
    assert_eq!(
        m["value"]["message"],
        json!({"prefix": "orders", "content": "AP97fQ=="}),
        "{m}"
    );
    assert!(
        m["value_schema"]
            .as_str()
            .unwrap()
            .contains("package io.debezium.connector.postgresql;"),
        "{m}"
    );

    let txn = wait_decoded("protobuf", &url, std::slice::from_ref(&txn_topic), 2).await;
    let (begin, end) = (&txn[0]["value"], &txn[1]["value"]);
    assert_eq!(begin["status"], "BEGIN", "{begin}");
    assert_eq!(begin["event_count"], Value::Null, "{begin}");
    assert_eq!(begin["data_collections"], json!([]), "{begin}");
    assert_eq!(end["status"], "END", "{end}");
    assert_eq!(end["event_count"], 1, "{end}");
    assert_eq!(
        end["data_collections"],
        json!([{"data_collection": "public.t", "event_count": 1}]),
        "{end}"
    );
    assert_eq!(txn[0]["key"], json!({"id": begin["id"]}));
    let events = wait_decoded("protobuf", &url, std::slice::from_ref(&table_topic), 1).await;
    let block = &events[0]["value"]["transaction"];
    assert_eq!(block["total_order"], 1, "{block}");
    assert_eq!(block["data_collection_order"], 1, "{block}");
    assert_eq!(events[0]["value"]["after"], json!({"id": 7}));

    let beats = wait_decoded("protobuf", &url, std::slice::from_ref(&heartbeat_topic), 2).await;
    for b in &beats {
        assert_eq!(b["key"], json!({"serverName": prefix}), "{b}");
        assert!(
            b["value"]["ts_ms"].as_i64().unwrap() > 1_700_000_000_000,
            "{b}"
        );
    }
    eprintln!(
        "protobuf: {} message, {} transaction, {} heartbeat records decoded",
        messages.len(),
        txn.len(),
        beats.len()
    );
}

/// The types whose schemas are more than a scalar: an enum (its labels in
/// `allowed`), a point (a nested message), bits, intervals, times, money
/// (a `Decimal` without precision), and arrays of decimals — fixed scale
/// (`confluent.type.Decimal` elements) and variable (`VariableScaleDecimal`
/// elements) — each with a NULL element, through element wrappers that
/// hold messages.
#[tokio::test(flavor = "multi_thread")]
async fn structured_types_decode() {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("srpb_st").await;
    db.client
        .batch_execute(
            "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
             CREATE TABLE st (id int4 PRIMARY KEY, m mood, p point, b bit(3), vb varbit,
               iv interval, t time, tz timetz, mo money, na numeric(5,2)[], nv numeric[]);
             ALTER TABLE st OWNER TO walrelay;",
        )
        .await
        .unwrap();
    let names = Names::new("srpb_st");
    let prefix = names.connector.clone();
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\nformat = \"protobuf\"\n\n\
             [[table]]\nname = \"public.st\"\n\n{}",
            registry_section(&url)
        ),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    db.client
        .batch_execute(
            "INSERT INTO st VALUES (1, 'happy', '(1.5,-2)', B'101', B'1', '1 day 2 hours',
               '12:34:56.789', '12:34:56+02', 12.34, '{1.5,NULL,-2.25}', '{3.14159,NULL}')",
        )
        .await
        .unwrap();
    let topic = format!("{prefix}.public.st");
    let got = wait_decoded("protobuf", &url, std::slice::from_ref(&topic), 1).await;
    relay.stop();
    let after = &got[0]["value"]["after"];
    assert_eq!(after["m"], "happy", "{after}");
    assert_eq!(
        (&after["b"], &after["vb"]),
        (&json!("BQ=="), &json!("AQ==")),
        "{after}"
    );
    assert_eq!(after["t"], 45_296_789_000_i64, "{after}");
    assert_eq!(after["tz"], "10:34:56Z", "{after}");
    assert_eq!(after["p"]["srid"], Value::Null, "{after}");
    assert_eq!(after["p"]["x"], 1.5, "{after}");
    assert_eq!(after["p"]["y"], -2.0, "{after}");
    assert_eq!(after["iv"], 93_600_000_000_i64, "{after}");
    assert_eq!(after["mo"], "12.34", "{after}");
    assert_eq!(after["na"], json!(["1.50", null, "-2.25"]), "{after}");
    assert_eq!(after["nv"][1], Value::Null, "{after}");
    assert_eq!(after["nv"][0]["scale"], 5, "{after}");
    let schema = got[0]["value_schema"].as_str().unwrap();
    for needle in [
        "{ key: \"allowed\", value: \"sad,ok,happy\" }",
        "message Point {",
        "repeated .",
        "message Item_na {\n      confluent.type.Decimal value = 1",
        "message Item_nv {\n      .",
        "{ key: \"connect.name\", value: \"io.debezium.data.Bits\" }, { key: \"connect.version\", \
         value: \"1\" }, { key: \"length\", value: \"3\" }",
    ] {
        assert!(
            schema.contains(needle),
            "{needle:?} missing from:\n{schema}"
        );
    }
}
