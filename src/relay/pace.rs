//! Which of the sink's two producers records go to: the one that lingers
//! `kafka.linger` (prompt: a record waits at most that long for its batch)
//! or, while walrelay is behind, the one that lingers
//! `kafka.linger_while_behind` (bigger produce requests: less CPU per record
//! in walrelay and on the broker, faster drains of a backlog).
//!
//! librdkafka's linger is fixed when a producer is made, and it waits that
//! long for every batch at any load; a second producer is how the linger
//! follows the load.
//!
//! Invariants:
//! - **Behind is how long ago a transaction committed when walrelay reads
//!   its Begin**, not when the walsender sent it (a paused reader's backlog
//!   may sit in socket buffers, sent promptly). The two machines' clocks
//!   may differ: the difference is estimated as the smallest `now -
//!   sent_time` (our clock minus the walsender's send time,
//!   [`crate::source::SourceEvent::Begin`]) of the last [`SKEW_WINDOW`] —
//!   the transit time of a message that did not wait, plus the clock
//!   difference — and taken off `now - commit_time`. Behind from a lag of
//!   [`BEHIND`]; caught up again below [`CAUGHT_UP`]; in between, unchanged
//!   (no flapping near one threshold). Initial snapshot rows are behind by
//!   nature.
//! - **Order across a switch.** The switch happens only between two records
//!   and only through [`crate::sink::kafka::KafkaSink::use_bulk`], which
//!   waits until the producer in use holds no unacknowledged record: a
//!   partition's records never wait in both producers.
//! - **A switch never stalls the stream for long.** The wait is bounded by
//!   [`SWITCH_WAIT`]; a switch that could not drain in time (a Kafka outage)
//!   stays on the producer in use and is tried again only after
//!   [`RETRY_AFTER`].
//! - Transactional sinks (`exactly_once`) and a `linger_while_behind` equal
//!   to `linger` have one producer: nothing here switches.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::Sink;
use crate::telemetry::Metrics;

/// A transaction read this long after its commit: walrelay is behind.
pub(super) const BEHIND: Duration = Duration::from_secs(1);
/// Below this lag walrelay is caught up again.
pub(super) const CAUGHT_UP: Duration = Duration::from_millis(100);
/// The clock difference is the smallest `now - sent_time` of this long
/// (two buckets of half of it).
pub(super) const SKEW_WINDOW: Duration = Duration::from_secs(30);
/// How long a switch may wait for the producer in use to drain.
pub(super) const SWITCH_WAIT: Duration = Duration::from_secs(1);
/// After a switch that could not drain, how long before trying again.
pub(super) const RETRY_AFTER: Duration = Duration::from_secs(10);

/// The producer the stream wants, and when a failed switch may be retried.
#[derive(Debug, Default)]
pub(super) struct Pace {
    behind: bool,
    retry_at: Option<Instant>,
    /// The smallest `now - sent_time` (µs) of the current and of the previous
    /// half of [`SKEW_WINDOW`], and when the current half began (our clock,
    /// µs since 2000).
    offset_now: Option<i64>,
    offset_before: Option<i64>,
    bucket_began: i64,
}

impl Pace {
    /// A transaction's Begin is read at `now` (our clock), committed at
    /// `commit_time` and sent at `sent_time` (the server's clock); all µs
    /// since 2000-01-01.
    pub(super) fn on_begin(&mut self, commit_time: i64, sent_time: i64, now: i64) {
        let half = i64::try_from(SKEW_WINDOW.as_micros() / 2).unwrap_or(i64::MAX);
        if now.saturating_sub(self.bucket_began) >= half || now < self.bucket_began {
            self.offset_before = self.offset_now.take();
            self.bucket_began = now;
        }
        let offset = now.saturating_sub(sent_time);
        self.offset_now = Some(self.offset_now.map_or(offset, |o| o.min(offset)));
        let clocks = self
            .offset_now
            .into_iter()
            .chain(self.offset_before)
            .min()
            .unwrap_or(offset);
        let lag_us = now.saturating_sub(commit_time).saturating_sub(clocks);
        let lag = Duration::from_micros(u64::try_from(lag_us).unwrap_or(0));
        if lag >= BEHIND {
            self.behind = true;
        } else if lag < CAUGHT_UP {
            self.behind = false;
        }
    }

    /// A row of the initial snapshot is next.
    pub(super) fn on_snapshot_row(&mut self) {
        self.behind = true;
    }

    /// Whether the stream wants the producer for while it is behind.
    pub(super) fn behind(&self) -> bool {
        self.behind
    }

    /// Before a record is sent: switches the sink's producer when the stream
    /// wants the other one (and a failed switch is not too recent).
    pub(super) async fn apply(&mut self, sink: &Sink, metrics: &Metrics) {
        let behind = self.behind();
        if !sink.has_bulk() || sink.bulk_active() == behind {
            return;
        }
        let now = Instant::now();
        if self.retry_at.is_some_and(|at| now < at) {
            return;
        }
        if sink.use_bulk(behind, SWITCH_WAIT).await {
            self.retry_at = None;
            metrics
                .kafka_producer_behind
                .store(u64::from(behind), Ordering::Relaxed);
            metrics
                .kafka_producer_switches
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                behind,
                "records now go to the producer for while walrelay is {}",
                if behind { "behind" } else { "caught up" }
            );
        } else {
            self.retry_at = Some(now + RETRY_AFTER);
            tracing::debug!(
                "the Kafka producer in use still holds unacknowledged records after {SWITCH_WAIT:?}; \
                 staying on it, next try in {RETRY_AFTER:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests;
