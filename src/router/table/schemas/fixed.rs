//! Records whose schemas depend on nothing configured (Debezium's message
//! events, BEGIN/END records): the key and value [`Schema`]s, their
//! registry texts made once, and Avro or Protobuf bodies re-encoded from
//! the JSON path's key and value.
//!
//! Invariants:
//! - **The same texts at every start.** The registry texts are made from
//!   the schemas alone, so a re-sent record finds the id it was first
//!   written with.
//! - **Errors name the part.** A [`BodyError`]'s path starts with `key` or
//!   `value`.

use std::sync::Arc;

use super::body::{self, BodyError};
use super::{Schema, text};
use crate::router::schema::{self as registry, RecordSchemas, SchemaKind};

/// A fixed key and value schema in one format (module doc).
#[derive(Debug)]
pub(crate) struct Fixed {
    kind: SchemaKind,
    key: Schema,
    value: Schema,
    schemas: Arc<RecordSchemas>,
}

impl Fixed {
    pub(crate) fn new(kind: SchemaKind, key: Schema, value: Schema) -> Fixed {
        let text = |s: &Schema| {
            registry::Schema::new(kind, text(kind, s), s.name.as_deref().map(Arc::from))
        };
        Fixed {
            kind,
            schemas: Arc::new(RecordSchemas {
                key: Some(text(&key)),
                value: text(&value),
                change: None,
            }),
            key,
            value,
        }
    }

    /// The format.
    pub(crate) fn kind(&self) -> SchemaKind {
        self.kind
    }

    /// The schemas every record carries.
    pub(crate) fn schemas(&self) -> &Arc<RecordSchemas> {
        &self.schemas
    }

    /// Appends to `out` the body of the JSON path's key (`value`: false)
    /// or value (true), `json`, in this format (Avro's or Protobuf's
    /// binary; under a JSON Schema the JSON itself, decimals as numbers).
    pub(crate) fn body(
        &self,
        value: bool,
        json: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), BodyError> {
        let (schema, part) = if value {
            (&self.value, "value")
        } else {
            (&self.key, "key")
        };
        let written = match self.kind {
            SchemaKind::Avro => body::avro_from_json(schema, json, out),
            SchemaKind::Json => body::json_from_json(schema, json, out),
            SchemaKind::Protobuf => super::protobuf::protobuf_from_json(schema, json, out),
        };
        written.map_err(|e| BodyError {
            path: if e.path.is_empty() {
                part.to_owned()
            } else {
                format!("{part}.{}", e.path)
            },
            reason: e.reason,
        })
    }
}
