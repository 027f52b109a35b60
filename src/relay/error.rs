//! Why a session or the connector stopped: [`RelayError`], its class
//! (transient: the supervisor retries; resync: the slot needs an operator;
//! definite: the connector stops with the explanation), what failed (for
//! `walrelay_session_errors_by_cause`) and what it is about ([`ErrorAbout`]:
//! table, LSN, event, as log fields).
//!
//! Invariants:
//! - An error says what to do: a refusal carries its hint, a set-up error
//!   its fix.
//! - Nothing secret and no payload: an event is named by its id.

use crate::Lsn;
use crate::checkpoint::CheckpointError;
use crate::config::Config;
use crate::offsets;
use crate::pg::catalog::CatalogError;
use crate::pg::wire::WireError;
use crate::pgoutput::DecodeError;
use crate::router::RouteError;
use crate::sink::error::{SinkError, SinkErrorKind};
use crate::source::SourceError;
use crate::startup::CheckError;

use super::transaction_clock;

/// Why a session or the connector stopped.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("cannot decode the replication stream at {lsn}: {source}")]
    Decode { lsn: Lsn, source: DecodeError },
    #[error("replication stream out of order at {lsn}: {what}")]
    Stream { lsn: Lsn, what: String },
    #[error(transparent)]
    Route(#[from] RouteError),
    /// A streamed row that cannot be routed, named by its id and the end of
    /// its transaction, which is what skips it.
    #[error(
        "cannot route outbox row of {} (column {}{}, commit LSN {}, transaction ends at \
         {end_lsn}): {}; {}. To skip the rest of this transaction deliberately (its rows before \
         this one are published already): SELECT pg_replication_slot_advance('{slot}', \
         '{end_lsn}'); then start with --accept-slot-position and re-publish its other rows \
         with walrelay republish (docs/operations.md, \"A row cannot be routed\")",
        error.table,
        error.column,
        row_id.as_deref().map(|id| format!(", row id {id}")).unwrap_or_default(),
        error.lsn,
        error.reason,
        error.fix
    )]
    Unroutable {
        error: Box<RouteError>,
        row_id: Option<String>,
        end_lsn: Lsn,
        slot: String,
    },
    #[error(transparent)]
    TableEvent(#[from] crate::router::table::TableEventError),
    #[error("Kafka rejected {event} for topic {topic:?} (transaction committed at {lsn}): {error}")]
    Delivery {
        topic: String,
        lsn: Lsn,
        /// Which event: the outbox row id when known.
        event: String,
        error: SinkError,
        /// The producer refused it when handed it (a client-side check, e.g.
        /// its size): nothing of it, and nothing after it, is queued, so the
        /// records queued before it may still be delivered.
        at_send: bool,
    },
    #[error("Kafka: {0}")]
    Sink(SinkError),
    /// A record's schema id could not be had from the schema registry
    /// (`format = "avro" | "json_schema" | "protobuf"`): nothing of it was
    /// sent.
    #[error(
        "schema registry: no schema id for a record of {table} to topic {topic:?} (transaction \
         committed at {lsn}{}): {error}{}",
        change.as_ref().map(|c| format!("; {c}")).unwrap_or_default(),
        if error.is_transient() {
            "; retrying (the record waits, the slot does not pass it)".to_owned()
        } else {
            format!(". What to do: {}", error.fix())
        }
    )]
    SchemaRegistry {
        table: String,
        topic: String,
        lsn: Lsn,
        /// Table events: what the DDL that made the record's schemas
        /// changed (`the table changed at …: column amount: int4 → text`).
        change: Option<std::sync::Arc<str>>,
        error: Box<crate::sink::registry::RegistryError>,
    },
    /// `exactly_once`: one PostgreSQL transaction (or the initial snapshot)
    /// kept its Kafka transaction open past `kafka.transaction_timeout`
    /// (see `transaction_clock`): a retry would fail the same way.
    #[error("{0}")]
    TransactionOverrun(Box<transaction_clock::Overrun>),
    #[error("offset store: {0}")]
    Offsets(#[from] offsets::OffsetStoreError),
    #[error("internal consistency check failed: {0}")]
    Checkpoint(#[from] CheckpointError),
    #[error("refusing to start: {reason}. What to do: {hint}")]
    Refused { reason: String, hint: String },
    #[error("{what}. What to do: {fix}")]
    Setup { what: String, fix: String },
    #[error("{0} ended unexpectedly")]
    Ended(&'static str),
    #[error("snapshot: {0}; the next start takes the snapshot again from the beginning")]
    Snapshot(#[from] crate::pg::snapshot::SnapshotError),
    /// A start-up check refused ([`CheckError::Setup`], [`CheckError::Refused`]),
    /// in its own words.
    #[error(transparent)]
    Check(CheckError),
    /// The slot changed under this session ([`crate::source::slot`]): lost,
    /// moved by another actor, or gone right after its creation.
    #[error("{}", slot_trouble(.0))]
    Slot(SourceError),
    /// The lease connection ended or stopped answering: this instance may
    /// no longer be the active one. The session was dropped at once.
    #[error(
        "lost the lease (its PostgreSQL connection ended or stopped answering): stopped \
         publishing and confirming at once; taking it again, or waiting as a standby"
    )]
    LeaseLost,
    /// A transaction PostgreSQL streamed while it ran could not be written
    /// to or read from its spill file (`SourceError::Spill`): retried — the
    /// walsender sends it again from its first block.
    #[error(transparent)]
    Spill(SourceError),
}

impl From<CheckError> for RelayError {
    fn from(e: CheckError) -> RelayError {
        match e {
            CheckError::Catalog(e) => RelayError::Catalog(e),
            e @ (CheckError::Setup { .. } | CheckError::Refused { .. }) => RelayError::Check(e),
        }
    }
}

/// SQLSTATE `undefined_object`: what the walsender raises for a
/// publication it cannot find (`GetPublicationByName`).
const UNDEFINED_OBJECT: &str = "42704";

/// The objects an `undefined_object` error of the walsender may be about,
/// as the catalog has them once the error arrived (the server's error has
/// no field naming the object, and its message is not for matching).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ObjectsPresent {
    pub publication: bool,
    pub slot: bool,
}

/// Whether `e` is the walsender's `undefined_object` (42704): the one
/// error [`explain_stream_error`] explains, once the catalog was read.
pub(crate) fn is_undefined_object(e: &RelayError) -> bool {
    matches!(e, RelayError::Wire(WireError::Server { error, .. }) if error.code == UNDEFINED_OBJECT)
}

/// Explains a walsender error that the slot's history causes: on PostgreSQL
/// 14–17 a slot created before its publication fails every start with
/// `undefined_object` (`publication "…" does not exist`) although the
/// publication exists, because the walsender reads the publication as of
/// each change. Told by the SQLSTATE and by `present` (the catalog read
/// after the error: both the publication and the slot exist), never by the
/// message's words. Any other error, or the same code while the
/// publication or the slot is really missing, passes through unchanged.
pub(crate) fn explain_stream_error(
    e: RelayError,
    present: ObjectsPresent,
    publication: &str,
    slot: &str,
) -> RelayError {
    if !is_undefined_object(&e) || !present.publication || !present.slot {
        return e;
    }
    let RelayError::Wire(WireError::Server { error, .. }) = &e else {
        return e;
    };
    RelayError::Setup {
        what: format!(
            "the walsender stopped with '{}' (SQLSTATE {UNDEFINED_OBJECT}) although the \
             publication {publication:?} and the slot exist: the replication slot was created \
             before the publication, and PostgreSQL 14–17 read the publication as of each \
             change, so every start fails at the first change committed before the publication \
             existed",
            error.message
        ),
        fix: format!(
            "SELECT pg_drop_replication_slot('{slot}'); then start walrelay once with \
             --accept-slot-position (it creates the slot after the publication and names the \
             range it never streamed) and reconcile that range with walrelay republish (see \
             docs/operations.md, \"Slot created before the publication\")"
        ),
    }
}

impl RelayError {
    /// Whether the outer loop should retry.
    pub fn is_transient(&self) -> bool {
        match self {
            RelayError::Wire(e) => e.is_transient(),
            RelayError::Catalog(e) => e.is_transient(),
            RelayError::Delivery { error, .. } | RelayError::Sink(error) => {
                error.kind == SinkErrorKind::Transient
            }
            RelayError::Offsets(e) => e.is_transient(),
            RelayError::SchemaRegistry { error, .. } => error.is_transient(),
            RelayError::Ended(_) | RelayError::LeaseLost | RelayError::Spill(_) => true,
            RelayError::Snapshot(e) => e.is_transient(),
            RelayError::Decode { .. }
            | RelayError::Stream { .. }
            | RelayError::Route(_)
            | RelayError::Unroutable { .. }
            | RelayError::TableEvent(_)
            | RelayError::Checkpoint(_)
            | RelayError::Refused { .. }
            | RelayError::Setup { .. }
            | RelayError::Check(_)
            | RelayError::Slot(_)
            | RelayError::TransactionOverrun(_) => false,
        }
    }

    /// The table, LSN and event the error is about, where it names them:
    /// fields for the log line (JSON logs carry them as keys).
    pub fn about(&self) -> ErrorAbout<'_> {
        match self {
            RelayError::Route(e) => ErrorAbout::route(e),
            RelayError::Unroutable {
                error,
                row_id,
                end_lsn,
                ..
            } => ErrorAbout {
                end_lsn: Some(*end_lsn),
                event: row_id.as_deref(),
                ..ErrorAbout::route(error)
            },
            RelayError::TableEvent(e) => ErrorAbout {
                table: Some(&e.table),
                column: Some(&e.column),
                lsn: Some(e.lsn),
                ..ErrorAbout::default()
            },
            RelayError::Delivery {
                topic, lsn, event, ..
            } => ErrorAbout {
                lsn: Some(*lsn),
                event: Some(event),
                topic: Some(topic),
                ..ErrorAbout::default()
            },
            RelayError::SchemaRegistry {
                table, topic, lsn, ..
            } => ErrorAbout {
                table: Some(table),
                lsn: Some(*lsn),
                topic: Some(topic),
                ..ErrorAbout::default()
            },
            RelayError::Decode { lsn, .. } | RelayError::Stream { lsn, .. } => ErrorAbout {
                lsn: Some(*lsn),
                ..ErrorAbout::default()
            },
            RelayError::TransactionOverrun(o) => match o.unit {
                transaction_clock::Unit::Pg { commit_lsn, .. } => ErrorAbout {
                    lsn: Some(commit_lsn),
                    ..ErrorAbout::default()
                },
                transaction_clock::Unit::Snapshot => ErrorAbout::default(),
            },
            _ => ErrorAbout::default(),
        }
    }

    /// Transient (retried), resync (the slot needs an operator: lost,
    /// dropped, ahead of the stored offset) or definite (stopped).
    pub fn class(&self) -> ErrorClass {
        match self {
            _ if self.is_transient() => ErrorClass::Transient,
            RelayError::Refused { .. }
            | RelayError::Check(CheckError::Refused { .. })
            | RelayError::Slot(SourceError::SlotLost { .. } | SourceError::SlotMoved { .. }) => {
                ErrorClass::Resync
            }
            _ => ErrorClass::Definite,
        }
    }

    /// What failed, for `walrelay_session_errors_by_cause`.
    pub fn cause(&self) -> &'static str {
        match self {
            RelayError::Wire(_) | RelayError::Catalog(_) => "postgres",
            RelayError::Decode { .. } => "decode",
            RelayError::Stream { .. } | RelayError::Ended(_) => "stream",
            RelayError::Route(_) | RelayError::Unroutable { .. } => "route",
            RelayError::TableEvent(_) => "table_event",
            RelayError::Delivery { .. } => "delivery",
            RelayError::Sink(_) => "kafka",
            RelayError::SchemaRegistry { .. } => "schema_registry",
            RelayError::TransactionOverrun(_) => "transaction_timeout",
            RelayError::Offsets(_) => "offset_store",
            RelayError::Checkpoint(_) => "checkpoint",
            RelayError::Refused { .. } | RelayError::Check(CheckError::Refused { .. }) => "slot",
            RelayError::Slot(SourceError::SlotLost { .. } | SourceError::SlotMoved { .. }) => {
                "slot"
            }
            RelayError::Setup { .. } | RelayError::Check(_) | RelayError::Slot(_) => "setup",
            RelayError::Snapshot(_) => "snapshot",
            RelayError::LeaseLost => "lease",
            RelayError::Spill(_) => "spill",
        }
    }

    /// What we are waiting for, for the retry log line.
    pub(super) fn waiting_for(&self) -> &'static str {
        match self {
            RelayError::Wire(_) | RelayError::Catalog(_) | RelayError::Snapshot(_) => "PostgreSQL",
            RelayError::LeaseLost => "the lease",
            RelayError::Spill(_) => "the spill directory (space, permissions)",
            RelayError::Delivery { .. } | RelayError::Sink(_) | RelayError::Offsets(_) => "Kafka",
            RelayError::SchemaRegistry { .. } => "the schema registry",
            _ => "the session to restart",
        }
    }
}

/// What the supervisor does about a [`RelayError`]: the `class` label of
/// `walrelay_session_errors_by_cause`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Retried with backoff.
    Transient,
    /// The slot needs an operator (lost, dropped, ahead of the stored
    /// offset): stopped.
    Resync,
    /// Stopped with the explanation.
    Definite,
}

impl ErrorClass {
    /// `transient`, `resync` or `definite`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Resync => "resync",
            ErrorClass::Definite => "definite",
        }
    }
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a [`RelayError`] is about, as log fields; `None` where it does not
/// say. Never a payload or a secret.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ErrorAbout<'a> {
    pub table: Option<&'a str>,
    pub column: Option<&'a str>,
    /// The transaction's commit LSN.
    pub lsn: Option<Lsn>,
    /// Where the transaction ends, when known (what skips it).
    pub end_lsn: Option<Lsn>,
    /// The event (outbox row id or change event id), as the error names it.
    pub event: Option<&'a str>,
    pub topic: Option<&'a str>,
}

impl<'a> ErrorAbout<'a> {
    fn route(e: &'a RouteError) -> ErrorAbout<'a> {
        ErrorAbout {
            table: Some(&e.table),
            column: Some(&e.column),
            lsn: Some(e.lsn),
            ..ErrorAbout::default()
        }
    }
}

impl From<SourceError> for RelayError {
    fn from(e: SourceError) -> RelayError {
        match e {
            SourceError::Wire(e) => RelayError::Wire(e),
            SourceError::Decode { lsn, source } => RelayError::Decode { lsn, source },
            SourceError::Stream { lsn, what } => RelayError::Stream { lsn, what },
            SourceError::Ended => RelayError::Ended("the replication stream"),
            SourceError::Snapshot(e) => RelayError::Snapshot(e),
            SourceError::Catalog(e) => RelayError::Catalog(e),
            e @ (SourceError::SlotVanished { .. }
            | SourceError::SlotLost { .. }
            | SourceError::SlotMoved { .. }) => RelayError::Slot(e),
            e @ SourceError::Spill { .. } => RelayError::Spill(e),
            SourceError::Misuse(what) => RelayError::Stream {
                lsn: Lsn::ZERO,
                what: what.into(),
            },
        }
    }
}

/// What stopping by a signal before a session ended means: done, except
/// for `initial_only`, whose job (the snapshot) is not done — a supervisor
/// or script must not take that exit for success.
pub(crate) fn stopped_by_signal(config: &Config) -> Result<(), RelayError> {
    if config.snapshot.mode == Some(crate::config::SnapshotMode::InitialOnly) {
        return Err(RelayError::Setup {
            what: "initial_only: stopped before the snapshot completed (by a signal); not every \
                   row is in Kafka"
                .into(),
            fix: "run walrelay again: the snapshot is taken again from the start".into(),
        });
    }
    Ok(())
}

/// What [`RelayError::Slot`] says: the slot's error with what it means for
/// the start, and what to do.
fn slot_trouble(e: &SourceError) -> String {
    match e {
        SourceError::SlotVanished { .. } => {
            format!("{e}. What to do: make sure nothing else drops walrelay's slot")
        }
        SourceError::SlotLost { slot } => format!(
            "refusing to start: replication slot {slot:?} became lost. What to do: see \
             docs/operations.md, \"Lost slot\""
        ),
        SourceError::SlotMoved { .. } => format!(
            "refusing to start: {e}: another actor advanced, or dropped and recreated, the slot \
             (an operator, or a process that does not take walrelay's lease); streaming from it \
             would skip what was committed in between. What to do: make sure only walrelay \
             consumes this slot (docs/operations.md, \"Running several instances\"), then \
             restart: the stored offset and the slot's position decide the next start"
        ),
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests;
