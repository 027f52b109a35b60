//! The bodies of `avro` / `json_schema` records (`protobuf`'s are in the
//! sibling `protobuf`, on this parser): JSON the JSON path wrote
//! (`debezium.rs`: a key, an envelope, or one value of it, parsed once)
//! re-encoded under its Connect schema — Avro's binary encoding, or the
//! same JSON with `Decimal`s as numbers (Confluent's `JsonSchemaConverter`
//! with `decimal.format=NUMERIC`: a JSON Schema number cannot hold base64).
//! This is the definition of those bodies: the table router writes the
//! common Avro values straight from the cells (`table/encode/avro.rs`), and
//! its tests hold it to these bytes.
//!
//! Invariants: the values are the JSON path's, never re-derived from the
//! row; a value that does not fit its schema is a [`BodyError`] naming its
//! field, never a panic or a guess.

use super::{Schema, Type};

/// A value that does not fit its schema, by its field path
/// (`after.amount`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BodyError {
    pub path: String,
    pub reason: &'static str,
}

impl BodyError {
    pub(super) fn new(reason: &'static str) -> BodyError {
        BodyError {
            path: String::new(),
            reason,
        }
    }

    pub(super) fn at(mut self, field: &str) -> BodyError {
        self.path = if self.path.is_empty() {
            field.to_owned()
        } else {
            format!("{field}.{}", self.path)
        };
        self
    }
}

/// Avro's `long` (and `int`): zigzag, then base-128 groups, low first.
pub(crate) fn put_long(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// A pull parser over the JSON the JSON path wrote (`debezium.rs`,
/// `event.rs`): values are read in the order the schema lists them, which is
/// the order that writer puts them in; anything else is a [`BodyError`].
/// No allocation but for strings with escapes.
pub(super) struct Parser<'a> {
    pub(super) b: &'a [u8],
    pub(super) at: usize,
}

impl<'a> Parser<'a> {
    pub(super) fn peek(&mut self) -> Option<u8> {
        while let Some(c) = self.b.get(self.at).copied() {
            if !c.is_ascii_whitespace() {
                return Some(c);
            }
            self.at += 1;
        }
        None
    }

    pub(super) fn expect(&mut self, c: u8) -> Result<(), BodyError> {
        if self.peek() == Some(c) {
            self.at += 1;
            Ok(())
        } else {
            Err(BodyError::new("not the JSON the event writer makes"))
        }
    }

    /// Consumes `word` if it is next.
    pub(super) fn word(&mut self, word: &[u8]) -> bool {
        self.peek();
        if self.b[self.at.min(self.b.len())..].starts_with(word) {
            self.at += word.len();
            true
        } else {
            false
        }
    }

    pub(super) fn null(&mut self) -> bool {
        self.word(b"null")
    }

    /// A string's span, quotes included, and whether it has escapes.
    pub(super) fn string_span(&mut self) -> Result<(&'a [u8], bool), BodyError> {
        if self.peek() != Some(b'"') {
            return Err(BodyError::new("not a string"));
        }
        let start = self.at;
        let mut i = self.at + 1;
        let mut escaped = false;
        while let Some(found) = self
            .b
            .get(i..)
            .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
        {
            i += found;
            if self.b[i] == b'"' {
                self.at = i + 1;
                return Ok((&self.b[start..=i], escaped));
            }
            escaped = true;
            i += 2;
        }
        Err(BodyError::new("an unterminated string"))
    }

    /// A string's content: borrowed, or unescaped when it has escapes.
    pub(super) fn string(&mut self) -> Result<std::borrow::Cow<'a, str>, BodyError> {
        let (span, escaped) = self.string_span()?;
        if escaped {
            serde_json::from_slice::<String>(span)
                .map(std::borrow::Cow::Owned)
                .map_err(|_| BodyError::new("not a valid string"))
        } else {
            std::str::from_utf8(&span[1..span.len() - 1])
                .map(std::borrow::Cow::Borrowed)
                .map_err(|_| BodyError::new("not UTF-8"))
        }
    }

    /// An Avro `string`: its length and bytes, unescaped. The JSON path
    /// writes strings from Rust `&str`s, so their bytes are UTF-8; one with
    /// escapes is unescaped (and checked) by serde_json.
    fn avro_string(&mut self, out: &mut Vec<u8>) -> Result<(), BodyError> {
        let (span, escaped) = self.string_span()?;
        if escaped {
            let s = serde_json::from_slice::<String>(span)
                .map_err(|_| BodyError::new("not a valid string"))?;
            put_str(out, s.as_bytes());
        } else {
            put_str(out, &span[1..span.len() - 1]);
        }
        Ok(())
    }

    pub(super) fn number(&mut self) -> Result<&'a str, BodyError> {
        self.peek();
        let start = self.at;
        while let Some(c) = self.b.get(self.at)
            && (c.is_ascii_digit() || matches!(c, b'-' | b'+' | b'.' | b'e' | b'E'))
        {
            self.at += 1;
        }
        match std::str::from_utf8(&self.b[start..self.at]) {
            Ok(s) if !s.is_empty() => Ok(s),
            _ => Err(BodyError::new("not a number")),
        }
    }

    /// Skips one value, returning its span.
    pub(super) fn skip(&mut self) -> Result<&'a [u8], BodyError> {
        let start = {
            self.peek();
            self.at
        };
        match self.peek() {
            Some(b'"') => {
                self.string_span()?;
            }
            Some(b'{' | b'[') => {
                let mut depth = 0usize;
                loop {
                    match self.peek() {
                        Some(b'"') => {
                            self.string_span()?;
                            continue;
                        }
                        Some(b'{' | b'[') => depth += 1,
                        Some(b'}' | b']') => depth -= 1,
                        Some(_) => {}
                        None => return Err(BodyError::new("an unterminated value")),
                    }
                    self.at += 1;
                    if depth == 0 {
                        break;
                    }
                }
            }
            Some(b't') if self.word(b"true") => {}
            Some(b'f') if self.word(b"false") => {}
            Some(b'n') if self.null() => {}
            Some(_) => {
                self.number()?;
            }
            None => return Err(BodyError::new("a value is missing")),
        }
        Ok(&self.b[start..self.at])
    }

    /// The next field of an object: its key (after `{` or `,`), or `None`
    /// at the object's end.
    pub(super) fn next_key(
        &mut self,
        first: bool,
    ) -> Result<Option<std::borrow::Cow<'a, str>>, BodyError> {
        match self.peek() {
            Some(b'}') => {
                self.at += 1;
                return Ok(None);
            }
            Some(b',') if !first => self.at += 1,
            _ if first => {}
            _ => return Err(BodyError::new("not the JSON the event writer makes")),
        }
        let key = self.string()?;
        self.expect(b':')?;
        Ok(Some(key))
    }
}

/// Appends the JSON `json` (the JSON path's key or envelope) under
/// `schema` in Avro's binary encoding.
pub(crate) fn avro_from_json(
    schema: &Schema,
    json: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), BodyError> {
    let mut p = Parser { b: json, at: 0 };
    avro_value(schema, &mut p, out)?;
    match p.peek() {
        None => Ok(()),
        Some(_) => Err(BodyError::new("more JSON than one value")),
    }
}

/// Avro's `string`: its length, then its bytes.
pub(crate) fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_long(out, s.len() as i64);
    out.extend_from_slice(s);
}

/// Writes the union branch of a value of `schema` that is (`null`) or is
/// not null, where `schema` is optional; `Ok(false)`: the value is null and
/// nothing follows. A null where `schema` is required is an error.
pub(crate) fn avro_union(
    schema: &Schema,
    null: bool,
    out: &mut Vec<u8>,
) -> Result<bool, BodyError> {
    if schema.optional {
        // The null branch is first, unless a default value put its own
        // branch first (`source.snapshot`).
        let null_branch = i64::from(schema.default.is_some());
        put_long(out, if null { null_branch } else { 1 - null_branch });
    } else if null {
        return Err(BodyError::new(
            "null in a field that is not optional (a key or replica identity column)",
        ));
    }
    Ok(!null)
}

fn avro_value(schema: &Schema, p: &mut Parser<'_>, out: &mut Vec<u8>) -> Result<(), BodyError> {
    if !avro_union(schema, p.null(), out)? {
        return Ok(());
    }
    match &schema.ty {
        Type::Int16 | Type::Int32 | Type::Int64 => {
            let n: i64 = p
                .number()?
                .parse()
                .map_err(|_| BodyError::new("not an integer"))?;
            put_long(out, n);
        }
        Type::Float32 => out.extend_from_slice(&(float(p)? as f32).to_le_bytes()),
        Type::Float64 => out.extend_from_slice(&float(p)?.to_le_bytes()),
        Type::Boolean => {
            let b = if p.word(b"true") {
                true
            } else if p.word(b"false") {
                false
            } else {
                return Err(BodyError::new("not a boolean"));
            };
            out.push(u8::from(b));
        }
        Type::String => p.avro_string(out)?,
        Type::Bytes => {
            // Base64 has no escapes.
            let (span, _) = p.string_span()?;
            let text = &span[1..span.len() - 1];
            let len = decoded_len(text).ok_or_else(|| BodyError::new("not base64"))?;
            put_long(out, len as i64);
            base64_decode(text, out).ok_or_else(|| BodyError::new("not base64"))?;
        }
        Type::Array(item) => {
            p.expect(b'[')?;
            // Items first (their count goes before them).
            let mut items = Vec::new();
            let mut count = 0i64;
            if p.peek() == Some(b']') {
                p.at += 1;
            } else {
                loop {
                    avro_value(item, p, &mut items).map_err(|e| e.at(&format!("[{count}]")))?;
                    count += 1;
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
            if count > 0 {
                put_long(out, count);
                out.extend_from_slice(&items);
            }
            put_long(out, 0);
        }
        Type::Struct(fields) => {
            p.expect(b'{')?;
            let mut first = true;
            let mut ended = false;
            for f in fields {
                // Fields in the schema's order; one the JSON ends before is null.
                let key = if ended { None } else { p.next_key(first)? };
                first = false;
                match key {
                    Some(k) if k == f.key.as_str() => {
                        avro_value(&f.schema, p, out).map_err(|e| e.at(&f.key))?;
                    }
                    Some(_) => {
                        return Err(BodyError::new("a field out of the schema's order").at(&f.key));
                    }
                    None => {
                        ended = true;
                        let mut null = Parser { b: b"null", at: 0 };
                        avro_value(&f.schema, &mut null, out).map_err(|e| e.at(&f.key))?;
                    }
                }
            }
            if !ended && p.next_key(first)?.is_some() {
                return Err(BodyError::new("a field the schema does not have"));
            }
        }
    }
    Ok(())
}

/// A float as the JSON path writes it: a number, or Jackson's `"NaN"`,
/// `"Infinity"`, `"-Infinity"`.
pub(super) fn float(p: &mut Parser<'_>) -> Result<f64, BodyError> {
    if p.peek() == Some(b'"') {
        return match &*p.string()? {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            _ => Err(BodyError::new("not a number")),
        };
    }
    p.number()?
        .parse()
        .map_err(|_| BodyError::new("not a number"))
}

/// Appends `json` (the JSON path's envelope or key) under `schema` as
/// JSON: the same bytes, but `Decimal`s (base64 of the unscaled value
/// there) as numbers.
pub(crate) fn json_from_json(
    schema: &Schema,
    json: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), BodyError> {
    let mut p = Parser { b: json, at: 0 };
    json_value(schema, &mut p, out)?;
    match p.peek() {
        None => Ok(()),
        Some(_) => Err(BodyError::new("more JSON than one value")),
    }
}

fn json_value(schema: &Schema, p: &mut Parser<'_>, out: &mut Vec<u8>) -> Result<(), BodyError> {
    if p.null() {
        out.extend_from_slice(b"null");
        return Ok(());
    }
    if !schema.has_decimal() {
        out.extend_from_slice(p.skip()?);
        return Ok(());
    }
    match &schema.ty {
        Type::Bytes => {
            let scale = schema.decimal.map_or(0, |(_, s)| s);
            let b64 = p.string()?;
            let mut unscaled = Vec::with_capacity(b64.len());
            base64_decode(b64.as_bytes(), &mut unscaled)
                .ok_or_else(|| BodyError::new("a decimal that is not base64"))?;
            decimal_text(&unscaled, scale, out);
        }
        Type::Array(item) => {
            p.expect(b'[')?;
            out.push(b'[');
            let mut i = 0usize;
            if p.peek() == Some(b']') {
                p.at += 1;
            } else {
                loop {
                    json_value(item, p, out).map_err(|e| e.at(&format!("[{i}]")))?;
                    i += 1;
                    match p.peek() {
                        Some(b',') => {
                            p.at += 1;
                            out.push(b',');
                        }
                        Some(b']') => {
                            p.at += 1;
                            break;
                        }
                        _ => return Err(BodyError::new("an unterminated array")),
                    }
                }
            }
            out.push(b']');
        }
        Type::Struct(fields) => {
            p.expect(b'{')?;
            out.push(b'{');
            let mut first = true;
            while let Some(key) = p.next_key(first)? {
                if !first {
                    out.push(b',');
                }
                first = false;
                let _ = serde_json::to_writer(&mut *out, &*key);
                out.push(b':');
                match fields.iter().find(|f| f.key == *key) {
                    Some(f) => json_value(&f.schema, p, out).map_err(|e| e.at(&f.key))?,
                    None => out.extend_from_slice(p.skip()?),
                }
            }
            out.push(b'}');
        }
        _ => out.extend_from_slice(p.skip()?),
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
pub(super) fn decoded_len(text: &[u8]) -> Option<usize> {
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
