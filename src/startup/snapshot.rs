//! What the initial snapshot needs of each table before `run` stores its
//! running marker and creates the slot: the role may read it (the exact
//! `GRANT`s when not), and it has an order to be read in (an outbox
//! table's `snapshot_order_by` or primary key, a `[[table]]`'s
//! `key_columns` or primary key). Also how `check` shows a table's row
//! estimate.

use postgres_protocol::escape::escape_identifier as ident;
use tokio_postgres::Client;

use super::CheckError;
use super::tables::TableEventTable;
use crate::config::{Config, OutboxConfig};
use crate::pg::catalog::{CapturedTable, CatalogError, RowEstimate};

/// What the role lacks to read `table` (`USAGE` on its schema, `SELECT` on
/// it), with the `GRANT`s that fix it.
#[derive(Debug)]
pub struct MissingReadGrants {
    pub user: String,
    /// e.g. `SELECT on public.outbox`.
    pub missing: Vec<String>,
    /// The exact statements to run.
    pub grants: Vec<String>,
}

/// Whether the role may read `table` (a partitioned table is read through
/// its root, so the partitions need nothing): `None` when it may.
pub async fn missing_read_grants(
    client: &Client,
    table: &CapturedTable,
) -> Result<Option<MissingReadGrants>, CheckError> {
    let row = client
        .query_one(
            "SELECT current_user::text, has_schema_privilege(c.relnamespace, 'USAGE'), \
                    has_table_privilege(c.oid, 'SELECT') \
             FROM pg_class c WHERE c.oid = $1::oid",
            &[&table.oid],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading the role's privileges on the outbox table",
            source,
        })?;
    let (user, usage, select): (String, bool, bool) = (row.get(0), row.get(1), row.get(2));
    let (schema, name) = (ident(&table.schema), ident(&table.name));
    let role = ident(&user);
    let mut grants = Vec::new();
    let mut missing = Vec::new();
    if !usage {
        missing.push(format!("USAGE on schema {}", table.schema));
        grants.push(format!("GRANT USAGE ON SCHEMA {schema} TO {role};"));
    }
    if !select {
        missing.push(format!("SELECT on {}.{}", table.schema, table.name));
        grants.push(format!("GRANT SELECT ON {schema}.{name} TO {role};"));
    }
    Ok((!missing.is_empty()).then_some(MissingReadGrants {
        user,
        missing,
        grants,
    }))
}

/// The role may read `table` for the snapshot. Streaming needs no read
/// grant (pgoutput reads WAL, not the table), so this is checked only when
/// a snapshot is planned; the fix is the exact `GRANT` to run.
pub async fn snapshot_privileges(client: &Client, table: &CapturedTable) -> Result<(), CheckError> {
    let Some(m) = missing_read_grants(client, table).await? else {
        return Ok(());
    };
    Err(CheckError::setup(
        format!(
            "role {} lacks {}, which the initial snapshot needs to read outbox table {}.{}",
            m.user,
            m.missing.join(" and "),
            table.schema,
            table.name
        ),
        format!(
            "run as the table's owner or a superuser: {} (or set [snapshot] mode = \"no_data\" \
             to stream without a snapshot)",
            m.grants.join(" ")
        ),
    ))
}

/// The snapshot can read `table` in an order: the `snapshot_order_by`
/// columns of its `[[outbox]]` section are columns the snapshot publishes
/// (not generated), or, when none are set, the table has a primary key.
/// Checked before `run` stores the running marker and creates the slot, so
/// a table the snapshot cannot order refuses the start instead of failing
/// the snapshot it began.
pub async fn snapshot_order(
    client: &Client,
    outbox: &OutboxConfig,
    table: &CapturedTable,
) -> Result<(), CheckError> {
    let rows = client
        .query(
            "SELECT a.attname::text, a.attgenerated <> '', \
                    EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = a.attrelid \
                            AND i.indisprimary AND a.attnum = ANY (i.indkey::int2[])) \
             FROM pg_attribute a \
             WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            &[&table.oid],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading the table's columns and primary key",
            source,
        })?;
    let columns: Vec<(String, bool, bool)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let shown = format!("{}.{}", table.schema, table.name);
    if outbox.snapshot_order_by.is_empty() {
        if !columns.iter().any(|(_, _, in_pk)| *in_pk) {
            return Err(CheckError::setup(
                format!(
                    "outbox table {shown} has no primary key, so the initial snapshot has no order \
                     to read it in"
                ),
                "add a primary key, or set snapshot_order_by in its [[outbox]] section (the \
                 order of one aggregate's snapshot events), or set [snapshot] mode = \"no_data\"",
            ));
        }
        return Ok(());
    }
    for column in &outbox.snapshot_order_by {
        let usable = columns
            .iter()
            .any(|(name, generated, _)| name == column && !generated);
        if !usable {
            let published: Vec<&str> = columns
                .iter()
                .filter(|(_, generated, _)| !generated)
                .map(|(name, _, _)| name.as_str())
                .collect();
            return Err(CheckError::setup(
                format!(
                    "snapshot_order_by column {column:?} is not a column of outbox table {shown} \
                     (or is generated)"
                ),
                format!(
                    "fix snapshot_order_by of its [[outbox]] section; the table's columns are: {}",
                    published.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// A `[[table]]` table can be snapshotted: it has an order to be read in
/// (`key_columns`, else its primary key).
pub fn table_snapshot_order(config: &Config, table: &TableEventTable) -> Result<(), CheckError> {
    let entry = config.tables.get(table.entry);
    if entry.is_some_and(|e| !table.snapshot_order(e).is_empty()) {
        return Ok(());
    }
    Err(CheckError::setup(
        format!(
            "table {}.{} has no primary key and no key_columns, so the initial snapshot has no \
             order to read it in",
            table.table.schema, table.table.name
        ),
        "add a primary key, or set key_columns in its [[table]] section, or set [snapshot] \
         mode = \"no_data\"",
    ))
}

/// A [`RowEstimate`] for `check`: `~1,234`, `unknown (never analyzed)`, or
/// `~1,234+ (…)` when some partitions were never analyzed.
pub fn describe_estimate(e: &RowEstimate) -> String {
    if e.relations > 0 && e.unknown == e.relations {
        "unknown (never vacuumed or analyzed)".into()
    } else if e.unknown > 0 {
        format!(
            "~{}+ ({} of {} partitions never vacuumed or analyzed)",
            thousands(e.rows),
            e.unknown,
            e.relations
        )
    } else {
        format!("~{}", thousands(e.rows))
    }
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests;
