//! `[kafka]` rules: brokers, security protocol and SASL settings that
//! agree with each other, the `exactly_once` transaction limits, the
//! dead-letter topic, and the librdkafka properties walrelay sets itself
//! (which the raw map may not override).
//!
//! Each rule pushes a [`Problem`] naming the key, what is wrong and the
//! fix; nothing stops at the first problem.

use std::collections::BTreeMap;
use std::time::Duration;

use humantime_serde::re::humantime::format_duration;

use super::{DurationRule, limits, private_key_problem};
use crate::config::Config;
use crate::config::error::{Problem, join_key, quoted};
use crate::config::producer::{librdkafka_property, property_name_problem};
use crate::config::schema::{KafkaConfig, SECURITY_KEYS, SaslMechanism, SecurityProtocol};
use crate::config::template::topic_name_problem;

/// `kafka.transaction_*`: checked whatever `delivery` is, so that a value
/// that would be refused later is refused now.
fn transactions(kafka: &KafkaConfig, out: &mut Vec<Problem>) {
    if !(1..=limits::TRANSACTION_MAX_RECORDS).contains(&kafka.transaction_max_records) {
        out.push(Problem::new(
            "kafka.transaction_max_records",
            format!(
                "must be greater than 0 and at most {} (got {}); it bounds the records of one \
                 Kafka transaction, e.g. 20000",
                limits::TRANSACTION_MAX_RECORDS,
                kafka.transaction_max_records
            ),
        ));
    }
    if !(1..=limits::TRANSACTION_MAX_BYTES).contains(&kafka.transaction_max_bytes) {
        out.push(Problem::new(
            "kafka.transaction_max_bytes",
            format!(
                "must be greater than 0 and at most 16GiB (got {} bytes); it bounds the bytes \
                 of one Kafka transaction, e.g. \"32MiB\"",
                kafka.transaction_max_bytes
            ),
        ));
    }
    DurationRule {
        key: "kafka.transaction_max_time",
        value: kafka.transaction_max_time,
        zero_allowed: false,
        max: limits::TRANSACTION_MAX_TIME,
        example: "100ms",
    }
    .check(out);
    DurationRule {
        key: "kafka.transaction_timeout",
        value: kafka.transaction_timeout,
        zero_allowed: false,
        max: limits::TRANSACTION_TIMEOUT,
        example: "60s",
    }
    .check(out);
    if !kafka.transaction_timeout.is_zero() && kafka.transaction_timeout < Duration::from_secs(1) {
        out.push(Problem::new(
            "kafka.transaction_timeout",
            format!(
                "must be at least 1s (got {}): Kafka counts it in whole milliseconds and a \
                 transaction needs time to commit, e.g. \"60s\"",
                format_duration(kafka.transaction_timeout)
            ),
        ));
    } else if !kafka.transaction_timeout.is_zero()
        && kafka.transaction_max_time >= kafka.transaction_timeout
    {
        out.push(Problem::new(
            "kafka.transaction_max_time",
            format!(
                "must be shorter than kafka.transaction_timeout ({}), or every transaction \
                 would be aborted by the broker (got {}), e.g. \"100ms\"",
                format_duration(kafka.transaction_timeout),
                format_duration(kafka.transaction_max_time)
            ),
        ));
    }
}

/// `[dead_letter] topic`: a valid name of its own, never a topic that
/// carries other records (the offset store, heartbeats, an outbox route's
/// fixed topic), whose readers would take dead letters for their own.
pub(super) fn dead_letter(config: &Config, out: &mut Vec<Problem>) {
    let Some(dl) = &config.dead_letter else {
        return;
    };
    let topic = dl.topic.as_str();
    let clash = |what: String| {
        Problem::new(
            "dead_letter.topic",
            format!(
                "is {what}; dead-letter records would be read as its records: choose a topic \
                 of its own, e.g. \"{}.dead-letter\"",
                config.connector.name
            ),
        )
    };
    if let Some(why) = topic_name_problem(topic) {
        out.push(Problem::new("dead_letter.topic", why));
    } else if topic == config.kafka.offsets_topic {
        out.push(clash(format!(
            "the offset-store topic (kafka.offsets_topic = {})",
            quoted(topic)
        )));
    } else if config.heartbeat.publish && config.heartbeat.topic_for(config.topic_prefix()) == topic
    {
        out.push(clash("the heartbeat topic".into()));
    } else if let Some(i) = config
        .outbox
        .iter()
        .position(|o| o.topic.columns().next().is_none() && o.topic.as_str() == topic)
    {
        out.push(clash(format!("the topic of outbox[{i}]")));
    }
}

pub(super) fn kafka(kafka: &KafkaConfig, out: &mut Vec<Problem>) {
    if kafka.brokers.trim().is_empty() {
        out.push(Problem::new(
            "kafka.brokers",
            "is empty; list at least one broker as host:port, e.g. \"127.0.0.1:9092\" (comma \
             separated for several)",
        ));
    } else {
        for broker in kafka.brokers.split(',').map(str::trim) {
            if broker.contains('@') {
                // Not quoted: user info may hold a password.
                out.push(Problem::new(
                    "kafka.brokers",
                    "an entry holds user info (\"user:password@host:9092\"), which may carry a \
                     password, so it is not repeated here; give host:port only, and the \
                     credentials in kafka.sasl_username and kafka.sasl_password (with \
                     kafka.security_protocol and kafka.sasl_mechanism)",
                ));
                break;
            }
            if broker.is_empty() {
                out.push(Problem::new(
                    "kafka.brokers",
                    format!(
                        "{} has an empty entry; separate brokers with single commas, e.g. \
                         \"kafka1:9092,kafka2:9092\"",
                        quoted(&kafka.brokers)
                    ),
                ));
                break;
            }
            if let Some(why) = broker_problem(broker) {
                out.push(Problem::new(
                    "kafka.brokers",
                    format!("entry {}: {why}", quoted(broker)),
                ));
            }
        }
    }
    DurationRule {
        key: "kafka.linger",
        value: kafka.linger,
        zero_allowed: true,
        max: limits::LINGER,
        example: "5ms",
    }
    .check(out);
    if let Some(behind) = kafka.linger_while_behind {
        DurationRule {
            key: "kafka.linger_while_behind",
            value: behind,
            zero_allowed: true,
            max: limits::LINGER,
            example: "20ms",
        }
        .check(out);
        if behind < kafka.linger {
            out.push(Problem::new(
                "kafka.linger_while_behind",
                format!(
                    "must be at least kafka.linger ({}; got {}); set it equal to kafka.linger \
                     to linger alike at any lag (one producer)",
                    format_duration(kafka.linger),
                    format_duration(behind)
                ),
            ));
        }
    }
    DurationRule {
        key: "kafka.shutdown_flush_timeout",
        value: kafka.shutdown_flush_timeout,
        zero_allowed: true,
        max: limits::SHUTDOWN_FLUSH_TIMEOUT,
        example: "10s",
    }
    .check(out);
    if !(1..=limits::MAX_IN_FLIGHT_RECORDS).contains(&kafka.max_in_flight_records) {
        out.push(Problem::new(
            "kafka.max_in_flight_records",
            format!(
                "must be greater than 0 and at most {} (got {}); it bounds unacknowledged \
                 records, e.g. 100000",
                limits::MAX_IN_FLIGHT_RECORDS,
                kafka.max_in_flight_records
            ),
        ));
    }
    if !(1..=limits::MAX_IN_FLIGHT_BYTES).contains(&kafka.max_in_flight_bytes) {
        out.push(Problem::new(
            "kafka.max_in_flight_bytes",
            format!(
                "must be greater than 0 and at most 16GiB (got {} bytes); it bounds \
                 unacknowledged bytes, e.g. \"64MiB\"",
                kafka.max_in_flight_bytes
            ),
        ));
    }
    if let Some(why) = topic_name_problem(&kafka.offsets_topic) {
        out.push(Problem::new("kafka.offsets_topic", why));
    }
    transactions(kafka, out);
    librdkafka_map(&kafka.librdkafka, out);
    security(kafka, out);
}

/// The typed security keys: each used only with a protocol that needs it,
/// the ones a protocol needs present, files that exist, and no setting given
/// both as a typed key and in `[kafka.librdkafka]`. Reads file metadata
/// (exists, is a file) and nothing else.
fn security(kafka: &KafkaConfig, out: &mut Vec<Problem>) {
    for (key, properties) in SECURITY_KEYS {
        let typed_set = match *key {
            "kafka.security_protocol" => kafka.security_protocol.is_some(),
            "kafka.sasl_mechanism" => kafka.sasl_mechanism.is_some(),
            "kafka.sasl_username" => kafka.sasl_username.is_some(),
            "kafka.sasl_password" => kafka.sasl_password.is_some(),
            "kafka.ssl_ca" => kafka.ssl_ca.is_some(),
            "kafka.ssl_certificate" => kafka.ssl_certificate.is_some(),
            "kafka.ssl_key" => kafka.ssl_key.is_some(),
            "kafka.ssl_key_password" => kafka.ssl_key_password.is_some(),
            _ => kafka.ssl_verify_hostname.is_some(),
        };
        if !typed_set {
            continue;
        }
        for property in properties
            .iter()
            .filter(|p| kafka.librdkafka.contains_key(**p))
        {
            out.push(Problem::new(
                join_key("kafka.librdkafka", property),
                format!(
                    "sets the same thing as {key}; keep one of them (the typed key {key} is \
                     checked at load time, so remove this entry)"
                ),
            ));
        }
    }
    let raw = |p: &str| kafka.librdkafka.contains_key(p);
    let protocol = kafka.security_protocol;
    let sasl = protocol.is_some_and(|p| p.uses_sasl());
    let tls = protocol.is_some_and(|p| p.uses_tls());
    let need = |what: &str| match protocol {
        None => format!(
            "is set but kafka.security_protocol is not; set kafka.security_protocol = {what}"
        ),
        Some(p) => format!(
            "is only used with kafka.security_protocol = {what}, but it is {}; change the \
             protocol or remove this key",
            quoted(p.as_str())
        ),
    };
    if !sasl {
        let needs_sasl = "\"sasl_ssl\" (or \"sasl_plaintext\")";
        for (key, set) in [
            ("kafka.sasl_mechanism", kafka.sasl_mechanism.is_some()),
            ("kafka.sasl_username", kafka.sasl_username.is_some()),
            ("kafka.sasl_password", kafka.sasl_password.is_some()),
        ] {
            if set {
                out.push(Problem::new(key, need(needs_sasl)));
            }
        }
    } else {
        for (key, set, example) in [
            (
                "kafka.sasl_mechanism",
                kafka.sasl_mechanism.is_some() || raw("sasl.mechanisms") || raw("sasl.mechanism"),
                "\"SCRAM-SHA-512\" (or \"SCRAM-SHA-256\", \"PLAIN\")",
            ),
            (
                "kafka.sasl_username",
                kafka.sasl_username.is_some() || raw("sasl.username"),
                "the user the brokers know walrelay as",
            ),
            (
                "kafka.sasl_password",
                kafka.sasl_password.is_some() || raw("sasl.password"),
                "\"${WALRELAY_KAFKA_PASSWORD}\" (from the environment)",
            ),
        ] {
            if !set {
                out.push(Problem::new(
                    key,
                    format!(
                        "is missing: kafka.security_protocol = {} authenticates with SASL; set \
                         it, e.g. {example}",
                        quoted(protocol.map_or("", |p| p.as_str()))
                    ),
                ));
            }
        }
        if kafka.security_protocol == Some(SecurityProtocol::SaslPlaintext)
            && kafka.sasl_mechanism == Some(SaslMechanism::Plain)
        {
            out.push(Problem::new(
                "kafka.sasl_mechanism",
                "PLAIN over sasl_plaintext sends the password in the clear; use \
                 kafka.security_protocol = \"sasl_ssl\" (or a SCRAM mechanism)",
            ));
        }
    }
    let tls_files = [
        (
            "kafka.ssl_ca",
            &kafka.ssl_ca,
            "the CA certificate(s) that signed the brokers' certificates",
        ),
        (
            "kafka.ssl_certificate",
            &kafka.ssl_certificate,
            "walrelay's client certificate",
        ),
        (
            "kafka.ssl_key",
            &kafka.ssl_key,
            "the client certificate's private key",
        ),
    ];
    let needs_tls = "\"ssl\" or \"sasl_ssl\"";
    for (key, path, what) in tls_files {
        let Some(path) = path else { continue };
        if !tls {
            out.push(Problem::new(key, need(needs_tls)));
        } else if !path.is_file() {
            out.push(Problem::new(
                key,
                format!(
                    "{} is not a readable file; give the path of the PEM file holding {what}",
                    path.display()
                ),
            ));
        } else if key == "kafka.ssl_key"
            && let Some(why) = private_key_problem(path)
        {
            out.push(Problem::new(key, why));
        }
    }
    if kafka.ssl_key_password.is_some() && !tls {
        out.push(Problem::new("kafka.ssl_key_password", need(needs_tls)));
    }
    if kafka.ssl_verify_hostname.is_some() && !tls {
        out.push(Problem::new("kafka.ssl_verify_hostname", need(needs_tls)));
    } else if kafka.ssl_verify_hostname == Some(false) && kafka.ssl_ca.is_none() {
        out.push(Problem::new(
            "kafka.ssl_verify_hostname",
            "false needs kafka.ssl_ca: without host-name checks and with the system's trust \
             store, any certificate a public CA issued for any host would pass; pin kafka.ssl_ca \
             to the PEM file of the private CA that signed the brokers' certificates, or remove \
             the key",
        ));
    }
    if tls {
        match (&kafka.ssl_certificate, &kafka.ssl_key) {
            (Some(_), None) => out.push(Problem::new(
                "kafka.ssl_key",
                "is missing: kafka.ssl_certificate is set, and a client certificate needs its \
                 private key; set kafka.ssl_key to the key's PEM file",
            )),
            (None, Some(_)) => out.push(Problem::new(
                "kafka.ssl_certificate",
                "is missing: kafka.ssl_key is set, and a private key needs its certificate; \
                 set kafka.ssl_certificate to the certificate's PEM file",
            )),
            _ => {}
        }
        if kafka.ssl_key_password.is_some() && kafka.ssl_key.is_none() {
            out.push(Problem::new(
                "kafka.ssl_key_password",
                "is set but kafka.ssl_key is not; it is the password of an encrypted \
                 kafka.ssl_key, so set that or remove this key",
            ));
        }
    }
}

/// What is wrong with one `kafka.brokers` entry, written
/// `[scheme://]host[:port]` as librdkafka reads it (IPv6 in brackets);
/// without a port librdkafka uses 9092.
fn broker_problem(entry: &str) -> Option<String> {
    const EXAMPLE: &str = "write host:port, e.g. \"kafka-1:9092\" or \"[::1]:9092\"";
    if entry.chars().any(char::is_whitespace) {
        return Some("contains whitespace; separate brokers with commas".to_owned());
    }
    let address = entry.split_once("://").map_or(entry, |(_, rest)| rest);
    let (host, port) = if let Some(bracketed) = address.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            return Some(format!("'[' is not closed by ']'; {EXAMPLE}"));
        };
        if after.is_empty() {
            (host, None)
        } else if let Some(port) = after.strip_prefix(':') {
            (host, Some(port))
        } else {
            return Some(format!("unexpected text after ']'; {EXAMPLE}"));
        }
    } else {
        match address.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => {
                return Some(format!("write an IPv6 address in brackets; {EXAMPLE}"));
            }
            Some((host, port)) => (host, Some(port)),
            None => (address, None),
        }
    };
    if host.is_empty() {
        return Some(format!("the host is missing; {EXAMPLE}"));
    }
    let host_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '%');
    if host.len() > 253 || !host.chars().all(host_char) {
        return Some(format!(
            "{} is not a host name or IP address (letters, digits, '.', '-', at most 253 \
             characters); {EXAMPLE}",
            quoted(host)
        ));
    }
    match port {
        None => None,
        Some("") => Some(format!("the port after ':' is missing; {EXAMPLE}")),
        Some(port) => match port.parse::<u16>() {
            Ok(1..) => None,
            _ => Some(format!(
                "port {} is not a number from 1 to 65535; {EXAMPLE}",
                quoted(port)
            )),
        },
    }
}

fn librdkafka_map(map: &BTreeMap<String, String>, out: &mut Vec<Problem>) {
    for (key, value) in map {
        let why = property_name_problem(key).or_else(|| librdkafka_property(key, value).err());
        if let Some(why) = why {
            out.push(Problem::new(join_key("kafka.librdkafka", key), why));
        }
    }
}
