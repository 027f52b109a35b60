//! The raw `[kafka.librdkafka]` properties walrelay refuses, and why.
//!
//! Both validation (which reports a refused property as a problem) and
//! `crate::sink::properties` (which leaves one out of a
//! hand-built, unvalidated config) ask the same functions here, so the two
//! cannot disagree. This module depends on no other part of the schema.
//!
//! Invariant: no property accepted here can weaken `acks=all`,
//! `enable.idempotence=true` or `partitioner=murmur2_random`, or replace a
//! setting that has its own typed key (`kafka.brokers`, `kafka.compression`,
//! `kafka.linger`).

use super::error::quoted;

/// librdkafka's property names use only `a-z`, `0-9`, `.` and `_`. A name
/// differing in case or spacing ("SASL.Password", "sasl.password ") is
/// refused here, by name: librdkafka's own error would repeat the value,
/// which is often a secret.
pub(crate) fn property_name_problem(key: &str) -> Option<String> {
    if key.is_empty() {
        return Some("an empty property name; remove it".to_owned());
    }
    let ok = key
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '_');
    if ok {
        return None;
    }
    let fixed: String = key
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase();
    Some(format!(
        "librdkafka property names use only lower-case letters, digits, '.' and '_', without \
         spaces; write {} (the names are listed in librdkafka's CONFIGURATION.md)",
        quoted(&fixed)
    ))
}

/// Whether a raw librdkafka property may be set, and if not, why. Values of
/// the properties checked here are not secret, so they may be quoted.
pub(crate) fn librdkafka_property(key: &str, value: &str) -> Result<(), String> {
    let v = value.trim();
    let weakens = |what: &str| format!("{} weakens a delivery guarantee: {what}", quoted(v));
    match key.trim().to_ascii_lowercase().as_str() {
        "" => Err("an empty property name; remove it".to_owned()),
        "acks" | "request.required.acks" => match v.to_ascii_lowercase().as_str() {
            "all" | "-1" => Ok(()),
            _ => Err(weakens(
                "walrelay needs acks=all, or a broker failover can lose records whose WAL \
                 PostgreSQL has already been allowed to recycle; remove the key (walrelay sets \
                 acks=all)",
            )),
        },
        "enable.idempotence" => match v.to_ascii_lowercase().as_str() {
            "true" | "t" | "1" => Ok(()),
            _ => Err(weakens(
                "the idempotent producer keeps retries from duplicating or reordering an \
                 aggregate's records; remove the key (walrelay sets enable.idempotence=true)",
            )),
        },
        "partitioner" => match v {
            "murmur2_random" => Ok(()),
            _ => Err(weakens(
                "records must be partitioned with murmur2_random so keys land on the same \
                 partitions as Java producers such as Debezium; remove the key",
            )),
        },
        "bootstrap.servers" | "metadata.broker.list" => {
            Err("set the brokers with kafka.brokers instead; remove this key".to_owned())
        }
        "compression.type" | "compression.codec" => {
            Err("set the codec with kafka.compression instead; remove this key".to_owned())
        }
        "linger.ms" | "queue.buffering.max.ms" => Err(
            "set the linger time with kafka.linger (e.g. \"5ms\") instead; remove this key"
                .to_owned(),
        ),
        "max.in.flight.requests.per.connection" | "max.in.flight" => match v.parse::<i64>() {
            Ok(1..=5) => Ok(()),
            _ => Err(weakens(
                "the idempotent producer keeps per-partition order only with 1 to 5 requests \
                 in flight; use a value from 1 to 5 or remove the key",
            )),
        },
        "retries" | "message.send.max.retries" => match v.parse::<i64>() {
            Ok(n) if n > 0 => Ok(()),
            _ => Err(weakens(
                "the idempotent producer needs retries > 0; remove the key or set a positive \
                 number",
            )),
        },
        "transactional.id" => Err(
            "walrelay sets the transactional id itself with kafka.delivery = \"exactly_once\" \
             (walrelay-<connector.name>, the same for every instance so that a new active one \
             fences the last); remove the key"
                .to_owned(),
        ),
        "transaction.timeout.ms" => Err(
            "set it with kafka.transaction_timeout (e.g. \"60s\") instead; remove this key"
                .to_owned(),
        ),
        _ => Ok(()),
    }
}
