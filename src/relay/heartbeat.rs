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
//! as a transaction of its own ([`Streaming::on_message`](super::streaming)).
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

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::pg::catalog;
use crate::pg::wire::ConnectParams;
use crate::router::Record;
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

    /// The Debezium-shaped heartbeat record on `topic`: key
    /// `{"serverName":"<server_name>"}` (Debezium's `topic.prefix`), value
    /// `{"ts_ms":<written>}` (JSON, schemas disabled), timestamped when it
    /// was written.
    pub(crate) fn record(&self, server_name: &str, topic: &str) -> Record {
        let key = serde_json::json!({ "serverName": server_name }).to_string();
        let value = serde_json::json!({ "ts_ms": self.ts_ms }).to_string();
        Record::new(
            Arc::from(topic),
            Some(Bytes::from(key)),
            Some(Bytes::from(value)),
            Vec::new(),
            Some(self.ts_ms),
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beat_round_trips_through_json() {
        let beat = Beat {
            connector: "orders".into(),
            seq: 7,
            ts_ms: 1_733_000_000_123,
        };
        let json = beat.to_json();
        assert_eq!(
            json,
            r#"{"connector":"orders","seq":7,"ts_ms":1733000000123}"#
        );
        assert_eq!(Beat::parse(json.as_bytes()), Some(beat));
        assert_eq!(Beat::parse(b"not json"), None);
        assert_eq!(Beat::parse(br#"{"connector":"x"}"#), None);
    }

    #[test]
    fn round_trip_is_never_negative() {
        let beat = Beat {
            connector: "c".into(),
            seq: 1,
            ts_ms: 10_000,
        };
        assert_eq!(beat.round_trip(10_250), Duration::from_millis(250));
        assert_eq!(beat.round_trip(9_000), Duration::ZERO, "clock stepped back");
    }

    // The streaming loop's handling, with a producer whose broker does not
    // exist: records stay in flight for as long as the test needs.

    use crate::Lsn;
    use crate::config::Config;
    use crate::relay::streaming::Streaming;
    use crate::relay::{Ack, Sink, Token};
    use crate::source::Position;
    use tokio::sync::mpsc::UnboundedReceiver;

    const START: Lsn = Lsn(0x1000);

    fn streaming(publish: bool) -> (Streaming, UnboundedReceiver<Ack>) {
        let text = format!(
            "[connector]\nname = \"orders\"\n[postgres]\ndatabase = \"app\"\n[kafka]\n\
             brokers = \"127.0.0.1:9\"\n[[outbox]]\ntable = \"public.outbox\"\n\
             [heartbeat]\ninterval = \"10s\"\npublish = {publish}\n"
        );
        let config = Arc::new(Config::from_str(&text, "test.toml").unwrap());
        let outage = Arc::new(crate::telemetry::outage::OutageLog::new(
            "Kafka",
            Duration::ZERO,
        ));
        let (sink, acks) = Sink::new(&crate::relay::producer_properties(&config), outage).unwrap();
        let router = crate::router::Router::new(&config.outbox);
        let template = crate::offsets::StoredOffset {
            connector: "orders".into(),
            system_id: "1".into(),
            timeline: 1,
            slot: "s".into(),
            lsn: String::new(),
            written_at_ms: 0,
            committed_at_ms: None,
            snapshot: None,
            accepted_gap: None,
            incremental: None,
            known_tables: Vec::new(),
            term: None,
        };
        let metrics = Arc::new(Metrics::new("orders"));
        let offsets = super::super::offset_writer::OffsetWriter::new(template, "offsets", START);
        let s = Streaming::new(config, metrics, sink, router, START, offsets);
        (s, acks)
    }

    fn beat(connector: &str) -> Vec<u8> {
        Beat {
            connector: connector.into(),
            seq: 1,
            ts_ms: now_ms(),
        }
        .to_json()
        .into_bytes()
    }

    /// One outbox-like record in flight in a transaction ending at `end`;
    /// returns the token that acknowledges it.
    async fn record_in_flight(s: &mut Streaming, end: Lsn) -> Token {
        let txn = s.checkpoint.begin().unwrap();
        let record = Record::new(
            "t".into(),
            None,
            Some(Bytes::from_static(b"v")),
            Vec::new(),
            None,
        );
        let pos = Position {
            commit_lsn: end,
            index: 0,
        };
        s.publish(txn, pos, &record, super::super::streaming::Counted::Other)
            .await
            .unwrap();
        s.checkpoint.commit(txn, end).unwrap();
        Token::Record {
            txn,
            bytes: record.size(),
            commit_lsn: end,
            index: 0,
            event_id: None,
            snapshot_table: None,
            commit_ms: 0,
        }
    }

    #[tokio::test]
    async fn a_heartbeat_advances_an_idle_frontier() {
        let (mut s, _acks) = streaming(false);
        s.on_message(Lsn(0x2000), PREFIX, &beat("orders"))
            .await
            .unwrap();
        assert_eq!(s.checkpoint.confirmed(), Lsn(0x2000));
        assert_eq!(s.metrics.heartbeats_received.load(Ordering::Relaxed), 1);
        assert!(s.metrics.heartbeat_age().is_some());
        // Another connector's heartbeat is a safe point too, but not ours to count.
        s.on_message(Lsn(0x3000), PREFIX, &beat("billing"))
            .await
            .unwrap();
        assert_eq!(s.checkpoint.confirmed(), Lsn(0x3000));
        assert_eq!(s.metrics.heartbeats_received.load(Ordering::Relaxed), 1);
        // Another prefix is not a heartbeat at all.
        s.on_message(Lsn(0x4000), "dblog.watermark", b"x")
            .await
            .unwrap();
        assert_eq!(s.checkpoint.confirmed(), Lsn(0x3000));
    }

    #[tokio::test]
    async fn a_heartbeat_never_passes_an_unacknowledged_record() {
        let (mut s, _acks) = streaming(false);
        let token = record_in_flight(&mut s, Lsn(0x1800)).await;
        s.on_message(Lsn(0x2000), PREFIX, &beat("orders"))
            .await
            .unwrap();
        s.checkpoint.keepalive(Lsn(0x2100));
        assert_eq!(
            s.checkpoint.confirmed(),
            START,
            "heartbeat jumped the queue"
        );
        s.on_ack(Ack::Delivered(token)).unwrap();
        assert_eq!(s.checkpoint.confirmed(), Lsn(0x2000));
    }

    #[tokio::test]
    async fn a_published_heartbeat_waits_for_its_own_record() {
        let (mut s, _acks) = streaming(true);
        let token = record_in_flight(&mut s, Lsn(0x1800)).await;
        s.on_message(Lsn(0x2000), PREFIX, &beat("orders"))
            .await
            .unwrap();
        assert_eq!(s.checkpoint.in_flight_records(), 2, "the heartbeat record");
        s.on_ack(Ack::Delivered(token)).unwrap();
        assert_eq!(
            s.checkpoint.confirmed(),
            Lsn(0x1800),
            "confirmed past the unacknowledged heartbeat record"
        );
        // Another connector's heartbeat publishes nothing of ours.
        s.on_message(Lsn(0x3000), PREFIX, &beat("billing"))
            .await
            .unwrap();
        assert_eq!(s.checkpoint.in_flight_records(), 1);
        assert_eq!(s.checkpoint.confirmed(), Lsn(0x1800));
    }

    #[test]
    fn record_has_debeziums_shape() {
        let beat = Beat {
            connector: "orders".into(),
            seq: 1,
            ts_ms: 1_733_000_000_123,
        };
        let record = beat.record("orders", "__debezium-heartbeat.orders");
        assert_eq!(&*record.topic, "__debezium-heartbeat.orders");
        assert_eq!(
            record.key.as_deref(),
            Some(&br#"{"serverName":"orders"}"#[..])
        );
        assert_eq!(
            record.value.as_deref(),
            Some(&br#"{"ts_ms":1733000000123}"#[..])
        );
        assert_eq!(record.timestamp_ms, Some(1_733_000_000_123));
        assert!(record.headers.is_empty());
    }
}
