//! The streaming loop of one session: replication messages in, records out,
//! acknowledgements back into the checkpoint, positions to the offset store
//! and then to PostgreSQL (see the invariants in the parent module).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{RelayError, STALL_WARNING};

use crate::Lsn;
use crate::checkpoint::{Checkpoint, TxnId};
use crate::config::Config;
use crate::offsets::StoredOffset;
use crate::pg::replication::{ReplicationMessage, ReplicationStream, StreamEvent};
use crate::pgoutput::{self, LogicalMessage, RelationCache};
use crate::router::{Routed, Router};
use crate::sink::kafka::{Ack, Delivery, KafkaSink, SinkErrorKind};
use crate::telemetry::Metrics;

/// State of the transaction currently streaming.
#[derive(Debug, Clone, Copy)]
pub(super) struct OpenTxn {
    pub(super) id: TxnId,
    pub(super) commit_lsn: Lsn,
    pub(super) next_index: u32,
}

pub(super) struct Streaming {
    pub(super) metrics: Arc<Metrics>,
    pub(super) config: Arc<Config>,
    pub(super) sink: KafkaSink,
    pub(super) router: Router,
    pub(super) relations: RelationCache,
    pub(super) checkpoint: Checkpoint,
    pub(super) open: Option<OpenTxn>,
    pub(super) offset_template: StoredOffset,
    /// An offset-store write Kafka has not acknowledged yet.
    pub(super) offset_in_flight: Option<Lsn>,
    /// The newest acknowledged offset-store write: what we report.
    pub(super) offset_acked: Lsn,
    pub(super) warned_updates: HashSet<String>,
}

impl Streaming {
    pub(super) async fn stream(
        &mut self,
        stream: &mut ReplicationStream,
        acks: &mut mpsc::UnboundedReceiver<Ack>,
        status_interval: Duration,
        shutdown: &CancellationToken,
    ) -> Result<(), RelayError> {
        let mut ticker = tokio::time::interval(status_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut full_since: Option<Instant> = None;
        // When Kafka last acknowledged anything, and whether we said it stalled.
        let mut last_ack = Instant::now();
        let mut stall_reported = false;
        loop {
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
                (false, Some(_)) => full_since = None,
                _ => {}
            }
            let waiting =
                self.checkpoint.in_flight_records() > 0 || self.offset_in_flight.is_some();
            if !waiting {
                last_ack = Instant::now();
                self.metrics.kafka_progress();
            }
            self.metrics
                .in_flight_records
                .store(self.checkpoint.in_flight_records(), Ordering::Relaxed);
            self.metrics
                .in_flight_bytes
                .store(self.checkpoint.in_flight_bytes(), Ordering::Relaxed);
            self.metrics
                .confirmed_lsn
                .store(stream.last_reported().0, Ordering::Relaxed);
            if waiting && !stall_reported && last_ack.elapsed() > STALL_WARNING {
                stall_reported = true;
                tracing::warn!(
                    records = self.checkpoint.in_flight_records(),
                    reads_paused = full,
                    "Kafka has not acknowledged records for {}s; waiting for Kafka (is the broker reachable?)",
                    STALL_WARNING.as_secs()
                );
            }
            if shutdown.is_cancelled() {
                return Ok(());
            }
            // Unbiased on purpose: under a backlog both the stream and the
            // acks are always ready, and a fixed order would starve one
            // (reads, or acks and with them the status updates).
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                ack = acks.recv() => {
                    let Some(ack) = ack else { return Err(RelayError::Ended("Kafka delivery channel")) };
                    if stall_reported {
                        stall_reported = false;
                        tracing::info!(stalled_for = ?last_ack.elapsed(), "Kafka acknowledges again");
                    }
                    last_ack = Instant::now();
                    self.metrics.kafka_progress();
                    if self.on_ack(ack)? {
                        stream.send_status(self.offset_acked, false).await?;
                    }
                    // Drain what else is ready without going back to select.
                    while let Ok(ack) = acks.try_recv() {
                        if self.on_ack(ack)? {
                            stream.send_status(self.offset_acked, false).await?;
                        }
                    }
                }
                _ = ticker.tick() => {
                    self.write_offset_if_due().await?;
                    stream.send_status(self.offset_acked, false).await?;
                }
                event = stream.recv(), if !full => {
                    self.on_event(event?, stream).await?;
                }
            }
        }
    }

    async fn on_event(
        &mut self,
        event: StreamEvent,
        stream: &mut ReplicationStream,
    ) -> Result<(), RelayError> {
        match event {
            StreamEvent::End => Err(RelayError::Ended("the replication stream")),
            StreamEvent::Message(ReplicationMessage::Keepalive { wal_end, reply, .. }) => {
                self.checkpoint.keepalive(wal_end);
                if reply {
                    self.write_offset_if_due().await?;
                    stream.send_status(self.offset_acked, false).await?;
                }
                Ok(())
            }
            StreamEvent::Message(ReplicationMessage::XLogData {
                wal_start,
                wal_end,
                data,
                ..
            }) => {
                self.metrics
                    .received_lsn
                    .store(wal_end.0, Ordering::Relaxed);
                let msg = pgoutput::decode(data).map_err(|source| RelayError::Decode {
                    lsn: wal_start,
                    source,
                })?;
                self.on_message(msg, wal_start).await
            }
        }
    }

    async fn on_message(&mut self, msg: LogicalMessage, wal_start: Lsn) -> Result<(), RelayError> {
        match msg {
            LogicalMessage::Begin(b) => {
                let id = self.checkpoint.begin()?;
                self.open = Some(OpenTxn {
                    id,
                    commit_lsn: b.final_lsn,
                    next_index: 0,
                });
            }
            LogicalMessage::Commit(c) => {
                let open = self.open.take().ok_or_else(|| RelayError::Stream {
                    lsn: wal_start,
                    what: "Commit without Begin".into(),
                })?;
                self.checkpoint.commit(open.id, c.end_lsn)?;
                self.metrics.transactions.fetch_add(1, Ordering::Relaxed);
            }
            LogicalMessage::Relation(r) => {
                self.router.on_relation(&r);
                self.relations.insert(r);
            }
            LogicalMessage::Insert(i) => {
                let open = self.current(wal_start)?;
                self.relations
                    .require(i.relation)
                    .map_err(|e| RelayError::Stream {
                        lsn: wal_start,
                        what: e.to_string(),
                    })?;
                if let Routed::Record(record) =
                    self.router.on_insert(i.relation, &i.new, open.commit_lsn)?
                {
                    let bytes = record.size();
                    self.checkpoint.record_sent(open.id, bytes)?;
                    self.metrics
                        .records_published
                        .fetch_add(1, Ordering::Relaxed);
                    let delivery = Delivery::Record {
                        txn: open.id,
                        bytes,
                        commit_lsn: open.commit_lsn,
                        index: open.next_index,
                    };
                    if let Some(o) = self.open.as_mut() {
                        o.next_index += 1;
                    }
                    self.sink.send(&record, delivery).await.map_err(|error| {
                        RelayError::Delivery {
                            topic: record.topic.clone(),
                            lsn: open.commit_lsn,
                            event: describe_record(&record),
                            error,
                        }
                    })?;
                }
            }
            LogicalMessage::Update(u) => {
                let open = self.current(wal_start)?;
                if let Routed::IgnoredUpdate { table, warn } =
                    self.router.on_update(u.relation, open.commit_lsn)?
                {
                    self.metrics.updates_ignored.fetch_add(1, Ordering::Relaxed);
                    if warn && self.warned_updates.insert(table.clone()) {
                        tracing::warn!(
                            %table, lsn = %open.commit_lsn,
                            "an outbox row was updated; updates are not published (on_update = \"warn\"; \
                             logged once per table per session)"
                        );
                    }
                }
            }
            // Deletes (insert-then-delete is the usual outbox pattern),
            // truncates, origins, types and logical messages publish nothing.
            LogicalMessage::Delete(_)
            | LogicalMessage::Truncate(_)
            | LogicalMessage::Origin(_)
            | LogicalMessage::Type(_)
            | LogicalMessage::Message(_) => {}
        }
        Ok(())
    }

    fn current(&self, wal_start: Lsn) -> Result<OpenTxn, RelayError> {
        self.open.ok_or_else(|| RelayError::Stream {
            lsn: wal_start,
            what: "row change outside Begin..Commit".into(),
        })
    }

    /// Applies one delivery report. Returns true when an offset write was
    /// acknowledged (so a status update is worth sending now).
    fn on_ack(&mut self, ack: Ack) -> Result<bool, RelayError> {
        match ack {
            Ack::Delivered(Delivery::Record { txn, bytes, .. }) => {
                self.checkpoint.ack(txn, bytes)?;
                self.metrics.records_acked.fetch_add(1, Ordering::Relaxed);
                Ok(false)
            }
            Ack::Delivered(Delivery::Offset { lsn }) => {
                if self.offset_in_flight == Some(lsn) {
                    self.offset_in_flight = None;
                }
                if lsn > self.offset_acked {
                    self.offset_acked = lsn;
                }
                Ok(true)
            }
            Ack::Failed {
                delivery:
                    Delivery::Record {
                        commit_lsn, index, ..
                    },
                topic,
                error,
            } => {
                if error.kind == SinkErrorKind::Definite {
                    tracing::error!(%topic, lsn = %commit_lsn, index, error = %error, "Kafka did not take a record");
                } else {
                    tracing::warn!(%topic, lsn = %commit_lsn, index, error = %error, "a record is not known to be in Kafka; the session restarts to re-send it");
                }
                Err(RelayError::Delivery {
                    topic,
                    lsn: commit_lsn,
                    event: format!("record #{index} of the transaction"),
                    error,
                })
            }
            Ack::Failed {
                delivery: Delivery::Offset { lsn },
                topic,
                error,
            } => Err(RelayError::Delivery {
                topic,
                lsn,
                event: "the offset-store write".into(),
                error,
            }),
            Ack::Fatal(e) => Err(RelayError::Sink(e)),
        }
    }

    /// Writes the confirmed position to the offset store if it moved and no
    /// write is pending.
    async fn write_offset_if_due(&mut self) -> Result<(), RelayError> {
        let confirmed = self.checkpoint.confirmed();
        if self.offset_in_flight.is_some() || confirmed <= self.offset_acked {
            return Ok(());
        }
        let mut offset = self.offset_template.clone();
        offset.lsn = confirmed.to_string();
        offset.written_at_ms =
            crate::pg::replication::pg_us_to_unix_ms(crate::pg::replication::pg_now_us());
        let record = offset.to_record(&self.config.kafka.offsets_topic);
        self.sink
            .send(&record, Delivery::Offset { lsn: confirmed })
            .await
            .map_err(|error| RelayError::Delivery {
                topic: record.topic.clone(),
                lsn: confirmed,
                event: "the offset-store write".into(),
                error,
            })?;
        self.offset_in_flight = Some(confirmed);
        Ok(())
    }

    /// Graceful stop: waits (bounded) for Kafka to take what is in flight,
    /// stores the final position and returns what may be reported.
    pub(super) async fn finish(&mut self, acks: &mut mpsc::UnboundedReceiver<Ack>) -> Lsn {
        let deadline = Instant::now() + self.config.kafka.shutdown_flush_timeout;
        let mut wrote_final = false;
        loop {
            while let Ok(ack) = acks.try_recv() {
                if let Err(e) = self.on_ack(ack) {
                    tracing::warn!(error = %e, "delivery failed during shutdown; the position stays at the last stored offset");
                    return self.offset_acked;
                }
            }
            let idle = self.checkpoint.in_flight_records() == 0 && self.offset_in_flight.is_none();
            if idle && (wrote_final || self.checkpoint.confirmed() <= self.offset_acked) {
                return self.offset_acked;
            }
            if idle && !wrote_final {
                if let Err(e) = self.write_offset_if_due().await {
                    tracing::warn!(error = %e, "could not store the final offset");
                    return self.offset_acked;
                }
                wrote_final = true;
            }
            if Instant::now() > deadline {
                tracing::warn!(
                    in_flight = self.checkpoint.in_flight_records(),
                    "shutdown flush timeout reached; unacknowledged records will be re-sent on restart"
                );
                return self.offset_acked;
            }
            match tokio::time::timeout(Duration::from_millis(100), acks.recv()).await {
                Ok(Some(ack)) => {
                    if let Err(e) = self.on_ack(ack) {
                        tracing::warn!(error = %e, "delivery failed during shutdown");
                        return self.offset_acked;
                    }
                }
                Ok(None) => return self.offset_acked,
                Err(_) => {}
            }
        }
    }
}

/// "outbox row id=…" for error messages (never the payload).
fn describe_record(record: &crate::router::Record) -> String {
    match record.headers.iter().find(|(k, _)| &**k == "id") {
        Some((_, id)) => format!("outbox row id={}", String::from_utf8_lossy(id)),
        None => "a record".to_owned(),
    }
}
