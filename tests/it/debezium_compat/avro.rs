//! `[[table]] format = "avro"` against Debezium 3.6.1 writing Avro through
//! Apicurio's Kafka Connect converter (`io.apicurio:apicurio-registry-utils-
//! converter`, 2.6.13.Final: the 3.x line does not resolve from Maven
//! Central alone) into the same Apicurio Registry 3.3.3, in Confluent's wire
//! format: the same changes of one table of many types (a snapshot row, an
//! insert, an update, a delete with its tombstone, a row of NULLs), and of a
//! REPLICA IDENTITY FULL table with a `NOT NULL` column outside the key, a
//! nullable one, an enum column, an enum array and a `NOT NULL` domain's
//! column (required, optional, `io.debezium.data.Enum`, an array of
//! required `Enum`s and required on both sides), are
//! decoded on both sides by confluent-kafka's Python client and compared
//! record by record — keys, values (less [`super::DELIBERATE`]'s fields)
//! and the registered key and value schemas, field by field. The same for
//! `[[message]] format = "avro"` against Debezium's logical decoding
//! message events (`op: "m"`, `MessageKey` / `MessageValue`). The schema
//! differences allowed are [`SCHEMA_DIFFERENCES`], each a row of
//! docs/compatibility.md; anything else fails the test.
//!
//! Needs the Connect classpath (`deploy/dev/connect.sh up`) and the
//! converter's jars (`WALRELAY_APICURIO_CONVERTER_LIBS`, which the same
//! script prints).

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Connect, DEBEZIUM_READY, Debezium, connect_libs, normalize};
use crate::schema_registry::{decode, registry_env, registry_section, registry_url};
use crate::schema_registry_tables::{ALL_TYPES_ROW, TABLE};
use crate::support::*;

/// Schema paths (`Envelope.source.ts_us`) whose difference is deliberate,
/// with the docs/compatibility.md row that says why.
const SCHEMA_DIFFERENCES: &[(&str, &str)] = &[
    ("Envelope.ts_us", "`ts_us`, `ts_ns`, `source.origin*`"),
    ("Envelope.ts_ns", "`ts_us`, `ts_ns`, `source.origin*`"),
    (
        "Envelope.source.ts_us",
        "`ts_us`, `ts_ns`, `source.origin*`",
    ),
    (
        "Envelope.source.ts_ns",
        "`ts_us`, `ts_ns`, `source.origin*`",
    ),
    (
        "Envelope.source.origin",
        "`ts_us`, `ts_ns`, `source.origin*`",
    ),
    (
        "Envelope.source.origin_lsn",
        "`ts_us`, `ts_ns`, `source.origin*`",
    ),
    // Message events carry the same source block (and no top-level
    // `ts_us`/`ts_ns` on either side).
    (
        "MessageValue.source.ts_us",
        "`ts_us`, `ts_ns`, `source.origin*`",
    ),
    (
        "MessageValue.source.ts_ns",
        "`ts_us`, `ts_ns`, `source.origin*`",
    ),
    (
        "MessageValue.source.origin",
        "`ts_us`, `ts_ns`, `source.origin*`",
    ),
    (
        "MessageValue.source.origin_lsn",
        "`ts_us`, `ts_ns`, `source.origin*`",
    ),
];

/// A REPLICA IDENTITY FULL table (its old rows hold every column, so its
/// `NOT NULL` columns are required on both sides) with a `NOT NULL` column
/// outside the key, a nullable one, an enum column, an array of the enum
/// (Debezium: of required `Enum`s) and a column of a domain declared
/// `NOT NULL` (Debezium: required, as the JDBC driver's `IS_NULLABLE`
/// says). No domain over an enum: Debezium 3.6.1 does not start on a
/// database holding one (`TypeRegistry.prime` fails on its missing labels:
/// docs/compatibility.md); `schema_registry_enums` tests walrelay's.
const NN_TABLE: &str = "CREATE TYPE mood AS ENUM ('happy', 'sad');
  CREATE DOMAIN pos AS int4 NOT NULL CHECK (VALUE > 0);
  CREATE TABLE sr_nn (id int4 PRIMARY KEY, must text NOT NULL, may text, m mood,
    ms mood[], p pos);
  ALTER TABLE sr_nn REPLICA IDENTITY FULL;
  ALTER TABLE sr_nn OWNER TO walrelay;";

/// Where `deploy/dev/connect.sh up` put Apicurio's converter jars
/// (`WALRELAY_APICURIO_CONVERTER_LIBS`, else what `connect.sh env` says).
fn converter_libs() -> String {
    let libs = std::env::var("WALRELAY_APICURIO_CONVERTER_LIBS").unwrap_or_else(|_| {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = std::process::Command::new(root.join("deploy/dev/connect.sh"))
            .arg("env")
            .output()
            .expect("run deploy/dev/connect.sh env");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("export WALRELAY_APICURIO_CONVERTER_LIBS="))
            .unwrap_or_default()
            .to_owned()
    });
    let has_converter = std::fs::read_dir(&libs).is_ok_and(|d| {
        d.flatten().any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("apicurio-registry-utils-converter-")
        })
    });
    assert!(
        has_converter,
        "no Apicurio converter jars in {libs:?}: run `eval \"$(deploy/dev/connect.sh up)\"` \
         (deploy/test.sh does), then the test again"
    );
    libs
}

/// The differences between schemas `w` (walrelay's) and `d` (Debezium's),
/// by path: record fields by name (their order apart), types parsed.
fn schema_diff(path: &str, w: &Value, d: &Value, out: &mut Vec<String>) {
    match (w, d) {
        (Value::Object(wo), Value::Object(d_o)) if wo.get("type") == Some(&"record".into()) => {
            let fields = |o: &serde_json::Map<String, Value>| -> BTreeMap<String, Value> {
                o["fields"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| (f["name"].as_str().unwrap().to_owned(), f.clone()))
                    .collect()
            };
            let name = wo["name"].as_str().unwrap_or("?");
            let here = if path.is_empty() {
                name.to_owned()
            } else {
                path.to_owned()
            };
            for key in ["name", "namespace", "connect.name", "connect.version"] {
                if wo.get(key) != d_o.get(key) {
                    out.push(format!(
                        "{here} {key}: walrelay {:?}, Debezium {:?}",
                        wo.get(key),
                        d_o.get(key)
                    ));
                }
            }
            let (wf, df) = (fields(wo), fields(d_o));
            for (n, f) in &df {
                match wf.get(n) {
                    None => out.push(format!("{here}.{n}: only Debezium's")),
                    Some(g) => {
                        if g.get("default") != f.get("default") {
                            out.push(format!(
                                "{here}.{n} default: walrelay {:?}, Debezium {:?}",
                                g.get("default"),
                                f.get("default")
                            ));
                        }
                        schema_diff(&format!("{here}.{n}"), &g["type"], &f["type"], out);
                    }
                }
            }
            for n in wf.keys().filter(|n| !df.contains_key(*n)) {
                out.push(format!("{here}.{n}: only walrelay's"));
            }
        }
        (Value::Array(wu), Value::Array(du)) if wu.len() == du.len() => {
            for (a, b) in wu.iter().zip(du) {
                schema_diff(path, a, b, out);
            }
        }
        // A named type referred to by name on one side: compare names.
        (Value::String(a), Value::Object(b)) | (Value::Object(b), Value::String(a))
            if b.get("type") == Some(&"record".into()) =>
        {
            let full = format!(
                "{}.{}",
                b["namespace"].as_str().unwrap_or(""),
                b["name"].as_str().unwrap_or("")
            );
            if *a != full && a != b["name"].as_str().unwrap_or("") {
                out.push(format!("{path}: {a} vs the record {full}"));
            }
        }
        (Value::String(a), Value::String(b)) => {
            let short = |s: &str| s.rsplit('.').next().unwrap_or(s).to_owned();
            if a != b && short(a) != short(b) {
                out.push(format!("{path}: walrelay {a}, Debezium {b}"));
            }
        }
        _ if w == d => {}
        _ => out.push(format!("{path}: walrelay {w}, Debezium {d}")),
    }
}

/// Debezium 3.6.1 under Kafka Connect (group `connect_name`) with
/// Apicurio's Avro converters, capturing `tables` (of schema `public`) of
/// `db` into topics prefixed `d_prefix`, through a publication and a slot
/// of its own (its name returned); `more` adds connector properties.
async fn debezium_with_avro(
    db: &TestDb,
    names: &Names,
    connect_name: &str,
    d_prefix: &str,
    tables: &[&str],
    snapshot_mode: &str,
    more: &str,
) -> (Connect, String) {
    let (libs, _) = connect_libs();
    let converter = converter_libs();
    let v2 = registry_env("WALRELAY_REGISTRY_URL").replace("/apis/ccompat/v7", "/apis/registry/v2");
    let d_publication = format!("{}_dpub", names.connector);
    db.client
        .batch_execute(&format!(
            "CREATE PUBLICATION {d_publication} FOR TABLE {}",
            tables.join(", ")
        ))
        .await
        .unwrap();
    let d_slot = format!("{}_dslot", names.connector);
    let pattern: Vec<String> = tables.iter().map(|t| format!("public\\\\.{t}")).collect();
    let connect = Connect::start_with_classpath(
        connect_name,
        &format!("{}/*:{converter}/*", libs.display()),
        &avro_converters(&v2),
        &[Debezium {
            name: d_prefix,
            topic_prefix: d_prefix,
            slot: &d_slot,
            snapshot_mode,
            tables: &pattern.join(","),
            more,
        }
        .properties(db, &d_publication)],
    );
    (connect, d_slot)
}

#[tokio::test(flavor = "multi_thread")]
async fn avro_table_events_match_debeziums_through_apicurios_converter() {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("dbz_avro").await;
    db.client.batch_execute(TABLE).await.unwrap();
    db.client.batch_execute(NN_TABLE).await.unwrap();
    db.client
        .batch_execute(
            "INSERT INTO sr_types (id, c_text) VALUES (1, 'before the start');
             INSERT INTO sr_nn VALUES (1, 'one', NULL, 'happy', '{happy,sad}', 1);",
        )
        .await
        .unwrap();
    let names = Names::new("dbz_avro");
    let (w_prefix, d_prefix) = (
        format!("{}_w", names.connector),
        format!("{}_d", names.connector),
    );
    let (w_topic, d_topic) = (
        format!("{w_prefix}.public.sr_types"),
        format!("{d_prefix}.public.sr_types"),
    );
    let (w_nn, d_nn) = (
        format!("{w_prefix}.public.sr_nn"),
        format!("{d_prefix}.public.sr_nn"),
    );
    // One partition each: the two sides' keys differ in their schema ids,
    // so murmur2 would spread them differently; one partition keeps one
    // order to compare.
    create_topics(
        &[w_topic.clone(), d_topic.clone(), w_nn.clone(), d_nn.clone()],
        1,
    )
    .await;
    let (mut connect, d_slot) = debezium_with_avro(
        &db,
        &names,
        "walrelay_dbz_avro",
        &d_prefix,
        &["sr_types", "sr_nn"],
        "initial",
        "",
    )
    .await;
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{w_prefix}\"\nformat = \"avro\"\n\n\
             [[table]]\nname = \"public.sr_types\"\n\n\
             [[table]]\nname = \"public.sr_nn\"\n\n{}",
            registry_section(&url)
        ),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", DEBEZIUM_READY).await;
    wait_for("Debezium's snapshot", DEBEZIUM_READY, || {
        connect.assert_alive();
        let n = records_in(&[d_topic.as_str()]) + records_in(&[d_nn.as_str()]);
        let (db, slot) = (&db, &d_slot);
        async move {
            db.confirmed_flush(slot).await?;
            (n >= 2).then_some(())
        }
    })
    .await;
    for sql in [
        ALL_TYPES_ROW,
        "UPDATE sr_types SET c_text = 'changed' WHERE id = 2",
        "DELETE FROM sr_types WHERE id = 2",
        "INSERT INTO sr_types (id) VALUES (3)",
        "INSERT INTO sr_nn VALUES (2, 'two', 'may', 'sad', NULL, 2)",
        "UPDATE sr_nn SET must = 'changed', m = 'happy', ms = '{}' WHERE id = 2",
        "DELETE FROM sr_nn WHERE id = 1",
    ] {
        db.client.batch_execute(sql).await.unwrap();
    }
    let both = wait_for("6 + 5 records on each side", DEBEZIUM_READY, || {
        connect.assert_alive();
        let (url, w, d) = (url.clone(), w_topic.clone(), d_topic.clone());
        let (w_nn, d_nn) = (w_nn.clone(), d_nn.clone());
        async move {
            let w = decode("avro:schemas", &url, &[w]);
            let d = decode("avro:schemas", &url, &[d]);
            let w_nn = decode("avro:schemas", &url, &[w_nn]);
            let d_nn = decode("avro:schemas", &url, &[d_nn]);
            (w.len() >= 6 && d.len() >= 6 && w_nn.len() >= 5 && d_nn.len() >= 5)
                .then_some((w, d, w_nn, d_nn))
        }
    })
    .await;
    relay.stop();
    drop(connect);
    let (w, d, w_nn, d_nn) = both;
    compare(&w, &d, &w_prefix, &d_prefix, "table events");
    // The NOT NULL column and the NOT NULL domain's are required on both
    // sides, the enum Debezium's Enum with its labels, the enum array's
    // items too, required: not just equal, present.
    let value = w_nn[1]["value_schema"].as_str().unwrap();
    assert!(
        value.contains(r#"{"name":"must","type":"string"}"#),
        "{value}"
    );
    assert!(value.contains(r#"{"name":"p","type":"int"}"#), "{value}");
    assert!(value.contains(r#""allowed":"happy,sad""#), "{value}");
    let envelope: Value = serde_json::from_str(value).unwrap();
    let ms = envelope["fields"][0]["type"][1]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "ms")
        .unwrap();
    assert_eq!(
        ms["type"],
        serde_json::json!(["null", {"type": "array", "items": {
            "type": "string",
            "connect.version": 1,
            "connect.parameters": {"allowed": "happy,sad"},
            "connect.name": "io.debezium.data.Enum"
        }}]),
        "{value}"
    );
    compare(
        &w_nn,
        &d_nn,
        &w_prefix,
        &d_prefix,
        "NOT NULL and enum table events",
    );
}

/// Worker properties: key and value through Apicurio's `AvroConverter`
/// into the registry's v2 API at `v2`, in Confluent's wire format.
fn avro_converters(v2: &str) -> String {
    ["key", "value"]
        .iter()
        .map(|part| {
            format!(
                "{part}.converter=io.apicurio.registry.utils.converter.AvroConverter
{part}.converter.apicurio.registry.url={v2}
{part}.converter.apicurio.registry.auto-register=true
{part}.converter.apicurio.registry.find-latest=true
{part}.converter.apicurio.registry.as-confluent=true
{part}.converter.apicurio.registry.use-id=contentId
{part}.converter.apicurio.registry.headers.enabled=false
"
            )
        })
        .collect()
}

/// Compares walrelay's records `w` with Debezium's `d` (decoded with their
/// schemas, in one order) record by record: keys, values less
/// [`super::DELIBERATE`]'s fields, `source.sequence`'s LSN, and the key
/// and value schemas field by field (Debezium's topic prefix `d_prefix`
/// read as walrelay's `w_prefix`); fails on any difference but
/// [`SCHEMA_DIFFERENCES`]'.
fn compare(w: &[Value], d: &[Value], w_prefix: &str, d_prefix: &str, what: &str) {
    let mut differences = Vec::new();
    if w.len() != d.len() {
        differences.push(format!("{} records vs Debezium's {}", w.len(), d.len()));
    }
    let mut schema_differences = std::collections::BTreeSet::new();
    for (i, (wr, dr)) in w.iter().zip(d).enumerate() {
        if wr["key"] != dr["key"] {
            differences.push(format!("record {i} key: {} vs {}", wr["key"], dr["key"]));
        }
        let (mut wv, mut dv) = (wr["value"].clone(), dr["value"].clone());
        if !wv.is_null() || !dv.is_null() {
            let (ws, ds) = (normalize(&mut wv), normalize(&mut dv));
            if ws != ds {
                differences.push(format!("record {i} source.sequence[1]: {ws:?} vs {ds:?}"));
            }
        }
        if wv != dv {
            differences.push(format!(
                "record {i} value:\n  walrelay {wv}\n  Debezium {dv}"
            ));
        }
        for part in ["key_schema", "value_schema"] {
            let (Some(ws), Some(ds)) = (wr[part].as_str(), dr[part].as_str()) else {
                if wr[part] != dr[part] {
                    differences.push(format!("record {i} {part}: one side has none"));
                }
                continue;
            };
            let ws: Value = serde_json::from_str(ws).unwrap();
            let ds: Value = serde_json::from_str(&ds.replace(d_prefix, w_prefix)).unwrap();
            let mut out = Vec::new();
            schema_diff("", &ws, &ds, &mut out);
            schema_differences.extend(out);
        }
    }
    let unexplained: Vec<&String> = schema_differences
        .iter()
        .filter(|d| {
            !SCHEMA_DIFFERENCES
                .iter()
                .any(|(path, _)| d.starts_with(&format!("{path}:")))
        })
        .collect();
    eprintln!(
        "{what}: {} records compared with Debezium's; value differences: {}; schema \
         differences: {} ({} documented):\n{}",
        w.len().min(d.len()),
        differences.len(),
        schema_differences.len(),
        schema_differences.len() - unexplained.len(),
        schema_differences
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        differences.is_empty() && unexplained.is_empty(),
        "walrelay's Avro {what} differ from Debezium's:\n{}\nschemas:\n{}",
        differences.join("\n"),
        unexplained
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// `[[message]] format = "avro"` against Debezium's message events
/// (`<topic.prefix>.message`) through the same converter: transactional
/// messages of two prefixes — JSON, bytes that are no text, an empty
/// payload, non-ASCII text, two in one transaction beside a row change —
/// compared record by record as the table events are.
#[tokio::test(flavor = "multi_thread")]
async fn avro_message_events_match_debeziums_through_apicurios_converter() {
    let _one = super::ONE_AT_A_TIME.lock().await;
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("dbz_avro_msg").await;
    let names = Names::new("dbz_am");
    let (w_prefix, d_prefix) = (
        format!("{}_w", names.connector),
        format!("{}_d", names.connector),
    );
    let (w_topic, d_topic) = (format!("{w_prefix}.message"), format!("{d_prefix}.message"));
    // One partition each: the two prefixes' keys would hash apart.
    create_topics(&[w_topic.clone(), d_topic.clone()], 1).await;
    db.client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY); ALTER TABLE t OWNER TO walrelay;")
        .await
        .unwrap();
    let (mut connect, d_slot) = debezium_with_avro(
        &db,
        &names,
        "walrelay_dbz_avro_messages",
        &d_prefix,
        &["t"],
        "no_data",
        "",
    )
    .await;
    // walrelay: message-only (its publication created empty).
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[[message]]\nprefix = \"orders*\"\ntopic = \"{w_topic}\"\nformat = \"avro\"\n\n{}",
            registry_section(&url)
        ),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", DEBEZIUM_READY).await;
    wait_for("Debezium's slot", DEBEZIUM_READY, || {
        connect.assert_alive();
        let (db, slot) = (&db, &d_slot);
        async move { db.confirmed_flush(slot).await.map(|_| ()) }
    })
    .await;
    db.client
        .batch_execute(
            r#"INSERT INTO t VALUES (1);
               BEGIN;
               INSERT INTO t VALUES (2);
               SELECT pg_logical_emit_message(true, 'orders', '{"order_id":"42","type":"Paid"}');
               SELECT pg_logical_emit_message(true, 'orders', '\x00ff10'::bytea);
               COMMIT;
               SELECT pg_logical_emit_message(true, 'orders.paid', ''::bytea);
               SELECT pg_logical_emit_message(true, 'orders.paid', 'héllo "q" 😀');"#,
        )
        .await
        .unwrap();
    let both = wait_for("4 message records on each side", DEBEZIUM_READY, || {
        connect.assert_alive();
        let (url, w, d) = (url.clone(), w_topic.clone(), d_topic.clone());
        async move {
            let w = decode("avro:schemas", &url, &[w]);
            let d = decode("avro:schemas", &url, &[d]);
            (w.len() >= 4 && d.len() >= 4).then_some((w, d))
        }
    })
    .await;
    relay.stop();
    drop(connect);
    let (w, d) = both;
    // What was emitted, on both sides (so equal values are not equally
    // wrong): the prefix and the content's bytes, base64 as decoded.
    let b64 = |s: &[u8]| {
        let mut out = Vec::new();
        walrelay::router::debezium::base64(&mut out, s);
        String::from_utf8(out).unwrap()
    };
    let emitted = [
        ("orders", b64(br#"{"order_id":"42","type":"Paid"}"#)),
        ("orders", b64(&[0x00, 0xff, 0x10])),
        ("orders.paid", String::new()),
        ("orders.paid", b64("héllo \"q\" 😀".as_bytes())),
    ];
    for side in [&w, &d] {
        let got: Vec<(&str, &str)> = side
            .iter()
            .map(|r| {
                (
                    r["value"]["message"]["prefix"].as_str().unwrap_or("?"),
                    r["value"]["message"]["content"].as_str().unwrap_or("?"),
                )
            })
            .collect();
        let want: Vec<(&str, &str)> = emitted.iter().map(|(p, c)| (*p, c.as_str())).collect();
        assert_eq!(got, want);
    }
    compare(&w, &d, &w_prefix, &d_prefix, "message events");
}

/// `provide_transaction_metadata` with `format = "avro"` against Debezium's
/// `provide.transaction.metadata=true` through the same converter: three
/// transactions over two tables (inserts, an update, a delete and its
/// tombstone) — the `<prefix>.transaction` topics compared record by
/// record (BEGIN/END keys, values with `ts_ms`, their schemas), less
/// Debezium's pairs of transactions without an event
/// (docs/compatibility.md: "transactions without a table event"), and the
/// table events with their `transaction` blocks.
#[tokio::test(flavor = "multi_thread")]
async fn avro_transaction_metadata_matches_debeziums_through_apicurios_converter() {
    let _one = super::ONE_AT_A_TIME.lock().await;
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("dbz_avro_txm").await;
    db.client
        .batch_execute(
            "CREATE TABLE txa (id int4 PRIMARY KEY, note text); ALTER TABLE txa OWNER TO walrelay;
             CREATE TABLE txb (id int4 PRIMARY KEY); ALTER TABLE txb OWNER TO walrelay;",
        )
        .await
        .unwrap();
    let names = Names::new("dbz_at");
    let (w_prefix, d_prefix) = (
        format!("{}_w", names.connector),
        format!("{}_d", names.connector),
    );
    let topics = |prefix: &str| -> Vec<String> {
        ["transaction", "public.txa", "public.txb"]
            .iter()
            .map(|t| format!("{prefix}.{t}"))
            .collect()
    };
    // One partition each: one order to compare.
    create_topics(&[topics(&w_prefix), topics(&d_prefix)].concat(), 1).await;
    let (mut connect, d_slot) = debezium_with_avro(
        &db,
        &names,
        "walrelay_dbz_avro_txm",
        &d_prefix,
        &["txa", "txb"],
        "no_data",
        "provide.transaction.metadata=true\n",
    )
    .await;
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{w_prefix}\"\nformat = \"avro\"\n\
             provide_transaction_metadata = true\n\n\
             [[table]]\nname = \"public.txa\"\n\n[[table]]\nname = \"public.txb\"\n\n{}",
            registry_section(&url)
        ),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", DEBEZIUM_READY).await;
    wait_for("Debezium's slot", DEBEZIUM_READY, || {
        connect.assert_alive();
        let (db, slot) = (&db, &d_slot);
        async move { db.confirmed_flush(slot).await.map(|_| ()) }
    })
    .await;
    for sql in [
        "BEGIN; INSERT INTO txa VALUES (2, 'two'); INSERT INTO txb VALUES (1);
                UPDATE txa SET note = 'changed' WHERE id = 2; COMMIT;",
        "INSERT INTO txb VALUES (2)",
        "DELETE FROM txa WHERE id = 2",
    ] {
        db.client.batch_execute(sql).await.unwrap();
    }
    // Each side's END of the 3 transactions (after their BEGINs and
    // events on its one partition: Debezium's may have more, of
    // transactions without an event), 3 + 1 records of txa (the delete's
    // tombstone), 2 of txb.
    let both = wait_for("the records on each side", DEBEZIUM_READY, || {
        connect.assert_alive();
        let (url, w, d) = (url.clone(), topics(&w_prefix), topics(&d_prefix));
        async move {
            let read = |ts: &[String]| -> Vec<Vec<Value>> {
                ts.iter()
                    .map(|t| decode("avro:schemas", &url, std::slice::from_ref(t)))
                    .collect()
            };
            let (w, d) = (read(&w), read(&d));
            let enough = |side: &[Vec<Value>]| {
                let ends = side[0]
                    .iter()
                    .filter(|r| r["value"]["status"] == "END" && r["value"]["event_count"] != 0)
                    .count();
                ends >= 3 && side[1].len() >= 4 && side[2].len() >= 2
            };
            (enough(&w) && enough(&d)).then_some((w, d))
        }
    })
    .await;
    relay.stop();
    drop(connect);
    let (w, mut d) = both;
    // Debezium's BEGIN/END pairs of transactions without an event: none
    // of walrelay's.
    let xid = |r: &Value| {
        r["value"]["id"]
            .as_str()
            .and_then(|id| id.split(':').next())
            .unwrap_or("")
            .to_owned()
    };
    let empty: Vec<String> = d[0]
        .iter()
        .filter(|r| r["value"]["status"] == "END" && r["value"]["event_count"] == 0)
        .map(xid)
        .collect();
    d[0].retain(|r| !empty.contains(&xid(r)));
    // ts_ms is compared here: the shared comparison leaves it out of values
    // (Debezium's table events take it when processed).
    let ts = |side: &[Value]| -> Vec<Value> {
        side.iter().map(|r| r["value"]["ts_ms"].clone()).collect()
    };
    assert_eq!(ts(&w[0]), ts(&d[0]), "BEGIN/END ts_ms (the commit time)");
    let statuses: Vec<&str> = w[0]
        .iter()
        .map(|r| r["value"]["status"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(statuses, ["BEGIN", "END", "BEGIN", "END", "BEGIN", "END"]);
    assert!(
        w[1].iter()
            .chain(&w[2])
            .all(|r| r["value"].is_null()
                || r["value"]["transaction"]["total_order"].as_u64().is_some()),
        "every walrelay event carries its transaction block"
    );
    eprintln!(
        "Debezium's transaction records less {} of {} transactions without an event",
        empty.len() * 2,
        empty.len()
    );
    compare(&w[0], &d[0], &w_prefix, &d_prefix, "transaction records");
    compare(&w[1], &d[1], &w_prefix, &d_prefix, "txa events");
    compare(&w[2], &d[2], &w_prefix, &d_prefix, "txb events");
}

#[test]
fn every_schema_difference_names_a_row_of_compatibility_md() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/compatibility.md"),
    )
    .unwrap();
    for (path, row) in SCHEMA_DIFFERENCES {
        assert!(
            doc.contains(&format!("| {row} |")),
            "{path}: no row {row:?} in docs/compatibility.md"
        );
    }
}
