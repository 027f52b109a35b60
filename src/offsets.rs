//! The offset store: where walrelay remembers how far Kafka holds the stream.
//!
//! A compacted Kafka topic (default `walrelay.offsets`) keyed by connector
//! name; each value is a JSON [`StoredOffset`] naming the cluster (system
//! identifier, timeline), the slot and the confirmed LSN.
//!
//! Invariants:
//! - A position is written here, and the write acknowledged, *before* it is
//!   reported to PostgreSQL (the relay enforces this by reporting only
//!   acknowledged offsets). So in normal operation the slot is never ahead of
//!   the stored offset.
//! - At start, [`compare`] classifies the slot against the stored offset:
//!   slot behind or equal, on the same cluster, slot and timeline, is normal,
//!   and streaming resumes at the stored offset (below it everything is in
//!   Kafka; the walsender skips what committed before it, so a slot that
//!   forgot its progress in a PostgreSQL restart re-sends nothing); slot
//!   ahead, slot lost, a different cluster, slot
//!   or timeline is an error with a recovery hint — never a silent jump over
//!   events that were never published, nor a silent re-use of LSNs.
//! - The topic stays small: a connector writes about one offset a second, so
//!   the topic must be compacted, and compacted often (see [`TOPIC_CONFIG`]).
//!   An existing topic that is not `cleanup.policy=compact` is refused.
//! - [`OffsetStore::load`] reads to the end however big the topic is, as long
//!   as Kafka keeps delivering: its limit is on *stalls*, not on the total.
//!
//! Three parts: `stored` the schema of a record and its JSON, `decision` the
//! start-up comparison of slot and stored offset, `store` the topic.

mod decision;
mod store;
mod stored;

pub use decision::{Server, SlotPosition, StartDecision, compare, switch_point};
pub use store::{OffsetStore, OffsetStoreError, TOPIC_CONFIG};
pub use stored::{
    AcceptedGap, IncrementalProgress, IncrementalTableProgress, SnapshotPart, SnapshotProgress,
    SnapshotState, StoredOffset,
};
