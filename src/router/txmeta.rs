//! Transaction metadata of table events: Debezium's
//! `provide.transaction.metadata` (`[table_defaults]
//! provide_transaction_metadata = true`), as Debezium 3.6.1's PostgreSQL
//! connector writes it with the JSON converter (`schemas.enable=false`).
//!
//! For a transaction with at least one streamed table event:
//! - a **BEGIN** record on `<topic_prefix>.transaction` before its first
//!   event: key `{"id":"<xid>:<lsn>"}`, value
//!   `{"status":"BEGIN","id":"<xid>:<lsn>","event_count":null,"data_collections":null,"ts_ms":<commit time>}`,
//!   `<lsn>` the Begin message's position ([`crate::source::SourceEvent::Begin`]);
//! - each event's `transaction` block:
//!   `{"id":"<xid>:<the event's source.lsn>","total_order":n,"data_collection_order":m}`
//!   (`n` counts the transaction's events, `m` its table's; 1-based);
//! - an **END** record after its last event: key `{"id":"<xid>:<end LSN>"}`,
//!   value `{"status":"END","id":"<xid>:<end LSN>","event_count":n,"data_collections":[{"data_collection":"<schema>.<table>","event_count":m},…],"ts_ms":<commit time>}`.
//!
//! That the `id` names a different LSN in each of them is Debezium's doing
//! (its `PostgresTransactionMonitor` appends the position it last saw), and
//! so is the order of `data_collections`: a Java `HashMap`'s iteration order
//! (`java_hashmap_order`). Tombstones are not events (no value); snapshot
//! rows have no transaction (`transaction` null, no BEGIN/END), as in
//! Debezium.
//!
//! With `[table_defaults] format = "avro" | "json_schema"` the BEGIN and
//! END records carry those keys and values as bodies under Debezium's
//! transaction metadata schemas (`encode.rs`), whose ids `sink::registry`
//! adds; the events' `transaction` blocks are in their envelope's schema.
//!
//! Unlike Debezium, a transaction without a table event writes no BEGIN
//! and END (Debezium writes both, `event_count` 0, for every transaction
//! pgoutput sends it: one that touches an outbox table or a published
//! table it does not capture, or only skipped operations).
//!
//! Invariants:
//! - **Stable identity.** Both records depend only on the transaction
//!   (xid, Begin position, commit and end LSN, commit time) and its events,
//!   never on a clock: a re-sent transaction gives the same bytes.
//!   `walrelay.event_id` is `<commit LSN>:begin` / `<commit LSN>:end`,
//!   `walrelay.lsn` the commit LSN, as on its events.
//! - **Bounded memory.** Per transaction: one counter per table it
//!   touched, never per row.
//! - Pure: no I/O, no clock.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::Arc;

use bytes::Bytes;

use super::arena::Arena;
use super::debezium;
use super::schema::SchemaKind;
use super::table::schemas::body::BodyError;
use super::{EventId, Record};
use crate::Lsn;

mod encode;

/// The transaction topic's name after the prefix (Debezium's
/// `topic.transaction` default).
pub const TOPIC_SUFFIX: &str = ".transaction";

/// The transaction whose events are being routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Open {
    xid: u32,
    /// The Begin message's position.
    begin_lsn: Lsn,
    commit_lsn: Lsn,
    commit_ms: i64,
}

/// One event's place in its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Order {
    pub xid: u32,
    /// 1 for the transaction's first event (then a BEGIN goes before it).
    pub total: u64,
    /// 1 for its table's first event in the transaction.
    pub in_table: u64,
}

/// Where the counts stood before a change (`TxnMetadata::mark`), to
/// undo a change that could not be published whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    total: u64,
    tables: usize,
    /// The change's table: its place in `tables` and its count then.
    table: Option<(usize, u64)>,
}

/// The transaction metadata state: the open transaction and its counts.
#[derive(Debug)]
pub(super) struct TxnMetadata {
    topic: Arc<str>,
    open: Option<Open>,
    /// Events per table (`schema.table`), in the order the tables first
    /// had one.
    tables: Vec<(Arc<str>, u64)>,
    /// Where each table is in `tables`.
    index: HashMap<Arc<str>, usize>,
    total: u64,
    /// `avro` / `json_schema`: the BEGIN/END records' schemas.
    encoding: Option<encode::Encoding>,
}

impl TxnMetadata {
    /// For table events with topic prefix `prefix`, BEGIN/END records as
    /// JSON (`kind` `None`) or under a registry's schemas of `kind`.
    pub fn new(prefix: &str, kind: Option<SchemaKind>) -> TxnMetadata {
        TxnMetadata {
            topic: Arc::from(format!("{prefix}{TOPIC_SUFFIX}")),
            open: None,
            tables: Vec::new(),
            index: HashMap::new(),
            total: 0,
            encoding: kind.map(encode::Encoding::new),
        }
    }

    /// A transaction begins (its Begin message at `begin_lsn`): counts
    /// start over.
    pub fn begin(&mut self, xid: u32, begin_lsn: Lsn, commit_lsn: Lsn, commit_ms: i64) {
        self.open = Some(Open {
            xid,
            begin_lsn,
            commit_lsn,
            commit_ms,
        });
        self.tables.clear();
        self.index.clear();
        self.total = 0;
    }

    /// Counts one event of table `collection` in the transaction committed
    /// at `commit_lsn`; `None` when that is not the open transaction (the
    /// caller's bug: every change comes between its Begin and Commit).
    pub fn count(&mut self, commit_lsn: Lsn, collection: &Arc<str>) -> Option<Order> {
        let open = self.open.filter(|o| o.commit_lsn == commit_lsn)?;
        self.total += 1;
        let in_table = match self.index.get(collection) {
            Some(&i) => {
                let n = &mut self.tables[i].1;
                *n += 1;
                *n
            }
            None => {
                self.index.insert(collection.clone(), self.tables.len());
                self.tables.push((collection.clone(), 1));
                1
            }
        };
        Some(Order {
            xid: open.xid,
            total: self.total,
            in_table,
        })
    }

    /// Where the counts stand before a change of table `collection`.
    pub fn mark(&self, collection: &Arc<str>) -> Mark {
        Mark {
            total: self.total,
            tables: self.tables.len(),
            table: self.index.get(collection).map(|&i| (i, self.tables[i].1)),
        }
    }

    /// Back to `mark` (taken in the same transaction, before one change):
    /// its events are not counted, and a table it added is gone.
    pub fn undo(&mut self, mark: Mark) {
        self.total = mark.total;
        while self.tables.len() > mark.tables {
            if let Some((name, _)) = self.tables.pop() {
                self.index.remove(&name);
            }
        }
        if let Some((i, n)) = mark.table
            && let Some(entry) = self.tables.get_mut(i)
        {
            entry.1 = n;
        }
    }

    /// Writes an event's `transaction` block (after `"transaction":`).
    pub fn write_block(out: &mut Vec<u8>, order: Order, lsn: Lsn) {
        let _ = write!(
            out,
            "{{\"id\":\"{}:{}\",\"total_order\":{},\"data_collection_order\":{}}}",
            order.xid, lsn.0, order.total, order.in_table
        );
    }

    /// The BEGIN record of the open transaction (`lsn_header`: the commit
    /// LSN's text, as on its events); an error only when its JSON does not
    /// fit the registry format's schema (a bug).
    pub fn begin_record(
        &self,
        buf: &mut Vec<u8>,
        values: &mut Arena,
        ids: &mut Arena,
        headers: (&Arc<str>, &Arc<str>, Bytes),
    ) -> Result<Option<Record>, BodyError> {
        let Some(open) = self.open else {
            return Ok(None);
        };
        buf.clear();
        let _ = write!(buf, "{{\"id\":\"{}:{}\"}}", open.xid, open.begin_lsn.0);
        let key = values.copy(buf);
        buf.clear();
        let _ = write!(
            buf,
            "{{\"status\":\"BEGIN\",\"id\":\"{}:{}\",\"event_count\":null,\
             \"data_collections\":null,\"ts_ms\":{}}}",
            open.xid, open.begin_lsn.0, open.commit_ms
        );
        let value = values.copy(buf);
        let id = ids.format(format_args!("{}:begin", open.commit_lsn));
        self.record(key, value, values, id, headers).map(Some)
    }

    /// Ends the open transaction, committed at `commit_lsn` and ending at
    /// `end_lsn`: its END record if it had an event (`None` otherwise, or
    /// when `commit_lsn` is not the open transaction); an error as for
    /// [`TxnMetadata::begin_record`].
    pub fn end_record(
        &mut self,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        buf: &mut Vec<u8>,
        values: &mut Arena,
        ids: &mut Arena,
        headers: (&Arc<str>, &Arc<str>, Bytes),
    ) -> Result<Option<Record>, BodyError> {
        let Some(open) = self.open.take().filter(|o| o.commit_lsn == commit_lsn) else {
            return Ok(None);
        };
        if self.total == 0 {
            return Ok(None);
        }
        buf.clear();
        let _ = write!(buf, "{{\"id\":\"{}:{}\"}}", open.xid, end_lsn.0);
        let key = values.copy(buf);
        buf.clear();
        let _ = write!(
            buf,
            "{{\"status\":\"END\",\"id\":\"{}:{}\",\"event_count\":{},\"data_collections\":[",
            open.xid, end_lsn.0, self.total
        );
        let order = java_hashmap_order(self.tables.iter().map(|(name, _)| &**name));
        for (n, &i) in order.iter().enumerate() {
            let (name, count) = &self.tables[i];
            if n > 0 {
                buf.push(b',');
            }
            buf.extend_from_slice(b"{\"data_collection\":");
            debezium::json_str(buf, name);
            let _ = write!(buf, ",\"event_count\":{count}}}");
        }
        let _ = write!(buf, "],\"ts_ms\":{}}}", open.commit_ms);
        let value = values.copy(buf);
        let id = ids.format(format_args!("{}:end", open.commit_lsn));
        self.record(key, value, values, id, headers).map(Some)
    }

    /// The record of the JSON `key` and `value`: as they are, or their
    /// bodies under the registry format's schemas.
    fn record(
        &self,
        key: Bytes,
        value: Bytes,
        values: &mut Arena,
        id: Bytes,
        (id_header, lsn_header, lsn): (&Arc<str>, &Arc<str>, Bytes),
    ) -> Result<Record, BodyError> {
        let (key, value) = match &self.encoding {
            Some(encoding) => encoding.bodies(key, value, values)?,
            None => (key, value),
        };
        let event_id = Some(EventId::Change(id.clone()));
        let mut record = Record::with_event_id(
            self.topic.clone(),
            Some(key),
            Some(value),
            vec![(id_header.clone(), id), (lsn_header.clone(), lsn)],
            None,
            event_id,
        );
        if let Some(encoding) = &self.encoding {
            record.schemas = Some(encoding.schemas().clone());
        }
        Ok(record)
    }
}

/// The order a Java `HashMap<String, _>` iterates keys put one by one in
/// `keys`' order (each once): the indices of `keys`, by bucket and, within
/// a bucket, by insertion — as `java.util.HashMap` (capacity 16, load
/// factor 0.75) lays them out: it doubles its table when it holds more
/// than ¾ of its capacity, and when a bucket would hold a ninth key while
/// the table is smaller than 64; a resize keeps each bucket's order. A
/// bucket of nine keys or more in a table of 64 or more becomes a tree,
/// whose order this does not model (insertion order is kept): nine table
/// names of one transaction in one bucket.
pub(super) fn java_hashmap_order<'a>(keys: impl Iterator<Item = &'a str>) -> Vec<usize> {
    let hashes: Vec<u32> = keys
        .map(|k| {
            let h = debezium::java_hash(k) as u32;
            h ^ (h >> 16)
        })
        .collect();
    let mut capacity: u32 = 16;
    let mut per_bucket: Vec<u32> = vec![0; capacity as usize];
    let recount = |capacity: u32, upto: usize, per_bucket: &mut Vec<u32>| {
        per_bucket.clear();
        per_bucket.resize(capacity as usize, 0);
        for h in &hashes[..upto] {
            per_bucket[(h & (capacity - 1)) as usize] += 1;
        }
    };
    for (n, h) in hashes.iter().enumerate() {
        let bucket = (h & (capacity - 1)) as usize;
        // putVal: a ninth key in a bucket treeifies it, or (table under
        // 64) doubles the table instead.
        if per_bucket[bucket] >= 8 && capacity < 64 {
            capacity *= 2;
            recount(capacity, n, &mut per_bucket);
        }
        per_bucket[(h & (capacity - 1)) as usize] += 1;
        // ++size > threshold (¾ of the capacity).
        if n + 1 > (capacity as usize) / 4 * 3 && capacity < 1 << 30 {
            capacity *= 2;
            recount(capacity, n + 1, &mut per_bucket);
        }
    }
    let mut order: Vec<usize> = (0..hashes.len()).collect();
    // Stable: within a bucket, insertion order.
    order.sort_by_key(|&i| hashes[i] & (capacity - 1));
    order
}

#[cfg(test)]
mod tests;
