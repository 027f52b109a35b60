//! Binding a `[[table]]` to a relation: when a Relation message arrives,
//! which columns are captured, how each is written (its Debezium mapping
//! and mask), which form the key, and the checks that refuse a table now,
//! before any of its rows (a type we do not map, a `key_columns` entry the
//! table lacks, a mask on a column that is not text-like, a key column a
//! delete would not carry).
//!
//! Invariants: each Relation message re-binds its table (the newest shape
//! wins); a table that cannot be bound is remembered with its error, so
//! its changes fail with the same error naming table and column.

use std::sync::Arc;

use super::{Bound, BoundColumn, Entry, TableEventError, TableRouter};
use crate::Lsn;
use crate::config::{
    ColumnFilter, SkippedOperations, TableConfig, TableFormat, sanitized_topic_name,
    topic_name_problem,
};
use crate::pgoutput::{Oid, Relation};
use crate::router::debezium::{self, Mapping, Unchanged};
use crate::router::mask::{Mask, maskable};

impl TableRouter {
    /// Learns (or re-learns) a relation's shape; `at` names the stream
    /// position in errors. A captured table with a column we cannot map is
    /// an error now, before any of its rows.
    ///
    /// `Ok(Some(warning))`: bound, with something the operator should read
    /// (its topic name had to be changed).
    pub fn on_relation(
        &mut self,
        rel: &Relation,
        at: Lsn,
    ) -> Result<Option<String>, TableEventError> {
        let Some(entry) = self
            .entries
            .iter()
            .find(|e| e.config.matches(&rel.namespace, &rel.name))
        else {
            self.bound.remove(&rel.oid);
            return Ok(None);
        };
        let (bound, warning) = match self.bind(entry, rel, at) {
            Ok((mut bound, warning)) => {
                // A DDL's new shape: its schemas say what changed.
                if let (Some(Ok(before)), Some(encoding)) =
                    (self.bound.get(&rel.oid), bound.encoding.as_mut())
                    && let Some(old) = &before.encoding
                {
                    let change = super::encode::describe_change(&before.columns, &bound.columns);
                    encoding.note_change(old, format!("the table changed at {at}: {change}"));
                }
                (Ok(bound), warning)
            }
            Err(e) => (Err(e), None),
        };
        let result = bound.as_ref().map(|_| warning).map_err(Clone::clone);
        self.bound.insert(rel.oid, bound);
        result
    }

    pub(super) fn bind(
        &self,
        entry: &Entry,
        rel: &Relation,
        at: Lsn,
    ) -> Result<(Bound, Option<String>), TableEventError> {
        let display = format!("{}.{}", rel.namespace, rel.name);
        let err = |column: &str, reason: String, fix: &str| TableEventError {
            table: display.clone(),
            column: column.to_owned(),
            lsn: at,
            reason,
            fix: fix.to_owned(),
        };
        let unmapped = |column: &str, type_oid: Oid| {
            err(
                column,
                format!(
                    "its type ({}) is not mapped to a Debezium representation",
                    debezium::type_name(type_oid)
                ),
                "change the column's type to a mapped one (docs/compatibility.md lists them), \
                 set unmapped_types = \"text\" (in [table_defaults] or its [[table]]) to write \
                 its values as their text form, leave it out with a column list, or remove the \
                 table from [[table]]",
            )
        };
        let mut columns = Vec::with_capacity(rel.columns.len());
        // Columns left out of before/after whose type is not mapped: fine
        // unless one is a key column (checked below).
        let mut unwritable = Vec::new();
        for c in &rel.columns {
            let (oid, typmod) = match self.type_aliases.get(&c.type_oid) {
                Some(&(oid, m)) if c.type_modifier < 0 => (oid, m),
                Some(&(oid, _)) => (oid, c.type_modifier),
                None => (c.type_oid, c.type_modifier),
            };
            let included = entry.config.includes(
                entry.default_columns.as_deref(),
                &rel.namespace,
                &rel.name,
                &c.name,
            );
            let mapping = match Mapping::of(oid, typmod, entry.modes) {
                Some(m) => m,
                None if !included => {
                    unwritable.push(columns.len());
                    Mapping::TEXT
                }
                None => return Err(unmapped(&c.name, c.type_oid)),
            };
            let mut name_json = Vec::with_capacity(c.name.len() + 3);
            debezium::json_str(&mut name_json, &c.name);
            name_json.push(b':');
            let mask = match entry.config.mask_of(&c.name) {
                None => None,
                Some(_) if !maskable(c.type_oid) => {
                    let (reason, fix) = unmaskable(entry.index, &c.name, c.type_oid);
                    return Err(err(&c.name, reason, &fix));
                }
                Some(m) => Mask::new(m, c.type_oid, c.type_modifier),
            };
            columns.push(BoundColumn {
                name: c.name.clone(),
                oid,
                typmod,
                name_json: name_json.into_boxed_slice(),
                mapping,
                included,
                mask,
                unchanged: Unchanged::of(c.type_oid, mapping, entry.modes),
                type_oid: c.type_oid,
                required: false,
            });
        }
        // The key: `key_columns`, the identity index's columns, or the
        // primary key (see [`key_columns`]); a router the catalog told
        // nothing takes the replica identity's columns for the primary key.
        // Under REPLICA IDENTITY DEFAULT the identity *is* the primary key as
        // of this point of the WAL: where it names other columns than the
        // catalog's key read at start (a key column renamed or the key
        // changed since, with changes from before the DDL still to stream),
        // the stream's description is the one that fits these rows.
        let identity: Vec<&str> = rel.key_columns().map(|(_, c)| c.name.as_str()).collect();
        let primary_key: Vec<&str> = match self
            .primary_keys
            .get(&(rel.namespace.clone(), rel.name.clone()))
        {
            Some(pk)
                if rel.replica_identity == b'd'
                    && !identity.is_empty()
                    && (pk.len() != identity.len()
                        || pk.iter().any(|c| !identity.contains(&c.as_str()))) =>
            {
                identity.clone()
            }
            Some(pk) => pk.iter().map(String::as_str).collect(),
            None if rel.replica_identity != b'f' => identity.clone(),
            None => Vec::new(),
        };
        let names = key_columns(&entry.config, rel.replica_identity, &identity, &primary_key);
        let mut key = Vec::with_capacity(names.len());
        for name in &names {
            match rel.column_index(name) {
                Some(i) => key.push(i),
                None if entry.config.key_columns.is_empty() => {
                    key.clear();
                    break;
                }
                None => {
                    return Err(err(
                        name,
                        "key_columns names a column the table does not have".into(),
                        "fix key_columns of this [[table]] section",
                    ));
                }
            }
        }
        if let Some((column, reason, fix)) =
            key_outside_identity(&names, rel.replica_identity, &identity, entry.skipped)
        {
            return Err(err(column, reason, fix));
        }
        let key = (!key.is_empty()).then_some(key);
        if let Some(&i) = unwritable
            .iter()
            .find(|i| key.as_ref().is_some_and(|k| k.contains(i)))
        {
            return Err(unmapped(&rel.columns[i].name, rel.columns[i].type_oid));
        }
        let topic = entry
            .config
            .topic
            .render(|p| match p {
                "prefix" => Some(self.prefix.as_str()),
                "schema" => Some(rel.namespace.as_str()),
                "table" => Some(rel.name.as_str()),
                _ => None,
            })
            .map_err(|p| {
                err(
                    "*",
                    format!("the topic template uses {{{p}}}"),
                    "use only {prefix}, {schema} and {table}",
                )
            })?;
        // Catalog names may hold characters a topic cannot: replaced as
        // Debezium replaces them, so both write to the same topic.
        let (topic, warning) = match sanitized_topic_name(&topic) {
            Some(valid) => {
                let warning = format!(
                    "table {display}: {topic:?} is not a valid Kafka topic name; its records go \
                     to {valid:?} instead (as Debezium's would)"
                );
                (valid, Some(warning))
            }
            None => (topic, None),
        };
        if let Some(problem) = topic_name_problem(&topic) {
            return Err(err(
                "*",
                format!("its topic {topic:?} is not a valid topic name: {problem}"),
                "set a topic template for this [[table]] section that makes a valid name",
            ));
        }
        let mut names_json = b",\"schema\":".to_vec();
        debezium::json_str(&mut names_json, &rel.namespace);
        names_json.extend_from_slice(b",\"table\":");
        debezium::json_str(&mut names_json, &rel.name);
        // Required: a key column (PostgreSQL keeps them NOT NULL), or, in
        // Avro, one the catalog calls NOT NULL that every event's rows hold
        // — all of them unless a delete's old row holds the identity's
        // columns only. Not in JSON Schema: a registry checking BACKWARD
        // refuses a required property made `oneOf` null later (Apicurio
        // 3.3.3 does), so a NULL the stream holds could not widen it.
        let not_null = self
            .not_null
            .get(&(rel.namespace.clone(), rel.name.clone()))
            .filter(|_| entry.format == TableFormat::Avro);
        let whole_rows = matches!(rel.replica_identity, b'f' | b'n') || entry.skipped.skips(b'd');
        // Required by the catalog's word alone: named when a registry
        // refuses them (a subject holding them optional does under BACKWARD).
        let mut by_catalog = Vec::new();
        for c in &mut columns {
            let name = c.name.as_str();
            let in_identity = identity.contains(&name);
            let keyed =
                primary_key.contains(&name) || (rel.replica_identity != b'f' && in_identity);
            let not_null = not_null.is_some_and(|n| n.iter().any(|n| n == name))
                && (whole_rows || in_identity);
            c.required = keyed || not_null;
            if not_null && !keyed && c.included {
                by_catalog.push(c.name.clone());
            }
        }
        let mut encoding = super::encode::Encoding::new(
            entry.format,
            entry.modes,
            &self.prefix,
            [&rel.namespace, &rel.name, &self.database],
            &columns,
            key.as_deref(),
            super::encode::facts(
                [&self.widened, &self.widened_items],
                &self.enum_labels,
                rel.oid,
            ),
        );
        if let Some(encoding) = &mut encoding {
            encoding.note_required(&by_catalog, &self.widened, rel.oid);
        }
        let bound = Bound {
            collection: Arc::from(display.as_str()),
            display,
            topic: Arc::from(topic),
            columns,
            key,
            tombstones: entry.tombstones,
            skipped: entry.skipped,
            placeholder: entry.placeholder.clone(),
            names_json: names_json.into_boxed_slice(),
            encoding,
            old_rows_whole: rel.replica_identity == b'f',
        };
        Ok((bound, warning))
    }
}

/// Why a mask cannot apply to column `column` of declared type `oid`, and
/// the fix (for `table[entry]`).
fn unmaskable(entry: usize, column: &str, oid: Oid) -> (String, String) {
    (
        format!(
            "table[{entry}].column_mask names it, but its type ({}) is not text-like: masks \
             apply to text, varchar, char(n), \"char\" and name columns only (Debezium leaves \
             other types unmasked without a word, which walrelay refuses to do)",
            debezium::type_name(oid)
        ),
        format!(
            "remove {column:?} from table[{entry}].column_mask, or leave the column out with \
             column_exclude_list"
        ),
    )
}

/// The columns keying `[[table]]` `config`'s events, by name: `key_columns`,
/// else under REPLICA IDENTITY USING INDEX (`replica_identity` `b'i'`) the
/// index's columns (`identity`; a delete's old row holds nothing else),
/// else the `primary_key` — also under USING INDEX when the index was
/// dropped (`identity` empty: PostgreSQL then treats the table as REPLICA
/// IDENTITY NOTHING, and a null key would hide every row's identity). The
/// one rule `check`, `run` and the router share.
pub fn key_columns<'a, S: AsRef<str>>(
    config: &'a TableConfig,
    replica_identity: u8,
    identity: &'a [S],
    primary_key: &'a [S],
) -> Vec<&'a str> {
    if !config.key_columns.is_empty() {
        config.key_columns.iter().map(String::as_str).collect()
    } else if replica_identity == b'i' && !identity.is_empty() {
        identity.iter().map(AsRef::as_ref).collect()
    } else {
        primary_key.iter().map(AsRef::as_ref).collect()
    }
}

/// A key column PostgreSQL leaves out of old rows (it is not in the
/// table's `identity`, the replica identity's columns, and the identity is
/// not FULL) would key deletes by null — a tombstone compaction never pairs
/// with the row, on another partition — and hide a change of the key:
/// `(column, problem, fix)`, unless deletes are skipped. A table without
/// an identity has no updates or deletes to publish (PostgreSQL refuses
/// them), so any key serves it.
pub fn key_outside_identity<'k>(
    key: &[&'k str],
    replica_identity: u8,
    identity: &[&str],
    skipped: SkippedOperations,
) -> Option<(&'k str, String, &'static str)> {
    if replica_identity == b'f' || identity.is_empty() || skipped.skips(b'd') {
        return None;
    }
    let column = key.iter().find(|k| !identity.contains(k))?;
    Some((
        column,
        format!(
            "key column {column} is not in the table's replica identity ({}), so PostgreSQL \
             leaves it out of a delete's old row: deletes would be keyed by null",
            identity.join(", ")
        ),
        "set REPLICA IDENTITY FULL on the table (ALTER TABLE … REPLICA IDENTITY FULL: old \
         rows then hold every column), key by the replica identity's columns (key_columns), \
         or skip deletes (skipped_operations)",
    ))
}

/// Checks the column lists and masks of `table[entry]` (`config`) against
/// a table's columns as the catalog lists them, `(name, declared type
/// oid)`: at `check` and at start, before any row. A named column the
/// table lacks is an error for an entry naming one table; a pattern's
/// lists apply to the matched tables that have the column. Returns the
/// problem (naming table and column) and its fix.
pub fn check_columns(
    config: &TableConfig,
    entry: usize,
    table: &str,
    columns: &[(String, Oid)],
) -> Result<(), (String, String)> {
    for (key, name) in config.named_columns(entry) {
        let Some(&(_, oid)) = columns.iter().find(|(c, _)| c == name) else {
            if config.is_pattern() {
                continue;
            }
            return Err((
                format!("{key} names column {name:?}, which table {table} does not have"),
                format!(
                    "fix the name in {key}, or remove it (the table's columns are listed by \\d {table} in psql)"
                ),
            ));
        };
        if key.contains(".column_mask[") && !maskable(oid) {
            let (reason, fix) = unmaskable(entry, name, oid);
            return Err((format!("column {name} of table {table}: {reason}"), fix));
        }
    }
    Ok(())
}

/// What the column lists and masks of `config` do to a table with
/// `columns`, for `check`: `""`, or `"; leaves out ssn; masks email (SHA-256
/// hash), phone (4 *), bio (cut to 20 chars)"`. Never shows a salt.
pub fn describe_columns(
    config: &TableConfig,
    defaults: Option<&ColumnFilter>,
    (schema, table): (&str, &str),
    columns: &[String],
) -> String {
    let mut out = String::new();
    let left_out: Vec<&str> = columns
        .iter()
        .filter(|c| !config.includes(defaults, schema, table, c))
        .map(String::as_str)
        .collect();
    if !left_out.is_empty() {
        out.push_str("; leaves out ");
        out.push_str(&left_out.join(", "));
    }
    let masked: Vec<String> = columns
        .iter()
        .filter_map(|c| {
            let m = config.mask_of(c)?;
            let how = match (&m.hash, m.with_chars, m.truncate_to_chars) {
                (Some(h), _, _) => format!("{h} hash v{}", m.hash_version.unwrap_or(1)),
                (None, Some(n), _) => format!("{n} *"),
                (None, None, Some(n)) => format!("cut to {n} chars"),
                (None, None, None) => return None,
            };
            Some(format!("{c} ({how})"))
        })
        .collect();
    if !masked.is_empty() {
        out.push_str("; masks ");
        out.push_str(&masked.join(", "));
    }
    out
}
