//! `format = "avro"` table events written straight from the row's cells:
//! the key and the envelope in Avro's binary encoding, without writing the
//! JSON path's text first and reading it back (what `json_schema` still
//! does, [`super::TableRouter::encode_tail`]). The most common values —
//! strings, integers, booleans — go from PostgreSQL's text to Avro
//! directly; every other value (and a masked one, an unchanged TOASTed
//! placeholder, anything the direct forms do not accept) is written by the
//! JSON path's own writer and transcoded alone.
//!
//! Invariants:
//! - **The bytes are the transcoder's.** Every record is byte for byte what
//!   `schemas::body::avro_from_json` makes of the JSON path's record under
//!   the same schemas, and every error is the same error (table, column,
//!   LSN): a direct form takes only text the JSON path would write
//!   unchanged as that value (an integer's digits as the JSON path checks
//!   them, valid UTF-8, `t`/`f`), and leaves anything else to it.
//!   `tests/registry.rs` compares both on every type the router maps.
//! - **`source` follows [`schemas::source`] field by field** (the same
//!   tests catch a field added there and not here).
//! - No allocation per record but the arena's; no I/O.

use bytes::Bytes;

use super::super::schemas::body::{self, BodyError, avro_union, put_long, put_str};
use super::super::schemas::{Schema, Type};
use super::super::{BoundColumn, Ctx, Source, TableEventError};
use super::{Encoding, misfit};
use crate::Lsn;
use crate::pgoutput::{Cell, TupleData};
use crate::router::Record;
use crate::router::debezium::Kind;
use crate::router::txmeta::Order;

/// How a column's (unmasked) value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direct {
    /// An Avro `string` of the text as it is (text, varchar, uuid, json,
    /// an enum's label …).
    Text,
    /// An Avro `int`/`long` of the text's digits.
    Int,
    /// An Avro `boolean` of `t` / `f`.
    Bool,
    /// The JSON path's value, transcoded alone.
    Json,
}

impl Direct {
    /// The direct form of a column written as `c.mapping` under `schema`.
    pub(super) fn of(c: &BoundColumn, schema: &Schema) -> Direct {
        if c.mapping.array {
            return Direct::Json;
        }
        match (c.mapping.kind, &schema.ty) {
            (Kind::Text, Type::String) => Direct::Text,
            (Kind::Int, Type::Int16 | Type::Int32 | Type::Int64) => Direct::Int,
            (Kind::Bool, Type::Boolean) => Direct::Bool,
            _ => Direct::Json,
        }
    }
}

/// What writing a table's events straight from the cells takes, made with
/// its [`Encoding`].
#[derive(Debug)]
pub(super) struct Plan {
    /// Per column, in the relation's order.
    direct: Vec<Direct>,
    /// `source.version`, `.connector` and `.name`, encoded.
    head: Vec<u8>,
    /// `source.db`, encoded.
    db: Vec<u8>,
    /// `source.schema` and `.table`, encoded.
    names: Vec<u8>,
}

impl Plan {
    /// `names`: topic prefix, schema, table, database.
    pub(super) fn new(direct: Vec<Direct>, names: &[String; 4]) -> Plan {
        let [prefix, schema, table, db] = names;
        let mut head = Vec::new();
        put_str(&mut head, env!("CARGO_PKG_VERSION").as_bytes());
        put_str(&mut head, b"postgresql");
        put_str(&mut head, prefix.as_bytes());
        let mut encoded = Vec::new();
        put_str(&mut encoded, schema.as_bytes());
        put_str(&mut encoded, table.as_bytes());
        let mut database = Vec::new();
        put_str(&mut database, db.as_bytes());
        Plan {
            direct,
            head,
            db: database,
            names: encoded,
        }
    }
}

/// The digits of an integer as the JSON path accepts them (an optional
/// `-`, no leading zero), as a number; `None` leaves the value to it.
fn integer(text: &[u8]) -> Option<i64> {
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    if digits.is_empty() || (digits.len() > 1 && digits[0] == b'0') {
        return None;
    }
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Where a value's error points: `part` (`key`, `before`, `after`) and
/// the field.
fn at(e: BodyError, part: &str, field: &str) -> BodyError {
    BodyError {
        path: if e.path.is_empty() {
            format!("{part}.{field}")
        } else {
            format!("{part}.{field}.{}", e.path)
        },
        reason: e.reason,
    }
}

/// A failure writing one value: the JSON path's error (column position and
/// reason) or a misfit under the schema.
enum Fail {
    Value(usize, String),
    Body(BodyError),
}

impl Ctx<'_> {
    /// Column `i`'s `cell` under `schema` at the end of `out`; `json` is
    /// the buffer for the JSON path's value when it writes it.
    #[allow(clippy::too_many_arguments)]
    fn avro_cell(
        &mut self,
        plan: &Plan,
        i: usize,
        masked: bool,
        schema: &Schema,
        cell: Option<&Cell>,
        out: &mut Vec<u8>,
        json: &mut Vec<u8>,
    ) -> Result<(), Fail> {
        let direct = match plan.direct.get(i) {
            Some(&d) if !masked => d,
            _ => Direct::Json,
        };
        let text = match cell {
            Some(Cell::Text(text)) => Some(&text[..]),
            _ => None,
        };
        match (direct, text) {
            // A fixed mask replaces NULL too.
            (_, None) if !masked && matches!(cell, None | Some(Cell::Null)) && schema.optional => {
                avro_union(schema, true, out).map_err(Fail::Body)?;
                return Ok(());
            }
            (Direct::Text, Some(text)) if std::str::from_utf8(text).is_ok() => {
                avro_union(schema, false, out).map_err(Fail::Body)?;
                put_str(out, text);
                return Ok(());
            }
            (Direct::Int, Some(text)) => {
                if let Some(n) = integer(text) {
                    avro_union(schema, false, out).map_err(Fail::Body)?;
                    put_long(out, n);
                    return Ok(());
                }
            }
            (Direct::Bool, Some(b @ (b"t" | b"f"))) => {
                avro_union(schema, false, out).map_err(Fail::Body)?;
                out.push(u8::from(b == b"t"));
                return Ok(());
            }
            _ => {}
        }
        json.clear();
        let bound = self.bound;
        let written = match bound.columns.get(i).and_then(|c| c.mask.as_ref()) {
            Some(mask) if masked => Self::masked_cell(bound, mask, json, self.scratch, i, cell),
            _ => Self::cell(bound, json, self.scratch, i, cell),
        };
        written.map_err(|(i, why)| Fail::Value(i, why))?;
        body::avro_from_json(schema, json, out).map_err(Fail::Body)
    }

    fn fail(&self, encoding: &Encoding, part: &str, field: &str, f: Fail) -> TableEventError {
        match f {
            Fail::Value(i, why) => self.err(i, why),
            Fail::Body(e) => {
                let e = at(e, part, field);
                misfit(encoding, self.bound, self.lsn, e.path, e.reason, part)
            }
        }
    }

    /// The key of `row` in Avro (`None`: a null key), cut from the arena.
    fn avro_key(
        &mut self,
        encoding: &Encoding,
        plan: &Plan,
        row: &TupleData,
    ) -> Result<Option<Bytes>, TableEventError> {
        let (Some(positions), Some(schema)) = (&self.bound.key, &encoding.event.key) else {
            return Ok(None);
        };
        let Type::Struct(fields) = &schema.ty else {
            return Ok(None);
        };
        let mut out = std::mem::take(self.buf);
        let mut json = std::mem::take(self.key_buf);
        out.clear();
        let mut written = Ok(());
        for (&i, field) in positions.iter().zip(fields) {
            let cell = row.get(i);
            if let Err(f) = self.avro_cell(plan, i, false, &field.schema, cell, &mut out, &mut json)
            {
                written = Err(self.fail(encoding, "key", &field.key, f));
                break;
            }
        }
        let key = written.map(|()| Some(self.values.copy(&out)));
        *self.buf = out;
        *self.key_buf = json;
        key
    }

    /// `row` (`before` or `after`: `part`) at the end of `out`, a value
    /// taken from `fallback` where `row` has it as unchanged TOAST.
    #[allow(clippy::too_many_arguments)]
    fn avro_row(
        &mut self,
        encoding: &Encoding,
        plan: &Plan,
        row: Option<&TupleData>,
        fallback: Option<&TupleData>,
        part: &str,
        out: &mut Vec<u8>,
        json: &mut Vec<u8>,
    ) -> Result<(), TableEventError> {
        let Type::Struct(envelope) = &encoding.event.envelope.ty else {
            return Ok(());
        };
        let Some(value) = envelope.iter().find(|f| f.key == part) else {
            return Ok(());
        };
        let misfit = |e| at(e, part, "");
        let Type::Struct(fields) = &value.schema.ty else {
            return Ok(());
        };
        let Some(row) = row else {
            return avro_union(&value.schema, true, out)
                .map(|_| ())
                .map_err(|e| self.fail(encoding, part, "", Fail::Body(misfit(e))));
        };
        avro_union(&value.schema, false, out)
            .map_err(|e| self.fail(encoding, part, "", Fail::Body(misfit(e))))?;
        let mut fields = fields.iter();
        let bound = self.bound;
        for (i, column) in bound.columns.iter().enumerate() {
            if !column.included {
                continue;
            }
            let Some(field) = fields.next() else {
                break;
            };
            let mut cell = row.get(i);
            if let (Some(Cell::UnchangedToast), Some(Cell::Text(_) | Cell::Binary(_))) =
                (cell, fallback.and_then(|f| f.get(i)))
            {
                cell = fallback.and_then(|f| f.get(i));
            }
            let masked = column.mask.is_some();
            self.avro_cell(plan, i, masked, &field.schema, cell, out, json)
                .map_err(|f| self.fail(encoding, part, &field.key, f))?;
        }
        Ok(())
    }

    /// One change event of a table in `format = "avro"`: what
    /// [`Ctx::event`] makes after its transaction bookkeeping, in Avro.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::router::table) fn avro_event(
        &mut self,
        encoding: &Encoding,
        op: u8,
        before: Option<&TupleData>,
        after: Option<&TupleData>,
        key_row: Option<&TupleData>,
        source: Source,
        block: Option<(Order, Lsn)>,
        id: &Bytes,
        out: &mut Vec<Record>,
    ) -> Result<(), TableEventError> {
        let Some(plan) = &encoding.avro else {
            return Ok(());
        };
        let key = match key_row {
            Some(row) => self.avro_key(encoding, plan, row)?,
            None => None,
        };
        let mut buf = std::mem::take(self.buf);
        let mut json = std::mem::take(self.key_buf);
        buf.clear();
        let rows = self
            .avro_row(encoding, plan, before, None, "before", &mut buf, &mut json)
            .and_then(|()| {
                self.avro_row(encoding, plan, after, before, "after", &mut buf, &mut json)
            });
        if rows.is_ok() {
            source_block(plan, source, op, block, &mut buf);
        }
        let value = rows.map(|()| self.values.copy(&buf));
        *self.buf = buf;
        *self.key_buf = json;
        out.push(self.record(key, Some(value?), id));
        Ok(())
    }

    /// A tombstone's key in Avro (`Some(None)`: a null key); `None` when
    /// the table is not written in Avro.
    pub(in crate::router::table) fn avro_tombstone_key(
        &mut self,
        key_row: &TupleData,
    ) -> Option<Result<Option<Bytes>, TableEventError>> {
        let encoding = self.bound.encoding.as_ref()?;
        let plan = encoding.avro.as_ref()?;
        Some(self.avro_key(encoding, plan, key_row))
    }
}

/// `source`, `op`, `ts_ms` and `transaction` after the rows, in the order
/// and forms of [`schemas::source`](super::super::schemas::source) and the
/// envelope.
fn source_block(
    plan: &Plan,
    source: Source,
    op: u8,
    block: Option<(Order, Lsn)>,
    out: &mut Vec<u8>,
) {
    let (ts_ms, snapshot, txid, lsn) = match source {
        Source::Stream { txn, lsn } => (txn.commit_ms, "false", Some(txn.xid), lsn),
        Source::Snapshot { lsn, ts_ms, marker } => (ts_ms, marker.as_str(), None, lsn),
    };
    let mut digits = itoa::Buffer::new();
    out.extend_from_slice(&plan.head);
    put_long(out, ts_ms);
    // `snapshot` has a default, so its string branch is the first.
    put_long(out, 0);
    put_str(out, snapshot.as_bytes());
    out.extend_from_slice(&plan.db);
    // `sequence`: `[null,"<lsn>"]`, the string branch.
    put_long(out, 1);
    let lsn_text = digits.format(lsn.0);
    put_long(out, (lsn_text.len() + 9) as i64);
    out.extend_from_slice(b"[null,\"");
    out.extend_from_slice(lsn_text.as_bytes());
    out.extend_from_slice(b"\"]");
    out.extend_from_slice(&plan.names);
    match txid {
        Some(x) => {
            put_long(out, 1);
            put_long(out, i64::from(x));
        }
        None => put_long(out, 0),
    }
    put_long(out, 1);
    put_long(out, lsn.0 as i64);
    // xmin: null.
    put_long(out, 0);
    put_str(out, &[op]);
    put_long(out, 1);
    put_long(out, ts_ms);
    match block {
        Some((order, lsn)) => {
            // `id`: `<xid>:<commit lsn>`.
            put_long(out, 1);
            let mut xid = itoa::Buffer::new();
            let (xid, lsn) = (xid.format(order.xid), digits.format(lsn.0));
            put_long(out, (xid.len() + 1 + lsn.len()) as i64);
            out.extend_from_slice(xid.as_bytes());
            out.push(b':');
            out.extend_from_slice(lsn.as_bytes());
            put_long(out, order.total as i64);
            put_long(out, order.in_table as i64);
        }
        None => put_long(out, 0),
    }
}
