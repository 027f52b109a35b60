//! Event contracts end to end (issue 25 items 1, 4 and 6): a real `walrelay
//! run` against real PostgreSQL and Kafka publishes outbox rows as
//! CloudEvents 1.0.2 (binary and structured Kafka binding) with W3C trace
//! context headers, and a consumer reads every record back with the
//! CloudEvents SDK (tests/support/ce_reader.rs); and outbox rows in a JSON
//! envelope with placed columns and aliased headers (Debezium's additional
//! placement; compared with Debezium itself in tests/debezium_compat).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use cloudevents::Data;
use cloudevents::event::{AttributesReader, ExtensionValue};
use support::ce_reader::read_event;
use support::*;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

async fn sql(db: &TestDb, sql: &str) {
    db.client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// A Debezium-style outbox with a schema version and Debezium's tracing
/// column.
async fn create_outbox(db: &TestDb, table: &str) {
    db.create_outbox(table).await;
    sql(
        db,
        &format!(
            "ALTER TABLE {table} ADD COLUMN schema_version int, \
             ADD COLUMN tracingspancontext text"
        ),
    )
    .await;
}

fn insert(table: &str, id: &str, agg: &str, payload: &str, trace: &str) -> String {
    format!(
        "INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload, schema_version, \
         tracingspancontext) VALUES ('{id}', 'order', '{agg}', 'OrderCreated', {payload}, 3, {trace})"
    )
}

fn event_of(rec: &Consumed) -> cloudevents::Event {
    read_event(&rec.headers, rec.value.as_deref())
}

fn by_id<'a>(records: &'a [Consumed], id: &str) -> &'a Consumed {
    records
        .iter()
        .find(|c| c.header_str("id").as_deref() == Some(id))
        .unwrap_or_else(|| panic!("no record with id {id} in {records:?}"))
}

/// `created_at` (the writing transaction's `now()`, its start) of a row, in
/// Unix microseconds: the commit time is not before it.
async fn started_us(db: &TestDb, table: &str, id: &str) -> i64 {
    let row = db
        .client
        .query_one(
            &format!(
                "SELECT (extract(epoch FROM created_at) * 1000000)::bigint FROM {table} \
                 WHERE id = '{id}'"
            ),
            &[],
        )
        .await
        .unwrap();
    row.get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_rows_become_cloudevents_a_sdk_reads_in_both_modes_with_trace_context() {
    require_kafka();
    let db = TestDb::new("ce").await;
    create_outbox(&db, "outbox").await;
    create_outbox(&db, "outbox_s").await;
    let names = Names::new("ce");
    let (binary_topic, structured_topic) = (names.topic("bin"), names.topic("str"));

    // Before the connector exists: read by its initial snapshot.
    let snap = "00000000-0000-4000-8000-00000000000a";
    sql(
        &db,
        &insert("outbox", snap, "order-0", "'{\"n\": 0}'", "NULL"),
    )
    .await;

    let addr = free_local_addr();
    let config = connector_config(
        &db,
        &names,
        &format!(
            r#"
[health]
listen = "{addr}"

[[outbox]]
table = "public.outbox"
topic = "{binary_topic}"
format = "cloudevents"
trace_context_column = "tracingspancontext"
[outbox.cloudevents]
source = "/shop/orders"
dataschema = "https://schemas.example.com/order/v3.json"
extensions = {{ schemaversion = "schema_version" }}

[[outbox]]
table = "public.outbox_s"
topic = "{structured_topic}"
format = "cloudevents"
trace_context_column = "tracingspancontext"
[outbox.cloudevents]
mode = "structured"
source = "https://shop.example.com/orders"
extensions = {{ schemaversion = "schema_version" }}
"#
        ),
    );
    let (code, report) = check(&write_config(&config));
    assert_eq!(code, Some(0), "{report}");
    assert!(
        report
            .contains("payload jsonb, CloudEvents (binary), trace context from tracingspancontext")
            && report.contains("payload jsonb, CloudEvents (structured), trace context"),
        "{report}"
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", START).await;

    // Ids end in 1..3 in the binary table, 4..6 in the structured one.
    let id = |n: u8| format!("00000000-0000-4000-8000-00000000000{n}");
    // What Debezium's outbox extensions write: java.util.Properties text.
    let debezium_trace = format!(
        "E'#Thu Dec 03 10:01:48 UTC 2026\\ntraceparent={PARENT}\\ntracestate=rojo\\\\=1\\n'"
    );
    for (table, first) in [("outbox", 1), ("outbox_s", 4)] {
        sql(
            &db,
            &format!(
                "BEGIN; {}; {}; {}; COMMIT",
                insert(
                    table,
                    &id(first),
                    "order-1",
                    "'{\"n\": 1}'",
                    &debezium_trace
                ),
                insert(
                    table,
                    &id(first + 1),
                    "order-2",
                    "'{\"n\": 2}'",
                    "'00-garbage'"
                ),
                insert(
                    table,
                    &id(first + 2),
                    "order-3",
                    "NULL",
                    &format!("'{PARENT}'")
                ),
            ),
        )
        .await;
    }
    let (traced, bad_trace, tombstone) = (&id(1), &id(2), &id(3));

    let records = consume(
        &[&binary_topic, &structured_topic],
        7,
        Duration::from_secs(60),
        Duration::from_secs(2),
    );
    let after_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    let binary: Vec<Consumed> = records
        .iter()
        .filter(|c| c.topic == binary_topic)
        .cloned()
        .collect();
    let structured: Vec<Consumed> = records
        .iter()
        .filter(|c| c.topic == structured_topic)
        .cloned()
        .collect();
    assert_eq!((binary.len(), structured.len()), (4, 3), "{records:?}");

    // Every record is a valid CloudEvent to the SDK, whatever its mode.
    for rec in &records {
        let ev = event_of(rec);
        assert_eq!(Some(ev.id()), rec.header_str("id").as_deref());
        assert_eq!(ev.ty(), "OrderCreated");
        assert_eq!(ev.subject().map(str::as_bytes), rec.key.as_deref());
        assert_eq!(
            ev.extension("schemaversion"),
            Some(&ExtensionValue::String("3".into()))
        );
    }

    // Binary mode: ce_ headers, the payload as the value.
    let rec = by_id(&binary, traced);
    assert_eq!(rec.value.as_deref(), Some(&b"{\"n\": 1}"[..]));
    assert_eq!(rec.header_str("ce_specversion").as_deref(), Some("1.0"));
    assert_eq!(
        rec.header_str("content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(rec.header_str("traceparent").as_deref(), Some(PARENT));
    assert_eq!(rec.header_str("tracestate").as_deref(), Some("rojo=1"));
    assert_eq!(rec.header_str("ce_traceparent").as_deref(), Some(PARENT));
    let ev = event_of(rec);
    assert_eq!(ev.source().as_str(), "/shop/orders");
    assert_eq!(
        ev.dataschema().map(|u| u.as_str()),
        Some("https://schemas.example.com/order/v3.json")
    );
    assert_eq!(ev.data(), Some(&Data::Binary(b"{\"n\": 1}".to_vec())));
    // time is the commit time: after the transaction began, before we read it.
    let began = started_us(&db, "outbox", traced).await;
    let time = ev
        .time()
        .expect("a streamed row has a time")
        .timestamp_micros();
    assert!(
        began <= time && time <= after_us,
        "{began} <= {time} <= {after_us}"
    );

    // The snapshot row: no commit time, so no time attribute.
    let ev = event_of(by_id(&binary, snap));
    assert_eq!(ev.time(), None);
    assert_eq!(
        by_id(&binary, snap)
            .header_str("walrelay.snapshot")
            .as_deref(),
        Some("true")
    );

    // An invalid trace context: published without one.
    let rec = by_id(&binary, bad_trace);
    assert!(
        rec.headers.iter().all(|(k, _)| !k.contains("trace")),
        "{:?}",
        rec.headers
    );
    // A NULL payload: still a tombstone, with the binary headers.
    let rec = by_id(&binary, tombstone);
    assert_eq!(rec.value, None);
    assert_eq!(event_of(rec).data(), None);
    assert_eq!(rec.header_str("traceparent").as_deref(), Some(PARENT));

    // Structured mode: the JSON event format in the value.
    let (traced, tombstone) = (&id(4), &id(6));
    let rec = by_id(&structured, traced);
    assert_eq!(
        rec.header_str("content-type").as_deref(),
        Some("application/cloudevents+json; charset=UTF-8")
    );
    assert_eq!(rec.header("ce_id"), None);
    assert_eq!(rec.header_str("traceparent").as_deref(), Some(PARENT));
    let value: serde_json::Value = serde_json::from_slice(rec.value.as_deref().unwrap()).unwrap();
    assert_eq!(value["specversion"], "1.0");
    assert_eq!(value["traceparent"], PARENT);
    assert_eq!(value["tracestate"], "rojo=1");
    assert_eq!(value["data"], serde_json::json!({"n": 1}));
    let ev = event_of(rec);
    assert_eq!(ev.source().as_str(), "https://shop.example.com/orders");
    assert_eq!(ev.data(), Some(&Data::Json(serde_json::json!({"n": 1}))));
    let began = started_us(&db, "outbox_s", traced).await;
    let time = ev.time().expect("time").timestamp_micros();
    assert!(
        began <= time && time <= after_us,
        "{began} <= {time} <= {after_us}"
    );
    assert_eq!(by_id(&structured, tombstone).value, None);

    // Two invalid trace contexts (one per table), counted and logged.
    let connector = format!("{{connector=\"{}\"}}", names.connector);
    wait_for(
        "the invalid trace contexts counted",
        Duration::from_secs(30),
        || {
            let metrics = http_get(&addr, "/metrics");
            let want = format!("walrelay_trace_contexts_invalid_total{connector} 2\n");
            async move { metrics.contains(&want).then_some(()) }
        },
    )
    .await;
    relay
        .wait_log("not a valid W3C traceparent", Duration::from_secs(10))
        .await;
    assert!(relay.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_run_name_a_missing_cloudevents_column() {
    require_kafka();
    let db = TestDb::new("cecol").await;
    db.create_outbox("outbox").await;
    let names = Names::new("cecol");
    let path = write_config(&relay_config(
        &db,
        &names,
        "format = \"cloudevents\"\ntrace_context_column = \"tracingspancontext\"\n\
         [outbox.cloudevents]\nsource = \"/o\"\nextensions = { schemaversion = \"schema_version\" }",
        "",
    ));
    let (code, report) = check(&path);
    assert_eq!(code, Some(1), "{report}");
    let failed = failures(&report).join("\n");
    assert!(
        failed.contains("schema_version") && failed.contains("tracingspancontext"),
        "{report}"
    );
    run_refuses(&path, "schema_version");
}

/// The raw format (Debezium's record) with a trace context column: the
/// writer's `traceparent` travels as a header, nothing else changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_outbox_records_carry_the_writers_trace_context() {
    require_kafka();
    let db = TestDb::new("trace").await;
    create_outbox(&db, "outbox").await;
    let names = Names::new("trace");
    let mut relay = RelayProcess::start(
        &relay_config(
            &db,
            &names,
            "trace_context_column = \"tracingspancontext\"",
            "",
        ),
        &[],
    );
    relay.wait_log("streaming", START).await;
    let id = |n: u8| format!("00000000-0000-4000-8000-00000000000{n}");
    sql(
        &db,
        &format!(
            "{}; {}; {}",
            insert(
                "outbox",
                &id(1),
                "a",
                "'{\"n\": 1}'",
                &format!("'{PARENT}'")
            ),
            insert(
                "outbox",
                &id(2),
                "a",
                "'{\"n\": 2}'",
                &format!("E'#c\\ntraceparent={PARENT}\\n'")
            ),
            insert("outbox", &id(3), "a", "'{\"n\": 3}'", "NULL"),
        ),
    )
    .await;
    let records = consume(
        &[&names.topic("order")],
        3,
        Duration::from_secs(60),
        Duration::from_secs(1),
    );
    assert_eq!(records.len(), 3, "{records:?}");
    for (n, traced) in [(1, true), (2, true), (3, false)] {
        let rec = by_id(&records, &id(n));
        let names: Vec<&str> = rec.headers.iter().map(|(k, _)| k.as_str()).collect();
        let mut want = vec!["id", "type", "walrelay.lsn"];
        if traced {
            want.push("traceparent");
        }
        assert_eq!(names, want, "row {n}");
        if traced {
            assert_eq!(rec.header_str("traceparent").as_deref(), Some(PARENT));
        }
        assert_eq!(
            rec.value.as_deref(),
            Some(format!("{{\"n\": {n}}}").as_bytes())
        );
    }
    assert!(relay.stop().success());
}

/// Issue 25 item 6: `envelope_columns` (a topic routed by one of them) and
/// a `header_columns` alias, on a snapshot row and streamed rows (a NULL
/// payload, a NULL placed column), with the exact bytes of each value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelope_columns_and_header_aliases_end_to_end() {
    require_kafka();
    let db = TestDb::new("envelope").await;
    db.create_outbox("outbox").await;
    sql(
        &db,
        "ALTER TABLE outbox ADD COLUMN tenant text NOT NULL DEFAULT 'acme', \
         ADD COLUMN attempt int",
    )
    .await;
    let names = Names::new("envelope");
    let id = |n: u8| format!("00000000-0000-4000-8000-00000000000{n}");
    let row = |n: u8, payload: &str, attempt: &str| {
        format!(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, attempt) \
             VALUES ('{}', 'order', 'order-{n}', 'OrderCreated', {payload}, {attempt})",
            id(n)
        )
    };
    // Read by the initial snapshot.
    sql(&db, &row(1, "'{\"n\": 1}'", "7")).await;
    let mut relay = RelayProcess::start(
        &connector_config(
            &db,
            &names,
            &format!(
                "[[outbox]]\ntable = \"public.outbox\"\ntopic = \"{}.{{tenant}}\"\n\
                 header_columns = [\"type:eventType\"]\n\
                 envelope_columns = [\"type:eventType\", \"tenant\", \"attempt:try\"]\n",
                names.topic_prefix
            ),
        ),
        &[],
    );
    relay.wait_log("streaming", START).await;
    sql(
        &db,
        &format!(
            "{}; {}; {}",
            row(2, "'{\"a\": [1, 2], \"b\": null, \"z\": \"ü😀\"}'", "NULL"),
            row(3, "NULL", "0"),
            row(4, "'\"scalar\"'", "-1"),
        ),
    )
    .await;
    let records = consume(
        &[&names.topic("acme")],
        4,
        Duration::from_secs(60),
        Duration::from_secs(1),
    );
    assert_eq!(records.len(), 4, "{records:?}");
    let member = r#""eventType":"OrderCreated","tenant":"acme""#;
    for (n, value) in [
        // Expanded as Debezium's table.expand.json.payload writes it.
        (1, format!(r#"{{"payload":{{"n":1}},{member},"try":7}}"#)),
        (
            2,
            format!(r#"{{"payload":{{"a":[1,2],"z":"ü\uD83D\uDE00"}},{member},"try":null}}"#),
        ),
        // A NULL payload is not a tombstone in an envelope (Debezium's).
        (3, format!(r#"{{"payload":null,{member},"try":0}}"#)),
        // Not an object: its text as a JSON string, as Debezium's.
        (
            4,
            format!(r#"{{"payload":"\"scalar\"",{member},"try":-1}}"#),
        ),
    ] {
        let rec = by_id(&records, &id(n));
        assert_eq!(
            rec.value.as_deref().map(String::from_utf8_lossy).as_deref(),
            Some(value.as_str()),
            "row {n}"
        );
        assert_eq!(rec.key.as_deref(), Some(format!("order-{n}").as_bytes()));
        let headers: Vec<&str> = rec.headers.iter().map(|(k, _)| k.as_str()).collect();
        let mut want = vec!["id", "eventType", "walrelay.lsn"];
        if n == 1 {
            want.push("walrelay.snapshot");
        }
        assert_eq!(headers, want, "row {n}");
        assert_eq!(rec.header_str("eventType").as_deref(), Some("OrderCreated"));
    }
    assert!(relay.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_run_name_a_missing_envelope_column() {
    require_kafka();
    let db = TestDb::new("envcol").await;
    db.create_outbox("outbox").await;
    let names = Names::new("envcol");
    let path = write_config(&relay_config(
        &db,
        &names,
        "envelope_columns = [\"type:eventType\", \"tenant_id:tenant\"]",
        "",
    ));
    let (code, report) = check(&path);
    assert_eq!(code, Some(1), "{report}");
    let failed = failures(&report).join("\n");
    assert!(failed.contains("tenant_id"), "{report}");
    run_refuses(&path, "tenant_id");
}
