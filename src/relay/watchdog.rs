//! The Kafka watchdog every loop of a session shares (the snapshot's and
//! the stream's): one place that notices Kafka has stopped acknowledging,
//! says so once, and declares the producer stuck when the cluster answers a
//! fresh client while this producer still delivers nothing.
//!
//! Invariants:
//! - **One warning per stall**, and one line when acknowledgements resume.
//! - **Stuck means the producer, not the cluster.** The session is ended
//!   with [`SinkError::stuck`] (transient: a new session, a new producer)
//!   only after a fresh client found every partition's leader for
//!   [`STUCK_AFTER`] while this producer acknowledged nothing. A broker
//!   outage alone never restarts the session; it waits.
//! - **Time walrelay itself was not running is not Kafka's.** A process
//!   frozen (SIGSTOP, a paused container or VM) or starved of CPU sees, once
//!   thawed, every clock moved on: a stall measured across the freeze would
//!   blame Kafka ("is the broker reachable?") for time nothing here could
//!   run. A [`Freezes`] clock — a thread that sleeps [`FREEZE_STEP`] at a
//!   time and counts every wake-up more than [`FREEZE_SLACK`] late as time
//!   the process was not running — tells; the watch moves its stall clocks
//!   forward by that time and says once, per freeze, that walrelay was not
//!   running, instead of warning about Kafka.
//! - Knows nothing of what is in flight beyond the caller's counts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use super::{RelayError, STALL_WARNING};
use crate::config::Config;
use crate::sink::error::SinkError;
use crate::telemetry::Metrics;

/// How long the freeze clock's thread sleeps at a time.
const FREEZE_STEP: Duration = Duration::from_millis(500);
/// How late a wake-up must be to count as time the process was not running
/// (a busy host delays a wake-up by milliseconds, rarely by a second).
const FREEZE_SLACK: Duration = Duration::from_secs(2);

/// Time the process was not running (see the module doc), in total since
/// it started.
#[derive(Debug, Default)]
pub(super) struct Freezes {
    frozen_ms: AtomicU64,
    /// The thread's last wake-up, in ms after `base` + 1 (0: no thread).
    woke_at: AtomicU64,
    base: OnceLock<std::time::Instant>,
}

impl Freezes {
    /// The process's one freeze clock, its thread started on first use.
    pub(super) fn process() -> Arc<Freezes> {
        static CLOCK: OnceLock<Arc<Freezes>> = OnceLock::new();
        CLOCK
            .get_or_init(|| {
                let freezes = Arc::new(Freezes::default());
                let clock = freezes.clone();
                let started = std::thread::Builder::new()
                    .name("freeze clock".into())
                    .spawn(move || {
                        loop {
                            let before = std::time::Instant::now();
                            std::thread::sleep(FREEZE_STEP);
                            clock.woke(FREEZE_STEP, before.elapsed());
                        }
                    });
                if let Err(e) = started {
                    // Without it a freeze is blamed on Kafka, as before.
                    tracing::debug!(error = %e, "could not start the freeze clock");
                }
                freezes
            })
            .clone()
    }

    /// A sleep of `slept` took `took`: a wake-up more than [`FREEZE_SLACK`]
    /// late counts its lateness as frozen.
    fn woke(&self, slept: Duration, took: Duration) {
        let late = took.saturating_sub(slept);
        if late > FREEZE_SLACK {
            self.add(late);
        }
        let base = *self.base.get_or_init(std::time::Instant::now);
        let at = u64::try_from(base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.woke_at.store(at.saturating_add(1), Ordering::Relaxed);
    }

    /// Whether the thread is overdue now: the process has just been thawed
    /// and the thread has not yet counted the freeze (its verdict comes at
    /// its next wake-up, within a step).
    fn overdue(&self) -> bool {
        let (Some(base), at) = (self.base.get(), self.woke_at.load(Ordering::Relaxed)) else {
            return false;
        };
        if at == 0 {
            return false;
        }
        let now = u64::try_from(base.elapsed().as_millis()).unwrap_or(u64::MAX);
        let limit = u64::try_from((FREEZE_STEP + FREEZE_SLACK).as_millis()).unwrap_or(u64::MAX);
        now.saturating_sub(at - 1) > limit
    }

    fn add(&self, frozen: Duration) {
        let ms = u64::try_from(frozen.as_millis()).unwrap_or(u64::MAX);
        self.frozen_ms.fetch_add(ms, Ordering::Relaxed);
    }

    /// Time not running so far.
    fn total(&self) -> Duration {
        Duration::from_millis(self.frozen_ms.load(Ordering::Relaxed))
    }
}

/// How often a stalled session probes the cluster with a fresh client.
const PROBE_EVERY: Duration = Duration::from_secs(10);
/// How long one probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the cluster must have answered, with this producer still
/// delivering nothing, before the producer is declared stuck.
pub(super) const STUCK_AFTER: Duration = Duration::from_secs(30);

/// See the module doc.
#[derive(Debug)]
pub(super) struct KafkaWatch {
    /// What is waiting for Kafka, for the warning ("records", "snapshot
    /// records").
    what: &'static str,
    last_ack: Instant,
    stall_reported: bool,
    cluster_back_since: Option<Instant>,
    last_probe: Instant,
    /// Time the process was not running, and how much of it was seen.
    freezes: Arc<Freezes>,
    frozen_seen: Duration,
}

impl KafkaWatch {
    pub(super) fn new(what: &'static str) -> KafkaWatch {
        KafkaWatch::with_freezes(what, Freezes::process())
    }

    fn with_freezes(what: &'static str, freezes: Arc<Freezes>) -> KafkaWatch {
        let frozen_seen = freezes.total();
        KafkaWatch {
            what,
            last_ack: Instant::now(),
            stall_reported: false,
            cluster_back_since: None,
            last_probe: Instant::now(),
            freezes,
            frozen_seen,
        }
    }

    /// Moves the stall clocks forward by the time the process was not
    /// running since the last look, and says so once per freeze. Returns
    /// whether there was such time.
    fn discount_freezes(&mut self, records: u64) -> bool {
        let total = self.freezes.total();
        let frozen = total.saturating_sub(self.frozen_seen);
        if frozen.is_zero() {
            return false;
        }
        self.frozen_seen = total;
        let now = Instant::now();
        self.last_ack = (self.last_ack + frozen).min(now);
        if let Some(since) = self.cluster_back_since.as_mut() {
            *since = (*since + frozen).min(now);
        }
        tracing::warn!(
            frozen_secs = frozen.as_secs_f64(),
            records,
            "walrelay itself was not running for {:.1} s (the process was stopped — SIGSTOP, a \
             paused container or VM — or the host gave it no CPU); that time is not counted \
             as Kafka not acknowledging {}",
            frozen.as_secs_f64(),
            self.what
        );
        true
    }

    /// Nothing is awaited from Kafka: no stall can be under way.
    pub(super) fn nothing_awaited(&mut self, metrics: &Metrics) {
        self.last_ack = Instant::now();
        metrics.kafka_progress();
    }

    /// An acknowledgement (or a delivery report) arrived.
    pub(super) fn acknowledged(&mut self, metrics: &Metrics) {
        if self.stall_reported {
            self.stall_reported = false;
            tracing::info!(stalled_for = ?self.last_ack.elapsed(), "Kafka acknowledges again");
        }
        self.cluster_back_since = None;
        self.last_ack = Instant::now();
        metrics.kafka_progress();
    }

    /// Warns once when `records` have waited longer than [`STALL_WARNING`].
    /// Time the process was not running does not count (module doc).
    pub(super) fn warn_if_stalled(&mut self, records: u64, reads_paused: bool) {
        self.discount_freezes(records);
        if self.freezes.overdue() {
            // Thawed a moment ago: the freeze is counted within a step.
            return;
        }
        if !self.stall_reported && self.last_ack.elapsed() > STALL_WARNING {
            self.stall_reported = true;
            tracing::warn!(
                records,
                reads_paused,
                "Kafka has not acknowledged {} for {}s; waiting for Kafka (is the broker reachable?)",
                self.what,
                STALL_WARNING.as_secs()
            );
        }
    }

    /// During a reported stall, at most every [`PROBE_EVERY`]: asks the
    /// cluster with a fresh client; an error once it has answered for
    /// [`STUCK_AFTER`] while this producer still delivers nothing.
    pub(super) async fn probe(&mut self, config: &Config) -> Result<(), RelayError> {
        if !self.stall_reported || self.last_probe.elapsed() < PROBE_EVERY {
            return Ok(());
        }
        self.last_probe = Instant::now();
        let properties = crate::sink::properties::producer_properties(config);
        let answers = tokio::task::spawn_blocking(move || {
            crate::sink::probe::cluster_answers(&properties, PROBE_TIMEOUT)
        })
        .await
        .unwrap_or(false);
        self.cluster_answered(answers)
    }

    /// What a probe found: whether the cluster answered a fresh client.
    fn cluster_answered(&mut self, answers: bool) -> Result<(), RelayError> {
        self.discount_freezes(0);
        match (answers, self.cluster_back_since) {
            (false, _) => self.cluster_back_since = None,
            (true, None) => self.cluster_back_since = Some(Instant::now()),
            (true, Some(since)) if since.elapsed() >= STUCK_AFTER => {
                return Err(RelayError::Sink(SinkError::stuck(self.last_ack.elapsed())));
            }
            (true, Some(_)) => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
