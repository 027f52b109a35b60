//! Signals: Debezium's `execute-snapshot` and `stop-snapshot` messages,
//! written into the WAL (`pg_logical_emit_message`, prefix
//! [`SIGNAL_PREFIX`]) by `walrelay snapshot` and read where the stream
//! carries them. This module has both sides: the format (parsing and
//! writing) and the commands that write one.

use std::collections::HashMap;

use crate::Lsn;
use crate::config::Config;

use super::incremental::Specs;

/// The prefix of signal messages (`walrelay snapshot` writes them).
pub const SIGNAL_PREFIX: &str = "walrelay.signal";

/// A signal: Debezium's `execute-snapshot` shape
/// (`{"id": …, "type": "execute-snapshot", "data": {"data-collections":
/// ["schema.table"], "type": "incremental", "additional-conditions":
/// [{"data-collection": "schema.table", "filter": "…"}]}}`) or its
/// `stop-snapshot` (`data-collections` optional: all tables), optionally
/// with `"connector"` naming the one connector it is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Signal {
    pub(super) id: String,
    /// `(table, filter)`; for a stop, the tables to stop (none: all).
    pub(super) tables: Vec<(String, Option<String>)>,
    /// `stop-snapshot`: give the tables up.
    pub(super) stop: bool,
}

/// The signal in `content`, if it is an `execute-snapshot` for
/// `connector`; an error names what is wrong with one that is for it.
pub(super) fn parse_signal(
    content: &[u8],
    connector: &str,
    lsn: Lsn,
) -> Result<Option<Signal>, String> {
    let v: serde_json::Value = serde_json::from_slice(content)
        .map_err(|e| format!("the signal at {lsn} is not JSON: {e}"))?;
    if let Some(target) = v.get("connector").and_then(|c| c.as_str())
        && target != connector
    {
        return Ok(None);
    }
    let kind = v.get("type").and_then(|t| t.as_str()).unwrap_or_default();
    let stop = match kind {
        "execute-snapshot" => false,
        "stop-snapshot" => true,
        _ => {
            return Err(format!(
                "the signal at {lsn} has type {kind:?}; walrelay knows \"execute-snapshot\" and \
                 \"stop-snapshot\""
            ));
        }
    };
    let data = v.get("data").cloned().unwrap_or_default();
    let snapshot_type = data
        .get("type")
        .and_then(|t| t.as_str())
        .unwrap_or("incremental");
    if !snapshot_type.eq_ignore_ascii_case("incremental") {
        return Err(format!(
            "the signal at {lsn} asks for a {snapshot_type} snapshot; walrelay takes incremental ones"
        ));
    }
    let conditions: HashMap<String, String> = data
        .get("additional-conditions")
        .and_then(|c| c.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|c| {
                    Some((
                        c.get("data-collection")?.as_str()?.to_owned(),
                        c.get("filter")?.as_str()?.to_owned(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let tables: Vec<(String, Option<String>)> = data
        .get("data-collections")
        .and_then(|c| c.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|t| t.as_str())
                .map(|t| (t.to_owned(), conditions.get(t).cloned()))
                .collect()
        })
        .unwrap_or_default();
    if tables.is_empty() && !stop {
        return Err(format!(
            "the signal at {lsn} names no table (data.data-collections)"
        ));
    }
    let id = v
        .get("id")
        .and_then(|i| i.as_str())
        .map_or_else(|| format!("signal-{lsn}"), str::to_owned);
    Ok(Some(Signal { id, tables, stop }))
}

/// The signal `walrelay snapshot --cancel` writes: stop `table`'s
/// incremental snapshot (all tables' when `None`).
pub fn stop_signal_json(connector: &str, id: &str, table: Option<&str>) -> String {
    let mut data = serde_json::json!({"type": "incremental"});
    if let Some(table) = table {
        data["data-collections"] = serde_json::json!([table]);
    }
    serde_json::json!({
        "id": id,
        "type": "stop-snapshot",
        "connector": connector,
        "data": data,
    })
    .to_string()
}

/// `walrelay snapshot --cancel`: writes the signal that makes the running
/// connector (or the next one to stream, where the stream carries it) give
/// up the incremental snapshot of `table` (of every table when `None`).
/// Returns the signal's id and LSN.
pub async fn cancel_snapshot(
    config: &Config,
    table: Option<&str>,
) -> Result<(String, Lsn), String> {
    let params = super::connect_params(config);
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

/// The signal `walrelay snapshot` writes.
pub fn signal_json(connector: &str, id: &str, table: &str, filter: Option<&str>) -> String {
    let mut data = serde_json::json!({
        "data-collections": [table],
        "type": "incremental",
    });
    if let Some(filter) = filter {
        data["additional-conditions"] =
            serde_json::json!([{"data-collection": table, "filter": filter}]);
    }
    serde_json::json!({
        "id": id,
        "type": "execute-snapshot",
        "connector": connector,
        "data": data,
    })
    .to_string()
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
    let params = super::connect_params(config);
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

#[cfg(test)]
mod tests;
