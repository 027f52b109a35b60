//! The start-up checks that `walrelay run` and `walrelay check` share.
//!
//! Invariant: **check == run.** Every condition under which `run` refuses to
//! start is one function here. `run` (`relay::session`) calls it and stops
//! with its error; `check` (`commands::check`) calls the same function and prints
//! the same words as a FAIL line. So `check` fails exactly when `run` would
//! refuse, and says it the same way.
//!
//! It speaks in its own error type ([`CheckError`]) and imports nothing of
//! `relay`: the relay turns a `CheckError` into its own error, and explains
//! the walsender's errors itself.
//!
//! Nothing here changes the server. What `run` may change (create the
//! publication, add tables to it, switch on `publish_via_partition_root`) is
//! returned as a [`PublicationPlan`] — only after checking that the role is
//! allowed to do it — which `run` applies and `check` describes.
//!
//! Silent loss is refused: a publication that does not publish inserts, a row
//! filter, or a column list without a column the route reads would let the
//! slot move past outbox rows that were never sent.
//!
//! One file per responsibility: `server` (settings, the role), `outbox`
//! (the `[[outbox]]` tables), `tables` (the `[[table]]` tables),
//! `publication`, `snapshot` (what the initial snapshot needs of a table),
//! `slot` (its shape, the slot plan, where streaming starts) and `standby`
//! (the server a slot on a standby lives on). Each
//! speaks [`CheckError`], defined here.

mod outbox;
mod publication;
mod server;
mod slot;
mod snapshot;
mod standby;
mod tables;

pub use outbox::{converter_problem, outbox_table, route_columns};
pub use publication::{PublicationPlan, publication, slot_predates_publication};
pub use server::{heartbeat_privilege, incremental_watermarks, replication_privilege, wal_level};
pub use slot::{
    SlotPlan, Start, missing_slot, resumable, slot_plan, slot_shape,
    snapshot_outlived_idle_timeout, start_position,
};
pub use snapshot::{
    MissingReadGrants, describe_estimate, missing_read_grants, snapshot_order, snapshot_privileges,
    table_snapshot_order, thousands,
};
pub use standby::{CaptureServer, capture_server};
pub use tables::{TableEventTable, table_event_tables};

use crate::pg::catalog::CatalogError;

/// Why start-up cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The server or its objects are not set up the way walrelay needs.
    #[error("{what}. What to do: {fix}")]
    Setup { what: String, fix: String },
    /// Starting would skip or re-read events: the slot against the offset store.
    #[error("refusing to start: {reason}. What to do: {hint}")]
    Refused { reason: String, hint: String },
    /// A catalog query failed (possibly transient).
    #[error(transparent)]
    Catalog(#[from] CatalogError),
}

impl CheckError {
    fn setup(what: impl Into<String>, fix: impl Into<String>) -> CheckError {
        CheckError::Setup {
            what: what.into(),
            fix: fix.into(),
        }
    }

    /// What is wrong, in the words `run` uses.
    pub fn problem(&self) -> String {
        match self {
            CheckError::Setup { what, .. } => what.clone(),
            CheckError::Refused { reason, .. } => reason.clone(),
            CheckError::Catalog(e) => e.to_string(),
        }
    }

    /// What to do about it.
    pub fn fix(&self) -> String {
        match self {
            CheckError::Setup { fix, .. } => fix.clone(),
            CheckError::Refused { hint, .. } => hint.clone(),
            CheckError::Catalog(_) => "see the error".into(),
        }
    }
}
