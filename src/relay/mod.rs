//! The relay: one replication session from slot to Kafka, and the loop that
//! restarts it (`supervisor`); why a session stops is `error`'s.
//!
//! Wiring only. Data moves one way: [`Source`](crate::source::Source) (replication stream, relation
//! cache, transactions) → [`Router`](crate::router::Router) → [`KafkaSink`]. Acknowledgements move
//! back: delivery reports return each record's [`Token`] on a channel and
//! advance the [`Checkpoint`](crate::checkpoint::Checkpoint); the
//! checkpoint's confirmed position is written to the offset store, and only an
//! *acknowledged* offset write is reported to PostgreSQL as the slot's flush
//! position.
//!
//! Invariants kept here (the pieces keep their own):
//! - **Lease first, and only while held.** Each pass of the outer loop
//!   first holds the connector's lease ([`crate::source::lease`]), waiting
//!   as a standby while another instance holds it; a session is set up and
//!   runs only under a held lease, and the moment it is lost the session is
//!   dropped where it stands (no further record produced — dropping the
//!   producer purges its queue — nothing further confirmed).
//! - **Confirm only what Kafka holds.** The status update's flush LSN is
//!   always an offset-store write that Kafka acknowledged, and that write
//!   carried `checkpoint.confirmed()`, which covers only fully acked
//!   transactions. So the slot is never ahead of Kafka, nor of the offset store.
//! - **A heartbeat is a transaction.** A walrelay heartbeat message
//!   (`[heartbeat]`, see `heartbeat.rs`) enters the checkpoint as a
//!   transaction of its own ending at the message, with its heartbeat record
//!   when published: the frontier reaches it only over an acknowledged prefix.
//!   The writer runs only while a session streams and never ends one.
//! - **Bounded memory.** While the checkpoint is full, the socket is not read
//!   (TCP backpressure reaches the walsender), but status updates keep going
//!   so the walsender does not time us out.
//! - **Never skip silently.** Decode, route, delivery and frontier errors end
//!   the session before the position passes the offending change.
//! - **Errors say what to do.** Each error is transient (the outer loop
//!   retries with capped exponential backoff, logging once per state change)
//!   or definite (the connector stops with the explanation).

mod dead_letter;
mod error;
mod heartbeat;
pub(crate) mod incremental;
mod messages;
mod offset_writer;
mod outbox;
mod pace;
mod publish;
mod retention;
mod session;
mod signal;
mod slot_watch;
mod snapshot;
mod streaming;
mod supervisor;
mod table_events;
pub(crate) mod topic_metric;
mod transaction_clock;
mod watchdog;

use std::time::Duration;

use crate::Lsn;
use crate::checkpoint::TxnId;
use crate::sink::kafka::KafkaSink;
use crate::telemetry;

pub use error::{ErrorAbout, ErrorClass, RelayError};
pub(crate) use error::{explain_stream_error, stopped_by_signal};
pub use signal::{SIGNAL_PREFIX, signal_json, stop_signal_json};
pub use supervisor::{RunOptions, run};

/// What a produced record stands for: handed to the sink with the record,
/// and back with its delivery report (the sink never looks inside).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// A record of transaction `txn`, committed at `commit_lsn`; `index` is
    /// the change's position in its transaction.
    Record {
        txn: TxnId,
        bytes: usize,
        commit_lsn: Lsn,
        index: u64,
        /// The event's id, to name it in errors.
        event_id: Option<EventId>,
        /// For a snapshot record: its batch (`source::SnapshotChunk::id`).
        snapshot_chunk: Option<u32>,
        /// The transaction's commit time, ms since 1970 (0: none, e.g. a
        /// snapshot record), for `walrelay_commit_to_ack_seconds`.
        commit_ms: i64,
    },
    /// An offset-store write for position `lsn`.
    Offset { lsn: Lsn },
}

/// How a record names its event in errors (never by its payload); the
/// router sets it on each record it builds.
pub use crate::router::EventId;

/// The producer, carrying [`Token`]s.
pub(crate) type Sink = KafkaSink<Token>;
/// A delivery report for one [`Token`].
pub(crate) type Ack = crate::sink::kafka::Ack<Token>;

/// A producer built from `config` whose broker never answers (tests point
/// `brokers` at a closed port): records stay in flight for as long as a
/// test needs.
#[cfg(test)]
fn sink_for_tests(
    config: &crate::config::Config,
) -> (Sink, tokio::sync::mpsc::UnboundedReceiver<Ack>) {
    let outage = std::sync::Arc::new(telemetry::outage::OutageLog::new("Kafka", Duration::ZERO));
    Sink::new(
        &crate::sink::properties::producer_properties(config),
        outage,
    )
    .expect("a producer from a valid test configuration")
}

/// How long Kafka may leave records unacknowledged before we warn.
const STALL_WARNING: Duration = telemetry::STALL;
