//! Delivery reports back into the publisher: a record's acknowledgement
//! settles it in the checkpoint (the frontier moves only over a fully
//! acknowledged prefix), an offset write's moves what may be reported, and
//! a failure is the error that names the record (never its payload).

use std::sync::atomic::Ordering;

use super::{Publisher, describe_event};
use crate::relay::{Ack, RelayError, Token};

/// What an acknowledgement was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::relay) enum Acked {
    /// A record; for a row of the initial snapshot, its table's index.
    Record { snapshot_chunk: Option<u32> },
    /// An offset-store write: a status update is worth sending now.
    Offset,
}

impl Publisher {
    /// Applies one delivery report.
    pub(in crate::relay) fn on_ack(&mut self, ack: Ack) -> Result<Acked, RelayError> {
        let acked = self.on_ack_at(ack, crate::telemetry::unix_ms())?;
        self.metrics.record_acked();
        Ok(acked)
    }

    /// [`Self::on_ack`] with the wall clock read by the caller (once for a
    /// batch of reports), without marking the time of the last report.
    pub(in crate::relay) fn on_ack_at(
        &mut self,
        ack: Ack,
        now_ms: i64,
    ) -> Result<Acked, RelayError> {
        match ack {
            Ack::Delivered(Token::Record {
                txn,
                bytes,
                snapshot_chunk,
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
                self.metrics.records_acked.fetch_add(1, Ordering::Relaxed);
                Ok(Acked::Record { snapshot_chunk })
            }
            Ack::Delivered(Token::Offset { lsn }) => {
                self.offsets.delivered(lsn, &self.metrics);
                Ok(Acked::Offset)
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
}
