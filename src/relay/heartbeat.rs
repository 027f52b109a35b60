//! Heartbeats (`[heartbeat]`): a message written into the WAL every
//! `interval`, recognised when it comes back through the slot.
//!
//! The writer ([`write_loop`]) runs next to a streaming session on its own
//! ordinary connection and calls `pg_logical_emit_message(false,
//! 'walrelay.heartbeat', '{"connector":…,"seq":…,"ts_ms":…}')`. The message is
//! not part of a transaction: it is a WAL record of its own, which every
//! logical slot of the database decodes and the walsender sends (pgoutput,
//! with `messages 'true'`) as a Message outside any Begin..Commit, carrying the
//! LSN where the record ends. The streaming loop passes it to the checkpoint
//! as a transaction of its own ([`on_message`]).
//!
//! Invariants:
//! - **A heartbeat is confirmed like a transaction.** It enters the checkpoint
//!   as a transaction ending at the message's LSN: with no record (nothing to
//!   publish) it is complete at once, but — as any complete transaction — the
//!   frontier reaches it only when every transaction before it is acked. With
//!   `publish = true` its record is one record of that transaction, so the slot
//!   passes the heartbeat only once Kafka holds the heartbeat record too.
//!   Confirming the message's end is safe for the same reason an idle keepalive
//!   is: every transaction committed below it has been streamed before it,
//!   and one still open at that point commits above it and is streamed again
//!   after a restart.
//! - **Only this connector's heartbeats count.** Every walrelay on the database
//!   writes heartbeats with the same prefix, and every slot sees all of them.
//!   Any of them is a safe point to advance to, but only those naming this
//!   connector move its metrics or are published.
//! - **The writer never ends a session.** A failed write is logged once when
//!   writing starts failing and once when it works again (never every
//!   interval), counted in `walrelay_heartbeat_write_errors_total`, and retried
//!   at the next interval on a new connection. The heartbeat age metric is what
//!   tells an operator that the path is broken.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::RelayError;
use super::publish::{Counted, Publisher};
use crate::Lsn;
use crate::config::TableFormat;
use crate::pg::catalog;
use crate::pg::wire::ConnectParams;
use crate::router::Record;
use crate::router::heartbeat::{HeartbeatError, Heartbeats};
use crate::source::Position;
use crate::telemetry::Metrics;

/// The prefix of walrelay's heartbeat messages.
pub(crate) const PREFIX: &str = "walrelay.heartbeat";

/// How long one heartbeat write may take before it counts as failed.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The content of a heartbeat message (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Beat {
    /// `connector.name` of the walrelay that wrote it.
    pub(crate) connector: String,
    /// Counts the writer's heartbeats, from 1.
    pub(crate) seq: u64,
    /// When it was written, milliseconds since 1970.
    pub(crate) ts_ms: i64,
}

impl Beat {
    /// The message content.
    pub(crate) fn to_json(&self) -> String {
        // A struct of a string and two integers always serialises.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A heartbeat's content, or `None` when it is not one of ours (another
    /// writer's format): such a message is still a safe point to advance to.
    pub(crate) fn parse(content: &[u8]) -> Option<Beat> {
        serde_json::from_slice(content).ok()
    }

    /// Time from writing to now (`now_ms`), never negative.
    pub(crate) fn round_trip(&self, now_ms: i64) -> Duration {
        Duration::from_millis(u64::try_from(now_ms.saturating_sub(self.ts_ms)).unwrap_or(0))
    }

    /// The Debezium-shaped heartbeat record on `topic` in `format`
    /// ([`Heartbeats`]): key `{"serverName":"<server_name>"}` (Debezium's
    /// `topic.prefix`), value `{"ts_ms":<written>}`, timestamped when it
    /// was written.
    pub(crate) fn record(
        &self,
        server_name: &str,
        topic: &str,
        format: TableFormat,
    ) -> Result<Record, HeartbeatError> {
        Heartbeats::new(format).record(server_name, topic, self.ts_ms)
    }
}

pub(crate) use crate::telemetry::unix_ms as now_ms;

/// Writes a heartbeat every `interval`, the first one at once, until the
/// task is aborted (with its session). See the module doc.
pub(super) async fn write_loop(
    params: ConnectParams,
    connector: String,
    interval: Duration,
    metrics: Arc<Metrics>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut client: Option<tokio_postgres::Client> = None;
    let mut failing = false;
    let mut seq: u64 = 0;
    loop {
        ticker.tick().await;
        seq += 1;
        let beat = Beat {
            connector: connector.clone(),
            seq,
            ts_ms: now_ms(),
        };
        let written = tokio::time::timeout(WRITE_TIMEOUT, write(&params, &mut client, &beat)).await;
        let result = match written {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {}s", WRITE_TIMEOUT.as_secs())),
        };
        match result {
            Ok(lsn) => {
                metrics.heartbeats_sent.fetch_add(1, Ordering::Relaxed);
                if failing {
                    failing = false;
                    tracing::info!(%lsn, "heartbeats are written again");
                } else {
                    tracing::trace!(%lsn, seq, "heartbeat written");
                }
            }
            Err(error) => {
                // A new connection next time: this one may be broken.
                client = None;
                metrics
                    .heartbeat_write_errors
                    .fetch_add(1, Ordering::Relaxed);
                if !failing {
                    failing = true;
                    tracing::warn!(
                        %error,
                        "cannot write a heartbeat; retrying every {interval:?} (logged once until \
                         it works again; walrelay_heartbeat_age_seconds grows meanwhile)"
                    );
                }
            }
        }
    }
}

/// One heartbeat, connecting first if needed.
async fn write(
    params: &ConnectParams,
    client: &mut Option<tokio_postgres::Client>,
    beat: &Beat,
) -> Result<crate::Lsn, String> {
    let c = match client {
        Some(c) if !c.is_closed() => c,
        _ => client.insert(catalog::connect(params).await.map_err(|e| e.to_string())?),
    };
    catalog::emit_message(c, PREFIX, &beat.to_json())
        .await
        .map_err(|e| e.to_string())
}

/// A non-transactional logical message. A walrelay heartbeat (any
/// connector's) enters the checkpoint as a transaction of its own that
/// ends at `lsn`, so the frontier reaches it only once everything before
/// it is acked; this connector's own heartbeats also feed the metrics and,
/// with `publish = true`, add their record to that transaction. Other
/// prefixes are someone else's: ignored.
pub(super) async fn on_message(
    publisher: &mut Publisher,
    lsn: Lsn,
    prefix: &str,
    content: &[u8],
) -> Result<(), RelayError> {
    if prefix != PREFIX {
        return Ok(());
    }
    if publisher.checkpoint().open_txn().is_some() {
        return Err(RelayError::Stream {
            lsn,
            what: "a heartbeat inside a transaction".into(),
        });
    }
    let config = publisher.config().clone();
    let ours = Beat::parse(content).filter(|b| b.connector == config.connector.name);
    let id = publisher.checkpoint_mut().begin()?;
    if let Some(beat) = ours {
        publisher
            .metrics()
            .heartbeat_received(beat.round_trip(now_ms()));
        if config.heartbeat.publish {
            let prefix = config.topic_prefix();
            let topic = config.heartbeat.topic_for(prefix);
            let record = beat
                .record(prefix, &topic, config.heartbeat.format)
                .map_err(|e| RelayError::Stream {
                    lsn,
                    what: e.to_string(),
                })?;
            let pos = Position {
                commit_lsn: lsn,
                index: 0,
            };
            publisher.publish(id, pos, &record, Counted::Other).await?;
        }
    }
    publisher.checkpoint_mut().commit(id, lsn)?;
    publisher.at_commit_point().await
}

#[cfg(test)]
mod tests;
