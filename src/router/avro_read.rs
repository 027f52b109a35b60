//! A test-only Avro reader over a Connect [`Schema`]: a second reading of
//! the binary encoding, independent of `table::schemas::body`, so that the
//! encode tests of message events and transaction metadata compare a
//! decoded body with the JSON path's value. Bytes come back as the JSON
//! path's base64. Panics on anything it does not expect (test code).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};

use crate::router::table::schemas::{Schema, Type};

/// Reads an Avro zigzag varint.
pub(crate) fn long(b: &mut &[u8]) -> i64 {
    let (mut n, mut shift) = (0u64, 0);
    loop {
        let byte = b[0];
        *b = &b[1..];
        n |= u64::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            break;
        }
    }
    (n >> 1) as i64 ^ -((n & 1) as i64)
}

/// Reads Avro `bytes` (or a `string`'s bytes): a length, then that many.
pub(crate) fn bytes<'a>(b: &mut &'a [u8]) -> &'a [u8] {
    let n = long(b) as usize;
    let (head, rest) = b.split_at(n);
    *b = rest;
    head
}

/// Reads one value of `schema`. An optional one is a union whose null
/// branch comes first, or second when it has a default.
pub(crate) fn read(schema: &Schema, b: &mut &[u8]) -> Value {
    if schema.optional {
        let null_branch = i64::from(schema.default.is_some());
        if long(b) == null_branch {
            return Value::Null;
        }
    }
    match &schema.ty {
        Type::Int16 | Type::Int32 | Type::Int64 => json!(long(b)),
        Type::String => json!(std::str::from_utf8(bytes(b)).unwrap()),
        Type::Bytes => {
            let mut out = Vec::new();
            crate::router::debezium::base64(&mut out, bytes(b));
            json!(String::from_utf8(out).unwrap())
        }
        Type::Array(item) => {
            let mut items = Vec::new();
            loop {
                let n = long(b);
                if n == 0 {
                    break;
                }
                for _ in 0..n {
                    items.push(read(item, b));
                }
            }
            Value::Array(items)
        }
        Type::Struct(fields) => Value::Object(
            fields
                .iter()
                .map(|f| (f.key.clone(), read(&f.schema, b)))
                .collect(),
        ),
        other => panic!("the test reader does not read {other:?}"),
    }
}
