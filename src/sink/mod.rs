//! Where records go: Kafka. [`kafka`] is the producer and its delivery
//! reports, [`error`] why a record or the producer failed and whether
//! retrying helps, [`properties`] the librdkafka properties the producer is
//! made with (built once from the typed configuration, the raw map last, and
//! checked by librdkafka at load), [`probe`] what is asked of the brokers
//! without producing (reachability, TLS, transactions), [`topic`] what they
//! say about a topic.

pub mod error;
pub mod kafka;
pub mod probe;
pub mod properties;
pub mod registry;
pub mod topic;

/// A producer's minimum properties (an unreachable broker, `acks=all`,
/// idempotence) followed by `extra`, as librdkafka takes them.
#[cfg(test)]
fn properties_for_tests(extra: &[(&str, &str)]) -> Vec<(String, String)> {
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
