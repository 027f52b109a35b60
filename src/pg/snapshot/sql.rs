//! The statements the reader runs: `COPY (SELECT … ORDER BY …) TO STDOUT`
//! for a table ([`copy_sql`]) or one chunk of it ([`chunk_sql`]), with
//! every identifier quoted and every order and split column checked to be
//! one of the relation's.

use postgres_protocol::escape::{escape_identifier, escape_literal};

use crate::pgoutput::Relation;

use super::error::{SnapshotError, relation_display};
use super::split::HashSplit;

/// `COPY (SELECT <columns> FROM [ONLY] <table> [WHERE (<filter>) AND <split>] ORDER BY <order_by>) TO STDOUT`
/// for `relation`; every order and split column must be one of its columns.
/// `only` leaves inheritance children out. With `existed_in` (a snapshot as
/// `pg_current_snapshot()` prints it, `xmin:xmax:xip,…`), only the row
/// versions whose inserting transaction that snapshot sees
/// ([`EXISTED_IN`]): a resumed initial snapshot's rows as of its
/// consistent point, the later ones being the stream's. With `after`, only
/// the rows whose `order_by` columns come after it, or at it ([`After`]: a
/// resumed snapshot's part, from where Kafka held it).
pub fn copy_sql(
    relation: &Relation,
    only: bool,
    order_by: &[String],
    split: Option<&HashSplit>,
    filter: Option<&str>,
    existed_in: Option<&str>,
    after: Option<After<'_>>,
) -> Result<String, SnapshotError> {
    select_sql(
        relation,
        only,
        order_by,
        &Selection {
            split,
            filter,
            existed_in,
            after,
            limit: None,
        },
    )
}

/// Where a resumed read goes on in its `order_by` order: the rows whose
/// key comes after `key` — or, `inclusive`, at or after it. A unique key
/// (not NULL) is read exclusively: no row is skipped or read twice. A key
/// that is not unique but not NULL is read inclusively: the rows sharing
/// the last key value are read again (their order among themselves is not
/// fixed, so some of them may not have been read), none is skipped. A key
/// that may be NULL gives no place to go on from (a NULL sorts nowhere in
/// a row comparison).
#[derive(Debug, Clone, Copy)]
pub struct After<'a> {
    pub key: &'a [Option<String>],
    pub inclusive: bool,
}

/// The row version was inserted (or last updated) by a transaction that
/// the snapshot `$1` sees. `xmin` is the 32-bit xid; it equals the full
/// transaction id only while the cluster has used fewer than 2^32 of them
/// (its epoch is 0) — so a caller uses this only then
/// (`pg_snapshot_xmax(pg_current_snapshot()) < 2^32` on the session that
/// reads). A frozen row keeps its raw `xmin`, older than any snapshot's
/// `xmin`, so it counts as seen.
pub const EXISTED_IN: &str = "pg_visible_in_snapshot(xmin::text::xid8, $1::pg_snapshot)";

/// [`copy_sql`] for one chunk of an incremental snapshot: only rows whose
/// `order_by` columns come after `after` (a row comparison, so the key must
/// be unique and not NULL), at most `limit` of them.
pub fn chunk_sql(
    relation: &Relation,
    only: bool,
    order_by: &[String],
    split: Option<&HashSplit>,
    filter: Option<&str>,
    after: Option<&[Option<String>]>,
    limit: Option<usize>,
) -> Result<String, SnapshotError> {
    select_sql(
        relation,
        only,
        order_by,
        &Selection {
            split,
            filter,
            existed_in: None,
            after: after.map(|key| After {
                key,
                inclusive: false,
            }),
            limit,
        },
    )
}

/// Which rows a statement selects, beyond its table and order.
struct Selection<'a> {
    split: Option<&'a HashSplit>,
    filter: Option<&'a str>,
    existed_in: Option<&'a str>,
    after: Option<After<'a>>,
    limit: Option<usize>,
}

fn select_sql(
    relation: &Relation,
    only: bool,
    order_by: &[String],
    selection: &Selection<'_>,
) -> Result<String, SnapshotError> {
    let Selection {
        split,
        filter,
        existed_in,
        after,
        limit,
    } = *selection;
    let table = relation_display(relation);
    let known = |column: &str, what: &'static str| {
        if relation.column_index(column).is_some() {
            Ok(())
        } else {
            Err(SnapshotError::UnknownColumn {
                table: table.clone(),
                column: column.to_owned(),
                what,
                columns: relation
                    .columns
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        }
    };
    if relation.columns.is_empty() {
        return Err(SnapshotError::NoColumns { table });
    }
    if order_by.is_empty() {
        return Err(SnapshotError::NoOrder { table });
    }
    for column in order_by {
        known(column, "snapshot_order_by")?;
    }
    if let Some(split) = split {
        known(split.column(), "hash split")?;
    }
    let list = |names: &mut dyn Iterator<Item = &str>| {
        names.map(escape_identifier).collect::<Vec<_>>().join(", ")
    };
    let schema = if relation.namespace.is_empty() {
        "pg_catalog"
    } else {
        &relation.namespace
    };
    let mut sql = format!(
        "COPY (SELECT {} FROM {}{}.{}",
        list(&mut relation.columns.iter().map(|c| c.name.as_str())),
        if only { "ONLY " } else { "" },
        escape_identifier(schema),
        escape_identifier(&relation.name)
    );
    let mut conditions = Vec::new();
    if let Some(filter) = filter {
        crate::pg::filter::check(filter).map_err(|why| SnapshotError::BadFilter {
            table: table.clone(),
            why,
        })?;
        conditions.push(format!("({filter})"));
    }
    if let Some(split) = split {
        conditions.push(split.filter_sql());
    }
    if let Some(snapshot) = existed_in {
        conditions.push(EXISTED_IN.replace("$1", &escape_literal(snapshot)));
    }
    if let Some(after) = after {
        // Untyped literals take the key columns' types; NULL sorts nowhere.
        let values: Vec<String> = after
            .key
            .iter()
            .map(|v| {
                v.as_deref()
                    .map_or_else(|| "NULL".to_owned(), escape_literal)
            })
            .collect();
        conditions.push(format!(
            "({}) {} ({})",
            list(&mut order_by.iter().map(String::as_str)),
            if after.inclusive { ">=" } else { ">" },
            values.join(", ")
        ));
    }
    if !conditions.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conditions.join(" AND "));
    }
    sql.push_str(" ORDER BY ");
    sql.push_str(&list(&mut order_by.iter().map(String::as_str)));
    if let Some(limit) = limit {
        sql.push_str(&format!(" LIMIT {}", limit.max(1)));
    }
    sql.push_str(") TO STDOUT");
    Ok(sql)
}

#[cfg(test)]
mod tests;
