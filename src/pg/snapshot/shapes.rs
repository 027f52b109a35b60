//! The captured tables' shapes (name, kind, storage, columns, partitions)
//! as a session sees them, and what changed between the snapshot's view and
//! the catalog now: DDL during a snapshot is noticed, not silently read
//! past.

use tokio_postgres::Client;

use super::error::SnapshotError;

/// Name, kind, storage (`relfilenode`: a rewrite or `TRUNCATE` gives a new
/// one) and columns of each table of `$1` and of the partitions of the
/// partitioned ones, one line per table, by oid. Plain SQL, so it sees the
/// catalog as the session's snapshot does.
pub(super) const SHAPES_SQL: &str = "WITH RECURSIVE tree(oid) AS ( \
       SELECT unnest($1::oid[]) \
       UNION \
       SELECT i.inhrelid FROM pg_inherits i JOIN tree t ON i.inhparent = t.oid \
       JOIN pg_class p ON p.oid = t.oid WHERE p.relkind = 'p') \
     SELECT c.oid, format('%s.%s (kind %s, filenode %s, columns: %s)', n.nspname, c.relname, \
            c.relkind, c.relfilenode, coalesce((SELECT string_agg(format('%s %s %s %s', \
            a.attnum, a.attname, a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum) \
            FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 \
              AND NOT a.attisdropped), '')) \
     FROM tree JOIN pg_class c ON c.oid = tree.oid \
     JOIN pg_namespace n ON n.oid = c.relnamespace ORDER BY c.oid";

/// The identity and shape of `oids` and their partitions as `client`'s
/// session sees them: on an ordinary session, the catalog as it is now.
pub async fn table_shapes(
    client: &Client,
    oids: &[u32],
) -> Result<Vec<(u32, String)>, SnapshotError> {
    Ok(client
        .query(SHAPES_SQL, &[&oids])
        .await
        .map_err(|source| SnapshotError::Query {
            table: String::from("(the captured tables)"),
            context: "reading the tables' shapes",
            source,
        })?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
}

/// What changed between the snapshot's view of the tables and the catalog
/// now, said for an operator; `None` when nothing did.
pub fn shape_changes(in_snapshot: &[(u32, String)], now: &[(u32, String)]) -> Option<String> {
    let mut changes = Vec::new();
    for (oid, then) in in_snapshot {
        match now.iter().find(|(o, _)| o == oid) {
            None => changes.push(format!("{then} was dropped")),
            Some((_, now)) if now != then => changes.push(format!("{then} became {now}")),
            Some(_) => {}
        }
    }
    for (oid, now) in now {
        if !in_snapshot.iter().any(|(o, _)| o == oid) {
            changes.push(format!("{now} was added"));
        }
    }
    (!changes.is_empty())
        .then(|| format!("DDL changed the captured tables: {}", changes.join("; ")))
}
