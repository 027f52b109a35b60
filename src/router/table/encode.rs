//! `[[table]] format = "avro" | "json_schema"` in the table router: a
//! bound table's schemas ([`Encoding`], made when its Relation message
//! binds it, so a DDL's new shape has new schemas before its first row),
//! and its records' keys and values under them — the records then carry
//! the schemas, whose ids `sink::registry` adds. How the bodies are made:
//! - `avro` change events and tombstones are written from the row's cells
//!   ([`avro`]);
//! - `json_schema` ones are the JSON path's bytes, each `Decimal` value
//!   re-encoded as a number where it is written ([`Encoding::renumber`]);
//! - `protobuf` records, and anything else the table router makes (a
//!   truncate's event), are the JSON path's records re-encoded whole
//!   ([`TableRouter::encode_tail`]).
//!
//! All three give the same bytes as re-encoding the JSON path's record
//! whole under the schemas (`tests/direct.rs` compares them on every type).
//!
//! Invariants:
//! - **A new shape says what changed.** When a Relation message re-binds a
//!   table to other schemas, the new schemas carry which columns were
//!   added, dropped or changed type, so a registry that refuses them is
//!   answered with the table, the column and the subject.
//! - **The stream overrules the catalog, never fails on it.** Before a
//!   change's or snapshot row's records are made, its rows are checked
//!   against the schemas: a NULL in a required column (the catalog said
//!   `NOT NULL` at start, the row is older than the constraint or newer
//!   than its drop) makes the column optional for that relation, a NULL
//!   element of an enum array whose items are required (Avro) makes its
//!   items optional, and a value of an enum column or an enum array's
//!   element outside its `allowed` labels (added or renamed since the
//!   start) is appended to them. Each registers the next schema version (a
//!   BACKWARD-compatible widening: an Avro union reads the plain type, a
//!   longer `allowed` is only a parameter; JSON Schema requires only key
//!   columns, which PostgreSQL keeps `NOT NULL`, and no items) before the
//!   record, which is then written under it; said once per column or
//!   label ([`TableRouter::take_notices`]). Old rows are checked only under
//!   REPLICA IDENTITY FULL: a key-only old row's other columns are absent,
//!   not NULL. The widening holds until the next start, which reads the
//!   catalog again (labels then in `enumsortorder`).
//! - **Tombstones stay tombstones** (a key, no value); a null key stays
//!   null.
//! - Pure: no I/O.

use std::sync::Arc;

use super::schemas::{self, ColumnSchema, EventSchemas, Schema, body};

mod avro;

use avro::{Direct, Plan};
use std::collections::HashMap;

use super::{Bound, BoundColumn, TableEventError, TableRouter};
use crate::Lsn;
use crate::config::TableFormat;
use crate::pgoutput::{Cell, Oid, TupleData};
use crate::router::Record;
use crate::router::debezium::{self, Modes};
use crate::router::schema::{self as registry, RecordSchemas, SchemaKind};

/// A bound table's key and value schemas and their registry texts.
#[derive(Debug)]
pub(crate) struct Encoding {
    kind: SchemaKind,
    event: EventSchemas,
    schemas: Arc<RecordSchemas>,
    /// `json_schema` without a decimal anywhere: the JSON path's bytes are
    /// the body as they are.
    verbatim: bool,
    /// What rebuilding it for a widened column takes.
    modes: Modes,
    /// Topic prefix, schema, table, database.
    names: [String; 4],
    /// `avro`: its events are written from the cells ([`avro`]).
    avro: Option<Plan>,
    /// `json_schema`: per column, its schema when its JSON path value
    /// holds a `Decimal` (base64 there, a number here).
    decimals: Vec<Option<Schema>>,
    key: Option<Vec<usize>>,
    /// Positions of its required columns (a NULL there widens them).
    required: Vec<usize>,
    /// Its enum columns: position and the labels `allowed` lists.
    enums: Vec<(usize, Vec<String>)>,
    /// Its enum array columns: position, labels, whether its items are
    /// required (a NULL element widens them).
    enum_arrays: Vec<(usize, Vec<String>, bool)>,
}

/// What the catalog says of one column: whether its schema is required,
/// its enum labels (an enum's, or an enum array's element type's), and
/// whether an enum array's items are (no NULL element seen yet).
pub(super) type Facts<'a> = (bool, Option<&'a [String]>, bool);

/// What rows hold that a table's schemas do not allow
/// ([`Encoding::misfits`]): required columns holding NULL, enum arrays
/// with required items holding a NULL element (positions), enum values
/// outside their labels (position, value).
type Misfits = (Vec<usize>, Vec<usize>, Vec<(usize, String)>);

impl Encoding {
    /// The encoding of `format` (`None` for `json`) for table
    /// `schema.table` of database `db` with `columns`; `key` holds the key
    /// columns' positions, `facts` tells which columns are required and
    /// which are enums with what labels.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new<'a>(
        format: TableFormat,
        modes: Modes,
        prefix: &str,
        [schema, table, db]: [&str; 3],
        columns: &[BoundColumn],
        key: Option<&[usize]>,
        facts: impl Fn(&BoundColumn) -> Facts<'a>,
    ) -> Option<Encoding> {
        let kind = match format {
            TableFormat::Json => return None,
            TableFormat::Avro => SchemaKind::Avro,
            TableFormat::JsonSchema => SchemaKind::Json,
            TableFormat::Protobuf => SchemaKind::Protobuf,
        };
        let names = [prefix, schema, table, db].map(str::to_owned);
        Some(Encoding::build(kind, modes, names, columns, key, facts))
    }

    fn build<'a>(
        kind: SchemaKind,
        modes: Modes,
        names: [String; 4],
        columns: &[BoundColumn],
        key: Option<&[usize]>,
        facts: impl Fn(&BoundColumn) -> Facts<'a>,
    ) -> Encoding {
        let mut required = Vec::new();
        let mut enums = Vec::new();
        let mut enum_arrays = Vec::new();
        let mut direct = Vec::new();
        let mut decimals = Vec::new();
        let columns: Vec<ColumnSchema> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let (is_required, labels, items) = facts(c);
                // Required items only in Avro, where making them optional
                // is a compatible widening (see `schemas`' module doc).
                let items = items && kind == SchemaKind::Avro;
                // Only what the schemas hold is checked against them.
                let written = c.included || key.is_some_and(|k| k.contains(&i));
                if is_required && written {
                    required.push(i);
                }
                match (labels, written) {
                    (Some(labels), true) if c.mapping.array => {
                        enum_arrays.push((i, labels.to_vec(), items));
                    }
                    (Some(labels), true) => enums.push((i, labels.to_vec())),
                    _ => {}
                }
                let schema = schemas::column(c.oid, c.typmod, c.mapping, modes, labels, items);
                direct.push(Direct::of(c, &schema));
                let json = kind == SchemaKind::Json && schema.has_decimal();
                decimals.push(json.then(|| schema.clone()));
                ColumnSchema {
                    name: c.name.clone(),
                    schema,
                    required: is_required,
                    included: c.included,
                }
            })
            .collect();
        let [prefix, schema, table, _] = &names;
        let event = schemas::event_schemas(prefix, schema, table, &columns, key);
        let text = |s: &Schema| {
            registry::Schema::new(
                kind,
                schemas::text(kind, s),
                s.name.as_deref().map(Arc::from),
            )
        };
        let schemas = Arc::new(RecordSchemas {
            key: event.key.as_ref().map(text),
            value: text(&event.envelope),
            change: None,
        });
        Encoding {
            kind,
            verbatim: kind == SchemaKind::Json && !event.envelope.has_decimal(),
            event,
            schemas,
            modes,
            avro: (kind == SchemaKind::Avro).then(|| Plan::new(direct, &names)),
            decimals,
            names,
            key: key.map(<[usize]>::to_vec),
            required,
            enums,
            enum_arrays,
        }
    }

    /// Whether its events are written from the cells (`avro`).
    pub(super) fn is_avro(&self) -> bool {
        self.avro.is_some()
    }

    /// `json_schema`: re-encodes `out[start..]`, the JSON path's value of
    /// column `i`, when it holds a `Decimal` (a number under JSON Schema);
    /// `scratch` is free to use.
    pub(super) fn renumber(
        &self,
        i: usize,
        out: &mut Vec<u8>,
        start: usize,
        scratch: &mut Vec<u8>,
    ) -> Result<(), body::BodyError> {
        let Some(Some(schema)) = self.decimals.get(i) else {
            return Ok(());
        };
        scratch.clear();
        body::json_from_json(schema, out.get(start..).unwrap_or_default(), scratch)?;
        out.truncate(start);
        out.extend_from_slice(scratch);
        Ok(())
    }

    /// The error of [`renumber`](Self::renumber) for column `i` of a
    /// record's `part` (`key`, `before`, `after`).
    pub(super) fn renumber_error(
        &self,
        bound: &Bound,
        lsn: Lsn,
        part: &str,
        i: usize,
        e: body::BodyError,
    ) -> TableEventError {
        let column = bound.columns.get(i).map_or("", |c| c.name.as_str());
        let path = match e.path.as_str() {
            "" => format!("{part}.{column}"),
            inner => format!("{part}.{column}.{inner}"),
        };
        misfit(self, bound, lsn, path, e.reason, part)
    }

    /// Its key and envelope schemas.
    #[cfg(test)]
    pub(super) fn event_schemas(&self) -> &EventSchemas {
        &self.event
    }

    /// Its records' schemas when the router writes their bodies as it
    /// makes them (`avro`, `json_schema`); `None`: the JSON path's records
    /// are re-encoded whole by [`TableRouter::encode_tail`] (`protobuf`).
    pub(super) fn written_schemas(&self) -> Option<Arc<RecordSchemas>> {
        (self.kind != SchemaKind::Protobuf).then(|| self.schemas.clone())
    }

    /// What `rows` hold that its schemas do not allow: the positions of
    /// required columns holding NULL and of enum arrays with required
    /// items holding a NULL element, and enum values (of enum columns and
    /// enum arrays' elements) outside their labels (position, value), each
    /// once.
    fn misfits(&self, rows: &[&TupleData]) -> Misfits {
        let mut nulls = Vec::new();
        let mut item_nulls = Vec::new();
        let mut labels: Vec<(usize, String)> = Vec::new();
        let mut unknown = |i: usize, known: &[String], value: &str| {
            if !known.iter().any(|k| k == value)
                && !labels.iter().any(|(j, l)| *j == i && l == value)
            {
                labels.push((i, value.to_owned()));
            }
        };
        for row in rows {
            for &i in &self.required {
                if matches!(row.get(i), Some(Cell::Null)) && !nulls.contains(&i) {
                    nulls.push(i);
                }
            }
            for (i, known) in &self.enums {
                if let Some(Cell::Text(value)) = row.get(*i) {
                    unknown(*i, known, &String::from_utf8_lossy(value));
                }
            }
            for (i, known, items_required) in &self.enum_arrays {
                let Some(Cell::Text(text)) = row.get(*i) else {
                    continue;
                };
                // Text that is no array fails where the JSON path writes it.
                for element in debezium::text_elements(text).unwrap_or_default() {
                    match element {
                        Some(label) => unknown(*i, known, &label),
                        None if *items_required && !item_nulls.contains(i) => item_nulls.push(*i),
                        None => {}
                    }
                }
            }
        }
        (nulls, item_nulls, labels)
    }

    /// Notes, for the error when a registry refuses these schemas, the
    /// columns in `by_catalog` they require only because the catalog said
    /// `NOT NULL` (less those the stream showed NULL in, `widened` for
    /// relation `rel`): a subject whose latest version has them optional
    /// (written before `ALTER TABLE … SET NOT NULL`, or by a walrelay that
    /// did not read the catalog) refuses a required field under BACKWARD.
    pub(super) fn note_required(
        &mut self,
        by_catalog: &[String],
        widened: &HashMap<Oid, Vec<String>>,
        rel: Oid,
    ) {
        let named: Vec<&str> = by_catalog
            .iter()
            .filter(|c| !widened.get(&rel).is_some_and(|w| w.contains(c)))
            .map(String::as_str)
            .collect();
        if named.is_empty() || self.schemas.change.is_some() {
            return;
        }
        let mut schemas = (*self.schemas).clone();
        schemas.change = Some(Arc::from(format!(
            "required because the catalog says NOT NULL: {} (a subject whose latest version has \
             them optional refuses a required field under BACKWARD: docs/compatibility.md, \
             `ALTER TABLE … SET NOT NULL` while running)",
            named.join(", ")
        )));
        self.schemas = Arc::new(schemas);
    }

    /// Notes `change` (what a DDL changed) on the schemas, when they are
    /// not those of `before`.
    pub(super) fn note_change(&mut self, before: &Encoding, change: String) {
        if before.schemas.key == self.schemas.key && before.schemas.value == self.schemas.value {
            // The same shape: the same schemas, shared (and what the last
            // change said stays said).
            self.schemas = before.schemas.clone();
            return;
        }
        let mut schemas = (*self.schemas).clone();
        schemas.change = Some(Arc::from(change));
        self.schemas = Arc::new(schemas);
    }
}

/// What changed between `before`'s and `after`'s columns, for an error
/// that a registry refused the new shape: `column amount: int4 → text`,
/// `column note added (text)`, `column legacy dropped`.
pub(super) fn describe_change(before: &[BoundColumn], after: &[BoundColumn]) -> String {
    let ty = |c: &BoundColumn| type_text(c.oid, c.typmod);
    let mut parts = Vec::new();
    for c in after {
        match before.iter().find(|b| b.name == c.name) {
            None => parts.push(format!("column {} added ({})", c.name, ty(c))),
            Some(b) if (b.oid, b.typmod) != (c.oid, c.typmod) => {
                parts.push(format!("column {}: {} → {}", c.name, ty(b), ty(c)));
            }
            Some(_) => {}
        }
    }
    for b in before {
        if !after.iter().any(|c| c.name == b.name) {
            parts.push(format!("column {} dropped", b.name));
        }
    }
    if parts.is_empty() {
        "the table's replica identity or key changed".to_owned()
    } else {
        parts.join(", ")
    }
}

fn type_text(oid: Oid, typmod: i32) -> String {
    let name = debezium::type_name(oid);
    match oid {
        1700 if typmod >= 4 => format!(
            "{name}({},{})",
            ((typmod - 4) >> 16) & 0xffff,
            (typmod - 4) & 0xffff
        ),
        1043 | 1042 if typmod >= 4 => format!("{name}({})", typmod - 4),
        _ => name,
    }
}

/// The schema facts of relation `rel`'s columns: required unless the
/// stream showed a NULL (`widened[0]`), enum labels by declared type (an
/// enum, an array of one, a domain over one), an enum array's items
/// required unless the stream showed a NULL element (`widened[1]`).
pub(super) fn facts<'a>(
    widened: [&'a HashMap<Oid, Vec<String>>; 2],
    labels: &'a HashMap<Oid, Vec<String>>,
    rel: Oid,
) -> impl Fn(&BoundColumn) -> Facts<'a> {
    move |c| {
        let shown =
            |w: &HashMap<Oid, Vec<String>>| w.get(&rel).is_some_and(|w| w.contains(&c.name));
        (
            c.required && !shown(widened[0]),
            labels.get(&c.type_oid).map(Vec::as_slice),
            !shown(widened[1]),
        )
    }
}

impl TableRouter {
    /// Widens relation `rel`'s schemas to what a change's rows (`new`,
    /// and `old` when it is a whole row) hold, before its records are
    /// made (the module doc's second invariant); `at` names the position.
    pub(super) fn widen_to(
        &mut self,
        rel: Oid,
        old: Option<&TupleData>,
        new: Option<&TupleData>,
        at: Lsn,
    ) {
        let Some(Ok(bound)) = self.bound.get(&rel) else {
            return;
        };
        let Some(encoding) = &bound.encoding else {
            return;
        };
        let old = old.filter(|_| bound.old_rows_whole);
        let rows: Vec<&TupleData> = old.into_iter().chain(new).collect();
        let (nulls, item_nulls, labels) = encoding.misfits(&rows);
        if nulls.is_empty() && item_nulls.is_empty() && labels.is_empty() {
            return;
        }
        let mut said = Vec::new();
        for i in nulls {
            let Some(c) = bound.columns.get(i) else {
                continue;
            };
            self.widened.entry(rel).or_default().push(c.name.clone());
            said.push(format!(
                "column {} holds NULL at {at} although the catalog said NOT NULL at start \
                 (the row is older than the constraint, or newer than its drop): optional \
                 from here on",
                c.name
            ));
        }
        for i in item_nulls {
            let Some(c) = bound.columns.get(i) else {
                continue;
            };
            self.widened_items
                .entry(rel)
                .or_default()
                .push(c.name.clone());
            said.push(format!(
                "column {} holds an array with a NULL element at {at}: its items optional from \
                 here on",
                c.name
            ));
        }
        for (i, label) in labels {
            let Some(c) = bound.columns.get(i) else {
                continue;
            };
            let known = self.enum_labels.entry(c.type_oid).or_default();
            if !known.contains(&label) {
                known.push(label.clone());
            }
            said.push(format!(
                "column {} holds enum label {label:?} at {at}, not among its type's labels at \
                 start (ALTER TYPE … ADD VALUE or RENAME VALUE since): allowed from here on",
                c.name
            ));
        }
        let Some(Ok(bound)) = self.bound.get_mut(&rel) else {
            return;
        };
        let Some(old) = bound.encoding.take() else {
            return;
        };
        let mut wider = Encoding::build(
            old.kind,
            old.modes,
            old.names.clone(),
            &bound.columns,
            old.key.as_deref(),
            facts([&self.widened, &self.widened_items], &self.enum_labels, rel),
        );
        let change = said.join("; ");
        wider.note_change(&old, format!("table {}: {change}", bound.display));
        self.notices.push(format!(
            "table {}: {change} (the next schema version of its subjects, a BACKWARD-compatible \
             widening; the rows are kept)",
            bound.display
        ));
        bound.encoding = Some(wider);
    }

    /// Re-encodes the records `out[from..]` of relation `rel` (just made
    /// by the JSON path) under its schemas, when its format has them.
    pub(super) fn encode_tail(
        &mut self,
        rel: Oid,
        lsn: Lsn,
        out: &mut [Record],
        from: usize,
    ) -> Result<(), TableEventError> {
        let Some(Ok(bound)) = self.bound.get(&rel) else {
            return Ok(());
        };
        let Some(encoding) = &bound.encoding else {
            return Ok(());
        };
        for record in out.iter_mut().skip(from) {
            if record.topic != bound.topic || record.schemas.is_some() {
                continue;
            }
            if let (Some(key), Some(schema)) = (&record.key, &encoding.event.key) {
                let body = encode(encoding, schema, key, &mut self.buf, bound, lsn, "key")?;
                record.key = Some(self.values.copy(body));
            }
            if let Some(value) = &record.value {
                if !encoding.verbatim {
                    let envelope = &encoding.event.envelope;
                    let body = encode(encoding, envelope, value, &mut self.buf, bound, lsn, "")?;
                    record.value = Some(self.values.copy(body));
                }
            }
            record.schemas = Some(encoding.schemas.clone());
            record.recount();
        }
        Ok(())
    }
}

/// `json` (the JSON path's key or envelope) under `schema`, in `buf`.
fn encode<'b>(
    encoding: &Encoding,
    schema: &Schema,
    json: &[u8],
    buf: &'b mut Vec<u8>,
    bound: &Bound,
    lsn: Lsn,
    part: &str,
) -> Result<&'b [u8], TableEventError> {
    buf.clear();
    let written = match encoding.kind {
        SchemaKind::Avro => body::avro_from_json(schema, json, buf),
        SchemaKind::Json => body::json_from_json(schema, json, buf),
        SchemaKind::Protobuf => schemas::protobuf::protobuf_from_json(schema, json, buf),
    };
    written.map_err(|e| {
        let path = match part {
            "" => e.path,
            p => format!("{p}.{}", e.path),
        };
        misfit(encoding, bound, lsn, path, e.reason, part)
    })?;
    Ok(buf)
}

/// A value at `path` of a record's `part` (`key`, or `""` for the value)
/// that does not fit its schema.
fn misfit(
    encoding: &Encoding,
    bound: &Bound,
    lsn: Lsn,
    path: String,
    reason: &str,
    part: &str,
) -> TableEventError {
    TableEventError {
        table: bound.display.clone(),
        column: path,
        lsn,
        reason: format!(
            "the {} value does not fit its {} schema: {reason}",
            if part == "key" { part } else { "event's" },
            match encoding.kind {
                SchemaKind::Avro => "Avro",
                SchemaKind::Json => "JSON",
                SchemaKind::Protobuf => "Protobuf",
            }
        ),
        fix: "a value written as its text form (unmapped_types = \"text\") where the type has \
              a schema of its own cannot be carried: leave the column out with a column list, \
              or use format = \"json\" for this table; otherwise report it as a bug"
            .into(),
    }
}
