//! `[[table]] format = "avro" | "json_schema"` in the table router: a
//! bound table's schemas ([`Encoding`], made when its Relation message
//! binds it, so a DDL's new shape has new schemas before its first row),
//! and its records' keys and values re-encoded under them
//! ([`TableRouter::encode_tail`]) — the records then carry the schemas,
//! whose ids `sink::registry` adds.
//!
//! Invariants:
//! - **A new shape says what changed.** When a Relation message re-binds a
//!   table to other schemas, the new schemas carry which columns were
//!   added, dropped or changed type, so a registry that refuses them is
//!   answered with the table, the column and the subject.
//! - **Tombstones stay tombstones** (a key, no value); a null key stays
//!   null.
//! - Pure: no I/O.

use std::sync::Arc;

use super::schemas::{self, ColumnSchema, EventSchemas, Schema, body};
use super::{Bound, BoundColumn, TableEventError, TableRouter};
use crate::Lsn;
use crate::config::TableFormat;
use crate::pgoutput::Oid;
use crate::router::Record;
use crate::router::debezium::{self, Modes};
use crate::router::schema::{self as registry, RecordSchemas, SchemaKind};

/// A bound table's key and value schemas and their registry texts.
#[derive(Debug)]
pub(crate) struct Encoding {
    kind: SchemaKind,
    event: EventSchemas,
    schemas: Arc<RecordSchemas>,
    /// `json_schema` without a decimal anywhere: the JSON path's bytes are
    /// the body as they are.
    verbatim: bool,
}

impl Encoding {
    /// The encoding of `format` (`None` for `json`) for table
    /// `schema.table` with `columns`; `key` holds the key columns'
    /// positions, `required` tells which columns are `NOT NULL`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        format: TableFormat,
        modes: Modes,
        prefix: &str,
        schema: &str,
        table: &str,
        columns: &[BoundColumn],
        key: Option<&[usize]>,
        required: impl Fn(&str) -> bool,
    ) -> Option<Encoding> {
        let kind = match format {
            TableFormat::Json => return None,
            TableFormat::Avro => SchemaKind::Avro,
            TableFormat::JsonSchema => SchemaKind::Json,
        };
        let columns: Vec<ColumnSchema> = columns
            .iter()
            .map(|c| ColumnSchema {
                name: c.name.clone(),
                schema: schemas::column(c.oid, c.typmod, c.mapping, modes),
                required: required(&c.name),
                included: c.included,
            })
            .collect();
        let event = schemas::event_schemas(prefix, schema, table, &columns, key);
        let text = |s: &Schema| {
            registry::Schema::new(
                kind,
                schemas::text(kind, s),
                s.name.as_deref().map(Arc::from),
            )
        };
        let schemas = Arc::new(RecordSchemas {
            key: event.key.as_ref().map(text),
            value: text(&event.envelope),
            change: None,
        });
        Some(Encoding {
            kind,
            verbatim: kind == SchemaKind::Json && !event.envelope.has_decimal(),
            event,
            schemas,
        })
    }

    /// Notes `change` (what a DDL changed) on the schemas, when they are
    /// not those of `before`.
    pub(super) fn note_change(&mut self, before: &Encoding, change: String) {
        if before.schemas.key == self.schemas.key && before.schemas.value == self.schemas.value {
            // The same shape: the same schemas, shared (and what the last
            // change said stays said).
            self.schemas = before.schemas.clone();
            return;
        }
        let mut schemas = (*self.schemas).clone();
        schemas.change = Some(Arc::from(change));
        self.schemas = Arc::new(schemas);
    }
}

/// What changed between `before`'s and `after`'s columns, for an error
/// that a registry refused the new shape: `column amount: int4 → text`,
/// `column note added (text)`, `column legacy dropped`.
pub(super) fn describe_change(before: &[BoundColumn], after: &[BoundColumn]) -> String {
    let ty = |c: &BoundColumn| type_text(c.oid, c.typmod);
    let mut parts = Vec::new();
    for c in after {
        match before.iter().find(|b| b.name == c.name) {
            None => parts.push(format!("column {} added ({})", c.name, ty(c))),
            Some(b) if (b.oid, b.typmod) != (c.oid, c.typmod) => {
                parts.push(format!("column {}: {} → {}", c.name, ty(b), ty(c)));
            }
            Some(_) => {}
        }
    }
    for b in before {
        if !after.iter().any(|c| c.name == b.name) {
            parts.push(format!("column {} dropped", b.name));
        }
    }
    if parts.is_empty() {
        "the table's replica identity or key changed".to_owned()
    } else {
        parts.join(", ")
    }
}

fn type_text(oid: Oid, typmod: i32) -> String {
    let name = debezium::type_name(oid);
    match oid {
        1700 if typmod >= 4 => format!(
            "{name}({},{})",
            ((typmod - 4) >> 16) & 0xffff,
            (typmod - 4) & 0xffff
        ),
        1043 | 1042 if typmod >= 4 => format!("{name}({})", typmod - 4),
        _ => name,
    }
}

impl TableRouter {
    /// Re-encodes the records `out[from..]` of relation `rel` (just made
    /// by the JSON path) under its schemas, when its format has them.
    pub(super) fn encode_tail(
        &mut self,
        rel: Oid,
        lsn: Lsn,
        out: &mut [Record],
        from: usize,
    ) -> Result<(), TableEventError> {
        let Some(Ok(bound)) = self.bound.get(&rel) else {
            return Ok(());
        };
        let Some(encoding) = &bound.encoding else {
            return Ok(());
        };
        for record in out.iter_mut().skip(from) {
            if record.topic != bound.topic || record.schemas.is_some() {
                continue;
            }
            if let (Some(key), Some(schema)) = (&record.key, &encoding.event.key) {
                let body = encode(encoding, schema, key, &mut self.buf, bound, lsn, "key")?;
                record.key = Some(self.values.copy(body));
            }
            if let Some(value) = &record.value {
                if !encoding.verbatim {
                    let envelope = &encoding.event.envelope;
                    let body = encode(encoding, envelope, value, &mut self.buf, bound, lsn, "")?;
                    record.value = Some(self.values.copy(body));
                }
            }
            record.schemas = Some(encoding.schemas.clone());
            record.recount();
        }
        Ok(())
    }
}

/// `json` (the JSON path's key or envelope) under `schema`, in `buf`.
fn encode<'b>(
    encoding: &Encoding,
    schema: &Schema,
    json: &[u8],
    buf: &'b mut Vec<u8>,
    bound: &Bound,
    lsn: Lsn,
    part: &str,
) -> Result<&'b [u8], TableEventError> {
    let fail = |path: String, reason: &str| TableEventError {
        table: bound.display.clone(),
        column: path,
        lsn,
        reason: format!(
            "the {} value does not fit its {} schema: {reason}",
            if part.is_empty() { "event's" } else { part },
            match encoding.kind {
                SchemaKind::Avro => "Avro",
                SchemaKind::Json => "JSON",
            }
        ),
        fix: "a value written as its text form (unmapped_types = \"text\") where the type has \
              a schema of its own cannot be carried: leave the column out with a column list, \
              or use format = \"json\" for this table; otherwise report it as a bug"
            .into(),
    };
    buf.clear();
    let written = match encoding.kind {
        SchemaKind::Avro => body::avro_from_json(schema, json, buf),
        SchemaKind::Json => body::json_from_json(schema, json, buf),
    };
    written.map_err(|e| {
        let path = match part {
            "" => e.path,
            p => format!("{p}.{}", e.path),
        };
        fail(path, e.reason)
    })?;
    Ok(buf)
}
