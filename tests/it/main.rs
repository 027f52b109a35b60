//! walrelay's integration tests: one test binary (`cargo test --test it`).
//!
//! Every module was a test binary of its own; each compiled
//! `tests/support/mod.rs` and linked librdkafka again (35 binaries). Here
//! they are modules of one, so a test is named `<module>::<test>` and a lane
//! of `deploy/test.sh` picks its modules with libtest filters
//! (`cargo test --test it -- lost_slot::`). The fault soak
//! (`tests/soak.rs`, run by `deploy/soak.sh`) stays a binary of its own.
//!
//! Modules run side by side in one process: a test never changes what
//! another module's test relies on without restoring it (`SystemSetting`
//! resets a server setting on drop) — the tests that stop a shared service
//! (`kafka_outage`, `lost_slot`, `failover`) run in lanes with services of
//! their own (docs/development.md).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../support/mod.rs"]
mod support;

mod checks;
mod cli;
mod config_cli;
mod crash;
mod dead_letter;
mod debezium_compat;
mod delivery;
mod docs;
mod event_contracts;
mod exactly_once;
mod failover;
mod ha;
mod heartbeat;
mod in_progress;
mod inbox;
mod incremental;
mod kafka_outage;
mod kafka_security;
mod lost_slot;
mod messages;
mod offsets;
mod pg_security;
mod prometheus;
mod prune;
mod recovery;
mod relay;
mod relay_matrix;
mod republish;
mod schema_registry;
mod schema_registry_enums;
mod schema_registry_messages;
mod schema_registry_protobuf;
mod schema_registry_tables;
mod schema_registry_transactions;
mod services;
mod session_params;
mod snapshot;
mod snapshot_reader;
mod standby_capture;
mod status;
mod table_events;
mod transaction_metadata;
mod wire;
