//! `check`'s Kafka lines: the brokers reached with the producer's own
//! properties (and the TLS version a handshake of our own negotiates), the
//! principal's right to use transactions under `exactly_once`, the
//! dead-letter topic, and the offset store.
//!
//! Reaching the brokers and reading the offset store are
//! [`crate::commands::probe`]'s, which `status` shares. Nothing here writes
//! to Kafka: transactions are tried under a probe id of their own, the
//! dead-letter topic is described, not written.

use std::time::Duration;

use crate::commands::probe::{StoredRead, reach_kafka, read_offset_store};
use crate::config::Config;
use crate::offsets;
use crate::sink::probe::{probe_transactions, tls_handshake};
use crate::sink::properties::{producer_properties, transactional_id};
use crate::sink::topic::{TopicState, describe_topic};

use super::{Outcome, Report, fail};

/// `delivery = "exactly_once"`: whether the principal may use Kafka
/// transactions, tried with `<transactional id>.check` (registering the
/// connector's own id would fence the running instance; a prefixed ACL on
/// the id covers both).
async fn check_transactions(config: &Config, props: &[(String, String)], report: &mut Report) {
    let id = transactional_id(config);
    let probe_id = format!("{id}.check");
    let tried = {
        let props = props.to_vec();
        let probe_id = probe_id.clone();
        tokio::task::spawn_blocking(move || {
            probe_transactions(&props, &probe_id, Duration::from_secs(10))
        })
        .await
    };
    match tried {
        Ok(Ok(())) => report.push(
            "transactions",
            Outcome::Ok(format!(
                "delivery = exactly_once: the brokers accept transactional id {probe_id} (run \
                 uses {id}; consumers must read with isolation.level=read_committed)"
            )),
        ),
        Ok(Err(e)) => {
            let (problem, fix) = e.message.rsplit_once("; ").unwrap_or((
                e.message.as_str(),
                "check that the brokers support transactions (Kafka 0.11+) and that their \
                 transaction coordinator works: on a cluster with fewer brokers than \
                 transaction.state.log.replication.factor (3 by default) it never does",
            ));
            report.push("transactions", fail(problem, fix));
        }
        Err(e) => report.push("transactions", fail(e.to_string(), "report this as a bug")),
    }
}

/// `[dead_letter] topic`: exists, or will be created on the first dead
/// letter (the broker's `auto.create.topics.enable`), and may be described
/// (an ACL). Writing is not tried: `check` sends nothing.
async fn check_dead_letter(topic: &str, props: &[(String, String)], report: &mut Report) {
    let outcome = match describe_topic(props, topic, Duration::from_secs(10)).await {
        Ok(TopicState::Exists {
            partitions,
            max_message_bytes,
        }) => Outcome::Ok(format!(
            "{topic} exists ({partitions} partition(s), max.message.bytes {}); a change that \
             cannot be published goes there instead of stopping the connector (the WRITE ACL \
             is proven only by the first dead letter)",
            max_message_bytes.as_deref().unwrap_or("not readable")
        )),
        Ok(TopicState::Missing {
            auto_create: Some(true),
        }) => Outcome::Warn(format!(
            "{topic} does not exist; the broker creates it at the first dead letter \
             (auto.create.topics.enable = true) with its default settings: create it \
             yourself to choose its retention and partitions"
        )),
        Ok(TopicState::Missing {
            auto_create: Some(false),
        }) => fail(
            format!(
                "{topic} does not exist and the broker does not create topics on first write \
                 (auto.create.topics.enable = false)"
            ),
            format!(
                "create it, e.g. kafka-topics.sh --create --topic {topic} (a dead letter to a \
                 missing topic stops the connector)"
            ),
        ),
        Ok(TopicState::Missing { auto_create: None }) => Outcome::Warn(format!(
            "{topic} does not exist, and whether the broker creates it at the first dead \
             letter is unknown (auto.create.topics.enable is not readable here): create it, \
             or a dead letter may stop the connector"
        )),
        Ok(TopicState::Denied(code)) => fail(
            format!("may not describe {topic} ({code})"),
            format!(
                "grant the connector's principal WRITE and DESCRIBE on topic {topic} \
                 (docs/security.md, \"ACLs walrelay needs\")"
            ),
        ),
        Err(e) => fail(e.message, "check that the brokers are reachable".to_owned()),
    };
    report.push("dead-letter topic", outcome);
}

/// Kafka reachability and the stored offset. Returns `Some(stored)` when the
/// offset store could be read.
pub(super) async fn check_kafka(
    config: &Config,
    report: &mut Report,
) -> Option<Option<offsets::StoredOffset>> {
    let props = producer_properties(config);
    let brokers = config.kafka.bootstrap_servers();
    let probe = match reach_kafka(&props).await {
        Ok(probe) => probe,
        Err(f) => {
            report.push("kafka", fail(f.problem, f.fix));
            return None;
        }
    };
    // librdkafka does not say which TLS version it negotiated; a handshake
    // of our own with the same settings does.
    let tls = if probe.protocol.ends_with("ssl") {
        let props = props.clone();
        match tokio::task::spawn_blocking(move || tls_handshake(&props, Duration::from_secs(10)))
            .await
        {
            Ok(Ok(negotiated)) => format!("; negotiated {negotiated}"),
            Ok(Err(why)) => format!("; TLS version unknown ({why})"),
            Err(e) => format!("; TLS version unknown ({e})"),
        }
    } else {
        String::new()
    };
    let answered = format!(
        "{brokers} answered ({} broker(s)) {probe}{tls}",
        probe.brokers
    );
    // Plaintext: neither encrypted nor authenticated, said the way an
    // unverified PostgreSQL connection is.
    let outcome = if probe.protocol.ends_with("ssl") {
        Outcome::Ok(answered)
    } else {
        Outcome::Warn(format!(
            "{answered}; WITHOUT TLS: records and credentials cross the network in the clear \
             and the brokers are not authenticated; set kafka.security_protocol = \"ssl\" or \
             \"sasl_ssl\" unless the network is trusted"
        ))
    };
    report.push("kafka", outcome);
    if config.kafka.delivery == crate::config::Delivery::ExactlyOnce {
        check_transactions(config, &props, report).await;
    }
    if let Some(dl) = &config.dead_letter {
        check_dead_letter(&dl.topic, &props, report).await;
    }
    let topic = &config.kafka.offsets_topic;
    let (outcome, stored) = match read_offset_store(config, &props).await {
        Ok(StoredRead::NoTopic) => (
            Outcome::Ok(format!(
                "{topic} does not exist yet; run will create it (compacted)"
            )),
            Some(None),
        ),
        Ok(StoredRead::Nothing) => (
            Outcome::Ok(format!("no offset stored yet in {topic}")),
            Some(None),
        ),
        Ok(StoredRead::At(s)) => (
            Outcome::Ok(format!("{topic} holds {} for slot {}", s.lsn, s.slot)),
            Some(Some(*s)),
        ),
        Err(f) => (fail(f.problem, f.fix), None),
    };
    report.push("offset store", outcome);
    stored
}

/// The offset store read again, now that the slot has been read: a running
/// connector stores a position before it confirms it to the slot, so the
/// store read before the slot (by [`check_kafka`]) can be behind a slot that
/// moved in between — a slot "ahead of the stored offset" that is not. Read
/// in the connector's own order (slot, then store), `slot ≤ stored` holds
/// for a running connector. Keeps the first read if this one fails (it was
/// reported above), and reads nothing when that one failed.
pub(super) async fn reread_after_slot(
    config: &Config,
    first: Option<Option<offsets::StoredOffset>>,
) -> Option<Option<offsets::StoredOffset>> {
    first.as_ref()?;
    match read_offset_store(config, &producer_properties(config)).await {
        Ok(StoredRead::NoTopic | StoredRead::Nothing) => Some(None),
        Ok(StoredRead::At(s)) => Some(Some(*s)),
        Err(_) => first,
    }
}
