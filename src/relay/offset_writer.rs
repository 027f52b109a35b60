//! The offset store's one writer. Every offset-store record a session
//! writes goes through [`OffsetWriter`]: the snapshot's `running` marker and
//! its consistent point, its progress and `completed`, an accepted slot
//! position, the streaming frontier with an incremental snapshot's progress,
//! and the final write of a graceful stop. A write that must be in Kafka
//! before the session goes on is awaited by [`OffsetWriter::store`], the one
//! place that waits for an offset write.
//!
//! Invariants:
//! - **At most one write in flight.** Writes are records of one key in a
//!   compacted topic; one at a time keeps the newest acknowledged write the
//!   newest in the topic. [`OffsetWriter::send`] refuses a second.
//! - **`acked` is what Kafka acknowledged, and only grows.** It is the only
//!   position a session reports to PostgreSQL (the checkpoint's frontier →
//!   this writer → PostgreSQL): it moves only on the acknowledgement of a
//!   write at that position, never on a failed one, and never backwards (a
//!   snapshot marker written at `0/0` moves nothing).
//! - **A failed write ends the session** (the caller turns the report into
//!   an error); nothing it carried is reported to PostgreSQL.
//! - **`exactly_once`: a position is stored only with what it covers.**
//!   Records go to Kafka in transactions; the offset-store record of a
//!   position is the last record of the transaction holding everything up
//!   to it, and `acked` moves only when that transaction is committed
//!   ([`OffsetWriter::commit`]): `read_committed` readers (the next
//!   session, consumers) see the records and their position together or
//!   not at all. A delivery report of an offset record moves nothing.
//!   Committed only where no PostgreSQL transaction is partly in it (the
//!   caller's rule), so that a restart from the stored position re-sends
//!   no committed record. A failed commit is aborted: nothing of it is
//!   visible, and the next session re-sends it from `acked`.
//! - **`exactly_once`: `transaction_max_time` bounds when a record becomes
//!   visible, not when its commit begins.** A transaction's commit begins
//!   [`CommitTime::lead`] before the bound: the recent commits' duration
//!   plus four times its deviation (TCP's retransmission-timeout estimate),
//!   at most half the bound. So a record handed to the producer as its
//!   transaction opens is usually committed by the bound. While walrelay is
//!   caught up (the record's PostgreSQL commit less than a quarter of the
//!   bound ago) the bound counts from that commit, not from the record's
//!   arrival ([`opened_at`]): the walsender's delay is spent of it. Older
//!   commits (a backlog), snapshot rows and a PostgreSQL clock ahead of
//!   ours count from the arrival, so a drain keeps its large transactions.
//! - **Waiting has one rule,** the streaming loop's: while Kafka does not
//!   answer, wait and say so ([`KafkaWatch`]); a producer that delivers
//!   nothing while the cluster answers a fresh client ends the session
//!   (transient: a new session, a new producer). No fixed time limit that
//!   would end a session in the middle of a broker's restart.

use crate::source::lease::Fence;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::transaction_clock::{Overrun, TransactionClock, Unit};
use super::watchdog::KafkaWatch;
use super::{Ack, RelayError, Sink, Token};
use crate::Lsn;
use crate::config::Config;
use crate::offsets::{IncrementalProgress, StoredOffset};
use crate::telemetry::Metrics;

/// `exactly_once`: the bounds of one Kafka transaction
/// (`kafka.transaction_*`).
#[derive(Debug, Clone, Copy)]
pub(super) struct TransactionLimits {
    pub(super) max_records: u64,
    pub(super) max_bytes: u64,
    pub(super) max_time: Duration,
    /// How long a commit or an abort may take.
    pub(super) timeout: Duration,
}

impl TransactionLimits {
    pub(super) fn of(config: &Config) -> Option<TransactionLimits> {
        let k = &config.kafka;
        (k.delivery == crate::config::Delivery::ExactlyOnce).then_some(TransactionLimits {
            max_records: k.transaction_max_records as u64,
            max_bytes: k.transaction_max_bytes,
            max_time: k.transaction_max_time,
            timeout: k.transaction_timeout,
        })
    }
}

/// `exactly_once`: how long commits take (from the offset record's send to
/// `EndTxn`'s answer), smoothed as TCP smooths round trips (RFC 6298).
#[derive(Debug, Clone, Copy, Default)]
struct CommitTime {
    /// Smoothed duration and mean deviation, in seconds; `None` before the
    /// first commit.
    smoothed: Option<(f64, f64)>,
}

impl CommitTime {
    fn observe(&mut self, took: Duration) {
        let sample = took.as_secs_f64();
        self.smoothed = Some(match self.smoothed {
            None => (sample, sample / 2.0),
            Some((mean, dev)) => (
                0.875 * mean + 0.125 * sample,
                0.75 * dev + 0.25 * (mean - sample).abs(),
            ),
        });
    }

    /// How long before the time bound a commit begins: duration + 4 ×
    /// deviation, at most half of `max_time` (a slow broker must not turn
    /// every transaction into a tiny one).
    fn lead(&self, max_time: Duration) -> Duration {
        let Some((mean, dev)) = self.smoothed else {
            return Duration::ZERO;
        };
        Duration::try_from_secs_f64(mean + 4.0 * dev)
            .unwrap_or(Duration::ZERO)
            .min(max_time / 2)
    }
}

/// When a Kafka transaction opened at `now` (Unix ms `now_ms`) by a record
/// whose PostgreSQL transaction committed at `commit_ms` (0: not a streamed
/// record) counts as opened for `max_time`: at that commit if it was less
/// than a quarter of `max_time` ago, else at `now` (module doc).
fn opened_at(now: Instant, now_ms: i64, commit_ms: i64, max_time: Duration) -> Instant {
    let age_ms = now_ms.saturating_sub(commit_ms);
    if commit_ms <= 0 || age_ms <= 0 {
        return now;
    }
    let age = Duration::from_millis(age_ms.unsigned_abs());
    if age >= max_time / 4 {
        return now;
    }
    now.checked_sub(age).unwrap_or(now)
}

/// The Kafka transaction being filled.
#[derive(Debug, Clone, Copy)]
struct OpenTransaction {
    records: u64,
    bytes: u64,
    opened: Instant,
}

/// See the module doc.
#[derive(Debug)]
pub(super) struct OffsetWriter {
    /// What every write carries besides its position: the connector, the
    /// cluster, the slot, the snapshots' progress, an accepted gap.
    template: StoredOffset,
    topic: String,
    in_flight: Option<Lsn>,
    acked: Lsn,
    /// `exactly_once`: the bounds, and the transaction being filled.
    transactions: Option<(TransactionLimits, Option<OpenTransaction>)>,
    /// `exactly_once`: how long commits take.
    commit_time: CommitTime,
    /// The lease's check before anything is handed to Kafka (records and
    /// offsets alike: [`OffsetWriter::check_lease`]); none in unit tests.
    fence: Option<Fence>,
    /// `exactly_once`: how long the open transaction has been open, and
    /// what keeps it open (a transaction too big for the timeout).
    clock: Option<TransactionClock>,
    /// Incremental snapshot progress published and not yet in the
    /// template: the chunk's high watermark (or the signal's position) and
    /// the progress with it done. It joins the template with the first
    /// write at or past that position ([`OffsetWriter::carry_up_to`]).
    carried: VecDeque<(Lsn, IncrementalProgress)>,
}

impl OffsetWriter {
    /// A writer into `topic` whose store already holds `acked` (what the
    /// session may report before its first write).
    pub(super) fn new(template: StoredOffset, topic: &str, acked: Lsn) -> OffsetWriter {
        OffsetWriter {
            template,
            topic: topic.to_owned(),
            in_flight: None,
            acked,
            transactions: None,
            commit_time: CommitTime::default(),
            fence: None,
            clock: None,
            carried: VecDeque::new(),
        }
    }

    /// Checks the lease before every write and record
    /// ([`crate::source::lease`], invariant 5).
    pub(super) fn fenced(mut self, fence: Fence) -> OffsetWriter {
        self.fence = Some(fence);
        self
    }

    /// Returns once the lease is known to be still ours (at once, unless
    /// the process was paused or the lease's pings are late);
    /// [`RelayError::LeaseLost`] when it is not. Called before anything is
    /// handed to the producer: a holder that returns from a pause after
    /// another instance took over hands nothing more over.
    pub(super) async fn check_lease(&self) -> Result<(), RelayError> {
        match &self.fence {
            Some(fence) => fence.check().await.map_err(|_| RelayError::LeaseLost),
            None => Ok(()),
        }
    }

    /// `exactly_once`: every record goes in a Kafka transaction bounded by
    /// `limits`, committed with the offset record of its position.
    pub(super) fn transactional(mut self, limits: Option<TransactionLimits>) -> OffsetWriter {
        self.transactions = limits.map(|l| (l, None));
        self.clock = limits.map(|l| TransactionClock::new(l.timeout, l.max_time));
        self
    }

    /// `exactly_once`: a PostgreSQL transaction (or the initial snapshot)
    /// begins: what the transaction clock names if it keeps the Kafka
    /// transaction open too long.
    pub(super) fn unit_begins(&mut self, unit: Unit) {
        if let Some(clock) = &mut self.clock {
            clock.unit_begins(unit);
        }
    }

    /// `exactly_once`: the unit begun last entered the checkpoint whole.
    pub(super) fn unit_ends(&mut self) {
        if let Some(clock) = &mut self.clock {
            clock.unit_ends(Instant::now());
        }
    }

    /// `exactly_once`: the open Kafka transaction has been open for
    /// `transaction_timeout` with a PostgreSQL transaction (or the
    /// snapshot) partly in it, Kafka answering (see `transaction_clock`).
    pub(super) fn overrun(&self, sink: &Sink) -> Option<Overrun> {
        self.clock
            .as_ref()?
            .overrun(Instant::now(), sink.unreachable_reports())
    }

    /// `exactly_once`: what a transient Kafka failure of the open
    /// transaction stands for, if one transaction kept it open past the
    /// timeout (see `transaction_clock`).
    pub(super) fn explain_failure(&self, sink: &Sink) -> Option<Overrun> {
        self.clock
            .as_ref()?
            .explain(Instant::now(), sink.unreachable_reports())
    }

    /// Whether records go in Kafka transactions (`exactly_once`).
    pub(super) fn exactly_once(&self) -> bool {
        self.transactions.is_some()
    }

    /// Whether a Kafka transaction is open (records sent, not committed).
    pub(super) fn transaction_open(&self) -> bool {
        matches!(self.transactions, Some((_, Some(_))))
    }

    /// Before a record of `bytes` is sent: opens a Kafka transaction when
    /// none is (`exactly_once`) and counts the record in it. `commit_ms`:
    /// the PostgreSQL commit time of a streamed record (Unix ms), 0 for
    /// others.
    pub(super) fn before_send(
        &mut self,
        sink: &Sink,
        bytes: usize,
        commit_ms: i64,
    ) -> Result<(), RelayError> {
        self.count_in_transaction(sink, bytes, commit_ms)?;
        if let Some(clock) = &mut self.clock {
            clock.sent(bytes, Instant::now());
        }
        Ok(())
    }

    /// [`Self::before_send`] for any record, an offset-store record too.
    fn count_in_transaction(
        &mut self,
        sink: &Sink,
        bytes: usize,
        commit_ms: i64,
    ) -> Result<(), RelayError> {
        let Some((limits, open)) = self.transactions.as_mut() else {
            return Ok(());
        };
        let txn = match open {
            Some(txn) => txn,
            None => {
                sink.begin_transaction().map_err(RelayError::Sink)?;
                if let Some(clock) = &mut self.clock {
                    clock.kafka_began(Instant::now(), sink.unreachable_reports());
                }
                let now_ms =
                    crate::pg::replication::pg_us_to_unix_ms(crate::pg::replication::pg_now_us());
                open.insert(OpenTransaction {
                    records: 0,
                    bytes: 0,
                    opened: opened_at(Instant::now(), now_ms, commit_ms, limits.max_time),
                })
            }
        };
        txn.records += 1;
        txn.bytes = txn.bytes.saturating_add(bytes as u64);
        Ok(())
    }

    /// Whether the open Kafka transaction reached a bound (records, bytes,
    /// or time less the commit's lead) and should be committed at the next
    /// point where no PostgreSQL transaction is partly in it.
    pub(super) fn transaction_due(&self) -> bool {
        match &self.transactions {
            Some((limits, Some(txn))) => {
                txn.records >= limits.max_records
                    || txn.bytes >= limits.max_bytes
                    || txn.opened.elapsed() >= self.time_bound(limits)
            }
            _ => false,
        }
    }

    /// When the open Kafka transaction's commit should begin for its time
    /// bound, if one is open.
    pub(super) fn transaction_deadline(&self) -> Option<tokio::time::Instant> {
        match &self.transactions {
            Some((limits, Some(txn))) => Some((txn.opened + self.time_bound(limits)).into()),
            _ => None,
        }
    }

    /// How long after its first record a transaction's commit begins.
    fn time_bound(&self, limits: &TransactionLimits) -> Duration {
        limits.max_time - self.commit_time.lead(limits.max_time)
    }

    /// `exactly_once`: sends the offset record of `lsn` (opening a
    /// transaction if none is open) and commits the transaction: its records
    /// and `lsn` become visible together, and `acked` moves to `lsn`. On a
    /// failure the transaction is aborted (best effort: a fenced producer
    /// cannot) and nothing moves.
    pub(super) async fn commit(
        &mut self,
        sink: &Sink,
        lsn: Lsn,
        what: &str,
        metrics: &Metrics,
    ) -> Result<(), RelayError> {
        let Some((limits, _)) = self.transactions else {
            return Err(RelayError::Stream {
                lsn,
                what: format!("{what}: a Kafka transaction commit without exactly_once"),
            });
        };
        let commit_began = Instant::now();
        self.send(sink, lsn, what).await?;
        let opened = match &mut self.transactions {
            Some((_, open)) => open.take(),
            None => None,
        };
        let records = opened.map_or(0, |t| t.records);
        let bytes = opened.map_or(0, |t| t.bytes);
        let started = opened.map_or_else(Instant::now, |t| t.opened);
        self.in_flight = None;
        match sink.commit_transaction(limits.timeout).await {
            Ok(()) => {
                self.acked = self.acked.max(lsn);
                if let Some(clock) = &mut self.clock {
                    clock.kafka_ended();
                }
                self.commit_time.observe(commit_began.elapsed());
                metrics.kafka_transaction_committed(records, bytes, started.elapsed());
                Ok(())
            }
            Err(error) => {
                metrics.kafka_transaction_aborted(error.is_fenced());
                if !error.is_fenced()
                    && let Err(e) = sink.abort_transaction(limits.timeout).await
                {
                    tracing::debug!(error = %e, "aborting the failed Kafka transaction failed too");
                }
                Err(RelayError::Delivery {
                    topic: self.topic.clone(),
                    lsn,
                    event: format!("the Kafka transaction of {records} records ending at {lsn}"),
                    error,
                    at_send: false,
                })
            }
        }
    }

    /// `exactly_once`: aborts the open Kafka transaction, if any (a stop in
    /// the middle of a PostgreSQL transaction): none of its records becomes
    /// visible; the next session sends them again from `acked`.
    pub(super) async fn abort(&mut self, sink: &Sink, metrics: &Metrics) -> Result<(), RelayError> {
        let Some((limits, open)) = self.transactions.as_mut() else {
            return Ok(());
        };
        if open.take().is_none() {
            return Ok(());
        }
        if let Some(clock) = &mut self.clock {
            clock.kafka_ended();
        }
        self.in_flight = None;
        metrics.kafka_transaction_aborted(false);
        sink.abort_transaction(limits.timeout)
            .await
            .map_err(RelayError::Sink)
    }

    /// The session streams from `start`, a position safe to report before
    /// any write of its own (the stored one, the slot's, or the snapshot's
    /// consistent point, reported only once `completed` is stored).
    pub(super) fn starting_at(&mut self, start: Lsn) {
        self.acked = self.acked.max(start);
    }

    /// What the next write carries besides its position.
    pub(super) fn template_mut(&mut self) -> &mut StoredOffset {
        &mut self.template
    }

    /// `progress` goes into the offset store with the first write at or
    /// past `lsn` (once the frontier passed it, Kafka holds what it says is
    /// done).
    pub(super) fn carry(&mut self, lsn: Lsn, progress: IncrementalProgress) {
        self.carried.push_back((lsn, progress));
    }

    /// Moves the progress carried up to `confirmed` into the template,
    /// saying so when it ends an incremental snapshot.
    pub(super) fn carry_up_to(&mut self, confirmed: Lsn) {
        while let Some((lsn, _)) = self.carried.front()
            && *lsn <= confirmed
        {
            if let Some((_, progress)) = self.carried.pop_front() {
                if progress.done() {
                    log_ended(&progress);
                }
                self.template.incremental = Some(progress);
            }
        }
    }

    /// Rows of incremental snapshot `id` published before now (carried
    /// and not yet stored, else stored).
    pub(super) fn incremental_rows(&self, id: &str) -> u64 {
        self.carried
            .back()
            .map(|(_, p)| p)
            .filter(|p| p.id == id)
            .or_else(|| self.template.incremental.as_ref().filter(|p| p.id == id))
            .map_or(0, |p| p.rows)
    }

    /// The newest position Kafka acknowledged a write of.
    pub(super) fn acked(&self) -> Lsn {
        self.acked
    }

    /// The write Kafka has not acknowledged yet, if any.
    pub(super) fn in_flight(&self) -> Option<Lsn> {
        self.in_flight
    }

    /// Hands the template at `lsn` (stamped with the time now) to the sink;
    /// its report comes back as [`Token::Offset`]`{ lsn }` and goes to
    /// [`OffsetWriter::delivered`] or [`OffsetWriter::failed`]. `what`
    /// names the write in errors.
    pub(super) async fn send(
        &mut self,
        sink: &Sink,
        lsn: Lsn,
        what: &str,
    ) -> Result<(), RelayError> {
        if let Some(pending) = self.in_flight {
            return Err(RelayError::Stream {
                lsn,
                what: format!("{what} while the offset-store write at {pending} is in flight"),
            });
        }
        let mut offset = self.template.clone();
        offset.lsn = lsn;
        offset.written_at_ms =
            crate::pg::replication::pg_us_to_unix_ms(crate::pg::replication::pg_now_us());
        let record = offset.to_record(&self.topic);
        self.check_lease().await?;
        self.count_in_transaction(sink, record.size(), 0)?;
        sink.send(&record, Token::Offset { lsn })
            .await
            .map_err(|error| RelayError::Delivery {
                topic: self.topic.clone(),
                lsn,
                event: what.to_owned(),
                error,
                at_send: true,
            })?;
        self.in_flight = Some(lsn);
        Ok(())
    }

    /// Kafka acknowledged the write at `lsn`.
    pub(super) fn delivered(&mut self, lsn: Lsn, metrics: &Metrics) {
        metrics.offset_written();
        if self.transactions.is_some() {
            // Visible only once its transaction is committed: `commit`
            // moves `acked`.
            return;
        }
        if self.in_flight == Some(lsn) {
            self.in_flight = None;
        }
        self.acked = self.acked.max(lsn);
    }

    /// The write at `lsn` failed: it is no longer in flight, and `acked`
    /// stays where it was.
    pub(super) fn failed(&mut self, lsn: Lsn) {
        if self.in_flight == Some(lsn) {
            self.in_flight = None;
        }
    }

    /// Writes the template at `lsn` and waits until Kafka acknowledged it.
    /// Only while nothing else is in flight: any other delivery report
    /// meanwhile is an error. See the module doc for how it waits.
    pub(super) async fn store(
        &mut self,
        sink: &Sink,
        acks: &mut mpsc::UnboundedReceiver<Ack>,
        lsn: Lsn,
        what: &str,
        config: &Config,
        metrics: &Metrics,
    ) -> Result<(), RelayError> {
        if self.transactions.is_some() {
            // Committed (with whatever the open transaction holds) before
            // its delivery report is taken below.
            self.commit(sink, lsn, what, metrics).await?;
        } else {
            self.send(sink, lsn, what).await?;
        }
        let mut watch = KafkaWatch::new("an offset-store write");
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                ack = acks.recv() => match ack {
                    Some(Ack::Delivered(Token::Offset { lsn: acked })) if acked == lsn => {
                        watch.acknowledged(metrics);
                        self.delivered(acked, metrics);
                        return Ok(());
                    }
                    Some(Ack::Failed { token: Token::Offset { lsn: failed }, topic, error }) => {
                        self.failed(failed);
                        return Err(RelayError::Delivery {
                            topic,
                            lsn: failed,
                            event: what.to_owned(),
                            error,
                            at_send: false,
                        });
                    }
                    Some(Ack::Fatal(error)) => return Err(RelayError::Sink(error)),
                    Some(other) => {
                        return Err(RelayError::Stream {
                            lsn,
                            what: format!("unexpected delivery report while waiting for {what}: {other:?}"),
                        });
                    }
                    None => return Err(RelayError::Ended("Kafka delivery channel")),
                },
                _ = ticker.tick() => {
                    watch.warn_if_stalled(1, false);
                    watch.probe(config).await?;
                }
            }
        }
    }
}

/// The one line that says an incremental snapshot ended, logged when its
/// last progress goes into the offset store (every chunk is in Kafka).
fn log_ended(progress: &IncrementalProgress) {
    let given_up: Vec<String> = progress
        .tables
        .iter()
        .filter_map(|t| Some(format!("{} ({})", t.table, t.abandoned.as_ref()?)))
        .collect();
    if given_up.is_empty() {
        tracing::info!(
            id = %progress.id, rows = progress.rows,
            "incremental snapshot completed: every chunk is in Kafka"
        );
    } else {
        tracing::warn!(
            id = %progress.id, rows = progress.rows,
            "incremental snapshot ended with tables given up, their remaining \
             rows not read: {}; every chunk read is in Kafka",
            given_up.join("; ")
        );
    }
}

#[cfg(test)]
mod tests;
