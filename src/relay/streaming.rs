//! The session's one loop: replication messages in, records out,
//! acknowledgements back into the checkpoint, positions to the offset store
//! and then to PostgreSQL (see the invariants in the parent module). The
//! loop owns the [`Publisher`] (what every phase shares) and the phases,
//! and dispatches each source event to the phase it belongs to: the
//! initial snapshot ([`InitialSnapshot`]), outbox rows ([`OutboxRows`]),
//! table events ([`TableEvents`]), logical messages ([`Messages`]),
//! incremental snapshots ([`Incremental`]) and heartbeats. A phase never
//! reaches into another's state; what two phases share is the publisher's.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::incremental::{Incremental, Specs};
use super::messages::Messages;
use super::offset_writer::OffsetWriter;
use super::outbox::OutboxRows;
use super::publish::{Acked, Finished, Publisher};
use super::snapshot::{InitialSnapshot, SnapshotEnd};
use super::table_events::TableEvents;
use super::watchdog::KafkaWatch;
use super::{Ack, RelayError, Sink};
use crate::Lsn;
use crate::config::Config;
use crate::offsets::StoredOffset;
use crate::pg::wire::WireError;
use crate::router::Router;
use crate::source::{Change, IncrementalPlan, Source, SourceEvent};
use crate::startup::TableEventTable;
use crate::telemetry::Metrics;

/// Buffered messages handled after one from the event loop before going
/// back to it.
const BURST: usize = 256;

/// One session's publisher and phases (see the module doc).
pub(super) struct Streaming {
    publisher: Publisher,
    /// The initial snapshot, while this session takes one.
    initial: Option<InitialSnapshot>,
    outbox: OutboxRows,
    tables: TableEvents,
    messages: Messages,
    incremental: Incremental,
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
    /// and stored); `offsets` writes this connector's offset-store records;
    /// `captured` are the `[[table]]` tables as the catalog has them, and
    /// `specs` their keys for incremental snapshots.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        config: Arc<Config>,
        metrics: Arc<Metrics>,
        sink: Sink,
        router: Router,
        start: Lsn,
        offsets: OffsetWriter,
        captured: &[TableEventTable],
        specs: Specs,
    ) -> Streaming {
        let mut tables = TableEvents::new(&config);
        tables.set_primary_keys(captured);
        Streaming {
            messages: Messages::new(&config),
            publisher: Publisher::new(config, metrics, sink, router, start, offsets),
            initial: None,
            outbox: OutboxRows::default(),
            tables,
            incremental: Incremental::new(specs),
        }
    }

    /// Records with schemas get their ids from `registry`.
    pub(super) fn set_registry(&mut self, registry: Option<Arc<crate::sink::registry::Registry>>) {
        self.publisher.set_registry(registry);
    }

    pub(super) fn config(&self) -> &Arc<Config> {
        self.publisher.config()
    }

    pub(super) fn metrics(&self) -> &Arc<Metrics> {
        self.publisher.metrics()
    }

    /// What the next offset-store write carries besides its position.
    pub(super) fn offset_template_mut(&mut self) -> &mut StoredOffset {
        self.publisher.offsets_mut().template_mut()
    }

    /// The initial snapshot's time, ms since 1970 (`source.ts_ms` of its
    /// `[[table]]` rows).
    pub(super) fn set_snapshot_ms(&mut self, ms: i64) {
        self.tables.set_snapshot_ms(ms);
    }

    /// Drops what the producer still queues (see [`Publisher::purge_queued`]).
    pub(super) fn purge_queued(&self) {
        self.publisher.purge_queued();
    }

    /// Starts `plan` beside the stream.
    pub(super) fn start_incremental(&mut self, source: &mut Source, plan: IncrementalPlan) {
        super::incremental::start(&self.publisher, source, plan, self.incremental.read_only());
    }

    /// Starts the snapshot phase: the loop then publishes the rows `source`
    /// reads until they are safe in Kafka ([`LoopEnd::SnapshotSafe`]).
    pub(super) fn begin_snapshot(&mut self, source: &Source) -> Result<(), RelayError> {
        self.initial = Some(InitialSnapshot::begin(
            &mut self.publisher,
            &mut self.tables,
            source,
        )?);
        Ok(())
    }

    /// After [`LoopEnd::SnapshotSafe`]: stores `completed` with the
    /// consistent point and waits until Kafka holds it.
    pub(super) async fn complete_snapshot(
        &mut self,
        acks: &mut mpsc::UnboundedReceiver<Ack>,
    ) -> Result<SnapshotEnd, RelayError> {
        let Some(initial) = self.initial.take() else {
            return Err(RelayError::Stream {
                lsn: Lsn::ZERO,
                what: "the snapshot completed before it was read".into(),
            });
        };
        initial.complete(&mut self.publisher, acks).await
    }

    /// The snapshot phase ended without `completed` (shutdown, an error):
    /// `running` stays stored, and the next start takes it again.
    pub(super) fn snapshot_abandoned(&mut self) {
        if let Some(initial) = self.initial.take() {
            initial.abandoned(&mut self.publisher);
        }
    }

    /// See [`Publisher::explain_overrun`].
    pub(super) async fn explain_overrun(&mut self, e: RelayError) -> RelayError {
        self.publisher.explain_overrun(e).await
    }

    /// Graceful stop: see [`Publisher::finish`].
    pub(super) async fn finish(
        &mut self,
        source: &mut Source,
        acks: &mut mpsc::UnboundedReceiver<Ack>,
        status_interval: Duration,
    ) -> Finished {
        self.publisher.finish(source, acks, status_interval).await
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
            Err(e) => Err(self.publisher.explain_overrun(e).await),
            ended => ended,
        }
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
            if self
                .initial
                .as_ref()
                .is_some_and(|i| i.safe(&self.publisher))
            {
                return Ok(LoopEnd::SnapshotSafe);
            }
            let p = &mut self.publisher;
            let full = p.checkpoint().is_full();
            match (full, full_since) {
                (true, None) => {
                    full_since = Some(Instant::now());
                    tracing::debug!(
                        records = p.checkpoint().in_flight_records(),
                        bytes = p.checkpoint().in_flight_bytes(),
                        "in-flight limit reached; pausing reads until Kafka acknowledges"
                    );
                }
                (false, Some(since)) => {
                    p.metrics().backpressure(since.elapsed());
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
                p.checkpoint().in_flight_records() > 0 || p.offsets().in_flight().is_some();
            let metrics = p.metrics();
            if !waiting {
                kafka.nothing_awaited(metrics);
            }
            metrics
                .in_flight_records
                .store(p.checkpoint().in_flight_records(), Ordering::Relaxed);
            metrics
                .in_flight_bytes
                .store(p.checkpoint().in_flight_bytes(), Ordering::Relaxed);
            metrics
                .confirmed_lsn
                .store(source.confirmed().0, Ordering::Relaxed);
            if waiting {
                kafka.warn_if_stalled(p.checkpoint().in_flight_records(), full);
            }
            if shutdown.is_cancelled() {
                return Ok(LoopEnd::Shutdown);
            }
            let readable = !full && !self.initial.as_ref().is_some_and(InitialSnapshot::read_all);
            // `exactly_once`: the open Kafka transaction's time bound, when
            // it may be committed at once (no PostgreSQL transaction partly
            // in it); otherwise its PostgreSQL transaction's Commit commits it.
            let commit_at = p
                .offsets()
                .transaction_deadline()
                .filter(|_| p.checkpoint().open_txn().is_none() && !snapshotting);
            // Unbiased on purpose: under a backlog both the stream and the
            // acks are always ready, and a fixed order would starve one
            // (reads, or acks and with them the status updates).
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(LoopEnd::Shutdown),
                ack = acks.recv() => {
                    let Some(ack) = ack else { return Err(RelayError::Ended("Kafka delivery channel")) };
                    kafka.acknowledged(self.publisher.metrics());
                    // One clock reading for the batch: the reports ready
                    // now arrived together.
                    let now_ms = crate::telemetry::unix_ms();
                    if self.on_ack_at(ack, now_ms)? {
                        source.confirm(self.publisher.offsets().acked(), false).await?;
                    }
                    // Drain what else is ready without going back to select.
                    while let Ok(ack) = acks.try_recv() {
                        if self.on_ack_at(ack, now_ms)? {
                            source.confirm(self.publisher.offsets().acked(), false).await?;
                        }
                    }
                    let p = &mut self.publisher;
                    p.metrics().record_acked();
                    // An incremental snapshot's next chunk waits for the
                    // last one to be stored: store it as soon as Kafka
                    // holds it, not at the next tick.
                    source.incremental_stored(p.offsets().acked());
                    if let Some(lsn) = source.incremental_publishing() {
                        if p.offsets().exactly_once() {
                            if lsn <= p.checkpoint().committed() {
                                p.commit_transaction_now().await?;
                                source.incremental_stored(p.offsets().acked());
                            }
                        } else if lsn <= p.checkpoint().confirmed() {
                            p.write_offset_if_due().await?;
                        }
                    }
                }
                _ = sleep_until_some(commit_at) => {
                    self.publisher.write_offset_if_due().await?;
                }
                _ = ticker.tick() => {
                    let p = &mut self.publisher;
                    p.check_transaction_clock().await?;
                    if let Some(initial) = &mut self.initial {
                        initial.tick(p, source).await?;
                    } else {
                        let silent_for = last_heard.elapsed();
                        if silent_for > receive_timeout {
                            return Err(RelayError::Wire(WireError::Silent { silent_for }));
                        }
                        p.write_offset_if_due().await?;
                        let ping = silent_for > status_interval * 2;
                        source.confirm(p.offsets().acked(), ping).await?;
                    }
                    kafka.probe(p.config()).await?;
                }
                event = source.next(), if readable => {
                    last_heard = Instant::now();
                    self.on_event(event?, source).await?;
                    // Handle what else is already buffered without a trip
                    // through select per message (a burst of small
                    // transactions is three messages per row), bounded so
                    // acks and ticks still get their turn.
                    for _ in 0..BURST {
                        if self.publisher.checkpoint().is_full() {
                            break;
                        }
                        let Some(event) = source.try_next()? else { break };
                        self.on_event(event, source).await?;
                    }
                    let metrics = self.publisher.metrics();
                    metrics.received_lsn.store(source.received().0, Ordering::Relaxed);
                    let (spilled, streamed) = source.take_stream_counts();
                    metrics.stream_spilled_bytes.fetch_add(spilled, Ordering::Relaxed);
                    metrics.streamed_transactions.fetch_add(streamed, Ordering::Relaxed);
                }
            }
        }
    }

    /// Applies one delivery report (the wall clock read by the caller, once
    /// for a batch). Returns true when an offset write was acknowledged (so
    /// a status update is worth sending now).
    fn on_ack_at(&mut self, ack: Ack, now_ms: i64) -> Result<bool, RelayError> {
        match self.publisher.on_ack_at(ack, now_ms)? {
            Acked::Offset => Ok(true),
            Acked::Record { snapshot_chunk } => {
                if let (Some(chunk), Some(initial)) = (snapshot_chunk, &mut self.initial) {
                    initial.acked(chunk);
                }
                Ok(false)
            }
        }
    }

    /// One source event, to the phase it belongs to.
    async fn on_event(
        &mut self,
        event: SourceEvent,
        source: &mut Source,
    ) -> Result<(), RelayError> {
        let p = &mut self.publisher;
        match event {
            SourceEvent::Idle { wal_end, reply } => {
                p.checkpoint_mut().keepalive(wal_end);
                if reply {
                    p.write_offset_if_due().await?;
                    source.confirm(p.offsets().acked(), false).await?;
                }
            }
            SourceEvent::Begin {
                commit_lsn,
                xid,
                commit_time,
                lsn,
                sent_time,
            } => {
                p.transaction_begins(xid, commit_lsn, commit_time, sent_time)?;
                self.tables
                    .transaction_begins(commit_lsn, xid, commit_time, lsn);
            }
            SourceEvent::Commit {
                commit_lsn,
                end_lsn,
                commit_time,
            } => {
                let open = p.open_txn(commit_lsn)?;
                if let Some((error, row_id)) = p.take_refusal() {
                    return Err(RelayError::Unroutable {
                        error: Box::new(error),
                        row_id,
                        end_lsn,
                        slot: p.config().postgres.slot.clone(),
                    });
                }
                let commit_ms = crate::pg::replication::pg_us_to_unix_ms(commit_time);
                // Its END record (transaction metadata) is one of its
                // records: sent before it closes in the checkpoint.
                self.tables
                    .transaction_ends(p, open, commit_lsn, end_lsn, commit_ms)
                    .await?;
                p.checkpoint_mut()
                    .commit_at(open, end_lsn, Some(commit_ms))?;
                p.offsets_mut().unit_ends();
                p.metrics().transactions.fetch_add(1, Ordering::Relaxed);
                p.at_commit_point().await?;
            }
            SourceEvent::Message {
                lsn,
                prefix,
                content,
            } if prefix == super::SIGNAL_PREFIX => {
                self.incremental.on_signal(p, lsn, &content, source)
            }
            SourceEvent::Message {
                lsn,
                prefix,
                content,
            } => {
                self.messages.non_transactional(&prefix, lsn);
                super::heartbeat::on_message(p, lsn, &prefix, &content).await?
            }
            SourceEvent::TxnMessage {
                pos,
                txn,
                lsn,
                prefix,
                content,
            } => {
                self.messages
                    .on_txn_message(p, pos, txn, lsn, &prefix, &content)
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
                self.incremental
                    .on_chunk(
                        p,
                        &mut self.tables,
                        lsn,
                        table,
                        relation.as_ref(),
                        rows,
                        read,
                        plan,
                        source,
                    )
                    .await?
            }
            SourceEvent::Relation(r) => {
                p.router_mut().on_relation(&r);
                self.tables.on_relation(&r, source.received())?;
            }
            SourceEvent::Change(change) => self.on_change(change).await?,
            SourceEvent::Truncate {
                pos,
                txn,
                lsn,
                relations,
            } => {
                self.tables
                    .on_truncate(p, pos, txn, lsn, &relations)
                    .await?
            }
            event @ (SourceEvent::SnapshotRow { .. }
            | SourceEvent::SnapshotTableDone { .. }
            | SourceEvent::SnapshotDone { .. }) => {
                let Some(initial) = &mut self.initial else {
                    return Err(RelayError::Stream {
                        lsn: Lsn::ZERO,
                        what: format!("a snapshot event while streaming: {event:?}"),
                    });
                };
                initial.on_event(p, &mut self.tables, event).await?
            }
        }
        Ok(())
    }

    /// A row change of the open transaction: a `[[table]]` table's is a
    /// table event, any other an outbox row's (or nothing).
    async fn on_change(&mut self, change: Change) -> Result<(), RelayError> {
        let p = &mut self.publisher;
        let open = p.open_txn(change.pos.commit_lsn)?;
        if p.refusing() {
            // Stopping at this transaction's Commit: publish nothing more.
            return Ok(());
        }
        if self.tables.claims(change.relation.oid) {
            return self.tables.on_change(p, &change, open).await;
        }
        self.outbox.on_change(p, &change, open).await
    }
}

/// Sleeps until `at`; forever when `None`.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
