//! The Kafka producer and its delivery reports.
//!
//! Owns the librdkafka producer (`acks=all`, `enable.idempotence=true`,
//! `partitioner=murmur2_random`, set by the config layer and not
//! overridable). Knows nothing about PostgreSQL, positions or transactions:
//! each record comes in with the caller's opaque token and the token comes
//! back, in whatever order the brokers acknowledge them, in an [`Ack`] on a
//! channel — acknowledgements flow back by message, not shared state.
//!
//! Invariants:
//! - Every record handed to [`KafkaSink::send`] produces exactly one [`Ack`]
//!   (success or failure) unless the sink is dropped first; a full librdkafka
//!   queue is backpressure (we wait and retry), never a drop.
//! - Failures are classified: errors that retrying cannot fix (message too
//!   large, authorization, unknown topic with auto-create off, fatal
//!   idempotence errors) are [`SinkErrorKind::Definite`] and stop the
//!   connector; the rest are transient and restart the session from the
//!   confirmed position (a re-send, never a loss).
//! - **Delivered means written at an offset.** A success report without an
//!   offset is not trusted: it is reported as a transient failure, so the
//!   record is re-sent. librdkafka's idempotent producer issues such reports
//!   as *implicit acks*: when request R1 to a partition fails (e.g. "not
//!   leader") and a later request R2 succeeds, it assumes R1 was written and
//!   reports R1's records delivered. That holds only if the broker enforces
//!   sequence order, which it does not for a producer id it holds no state
//!   for on that partition (a new session's first writes, a new topic, state
//!   expired after `producer.id.expiration.ms`): it accepts R2, and R1's
//!   records are silently gone. The config layer also sets
//!   `max.in.flight=1`, so R2 is never in flight while R1 can fail.
//! - **Nothing overtakes a refused record.** After a definite failure the
//!   caller calls [`KafkaSink::purge_queued`]: records not yet sent are
//!   dropped from librdkafka's queue (each still gets its one [`Ack`], a
//!   failure), so later events of the same key do not reach Kafka before the
//!   refused one is fixed and re-sent.
//! - A fatal producer error ([`Ack::Fatal`]) makes this producer unusable,
//!   not the connector: it is transient, and the next session builds a fresh
//!   producer (librdkafka's documented recovery).
//! - **A refused credential is definite.** librdkafka reports a failed TLS
//!   handshake or SASL authentication only through its error callback and
//!   then retries the connection forever. [`security_failure`] recognises
//!   those reports (SASL authentication errors by code; TLS by the OpenSSL
//!   texts "certificate verify failed" and the certificate alerts a broker
//!   sends when it refuses a client certificate), and the producer turns one
//!   into a definite [`Ack::Fatal`]: retrying cannot fix a wrong password or
//!   an untrusted certificate. [`probe_cluster`] does the same for `check`
//!   and for the start of a session.
//! - **Two producers, one at a time, never overlapping.** A sink made with
//!   [`KafkaSink::with_bulk`] has a second producer with a longer linger
//!   (bigger produce requests: less CPU per record here and on the broker)
//!   for while the caller is behind. [`KafkaSink::use_bulk`] switches only
//!   once every record handed to the other producer is acknowledged (or
//!   failed): records of one partition never wait in both producers at
//!   once, so the switch cannot reorder them. Each producer keeps its own
//!   idempotent producer id and sequence numbers. Transactional sinks have
//!   no second producer (one transactional id, one fencing).
//! - **No busy waiting.** Each producer's delivery reports are served by a
//!   thread of its own ([`Polled`]) that sleeps until a report arrives or
//!   its 100 ms step ends; an idle connector's producers use no measurable
//!   CPU (rdkafka's `ThreadedProducer` spins through the last millisecond
//!   of every step: about 1 % of a core per producer).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext, PurgeConfig,
};
use tokio::sync::mpsc;

use crate::config::{is_secret_property, quoted, shorten};
use crate::router::Record;
use crate::telemetry::outage::OutageLog;

/// A delivery report, carrying back the caller's token for the record.
#[derive(Debug)]
pub enum Ack<T> {
    Delivered(T),
    Failed {
        token: T,
        topic: String,
        error: SinkError,
    },
    /// librdkafka reported a fatal client error (e.g. the idempotent
    /// producer lost its guarantees); the producer is unusable.
    Fatal(SinkError),
}

/// Whether retrying can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkErrorKind {
    Transient,
    Definite,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct SinkError {
    pub kind: SinkErrorKind,
    pub message: String,
    pub code: Option<RDKafkaErrorCode>,
}

impl SinkError {
    /// Kafka or the producer refused the record for its size.
    pub fn is_too_large(&self) -> bool {
        matches!(
            self.code,
            Some(RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::InvalidMessageSize)
        )
    }

    /// The cluster answers but this producer has delivered nothing for
    /// `stalled_for` (transient: a fresh producer is the cure).
    pub fn stuck(stalled_for: Duration) -> SinkError {
        SinkError {
            kind: SinkErrorKind::Transient,
            message: format!(
                "the brokers answer, yet the producer has delivered nothing for {:.0?}; restarting \
                 the session with a fresh producer (it re-sends from the confirmed position)",
                stalled_for
            ),
            code: None,
        }
    }

    /// Kafka did not acknowledge within `limit` (transient).
    pub fn timed_out(limit: Duration) -> SinkError {
        SinkError {
            kind: SinkErrorKind::Transient,
            message: format!("Kafka did not acknowledge within {limit:?}"),
            code: None,
        }
    }

    fn from_kafka(e: &KafkaError) -> SinkError {
        SinkError::for_topic(e, None)
    }

    /// As [`SinkError::from_kafka`], naming `topic` in the fix when known.
    fn for_topic(e: &KafkaError, topic: Option<&str>) -> SinkError {
        let code = e.rdkafka_error_code();
        let kind = match code {
            Some(c) if is_definite(c) => SinkErrorKind::Definite,
            _ => SinkErrorKind::Transient,
        };
        SinkError {
            kind,
            message: describe(e, code, topic),
            code,
        }
    }

    /// A failed transaction call. A fenced producer (another producer
    /// with the same transactional id registered since: a new instance of
    /// this connector) is transient here, like any lost transaction: the
    /// next session re-sends from the last committed position, or finds
    /// itself the standby.
    fn transaction(e: &KafkaError) -> SinkError {
        let mut error = SinkError::from_kafka(e);
        if error.is_fenced() {
            error.kind = SinkErrorKind::Transient;
            error.message = format!(
                "{}: another producer with this connector's transactional id took over (a new \
                 instance of the connector), or the broker aborted the open transaction (open \
                 longer than kafka.transaction_timeout, e.g. through a broker outage); its \
                 records are never visible to read_committed consumers; the active instance sends them \
                 again from the last committed position",
                error.message
            );
        }
        error
    }

    /// Whether the producer was fenced by a newer one with its
    /// transactional id.
    pub fn is_fenced(&self) -> bool {
        use RDKafkaErrorCode::*;
        matches!(
            self.code,
            Some(ProducerFenced | InvalidProducerEpoch | Fenced)
        )
    }

    /// A success report that carries no offset (see the module doc).
    pub(crate) fn unverified(partition: i32) -> SinkError {
        SinkError {
            kind: SinkErrorKind::Transient,
            message: format!(
                "Kafka reported a record on partition {partition} delivered without an offset \
                 (the producer inferred it from a later batch after an earlier one failed), so it \
                 may not be in the log; re-sending from the last confirmed position"
            ),
            code: None,
        }
    }
}

fn is_definite(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode::*;
    matches!(
        code,
        MessageSizeTooLarge
            | InvalidMessageSize
            | TopicAuthorizationFailed
            | ClusterAuthorizationFailed
            | TransactionalIdAuthorizationFailed
            | UnknownTopicOrPartition
            | UnknownTopic
            | InvalidTopic
            | InvalidConfig
            | UnsupportedVersion
            | SaslAuthenticationFailed
            | Authentication
            | PolicyViolation
            | InvalidRecord
    )
}

fn describe(e: &KafkaError, code: Option<RDKafkaErrorCode>, topic: Option<&str>) -> String {
    use RDKafkaErrorCode::*;
    let fix = match code {
        Some(MessageSizeTooLarge | InvalidMessageSize) => {
            "; the record is larger than the broker or topic accepts (message.max.bytes / max.message.bytes): \
             shrink the payload or raise the limit on the topic and in [kafka.librdkafka] \"message.max.bytes\"".to_owned()
        }
        Some(TopicAuthorizationFailed) => format!(
            " (TOPIC_AUTHORIZATION_FAILED); the connector's principal lacks the WRITE (or \
             DESCRIBE) ACL on the topic: grant both, e.g. kafka-acls.sh --bootstrap-server \
             <brokers> --add --allow-principal User:<walrelay's user> --operation Write \
             --operation Describe --topic {} (docs/security.md)",
            topic.unwrap_or("<topic>")
        ),
        Some(ClusterAuthorizationFailed) => {
            " (CLUSTER_AUTHORIZATION_FAILED); the idempotent producer needs WRITE on at least \
             one topic (Kafka 2.8 and later) or IDEMPOTENT_WRITE on the cluster: grant \
             kafka-acls.sh --add --allow-principal User:<walrelay's user> --operation \
             IdempotentWrite --cluster (docs/security.md)"
                .to_owned()
        }
        Some(TransactionalIdAuthorizationFailed) => {
            " (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); delivery = \"exactly_once\" needs WRITE \
             and DESCRIBE on the connector's transactional id walrelay-<connector.name>: grant \
             kafka-acls.sh --bootstrap-server <brokers> --add --allow-principal User:<walrelay's \
             user> --operation Write --operation Describe --transactional-id \
             walrelay-<connector.name> --resource-pattern-type prefixed (docs/security.md)"
                .to_owned()
        }
        Some(InvalidRecord) => {
            let topic = topic.unwrap_or("<topic>");
            format!(
                " (INVALID_RECORD: the broker refused the batch holding this record, and \
                 refuses it again on every retry). The usual cause: topic {topic} has \
                 cleanup.policy=compact and the batch holds a record without a key, which a \
                 compacted topic never accepts. walrelay sends records without a key for a \
                 TRUNCATE event (skipped_operations without \"t\"), for a change of a table \
                 with neither a primary key nor key_columns, and for a [[message]] route \
                 without a key. Fix: give topic {topic} cleanup.policy=delete \
                 (kafka-configs.sh --bootstrap-server <brokers> --alter --entity-type topics \
                 --entity-name {topic} --add-config cleanup.policy=delete), or keep keyless \
                 records off it (skipped_operations = \"t\", key_columns, a key for the \
                 message route, or another topic), then start again: the refused records are \
                 sent again"
            )
        }
        Some(UnknownTopicOrPartition | UnknownTopic) => {
            "; create the topic, or enable auto.create.topics.enable on the brokers".to_owned()
        }
        _ => String::new(),
    };
    format!("{e}{fix}")
}

/// The certificate alerts (OpenSSL's spelling) with which a broker refuses
/// walrelay's client certificate, or the lack of one, during the TLS handshake.
const CLIENT_CERTIFICATE_ALERTS: &[&str] = &[
    "alert bad certificate",
    "alert certificate unknown",
    "alert certificate required",
    "alert unknown ca",
    "alert certificate expired",
    "alert certificate revoked",
    "alert unsupported certificate",
    "alert access denied",
];

/// Whether a librdkafka error report (`code`, `reason`) is a connection
/// refused for security reasons — something no retry can fix — and if so,
/// the definite error naming the configuration keys to fix. `reason` is
/// librdkafka's text, which names the broker but never a password.
pub fn security_failure(code: Option<RDKafkaErrorCode>, reason: &str) -> Option<SinkError> {
    use RDKafkaErrorCode::*;
    let lower = reason.to_ascii_lowercase();
    let (what, fix) = if matches!(code, Some(Authentication | SaslAuthenticationFailed))
        || lower.contains("sasl authentication error")
    {
        (
            "SASL authentication failed",
            "check kafka.sasl_username, kafka.sasl_password (not shown) and kafka.sasl_mechanism \
             against the user the brokers know",
        )
    } else if code == Some(UnsupportedSASLMechanism) {
        (
            "the brokers do not offer this SASL mechanism",
            "set kafka.sasl_mechanism to one the listener enables (sasl.enabled.mechanisms on \
             the brokers)",
        )
    } else if lower.contains("certificate verify failed") {
        (
            "TLS: the broker's certificate could not be verified",
            "kafka.ssl_ca must hold the CA that signed the brokers' certificates, and each \
             certificate must name the host written in kafka.brokers (host-name verification: \
             kafka.ssl_verify_hostname)",
        )
    } else if CLIENT_CERTIFICATE_ALERTS.iter().any(|a| lower.contains(a))
        || lower.contains("client ssl authentication might be required")
    {
        (
            "TLS: the broker refused walrelay's client certificate",
            "the listener requires a client certificate signed by a CA the brokers trust: set \
             kafka.ssl_certificate and kafka.ssl_key to one",
        )
    } else {
        return None;
    };
    Some(SinkError {
        kind: SinkErrorKind::Definite,
        message: format!("{what} ({}); {fix}", shorten(reason.trim(), 400)),
        code,
    })
}

struct AckContext<T> {
    acks: mpsc::UnboundedSender<Ack<T>>,
    /// Broker connection failures, logged once per outage (see
    /// [`OutageLog`]) instead of once per reconnect attempt.
    outage: Arc<OutageLog>,
}

/// Whether librdkafka's error callback reports the brokers being out of
/// reach (it retries by itself): an outage, not news on every attempt.
fn is_unreachable(code: Option<RDKafkaErrorCode>) -> bool {
    matches!(
        code,
        Some(
            RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::Resolve
        )
    )
}

impl<T: Send + Sync + 'static> ClientContext for AckContext<T> {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        // A failed (re)connection: librdkafka logs one per attempt and
        // broker, for as long as the outage lasts.
        // Likewise a partition whose leader went away with its broker: one
        // line per partition and metadata refresh.
        let leaderless = fac == "METADATAUPDATE" && message.contains("leader");
        if (fac == "FAIL" || leaderless) && (level as i32) <= (RDKafkaLogLevel::Warning as i32) {
            self.outage.failed(message);
            return;
        }
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::error!(facility = fac, "librdkafka: {message}"),
            RDKafkaLogLevel::Warning => tracing::warn!(facility = fac, "librdkafka: {message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::debug!(facility = fac, "librdkafka: {message}")
            }
            RDKafkaLogLevel::Debug => tracing::trace!(facility = fac, "librdkafka: {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) {
            let _ = self.acks.send(Ack::Fatal(SinkError {
                // This producer is done for; a new session's fresh producer
                // is the recovery, so retrying helps.
                kind: SinkErrorKind::Transient,
                message: format!("fatal Kafka producer error: {reason}"),
                code: Some(RDKafkaErrorCode::Fatal),
            }));
        } else if let Some(refused) = security_failure(error.rdkafka_error_code(), reason) {
            tracing::error!(error = %refused, "Kafka refused the connection");
            let _ = self.acks.send(Ack::Fatal(refused));
        } else if is_unreachable(error.rdkafka_error_code()) && !reason.starts_with("0/") {
            // ("0/2 brokers are down" comes as the brokers return.)
            self.outage.failed(reason);
        } else {
            // Broker down, DNS, etc.: librdkafka retries by itself. Logged at
            // debug because it repeats; the connector logs the stall itself.
            tracing::debug!(error = %error, "librdkafka: {reason}");
        }
    }
}

impl<T: Send + Sync + 'static> ProducerContext for AckContext<T> {
    type DeliveryOpaque = Box<T>;

    fn delivery(&self, result: &DeliveryResult<'_>, token: Box<T>) {
        use rdkafka::Message;
        let ack = match result {
            Ok(msg) if msg.offset() >= 0 => {
                self.outage.succeeded();
                Ack::Delivered(*token)
            }
            // See the module doc: an implicit ack, not proof of a write.
            Ok(msg) => Ack::Failed {
                token: *token,
                topic: msg.topic().to_owned(),
                error: SinkError::unverified(msg.partition()),
            },
            Err((e, msg)) => Ack::Failed {
                token: *token,
                topic: msg.topic().to_owned(),
                error: SinkError::for_topic(e, Some(msg.topic())),
            },
        };
        // The receiver is gone only when the session is being torn down.
        let _ = self.acks.send(ack);
    }
}

/// librdkafka refused a producer configuration. Names the property, never
/// its value: a misspelt secret property ("SASL.Password") is not known to
/// be secret, and librdkafka's own messages repeat the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PropertyError {
    /// The property librdkafka names, when it names one.
    pub property: Option<String>,
    /// What is wrong and what to do, without any property value.
    pub message: String,
}

impl PropertyError {
    /// Describes a failure to create a client from `properties`.
    pub fn from_kafka(e: &KafkaError, properties: &[(String, String)]) -> PropertyError {
        use rdkafka::types::RDKafkaConfRes;
        const REFERENCE: &str =
            "librdkafka's CONFIGURATION.md lists the properties and their values";
        match e {
            KafkaError::ClientConfig(RDKafkaConfRes::RD_KAFKA_CONF_UNKNOWN, _, key, _) => {
                PropertyError {
                    property: Some(key.clone()),
                    message: format!(
                        "librdkafka has no property named {} (its value is not shown); correct \
                         the name or remove it ({REFERENCE})",
                        quoted(key)
                    ),
                }
            }
            KafkaError::ClientConfig(_, description, key, _) => {
                // "... value 0 is outside allowed range 1..1000000": the
                // range helps, the rest of librdkafka's text repeats the value.
                let range = description
                    .split_once("allowed range ")
                    .map(|(_, r)| format!(", which must be in the range {}", r.trim()))
                    .unwrap_or_default();
                PropertyError {
                    property: Some(key.clone()),
                    message: format!(
                        "librdkafka refuses the value of property {} (the value is not \
                         shown){}; correct it or remove the property ({REFERENCE})",
                        quoted(key),
                        shorten(&range, 80)
                    ),
                }
            }
            // Checks across properties ("`message.timeout.ms` must be greater
            // than `linger.ms`") name them in backquotes; a file librdkafka
            // cannot load is named bare ("ssl.ca.location failed: …").
            other => {
                let text = redact_secrets(&other.to_string(), properties);
                let property = text
                    .split('`')
                    .nth(1)
                    .filter(|p| properties.iter().any(|(k, _)| k == p))
                    .or_else(|| first_property_in(&text, properties))
                    .map(str::to_owned);
                PropertyError {
                    property,
                    message: format!(
                        "librdkafka refuses the producer configuration: {}; correct the \
                         properties it names ({REFERENCE})",
                        shorten(&text, 500)
                    ),
                }
            }
        }
    }
}

/// The property of `properties` whose name occurs first in `text` as a
/// word of its own (`ssl.ca.location` in "ssl.ca.location failed: …").
fn first_property_in<'a>(text: &str, properties: &'a [(String, String)]) -> Option<&'a str> {
    let name_char = |c: char| c.is_ascii_alphanumeric() || c == '.' || c == '_';
    properties
        .iter()
        .filter_map(|(k, _)| {
            text.match_indices(k.as_str())
                .find(|&(at, _)| {
                    !text[..at].ends_with(name_char) && !text[at + k.len()..].starts_with(name_char)
                })
                .map(|(at, _)| (at, k.as_str()))
        })
        .min()
        .map(|(_, k)| k)
}

/// `text` with the value of every secret property replaced by `[REDACTED]`.
fn redact_secrets(text: &str, properties: &[(String, String)]) -> String {
    properties
        .iter()
        .filter(|(k, v)| is_secret_property(k) && !v.is_empty())
        .fold(text.to_owned(), |t, (_, v)| {
            t.replace(v.as_str(), "[REDACTED]")
        })
}

/// A context that drops librdkafka's log lines and errors: used only to
/// check a configuration, for a producer that never connects.
struct Silent;

impl ClientContext for Silent {
    fn log(&self, _: RDKafkaLogLevel, _: &str, _: &str) {}
    fn error(&self, _: KafkaError, _: &str) {}
}

impl ProducerContext for Silent {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

/// Checks a complete producer property list the way [`KafkaSink::new`]
/// would use it: every name and value, and librdkafka's checks across
/// properties (e.g. `linger.ms` below `message.timeout.ms`), by creating a
/// producer and dropping it. The brokers are left out, so nothing connects
/// anywhere; call this when the configuration is loaded, before PostgreSQL or
/// Kafka are reachable. Blocks for well under a second.
pub fn check_producer_properties(properties: &[(String, String)]) -> Result<(), PropertyError> {
    let mut cfg = ClientConfig::new();
    for (k, v) in properties {
        if k != "bootstrap.servers" && k != "metadata.broker.list" {
            cfg.set(k, v);
        }
    }
    cfg.set_log_level(RDKafkaLogLevel::Emerg);
    let created: Result<BaseProducer<Silent>, _> = cfg.create_with_context(Silent);
    created
        .map(drop)
        .map_err(|e| PropertyError::from_kafka(&e, properties))
}

/// The producer side of the connector. `T` is the caller's token for a
/// record: opaque here, handed back with the record's [`Ack`].
pub struct KafkaSink<T: Send + Sync + 'static> {
    producer: Arc<Polled<AckContext<T>>>,
    /// The producer for while the caller is behind (longer linger), if any.
    bulk: Option<Arc<Polled<AckContext<T>>>>,
    /// Whether [`Self::send`] uses `bulk`.
    bulk_active: std::sync::atomic::AtomicBool,
}

impl<T: Send + Sync + 'static> std::fmt::Debug for KafkaSink<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink").finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> KafkaSink<T> {
    /// Creates the producer from a complete librdkafka property list.
    ///
    /// `outage` logs the brokers going out of reach and coming back; share
    /// one across producers so that an outage spanning a session restart is
    /// one outage in the log.
    pub fn new(
        properties: &[(String, String)],
        outage: Arc<OutageLog>,
    ) -> Result<(KafkaSink<T>, mpsc::UnboundedReceiver<Ack<T>>), SinkError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let producer = create_producer(properties, AckContext { acks: tx, outage })?;
        Ok((
            KafkaSink {
                producer: Arc::new(producer),
                bulk: None,
                bulk_active: AtomicBool::new(false),
            },
            rx,
        ))
    }

    /// [`KafkaSink::new`] plus a second producer with `linger.ms` =
    /// `bulk_linger_ms` (its other properties the same), for while the caller
    /// is behind: see [`KafkaSink::use_bulk`]. Both report on the one channel.
    pub fn with_bulk(
        properties: &[(String, String)],
        bulk_linger_ms: &str,
        outage: Arc<OutageLog>,
    ) -> Result<(KafkaSink<T>, mpsc::UnboundedReceiver<Ack<T>>), SinkError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let bulk_properties: Vec<(String, String)> = properties
            .iter()
            .map(|(k, v)| match k.as_str() {
                "linger.ms" => (k.clone(), bulk_linger_ms.to_owned()),
                _ => (k.clone(), v.clone()),
            })
            .collect();
        let bulk = create_producer(
            &bulk_properties,
            AckContext {
                acks: tx.clone(),
                outage: outage.clone(),
            },
        )?;
        let producer = create_producer(properties, AckContext { acks: tx, outage })?;
        Ok((
            KafkaSink {
                producer: Arc::new(producer),
                bulk: Some(Arc::new(bulk)),
                bulk_active: AtomicBool::new(false),
            },
            rx,
        ))
    }

    /// The producer [`Self::send`] hands records to.
    fn active(&self) -> &Polled<AckContext<T>> {
        match &self.bulk {
            Some(bulk) if self.bulk_active.load(Ordering::Relaxed) => bulk,
            _ => &self.producer,
        }
    }

    /// How many times librdkafka reported a broker unreachable so far (to
    /// this sink's outage log, shared by sessions): a caller compares two
    /// readings to learn whether an outage happened in between.
    pub fn unreachable_reports(&self) -> u64 {
        self.producer.context().outage.failures()
    }

    /// Whether the sink has a second producer ([`Self::with_bulk`]).
    pub fn has_bulk(&self) -> bool {
        self.bulk.is_some()
    }

    /// Whether records go to the second producer (see [`Self::with_bulk`]).
    pub fn bulk_active(&self) -> bool {
        self.bulk.is_some() && self.bulk_active.load(Ordering::Relaxed)
    }

    /// Makes [`Self::send`] use the second producer (`true`) or the first.
    /// Switches only once every record handed to the producer in use is
    /// acknowledged or failed (sending what lingers in it at once), waiting
    /// up to `wait`; returns whether the requested producer is in use (always
    /// `false` for `true` without a second producer). Records of a partition
    /// so never wait in both producers, and cannot overtake each other.
    pub async fn use_bulk(&self, bulk: bool, wait: Duration) -> bool {
        if self.bulk.is_none() {
            return !bulk;
        }
        if self.bulk_active() == bulk {
            return true;
        }
        if !drain(self.active(), tokio::time::Instant::now() + wait).await {
            return false;
        }
        self.bulk_active.store(bulk, Ordering::Relaxed);
        true
    }

    /// Enqueues one record. When librdkafka's queue is full, waits (yielding
    /// to the runtime) and retries: backpressure, never a drop.
    pub async fn send(&self, record: &Record, token: T) -> Result<(), SinkError> {
        let mut token = Box::new(token);
        let mut backoff = Duration::from_micros(200);
        loop {
            let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
            for (k, v) in &record.headers {
                headers = headers.insert(Header {
                    key: k,
                    value: Some(v.as_ref()),
                });
            }
            let mut base: BaseRecord<'_, [u8], [u8], Box<T>> =
                BaseRecord::with_opaque_to(&record.topic, token).headers(headers);
            if let Some(k) = &record.key {
                base = base.key(k.as_ref());
            }
            if let Some(v) = &record.value {
                base = base.payload(v.as_ref());
            }
            if let Some(ts) = record.timestamp_ms {
                base = base.timestamp(ts);
            }
            match self.active().send(base) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    token = back.delivery_opaque;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(50));
                }
                Err((e, _)) => return Err(SinkError::from_kafka(&e)),
            }
        }
    }

    /// Transactional producers only (`transactional.id` set): registers
    /// the transactional id with its coordinator, which **fences** every
    /// earlier producer with the same id (their open transaction is
    /// aborted, their next send or commit fails as fenced). Once per
    /// producer, before [`KafkaSink::begin_transaction`].
    pub async fn init_transactions(&self, timeout: Duration) -> Result<(), SinkError> {
        self.blocking(move |p| p.init_transactions(timeout)).await
    }

    /// Opens a Kafka transaction: every record sent until the commit or
    /// abort belongs to it. Local (no request to a broker).
    pub fn begin_transaction(&self) -> Result<(), SinkError> {
        self.producer
            .begin_transaction()
            .map_err(|e| SinkError::transaction(&e))
    }

    /// Sends what is queued and commits the open transaction: its records
    /// become visible to `read_committed` consumers at once, all of them or
    /// (on an error) none. An error leaves the transaction to be aborted (by
    /// [`KafkaSink::abort_transaction`], or by the next producer's
    /// [`KafkaSink::init_transactions`]).
    pub async fn commit_transaction(&self, timeout: Duration) -> Result<(), SinkError> {
        // rdkafka's commit first flushes, polling the producer's event
        // queue in steps of 100 ms; with the Polled thread serving that
        // queue each step sleeps its full 100 ms, a floor
        // under every transaction. Wait for the outstanding records here
        // instead (librdkafka's flush with no wait only checks, and sends
        // what lingers), so that the commit's own flush finds none.
        if !drain(&self.producer, tokio::time::Instant::now() + timeout).await {
            return Err(SinkError::timed_out(timeout));
        }
        self.blocking(move |p| p.commit_transaction(timeout)).await
    }

    /// Aborts the open transaction: none of its records becomes visible to
    /// `read_committed` consumers.
    pub async fn abort_transaction(&self, timeout: Duration) -> Result<(), SinkError> {
        self.blocking(move |p| p.abort_transaction(timeout)).await
    }

    /// Runs a blocking librdkafka call off the async threads.
    async fn blocking(
        &self,
        call: impl FnOnce(&Polled<AckContext<T>>) -> rdkafka::error::KafkaResult<()> + Send + 'static,
    ) -> Result<(), SinkError> {
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || call(&producer))
            .await
            .map_err(|e| SinkError {
                kind: SinkErrorKind::Transient,
                message: format!("the Kafka transaction call did not complete: {e}"),
                code: None,
            })?
            .map_err(|e| SinkError::transaction(&e))
    }

    /// Drops every record still waiting in librdkafka's queue (not yet sent
    /// to a broker). Each dropped record is reported as a failure on the ack
    /// channel; requests already in flight complete normally.
    pub fn purge_queued(&self) {
        self.producer.purge(PurgeConfig::default().queue());
        if let Some(bulk) = &self.bulk {
            bulk.purge(PurgeConfig::default().queue());
        }
    }
}

/// A producer of `properties` reporting through `context`.
fn create_producer<T: Send + Sync + 'static>(
    properties: &[(String, String)],
    context: AckContext<T>,
) -> Result<Polled<AckContext<T>>, SinkError> {
    let mut cfg = ClientConfig::new();
    for (k, v) in properties {
        cfg.set(k, v);
    }
    // rdkafka derives librdkafka's log level from the `log` crate's
    // filter, which never enables debug here, so a `debug` property in
    // [kafka.librdkafka] would print nothing. Pass everything; the
    // tracing filter decides what is shown.
    let debugging = properties
        .iter()
        .any(|(k, v)| k == "debug" && !v.trim().is_empty());
    cfg.set_log_level(if debugging {
        RDKafkaLogLevel::Debug
    } else {
        RDKafkaLogLevel::Info
    });
    let producer: BaseProducer<AckContext<T>> =
        cfg.create_with_context(context).map_err(|e| SinkError {
            kind: SinkErrorKind::Definite,
            message: format!(
                "cannot create the Kafka producer: {}",
                PropertyError::from_kafka(&e, properties)
            ),
            code: e.rdkafka_error_code(),
        })?;
    Polled::start(producer).map_err(|e| SinkError {
        kind: SinkErrorKind::Definite,
        message: format!("cannot start the Kafka producer's delivery-report thread: {e}"),
        code: None,
    })
}

/// How long one [`BaseProducer::poll`] call of [`Polled`]'s thread waits
/// for a delivery report: 100 ms, plus a margin explained there.
const POLL_STEP: Duration = Duration::from_micros(100_050);

/// A producer with a thread of its own serving its delivery reports (they
/// reach [`AckContext`] on that thread), as rdkafka's `ThreadedProducer`,
/// without its busy wait. `BaseProducer::poll(d)` waits in whole
/// milliseconds, truncated, until `d` has passed: called with 100 ms, it
/// waits 99 ms (a few microseconds are gone by the first wait), then spins
/// through zero-millisecond waits for the last fraction of a millisecond,
/// about 1 % of a core per producer whether or not anything is produced
/// (seen in a profile of an idle connector: the thread's samples were
/// clock readings and empty queue polls). Polling for 100 ms plus 50 µs
/// makes the first wait a whole 100 ms, which ends past the deadline.
/// Dropping it stops the thread (within one step) and then the producer.
pub(crate) struct Polled<C: ProducerContext + 'static> {
    producer: Arc<BaseProducer<C>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<C: ProducerContext + 'static> Polled<C> {
    fn start(producer: BaseProducer<C>) -> std::io::Result<Polled<C>> {
        let producer = Arc::new(producer);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (producer, stop) = (producer.clone(), stop.clone());
            std::thread::Builder::new()
                .name("kafka reports".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        producer.poll(POLL_STEP);
                    }
                })?
        };
        Ok(Polled {
            producer,
            stop,
            thread: Some(thread),
        })
    }
}

impl<C: ProducerContext + 'static> std::ops::Deref for Polled<C> {
    type Target = BaseProducer<C>;
    fn deref(&self) -> &BaseProducer<C> {
        &self.producer
    }
}

impl<C: ProducerContext + 'static> Drop for Polled<C> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            // The thread only polls; it cannot panic but through the
            // context, whose panic the join would only report again.
            let _ = thread.join();
        }
    }
}

/// What a successful [`probe_cluster`] learned about the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeReport {
    /// Brokers listed in the metadata.
    pub brokers: usize,
    /// `security.protocol` as used (librdkafka's default `plaintext` when unset).
    pub protocol: String,
    /// `sasl.mechanisms` as used, with a `sasl_*` protocol.
    pub sasl_mechanism: Option<String>,
    /// librdkafka checked the broker's certificate chain against the CA: a
    /// TLS protocol with `enable.ssl.certificate.verification` on (see
    /// [`certificate_verification_on`]).
    pub certificate_verified: bool,
    /// Host-name verification was on (`ssl.endpoint.identification.algorithm`).
    pub host_name_checked: bool,
}

impl std::fmt::Display for ProbeReport {
    /// "over sasl_ssl (SASL SCRAM-SHA-512; TLS, broker certificate verified
    /// for its host name)".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "over {}", self.protocol)?;
        let mut parts = Vec::new();
        if let Some(m) = &self.sasl_mechanism {
            parts.push(format!("SASL {m}"));
        }
        if self.protocol.ends_with("ssl") {
            // librdkafka does not tell which TLS version it negotiated.
            parts.push(match (self.certificate_verified, self.host_name_checked) {
                (true, true) => "TLS, broker certificate verified for its host name".to_owned(),
                (true, false) => {
                    "TLS, broker certificate verified (host name NOT checked)".to_owned()
                }
                (false, _) => "TLS, broker certificate NOT verified".to_owned(),
            });
        }
        if !parts.is_empty() {
            write!(f, " ({})", parts.join("; "))?;
        }
        Ok(())
    }
}

/// Why [`probe_cluster`] failed.
#[derive(Debug, Clone)]
pub enum ProbeError {
    /// The brokers refused walrelay's credentials or certificates
    /// ([`security_failure`]): definite.
    Refused(SinkError),
    /// No answer (down, unreachable, timed out): retrying may help.
    Unreachable(String),
}

/// Collects librdkafka's error callbacks while probing: connection failures
/// carry their cause ("Connection refused"), `AllBrokersDown` says no broker
/// is left to try, and a security failure ends the probe at once.
#[derive(Default)]
struct ProbeWatch {
    errors: std::sync::Mutex<Vec<String>>,
    refused: std::sync::Mutex<Option<SinkError>>,
    all_down: std::sync::atomic::AtomicBool,
}

impl ClientContext for ProbeWatch {
    fn log(&self, _level: RDKafkaLogLevel, fac: &str, message: &str) {
        tracing::trace!(facility = fac, "librdkafka: {message}");
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        if code == Some(RDKafkaErrorCode::AllBrokersDown) {
            self.all_down
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(refused) = security_failure(code, reason)
            && let Ok(mut slot) = self.refused.lock()
        {
            slot.get_or_insert(refused);
        }
        if let Ok(mut errors) = self.errors.lock()
            && errors.len() < 8
            && !errors.iter().any(|e| e == reason)
        {
            errors.push(reason.to_owned());
        }
    }
}

impl ProducerContext for ProbeWatch {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

/// Whether librdkafka verifies the broker's certificate chain:
/// `enable.ssl.certificate.verification` (a librdkafka boolean: `true`,
/// `t`, `1` or `false`, `f`, `0`, any case; on by default). When it is on,
/// librdkafka has OpenSSL verify the peer (`SSL_VERIFY_PEER`) and refuse
/// the handshake of a certificate the CA does not sign (or, with
/// `ssl.endpoint.identification.algorithm = https`, one for another host),
/// so a connection it made was verified. Its `SSLVERIFY` debug line is no
/// evidence either way: it is not logged when OpenSSL completes the
/// handshake within its first `SSL_connect` (the broker's answer already
/// there when the client thread reads, as under load), and a report built
/// on it once said "NOT verified" of a verified broker.
fn certificate_verification_on(properties: &[(String, String)]) -> bool {
    properties
        .iter()
        .rev()
        .find(|(k, _)| k == "enable.ssl.certificate.verification")
        .is_none_or(|(_, v)| !matches!(v.trim().to_ascii_lowercase().as_str(), "false" | "f" | "0"))
}

/// Asks the brokers for metadata with the producer's own properties, in
/// short attempts until `timeout`, and reports how the connection was
/// secured. Gives up at once when the brokers refuse walrelay's credentials
/// or certificates ([`ProbeError::Refused`]) or every broker refused the
/// connection. Blocking.
pub fn probe_cluster(
    properties: &[(String, String)],
    timeout: Duration,
) -> Result<ProbeReport, ProbeError> {
    use std::sync::atomic::Ordering;
    let last = |key: &str| {
        properties
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.trim().to_ascii_lowercase())
    };
    let protocol = last("security.protocol").unwrap_or_else(|| "plaintext".to_owned());
    let mut cfg = ClientConfig::new();
    for (k, v) in properties {
        cfg.set(k, v);
    }
    cfg.set_log_level(RDKafkaLogLevel::Debug);
    let producer: BaseProducer<ProbeWatch> = cfg
        .create_with_context(ProbeWatch::default())
        .map_err(|e| {
            ProbeError::Unreachable(format!(
                "cannot create a Kafka client: {}",
                PropertyError::from_kafka(&e, properties)
            ))
        })?;
    let watch = producer.context().clone();
    let reasons = || {
        watch
            .errors
            .lock()
            .map(|e| e.join("; "))
            .unwrap_or_default()
    };
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let attempt = producer
            .client()
            .fetch_metadata(None, Duration::from_millis(500));
        // Serves the error and log callbacks: poll handles one event per
        // call unless given time, so give it some.
        producer.poll(Duration::from_millis(50));
        if let Ok(Some(refused)) = watch.refused.lock().map(|r| r.clone()) {
            return Err(ProbeError::Refused(refused));
        }
        let last_error = match attempt {
            Ok(metadata) => {
                return Ok(ProbeReport {
                    brokers: metadata.brokers().len(),
                    sasl_mechanism: protocol
                        .starts_with("sasl")
                        .then(|| last("sasl.mechanisms").or_else(|| last("sasl.mechanism")))
                        .flatten()
                        .map(|m| m.to_ascii_uppercase()),
                    // The metadata came over a TLS handshake that
                    // succeeded, with OpenSSL told to verify the peer.
                    certificate_verified: protocol.ends_with("ssl")
                        && certificate_verification_on(properties),
                    host_name_checked: last("ssl.endpoint.identification.algorithm")
                        .is_none_or(|v| v == "https"),
                    protocol,
                });
            }
            Err(e) => e,
        };
        if watch.all_down.load(Ordering::Relaxed) {
            return Err(ProbeError::Unreachable(format!(
                "no broker accepted a connection: {}",
                reasons()
            )));
        }
        if std::time::Instant::now() >= deadline {
            let seen = reasons();
            return Err(ProbeError::Unreachable(format!(
                "Kafka did not answer a metadata request within {timeout:?}: {last_error}{}{seen}",
                if seen.is_empty() { "" } else { "; " }
            )));
        }
    }
}

/// The TLS version and cipher a handshake with the first bootstrap broker
/// negotiates under the producer's TLS settings (`ssl.ca.location` or
/// `ssl.ca.pem`, client certificate and key, certificate and host-name
/// verification), e.g. `TLSv1.3 TLS_AES_256_GCM_SHA384`. librdkafka does not
/// tell which version it negotiated, so `check` asks OpenSSL (the library
/// librdkafka uses, with the same defaults) on a connection of its own that
/// it closes after the handshake. Blocking, at most `timeout`; `Err` says why
/// nothing could be learned (for the report, never a failure by itself).
pub fn tls_handshake(properties: &[(String, String)], timeout: Duration) -> Result<String, String> {
    use openssl::pkey::PKey;
    use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
    use openssl::x509::X509;
    let last = |key: &str| {
        properties
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.trim().to_owned())
    };
    let first = last("bootstrap.servers")
        .and_then(|b| b.split(',').next().map(|s| s.trim().to_owned()))
        .ok_or("no bootstrap.servers")?;
    let first = first
        .rsplit_once("://")
        .map_or(first.as_str(), |(_, hp)| hp)
        .to_owned();
    let (host, _) = first
        .rsplit_once(':')
        .ok_or_else(|| format!("{first:?} has no port"))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let tls = |what: &str, e: openssl::error::ErrorStack| format!("{what}: {e}");
    let mut builder =
        SslConnector::builder(SslMethod::tls_client()).map_err(|e| tls("TLS context", e))?;
    if let Some(pem) = last("ssl.ca.pem") {
        for cert in X509::stack_from_pem(pem.as_bytes()).map_err(|e| tls("ssl.ca.pem", e))? {
            builder
                .cert_store_mut()
                .add_cert(cert)
                .map_err(|e| tls("ssl.ca.pem", e))?;
        }
    } else if let Some(path) = last("ssl.ca.location") {
        builder
            .set_ca_file(&path)
            .map_err(|e| tls("ssl.ca.location", e))?;
    }
    if let Some(pem) = last("ssl.certificate.pem") {
        let cert = X509::from_pem(pem.as_bytes()).map_err(|e| tls("ssl.certificate.pem", e))?;
        builder
            .set_certificate(&cert)
            .map_err(|e| tls("ssl.certificate.pem", e))?;
    } else if let Some(path) = last("ssl.certificate.location") {
        builder
            .set_certificate_chain_file(&path)
            .map_err(|e| tls("ssl.certificate.location", e))?;
    }
    let key_pem = match (last("ssl.key.pem"), last("ssl.key.location")) {
        (Some(pem), _) => Some(("ssl.key.pem", pem.into_bytes())),
        (None, Some(path)) => Some((
            "ssl.key.location",
            std::fs::read(&path).map_err(|e| format!("ssl.key.location: {e}"))?,
        )),
        (None, None) => None,
    };
    if let Some((key_name, pem)) = key_pem {
        let key = match last("ssl.key.password") {
            Some(password) => PKey::private_key_from_pem_passphrase(&pem, password.as_bytes()),
            None => PKey::private_key_from_pem(&pem),
        }
        .map_err(|e| tls(key_name, e))?;
        builder
            .set_private_key(&key)
            .map_err(|e| tls(key_name, e))?;
    }
    let verify = certificate_verification_on(properties);
    builder.set_verify(if verify {
        SslVerifyMode::PEER
    } else {
        SslVerifyMode::NONE
    });
    let connector = builder.build();
    let mut configure = connector
        .configure()
        .map_err(|e| tls("TLS connection", e))?;
    configure.set_verify_hostname(
        verify
            && last("ssl.endpoint.identification.algorithm")
                .is_none_or(|v| v.eq_ignore_ascii_case("https")),
    );
    let address = std::net::ToSocketAddrs::to_socket_addrs(&first)
        .map_err(|e| format!("{first}: {e}"))?
        .next()
        .ok_or_else(|| format!("{first} resolves to no address"))?;
    let tcp = std::net::TcpStream::connect_timeout(&address, timeout)
        .map_err(|e| format!("{first}: {e}"))?;
    tcp.set_read_timeout(Some(timeout))
        .and_then(|()| tcp.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("{first}: {e}"))?;
    let stream = configure
        .connect(&host, tcp)
        .map_err(|e| format!("TLS handshake with {first}: {e}"))?;
    let ssl = stream.ssl();
    Ok(match ssl.current_cipher() {
        Some(cipher) => format!("{} {}", ssl.version_str(), cipher.name()),
        None => ssl.version_str().to_owned(),
    })
}

/// Whether the cluster answers a metadata request from a *fresh* client
/// with these properties (blocking, at most `timeout`). Tells a broker
/// that is away from a producer that is stuck although the broker is
/// back (librdkafka 2.12 can keep a partition without a leader for good
/// after a metadata update with leader -1: confluentinc/librdkafka#5430).
pub fn cluster_answers(properties: &[(String, String)], timeout: Duration) -> bool {
    let mut cfg = ClientConfig::new();
    for (k, v) in properties {
        cfg.set(k, v);
    }
    cfg.set_log_level(RDKafkaLogLevel::Emerg);
    let Ok(probe) = cfg.create::<BaseProducer>() else {
        return false;
    };
    probe.client().fetch_metadata(None, timeout).is_ok_and(|m| {
        !m.brokers().is_empty()
            && m.topics()
                .iter()
                .flat_map(|t| t.partitions())
                .all(|p| p.leader() >= 0)
    })
}

/// What the brokers say about a topic that walrelay writes to
/// ([`describe_topic`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicState {
    /// The topic exists with `partitions`; `max_message_bytes` is its
    /// `max.message.bytes` when the client may read its configuration.
    Exists {
        partitions: usize,
        max_message_bytes: Option<String>,
    },
    /// It does not exist; `auto_create` is the broker's
    /// `auto.create.topics.enable` (`None` when it could not be read).
    Missing { auto_create: Option<bool> },
    /// The client may not describe it (an ACL): the error code's name.
    Denied(String),
}

/// Describes `topic` without creating it: a metadata request that does
/// not auto-create (needs the DESCRIBE ACL, which WRITE implies), then,
/// where allowed, DescribeConfigs for the topic's `max.message.bytes` or,
/// when it is missing, a broker's `auto.create.topics.enable`. Only
/// client properties of `properties` are used.
pub async fn describe_topic(
    properties: &[(String, String)],
    topic: &str,
    timeout: Duration,
) -> Result<TopicState, SinkError> {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let mut cfg = ClientConfig::new();
    for (k, v) in properties {
        if k == "bootstrap.servers"
            || k == "client.id"
            || k.starts_with("security.")
            || k.starts_with("ssl.")
            || k.starts_with("sasl.")
            || k == "socket.timeout.ms"
            || k == "broker.address.family"
        {
            cfg.set(k, v);
        }
    }
    cfg.set_log_level(RDKafkaLogLevel::Emerg);
    let fail = |message: String| SinkError {
        kind: SinkErrorKind::Definite,
        message,
        code: None,
    };
    let mut meta_cfg = cfg.clone();
    meta_cfg.set("allow.auto.create.topics", "false");
    let name = topic.to_owned();
    let (topic_error, partitions, broker) = tokio::task::spawn_blocking(move || {
        let client: BaseConsumer = meta_cfg.create()?;
        let metadata = client.fetch_metadata(Some(&name), timeout)?;
        let broker = metadata.brokers().first().map(|b| b.id());
        let found = metadata.topics().iter().find(|t| t.name() == name);
        Ok::<_, KafkaError>((
            found.and_then(|t| t.error()),
            found.map_or(0, |t| t.partitions().len()),
            broker,
        ))
    })
    .await
    .map_err(|e| fail(e.to_string()))?
    .map_err(|e| fail(format!("reading the metadata of topic {topic:?}: {e}")))?;
    let admin: AdminClient<DefaultClientContext> = cfg.create().map_err(|e| fail(e.to_string()))?;
    let opts = AdminOptions::new().request_timeout(Some(timeout));
    match topic_error.map(RDKafkaErrorCode::from) {
        None => Ok(TopicState::Exists {
            partitions,
            max_message_bytes: config_value(
                &admin,
                &opts,
                ResourceSpecifier::Topic(topic),
                "max.message.bytes",
            )
            .await,
        }),
        Some(RDKafkaErrorCode::UnknownTopicOrPartition) => {
            let auto_create = match broker {
                Some(id) => config_value(
                    &admin,
                    &opts,
                    ResourceSpecifier::Broker(id),
                    "auto.create.topics.enable",
                )
                .await
                .map(|v| v == "true"),
                None => None,
            };
            Ok(TopicState::Missing { auto_create })
        }
        Some(
            code @ (RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed),
        ) => Ok(TopicState::Denied(format!("{code:?}"))),
        Some(code) => Err(fail(format!(
            "reading the metadata of topic {topic:?}: {code}"
        ))),
    }
}

/// One configuration value of `resource`; `None` when it cannot be read.
async fn config_value(
    admin: &rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext>,
    opts: &rdkafka::admin::AdminOptions,
    resource: rdkafka::admin::ResourceSpecifier<'_>,
    key: &str,
) -> Option<String> {
    let results = admin.describe_configs(&[resource], opts).await.ok()?;
    match results.into_iter().next() {
        Some(Ok(r)) => r.get(key).and_then(|e| e.value.clone()),
        _ => None,
    }
}

/// `check` with `exactly_once`: whether the cluster lets this principal
/// use Kafka transactions, tried with `transactional_id` (not the
/// connector's own: registering that would fence the running instance).
/// Registers the id (`init_transactions`, which needs WRITE on the
/// `TransactionalId` and a working transaction coordinator) and aborts
/// nothing: no transaction is begun.
pub fn probe_transactions(
    properties: &[(String, String)],
    transactional_id: &str,
    timeout: Duration,
) -> Result<(), SinkError> {
    let mut cfg = ClientConfig::new();
    for (k, v) in properties {
        cfg.set(k, v);
    }
    cfg.set("transactional.id", transactional_id);
    cfg.set_log_level(RDKafkaLogLevel::Emerg);
    let producer: BaseProducer = cfg.create().map_err(|e| SinkError::from_kafka(&e))?;
    producer
        .init_transactions(timeout)
        .map_err(|e| SinkError::transaction(&e))
}

/// Sends what lingers in `producer` at once and waits (yielding to the
/// runtime, in 1 ms steps) until it holds no record that Kafka has not
/// acknowledged or failed and no undelivered report; `false` if `deadline`
/// comes first. librdkafka's flush with no wait only sends and checks, it
/// never blocks the async thread.
async fn drain<C: ProducerContext>(
    producer: &BaseProducer<C>,
    deadline: tokio::time::Instant,
) -> bool {
    loop {
        let _ = producer.flush(Duration::ZERO);
        if producer.in_flight_count() == 0 {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_outage() -> Arc<OutageLog> {
        Arc::new(OutageLog::new("Kafka", Duration::ZERO))
    }

    fn props(extra: &[(&str, &str)]) -> Vec<(String, String)> {
        [
            ("bootstrap.servers", "127.0.0.1:1"),
            ("acks", "all"),
            ("enable.idempotence", "true"),
        ]
        .iter()
        .chain(extra)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// Every codec the config accepts is compiled into librdkafka.
    #[test]
    fn every_configurable_codec_is_built_in() {
        for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
            let created =
                KafkaSink::<()>::new(&props(&[("compression.type", codec)]), test_outage());
            assert!(created.is_ok(), "{codec}: {:?}", created.err());
        }
    }

    /// TLS and SASL/SCRAM to the brokers need librdkafka built with OpenSSL.
    #[test]
    fn tls_and_sasl_scram_are_built_in() {
        let created = KafkaSink::<()>::new(
            &props(&[
                ("security.protocol", "sasl_ssl"),
                ("sasl.mechanisms", "SCRAM-SHA-512"),
                ("sasl.username", "u"),
                ("sasl.password", "p"),
            ]),
            test_outage(),
        );
        assert!(created.is_ok(), "{:?}", created.err());
    }

    /// librdkafka's errors repeat the value of a property it refuses; a
    /// misspelt secret property is not known to be secret, so the sink's
    /// error names the property only.
    #[test]
    fn a_refused_property_is_named_without_its_value() {
        for (key, value) in [
            ("sasl.pasword", "hunter2-Zq9"),
            ("SASL.Password", "hunter2-Zq9"),
            ("sasl.password ", "hunter2-Zq9"),
            ("security.protocol", "hunter2-Zq9"),
            ("linger.ms", "hunter2-Zq9"),
        ] {
            let Err(error) = KafkaSink::<()>::new(&props(&[(key, value)]), test_outage()) else {
                panic!("{key:?} accepted")
            };
            assert_eq!(error.kind, SinkErrorKind::Definite);
            assert!(!error.message.contains(value), "{key}: {error}");
            assert!(
                error.message.contains(&format!("{key:?}")),
                "{key}: {error}"
            );
            let checked = check_producer_properties(&props(&[(key, value)])).unwrap_err();
            assert_eq!(checked.property.as_deref(), Some(key));
            assert!(!checked.message.contains(value), "{key}: {checked}");
        }
    }

    /// A secret that appears in a message about several properties is redacted.
    #[test]
    fn secrets_are_redacted_from_messages_about_several_properties() {
        let e = KafkaError::ClientCreation("ssl.key.password hunter2-Zq9 is wrong".into());
        let error = PropertyError::from_kafka(&e, &props(&[("ssl.key.password", "hunter2-Zq9")]));
        assert!(!error.message.contains("hunter2"), "{error}");
        assert!(error.message.contains("[REDACTED]"), "{error}");
    }

    fn record(i: u64) -> Record {
        Record::new(
            "t".into(),
            Some(bytes::Bytes::from(format!("k{i}"))),
            Some(bytes::Bytes::from(format!("v{i}"))),
            Vec::new(),
            None,
        )
    }

    /// Sends records 0..n (one request each, up to `in_flight` at once) to a
    /// mock broker whose first produce request fails with "not leader", and
    /// returns the acks by record number plus the values in the log.
    async fn produce_through_a_failed_first_request(
        in_flight: &str,
        n: u64,
    ) -> (Vec<(u64, Result<(), SinkError>)>, Vec<String>) {
        use rdkafka::mocking::MockCluster;
        use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("t", 1, 1).unwrap();
        mock.request_errors(
            RDKafkaApiKey::Produce,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION],
        );
        let mut properties = props(&[
            ("batch.num.messages", "1"),
            ("linger.ms", "0"),
            ("max.in.flight", in_flight),
        ]);
        properties[0].1 = mock.bootstrap_servers();
        let (sink, mut acks) = KafkaSink::new(&properties, test_outage()).unwrap();
        for i in 0..n {
            sink.send(&record(i), i).await.unwrap();
        }
        let mut got = Vec::new();
        while got.len() < n as usize {
            let ack = tokio::time::timeout(Duration::from_secs(30), acks.recv())
                .await
                .expect("every record is acknowledged")
                .expect("channel open");
            got.push(match ack {
                Ack::Delivered(i) => (i, Ok(())),
                Ack::Failed { token, error, .. } => (token, Err(error)),
                other => panic!("unexpected {other:?}"),
            });
        }
        got.sort_by_key(|(i, _)| *i);

        (got, read_back(&mock))
    }

    /// Every value in partition 0 of the mock cluster's topic `t`, in order.
    fn read_back<C: rdkafka::ClientContext>(
        mock: &rdkafka::mocking::MockCluster<'_, C>,
    ) -> Vec<String> {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", mock.bootstrap_servers())
            .set("group.id", "read-back")
            .create()
            .unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset("t", 0, rdkafka::Offset::Beginning)
            .unwrap();
        consumer.assign(&tpl).unwrap();
        let (_, high) = consumer
            .fetch_watermarks("t", 0, Duration::from_secs(10))
            .unwrap();
        let mut log = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while (log.len() as i64) < high && std::time::Instant::now() < deadline {
            use rdkafka::Message;
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                log.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
            }
        }
        log
    }

    /// librdkafka's implicit ack: request 1 fails "not leader", requests 2..
    /// (already in flight) succeed, and record 0 is reported delivered
    /// although it was never written. The sink must not call it delivered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_success_report_without_an_offset_is_not_a_delivery() {
        let (acks, log) = produce_through_a_failed_first_request("5", 20).await;
        assert!(
            !log.contains(&"v0".to_owned()),
            "the fault was injected as intended: record 0 is not in the log {log:?}"
        );
        let (_, first) = &acks[0];
        let error = first
            .as_ref()
            .expect_err("record 0 must not count as delivered");
        assert_eq!(error.kind, SinkErrorKind::Transient, "{error}");
        assert!(error.message.contains("without an offset"), "{error}");
        for (i, ack) in &acks[1..] {
            assert!(ack.is_ok(), "record {i}: {ack:?}");
            assert!(
                log.contains(&format!("v{i}")),
                "record {i} acked but not in {log:?}"
            );
        }
    }

    /// With one request in flight (walrelay's default) the failed request is
    /// retried before anything after it is sent: every record is written,
    /// in order, and acknowledged with its offset.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_request_in_flight_leaves_no_gap_to_infer() {
        let (acks, log) = produce_through_a_failed_first_request("1", 20).await;
        for (i, ack) in &acks {
            assert!(ack.is_ok(), "record {i}: {ack:?}");
        }
        let expected: Vec<String> = (0..20).map(|i| format!("v{i}")).collect();
        assert_eq!(log, expected);
    }

    #[test]
    fn definite_and_transient_errors() {
        let e = |c| SinkError::from_kafka(&KafkaError::MessageProduction(c));
        assert_eq!(
            e(RDKafkaErrorCode::MessageSizeTooLarge).kind,
            SinkErrorKind::Definite
        );
        assert!(
            e(RDKafkaErrorCode::MessageSizeTooLarge)
                .message
                .contains("message.max.bytes")
        );
        assert_eq!(
            e(RDKafkaErrorCode::TopicAuthorizationFailed).kind,
            SinkErrorKind::Definite
        );
        assert_eq!(
            e(RDKafkaErrorCode::BrokerTransportFailure).kind,
            SinkErrorKind::Transient
        );
        assert_eq!(
            e(RDKafkaErrorCode::MessageTimedOut).kind,
            SinkErrorKind::Transient
        );
        // A fatal producer error ends this producer, not the connector: the
        // next session's fresh producer is librdkafka's documented recovery.
        assert_eq!(e(RDKafkaErrorCode::Fatal).kind, SinkErrorKind::Transient);
    }

    /// Issue 38, item 6a: a batch the broker refuses to validate (a record
    /// without a key on a compacted topic) is refused again on every retry:
    /// definite, naming the topic, the keyless kinds of record and the fix.
    #[test]
    fn an_invalid_record_is_definite_and_names_compaction() {
        let e = SinkError::for_topic(
            &KafkaError::MessageProduction(RDKafkaErrorCode::InvalidRecord),
            Some("app.public.ledger"),
        );
        assert_eq!(e.kind, SinkErrorKind::Definite);
        for needle in [
            "app.public.ledger",
            "cleanup.policy=compact",
            "without a key",
            "TRUNCATE",
            "cleanup.policy=delete",
        ] {
            assert!(e.message.contains(needle), "{needle:?} in {e}");
        }
    }

    /// librdkafka's fatal error (e.g. the idempotent producer cannot keep its
    /// guarantees) is reported as transient: the session restarts with a
    /// fresh producer instead of the connector exiting.
    #[test]
    fn a_fatal_producer_error_asks_for_a_fresh_producer() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let context = AckContext::<()> {
            acks: tx,
            outage: test_outage(),
        };
        context.error(
            KafkaError::Global(RDKafkaErrorCode::Fatal),
            "unable to satisfy gap-less guarantee",
        );
        match rx.try_recv() {
            Ok(Ack::Fatal(e)) => {
                assert_eq!(e.kind, SinkErrorKind::Transient, "{e}");
                assert!(e.message.contains("gap-less"), "{e}");
            }
            other => panic!("expected a fatal report, got {other:?}"),
        }
    }

    /// librdkafka's reports of refused credentials and certificates (texts
    /// as librdkafka 2.12 with OpenSSL 3 writes them) are definite; a
    /// refused TCP connection or a broker going away is not.
    #[test]
    fn refused_credentials_and_certificates_are_definite() {
        use RDKafkaErrorCode::*;
        for (code, reason, says) in [
            (
                Authentication,
                "sasl_ssl://b:9094/bootstrap: SASL authentication error: Authentication failed \
                 during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
                "kafka.sasl_password",
            ),
            (
                SSL,
                "ssl://b:9094/bootstrap: SSL handshake failed: error:0A000086:SSL \
                 routines::certificate verify failed: broker certificate could not be verified",
                "kafka.ssl_ca",
            ),
            (
                BrokerTransportFailure,
                "ssl://b:9095/bootstrap: Receive failed: error:0A000412:SSL routines::sslv3 \
                 alert bad certificate: SSL alert number 42",
                "kafka.ssl_certificate",
            ),
            (
                BrokerTransportFailure,
                "ssl://b:9095/bootstrap: Receive failed: error:0A000416:SSL routines::sslv3 \
                 alert certificate unknown: SSL alert number 46",
                "kafka.ssl_certificate",
            ),
        ] {
            let e = security_failure(Some(code), reason).expect(reason);
            assert_eq!(e.kind, SinkErrorKind::Definite, "{e}");
            assert!(e.message.contains(says), "{e}");
        }
        for (code, reason) in [
            (
                BrokerTransportFailure,
                "b:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused",
            ),
            (
                BrokerTransportFailure,
                "ssl://b:9094/1: Disconnected (after 1200ms in state UP)",
            ),
            (AllBrokersDown, "1/1 brokers are down"),
        ] {
            assert!(security_failure(Some(code), reason).is_none(), "{reason}");
        }
    }

    /// The producer itself turns such a report into a definite fatal ack,
    /// so `run` stops instead of letting librdkafka retry forever.
    #[test]
    fn the_producer_reports_a_refused_certificate_as_definite() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let context = AckContext::<()> {
            acks: tx,
            outage: test_outage(),
        };
        context.error(
            KafkaError::Global(RDKafkaErrorCode::SSL),
            "ssl://b:9094/bootstrap: SSL handshake failed: certificate verify failed",
        );
        match rx.try_recv() {
            Ok(Ack::Fatal(e)) => assert_eq!(e.kind, SinkErrorKind::Definite, "{e}"),
            other => panic!("expected a definite fatal report, got {other:?}"),
        }
    }

    /// Verification is on unless `enable.ssl.certificate.verification` is
    /// one of librdkafka's false spellings; the last setting counts.
    #[test]
    fn certificate_verification_is_on_unless_turned_off() {
        let on = |pairs: &[(&str, &str)]| certificate_verification_on(&props(pairs));
        assert!(on(&[]));
        for off in ["false", "FALSE", "f", "F", "0", " false "] {
            assert!(
                !on(&[("enable.ssl.certificate.verification", off)]),
                "{off:?}"
            );
        }
        for value in ["true", "True", "t", "1"] {
            assert!(
                on(&[("enable.ssl.certificate.verification", value)]),
                "{value:?}"
            );
        }
        assert!(on(&[
            ("enable.ssl.certificate.verification", "false"),
            ("enable.ssl.certificate.verification", "true"),
        ]));
    }

    /// The stuck-producer probe: a fresh client sees the cluster answer, or
    /// not when its only broker is down.
    #[test]
    fn the_cluster_probe_tells_a_reachable_cluster_from_a_down_one() {
        use rdkafka::mocking::MockCluster;
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("t", 2, 1).unwrap();
        let mut properties = props(&[]);
        properties[0].1 = mock.bootstrap_servers();
        assert!(cluster_answers(&properties, Duration::from_secs(5)));
        mock.broker_down(1).unwrap();
        assert!(!cluster_answers(&properties, Duration::from_millis(500)));
    }

    /// Records still queued when the caller purges (here: the only broker is
    /// down, so nothing leaves the queue) each come back once, as a failure,
    /// and none of them is ever written.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn purged_records_each_get_one_failure_report() {
        use rdkafka::mocking::MockCluster;
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("t", 1, 1).unwrap();
        mock.broker_down(1).unwrap();
        let mut properties = props(&[("linger.ms", "0")]);
        properties[0].1 = mock.bootstrap_servers();
        let (sink, mut acks) = KafkaSink::new(&properties, test_outage()).unwrap();
        for i in 0..5 {
            sink.send(&record(i), i).await.unwrap();
        }
        sink.purge_queued();
        let mut failed = Vec::new();
        while failed.len() < 5 {
            let ack = tokio::time::timeout(Duration::from_secs(10), acks.recv())
                .await
                .expect("a report for every purged record")
                .expect("channel open");
            match ack {
                Ack::Failed { token, .. } => failed.push(token),
                other => panic!("a purged record must not be delivered: {other:?}"),
            }
        }
        failed.sort_unstable();
        assert_eq!(failed, vec![0, 1, 2, 3, 4]);
    }
    /// Records sent through both producers, switching between them every
    /// 30 records, are written in the order they were sent: a switch waits
    /// until the producer in use holds nothing unacknowledged. (Without that
    /// wait the second producer's 300 ms linger lets the first producer's
    /// later records overtake.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn switching_producers_keeps_the_order_of_a_partition() {
        use rdkafka::mocking::MockCluster;
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("t", 1, 1).unwrap();
        let mut properties = props(&[("linger.ms", "0")]);
        properties[0].1 = mock.bootstrap_servers();
        let (sink, mut acks) = KafkaSink::with_bulk(&properties, "300", test_outage()).unwrap();
        assert!(sink.has_bulk() && !sink.bulk_active());
        let n = 240;
        for i in 0..n {
            sink.send(&record(i), i).await.unwrap();
            if i % 30 == 29 {
                let bulk = !sink.bulk_active();
                assert!(
                    sink.use_bulk(bulk, Duration::from_secs(20)).await,
                    "switch after {i}"
                );
                assert_eq!(sink.bulk_active(), bulk);
            }
        }
        for _ in 0..n {
            let ack = tokio::time::timeout(Duration::from_secs(30), acks.recv())
                .await
                .expect("every record is acknowledged")
                .expect("channel open");
            assert!(matches!(ack, Ack::Delivered(_)), "{ack:?}");
        }
        let log = read_back(&mock);
        let sent: Vec<String> = (0..n).map(|i| format!("v{i}")).collect();
        assert_eq!(log, sent);
    }

    /// A switch cannot drain while the broker is down: it gives up after its
    /// wait, and records keep going to the producer in use.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_switch_that_cannot_drain_gives_up_after_its_wait() {
        use rdkafka::mocking::MockCluster;
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("t", 1, 1).unwrap();
        mock.broker_down(1).unwrap();
        let mut properties = props(&[("linger.ms", "0")]);
        properties[0].1 = mock.bootstrap_servers();
        let (sink, _acks) = KafkaSink::with_bulk(&properties, "50", test_outage()).unwrap();
        sink.send(&record(0), 0).await.unwrap();
        let began = std::time::Instant::now();
        assert!(!sink.use_bulk(true, Duration::from_millis(300)).await);
        assert!(began.elapsed() >= Duration::from_millis(300));
        assert!(!sink.bulk_active());
        // Without a second producer, only the first can be asked for.
        let (single, _acks) = KafkaSink::<u64>::new(&properties, test_outage()).unwrap();
        assert!(!single.use_bulk(true, Duration::ZERO).await);
        assert!(single.use_bulk(false, Duration::ZERO).await);
    }
}
