//! The captured tables' shapes (name, kind, storage, columns, partitions)
//! as a session sees them, and what changed between the snapshot's view and
//! the catalog now: DDL during a snapshot is noticed, not silently read
//! past.

use tokio_postgres::Client;

use super::error::SnapshotError;

/// Name, kind, storage (`relfilenode`: a rewrite or `TRUNCATE` gives a new
/// one) and columns (number, name, type, modifier, collation: what orders
/// a key) of each table of `$1` and of the partitions of the
/// partitioned ones, one line per table, by oid. Plain SQL, so it sees the
/// catalog as the session's snapshot does.
pub(super) const SHAPES_SQL: &str = "WITH RECURSIVE tree(oid) AS ( \
       SELECT unnest($1::oid[]) \
       UNION \
       SELECT i.inhrelid FROM pg_inherits i JOIN tree t ON i.inhparent = t.oid \
       JOIN pg_class p ON p.oid = t.oid WHERE p.relkind = 'p') \
     SELECT c.oid, format('%s.%s (kind %s, filenode %s, columns: %s)', n.nspname, c.relname, \
            c.relkind, c.relfilenode, coalesce((SELECT string_agg(format('%s %s %s %s%s', \
            a.attnum, a.attname, a.atttypid, a.atttypmod, \
            CASE WHEN a.attcollation <> 0 THEN ' collation ' || a.attcollation END), ', ' \
            ORDER BY a.attnum) \
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

/// What changed in the tables a resumed snapshot reads (`now`, with their
/// partitions) since the interrupted snapshot stored their shapes
/// (`stored`): a table (or partition) it saw whose storage, name or columns
/// differ. A table it did not see (added to the configuration, or a
/// partition attached since) is not a change: its rows are read as they
/// are.
pub fn changed_since(stored: &[(u32, String)], now: &[(u32, String)]) -> Option<String> {
    let changes: Vec<String> = now
        .iter()
        .filter_map(|(oid, now)| {
            let (_, then) = stored.iter().find(|(o, _)| o == oid)?;
            (then != now).then(|| format!("{then} became {now}"))
        })
        .collect();
    (!changes.is_empty()).then(|| {
        format!(
            "DDL changed the captured tables since the interrupted snapshot: {}",
            changes.join("; ")
        )
    })
}

/// Whether table `oid`'s name and columns (their types and collations:
/// how a key sorts) are the same in `stored` and `now`, its storage
/// aside: a table only rewritten (`VACUUM FULL`, `CLUSTER`) still sorts a
/// stored key as before, so a resumed read may go on from it.
pub fn same_columns(stored: &[(u32, String)], now: &[(u32, String)], oid: u32) -> bool {
    let shape = |shapes: &[(u32, String)]| {
        shapes
            .iter()
            .find(|(o, _)| *o == oid)
            .map(|(_, s)| without_filenode(s))
    };
    matches!((shape(stored), shape(now)), (Some(a), Some(b)) if a == b)
}

/// A shape line without its `filenode <n>` (the first one: a name that
/// holds the same text makes two different lines look different, never
/// the reverse).
fn without_filenode(shape: &str) -> String {
    let Some(at) = shape.find("filenode ") else {
        return shape.to_owned();
    };
    let rest = &shape[at + "filenode ".len()..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    format!("{}{}", &shape[..at], &rest[digits..])
}

#[cfg(test)]
mod tests {
    use super::{changed_since, same_columns};

    #[test]
    fn a_resumed_snapshot_sees_rewrites_and_column_changes_but_not_new_tables() {
        let stored = vec![
            (
                1,
                "public.a (kind r, filenode 10, columns: 1 id 23 -1)".to_owned(),
            ),
            (
                2,
                "public.b (kind r, filenode 20, columns: 1 id 23 -1)".to_owned(),
            ),
        ];
        assert_eq!(changed_since(&stored, &stored), None);
        // A table added to the configuration (or a partition attached): no change.
        let mut now = stored.clone();
        now.push((
            3,
            "public.c (kind r, filenode 30, columns: 1 id 23 -1)".to_owned(),
        ));
        assert_eq!(changed_since(&stored, &now), None);
        // Rewritten (VACUUM FULL, ALTER … TYPE): a new filenode.
        let mut now = stored.clone();
        now[1].1 = "public.b (kind r, filenode 21, columns: 1 id 23 -1)".to_owned();
        let said = changed_since(&stored, &now).expect("a rewrite");
        assert!(
            said.contains("filenode 20") && said.contains("filenode 21"),
            "{said}"
        );
        // A column added.
        let mut now = stored.clone();
        now[0].1 = "public.a (kind r, filenode 10, columns: 1 id 23 -1, 2 x 25 -1)".to_owned();
        assert!(changed_since(&stored, &now).is_some());
    }

    #[test]
    fn a_rewrite_keeps_the_columns_a_type_or_collation_change_does_not() {
        let stored = vec![(
            1,
            "public.a (kind r, filenode 10, columns: 1 id 25 -1 collation 100)".to_owned(),
        )];
        assert!(same_columns(&stored, &stored, 1));
        let rewritten = vec![(
            1,
            "public.a (kind r, filenode 11, columns: 1 id 25 -1 collation 100)".to_owned(),
        )];
        assert!(same_columns(&stored, &rewritten, 1), "VACUUM FULL");
        let collated = vec![(
            1,
            "public.a (kind r, filenode 10, columns: 1 id 25 -1 collation 950)".to_owned(),
        )];
        assert!(!same_columns(&stored, &collated, 1), "another collation");
        let retyped = vec![(
            1,
            "public.a (kind r, filenode 12, columns: 1 id 20 -1)".to_owned(),
        )];
        assert!(!same_columns(&stored, &retyped, 1), "ALTER … TYPE");
        assert!(!same_columns(&stored, &[], 1), "dropped");
        assert!(!same_columns(&stored, &stored, 2), "never stored");
        // A name holding the same text cannot make a change look like none.
        let odd = vec![(
            1,
            "public.\"filenode 7\" (kind r, filenode 10, columns: 1 id 23 -1)".to_owned(),
        )];
        let odd_now = vec![(
            1,
            "public.\"filenode 7\" (kind r, filenode 10, columns: 1 id 20 -1)".to_owned(),
        )];
        assert!(!same_columns(&odd, &odd_now, 1));
        assert!(same_columns(&odd, &odd, 1));
    }
}
