//! The CloudEvents encoder and the trace-context headers, record by record;
//! every event is read back with the CloudEvents SDK (tests/support).

use bytes::Bytes;
use cloudevents::Data;
use cloudevents::event::{AttributesReader, ExtensionValue};

use super::*;
use crate::config::Config;
use crate::pgoutput::{Column, TupleData};
use crate::router::{Routed, Router};

#[path = "../../../tests/support/ce_reader.rs"]
mod sdk;

const LSN: Lsn = Lsn(0x1_0000_0A00);
/// 2026-12-03T10:01:48.123456Z in PostgreSQL microseconds.
const COMMIT: i64 = 1_796_292_108_123_456 - PG_EPOCH_US;
const COMMIT_TEXT: &str = "2026-12-03T10:01:48.123456Z";
const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn router_with(outbox: &str, payload_oid: Oid) -> Router {
    let text = format!(
        "[connector]\nname = \"t\"\n[postgres]\ndatabase = \"d\"\n[kafka]\nbrokers = \"k:9092\"\n\
         [[outbox]]\ntable = \"public.outbox\"\n{outbox}\n"
    );
    let config = Config::from_str(&text, "test.toml").unwrap_or_else(|e| panic!("{e}"));
    let mut r = Router::new(&config.outbox);
    let col = |name: &str, type_oid: Oid| Column {
        flags: 0,
        name: name.into(),
        type_oid,
        type_modifier: -1,
    };
    r.on_relation(&Relation {
        oid: 42,
        namespace: "public".into(),
        name: "outbox".into(),
        replica_identity: b'd',
        columns: vec![
            col("id", 2950),
            col("aggregatetype", 25),
            col("aggregateid", 25),
            col("type", 25),
            col("payload", payload_oid),
            col("schema_version", 23),
            col("schema_uri", 25),
            col("trace", 25),
        ],
    });
    r
}

const CE: &str = "format = \"cloudevents\"\n";

fn text(s: &str) -> Cell {
    Cell::Text(Bytes::copy_from_slice(s.as_bytes()))
}

fn order(payload: Cell) -> TupleData {
    TupleData(vec![
        text("5b8f3c1e-0000-4000-8000-000000000001"),
        text("order"),
        text("order-17"),
        text("OrderCreated"),
        payload,
        text("2"),
        Cell::Null,
        Cell::Null,
    ])
}

fn route(r: &Router, row: &TupleData, time: Option<i64>) -> Record {
    match r.on_insert(42, row, LSN, time) {
        Ok(Routed::Record(rec)) => rec,
        other => panic!("not routed: {other:?}"),
    }
}

fn headers(rec: &Record) -> Vec<(String, Vec<u8>)> {
    rec.headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect()
}

fn header<'a>(rec: &'a Record, name: &str) -> Option<&'a str> {
    rec.headers
        .iter()
        .find(|(k, _)| &**k == name)
        .map(|(_, v)| std::str::from_utf8(v).unwrap_or("<not UTF-8>"))
}

fn event(rec: &Record) -> cloudevents::Event {
    sdk::read_event(&headers(rec), rec.value.as_deref())
}

#[test]
fn binary_mode_maps_the_row_to_ce_headers_and_keeps_the_payload() {
    let r = router_with(
        &format!("{CE}[outbox.cloudevents]\nsource = \"/shop/orders\"\n"),
        3802,
    );
    let rec = route(&r, &order(text(r#"{"total": 10}"#)), Some(COMMIT));
    assert_eq!(rec.value.as_deref(), Some(&br#"{"total": 10}"#[..]));
    assert_eq!(rec.key.as_deref(), Some(&b"order-17"[..]));
    let names: Vec<&str> = rec.headers.iter().map(|(k, _)| &**k).collect();
    assert_eq!(
        names,
        [
            "id",
            "type",
            "walrelay.lsn",
            "ce_specversion",
            "ce_id",
            "ce_source",
            "ce_type",
            "ce_subject",
            "ce_time",
            "content-type"
        ]
    );
    assert_eq!(header(&rec, "ce_specversion"), Some("1.0"));
    assert_eq!(
        header(&rec, "ce_id"),
        Some("5b8f3c1e-0000-4000-8000-000000000001")
    );
    assert_eq!(header(&rec, "ce_source"), Some("/shop/orders"));
    assert_eq!(header(&rec, "ce_type"), Some("OrderCreated"));
    assert_eq!(header(&rec, "ce_subject"), Some("order-17"));
    assert_eq!(header(&rec, "ce_time"), Some(COMMIT_TEXT));
    assert_eq!(header(&rec, "content-type"), Some("application/json"));

    let ev = event(&rec);
    assert_eq!(ev.id(), "5b8f3c1e-0000-4000-8000-000000000001");
    assert_eq!(ev.ty(), "OrderCreated");
    assert_eq!(ev.source().as_str(), "/shop/orders");
    assert_eq!(ev.subject(), Some("order-17"));
    assert_eq!(ev.datacontenttype(), Some("application/json"));
    assert_eq!(
        ev.time().map(|t| t.timestamp_micros()),
        Some(COMMIT + PG_EPOCH_US)
    );
    assert_eq!(ev.data(), Some(&Data::Binary(br#"{"total": 10}"#.to_vec())));
}

#[test]
fn structured_mode_embeds_json_text_and_bytes_as_the_json_format_says() {
    let ce = format!(
        "{CE}[outbox.cloudevents]\nmode = \"structured\"\nsource = \"https://shop.example.com/orders\"\n"
    );
    // jsonb: `data` is the JSON value itself.
    let r = router_with(&ce, 3802);
    let rec = route(
        &r,
        &order(text(r#"{"total": 10, "note": "a\"b"}"#)),
        Some(COMMIT),
    );
    assert_eq!(
        header(&rec, "content-type"),
        Some("application/cloudevents+json; charset=UTF-8")
    );
    assert_eq!(header(&rec, "ce_id"), None, "attributes are in the value");
    let value: serde_json::Value = serde_json::from_slice(rec.value.as_deref().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        value,
        serde_json::json!({
            "specversion": "1.0",
            "id": "5b8f3c1e-0000-4000-8000-000000000001",
            "source": "https://shop.example.com/orders",
            "type": "OrderCreated",
            "subject": "order-17",
            "time": COMMIT_TEXT,
            "datacontenttype": "application/json",
            "data": {"total": 10, "note": "a\"b"},
        })
    );
    let ev = event(&rec);
    assert_eq!(
        ev.data(),
        Some(&Data::Json(
            serde_json::json!({"total": 10, "note": "a\"b"})
        ))
    );

    // text: a JSON string.
    let r = router_with(&ce, 25);
    let rec = route(&r, &order(text("plain \"text\"\n")), Some(COMMIT));
    let ev = event(&rec);
    assert_eq!(ev.datacontenttype(), Some("text/plain; charset=utf-8"));
    assert_eq!(ev.data(), Some(&Data::String("plain \"text\"\n".into())));

    // bytea: data_base64 of the bytes.
    let r = router_with(&ce, 17);
    let rec = route(&r, &order(text("\\x00ff10")), Some(COMMIT));
    let value: serde_json::Value =
        serde_json::from_slice(rec.value.as_deref().unwrap_or_default()).unwrap_or_default();
    assert_eq!(value["data_base64"], "AP8Q");
    let ev = event(&rec);
    assert_eq!(ev.datacontenttype(), Some("application/octet-stream"));
    assert_eq!(ev.data(), Some(&Data::Binary(vec![0, 0xff, 0x10])));
}

#[test]
fn json_declared_for_a_text_column_is_checked_in_structured_mode() {
    let r = router_with(
        &format!(
            "{CE}[outbox.cloudevents]\nmode = \"structured\"\nsource = \"/o\"\n\
             datacontenttype = \"application/vnd.shop+json\"\n"
        ),
        25,
    );
    let ev = event(&route(&r, &order(text(r#"[1,2]"#)), Some(COMMIT)));
    assert_eq!(ev.data(), Some(&Data::Json(serde_json::json!([1, 2]))));
    let err = r
        .on_insert(42, &order(text("{not json")), LSN, Some(COMMIT))
        .expect_err("not JSON");
    assert_eq!(err.column, "payload");
    assert!(err.reason.contains("not JSON"), "{err}");
}

#[test]
fn snapshot_rows_have_no_time_and_the_same_event_each_time() {
    for mode in ["binary", "structured"] {
        let r = router_with(
            &format!("{CE}[outbox.cloudevents]\nmode = \"{mode}\"\nsource = \"/o\"\n"),
            3802,
        );
        let row = order(text("{}"));
        let first = match r.on_snapshot_row(42, &row, LSN) {
            Ok(Routed::Record(rec)) => rec,
            other => panic!("{other:?}"),
        };
        let again = match r.on_snapshot_row(42, &row, LSN) {
            Ok(Routed::Record(rec)) => rec,
            other => panic!("{other:?}"),
        };
        assert_eq!(first, again);
        let ev = event(&first);
        assert_eq!(ev.time(), None, "{mode}");
        assert_eq!(header(&first, "walrelay.snapshot"), Some("true"));
    }
}

#[test]
fn a_tombstone_stays_a_tombstone_with_the_binary_headers() {
    for mode in ["binary", "structured"] {
        let r = router_with(
            &format!("{CE}[outbox.cloudevents]\nmode = \"{mode}\"\nsource = \"/o\"\n"),
            3802,
        );
        let rec = route(&r, &order(Cell::Null), Some(COMMIT));
        assert_eq!(rec.value, None, "{mode}");
        assert_eq!(header(&rec, "content-type"), None, "{mode}");
        let ev = event(&rec);
        assert_eq!(ev.data(), None);
        assert_eq!(ev.id(), "5b8f3c1e-0000-4000-8000-000000000001");
    }
}

#[test]
fn required_attributes_must_not_be_empty_or_null() {
    let r = router_with(
        &format!("{CE}[outbox.cloudevents]\nsource = \"/o\"\n"),
        3802,
    );
    let mut row = order(text("{}"));
    row.0[3] = text("");
    let err = r
        .on_insert(42, &row, LSN, Some(COMMIT))
        .expect_err("empty type");
    assert_eq!((err.column.as_str(), err.lsn), ("type", LSN));
    assert!(err.reason.contains("type attribute"), "{err}");
    row.0[3] = Cell::Null;
    assert_eq!(
        r.on_insert(42, &row, LSN, Some(COMMIT))
            .expect_err("NULL type")
            .column,
        "type"
    );
    let mut row = order(text("{}"));
    row.0[0] = text("");
    assert_eq!(
        r.on_insert(42, &row, LSN, Some(COMMIT))
            .expect_err("empty id")
            .column,
        "id"
    );
    let mut row = order(text("{}"));
    row.0[3] = Cell::Text(Bytes::from_static(&[0xff, 0xfe]));
    let err = r
        .on_insert(42, &row, LSN, Some(COMMIT))
        .expect_err("not UTF-8");
    assert!(err.reason.contains("not UTF-8"), "{err}");
    // An empty aggregate id is no subject (optional), not an error.
    let mut row = order(text("{}"));
    row.0[2] = text("");
    let rec = route(&r, &row, Some(COMMIT));
    assert_eq!(header(&rec, "ce_subject"), None);
    event(&rec);
}

#[test]
fn dataschema_and_extensions_from_config_and_columns() {
    let r = router_with(
        &format!(
            "{CE}[outbox.cloudevents]\nsource = \"/o\"\ndataschema_column = \"schema_uri\"\n\
             extensions = {{ schemaversion = \"schema_version\", tenant = \"aggregatetype\" }}\n"
        ),
        3802,
    );
    let mut row = order(text("{}"));
    row.0[6] = text("https://schemas.example.com/order/2");
    let rec = route(&r, &row, Some(COMMIT));
    assert_eq!(header(&rec, "ce_schemaversion"), Some("2"));
    assert_eq!(header(&rec, "ce_tenant"), Some("order"));
    let ev = event(&rec);
    assert_eq!(
        ev.dataschema().map(|u| u.as_str()),
        Some("https://schemas.example.com/order/2")
    );
    assert_eq!(
        ev.extension("schemaversion"),
        Some(&ExtensionValue::String("2".into()))
    );
    // NULL: no dataschema; a relative one: the row cannot be routed.
    row.0[6] = Cell::Null;
    assert_eq!(event(&route(&r, &row, Some(COMMIT))).dataschema(), None);
    row.0[6] = text("order/2");
    let err = r
        .on_insert(42, &row, LSN, Some(COMMIT))
        .expect_err("relative");
    assert_eq!(err.column, "schema_uri");

    let r = router_with(
        &format!(
            "{CE}[outbox.cloudevents]\nmode = \"structured\"\nsource = \"/o\"\n\
             dataschema = \"urn:shop:order:1\"\nextensions = {{ schemaversion = \"schema_version\" }}\n"
        ),
        3802,
    );
    let rec = route(&r, &order(text("{}")), Some(COMMIT));
    let ev = event(&rec);
    assert_eq!(
        ev.dataschema().map(|u| u.as_str()),
        Some("urn:shop:order:1")
    );
    assert_eq!(
        ev.extension("schemaversion"),
        Some(&ExtensionValue::String("2".into()))
    );
}

#[test]
fn trace_context_becomes_traceparent_headers_in_every_format() {
    let properties =
        format!("#Thu Dec 03 10:01:48 UTC 2026\ntraceparent={PARENT}\ntracestate=rojo\\=1\n");
    for (format, mode) in [
        ("raw", ""),
        ("cloudevents", "binary"),
        ("cloudevents", "structured"),
    ] {
        let extra = if format == "raw" {
            String::new()
        } else {
            format!("[outbox.cloudevents]\nmode = \"{mode}\"\nsource = \"/o\"\n")
        };
        let r = router_with(
            &format!("format = \"{format}\"\ntrace_context_column = \"trace\"\n{extra}"),
            3802,
        );
        let mut row = order(text("{}"));
        row.0[7] = text(&properties);
        let rec = route(&r, &row, Some(COMMIT));
        assert_eq!(header(&rec, "traceparent"), Some(PARENT), "{format} {mode}");
        assert_eq!(
            header(&rec, "tracestate"),
            Some("rojo=1"),
            "{format} {mode}"
        );
        if format == "cloudevents" {
            let ev = event(&rec);
            assert_eq!(
                ev.extension("traceparent"),
                Some(&ExtensionValue::String(PARENT.into())),
                "{mode}"
            );
            assert_eq!(
                ev.extension("tracestate"),
                Some(&ExtensionValue::String("rojo=1".into()))
            );
        }
        assert_eq!(r.take_invalid_trace_contexts(), None);

        // Invalid: published without trace headers, counted, never an error.
        row.0[7] = text("00-not-a-trace");
        let rec = route(&r, &row, Some(COMMIT));
        assert!(
            rec.headers.iter().all(|(k, _)| !k.contains("trace")),
            "{:?}",
            rec.headers
        );
        row.0[7] = Cell::Null;
        route(&r, &row, Some(COMMIT));
        assert_eq!(
            r.take_invalid_trace_contexts(),
            Some((1, "public.outbox".to_owned()))
        );
        assert_eq!(r.take_invalid_trace_contexts(), None);
    }
}

#[test]
fn options_off_leave_the_default_record_as_it_was() {
    let plain = router_with("", 3802);
    let traced = router_with("trace_context_column = \"trace\"", 3802);
    let row = order(text("{}"));
    assert_eq!(
        route(&plain, &row, Some(COMMIT)),
        route(&traced, &row, Some(COMMIT))
    );
    assert_eq!(route(&plain, &row, Some(COMMIT)), route(&plain, &row, None));
}

#[test]
fn rfc3339_of_commit_times() {
    assert_eq!(rfc3339(0).as_deref(), Some("2000-01-01T00:00:00.000000Z"));
    assert_eq!(rfc3339(-1).as_deref(), Some("1999-12-31T23:59:59.999999Z"));
    assert_eq!(rfc3339(COMMIT).as_deref(), Some(COMMIT_TEXT));
    // 2024-02-29 (a leap day).
    assert_eq!(
        rfc3339(1_709_208_000_000_000 - PG_EPOCH_US).as_deref(),
        Some("2024-02-29T12:00:00.000000Z")
    );
    assert_eq!(rfc3339(i64::MAX), None);
    assert_eq!(rfc3339(i64::MIN), None);
}

proptest::proptest! {
    #[test]
    fn rfc3339_round_trips_through_the_civil_calendar(us in -62_000_000_000_000_000i64..250_000_000_000_000_000) {
        if let Some(text) = rfc3339(us) {
            let (date, time) = text.split_once('T').unwrap_or_default();
            let mut d = date.split('-').map(|p| p.parse::<i64>().unwrap_or(-1));
            let (y, m, dd) = (d.next().unwrap_or(0), d.next().unwrap_or(0), d.next().unwrap_or(0));
            let mut t = time.trim_end_matches('Z').split([':', '.']).map(|p| p.parse::<i64>().unwrap_or(-1));
            let (h, mi, s, f) = (t.next().unwrap_or(0), t.next().unwrap_or(0), t.next().unwrap_or(0), t.next().unwrap_or(0));
            let days = crate::router::time::days_from_civil(y, m, dd);
            let back = ((days * 86_400 + h * 3600 + mi * 60 + s) * 1_000_000 + f) - PG_EPOCH_US;
            proptest::prop_assert_eq!(back, us);
        }
    }
}

/// The SDK reader is not vacuous: what is not a valid CloudEvent fails.
#[test]
fn the_sdk_reader_refuses_what_is_not_a_cloudevent() {
    let good: Vec<(String, Vec<u8>)> = [
        ("ce_specversion", "1.0"),
        ("ce_id", "1"),
        ("ce_source", "/o"),
        ("ce_type", "T"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
    .collect();
    sdk::read_event(&good, Some(b"x"));
    type Headers = Vec<(String, Vec<u8>)>;
    let refused = |change: &dyn Fn(&mut Headers)| {
        let mut headers = good.clone();
        change(&mut headers);
        std::panic::catch_unwind(|| sdk::read_event(&headers, Some(b"x"))).is_err()
    };
    assert!(refused(
        &|h| h.push(("ce_time".into(), b"yesterday".to_vec()))
    ));
    assert!(refused(&|h| h.retain(|(k, _)| k != "ce_source")));
    assert!(refused(&|h| h[1].1.clear()), "empty id");
    assert!(refused(&|h| h[0].1 = b"2.0".to_vec()));
    assert!(refused(
        &|h| h.push(("ce_dataschema".into(), b"relative".to_vec()))
    ));
    assert!(refused(
        &|h| h.push(("ce_schema_version".into(), b"1".to_vec()))
    ));
    assert!(refused(
        &|h| h.push(("ce_averyveryverylongextension".into(), b"1".to_vec()))
    ));
    let structured = vec![(
        "content-type".to_owned(),
        STRUCTURED_CONTENT_TYPE.as_bytes().to_vec(),
    )];
    assert!(
        std::panic::catch_unwind(|| sdk::read_event(
            &structured,
            Some(b"{\"specversion\":\"1.0\"}")
        ))
        .is_err()
    );
}

proptest::proptest! {
    /// Whatever text the columns hold, a structured event is valid JSON the
    /// SDK reads back to the same attributes and data (the hand-written
    /// JSON escaping is exact).
    #[test]
    fn structured_events_round_trip_any_text(
        id in "[^\u{0}]{1,40}",
        ty in "[^\u{0}]{1,40}",
        subject in "[^\u{0}]{0,40}",
        payload in "[^\u{0}]{0,200}",
        extension in "[^\u{0}]{0,20}",
    ) {
        let r = router_with(
            &format!(
                "{CE}[outbox.cloudevents]\nmode = \"structured\"\nsource = \"/o\"\n\
                 extensions = {{ schemaversion = \"schema_uri\" }}\n"
            ),
            25,
        );
        let mut row = order(text(&payload));
        row.0[0] = text(&id);
        row.0[2] = text(&subject);
        row.0[3] = text(&ty);
        row.0[6] = text(&extension);
        let rec = route(&r, &row, Some(COMMIT));
        let ev = event(&rec);
        proptest::prop_assert_eq!(ev.id(), id.as_str());
        proptest::prop_assert_eq!(ev.ty(), ty.as_str());
        proptest::prop_assert_eq!(ev.subject(), Some(subject.as_str()).filter(|s| !s.is_empty()));
        proptest::prop_assert_eq!(ev.data(), Some(&Data::String(payload.clone())));
        proptest::prop_assert_eq!(
            ev.extension("schemaversion"),
            Some(&ExtensionValue::String(extension.clone()))
        );
    }

    #[test]
    fn trace_context_parsing_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..120)) {
        let _ = super::super::trace::parse(&bytes);
    }

    #[test]
    fn every_well_formed_traceparent_is_accepted(
        trace_id in "[0-9a-f]{32}",
        parent_id in "[0-9a-f]{16}",
        flags in "[0-9a-f]{2}",
    ) {
        let parent = format!("00-{trace_id}-{parent_id}-{flags}");
        let zero = |s: &str| s.bytes().all(|b| b == b'0');
        proptest::prop_assert_eq!(
            super::super::trace::valid_traceparent(&parent),
            !zero(&trace_id) && !zero(&parent_id)
        );
    }
}
