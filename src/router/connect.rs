//! Kafka Connect's converter forms of an outbox record (`[[outbox]]
//! key_converter`, `value_converter`, `converter`): the key and value bytes
//! Debezium's Outbox Event Router writes through `JsonConverter`, with
//! `schemas.enable=false` (`json`) or its default `true`
//! (`json_with_schema`), each also with `table.expand.json.payload`
//! (`connect::expand`). `string` (`StringConverter`, the column's bytes) never
//! reaches this module. tests/it/debezium_compat/outbox.rs compares every
//! form with Debezium's record by record, bytes for bytes.
//!
//! Invariants:
//! - **Jackson's bytes.** Strings as Jackson writes them (`jackson_str`:
//!   `"` and `\` escaped, `\b \t \n \f \r`, other control characters as
//!   `\u00XX` upper-case, every character outside the BMP as its two UTF-16
//!   halves `\uD83D\uDE00`, everything else as UTF-8); no whitespace.
//! - **The key is the aggregate id as Debezium types it**: a JSON string
//!   for text, varchar, char, name and uuid columns, a number for
//!   int2/int4/int8; with schemas `{"schema":{"type":"string",
//!   "optional":false},"payload":…}` (`int16`/`int32`/`int64`; a uuid
//!   names `io.debezium.data.Uuid`). A key of another type is refused by
//!   the start's table check, and per row (Debezium's form of it is not
//!   written here).
//! - **The value is the payload as Debezium types it**: json/jsonb a JSON
//!   string of its text (with schemas: `io.debezium.data.Json`, version 1),
//!   text/varchar/char a JSON string, bytea base64 in a JSON string (Connect
//!   `bytes`), NULL the four bytes `null` (with schemas: `"payload":null`);
//!   a payload of another type is refused per row.
//! - **Schemas as Debezium's documented outbox table declares them**: the
//!   aggregate id `NOT NULL` (`"optional":false`), the payload nullable
//!   (`"optional":true`) — pgoutput does not carry nullability; the start's
//!   table check (`startup::converter_problem`) refuses other tables.
//! - **Tombstones as `route.tombstone.on.empty.payload`**: with
//!   `tombstone_on_empty_payload` a NULL payload, and a text payload that
//!   is empty after Java's `trim()`, is a tombstone (no value).
//! - **Stable.** Bytes depend on the row only.

use bytes::Bytes;

use super::debezium::{base64, push_int};
use super::{BYTEA_OID, Bound, RouteError};
use crate::Lsn;
use crate::config::{Converter, OutboxConfig};
use crate::pgoutput::{Cell, Oid, Relation, TupleData};

pub(crate) mod expand;

const JSON_OID: Oid = 114;
const JSONB_OID: Oid = 3802;

/// The aggregate id's Debezium type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyType {
    /// text, varchar, bpchar, name: Connect `string`.
    String,
    /// uuid: `string` named `io.debezium.data.Uuid`.
    Uuid,
    /// int2/int4/int8: `int16`/`int32`/`int64`.
    Int(&'static str),
    /// Any other type: refused per row.
    Other(Oid),
}

impl KeyType {
    fn of(oid: Oid) -> KeyType {
        match oid {
            25 | 1043 | 1042 | 19 => KeyType::String,
            2950 => KeyType::Uuid,
            21 => KeyType::Int("int16"),
            23 => KeyType::Int("int32"),
            20 => KeyType::Int("int64"),
            other => KeyType::Other(other),
        }
    }

    fn schema(self) -> &'static str {
        match self {
            KeyType::String | KeyType::Other(_) => r#"{"type":"string","optional":false}"#,
            KeyType::Uuid => {
                r#"{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1}"#
            }
            KeyType::Int("int16") => r#"{"type":"int16","optional":false}"#,
            KeyType::Int("int32") => r#"{"type":"int32","optional":false}"#,
            KeyType::Int(_) => r#"{"type":"int64","optional":false}"#,
        }
    }
}

/// The payload's Debezium type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PayloadType {
    /// json/jsonb: `string` named `io.debezium.data.Json`.
    Json,
    /// text, varchar, bpchar: `string`.
    Text,
    /// bytea: `bytes`, base64 in JSON.
    Bytes,
    Other(Oid),
}

impl PayloadType {
    fn of(oid: Oid) -> PayloadType {
        match oid {
            JSON_OID | JSONB_OID => PayloadType::Json,
            25 | 1043 | 1042 => PayloadType::Text,
            BYTEA_OID => PayloadType::Bytes,
            other => PayloadType::Other(other),
        }
    }

    fn schema(self) -> &'static str {
        match self {
            PayloadType::Json => {
                r#"{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}"#
            }
            PayloadType::Text | PayloadType::Other(_) => r#"{"type":"string","optional":true}"#,
            PayloadType::Bytes => r#"{"type":"bytes","optional":true}"#,
        }
    }
}

/// A route's key and value forms, bound to a relation; `None` from
/// [`Forms::bind`] when both are `string` (one test per record).
#[derive(Debug)]
pub(super) struct Forms {
    key: Converter,
    key_type: KeyType,
    value: Converter,
    payload_type: PayloadType,
    /// `expand_json_payload` with a `json` or `json_with_schema` value.
    expand: bool,
    /// The payload column's name (an expanded schema's name).
    payload_column: String,
    tombstones: bool,
}

/// Why a key or value cannot be written in the configured form.
#[derive(Debug)]
pub(super) struct FormError {
    pub reason: String,
    pub fix: &'static str,
}

const TYPE_FIX: &str = "set key_converter/value_converter = \"string\" for this [[outbox]], or \
                        change the column's type (docs/compatibility.md, \"Outbox records\")";

impl Forms {
    /// The forms of `config` for `rel`'s key column `key` and payload
    /// column `payload`; `None` when both are `string`. An envelope's value
    /// is the envelope's (`value` is then left as it is).
    pub(super) fn bind(
        config: &OutboxConfig,
        rel: &Relation,
        key: usize,
        payload: usize,
    ) -> Option<Forms> {
        let envelope = !config.envelope_columns.is_empty();
        let value = if envelope {
            Converter::String
        } else {
            config.value_form()
        };
        if config.key_form() == Converter::String && value == Converter::String {
            return None;
        }
        let oid = |i: usize| rel.columns.get(i).map_or(0, |c| c.type_oid);
        Some(Forms {
            key: config.key_form(),
            key_type: KeyType::of(oid(key)),
            value,
            payload_type: PayloadType::of(oid(payload)),
            expand: value != Converter::String && config.expand_json_payload == Some(true),
            payload_column: config.payload_column.clone(),
            tombstones: config.tombstone_on_empty_payload,
        })
    }

    /// Whether the value is written here (else it is the payload's bytes
    /// or the envelope).
    pub(super) fn writes_value(&self) -> bool {
        self.value != Converter::String
    }

    /// The value of `row` for `bound`'s payload column: `Ok(None)` is a
    /// tombstone.
    pub(super) fn record_value(
        &self,
        bound: &Bound,
        row: &TupleData,
        lsn: Lsn,
    ) -> Result<Option<Bytes>, RouteError> {
        let column = &bound.route.config.payload_column;
        let payload = match row.get(bound.payload) {
            Some(Cell::Text(b) | Cell::Binary(b)) => Some(b),
            Some(Cell::Null) => None,
            Some(Cell::UnchangedToast) | None => {
                return Err(bound.err(
                    column,
                    lsn,
                    "the payload was not sent",
                    "report it as a bug",
                ));
            }
        };
        self.value(payload)
            .map_err(|e| bound.form_err(column, lsn, e))
    }

    /// The key for the aggregate id's text `id`.
    pub(super) fn key(&self, id: Bytes) -> Result<Bytes, FormError> {
        if self.key == Converter::String {
            return Ok(id);
        }
        let text = std::str::from_utf8(&id).map_err(|_| FormError {
            reason: "the aggregate id is not UTF-8".to_owned(),
            fix: TYPE_FIX,
        })?;
        let mut out = Vec::with_capacity(id.len() + 80);
        let schema = self.key == Converter::JsonWithSchema;
        if schema {
            out.extend_from_slice(b"{\"schema\":");
            out.extend_from_slice(self.key_type.schema().as_bytes());
            out.extend_from_slice(b",\"payload\":");
        }
        match self.key_type {
            KeyType::String | KeyType::Uuid => jackson_str(&mut out, text),
            KeyType::Int(_) => out.extend_from_slice(text.as_bytes()),
            KeyType::Other(oid) => {
                return Err(FormError {
                    reason: format!(
                        "key_converter = {:?} writes text, uuid and integer aggregate ids as \
                         Debezium does; this column's type (oid {oid}) is not one of them",
                        self.key.as_str()
                    ),
                    fix: TYPE_FIX,
                });
            }
        }
        if schema {
            out.push(b'}');
        }
        Ok(Bytes::from(out))
    }

    /// The value for the payload cell (`None`: NULL): `Ok(None)` is a
    /// tombstone.
    pub(super) fn value(&self, payload: Option<&Bytes>) -> Result<Option<Bytes>, FormError> {
        let text_like = matches!(self.payload_type, PayloadType::Json | PayloadType::Text);
        if self.tombstones && payload.is_none_or(|p| text_like && p.iter().all(|b| *b <= b' ')) {
            return Ok(None);
        }
        let schema = self.value == Converter::JsonWithSchema;
        let mut out = Vec::with_capacity(payload.map_or(0, |p| p.len() + p.len() / 8) + 96);
        // Expanded, the envelope's schema is the payload's (written there).
        let expanding = self.expand && text_like && payload.is_some();
        if schema && !expanding {
            out.extend_from_slice(b"{\"schema\":");
            out.extend_from_slice(self.payload_type.schema().as_bytes());
            out.extend_from_slice(b",\"payload\":");
        }
        match payload {
            None => out.extend_from_slice(b"null"),
            Some(p) => match self.payload_type {
                PayloadType::Json | PayloadType::Text => {
                    let text = std::str::from_utf8(p).map_err(|_| FormError {
                        reason: format!(
                            "the payload ({} bytes) is not UTF-8 (row values are not logged)",
                            p.len()
                        ),
                        fix: TYPE_FIX,
                    })?;
                    if self.expand {
                        let with_schema = schema.then_some(expand::WithSchema {
                            column_schema: self.payload_type.schema(),
                            column: &self.payload_column,
                        });
                        expand::expand(&mut out, text, with_schema).map_err(|reason| {
                            FormError {
                                reason,
                                fix: "the slot does not advance past this row: skip its \
                                  transaction or set expand_json_payload = false \
                                  (docs/operations.md, \"A row cannot be routed\"); Debezium \
                                  stops on this row too",
                            }
                        })?;
                    } else {
                        jackson_str(&mut out, text);
                    }
                }
                PayloadType::Bytes => {
                    let bytes = super::decode_bytea_hex(p).ok_or_else(|| FormError {
                        reason: "the bytea value is not in hex format".to_owned(),
                        fix: "walrelay sets bytea_output = 'hex' on its connections; report \
                              this as a bug",
                    })?;
                    out.push(b'"');
                    base64(&mut out, &bytes);
                    out.push(b'"');
                }
                PayloadType::Other(oid) => {
                    return Err(FormError {
                        reason: format!(
                            "value_converter = {:?} writes json, jsonb, text and bytea \
                             payloads as Debezium does; this column's type (oid {oid}) is not \
                             one of them",
                            self.value.as_str()
                        ),
                        fix: TYPE_FIX,
                    });
                }
            },
        }
        if schema && !expanding {
            out.push(b'}');
        }
        Ok(Some(Bytes::from(out)))
    }
}

/// Rewrites the JSON text `out[start..]`, written with serde_json's string
/// escapes, into Jackson's: `\u00xx` upper-case, a character outside the
/// BMP as its two UTF-16 escapes. Other bytes are the same in both.
pub(crate) fn serde_to_jackson(out: &mut Vec<u8>, start: usize) {
    let needs = out[start..].iter().any(|&b| b == b'\\' || b >= 0xF0);
    if !needs {
        return;
    }
    let tail = out.split_off(start);
    let mut i = 0;
    while i < tail.len() {
        let b = tail[i];
        if b == b'\\' {
            out.push(b);
            if tail.get(i + 1) == Some(&b'u') {
                out.push(b'u');
                out.extend(
                    tail[i + 2..(i + 6).min(tail.len())]
                        .iter()
                        .map(u8::to_ascii_uppercase),
                );
                i += 6;
            } else {
                out.extend(tail.get(i + 1));
                i += 2;
            }
        } else if b >= 0xF0 {
            match std::str::from_utf8(&tail[i..(i + 4).min(tail.len())]) {
                Ok(c) => {
                    let mut units = [0u16; 2];
                    for ch in c.chars() {
                        for unit in ch.encode_utf16(&mut units) {
                            out.extend_from_slice(format!("\\u{unit:04X}").as_bytes());
                        }
                    }
                    i += 4;
                }
                Err(_) => {
                    out.push(b);
                    i += 1;
                }
            }
        } else {
            out.push(b);
            i += 1;
        }
    }
}

/// `s` as a JSON string, as Jackson writes it (module doc).
pub(crate) fn jackson_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.reserve(s.len() + 2);
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut run = 0;
    for (i, c) in s.char_indices() {
        let cp = u32::from(c);
        let escape: Option<&[u8]> = match c {
            '"' => Some(b"\\\""),
            '\\' => Some(b"\\\\"),
            '\u{8}' => Some(b"\\b"),
            '\t' => Some(b"\\t"),
            '\n' => Some(b"\\n"),
            '\u{c}' => Some(b"\\f"),
            '\r' => Some(b"\\r"),
            _ if !(0x20..=0xFFFF).contains(&cp) => Some(b""),
            _ => None,
        };
        let Some(escape) = escape else { continue };
        out.extend_from_slice(&bytes[run..i]);
        run = i + c.len_utf8();
        if !escape.is_empty() {
            out.extend_from_slice(escape);
            continue;
        }
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            out.extend_from_slice(b"\\u");
            for shift in [12, 8, 4, 0] {
                out.push(HEX[usize::from((*unit >> shift) & 0xF)]);
            }
        }
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests;
