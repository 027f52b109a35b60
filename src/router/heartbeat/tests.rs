#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};

use super::*;
use crate::router::avro_read::read;

#[test]
fn avro_heartbeats_decode_to_the_json_form_under_debeziums_names() {
    let r = Heartbeats::new(TableFormat::Avro)
        .record("sh\"op", "hb", -5)
        .unwrap();
    let mut k = r.key.as_deref().unwrap();
    assert_eq!(read(&key_schema(), &mut k), json!({"serverName": "sh\"op"}));
    assert!(k.is_empty());
    let mut v = r.value.as_deref().unwrap();
    assert_eq!(read(&value_schema(), &mut v), json!({"ts_ms": -5}));
    assert!(v.is_empty());
    let schemas = r.schemas.expect("schemas");
    let key: Value = serde_json::from_str(&schemas.key.as_ref().unwrap().text).unwrap();
    let value: Value = serde_json::from_str(&schemas.value.text).unwrap();
    assert_eq!(
        key,
        json!({"type": "record", "name": "ServerNameKey",
               "namespace": "io.debezium.connector.common",
               "fields": [{"name": "serverName", "type": "string"}],
               "connect.version": 1, "connect.name": KEY_NAME})
    );
    assert_eq!(
        value,
        json!({"type": "record", "name": "Heartbeat",
               "namespace": "io.debezium.connector.common",
               "fields": [{"name": "ts_ms", "type": "long"}],
               "connect.version": 1, "connect.name": VALUE_NAME})
    );
}

#[test]
fn json_schema_heartbeats_keep_the_json_bytes_and_carry_schemas() {
    let r = Heartbeats::new(TableFormat::JsonSchema)
        .record("shop", "hb", 7)
        .unwrap();
    assert_eq!(r.key.as_deref(), Some(&br#"{"serverName":"shop"}"#[..]));
    assert_eq!(r.value.as_deref(), Some(&br#"{"ts_ms":7}"#[..]));
    let schemas = r.schemas.expect("schemas");
    let value: Value = serde_json::from_str(&schemas.value.text).unwrap();
    assert_eq!(value["title"], VALUE_NAME, "{value}");
    assert_eq!(value["properties"]["ts_ms"]["type"], "integer", "{value}");
}
