//! Signals: Debezium's `execute-snapshot` and `stop-snapshot` messages,
//! written into the WAL (`pg_logical_emit_message`, prefix
//! [`SIGNAL_PREFIX`]) by `walrelay snapshot` and read where the stream
//! carries them. This module is the format (parsing and writing); the
//! commands that write a signal are `crate::commands::snapshot`'s.

use std::collections::HashMap;

use crate::Lsn;

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

#[cfg(test)]
mod tests;
