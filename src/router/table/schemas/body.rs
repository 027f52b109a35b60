//! The bodies of `avro` / `json_schema` table events: the JSON path's key
//! and envelope (what `debezium.rs` wrote, parsed once) re-encoded under
//! their Connect schema — Avro's binary encoding, or the same JSON with
//! `Decimal`s as numbers (Confluent's `JsonSchemaConverter` with
//! `decimal.format=NUMERIC`: a JSON Schema number cannot hold base64).
//!
//! Invariants: the values are the JSON path's, never re-derived from the
//! row; a value that does not fit its schema is a [`BodyError`] naming its
//! field, never a panic or a guess.

use serde_json::Value;

use super::{Schema, Type};

/// A value that does not fit its schema, by its field path
/// (`after.amount`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BodyError {
    pub path: String,
    pub reason: &'static str,
}

impl BodyError {
    fn new(reason: &'static str) -> BodyError {
        BodyError {
            path: String::new(),
            reason,
        }
    }

    fn at(mut self, field: &str) -> BodyError {
        self.path = if self.path.is_empty() {
            field.to_owned()
        } else {
            format!("{field}.{}", self.path)
        };
        self
    }
}

/// Avro's `long` (and `int`): zigzag, then base-128 groups, low first.
fn put_long(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Appends `value` under `schema` in Avro's binary encoding.
pub(crate) fn avro(schema: &Schema, value: &Value, out: &mut Vec<u8>) -> Result<(), BodyError> {
    if schema.optional {
        // The null branch is first, unless a default value put its own
        // branch first (`source.snapshot`).
        let null_branch = i64::from(schema.default.is_some());
        if value.is_null() {
            put_long(out, null_branch);
            return Ok(());
        }
        put_long(out, 1 - null_branch);
    } else if value.is_null() {
        return Err(BodyError::new(
            "null in a field that is not optional (a key or replica identity column)",
        ));
    }
    match &schema.ty {
        Type::Int16 | Type::Int32 | Type::Int64 => {
            let n = value
                .as_i64()
                .ok_or_else(|| BodyError::new("not an integer"))?;
            put_long(out, n);
        }
        Type::Float32 => out.extend_from_slice(&(float(value)? as f32).to_le_bytes()),
        Type::Float64 => out.extend_from_slice(&float(value)?.to_le_bytes()),
        Type::Boolean => {
            let b = value
                .as_bool()
                .ok_or_else(|| BodyError::new("not a boolean"))?;
            out.push(u8::from(b));
        }
        Type::String => {
            let s = value
                .as_str()
                .ok_or_else(|| BodyError::new("not a string"))?;
            put_long(out, s.len() as i64);
            out.extend_from_slice(s.as_bytes());
        }
        Type::Bytes => {
            let s = value
                .as_str()
                .ok_or_else(|| BodyError::new("not base64 text"))?;
            let len = decoded_len(s.as_bytes()).ok_or_else(|| BodyError::new("not base64"))?;
            put_long(out, len as i64);
            base64_decode(s.as_bytes(), out).ok_or_else(|| BodyError::new("not base64"))?;
        }
        Type::Array(item) => {
            let items = value
                .as_array()
                .ok_or_else(|| BodyError::new("not an array"))?;
            if !items.is_empty() {
                put_long(out, items.len() as i64);
                for (i, v) in items.iter().enumerate() {
                    avro(item, v, out).map_err(|e| e.at(&format!("[{i}]")))?;
                }
            }
            put_long(out, 0);
        }
        Type::Struct(fields) => {
            let object = value
                .as_object()
                .ok_or_else(|| BodyError::new("not an object"))?;
            for f in fields {
                let v = object.get(&f.key).unwrap_or(&Value::Null);
                avro(&f.schema, v, out).map_err(|e| e.at(&f.key))?;
            }
        }
    }
    Ok(())
}

/// A float as the JSON path writes it: a number, or Jackson's `"NaN"`,
/// `"Infinity"`, `"-Infinity"`.
fn float(value: &Value) -> Result<f64, BodyError> {
    match value {
        Value::Number(n) => n.as_f64().ok_or_else(|| BodyError::new("not a number")),
        Value::String(s) if s == "NaN" => Ok(f64::NAN),
        Value::String(s) if s == "Infinity" => Ok(f64::INFINITY),
        Value::String(s) if s == "-Infinity" => Ok(f64::NEG_INFINITY),
        _ => Err(BodyError::new("not a number")),
    }
}

/// Appends `value` under `schema` as JSON: as the JSON path wrote it, but
/// `Decimal`s (base64 of the unscaled value there) as numbers.
pub(crate) fn json(schema: &Schema, value: &Value, out: &mut Vec<u8>) -> Result<(), BodyError> {
    match (&schema.ty, value) {
        (_, Value::Null) => out.extend_from_slice(b"null"),
        (Type::Bytes, Value::String(b64)) if schema.decimal.is_some() => {
            let scale = schema.decimal.map_or(0, |(_, s)| s);
            let mut unscaled = Vec::with_capacity(b64.len());
            base64_decode(b64.as_bytes(), &mut unscaled)
                .ok_or_else(|| BodyError::new("a decimal that is not base64"))?;
            decimal_text(&unscaled, scale, out);
        }
        (Type::Array(item), Value::Array(items)) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json(item, v, out).map_err(|e| e.at(&format!("[{i}]")))?;
            }
            out.push(b']');
        }
        (Type::Struct(fields), Value::Object(object)) => {
            out.push(b'{');
            for (i, f) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let _ = serde_json::to_writer(&mut *out, &f.key);
                out.push(b':');
                let v = object.get(&f.key).unwrap_or(&Value::Null);
                json(&f.schema, v, out).map_err(|e| e.at(&f.key))?;
            }
            out.push(b'}');
        }
        (_, v) => {
            let _ = serde_json::to_writer(&mut *out, v);
        }
    }
    Ok(())
}

/// The decimal text of big-endian two's-complement `unscaled` with
/// `scale` digits after the point (`-12.50`).
pub(crate) fn decimal_text(unscaled: &[u8], scale: u32, out: &mut Vec<u8>) {
    let negative = unscaled.first().is_some_and(|b| b & 0x80 != 0);
    let mut magnitude: Vec<u8> = unscaled.to_vec();
    if negative {
        for b in &mut magnitude {
            *b = !*b;
        }
        for b in magnitude.iter_mut().rev() {
            let (sum, carry) = b.overflowing_add(1);
            *b = sum;
            if !carry {
                break;
            }
        }
    }
    // Base 10^9 limbs, least significant first.
    let mut limbs: Vec<u32> = Vec::new();
    let mut rest = magnitude;
    while rest.iter().any(|&b| b != 0) {
        let mut remainder: u64 = 0;
        for b in &mut rest {
            let cur = remainder * 256 + u64::from(*b);
            *b = (cur / 1_000_000_000) as u8;
            remainder = cur % 1_000_000_000;
        }
        limbs.push(remainder as u32);
    }
    let mut digits = String::new();
    match limbs.split_last() {
        None => digits.push('0'),
        Some((top, lower)) => {
            digits.push_str(&top.to_string());
            for limb in lower.iter().rev() {
                digits.push_str(&format!("{limb:09}"));
            }
        }
    }
    let scale = scale as usize;
    if scale > 0 && digits.len() <= scale {
        digits.insert_str(0, &"0".repeat(scale + 1 - digits.len()));
    }
    if negative {
        out.push(b'-');
    }
    let (whole, fraction) = digits.split_at(digits.len() - scale);
    out.extend_from_slice(whole.as_bytes());
    if scale > 0 {
        out.push(b'.');
        out.extend_from_slice(fraction.as_bytes());
    }
}

/// The length standard padded base64 `text` decodes to.
fn decoded_len(text: &[u8]) -> Option<usize> {
    if text.len() % 4 != 0 {
        return None;
    }
    let padding = text.iter().rev().take(2).filter(|&&b| b == b'=').count();
    Some(text.len() / 4 * 3 - padding)
}

/// Appends the bytes of standard padded base64 `text`; `None` (some
/// bytes appended) when it is not base64.
pub(crate) fn base64_decode(text: &[u8], out: &mut Vec<u8>) -> Option<()> {
    fn sextet(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    if text.len() % 4 != 0 {
        return None;
    }
    let chunks = text.len() / 4;
    for (i, chunk) in text.chunks(4).enumerate() {
        let last = i + 1 == chunks;
        let pad = if last {
            chunk.iter().rev().take(2).filter(|&&b| b == b'=').count()
        } else {
            0
        };
        let mut n = 0u32;
        for (j, &c) in chunk.iter().enumerate() {
            let v = if j >= 4 - pad { 0 } else { sextet(c)? };
            n = n << 6 | v;
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(())
}
