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
//! - Knows nothing of what is in flight beyond the caller's counts.

use std::time::Duration;

use tokio::time::Instant;

use super::{RelayError, STALL_WARNING};
use crate::config::Config;
use crate::sink::kafka::SinkError;
use crate::telemetry::Metrics;

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
}

impl KafkaWatch {
    pub(super) fn new(what: &'static str) -> KafkaWatch {
        KafkaWatch {
            what,
            last_ack: Instant::now(),
            stall_reported: false,
            cluster_back_since: None,
            last_probe: Instant::now(),
        }
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
    pub(super) fn warn_if_stalled(&mut self, records: u64, reads_paused: bool) {
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
        let properties = super::producer_properties(config);
        let answers = tokio::task::spawn_blocking(move || {
            crate::sink::kafka::cluster_answers(&properties, PROBE_TIMEOUT)
        })
        .await
        .unwrap_or(false);
        self.cluster_answered(answers)
    }

    /// What a probe found: whether the cluster answered a fresh client.
    fn cluster_answered(&mut self, answers: bool) -> Result<(), RelayError> {
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
mod tests {
    use super::*;

    fn stuck(result: Result<(), RelayError>) -> bool {
        matches!(result, Err(RelayError::Sink(e)) if e.to_string().contains("fresh producer"))
    }

    /// Stuck only once the cluster has answered for STUCK_AFTER while
    /// nothing was acknowledged; a cluster that stops answering (an
    /// outage) or an acknowledgement starts the count again.
    #[tokio::test(start_paused = true)]
    async fn stuck_means_the_cluster_answers_and_the_producer_does_not() {
        let metrics = Metrics::new("test");
        let mut watch = KafkaWatch::new("records");
        tokio::time::advance(STALL_WARNING + Duration::from_secs(1)).await;
        watch.warn_if_stalled(10, true);
        assert!(watch.stall_reported);
        assert!(watch.cluster_answered(true).is_ok());
        tokio::time::advance(STUCK_AFTER - Duration::from_secs(1)).await;
        assert!(watch.cluster_answered(true).is_ok(), "not yet");
        // An outage resets the count: the broker is away, not the producer stuck.
        assert!(watch.cluster_answered(false).is_ok());
        assert!(watch.cluster_answered(true).is_ok());
        tokio::time::advance(STUCK_AFTER - Duration::from_secs(1)).await;
        assert!(watch.cluster_answered(true).is_ok());
        // An acknowledgement ends the stall.
        watch.acknowledged(&metrics);
        assert!(!watch.stall_reported);
        assert!(watch.cluster_answered(true).is_ok());
        tokio::time::advance(STUCK_AFTER).await;
        assert!(stuck(watch.cluster_answered(true)));
    }
}
