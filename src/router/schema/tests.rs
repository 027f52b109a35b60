use super::*;

fn long(n: i64) -> Vec<u8> {
    let mut out = BytesMut::new();
    put_long(&mut out, n);
    out.to_vec()
}

#[test]
fn longs_are_zigzag_varints_as_the_avro_spec_lists_them() {
    assert_eq!(long(0), [0x00]);
    assert_eq!(long(-1), [0x01]);
    assert_eq!(long(1), [0x02]);
    assert_eq!(long(-2), [0x03]);
    assert_eq!(long(2), [0x04]);
    assert_eq!(long(-64), [0x7f]);
    assert_eq!(long(64), [0x80, 0x01]);
    assert_eq!(
        long(i64::MAX),
        [0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
    );
    assert_eq!(
        long(i64::MIN),
        [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
    );
}

#[test]
fn avro_key_and_jsonb_value_of_an_outbox_row() {
    let e = Encoding::bind(SchemaKind::Avro, 1043, oid::JSONB);
    assert_eq!(&*e.schemas().key.as_ref().unwrap().text, r#""string""#);
    assert_eq!(
        &*e.schemas().value.text,
        r#"["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}]"#
    );
    assert_eq!(&e.key(b"agg-1").unwrap()[..], b"\x0aagg-1");
    // Branch 1 of the union, then the string.
    assert_eq!(&e.value(br#"{"a":1}"#).unwrap()[..], b"\x02\x0e{\"a\":1}");
    let big = vec![b'x'; 200];
    let v = e.value(&big).unwrap();
    assert_eq!(&v[..3], [0x02, 0x90, 0x03]);
    assert_eq!(v.len(), 203);
    assert_eq!(e.value(b"\xff"), None, "a text payload must be UTF-8");
}

#[test]
fn integer_and_uuid_keys_take_their_column_types_schema() {
    let e = Encoding::bind(SchemaKind::Avro, oid::INT8, 25);
    assert_eq!(&*e.schemas().key.as_ref().unwrap().text, r#""long""#);
    assert_eq!(&*e.schemas().value.text, r#"["null","string"]"#);
    assert_eq!(&e.key(b"-1").unwrap()[..], [0x01]);
    assert_eq!(&e.key(b"64").unwrap()[..], [0x80, 0x01]);
    assert_eq!(e.key(b"4x"), Err(BadKey));
    let e = Encoding::bind(SchemaKind::Json, oid::INT4, 25);
    assert_eq!(&e.key(b"42").unwrap()[..], b"42");
    assert_eq!(e.key(b"forty-two"), Err(BadKey));
    let e = Encoding::bind(SchemaKind::Avro, oid::UUID, 25);
    assert!(
        e.schemas()
            .key
            .as_ref()
            .unwrap()
            .text
            .contains("io.debezium.data.Uuid")
    );
}

#[test]
fn bytea_payloads_are_avro_bytes_and_base64_under_json_schema() {
    let e = Encoding::bind(SchemaKind::Avro, 25, oid::BYTEA);
    assert_eq!(&*e.schemas().value.text, r#"["null","bytes"]"#);
    assert_eq!(&e.value(b"\x00\xff").unwrap()[..], [0x02, 0x04, 0x00, 0xff]);
    let e = Encoding::bind(SchemaKind::Json, 25, oid::BYTEA);
    for (raw, b64) in [
        (&b""[..], "\"\""),
        (b"f", "\"Zg==\""),
        (b"fo", "\"Zm8=\""),
        (b"foo", "\"Zm9v\""),
        (b"foobar", "\"Zm9vYmFy\""),
        (b"\xfb\xff", "\"+/8=\""),
    ] {
        assert_eq!(&e.value(raw).unwrap()[..], b64.as_bytes());
    }
}

#[test]
fn json_schema_bodies_are_json_strings() {
    let e = Encoding::bind(SchemaKind::Json, 25, oid::JSONB);
    assert_eq!(&e.key(b"a\"b").unwrap()[..], br#""a\"b""#);
    assert_eq!(&e.value(br#"{"a":1}"#).unwrap()[..], br#""{\"a\":1}""#);
}

#[test]
fn every_schema_text_is_json() {
    for kind in [SchemaKind::Avro, SchemaKind::Json] {
        for key in [25, oid::INT2, oid::INT4, oid::INT8, oid::UUID] {
            for value in [25, oid::JSON, oid::JSONB, oid::BYTEA] {
                let e = Encoding::bind(kind, key, value);
                for text in [
                    &e.schemas().key.as_ref().unwrap().text,
                    &e.schemas().value.text,
                ] {
                    assert!(
                        serde_json::from_str::<serde_json::Value>(text).is_ok(),
                        "{text}"
                    );
                }
            }
        }
    }
}
