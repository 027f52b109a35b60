//! Envelope placement (`[[outbox]] envelope_columns`): the record value is
//! a JSON object `{"payload": <payload>, "<name>": <column value>, …}`, what
//! Debezium's Outbox Event Router writes with
//! `table.fields.additional.placement=<column>:envelope:<name>` through
//! Kafka Connect's `JsonConverter` with `schemas.enable=false`
//! (tests/it/debezium_compat/outbox.rs compares the two on the same rows).
//!
//! Invariants:
//! - **Debezium's shape.** `payload` first, then the placed columns in the
//!   configured order. The payload: a json/jsonb or text payload as
//!   Debezium's `table.expand.json.payload` writes it
//!   (`expand_json_payload`, the default here: an object as the schema
//!   Debezium infers from it has it, anything else a JSON string, bytes for
//!   bytes, [`super::connect`]'s `expand`) or as a JSON string as Jackson
//!   writes it; bytea as base64; NULL as `null` — a tombstone only with
//!   `tombstone_on_empty_payload` (then an empty payload too), as Debezium's
//!   `route.tombstone.on.empty.payload`. A placed column's value is written
//!   as Debezium's PostgreSQL connector writes that type with its default
//!   options ([`super::debezium`]), its strings escaped as Jackson escapes
//!   them; a type it does not map as its text, a NULL as `null`.
//! - **Stable.** The value depends only on the row: a re-sent event has the
//!   same bytes.
//! - **Never skip silently.** A value that cannot be written (not UTF-8,
//!   not what its type's output function writes, a payload Debezium's task
//!   fails on under expansion) is a [`RouteError`] naming the column;
//!   nothing is dropped.
//! - **Opt-in.** Without `envelope_columns` the router never reaches this
//!   module: one `None` test per record.

use bytes::Bytes;

use super::cloudevents::FindColumn;
use super::connect::expand::expand;
use super::connect::{jackson_str, serde_to_jackson};
use super::debezium::{self, Kind, Mapping, Modes};
use super::{BYTEA_OID, Bound, RouteError, Unroutable};
use crate::Lsn;
use crate::config::OutboxConfig;
use crate::pgoutput::{Cell, Oid, Relation, TupleData};

const JSON_OID: Oid = 114;
const JSONB_OID: Oid = 3802;

/// How the payload column is written into the envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Payload {
    /// json/jsonb: expanded as Debezium's `table.expand.json.payload`.
    Json,
    /// json/jsonb with `expand_json_payload = false`: a JSON string.
    JsonString,
    /// text/varchar: expanded as json/jsonb.
    Text,
    /// text/varchar with `expand_json_payload = false`: a JSON string.
    TextString,
    /// bytea: base64.
    Bytes,
}

/// One placed column.
#[derive(Debug)]
struct Member {
    /// `,"<name>":`, escaped once at bind time.
    prefix: Box<[u8]>,
    index: usize,
    column: String,
    mapping: Mapping,
}

/// An `[[outbox]]` route's envelope, bound to a relation.
#[derive(Debug)]
pub(super) struct Envelope {
    payload: Payload,
    tombstones: bool,
    members: Vec<Member>,
}

impl Envelope {
    /// Binds `config`'s envelope to `rel`; `Err((table, column))` names a
    /// column the table lacks.
    pub(super) fn bind(
        config: &OutboxConfig,
        payload: usize,
        rel: &Relation,
        find: &FindColumn<'_>,
    ) -> Result<Envelope, (String, String)> {
        let expand = config.expands_json_payload();
        let payload_oid = rel.columns.get(payload).map_or(0, |c| c.type_oid);
        let payload = match payload_oid {
            JSON_OID | JSONB_OID if expand => Payload::Json,
            JSON_OID | JSONB_OID => Payload::JsonString,
            BYTEA_OID => Payload::Bytes,
            _ if expand => Payload::Text,
            _ => Payload::TextString,
        };
        // Debezium's default options. A type they do not map (an
        // extension's, a domain) is written as its text rather than refused
        // (Debezium fails the record); a mapped type's value that cannot be
        // read stops the row, naming the column.
        let modes = Modes::default();
        let mut members = Vec::with_capacity(config.envelope_columns.len());
        for (column, name) in config.envelope_placements() {
            let index = find(column)?;
            let (oid, typmod) = rel
                .columns
                .get(index)
                .map_or((0, -1), |c| (c.type_oid, c.type_modifier));
            let mut prefix = vec![b','];
            debezium::json_str(&mut prefix, name);
            prefix.push(b':');
            members.push(Member {
                prefix: prefix.into_boxed_slice(),
                index,
                column: column.to_owned(),
                mapping: Mapping::of(oid, typmod, modes).unwrap_or(Mapping::TEXT),
            });
        }
        Ok(Envelope {
            payload,
            tombstones: config.tombstone_on_empty_payload,
            members,
        })
    }

    /// The record value of `row`: the envelope, or `None` (a tombstone) for
    /// a NULL or empty payload under `tombstone_on_empty_payload`.
    pub(super) fn value(
        &self,
        bound: &Bound,
        row: &TupleData,
        lsn: Lsn,
    ) -> Result<Option<Bytes>, RouteError> {
        let c = &bound.route.config;
        let payload = match row.get(bound.payload) {
            Some(Cell::Text(b) | Cell::Binary(b)) => Some(b),
            Some(Cell::Null) => None,
            Some(Cell::UnchangedToast) | None => {
                return Err(bound.err(
                    &c.payload_column,
                    lsn,
                    "the payload was not sent",
                    "report it as a bug",
                ));
            }
        };
        if self.tombstones && payload.is_none_or(|p| p.is_empty()) {
            return Ok(None);
        }
        let invalid = |column: &str, reason: String| RouteError {
            kind: Unroutable::InvalidValue,
            ..bound.err(
                column,
                lsn,
                &reason,
                "the slot does not advance past this row: skip its transaction or change \
                 envelope_columns (docs/operations.md, \"A row cannot be routed\")",
            )
        };
        let mut out = Vec::with_capacity(
            payload.map_or(0, |p| p.len() + p.len() / 8) + 16 + 48 * self.members.len(),
        );
        let mut scratch = Vec::new();
        out.extend_from_slice(b"{\"payload\":");
        match payload {
            None => out.extend_from_slice(b"null"),
            Some(p) => self
                .write_payload(&mut out, p, &mut scratch)
                .map_err(|e| invalid(&c.payload_column, e.0))?,
        }
        for m in &self.members {
            out.extend_from_slice(&m.prefix);
            match row.get(m.index) {
                Some(Cell::Text(b) | Cell::Binary(b)) => {
                    let start = out.len();
                    debezium::write_value(&mut out, m.mapping, b, &mut scratch)
                        .map_err(|e| invalid(&m.column, e.0))?;
                    serde_to_jackson(&mut out, start);
                }
                Some(Cell::Null) => out.extend_from_slice(b"null"),
                Some(Cell::UnchangedToast) | None => {
                    return Err(bound.err(
                        &m.column,
                        lsn,
                        "the value was not sent",
                        "report it as a bug",
                    ));
                }
            }
        }
        out.push(b'}');
        Ok(Some(Bytes::from(out)))
    }

    fn write_payload(
        &self,
        out: &mut Vec<u8>,
        p: &[u8],
        scratch: &mut Vec<u8>,
    ) -> Result<(), debezium::ValueError> {
        let text = || {
            std::str::from_utf8(p).map_err(|_| {
                debezium::ValueError(format!(
                    "the payload ({} bytes) is not UTF-8 (row values are not logged)",
                    p.len()
                ))
            })
        };
        match self.payload {
            // Debezium's table.expand.json.payload, byte for byte.
            Payload::Json | Payload::Text => {
                expand(out, text()?, None).map_err(debezium::ValueError)?;
            }
            Payload::JsonString | Payload::TextString => jackson_str(out, text()?),
            Payload::Bytes => debezium::write_value(
                out,
                Mapping {
                    kind: Kind::BytesBase64,
                    ..Mapping::TEXT
                },
                p,
                scratch,
            )?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
