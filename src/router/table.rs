//! Table change events: row changes of `[[table]]` tables → Kafka records
//! in Debezium's change-event format (the JSON converter's output with
//! `schemas.enable=false`), so consumers written for Debezium's PostgreSQL
//! connector read them unchanged.
//!
//! One change becomes:
//! - insert → `op: "c"` (`before` null, `after` the row);
//! - update → `op: "u"` (`before` the old row when PostgreSQL sent one: the
//!   whole row under REPLICA IDENTITY FULL, nothing under DEFAULT); when
//!   the key changed, Debezium's delete + tombstone + create instead;
//! - delete → `op: "d"` (`before` the old key columns under DEFAULT, the
//!   whole row under FULL), then a tombstone (same key, null value) unless
//!   `tombstones_on_delete = false`;
//! - snapshot row → `op: "r"` with `source.snapshot` as Debezium 3.6 writes
//!   it ([`SnapshotMarker`]: `"first"`, `"first_in_data_collection"`,
//!   `"true"`, `"last_in_data_collection"`, `"last"`; the caller knows the
//!   row's place);
//! - truncate → `op: "t"` per truncated table, null key, null
//!   `before`/`after` — only when `skipped_operations` does not skip `t`
//!   (Debezium's default does).
//!
//! With `provide_transaction_metadata`, a transaction's streamed events
//! carry their `transaction` block and are framed by its BEGIN and END
//! records on `<prefix>.transaction` ([`super::txmeta`]: BEGIN with its
//! first event, END from [`TableRouter::on_commit`]; told of each
//! transaction by [`TableRouter::on_begin`]).
//!
//! `skipped_operations` drops records by their op (`c`, `u`, `d` with its
//! tombstone, `t`), as Debezium's `EventDispatcher` does; snapshot rows are
//! never skipped. The column lists leave columns out of `before`/`after`
//! and masks ([`super::mask`]) rewrite them there; the key keeps its
//! columns unmasked, as Debezium's does.
//!
//! Key: the primary key's columns (told by [`TableRouter::set_primary_key`]
//! from the catalog, else the relation's replica-identity columns), the
//! replica identity index's columns under REPLICA IDENTITY USING INDEX (a
//! delete's old row holds nothing else), or the configured `key_columns`,
//! as a JSON object; none → a null key. A key column outside a (non-FULL)
//! replica identity is refused unless deletes are skipped: deletes would be
//! keyed by null.
//!
//! Invariants:
//! - **Stable identity.** A record depends only on the change (its row, its
//!   commit LSN, xid, commit time and index), never on a clock or on what
//!   was sent before: a re-sent change has the same topic, key, value and
//!   headers. `walrelay.event_id` = `<commit LSN>:<index>` (plus a suffix
//!   for the extra records of one change; `<commit LSN>:begin` / `:end`
//!   for the transaction records), `walrelay.lsn` = commit LSN.
//!   The top-level `ts_ms` is the commit time for this reason (Debezium
//!   writes its processing time there).
//! - **The newest shape wins.** Each Relation message re-binds its table,
//!   so a column added or dropped mid-stream changes the records from that
//!   change on; rows keep the shape they were decoded with.
//! - **Never guess.** A column of a type we do not map, a `key_columns`
//!   entry the table lacks, a mask on a column that is not text-like, or a
//!   value we cannot read is a
//!   [`TableEventError`] naming table, column, type or value and the fix —
//!   reported when the Relation message arrives where possible.
//! - Pure: no I/O, no clock; one reusable buffer for all JSON, and the
//!   record bytes are slices of two [`super::arena::Arena`]s (no allocation
//!   per record or per field).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::Record;
use super::arena::Arena;
use super::debezium::{self, Mapping, Modes, Unchanged};
use super::mask::Mask;
use super::txmeta::TxnMetadata;
use crate::Lsn;
use crate::config::{ColumnFilter, Config, SkippedOperations, TableConfig, TableFormat};
use crate::pgoutput::{Oid, TupleData};
use crate::source::{Change, Op};

mod bind;
mod encode;
mod event;
pub(crate) mod schemas;

pub use bind::{check_columns, describe_columns, key_columns, key_outside_identity};

/// Header carrying a table event's stable id.
pub const EVENT_ID_HEADER: &str = "walrelay.event_id";
/// Header carrying the transaction's commit LSN (as on outbox records).
pub const LSN_HEADER: &str = "walrelay.lsn";

/// A change that cannot become a table event. The connector stops on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot make a change event for table {table} (column {column}, at {lsn}): {reason}; {fix}"
)]
pub struct TableEventError {
    pub table: String,
    pub column: String,
    pub lsn: Lsn,
    pub reason: String,
    pub fix: String,
}

/// What the transaction of a change tells the event (Debezium's `source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnInfo {
    pub commit_lsn: Lsn,
    pub xid: u32,
    /// Commit time, milliseconds since 1970.
    pub commit_ms: i64,
}

/// One `[[table]]` entry with its options resolved against `[table_defaults]`.
#[derive(Debug)]
struct Entry {
    /// Its index in the file (`table[i]`).
    index: usize,
    config: TableConfig,
    skipped: SkippedOperations,
    modes: Modes,
    tombstones: bool,
    placeholder: String,
    /// `table_defaults`' column lists (used when the entry has none).
    default_columns: Option<Arc<ColumnFilter>>,
    /// `format`: JSON, or Avro / JSON Schema with a registry.
    format: TableFormat,
}

#[derive(Debug)]
struct BoundColumn {
    name: String,
    /// Its type (a user type resolved to what it is written as) and
    /// modifier: what its registry schema is made of.
    oid: Oid,
    typmod: i32,
    /// `"name":`, escaped once.
    name_json: Box<[u8]>,
    mapping: Mapping,
    /// Whether it is in `before`/`after` (the column lists); the key has
    /// its columns regardless, as Debezium's does.
    included: bool,
    /// Its mask in `before`/`after` (never in the key, as in Debezium).
    mask: Option<Mask>,
    /// What an unchanged TOASTed value of the column becomes (by the
    /// column's own type: an enum array is written as `text[]` but its
    /// placeholder is not a text array's).
    unchanged: Unchanged,
    /// Its declared type (an enum's own oid, for its labels).
    type_oid: Oid,
    /// Required in the registry schemas unless the stream shows a NULL
    /// (see `schemas`' module doc).
    required: bool,
}

/// A captured relation's columns, key and topic.
#[derive(Debug)]
struct Bound {
    display: String,
    /// `schema.table` as Debezium names the table in transaction metadata
    /// (`data_collection`).
    collection: Arc<str>,
    topic: Arc<str>,
    columns: Vec<BoundColumn>,
    /// Key column positions; `None`: a null key.
    key: Option<Vec<usize>>,
    tombstones: bool,
    skipped: SkippedOperations,
    placeholder: String,
    /// `,"schema":"…","table":"…"` for `source`.
    names_json: Box<[u8]>,
    /// `format = "avro" | "json_schema"`: its schemas.
    encoding: Option<encode::Encoding>,
    /// Its old rows hold every column (REPLICA IDENTITY FULL), so a NULL
    /// in one is a NULL, not an absent value.
    old_rows_whole: bool,
}

/// The table router (see the module doc).
#[derive(Debug)]
pub struct TableRouter {
    entries: Vec<Entry>,
    /// `"name":"<prefix>"`-ready pieces of `source`.
    prefix: String,
    /// `,"snapshot":` prefix pieces, with `db` escaped once.
    db_json: Box<[u8]>,
    database: String,
    name_json: Box<[u8]>,
    primary_keys: HashMap<(String, String), Vec<String>>,
    /// User-defined type oid → (type it is written as, type modifier).
    type_aliases: HashMap<Oid, (Oid, i32)>,
    /// The catalog's `NOT NULL` columns of `(schema, table)`.
    not_null: HashMap<(String, String), Vec<String>>,
    /// Columns of a relation the stream showed NULL in although the
    /// catalog said `NOT NULL`: optional until the next start.
    widened: HashMap<Oid, Vec<String>>,
    /// Enum array columns of a relation the stream showed a NULL element
    /// in: their items optional until the next start.
    widened_items: HashMap<Oid, Vec<String>>,
    /// Type oid (an enum, an array of one, a domain over one) → its enum's
    /// labels (the catalog's, in `enumsortorder`, then those the stream
    /// showed in its columns since).
    enum_labels: HashMap<Oid, Vec<String>>,
    /// What the operator should read once (a schema widened by the
    /// stream), until taken.
    notices: Vec<String>,
    bound: HashMap<Oid, Result<Bound, TableEventError>>,
    buf: Vec<u8>,
    key_buf: Vec<u8>,
    scratch: Vec<u8>,
    /// Keys and values: dropped once handed to the sink.
    values: Arena,
    /// Event ids and LSN texts: kept in delivery tokens until Kafka
    /// acknowledges them, so not beside the values (see [`Arena`]).
    ids: Arena,
    event_id_header: Arc<str>,
    lsn_header: Arc<str>,
    lsn_text: (Lsn, Bytes),
    /// `provide_transaction_metadata`: the open transaction's counts.
    txmeta: Option<TxnMetadata>,
}

impl TableRouter {
    /// A router for the `[[table]]` sections of `config`.
    pub fn new(config: &Config) -> TableRouter {
        let d = &config.table_defaults;
        // Validated with the config: an expression that does not compile
        // never gets here.
        let default_columns = d.column_filter().ok().flatten().map(Arc::new);
        let entries = config
            .tables
            .iter()
            .enumerate()
            .map(|(index, t)| Entry {
                index,
                skipped: t.skipped_operations.unwrap_or(d.skipped_operations),
                modes: Modes {
                    decimal: t.decimal_handling_mode.unwrap_or(d.decimal_handling_mode),
                    time: t.time_precision_mode.unwrap_or(d.time_precision_mode),
                    binary: t.binary_handling_mode.unwrap_or(d.binary_handling_mode),
                    interval: t.interval_handling_mode.unwrap_or(d.interval_handling_mode),
                    unmapped: t.unmapped_types.unwrap_or(d.unmapped_types),
                    special: t.special_values.unwrap_or(d.special_values),
                },
                tombstones: t.tombstones_on_delete.unwrap_or(d.tombstones_on_delete),
                placeholder: t
                    .unavailable_value_placeholder
                    .clone()
                    .unwrap_or_else(|| d.unavailable_value_placeholder.clone()),
                config: t.clone(),
                default_columns: default_columns.clone(),
                format: t.format.unwrap_or(d.format),
            })
            .collect();
        let json = |s: &str| {
            let mut v = Vec::new();
            debezium::json_str(&mut v, s);
            v.into_boxed_slice()
        };
        TableRouter {
            entries,
            prefix: config.topic_prefix().to_owned(),
            db_json: json(&config.postgres.database),
            database: config.postgres.database.clone(),
            name_json: json(config.topic_prefix()),
            primary_keys: HashMap::new(),
            type_aliases: HashMap::new(),
            not_null: HashMap::new(),
            widened: HashMap::new(),
            widened_items: HashMap::new(),
            enum_labels: HashMap::new(),
            notices: Vec::new(),
            bound: HashMap::new(),
            buf: Vec::with_capacity(1024),
            key_buf: Vec::with_capacity(64),
            scratch: Vec::new(),
            // Chunks of 1 KiB or more are taken from glibc's large bins,
            // and each such allocation first consolidates the allocator's
            // free lists: fewer, bigger chunks make that rare (1% of the
            // streaming thread with 64 KiB values and 4 KiB ids).
            values: Arena::new(256 * 1024),
            ids: Arena::new(64 * 1024),
            event_id_header: Arc::from(EVENT_ID_HEADER),
            lsn_header: Arc::from(LSN_HEADER),
            lsn_text: (Lsn::ZERO, Bytes::new()),
            // BEGIN/END records in the connector's format (validation
            // refuses a [[table]] of another one with them).
            txmeta: d.provide_transaction_metadata.then(|| {
                let kind = match d.format {
                    TableFormat::Json => None,
                    TableFormat::Avro => Some(super::schema::SchemaKind::Avro),
                    TableFormat::JsonSchema => Some(super::schema::SchemaKind::Json),
                    TableFormat::Protobuf => Some(super::schema::SchemaKind::Protobuf),
                };
                TxnMetadata::new(config.topic_prefix(), kind)
            }),
        }
    }

    /// Whether BEGIN/END records and `transaction` blocks are written
    /// (`provide_transaction_metadata`).
    pub fn provides_transaction_metadata(&self) -> bool {
        self.txmeta.is_some()
    }

    /// A transaction begins; `begin_lsn` is its Begin message's position.
    /// With `provide_transaction_metadata` its events are counted from here
    /// (and its first one is preceded by a BEGIN record); otherwise nothing.
    pub fn on_begin(&mut self, txn: TxnInfo, begin_lsn: Lsn) {
        if let Some(meta) = &mut self.txmeta {
            meta.begin(txn.xid, begin_lsn, txn.commit_lsn, txn.commit_ms);
        }
    }

    /// The transaction committed at `commit_lsn` ends at `end_lsn`: appends
    /// its END record to `out` when it had a table event and
    /// `provide_transaction_metadata` is on. An error only when the record
    /// does not fit its registry format's schema (a bug).
    pub fn on_commit(
        &mut self,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        out: &mut Vec<Record>,
    ) -> Result<(), TableEventError> {
        if self.txmeta.is_none() {
            return Ok(());
        }
        let lsn_text = self.lsn_text(commit_lsn);
        let Some(meta) = &mut self.txmeta else {
            return Ok(());
        };
        let headers = (&self.event_id_header, &self.lsn_header, lsn_text);
        let end = meta
            .end_record(
                commit_lsn,
                end_lsn,
                &mut self.buf,
                &mut self.values,
                &mut self.ids,
                headers,
            )
            .map_err(|e| txmeta_error(e, commit_lsn))?;
        out.extend(end);
        Ok(())
    }

    /// Whether any `[[table]]` is configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a `[[table]]` entry captures `schema.name`.
    pub fn captures(&self, schema: &str, name: &str) -> bool {
        self.entries.iter().any(|e| e.config.matches(schema, name))
    }

    /// Tells the primary key of `schema.name` (from the catalog): the key
    /// of its events unless `key_columns` is set or the table has REPLICA
    /// IDENTITY USING INDEX ([`key_columns`]). Without it the relation's
    /// replica-identity columns are used (the primary key under REPLICA
    /// IDENTITY DEFAULT).
    pub fn set_primary_key(&mut self, schema: &str, name: &str, columns: Vec<String>) {
        self.primary_keys
            .insert((schema.to_owned(), name.to_owned()), columns);
    }

    /// Tells the columns of `schema.name` the catalog calls `NOT NULL`:
    /// required in the registry schemas where every event holds their
    /// value (see `schemas`' module doc).
    pub fn set_not_null(&mut self, schema: &str, name: &str, columns: Vec<String>) {
        self.not_null
            .insert((schema.to_owned(), name.to_owned()), columns);
    }

    /// Tells the labels of type `oid` — an enum, an array of one (its
    /// element type's), a domain over one (its base type's): the catalog's
    /// `pg_enum`, in `enumsortorder` — its columns' `allowed` parameter.
    pub fn set_enum_labels(&mut self, oid: Oid, labels: Vec<String>) {
        self.enum_labels.insert(oid, labels);
    }

    /// What happened since the last call that the operator should read
    /// once: a column's or an enum's schema widened by what the stream
    /// holds (see `encode`'s module doc).
    pub fn take_notices(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notices)
    }

    /// Tells that values of user-defined type `oid` are written as type
    /// `as_oid` with modifier `typmod` (an enum as `text`, a domain as its
    /// base type; from the catalog).
    pub fn set_type_alias(&mut self, oid: Oid, as_oid: Oid, typmod: i32) {
        self.type_aliases.insert(oid, (as_oid, typmod));
    }

    /// The topic of relation `oid`'s events, once it is bound.
    pub fn topic_of(&self, oid: Oid) -> Option<Arc<str>> {
        match self.bound.get(&oid) {
            Some(Ok(b)) => Some(b.topic.clone()),
            _ => None,
        }
    }

    /// The names of the columns keying relation `oid`'s events (empty: a
    /// null key), once it is bound without error.
    pub fn key_names(&self, oid: Oid) -> Option<Vec<&str>> {
        match self.bound.get(&oid) {
            Some(Ok(b)) => Some(
                b.key
                    .iter()
                    .flatten()
                    .filter_map(|&i| b.columns.get(i))
                    .map(|c| c.name.as_str())
                    .collect(),
            ),
            _ => None,
        }
    }

    /// Whether changes of relation `oid` are table events.
    pub fn claims(&self, oid: Oid) -> bool {
        self.bound.contains_key(&oid)
    }

    /// Appends the records of one change of a claimed relation to `out`
    /// (none for a relation no `[[table]]` captures).
    /// On an error nothing is appended, and the transaction metadata is
    /// as before the change (so a caller that goes on without it — a
    /// dead-letter path — counts only what it publishes).
    pub fn on_change(
        &mut self,
        change: &Change,
        txn: TxnInfo,
        out: &mut Vec<Record>,
    ) -> Result<(), TableEventError> {
        let (mark, len) = (self.txmeta_mark(change.relation.oid), out.len());
        let (old, new) = (change.old.as_ref(), change.new.as_ref());
        self.widen_to(change.relation.oid, old, new, txn.commit_lsn);
        let made = self
            .change_records(change, txn, out)
            .and_then(|()| self.encode_tail(change.relation.oid, txn.commit_lsn, out, len));
        if made.is_err() {
            self.txmeta_undo(mark);
            out.truncate(len);
        }
        made
    }

    /// Where the transaction metadata stands before a change of relation
    /// `rel` (`None` without it, or for a relation not bound).
    fn txmeta_mark(&self, rel: Oid) -> Option<super::txmeta::Mark> {
        let meta = self.txmeta.as_ref()?;
        let bound = self.bound.get(&rel)?.as_ref().ok()?;
        Some(meta.mark(&bound.collection))
    }

    fn txmeta_undo(&mut self, mark: Option<super::txmeta::Mark>) {
        if let (Some(meta), Some(mark)) = (&mut self.txmeta, mark) {
            meta.undo(mark);
        }
    }

    fn change_records(
        &mut self,
        change: &Change,
        txn: TxnInfo,
        out: &mut Vec<Record>,
    ) -> Result<(), TableEventError> {
        if !self.bound.contains_key(&change.relation.oid) {
            return Ok(());
        }
        let lsn_text = self.lsn_text(txn.commit_lsn);
        let bound = match self.bound.get(&change.relation.oid) {
            None => return Ok(()),
            Some(Err(e)) => {
                let mut e = e.clone();
                e.lsn = txn.commit_lsn;
                return Err(e);
            }
            Some(Ok(b)) => b,
        };
        let (commit_lsn, index) = (txn.commit_lsn, change.pos.index);
        let id = self.ids.format(format_args!("{commit_lsn}:{index}"));
        let source = Source::Stream {
            txn,
            lsn: change.lsn,
        };
        let (old, new) = (change.old.as_ref(), change.new.as_ref());
        let mut ctx = Ctx {
            bound,
            buf: &mut self.buf,
            key_buf: &mut self.key_buf,
            scratch: &mut self.scratch,
            values: &mut self.values,
            ids: &mut self.ids,
            prefix: Prefix {
                name_json: &self.name_json,
                db_json: &self.db_json,
            },
            headers: (&self.event_id_header, &self.lsn_header, lsn_text),
            lsn: txn.commit_lsn,
            txmeta: self.txmeta.as_mut(),
        };
        match (change.op, old, new) {
            (Op::Insert, _, Some(new)) => {
                ctx.event(b'c', None, Some(new), Some(new), source, &id, out)
            }
            (Op::Update, old, Some(new)) => {
                // Only an old row with every key column present can show a
                // key change: a REPLICA IDENTITY INDEX (or a key_columns
                // key under DEFAULT) old tuple leaves other columns null.
                let key_changed = match old {
                    Some(old) if ctx.has_whole_key(old) => ctx.key_of(old)? != ctx.key_of(new)?,
                    _ => false,
                };
                if let (true, Some(old)) = (key_changed, old) {
                    // Debezium: a primary-key change is a delete of the old
                    // key (+ tombstone) and a create of the new one.
                    let delete_id = ctx.ids.format(format_args!("{commit_lsn}:{index}:delete"));
                    ctx.event(b'd', Some(old), None, Some(old), source, &delete_id, out)?;
                    if bound.tombstones {
                        let id = ctx
                            .ids
                            .format(format_args!("{commit_lsn}:{index}:tombstone"));
                        ctx.tombstone(old, &id, out)?;
                    }
                    ctx.event(b'c', None, Some(new), Some(new), source, &id, out)
                } else {
                    ctx.event(b'u', old, Some(new), Some(new), source, &id, out)
                }
            }
            (Op::Delete, Some(old), _) => {
                ctx.event(b'd', Some(old), None, Some(old), source, &id, out)?;
                if bound.tombstones {
                    let id = ctx
                        .ids
                        .format(format_args!("{commit_lsn}:{index}:tombstone"));
                    ctx.tombstone(old, &id, out)?;
                }
                Ok(())
            }
            _ => Err(TableEventError {
                table: bound.display.clone(),
                column: "*".into(),
                lsn: txn.commit_lsn,
                reason: "the change carries no row".into(),
                fix: "report it as a bug".into(),
            }),
        }
    }

    /// Appends the record of a snapshot row (`op: "r"`) of relation `rel`:
    /// `consistent_point` and `index` are its position, `snapshot_ms` the
    /// snapshot's start time (Debezium's `source.ts_ms` of snapshot rows),
    /// `marker` its place in the snapshot (`source.snapshot`).
    #[allow(clippy::too_many_arguments)]
    pub fn on_snapshot_row(
        &mut self,
        rel: Oid,
        row: &TupleData,
        consistent_point: Lsn,
        index: u64,
        snapshot_ms: i64,
        marker: SnapshotMarker,
        out: &mut Vec<Record>,
    ) -> Result<(), TableEventError> {
        if !self.bound.contains_key(&rel) {
            return Ok(());
        }
        self.widen_to(rel, None, Some(row), consistent_point);
        let lsn_text = self.lsn_text(consistent_point);
        let bound = match self.bound.get(&rel) {
            None => return Ok(()),
            Some(Err(e)) => return Err(e.clone()),
            Some(Ok(b)) => b,
        };
        // A resumed snapshot's rows: `<attempt>.<row>` (see
        // `source::SNAPSHOT_ATTEMPT_SHIFT`), never a number an earlier
        // attempt at the same point gave another row.
        let attempt = index >> crate::source::SNAPSHOT_ATTEMPT_SHIFT;
        let id = if attempt == 0 {
            self.ids
                .format(format_args!("{consistent_point}:snapshot:{index}"))
        } else {
            let row = index & ((1u64 << crate::source::SNAPSHOT_ATTEMPT_SHIFT) - 1);
            self.ids
                .format(format_args!("{consistent_point}:snapshot:{attempt}.{row}"))
        };
        let mut ctx = Ctx {
            bound,
            buf: &mut self.buf,
            key_buf: &mut self.key_buf,
            scratch: &mut self.scratch,
            values: &mut self.values,
            ids: &mut self.ids,
            prefix: Prefix {
                name_json: &self.name_json,
                db_json: &self.db_json,
            },
            headers: (&self.event_id_header, &self.lsn_header, lsn_text),
            lsn: consistent_point,
            // Snapshot rows belong to no transaction (Debezium: `transaction`
            // null, no BEGIN/END).
            txmeta: None,
        };
        let source = Source::Snapshot {
            lsn: consistent_point,
            ts_ms: snapshot_ms,
            marker,
        };
        let len = out.len();
        ctx.event(b'r', None, Some(row), Some(row), source, &id, out)?;
        let made = self.encode_tail(rel, consistent_point, out, len);
        if made.is_err() {
            out.truncate(len);
        }
        made
    }

    /// Appends the record of a truncate of relation `rel` (`op: "t"`, null
    /// key, no `before`/`after`, as Debezium writes it) unless
    /// `skipped_operations` skips truncates (the default). `lsn` is the
    /// Truncate message's position, `index` the table's index in its
    /// transaction.
    /// On an error nothing is appended and the transaction metadata is
    /// as before, as for [`on_change`](Self::on_change).
    pub fn on_truncate(
        &mut self,
        rel: Oid,
        txn: TxnInfo,
        lsn: Lsn,
        index: u64,
        out: &mut Vec<Record>,
    ) -> Result<(), TableEventError> {
        let (mark, len) = (self.txmeta_mark(rel), out.len());
        let made = self
            .truncate_record(rel, txn, lsn, index, out)
            .and_then(|()| self.encode_tail(rel, txn.commit_lsn, out, len));
        if made.is_err() {
            self.txmeta_undo(mark);
            out.truncate(len);
        }
        made
    }

    fn truncate_record(
        &mut self,
        rel: Oid,
        txn: TxnInfo,
        lsn: Lsn,
        index: u64,
        out: &mut Vec<Record>,
    ) -> Result<(), TableEventError> {
        if !self.bound.contains_key(&rel) {
            return Ok(());
        }
        let lsn_text = self.lsn_text(txn.commit_lsn);
        let bound = match self.bound.get(&rel) {
            None => return Ok(()),
            Some(Err(e)) => {
                let mut e = e.clone();
                e.lsn = txn.commit_lsn;
                return Err(e);
            }
            Some(Ok(b)) => b,
        };
        let id = self.ids.format(format_args!("{}:{index}", txn.commit_lsn));
        let mut ctx = Ctx {
            bound,
            buf: &mut self.buf,
            key_buf: &mut self.key_buf,
            scratch: &mut self.scratch,
            values: &mut self.values,
            ids: &mut self.ids,
            prefix: Prefix {
                name_json: &self.name_json,
                db_json: &self.db_json,
            },
            headers: (&self.event_id_header, &self.lsn_header, lsn_text),
            lsn: txn.commit_lsn,
            txmeta: self.txmeta.as_mut(),
        };
        ctx.event(
            b't',
            None,
            None,
            None,
            Source::Stream { txn, lsn },
            &id,
            out,
        )
    }

    fn lsn_text(&mut self, lsn: Lsn) -> Bytes {
        if self.lsn_text.0 != lsn || self.lsn_text.1.is_empty() {
            self.lsn_text = (lsn, self.ids.format(format_args!("{lsn}")));
        }
        self.lsn_text.1.clone()
    }
}

/// Where an event comes from (Debezium's `source` block).
#[derive(Debug, Clone, Copy)]
enum Source {
    Stream {
        txn: TxnInfo,
        lsn: Lsn,
    },
    Snapshot {
        lsn: Lsn,
        ts_ms: i64,
        marker: SnapshotMarker,
    },
}

/// A snapshot row's place in the snapshot, as Debezium 3.6 writes it in
/// `source.snapshot`: the snapshot's first and last rows, each table's first
/// and last rows, and `"true"` between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotMarker {
    First,
    FirstInDataCollection,
    True,
    LastInDataCollection,
    Last,
    /// A row of an incremental snapshot (read while streaming).
    Incremental,
}

impl SnapshotMarker {
    /// The marker of a row from where it stands; when several apply, the
    /// snapshot's last wins, then its first, then the table's last, then the
    /// table's first (so a table's only row is its last, unless it opens
    /// the snapshot) — Debezium's `SnapshotMarkerResolver` order.
    pub fn of(
        first_in_snapshot: bool,
        last_in_snapshot: bool,
        first_in_table: bool,
        last_in_table: bool,
    ) -> SnapshotMarker {
        if last_in_snapshot {
            SnapshotMarker::Last
        } else if first_in_snapshot {
            SnapshotMarker::First
        } else if last_in_table {
            SnapshotMarker::LastInDataCollection
        } else if first_in_table {
            SnapshotMarker::FirstInDataCollection
        } else {
            SnapshotMarker::True
        }
    }

    /// The `source.snapshot` text.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotMarker::First => "first",
            SnapshotMarker::FirstInDataCollection => "first_in_data_collection",
            SnapshotMarker::True => "true",
            SnapshotMarker::LastInDataCollection => "last_in_data_collection",
            SnapshotMarker::Last => "last",
            SnapshotMarker::Incremental => "incremental",
        }
    }
}

#[derive(Debug)]
struct Prefix<'a> {
    name_json: &'a [u8],
    db_json: &'a [u8],
}

/// One change being encoded.
#[derive(Debug)]
struct Ctx<'a> {
    bound: &'a Bound,
    buf: &'a mut Vec<u8>,
    key_buf: &'a mut Vec<u8>,
    scratch: &'a mut Vec<u8>,
    values: &'a mut Arena,
    ids: &'a mut Arena,
    prefix: Prefix<'a>,
    headers: (&'a Arc<str>, &'a Arc<str>, Bytes),
    lsn: Lsn,
    /// `provide_transaction_metadata` (streamed changes only).
    txmeta: Option<&'a mut TxnMetadata>,
}

/// A BEGIN/END record that does not fit its registry format's schema.
pub(super) fn txmeta_error(e: schemas::body::BodyError, commit_lsn: Lsn) -> TableEventError {
    TableEventError {
        table: "the transaction metadata".into(),
        column: e.path,
        lsn: commit_lsn,
        reason: format!(
            "a BEGIN/END record does not fit Debezium's transaction metadata schema: {}",
            e.reason
        ),
        fix: "report it as a bug; provide_transaction_metadata = false writes no such records"
            .into(),
    }
}

#[cfg(test)]
mod tests;
