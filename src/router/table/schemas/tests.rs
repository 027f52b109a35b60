#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};

use super::body::{avro_from_json, base64_decode, decimal_text, json_from_json};
use super::*;
use crate::router::debezium::{Mapping, Modes};

fn decimal(bytes: &[u8], scale: u32) -> String {
    let mut out = Vec::new();
    decimal_text(bytes, scale, &mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn decimals_from_their_unscaled_twos_complement_bytes() {
    assert_eq!(decimal(&[0x04, 0xE2], 2), "12.50");
    assert_eq!(decimal(&[0xFB, 0x1E], 2), "-12.50");
    assert_eq!(decimal(&[0x00], 2), "0.00");
    assert_eq!(decimal(&[0x05], 3), "0.005");
    assert_eq!(decimal(&[0xFF], 0), "-1");
    assert_eq!(decimal(&[0x80], 0), "-128");
    // 10^20 (9 bytes): past u64, across base-10^9 limbs.
    let big = [0x05, 0x6B, 0xC7, 0x5E, 0x2D, 0x63, 0x10, 0x00, 0x00];
    assert_eq!(decimal(&big, 0), "100000000000000000000");
    assert_eq!(decimal(&big, 20), "1.00000000000000000000");
}

#[test]
fn base64_round_trips_the_json_paths_encoding() {
    for data in [&b""[..], b"a", b"ab", b"abc", b"\x00\xff\x10\x80"] {
        let mut text = Vec::new();
        crate::router::debezium::base64(&mut text, data);
        let mut back = Vec::new();
        base64_decode(&text, &mut back).unwrap();
        assert_eq!(back, data);
    }
    assert!(base64_decode(b"abc", &mut Vec::new()).is_none());
    assert!(base64_decode(b"a*c=", &mut Vec::new()).is_none());
}

#[test]
fn names_as_avro_allows_them() {
    assert_eq!(avro_name("orders"), "orders");
    assert_eq!(avro_name("order-items"), "order_items");
    assert_eq!(avro_name("1st"), "_1st");
    assert_eq!(avro_name(""), "_");
}

fn col(oid: u32, typmod: i32) -> Schema {
    column(
        oid,
        typmod,
        Mapping::of(oid, typmod, Modes::default()).unwrap(),
        Modes::default(),
        None,
        false,
    )
}

#[test]
fn columns_get_debeziums_connect_types_and_names() {
    let avro_of = |s: &Schema| serde_json::from_str::<Value>(&text(SchemaKind::Avro, s)).unwrap();
    assert_eq!(avro_of(&col(23, -1)), json!("int"));
    assert_eq!(avro_of(&col(20, -1)), json!("long"));
    assert_eq!(
        avro_of(&col(21, -1)),
        json!({"type": "int", "connect.type": "int16"})
    );
    assert_eq!(avro_of(&col(17, -1)), json!("bytes"));
    assert_eq!(
        avro_of(&col(1700, (10 << 16 | 2) + 4)),
        json!({"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
               "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
               "connect.name": "org.apache.kafka.connect.data.Decimal",
               "logicalType": "decimal"})
    );
    for (oid, typmod, name) in [
        (1082, -1, "io.debezium.time.Date"),
        (1114, -1, "io.debezium.time.MicroTimestamp"),
        (1114, 3, "io.debezium.time.Timestamp"),
        (1184, -1, "io.debezium.time.ZonedTimestamp"),
        (2950, -1, "io.debezium.data.Uuid"),
        (3802, -1, "io.debezium.data.Json"),
        (114, -1, "io.debezium.data.Json"),
        (1186, -1, "io.debezium.time.MicroDuration"),
    ] {
        let s = avro_of(&col(oid, typmod));
        assert_eq!(s["connect.name"], name, "{oid}: {s}");
        assert_eq!(s["connect.version"], 1, "{oid}: {s}");
    }
    // Arrays of optional elements.
    assert_eq!(
        avro_of(&col(1007, -1)),
        json!({"type": "array", "items": ["null", "int"]})
    );
    // Connect's own logical types under time_precision_mode = "connect".
    let connect = Modes {
        time: TimePrecisionMode::Connect,
        ..Modes::default()
    };
    let ts = column(
        1114,
        -1,
        Mapping::of(1114, -1, connect).unwrap(),
        connect,
        None,
        false,
    );
    let ts = avro_of(&ts);
    assert_eq!(ts["logicalType"], "timestamp-millis", "{ts}");
}

fn cols() -> Vec<ColumnSchema> {
    vec![
        ColumnSchema {
            name: "id".into(),
            schema: col(23, -1),
            required: true,
            included: true,
        },
        ColumnSchema {
            name: "price".into(),
            schema: col(1700, (10 << 16 | 2) + 4),
            required: false,
            included: true,
        },
    ]
}

#[test]
fn the_envelope_defines_value_once_and_names_it_after() {
    let s = event_schemas("shop", "public", "orders", &cols(), Some(&[0]));
    let avro: Value = serde_json::from_str(&text(SchemaKind::Avro, &s.envelope)).unwrap();
    assert_eq!(avro["name"], "Envelope");
    assert_eq!(avro["namespace"], "shop.public.orders");
    let fields = avro["fields"].as_array().unwrap();
    let names: Vec<&str> = fields.iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["before", "after", "source", "op", "ts_ms", "transaction"]
    );
    assert_eq!(fields[0]["type"][1]["name"], "Value");
    assert_eq!(
        fields[1]["type"],
        json!(["null", "shop.public.orders.Value"])
    );
    assert_eq!(fields[1]["default"], Value::Null);
    let key: Value =
        serde_json::from_str(&text(SchemaKind::Avro, s.key.as_ref().unwrap())).unwrap();
    assert_eq!(key["fields"], json!([{"name": "id", "type": "int"}]));
    // The same shape, the same text.
    let again = event_schemas("shop", "public", "orders", &cols(), Some(&[0]));
    assert_eq!(
        text(SchemaKind::Avro, &again.envelope),
        text(SchemaKind::Avro, &s.envelope)
    );
    let js: Value = serde_json::from_str(&text(SchemaKind::Json, &s.envelope)).unwrap();
    assert_eq!(js["$schema"], "http://json-schema.org/draft-07/schema#");
    assert_eq!(js["title"], "shop.public.orders.Envelope");
    let after = &js["properties"]["after"];
    assert_eq!(after["oneOf"][0], json!({"type": "null"}));
    assert_eq!(after["connect.index"], 1);
    let price = &after["oneOf"][1]["properties"]["price"];
    assert_eq!(price["oneOf"][1]["type"], "number");
    assert_eq!(
        price["oneOf"][1]["title"],
        "org.apache.kafka.connect.data.Decimal"
    );
}

#[test]
fn bodies_refuse_values_that_do_not_fit() {
    let s = event_schemas("shop", "public", "orders", &cols(), Some(&[0]));
    let key = s.key.unwrap();
    let mut out = Vec::new();
    let e = avro_from_json(&key, br#"{"id":null}"#, &mut out).unwrap_err();
    assert_eq!(e.path, "id");
    let e = avro_from_json(&key, br#"{"id":"x"}"#, &mut out).unwrap_err();
    assert_eq!((e.path.as_str(), e.reason), ("id", "not a number"));
    let e = avro_from_json(&key, br#"{"id":1,"other":2}"#, &mut out).unwrap_err();
    assert_eq!(e.reason, "a field the schema does not have");
    for bad in [
        &b""[..],
        b"{",
        b"{\"id\":1",
        b"{\"id\":1}x",
        b"[1]",
        b"{\"id\":\"unterminated}",
    ] {
        assert!(avro_from_json(&key, bad, &mut out).is_err(), "{bad:?}");
    }
    let value = br#"{"before":null,"after":{"id":1,"price":"not base64!"}}"#;
    let e = json_from_json(&s.envelope, value, &mut out).unwrap_err();
    assert_eq!(e.path, "after.price");
}

#[test]
fn json_bodies_keep_the_bytes_but_decimals() {
    let s = event_schemas("shop", "public", "orders", &cols(), Some(&[0]));
    let mut out = Vec::new();
    let value =
        br#"{"before":null,"after":{"id":1,"price":"+x4="},"source":{"a":"x\"y"},"op":"c"}"#;
    json_from_json(&s.envelope, value, &mut out).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"before":null,"after":{"id":1,"price":-12.50},"source":{"a":"x\"y"},"op":"c"}"#
    );
}

#[test]
fn avro_bodies_of_arrays_structs_and_escapes() {
    let arr = Schema::of(Type::Array(Box::new(Schema::of(Type::Int32).optional())));
    let mut out = Vec::new();
    avro_from_json(&arr, b"[1,null,-2]", &mut out).unwrap();
    assert_eq!(out, [6, 2, 2, 0, 2, 3, 0]);
    out.clear();
    avro_from_json(&arr, b"[]", &mut out).unwrap();
    assert_eq!(out, [0]);
    out.clear();
    avro_from_json(&Schema::of(Type::String), br#""a\"\u00e9""#, &mut out).unwrap();
    assert_eq!(out, [8, b'a', b'"', 0xC3, 0xA9]);
    out.clear();
    avro_from_json(&Schema::of(Type::Float32), br#""NaN""#, &mut out).unwrap();
    assert!(f32::from_le_bytes(out[..4].try_into().unwrap()).is_nan());
}
