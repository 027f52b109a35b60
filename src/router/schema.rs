//! Outbox records for a schema registry (`[[outbox]] format = "avro" |
//! "json_schema" | "protobuf"`): the key and value schemas Debezium's outbox event router
//! gets under Confluent's `AvroConverter` / `JsonSchemaConverter`, and the
//! bodies of a row's key and value under them. Pure: the schema ids, and so
//! the Confluent wire format's 5-byte prefix, are added by
//! `sink::registry`, which talks to the registry.
//!
//! Invariants:
//! - **Schemas follow the column types, decided once per relation.** Key =
//!   the aggregate id column's Connect schema (Debezium's
//!   `EventRouter` keys records by that field, with its schema): text types
//!   `string`, `uuid` the `io.debezium.data.Uuid` string, `smallint`/
//!   `integer`/`bigint` Avro `int`/`int`/`long`. Value = the payload
//!   column's, optional as a nullable column's is: `jsonb`/`json` the
//!   `io.debezium.data.Json` string (its text, not re-encoded), `bytea`
//!   `bytes`, anything else `string` (its text form). Named Connect types
//!   carry Confluent's `connect.name`/`connect.version` parameters (Avro) or
//!   `title`/`connect.version` (JSON Schema). A JSON Schema names its draft
//!   (`"$schema"`, draft 7, which Confluent's converter writes by default):
//!   Apicurio refuses a JSON schema without it.
//! - **Protobuf wraps them**: a Protobuf schema's root is a message, so the
//!   key is `walrelay.outbox.Key { <type> value = 1; }` and the value
//!   `walrelay.outbox.Value { optional <type> value = 1; }`, the field's type
//!   and Connect parameters as above (the texts `table::schemas::protobuf`
//!   makes of those Connect schemas; a test there checks).
//! - **The same row gives the same bytes.** A schema's text is built once
//!   and is byte-for-byte the same at every start, so a re-sent record
//!   finds the same subject version and id.
//! - **A NULL payload stays a tombstone** (no schema id): Confluent's
//!   converters write a null value as a Kafka null, whatever the schema.
//! - No I/O, no clock.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use super::{Record, RouteError};
use crate::Lsn;
use crate::config::OutboxFormat;
use crate::pgoutput::{Oid, Relation};

/// What kind of schema a registry holds (its `schemaType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaKind {
    /// `AVRO` (the registry's default type: sent without `schemaType`).
    Avro,
    /// `JSON` (JSON Schema).
    Json,
    /// `PROTOBUF`: a proto3 file, the record's message first in it.
    Protobuf,
}

impl SchemaKind {
    /// The registry's `schemaType` (`AVRO` is the default, left out of
    /// registrations).
    pub fn schema_type(self) -> &'static str {
        match self {
            SchemaKind::Avro => "AVRO",
            SchemaKind::Json => "JSON",
            SchemaKind::Protobuf => "PROTOBUF",
        }
    }
}

/// One schema as registered: its kind, its text and, for a record, its
/// full name (what the record-name subject strategies name subjects by).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Schema {
    pub kind: SchemaKind,
    /// The schema's JSON text, exactly as registered and cached.
    pub text: Arc<str>,
    /// The record's full name (`<prefix>.<schema>.<table>.Envelope`);
    /// `None` for a schema that is no record (the outbox's).
    pub name: Option<Arc<str>>,
    /// A hash of `text`, computed once ([`Schema::new`]): what the sink's id
    /// cache looks a schema up by, rather than hashing its text per record.
    pub fingerprint: u64,
}

impl Schema {
    /// A schema of `kind` with `text` (and record `name`).
    pub fn new(kind: SchemaKind, text: Arc<str>, name: Option<Arc<str>>) -> Schema {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut h);
        Schema {
            kind,
            text,
            name,
            fingerprint: h.finish(),
        }
    }
}

/// The schemas of a record's key and value: the record's key and value
/// bytes are bodies under them, still without the wire format's prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSchemas {
    /// `None`: the records have no key (a table without one).
    pub key: Option<Schema>,
    pub value: Schema,
    /// Table events: what the DDL that made these schemas changed (`column
    /// amount: int4 → text`), for the error when a registry refuses them.
    pub change: Option<Arc<str>>,
}

/// PostgreSQL type oids that map to other schemas than `string`.
mod oid {
    use crate::pgoutput::Oid;
    pub const BYTEA: Oid = 17;
    pub const INT8: Oid = 20;
    pub const INT2: Oid = 21;
    pub const INT4: Oid = 23;
    pub const JSON: Oid = 114;
    pub const JSONB: Oid = 3802;
    pub const UUID: Oid = 2950;
}

/// How a key column's text becomes its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyBody {
    Text,
    /// An integer column (Avro int or long: the same zigzag varint).
    Integer,
}

/// How a payload becomes its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueBody {
    Text,
    Bytes,
}

/// One route's encoding, bound to its relation's column types.
#[derive(Debug)]
pub(crate) struct Encoding {
    kind: SchemaKind,
    schemas: Arc<RecordSchemas>,
    key: KeyBody,
    value: ValueBody,
}

/// A key whose text is not what its column type promises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadKey;

impl Encoding {
    /// The encoding of a route whose aggregate id column has type
    /// `key_type` and whose payload column has type `payload_type`.
    pub(crate) fn bind(kind: SchemaKind, key_type: Oid, payload_type: Oid) -> Encoding {
        let (key_schema, key) = key_schema(kind, key_type);
        let (value_schema, value) = value_schema(kind, payload_type);
        Encoding {
            kind,
            schemas: Arc::new(RecordSchemas {
                key: Some(Schema::new(kind, Arc::from(key_schema), None)),
                value: Schema::new(kind, Arc::from(value_schema), None),
                change: None,
            }),
            key,
            value,
        }
    }

    /// The encoding of a route of `format` on `rel` (aggregate id and
    /// payload at those column indices), `None` for the JSON formats.
    pub(crate) fn for_route(
        format: OutboxFormat,
        rel: &Relation,
        aggregate_id: usize,
        payload: usize,
    ) -> Option<Box<Encoding>> {
        let kind = match format {
            OutboxFormat::Avro => SchemaKind::Avro,
            OutboxFormat::JsonSchema => SchemaKind::Json,
            OutboxFormat::Protobuf => SchemaKind::Protobuf,
            OutboxFormat::Raw | OutboxFormat::CloudEvents => return None,
        };
        let column_type = |idx: usize| rel.columns.get(idx).map_or(0, |col| col.type_oid);
        Some(Box::new(Encoding::bind(
            kind,
            column_type(aggregate_id),
            column_type(payload),
        )))
    }

    /// The schemas every record of this route carries.
    pub(crate) fn schemas(&self) -> &Arc<RecordSchemas> {
        &self.schemas
    }

    /// The key body of aggregate id `text`.
    pub(crate) fn key(&self, text: &[u8]) -> Result<Bytes, BadKey> {
        match (self.kind, self.key) {
            (SchemaKind::Avro, KeyBody::Text) => Ok(avro_bytes(None, text)),
            (SchemaKind::Avro, KeyBody::Integer) => {
                let n = parse_integer(text).ok_or(BadKey)?;
                let mut out = BytesMut::with_capacity(10);
                put_long(&mut out, n);
                Ok(out.freeze())
            }
            (SchemaKind::Json, KeyBody::Text) => json_string(text).ok_or(BadKey),
            (SchemaKind::Json, KeyBody::Integer) => {
                parse_integer(text).ok_or(BadKey)?;
                Ok(Bytes::copy_from_slice(text))
            }
            // Field 1 of message `Key`, left out at its default ("", 0)
            // as proto3 writes it.
            (SchemaKind::Protobuf, KeyBody::Text) => {
                std::str::from_utf8(text).map_err(|_| BadKey)?;
                Ok(if text.is_empty() {
                    Bytes::new()
                } else {
                    protobuf_field(text)
                })
            }
            (SchemaKind::Protobuf, KeyBody::Integer) => {
                let n = parse_integer(text).ok_or(BadKey)?;
                let mut out = BytesMut::with_capacity(11);
                if n != 0 {
                    out.put_u8(0x08);
                    put_varint(&mut out, n as u64);
                }
                Ok(out.freeze())
            }
        }
    }

    /// The value body of a (non-NULL) payload: its text, or a bytea
    /// payload's decoded bytes; `None` when a text payload is not UTF-8.
    pub(crate) fn value(&self, payload: &[u8]) -> Option<Bytes> {
        match (self.kind, self.value) {
            // Union branch 1 (the branch after "null").
            (SchemaKind::Avro, ValueBody::Text) => {
                std::str::from_utf8(payload).ok()?;
                Some(avro_bytes(Some(1), payload))
            }
            (SchemaKind::Avro, ValueBody::Bytes) => Some(avro_bytes(Some(1), payload)),
            (SchemaKind::Json, ValueBody::Text) => json_string(payload),
            // Field 1 of message `Value` (`optional`: written even when
            // empty).
            (SchemaKind::Protobuf, ValueBody::Text) => {
                std::str::from_utf8(payload).ok()?;
                Some(protobuf_field(payload))
            }
            (SchemaKind::Protobuf, ValueBody::Bytes) => Some(protobuf_field(payload)),
            (SchemaKind::Json, ValueBody::Bytes) => {
                let mut out = Vec::with_capacity(payload.len().div_ceil(3) * 4 + 2);
                out.push(b'"');
                base64_into(payload, &mut out);
                out.push(b'"');
                Some(Bytes::from(out))
            }
        }
    }
}

/// The key schema of a column of type `oid`, and how its text is encoded.
fn key_schema(kind: SchemaKind, oid: Oid) -> (&'static str, KeyBody) {
    match (kind, oid) {
        (SchemaKind::Avro, oid::INT2) => {
            (r#"{"type":"int","connect.type":"int16"}"#, KeyBody::Integer)
        }
        (SchemaKind::Avro, oid::INT4) => (r#""int""#, KeyBody::Integer),
        (SchemaKind::Avro, oid::INT8) => (r#""long""#, KeyBody::Integer),
        (SchemaKind::Avro, oid::UUID) => (
            r#"{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Uuid"}"#,
            KeyBody::Text,
        ),
        (SchemaKind::Avro, _) => (r#""string""#, KeyBody::Text),
        (SchemaKind::Json, oid::INT2) => (
            r#"{"$schema":"http://json-schema.org/draft-07/schema#","type":"integer","connect.type":"int16"}"#,
            KeyBody::Integer,
        ),
        (SchemaKind::Json, oid::INT4) => (
            r#"{"$schema":"http://json-schema.org/draft-07/schema#","type":"integer","connect.type":"int32"}"#,
            KeyBody::Integer,
        ),
        (SchemaKind::Json, oid::INT8) => (
            r#"{"$schema":"http://json-schema.org/draft-07/schema#","type":"integer","connect.type":"int64"}"#,
            KeyBody::Integer,
        ),
        (SchemaKind::Json, oid::UUID) => (
            r#"{"$schema":"http://json-schema.org/draft-07/schema#","type":"string","title":"io.debezium.data.Uuid","connect.version":1}"#,
            KeyBody::Text,
        ),
        (SchemaKind::Json, _) => (
            r#"{"$schema":"http://json-schema.org/draft-07/schema#","type":"string"}"#,
            KeyBody::Text,
        ),
        (SchemaKind::Protobuf, oid::INT2) => (PROTO_KEY_INT16, KeyBody::Integer),
        (SchemaKind::Protobuf, oid::INT4) => (PROTO_KEY_INT32, KeyBody::Integer),
        (SchemaKind::Protobuf, oid::INT8) => (PROTO_KEY_INT64, KeyBody::Integer),
        (SchemaKind::Protobuf, oid::UUID) => (PROTO_KEY_UUID, KeyBody::Text),
        (SchemaKind::Protobuf, _) => (PROTO_KEY_STRING, KeyBody::Text),
    }
}

/// The (optional) value schema of a payload column of type `oid`.
fn value_schema(kind: SchemaKind, oid: Oid) -> (&'static str, ValueBody) {
    match (kind, oid) {
        (SchemaKind::Avro, oid::JSON | oid::JSONB) => (
            r#"["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}]"#,
            ValueBody::Text,
        ),
        (SchemaKind::Avro, oid::BYTEA) => (r#"["null","bytes"]"#, ValueBody::Bytes),
        (SchemaKind::Avro, _) => (r#"["null","string"]"#, ValueBody::Text),
        (SchemaKind::Json, oid::JSON | oid::JSONB) => (
            r#"{"$schema":"http://json-schema.org/draft-07/schema#","oneOf":[{"type":"null"},{"type":"string","title":"io.debezium.data.Json","connect.version":1}]}"#,
            ValueBody::Text,
        ),
        (SchemaKind::Json, oid::BYTEA) => (
            r#"{"$schema":"http://json-schema.org/draft-07/schema#","oneOf":[{"type":"null"},{"type":"string","connect.type":"bytes"}]}"#,
            ValueBody::Bytes,
        ),
        (SchemaKind::Json, _) => (
            r#"{"$schema":"http://json-schema.org/draft-07/schema#","oneOf":[{"type":"null"},{"type":"string"}]}"#,
            ValueBody::Text,
        ),
        (SchemaKind::Protobuf, oid::JSON | oid::JSONB) => (PROTO_VALUE_JSON, ValueBody::Text),
        (SchemaKind::Protobuf, oid::BYTEA) => (PROTO_VALUE_BYTES, ValueBody::Bytes),
        (SchemaKind::Protobuf, _) => (PROTO_VALUE_STRING, ValueBody::Text),
    }
}

// The outbox's Protobuf schemas: a message of one field `value` (a
// Protobuf schema's root is a message), in package `walrelay.outbox`;
// the same texts `table::schemas::protobuf` makes of these Connect schemas
// (a test there checks).
const PROTO_KEY_STRING: &str =
    "syntax = \"proto3\";\npackage walrelay.outbox;\n\nmessage Key {\n  string value = 1;\n}\n";
const PROTO_KEY_INT16: &str = "syntax = \"proto3\";\npackage walrelay.outbox;\n\nimport \"confluent/meta.proto\";\n\nmessage Key {\n  int32 value = 1 [(confluent.field_meta) = { params: [{ key: \"connect.type\", value: \"int16\" }] }];\n}\n";
const PROTO_KEY_INT32: &str =
    "syntax = \"proto3\";\npackage walrelay.outbox;\n\nmessage Key {\n  int32 value = 1;\n}\n";
const PROTO_KEY_INT64: &str =
    "syntax = \"proto3\";\npackage walrelay.outbox;\n\nmessage Key {\n  int64 value = 1;\n}\n";
const PROTO_KEY_UUID: &str = "syntax = \"proto3\";\npackage walrelay.outbox;\n\nimport \"confluent/meta.proto\";\n\nmessage Key {\n  string value = 1 [(confluent.field_meta) = { params: [{ key: \"connect.name\", value: \"io.debezium.data.Uuid\" }, { key: \"connect.version\", value: \"1\" }] }];\n}\n";
const PROTO_VALUE_STRING: &str = "syntax = \"proto3\";\npackage walrelay.outbox;\n\nmessage Value {\n  optional string value = 1;\n}\n";
const PROTO_VALUE_BYTES: &str = "syntax = \"proto3\";\npackage walrelay.outbox;\n\nmessage Value {\n  optional bytes value = 1;\n}\n";
const PROTO_VALUE_JSON: &str = "syntax = \"proto3\";\npackage walrelay.outbox;\n\nimport \"confluent/meta.proto\";\n\nmessage Value {\n  optional string value = 1 [(confluent.field_meta) = { params: [{ key: \"connect.name\", value: \"io.debezium.data.Json\" }, { key: \"connect.version\", value: \"1\" }] }];\n}\n";

/// Protobuf field 1 (length-delimited) holding `data`.
fn protobuf_field(data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + 6);
    out.put_u8(0x0A);
    put_varint(&mut out, data.len() as u64);
    out.put_slice(data);
    out.freeze()
}

/// A base-128 varint, low group first (Protobuf's).
fn put_varint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Avro's `long` (and `int`): zigzag, then a base-128 varint, low group first.
pub(crate) fn put_long(out: &mut BytesMut, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

/// Avro `string`/`bytes` (a long length, then the bytes), after union
/// branch `branch` when the schema is a union.
fn avro_bytes(branch: Option<i64>, data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + 11);
    if let Some(branch) = branch {
        put_long(&mut out, branch);
    }
    put_long(&mut out, data.len() as i64);
    out.put_slice(data);
    out.freeze()
}

/// `text` as a JSON string literal, or `None` when it is not UTF-8.
fn json_string(text: &[u8]) -> Option<Bytes> {
    let s = std::str::from_utf8(text).ok()?;
    serde_json::to_vec(s).ok().map(Bytes::from)
}

impl super::Bound {
    /// `format = "avro" | "json_schema"`: replaces the key and value by
    /// their bodies under the route's schemas, which the record then
    /// carries (a tombstone stays one).
    pub(super) fn encode(
        &self,
        encoding: &Encoding,
        record: &mut Record,
        lsn: Lsn,
    ) -> Result<(), RouteError> {
        let c = &self.route.config;
        if let Some(key) = &record.key {
            let body = encoding.key(key).map_err(|BadKey| {
                self.err(
                    &c.aggregate_id_column,
                    lsn,
                    "the aggregate id is not what its column type's schema holds",
                    "report it as a bug",
                )
            })?;
            record.key = Some(body);
        }
        if let Some(value) = &record.value {
            let body = encoding.value(value).ok_or_else(|| {
                self.err(
                    &c.payload_column,
                    lsn,
                    "the payload is not UTF-8, which its string schema needs",
                    "store the payload in a bytea column, or as UTF-8 text",
                )
            })?;
            record.value = Some(body);
        }
        record.schemas = Some(encoding.schemas().clone());
        Ok(())
    }
}

/// A PostgreSQL integer's text form.
fn parse_integer(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Standard base64 with padding (Connect's JSON form of `bytes`).
pub(crate) fn base64_into(data: &[u8], out: &mut Vec<u8>) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]);
            } else {
                out.push(b'=');
            }
        }
    }
}

#[cfg(test)]
mod tests;
