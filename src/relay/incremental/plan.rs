//! What an incremental snapshot reads: the configured tables' chunk keys
//! ([`Specs`]), the plan a start goes on with (the stored one, checked
//! again against the configuration, plus tables added to it), and the plan
//! as the offset store keeps it.
//!
//! Invariants:
//! - **A plan that cannot run is given up, never a crash loop.** Every
//!   start checks the stored plan again ([`plan_at_start`]): a table no
//!   longer configured, or whose condition is refused, is given up with a
//!   warning that names why; the other tables go on.
//! - **A table added to the configuration gets its existing rows.** The
//!   offset store keeps the tables the connector was configured with
//!   (`known_tables`); a start that finds one more (and a snapshot mode
//!   other than `no_data`) snapshots it incrementally.

use crate::config::{Config, SnapshotMode};
use crate::offsets::{IncrementalProgress, IncrementalTableProgress, SnapshotState, StoredOffset};
use crate::source::{ChunkTable, IncrementalPlan};
use crate::startup::TableEventTable;

/// What chunking a table needs: its key, and whether its rows never change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::relay) struct Spec {
    pub(in crate::relay) key: Vec<String>,
    pub(in crate::relay) inserts_only: bool,
}

/// The configured tables (`schema.table`) and their [`Spec`]s, in
/// configuration order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Specs {
    pub(in crate::relay) tables: Vec<(String, Spec)>,
    /// Chunks are placed in the stream by read-only watermarks
    /// (`[snapshot] watermarks`, as resolved on the server at start).
    pub(in crate::relay) read_only: bool,
}

impl Specs {
    /// Outbox tables chunk by their event id column (unique by design);
    /// `[[table]]` tables by `key_columns`, else their primary key.
    pub(crate) fn new(config: &Config, captured: &[TableEventTable]) -> Specs {
        let mut tables: Vec<(String, Spec)> = config
            .outbox
            .iter()
            .map(|o| {
                (
                    format!("{}.{}", o.table.schema, o.table.name),
                    Spec {
                        key: vec![o.id_column.clone()],
                        inserts_only: true,
                    },
                )
            })
            .collect();
        tables.extend(captured.iter().map(|c| {
            (
                format!("{}.{}", c.table.schema, c.table.name),
                Spec {
                    key: c.snapshot_order(&config.tables[c.entry]).to_vec(),
                    inserts_only: false,
                },
            )
        }));
        Specs {
            tables,
            read_only: false,
        }
    }

    /// The tables' names.
    pub(in crate::relay) fn names(&self) -> Vec<String> {
        self.tables.iter().map(|(t, _)| t.clone()).collect()
    }

    fn get(&self, table: &str) -> Option<&Spec> {
        self.tables.iter().find(|(t, _)| t == table).map(|(_, s)| s)
    }

    /// A chunk table for `table`, or why not. Its key is the configured
    /// one; the chunk reader checks it against the table and pages by a
    /// unique key of the table instead when it is not one
    /// ([`crate::pg::snapshot::SnapshotReader::chunk_key`]).
    pub(crate) fn chunk_table(
        &self,
        table: &str,
        filter: Option<String>,
    ) -> Result<ChunkTable, String> {
        let spec = self.get(table).ok_or_else(|| {
            format!(
                "{table} is not a table this connector captures ({})",
                self.names().join(", ")
            )
        })?;
        if let Some(filter) = &filter {
            crate::pg::filter::check(filter)
                .map_err(|why| format!("the condition for {table} is refused: {why}"))?;
        }
        let (schema, name) = table.split_once('.').unwrap_or(("public", table));
        Ok(ChunkTable {
            schema: schema.to_owned(),
            name: name.to_owned(),
            key: spec.key.clone(),
            filter,
            inserts_only: spec.inserts_only,
            after: None,
            done: false,
            abandoned: None,
        })
    }
}

/// The plan to go on with at start: the stored incremental snapshot if it
/// is not done, plus the tables configured since the offset was written
/// (unless `mode = "no_data"`), whose names come second.
pub(crate) fn plan_at_start(
    config: &Config,
    stored: Option<&StoredOffset>,
    specs: &Specs,
) -> (Option<IncrementalPlan>, Vec<String>) {
    let chunk_rows = config.snapshot.chunk_rows;
    let mut added_names = Vec::new();
    let mut plan = stored
        .and_then(|s| s.incremental.as_ref())
        .filter(|p| !p.done())
        .map(|p| from_stored(p, chunk_rows));
    if let Some(p) = &mut plan {
        recheck(p, specs);
    }
    let known_before: Option<Vec<String>> = stored.and_then(|s| {
        if !s.known_tables.is_empty() {
            Some(s.known_tables.clone())
        } else {
            // Offsets from before walrelay kept the list: the tables of a
            // completed initial snapshot are the ones it knew.
            s.snapshot
                .as_ref()
                .filter(|p| p.state == SnapshotState::Completed)
                .map(|p| p.tables_done.clone())
        }
    });
    if config.snapshot.mode != Some(SnapshotMode::NoData)
        && let Some(known) = known_before
    {
        let added: Vec<ChunkTable> = specs
            .names()
            .into_iter()
            .filter(|t| !known.contains(t))
            .filter(|t| {
                plan.as_ref()
                    .is_none_or(|p| !p.tables.iter().any(|c| &c.display() == t))
            })
            .filter_map(|t| match specs.chunk_table(&t, None) {
                Ok(c) => Some(c),
                Err(why) => {
                    tracing::warn!(table = %t, "{t} was added to the configuration, but its existing rows cannot be snapshotted: {why}");
                    None
                }
            })
            .collect();
        added_names = added.iter().map(ChunkTable::display).collect();
        if !added.is_empty() {
            match &mut plan {
                Some(p) => p.tables.extend(added),
                None => {
                    plan = Some(IncrementalPlan {
                        id: format!("added-{}", crate::telemetry::unix_ms()),
                        tables: added,
                        chunk_rows,
                    });
                }
            }
        }
    }
    (plan, added_names)
}

/// Checks a stored plan against the configuration of this start: a table
/// no longer configured, or whose condition is now refused, is given up
/// with a warning that says so (a plan that cannot run must not stop every
/// start). What only the database can tell — the table dropped or renamed,
/// its key gone — is found by the chunk that reads it
/// ([`crate::pg::snapshot::SnapshotError::gives_up_table`]).
fn recheck(plan: &mut IncrementalPlan, specs: &Specs) {
    let id = plan.id.clone();
    for t in plan.tables.iter_mut().filter(|t| !t.done) {
        let table = t.display();
        let why = match specs.get(&table) {
            None => Some(format!(
                "{table} is no longer a table this connector captures ({})",
                specs.names().join(", ")
            )),
            Some(spec) => {
                if t.after.is_none() && !spec.key.is_empty() {
                    // Not started: follow the configuration as it is now.
                    t.key.clone_from(&spec.key);
                }
                t.inserts_only = spec.inserts_only;
                t.filter.as_deref().and_then(|f| {
                    crate::pg::filter::check(f)
                        .err()
                        .map(|why| format!("its condition is refused: {why}"))
                })
            }
        };
        if let Some(why) = why {
            tracing::warn!(
                %table, %id,
                "the stored incremental snapshot {id} cannot go on with {table}, which is given \
                 up: {why}"
            );
            t.done = true;
            t.abandoned = Some(why);
        }
    }
}

/// The plan as the offset store keeps it.
pub(in crate::relay) fn to_stored(plan: &IncrementalPlan, rows: u64) -> IncrementalProgress {
    IncrementalProgress {
        id: plan.id.clone(),
        rows,
        tables: plan
            .tables
            .iter()
            .map(|t| IncrementalTableProgress {
                table: t.display(),
                key: t.key.clone(),
                filter: t.filter.clone(),
                inserts_only: t.inserts_only,
                after: t.after.clone(),
                done: t.done,
                abandoned: t.abandoned.clone(),
            })
            .collect(),
    }
}

/// The stored plan, to go on with.
pub(in crate::relay) fn from_stored(p: &IncrementalProgress, chunk_rows: usize) -> IncrementalPlan {
    IncrementalPlan {
        id: p.id.clone(),
        chunk_rows,
        tables: p
            .tables
            .iter()
            .map(|t| {
                let (schema, name) = t.table.split_once('.').unwrap_or(("public", &t.table));
                ChunkTable {
                    schema: schema.to_owned(),
                    name: name.to_owned(),
                    key: t.key.clone(),
                    filter: t.filter.clone(),
                    inserts_only: t.inserts_only,
                    after: t.after.clone(),
                    done: t.done,
                    abandoned: t.abandoned.clone(),
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests;
