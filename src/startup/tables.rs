//! The `[[table]]` tables, resolved in the catalog: names and patterns to
//! tables, each with its primary key, replica identity, columns and the
//! types its events write them as. A key outside what a delete's old row
//! holds, and (under `unmapped_types = "fail"`) a column type without a
//! Debezium mapping, refuse the start; one error names every such column.

use tokio_postgres::Client;

use super::CheckError;
use crate::config::{Config, TableConfig};
use crate::pg::catalog::{self, CapturedTable, CatalogError};

/// One table a `[[table]]` entry captures, resolved in the catalog.
#[derive(Debug, Clone)]
pub struct TableEventTable {
    /// The `[[table]]` entry (its index in the file) that captures it.
    pub entry: usize,
    pub table: CapturedTable,
    /// Its primary key's columns (empty: none).
    pub primary_key: Vec<String>,
    /// Its `REPLICA IDENTITY` and the columns a delete's old row holds
    /// ([`catalog::replica_identity`]).
    pub replica_identity: u8,
    pub identity: Vec<String>,
    /// User-defined types of its columns and what they are written as:
    /// `(type oid, written as type oid, type modifier)` — an enum and a
    /// domain over one as `text`, an array of enums as `text[]`, another
    /// domain as its base type.
    pub type_aliases: Vec<(u32, u32, i32)>,
    /// Its columns (not dropped, not generated), by name.
    pub columns: Vec<String>,
    /// Its columns declared `NOT NULL` (`pg_attribute.attnotnull`, or of a
    /// domain declared `NOT NULL`, as the JDBC driver's `getColumns` says
    /// `IS_NULLABLE`), as the catalog says now (the stream may be behind it: see
    /// `router::table::schemas`).
    pub not_null: Vec<String>,
    /// The labels of its columns' enum types, in `enumsortorder`:
    /// `(type oid, labels)`, the type an enum, an array of one or a domain
    /// over one (its enum's labels).
    pub enum_labels: Vec<(u32, Vec<String>)>,
    /// Its columns of types without a mapping, written as their text form
    /// (`unmapped_types = "text"`): `column (type)`.
    pub as_text: Vec<String>,
}

impl TableEventTable {
    /// The columns keying its events ([`crate::router::table::key_columns`]).
    pub fn key<'c>(&'c self, config: &'c TableConfig) -> Vec<&'c str> {
        crate::router::table::key_columns(
            config,
            self.replica_identity,
            &self.identity,
            &self.primary_key,
        )
    }

    /// The columns the snapshot reads it in: `key_columns`, else the
    /// primary key.
    pub fn snapshot_order<'c>(&'c self, config: &'c TableConfig) -> &'c [String] {
        config.key_or(&self.primary_key)
    }
}

/// The tables the `[[table]]` entries capture: each named table must exist
/// and be a table; a pattern covers the tables of its schema that exist
/// now (none is a warning for `check`, not an error). A table matched by
/// several entries belongs to the first; an outbox table is never one
/// (validation refuses the overlap).
pub async fn table_event_tables(
    client: &Client,
    config: &Config,
) -> Result<Vec<TableEventTable>, CheckError> {
    let mut out: Vec<TableEventTable> = Vec::new();
    // Columns without a mapping under `unmapped_types = "fail"`, of every
    // table: one error names them all, not the first table's only.
    let mut unmapped_columns: Vec<String> = Vec::new();
    let mut listed: std::collections::HashMap<String, Vec<(u32, String, char)>> =
        std::collections::HashMap::new();
    // Validation compiled these already; an error here cannot happen.
    let default_columns = config.table_defaults.column_filter().ok().flatten();
    for (entry, t) in config.tables.iter().enumerate() {
        let schema = &t.name.schema;
        let names: Vec<String> = if t.is_pattern() {
            if !listed.contains_key(schema) {
                listed.insert(
                    schema.clone(),
                    catalog::schema_tables(client, schema).await?,
                );
            }
            listed[schema]
                .iter()
                .filter(|(_, n, _)| t.matches(schema, n))
                .map(|(_, n, _)| n.clone())
                .collect()
        } else {
            vec![t.name.name.clone()]
        };
        for name in names {
            if out
                .iter()
                .any(|o| o.table.schema == *schema && o.table.name == name)
                || config
                    .outbox
                    .iter()
                    .any(|o| o.table.schema == *schema && o.table.name == name)
            {
                continue;
            }
            let Some(table) = catalog::relation(client, schema, &name).await? else {
                return Err(CheckError::setup(
                    format!("table {schema}.{name} (table[{entry}].name) does not exist"),
                    "create it, or fix the name in its [[table]] section",
                ));
            };
            if !matches!(table.relkind, 'r' | 'p') {
                return Err(CheckError::setup(
                    format!(
                        "{schema}.{name} (table[{entry}].name) is {}, not a table: logical \
                         decoding only sees rows written to tables",
                        table.kind()
                    ),
                    "name an ordinary or partitioned table",
                ));
            }
            let primary_key = catalog::primary_key(client, table.oid).await?;
            let (replica_identity, identity) = catalog::replica_identity(client, table.oid).await?;
            let unmapped = t
                .unmapped_types
                .unwrap_or(config.table_defaults.unmapped_types);
            let key_columns =
                crate::router::table::key_columns(t, replica_identity, &identity, &primary_key);
            let identity_names: Vec<&str> = identity.iter().map(String::as_str).collect();
            let skipped = t
                .skipped_operations
                .unwrap_or(config.table_defaults.skipped_operations);
            if let Some((_, problem, fix)) = crate::router::table::key_outside_identity(
                &key_columns,
                replica_identity,
                &identity_names,
                skipped,
            ) {
                return Err(CheckError::setup(
                    format!("table {schema}.{name} (table[{entry}]): {problem}"),
                    fix,
                ));
            }
            // A column left out of before/after (and not in the key) is
            // never written: its type does not matter.
            let left_out = |column: &str| {
                !key_columns.contains(&column)
                    && !t.includes(default_columns.as_ref(), schema, &name, column)
            };
            let ColumnTypes {
                aliases: type_aliases,
                columns,
                without_mapping,
                not_null,
                enums,
            } = column_types(client, &table, left_out).await?;
            let enum_labels = enum_labels(client, &enums).await?;
            let display = format!("{schema}.{name}");
            if unmapped == crate::config::UnmappedTypes::Fail && !without_mapping.is_empty() {
                unmapped_columns.extend(without_mapping.iter().map(|c| format!("{display}.{c}")));
                continue;
            }
            let as_text = without_mapping;
            crate::router::table::check_columns(t, entry, &display, &columns)
                .map_err(|(problem, fix)| CheckError::setup(problem, fix))?;
            out.push(TableEventTable {
                entry,
                table,
                primary_key,
                replica_identity,
                identity,
                type_aliases,
                columns: columns.into_iter().map(|(name, _)| name).collect(),
                not_null,
                enum_labels,
                as_text,
            });
        }
    }
    if !unmapped_columns.is_empty() {
        let (s, have) = if unmapped_columns.len() == 1 {
            ("", "has a type")
        } else {
            ("s", "have types")
        };
        return Err(CheckError::setup(
            format!(
                "column{s} {} {have} that table events do not map to a Debezium representation",
                unmapped_columns.join(", ")
            ),
            "change the column's type to a mapped one (docs/compatibility.md lists them), set \
             unmapped_types = \"text\" (in [table_defaults] or the table's [[table]]) to write \
             such values as their PostgreSQL text form, or remove the table from [[table]]",
        ));
    }
    Ok(out)
}

/// The `text` and `text[]` type oids: what enums and enum arrays are
/// written as (Debezium writes enum values as strings).
const TEXT_OID: u32 = 25;

const TEXT_ARRAY_OID: u32 = 1009;

/// Types created after initdb (extensions', users') have oids from here on.
const FIRST_NORMAL_OID: u32 = 16384;

/// What the catalog says of a table's columns' types.
struct ColumnTypes {
    /// The aliases of its user-defined types.
    aliases: Vec<(u32, u32, i32)>,
    /// Its columns with their declared types.
    columns: Vec<(String, u32)>,
    /// Its columns written as their text form.
    without_mapping: Vec<String>,
    /// Its `NOT NULL` columns.
    not_null: Vec<String>,
    /// Its columns' types that take an enum's labels (an enum, an array
    /// of one, a domain over one): `(type oid, enum type oid)`.
    enums: Vec<(u32, u32)>,
}

/// The labels of the enum types of `enums` (`(type oid, enum type oid)`),
/// each in `enumsortorder`, by type oid.
async fn enum_labels(
    client: &Client,
    enums: &[(u32, u32)],
) -> Result<Vec<(u32, Vec<String>)>, CheckError> {
    if enums.is_empty() {
        return Ok(Vec::new());
    }
    let types: Vec<u32> = enums.iter().map(|&(_, e)| e).collect();
    let rows = client
        .query(
            "SELECT enumtypid, enumlabel::text FROM pg_enum \
             WHERE enumtypid = ANY($1::oid[]) ORDER BY enumtypid, enumsortorder",
            &[&types],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading the labels of the table's enum types",
            source,
        })?;
    let mut out: Vec<(u32, Vec<String>)> = Vec::new();
    for r in &rows {
        let (oid, label): (u32, String) = (r.get(0), r.get(1));
        match out.last_mut() {
            Some((last, labels)) if *last == oid => labels.push(label),
            _ => out.push((oid, vec![label])),
        }
    }
    Ok(enums
        .iter()
        .filter_map(|&(ty, e)| {
            let labels = out.iter().find(|(oid, _)| *oid == e)?;
            Some((ty, labels.1.clone()))
        })
        .collect())
}

/// The aliases of `table`'s user-defined enum and domain types, its
/// columns with their declared types, and the columns that are written
/// (not `left_out` of `before`/`after` and the key) but have a type the
/// table events do not map, as `column (type)`.
async fn column_types(
    client: &Client,
    table: &CapturedTable,
    left_out: impl Fn(&str) -> bool,
) -> Result<ColumnTypes, CheckError> {
    use crate::router::debezium::Mapping;
    let rows = client
        .query(
            "SELECT a.attname::text, a.atttypid, a.atttypmod, \
                    format_type(a.atttypid, a.atttypmod), t.typtype::text, t.typbasetype, \
                    t.typtypmod, coalesce(e.typtype::text, ''), t.typname::text, \
                    a.attnotnull OR (t.typtype = 'd' AND t.typnotnull), t.typelem, \
                    coalesce(b.typtype::text, '') \
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A' \
             LEFT JOIN pg_type b ON b.oid = t.typbasetype AND t.typtype = 'd' \
             WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped \
               AND a.attgenerated = '' ORDER BY a.attnum",
            &[&table.oid],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading the table's column types",
            source,
        })?;
    let mut aliases = Vec::new();
    let mut columns = Vec::with_capacity(rows.len());
    let mut without_mapping = Vec::new();
    let mut not_null = Vec::new();
    let mut enums = Vec::new();
    for r in &rows {
        let (name, oid, typmod): (String, u32, i32) = (r.get(0), r.get(1), r.get(2));
        let type_name: String = r.get(3);
        let (typtype, base, base_typmod): (String, u32, i32) = (r.get(4), r.get(5), r.get(6));
        let elem_typtype: String = r.get(7);
        let typname: String = r.get(8);
        if r.get::<_, bool>(9) {
            not_null.push(name.clone());
        }
        let (elem, base_typtype): (u32, String) = (r.get(10), r.get(11));
        let labels_of = match (
            typtype.as_str(),
            elem_typtype.as_str(),
            base_typtype.as_str(),
        ) {
            ("e", _, _) => Some(oid),
            (_, "e", _) => Some(elem),
            ("d", _, "e") => Some(base),
            _ => None,
        };
        if let Some(e) = labels_of.filter(|_| !enums.iter().any(|&(t, _)| t == oid)) {
            enums.push((oid, e));
        }
        let (written_as, written_typmod) = match (typtype.as_str(), elem_typtype.as_str()) {
            ("e", _) => (TEXT_OID, -1),
            (_, "e") => (TEXT_ARRAY_OID, -1),
            ("d", _) if base_typtype == "e" => (TEXT_OID, -1),
            // Extension types, found by name (their oids differ per
            // database): `citext` and `ltree` are strings, `hstore` is
            // Debezium's JSON form, as Debezium writes them.
            ("b", _)
                if oid >= FIRST_NORMAL_OID && matches!(typname.as_str(), "citext" | "ltree") =>
            {
                (TEXT_OID, -1)
            }
            ("b", _) if oid >= FIRST_NORMAL_OID && typname == "hstore" => {
                (crate::router::debezium::HSTORE, -1)
            }
            ("d", _) => (base, if typmod >= 0 { typmod } else { base_typmod }),
            _ => (oid, typmod),
        };
        if !Mapping::is_mapped(written_as, written_typmod) && !left_out(&name) {
            without_mapping.push(format!("{name} ({type_name})"));
        }
        if written_as != oid {
            aliases.push((oid, written_as, written_typmod));
        }
        columns.push((name, oid));
    }
    Ok(ColumnTypes {
        aliases,
        columns,
        without_mapping,
        not_null,
        enums,
    })
}
