//! BEGIN/END records in `avro` / `json_schema` / `protobuf`
//! (`provide_transaction_metadata` with `[table_defaults] format = "avro" |
//! "json_schema" | "protobuf"`): the Kafka
//! Connect schemas Debezium's `SchemaFactory` gives them, as Confluent's
//! `AvroConverter` / `JsonSchemaConverter` write them; ids and the wire
//! format's prefix are `sink::registry`'s.
//!
//! Invariants:
//! - **Debezium's schemas.** Key
//!   `io.debezium.connector.common.TransactionMetadataKey` (version 1: `id`
//!   string); value `io.debezium.connector.common.TransactionMetadataValue`
//!   (version 1: `status` string, `id` string, `event_count` optional long,
//!   `data_collections` an optional array of optional `event.collection`
//!   records — version 1: `data_collection` string, `event_count` long —,
//!   `ts_ms` long). They depend on nothing configured: the same texts at
//!   every start, so a re-sent BEGIN or END finds its id again.
//! - **The values are the JSON path's.** A body is the BEGIN/END key and
//!   value `txmeta` writes as JSON, re-encoded under these schemas (Avro),
//!   or the same bytes (JSON Schema: nothing in them has another JSON form).
//! - **Never a panic.** JSON that does not fit is a [`BodyError`] naming
//!   the field.
//! - Pure: no I/O, no clock.

use std::sync::Arc;

use bytes::Bytes;

use crate::router::arena::Arena;
use crate::router::schema::{RecordSchemas, SchemaKind};
use crate::router::table::schemas::body::BodyError;
use crate::router::table::schemas::fixed::Fixed;
use crate::router::table::schemas::{Schema, Type};

/// The key record's full name.
pub(crate) const KEY_NAME: &str = "io.debezium.connector.common.TransactionMetadataKey";
/// The value record's full name.
pub(crate) const VALUE_NAME: &str = "io.debezium.connector.common.TransactionMetadataValue";

/// The key's Connect schema: `{id}`.
pub(crate) fn key_schema() -> Schema {
    Schema::named(
        Type::Struct(vec![Schema::field("id", Schema::of(Type::String))]),
        KEY_NAME,
    )
}

/// The value's Connect schema, fields in Debezium's order (the JSON
/// path's).
pub(crate) fn value_schema() -> Schema {
    let collection = Schema::named(
        Type::Struct(vec![
            Schema::field("data_collection", Schema::of(Type::String)),
            Schema::field("event_count", Schema::of(Type::Int64)),
        ]),
        "event.collection",
    )
    .optional();
    Schema::named(
        Type::Struct(vec![
            Schema::field("status", Schema::of(Type::String)),
            Schema::field("id", Schema::of(Type::String)),
            Schema::field("event_count", Schema::of(Type::Int64).optional()),
            Schema::field(
                "data_collections",
                Schema::of(Type::Array(Box::new(collection))).optional(),
            ),
            Schema::field("ts_ms", Schema::of(Type::Int64)),
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

    /// The schemas every BEGIN/END record carries.
    pub(super) fn schemas(&self) -> &Arc<RecordSchemas> {
        self.0.schemas()
    }

    /// The bodies of the JSON path's `key` and `value` (copied into
    /// `values`); a [`BodyError`]'s path starts with `key` or `value`.
    pub(super) fn bodies(
        &self,
        key: Bytes,
        value: Bytes,
        values: &mut Arena,
    ) -> Result<(Bytes, Bytes), BodyError> {
        match self.0.kind() {
            SchemaKind::Json => Ok((key, value)),
            SchemaKind::Avro | SchemaKind::Protobuf => {
                let mut binary = |value_part: bool, json: &[u8]| {
                    let mut out = Vec::with_capacity(json.len());
                    self.0.body(value_part, json, &mut out)?;
                    Ok::<_, BodyError>(values.copy(&out))
                };
                let key = binary(false, &key)?;
                let value = binary(true, &value)?;
                Ok((key, value))
            }
        }
    }
}

#[cfg(test)]
mod tests;
