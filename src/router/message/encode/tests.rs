#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};

use super::*;
use crate::router::avro_read::read;

const KEY: &[u8] = br#"{"prefix":"orders"}"#;

fn value(content: &str) -> Vec<u8> {
    format!(
        r#"{{"op":"m","ts_ms":1700000000123,"source":{{"version":"1.0.0","connector":"postgresql","name":"shop","ts_ms":1700000000123,"snapshot":"false","db":"app","sequence":"[null,\"4317722368\"]","schema":"","table":"","txId":771,"lsn":4317722368,"xmin":null}},"transaction":null,"message":{{"prefix":"orders","content":"{content}"}}}}"#
    )
    .into_bytes()
}

#[test]
fn avro_bodies_decode_to_the_json_paths_key_and_value() {
    let e = Encoding::new(SchemaKind::Avro);
    // {"order_id":"42"} and the bytes 00 ff, base64 as the JSON path writes.
    for content in ["eyJvcmRlcl9pZCI6IjQyIn0=", "AP8=", ""] {
        let (k, v) = e.bodies(KEY.to_vec(), value(content)).unwrap();
        let mut kb = &k[..];
        assert_eq!(
            read(&key_schema(), &mut kb),
            serde_json::from_slice::<Value>(KEY).unwrap()
        );
        assert!(kb.is_empty(), "key: bytes left over");
        let mut vb = &v[..];
        let decoded = read(&value_schema(), &mut vb);
        assert!(vb.is_empty(), "value: bytes left over");
        assert_eq!(
            decoded,
            serde_json::from_slice::<Value>(&value(content)).unwrap()
        );
    }
    // The key by hand: union branch 1, length 6, "orders".
    let (k, _) = e.bodies(KEY.to_vec(), value("")).unwrap();
    assert_eq!(&k[..], b"\x02\x0corders");
    // The content is the payload's bytes, not its base64.
    let (_, v) = e.bodies(KEY.to_vec(), value("AP8=")).unwrap();
    assert!(v.ends_with(b"\x02\x0corders\x02\x04\x00\xff"), "{v:?}");
}

#[test]
fn json_schema_bodies_are_the_json_paths_bytes() {
    let e = Encoding::new(SchemaKind::Json);
    let (k, v) = e.bodies(KEY.to_vec(), value("AP8=")).unwrap();
    assert_eq!(&k[..], KEY);
    assert_eq!(&v[..], &value("AP8=")[..]);
}

#[test]
fn json_that_does_not_fit_is_an_error_naming_the_field() {
    let e = Encoding::new(SchemaKind::Avro);
    let bad = String::from_utf8(value("AP8="))
        .unwrap()
        .replace("\"op\":\"m\"", "\"op\":null");
    let err = e.bodies(KEY.to_vec(), bad.into_bytes()).unwrap_err();
    assert_eq!(err.path, "value.op");
    let err = e.bodies(KEY.to_vec(), value("not base64!")).unwrap_err();
    assert_eq!(err.path, "value.message.content");
    let err = e.bodies(b"{\"prefix\":1}".to_vec(), value("")).unwrap_err();
    assert_eq!(err.path, "key.prefix");
}

#[test]
fn schemas_are_debeziums_message_schemas_under_avro() {
    let e = Encoding::new(SchemaKind::Avro);
    let s = e.schemas();
    let key = s.key.as_ref().unwrap();
    assert_eq!(key.name.as_deref(), Some(KEY_NAME));
    assert_eq!(
        serde_json::from_str::<Value>(&key.text).unwrap(),
        json!({"type": "record", "name": "MessageKey",
               "namespace": "io.debezium.connector.postgresql",
               "fields": [{"name": "prefix", "type": ["null", "string"], "default": null}],
               "connect.version": 1,
               "connect.name": "io.debezium.connector.postgresql.MessageKey"})
    );
    assert_eq!(s.value.name.as_deref(), Some(VALUE_NAME));
    let value: Value = serde_json::from_str(&s.value.text).unwrap();
    assert_eq!(value["name"], "MessageValue");
    assert_eq!(value["connect.version"], 1);
    let fields = value["fields"].as_array().unwrap();
    let names: Vec<&str> = fields.iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["op", "ts_ms", "source", "transaction", "message"]);
    assert_eq!(fields[0], json!({"name": "op", "type": "string"}));
    assert_eq!(
        fields[1],
        json!({"name": "ts_ms", "type": ["null", "long"], "default": null})
    );
    assert_eq!(
        fields[2]["type"]["connect.name"],
        "io.debezium.connector.postgresql.Source"
    );
    assert_eq!(fields[3]["type"][1]["connect.name"], "event.block");
    // The message block is required (no union), its fields optional.
    assert_eq!(
        fields[4],
        json!({"name": "message", "type": {
            "type": "record", "name": "Message",
            "namespace": "io.debezium.connector.postgresql",
            "fields": [
                {"name": "prefix", "type": ["null", "string"], "default": null},
                {"name": "content", "type": ["null", "bytes"], "default": null}],
            "connect.version": 1,
            "connect.name": "io.debezium.connector.postgresql.Message"}})
    );
    // The same text at every start: a re-sent record finds its id.
    assert_eq!(Encoding::new(SchemaKind::Avro).schemas(), s);
}

#[test]
fn schemas_under_json_schema_name_the_draft_and_debeziums_titles() {
    let e = Encoding::new(SchemaKind::Json);
    let s = e.schemas();
    let key: Value = serde_json::from_str(&s.key.as_ref().unwrap().text).unwrap();
    assert_eq!(key["$schema"], "http://json-schema.org/draft-07/schema#");
    assert_eq!(key["title"], KEY_NAME);
    assert_eq!(
        key["properties"]["prefix"],
        json!({"oneOf": [{"type": "null"}, {"type": "string"}], "connect.index": 0})
    );
    let value: Value = serde_json::from_str(&s.value.text).unwrap();
    assert_eq!(value["title"], VALUE_NAME);
    let message = &value["properties"]["message"];
    assert_eq!(message["title"], "io.debezium.connector.postgresql.Message");
    assert_eq!(message["connect.index"], 4);
    assert_eq!(
        message["properties"]["content"]["oneOf"][1],
        json!({"type": "string", "connect.type": "bytes"})
    );
}
