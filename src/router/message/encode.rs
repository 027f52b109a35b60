//! `[[message]] format = "avro" | "json_schema" | "protobuf"`: Debezium's logical
//! decoding message event (`op: "m"`) under the Kafka Connect schemas
//! Debezium's PostgreSQL connector gives it (`PostgresSchemaFactory`), as
//! Confluent's `AvroConverter` / `JsonSchemaConverter` write them; the
//! registry's ids and the wire format's prefix are `sink::registry`'s.
//!
//! Invariants:
//! - **Debezium's schemas, names and all.** Key
//!   `io.debezium.connector.postgresql.MessageKey` (version 1: `prefix`, an
//!   optional string); value `io.debezium.connector.postgresql.MessageValue`
//!   (version 1: `op` string, `ts_ms` optional long, `source`
//!   `io.debezium.connector.postgresql.Source` — the block table events
//!   carry —, `transaction` the optional `event.block`, `message`
//!   `io.debezium.connector.postgresql.Message`, version 1, required:
//!   `prefix` optional string, `content` optional bytes, Debezium's
//!   `binary.handling.mode=bytes`). They depend on nothing configured: every
//!   section, topic and start registers the same texts, byte for byte, so a
//!   re-sent record finds the id it was first written with.
//! - **The values are the JSON path's.** A body is `format = "debezium"`'s
//!   key and value re-encoded under these schemas: Avro's binary encoding
//!   (the content base64-decoded back to its bytes), or for JSON Schema the
//!   same JSON (Connect's JSON form of bytes is base64). The two formats
//!   cannot disagree on a field.
//! - **Never a panic.** JSON that does not fit a schema is a [`BodyError`]
//!   naming the field (the caller stops the connector with it).
//! - Pure: no I/O, no clock.

use std::sync::Arc;

use bytes::Bytes;

use crate::router::schema::{RecordSchemas, SchemaKind};
use crate::router::table::schemas::body::BodyError;
use crate::router::table::schemas::fixed::Fixed;
use crate::router::table::schemas::{self, Schema, Type};

/// The key record's full name.
pub(crate) const KEY_NAME: &str = "io.debezium.connector.postgresql.MessageKey";
/// The value record's full name.
pub(crate) const VALUE_NAME: &str = "io.debezium.connector.postgresql.MessageValue";
/// The `message` block's full name.
const BLOCK_NAME: &str = "io.debezium.connector.postgresql.Message";

/// The key's Connect schema: `{prefix}`.
pub(crate) fn key_schema() -> Schema {
    Schema::named(
        Type::Struct(vec![Schema::field(
            "prefix",
            Schema::of(Type::String).optional(),
        )]),
        KEY_NAME,
    )
}

/// The value's Connect schema, fields in Debezium's order (which is the
/// order the JSON path writes them in).
pub(crate) fn value_schema() -> Schema {
    let block = Schema::named(
        Type::Struct(vec![
            Schema::field("prefix", Schema::of(Type::String).optional()),
            Schema::field("content", Schema::of(Type::Bytes).optional()),
        ]),
        BLOCK_NAME,
    );
    Schema::named(
        Type::Struct(vec![
            Schema::field("op", Schema::of(Type::String)),
            Schema::field("ts_ms", Schema::of(Type::Int64).optional()),
            Schema::field("source", schemas::source()),
            Schema::field("transaction", schemas::transaction()),
            Schema::field("message", block),
        ]),
        VALUE_NAME,
    )
}

/// The schemas of one format, and their registry texts (made once).
#[derive(Debug)]
pub(super) struct Encoding(Fixed);

impl Encoding {
    pub(super) fn new(kind: SchemaKind) -> Encoding {
        Encoding(Fixed::new(kind, key_schema(), value_schema()))
    }

    /// The schemas every record of this format carries.
    pub(super) fn schemas(&self) -> &Arc<RecordSchemas> {
        self.0.schemas()
    }

    /// The bodies of the JSON path's `key` and `value`; a [`BodyError`]'s
    /// path starts with `key` or `value`.
    pub(super) fn bodies(&self, key: Vec<u8>, value: Vec<u8>) -> Result<(Bytes, Bytes), BodyError> {
        match self.0.kind() {
            // No decimal anywhere: the JSON path's bytes are the bodies.
            SchemaKind::Json => Ok((Bytes::from(key), Bytes::from(value))),
            SchemaKind::Avro | SchemaKind::Protobuf => {
                let binary = |value_part: bool, json: &[u8]| {
                    let mut out = Vec::with_capacity(json.len());
                    self.0.body(value_part, json, &mut out)?;
                    Ok::<_, BodyError>(Bytes::from(out))
                };
                Ok((binary(false, &key)?, binary(true, &value)?))
            }
        }
    }
}

#[cfg(test)]
mod tests;
