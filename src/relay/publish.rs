//! The publisher: what every phase of a session shares to get a record into
//! Kafka and its acknowledgement back — the producer, the checkpoint, the
//! offset store's writer, pacing, dead letters, the per-topic counters and
//! the metrics. Each phase (the initial snapshot, incremental snapshots,
//! table events, logical messages, outbox rows, heartbeats) is a type of its
//! own with its own state that takes `&mut Publisher`; the streaming loop
//! ([`super::streaming`]) dispatches to them. Nothing here knows a phase.
//!
//! Invariants (beside the parent module's):
//! - **One send sequence.** Every record — outbox, table event, message,
//!   snapshot row, chunk row, heartbeat, dead letter — goes through
//!   [`Publisher::publish`]: counted in the checkpoint before it is handed
//!   to the producer (so its delivery report always finds its transaction),
//!   the lease checked first (a holder that lost it hands nothing more
//!   over), `exactly_once`'s transaction clock checked first.
//! - **Only acknowledged offsets are reported.** Positions move from the
//!   checkpoint's frontier to the offset writer ([`Publisher::write_offset`])
//!   and from its acknowledged write to PostgreSQL (the loop's
//!   `source.confirm`), never from anywhere else.
//! - **`exactly_once`: no commit point inside a unit.** A Kafka transaction
//!   is committed only where no PostgreSQL transaction is partly in it, and
//!   not while the initial snapshot (one Kafka transaction) is open
//!   ([`Publisher::hold_commits`]).
//! - **A refused change stops its transaction whole.** A row or message
//!   that cannot be routed (no dead-letter topic) stops publishing for the
//!   rest of its transaction ([`Publisher::refuse_rest_of_transaction`]);
//!   the loop ends the session at its Commit, naming the end LSN.

mod ack;
mod stop;

pub(super) use ack::Acked;
pub(super) use stop::Finished;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::RelayError;
use super::dead_letter::{DeadLetter, Failure, Reason};
use super::offset_writer::OffsetWriter;
use super::topic_metric::TopicCounters;
use super::{EventId, Sink, Token};
use crate::Lsn;
use crate::checkpoint::{Checkpoint, Limits, TxnId};
use crate::config::Config;
use crate::pgoutput::Relation;
use crate::router::{RouteError, Router};
use crate::source::Position;
use crate::telemetry::Metrics;

/// What every phase of one session shares (see the module doc).
pub(super) struct Publisher {
    config: Arc<Config>,
    metrics: Arc<Metrics>,
    sink: Sink,
    /// The outbox router: streamed rows, snapshot rows and chunk rows of
    /// outbox tables alike (one relation cache).
    router: Router,
    /// Transactions in flight, the open one included: the relay keeps no
    /// second copy (the source's assembler pairs Begin and Commit, the
    /// checkpoint holds the open transaction's entry).
    checkpoint: Checkpoint,
    /// Every offset-store write, and the newest acknowledged one: what we
    /// report.
    offsets: OffsetWriter,
    /// Records handed to the producer whose delivery report (success or
    /// failure) has not come back yet. Unlike the checkpoint's in-flight
    /// count, a failure settles a record here: a graceful stop waits for
    /// this to reach zero, not for acks that will never come.
    awaiting_reports: u64,
    /// `walrelay_records_published_by_topic`'s counters.
    topic_counters: TopicCounters,
    /// Whether invalid trace contexts were logged this session.
    warned_trace_context: bool,
    /// A change of the open transaction that cannot be routed: the session
    /// reads on to the transaction's Commit (publishing nothing more) so
    /// that the error can name the end LSN that skips it, then stops.
    refused: Option<(RouteError, Option<String>)>,
    /// `[dead_letter]`: where unpublishable changes go instead of stopping.
    dead_letter: Option<DeadLetter>,
    /// With `[dead_letter]`: the relation of the change being published,
    /// to name it if the producer refuses its record as too large.
    publishing: Option<Arc<Relation>>,
    /// Which of the sink's producers records go to (`kafka.linger_while_behind`).
    pace: super::pace::Pace,
    /// The initial snapshot is open: one Kafka transaction (`exactly_once`)
    /// that no commit point may end early.
    holding: bool,
    /// `[kafka.schema_registry]`: frames records that carry schemas
    /// (shared by the sessions of the process, with its id cache).
    registry: Option<Arc<crate::sink::registry::Registry>>,
}

/// What a published record's acknowledgement counts for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Counted {
    /// A streamed change committed at `commit_ms` (ms since 1970): the
    /// commit-to-acknowledgement histogram.
    Streamed { commit_ms: i64 },
    /// A row of the initial snapshot's batch #n (`source::SnapshotChunk`):
    /// its table's count and its reader's resume position.
    SnapshotTable(u32),
    /// Nothing more (heartbeats, incremental snapshot rows).
    Other,
}

/// How [`Publisher::send_one`] failed.
enum Sent {
    /// The producer refused the record when handed it.
    Refused(crate::sink::error::SinkError),
    Error(RelayError),
}

impl Publisher {
    /// A session's publisher, resuming from `start` (already confirmed and
    /// stored); `offsets` writes this connector's offset-store records.
    pub(super) fn new(
        config: Arc<Config>,
        metrics: Arc<Metrics>,
        sink: Sink,
        router: Router,
        start: Lsn,
        mut offsets: OffsetWriter,
    ) -> Publisher {
        offsets.starting_at(start);
        let limits = Limits {
            max_in_flight_records: config.kafka.max_in_flight_records as u64,
            max_in_flight_bytes: config.kafka.max_in_flight_bytes,
        };
        Publisher {
            topic_counters: TopicCounters::new(&config, metrics.clone()),
            dead_letter: DeadLetter::new(&config),
            metrics,
            config,
            sink,
            router,
            checkpoint: Checkpoint::new(start, limits),
            offsets,
            awaiting_reports: 0,
            warned_trace_context: false,
            refused: None,
            publishing: None,
            pace: Default::default(),
            holding: false,
            registry: None,
        }
    }

    /// Records with schemas get their ids from `registry`.
    pub(super) fn set_registry(&mut self, registry: Option<Arc<crate::sink::registry::Registry>>) {
        self.registry = registry;
    }

    pub(super) fn config(&self) -> &Arc<Config> {
        &self.config
    }

    pub(super) fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub(super) fn router(&self) -> &Router {
        &self.router
    }

    pub(super) fn router_mut(&mut self) -> &mut Router {
        &mut self.router
    }

    pub(super) fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    pub(super) fn checkpoint_mut(&mut self) -> &mut Checkpoint {
        &mut self.checkpoint
    }

    pub(super) fn offsets(&self) -> &OffsetWriter {
        &self.offsets
    }

    pub(super) fn offsets_mut(&mut self) -> &mut OffsetWriter {
        &mut self.offsets
    }

    /// Drops what the producer still queues (after a record Kafka refused
    /// for good: nothing behind it may reach Kafka before it).
    pub(super) fn purge_queued(&self) {
        self.sink.purge_queued();
    }

    /// Records handed over and not yet reported on.
    pub(super) fn awaiting_reports(&self) -> u64 {
        self.awaiting_reports
    }

    /// Whether a dead-letter topic is configured.
    pub(super) fn has_dead_letter(&self) -> bool {
        self.dead_letter.is_some()
    }

    /// The initial snapshot is one Kafka transaction under `exactly_once`:
    /// no commit point until [`Publisher::release_commits`].
    pub(super) fn hold_commits(&mut self) {
        self.holding = true;
    }

    pub(super) fn release_commits(&mut self) {
        self.holding = false;
    }

    /// A change of the open transaction cannot be routed (`row_id` names
    /// its row when known): nothing more of the transaction is published,
    /// and its Commit ends the session ([`Publisher::take_refusal`]).
    pub(super) fn refuse_rest_of_transaction(&mut self, error: RouteError, row_id: Option<String>) {
        self.refused = Some((error, row_id));
    }

    /// Whether the open transaction had a change that cannot be routed.
    pub(super) fn refusing(&self) -> bool {
        self.refused.is_some()
    }

    /// The open transaction's unroutable change, at its Commit.
    pub(super) fn take_refusal(&mut self) -> Option<(RouteError, Option<String>)> {
        self.refused.take()
    }

    /// A PostgreSQL transaction begins: pacing learns how far behind the
    /// stream is, the checkpoint opens its entry, and `exactly_once`'s
    /// clock its unit.
    pub(super) fn transaction_begins(
        &mut self,
        xid: u32,
        commit_lsn: Lsn,
        commit_time: i64,
        sent_time: i64,
    ) -> Result<(), RelayError> {
        self.pace
            .on_begin(commit_time, sent_time, crate::pg::replication::pg_now_us());
        self.checkpoint.begin()?;
        self.offsets
            .unit_begins(super::transaction_clock::Unit::Pg { xid, commit_lsn });
        Ok(())
    }

    /// The checkpoint entry of the transaction the source has open (the
    /// source yields changes and Commits only inside Begin..Commit).
    pub(super) fn open_txn(&self, lsn: Lsn) -> Result<TxnId, RelayError> {
        self.checkpoint
            .open_txn()
            .ok_or_else(|| RelayError::Stream {
                lsn,
                what: "a change or Commit outside Begin..Commit".into(),
            })
    }

    /// Publishes `record` of a change of `relation` (named if the producer
    /// refuses it as too large and it goes to the dead-letter topic).
    pub(super) async fn publish_row(
        &mut self,
        relation: &Arc<Relation>,
        txn: TxnId,
        pos: Position,
        record: &crate::router::Record,
        counted: Counted,
    ) -> Result<(), RelayError> {
        if self.dead_letter.is_some() || self.registry.is_some() {
            self.publishing = Some(relation.clone());
        }
        let sent = self.publish(txn, pos, record, counted).await;
        self.publishing = None;
        sent
    }

    /// Publishes the records of one change (or snapshot row) of `relation`,
    /// in order, draining `records`.
    pub(super) async fn publish_all(
        &mut self,
        relation: Option<&Arc<Relation>>,
        records: &mut Vec<crate::router::Record>,
        txn: TxnId,
        pos: Position,
        counted: Counted,
    ) -> Result<(), RelayError> {
        if let Some(relation) =
            relation.filter(|_| self.dead_letter.is_some() || self.registry.is_some())
        {
            self.publishing = Some(relation.clone());
        }
        let mut sent = Ok(());
        for record in records.drain(..) {
            sent = self.publish(txn, pos, &record, counted).await;
            if sent.is_err() {
                break;
            }
        }
        self.publishing = None;
        sent
    }

    /// Publishes the dead-letter record of `failure` in its change's place
    /// (transaction `txn`, the change's position), counts and logs it.
    pub(super) async fn publish_dead_letter(
        &mut self,
        txn: TxnId,
        failure: Failure,
        counted: Counted,
    ) -> Result<(), RelayError> {
        let Some(dl) = &self.dead_letter else {
            return Ok(());
        };
        let record = dl.record(&failure);
        match self.send_one(txn, failure.pos, &record, counted).await {
            Ok(()) => {}
            Err(Sent::Refused(error)) if error.is_too_large() => {
                // The original bytes are over the producer's limit too:
                // the record goes without them (its size in a header).
                self.checkpoint.ack(txn, record.size())?;
                let failure = Failure {
                    refused_bytes: failure.value.as_ref().map(Bytes::len),
                    value: None,
                    ..failure
                };
                let Some(dl) = &self.dead_letter else {
                    return Ok(());
                };
                let record = dl.record(&failure);
                self.send_one(txn, failure.pos, &record, counted)
                    .await
                    .map_err(|e| self.sent_error(e, failure.pos, &record))?;
                self.note_dead_letter(&failure);
                return Ok(());
            }
            Err(e) => return Err(self.sent_error(e, failure.pos, &record)),
        }
        self.note_dead_letter(&failure);
        Ok(())
    }

    fn note_dead_letter(&mut self, failure: &Failure) {
        if let Some(dl) = &mut self.dead_letter {
            dl.note(failure, &self.metrics);
        }
    }

    /// Hands one record of transaction `txn` at `pos` to the sink: counts it
    /// in the checkpoint first (so its delivery report always finds its
    /// transaction), then sends it with the token that brings the report
    /// back. `counted`: what its acknowledgement counts for.
    pub(super) async fn publish(
        &mut self,
        txn: TxnId,
        pos: Position,
        record: &crate::router::Record,
        counted: Counted,
    ) -> Result<(), RelayError> {
        let framed;
        let record = if record.schemas.is_some() {
            framed = self.frame(pos, record).await?;
            &framed
        } else {
            record
        };
        match self.send_one(txn, pos, record, counted).await {
            Ok(()) => Ok(()),
            Err(Sent::Refused(error)) if self.dead_letter.is_some() && error.is_too_large() => {
                // The producer refused it when handed it: nothing of it is
                // queued and nothing after it was sent, so its dead-letter
                // record takes its place in order. Its count comes off the
                // checkpoint; the dead-letter record's goes on.
                self.checkpoint.ack(txn, record.size())?;
                let table = self.publishing.as_ref().map_or_else(
                    || "unknown".to_owned(),
                    |r| format!("{}.{}", r.namespace, r.name),
                );
                let id = match record.event_id() {
                    Some(EventId::OutboxRow(id)) => Some(id.clone()),
                    _ => None,
                };
                let failure = Failure {
                    reason: Reason::TooLarge,
                    error: format!(
                        "Kafka rejected {} for topic {:?} (transaction committed at {}): {error}",
                        describe_record(record),
                        self.topic_counters.shown(&record.topic),
                        pos.commit_lsn
                    ),
                    table,
                    pos,
                    id,
                    topic: Some(self.topic_counters.shown(&record.topic)),
                    key: record.key.clone(),
                    value: None,
                    refused_bytes: Some(record.value.as_ref().map_or(0, Bytes::len)),
                };
                self.publish_dead_letter(txn, failure, counted).await
            }
            Err(e) => Err(self.sent_error(e, pos, record)),
        }
    }

    /// `record` in the Confluent wire format, its schema ids from the
    /// registry: nothing is sent in its place when they cannot be had.
    async fn frame(
        &self,
        pos: Position,
        record: &crate::router::Record,
    ) -> Result<crate::router::Record, RelayError> {
        // A `[[message]]` record has no relation: it names its prefix.
        let prefix = || {
            record
                .headers
                .iter()
                .find(|(k, _)| &**k == crate::router::message::PREFIX_HEADER)
                .map(|(_, v)| {
                    format!(
                        "logical message prefix {}",
                        crate::config::quoted(&String::from_utf8_lossy(v))
                    )
                })
        };
        let error = |error| RelayError::SchemaRegistry {
            table: self.publishing.as_ref().map_or_else(
                || prefix().unwrap_or_else(|| "an outbox table".to_owned()),
                |r| format!("{}.{}", r.namespace, r.name),
            ),
            topic: self.topic_counters.shown(&record.topic),
            lsn: pos.commit_lsn,
            change: record.schemas.as_ref().and_then(|s| s.change.clone()),
            error: Box::new(error),
        };
        let Some(registry) = &self.registry else {
            return Err(RelayError::Setup {
                what: "a record needs a schema registry, and none is configured".into(),
                fix: "add [kafka.schema_registry] (validation should have said so: report this)"
                    .into(),
            });
        };
        match registry.frame(record).await {
            Ok(Some(framed)) => Ok(framed),
            Ok(None) => Ok(record.clone()),
            Err(e) => Err(error(e)),
        }
    }

    fn sent_error(&self, e: Sent, pos: Position, record: &crate::router::Record) -> RelayError {
        match e {
            Sent::Error(e) => e,
            Sent::Refused(error) => RelayError::Delivery {
                topic: self.topic_counters.shown(&record.topic),
                lsn: pos.commit_lsn,
                event: describe_record(record),
                error,
                at_send: true,
            },
        }
    }

    /// The one send sequence of every record: counts it in the checkpoint
    /// first (so its delivery report always finds its transaction), then
    /// sends it with the token that brings the report back.
    async fn send_one(
        &mut self,
        txn: TxnId,
        pos: Position,
        record: &crate::router::Record,
        counted: Counted,
    ) -> Result<(), Sent> {
        let (snapshot_chunk, commit_ms) = match counted {
            Counted::Streamed { commit_ms } => (None, commit_ms),
            Counted::SnapshotTable(table) => {
                self.pace.on_snapshot_row();
                (Some(table), 0)
            }
            Counted::Other => (None, 0),
        };
        self.pace.apply(&self.sink, &self.metrics).await;
        self.check_transaction_clock().await.map_err(Sent::Error)?;
        let bytes = record.size();
        self.checkpoint
            .record_sent(txn, bytes)
            .map_err(|e| Sent::Error(e.into()))?;
        self.offsets
            .before_send(&self.sink, bytes, commit_ms)
            .map_err(Sent::Error)?;
        self.metrics
            .records_published
            .fetch_add(1, Ordering::Relaxed);
        self.metrics
            .published_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
        self.metrics
            .published_lsn
            .store(pos.commit_lsn.0, Ordering::Relaxed);
        self.topic_counters.count(&record.topic);
        let token = Token::Record {
            txn,
            bytes,
            commit_lsn: pos.commit_lsn,
            index: pos.index,
            event_id: record_id(record),
            snapshot_chunk,
            commit_ms,
        };
        self.offsets.check_lease().await.map_err(Sent::Error)?;
        self.sink.send(record, token).await.map_err(Sent::Refused)?;
        self.awaiting_reports += 1;
        Ok(())
    }

    /// `exactly_once`: a transient Kafka failure of a Kafka transaction that
    /// one PostgreSQL transaction (or the snapshot) kept open past
    /// `kafka.transaction_timeout` is that definite error instead (the
    /// transaction aborted); any other error passes unchanged.
    pub(super) async fn explain_overrun(&mut self, e: RelayError) -> RelayError {
        let transient_kafka = matches!(
            &e,
            RelayError::Delivery { error, .. } | RelayError::Sink(error)
                if error.kind == crate::sink::error::SinkErrorKind::Transient
        );
        if !transient_kafka {
            return e;
        }
        match self.offsets.explain_failure(&self.sink) {
            Some(overrun) => {
                tracing::debug!(error = %e, "the Kafka failure that revealed the overrun");
                self.stop_overrun(overrun).await
            }
            None => e,
        }
    }

    /// `exactly_once`: the open Kafka transaction has been open for
    /// `kafka.transaction_timeout` with one PostgreSQL transaction (or the
    /// snapshot) partly in it: aborts it and returns the definite error.
    pub(super) async fn check_transaction_clock(&mut self) -> Result<(), RelayError> {
        match self.offsets.overrun(&self.sink) {
            Some(overrun) => Err(self.stop_overrun(overrun).await),
            None => Ok(()),
        }
    }

    /// Aborts the open Kafka transaction (best effort: the broker aborts it
    /// anyway) and makes the error of `overrun`.
    async fn stop_overrun(&mut self, overrun: super::transaction_clock::Overrun) -> RelayError {
        if let Err(e) = self.offsets.abort(&self.sink, &self.metrics).await {
            tracing::debug!(error = %e, "aborting the overrun Kafka transaction failed");
        }
        RelayError::TransactionOverrun(Box::new(overrun))
    }

    /// Writes the confirmed position to the offset store if it moved and no
    /// write is pending. `exactly_once`: commits the Kafka transaction, with
    /// the position it covers, once it reached a bound (or, with no
    /// transaction open, stores a newer keepalive position in one of its
    /// own), where no PostgreSQL transaction is partly in it.
    pub(super) async fn write_offset_if_due(&mut self) -> Result<(), RelayError> {
        if self.offsets.exactly_once() {
            let due = self.offsets.transaction_due()
                || (!self.offsets.transaction_open()
                    && self.checkpoint.committed() > self.offsets.acked());
            return if due {
                self.commit_transaction_now().await
            } else {
                Ok(())
            };
        }
        let confirmed = self.checkpoint.confirmed();
        if self.offsets.in_flight().is_some() || confirmed <= self.offsets.acked() {
            return Ok(());
        }
        self.write_offset(confirmed).await
    }

    /// After a PostgreSQL transaction (or a heartbeat, or an incremental
    /// snapshot chunk) entered the checkpoint whole: `exactly_once` may
    /// commit its Kafka transaction here.
    pub(super) async fn at_commit_point(&mut self) -> Result<(), RelayError> {
        self.note_invalid_trace_contexts();
        if self.offsets.exactly_once() && self.offsets.transaction_due() {
            self.commit_transaction_now().await?;
        }
        Ok(())
    }

    /// Counts the trace context values the router found invalid (and left
    /// out) and logs the first table once per session.
    pub(super) fn note_invalid_trace_contexts(&mut self) {
        if let Some((n, table)) = self.router.take_invalid_trace_contexts() {
            self.metrics
                .trace_contexts_invalid
                .fetch_add(n, Ordering::Relaxed);
            if !self.warned_trace_context {
                self.warned_trace_context = true;
                tracing::warn!(
                    %table, rows = n,
                    "outbox rows carry a trace context that is not a valid W3C traceparent \
                     (or tracestate); they are published without it (metric \
                     walrelay_trace_contexts_invalid_total; logged once per session)"
                );
            }
        }
    }

    /// `exactly_once`: commits the Kafka transaction now, with the offset
    /// record of everything it holds (the checkpoint's newest commit),
    /// unless a PostgreSQL transaction or the initial snapshot is partly in
    /// it (then the next commit point does).
    pub(super) async fn commit_transaction_now(&mut self) -> Result<(), RelayError> {
        if self.checkpoint.open_txn().is_some() || self.holding {
            return Ok(());
        }
        let at = self.checkpoint.committed();
        if !self.offsets.transaction_open() && at <= self.offsets.acked() {
            return Ok(());
        }
        self.write_offset(at).await
    }

    /// Writes `confirmed` (with the template's identity and snapshot
    /// progress) to the offset store: `at_least_once`, sends it (its
    /// acknowledgement clears the write in flight); `exactly_once`, commits
    /// it with the Kafka transaction that holds everything up to it.
    pub(super) async fn write_offset(&mut self, confirmed: Lsn) -> Result<(), RelayError> {
        // Chunks whose high watermark the frontier has passed are in Kafka:
        // their progress goes with this position.
        self.offsets.carry_up_to(confirmed);
        // The commit time that goes with the position: `exactly_once`
        // stores what its Kafka transaction holds (everything committed),
        // `at_least_once` what Kafka acknowledged.
        let commit_ms = if self.offsets.exactly_once() {
            self.checkpoint.committed_commit_ms()
        } else {
            self.checkpoint.confirmed_commit_ms()
        };
        if commit_ms.is_some() {
            self.offsets.template_mut().committed_at_ms = commit_ms;
        }
        if self.offsets.exactly_once() {
            return self
                .offsets
                .commit(
                    &self.sink,
                    confirmed,
                    "the offset-store write",
                    &self.metrics,
                )
                .await;
        }
        self.offsets
            .send(&self.sink, confirmed, "the offset-store write")
            .await
    }

    /// Stores `lsn` with the template and waits until Kafka holds it (see
    /// [`OffsetWriter::store`]).
    pub(super) async fn store_offset(
        &mut self,
        acks: &mut tokio::sync::mpsc::UnboundedReceiver<super::Ack>,
        lsn: Lsn,
        what: &str,
    ) -> Result<(), RelayError> {
        self.offsets
            .store(&self.sink, acks, lsn, what, &self.config, &self.metrics)
            .await
    }
}

/// The record's event id (set by the router), if it has one.
pub(super) fn record_id(record: &crate::router::Record) -> Option<EventId> {
    record.event_id().cloned()
}

/// "outbox row id=…", "table change event_id=…" or "record #N of the
/// transaction" for error messages (never the payload).
fn describe_event(id: Option<&EventId>, index: u64) -> String {
    match id {
        Some(EventId::OutboxRow(id)) => format!("outbox row id={}", String::from_utf8_lossy(id)),
        Some(EventId::Change(id)) => {
            format!("table change event_id={}", String::from_utf8_lossy(id))
        }
        None => format!("record #{index} of the transaction"),
    }
}

/// How `record` is named in error messages (see [`describe_event`]).
pub(super) fn describe_record(record: &crate::router::Record) -> String {
    describe_event(record_id(record).as_ref(), 0)
}

#[cfg(test)]
mod tests;
