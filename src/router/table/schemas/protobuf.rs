//! `format = "protobuf"`: a Connect [`Schema`] as a proto3 file (the text a
//! registry holds, `schemaType` `PROTOBUF`) and the JSON path's key or
//! envelope as that file's first message in Protobuf's binary encoding.
//! The Confluent wire format's prefix (magic byte, schema id, message
//! indexes) is the sink's (`sink::registry`).
//!
//! Invariants:
//! - **The record's message is the file's first** (message index `[0]`);
//!   structs it holds are messages nested where first used, referred to by
//!   their full names (`.shop.public.orders.Envelope.Value`), defined once.
//! - **Field numbers are the fields' positions** (1, 2, … in column order):
//!   a column added at the end gets the next number, so an older reader
//!   keeps reading the fields it knows.
//! - **NULL stays NULL.** An optional scalar is a proto3 `optional` field
//!   (explicit presence: absent is NULL, `0` is zero), an optional struct a
//!   message field (absent is NULL). Repeated fields cannot hold a NULL
//!   element: an array of optional elements is `repeated Item_<field>`, a
//!   nested message whose `value` field is absent for a NULL element. (A
//!   NULL array and an empty one are both no elements, as in every
//!   Protobuf mapping.)
//! - **Connect types ride as Confluent writes them:** `int16` is `int32`
//!   with `connect.type` `int16`, `Decimal` is `confluent.type.Decimal`
//!   (`value` the unscaled two's-complement bytes, `precision` its digits,
//!   `scale`) with the column's `precision`/`scale`; other names, versions
//!   and parameters (`io.debezium.time.Date`, an enum's `allowed`) are
//!   `(confluent.field_meta)` params `connect.name`, `connect.version` and
//!   the parameter's own key. Imports: `confluent/meta.proto` and
//!   `confluent/type/decimal.proto`, the two Confluent's registry and
//!   deserializers know built in, only when used.
//! - **The same schema gives the same text**, byte for byte.
//! - Bodies are the JSON path's values, never re-derived from the row; a
//!   value that does not fit is a [`BodyError`] naming its field. Singular
//!   fields without presence are left out at their default (`0`, `""`,
//!   `false`), as Protobuf's own serializers do, so bytes are canonical.

use std::borrow::Cow;
use std::fmt::Write as _;

use super::body::{BodyError, Parser, base64_decode, decimal_text, float};
use super::{Schema, Type};

/// `org.apache.kafka.connect.data.Decimal`.
const DECIMAL: &str = "org.apache.kafka.connect.data.Decimal";

/// The proto3 file of `schema`, a struct (its message first in the file).
pub(crate) fn text(schema: &Schema) -> String {
    let full = schema.name.clone().unwrap_or_else(|| "Value".to_owned());
    let (package, name) = match full.rsplit_once('.') {
        Some((p, n)) => (Some(p), n),
        None => (None, full.as_str()),
    };
    let mut file = File::default();
    let scope = match package {
        Some(p) => format!(".{p}.{name}"),
        None => format!(".{name}"),
    };
    let fields = match &schema.ty {
        Type::Struct(fields) => fields.as_slice(),
        _ => &[],
    };
    let mut body = String::new();
    file.message(name, &scope, fields, 0, &mut body);
    let mut out = String::from("syntax = \"proto3\";\n");
    if let Some(p) = package {
        let _ = writeln!(out, "package {p};");
    }
    if file.meta || file.decimal {
        out.push('\n');
    }
    if file.meta {
        out.push_str("import \"confluent/meta.proto\";\n");
    }
    if file.decimal {
        out.push_str("import \"confluent/type/decimal.proto\";\n");
    }
    out.push('\n');
    out.push_str(&body);
    out
}

/// What a file needs, and the structs defined so far.
#[derive(Default)]
struct File {
    meta: bool,
    decimal: bool,
    /// (Connect name, the message's full proto name).
    defined: Vec<(String, String)>,
}

impl File {
    /// Writes message `name` (full name `scope`) with `fields`, its nested
    /// messages after its fields.
    fn message(
        &mut self,
        name: &str,
        scope: &str,
        fields: &[super::Field],
        depth: usize,
        out: &mut String,
    ) {
        let ind = "  ".repeat(depth);
        let field_ind = "  ".repeat(depth + 1);
        let _ = writeln!(out, "{ind}message {name} {{");
        let mut taken: Vec<String> = fields.iter().map(|f| f.name.clone()).collect();
        let mut nested = String::new();
        for (i, f) in fields.iter().enumerate() {
            let number = i + 1;
            let (label, ty, options) = match &f.schema.ty {
                Type::Array(item) if item.optional => {
                    let wrapper = unique(&format!("Item_{}", f.name), &mut taken);
                    let full = format!("{scope}.{wrapper}");
                    let item_field = super::Field {
                        name: "value".to_owned(),
                        key: "value".to_owned(),
                        schema: (**item).clone(),
                    };
                    self.message(&wrapper, &full, &[item_field], depth + 1, &mut nested);
                    ("repeated ", full, self.options(&f.schema))
                }
                Type::Array(item) => {
                    let ty = self.type_of(item, scope, &mut taken, depth, &mut nested);
                    ("repeated ", ty, self.options(item))
                }
                _ => {
                    let ty = self.type_of(&f.schema, scope, &mut taken, depth, &mut nested);
                    let scalar =
                        !matches!(f.schema.ty, Type::Struct(_)) && f.schema.decimal.is_none();
                    let label = if f.schema.optional && scalar {
                        "optional "
                    } else {
                        ""
                    };
                    (label, ty, self.options(&f.schema))
                }
            };
            let _ = writeln!(
                out,
                "{field_ind}{label}{ty} {} = {number}{options};",
                f.name
            );
        }
        out.push_str(&nested);
        let _ = writeln!(out, "{ind}}}");
    }

    /// The type of a singular value of `schema` in message `scope`; a struct
    /// not defined yet is defined in `nested`.
    fn type_of(
        &mut self,
        schema: &Schema,
        scope: &str,
        taken: &mut Vec<String>,
        depth: usize,
        nested: &mut String,
    ) -> String {
        if schema.decimal.is_some() {
            self.decimal = true;
            return "confluent.type.Decimal".to_owned();
        }
        match &schema.ty {
            Type::Int16 | Type::Int32 => "int32".to_owned(),
            Type::Int64 => "int64".to_owned(),
            Type::Float32 => "float".to_owned(),
            Type::Float64 => "double".to_owned(),
            Type::Boolean => "bool".to_owned(),
            Type::String => "string".to_owned(),
            Type::Bytes => "bytes".to_owned(),
            // Arrays of arrays: not a column type walrelay maps.
            Type::Array(_) => "bytes".to_owned(),
            Type::Struct(fields) => {
                let connect = schema.name.clone().unwrap_or_default();
                if let Some((_, full)) = self.defined.iter().find(|(c, _)| *c == connect) {
                    return full.clone();
                }
                let short = connect.rsplit('.').next().unwrap_or("Struct");
                let short = if short.is_empty() { "Struct" } else { short };
                let name = unique(short, taken);
                let full = format!("{scope}.{name}");
                self.defined.push((connect, full.clone()));
                self.message(&name, &full, fields, depth + 1, nested);
                full
            }
        }
    }

    /// The field's `(confluent.field_meta)` option, or "".
    fn options(&mut self, schema: &Schema) -> String {
        let mut params: Vec<(&str, String)> = Vec::new();
        if schema.decimal.is_some() {
            for (k, v) in &schema.params {
                match *k {
                    "connect.decimal.precision" => params.insert(0, ("precision", v.clone())),
                    "scale" => params.push(("scale", v.clone())),
                    _ => {}
                }
            }
        } else {
            if schema.ty == Type::Int16 {
                params.push(("connect.type", "int16".to_owned()));
            }
            if let Some(name) = &schema.name
                && name != DECIMAL
            {
                params.push(("connect.name", name.clone()));
                if let Some(v) = schema.version {
                    params.push(("connect.version", v.to_string()));
                }
                params.extend(schema.params.iter().map(|(k, v)| (*k, v.clone())));
            }
        }
        if params.is_empty() {
            return String::new();
        }
        self.meta = true;
        let list: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{{ key: {}, value: {} }}", quoted(k), quoted(v)))
            .collect();
        format!(
            " [(confluent.field_meta) = {{ params: [{}] }}]",
            list.join(", ")
        )
    }
}

/// `want`, or `want_`, `want__`, … : the first not in `taken` (field and
/// message names share a message's scope), then taken.
fn unique(want: &str, taken: &mut Vec<String>) -> String {
    let mut name = want.to_owned();
    while taken.contains(&name) {
        name.push('_');
    }
    taken.push(name.clone());
    name
}

/// A proto string literal: `"`, `\` and control characters escaped, other
/// text (UTF-8) as it is.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A base-128 varint, low group first.
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_tag(out: &mut Vec<u8>, number: usize, wire: u8) {
    put_varint(out, ((number as u64) << 3) | u64::from(wire));
}

fn put_len(out: &mut Vec<u8>, number: usize, data: &[u8]) {
    put_tag(out, number, 2);
    put_varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

/// Appends the JSON `json` (the JSON path's key or envelope, an object)
/// under struct `schema` as the Protobuf binary of its message.
pub(crate) fn protobuf_from_json(
    schema: &Schema,
    json: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), BodyError> {
    let Type::Struct(fields) = &schema.ty else {
        return Err(BodyError::new("not a struct schema"));
    };
    let mut p = Parser { b: json, at: 0 };
    message(fields, &mut p, out)?;
    match p.peek() {
        None => Ok(()),
        Some(_) => Err(BodyError::new("more JSON than one value")),
    }
}

/// One JSON object as the message of `fields`.
fn message(
    fields: &[super::Field],
    p: &mut Parser<'_>,
    out: &mut Vec<u8>,
) -> Result<(), BodyError> {
    p.expect(b'{')?;
    let mut first = true;
    let mut ended = false;
    for (i, f) in fields.iter().enumerate() {
        let key = if ended { None } else { p.next_key(first)? };
        first = false;
        match key {
            Some(k) if k == f.key.as_str() => {
                field(i + 1, &f.schema, p, out).map_err(|e| e.at(&f.key))?;
            }
            Some(_) => return Err(BodyError::new("a field out of the schema's order").at(&f.key)),
            None => {
                ended = true;
                let mut null = Parser { b: b"null", at: 0 };
                field(i + 1, &f.schema, &mut null, out).map_err(|e| e.at(&f.key))?;
            }
        }
    }
    if !ended && p.next_key(first)?.is_some() {
        return Err(BodyError::new("a field the schema does not have"));
    }
    Ok(())
}

/// One value, encoded without its tag (a string without escapes borrowed
/// from the JSON).
enum Wire<'a> {
    Varint(u64),
    Fixed32(u32),
    Fixed64(u64),
    Len(Cow<'a, [u8]>),
}

impl Wire<'_> {
    /// A proto3 default value (left out of a field without presence).
    fn is_default(&self) -> bool {
        match self {
            Wire::Varint(v) | Wire::Fixed64(v) => *v == 0,
            Wire::Fixed32(v) => *v == 0,
            Wire::Len(b) => b.is_empty(),
        }
    }

    fn put(&self, number: usize, out: &mut Vec<u8>) {
        match self {
            Wire::Varint(v) => {
                put_tag(out, number, 0);
                put_varint(out, *v);
            }
            Wire::Fixed32(v) => {
                put_tag(out, number, 5);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Wire::Fixed64(v) => {
                put_tag(out, number, 1);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Wire::Len(b) => put_len(out, number, b),
        }
    }

    /// As an element of a packed repeated field.
    fn put_packed(&self, out: &mut Vec<u8>) {
        match self {
            Wire::Varint(v) => put_varint(out, *v),
            Wire::Fixed32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Wire::Fixed64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Wire::Len(_) => {}
        }
    }
}

/// Field `number` of `schema` from the next JSON value.
fn field(
    number: usize,
    schema: &Schema,
    p: &mut Parser<'_>,
    out: &mut Vec<u8>,
) -> Result<(), BodyError> {
    if p.null() {
        return match (&schema.ty, schema.optional) {
            (Type::Array(_), _) | (_, true) => Ok(()),
            _ => Err(BodyError::new(
                "null in a field that is not optional (a key or replica identity column)",
            )),
        };
    }
    let Type::Array(item) = &schema.ty else {
        let v = value(schema, p)?;
        // Presence: optional scalars and every message; else proto3
        // leaves a default out.
        let implicit =
            !schema.optional && !matches!(schema.ty, Type::Struct(_)) && schema.decimal.is_none();
        if !(implicit && v.is_default()) {
            v.put(number, out);
        }
        return Ok(());
    };
    p.expect(b'[')?;
    let packable = !item.optional
        && item.decimal.is_none()
        && !matches!(
            item.ty,
            Type::String | Type::Bytes | Type::Struct(_) | Type::Array(_)
        );
    let mut packed = Vec::new();
    let mut i = 0usize;
    if p.peek() == Some(b']') {
        p.at += 1;
    } else {
        loop {
            let at = format!("[{i}]");
            if item.optional {
                // The element's wrapper: `value` absent for NULL.
                let mut wrapper = Vec::new();
                field(1, item, p, &mut wrapper).map_err(|e| e.at(&at))?;
                put_len(out, number, &wrapper);
            } else if p.null() {
                return Err(BodyError::new("a null element in an array of required ones").at(&at));
            } else {
                let v = value(item, p).map_err(|e| e.at(&at))?;
                if packable {
                    v.put_packed(&mut packed);
                } else {
                    v.put(number, out);
                }
            }
            i += 1;
            match p.peek() {
                Some(b',') => p.at += 1,
                Some(b']') => {
                    p.at += 1;
                    break;
                }
                _ => return Err(BodyError::new("an unterminated array")),
            }
        }
    }
    if !packed.is_empty() {
        put_len(out, number, &packed);
    }
    Ok(())
}

/// A non-null singular value of `schema`.
fn value<'a>(schema: &Schema, p: &mut Parser<'a>) -> Result<Wire<'a>, BodyError> {
    if let Some((_, scale)) = schema.decimal {
        let b64 = p.string()?;
        let mut unscaled = Vec::with_capacity(b64.len());
        base64_decode(b64.as_bytes(), &mut unscaled)
            .ok_or_else(|| BodyError::new("a decimal that is not base64"))?;
        return Ok(Wire::Len(Cow::Owned(decimal_message(&unscaled, scale))));
    }
    Ok(match &schema.ty {
        Type::Int16 | Type::Int32 => {
            let n: i32 = p
                .number()?
                .parse()
                .map_err(|_| BodyError::new("not a 32-bit integer"))?;
            // int32: negative values sign-extended to 64 bits.
            Wire::Varint(i64::from(n) as u64)
        }
        Type::Int64 => {
            let n: i64 = p
                .number()?
                .parse()
                .map_err(|_| BodyError::new("not an integer"))?;
            Wire::Varint(n as u64)
        }
        Type::Float32 => Wire::Fixed32((float(p)? as f32).to_bits()),
        Type::Float64 => Wire::Fixed64(float(p)?.to_bits()),
        Type::Boolean => {
            if p.word(b"true") {
                Wire::Varint(1)
            } else if p.word(b"false") {
                Wire::Varint(0)
            } else {
                return Err(BodyError::new("not a boolean"));
            }
        }
        Type::String => Wire::Len(match p.string()? {
            Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
            Cow::Owned(s) => Cow::Owned(s.into_bytes()),
        }),
        Type::Bytes => {
            let (span, _) = p.string_span()?;
            let mut bytes = Vec::with_capacity(span.len());
            base64_decode(&span[1..span.len() - 1], &mut bytes)
                .ok_or_else(|| BodyError::new("not base64"))?;
            Wire::Len(Cow::Owned(bytes))
        }
        Type::Struct(fields) => {
            let mut inner = Vec::new();
            message(fields, p, &mut inner)?;
            Wire::Len(Cow::Owned(inner))
        }
        Type::Array(_) => {
            return Err(BodyError::new(
                "an array of arrays, which has no Protobuf form here",
            ));
        }
    })
}

/// `confluent.type.Decimal` of big-endian two's-complement `unscaled` and
/// `scale`: `value` 1 (the bytes), `precision` 2 (the unscaled value's
/// digits, as Java's `BigDecimal.precision()`), `scale` 3.
fn decimal_message(unscaled: &[u8], scale: u32) -> Vec<u8> {
    let mut digits = Vec::new();
    decimal_text(unscaled, 0, &mut digits);
    let precision = digits.iter().filter(|c| c.is_ascii_digit()).count().max(1);
    let mut out = Vec::with_capacity(unscaled.len() + 8);
    if !unscaled.is_empty() {
        put_len(&mut out, 1, unscaled);
    }
    put_tag(&mut out, 2, 0);
    put_varint(&mut out, precision as u64);
    if scale != 0 {
        put_tag(&mut out, 3, 0);
        put_varint(&mut out, u64::from(scale));
    }
    out
}

#[cfg(test)]
mod tests;
