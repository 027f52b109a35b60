//! Ordinary SQL against the source database, through `tokio-postgres`:
//! slot state, server settings, publication and outbox-table checks.
//!
//! Nothing here streams; it answers "what does the server look like" for the
//! start-up checks (`crate::startup`) that `walrelay run` and `walrelay check`
//! share.
//!
//! Invariants:
//! - Errors carry the server's own words: a [`CatalogError`] prints the
//!   server's message, detail and hint (or the I/O cause chain), never a bare
//!   "db error".
//! - The SQL works on PostgreSQL 14–18; catalog columns that exist only on
//!   newer servers (row filters, column lists, schema publications: 15+) are
//!   read only when `server_version_num` says they exist.
//!
//! Files by responsibility: `connect` the session, `error` its errors,
//! `slot` the slot's state and what its creation waits for, `settings`,
//! `message` logical messages, `standby` WAL and replay positions for
//! capture from a standby, `tables` tables and row estimates,
//! `publication` the publication and a table's membership.

mod connect;
mod error;
mod message;
mod publication;
mod settings;
mod slot;
mod standby;
mod tables;

pub use connect::{connect, connect_owned, in_recovery};
pub use error::{CatalogError, describe};
pub use message::{
    commit_empty_transaction, emit_message, emit_message_flushed, emit_message_privilege,
};
pub use publication::{
    Membership, Publication, membership, publication, published_tables, slot_older_than_publication,
};
pub use settings::{server_version, setting};
pub use slot::{OpenTransaction, SlotState, slot_creation_blockers, slot_state};
pub use standby::{WAL_POSITION, await_replay, current_wal_lsn, log_standby_snapshot};
pub use tables::{
    CapturedTable, RowEstimate, captured_relations, may_create_in_database, not_null_columns,
    owns_relation, primary_key, relation, replica_identity, row_estimate, schema_tables,
    table_columns,
};
