//! `[kafka]`: brokers, delivery (`at_least_once`/`exactly_once` and its
//! transaction limits), batching and in-flight bounds, security (TLS,
//! SASL) and the raw `[kafka.librdkafka]` map; which properties are
//! secrets (never shown by `Debug`).
//!
//! Field documentation here is the source for `docs/configuration.md`;
//! keep the two in step.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use secrecy::SecretString;
use serde::Deserialize;

use super::defaults;
use crate::config::units;

/// `[kafka] delivery`: what a consumer sees after a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Every event at least once; a restart may re-send a tail.
    #[default]
    AtLeastOnce,
    /// Every event once, for `read_committed` consumers (Kafka transactions).
    ExactlyOnce,
}

/// Compression codec for produced records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// No compression.
    None,
    /// gzip.
    Gzip,
    /// Snappy.
    Snappy,
    /// LZ4 (default: cheap on CPU, good ratio for JSON).
    #[default]
    Lz4,
    /// Zstandard.
    Zstd,
}

impl Compression {
    /// The librdkafka `compression.type` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// `kafka.security_protocol`: how walrelay talks to the brokers (librdkafka
/// `security.protocol`). Read in any case, as librdkafka reads it
/// (`SASL_SSL`, the spelling of its documentation and of Java clients).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    /// No TLS, no authentication.
    Plaintext,
    /// TLS; with `ssl_certificate`/`ssl_key`, mutual TLS.
    Ssl,
    /// SASL authentication without TLS (credentials cross the network in
    /// the clear with PLAIN).
    SaslPlaintext,
    /// SASL authentication over TLS.
    SaslSsl,
}

impl<'de> Deserialize<'de> for SecurityProtocol {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        const NAMES: &[&str] = &["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"];
        let text = String::deserialize(d)?;
        match text.to_ascii_lowercase().as_str() {
            "plaintext" => Ok(SecurityProtocol::Plaintext),
            "ssl" => Ok(SecurityProtocol::Ssl),
            "sasl_plaintext" => Ok(SecurityProtocol::SaslPlaintext),
            "sasl_ssl" => Ok(SecurityProtocol::SaslSsl),
            _ => Err(serde::de::Error::unknown_variant(&text, NAMES)),
        }
    }
}

impl SecurityProtocol {
    /// The name as librdkafka reads it (the file may use any case).
    pub fn as_str(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "plaintext",
            SecurityProtocol::Ssl => "ssl",
            SecurityProtocol::SaslPlaintext => "sasl_plaintext",
            SecurityProtocol::SaslSsl => "sasl_ssl",
        }
    }

    /// Whether connections use TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether connections authenticate with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// `kafka.sasl_mechanism` (librdkafka `sasl.mechanisms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum SaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    /// The name as written in the file and as librdkafka reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// The typed `[kafka]` security keys and the librdkafka properties each one
/// sets (with the aliases librdkafka accepts for the same setting): a raw
/// `[kafka.librdkafka]` entry for any of these properties conflicts with the
/// typed key when both are given.
pub const SECURITY_KEYS: &[(&str, &[&str])] = &[
    ("kafka.security_protocol", &["security.protocol"]),
    (
        "kafka.sasl_mechanism",
        &["sasl.mechanisms", "sasl.mechanism"],
    ),
    ("kafka.sasl_username", &["sasl.username"]),
    ("kafka.sasl_password", &["sasl.password"]),
    ("kafka.ssl_ca", &["ssl.ca.location", "ssl.ca.pem"]),
    (
        "kafka.ssl_certificate",
        &["ssl.certificate.location", "ssl.certificate.pem"],
    ),
    ("kafka.ssl_key", &["ssl.key.location", "ssl.key.pem"]),
    ("kafka.ssl_key_password", &["ssl.key.password"]),
    (
        "kafka.ssl_verify_hostname",
        &["ssl.endpoint.identification.algorithm"],
    ),
];

/// `[kafka]`: the destination cluster and the producer.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap brokers, comma separated (`host:port,host:port`). Required.
    pub brokers: String,
    /// Compression codec.
    #[serde(default)]
    pub compression: Compression,
    /// How long the producer waits to fill a batch (librdkafka `linger.ms`).
    #[serde(default = "defaults::linger", deserialize_with = "units::duration")]
    pub linger: Duration,
    /// The linger of the second producer used while walrelay is behind
    /// (see [`KafkaConfig::bulk_linger_ms`]); unset = the larger of
    /// `linger` and 20 ms.
    #[serde(default, deserialize_with = "units::optional_duration")]
    pub linger_while_behind: Option<Duration>,
    /// Records produced but not yet acknowledged, at most. When reached,
    /// walrelay stops reading from PostgreSQL until acknowledgements arrive.
    #[serde(default = "defaults::max_in_flight_records")]
    pub max_in_flight_records: usize,
    /// Bytes (keys + values + headers) produced but not yet acknowledged, at most.
    #[serde(
        default = "defaults::max_in_flight_bytes",
        deserialize_with = "units::byte_size"
    )]
    pub max_in_flight_bytes: u64,
    /// On shutdown, how long to wait for in-flight records to be acknowledged.
    #[serde(
        default = "defaults::shutdown_flush_timeout",
        deserialize_with = "units::duration"
    )]
    pub shutdown_flush_timeout: Duration,
    /// Compacted topic holding the offset store.
    #[serde(default = "defaults::offsets_topic")]
    pub offsets_topic: String,
    /// `at_least_once` (default): a restart may re-send a tail of events,
    /// which consumers de-duplicate by id. `exactly_once`: records go to
    /// Kafka in transactions that also hold the offset-store record of
    /// their position, so consumers reading with
    /// `isolation.level=read_committed` see every event once.
    #[serde(default)]
    pub delivery: Delivery,
    /// `exactly_once`: records per Kafka transaction, at most (a transaction
    /// is committed at the first PostgreSQL commit past any bound; one
    /// PostgreSQL transaction is never split).
    #[serde(default = "defaults::transaction_max_records")]
    pub transaction_max_records: usize,
    /// `exactly_once`: bytes per Kafka transaction, at most (as above).
    #[serde(
        default = "defaults::transaction_max_bytes",
        deserialize_with = "units::byte_size"
    )]
    pub transaction_max_bytes: u64,
    /// `exactly_once`: how long a Kafka transaction stays open, at most
    /// (as above): the latency it adds.
    #[serde(
        default = "defaults::transaction_max_time",
        deserialize_with = "units::duration"
    )]
    pub transaction_max_time: Duration,
    /// `exactly_once`: librdkafka's `transaction.timeout.ms`: the broker
    /// aborts a transaction open longer (capped by the broker's
    /// `transaction.max.timeout.ms`, 15 minutes by default). One PostgreSQL
    /// transaction, and the initial snapshot, must reach Kafka within it.
    #[serde(
        default = "defaults::transaction_timeout",
        deserialize_with = "units::duration"
    )]
    pub transaction_timeout: Duration,
    /// How to talk to the brokers: `plaintext`, `ssl`, `sasl_plaintext` or
    /// `sasl_ssl`. Unset: librdkafka's default (plaintext) unless
    /// `[kafka.librdkafka]` sets `security.protocol`.
    #[serde(default)]
    pub security_protocol: Option<SecurityProtocol>,
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`; required with a `sasl_*`
    /// protocol.
    #[serde(default)]
    pub sasl_mechanism: Option<SaslMechanism>,
    /// SASL user name; `${ENV}` is interpolated.
    #[serde(default)]
    pub sasl_username: Option<String>,
    /// SASL password; `${ENV}` is interpolated. Never printed.
    #[serde(default, deserialize_with = "units::secret")]
    pub sasl_password: Option<SecretString>,
    /// PEM file of the CA certificate(s) that signed the brokers'
    /// certificates; the system trust store when unset.
    #[serde(default)]
    pub ssl_ca: Option<PathBuf>,
    /// PEM file of walrelay's client certificate (mutual TLS); with `ssl_key`.
    #[serde(default)]
    pub ssl_certificate: Option<PathBuf>,
    /// PEM file of the client certificate's private key; with `ssl_certificate`.
    #[serde(default)]
    pub ssl_key: Option<PathBuf>,
    /// Password of an encrypted `ssl_key`; `${ENV}` is interpolated. Never printed.
    #[serde(default, deserialize_with = "units::secret")]
    pub ssl_key_password: Option<SecretString>,
    /// Check that the broker's certificate names the host walrelay connected
    /// to (librdkafka `ssl.endpoint.identification.algorithm = https`).
    /// Default true; `false` only for brokers whose certificates name no
    /// usable host.
    #[serde(default)]
    pub ssl_verify_hostname: Option<bool>,
    /// Raw librdkafka producer properties, applied after walrelay's own.
    /// Properties that would weaken a delivery guarantee are rejected by validation.
    #[serde(default, deserialize_with = "units::properties")]
    pub librdkafka: BTreeMap<String, String>,
    /// `[kafka.schema_registry]`: where `avro` and `json_schema` records
    /// take their schema ids from. `None`: no registry (only the JSON
    /// formats).
    #[serde(default)]
    pub schema_registry: Option<super::SchemaRegistryConfig>,
}

impl KafkaConfig {
    /// The linger while walrelay is behind: `linger_while_behind`, or the
    /// larger of `linger` and 20 ms.
    pub fn linger_while_behind(&self) -> Duration {
        self.linger_while_behind
            .unwrap_or(self.linger.max(defaults::linger_while_behind()))
    }

    /// `linger.ms` of the second producer, the one records go to while
    /// walrelay is behind (`sink::kafka`'s `with_bulk`), or `None` when there
    /// is none: it lingers as long as the first, or the producer is
    /// transactional (one transactional id; transactions size the batches).
    pub fn bulk_linger_ms(&self) -> Option<String> {
        let behind = self.linger_while_behind();
        (behind > self.linger && self.delivery != crate::config::Delivery::ExactlyOnce)
            .then(|| millis(behind))
    }

    /// `brokers` with whitespace around each entry removed.
    pub fn bootstrap_servers(&self) -> String {
        self.brokers
            .split(',')
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A duration in milliseconds as librdkafka reads it (fractions allowed).
fn millis(d: Duration) -> String {
    let micros = d.as_micros();
    let (whole, frac) = (micros / 1000, micros % 1000);
    if frac == 0 {
        whole.to_string()
    } else {
        format!("{whole}.{frac:03}")
            .trim_end_matches('0')
            .to_owned()
    }
}

/// Whether a librdkafka property holds a secret (its value is never printed).
pub fn is_secret_property(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "secret", "passphrase", "private.key", "key.pem"]
        .iter()
        .any(|word| key.contains(word))
        || key == "sasl.oauthbearer.config"
}

impl fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Redacted<'a>(&'a BTreeMap<String, String>);
        impl fmt::Debug for Redacted<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map()
                    .entries(self.0.iter().map(|(k, v)| {
                        let v = if is_secret_property(k) {
                            "[REDACTED]"
                        } else {
                            v
                        };
                        (k, v)
                    }))
                    .finish()
            }
        }
        f.debug_struct("KafkaConfig")
            .field("brokers", &self.brokers)
            .field("compression", &self.compression)
            .field("linger", &self.linger)
            .field("linger_while_behind", &self.linger_while_behind)
            .field("max_in_flight_records", &self.max_in_flight_records)
            .field("max_in_flight_bytes", &self.max_in_flight_bytes)
            .field("shutdown_flush_timeout", &self.shutdown_flush_timeout)
            .field("offsets_topic", &self.offsets_topic)
            .field("delivery", &self.delivery)
            .field("transaction_max_records", &self.transaction_max_records)
            .field("transaction_max_bytes", &self.transaction_max_bytes)
            .field("transaction_max_time", &self.transaction_max_time)
            .field("transaction_timeout", &self.transaction_timeout)
            .field("security_protocol", &self.security_protocol)
            .field("sasl_mechanism", &self.sasl_mechanism)
            .field("sasl_username", &self.sasl_username)
            .field(
                "sasl_password",
                &self.sasl_password.as_ref().map(|_| "[REDACTED]"),
            )
            .field("ssl_ca", &self.ssl_ca)
            .field("ssl_certificate", &self.ssl_certificate)
            .field("ssl_key", &self.ssl_key)
            .field(
                "ssl_key_password",
                &self.ssl_key_password.as_ref().map(|_| "[REDACTED]"),
            )
            .field("ssl_verify_hostname", &self.ssl_verify_hostname)
            .field("librdkafka", &Redacted(&self.librdkafka))
            .field("schema_registry", &self.schema_registry)
            .finish()
    }
}
