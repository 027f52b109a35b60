//! The commands besides `run`: `walrelay check` ([`check`]), `walrelay
//! status` ([`status`]) and `walrelay republish` ([`republish`]).
//!
//! A wing of its own below `main`: the commands use the pipeline's pieces
//! (the start-up checks, the router, the sink, the offset store), and the
//! pipeline never imports them. What two commands share — reaching Kafka,
//! reading the offset store and the slot — is in `probe`, which both
//! import, so neither command imports the other.

pub mod check;
pub(crate) mod probe;
pub mod prune;
pub mod republish;
pub mod snapshot;
pub mod status;
