//! A session's graceful stop (shutdown, or one change that cannot be
//! published): what Kafka still has to report is awaited, the last position
//! Kafka holds is stored — `exactly_once`: the open Kafka transaction is
//! committed, or aborted when a PostgreSQL transaction is partly in it —
//! and that position is what is reported to PostgreSQL.
//!
//! Invariants (beside the parent module's):
//! - **Only what Kafka holds is reported**: the position returned is the
//!   offset writer's acknowledged (or committed) one, never the frontier of
//!   records still unreported.
//! - **Bounded**: at most `kafka.shutdown_flush_timeout`, while the
//!   walsender keeps getting its status updates.
//! - **Nothing new is published** once stopping began: changes that arrive
//!   are read past, undecoded, and streamed again by the next session.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;

use super::Publisher;
use crate::Lsn;
use crate::relay::{Ack, Token};
use crate::source::Source;

impl Publisher {
    /// Graceful stop (shutdown, or one change that cannot be published):
    /// waits, at most `shutdown_flush_timeout`, until every record handed to
    /// the producer has its delivery report, stores the confirmed position
    /// and returns what may be reported to PostgreSQL.
    ///
    /// Meanwhile it keeps the walsender content: keepalives that ask for a
    /// reply get one, and a status update goes out every `status_interval`,
    /// so a long flush does not run into `wal_sender_timeout`. Changes that
    /// arrive are dropped unread: nothing after this point is published, and
    /// the frontier does not move on keepalives (a dropped transaction below
    /// a keepalive's `wal_end` must not be confirmed), so they are streamed
    /// again by the next session.
    pub(in crate::relay) async fn finish(
        &mut self,
        source: &mut Source,
        acks: &mut mpsc::UnboundedReceiver<Ack>,
        status_interval: Duration,
    ) -> Finished {
        let deadline = tokio::time::Instant::now() + self.config.kafka.shutdown_flush_timeout;
        let mut ticker = tokio::time::interval(status_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut undelivered: u64 = 0;
        let mut stream_open = true;
        let mut final_write = FinalWrite::NotYet;
        loop {
            let settled = self.awaiting_reports == 0 && self.offsets.in_flight().is_none();
            if settled && self.offsets.exactly_once() {
                // A PostgreSQL transaction partly sent cannot be committed
                // (the next session sends it whole): abort what the open
                // Kafka transaction holds. Otherwise commit it.
                let ended = if self.checkpoint.open_txn().is_some() || self.holding {
                    self.offsets.abort(&self.sink, &self.metrics).await
                } else {
                    self.commit_transaction_now().await
                };
                if let Err(e) = ended {
                    tracing::warn!(error = %e, "could not end the last Kafka transaction; the next session sends its records again");
                }
                return Finished {
                    position: self.offsets.acked(),
                    undelivered,
                    timed_out: false,
                };
            }
            if settled {
                match final_write {
                    FinalWrite::NotYet if self.checkpoint.confirmed() > self.offsets.acked() => {
                        match self.write_offset_if_due().await {
                            Ok(()) => final_write = FinalWrite::Sent,
                            Err(e) => {
                                tracing::warn!(error = %e, "could not store the final offset");
                                final_write = FinalWrite::Failed;
                            }
                        }
                        continue;
                    }
                    _ => {
                        return Finished {
                            position: self.offsets.acked(),
                            undelivered,
                            timed_out: false,
                        };
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(
                        awaiting_reports = self.awaiting_reports,
                        "shutdown flush timeout reached; unacknowledged records will be re-sent on restart"
                    );
                    return Finished { position: self.offsets.acked(), undelivered, timed_out: true };
                }
                ack = acks.recv() => match ack {
                    None => return Finished { position: self.offsets.acked(), undelivered, timed_out: false },
                    Some(Ack::Fatal(e)) => {
                        tracing::warn!(error = %e, "the Kafka producer failed while stopping");
                        return Finished { position: self.offsets.acked(), undelivered, timed_out: false };
                    }
                    Some(ack) => {
                        let offset_write = matches!(
                            ack,
                            Ack::Delivered(Token::Offset { .. }) | Ack::Failed { token: Token::Offset { .. }, .. }
                        );
                        match self.on_ack(ack) {
                            Ok(_) => {}
                            // The failure is already logged; the record is
                            // re-sent by the next session.
                            Err(_) if !offset_write => undelivered += 1,
                            Err(e) => {
                                tracing::warn!(error = %e, "could not store the final offset");
                                final_write = FinalWrite::Failed;
                            }
                        }
                    }
                },
                _ = ticker.tick() => {
                    if stream_open && let Err(e) = source.confirm(self.offsets.acked(), false).await {
                        tracing::debug!(error = %e, "status update while stopping failed");
                        stream_open = false;
                    }
                }
                request = source.next_reply_request(), if stream_open => match request {
                    Ok(Some(_)) => {
                        self.metrics.received_lsn.store(source.received().0, Ordering::Relaxed);
                        if let Err(e) = source.confirm(self.offsets.acked(), false).await {
                            tracing::debug!(error = %e, "answering a keepalive while stopping failed");
                            stream_open = false;
                        }
                    }
                    Ok(None) | Err(_) => stream_open = false,
                },
            }
        }
    }
}

/// How a graceful stop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::relay) struct Finished {
    /// The stored (acknowledged) position: what may be reported.
    pub(in crate::relay) position: Lsn,
    /// Records whose delivery failed while stopping (purged after a refused
    /// record, or failed): not confirmed, re-sent by the next session.
    pub(in crate::relay) undelivered: u64,
    /// Kafka did not report on everything within `shutdown_flush_timeout`.
    pub(in crate::relay) timed_out: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FinalWrite {
    NotYet,
    Sent,
    Failed,
}
