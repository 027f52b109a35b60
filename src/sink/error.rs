//! Why a record or the producer failed, and whether retrying can help:
//! [`SinkError`] with its [`SinkErrorKind`].
//!
//! Invariants:
//! - Errors that retrying cannot fix (message too large, authorization,
//!   unknown topic with auto-create off, an invalid record on a compacted
//!   topic) are [`SinkErrorKind::Definite`]; the rest are transient, a
//!   fatal producer error included (the next session builds a fresh
//!   producer).
//! - **A refused credential is definite.** librdkafka reports a failed TLS
//!   handshake or SASL authentication only through its error callback and
//!   then retries forever; [`security_failure`] recognises those reports
//!   (SASL authentication errors by code; TLS by the OpenSSL texts
//!   "certificate verify failed" and the certificate alerts a broker sends
//!   when it refuses a client certificate).
//! - Messages name the configuration key to fix, never a secret.

use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::config::shorten;

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

    pub(crate) fn from_kafka(e: &KafkaError) -> SinkError {
        SinkError::for_topic(e, None)
    }

    /// As [`SinkError::from_kafka`], naming `topic` in the fix when known.
    pub(crate) fn for_topic(e: &KafkaError, topic: Option<&str>) -> SinkError {
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
    pub(crate) fn transaction(e: &KafkaError) -> SinkError {
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

#[cfg(test)]
mod tests;
