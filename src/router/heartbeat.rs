//! Heartbeat records (`[heartbeat] publish = true`) as Debezium writes them:
//! key `{"serverName": <topic prefix>}`, value `{"ts_ms": <written>}` — as
//! JSON (Connect's `JsonConverter`, `schemas.enable=false`), or with
//! `[heartbeat] format = "avro" | "json_schema"` under the Kafka Connect
//! schemas Debezium's `SchemaFactory` gives them, as Confluent's converters
//! write them; ids and the wire format's prefix are `sink::registry`'s.
//!
//! Invariants:
//! - **Debezium's schemas.** Key `io.debezium.connector.common.ServerNameKey`
//!   (version 1: `serverName` string); value
//!   `io.debezium.connector.common.Heartbeat` (version 1: `ts_ms` long).
//!   They depend on nothing configured: the same texts at every start.
//! - **The values are the JSON form's**, re-encoded (Avro) or the same
//!   bytes (JSON Schema: nothing in them has another JSON form).
//! - Pure: no I/O, no clock (the caller gives the time written).

use std::sync::Arc;

use bytes::Bytes;

use super::Record;
use super::schema::SchemaKind;
use super::table::schemas::body::BodyError;
use super::table::schemas::fixed::Fixed;
use super::table::schemas::{Schema, Type};
use crate::config::TableFormat;

/// The key record's full name.
pub(crate) const KEY_NAME: &str = "io.debezium.connector.common.ServerNameKey";
/// The value record's full name.
pub(crate) const VALUE_NAME: &str = "io.debezium.connector.common.Heartbeat";

/// The key's Connect schema: `{serverName}`.
pub(crate) fn key_schema() -> Schema {
    Schema::named(
        Type::Struct(vec![Schema::field("serverName", Schema::of(Type::String))]),
        KEY_NAME,
    )
}

/// The value's Connect schema: `{ts_ms}`.
pub(crate) fn value_schema() -> Schema {
    Schema::named(
        Type::Struct(vec![Schema::field("ts_ms", Schema::of(Type::Int64))]),
        VALUE_NAME,
    )
}

/// How heartbeat records are written (module doc).
#[derive(Debug)]
pub struct Heartbeats {
    /// `None`: JSON without schemas.
    encoding: Option<Fixed>,
}

impl Heartbeats {
    /// Heartbeat records in `format`.
    pub fn new(format: TableFormat) -> Heartbeats {
        let kind = match format {
            TableFormat::Json => None,
            TableFormat::Avro => Some(SchemaKind::Avro),
            TableFormat::JsonSchema => Some(SchemaKind::Json),
            TableFormat::Protobuf => Some(SchemaKind::Protobuf),
        };
        Heartbeats {
            encoding: kind.map(|k| Fixed::new(k, key_schema(), value_schema())),
        }
    }

    /// The heartbeat record on `topic` for server (topic prefix)
    /// `server_name`, written at `ts_ms` (also its timestamp). A
    /// [`HeartbeatError`] only if the JSON form did not fit its own schema
    /// (a defect, never a value from outside).
    pub fn record(
        &self,
        server_name: &str,
        topic: &str,
        ts_ms: i64,
    ) -> Result<Record, HeartbeatError> {
        let key = serde_json::json!({ "serverName": server_name })
            .to_string()
            .into_bytes();
        let value = serde_json::json!({ "ts_ms": ts_ms })
            .to_string()
            .into_bytes();
        let (key, value) = match &self.encoding {
            Some(e) if e.kind() != SchemaKind::Json => {
                let mut k = Vec::with_capacity(key.len());
                e.body(false, &key, &mut k).map_err(HeartbeatError)?;
                let mut v = Vec::with_capacity(8);
                e.body(true, &value, &mut v).map_err(HeartbeatError)?;
                (k, v)
            }
            _ => (key, value),
        };
        let mut record = Record::new(
            Arc::from(topic),
            Some(Bytes::from(key)),
            Some(Bytes::from(value)),
            Vec::new(),
            Some(ts_ms),
        );
        if let Some(e) = &self.encoding {
            record.schemas = Some(e.schemas().clone());
        }
        Ok(record)
    }
}

/// A heartbeat's JSON form that did not fit its schema.
#[derive(Debug, thiserror::Error)]
#[error("the heartbeat record's {} does not fit its schema: {}", .0.path, .0.reason)]
pub struct HeartbeatError(BodyError);

#[cfg(test)]
mod tests;
