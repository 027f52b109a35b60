//! COPY text-format parsing: [`SnapshotRows`] turns the `COPY … TO STDOUT`
//! stream into batches of pgoutput-shaped rows, bounded by rows and bytes,
//! carrying at most one partial line between chunks. A malformed line is a
//! [`SnapshotError::Malformed`] naming the table and row, never a panic;
//! fields are slices of the line unless an escape needs decoding.

use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use tokio_postgres::CopyOutStream;

use crate::pgoutput::{Cell, TupleData};

use super::error::SnapshotError;

/// The rows of one [`SnapshotReader::read`](super::SnapshotReader::read), pulled in batches.
pub struct SnapshotRows<'r> {
    stream: Pin<Box<CopyOutStream>>,
    table: String,
    columns: usize,
    lines: LineSplitter,
    /// The batch being filled; kept here so `next_batch` is cancel-safe.
    batch: Vec<TupleData>,
    batch_bytes: usize,
    rows: u64,
    done: bool,
    /// Ties the rows to the reader's `&mut` borrow (its reads return
    /// `SnapshotRows<'_>`): one COPY at a time per connection.
    _reader: std::marker::PhantomData<&'r mut ()>,
}

impl std::fmt::Debug for SnapshotRows<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotRows")
            .field("table", &self.table)
            .field("rows", &self.rows)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<'r> SnapshotRows<'r> {
    /// The rows of `table` (`columns` cells each) as `stream` delivers them.
    pub(super) fn new(stream: CopyOutStream, table: String, columns: usize) -> SnapshotRows<'r> {
        SnapshotRows {
            stream: Box::pin(stream),
            table,
            columns,
            lines: LineSplitter::default(),
            batch: Vec::new(),
            batch_bytes: 0,
            rows: 0,
            done: false,
            _reader: std::marker::PhantomData,
        }
    }
    /// Rows yielded so far.
    pub fn rows_read(&self) -> u64 {
        self.rows
    }

    /// The next rows: at least one and at most `max_rows` (treated as 1 if
    /// 0), fewer when the row text read for this batch passes `max_bytes`;
    /// `None` once the table is read. Cancel-safe: rows parsed before the
    /// future is dropped are returned by the next call.
    pub async fn next_batch(
        &mut self,
        max_rows: usize,
        max_bytes: usize,
    ) -> Result<Option<Vec<TupleData>>, SnapshotError> {
        let max_rows = max_rows.max(1);
        loop {
            while self.batch.len() < max_rows
                && (self.batch.is_empty() || self.batch_bytes < max_bytes)
            {
                let Some(line) = self.lines.next_line() else {
                    break;
                };
                self.rows += 1;
                self.batch_bytes += line.len();
                let cells = parse_copy_line(&line).map_err(|reason| self.malformed(reason))?;
                if cells.len() != self.columns {
                    return Err(self.malformed(format!(
                        "it has {} columns, the table has {}",
                        cells.len(),
                        self.columns
                    )));
                }
                self.batch.push(TupleData(cells));
            }
            let full = self.batch.len() >= max_rows
                || (!self.batch.is_empty() && self.batch_bytes >= max_bytes);
            if full || self.done {
                if self.done && self.lines.has_partial() {
                    self.rows += 1;
                    return Err(self.malformed("the stream ended inside a row".to_owned()));
                }
                self.batch_bytes = 0;
                let batch = std::mem::take(&mut self.batch);
                return Ok(if batch.is_empty() { None } else { Some(batch) });
            }
            match self.stream.next().await {
                Some(Ok(chunk)) => self.lines.push(chunk),
                Some(Err(source)) => {
                    return Err(SnapshotError::Query {
                        table: self.table.clone(),
                        context: "reading COPY data",
                        source,
                    });
                }
                None => self.done = true,
            }
        }
    }

    fn malformed(&self, reason: String) -> SnapshotError {
        SnapshotError::Malformed {
            table: self.table.clone(),
            row: self.rows,
            reason,
        }
    }
}

/// Cuts the COPY stream's chunks into lines. The server sends one row per
/// chunk, but the protocol does not promise it: a row may span chunks and a
/// chunk may hold several rows. Lines within one chunk are zero-copy slices
/// of it; only a row split across chunks is copied.
#[derive(Debug, Default)]
pub(super) struct LineSplitter {
    /// Unsplit rest of the newest chunk.
    chunk: Bytes,
    /// The start of a line whose end has not arrived yet.
    partial: BytesMut,
}

impl LineSplitter {
    /// Adds the next chunk; call once [`LineSplitter::next_line`] returned
    /// `None` (before that, the rest of the previous chunk could still hold
    /// whole lines).
    pub(super) fn push(&mut self, chunk: Bytes) {
        if !self.chunk.is_empty() {
            self.partial.extend_from_slice(&self.chunk);
        }
        self.chunk = chunk;
    }

    /// The next complete line, without its newline.
    pub(super) fn next_line(&mut self) -> Option<Bytes> {
        match self.chunk.iter().position(|b| *b == b'\n') {
            Some(end) => {
                let mut line = self.chunk.split_to(end + 1);
                line.truncate(end);
                if self.partial.is_empty() {
                    Some(line)
                } else {
                    self.partial.extend_from_slice(&line);
                    Some(self.partial.split().freeze())
                }
            }
            None => {
                if !self.chunk.is_empty() {
                    self.partial.extend_from_slice(&self.chunk);
                    self.chunk = Bytes::new();
                }
                None
            }
        }
    }

    /// Whether bytes of an unfinished line are held.
    pub(super) fn has_partial(&self) -> bool {
        !self.partial.is_empty() || !self.chunk.is_empty()
    }
}

/// Splits one line of `COPY … TO STDOUT` text format (without its newline)
/// into cells: fields are tab separated, `\N` alone is NULL, and backslash
/// escapes are decoded (`\b \f \n \r \t \v \\`, octal `\o`–`\ooo`, hex
/// `\xh`/`\xhh`; any other escaped character stands for itself, as COPY
/// FROM reads it). A field without escapes is a zero-copy slice of `line`.
/// A backslash at the end of a field is an error.
pub fn parse_copy_line(line: &Bytes) -> Result<Vec<Cell>, String> {
    let mut cells = Vec::new();
    let mut start = 0;
    for (i, field) in line.split(|b| *b == b'\t').enumerate() {
        let end = start + field.len();
        cells.push(if field == b"\\N" {
            Cell::Null
        } else if !field.contains(&b'\\') {
            Cell::Text(line.slice(start..end))
        } else {
            Cell::Text(unescape_field(field).map_err(|why| format!("column {i}: {why}"))?)
        });
        start = end + 1;
    }
    Ok(cells)
}

pub(super) fn unescape_field(field: &[u8]) -> Result<Bytes, String> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while let Some(&b) = field.get(i) {
        i += 1;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let Some(&c) = field.get(i) else {
            return Err("a backslash ends the field".to_owned());
        };
        i += 1;
        let decoded = match c {
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'v' => 0x0b,
            b'0'..=b'7' => {
                let mut value = u32::from(c - b'0');
                for _ in 0..2 {
                    match field.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            value = value * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                (value & 0xff) as u8
            }
            b'x' => match field.get(i).and_then(|d| hex_digit(*d)) {
                None => b'x',
                Some(high) => {
                    i += 1;
                    match field.get(i).and_then(|d| hex_digit(*d)) {
                        Some(low) => {
                            i += 1;
                            (high << 4) | low
                        }
                        None => high,
                    }
                }
            },
            other => other,
        };
        out.push(decoded);
    }
    Ok(Bytes::from(out))
}

pub(super) fn hex_digit(d: u8) -> Option<u8> {
    match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        b'A'..=b'F' => Some(d - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
