//! The typed configuration sections and their defaults.
//!
//! Field documentation here is the source for `docs/configuration.md`; keep
//! the two in step.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use super::error::quoted;
use super::producer;
use super::template::{TableRef, TopicTemplate};
use super::units;

/// `[connector]`: identity of this connector instance.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectorConfig {
    /// Identifies the connector in the offset-store key, logs and metrics.
    /// `[A-Za-z0-9._-]{1,64}`. Required.
    pub name: String,
}

/// `[postgres]`: the source database and its replication slot.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    /// Host name, IP address, or a Unix socket directory (starts with `/`).
    #[serde(default = "defaults::host")]
    pub host: String,
    /// TCP port (also names the socket file `.s.PGSQL.<port>` in a socket directory).
    #[serde(default = "defaults::pg_port")]
    pub port: u16,
    /// Role to connect as; needs the REPLICATION attribute.
    #[serde(default = "defaults::user")]
    pub user: String,
    /// Password, if the server asks for one. Never printed.
    #[serde(default, deserialize_with = "units::secret")]
    pub password: Option<SecretString>,
    /// Database holding the outbox tables. Required.
    pub database: String,
    /// Logical replication slot name.
    #[serde(default = "defaults::slot")]
    pub slot: String,
    /// Publication name.
    #[serde(default = "defaults::publication")]
    pub publication: String,
    /// Create the slot at start if it does not exist.
    #[serde(default = "defaults::yes")]
    pub create_slot: bool,
    /// PostgreSQL 17+: create the slot as a failover slot (and make an
    /// existing one so), which standbys with `sync_replication_slots` keep a
    /// copy of, so that walrelay resumes on a promoted standby. Ignored
    /// before 17.
    #[serde(default = "defaults::yes")]
    pub failover_slot: bool,
    /// Create the publication (for the outbox tables) at start if it does not exist.
    #[serde(default = "defaults::yes")]
    pub create_publication: bool,
    /// Time allowed to establish a connection, including authentication.
    #[serde(
        default = "defaults::connect_timeout",
        deserialize_with = "units::duration"
    )]
    pub connect_timeout: Duration,
    /// How often to send standby status updates; the effective interval is
    /// `min(status_interval, wal_sender_timeout / 2)`.
    #[serde(
        default = "defaults::status_interval",
        deserialize_with = "units::duration"
    )]
    pub status_interval: Duration,
    /// Largest single replication message accepted, in bytes.
    #[serde(
        default = "defaults::max_message_size",
        deserialize_with = "units::byte_size"
    )]
    pub max_message_size: u64,
    /// First delay before reconnecting after a transient error; doubles per attempt.
    #[serde(
        default = "defaults::reconnect_backoff_initial",
        deserialize_with = "units::duration"
    )]
    pub reconnect_backoff_initial: Duration,
    /// Upper bound for the reconnect delay.
    #[serde(
        default = "defaults::reconnect_backoff_max",
        deserialize_with = "units::duration"
    )]
    pub reconnect_backoff_max: Duration,
    /// TLS, with libpq's `sslmode` meanings (see `pg::tls`).
    #[serde(default)]
    pub sslmode: SslMode,
    /// PEM file of CA certificates for `verify-ca` / `verify-full`; the
    /// system trust store when unset.
    #[serde(default)]
    pub sslrootcert: Option<PathBuf>,
    /// PEM file with the client certificate (and any intermediates) to
    /// present, for `cert` authentication or `clientcert=verify-*` in
    /// `pg_hba.conf`. Requires `sslkey`.
    #[serde(default)]
    pub sslcert: Option<PathBuf>,
    /// PEM file with the private key of `sslcert`; requires `sslcert`.
    #[serde(default)]
    pub sslkey: Option<PathBuf>,
    /// Password of an encrypted `sslkey`. Never printed.
    #[serde(default, deserialize_with = "units::secret")]
    pub sslpassword: Option<SecretString>,
}

/// `postgres.sslmode`: libpq's `sslmode` names and meanings (the table in
/// `pg::tls`, which acts on them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    Disable,
    #[default]
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    /// The name as written in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a server that declines TLS is acceptable.
    pub fn allows_plaintext(self) -> bool {
        matches!(self, SslMode::Disable | SslMode::Prefer)
    }

    /// Whether the server's certificate chain is verified.
    pub fn verifies_certificate(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }

    /// Whether the certificate must name the host we connect to.
    pub fn verifies_host_name(self) -> bool {
        self == SslMode::VerifyFull
    }
}

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
}

impl KafkaConfig {
    /// The complete librdkafka producer configuration: the brokers, the
    /// settings walrelay's guarantees rest on (`acks=all`,
    /// `enable.idempotence=true`, `partitioner=murmur2_random`), compression
    /// and linger, `max.in.flight=1` (a default the raw map may raise to 5:
    /// see `sink::kafka` on implicit acks), then the raw `[kafka.librdkafka]`
    /// map.
    ///
    /// Validation rejects raw properties that contradict the fixed ones; as a
    /// second line of defence, any that slip through (a hand-built, unvalidated
    /// config) are left out rather than allowed to override them.
    pub fn producer_properties(&self) -> Vec<(String, String)> {
        let fixed = [
            ("bootstrap.servers", self.bootstrap_servers()),
            ("acks", "all".to_owned()),
            ("enable.idempotence", "true".to_owned()),
            ("partitioner", "murmur2_random".to_owned()),
            ("compression.type", self.compression.as_str().to_owned()),
            ("linger.ms", millis(self.linger)),
            ("max.in.flight", "1".to_owned()),
        ];
        fixed
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .chain(self.security_properties())
            .chain(
                self.librdkafka
                    .iter()
                    .filter(|(k, v)| producer::librdkafka_property(k, v).is_ok())
                    .map(|(k, v)| (k.clone(), v.clone())),
            )
            .collect()
    }

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

    /// The librdkafka properties of the typed security keys (only those
    /// that are set). Host-name verification is emitted whenever
    /// `security_protocol` uses TLS: on unless `ssl_verify_hostname = false`.
    pub fn security_properties(&self) -> Vec<(String, String)> {
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let secret = |s: &Option<SecretString>| s.as_ref().map(|s| s.expose_secret().to_owned());
        let verify = match (self.ssl_verify_hostname, self.security_protocol) {
            (Some(v), _) => Some(v),
            (None, Some(p)) if p.uses_tls() => Some(true),
            (None, _) => None,
        };
        [
            (
                "security.protocol",
                self.security_protocol.map(|p| p.as_str().to_owned()),
            ),
            (
                "sasl.mechanisms",
                self.sasl_mechanism.map(|m| m.as_str().to_owned()),
            ),
            ("sasl.username", self.sasl_username.clone()),
            ("sasl.password", secret(&self.sasl_password)),
            ("ssl.ca.location", path(&self.ssl_ca)),
            ("ssl.certificate.location", path(&self.ssl_certificate)),
            ("ssl.key.location", path(&self.ssl_key)),
            ("ssl.key.password", secret(&self.ssl_key_password)),
            (
                "ssl.endpoint.identification.algorithm",
                verify.map(|v| if v { "https" } else { "none" }.to_owned()),
            ),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v)))
        .collect()
    }

    /// The configuration key behind librdkafka property `property` when a
    /// typed key sets it (for errors about the property).
    pub fn typed_key_of(property: &str) -> Option<&'static str> {
        SECURITY_KEYS
            .iter()
            .find(|(_, props)| props.contains(&property))
            .map(|(key, _)| *key)
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
            .finish()
    }
}

/// `[health]`: the HTTP endpoint for `/healthz` and `/metrics`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthConfig {
    /// Address to listen on.
    #[serde(
        default = "defaults::health_listen",
        deserialize_with = "units::socket_addr"
    )]
    pub listen: SocketAddr,
}

/// `[log]`: how walrelay writes its log lines (stderr).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `text` (default) or `json`. `--log-format` / `WALRELAY_LOG_FORMAT`
    /// win over it.
    #[serde(default)]
    pub format: LogFormat,
}

/// `[log] format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line, fields as keys.
    Json,
}

/// `[snapshot] mode`: whether and when to read the outbox tables' existing
/// rows before streaming, with Debezium's `snapshot.mode` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotMode {
    /// Snapshot when the connector starts with no slot and no stored offset,
    /// then stream.
    #[default]
    Initial,
    /// Never snapshot: stream from the slot's consistent point.
    NoData,
    /// Snapshot as `initial`, then stop instead of streaming.
    InitialOnly,
    /// Snapshot as `initial`, and also when the stored position can no longer
    /// be resumed (slot lost or recreated), instead of stopping.
    WhenNeeded,
    /// Snapshot at every start. Refused by validation: it needs incremental
    /// snapshots, which walrelay does not have.
    Always,
}

impl SnapshotMode {
    /// The name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotMode::Initial => "initial",
            SnapshotMode::NoData => "no_data",
            SnapshotMode::InitialOnly => "initial_only",
            SnapshotMode::WhenNeeded => "when_needed",
            SnapshotMode::Always => "always",
        }
    }
}

/// `[snapshot]`: the initial snapshot of the outbox tables (optional
/// section; every key has a default).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotConfig {
    /// When to snapshot. Unset: `initial` when walrelay creates the slot
    /// itself, and streaming from the slot's position (no snapshot) when
    /// the slot exists already — a snapshot can only be aligned with a slot
    /// walrelay creates. Set explicitly, a mode that asks for a snapshot
    /// refuses an existing slot instead.
    #[serde(default)]
    pub mode: Option<SnapshotMode>,
    /// Readers per table, each on its own connection importing the same
    /// exported snapshot; rows are split among them by a hash of the
    /// aggregate id, so one aggregate's rows stay with one reader. 1..=16.
    #[serde(default = "defaults::snapshot_parallelism")]
    pub parallelism: u32,
    /// Rows a reader hands on at a time (one batch). 1..=1,000,000.
    #[serde(default = "defaults::snapshot_fetch_rows")]
    pub fetch_rows: usize,
    /// Rows per chunk of an incremental snapshot. 1..=1,000,000.
    #[serde(default = "defaults::snapshot_chunk_rows")]
    pub chunk_rows: usize,
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        SnapshotConfig {
            mode: None,
            parallelism: defaults::snapshot_parallelism(),
            fetch_rows: defaults::snapshot_fetch_rows(),
            chunk_rows: defaults::snapshot_chunk_rows(),
        }
    }
}

/// `[heartbeat]`: a message written into the WAL every `interval`, seen
/// coming back through the slot (optional section; off by default).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatConfig {
    /// How often to write `pg_logical_emit_message(false, 'walrelay.heartbeat',
    /// …)` on the catalog connection. Unset or `"0s"`: no heartbeats.
    #[serde(default, deserialize_with = "units::optional_duration")]
    pub interval: Option<Duration>,
    /// Also publish a Debezium-shaped heartbeat record to `topic` for every
    /// heartbeat that comes back.
    #[serde(default)]
    pub publish: bool,
    /// The heartbeat topic. Unset: `__debezium-heartbeat.<topic prefix>`
    /// (`table_defaults.topic_prefix`, or the connector's name), Debezium's
    /// default for its `topic.prefix`.
    #[serde(default)]
    pub topic: Option<String>,
}

impl HeartbeatConfig {
    /// The interval when heartbeats are on.
    pub fn enabled(&self) -> Option<Duration> {
        self.interval.filter(|d| !d.is_zero())
    }

    /// The topic heartbeat records go to: `topic`, or Debezium's
    /// `__debezium-heartbeat.<topic.prefix>` with `topic_prefix`
    /// ([`Config::topic_prefix`](super::Config::topic_prefix)).
    pub fn topic_for(&self, topic_prefix: &str) -> String {
        self.topic
            .clone()
            .unwrap_or_else(|| format!("__debezium-heartbeat.{topic_prefix}"))
    }
}

/// `[dead_letter]`: where a change that cannot become its record goes
/// instead of stopping the connector (optional section; absent: stop and
/// name the row). See docs/delivery.md, "Dead-letter topic".
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterConfig {
    /// The dead-letter topic.
    pub topic: String,
}

/// What to do when a row of an outbox table is UPDATEd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnUpdate {
    /// Publish nothing for the update and log a warning.
    #[default]
    Warn,
    /// Publish nothing for the update; only a metric counts it.
    Skip,
    /// Stop the connector with an error naming the table and LSN.
    Fail,
}

/// `[[outbox]]`: one outbox table and how its rows become Kafka records.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxConfig {
    /// The table, `schema.table` or `table` (schema `public`). Required.
    pub table: TableRef,
    /// Unique event id; becomes the record's `id` header.
    #[serde(default = "defaults::id_column")]
    pub id_column: String,
    /// Aggregate type (e.g. `Order`); usually used in the topic template.
    #[serde(default = "defaults::aggregate_type_column")]
    pub aggregate_type_column: String,
    /// Aggregate id; becomes the record key, so one aggregate's events stay in order.
    #[serde(default = "defaults::aggregate_id_column")]
    pub aggregate_id_column: String,
    /// Event type (e.g. `OrderCreated`).
    #[serde(default = "defaults::type_column")]
    pub type_column: String,
    /// Event body; becomes the record value.
    #[serde(default = "defaults::payload_column")]
    pub payload_column: String,
    /// Destination topic, with `{column}` placeholders.
    #[serde(default = "TopicTemplate::default_template")]
    pub topic: TopicTemplate,
    /// Columns copied into record headers: `"column"` (header name =
    /// column name) or `"column:alias"` ([`placement`]).
    #[serde(default = "defaults::header_columns")]
    pub header_columns: Vec<String>,
    /// Columns placed beside the payload in a JSON envelope value
    /// (`{"payload": …, "<alias>": …}`, Debezium's
    /// `table.fields.additional.placement=<column>:envelope:<alias>`):
    /// `"column"` or `"column:alias"`. Empty: the value is the payload.
    #[serde(default)]
    pub envelope_columns: Vec<String>,
    /// With `envelope_columns`: a json/jsonb payload (and a text payload
    /// holding a JSON object) is embedded as JSON (`true`, the default) or
    /// as a JSON string (`false`); Debezium's `table.expand.json.payload`.
    /// `None`: not set (only allowed to be set with `envelope_columns`).
    #[serde(default)]
    pub expand_json_payload: Option<bool>,
    /// A `timestamptz` column used as the record timestamp; `None` lets Kafka
    /// stamp the record. `""` in the file means `None`.
    #[serde(default, deserialize_with = "units::optional_name")]
    pub timestamp_column: Option<String>,
    /// Publish a tombstone (null value) for a row whose payload is NULL.
    #[serde(default)]
    pub tombstone_on_empty_payload: bool,
    /// What to do when an outbox row is updated.
    #[serde(default)]
    pub on_update: OnUpdate,
    /// Order of the table's rows in the snapshot (and so of one aggregate's
    /// snapshot events); empty means the table's primary key.
    #[serde(default)]
    pub snapshot_order_by: Vec<String>,
    /// How a row becomes a record: the payload as is (`raw`), or a
    /// CloudEvent (`cloudevents`, configured in `cloudevents`).
    #[serde(default)]
    pub format: OutboxFormat,
    /// `[outbox.cloudevents]`: the CloudEvents attributes, read when
    /// `format = "cloudevents"`.
    #[serde(default)]
    pub cloudevents: CloudEventsConfig,
    /// A column holding the W3C trace context of the transaction that wrote
    /// the row (a `traceparent` value, or Debezium's `tracingspancontext`
    /// Java-properties text); becomes the `traceparent` (and `tracestate`)
    /// header. `None`/`""`: no trace headers.
    #[serde(default, deserialize_with = "units::optional_name")]
    pub trace_context_column: Option<String>,
}

/// `outbox.format`: the shape of an outbox record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutboxFormat {
    /// The payload as the value, unchanged (Debezium's Outbox Event Router).
    #[default]
    Raw,
    /// A CloudEvents 1.0 event in the Kafka protocol binding.
    CloudEvents,
}

/// `outbox.cloudevents.mode`: the Kafka protocol binding's content mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CloudEventsMode {
    /// Attributes in `ce_*` headers, the payload as the value.
    #[default]
    Binary,
    /// The whole event as `application/cloudevents+json` in the value.
    Structured,
}

/// `[outbox.cloudevents]`: how an outbox row maps to CloudEvents
/// attributes (`id`, `type` and `subject` come from the id, type and
/// aggregate id columns; `time` is the commit time).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudEventsConfig {
    /// Binary or structured content mode.
    #[serde(default)]
    pub mode: CloudEventsMode,
    /// The `source` attribute (a URI-reference). Required with
    /// `format = "cloudevents"`.
    #[serde(default, deserialize_with = "units::optional_name")]
    pub source: Option<String>,
    /// A fixed `dataschema` attribute (an absolute URI).
    #[serde(default, deserialize_with = "units::optional_name")]
    pub dataschema: Option<String>,
    /// A column whose value is the `dataschema` attribute (an absolute URI;
    /// NULL leaves it out). Excludes `dataschema`.
    #[serde(default, deserialize_with = "units::optional_name")]
    pub dataschema_column: Option<String>,
    /// The `datacontenttype` attribute (`content-type` header in binary
    /// mode); default from the payload column's type.
    #[serde(default, deserialize_with = "units::optional_name")]
    pub datacontenttype: Option<String>,
    /// Extension attributes: attribute name → column.
    #[serde(default)]
    pub extensions: BTreeMap<String, String>,
}

impl OutboxConfig {
    /// Columns a topic template may refer to: the id, aggregate type,
    /// aggregate id and type columns, then the header columns.
    pub fn template_columns(&self) -> Vec<&str> {
        let mut columns = vec![
            self.id_column.as_str(),
            self.aggregate_type_column.as_str(),
            self.aggregate_id_column.as_str(),
            self.type_column.as_str(),
        ];
        for (column, _) in self.header_placements().chain(self.envelope_placements()) {
            if !columns.contains(&column) {
                columns.push(column);
            }
        }
        columns
    }

    /// `header_columns` as (column, header name).
    pub fn header_placements(&self) -> impl Iterator<Item = (&str, &str)> {
        self.header_columns.iter().map(|e| placement(e))
    }

    /// `envelope_columns` as (column, member name).
    pub fn envelope_placements(&self) -> impl Iterator<Item = (&str, &str)> {
        self.envelope_columns.iter().map(|e| placement(e))
    }

    /// Whether an envelope embeds a JSON payload as JSON (the default).
    pub fn expands_json_payload(&self) -> bool {
        self.expand_json_payload.unwrap_or(true)
    }
}

/// An entry of `header_columns` or `envelope_columns`, `"column"` or
/// `"column:alias"`, as (column, the name it is placed under). Split at the
/// first `:`; validation refuses entries with more than one.
pub fn placement(entry: &str) -> (&str, &str) {
    entry.split_once(':').unwrap_or((entry, entry))
}

/// `table_defaults.decimal_handling_mode`: how `numeric`/`decimal` values
/// are written (Debezium's `decimal.handling.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecimalHandlingMode {
    /// Exactly: Kafka Connect's `Decimal` (base64 of the unscaled value's
    /// big-endian two's-complement bytes) for `numeric(p,s)`, and Debezium's
    /// `VariableScaleDecimal` (`{"scale":…,"value":…}`) for plain `numeric`.
    #[default]
    Precise,
    /// As the decimal text (`"12.50"`).
    String,
    /// As a JSON number (a 64-bit float: may lose digits).
    Double,
}

/// `table_defaults.time_precision_mode` (Debezium's `time.precision.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimePrecisionMode {
    /// `time(0..3)`/`timestamp(0..3)` in milliseconds, finer ones in
    /// microseconds.
    #[default]
    Adaptive,
    /// Always milliseconds (Kafka Connect's `Time`/`Timestamp`).
    Connect,
}

/// `table_defaults.binary_handling_mode` (Debezium's `binary.handling.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BinaryHandlingMode {
    /// Base64 text: what Debezium's default `bytes` writes through the JSON
    /// converter (an unchanged TOASTed value: the placeholder's bytes).
    #[default]
    Bytes,
    /// Base64 text, as Debezium's `base64` mode writes it (an unchanged
    /// TOASTed value: `null`).
    Base64,
    /// Lower-case hexadecimal.
    Hex,
}

/// `table_defaults.interval_handling_mode` (Debezium's `interval.handling.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IntervalHandlingMode {
    /// Microseconds, months counted as 365.25/12 days.
    #[default]
    Numeric,
    /// ISO-8601 text, `P1Y2M3DT4H5M6.5S`.
    String,
}

/// `table_defaults.unmapped_types`: what becomes of a column whose type the
/// table events do not map to a Debezium representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnmappedTypes {
    /// Refuse the table at `check` and at start (mid-stream: stop), naming
    /// table, column and type.
    #[default]
    Fail,
    /// Write the value's PostgreSQL text form as a JSON string.
    Text,
}

/// `table_defaults.special_values`: what becomes of a valid value that has
/// no exact Debezium form — an `infinity` date or timestamp, a timestamp or
/// interval past what Debezium's numbers hold, an array with bounds other
/// than 1 or of several dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpecialValues {
    /// Write what Debezium 3.6.1 writes for it, or walrelay's documented
    /// form where Debezium's loses it (docs/compatibility.md).
    #[default]
    Write,
    /// Stop the connector, naming table, column and LSN.
    Fail,
}

/// `[table_defaults]`: settings shared by every `[[table]]` entry, named after
/// the Debezium connector options they mirror (`topic.prefix` →
/// `topic_prefix`, `decimal.handling.mode` → `decimal_handling_mode`, …).
/// Each `[[table]]` entry may override all but `topic_prefix`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableDefaults {
    /// Debezium's `topic.prefix`: the first part of the default topic
    /// (`{prefix}.{schema}.{table}`) and `source.name` in every value.
    /// Unset: the `[connector]` name.
    #[serde(default)]
    pub topic_prefix: Option<String>,
    /// Debezium's `tombstones.on.delete`: follow each delete by a record
    /// with the same key and a null value.
    #[serde(default = "defaults::yes")]
    pub tombstones_on_delete: bool,
    /// Debezium's `decimal.handling.mode`.
    #[serde(default)]
    pub decimal_handling_mode: DecimalHandlingMode,
    /// Debezium's `time.precision.mode` (`adaptive` or `connect`).
    #[serde(default)]
    pub time_precision_mode: TimePrecisionMode,
    /// Debezium's `binary.handling.mode` (`base64` or `hex`).
    #[serde(default)]
    pub binary_handling_mode: BinaryHandlingMode,
    /// Debezium's `interval.handling.mode` (`numeric` or `string`).
    #[serde(default)]
    pub interval_handling_mode: IntervalHandlingMode,
    /// Debezium's `unavailable.value.placeholder`: the value written for a
    /// TOASTed column an update left unchanged (PostgreSQL does not send it).
    #[serde(default = "defaults::unavailable_value_placeholder")]
    pub unavailable_value_placeholder: String,
    /// Debezium's `skipped.operations`: the streamed operations that make
    /// no record (`"t"` truncates by default; `"none"` skips nothing).
    #[serde(default)]
    pub skipped_operations: SkippedOperations,
    /// Debezium's `column.include.list`, for every `[[table]]` without
    /// column lists of its own: regular expressions matched against each
    /// column's `schema.table.column`, whole and ignoring case; only
    /// matching columns are in `before`/`after`. Not with
    /// `column_exclude_list`.
    #[serde(default)]
    pub column_include_list: Vec<String>,
    /// Debezium's `column.exclude.list`, likewise: matching columns are left
    /// out of `before`/`after`.
    #[serde(default)]
    pub column_exclude_list: Vec<String>,
    /// A column of a type not mapped to a Debezium representation: refused
    /// (`fail`, the default) or written as its text form (`text`).
    #[serde(default)]
    pub unmapped_types: UnmappedTypes,
    /// A valid value without an exact Debezium form: written as Debezium
    /// writes it (`write`, the default) or stopping the connector (`fail`).
    #[serde(default)]
    pub special_values: SpecialValues,
    /// Debezium's `provide.transaction.metadata`: BEGIN and END records on
    /// `<topic_prefix>.transaction` for every transaction with a table
    /// event, and the `transaction` block of streamed events filled in.
    #[serde(default)]
    pub provide_transaction_metadata: bool,
}

impl TableDefaults {
    /// The default column lists, compiled (`None` when neither is set);
    /// `Err((key, reason))` names the first expression that does not
    /// compile.
    pub fn column_filter(&self) -> Result<Option<ColumnFilter>, (String, String)> {
        let (list, include) = match (
            self.column_include_list.is_empty(),
            self.column_exclude_list.is_empty(),
        ) {
            (true, true) => return Ok(None),
            (false, _) => ("column_include_list", true),
            (true, false) => ("column_exclude_list", false),
        };
        let patterns = if include {
            &self.column_include_list
        } else {
            &self.column_exclude_list
        };
        // Anchored, as Java's Matcher.matches(): the whole name.
        let anchored = |p: &String| format!("^(?:{p})$");
        for (j, p) in patterns.iter().enumerate() {
            if let Err(e) = regex::RegexBuilder::new(&anchored(p))
                .case_insensitive(true)
                .build()
            {
                // The parser's last line says what is wrong ("error: …").
                let text = e.to_string();
                let reason = text.lines().last().unwrap_or_default();
                let reason = reason.strip_prefix("error: ").unwrap_or(reason);
                return Err((format!("table_defaults.{list}[{j}]"), reason.to_owned()));
            }
        }
        regex::RegexSetBuilder::new(patterns.iter().map(anchored))
            .case_insensitive(true)
            .build()
            .map(|set| Some(ColumnFilter { include, set }))
            .map_err(|e| (format!("table_defaults.{list}"), e.to_string()))
    }
}

/// `table_defaults.column_include_list` or `column_exclude_list`, compiled.
#[derive(Debug, Clone)]
pub struct ColumnFilter {
    include: bool,
    set: regex::RegexSet,
}

impl ColumnFilter {
    /// Whether column `column` of `schema.table` is in `before`/`after`.
    pub fn includes(&self, schema: &str, table: &str, column: &str) -> bool {
        self.set.is_match(&format!("{schema}.{table}.{column}")) == self.include
    }
}

impl Default for TableDefaults {
    fn default() -> Self {
        TableDefaults {
            topic_prefix: None,
            tombstones_on_delete: true,
            decimal_handling_mode: DecimalHandlingMode::default(),
            time_precision_mode: TimePrecisionMode::default(),
            binary_handling_mode: BinaryHandlingMode::default(),
            interval_handling_mode: IntervalHandlingMode::default(),
            unavailable_value_placeholder: defaults::unavailable_value_placeholder(),
            skipped_operations: SkippedOperations::default(),
            column_include_list: Vec::new(),
            column_exclude_list: Vec::new(),
            unmapped_types: UnmappedTypes::default(),
            special_values: SpecialValues::default(),
            provide_transaction_metadata: false,
        }
    }
}

/// `skipped_operations`: Debezium's `skipped.operations`, written as Debezium
/// writes it: a comma-separated list of `c` (inserts), `u` (updates), `d`
/// (deletes, with their tombstones) and `t` (truncates), or `none`. Only
/// streamed changes are skipped, never snapshot rows (`r`).
#[derive(Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct SkippedOperations {
    /// One bit per operation letter, in the order `c`, `u`, `d`, `t`.
    bits: u8,
}

impl SkippedOperations {
    /// The operation letters, in bit order.
    const LETTERS: [u8; 4] = [b'c', b'u', b'd', b't'];

    /// Nothing skipped (Debezium's `none`).
    pub const NONE: SkippedOperations = SkippedOperations { bits: 0 };

    /// Whether records of operation `op` (`b'c'`, `b'u'`, `b'd'`, `b't'`)
    /// are skipped.
    pub fn skips(self, op: u8) -> bool {
        Self::LETTERS
            .iter()
            .position(|&l| l == op)
            .is_some_and(|i| self.bits & (1 << i) != 0)
    }
}

/// Debezium's default, `t`: truncates are skipped.
impl Default for SkippedOperations {
    fn default() -> Self {
        SkippedOperations { bits: 1 << 3 }
    }
}

impl TryFrom<String> for SkippedOperations {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        if text.trim().eq_ignore_ascii_case("none") {
            return Ok(SkippedOperations::NONE);
        }
        let mut bits = 0;
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let i = match part.as_bytes() {
                [letter] => Self::LETTERS.iter().position(|l| l == letter),
                _ => None,
            };
            let Some(i) = i else {
                return Err(format!(
                    "{} is not an operation: skipped_operations lists c (inserts), u \
                     (updates), d (deletes), t (truncates), separated by commas, or is \"none\"",
                    quoted(part)
                ));
            };
            bits |= 1 << i;
        }
        Ok(SkippedOperations { bits })
    }
}

impl fmt::Debug for SkippedOperations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.bits == 0 {
            return f.write_str("none");
        }
        let letters: Vec<String> = Self::LETTERS
            .iter()
            .enumerate()
            .filter(|(i, _)| self.bits & (1 << i) != 0)
            .map(|(_, &l)| char::from(l).to_string())
            .collect();
        f.write_str(&letters.join(","))
    }
}

/// `[[table.column_mask]]`: one of Debezium's column mappers for some
/// columns of a `[[table]]`: hashing (`column.mask.hash.<algorithm>.with.salt.<salt>`,
/// `column.mask.hash.v2.…`), a fixed mask (`column.mask.with.<N>.chars`) or
/// truncation (`column.truncate.to.<N>.chars`). Exactly one of `hash`,
/// `with_chars` and `truncate_to_chars`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnMask {
    /// The columns (names as in the table). Required.
    pub columns: Vec<String>,
    /// A hash algorithm as Java names it (`SHA-256`, `SHA-512`, `MD5`, …):
    /// the value becomes the hex digest of salt + value.
    #[serde(default)]
    pub hash: Option<String>,
    /// The salt of `hash` (a secret: `${ENV}` or `${file:...}`).
    #[serde(default, deserialize_with = "units::secret")]
    pub salt: Option<SecretString>,
    /// How the value is turned into bytes before hashing: 1 (Debezium's
    /// `column.mask.hash.…`, the Java serialization of the string) or 2
    /// (`column.mask.hash.v2.…`, the string's UTF-8 bytes). Default 1.
    #[serde(default)]
    pub hash_version: Option<u8>,
    /// Replace every value (NULL too, as Debezium does) by this many `*`.
    #[serde(default)]
    pub with_chars: Option<u32>,
    /// Cut values longer than this many characters.
    #[serde(default)]
    pub truncate_to_chars: Option<u32>,
}

/// The `column_mask.hash` algorithms, as Java's `MessageDigest` names them
/// (matched without regard to case, as Java does).
pub const HASH_ALGORITHMS: [&str; 10] = [
    "MD5", "SHA-1", "SHA-224", "SHA-256", "SHA-384", "SHA-512", "SHA3-224", "SHA3-256", "SHA3-384",
    "SHA3-512",
];

impl fmt::Debug for ColumnMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ColumnMask")
            .field("columns", &self.columns)
            .field("hash", &self.hash)
            .field("salt", &self.salt.as_ref().map(|_| "[REDACTED]"))
            .field("hash_version", &self.hash_version)
            .field("with_chars", &self.with_chars)
            .field("truncate_to_chars", &self.truncate_to_chars)
            .finish()
    }
}

/// `[[table]]`: an ordinary table (or, with `*` in the table part, every
/// table of a schema matching the pattern) whose changes become Debezium
/// change events.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    /// `schema.table`, `table` (schema `public`), or a pattern such as
    /// `public.*` or `sales.order_*` (`*` matches any run of characters in
    /// the table name). Required.
    pub name: TableRef,
    /// Destination topic, with placeholders `{prefix}`, `{schema}` and
    /// `{table}`. Default `{prefix}.{schema}.{table}` (Debezium's naming).
    #[serde(default = "defaults::table_topic")]
    pub topic: TopicTemplate,
    /// Debezium's `message.key.columns` for this table: the record key's
    /// columns, for tables without a primary key (or to key by others).
    /// Empty: the primary key; no primary key → a null key.
    #[serde(default)]
    pub key_columns: Vec<String>,
    /// Overrides `table_defaults.tombstones_on_delete`.
    #[serde(default)]
    pub tombstones_on_delete: Option<bool>,
    /// Overrides `table_defaults.decimal_handling_mode`.
    #[serde(default)]
    pub decimal_handling_mode: Option<DecimalHandlingMode>,
    /// Overrides `table_defaults.time_precision_mode`.
    #[serde(default)]
    pub time_precision_mode: Option<TimePrecisionMode>,
    /// Overrides `table_defaults.binary_handling_mode`.
    #[serde(default)]
    pub binary_handling_mode: Option<BinaryHandlingMode>,
    /// Overrides `table_defaults.interval_handling_mode`.
    #[serde(default)]
    pub interval_handling_mode: Option<IntervalHandlingMode>,
    /// Overrides `table_defaults.unavailable_value_placeholder`.
    #[serde(default)]
    pub unavailable_value_placeholder: Option<String>,
    /// Overrides `table_defaults.unmapped_types`.
    #[serde(default)]
    pub unmapped_types: Option<UnmappedTypes>,
    /// Overrides `table_defaults.special_values`.
    #[serde(default)]
    pub special_values: Option<SpecialValues>,
    /// Overrides `table_defaults.skipped_operations`.
    #[serde(default)]
    pub skipped_operations: Option<SkippedOperations>,
    /// Debezium's `column.include.list` for this table: only these columns
    /// are in `before`/`after` (key columns stay in the key). Not with
    /// `column_exclude_list`.
    #[serde(default)]
    pub column_include_list: Vec<String>,
    /// Debezium's `column.exclude.list` for this table: these columns are
    /// left out of `before`/`after` (key columns stay in the key).
    #[serde(default)]
    pub column_exclude_list: Vec<String>,
    /// Debezium's column masks and truncation (`[[table.column_mask]]`).
    #[serde(default)]
    pub column_mask: Vec<ColumnMask>,
}

impl TableConfig {
    /// Whether column `name` is in `before`/`after` by this entry's own
    /// include and exclude lists.
    pub fn includes_column(&self, name: &str) -> bool {
        if !self.column_include_list.is_empty() {
            return self.column_include_list.iter().any(|c| c == name);
        }
        !self.column_exclude_list.iter().any(|c| c == name)
    }

    /// Whether column `column` of `schema.table` is in `before`/`after`:
    /// by this entry's own lists when it has any, else by the default lists
    /// (`defaults`, [`TableDefaults::column_filter`]).
    pub fn includes(
        &self,
        defaults: Option<&ColumnFilter>,
        schema: &str,
        table: &str,
        column: &str,
    ) -> bool {
        match defaults {
            Some(f)
                if self.column_include_list.is_empty() && self.column_exclude_list.is_empty() =>
            {
                f.includes(schema, table, column)
            }
            _ => self.includes_column(column),
        }
    }

    /// The record key's columns: `key_columns`, else the table's
    /// `primary_key`.
    pub fn key_or<'a>(&'a self, primary_key: &'a [String]) -> &'a [String] {
        if self.key_columns.is_empty() {
            primary_key
        } else {
            &self.key_columns
        }
    }

    /// The mask of column `name`, if any.
    pub fn mask_of(&self, name: &str) -> Option<&ColumnMask> {
        self.column_mask
            .iter()
            .find(|m| m.columns.iter().any(|c| c == name))
    }

    /// Every column named by the column lists and masks, with the key path
    /// that names it.
    pub fn named_columns(&self, entry: usize) -> Vec<(String, &str)> {
        let mut out = Vec::new();
        for (list, items) in [
            ("column_include_list", &self.column_include_list),
            ("column_exclude_list", &self.column_exclude_list),
        ] {
            for (j, c) in items.iter().enumerate() {
                out.push((format!("table[{entry}].{list}[{j}]"), c.as_str()));
            }
        }
        for (m, mask) in self.column_mask.iter().enumerate() {
            for (j, c) in mask.columns.iter().enumerate() {
                out.push((
                    format!("table[{entry}].column_mask[{m}].columns[{j}]"),
                    c.as_str(),
                ));
            }
        }
        out
    }

    /// Whether `name` is a pattern (has `*` in its table part).
    pub fn is_pattern(&self) -> bool {
        self.name.name.contains('*')
    }

    /// Whether this entry captures table `schema.name`.
    pub fn matches(&self, schema: &str, name: &str) -> bool {
        self.name.schema == schema && glob_match(&self.name.name, name)
    }
}

/// `pattern` with `*` matching any run of characters (including none);
/// every other character matches itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Default values, one function per key (serde needs functions).
pub(crate) mod defaults {
    use super::*;

    pub(crate) fn host() -> String {
        "127.0.0.1".to_owned()
    }
    pub(crate) fn pg_port() -> u16 {
        5432
    }
    pub(crate) fn user() -> String {
        "walrelay".to_owned()
    }
    pub(crate) fn slot() -> String {
        "walrelay".to_owned()
    }
    pub(crate) fn publication() -> String {
        "walrelay".to_owned()
    }
    pub(crate) fn yes() -> bool {
        true
    }
    pub(crate) fn connect_timeout() -> Duration {
        Duration::from_secs(10)
    }
    pub(crate) fn status_interval() -> Duration {
        Duration::from_secs(1)
    }
    pub(crate) fn max_message_size() -> u64 {
        64 << 20
    }
    pub(crate) fn reconnect_backoff_initial() -> Duration {
        Duration::from_millis(500)
    }
    pub(crate) fn reconnect_backoff_max() -> Duration {
        Duration::from_secs(30)
    }
    pub(crate) fn linger() -> Duration {
        Duration::from_millis(5)
    }
    pub(crate) fn linger_while_behind() -> Duration {
        Duration::from_millis(20)
    }
    pub(crate) fn max_in_flight_records() -> usize {
        100_000
    }
    pub(crate) fn max_in_flight_bytes() -> u64 {
        64 << 20
    }
    pub(crate) fn shutdown_flush_timeout() -> Duration {
        Duration::from_secs(10)
    }
    pub(crate) fn transaction_max_records() -> usize {
        20_000
    }
    pub(crate) fn transaction_max_bytes() -> u64 {
        32 << 20
    }
    pub(crate) fn transaction_max_time() -> Duration {
        Duration::from_millis(100)
    }
    pub(crate) fn transaction_timeout() -> Duration {
        Duration::from_secs(60)
    }
    pub(crate) fn offsets_topic() -> String {
        "walrelay.offsets".to_owned()
    }
    pub(crate) fn health_listen() -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, 9187))
    }
    pub(crate) fn id_column() -> String {
        "id".to_owned()
    }
    pub(crate) fn aggregate_type_column() -> String {
        "aggregatetype".to_owned()
    }
    pub(crate) fn aggregate_id_column() -> String {
        "aggregateid".to_owned()
    }
    pub(crate) fn type_column() -> String {
        "type".to_owned()
    }
    pub(crate) fn payload_column() -> String {
        "payload".to_owned()
    }
    pub(crate) fn snapshot_parallelism() -> u32 {
        1
    }
    pub(crate) fn snapshot_fetch_rows() -> usize {
        10_000
    }
    pub(crate) fn snapshot_chunk_rows() -> usize {
        4_096
    }
    pub(crate) fn unavailable_value_placeholder() -> String {
        "__debezium_unavailable_value".to_owned()
    }
    pub(crate) fn table_topic() -> TopicTemplate {
        TopicTemplate::table_default()
    }
    pub(crate) fn header_columns() -> Vec<String> {
        vec!["type".to_owned()]
    }
}
