//! The librdkafka producer properties: built once from the typed
//! configuration, the raw `[kafka.librdkafka]` map applied last.
//!
//! Every property knows where its value comes from ([`Origin`]): the
//! `[kafka]` or `[connector]` key it is derived from, a typed security key
//! that is librdkafka's property under another name, the raw map, or
//! walrelay itself. An error librdkafka raises about a property is said
//! under that key ([`check_producer_config`]): no reverse lookup from
//! property names to configuration keys.
//!
//! Invariants:
//! - One value per property: a later setting replaces an earlier one in
//!   place ([`ProducerProperties::set`]), so what librdkafka reads is what the
//!   list says.
//! - The guarantees walrelay rests on (`acks=all`, `enable.idempotence=true`,
//!   `partitioner=murmur2_random`) are set before the raw map, and the raw map
//!   never replaces them: validation refuses a raw property that would weaken
//!   them, and one that slips through (a hand-built, unvalidated
//!   configuration) is left out here, by the same function
//!   (`config::librdkafka_property`).
//! - `max.in.flight=1` by default (see `sink::kafka` on implicit acks); the
//!   raw map may raise it within what keeps idempotence.
//! - librdkafka's queues never fill before walrelay's in-flight caps do: its
//!   queue sizes are derived from them (saturating at librdkafka's largest).
//! - No local delivery timeout, except under `exactly_once` (a record may not
//!   outlive its Kafka transaction).

use std::path::PathBuf;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, DeliveryResult, ProducerContext};
use secrecy::{ExposeSecret, SecretString};

use crate::config::{
    Config, ConfigError, Delivery, is_secret_property, librdkafka_key_path, librdkafka_property,
    quoted, shorten,
};

/// Where a property's value comes from: what an error about it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Derived from this configuration key (`kafka.linger` → `linger.ms`).
    Key(&'static str),
    /// A typed key that is librdkafka's property under another name
    /// (`kafka.ssl_ca` is `ssl.ca.location`): errors say so.
    Alias(&'static str),
    /// `[kafka.librdkafka]`, applied last.
    Raw,
    /// Set by walrelay, with no key of its own: errors name
    /// `[kafka.librdkafka]`, where it may be tuned.
    Walrelay,
}

/// One librdkafka property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Property {
    pub name: String,
    pub value: String,
    pub origin: Origin,
}

/// The complete producer configuration, in the order it was set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerProperties {
    properties: Vec<Property>,
}

/// The largest value librdkafka accepts for its queue sizes (`i32::MAX`).
const LIBRDKAFKA_QUEUE_MAX: u64 = 2_147_483_647;

impl ProducerProperties {
    /// The producer's properties for `config`: walrelay's own, derived from
    /// the typed keys, then the raw map.
    pub fn from_config(config: &Config) -> ProducerProperties {
        let k = &config.kafka;
        let mut p = ProducerProperties::default();
        p.set(
            "client.id",
            format!("walrelay-{}", config.connector.name),
            Origin::Key("connector.name"),
        );
        // No local delivery timeout (0 = infinite): a record waits for the
        // broker as long as it takes, with our in-flight caps as the bound.
        // A finite timeout fails the records of a long outage while later
        // ones may still be written, breaking per-aggregate order when the
        // failed ones are re-sent; the stall warning and /healthz tell the
        // operator instead.
        p.set("message.timeout.ms", "0", Origin::Walrelay);
        p.set(
            "queue.buffering.max.messages",
            u64::try_from(k.max_in_flight_records)
                .unwrap_or(u64::MAX)
                .saturating_add(10_000)
                .min(LIBRDKAFKA_QUEUE_MAX)
                .to_string(),
            Origin::Key("kafka.max_in_flight_records"),
        );
        p.set(
            "queue.buffering.max.kbytes",
            (k.max_in_flight_bytes
                .saturating_add(config.postgres.max_message_size)
                / 1024)
                .saturating_add(1024)
                .min(LIBRDKAFKA_QUEUE_MAX)
                .to_string(),
            Origin::Key("kafka.max_in_flight_bytes"),
        );
        if k.delivery == Delivery::ExactlyOnce {
            // One id for every instance of the connector: the active one's
            // `init_transactions` fences the producer of the one before.
            p.set(
                "transactional.id",
                transactional_id(config),
                Origin::Walrelay,
            );
            let timeout = k.transaction_timeout.as_millis().to_string();
            p.set("transaction.timeout.ms", timeout.clone(), Origin::Walrelay);
            // A transactional producer's records may not outlive its
            // transaction (librdkafka refuses 0 = infinite here); a record that
            // times out fails its whole transaction, which is aborted and sent
            // again: nothing of it is ever visible, so no order breaks.
            p.set("message.timeout.ms", timeout, Origin::Walrelay);
            // Right after a commit the coordinator is still writing the
            // transaction's markers, and the next transaction's first send is
            // answered CONCURRENT_TRANSACTIONS, retried after retry.backoff.ms:
            // librdkafka's 100 ms put a floor under every transaction. 20 ms,
            // as the Java producer uses for this case (KAFKA-5477); still
            // exponential up to retry.backoff.max.ms, and the raw map may
            // change it.
            p.set("retry.backoff.ms", "20", Origin::Walrelay);
        }
        p.set(
            "bootstrap.servers",
            k.bootstrap_servers(),
            Origin::Key("kafka.brokers"),
        );
        p.set("acks", "all", Origin::Walrelay);
        p.set("enable.idempotence", "true", Origin::Walrelay);
        p.set("partitioner", "murmur2_random", Origin::Walrelay);
        p.set(
            "compression.type",
            k.compression.as_str(),
            Origin::Key("kafka.compression"),
        );
        p.set("linger.ms", millis(k.linger), Origin::Key("kafka.linger"));
        p.set("max.in.flight", "1", Origin::Walrelay);
        p.security(config);
        // The raw map last, so it can still tune walrelay's settings; never
        // one that weakens a guarantee (validation refuses those).
        for (name, value) in &k.librdkafka {
            if librdkafka_property(name, value).is_ok() {
                p.set(name, value.clone(), Origin::Raw);
            }
        }
        p
    }

    /// The typed security keys that are set. Host-name verification is set
    /// whenever `security_protocol` uses TLS: on unless
    /// `ssl_verify_hostname = false`.
    fn security(&mut self, config: &Config) {
        let k = &config.kafka;
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let secret = |s: &Option<SecretString>| s.as_ref().map(|s| s.expose_secret().to_owned());
        let verify = match (k.ssl_verify_hostname, k.security_protocol) {
            (Some(v), _) => Some(v),
            (None, Some(p)) if p.uses_tls() => Some(true),
            (None, _) => None,
        };
        let typed = [
            (
                "security.protocol",
                "kafka.security_protocol",
                k.security_protocol.map(|p| p.as_str().to_owned()),
            ),
            (
                "sasl.mechanisms",
                "kafka.sasl_mechanism",
                k.sasl_mechanism.map(|m| m.as_str().to_owned()),
            ),
            (
                "sasl.username",
                "kafka.sasl_username",
                k.sasl_username.clone(),
            ),
            (
                "sasl.password",
                "kafka.sasl_password",
                secret(&k.sasl_password),
            ),
            ("ssl.ca.location", "kafka.ssl_ca", path(&k.ssl_ca)),
            (
                "ssl.certificate.location",
                "kafka.ssl_certificate",
                path(&k.ssl_certificate),
            ),
            ("ssl.key.location", "kafka.ssl_key", path(&k.ssl_key)),
            (
                "ssl.key.password",
                "kafka.ssl_key_password",
                secret(&k.ssl_key_password),
            ),
            (
                "ssl.endpoint.identification.algorithm",
                "kafka.ssl_verify_hostname",
                verify.map(|v| if v { "https" } else { "none" }.to_owned()),
            ),
        ];
        for (name, key, value) in typed {
            if let Some(value) = value {
                self.set(name, value, Origin::Alias(key));
            }
        }
    }

    /// Sets `name`, replacing (in place) any value it had.
    pub fn set(&mut self, name: &str, value: impl Into<String>, origin: Origin) {
        let value = value.into();
        match self.properties.iter_mut().find(|p| p.name == name) {
            Some(p) => {
                p.value = value;
                p.origin = origin;
            }
            None => self.properties.push(Property {
                name: name.to_owned(),
                value,
                origin,
            }),
        }
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.find(name).map(|p| p.value.as_str())
    }

    /// Where the value of `name` comes from, if set.
    pub fn origin(&self, name: &str) -> Option<Origin> {
        self.find(name).map(|p| p.origin)
    }

    fn find(&self, name: &str) -> Option<&Property> {
        self.properties.iter().find(|p| p.name == name)
    }

    /// Every property, in the order first set.
    pub fn iter(&self) -> impl Iterator<Item = &Property> {
        self.properties.iter()
    }

    /// `(name, value)` pairs, as the clients take them.
    pub fn into_pairs(self) -> Vec<(String, String)> {
        self.properties
            .into_iter()
            .map(|p| (p.name, p.value))
            .collect()
    }
}

/// The producer's properties for `config` as `(name, value)` pairs
/// ([`ProducerProperties::from_config`]).
pub fn producer_properties(config: &Config) -> Vec<(String, String)> {
    ProducerProperties::from_config(config).into_pairs()
}

/// `exactly_once`: the connector's Kafka transactional id,
/// `walrelay-<connector.name>` (ACLs: `TransactionalId` with that name or
/// prefix; docs/security.md).
pub fn transactional_id(config: &Config) -> String {
    format!("walrelay-{}", config.connector.name)
}

/// Checks the complete producer configuration as librdkafka will read it
/// ([`check_producer_properties`]), without connecting
/// anywhere, so that `check` and `run` refuse a bad property at start,
/// before PostgreSQL or Kafka are needed. The error names the configuration
/// key behind the property (its [`Origin`]), never a value.
pub fn check_producer_config(config: &Config) -> Result<(), ConfigError> {
    let properties = ProducerProperties::from_config(config);
    let origin = |name: &str| properties.origin(name);
    let pairs = properties.clone().into_pairs();
    check_producer_properties(&pairs).map_err(|e| {
        let Some(property) = e.property.as_deref() else {
            return config.error_at("kafka.librdkafka", e.message);
        };
        match origin(property) {
            Some(Origin::Raw) => config.error_at(&librdkafka_key_path(property), e.message),
            Some(Origin::Alias(key)) => {
                let message = format!("{} ({key} is librdkafka's {property})", e.message);
                config.error_at(key, message)
            }
            Some(Origin::Key(key)) => config.error_at(key, e.message),
            Some(Origin::Walrelay) | None => config.error_at("kafka.librdkafka", e.message),
        }
    })
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

/// Checks a complete producer property list the way [`KafkaSink::new`](super::kafka::KafkaSink::new)
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

#[cfg(test)]
mod tests;
