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
//! - **Waiting has one rule,** the streaming loop's: while Kafka does not
//!   answer, wait and say so ([`KafkaWatch`]); a producer that delivers
//!   nothing while the cluster answers a fresh client ends the session
//!   (transient: a new session, a new producer). No fixed time limit that
//!   would end a session in the middle of a broker's restart.

use std::time::Duration;

use tokio::sync::mpsc;

use super::watchdog::KafkaWatch;
use super::{Ack, RelayError, Sink, Token};
use crate::Lsn;
use crate::config::Config;
use crate::offsets::StoredOffset;
use crate::telemetry::Metrics;

/// See the module doc.
#[derive(Debug)]
pub(super) struct OffsetWriter {
    /// What every write carries besides its position: the connector, the
    /// cluster, the slot, the snapshots' progress, an accepted gap.
    template: StoredOffset,
    topic: String,
    in_flight: Option<Lsn>,
    acked: Lsn,
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
        }
    }

    /// The session streams from `start`, a position safe to report before
    /// any write of its own (the stored one, the slot's, or the snapshot's
    /// consistent point, reported only once `completed` is stored).
    pub(super) fn starting_at(&mut self, start: Lsn) {
        self.acked = self.acked.max(start);
    }

    /// What the next write carries besides its position.
    pub(super) fn template(&self) -> &StoredOffset {
        &self.template
    }

    pub(super) fn template_mut(&mut self) -> &mut StoredOffset {
        &mut self.template
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
        offset.lsn = lsn.to_string();
        offset.written_at_ms =
            crate::pg::replication::pg_us_to_unix_ms(crate::pg::replication::pg_now_us());
        sink.send(&offset.to_record(&self.topic), Token::Offset { lsn })
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
        self.send(sink, lsn, what).await?;
        let mut watch = KafkaWatch::new("an offset-store write");
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while self.in_flight.is_some() {
            tokio::select! {
                ack = acks.recv() => match ack {
                    Some(Ack::Delivered(Token::Offset { lsn: acked })) if Some(acked) == self.in_flight => {
                        watch.acknowledged(metrics);
                        self.delivered(acked, metrics);
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn writer() -> (
        OffsetWriter,
        Sink,
        mpsc::UnboundedReceiver<Ack>,
        Config,
        Metrics,
    ) {
        let config = Config::from_str(
            "[connector]\nname = \"orders\"\n[postgres]\ndatabase = \"app\"\n[kafka]\n\
             brokers = \"127.0.0.1:9\"\n[[outbox]]\ntable = \"public.outbox\"\n",
            "test.toml",
        )
        .unwrap();
        let outage = Arc::new(crate::telemetry::outage::OutageLog::new(
            "Kafka",
            Duration::ZERO,
        ));
        let (sink, acks) = Sink::new(&super::super::producer_properties(&config), outage).unwrap();
        let template = StoredOffset {
            connector: "orders".into(),
            system_id: "1".into(),
            timeline: 1,
            slot: "s".into(),
            lsn: String::new(),
            written_at_ms: 0,
            snapshot: None,
            accepted_gap: None,
            incremental: None,
            known_tables: Vec::new(),
        };
        let writer = OffsetWriter::new(template, "offsets", Lsn(100));
        (writer, sink, acks, config, Metrics::new("orders"))
    }

    #[tokio::test]
    async fn one_write_in_flight_and_acked_only_grows() {
        let (mut w, sink, _acks, _config, metrics) = writer();
        w.send(&sink, Lsn(200), "a write").await.unwrap();
        assert_eq!(w.in_flight(), Some(Lsn(200)));
        let second = w.send(&sink, Lsn(300), "a second write").await;
        assert!(
            matches!(&second, Err(RelayError::Stream { what, .. }) if what.contains("in flight")),
            "{second:?}"
        );
        assert_eq!(w.acked(), Lsn(100), "nothing acknowledged yet");
        w.delivered(Lsn(200), &metrics);
        assert_eq!((w.in_flight(), w.acked()), (None, Lsn(200)));
        // A marker written at 0/0 (a snapshot's) moves nothing back.
        w.send(&sink, Lsn::ZERO, "a marker").await.unwrap();
        w.delivered(Lsn::ZERO, &metrics);
        assert_eq!(w.acked(), Lsn(200));
        w.starting_at(Lsn(150));
        assert_eq!(w.acked(), Lsn(200));
    }

    #[tokio::test]
    async fn a_failed_write_reports_nothing() {
        let (mut w, sink, _acks, _config, _metrics) = writer();
        w.send(&sink, Lsn(200), "a write").await.unwrap();
        w.failed(Lsn(200));
        assert_eq!((w.in_flight(), w.acked()), (None, Lsn(100)));
    }

    /// `store` returns only on the acknowledgement of its own write; a
    /// failure of it, or a report of anything else, is an error.
    #[tokio::test]
    async fn store_waits_for_its_own_acknowledgement() {
        use crate::sink::kafka::SinkError;
        let (mut w, sink, _acks, config, metrics) = writer();
        let (tx, mut acks) = mpsc::unbounded_channel();
        tx.send(Ack::Delivered(Token::Offset { lsn: Lsn(300) }))
            .unwrap();
        w.store(&sink, &mut acks, Lsn(300), "a write", &config, &metrics)
            .await
            .unwrap();
        assert_eq!(w.acked(), Lsn(300));

        tx.send(Ack::Failed {
            token: Token::Offset { lsn: Lsn(400) },
            topic: "offsets".into(),
            error: SinkError::timed_out(Duration::from_secs(1)),
        })
        .unwrap();
        let failed = w
            .store(&sink, &mut acks, Lsn(400), "a write", &config, &metrics)
            .await;
        assert!(
            matches!(failed, Err(RelayError::Delivery { at_send: false, .. })),
            "{failed:?}"
        );
        assert_eq!((w.in_flight(), w.acked()), (None, Lsn(300)));

        tx.send(Ack::Delivered(Token::Offset { lsn: Lsn(1) }))
            .unwrap();
        let other = w
            .store(&sink, &mut acks, Lsn(500), "a write", &config, &metrics)
            .await;
        assert!(matches!(other, Err(RelayError::Stream { .. })), "{other:?}");
        assert_eq!(w.acked(), Lsn(300));
    }
}
