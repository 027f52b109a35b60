use bytes::Bytes;

use super::jackson_str;
use crate::Lsn;
use crate::config::Config;
use crate::pgoutput::{Cell, Column, Oid, Relation, TupleData};
use crate::router::{Routed, Router, Unroutable};

fn col(name: &str, type_oid: Oid) -> Column {
    Column {
        flags: 0,
        name: name.into(),
        type_oid,
        type_modifier: -1,
    }
}

/// Debezium's outbox table, the aggregate id and payload of the given types.
fn router(extra: &str, key_oid: Oid, payload_oid: Oid) -> Router {
    let text = crate::config::test_config_text(extra);
    let config = Config::from_str(&text, "test.toml").expect("valid config");
    let mut r = Router::new(&config.outbox);
    r.on_relation(&Relation {
        oid: 42,
        namespace: "public".into(),
        name: "outbox".into(),
        replica_identity: b'd',
        columns: vec![
            col("id", 2950),
            col("aggregatetype", 25),
            col("aggregateid", key_oid),
            col("type", 25),
            col("payload", payload_oid),
        ],
    });
    r
}

fn cell(v: Option<&str>) -> Cell {
    v.map_or(Cell::Null, |s| {
        Cell::Text(Bytes::copy_from_slice(s.as_bytes()))
    })
}

const LSN: Lsn = Lsn(0x1_0000_0A00);

/// The key and value of the row (`aggregateid`, `payload`).
fn route(r: &Router, key: &str, payload: Option<&str>) -> (Vec<u8>, Option<Vec<u8>>) {
    let row = TupleData(vec![
        cell(Some("5b8f3c1e-0000-4000-8000-000000000001")),
        cell(Some("order")),
        cell(Some(key)),
        cell(Some("Created")),
        cell(payload),
    ]);
    match r.on_insert(42, &row, LSN, None) {
        Ok(Routed::Record(rec)) => (
            rec.key.expect("a key").to_vec(),
            rec.value.map(|v| v.to_vec()),
        ),
        other => panic!("not routed: {other:?}"),
    }
}

fn s(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap()
}

#[test]
fn jackson_escapes_quotes_controls_and_non_bmp() {
    let mut out = Vec::new();
    jackson_str(
        &mut out,
        "Zoë-😀 \"a\\b\"\t\r\n\u{8}\u{c}\u{1}\u{1f}/\u{7f}日",
    );
    assert_eq!(
        s(&out),
        r#""Zoë-\uD83D\uDE00 \"a\\b\"\t\r\n\b\f\u0001\u001F/"#.to_owned() + "\u{7f}日\""
    );
    out.clear();
    jackson_str(&mut out, "");
    assert_eq!(s(&out), r#""""#);
}

#[test]
fn json_key_and_value_are_jackson_strings() {
    let r = router("converter = \"json\"", 25, 3802);
    let (k, v) = route(&r, "say \"hi\" \\ 😀\t", Some(r#"{"a": "é\n"}"#));
    assert_eq!(s(&k), r#""say \"hi\" \\ \uD83D\uDE00\t""#);
    assert_eq!(s(&v.unwrap()), r#""{\"a\": \"é\\n\"}""#);
    // The empty key is a JSON string too (not the empty key).
    let (k, _) = route(&r, "", Some("{}"));
    assert_eq!(s(&k), r#""""#);
    // A NULL payload: the four bytes null, not a tombstone.
    let (_, v) = route(&r, "a", None);
    assert_eq!(v.as_deref(), Some(&b"null"[..]));
}

#[test]
fn key_and_value_forms_are_set_apart() {
    let r = router("key_converter = \"json\"", 25, 3802);
    let (k, v) = route(&r, "agg-1", Some(r#"{"a": 1}"#));
    assert_eq!((s(&k), s(&v.unwrap())), (r#""agg-1""#, r#"{"a": 1}"#));
    let r = router("value_converter = \"json\"", 25, 3802);
    let (k, v) = route(&r, "agg-1", Some(r#"{"a": 1}"#));
    assert_eq!((s(&k), s(&v.unwrap())), ("agg-1", r#""{\"a\": 1}""#));
}

#[test]
fn schemas_wrap_key_and_value_as_connect_writes_them() {
    let r = router("converter = \"json_with_schema\"", 25, 3802);
    let (k, v) = route(&r, "agg\u{1}", Some("[1]"));
    assert_eq!(
        s(&k),
        r#"{"schema":{"type":"string","optional":false},"payload":"agg\u0001"}"#
    );
    assert_eq!(
        s(&v.unwrap()),
        r#"{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":"[1]"}"#
    );
    let (_, v) = route(&r, "a", None);
    assert_eq!(
        s(&v.unwrap()),
        r#"{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":null}"#
    );
    // An int8 aggregate id is a number; a uuid names its logical type; a
    // text payload is a plain string, a bytea one base64 bytes.
    let r = router("converter = \"json_with_schema\"", 20, 25);
    let (k, v) = route(&r, "-17", Some("hi"));
    assert_eq!(
        s(&k),
        r#"{"schema":{"type":"int64","optional":false},"payload":-17}"#
    );
    assert_eq!(
        s(&v.unwrap()),
        r#"{"schema":{"type":"string","optional":true},"payload":"hi"}"#
    );
    let r = router("converter = \"json_with_schema\"", 2950, 17);
    let (k, v) = route(
        &r,
        "5b8f3c1e-0000-4000-8000-000000000001",
        Some("\\x010203ff"),
    );
    assert_eq!(
        s(&k),
        r#"{"schema":{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1},"payload":"5b8f3c1e-0000-4000-8000-000000000001"}"#
    );
    assert_eq!(
        s(&v.unwrap()),
        r#"{"schema":{"type":"bytes","optional":true},"payload":"AQID/w=="}"#
    );
    let r = router("converter = \"json\"", 21, 17);
    let (k, v) = route(&r, "7", Some("\\x"));
    assert_eq!((s(&k), s(&v.unwrap())), ("7", r#""""#));
}

#[test]
fn tombstones_follow_route_tombstone_on_empty_payload() {
    let r = router(
        "converter = \"json\"\ntombstone_on_empty_payload = true",
        25,
        25,
    );
    assert_eq!(route(&r, "a", None).1, None);
    // Java's trim(): an all-whitespace text is empty.
    assert_eq!(route(&r, "a", Some(" \t\n")).1, None);
    assert_eq!(
        route(&r, "a", Some(" x ")).1.as_deref(),
        Some(&br#"" x ""#[..])
    );
}

#[test]
fn unsupported_types_are_refused_per_row_naming_the_column() {
    for (extra, key_oid, payload_oid, column) in [
        ("key_converter = \"json\"", 1700, 3802, "aggregateid"),
        ("value_converter = \"json\"", 25, 23, "payload"),
    ] {
        let r = router(extra, key_oid, payload_oid);
        let row = TupleData(vec![
            cell(Some("5b8f3c1e-0000-4000-8000-000000000001")),
            cell(Some("order")),
            cell(Some("12")),
            cell(Some("Created")),
            cell(Some("12")),
        ]);
        let err = r.on_insert(42, &row, LSN, None).unwrap_err();
        assert_eq!(
            (err.column.as_str(), err.kind),
            (column, Unroutable::InvalidValue)
        );
        assert!(err.to_string().contains("public.outbox"), "{err}");
        assert!(err.to_string().contains(&LSN.to_string()), "{err}");
    }
}

#[test]
fn expanded_payloads_follow_debeziums_schema_inference() {
    let r = router("converter = \"json\"\nexpand_json_payload = true", 25, 3802);
    for (payload, want) in [
        (
            r#"{"a": null, "b": [], "c": [{"x": 1}, {"x": 2}], "d": true, "e": {}, "f": 1.0, "g": {"h": null, "i": [], "j": "k"}}"#,
            r#"{"c":[{"x":1},{"x":2}],"d":true,"e":{},"f":1.0,"g":{"j":"k"}}"#,
        ),
        (r#""just a string""#, r#""\"just a string\"""#),
        ("42", r#""42""#),
        ("[]", r#""[]""#),
        (r#"[1, "x"]"#, r#""[1, \"x\"]""#),
    ] {
        let (_, v) = route(&r, "a", Some(payload));
        assert_eq!(s(&v.unwrap()), want, "{payload}");
    }
    // NULL: the four bytes null, as without expansion.
    assert_eq!(route(&r, "a", None).1.as_deref(), Some(&b"null"[..]));
    // Where Debezium's task fails, the row fails, naming the column.
    let row = TupleData(vec![
        cell(Some("5b8f3c1e-0000-4000-8000-000000000001")),
        cell(Some("order")),
        cell(Some("a")),
        cell(Some("Created")),
        cell(Some(r#"{"n": 100000000000000000000}"#)),
    ]);
    let err = r.on_insert(42, &row, LSN, None).unwrap_err();
    assert_eq!(
        (err.column.as_str(), err.kind),
        ("payload", Unroutable::InvalidValue)
    );
    assert!(
        err.to_string().contains("beyond the range of a Java long"),
        "{err}"
    );
}

#[test]
fn serde_escapes_become_jacksons() {
    for s in [
        "plain",
        "",
        "Zoë 😀 \u{1}\u{1f}\t\"q\" \\u0001 \\ 日本 \u{10FFFF}",
    ] {
        let mut serde = b"[1,".to_vec();
        serde_json::to_writer(&mut serde, s).unwrap();
        serde.push(b']');
        super::serde_to_jackson(&mut serde, 3);
        let mut want = b"[1,".to_vec();
        jackson_str(&mut want, s);
        want.push(b']');
        assert_eq!(
            String::from_utf8(serde).unwrap(),
            String::from_utf8(want).unwrap()
        );
    }
}
