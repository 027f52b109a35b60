//! The consumer side: a reference **inbox** that applies each walrelay event
//! once to the consuming service's PostgreSQL database.
//!
//! walrelay delivers at least once; a re-sent event carries the same `id`
//! header. This module is the other half: a Kafka consumer
//! (`isolation.level=read_committed`, no auto-commit) that, for each record,
//! in **one** PostgreSQL transaction inserts the event id into an inbox table
//! (`ON CONFLICT DO NOTHING`) and, only if the row is new, runs the
//! [`Handler`]; then commits. Kafka offsets are committed afterwards, and
//! only up to the contiguous completion frontier ([`frontier`]).
//!
//! Invariants:
//! 1. **Once.** An event's effect and its inbox row commit together or not
//!    at all; an event whose id is in the inbox is skipped (counted as a
//!    duplicate). A crash anywhere — also between the PostgreSQL commit and
//!    the Kafka offset commit — re-delivers records whose effects are
//!    already committed, and the inbox skips them.
//! 2. **Nothing skipped.** The offset committed for a partition is its
//!    [`frontier::Frontier::position`]: never past a record still in
//!    progress (running, waiting to retry, or stopped).
//! 3. **Order per key.** Records of one key (per topic and partition) are
//!    applied one at a time, in offset order ([`frontier::KeyOrder`]);
//!    records of other keys run on other workers meanwhile.
//! 4. **Bounded.** At most `max_in_flight` records are received and not
//!    done; at the bound the consumer stops polling Kafka.
//! 5. **Failures are explicit.** A handler error (or panic) is retried with exponential
//!    backoff; after `max_attempts` the record is quarantined (a row with the
//!    record and the last error). Then, per `on_quarantine`, the partition
//!    goes on (the inbox row is written with the quarantine row, so a re-sent
//!    copy is skipped too) or stops at the record (no inbox row; the frontier
//!    stays below it, and a restart tries it again). A lost database
//!    connection is not the handler's fault: it is retried without counting
//!    an attempt.
//!
//! Task states ([`TaskState`]): Ready (received, waiting for a worker or
//! behind an earlier record of its key) → Running → Done, or Running →
//! RetryWait → Running …, or → Quarantined.
//!
//! Why a subcommand (`walrelay inbox --config FILE`, [`run`]) besides the
//! library: an operator gets a runnable, monitored consumer for the common
//! case (a SQL statement per event, [`SqlHandler`]) from the binary they
//! already deploy, and the library form ([`Handler`], [`run_with`]) serves
//! services that want Rust code in the transaction. An `examples/` program
//! would not be built, shipped or tested like the binary is.
//!
//! This module must not know the connector's side: it imports nothing from
//! `relay`, `source`, `sink`, `checkpoint` or `offsets`, and of `pg` only
//! `pg::tls` — it reads Kafka and writes its own database, over TLS set up
//! as the connector's connections set it up (libpq's `sslmode` meanings).
//! It uses `telemetry`'s HTTP endpoint and `config`'s value quoting and
//! file-position machinery only.

pub mod config;
mod consumer;
pub mod frontier;
mod metrics;
mod sql_handler;
mod store;

use std::future::Future;

pub use config::{InboxConfig, OnQuarantine, Param};
pub use consumer::{InboxError, run, run_with};
pub use metrics::InboxMetrics;
pub use sql_handler::SqlHandler;
pub use store::{InboxTables, WorkOutcome};

/// Connects to the consuming service's database as the inbox does:
/// `url` is a libpq URL (`inbox.postgres.url`), its `sslmode` with
/// libpq's meanings (default `prefer`: TLS when the server offers it,
/// no certificate check; `require`: TLS, no check; `verify-ca`,
/// `verify-full`: checked against `sslrootcert`). The error names the
/// server and the `sslmode`, never the URL.
pub async fn connect(url: &secrecy::SecretString) -> Result<tokio_postgres::Client, String> {
    store::connect(url).await.map_err(|e| e.to_string())
}

/// One Kafka record, as the handler sees it.
#[derive(Debug, Clone)]
pub struct Event {
    /// The event id: the first of `id_headers` present.
    pub id: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
    /// The record's timestamp, milliseconds since the Unix epoch.
    pub timestamp_ms: Option<i64>,
}

impl Event {
    /// The first header called `name`.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// A handler's failure: retried, then quarantined with this text.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// Applies one event inside the inbox's transaction.
///
/// Called only for an event id not yet in the inbox, with the inbox row
/// already inserted in `tx`; everything the handler writes through `tx`
/// commits with that row or not at all. It must not commit, and should not
/// have effects outside `tx` (they would not be undone on a retry or a
/// crash). An error rolls the transaction back; the record is retried and,
/// after `max_attempts`, quarantined. A panic is caught and counts as an
/// error (`the handler panicked: <message>`); the worker goes on.
pub trait Handler: Send + Sync + 'static {
    fn apply<'a>(
        &'a self,
        tx: &'a tokio_postgres::Transaction<'a>,
        event: &'a Event,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a;
}

/// Where a record is in its life (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    Ready,
    Running,
    RetryWait,
    Quarantined,
    Done,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Ready => "ready",
            TaskState::Running => "running",
            TaskState::RetryWait => "retry_wait",
            TaskState::Quarantined => "quarantined",
            TaskState::Done => "done",
        }
    }
}
