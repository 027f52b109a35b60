//! Writing one change event: the key, the `before`/`after` rows (columns
//! listed, masked, unchanged TOASTed values as placeholders), the `source`
//! block and the envelope in Debezium's change-event shape, the tombstone,
//! and the record headers — all appended to the router's reusable buffer
//! and cut from its arenas.
//!
//! Invariants: a record depends only on the change (row, commit LSN, xid,
//! commit time, index), never on a clock; no allocation per record or per
//! field (the bytes are slices of the arenas); a value that cannot be read
//! is a [`TableEventError`] naming table, column and value.

use std::sync::Arc;

use bytes::Bytes;

use super::{Bound, Ctx, Source, TableEventError};
use crate::pgoutput::{Cell, TupleData};
use crate::router::debezium::{self, push_int};
use crate::router::mask::Mask;
use crate::router::txmeta::TxnMetadata;
use crate::router::{EventId, Record};

impl Ctx<'_> {
    pub(super) fn err(&self, column: usize, reason: String) -> TableEventError {
        TableEventError {
            table: self.bound.display.clone(),
            column: self
                .bound
                .columns
                .get(column)
                .map(|c| c.name.clone())
                .unwrap_or_else(|| format!("#{column}")),
            lsn: self.lsn,
            reason,
            fix: "a value refused by special_values = \"fail\" (an infinity date, timestamp \
                  or interval, one past 64-bit microseconds, an array with other bounds or of \
                  several dimensions) is written as Debezium writes it under special_values = \
                  \"write\" (the default), or as its text form under unmapped_types = \"text\", \
                  for this table; otherwise check the value's type and the session settings \
                  (DateStyle ISO, lc_monetary C), and report it as a bug if the value is valid"
                .into(),
        }
    }

    /// Writes the cell of column `i` to `out`.
    pub(super) fn cell(
        bound: &Bound,
        out: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
        i: usize,
        cell: Option<&Cell>,
    ) -> Result<(), (usize, String)> {
        let Some(column) = bound.columns.get(i) else {
            return Err((
                i,
                "the row has more columns than its Relation message".into(),
            ));
        };
        match cell {
            None | Some(Cell::Null) => out.extend_from_slice(b"null"),
            Some(Cell::UnchangedToast) => {
                debezium::write_placeholder(out, column.unchanged, &bound.placeholder)
            }
            Some(Cell::Text(text)) => {
                debezium::write_value(out, column.mapping, text, scratch).map_err(|e| (i, e.0))?
            }
            Some(Cell::Binary(_)) => {
                return Err((
                    i,
                    "the value came in binary format, which walrelay does not request".into(),
                ));
            }
        }
        Ok(())
    }

    /// Writes the cell of masked column `i` to `out`.
    pub(super) fn masked_cell(
        bound: &Bound,
        mask: &Mask,
        out: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
        i: usize,
        cell: Option<&Cell>,
    ) -> Result<(), (usize, String)> {
        let value = match cell {
            None | Some(Cell::Null) => None,
            Some(Cell::UnchangedToast) => Some(bound.placeholder.as_str()),
            Some(Cell::Text(text)) => Some(
                std::str::from_utf8(text)
                    .map_err(|_| (i, "the text value is not valid UTF-8".to_owned()))?,
            ),
            Some(Cell::Binary(_)) => {
                return Err((
                    i,
                    "the value came in binary format, which walrelay does not request".into(),
                ));
            }
        };
        mask.write(out, value, scratch).map_err(|e| (i, e))
    }

    /// Whether `row` has a value (not NULL) in every key column.
    pub(super) fn has_whole_key(&self, row: &TupleData) -> bool {
        self.bound.key.as_ref().is_some_and(|positions| {
            positions
                .iter()
                .all(|&i| matches!(row.get(i), Some(Cell::Text(_) | Cell::Binary(_))))
        })
    }

    /// The key of `row` as JSON bytes (`None`: a null key).
    pub(super) fn key_of(&mut self, row: &TupleData) -> Result<Option<Bytes>, TableEventError> {
        let Some(positions) = &self.bound.key else {
            return Ok(None);
        };
        self.key_buf.clear();
        self.key_buf.push(b'{');
        for (n, &i) in positions.iter().enumerate() {
            if n > 0 {
                self.key_buf.push(b',');
            }
            let column = &self.bound.columns[i];
            self.key_buf.extend_from_slice(&column.name_json);
            let start = self.key_buf.len();
            Self::cell(self.bound, self.key_buf, self.scratch, i, row.get(i))
                .map_err(|(i, why)| self.err(i, why))?;
            self.renumber(i, start, "key")?;
        }
        self.key_buf.push(b'}');
        Ok(Some(self.values.copy(self.key_buf)))
    }

    /// `json_schema`: column `i`'s value, written from `start` of the key
    /// (`part` "key") or the event, with its `Decimal`s as numbers.
    fn renumber(&mut self, i: usize, start: usize, part: &str) -> Result<(), TableEventError> {
        let Some(encoding) = &self.bound.encoding else {
            return Ok(());
        };
        let out = if part == "key" {
            &mut *self.key_buf
        } else {
            &mut *self.buf
        };
        encoding
            .renumber(i, out, start, self.scratch)
            .map_err(|e| encoding.renumber_error(self.bound, self.lsn, part, i, e))
    }

    /// Writes `row`, the event's `part` (`before`, `after`), taking a
    /// column's value from `fallback` where `row` has it as unchanged TOAST
    /// and `fallback` has it.
    pub(super) fn row_with(
        &mut self,
        row: Option<&TupleData>,
        fallback: Option<&TupleData>,
        part: &str,
    ) -> Result<(), TableEventError> {
        let Some(row) = row else {
            self.buf.extend_from_slice(b"null");
            return Ok(());
        };
        self.buf.push(b'{');
        let mut first = true;
        for (i, column) in self.bound.columns.iter().enumerate() {
            if !column.included {
                continue;
            }
            if !first {
                self.buf.push(b',');
            }
            first = false;
            self.buf.extend_from_slice(&column.name_json);
            let mut cell = row.get(i);
            if let (Some(Cell::UnchangedToast), Some(Cell::Text(_) | Cell::Binary(_))) =
                (cell, fallback.and_then(|f| f.get(i)))
            {
                cell = fallback.and_then(|f| f.get(i));
            }
            let start = self.buf.len();
            match &column.mask {
                None => Self::cell(self.bound, self.buf, self.scratch, i, cell),
                Some(mask) => Self::masked_cell(self.bound, mask, self.buf, self.scratch, i, cell),
            }
            .map_err(|(i, why)| self.err(i, why))?;
            self.renumber(i, start, part)?;
        }
        self.buf.push(b'}');
        Ok(())
    }

    /// The record of a change event or tombstone (`value` `None`) with
    /// event id `id`; under a registry format whose bodies the router
    /// writes as it makes them (`avro`, `json_schema`), with its schemas
    /// (`protobuf`'s are added by `encode_tail`, which re-encodes them).
    pub(super) fn record(&self, key: Option<Bytes>, value: Option<Bytes>, id: &Bytes) -> Record {
        let mut record = Record::with_event_id(
            self.bound.topic.clone(),
            key,
            value,
            self.headers(id),
            None,
            Some(EventId::Change(id.clone())),
        );
        record.schemas = self
            .bound
            .encoding
            .as_ref()
            .and_then(|e| e.written_schemas());
        record
    }

    pub(super) fn headers(&self, id: &Bytes) -> Vec<(Arc<str>, Bytes)> {
        vec![
            (self.headers.0.clone(), id.clone()),
            (self.headers.1.clone(), self.headers.2.clone()),
        ]
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn event(
        &mut self,
        op: u8,
        before: Option<&TupleData>,
        after: Option<&TupleData>,
        key_row: Option<&TupleData>,
        source: Source,
        id: &Bytes,
        out: &mut Vec<Record>,
    ) -> Result<(), TableEventError> {
        // Debezium's skipped.operations: per record, by its op (a key
        // change's delete and create count as a delete and a create).
        if self.bound.skipped.skips(op) {
            return Ok(());
        }
        // Transaction metadata: the event's place in its transaction, and
        // the transaction's BEGIN before its first event.
        let block = match (source, self.txmeta.as_deref_mut()) {
            (Source::Stream { txn, lsn }, Some(meta)) => {
                let Some(order) = meta.count(txn.commit_lsn, &self.bound.collection) else {
                    return Err(TableEventError {
                        table: self.bound.display.clone(),
                        column: "*".into(),
                        lsn: txn.commit_lsn,
                        reason: "a change outside the transaction the router was told began".into(),
                        fix: "report it as a bug".into(),
                    });
                };
                if order.total == 1 {
                    let headers = (self.headers.0, self.headers.1, self.headers.2.clone());
                    let begin = meta
                        .begin_record(self.buf, self.values, self.ids, headers)
                        .map_err(|e| super::txmeta_error(e, txn.commit_lsn))?;
                    out.extend(begin);
                }
                Some((order, lsn))
            }
            _ => None,
        };
        if let Some(encoding) = self.bound.encoding.as_ref().filter(|e| e.is_avro()) {
            return self.avro_event(encoding, op, before, after, key_row, source, block, id, out);
        }
        let key = match key_row {
            Some(row) => self.key_of(row)?,
            None => None,
        };
        self.buf.clear();
        self.buf.extend_from_slice(b"{\"before\":");
        self.row_with(before, None, "before")?;
        self.buf.extend_from_slice(b",\"after\":");
        // An unchanged TOASTed value is not in the new row; under REPLICA
        // IDENTITY FULL the old row carries it (Debezium writes it so).
        self.row_with(after, before, "after")?;
        let (ts_ms, snapshot, txid, lsn) = match source {
            Source::Stream { txn, lsn } => (txn.commit_ms, "false", Some(txn.xid), lsn),
            Source::Snapshot { lsn, ts_ms, marker } => (ts_ms, marker.as_str(), None, lsn),
        };
        let buf = &mut *self.buf;
        buf.extend_from_slice(b",\"source\":{\"version\":\"");
        buf.extend_from_slice(env!("CARGO_PKG_VERSION").as_bytes());
        buf.extend_from_slice(b"\",\"connector\":\"postgresql\",\"name\":");
        buf.extend_from_slice(self.prefix.name_json);
        buf.extend_from_slice(b",\"ts_ms\":");
        push_int(buf, ts_ms);
        buf.extend_from_slice(b",\"snapshot\":\"");
        buf.extend_from_slice(snapshot.as_bytes());
        buf.extend_from_slice(b"\",\"db\":");
        buf.extend_from_slice(self.prefix.db_json);
        buf.extend_from_slice(b",\"sequence\":\"[null,\\\"");
        push_int(buf, lsn.0);
        buf.extend_from_slice(b"\\\"]\"");
        buf.extend_from_slice(&self.bound.names_json);
        match txid {
            Some(x) => {
                buf.extend_from_slice(b",\"txId\":");
                push_int(buf, x);
            }
            None => buf.extend_from_slice(b",\"txId\":null"),
        }
        buf.extend_from_slice(b",\"lsn\":");
        push_int(buf, lsn.0);
        buf.extend_from_slice(b",\"xmin\":null},\"op\":\"");
        buf.push(op);
        buf.extend_from_slice(b"\",\"ts_ms\":");
        push_int(buf, ts_ms);
        buf.extend_from_slice(b",\"transaction\":");
        match block {
            Some((order, lsn)) => TxnMetadata::write_block(buf, order, lsn),
            None => buf.extend_from_slice(b"null"),
        }
        buf.push(b'}');
        let value = self.values.copy(buf);
        out.push(self.record(key, Some(value), id));
        Ok(())
    }

    pub(super) fn tombstone(
        &mut self,
        key_row: &TupleData,
        id: &Bytes,
        out: &mut Vec<Record>,
    ) -> Result<(), TableEventError> {
        // Skipping deletes skips their tombstones (Debezium sends the
        // tombstone with the delete).
        if self.bound.skipped.skips(b'd') {
            return Ok(());
        }
        let key = match self.avro_tombstone_key(key_row) {
            Some(key) => key?,
            None => self.key_of(key_row)?,
        };
        out.push(self.record(key, None, id));
        Ok(())
    }
}
