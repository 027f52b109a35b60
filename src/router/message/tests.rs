#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::config::Config;

fn router(sections: &str) -> MessageRouter {
    let text = crate::config::test_config_text(sections);
    MessageRouter::new(&Config::from_str(&text, "test.toml").expect("valid"))
}

const LSN: Lsn = Lsn(0x1_016B_3748);
const AT: MessageAt = MessageAt {
    commit_lsn: LSN,
    index: 3,
    xid: 771,
    commit_ms: 1_700_000_000_123,
    lsn: Lsn(0x1_016B_3700),
};

fn header<'a>(r: &'a Record, name: &str) -> Option<&'a [u8]> {
    r.headers
        .iter()
        .find(|(k, _)| &**k == name)
        .map(|(_, v)| &v[..])
}

fn route(r: &MessageRouter, prefix: &str, payload: &str) -> Result<Option<Record>, RouteError> {
    r.on_message(AT, prefix, &Bytes::from(payload.to_owned()))
}

#[test]
fn a_routed_message_becomes_a_record_with_fields_from_its_payload() {
    let r = router(
        r#"
[[message]]
prefix = "orders"
topic = "events.{prefix}.{type}"
key_field = "order_id"
header_fields = ["type", "version", "missing", "nothing"]
"#,
    );
    let payload = r#"{"type":"OrderCreated","order_id":42,"version":2,"nothing":null}"#;
    let rec = route(&r, "orders", payload).unwrap().expect("routed");
    assert_eq!(&*rec.topic, "events.orders.OrderCreated");
    assert_eq!(rec.key.as_deref(), Some(&b"42"[..]));
    assert_eq!(rec.value.as_deref(), Some(payload.as_bytes()));
    let names: Vec<&str> = rec.headers.iter().map(|(k, _)| &**k).collect();
    assert_eq!(
        names,
        [
            "walrelay.event_id",
            "walrelay.prefix",
            "type",
            "version",
            "walrelay.lsn"
        ]
    );
    assert_eq!(
        header(&rec, "walrelay.event_id"),
        Some(&b"1/016B3748:3"[..])
    );
    assert_eq!(header(&rec, "walrelay.prefix"), Some(&b"orders"[..]));
    assert_eq!(header(&rec, "type"), Some(&b"OrderCreated"[..]));
    assert_eq!(header(&rec, "version"), Some(&b"2"[..]));
    assert_eq!(header(&rec, "walrelay.lsn"), Some(&b"1/016B3748"[..]));
    assert_eq!(rec.timestamp_ms, None);
    // The same message again: the same record.
    assert_eq!(route(&r, "orders", payload).unwrap(), Some(rec));
}

#[test]
fn without_key_field_the_key_is_the_prefix_and_the_payload_is_not_read() {
    let r = router("[[message]]\nprefix = \"audit.*\"\ntopic = \"audit\"\n");
    let rec = route(&r, "audit.login", "not json \u{1}")
        .unwrap()
        .expect("routed");
    assert_eq!(&*rec.topic, "audit");
    assert_eq!(rec.key.as_deref(), Some(&b"audit.login"[..]));
    assert_eq!(rec.value.as_deref(), Some("not json \u{1}".as_bytes()));
    assert!(
        route(&r, "audit", "x").unwrap().is_none(),
        "the pattern needs the '.'"
    );
    assert!(route(&r, "other", "x").unwrap().is_none());
    assert!(r.routes("audit.x") && !r.routes("auditx"));
}

#[test]
fn an_exact_prefix_matches_only_itself() {
    let r = router("[[message]]\nprefix = \"orders\"\ntopic = \"o\"\n");
    assert!(r.routes("orders"));
    assert!(!r.routes("orders2") && !r.routes("order"));
}

#[test]
fn unroutable_messages_are_errors_naming_prefix_field_and_lsn_never_the_payload() {
    let r = router("[[message]]\nprefix = \"orders\"\ntopic = \"o.{type}\"\nkey_field = \"id\"\n");
    let cases = [
        ("SECRET-not-json", "payload field *", "is not JSON"),
        ("[\"SECRET\"]", "payload field *", "not an object"),
        (
            r#"{"type":"T","x":"SECRET"}"#,
            "payload field id",
            "needed for the key",
        ),
        (
            r#"{"id":null,"type":"T"}"#,
            "payload field id",
            "needed for the key",
        ),
        (
            r#"{"id":1,"x":"SECRET"}"#,
            "payload field type",
            "needed for the topic",
        ),
        (
            r#"{"id":1,"type":"bad/SECRET"}"#,
            "payload field type",
            "invalid topic name",
        ),
    ];
    for (payload, column, reason) in cases {
        let e = route(&r, "orders", payload).unwrap_err();
        let text = e.to_string();
        assert_eq!(e.column, column, "{text}");
        assert_eq!(e.lsn, LSN);
        assert!(text.contains(reason), "{payload}: {text}");
        assert!(text.contains("prefix \"orders\""), "{text}");
        assert!(text.contains("1/016B3748:3"), "{text}");
        assert!(!text.contains("SECRET"), "the payload leaked: {text}");
    }
}

#[test]
fn string_fields_are_text_and_other_values_compact_json() {
    let r = router(
        "[[message]]\nprefix = \"p\"\ntopic = \"t\"\nkey_field = \"k\"\nheader_fields = [\"h\"]\n",
    );
    let rec = route(&r, "p", r#"{"k":{"a": [1, true]},"h":"x y"}"#)
        .unwrap()
        .unwrap();
    assert_eq!(rec.key.as_deref(), Some(&br#"{"a":[1,true]}"#[..]));
    assert_eq!(header(&rec, "h"), Some(&b"x y"[..]));
}

#[test]
fn the_debezium_format_writes_debeziums_op_m_event() {
    let r = router(
        "[[message]]\nprefix = \"or*\"\ntopic = \"t.message\"\nformat = \"debezium\"\nheader_fields = [\"type\"]\n",
    );
    let rec = route(&r, "or\"ders", r#"{"type":"Paid"}"#)
        .unwrap()
        .unwrap();
    assert_eq!(rec.key.as_deref(), Some(&br#"{"prefix":"or\"ders"}"#[..]));
    let value = String::from_utf8(rec.value.clone().unwrap().to_vec()).unwrap();
    assert_eq!(
        value,
        format!(
            r#"{{"op":"m","ts_ms":1700000000123,"source":{{"version":"{}","connector":"postgresql","name":"t","ts_ms":1700000000123,"snapshot":"false","db":"d","sequence":"[null,\"4318770944\"]","schema":"","table":"","txId":771,"lsn":4318770944,"xmin":null}},"transaction":null,"message":{{"prefix":"or\"ders","content":"eyJ0eXBlIjoiUGFpZCJ9"}}}}"#,
            env!("CARGO_PKG_VERSION")
        )
    );
    serde_json::from_str::<serde_json::Value>(&value).expect("valid JSON");
    assert_eq!(header(&rec, "type"), Some(&b"Paid"[..]));
    assert_eq!(
        header(&rec, "walrelay.event_id"),
        Some(&b"1/016B3748:3"[..])
    );
}

#[test]
fn registry_formats_carry_debeziums_event_under_its_schemas() {
    let registry = "[kafka.schema_registry]\nurl = \"http://registry:8081\"\n";
    let section = |format: &str| {
        format!(
            "[[message]]\nprefix = \"orders\"\ntopic = \"shop.message\"\nformat = \"{format}\"\n\
             header_fields = [\"type\"]\n{registry}"
        )
    };
    let payload = r#"{"type":"Paid"}"#;
    let json = route(&router(&section("debezium")), "orders", payload)
        .unwrap()
        .unwrap();
    assert!(json.schemas.is_none());
    for format in ["avro", "json_schema", "protobuf"] {
        let r = router(&section(format));
        let rec = route(&r, "orders", payload).unwrap().unwrap();
        let schemas = rec
            .schemas
            .clone()
            .expect("a registry format's record has schemas");
        assert_eq!(
            schemas.key.as_ref().and_then(|k| k.name.as_deref()),
            Some("io.debezium.connector.postgresql.MessageKey")
        );
        assert_eq!(
            schemas.value.name.as_deref(),
            Some("io.debezium.connector.postgresql.MessageValue")
        );
        // Topic and headers as with format = "debezium".
        assert_eq!(rec.topic, json.topic);
        assert_eq!(rec.headers, json.headers);
        if format == "json_schema" {
            assert_eq!(rec.key, json.key);
            assert_eq!(rec.value, json.value);
        } else if format == "protobuf" {
            // MessageKey's field 1 (`optional string prefix`).
            assert_eq!(rec.key.as_deref(), Some(&b"\x0a\x06orders"[..]));
            assert_ne!(rec.value, json.value);
        } else {
            assert_eq!(rec.key.as_deref(), Some(&b"\x02\x0corders"[..]));
            assert_ne!(rec.value, json.value);
        }
        // Stable identity: the same message, the same record.
        assert_eq!(route(&r, "orders", payload).unwrap(), Some(rec));
    }
}
