//! Talking to PostgreSQL.
//!
//! [`wire`] and [`replication`] are our own replication-mode connection on
//! `postgres-protocol` (tokio-postgres has no replication mode). Ordinary SQL —
//! catalog checks, slot state, lag — goes through `tokio-postgres` in
//! [`catalog`]; the initial snapshot's table reads, inside the snapshot a
//! slot exported, in [`snapshot`]. The parameters of both connections come
//! from the configuration in [`params`].

pub mod catalog;
pub mod filter;
pub mod params;
pub mod replication;
pub mod snapshot;
pub mod tls;
pub mod wire;
