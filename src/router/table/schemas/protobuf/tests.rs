#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::router::debezium::{Mapping, Modes};
use crate::router::table::schemas::{ColumnSchema, column, event_schemas};

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

fn cols() -> Vec<ColumnSchema> {
    let c = |name: &str, schema: Schema, required: bool| ColumnSchema {
        name: name.into(),
        schema,
        required,
        included: true,
    };
    vec![
        c("id", col(23, -1), true),
        c("price", col(1700, (10 << 16 | 2) + 4), false),
        c("small", col(21, -1), false),
        c("tags", col(1009, -1), false),
        c("born", col(1082, -1), false),
        c("amount", col(1700, -1), false),
    ]
}

/// The envelope of a table with an int4 key, a numeric(10,2), an int2, a
/// text[], a date and a plain numeric: its proto3 file, byte for byte.
#[test]
fn the_envelope_file_is_golden_and_deterministic() {
    let s = event_schemas("shop", "public", "orders", &cols(), Some(&[0]));
    let got = text(&s.envelope);
    assert_eq!(got, include_str!("envelope.golden.proto"), "{got}");
    let again = event_schemas("shop", "public", "orders", &cols(), Some(&[0]));
    assert_eq!(text(&again.envelope), got);
    assert_eq!(
        text(s.key.as_ref().unwrap()),
        "syntax = \"proto3\";\npackage shop.public.orders;\n\nmessage Key {\n  int32 id = 1;\n}\n"
    );
}

#[test]
fn outbox_texts_are_what_the_generator_makes() {
    use crate::router::schema::{Encoding, SchemaKind};
    let named = |ty: Type, name: &str| Schema::named(ty, name);
    let wrap = |name: &str, field: Schema| Schema {
        version: None,
        ..Schema::named(Type::Struct(vec![Schema::field("value", field)]), name)
    };
    let key = |oid: u32| {
        Encoding::bind(SchemaKind::Protobuf, oid, 25)
            .schemas()
            .key
            .clone()
            .unwrap()
            .text
    };
    let value = |oid: u32| {
        Encoding::bind(SchemaKind::Protobuf, 25, oid)
            .schemas()
            .value
            .text
            .clone()
    };
    let k = "walrelay.outbox.Key";
    let v = "walrelay.outbox.Value";
    assert_eq!(*key(25), text(&wrap(k, Schema::of(Type::String))));
    assert_eq!(*key(21), text(&wrap(k, Schema::of(Type::Int16))));
    assert_eq!(*key(23), text(&wrap(k, Schema::of(Type::Int32))));
    assert_eq!(*key(20), text(&wrap(k, Schema::of(Type::Int64))));
    assert_eq!(
        *key(2950),
        text(&wrap(k, named(Type::String, "io.debezium.data.Uuid")))
    );
    assert_eq!(
        *value(25),
        text(&wrap(v, Schema::of(Type::String).optional()))
    );
    assert_eq!(
        *value(17),
        text(&wrap(v, Schema::of(Type::Bytes).optional()))
    );
    assert_eq!(
        *value(3802),
        text(&wrap(
            v,
            named(Type::String, "io.debezium.data.Json").optional()
        ))
    );
    let e = Encoding::bind(SchemaKind::Protobuf, 20, 25);
    assert_eq!(
        &e.key(b"-1").unwrap()[..],
        [
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
        ]
    );
    assert_eq!(&e.key(b"0").unwrap()[..], b"");
    assert_eq!(&e.value(b"").unwrap()[..], [0x0a, 0]);
    assert_eq!(&e.value(b"hi").unwrap()[..], [0x0a, 2, b'h', b'i']);
    assert!(e.value(b"\xff").is_none());
}

fn record(fields: Vec<(&str, Schema)>) -> Schema {
    Schema::named(
        Type::Struct(
            fields
                .into_iter()
                .map(|(n, s)| Schema::field(n, s))
                .collect(),
        ),
        "t.R",
    )
}

fn encode(schema: &Schema, json: &str) -> Result<Vec<u8>, BodyError> {
    let mut out = Vec::new();
    protobuf_from_json(schema, json.as_bytes(), &mut out).map(|()| out)
}

#[test]
fn every_scalar_kind_in_its_wire_type() {
    let s = record(vec![
        ("a", Schema::of(Type::Int16)),
        ("b", Schema::of(Type::Int32)),
        ("c", Schema::of(Type::Int64)),
        ("d", Schema::of(Type::Float32)),
        ("e", Schema::of(Type::Float64)),
        ("f", Schema::of(Type::Boolean)),
        ("g", Schema::of(Type::String)),
        ("h", Schema::of(Type::Bytes)),
    ]);
    let got = encode(&s, r#"{"a":-5,"b":300,"c":9007199254740993,"d":1.5,"e":-2.25,"f":true,"g":"h\u00e9","h":"AQL/"}"#).unwrap();
    let mut want = vec![0x08];
    want.extend([0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]); // -5, sign-extended
    want.extend([0x10, 0xac, 0x02]); // 300
    want.extend([0x18, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10]); // 2^53 + 1
    want.push(0x25);
    want.extend(1.5f32.to_le_bytes());
    want.push(0x29);
    want.extend((-2.25f64).to_le_bytes());
    want.extend([0x30, 1]);
    want.extend([0x3a, 3, b'h', 0xc3, 0xa9]);
    want.extend([0x42, 3, 1, 2, 0xff]);
    assert_eq!(got, want);
    // Defaults of fields without presence are left out; NaN as Jackson writes it.
    let got = encode(
        &s,
        r#"{"a":0,"b":0,"c":0,"d":0.0,"e":"NaN","f":false,"g":"","h":""}"#,
    )
    .unwrap();
    assert_eq!(got[0], 0x29);
    assert!(f64::from_le_bytes(got[1..9].try_into().unwrap()).is_nan());
    assert_eq!(got.len(), 9);
}

#[test]
fn optional_fields_keep_null_apart_from_zero() {
    let s = record(vec![
        ("a", Schema::of(Type::Int32).optional()),
        ("b", Schema::of(Type::String).optional()),
        ("c", Schema::of(Type::Int64)),
    ]);
    // A zero of an optional field is written; a null is not.
    assert_eq!(
        encode(&s, r#"{"a":0,"b":null,"c":1}"#).unwrap(),
        [0x08, 0, 0x18, 1]
    );
    assert_eq!(
        encode(&s, r#"{"a":null,"b":"","c":1}"#).unwrap(),
        [0x12, 0, 0x18, 1]
    );
    // Fields the JSON ends before are null.
    assert_eq!(encode(&s, r#"{"a":1}"#).unwrap_err().path, "c");
    let e = encode(&s, r#"{"a":1,"b":"x","c":null}"#).unwrap_err();
    assert_eq!(e.path, "c");
    assert!(e.reason.contains("not optional"), "{e:?}");
}

#[test]
fn arrays_pack_required_scalars_and_wrap_optional_elements() {
    let s = record(vec![
        (
            "n",
            Schema::of(Type::Array(Box::new(Schema::of(Type::Int32)))),
        ),
        (
            "o",
            Schema::of(Type::Array(Box::new(Schema::of(Type::Int32).optional()))).optional(),
        ),
        (
            "t",
            Schema::of(Type::Array(Box::new(Schema::of(Type::String)))),
        ),
    ]);
    let got = encode(&s, r#"{"n":[1,-1,0],"o":[1,null,0],"t":["a",""]}"#).unwrap();
    let mut want = vec![0x0a, 12, 1];
    want.extend([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    want.push(0);
    // Each element its wrapper: value 1, nothing (NULL), value 0 (present).
    want.extend([0x12, 2, 0x08, 1, 0x12, 0, 0x12, 2, 0x08, 0]);
    want.extend([0x1a, 1, b'a', 0x1a, 0]);
    assert_eq!(got, want);
    // Null and empty arrays: no elements.
    assert_eq!(encode(&s, r#"{"n":[],"o":null,"t":[]}"#).unwrap(), b"");
    let e = encode(&s, r#"{"n":[1,null],"o":null,"t":[]}"#).unwrap_err();
    assert_eq!(e.path, "n.[1]");
    let e = encode(&s, r#"{"n":[],"o":[1,"x"],"t":[]}"#).unwrap_err();
    assert_eq!(e.path, "o.[1]");
}

#[test]
fn nested_structs_and_decimals_are_length_delimited_messages() {
    let inner = Schema::named(
        Type::Struct(vec![
            Schema::field("scale", Schema::of(Type::Int32)),
            Schema::field("value", Schema::of(Type::Bytes)),
        ]),
        "io.debezium.data.VariableScaleDecimal",
    );
    let s = record(vec![
        ("v", inner.optional()),
        ("d", col(1700, (10 << 16 | 2) + 4).optional()),
        ("w", Schema::named(Type::Struct(vec![]), "t.Empty")),
    ]);
    // -12.50: unscaled -1250 = 0xfb1e; precision 4, scale 2.
    let got = encode(&s, r#"{"v":{"scale":5,"value":"BMsv"},"d":"+x4=","w":{}}"#).unwrap();
    let want = [
        0x0a, 7, 0x08, 5, 0x12, 3, 0x04, 0xcb, 0x2f, // v
        0x12, 8, 0x0a, 2, 0xfb, 0x1e, 0x10, 4, 0x18, 2, // d
        0x1a, 0, // w: present, empty
    ];
    assert_eq!(got, want);
    assert_eq!(
        encode(&s, r#"{"v":null,"d":null,"w":{}}"#).unwrap(),
        [0x1a, 0]
    );
    // Zero: one digit.
    let got = encode(&s, r#"{"v":null,"d":"AA==","w":{}}"#).unwrap();
    assert_eq!(got, [0x12, 7, 0x0a, 1, 0, 0x10, 1, 0x18, 2, 0x1a, 0]);
}

#[test]
fn misfits_are_errors_naming_the_field() {
    let s = record(vec![
        ("i", Schema::of(Type::Int32)),
        ("b", Schema::of(Type::Bytes)),
        ("x", Schema::of(Type::Boolean)),
    ]);
    let err = |json: &str| encode(&s, json).unwrap_err();
    assert_eq!(err(r#"{"i":2147483648,"b":"","x":true}"#).path, "i");
    assert_eq!(err(r#"{"i":"1","b":"","x":true}"#).path, "i");
    assert_eq!(err(r#"{"i":1,"b":"not base64!","x":true}"#).path, "b");
    assert_eq!(err(r#"{"i":1,"b":"","x":1}"#).path, "x");
    assert_eq!(err(r#"{"b":"","i":1,"x":true}"#).path, "i");
    assert_eq!(
        err(r#"{"i":1,"b":"","x":true,"y":1}"#).reason,
        "a field the schema does not have"
    );
    for bad in [
        "",
        "{",
        "[1]",
        r#"{"i":1,"b":"","x":true}x"#,
        r#"{"i":1,"b":"unterminated"#,
    ] {
        assert!(encode(&s, bad).is_err(), "{bad:?}");
    }
    assert!(protobuf_from_json(&Schema::of(Type::String), b"\"a\"", &mut Vec::new()).is_err());
}

#[test]
fn names_and_parameters_ride_as_field_meta_and_strings_are_escaped() {
    let s = record(vec![(
        "e",
        Schema {
            params: vec![("allowed", "a\"b,c\\d,é\n".to_owned())],
            ..Schema::named(Type::String, "io.debezium.data.Enum")
        },
    )]);
    assert_eq!(
        text(&s),
        "syntax = \"proto3\";\npackage t;\n\nimport \"confluent/meta.proto\";\n\nmessage R {\n  \
         string e = 1 [(confluent.field_meta) = { params: [{ key: \"connect.name\", value: \
         \"io.debezium.data.Enum\" }, { key: \"connect.version\", value: \"1\" }, { key: \
         \"allowed\", value: \"a\\\"b,c\\\\d,é\\n\" }] }];\n}\n"
    );
    // A nested message's name clashing with a field's gets a `_`.
    let p = Schema::named(Type::Struct(vec![]), "x.Point");
    let s = record(vec![("Point", Schema::of(Type::Int32)), ("p", p)]);
    assert!(text(&s).contains("  .t.R.Point_ p = 2"), "{}", text(&s));
}

/// Walks Protobuf wire data: every field's tag, then a varint, 8 or 4
/// bytes, or a length and that many bytes; `false` on anything else.
fn well_formed(mut b: &[u8]) -> bool {
    fn varint(b: &mut &[u8]) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let (&byte, rest) = b.split_first()?;
            *b = rest;
            v |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    while !b.is_empty() {
        let Some(tag) = varint(&mut b) else {
            return false;
        };
        let n = match tag & 7 {
            0 => {
                if varint(&mut b).is_none() {
                    return false;
                }
                0
            }
            1 => 8,
            5 => 4,
            2 => match varint(&mut b) {
                Some(n) => n as usize,
                None => return false,
            },
            _ => return false,
        };
        if tag >> 3 == 0 || b.len() < n {
            return false;
        }
        b = &b[n..];
    }
    true
}

/// A JSON envelope of [`cols`] as the JSON path writes it.
const ENVELOPE: &str = r#"{"before":null,"after":{"id":1,"price":"+x4=","small":-3,"tags":["a",null,"b\"c"],"born":19723,"amount":{"scale":5,"value":"BMsv"}},"source":{"version":"3.6.1","connector":"postgresql","name":"shop","ts_ms":1,"snapshot":"false","db":"app","sequence":"[\"1\",\"2\"]","schema":"public","table":"orders","txId":7,"lsn":8,"xmin":null},"op":"c","ts_ms":2,"transaction":{"id":"7:8","total_order":1,"data_collection_order":1}}"#;

#[test]
fn a_whole_envelope_is_well_formed_wire_data() {
    let s = event_schemas("shop", "public", "orders", &cols(), Some(&[0]));
    let out = encode(&s.envelope, ENVELOPE).unwrap();
    assert!(well_formed(&out));
    // `before` (1) absent, `after` (2) first.
    assert_eq!(out[0], 0x12);
}

proptest::proptest! {
    /// Cut or altered anywhere, the JSON gives an error or well-formed
    /// wire data: never a panic.
    #[test]
    fn any_damage_is_an_error_or_well_formed(
        cut in 0usize..ENVELOPE.len(),
        at in 0usize..ENVELOPE.len(),
        byte in proptest::prelude::any::<u8>(),
    ) {
        let s = event_schemas("shop", "public", "orders", &cols(), Some(&[0]));
        let mut damaged = ENVELOPE.as_bytes().to_vec();
        damaged[at] = byte;
        for json in [&ENVELOPE.as_bytes()[..cut], &damaged[..]] {
            let mut out = Vec::new();
            if protobuf_from_json(&s.envelope, json, &mut out).is_ok() {
                proptest::prop_assert!(well_formed(&out));
            }
        }
    }
}
