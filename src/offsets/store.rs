//! The Kafka-backed store: the compacted offset topic, made, checked and
//! read.
//!
//! [`OffsetStore`] creates the topic with [`TOPIC_CONFIG`] (or refuses an
//! existing one that is not purely compacted) and reads the newest
//! [`StoredOffset`] of its connector: every partition to the end it had
//! when the read began, `read_committed`, the newest record of the highest
//! lease term winning. The read's limit is on *stalls*, not on the total,
//! so a big topic loads as long as Kafka keeps delivering. Writing is the
//! relay's (its one offset writer, through the sink).

use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;

use super::stored::StoredOffset;

/// Settings of the offset topic when walrelay creates it.
///
/// Kafka compacts only closed segments, and closes (rolls) a segment only
/// after `segment.ms` (default 7 days) or `segment.bytes` (default 1 GiB). At
/// one offset a second per connector the default keeps a week of offsets in
/// the active segment, uncompacted, and every start reads all of it. So:
/// - `cleanup.policy=compact`: keep the newest offset per connector forever
///   (`delete` would drop a stopped connector's only offset after
///   `retention.ms`, and the start-up check could then no longer notice a
///   recreated slot);
/// - `segment.ms=1h`: roll hourly, so at most about an hour of offsets per
///   connector is uncompacted;
/// - `min.cleanable.dirty.ratio=0.1`, `min.compaction.lag.ms=0`,
///   `max.compaction.lag.ms=1h`: compact a rolled segment soon, even though
///   the topic is tiny (the cleaner's defaults wait for half the log to be
///   dirty).
pub const TOPIC_CONFIG: &[(&str, &str)] = &[
    ("cleanup.policy", "compact"),
    ("segment.ms", "3600000"),
    ("min.cleanable.dirty.ratio", "0.1"),
    ("min.compaction.lag.ms", "0"),
    ("max.compaction.lag.ms", "3600000"),
];

/// A load that read more records than this logs a warning: compaction is not
/// keeping up (or the topic is not compacted).
const BIG_TOPIC_RECORDS: u64 = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum OffsetStoreError {
    #[error("cannot read offset topic {topic:?}: {message}")]
    Read { topic: String, message: String },
    #[error("cannot create offset topic {topic:?}: {message}")]
    Create { topic: String, message: String },
    #[error(
        "the brokers refuse walrelay {operation} on offset topic {topic:?} ({code}). What to do: grant the connector's principal the ACLs the offset store needs: kafka-acls.sh --bootstrap-server <brokers> --add --allow-principal User:<walrelay's user> --operation Create --operation DescribeConfigs --operation Describe --operation Read --operation Write --topic {topic} (docs/security.md)"
    )]
    Denied {
        topic: String,
        /// The ACL operation refused (`Create`, `DescribeConfigs`).
        operation: &'static str,
        /// The broker's error code name (`TOPIC_AUTHORIZATION_FAILED`).
        code: &'static str,
    },
    #[error(
        "offset topic {topic:?} has cleanup.policy={policy}, but the offset store needs a compacted topic (cleanup.policy=compact): {why}. What to do: {fix}"
    )]
    NotCompacted {
        topic: String,
        policy: String,
        why: &'static str,
        fix: String,
    },
    #[error(
        "reading offset topic {topic:?} made no progress for {stall:?} (partition {partition} at offset {reached} of {end}, {records} records read in {elapsed:?}); Kafka is slow or unreachable, walrelay retries. If it repeats, the topic is too big to read: check that it is compacted, see docs/operations.md, \"Offset store\""
    )]
    Stalled {
        topic: String,
        stall: Duration,
        partition: i32,
        reached: i64,
        end: i64,
        records: u64,
        elapsed: Duration,
    },
    #[error(
        "the newest offset of connector {connector:?} in topic {topic:?} (partition {partition}, offset {offset}) is not valid: {message}. What to do: delete it with a tombstone (see docs/operations.md, \"Offset store\"), then start once with --accept-slot-position"
    )]
    BadRecord {
        topic: String,
        connector: String,
        partition: i32,
        offset: i64,
        message: String,
    },
}

impl OffsetStoreError {
    /// Whether retrying may help (Kafka unreachable or slow), as opposed to
    /// a problem only an operator can fix.
    pub fn is_transient(&self) -> bool {
        match self {
            OffsetStoreError::Read { .. }
            | OffsetStoreError::Create { .. }
            | OffsetStoreError::Stalled { .. } => true,
            OffsetStoreError::NotCompacted { .. }
            | OffsetStoreError::BadRecord { .. }
            | OffsetStoreError::Denied { .. } => false,
        }
    }
}

/// A deadline that moves while there is progress: expired only after
/// `stall` without any.
#[derive(Debug, Clone, Copy)]
struct StallDeadline {
    stall: Duration,
    last_progress: Instant,
}

impl StallDeadline {
    fn new(stall: Duration, now: Instant) -> Self {
        StallDeadline {
            stall,
            last_progress: now,
        }
    }

    fn progressed(&mut self, now: Instant) {
        self.last_progress = now;
    }

    fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_progress) > self.stall
    }
}

/// The offset reader's client context: librdkafka's errors go to the log,
/// except the end of a partition, which a `read_committed` reader also
/// reports as a client error when a partition ends in a transaction marker
/// (the read loop handles the end itself; it is not an error).
struct ReaderContext;

impl ClientContext for ReaderContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF) {
            return;
        }
        tracing::error!("librdkafka: {error}: {reason}");
    }
}

impl ConsumerContext for ReaderContext {}

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
            topic: topic.into(),
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

    fn brokers(&self) -> &str {
        self.brokers_props
            .iter()
            .find(|(k, _)| k == "bootstrap.servers")
            .map_or("<brokers>", |(_, v)| v.as_str())
    }

    /// Creates the compacted topic ([`TOPIC_CONFIG`]) if it does not exist;
    /// refuses an existing one that is not compacted.
    pub async fn ensure_topic(&self, timeout: Duration) -> Result<(), OffsetStoreError> {
        let err = |message: String| OffsetStoreError::Create {
            topic: self.topic.clone(),
            message,
        };
        let admin: AdminClient<DefaultClientContext> =
            self.config().create().map_err(|e| err(e.to_string()))?;
        let mut topic = NewTopic::new(&self.topic, 1, TopicReplication::Fixed(-1));
        for (k, v) in TOPIC_CONFIG {
            topic = topic.set(k, v);
        }
        let opts = AdminOptions::new()
            .operation_timeout(Some(timeout))
            .request_timeout(Some(timeout));
        let results = admin
            .create_topics(&[topic], &opts)
            .await
            .map_err(|e| err(e.to_string()))?;
        for r in results {
            match r {
                Ok(_) => {
                    tracing::info!(topic = %self.topic, "created the offset topic");
                    return Ok(());
                }
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => {
                    return Err(match denied(code) {
                        Some(name) => OffsetStoreError::Denied {
                            topic: self.topic.clone(),
                            operation: "Create",
                            code: name,
                        },
                        None => err(code.to_string()),
                    });
                }
            }
        }
        // It existed already: it may have been made by hand, or by another tool.
        self.verify_topic(timeout).await.map(|_| ())
    }

    /// Checks the existing topic's `cleanup.policy`. `Ok(false)` when the
    /// topic does not exist (yet).
    pub async fn verify_topic(&self, timeout: Duration) -> Result<bool, OffsetStoreError> {
        let err = |message: String| OffsetStoreError::Read {
            topic: self.topic.clone(),
            message,
        };
        let admin: AdminClient<DefaultClientContext> =
            self.config().create().map_err(|e| err(e.to_string()))?;
        let opts = AdminOptions::new().request_timeout(Some(timeout));
        // A topic created a moment ago (by another connector, or by
        // auto-creation) can describe without its configuration for a short
        // while: ask again until the deadline instead of judging "".
        let deadline = Instant::now() + timeout;
        loop {
            let results = admin
                .describe_configs(&[ResourceSpecifier::Topic(&self.topic)], &opts)
                .await
                .map_err(|e| err(format!("describing its configuration: {e}")))?;
            let Some(result) = results.into_iter().next() else {
                return Err(err("describing its configuration returned nothing".into()));
            };
            let resource = match result {
                Ok(r) => r,
                Err(RDKafkaErrorCode::UnknownTopicOrPartition) => return Ok(false),
                Err(code) => {
                    return Err(match denied(code) {
                        Some(name) => OffsetStoreError::Denied {
                            topic: self.topic.clone(),
                            operation: "DescribeConfigs",
                            code: name,
                        },
                        None => err(format!("describing its configuration: {code}")),
                    });
                }
            };
            // A broker may answer for a topic it does not have with no
            // configuration at all instead of UNKNOWN_TOPIC_OR_PARTITION.
            if resource.entries.is_empty() {
                tracing::debug!(entries = 0, topic = %self.topic, "the offset topic has no configuration: it does not exist");
                return Ok(false);
            }
            let policy = resource
                .get("cleanup.policy")
                .and_then(|e| e.value.clone())
                .unwrap_or_default();
            if policy.trim().is_empty() {
                if Instant::now() >= deadline {
                    return Err(err(
                        "the broker does not report its cleanup.policy (yet)".into()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            return match not_compacted_because(&policy) {
                None => Ok(true),
                Some(why) => Err(OffsetStoreError::NotCompacted {
                    topic: self.topic.clone(),
                    policy,
                    why,
                    fix: self.fix_command(),
                }),
            };
        }
    }

    /// The command that gives an existing topic walrelay's settings.
    fn fix_command(&self) -> String {
        let settings = TOPIC_CONFIG
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        format!(
            "kafka-configs.sh --bootstrap-server {} --alter --entity-type topics --entity-name {} --add-config {settings}",
            self.brokers(),
            self.topic
        )
    }

    /// Reads the newest stored offset for this connector. Blocking.
    ///
    /// Reads every partition up to the end it had at the start. `stall`
    /// limits the time *without progress* (no record and no end of partition
    /// arriving), not the whole read, so a big topic loads as long as Kafka
    /// keeps delivering.
    pub fn load(&self, stall: Duration) -> Result<Option<StoredOffset>, OffsetStoreError> {
        let err = |message: String| OffsetStoreError::Read {
            topic: self.topic.clone(),
            message,
        };
        let started = Instant::now();
        let mut cfg = self.config();
        cfg.set(
            "group.id",
            format!("walrelay-offsets-reader-{}", self.connector),
        )
        .set("enable.auto.commit", "false")
        // Only what committed Kafka transactions hold (`exactly_once` writes
        // each position inside the transaction of the records it covers; an
        // aborted one must never be a start position). Records written
        // outside transactions (`at_least_once`) are read all the same.
        .set("isolation.level", "read_committed")
        // Tells us when a partition is read to its end.
        .set("enable.partition.eof", "true")
        // Large fetches: the default 1 MiB per partition makes a big topic a
        // long series of round trips.
        .set("max.partition.fetch.bytes", "16777216")
        .set("fetch.max.bytes", "67108864")
        .set("queued.max.messages.kbytes", "262144")
        // At the end, do not wait the default 500 ms for more data.
        .set("fetch.wait.max.ms", "100");
        let consumer: BaseConsumer<ReaderContext> = cfg
            .create_with_context(ReaderContext)
            .map_err(|e| err(e.to_string()))?;
        let md = consumer
            .fetch_metadata(Some(&self.topic), stall)
            .map_err(|e| err(format!("metadata: {e}")))?;
        let partitions: Vec<i32> = md
            .topics()
            .iter()
            .filter(|t| t.name() == self.topic)
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        // The high watermarks, as a read_uncommitted client sees them: a
        // read_committed one is told the last stable offset instead, which
        // stops short of any record behind another producer's open
        // transaction (this connector's newest offset among them).
        let marks: BaseConsumer<ReaderContext> = self
            .config()
            .set("isolation.level", "read_uncommitted")
            .create_with_context(ReaderContext)
            .map_err(|e| err(e.to_string()))?;
        let mut tpl = TopicPartitionList::new();
        // (partition, end offset, offset reached, done)
        let mut parts: Vec<(i32, i64, i64, bool)> = Vec::new();
        for p in partitions {
            let (low, high) = marks
                .fetch_watermarks(&self.topic, p, stall)
                .map_err(|e| err(format!("watermarks of partition {p}: {e}")))?;
            if high > low {
                tpl.add_partition_offset(&self.topic, p, Offset::Offset(low))
                    .map_err(|e| err(e.to_string()))?;
                parts.push((p, high, low, false));
            }
        }
        if parts.is_empty() {
            return Ok(None);
        }
        consumer.assign(&tpl).map_err(|e| err(e.to_string()))?;
        let mut deadline = StallDeadline::new(stall, Instant::now());
        // The newest record of our key: (partition, offset, payload).
        let mut latest: Option<(i32, i64, Option<Vec<u8>>)> = None;
        // Its lease term (see [`StoredOffset::term`]).
        let mut latest_term: Option<u64> = None;
        let mut records: u64 = 0;
        while parts.iter().any(|(_, _, _, done)| !done) {
            let now = Instant::now();
            if deadline.expired(now) {
                let (partition, end, reached, _) = parts
                    .iter()
                    .find(|(_, _, _, done)| !done)
                    .copied()
                    .unwrap_or_default();
                return Err(OffsetStoreError::Stalled {
                    topic: self.topic.clone(),
                    stall,
                    partition,
                    reached,
                    end,
                    records,
                    elapsed: started.elapsed(),
                });
            }
            let msg = match consumer.poll(Duration::from_millis(100)) {
                None => continue,
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    // The end a read_committed reader sees is the last
                    // stable offset: below the high watermark while any
                    // producer's transaction on the partition is open (an
                    // exactly_once connector sharing the topic). Records
                    // behind it (this connector's newest offset among them)
                    // come only once that transaction ends: done only at
                    // the high watermark taken at the start.
                    let position = consumer
                        .position()
                        .ok()
                        .and_then(|tpl| {
                            tpl.find_partition(&self.topic, p)
                                .and_then(|e| e.offset().to_raw())
                        })
                        .unwrap_or(-1);
                    if let Some(part) = parts.iter_mut().find(|x| x.0 == p) {
                        part.2 = part.2.max(position);
                        if part.2 >= part.1 {
                            part.3 = true;
                            deadline.progressed(Instant::now());
                        }
                    }
                    continue;
                }
                Some(Err(e)) => return Err(err(e.to_string())),
                Some(Ok(msg)) => msg,
            };
            deadline.progressed(Instant::now());
            records += 1;
            if msg.key() == Some(self.connector.as_bytes()) {
                let term = msg.payload().map(record_term);
                // A record of an older lease term than the newest so far
                // was written by a holder that had lost its lease: ignored.
                let older = matches!((term, latest_term), (Some(Some(t)), Some(best)) if t < best);
                if older {
                    tracing::warn!(
                        topic = %self.topic, partition = msg.partition(), offset = msg.offset(),
                        "ignoring an offset record written by an earlier lease holder after a \
                         newer one took over (lease term {} < {})",
                        term.flatten().unwrap_or_default(),
                        latest_term.unwrap_or_default()
                    );
                } else {
                    latest_term = match term {
                        // A tombstone starts over; a record without a term
                        // (an older walrelay) keeps the term before it.
                        None => None,
                        Some(t) => t.or(latest_term),
                    };
                    latest = Some((
                        msg.partition(),
                        msg.offset(),
                        msg.payload().map(<[u8]>::to_vec),
                    ));
                }
            }
            if let Some(part) = parts.iter_mut().find(|x| x.0 == msg.partition()) {
                part.2 = msg.offset() + 1;
                if part.2 >= part.1 {
                    part.3 = true;
                }
            }
        }
        let elapsed = started.elapsed();
        if records > BIG_TOPIC_RECORDS {
            tracing::warn!(
                topic = %self.topic, records, ?elapsed,
                "the offset topic is big; check that it is compacted (docs/operations.md, \"Offset store\")"
            );
        } else {
            tracing::debug!(topic = %self.topic, records, ?elapsed, "read the offset topic");
        }
        let Some((partition, offset, payload)) = latest else {
            return Ok(None);
        };
        let Some(payload) = payload else {
            return Ok(None); // a tombstone: the offset was deleted
        };
        serde_json::from_slice(&payload)
            .map(Some)
            .map_err(|e| OffsetStoreError::BadRecord {
                topic: self.topic.clone(),
                connector: self.connector.clone(),
                partition,
                offset,
                message: e.to_string(),
            })
    }
}

/// The lease term an offset record's JSON carries, if any.
fn record_term(payload: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Term {
        #[serde(default)]
        term: Option<u64>,
    }
    serde_json::from_slice::<Term>(payload).ok()?.term
}

/// Why a topic with this `cleanup.policy` cannot hold offsets, if it cannot.
fn not_compacted_because(policy: &str) -> Option<&'static str> {
    let mut compact = false;
    let mut delete = false;
    for p in policy.split(',').map(str::trim) {
        match p {
            "compact" => compact = true,
            "delete" => delete = true,
            _ => {}
        }
    }
    match (compact, delete) {
        (true, false) => None,
        (true, true) => Some(
            "with `delete` as well, the broker removes a stopped connector's only offset after retention.ms, and the start-up check can then no longer notice a recreated slot",
        ),
        (false, _) => Some(
            "without compaction the topic grows by every offset ever written (about one a second per connector) and each start reads all of it",
        ),
    }
}

/// The broker's name for an authorization failure, if `code` is one.
fn denied(code: RDKafkaErrorCode) -> Option<&'static str> {
    match code {
        RDKafkaErrorCode::TopicAuthorizationFailed => Some("TOPIC_AUTHORIZATION_FAILED"),
        RDKafkaErrorCode::ClusterAuthorizationFailed => Some("CLUSTER_AUTHORIZATION_FAILED"),
        _ => None,
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
mod tests;
