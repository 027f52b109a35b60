//! Tables as the catalog shows them: a relation by name ([`CapturedTable`],
//! with its partitions), a schema's tables, primary key, replica identity,
//! columns, ownership, and the row estimate `check` shows.

use tokio_postgres::Client;

use super::error::CatalogError;

/// A captured (outbox) table as the catalog knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedTable {
    pub schema: String,
    pub name: String,
    pub oid: u32,
    /// `pg_class.relkind`: `r` ordinary table, `p` partitioned table, `v`
    /// view, `m` materialized view, `f` foreign table, ...
    pub relkind: char,
    /// Every partition below the table, at any depth (intermediate
    /// partitioned tables and leaves): `(oid, schema, name)`. Empty for an
    /// ordinary table. pgoutput reports a change under the leaf's oid and
    /// name unless the publication has `publish_via_partition_root`.
    pub partitions: Vec<(u32, String, String)>,
}

impl CapturedTable {
    /// What `relkind` means, for messages.
    pub fn kind(&self) -> &'static str {
        match self.relkind {
            'r' => "an ordinary table",
            'p' => "a partitioned table",
            'v' => "a view",
            'm' => "a materialized view",
            'f' => "a foreign table",
            'i' | 'I' => "an index",
            'S' => "a sequence",
            'c' => "a composite type",
            't' => "a TOAST table",
            _ => "not a table",
        }
    }
}

/// One relation by name, with its partitions; `None` if it does not exist.
pub async fn relation(
    client: &Client,
    schema: &str,
    name: &str,
) -> Result<Option<CapturedTable>, CatalogError> {
    let query = |context| move |source| CatalogError::Query { context, source };
    let Some(row) = client
        .query_opt(
            "SELECT c.oid, c.relkind::text FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2",
            &[&schema, &name],
        )
        .await
        .map_err(query("reading pg_class"))?
    else {
        return Ok(None);
    };
    let oid: u32 = row.get(0);
    let relkind = row.get::<_, String>(1).chars().next().unwrap_or('?');
    let partitions = if relkind == 'p' {
        client
            .query(
                "SELECT t.relid::oid, n.nspname::text, c.relname::text \
                 FROM pg_partition_tree($1::oid::regclass) t \
                 JOIN pg_class c ON c.oid = t.relid \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE t.relid <> $1::oid::regclass ORDER BY t.level, c.relname",
                &[&oid],
            )
            .await
            .map_err(query("listing partitions"))?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    } else {
        Vec::new()
    };
    Ok(Some(CapturedTable {
        schema: schema.to_owned(),
        name: name.to_owned(),
        oid,
        relkind,
        partitions,
    }))
}

/// The tables (ordinary or partitioned, not partitions) of `schema`, by
/// name, with their oids and relkinds.
pub async fn schema_tables(
    client: &Client,
    schema: &str,
) -> Result<Vec<(u32, String, char)>, CatalogError> {
    let rows = client
        .query(
            "SELECT c.oid, c.relname::text, c.relkind::text FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition \
             ORDER BY c.relname",
            &[&schema],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "listing the tables of a schema",
            source,
        })?;
    Ok(rows
        .iter()
        .map(|r| {
            let kind: String = r.get(2);
            (r.get(0), r.get(1), kind.chars().next().unwrap_or('?'))
        })
        .collect())
}

/// The primary key's columns of relation `oid`, in key order; empty
/// without a primary key.
pub async fn primary_key(client: &Client, oid: u32) -> Result<Vec<String>, CatalogError> {
    let rows = client
        .query(
            "SELECT a.attname::text FROM pg_index i \
             CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE i.indrelid = $1::oid AND i.indisprimary ORDER BY k.ord",
            &[&oid],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading the primary key",
            source,
        })?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The table's `REPLICA IDENTITY` (`pg_class.relreplident`: `b'd'`
/// default, `b'i'` index, `b'f'` full, `b'n'` nothing) and the columns it
/// holds in a delete's old row, in index order: the primary key's under
/// DEFAULT, the index's under USING INDEX, none under FULL (every column)
/// and NOTHING.
pub async fn replica_identity(
    client: &Client,
    oid: u32,
) -> Result<(u8, Vec<String>), CatalogError> {
    let query = |context| move |source| CatalogError::Query { context, source };
    let identity = client
        .query_opt(
            "SELECT relreplident::text FROM pg_class WHERE oid = $1::oid",
            &[&oid],
        )
        .await
        .map_err(query("reading the replica identity"))?
        .and_then(|r| r.get::<_, Option<String>>(0))
        .and_then(|s| s.bytes().next())
        .unwrap_or(b'd');
    let rows = client
        .query(
            "SELECT a.attname::text FROM pg_index i \
             CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE i.indrelid = $1::oid AND CASE $2::text \
                   WHEN 'd' THEN i.indisprimary WHEN 'i' THEN i.indisreplident ELSE false END \
             ORDER BY k.ord",
            &[&oid, &(identity as char).to_string()],
        )
        .await
        .map_err(query("reading the replica identity index"))?;
    Ok((identity, rows.iter().map(|r| r.get(0)).collect()))
}

/// The captured tables `(schema, name)`: oid, relkind and all partitions, in
/// the order given. A table that does not exist is an error naming it.
/// The router uses the partitions to map a leaf relation pgoutput reports
/// back to the captured table.
pub async fn captured_relations(
    client: &Client,
    tables: &[(String, String)],
) -> Result<Vec<CapturedTable>, CatalogError> {
    let mut out = Vec::with_capacity(tables.len());
    for (schema, name) in tables {
        match relation(client, schema, name).await? {
            Some(t) => out.push(t),
            None => {
                return Err(CatalogError::Invalid(format!(
                    "outbox table {schema}.{name} does not exist; create it or fix outbox.table"
                )));
            }
        }
    }
    Ok(out)
}

/// Whether the current role owns relation `oid` (directly or through a role
/// it belongs to; superusers own everything).
pub async fn owns_relation(client: &Client, oid: u32) -> Result<bool, CatalogError> {
    let row = client
        .query_one(
            "SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class WHERE oid = $1::oid",
            &[&oid],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading a table's owner",
            source,
        })?;
    Ok(row.get(0))
}

/// Whether the current role may create publications in this database.
pub async fn may_create_in_database(client: &Client) -> Result<bool, CatalogError> {
    let row = client
        .query_one(
            "SELECT has_database_privilege(current_database(), 'CREATE')",
            &[],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading the database privileges",
            source,
        })?;
    Ok(row.get(0))
}

/// Columns `(name, type name)` of a table, empty if it does not exist.
pub async fn table_columns(
    client: &Client,
    schema: &str,
    table: &str,
) -> Result<Vec<(String, String)>, CatalogError> {
    let rows = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) \
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            &[&schema, &table],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading table columns",
            source,
        })?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// The table's columns declared `NOT NULL`.
pub async fn not_null_columns(
    client: &Client,
    schema: &str,
    table: &str,
) -> Result<Vec<String>, CatalogError> {
    let rows = client
        .query(
            "SELECT a.attname::text \
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped \
             AND a.attnotnull",
            &[&schema, &table],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading NOT NULL columns",
            source,
        })?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The planner's idea of how many rows a table holds, from
/// `pg_class.reltuples`: of the table itself, or of the leaf partitions of a
/// partitioned table (a partitioned parent's own `reltuples`, set by
/// `ANALYZE`, repeats its leaves' total, so it is never added). For progress
/// reports and `check` only; nothing is decided on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowEstimate {
    /// Sum over the relations whose `reltuples` is known.
    pub rows: u64,
    /// Relations never vacuumed or analyzed (`reltuples = -1`): not counted.
    pub unknown: u64,
    /// Relations looked at (1, or the number of leaf partitions).
    pub relations: u64,
}

impl RowEstimate {
    /// The row count when the planner has one (some relation analyzed and
    /// rows in it), else `None`.
    pub fn known(&self) -> Option<u64> {
        (self.rows > 0).then_some(self.rows)
    }
}

/// [`RowEstimate`] of the table (or partitioned table) with OID `oid`. The
/// caller names the table in the error (`describe` gives the server's words).
pub async fn row_estimate(client: &Client, oid: u32) -> Result<RowEstimate, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT coalesce(sum(c.reltuples) FILTER (WHERE c.reltuples >= 0), 0)::float8, \
                    count(*) FILTER (WHERE c.reltuples < 0), count(*) \
             FROM pg_class c \
             WHERE (c.oid = $1::oid AND c.relkind <> 'p') \
                OR c.oid IN (SELECT t.relid FROM pg_partition_tree($1::oid::regclass) t \
                             WHERE t.isleaf)",
            &[&oid],
        )
        .await?;
    let rows: f64 = row.get(0);
    let unknown: i64 = row.get(1);
    let relations: i64 = row.get(2);
    Ok(RowEstimate {
        rows: if rows.is_finite() && rows > 0.0 {
            rows.round() as u64
        } else {
            0
        },
        unknown: u64::try_from(unknown).unwrap_or(0),
        relations: u64::try_from(relations).unwrap_or(0),
    })
}
