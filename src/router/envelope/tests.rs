//! The envelope against what Debezium 3.6.1's EventRouter wrote for the
//! same values through the JsonConverter (`schemas.enable=false`), seen in
//! a Kafka Connect run (tests/it/debezium_compat/outbox.rs compares whole
//! records on real rows).

use bytes::Bytes;

use crate::Lsn;
use crate::config::{Config, OutboxConfig};
use crate::pgoutput::{Cell, Column, Oid, Relation, TupleData};
use crate::router::{Routed, Router, Unroutable};

const LSN: Lsn = Lsn(0x1_0000_0A00);

fn config(extra: &str) -> Vec<OutboxConfig> {
    let text = format!(
        "[connector]\nname = \"t\"\n[postgres]\ndatabase = \"d\"\n[kafka]\nbrokers = \"k:9092\"\n\
         [[outbox]]\ntable = \"public.outbox\"\n{extra}\n"
    );
    Config::from_str(&text, "test.toml")
        .expect("valid config")
        .outbox
}

fn col(name: &str, type_oid: Oid, type_modifier: i32) -> Column {
    Column {
        flags: 0,
        name: name.into(),
        type_oid,
        type_modifier,
    }
}

/// Debezium's outbox columns, a payload of `payload_oid`, and one column
/// of each kind of value.
fn relation(payload_oid: Oid) -> Relation {
    Relation {
        oid: 42,
        namespace: "public".into(),
        name: "outbox".into(),
        replica_identity: b'd',
        columns: vec![
            col("id", 2950, -1),
            col("aggregatetype", 1043, 259),
            col("aggregateid", 1043, 259),
            col("type", 1043, 259),
            col("payload", payload_oid, -1),
            col("n", 23, -1),
            col("b", 16, -1),
            col("j", 3802, -1),
            col("ts", 1184, -1),
            // numeric(10,2)
            col("num", 1700, (10 << 16 | 2) + 4),
            col("big", 20, -1),
            col("by", 17, -1),
            col("nul", 25, -1),
            col("ts0", 1114, -1),
            col("d", 1082, -1),
            // An extension's type: no Debezium mapping.
            col("ext", 99_999, -1),
        ],
    }
}

fn text(s: &str) -> Cell {
    Cell::Text(Bytes::copy_from_slice(s.as_bytes()))
}

fn row(payload: Cell) -> TupleData {
    TupleData(vec![
        text("5b8f3c1e-0000-4000-8000-000000000001"),
        text("Order"),
        text("a1"),
        text("Obj"),
        payload,
        text("42"),
        text("t"),
        text(r#"{"k": 1}"#),
        text("2026-12-03 10:01:48.123456+00"),
        text("12.50"),
        text("9007199254740993"),
        text("\\x0102"),
        Cell::Null,
        text("2026-12-03 10:01:48.5"),
        text("2026-12-03"),
        text("(1,2)"),
    ])
}

const ALL: &str = r#"envelope_columns = ["type:eventType", "n", "b", "j", "ts", "num", "big", "by", "nul", "ts0", "d", "ext", "aggregatetype"]"#;

fn route(
    extra: &str,
    payload_oid: Oid,
    payload: Cell,
) -> Result<Routed, crate::router::RouteError> {
    let mut r = Router::new(&config(extra));
    r.on_relation(&relation(payload_oid));
    r.on_insert(42, &row(payload), LSN, None)
}

fn value(extra: &str, payload_oid: Oid, payload: Cell) -> Option<String> {
    match route(extra, payload_oid, payload) {
        Ok(Routed::Record(rec)) => rec
            .value
            .map(|v| String::from_utf8(v.to_vec()).expect("UTF-8")),
        other => panic!("not routed: {other:?}"),
    }
}

/// The members after `payload`, as Debezium wrote them for these values.
const MEMBERS: &str = r#""eventType":"Obj","n":42,"b":true,"j":"{\"k\": 1}","ts":"2026-12-03T10:01:48.123456Z","num":"BOI=","big":9007199254740993,"by":"AQI=","nul":null,"ts0":1796292108500000,"d":20790,"ext":"(1,2)","aggregatetype":"Order"}"#;

#[test]
fn the_value_is_debeziums_envelope_payload_first_then_the_columns_in_order() {
    let payload = r#"{"a": [1, 2], "z": 1}"#;
    // Expanded as Debezium's table.expand.json.payload writes it: compact.
    assert_eq!(
        value(ALL, 3802, text(payload)).unwrap(),
        format!(r#"{{"payload":{{"a":[1,2],"z":1}},{MEMBERS}"#)
    );
    // expand_json_payload = false: the jsonb text as a JSON string.
    assert_eq!(
        value(
            &format!("{ALL}\nexpand_json_payload = false"),
            3802,
            text(payload)
        )
        .unwrap(),
        format!(r#"{{"payload":"{{\"a\": [1, 2], \"z\": 1}}",{MEMBERS}"#)
    );
    // The value parses, and is stable.
    let v: serde_json::Value =
        serde_json::from_str(&value(ALL, 3802, text(payload)).unwrap()).unwrap();
    assert_eq!(v["payload"]["z"], 1);
    assert_eq!(
        value(ALL, 3802, text(payload)),
        value(ALL, 3802, text(payload))
    );
}

#[test]
fn json_payloads_are_expanded_as_debezium_does() {
    let one = r#"envelope_columns = ["type"]"#;
    for (payload, want) in [
        // Only an object is expanded; anything else is its text's string.
        ("[1, \"x\", null]", r#""[1, \"x\", null]""#),
        ("\"just\"", r#""\"just\"""#),
        ("42", r#""42""#),
        ("null", r#""null""#),
        ("{}", "{}"),
        (
            r#"{"q": "\"hi\" ü 😀", "n": null, "e": [], "f": 2.50}"#,
            r#"{"q":"\"hi\" ü \uD83D\uDE00","f":2.5}"#,
        ),
    ] {
        for oid in [3802, 114] {
            assert_eq!(
                value(one, oid, text(payload)).unwrap(),
                format!(r#"{{"payload":{want},"type":"Obj"}}"#),
                "{payload}"
            );
        }
    }
    // A payload Debezium's task fails on stops the row, naming the column.
    let err = route(one, 3802, text(r#"{"big": 100000000000000000000}"#)).unwrap_err();
    assert_eq!(err.column, "payload");
    assert!(err.to_string().contains("Java long"), "{err}");
}

#[test]
fn text_payloads_are_expanded_as_json_ones() {
    let one = r#"envelope_columns = ["type"]"#;
    let v = |p: &str| value(one, 25, text(p)).unwrap();
    assert_eq!(v(r#"{"z": 1}"#), r#"{"payload":{"z":1},"type":"Obj"}"#);
    // Jackson reads what starts with `{`, up to its end.
    assert_eq!(v(r#"{"a": 1} x"#), r#"{"payload":{"a":1},"type":"Obj"}"#);
    assert_eq!(
        v(r#" {"q": 2} "#),
        r#"{"payload":" {\"q\": 2} ","type":"Obj"}"#
    );
    assert_eq!(v("plain text"), r#"{"payload":"plain text","type":"Obj"}"#);
    assert_eq!(v("42"), r#"{"payload":"42","type":"Obj"}"#);
    assert_eq!(v("{not json"), r#"{"payload":"{not json","type":"Obj"}"#);
    assert_eq!(v(""), r#"{"payload":"","type":"Obj"}"#);
    // A non-empty array with a schema: Debezium's task fails on it.
    assert!(route(one, 25, text("[1,2]")).is_err());
    let unexpanded = format!("{one}\nexpand_json_payload = false");
    assert_eq!(
        value(&unexpanded, 25, text(r#"{"z": 1}"#)).unwrap(),
        r#"{"payload":"{\"z\": 1}","type":"Obj"}"#
    );
    // varchar as text.
    assert_eq!(
        value(one, 1043, text(r#"{"z": 1}"#)).unwrap(),
        r#"{"payload":{"z":1},"type":"Obj"}"#
    );
}

#[test]
fn a_bytea_payload_is_base64() {
    let one = r#"envelope_columns = ["type"]"#;
    assert_eq!(
        value(one, 17, text("\\x00ff")).unwrap(),
        r#"{"payload":"AP8=","type":"Obj"}"#
    );
    assert_eq!(
        value(one, 17, text("\\x")).unwrap(),
        r#"{"payload":"","type":"Obj"}"#
    );
}

#[test]
fn a_null_payload_is_null_in_the_envelope_and_a_tombstone_only_when_asked() {
    let one = r#"envelope_columns = ["type"]"#;
    assert_eq!(
        value(one, 3802, Cell::Null).unwrap(),
        r#"{"payload":null,"type":"Obj"}"#
    );
    let tombstones = format!("{one}\ntombstone_on_empty_payload = true");
    assert_eq!(value(&tombstones, 3802, Cell::Null), None);
    assert_eq!(value(&tombstones, 25, text("")), None);
    assert_eq!(
        value(&tombstones, 25, text(" ")).unwrap(),
        r#"{"payload":" ","type":"Obj"}"#
    );
}

#[test]
fn header_aliases_name_the_header() {
    let Ok(Routed::Record(rec)) = route(
        "header_columns = [\"type:eventType\", \"n\", \"aggregatetype:at\"]",
        3802,
        text("{}"),
    ) else {
        panic!("not routed")
    };
    let names: Vec<(&str, &[u8])> = rec.headers.iter().map(|(k, v)| (&**k, &v[..])).collect();
    assert_eq!(
        names,
        [
            ("id", &b"5b8f3c1e-0000-4000-8000-000000000001"[..]),
            ("eventType", b"Obj"),
            ("n", b"42"),
            ("at", b"Order"),
            ("walrelay.lsn", b"1/00000A00"),
        ]
    );
    // Without envelope_columns the value is still the payload.
    assert_eq!(rec.value.as_deref(), Some(&b"{}"[..]));
}

#[test]
fn the_topic_template_may_use_an_envelope_column() {
    let Ok(Routed::Record(rec)) = route(
        "envelope_columns = [\"n:count\"]\ntopic = \"ev.{n}\"",
        3802,
        text("{}"),
    ) else {
        panic!("not routed")
    };
    assert_eq!(&*rec.topic, "ev.42");
}

#[test]
fn a_missing_envelope_column_stops_naming_it() {
    let err = route("envelope_columns = [\"tenant:t\"]", 3802, text("{}")).unwrap_err();
    assert_eq!(err.column, "tenant");
    assert_eq!(err.kind, Unroutable::MissingColumn);
}

#[test]
fn a_value_that_cannot_be_written_stops_naming_the_column() {
    let mut r = Router::new(&config("envelope_columns = [\"b\"]"));
    r.on_relation(&relation(3802));
    let mut bad = row(text("{}"));
    bad.0[6] = text("maybe");
    let err = r.on_insert(42, &bad, LSN, None).unwrap_err();
    assert_eq!(
        (err.column.as_str(), err.kind),
        ("b", Unroutable::InvalidValue)
    );
    assert!(err.to_string().contains("boolean"), "{err}");
    assert!(
        !err.to_string().contains("maybe"),
        "row data in an error: {err}"
    );
    // A dead letter keeps the payload as the row has it.
    assert_eq!(r.salvage(42, &bad).value.as_deref(), Some(&b"{}"[..]));
    let mut latin1 = row(Cell::Text(Bytes::from_static(b"\xe9t\xe9")));
    latin1.0[6] = text("t");
    let mut r = Router::new(&config("envelope_columns = [\"b\"]"));
    r.on_relation(&relation(25));
    let err = r.on_insert(42, &latin1, LSN, None).unwrap_err();
    assert_eq!(err.column, "payload");
}

#[test]
fn snapshot_rows_get_the_same_envelope() {
    let mut r = Router::new(&config(ALL));
    r.on_relation(&relation(3802));
    let (Ok(Routed::Record(streamed)), Ok(Routed::Record(read))) = (
        r.on_insert(42, &row(text("{}")), LSN, None),
        r.on_snapshot_row(42, &row(text("{}")), LSN),
    ) else {
        panic!("not routed")
    };
    assert_eq!(streamed.value, read.value);
    assert_eq!(
        read.headers.last().map(|(k, _)| &**k),
        Some("walrelay.snapshot")
    );
}
