//! Where records go. Today: Kafka ([`kafka`]).

pub mod kafka;
