//! The streaming loop of one session: replication messages in, records out,
//! acknowledgements back into the checkpoint, positions to the offset store
//! and then to PostgreSQL (see the invariants in the parent module).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::RelayError;
use super::watchdog::KafkaWatch;

use super::dead_letter::{DeadLetter, Failure, Reason};
use super::heartbeat::{self, Beat};
use super::offset_writer::OffsetWriter;
use super::{Ack, EventId, Sink, Token};
use crate::Lsn;
use crate::checkpoint::{Checkpoint, Limits, TxnId};
use crate::config::Config;
use crate::pg::wire::WireError;
use crate::router::{Record, Routed, Router};
use crate::source::{Change, Op, Position, Source, SourceEvent};
use crate::telemetry::Metrics;

/// Buffered messages handled after one from the event loop before going
/// back to it.
const BURST: usize = 256;

pub(super) struct Streaming {
    pub(super) metrics: Arc<Metrics>,
    pub(super) config: Arc<Config>,
    pub(super) sink: Sink,
    pub(super) router: Router,
    /// Transactions in flight, the open one included: the relay keeps no
    /// second copy (the source's assembler pairs Begin and Commit, the
    /// checkpoint holds the open transaction's entry).
    pub(super) checkpoint: Checkpoint,
    /// Every offset-store write, and the newest acknowledged one: what we
    /// report.
    pub(super) offsets: OffsetWriter,
    /// Records handed to the producer whose delivery report (success or
    /// failure) has not come back yet. Unlike the checkpoint's in-flight
    /// count, a failure settles a record here: a graceful stop waits for
    /// this to reach zero, not for acks that will never come.
    pub(super) awaiting_reports: u64,
    pub(super) warned_updates: HashSet<String>,
    /// `walrelay_records_published_by_topic`'s counters.
    pub(super) topic_counters: super::topic_metric::TopicCounters,
    /// Tables whose unclaimed rows were logged this session.
    pub(super) warned_unclaimed: HashSet<String>,
    /// Whether invalid trace contexts were logged this session.
    pub(super) warned_trace_context: bool,
    /// A row of the open transaction that cannot be routed: the session
    /// reads on to the transaction's Commit (publishing nothing more) so
    /// that the error can name the end LSN that skips it, then stops.
    pub(super) unroutable: Option<(crate::router::RouteError, Option<String>)>,
    /// The snapshot's tables, when this session takes one (records sent and
    /// acknowledged per table).
    pub(super) snapshot_tables: Vec<super::snapshot::TableCount>,
    /// Table change events (`[[table]]`).
    pub(super) tables: crate::router::table::TableRouter,
    /// The records of one table change, reused.
    pub(super) table_records: Vec<crate::router::Record>,
    /// When the snapshot started, ms since 1970 (`source.ts_ms` of its rows).
    pub(super) snapshot_ms: i64,
    /// Where the `[[table]]` snapshot rows stand (`source.snapshot`).
    pub(super) snapshot_marks: super::table_events::SnapshotMarks,
    /// The configured tables' keys, for incremental snapshots.
    pub(super) chunk_specs: super::incremental::Specs,
    /// Incremental snapshot chunks published and not yet stored: their
    /// high watermark, the plan with them done, and rows published so far.
    pub(super) incremental_pending:
        std::collections::VecDeque<(Lsn, crate::source::IncrementalPlan, u64)>,
    /// Incremental snapshot rows published this session.
    pub(super) incremental_rows: u64,
    /// The initial snapshot, while this session takes one.
    pub(super) initial: Option<super::snapshot::InitialSnapshot>,
    /// `[[message]]` routes.
    pub(super) messages: super::messages::Messages,
    /// `[dead_letter]`: where unpublishable changes go instead of stopping.
    pub(super) dead_letter: Option<DeadLetter>,
    /// With `[dead_letter]`: the relation of the change being published,
    /// to name it if the producer refuses its record as too large.
    pub(super) publishing: Option<Arc<crate::pgoutput::Relation>>,
    /// Which of the sink's producers records go to (`kafka.linger_while_behind`).
    pub(super) pace: super::pace::Pace,
}

/// How [`Streaming::stream`] ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LoopEnd {
    /// Shutdown was asked for.
    Shutdown,
    /// The initial snapshot is read and every record of it acknowledged:
    /// store `completed` ([`Streaming::complete_snapshot`]), then stream.
    SnapshotSafe,
}

impl Streaming {
    /// A session's streaming state, resuming from `start` (already confirmed
    /// and stored); `offsets` writes this connector's offset-store records.
    pub(super) fn new(
        config: Arc<Config>,
        metrics: Arc<Metrics>,
        sink: Sink,
        router: Router,
        start: Lsn,
        mut offsets: OffsetWriter,
    ) -> Streaming {
        offsets.starting_at(start);
        let limits = Limits {
            max_in_flight_records: config.kafka.max_in_flight_records as u64,
            max_in_flight_bytes: config.kafka.max_in_flight_bytes,
        };
        let config_for_dead_letter = config.clone();
        Streaming {
            tables: crate::router::table::TableRouter::new(&config),
            messages: super::messages::Messages::new(&config),
            topic_counters: super::topic_metric::TopicCounters::new(&config, metrics.clone()),
            metrics,
            config,
            sink,
            router,
            checkpoint: Checkpoint::new(start, limits),
            offsets,
            awaiting_reports: 0,
            warned_updates: HashSet::new(),
            warned_unclaimed: HashSet::new(),
            warned_trace_context: false,
            unroutable: None,
            snapshot_tables: Vec::new(),
            table_records: Vec::new(),
            snapshot_ms: 0,
            snapshot_marks: Default::default(),
            chunk_specs: Default::default(),
            incremental_pending: Default::default(),
            incremental_rows: 0,
            initial: None,
            dead_letter: DeadLetter::new(&config_for_dead_letter),
            publishing: None,
            pace: Default::default(),
        }
    }

    /// The session's one loop, for the initial snapshot and for streaming
    /// alike: reads the source while the in-flight limits allow, hands
    /// records to the sink, applies acknowledgements, writes offsets, and
    /// watches Kafka for stalls and a stuck producer. While streaming it
    /// also reports positions to PostgreSQL and watches the replication
    /// connection for silence; during the snapshot (the replication
    /// connection idle) it logs and stores the snapshot's progress instead,
    /// and ends once the snapshot is safe in Kafka.
    ///
    /// `exactly_once`: a transaction too big for `kafka.transaction_timeout`
    /// ends it with a definite error (see `transaction_clock`).
    pub(super) async fn stream(
        &mut self,
        source: &mut Source,
        acks: &mut mpsc::UnboundedReceiver<Ack>,
        status_interval: Duration,
        receive_timeout: Duration,
        shutdown: &CancellationToken,
    ) -> Result<LoopEnd, RelayError> {
        match self
            .stream_loop(source, acks, status_interval, receive_timeout, shutdown)
            .await
        {
            Err(e) => Err(self.explain_overrun(e).await),
            ended => ended,
        }
    }

    /// `exactly_once`: a transient Kafka failure of a Kafka transaction that
    /// one PostgreSQL transaction (or the snapshot) kept open past
    /// `kafka.transaction_timeout` is that definite error instead (the
    /// transaction aborted); any other error passes unchanged.
    pub(super) async fn explain_overrun(&mut self, e: RelayError) -> RelayError {
        let transient_kafka = matches!(
            &e,
            RelayError::Delivery { error, .. } | RelayError::Sink(error)
                if error.kind == crate::sink::kafka::SinkErrorKind::Transient
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
    async fn check_transaction_clock(&mut self) -> Result<(), RelayError> {
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

    async fn stream_loop(
        &mut self,
        source: &mut Source,
        acks: &mut mpsc::UnboundedReceiver<Ack>,
        status_interval: Duration,
        receive_timeout: Duration,
        shutdown: &CancellationToken,
    ) -> Result<LoopEnd, RelayError> {
        let mut ticker = tokio::time::interval(status_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut full_since: Option<Instant> = None;
        // When the walsender last sent anything. A half-open connection (a
        // peer or middlebox gone without a FIN/RST) reads nothing forever
        // and our writes still succeed into the socket buffer; only silence
        // tells. After two status intervals of silence each status update
        // asks for a reply (the walsender answers at once with a
        // keepalive); after `receive_timeout` the connection is dead.
        let mut last_heard = Instant::now();
        // Stalls and a stuck producer (see super::watchdog).
        let mut kafka = KafkaWatch::new(if self.initial.is_some() {
            "snapshot records"
        } else {
            "records"
        });
        loop {
            let snapshotting = self.initial.is_some();
            if snapshotting && self.snapshot_safe() {
                return Ok(LoopEnd::SnapshotSafe);
            }
            let full = self.checkpoint.is_full();
            match (full, full_since) {
                (true, None) => {
                    full_since = Some(Instant::now());
                    tracing::debug!(
                        records = self.checkpoint.in_flight_records(),
                        bytes = self.checkpoint.in_flight_bytes(),
                        "in-flight limit reached; pausing reads until Kafka acknowledges"
                    );
                }
                (false, Some(since)) => {
                    self.metrics.backpressure(since.elapsed());
                    full_since = None;
                }
                _ => {}
            }
            if full || snapshotting {
                // We are not reading the replication connection: silence is
                // ours, not the server's.
                last_heard = Instant::now();
            }
            let waiting =
                self.checkpoint.in_flight_records() > 0 || self.offsets.in_flight().is_some();
            if !waiting {
                kafka.nothing_awaited(&self.metrics);
            }
            self.metrics
                .in_flight_records
                .store(self.checkpoint.in_flight_records(), Ordering::Relaxed);
            self.metrics
                .in_flight_bytes
                .store(self.checkpoint.in_flight_bytes(), Ordering::Relaxed);
            self.metrics
                .confirmed_lsn
                .store(source.confirmed().0, Ordering::Relaxed);
            if waiting {
                kafka.warn_if_stalled(self.checkpoint.in_flight_records(), full);
            }
            if shutdown.is_cancelled() {
                return Ok(LoopEnd::Shutdown);
            }
            let readable = !full && !self.snapshot_read_all();
            // `exactly_once`: the open Kafka transaction's time bound, when
            // it may be committed at once (no PostgreSQL transaction partly
            // in it); otherwise its PostgreSQL transaction's Commit commits it.
            let commit_at = self
                .offsets
                .transaction_deadline()
                .filter(|_| self.checkpoint.open_txn().is_none() && self.initial.is_none());
            // Unbiased on purpose: under a backlog both the stream and the
            // acks are always ready, and a fixed order would starve one
            // (reads, or acks and with them the status updates).
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(LoopEnd::Shutdown),
                ack = acks.recv() => {
                    let Some(ack) = ack else { return Err(RelayError::Ended("Kafka delivery channel")) };
                    kafka.acknowledged(&self.metrics);
                    // One clock reading for the batch: the reports ready
                    // now arrived together.
                    let now_ms = super::heartbeat::now_ms();
                    if self.on_ack_at(ack, now_ms)? {
                        source.confirm(self.offsets.acked(), false).await?;
                    }
                    // Drain what else is ready without going back to select.
                    while let Ok(ack) = acks.try_recv() {
                        if self.on_ack_at(ack, now_ms)? {
                            source.confirm(self.offsets.acked(), false).await?;
                        }
                    }
                    self.metrics.record_acked();
                    // An incremental snapshot's next chunk waits for the
                    // last one to be stored: store it as soon as Kafka
                    // holds it, not at the next tick.
                    source.incremental_stored(self.offsets.acked());
                    if let Some(lsn) = source.incremental_publishing() {
                        if self.offsets.exactly_once() {
                            if lsn <= self.checkpoint.committed() {
                                self.commit_transaction_now().await?;
                                source.incremental_stored(self.offsets.acked());
                            }
                        } else if lsn <= self.checkpoint.confirmed() {
                            self.write_offset_if_due().await?;
                        }
                    }
                }
                _ = sleep_until_some(commit_at) => {
                    self.write_offset_if_due().await?;
                }
                _ = ticker.tick() => {
                    self.check_transaction_clock().await?;
                    if snapshotting {
                        self.snapshot_tick(source).await?;
                    } else {
                        let silent_for = last_heard.elapsed();
                        if silent_for > receive_timeout {
                            return Err(RelayError::Wire(WireError::Silent { silent_for }));
                        }
                        self.write_offset_if_due().await?;
                        let ping = silent_for > status_interval * 2;
                        source.confirm(self.offsets.acked(), ping).await?;
                    }
                    kafka.probe(&self.config).await?;
                }
                event = source.next(), if readable => {
                    last_heard = Instant::now();
                    self.on_event(event?, source).await?;
                    // Handle what else is already buffered without a trip
                    // through select per message (a burst of small
                    // transactions is three messages per row), bounded so
                    // acks and ticks still get their turn.
                    for _ in 0..BURST {
                        if self.checkpoint.is_full() {
                            break;
                        }
                        let Some(event) = source.try_next()? else { break };
                        self.on_event(event, source).await?;
                    }
                    self.metrics.received_lsn.store(source.received().0, Ordering::Relaxed);
                }
            }
        }
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

    async fn on_event(
        &mut self,
        event: SourceEvent,
        source: &mut Source,
    ) -> Result<(), RelayError> {
        match event {
            SourceEvent::Idle { wal_end, reply } => {
                self.checkpoint.keepalive(wal_end);
                if reply {
                    self.write_offset_if_due().await?;
                    source.confirm(self.offsets.acked(), false).await?;
                }
            }
            SourceEvent::Begin {
                commit_lsn,
                xid,
                commit_time,
                lsn,
                sent_time,
            } => {
                self.pace
                    .on_begin(commit_time, sent_time, crate::pg::replication::pg_now_us());
                self.checkpoint.begin()?;
                self.offsets
                    .unit_begins(super::transaction_clock::Unit::Pg { xid, commit_lsn });
                self.table_transaction_begins(commit_lsn, xid, commit_time, lsn);
            }
            SourceEvent::Commit {
                commit_lsn,
                end_lsn,
                commit_time,
            } => {
                let open = self.open_txn(commit_lsn)?;
                if let Some((error, row_id)) = self.unroutable.take() {
                    return Err(RelayError::Unroutable {
                        error: Box::new(error),
                        row_id,
                        end_lsn,
                        slot: self.config.postgres.slot.clone(),
                    });
                }
                let commit_ms = crate::pg::replication::pg_us_to_unix_ms(commit_time);
                // Its END record (transaction metadata) is one of its
                // records: sent before it closes in the checkpoint.
                self.table_transaction_ends(open, commit_lsn, end_lsn, commit_ms)
                    .await?;
                self.checkpoint.commit_at(open, end_lsn, Some(commit_ms))?;
                self.offsets.unit_ends();
                self.metrics.transactions.fetch_add(1, Ordering::Relaxed);
                self.at_commit_point().await?;
            }
            SourceEvent::Message {
                lsn,
                prefix,
                content,
            } if prefix == super::incremental::SIGNAL_PREFIX => {
                self.on_signal(lsn, &content, source)
            }
            SourceEvent::Message {
                lsn,
                prefix,
                content,
            } => {
                self.messages.non_transactional(&prefix, lsn);
                self.on_message(lsn, &prefix, &content).await?
            }
            SourceEvent::TxnMessage {
                pos,
                txn,
                lsn,
                prefix,
                content,
            } => {
                self.on_txn_message(pos, txn, lsn, &prefix, &content)
                    .await?
            }
            SourceEvent::SnapshotChunk {
                lsn,
                table,
                relation,
                rows,
                read,
                plan,
            } => {
                self.on_snapshot_chunk(lsn, table, relation.as_ref(), rows, read, plan, source)
                    .await?
            }
            SourceEvent::Relation(r) => {
                self.router.on_relation(&r);
                self.on_table_relation(&r, source.received())?;
            }
            SourceEvent::Change(change) => self.on_change(change).await?,
            SourceEvent::Truncate {
                pos,
                txn,
                lsn,
                relations,
            } => self.on_truncate(pos, txn, lsn, &relations).await?,
            event @ (SourceEvent::SnapshotRow { .. }
            | SourceEvent::SnapshotTableDone { .. }
            | SourceEvent::SnapshotDone { .. }) => self.on_snapshot_event(event).await?,
        }
        Ok(())
    }

    /// A non-transactional logical message. A walrelay heartbeat (any
    /// connector's) enters the checkpoint as a transaction of its own that
    /// ends at `lsn`, so the frontier reaches it only once everything before
    /// it is acked; this connector's own heartbeats also feed the metrics and,
    /// with `publish = true`, add their record to that transaction (see
    /// `relay::heartbeat`). Other prefixes are someone else's: ignored.
    pub(super) async fn on_message(
        &mut self,
        lsn: Lsn,
        prefix: &str,
        content: &[u8],
    ) -> Result<(), RelayError> {
        if prefix != heartbeat::PREFIX {
            return Ok(());
        }
        if self.checkpoint.open_txn().is_some() {
            return Err(RelayError::Stream {
                lsn,
                what: "a heartbeat inside a transaction".into(),
            });
        }
        let connector = &self.config.connector.name;
        let ours = Beat::parse(content).filter(|b| &b.connector == connector);
        let id = self.checkpoint.begin()?;
        if let Some(beat) = ours {
            self.metrics
                .heartbeat_received(beat.round_trip(heartbeat::now_ms()));
            if self.config.heartbeat.publish {
                let prefix = self.config.topic_prefix();
                let topic = self.config.heartbeat.topic_for(prefix);
                let record = beat.record(prefix, &topic);
                let pos = Position {
                    commit_lsn: lsn,
                    index: 0,
                };
                self.publish(id, pos, &record, Counted::Other).await?;
            }
        }
        self.checkpoint.commit(id, lsn)?;
        self.at_commit_point().await
    }

    async fn on_change(&mut self, change: Change) -> Result<(), RelayError> {
        let open = self.open_txn(change.pos.commit_lsn)?;
        let commit_lsn = change.pos.commit_lsn;
        if self.unroutable.is_some() {
            // Stopping at this transaction's Commit: publish nothing more.
            return Ok(());
        }
        if self.is_table_change(&change) {
            return self.on_table_change(&change, open).await;
        }
        let (Op::Insert, Some(new)) = (change.op, &change.new) else {
            if change.op == Op::Update
                && let Err(e) = self.on_update(&change)
            {
                match e {
                    RelayError::Route(e) => self.unroutable = Some((e, None)),
                    e => return Err(e),
                }
            }
            // Deletes (insert-then-delete is the usual outbox pattern)
            // publish nothing.
            return Ok(());
        };
        let routed = match self.router.on_insert(
            change.relation.oid,
            new,
            commit_lsn,
            Some(change.txn.commit_time),
        ) {
            Ok(routed) => routed,
            Err(e) if self.dead_letter.is_some() => {
                let salvaged = self.router.salvage(change.relation.oid, new);
                let row_id = self.router.row_id(change.relation.oid, new);
                let failure = Failure {
                    reason: Reason::Outbox(e.kind),
                    error: match row_id {
                        Some(id) => format!("{e} (row id {id})"),
                        None => e.to_string(),
                    },
                    table: e.table,
                    pos: change.pos,
                    id: salvaged.id,
                    topic: salvaged.route,
                    key: salvaged.key,
                    value: salvaged.value,
                    refused_bytes: None,
                };
                let commit_ms = crate::pg::replication::pg_us_to_unix_ms(change.txn.commit_time);
                return self
                    .publish_dead_letter(open, failure, Counted::Streamed { commit_ms })
                    .await;
            }
            Err(e) => {
                let row_id = self.router.row_id(change.relation.oid, new);
                self.unroutable = Some((e, row_id));
                return Ok(());
            }
        };
        let record = match routed {
            Routed::Record(record) => record,
            Routed::Unclaimed { table } => {
                self.metrics.rows_unclaimed.fetch_add(1, Ordering::Relaxed);
                if self.warned_unclaimed.insert(table.clone()) {
                    tracing::warn!(
                        %table, lsn = %commit_lsn,
                        "the publication publishes rows of a table that no [[outbox]] section \
                         claims; they are not published (add the table to the configuration, \
                         or remove it from the publication; logged once per table per session)"
                    );
                }
                return Ok(());
            }
            Routed::Nothing | Routed::IgnoredUpdate { .. } => return Ok(()),
        };
        let commit_ms = crate::pg::replication::pg_us_to_unix_ms(change.txn.commit_time);
        if self.dead_letter.is_some() {
            self.publishing = Some(change.relation.clone());
        }
        let sent = self
            .publish(open, change.pos, &record, Counted::Streamed { commit_ms })
            .await;
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
            Err(Sent::Refused(error)) if is_too_large(&error) => {
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
        record: &Record,
        counted: Counted,
    ) -> Result<(), RelayError> {
        match self.send_one(txn, pos, record, counted).await {
            Ok(()) => Ok(()),
            Err(Sent::Refused(error)) if self.dead_letter.is_some() && is_too_large(&error) => {
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

    fn sent_error(&self, e: Sent, pos: Position, record: &Record) -> RelayError {
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
        record: &Record,
        counted: Counted,
    ) -> Result<(), Sent> {
        let (snapshot_table, commit_ms) = match counted {
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
            snapshot_table,
            commit_ms,
        };
        self.offsets.check_lease().await.map_err(Sent::Error)?;
        self.sink.send(record, token).await.map_err(Sent::Refused)?;
        self.awaiting_reports += 1;
        Ok(())
    }

    fn on_update(&mut self, change: &Change) -> Result<(), RelayError> {
        let lsn = change.pos.commit_lsn;
        if let Routed::IgnoredUpdate { table, warn } =
            self.router.on_update(change.relation.oid, lsn)?
        {
            self.metrics.updates_ignored.fetch_add(1, Ordering::Relaxed);
            if warn && self.warned_updates.insert(table.clone()) {
                tracing::warn!(
                    %table, %lsn,
                    "an outbox row was updated; updates are not published (on_update = \"warn\"; \
                     logged once per table per session)"
                );
            }
        }
        Ok(())
    }

    /// Applies one delivery report. Returns true when an offset write was
    /// acknowledged (so a status update is worth sending now).
    pub(super) fn on_ack(&mut self, ack: Ack) -> Result<bool, RelayError> {
        let confirm = self.on_ack_at(ack, super::heartbeat::now_ms())?;
        self.metrics.record_acked();
        Ok(confirm)
    }

    /// [`Self::on_ack`] with the wall clock read by the caller (once for a
    /// batch of reports), without marking the time of the last report.
    pub(super) fn on_ack_at(&mut self, ack: Ack, now_ms: i64) -> Result<bool, RelayError> {
        match ack {
            Ack::Delivered(Token::Record {
                txn,
                bytes,
                snapshot_table,
                commit_ms,
                ..
            }) => {
                self.awaiting_reports = self.awaiting_reports.saturating_sub(1);
                self.checkpoint.ack(txn, bytes)?;
                self.metrics
                    .acked_lsn
                    .store(self.checkpoint.confirmed().0, Ordering::Relaxed);
                if commit_ms > 0 {
                    let ms = now_ms.saturating_sub(commit_ms).max(0);
                    self.metrics.commit_to_ack.observe(ms as f64 / 1000.0);
                }
                if let Some(t) =
                    snapshot_table.and_then(|i| self.snapshot_tables.get_mut(i as usize))
                {
                    t.acked += 1;
                }
                self.metrics.records_acked.fetch_add(1, Ordering::Relaxed);
                Ok(false)
            }
            Ack::Delivered(Token::Offset { lsn }) => {
                self.offsets.delivered(lsn, &self.metrics);
                Ok(true)
            }
            Ack::Failed {
                token:
                    Token::Record {
                        commit_lsn,
                        index,
                        event_id,
                        ..
                    },
                topic,
                error,
            } => {
                self.awaiting_reports = self.awaiting_reports.saturating_sub(1);
                Err(RelayError::Delivery {
                    topic: self.topic_counters.shown(&topic),
                    lsn: commit_lsn,
                    event: describe_event(event_id.as_ref(), index),
                    error,
                    at_send: false,
                })
            }
            Ack::Failed {
                token: Token::Offset { lsn },
                topic,
                error,
            } => {
                self.offsets.failed(lsn);
                Err(RelayError::Delivery {
                    topic,
                    lsn,
                    event: "the offset-store write".into(),
                    error,
                    at_send: false,
                })
            }
            Ack::Fatal(e) => Err(RelayError::Sink(e)),
        }
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
        if self.checkpoint.open_txn().is_some() || self.initial.is_some() {
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
        while let Some((lsn, _, _)) = self.incremental_pending.front()
            && *lsn <= confirmed
        {
            if let Some((_, plan, rows)) = self.incremental_pending.pop_front() {
                if plan.done() {
                    let given_up: Vec<String> = plan
                        .tables
                        .iter()
                        .filter_map(|t| {
                            Some(format!("{} ({})", t.display(), t.abandoned.as_ref()?))
                        })
                        .collect();
                    if given_up.is_empty() {
                        tracing::info!(
                            id = %plan.id, rows,
                            "incremental snapshot completed: every chunk is in Kafka"
                        );
                    } else {
                        tracing::warn!(
                            id = %plan.id, rows,
                            "incremental snapshot ended with tables given up, their remaining \
                             rows not read: {}; every chunk read is in Kafka",
                            given_up.join("; ")
                        );
                    }
                }
                self.offsets.template_mut().incremental =
                    Some(super::incremental::to_stored(&plan, rows));
            }
        }
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
}

/// How [`Streaming::send_one`] failed.
enum Sent {
    /// The producer refused the record when handed it.
    Refused(crate::sink::kafka::SinkError),
    Error(RelayError),
}

/// A refusal for size (the producer's `message.max.bytes`).
fn is_too_large(error: &crate::sink::kafka::SinkError) -> bool {
    error.is_too_large()
}

/// Sleeps until `at`; forever when `None`.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// What a published record's acknowledgement counts for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Counted {
    /// A streamed change committed at `commit_ms` (ms since 1970): the
    /// commit-to-acknowledgement histogram.
    Streamed { commit_ms: i64 },
    /// A row of the initial snapshot's table #n: its per-table count.
    SnapshotTable(u32),
    /// Nothing more (heartbeats, incremental snapshot rows).
    Other,
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
