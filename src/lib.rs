//! walrelay: a PostgreSQL → Kafka change-data-capture connector.
//!
//! Data moves one way — walsender bytes → [`pgoutput`] messages → transactions →
//! Kafka records — and only acknowledgements move back: Kafka delivery reports
//! advance the checkpoint frontier, which is written to the offset store and only
//! then reported to PostgreSQL as the slot's flush position.
//!
//! See `docs/` for the operator's view and `../shared/design.md` for the design.

pub mod lsn;
pub mod pgoutput;

pub use lsn::Lsn;
