//! `walrelay snapshot [--table T] [--where C] [--cancel]`: asks the running
//! connector for an incremental snapshot of a table, or to give one up, by
//! writing a signal into the WAL (`crate::relay::signal_json`,
//! `crate::relay::stop_signal_json`). The connector acts on it where the
//! stream carries it: if none runs, when one next streams.
//!
//! Invariant: a request the running connector would refuse (a table it
//! does not capture, no key to page by, a condition the server cannot
//! parse) is refused here, before any signal is written.

use crate::Lsn;
use crate::config::Config;
use crate::relay::incremental::Specs;
use crate::relay::{SIGNAL_PREFIX, signal_json, stop_signal_json};

/// `walrelay snapshot --cancel`: writes the signal that makes the running
/// connector (or the next one to stream, where the stream carries it) give
/// up the incremental snapshot of `table` (of every table when `None`).
/// Returns the signal's id and LSN.
pub async fn cancel_snapshot(
    config: &Config,
    table: Option<&str>,
) -> Result<(String, Lsn), String> {
    let params = crate::pg::params::connect_params(config);
    let client = crate::pg::catalog::connect(&params)
        .await
        .map_err(|e| e.to_string())?;
    let table = table.map(|t| {
        if t.contains('.') {
            t.to_owned()
        } else {
            format!("public.{t}")
        }
    });
    let id = format!("cancel-{}", crate::telemetry::unix_ms());
    let lsn = crate::pg::catalog::emit_message_flushed(
        &client,
        SIGNAL_PREFIX,
        &stop_signal_json(&config.connector.name, &id, table.as_deref()),
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok((id, lsn))
}

/// `walrelay snapshot`: checks that `table` is one this connector captures
/// (with a key to chunk by), then writes the signal that asks the running
/// connector for an incremental snapshot of it (of the rows satisfying
/// `filter`). Returns the signal's id and LSN. The connector acts on it
/// where the stream carries it: if none runs, when one next streams.
pub async fn request_snapshot(
    config: &Config,
    table: &str,
    filter: Option<&str>,
) -> Result<(String, Lsn), String> {
    let params = crate::pg::params::connect_params(config);
    let client = crate::pg::catalog::connect(&params)
        .await
        .map_err(|e| e.to_string())?;
    let captured = crate::startup::table_event_tables(&client, config)
        .await
        .map_err(|e| format!("{}; {}", e.problem(), e.fix()))?;
    let specs = Specs::new(config, &captured);
    let table = if table.contains('.') {
        table.to_owned()
    } else {
        format!("public.{table}")
    };
    let chunk = specs.chunk_table(&table, filter.map(str::to_owned))?;
    // A table with no key to page by is refused now, not found out by the
    // running connector.
    let reader = crate::pg::snapshot::SnapshotReader::open_for_chunks(&params)
        .await
        .map_err(|e| e.to_string())?;
    let relation = reader
        .table_relation(
            &chunk.schema,
            &chunk.name,
            Some(&config.postgres.publication),
        )
        .await
        .map_err(|e| e.to_string())?;
    reader
        .chunk_key(&relation, &chunk.key, chunk.inserts_only)
        .await
        .map_err(|e| e.to_string())?;
    drop(reader);
    if let Some(filter) = filter {
        // A condition the server cannot parse would stop the snapshot at
        // its first chunk: find out now.
        client
            .execute(
                &format!(
                    "EXPLAIN SELECT 1 FROM {} WHERE ({filter})",
                    table
                        .split('.')
                        .map(postgres_protocol::escape::escape_identifier)
                        .collect::<Vec<_>>()
                        .join(".")
                ),
                &[],
            )
            .await
            .map_err(|e| {
                format!(
                    "--where {filter:?} is not a valid condition on {table}: {}",
                    crate::pg::catalog::describe(&e)
                )
            })?;
    }
    let id = format!("snapshot-{}", crate::telemetry::unix_ms());
    let lsn = crate::pg::catalog::emit_message_flushed(
        &client,
        SIGNAL_PREFIX,
        &signal_json(&config.connector.name, &id, &table, filter),
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok((id, lsn))
}
