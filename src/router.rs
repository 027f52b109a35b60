//! Outbox routing: turns inserted outbox rows into Kafka records.
//!
//! Defaults follow Debezium's Outbox Event Router so existing consumers keep
//! working: topic `outbox.event.{aggregatetype}`, key = aggregate id, header
//! `id` = the row's id column, value = the payload column's bytes unchanged.
//! We add header `walrelay.lsn` (the transaction's commit LSN) for positional
//! de-duplication. Opt-in per route: `format = "cloudevents"` makes each
//! record a CloudEvent ([`cloudevents`]), `trace_context_column` adds the
//! writer's W3C trace context headers ([`trace`]), `envelope_columns` makes
//! the value a JSON envelope with columns beside the payload (Debezium's
//! additional placement, [`envelope`]), `key_converter`/`value_converter`
//! write key and value as Kafka Connect's `JsonConverter` would
//! ([`connect`]); with them off a record is built as
//! before, one `None` test per option aside. `header_columns` entries may
//! name their header (`"type:eventType"`), resolved when a relation is
//! bound, never per row.
//!
//! Invariants:
//! - **Stable identity.** A record depends only on the row and its commit LSN,
//!   so a re-sent event has the same topic, key, value and headers.
//! - **Never skip silently.** A row that cannot be routed — a NULL id or
//!   aggregate id, a configured column missing from the table, a value that
//!   cannot be converted — is a [`RouteError`] naming the table, the column,
//!   the commit LSN and what to do, with an [`Unroutable`] label. The caller
//!   stops before confirming it or, with `[dead_letter]`, publishes a dead
//!   letter in its place from what [`Router::salvage`] keeps of the row.
//! - **Every captured relation is claimed.** A partition of a captured
//!   (partitioned) outbox table is routed as the table itself, whether
//!   pgoutput names the partition root (`publish_via_partition_root`, which
//!   walrelay sets) or the leaf ([`Router::add_partitions`]). A row of a
//!   relation that no route claims is never dropped without a trace: it is
//!   [`Routed::Unclaimed`], which the relay counts and logs.
//! - Deletes are ignored (insert-then-delete in one transaction is the usual
//!   outbox pattern); updates follow the configured [`OnUpdate`] policy.

use std::cell::{Cell as Counter, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::Lsn;
use crate::config::{OnUpdate, OutboxConfig, OutboxFormat, Segment, topic_name_problem};
use crate::pgoutput::{Cell, Oid, Relation, TupleData};

pub mod arena;
#[cfg(test)]
pub(crate) mod avro_read;
pub mod cloudevents;
pub mod connect;
pub mod debezium;
pub mod envelope;
pub mod heartbeat;
pub mod mask;
pub mod message;
pub mod schema;
pub mod table;
mod time;
pub mod trace;
pub mod txmeta;

use cloudevents::{CloudEvents, TimeCache};
use connect::Forms;
use envelope::Envelope;
use time::parse_timestamptz_ms;
use trace::Parsed;

/// Header marking a record made from the initial snapshot (value `true`).
pub const SNAPSHOT_HEADER: &str = "walrelay.snapshot";

/// PostgreSQL type oids we treat specially.
const BYTEA_OID: Oid = 17;

/// How a record names its event in errors and dead letters (never by its
/// payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventId {
    /// An outbox record: its row's `id` (the `id` header).
    OutboxRow(Bytes),
    /// A table change event (or a transaction or logical-message record):
    /// its `walrelay.event_id` header.
    Change(Bytes),
}

/// One Kafka record, ready to produce, with the facts the layers above
/// need: its event id and its size, set once when it is built.
///
/// The parts are public to read; whoever changes one in place (a header
/// added, a value rewritten) calls [`Record::recount`] before the record
/// leaves its hands, so [`Record::size`] stays the size of what is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Shared: a table's records all name the same topic.
    pub topic: Arc<str>,
    pub key: Option<Bytes>,
    /// `None` is a tombstone.
    pub value: Option<Bytes>,
    /// Header names are shared (`Arc<str>`): the same few names repeat on
    /// every record.
    pub headers: Vec<(Arc<str>, Bytes)>,
    /// Milliseconds since the Unix epoch, or `None` for the producer's clock.
    pub timestamp_ms: Option<i64>,
    /// See [`Record::event_id`].
    event_id: Option<EventId>,
    /// See [`Record::size`].
    size: usize,
    /// `format = "avro" | "json_schema"`: the key's and value's schemas;
    /// `key` and `value` are then bodies under them, which
    /// `sink::registry` frames (magic byte, schema id) before sending.
    /// `None`: the bytes are sent as they are.
    pub schemas: Option<Arc<schema::RecordSchemas>>,
}

impl Record {
    /// A record built outside the router (heartbeat, offsets, dead letters):
    /// its event id is the first `id` or `walrelay.event_id` header, if
    /// any — read once, here.
    pub fn new(
        topic: Arc<str>,
        key: Option<Bytes>,
        value: Option<Bytes>,
        headers: Vec<(Arc<str>, Bytes)>,
        timestamp_ms: Option<i64>,
    ) -> Record {
        let event_id = headers.iter().find_map(|(k, v)| match &**k {
            "id" => Some(EventId::OutboxRow(v.clone())),
            table::EVENT_ID_HEADER => Some(EventId::Change(v.clone())),
            _ => None,
        });
        Record::with_event_id(topic, key, value, headers, timestamp_ms, event_id)
    }

    /// A record whose builder knows its event (the router's: the id it just
    /// put in the event's header).
    pub(crate) fn with_event_id(
        topic: Arc<str>,
        key: Option<Bytes>,
        value: Option<Bytes>,
        headers: Vec<(Arc<str>, Bytes)>,
        timestamp_ms: Option<i64>,
        event_id: Option<EventId>,
    ) -> Record {
        let mut record = Record {
            topic,
            key,
            value,
            headers,
            timestamp_ms,
            event_id,
            size: 0,
            schemas: None,
        };
        record.recount();
        record
    }

    /// The event this record carries: the outbox row's id or the change's
    /// event id; `None` for records of no event (heartbeats, offsets).
    pub fn event_id(&self) -> Option<&EventId> {
        self.event_id.as_ref()
    }

    /// Bytes this record occupies in the producer queue, roughly: counted
    /// when it was built (or last [`recount`](Record::recount)ed).
    pub fn size(&self) -> usize {
        self.size
    }

    /// Counts the size again after a part was changed in place.
    pub fn recount(&mut self) {
        self.size = self.topic.len()
            + self.key.as_ref().map_or(0, Bytes::len)
            + self.value.as_ref().map_or(0, Bytes::len)
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
            + 64;
    }
}

/// A row that cannot be routed. The connector stops on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot route outbox row of {table} (column {column}, commit LSN {lsn}): {reason}; {fix}")]
pub struct RouteError {
    pub table: String,
    pub column: String,
    /// The transaction's commit LSN.
    pub lsn: Lsn,
    pub reason: String,
    pub fix: String,
    /// What kind of problem: the bounded reason label of a dead letter.
    pub kind: Unroutable,
}

/// Why a row cannot be routed, as a short fixed label
/// (`walrelay_dead_letter_records_total{reason}`, the
/// `walrelay.dead_letter.reason` header): never row data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unroutable {
    /// A required column (id, aggregate id, a topic template's column) is NULL.
    NullValue,
    /// The topic template makes a name Kafka rejects from the row's values.
    InvalidTopic,
    /// The table lacks a configured column.
    MissingColumn,
    /// A CloudEvents attribute is missing or invalid.
    CloudEvents,
    /// An outbox row was updated under `on_update = "fail"`.
    Updated,
    /// Any other value that cannot be converted.
    #[default]
    InvalidValue,
}

impl Unroutable {
    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Unroutable::NullValue => "null_value",
            Unroutable::InvalidTopic => "invalid_topic",
            Unroutable::MissingColumn => "missing_column",
            Unroutable::CloudEvents => "cloudevents",
            Unroutable::Updated => "updated",
            Unroutable::InvalidValue => "invalid_value",
        }
    }
}

/// The parts of an unroutable outbox row that a dead-letter record keeps
/// ([`Router::salvage`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Salvaged {
    /// The payload column's bytes (a bytea payload decoded), as published.
    pub value: Option<Bytes>,
    /// The aggregate id: the record's key.
    pub key: Option<Bytes>,
    /// The id column: the record's `id` header.
    pub id: Option<Bytes>,
    /// The route's topic template (the topic is not known when it is what
    /// failed).
    pub route: Option<String>,
}

/// At most this many characters of a row id go into an error.
const ROW_ID_IN_ERRORS: usize = 200;

/// What the router decided for one change.
#[derive(Debug, PartialEq, Eq)]
pub enum Routed {
    Record(Record),
    /// Nothing to publish (delete, ignored update, other table).
    Nothing,
    /// An update to an outbox row under `on_update = "warn"` or `"skip"`:
    /// not published; counted, and logged when `warn`.
    IgnoredUpdate {
        table: String,
        warn: bool,
    },
    /// A row inserted into a published relation that no route claims (the
    /// publication covers more than the outbox tables): not published;
    /// counted and logged.
    Unclaimed {
        table: String,
    },
}

/// One configured outbox table.
#[derive(Debug)]
struct Route {
    config: OutboxConfig,
}

/// Column positions of a route, resolved against a Relation message.
#[derive(Debug)]
struct Bound {
    route: Arc<Route>,
    display: String,
    id: usize,
    aggregate_id: usize,
    payload: usize,
    payload_is_bytea: bool,
    topic_columns: HashMap<String, usize>,
    headers: Vec<(Arc<str>, usize)>,
    timestamp: Option<usize>,
    /// `trace_context_column`'s index.
    trace: Option<usize>,
    /// `format = "cloudevents"`: the attribute mapping.
    cloudevents: Option<Box<CloudEvents>>,
    /// `envelope_columns`: the value is a JSON envelope.
    envelope: Option<Box<Envelope>>,
    /// `key_converter`/`value_converter` other than `string`.
    forms: Option<Box<Forms>>,
    /// `format = "avro" | "json_schema"`: the schemas and bodies.
    registry: Option<Box<schema::Encoding>>,
    /// Headers a record has beyond `header_columns`, at most: `id` and
    /// `walrelay.lsn`, plus the options' (so the vector grows once).
    extra_headers: usize,
    id_header: Arc<str>,
    lsn_header: Arc<str>,
    /// Topics this binding has made (and checked) so far.
    topics: RefCell<Topics>,
}

/// The topic names a route has rendered, shared by all its records: a
/// topic is rendered into `scratch`, and checked and allocated only the
/// first time it appears.
#[derive(Debug, Default)]
struct Topics {
    scratch: String,
    known: HashMap<Box<str>, Arc<str>>,
}

/// Most routes make a handful of topics; a template on a column with many
/// values would grow the map without bound, so it starts over at this size.
const KNOWN_TOPICS: usize = 4096;

/// The router: configured routes plus their binding to relations seen so far.
#[derive(Debug)]
pub struct Router {
    routes: Vec<Arc<Route>>,
    /// Relation oid → binding; `Err` when the table lacks a configured column
    /// (reported on the first row, which is when it matters).
    bound: HashMap<Oid, Result<Bound, (String, String)>>,
    /// `(schema, name)` of each partition of a captured table → its route.
    partitions: HashMap<(String, String), Arc<Route>>,
    /// Relations seen in the stream that no route claims, by oid.
    unclaimed: HashMap<Oid, String>,
    /// The `walrelay.lsn` value of the transaction being routed: rows of one
    /// transaction share it, so it is formatted once.
    lsn_text: RefCell<(Lsn, Bytes)>,
    /// `walrelay.snapshot`, shared by every snapshot record.
    snapshot_header: Arc<str>,
    /// The CloudEvents `time` of the transaction being routed.
    time_text: TimeCache,
    /// Trace context values found invalid (and left out) since the last
    /// [`Router::take_invalid_trace_contexts`], and the first table.
    invalid_traces: Counter<u64>,
    invalid_trace_table: RefCell<Option<String>>,
    /// `traceparent` and `tracestate`.
    trace_headers: (Arc<str>, Arc<str>),
}

impl Router {
    pub fn new(outboxes: &[OutboxConfig]) -> Self {
        let routes = outboxes
            .iter()
            .map(|c| Arc::new(Route { config: c.clone() }))
            .collect();
        Router {
            routes,
            bound: HashMap::new(),
            partitions: HashMap::new(),
            unclaimed: HashMap::new(),
            lsn_text: RefCell::new((Lsn::ZERO, Bytes::new())),
            snapshot_header: Arc::from(SNAPSHOT_HEADER),
            time_text: RefCell::new((0, Bytes::new())),
            invalid_traces: Counter::new(0),
            invalid_trace_table: RefCell::new(None),
            trace_headers: (Arc::from("traceparent"), Arc::from("tracestate")),
        }
    }

    /// How many trace context values were invalid (their rows published
    /// without trace headers) since the last call, and the first table one
    /// was in; `None` when there were none. The relay counts and logs them.
    pub fn take_invalid_trace_contexts(&self) -> Option<(u64, String)> {
        // Called once per transaction: one read when there is nothing.
        if self.invalid_traces.get() == 0 {
            return None;
        }
        let n = self.invalid_traces.replace(0);
        let table = self.invalid_trace_table.borrow_mut().take();
        Some((n, table.unwrap_or_default()))
    }

    /// Claims the partitions `(schema, name)` of the captured table
    /// `schema.table` for its route, so rows pgoutput reports under a
    /// partition's own name are routed as the table's. Unknown tables are
    /// ignored.
    pub fn add_partitions(&mut self, schema: &str, table: &str, partitions: &[(String, String)]) {
        let Some(route) = self
            .routes
            .iter()
            .find(|r| r.config.table.schema == schema && r.config.table.name == table)
            .cloned()
        else {
            return;
        };
        for p in partitions {
            self.partitions.insert(p.clone(), route.clone());
        }
    }

    /// Learns (or re-learns) a relation's shape.
    pub fn on_relation(&mut self, rel: &Relation) {
        let route = self
            .routes
            .iter()
            .find(|r| r.config.table.schema == rel.namespace && r.config.table.name == rel.name)
            .or_else(|| {
                self.partitions
                    .get(&(rel.namespace.clone(), rel.name.clone()))
            })
            .cloned();
        match route {
            Some(route) => {
                self.unclaimed.remove(&rel.oid);
                self.bound.insert(rel.oid, bind(route, rel));
            }
            None => {
                self.bound.remove(&rel.oid);
                self.unclaimed
                    .insert(rel.oid, format!("{}.{}", rel.namespace, rel.name));
            }
        }
    }

    /// Routes an inserted row of the transaction that committed at
    /// `commit_lsn`, at `commit_time` (PostgreSQL microseconds since
    /// 2000-01-01; `None` for rows read rather than streamed: snapshots,
    /// republish).
    pub fn on_insert(
        &self,
        rel: Oid,
        row: &TupleData,
        commit_lsn: Lsn,
        commit_time: Option<i64>,
    ) -> Result<Routed, RouteError> {
        let bound = match self.bound.get(&rel) {
            None => {
                return Ok(match self.unclaimed.get(&rel) {
                    Some(table) => Routed::Unclaimed {
                        table: table.clone(),
                    },
                    None => Routed::Nothing,
                });
            }
            Some(Err((table, column))) => {
                return Err(RouteError {
                    table: table.clone(),
                    column: column.clone(),
                    lsn: commit_lsn,
                    reason: "the table has no such column".into(),
                    fix: "add the column to the table or fix the column name in the [[outbox]] section"
                        .into(),
                    kind: Unroutable::MissingColumn,
                });
            }
            Some(Ok(b)) => b,
        };
        bound
            .record(
                row,
                commit_lsn,
                self.lsn_text(commit_lsn),
                self,
                commit_time,
            )
            .map(Routed::Record)
    }

    /// The `id` column of an inserted outbox row as text (shortened), to name
    /// the row in errors; `None` for other tables or a NULL id.
    pub fn row_id(&self, rel: Oid, row: &TupleData) -> Option<String> {
        match self.bound.get(&rel) {
            Some(Ok(bound)) => bound.row_id(row),
            _ => None,
        }
    }

    /// What of an inserted outbox row that cannot be routed goes into its
    /// dead-letter record: each part only when the row has it.
    pub fn salvage(&self, rel: Oid, row: &TupleData) -> Salvaged {
        let Some(Ok(bound)) = self.bound.get(&rel) else {
            return Salvaged::default();
        };
        let text = |idx: usize| match row.get(idx) {
            Some(Cell::Text(b) | Cell::Binary(b)) => Some(b.clone()),
            _ => None,
        };
        let value = text(bound.payload).map(|b| {
            if bound.payload_is_bytea {
                decode_bytea_hex(&b).unwrap_or(b)
            } else {
                b
            }
        });
        Salvaged {
            value,
            key: text(bound.aggregate_id),
            id: text(bound.id),
            route: Some(bound.route.config.topic.as_str().to_owned()),
        }
    }

    /// Routes a row read by the initial snapshot: the record a streamed
    /// insert of the row at `consistent_point` would be, plus header
    /// `walrelay.snapshot: true`.
    pub fn on_snapshot_row(
        &self,
        rel: Oid,
        row: &TupleData,
        consistent_point: Lsn,
    ) -> Result<Routed, RouteError> {
        let mut routed = self.on_insert(rel, row, consistent_point, None).map_err(|mut e| {
            // The streaming advice (skip the transaction, advance the slot)
            // does not apply: the next start reads the same row again.
            e.fix = format!(
                "this row{} was read by the snapshot (it existed at the consistent point {}), so \
                 skipping a transaction or advancing the slot does not apply: the next start \
                 reads it again. Fix the row itself (UPDATE it so that it routes, or DELETE it if \
                 it must not be published) or the [[outbox]] settings, then start again",
                self.row_id(rel, row)
                    .map(|id| format!(" (id {id})"))
                    .unwrap_or_default(),
                consistent_point
            );
            e
        })?;
        if let Routed::Record(record) = &mut routed {
            record
                .headers
                .push((self.snapshot_header.clone(), Bytes::from_static(b"true")));
        }
        Ok(routed)
    }

    /// Routes a row read by an incremental snapshot chunk at `lsn` (its
    /// high watermark): as [`Router::on_snapshot_row`], with header
    /// `walrelay.snapshot: incremental`.
    pub fn on_incremental_row(
        &self,
        rel: Oid,
        row: &TupleData,
        lsn: Lsn,
    ) -> Result<Routed, RouteError> {
        let mut routed = self.on_snapshot_row(rel, row, lsn)?;
        if let Routed::Record(record) = &mut routed
            && let Some(header) = record.headers.last_mut()
        {
            header.1 = Bytes::from_static(b"incremental");
        }
        Ok(routed)
    }

    /// `lsn` as header text, formatted once per transaction.
    fn lsn_text(&self, lsn: Lsn) -> Bytes {
        let mut cached = self.lsn_text.borrow_mut();
        if cached.0 != lsn || cached.1.is_empty() {
            *cached = (lsn, Bytes::from(lsn.to_string()));
        }
        cached.1.clone()
    }

    /// Applies the update policy to an update of an outbox row.
    pub fn on_update(&self, rel: Oid, commit_lsn: Lsn) -> Result<Routed, RouteError> {
        let Some(Ok(bound)) = self.bound.get(&rel) else {
            return Ok(Routed::Nothing);
        };
        match bound.route.config.on_update {
            OnUpdate::Skip => Ok(Routed::IgnoredUpdate { table: bound.display.clone(), warn: false }),
            OnUpdate::Warn => Ok(Routed::IgnoredUpdate { table: bound.display.clone(), warn: true }),
            OnUpdate::Fail => Err(RouteError {
                table: bound.display.clone(),
                column: "*".into(),
                lsn: commit_lsn,
                reason: "an outbox row was updated, and on_update = \"fail\"".into(),
                fix: "outbox rows should only be inserted (and deleted); set on_update = \"warn\" or \"skip\" to ignore updates".into(),
                kind: Unroutable::Updated,
            }),
        }
    }
}

fn bind(route: Arc<Route>, rel: &Relation) -> Result<Bound, (String, String)> {
    let display = format!("{}.{}", rel.namespace, rel.name);
    let find = |col: &str| {
        rel.column_index(col)
            .ok_or_else(|| (display.clone(), col.to_owned()))
    };
    let c = &route.config;
    let id = find(&c.id_column)?;
    let aggregate_id = find(&c.aggregate_id_column)?;
    let payload = find(&c.payload_column)?;
    let payload_is_bytea = rel
        .columns
        .get(payload)
        .is_some_and(|col| col.type_oid == BYTEA_OID);
    let mut topic_columns = HashMap::new();
    for name in route.config.topic.columns() {
        topic_columns.insert(name.to_owned(), find(name)?);
    }
    let mut headers = Vec::new();
    for (column, name) in c.header_placements() {
        headers.push((Arc::from(name), find(column)?));
    }
    let timestamp = match c.timestamp_column.as_deref() {
        Some(col) if !col.is_empty() => Some(find(col)?),
        _ => None,
    };
    let trace = match c.trace_context_column.as_deref() {
        Some(col) => Some(find(col)?),
        None => None,
    };
    let registry = schema::Encoding::for_route(c.format, rel, aggregate_id, payload);
    let cloudevents = match c.format {
        OutboxFormat::Raw
        | OutboxFormat::Avro
        | OutboxFormat::JsonSchema
        | OutboxFormat::Protobuf => None,
        OutboxFormat::CloudEvents => Some(Box::new(CloudEvents::bind(
            &c.cloudevents,
            &c.type_column,
            payload,
            rel,
            &find,
        )?)),
    };
    let envelope = if c.envelope_columns.is_empty() {
        None
    } else {
        Some(Box::new(Envelope::bind(c, payload, rel, &find)?))
    };
    let forms = Forms::bind(c, rel, aggregate_id, payload).map(Box::new);
    Ok(Bound {
        envelope,
        forms,
        registry,
        route,
        display,
        id,
        aggregate_id,
        payload,
        payload_is_bytea,
        topic_columns,
        headers,
        timestamp,
        extra_headers: 2
            + if trace.is_some() { 2 } else { 0 }
            + cloudevents.as_ref().map_or(0, |ce| ce.max_headers()),
        trace,
        cloudevents,
        id_header: Arc::from("id"),
        lsn_header: Arc::from("walrelay.lsn"),
        topics: RefCell::default(),
    })
}

impl Bound {
    /// The row's id as text for an error (never the payload), shortened.
    fn row_id(&self, row: &TupleData) -> Option<String> {
        match row.get(self.id) {
            Some(Cell::Text(b) | Cell::Binary(b)) => Some(
                String::from_utf8_lossy(b)
                    .chars()
                    .take(ROW_ID_IN_ERRORS)
                    .collect(),
            ),
            _ => None,
        }
    }

    fn err(&self, column: &str, lsn: Lsn, reason: &str, fix: &str) -> RouteError {
        RouteError {
            table: self.display.clone(),
            column: column.to_owned(),
            lsn,
            reason: reason.to_owned(),
            fix: fix.to_owned(),
            kind: Unroutable::default(),
        }
    }

    /// A value the configured converter form cannot write.
    fn form_err(&self, column: &str, lsn: Lsn, e: connect::FormError) -> RouteError {
        RouteError {
            kind: Unroutable::InvalidValue,
            ..self.err(column, lsn, &e.reason, e.fix)
        }
    }

    /// The text value of a column that must not be NULL.
    fn required(
        &self,
        row: &TupleData,
        idx: usize,
        column: &str,
        lsn: Lsn,
    ) -> Result<Bytes, RouteError> {
        match row.get(idx) {
            Some(Cell::Text(b) | Cell::Binary(b)) => Ok(b.clone()),
            Some(Cell::Null) => Err(RouteError {
                kind: Unroutable::NullValue,
                ..self.err(
                    column,
                    lsn,
                    "the value is NULL",
                    "the slot does not advance past this row: skip its transaction or change the [[outbox]] columns (docs/operations.md, \"A row cannot be routed\"); then make the column NOT NULL and fix the writer",
                )
            }),
            Some(Cell::UnchangedToast) => Err(self.err(
                column,
                lsn,
                "the value was not sent (unchanged TOAST)",
                "this cannot happen for inserts; report it as a bug",
            )),
            None => Err(self.err(
                column,
                lsn,
                "the row has fewer columns than its Relation message",
                "report it as a bug",
            )),
        }
    }

    /// The topic of `row`, from the route's template.
    fn topic(&self, row: &TupleData, lsn: Lsn) -> Result<Arc<str>, RouteError> {
        let c = &self.route.config;
        let mut topics = self.topics.borrow_mut();
        let Topics { scratch, known } = &mut *topics;
        scratch.clear();
        for seg in c.topic.segments() {
            match seg {
                Segment::Literal(s) => scratch.push_str(s),
                Segment::Column(col) => {
                    let idx = self.topic_columns.get(col).copied().unwrap_or(usize::MAX);
                    let v = self.required(row, idx, col, lsn)?;
                    let s = std::str::from_utf8(&v).map_err(|_| {
                        self.err(
                            col,
                            lsn,
                            "the value is not UTF-8",
                            "topic names must be text",
                        )
                    })?;
                    scratch.push_str(s);
                }
            }
        }
        if let Some(topic) = known.get(scratch.as_str()) {
            return Ok(topic.clone());
        }
        if let Some(problem) = topic_name_problem(scratch) {
            let columns: Vec<&str> = c.topic.columns().collect();
            return Err(RouteError {
                kind: Unroutable::InvalidTopic,
                ..self.err(
                    &columns.join(", "),
                    lsn,
                    &format!(
                        "the topic template {:?} makes an invalid topic name from this row's \
                     values (not shown: row data stays out of logs): {problem}",
                        c.topic.as_str()
                    ),
                    "the row itself cannot be changed (WAL is immutable): change the [[outbox]] \
                 topic template so that it accepts the row, or skip the row's transaction \
                 (docs/operations.md, \"A row cannot be routed\"); then fix the writer",
                )
            });
        }
        if known.len() >= KNOWN_TOPICS {
            known.clear();
        }
        let topic: Arc<str> = Arc::from(scratch.as_str());
        known.insert(scratch.as_str().into(), topic.clone());
        Ok(topic)
    }

    fn record(
        &self,
        row: &TupleData,
        lsn: Lsn,
        lsn_text: Bytes,
        router: &Router,
        commit_time: Option<i64>,
    ) -> Result<Record, RouteError> {
        let c = &self.route.config;
        let id = self.required(row, self.id, &c.id_column, lsn)?;
        let key = self.required(row, self.aggregate_id, &c.aggregate_id_column, lsn)?;
        // `key_converter`/`value_converter`: one test on the default path.
        let key = match &self.forms {
            None => key,
            Some(forms) => forms
                .key(key)
                .map_err(|e| self.form_err(&c.aggregate_id_column, lsn, e))?,
        };

        let topic = self.topic(row, lsn)?;

        // `envelope_columns`: one test on the default path.
        let value = if let Some(envelope) = &self.envelope {
            envelope.value(self, row, lsn)?
        } else if let Some(forms) = self.forms.as_deref().filter(|f| f.writes_value()) {
            forms.record_value(self, row, lsn)?
        } else {
            match row.get(self.payload) {
                Some(Cell::Text(b) | Cell::Binary(b))
                    if b.is_empty() && c.tombstone_on_empty_payload =>
                {
                    None
                }
                Some(Cell::Text(b)) if self.payload_is_bytea => {
                    Some(decode_bytea_hex(b).ok_or_else(|| {
                        self.err(
                            &c.payload_column,
                            lsn,
                            "the bytea value is not in hex format",
                            "walrelay sets bytea_output = 'hex' on its connections; report this as a bug",
                        )
                    })?)
                }
                Some(Cell::Text(b) | Cell::Binary(b)) => Some(b.clone()),
                Some(Cell::Null) => None,
                Some(Cell::UnchangedToast) | None => {
                    return Err(self.err(
                        &c.payload_column,
                        lsn,
                        "the payload was not sent",
                        "report it as a bug",
                    ));
                }
            }
        };

        let mut headers = Vec::with_capacity(self.headers.len() + self.extra_headers);
        let event_id = Some(EventId::OutboxRow(id.clone()));
        headers.push((self.id_header.clone(), id));
        for (name, idx) in &self.headers {
            if let Some(Cell::Text(b) | Cell::Binary(b)) = row.get(*idx) {
                headers.push((name.clone(), b.clone()));
            }
        }
        headers.push((self.lsn_header.clone(), lsn_text));

        let timestamp_ms = match self.timestamp {
            None => None,
            Some(idx) => match row.get(idx) {
                Some(Cell::Text(b)) => Some(parse_timestamptz_ms(b).map_err(|e| {
                    self.err(
                        c.timestamp_column.as_deref().unwrap_or_default(),
                        lsn,
                        e.reason(),
                        e.fix(),
                    )
                })?),
                _ => None,
            },
        };

        let mut record =
            Record::with_event_id(topic, Some(key), value, headers, timestamp_ms, event_id);
        // The options below cost the default format one test each.
        let trace = match self.trace {
            None => None,
            Some(idx) => self.trace_context(row, idx, router, &mut record),
        };
        if let Some(ce) = &self.cloudevents {
            let time = commit_time.and_then(|t| cloudevents::time_text(&router.time_text, t));
            ce.apply(self, row, lsn, time, trace.as_ref(), &mut record)
                .map_err(|e| RouteError {
                    kind: Unroutable::CloudEvents,
                    ..e
                })?;
        }
        if let Some(encoding) = &self.registry {
            self.encode(encoding, &mut record, lsn)?;
        }
        if self.trace.is_some() || self.cloudevents.is_some() || self.registry.is_some() {
            record.recount();
        }
        Ok(record)
    }

    /// Adds the `traceparent` (and `tracestate`) headers from the trace
    /// context column; an invalid value adds none and is counted, never
    /// stops the connector (a trace is diagnostics, not the event).
    fn trace_context(
        &self,
        row: &TupleData,
        idx: usize,
        router: &Router,
        record: &mut Record,
    ) -> Option<trace::TraceContext> {
        let Some(Cell::Text(value) | Cell::Binary(value)) = row.get(idx) else {
            return None;
        };
        let (parsed, tracestate_dropped) = trace::parse(value);
        let invalid = tracestate_dropped || parsed == Parsed::Invalid;
        if invalid {
            router.invalid_traces.set(router.invalid_traces.get() + 1);
            let mut table = router.invalid_trace_table.borrow_mut();
            if table.is_none() {
                *table = Some(self.display.clone());
            }
        }
        let Parsed::Valid(trace) = parsed else {
            return None;
        };
        let (parent, state) = &router.trace_headers;
        record
            .headers
            .push((parent.clone(), trace.traceparent.clone()));
        if let Some(value) = &trace.tracestate {
            record.headers.push((state.clone(), value.clone()));
        }
        Some(trace)
    }
}

/// Decodes bytea's text output (`\x` + hex).
fn decode_bytea_hex(text: &[u8]) -> Option<Bytes> {
    let hex = text.strip_prefix(b"\\x")?;
    if hex.len() % 2 != 0 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    let mut out = Vec::with_capacity(hex.len() / 2);
    for pair in hex.chunks_exact(2) {
        out.push(nibble(pair[0])? << 4 | nibble(pair[1])?);
    }
    Some(Bytes::from(out))
}

#[cfg(test)]
mod tests;
