//! Where records go: Kafka. [`kafka`] is the producer and its delivery
//! reports; [`properties`] the librdkafka properties it is made with, built
//! once from the typed configuration, the raw map last.

pub mod kafka;
pub mod properties;
