//! `[[table]] format = "avro" | "json_schema"` against the real services
//! (PostgreSQL, Kafka, Apicurio Registry 3.3.3): a snapshot row, inserts,
//! an update, a delete with its tombstone and a row of NULLs of a table of
//! many types, every record decoded by Confluent's own Python client (not
//! ours, `tests/support/sr_decode.py`) and compared with the row, the
//! schemas' names and logical types read back from the registry; and
//! schema evolution: a column added and a type widened register the next
//! version before the first record that needs it, a type change the
//! registry refuses (BACKWARD) stops the connector naming table, column,
//! subject and the registry's message before the slot passes it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serde_json::{Value, json};

use crate::schema_registry::{decode, registry_section, registry_url};
use crate::support::*;

pub(crate) const TABLE: &str = "CREATE TABLE sr_types (
    id int4 PRIMARY KEY,
    c_int2 int2, c_int8 int8, c_bool bool, c_f4 real, c_f8 float8,
    c_num numeric(10,2), c_numv numeric, c_text text, c_varchar varchar(10),
    c_uuid uuid, c_json json, c_jsonb jsonb, c_bytea bytea, c_date date,
    c_ts timestamp, c_ts3 timestamp(3), c_tstz timestamptz, c_int_arr int4[],
    c_text_arr text[]);
  ALTER TABLE sr_types OWNER TO walrelay;";

pub(crate) const ALL_TYPES_ROW: &str =
    "INSERT INTO sr_types VALUES (2, -5, 9007199254740993, true, 1.5,
    -2.25, 12.50, 3.14159, 'héllo \"q\"', 'v', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
    '{\"a\": 1}', '{\"b\": [1, 2]}', '\\x0102ff', '2024-01-01',
    '2024-01-01 00:00:00.123456', '2024-01-01 00:00:00.123', '2024-01-01 05:30:00.5+05:30',
    '{1,2,NULL}', '{a,\"b c\"}')";

/// The row of [`ALL_TYPES_ROW`] as Confluent's client decodes it: the
/// values of Debezium's JSON (tests/it/table_events.rs), but the
/// `numeric(10,2)` as a decimal (Avro: `Decimal('12.50')`, Protobuf: a
/// `confluent.type.Decimal`, both printed as its text; JSON Schema: a JSON
/// number) where the JSON path writes base64; Protobuf's NULL array
/// element is an absent `value`, printed as null.
fn all_types(format: &str) -> Value {
    json!({
        "id": 2, "c_int2": -5, "c_int8": 9007199254740993_i64, "c_bool": true,
        "c_f4": 1.5, "c_f8": -2.25,
        "c_num": if format == "json_schema" { json!(12.5) } else { json!("12.50") },
        "c_numv": {"scale": 5, "value": "BMsv"},
        "c_text": "héllo \"q\"", "c_varchar": "v",
        "c_uuid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "c_json": "{\"a\": 1}", "c_jsonb": "{\"b\": [1, 2]}", "c_bytea": "AQL/",
        "c_date": 19723, "c_ts": 1_704_067_200_123_456_i64, "c_ts3": 1_704_067_200_123_i64,
        "c_tstz": "2024-01-01T00:00:00.500000Z",
        "c_int_arr": [1, 2, null], "c_text_arr": ["a", "b c"],
    })
}

/// A row with only `id` (and `set`) not NULL (Protobuf: a NULL array is
/// no elements, as in every Protobuf mapping).
fn sparse(format: &str, id: i64, set: &[(&str, Value)]) -> Value {
    let mut row = all_types(format);
    for (k, v) in row.as_object_mut().unwrap().iter_mut() {
        *v = if format == "protobuf" && k.ends_with("_arr") {
            json!([])
        } else {
            Value::Null
        };
    }
    row["id"] = json!(id);
    for (k, v) in set {
        row[*k] = v.clone();
    }
    row
}

/// A record's place in the stream: its commit LSN (`walrelay.lsn`), then
/// its event id (`<lsn>:<index>`, `…:tombstone` after its delete,
/// `…:begin` before `…:end`): records of one topic may sit on several
/// partitions.
fn order(r: &Value) -> (u64, String) {
    let header = |name: &str| r["headers"][name].as_str().unwrap_or("").to_owned();
    let lsn = header("walrelay.lsn")
        .split_once('/')
        .map(|(hi, lo)| {
            u64::from_str_radix(hi, 16).unwrap() << 32 | u64::from_str_radix(lo, 16).unwrap()
        })
        .unwrap_or(0);
    (lsn, header("walrelay.event_id"))
}

/// Every record of `topics`, decoded with their schemas, in stream order
/// ([`order`]), once there are at least `n`.
pub(crate) async fn wait_decoded(
    format: &str,
    url: &str,
    topics: &[String],
    n: usize,
) -> Vec<Value> {
    wait_for(
        &format!("{n} records decoded from {topics:?}"),
        Duration::from_secs(120),
        || {
            let (format, url, topics) = (format.to_owned(), url.to_owned(), topics.to_vec());
            async move {
                let mut got = decode(&format!("{format}:schemas"), &url, &topics);
                got.sort_by_key(order);
                (got.len() >= n).then_some(got)
            }
        },
    )
    .await
}

/// The field `name` of a record schema (Avro `fields` or JSON Schema
/// `properties`), with the optional union unwrapped.
pub(crate) fn field<'a>(schema: &'a Value, name: &str) -> &'a Value {
    let found = match schema.get("fields") {
        Some(Value::Array(fields)) => fields
            .iter()
            .find(|f| f["name"] == name)
            .map(|f| &f["type"]),
        _ => schema["properties"].get(name),
    }
    .unwrap_or_else(|| panic!("no field {name} in {schema}"));
    unwrap_optional(found)
}

pub(crate) fn unwrap_optional(s: &Value) -> &Value {
    match s {
        Value::Array(branches) => branches.iter().find(|b| *b != "null").unwrap(),
        Value::Object(o) if o.contains_key("oneOf") => o["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["type"] != "null")
            .unwrap(),
        other => other,
    }
}

/// The name a schema gives itself: Avro `connect.name`, JSON Schema `title`.
pub(crate) fn name_of(s: &Value) -> &str {
    s.get("connect.name")
        .or_else(|| s.get("title"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Checks the registry's key and value schemas of a record: record names
/// as Debezium's converter writes them, the columns' logical types.
fn check_schemas(format: &str, r: &Value, base: &str) {
    if format == "protobuf" {
        return check_proto_schemas(r, base);
    }
    let key: Value = serde_json::from_str(r["key_schema"].as_str().unwrap()).unwrap();
    assert_eq!(name_of(&key), format!("{base}.Key"), "{key}");
    // The key column is required (a primary key column is NOT NULL).
    if format == "avro" {
        assert_eq!(
            key["fields"],
            json!([{"name": "id", "type": "int"}]),
            "{key}"
        );
    } else {
        let id = &key["properties"]["id"];
        assert_eq!(
            (&id["type"], &id["connect.type"]),
            (&json!("integer"), &json!("int32")),
            "{key}"
        );
    }
    let Some(value) = r["value_schema"].as_str() else {
        return; // a tombstone
    };
    let envelope: Value = serde_json::from_str(value).unwrap();
    assert_eq!(name_of(&envelope), format!("{base}.Envelope"), "{envelope}");
    let row = field(&envelope, "before");
    assert_eq!(name_of(row), format!("{base}.Value"), "{row}");
    let source = field(&envelope, "source");
    assert_eq!(
        name_of(source),
        "io.debezium.connector.postgresql.Source",
        "{source}"
    );
    assert_eq!(name_of(field(&envelope, "transaction")), "event.block");
    for (column, name) in [
        ("c_date", "io.debezium.time.Date"),
        ("c_ts", "io.debezium.time.MicroTimestamp"),
        ("c_ts3", "io.debezium.time.Timestamp"),
        ("c_tstz", "io.debezium.time.ZonedTimestamp"),
        ("c_uuid", "io.debezium.data.Uuid"),
        ("c_json", "io.debezium.data.Json"),
        ("c_jsonb", "io.debezium.data.Json"),
        ("c_num", "org.apache.kafka.connect.data.Decimal"),
        ("c_numv", "io.debezium.data.VariableScaleDecimal"),
    ] {
        let s = field(row, column);
        assert_eq!(name_of(s), name, "{column}: {s}");
        assert_eq!(s["connect.version"], 1, "{column}: {s}");
    }
    let num = field(row, "c_num");
    assert_eq!(
        num["connect.parameters"],
        json!({"scale": "2", "connect.decimal.precision": "10"}),
        "{num}"
    );
    if format == "avro" {
        assert_eq!(
            (
                &num["type"],
                &num["logicalType"],
                &num["precision"],
                &num["scale"]
            ),
            (&json!("bytes"), &json!("decimal"), &json!(10), &json!(2)),
            "{num}"
        );
        assert_eq!(field(row, "c_int2")["connect.type"], "int16");
        assert_eq!(*field(row, "c_int8"), json!("long"));
        assert_eq!(*field(row, "c_f4"), json!("float"));
        assert_eq!(*field(row, "c_bytea"), json!("bytes"));
        // The key column is required (NOT NULL); the others optional.
        let id = row["fields"].as_array().unwrap()[0].clone();
        assert_eq!(id, json!({"name": "id", "type": "int"}));
        let text = &row["fields"].as_array().unwrap()[8];
        assert_eq!(
            *text,
            json!({"name": "c_text", "type": ["null", "string"], "default": null})
        );
    } else {
        assert_eq!(field(row, "c_int2")["connect.type"], "int16");
        assert_eq!(field(row, "c_bytea")["connect.type"], "bytes");
        assert_eq!(num["type"], "number");
    }
}

/// [`check_schemas`] for Protobuf: the registry's texts are proto3 files.
fn check_proto_schemas(r: &Value, base: &str) {
    let key = r["key_schema"].as_str().unwrap();
    assert!(
        key.contains(&format!("package {base};"))
            && key.contains("message Key {\n  int32 id = 1;\n}"),
        "{key}"
    );
    let Some(schema) = r["value_schema"].as_str() else {
        return; // a tombstone
    };
    for needle in [
        "message Envelope {",
        "import \"confluent/type/decimal.proto\";",
        "confluent.type.Decimal c_num = 7 [(confluent.field_meta) = { params: [{ key: \
         \"precision\", value: \"10\" }, { key: \"scale\", value: \"2\" }] }];",
        "optional int32 c_int2 = 2 [(confluent.field_meta) = { params: [{ key: \
         \"connect.type\", value: \"int16\" }] }];",
        "{ key: \"connect.name\", value: \"io.debezium.time.MicroTimestamp\" }",
        "repeated .",
        "message Item_c_int_arr {\n      optional int32 value = 1;\n    }",
    ] {
        assert!(
            schema.contains(needle),
            "{needle:?} missing from:\n{schema}"
        );
    }
}

async fn table_events_decode_with_confluents_client(format: &str) {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("sr_tab").await;
    db.client.batch_execute(TABLE).await.unwrap();
    db.client
        .batch_execute("INSERT INTO sr_types (id, c_text) VALUES (1, 'before the start')")
        .await
        .unwrap();
    let names = Names::new("sr_tab");
    let prefix = names.connector.clone();
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\nformat = \"{format}\"\n\n\
             [[table]]\nname = \"public.sr_types\"\n\n{}",
            registry_section(&url)
        ),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    for sql in [
        ALL_TYPES_ROW,
        "UPDATE sr_types SET c_text = 'changed' WHERE id = 2",
        "DELETE FROM sr_types WHERE id = 2",
        "INSERT INTO sr_types (id) VALUES (3)",
    ] {
        db.client.batch_execute(sql).await.unwrap();
    }
    let topic = format!("{prefix}.public.sr_types");
    let got = wait_decoded(format, &url, std::slice::from_ref(&topic), 6).await;
    relay.stop();
    let mut changed = all_types(format);
    changed["c_text"] = json!("changed");
    // (op, key id, before, after); None: a tombstone.
    let want: Vec<(Option<&str>, i64, Value, Value)> = vec![
        (
            Some("r"),
            1,
            Value::Null,
            sparse(format, 1, &[("c_text", json!("before the start"))]),
        ),
        (Some("c"), 2, Value::Null, all_types(format)),
        (Some("u"), 2, Value::Null, changed),
        (Some("d"), 2, sparse(format, 2, &[]), Value::Null),
        (None, 2, Value::Null, Value::Null),
        (Some("c"), 3, Value::Null, sparse(format, 3, &[])),
    ];
    assert_eq!(got.len(), want.len(), "{got:#?}");
    let base = format!("{prefix}.public.sr_types");
    for (r, (op, id, before, after)) in got.iter().zip(&want) {
        assert_eq!(r["key"], json!({"id": id}), "{r}");
        assert!(
            r["headers"]["walrelay.event_id"]
                .as_str()
                .is_some_and(|h| !h.is_empty()),
            "{r}"
        );
        check_schemas(format, r, &base);
        let Some(op) = op else {
            assert_eq!(r["value"], Value::Null, "a tombstone: {r}");
            assert_eq!(r["value_schema_id"], Value::Null, "{r}");
            continue;
        };
        let v = &r["value"];
        assert_eq!(v["op"], *op, "{r}");
        assert_eq!(v["before"], *before, "before of {op}: {r}");
        assert_eq!(v["after"], *after, "after of {op}: {r}");
        let s = &v["source"];
        assert_eq!(s["name"], prefix.as_str());
        assert_eq!(s["db"], db.name.as_str());
        assert_eq!(
            (&s["schema"], &s["table"]),
            (&json!("public"), &json!("sr_types"))
        );
        assert_eq!(s["connector"], "postgresql");
        assert!(s["lsn"].as_i64().unwrap() > 0, "{s}");
        assert_eq!(
            s["snapshot"],
            if *op == "r" { "last" } else { "false" },
            "{s}"
        );
        assert!(v["ts_ms"].as_i64().unwrap() > 1_700_000_000_000, "{v}");
        assert_eq!(v["transaction"], Value::Null);
        if *op == "r" {
            assert_eq!(s["txId"], Value::Null);
        } else {
            assert!(s["txId"].as_i64().unwrap() > 0, "{s}");
        }
    }
    let ids: std::collections::HashSet<_> = got
        .iter()
        .filter_map(|r| r["value_schema_id"].as_u64())
        .collect();
    assert_eq!(ids.len(), 1, "one value schema for one shape: {ids:?}");
    eprintln!(
        "{format}: {} table records decoded by Confluent's client, every value and schema as \
         expected",
        got.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn avro_table_events_decode_with_confluents_client() {
    table_events_decode_with_confluents_client("avro").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn json_schema_table_events_decode_with_confluents_client() {
    table_events_decode_with_confluents_client("json_schema").await;
}

/// Decoded by confluent-kafka's `ProtobufDeserializer`.
#[tokio::test(flavor = "multi_thread")]
async fn protobuf_table_events_decode_with_confluents_client() {
    table_events_decode_with_confluents_client("protobuf").await;
}

/// The versions the registry holds under `subject`.
pub(crate) fn versions(url: &str, subject: &str) -> Vec<u64> {
    let out = std::process::Command::new("curl")
        .args(["-sf", &format!("{url}/subjects/{subject}/versions")])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// DDL on a captured Avro table: a column added, then `int4` widened to
/// `int8` — each registers the subject's next version before the first
/// record written with it (records before keep the old id); then `int8` →
/// `text`, which the registry refuses under BACKWARD: the connector stops
/// naming table, column, subject and the registry's message, nothing of
/// the refused shape reaches Kafka, and the slot stays before the change.
#[tokio::test(flavor = "multi_thread")]
async fn ddl_registers_the_next_version_or_stops_before_an_incompatible_one() {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("sr_ddl").await;
    db.client
        .batch_execute(
            "CREATE TABLE sr_evo (id int4 PRIMARY KEY, amount int4);
             ALTER TABLE sr_evo OWNER TO walrelay;",
        )
        .await
        .unwrap();
    let names = Names::new("sr_ddl");
    let prefix = names.connector.clone();
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\nformat = \"avro\"\n\n\
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
             INSERT INTO sr_evo VALUES (2, 20, 'second');
             ALTER TABLE sr_evo ALTER COLUMN amount TYPE int8;
             INSERT INTO sr_evo VALUES (3, 30000000000, 'third');",
        )
        .await
        .unwrap();
    let got = wait_decoded("avro", &url, std::slice::from_ref(&topic), 3).await;
    let after: Vec<&Value> = got.iter().map(|r| &r["value"]["after"]).collect();
    assert_eq!(
        after,
        [
            &json!({"id": 1, "amount": 10}),
            &json!({"id": 2, "amount": 20, "note": "second"}),
            &json!({"id": 3, "amount": 30_000_000_000_i64, "note": "third"}),
        ]
    );
    let ids: Vec<u64> = got
        .iter()
        .map(|r| r["value_schema_id"].as_u64().unwrap())
        .collect();
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "a new schema per shape: {ids:?}"
    );
    assert_eq!(versions(&url, &subject), [1, 2, 3], "{subject}");
    let amount: Vec<Value> = got
        .iter()
        .map(|r| {
            let envelope: Value =
                serde_json::from_str(r["value_schema"].as_str().unwrap()).unwrap();
            field(field(&envelope, "before"), "amount").clone()
        })
        .collect();
    assert_eq!(amount, [json!("int"), json!("int"), json!("long")]);

    // long → string: refused under BACKWARD.
    let before = db.current_wal_lsn().await;
    db.client
        .batch_execute(
            "ALTER TABLE sr_evo ALTER COLUMN amount TYPE text USING amount::text;
             INSERT INTO sr_evo VALUES (4, 'four', 'fourth');",
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
        "column amount: int8 → text",
        subject.as_str(),
        "ncompatib",
    ] {
        assert!(line.contains(needle), "{needle:?} missing from: {line}");
    }
    assert_eq!(
        records_in(&[topic.as_str()]),
        3,
        "a record of the refused shape"
    );
    assert_eq!(versions(&url, &subject), [1, 2, 3]);
    let confirmed = db.confirmed_flush(&names.slot).await.unwrap_or(0);
    assert!(
        confirmed <= before,
        "the slot passed the refused change: {confirmed} > {before}"
    );
    eprintln!("refused: {line}");
}

/// A topic whose value subject already holds an Avro schema, written by a
/// `json_schema` table: the registry cannot register a JSON Schema there
/// (Apicurio answers a 500, which alone would be retried forever). walrelay
/// asks the subject's latest schema, sees the other type, and stops naming
/// the subject, both types and the fix; no record reaches Kafka.
#[tokio::test(flavor = "multi_thread")]
async fn a_subject_holding_another_schema_type_stops_the_connector_naming_it() {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("sr_type").await;
    db.client
        .batch_execute(
            "CREATE TABLE sr_type (id int4 PRIMARY KEY, note text);
             ALTER TABLE sr_type OWNER TO walrelay;",
        )
        .await
        .unwrap();
    let names = Names::new("sr_type");
    let prefix = names.connector.clone();
    let topic = format!("{prefix}.public.sr_type");
    let subject = format!("{topic}-value");
    let avro = json!({
        "schema": json!({"type": "record", "name": "Other", "fields": [
            {"name": "x", "type": "string"}
        ]})
        .to_string()
    });
    let out = std::process::Command::new("curl")
        .args([
            "-sf",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/vnd.schemaregistry.v1+json",
            "--data",
            &avro.to_string(),
            &format!("{url}/subjects/{subject}/versions"),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "registering the Avro schema: {out:?}");
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\nformat = \"json_schema\"\n\n\
             [[table]]\nname = \"public.sr_type\"\n\n{}",
            registry_section(&url)
        ),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    db.client
        .batch_execute("INSERT INTO sr_type VALUES (1, 'one')")
        .await
        .unwrap();
    let log = relay.expect_exit(1, Duration::from_secs(60));
    let line = log
        .lines()
        .find(|l| l.contains(&format!("subject {subject:?} holds schemas of type AVRO")))
        .unwrap_or_else(|| panic!("no error naming the subject's schema type in:\n{log}"));
    for needle in ["walrelay writes type JSON there", "subject_name_strategy"] {
        assert!(line.contains(needle), "{needle:?} missing from: {line}");
    }
    assert_eq!(
        records_in(&[topic.as_str()]),
        0,
        "a record without its schema"
    );
    assert_eq!(versions(&url, &subject), [1], "{subject}");
}

/// What the catalog knows and pgoutput does not: a `NOT NULL` column
/// outside the key is required (the table is REPLICA IDENTITY FULL, so
/// every event holds its value), a nullable one optional, an enum column
/// Debezium's `io.debezium.data.Enum` with its labels. Then the stream
/// moves past the catalog read at start: `DROP NOT NULL` and a NULL row
/// register the next version with the column optional, `ALTER TYPE … ADD
/// VALUE` and a row with the new label the next one with the label in
/// `allowed` — every row arrives, each decoded by Confluent's client.
#[tokio::test(flavor = "multi_thread")]
async fn not_null_and_enum_columns_follow_the_catalog_and_the_stream_widens_them() {
    not_null_and_enum_columns("avro").await;
}

/// The same in JSON Schema, where `NOT NULL` columns outside the key stay
/// optional (Apicurio refuses, under BACKWARD, a required property made
/// `oneOf` null later: found by this test), so only the enum widens.
#[tokio::test(flavor = "multi_thread")]
async fn json_schema_not_null_and_enum_columns_follow_the_catalog_and_the_stream_widens_them() {
    not_null_and_enum_columns("json_schema").await;
}

async fn not_null_and_enum_columns(format: &str) {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("sr_nn").await;
    db.client
        .batch_execute(
            "CREATE TYPE mood AS ENUM ('happy', 'sad');
             CREATE TABLE sr_nn (id int4 PRIMARY KEY, must text NOT NULL, may text, m mood);
             ALTER TABLE sr_nn REPLICA IDENTITY FULL;
             ALTER TABLE sr_nn OWNER TO walrelay;",
        )
        .await
        .unwrap();
    let names = Names::new("sr_nn");
    let prefix = names.connector.clone();
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\nformat = \"{format}\"\n\n\
             [[table]]\nname = \"public.sr_nn\"\n\n{}",
            registry_section(&url)
        ),
    );
    let topic = format!("{prefix}.public.sr_nn");
    let subject = format!("{topic}-value");
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    db.client
        .batch_execute("INSERT INTO sr_nn VALUES (1, 'one', NULL, 'happy')")
        .await
        .unwrap();
    let got = wait_decoded(format, &url, std::slice::from_ref(&topic), 1).await;
    // A column's schema in the record's value schema: (optional, the
    // schema with the optional union unwrapped).
    let column = |r: &Value, name: &str| -> (bool, Value) {
        let envelope: Value = serde_json::from_str(r["value_schema"].as_str().unwrap()).unwrap();
        let row = field(&envelope, "before");
        let s = match row.get("fields") {
            Some(Value::Array(fields)) => {
                fields.iter().find(|f| f["name"] == name).unwrap()["type"].clone()
            }
            _ => row["properties"][name].clone(),
        };
        let optional = s.is_array() || s.get("oneOf").is_some();
        (optional, unwrap_optional(&s).clone())
    };
    let is_enum = |s: &Value, allowed: &str| {
        name_of(s) == "io.debezium.data.Enum"
            && s["connect.version"] == 1
            && s["connect.parameters"] == json!({"allowed": allowed})
    };
    assert!(!column(&got[0], "id").0);
    let avro = format == "avro";
    assert_eq!(
        column(&got[0], "must").0,
        !avro,
        "NOT NULL: required in Avro"
    );
    assert!(column(&got[0], "may").0);
    let (optional, m) = column(&got[0], "m");
    assert!(optional && is_enum(&m, "happy,sad"), "{m}");
    assert_eq!(
        got[0]["value"]["after"],
        json!({"id": 1, "must": "one", "may": null, "m": "happy"})
    );
    assert_eq!(versions(&url, &subject), [1]);

    // The constraint dropped, then a NULL: the next version, optional.
    db.client
        .batch_execute("ALTER TABLE sr_nn ALTER COLUMN must DROP NOT NULL")
        .await
        .unwrap();
    db.client
        .batch_execute("INSERT INTO sr_nn VALUES (2, NULL, 'may', 'sad')")
        .await
        .unwrap();
    // A label added since the start (its own transaction: PostgreSQL
    // refuses a new label in the transaction that added it).
    db.client
        .batch_execute("ALTER TYPE mood ADD VALUE 'ecstatic'")
        .await
        .unwrap();
    db.client
        .batch_execute(
            "INSERT INTO sr_nn VALUES (3, 'three', NULL, 'ecstatic');
             UPDATE sr_nn SET may = 'changed' WHERE id = 2;",
        )
        .await
        .unwrap();
    let got = wait_decoded(format, &url, std::slice::from_ref(&topic), 4).await;
    let after: Vec<&Value> = got.iter().map(|r| &r["value"]["after"]).collect();
    assert_eq!(
        after,
        [
            &json!({"id": 1, "must": "one", "may": null, "m": "happy"}),
            &json!({"id": 2, "must": null, "may": "may", "m": "sad"}),
            &json!({"id": 3, "must": "three", "may": null, "m": "ecstatic"}),
            &json!({"id": 2, "must": null, "may": "changed", "m": "sad"}),
        ]
    );
    assert!(column(&got[1], "must").0, "widened");
    assert!(is_enum(&column(&got[1], "m").1, "happy,sad"));
    assert!(column(&got[2], "must").0);
    let m = column(&got[2], "m").1;
    assert!(is_enum(&m, "happy,sad,ecstatic"), "{m}");
    assert_eq!(got[3]["value_schema_id"], got[2]["value_schema_id"]);
    let want: &[u64] = if avro { &[1, 2, 3] } else { &[1, 2] };
    assert_eq!(versions(&url, &subject), want, "{subject}");
    relay.wait_log("ecstatic", Duration::from_secs(10)).await;
    relay.stop();
    let log = relay.log();
    let nulls = usize::from(avro);
    assert_eq!(
        log.matches("holds NULL").count(),
        nulls,
        "said once:\n{log}"
    );
    assert_eq!(
        log.matches("holds enum label").count(),
        1,
        "said once:\n{log}"
    );
}

/// `ALTER TABLE … SET NOT NULL` on a captured column while walrelay runs:
/// the column stays optional (the catalog was read at start), and the next
/// start makes it required — which the registry refuses under BACKWARD
/// (a required field after an optional one). walrelay stops naming the
/// table, the column made required by the catalog and the subject, before
/// the slot passes the row; nothing of the refused version reaches Kafka
/// (docs/compatibility.md says so and how to go on).
#[tokio::test(flavor = "multi_thread")]
async fn set_not_null_while_running_is_refused_at_the_next_start_naming_the_column() {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("sr_setnn").await;
    db.client
        .batch_execute(
            "CREATE TABLE sr_setnn (id int4 PRIMARY KEY, must text);
             ALTER TABLE sr_setnn REPLICA IDENTITY FULL;
             ALTER TABLE sr_setnn OWNER TO walrelay;",
        )
        .await
        .unwrap();
    let names = Names::new("sr_setnn");
    let prefix = names.connector.clone();
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\nformat = \"avro\"\n\n\
             [[table]]\nname = \"public.sr_setnn\"\n\n{}",
            registry_section(&url)
        ),
    );
    let topic = format!("{prefix}.public.sr_setnn");
    let subject = format!("{topic}-value");
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    db.client
        .batch_execute(
            "INSERT INTO sr_setnn VALUES (1, 'one');
             ALTER TABLE sr_setnn ALTER COLUMN must SET NOT NULL;
             INSERT INTO sr_setnn VALUES (2, 'two');",
        )
        .await
        .unwrap();
    let got = wait_decoded("avro", &url, std::slice::from_ref(&topic), 2).await;
    assert_eq!(got[1]["value_schema_id"], got[0]["value_schema_id"]);
    assert_eq!(
        versions(&url, &subject),
        [1],
        "optional until the next start"
    );
    relay.stop();
    let before = db.current_wal_lsn().await;
    db.client
        .batch_execute("INSERT INTO sr_setnn VALUES (3, 'three')")
        .await
        .unwrap();
    let mut relay = RelayProcess::start(&config, &[]);
    let log = relay.expect_exit(1, Duration::from_secs(60));
    let line = log
        .lines()
        .find(|l| l.contains("schema registry") && l.contains("HTTP 409"))
        .unwrap_or_else(|| panic!("no refusal naming the registry in:\n{log}"));
    for needle in [
        "public.sr_setnn",
        "required because the catalog says NOT NULL: must",
        subject.as_str(),
    ] {
        assert!(line.contains(needle), "{needle:?} missing from: {line}");
    }
    assert_eq!(
        records_in(&[topic.as_str()]),
        2,
        "a record of the refused version"
    );
    assert_eq!(versions(&url, &subject), [1]);
    let confirmed = db.confirmed_flush(&names.slot).await.unwrap_or(0);
    assert!(confirmed <= before, "the slot passed the refused row");
    eprintln!("refused: {line}");
}
