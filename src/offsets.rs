//! The offset store: where walrelay remembers how far Kafka holds the stream.
//!
//! A compacted Kafka topic (default `walrelay.offsets`) keyed by connector
//! name; each value is a JSON [`StoredOffset`] naming the cluster (system
//! identifier, timeline), the slot and the confirmed LSN.
//!
//! Invariants:
//! - A position is written here, and the write acknowledged, *before* it is
//!   reported to PostgreSQL (the relay enforces this by reporting only
//!   acknowledged offsets). So in normal operation the slot is never ahead of
//!   the stored offset.
//! - At start, [`compare`] classifies the slot against the stored offset:
//!   slot behind or equal is normal (the gap is re-sent); slot ahead, slot
//!   lost, or a different cluster is an error with a recovery hint — never a
//!   silent jump over events that were never published.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::Message;
use serde::{Deserialize, Serialize};

use crate::Lsn;
use crate::router::Record;

/// What is stored per connector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredOffset {
    pub connector: String,
    pub system_id: String,
    pub timeline: u32,
    pub slot: String,
    /// Confirmed position as `X/Y` text (what operators compare by eye).
    pub lsn: String,
    /// Unix milliseconds of the write.
    pub written_at_ms: i64,
}

impl StoredOffset {
    pub fn lsn(&self) -> Option<Lsn> {
        self.lsn.parse().ok()
    }

    /// The Kafka record that stores this offset.
    pub fn to_record(&self, topic: &str) -> Record {
        Record {
            topic: topic.to_owned(),
            key: Some(self.connector.clone().into_bytes().into()),
            value: Some(serde_json::to_vec(self).unwrap_or_default().into()),
            headers: Vec::new(),
            timestamp_ms: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OffsetStoreError {
    #[error("cannot read offset topic {topic:?}: {message}")]
    Read { topic: String, message: String },
    #[error("cannot create offset topic {topic:?}: {message}")]
    Create { topic: String, message: String },
}

/// The slot's state as read from `pg_replication_slots`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotPosition {
    pub confirmed_flush: Lsn,
    /// `reserved`, `extended`, `unreserved`, `lost` (PostgreSQL 13+).
    pub wal_status: Option<String>,
}

/// How the slot relates to the stored offset at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartDecision {
    /// Resume from the slot; events between the slot and the stored offset
    /// (if any) are re-sent.
    Resume { from: Lsn },
    /// Refuse to start, with the reason and what to do.
    Refuse { reason: String, hint: String },
}

/// Compares the slot with the stored offset (see the module doc).
pub fn compare(
    stored: Option<&StoredOffset>,
    slot: &SlotPosition,
    system_id: &str,
    slot_name: &str,
) -> StartDecision {
    let recovery = "see docs/operations.md, \"Slot ahead of the stored offset\"";
    if slot.wal_status.as_deref() == Some("lost") {
        return StartDecision::Refuse {
            reason: format!(
                "replication slot {slot_name:?} is lost (wal_status = 'lost'): PostgreSQL removed WAL it still needed, so changes after {} can no longer be streamed",
                slot.confirmed_flush
            ),
            hint: format!(
                "events were lost at the source; drop and recreate the slot, re-snapshot or reconcile the outbox, then start with --accept-slot-position; {recovery}"
            ),
        };
    }
    let Some(stored) = stored else {
        return StartDecision::Resume {
            from: slot.confirmed_flush,
        };
    };
    if stored.system_id != system_id {
        return StartDecision::Refuse {
            reason: format!(
                "the offset store belongs to PostgreSQL system {} but this server is system {system_id} (a different cluster, or a restored/rebuilt one)",
                stored.system_id
            ),
            hint: format!(
                "point the connector at the right database, or if the move is intended start once with --accept-slot-position; {recovery}"
            ),
        };
    }
    let Some(stored_lsn) = stored.lsn() else {
        return StartDecision::Refuse {
            reason: format!("the stored offset has an unreadable LSN {:?}", stored.lsn),
            hint: format!("start once with --accept-slot-position to overwrite it; {recovery}"),
        };
    };
    if slot.confirmed_flush > stored_lsn {
        return StartDecision::Refuse {
            reason: format!(
                "replication slot {slot_name:?} is at {} but Kafka holds events only up to {stored_lsn}: the slot was dropped and recreated, or advanced by hand, and the WAL in between will never be streamed",
                slot.confirmed_flush
            ),
            hint: format!(
                "events committed between {stored_lsn} and {} may be missing from Kafka; reconcile them from the outbox table, then start once with --accept-slot-position; {recovery}",
                slot.confirmed_flush
            ),
        };
    }
    StartDecision::Resume {
        from: slot.confirmed_flush,
    }
}

/// Reads and prepares the offset topic.
#[derive(Debug, Clone)]
pub struct OffsetStore {
    brokers_props: Vec<(String, String)>,
    pub topic: String,
    pub connector: String,
}

impl OffsetStore {
    /// `client_properties` are the connection-level librdkafka properties
    /// (bootstrap servers, security); producer-only keys are filtered out.
    pub fn new(client_properties: &[(String, String)], topic: &str, connector: &str) -> Self {
        let brokers_props = client_properties
            .iter()
            .filter(|(k, _)| is_client_property(k))
            .cloned()
            .collect();
        OffsetStore {
            brokers_props,
            topic: topic.to_owned(),
            connector: connector.to_owned(),
        }
    }

    fn config(&self) -> ClientConfig {
        let mut cfg = ClientConfig::new();
        for (k, v) in &self.brokers_props {
            cfg.set(k, v);
        }
        cfg
    }

    /// Creates the compacted topic if it does not exist.
    pub async fn ensure_topic(&self, timeout: Duration) -> Result<(), OffsetStoreError> {
        let err = |message: String| OffsetStoreError::Create {
            topic: self.topic.clone(),
            message,
        };
        let admin: AdminClient<DefaultClientContext> =
            self.config().create().map_err(|e| err(e.to_string()))?;
        let topic = NewTopic::new(&self.topic, 1, TopicReplication::Fixed(-1))
            .set("cleanup.policy", "compact");
        let opts = AdminOptions::new()
            .operation_timeout(Some(timeout))
            .request_timeout(Some(timeout));
        let results = admin
            .create_topics(&[topic], &opts)
            .await
            .map_err(|e| err(e.to_string()))?;
        for r in results {
            match r {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => return Err(err(code.to_string())),
            }
        }
        Ok(())
    }

    /// Reads the newest stored offset for this connector. Blocking.
    pub fn load(&self, timeout: Duration) -> Result<Option<StoredOffset>, OffsetStoreError> {
        let err = |message: String| OffsetStoreError::Read {
            topic: self.topic.clone(),
            message,
        };
        let mut cfg = self.config();
        cfg.set(
            "group.id",
            format!("walrelay-offsets-reader-{}", self.connector),
        )
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false");
        let consumer: BaseConsumer = cfg.create().map_err(|e| err(e.to_string()))?;
        let md = consumer
            .fetch_metadata(Some(&self.topic), timeout)
            .map_err(|e| err(format!("metadata: {e}")))?;
        let partitions: Vec<i32> = md
            .topics()
            .iter()
            .filter(|t| t.name() == self.topic)
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        let mut tpl = TopicPartitionList::new();
        let mut ends = Vec::new();
        for p in partitions {
            let (low, high) = consumer
                .fetch_watermarks(&self.topic, p, timeout)
                .map_err(|e| err(format!("watermarks of partition {p}: {e}")))?;
            if high > low {
                tpl.add_partition_offset(&self.topic, p, Offset::Offset(low))
                    .map_err(|e| err(e.to_string()))?;
                ends.push((p, high));
            }
        }
        if ends.is_empty() {
            return Ok(None);
        }
        consumer.assign(&tpl).map_err(|e| err(e.to_string()))?;
        let deadline = std::time::Instant::now() + timeout;
        let mut latest: Option<StoredOffset> = None;
        let mut done: Vec<i32> = Vec::new();
        while done.len() < ends.len() {
            if std::time::Instant::now() > deadline {
                return Err(err(format!(
                    "timed out after {timeout:?} reading to the end"
                )));
            }
            let Some(msg) = consumer.poll(Duration::from_millis(200)) else {
                continue;
            };
            let msg = msg.map_err(|e| err(e.to_string()))?;
            if msg.key() == Some(self.connector.as_bytes()) {
                match msg.payload() {
                    Some(p) => {
                        latest = Some(serde_json::from_slice(p).map_err(|e| {
                            err(format!(
                                "offset record at offset {} is not valid: {e}",
                                msg.offset()
                            ))
                        })?)
                    }
                    None => latest = None,
                }
            }
            if let Some((p, high)) = ends.iter().find(|(p, _)| *p == msg.partition())
                && msg.offset() + 1 >= *high
                && !done.contains(p)
            {
                done.push(*p);
            }
        }
        Ok(latest)
    }
}

/// Properties that apply to any client (not producer-only ones).
fn is_client_property(key: &str) -> bool {
    key == "bootstrap.servers"
        || key == "client.id"
        || key.starts_with("security.")
        || key.starts_with("ssl.")
        || key.starts_with("sasl.")
        || key == "socket.timeout.ms"
        || key == "broker.address.family"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(lsn: &str) -> StoredOffset {
        StoredOffset {
            connector: "c".into(),
            system_id: "7".into(),
            timeline: 1,
            slot: "s".into(),
            lsn: lsn.into(),
            written_at_ms: 0,
        }
    }

    fn slot(lsn: u64, status: &str) -> SlotPosition {
        SlotPosition {
            confirmed_flush: Lsn(lsn),
            wal_status: Some(status.into()),
        }
    }

    #[test]
    fn no_stored_offset_resumes_from_slot() {
        assert_eq!(
            compare(None, &slot(5, "reserved"), "7", "s"),
            StartDecision::Resume { from: Lsn(5) }
        );
    }

    #[test]
    fn slot_behind_or_equal_resumes() {
        let s = stored("0/A");
        assert_eq!(
            compare(Some(&s), &slot(5, "reserved"), "7", "s"),
            StartDecision::Resume { from: Lsn(5) }
        );
        assert_eq!(
            compare(Some(&s), &slot(10, "reserved"), "7", "s"),
            StartDecision::Resume { from: Lsn(10) }
        );
    }

    #[test]
    fn slot_ahead_refuses_with_hint() {
        match compare(Some(&stored("0/A")), &slot(11, "reserved"), "7", "s") {
            StartDecision::Refuse { reason, hint } => {
                assert!(
                    reason.contains("0/0000000B") && reason.contains("0/0000000A"),
                    "{reason}"
                );
                assert!(hint.contains("--accept-slot-position"), "{hint}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lost_slot_refuses_even_without_offset() {
        assert!(matches!(
            compare(None, &slot(1, "lost"), "7", "s"),
            StartDecision::Refuse { .. }
        ));
    }

    #[test]
    fn other_cluster_refuses() {
        assert!(matches!(
            compare(Some(&stored("0/1")), &slot(1, "reserved"), "8", "s"),
            StartDecision::Refuse { .. }
        ));
    }

    #[test]
    fn record_round_trip() {
        let s = stored("1/2");
        let r = s.to_record("t");
        let back: StoredOffset = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
        assert_eq!(back, s);
        assert_eq!(r.key.as_deref(), Some(&b"c"[..]));
    }
}
