//! walrelay: a PostgreSQL → Kafka change-data-capture connector.
//!
//! Data moves one way — walsender bytes → `pgoutput` messages → transactions →
//! Kafka records — and only acknowledgements move back: Kafka delivery reports
//! advance the checkpoint frontier, which is written to the offset store and only
//! then reported to PostgreSQL as the slot's flush position.
//!
//! See `docs/` for the operator's view and `../shared/design.md` for the design.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod checkpoint;
pub mod commands;
pub mod config;
pub mod inbox;
pub mod lsn;
pub mod offsets;
pub mod pg;
pub mod pgoutput;
pub mod relay;
pub mod retention;
pub mod router;
pub mod sink;
pub mod source;
pub mod startup;
mod task;
pub mod telemetry;

pub use lsn::Lsn;
