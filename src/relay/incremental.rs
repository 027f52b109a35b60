//! Incremental snapshots on the relay's side: which tables, with which key,
//! when (a table added to the configuration, a signal, a stored snapshot to
//! go on with), each chunk published like a transaction at its high
//! watermark, and the progress stored once Kafka holds the chunk. The
//! chunks and their reconciliation with the stream are the source's
//! ([`crate::source::IncrementalPlan`]).
//!
//! Invariants:
//! - **Progress follows Kafka.** A chunk's progress (the key of its last
//!   row) reaches the offset store only with an offset at or past its high
//!   watermark, and the frontier passes the watermark only once every record
//!   of the chunk (and of everything streamed before it) is acknowledged. A
//!   restart therefore re-reads at most the chunks after the last stored
//!   one.
//! - **A signal starts one snapshot.** A signal is acted on where the stream
//!   carries it; once the offset store is past it, it is never replayed,
//!   and the snapshot it started is in the stored progress: the plan goes
//!   into the offset template at the signal's position, before any chunk
//!   (a kill between the signal and the first chunk once lost it).
//! - **A table added to the configuration gets its existing rows.** The
//!   offset store keeps the tables the connector was configured with
//!   (`known_tables`); a start that finds one more (and a snapshot mode
//!   other than `no_data`) snapshots it incrementally.

use std::collections::HashMap;

use crate::Lsn;
use crate::config::{Config, SnapshotMode};
use crate::offsets::{IncrementalProgress, IncrementalTableProgress, SnapshotState, StoredOffset};
use crate::source::{ChunkTable, IncrementalPlan};
use crate::startup::TableEventTable;

/// The prefix of signal messages (`walrelay snapshot` writes them).
pub const SIGNAL_PREFIX: &str = "walrelay.signal";

/// What chunking a table needs: its key, and whether its rows never change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Spec {
    pub(super) key: Vec<String>,
    pub(super) inserts_only: bool,
}

/// The configured tables (`schema.table`) and their [`Spec`]s, in
/// configuration order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Specs {
    pub(super) tables: Vec<(String, Spec)>,
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
        Specs { tables }
    }

    /// The tables' names.
    pub(super) fn names(&self) -> Vec<String> {
        self.tables.iter().map(|(t, _)| t.clone()).collect()
    }

    fn get(&self, table: &str) -> Option<&Spec> {
        self.tables.iter().find(|(t, _)| t == table).map(|(_, s)| s)
    }

    /// A chunk table for `table`, or why not. Its key is the configured
    /// one; the chunk reader checks it against the table and pages by a
    /// unique key of the table instead when it is not one
    /// ([`crate::pg::snapshot::SnapshotReader::chunk_key`]).
    pub(super) fn chunk_table(
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
                        id: format!("added-{}", super::heartbeat::now_ms()),
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
pub(super) fn to_stored(plan: &IncrementalPlan, rows: u64) -> IncrementalProgress {
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
pub(super) fn from_stored(p: &IncrementalProgress, chunk_rows: usize) -> IncrementalPlan {
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

/// `walrelay snapshot --cancel`: writes the signal that makes the running
/// connector (or the next one to stream, where the stream carries it) give
/// up the incremental snapshot of `table` (of every table when `None`).
/// Returns the signal's id and LSN.
pub async fn cancel_snapshot(
    config: &Config,
    table: Option<&str>,
) -> Result<(String, Lsn), String> {
    let params = super::connect_params(config);
    let client = crate::pg::catalog::connect(&params)
        .await
        .map_err(|e| e.to_string())?;
    let table = table.map(|t| {
        if t.contains('.') {
            t.to_owned()
        } else {
            format!("public.{t}")
        }
    });
    let id = format!("cancel-{}", super::heartbeat::now_ms());
    let lsn = crate::pg::catalog::emit_message_flushed(
        &client,
        SIGNAL_PREFIX,
        &stop_signal_json(&config.connector.name, &id, table.as_deref()),
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok((id, lsn))
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

/// `walrelay snapshot`: checks that `table` is one this connector captures
/// (with a key to chunk by), then writes the signal that asks the running
/// connector for an incremental snapshot of it (of the rows satisfying
/// `filter`). Returns the signal's id and LSN. The connector acts on it
/// where the stream carries it: if none runs, when one next streams.
pub async fn request_snapshot(
    config: &Config,
    table: &str,
    filter: Option<&str>,
) -> Result<(String, Lsn), String> {
    let params = super::connect_params(config);
    let client = crate::pg::catalog::connect(&params)
        .await
        .map_err(|e| e.to_string())?;
    let captured = crate::startup::table_event_tables(&client, config)
        .await
        .map_err(|e| format!("{}; {}", e.problem(), e.fix()))?;
    let specs = Specs::new(config, &captured);
    let table = if table.contains('.') {
        table.to_owned()
    } else {
        format!("public.{table}")
    };
    let chunk = specs.chunk_table(&table, filter.map(str::to_owned))?;
    // A table with no key to page by is refused now, not found out by the
    // running connector.
    let reader = crate::pg::snapshot::SnapshotReader::open_for_chunks(&params)
        .await
        .map_err(|e| e.to_string())?;
    let relation = reader
        .table_relation(
            &chunk.schema,
            &chunk.name,
            Some(&config.postgres.publication),
        )
        .await
        .map_err(|e| e.to_string())?;
    reader
        .chunk_key(&relation, &chunk.key, chunk.inserts_only)
        .await
        .map_err(|e| e.to_string())?;
    drop(reader);
    if let Some(filter) = filter {
        // A condition the server cannot parse would stop the snapshot at
        // its first chunk: find out now.
        client
            .execute(
                &format!(
                    "EXPLAIN SELECT 1 FROM {} WHERE ({filter})",
                    table
                        .split('.')
                        .map(postgres_protocol::escape::escape_identifier)
                        .collect::<Vec<_>>()
                        .join(".")
                ),
                &[],
            )
            .await
            .map_err(|e| {
                format!(
                    "--where {filter:?} is not a valid condition on {table}: {}",
                    crate::pg::catalog::describe(&e)
                )
            })?;
    }
    let id = format!("snapshot-{}", super::heartbeat::now_ms());
    let lsn = crate::pg::catalog::emit_message_flushed(
        &client,
        SIGNAL_PREFIX,
        &signal_json(&config.connector.name, &id, &table, filter),
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok((id, lsn))
}

impl super::streaming::Streaming {
    /// A signal in the stream: starts (or extends) an incremental snapshot.
    /// A signal that is not for this connector is ignored; one that is but
    /// cannot be followed is logged, and streaming goes on.
    pub(super) fn on_signal(
        &mut self,
        lsn: Lsn,
        content: &[u8],
        source: &mut crate::source::Source,
    ) {
        let signal = match parse_signal(content, &self.config.connector.name, lsn) {
            Ok(Some(signal)) => signal,
            Ok(None) => return,
            Err(why) => {
                tracing::warn!(%lsn, "ignoring a signal: {why}");
                return;
            }
        };
        if signal.stop {
            let names: Vec<String> = signal.tables.into_iter().map(|(t, _)| t).collect();
            let why = format!("cancelled by signal {} at {lsn}", signal.id);
            match source.cancel_incremental(&names, &why) {
                Some((given_up, plan)) if !given_up.is_empty() => {
                    tracing::warn!(
                        %lsn, signal = %signal.id, id = %plan.id,
                        "incremental snapshot cancelled for {}", given_up.join(", ")
                    );
                    let rows = self.incremental_rows_before(&plan.id);
                    self.incremental_pending
                        .push_back((lsn, plan.clone(), rows));
                    self.incremental_metrics(&plan);
                }
                _ => tracing::info!(
                    %lsn, signal = %signal.id,
                    "stop-snapshot signal: no incremental snapshot of {} runs",
                    if names.is_empty() { "any table".to_owned() } else { names.join(", ") }
                ),
            }
            return;
        }
        let mut tables = Vec::new();
        for (table, filter) in signal.tables {
            match self.chunk_specs.chunk_table(&table, filter) {
                Ok(t) => tables.push(t),
                Err(why) => {
                    tracing::warn!(%lsn, signal = %signal.id, "ignoring a table of a signal: {why}")
                }
            }
        }
        if tables.is_empty() {
            return;
        }
        tracing::info!(
            %lsn, signal = %signal.id,
            tables = %tables.iter().map(ChunkTable::display).collect::<Vec<_>>().join(", "),
            "signal: incremental snapshot requested"
        );
        let plan = IncrementalPlan {
            id: signal.id,
            tables,
            chunk_rows: self.config.snapshot.chunk_rows,
        };
        self.start_incremental(source, plan);
        // Stored with the first offset at or past the signal, before any
        // chunk: the offset store passing the signal means it is never
        // replayed, so the snapshot it asked for must be in the stored
        // progress from then on (a kill before the first chunk lost it).
        if let Some(plan) = source.incremental_plan() {
            let rows = self.incremental_rows_before(&plan.id);
            self.incremental_pending
                .push_back((lsn, plan.clone(), rows));
        }
    }

    /// Starts `plan` beside the stream (see [`crate::source::Source::start_incremental`]).
    pub(super) fn start_incremental(
        &mut self,
        source: &mut crate::source::Source,
        plan: IncrementalPlan,
    ) {
        let config = &self.config;
        source.start_incremental(
            &super::connect_params(config),
            &config.postgres.publication,
            &config.connector.name,
            plan,
        );
        if let Some(plan) = source.incremental_plan() {
            let plan = plan.clone();
            self.incremental_metrics(&plan);
        }
    }

    /// The running and remaining-tables gauges for `plan`.
    fn incremental_metrics(&self, plan: &IncrementalPlan) {
        use std::sync::atomic::Ordering;
        self.metrics
            .incremental_running
            .store(!plan.done(), Ordering::Relaxed);
        self.metrics.incremental_tables_remaining.store(
            plan.tables.iter().filter(|t| !t.done).count() as u64,
            Ordering::Relaxed,
        );
    }

    /// Rows of snapshot `id` published before now (in progress not yet
    /// stored, else stored).
    fn incremental_rows_before(&self, id: &str) -> u64 {
        self.incremental_pending
            .back()
            .filter(|(_, p, _)| p.id == id)
            .map(|(_, _, r)| *r)
            .or_else(|| {
                self.offsets
                    .template()
                    .incremental
                    .as_ref()
                    .filter(|p| p.id == id)
                    .map(|p| p.rows)
            })
            .unwrap_or(0)
    }

    /// Publishes one chunk as a transaction of its own at its high
    /// watermark `lsn`, and keeps its progress until the offset store may
    /// hold it. Without `relation` the table was given up: an empty
    /// transaction carries the plan that says so.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn on_snapshot_chunk(
        &mut self,
        lsn: Lsn,
        table: usize,
        relation: Option<&std::sync::Arc<crate::pgoutput::Relation>>,
        rows: Vec<crate::pgoutput::TupleData>,
        read: usize,
        plan: IncrementalPlan,
        source: &crate::source::Source,
    ) -> Result<(), super::RelayError> {
        if self.checkpoint.open_txn().is_some() {
            return Err(super::RelayError::Stream {
                lsn,
                what: "an incremental snapshot chunk inside a transaction".into(),
            });
        }
        let table_name = plan
            .tables
            .get(table)
            .map(ChunkTable::display)
            .unwrap_or_default();
        let txn = self.checkpoint.begin()?;
        let Some(relation) = relation else {
            self.checkpoint.commit(txn, lsn)?;
            return self.chunk_published(lsn, table, 0, read, plan).await;
        };
        // Route with the chunk's shape, then put back the stream's.
        self.router.on_relation(relation);
        if let Some(warning) = self.tables.on_relation(relation, lsn)? {
            tracing::warn!("{warning}");
        }
        let published = rows.len() as u64;
        let now_ms = super::heartbeat::now_ms();
        let result = async {
            for (index, row) in rows.iter().enumerate() {
                let pos = crate::source::Position {
                    commit_lsn: lsn,
                    index: index as u64,
                };
                if self.tables.claims(relation.oid) {
                    let mut records = std::mem::take(&mut self.table_records);
                    records.clear();
                    let made = self.tables.on_snapshot_row(
                        relation.oid,
                        row,
                        lsn,
                        pos.index,
                        now_ms,
                        crate::router::table::SnapshotMarker::Incremental,
                        &mut records,
                    );
                    let sent = match made {
                        Ok(()) => {
                            let mut sent = Ok(());
                            for record in records.drain(..) {
                                sent = self.publish(txn, pos, &record, super::streaming::Counted::Other).await;
                                if sent.is_err() {
                                    break;
                                }
                            }
                            sent
                        }
                        Err(e) => Err(e.into()),
                    };
                    self.table_records = records;
                    sent?;
                    continue;
                }
                match self.router.on_incremental_row(relation.oid, row, lsn)? {
                    crate::router::Routed::Record(record) => {
                        self.publish(txn, pos, &record, super::streaming::Counted::Other).await?;
                    }
                    other => {
                        return Err(super::RelayError::Stream {
                            lsn,
                            what: format!("an incremental snapshot row of {table_name} was not routed: {other:?}"),
                        });
                    }
                }
            }
            Ok::<(), super::RelayError>(())
        }
        .await;
        if let Some(streamed) = source.streamed_relation(relation.oid)
            && streamed.as_ref() != relation.as_ref()
        {
            self.router.on_relation(&streamed);
            self.tables.on_relation(&streamed, lsn)?;
        }
        result?;
        self.checkpoint.commit(txn, lsn)?;
        self.chunk_published(lsn, table, published, read, plan)
            .await
    }

    /// A chunk's `published` rows are in the checkpoint's transaction at
    /// `lsn`: counts them and keeps the plan until the offset store may
    /// hold it.
    async fn chunk_published(
        &mut self,
        lsn: Lsn,
        table: usize,
        published: u64,
        read: usize,
        plan: IncrementalPlan,
    ) -> Result<(), super::RelayError> {
        use std::sync::atomic::Ordering;
        let table_name = plan
            .tables
            .get(table)
            .map(ChunkTable::display)
            .unwrap_or_default();
        self.incremental_rows += published;
        self.metrics
            .incremental_rows
            .fetch_add(published, Ordering::Relaxed);
        self.incremental_metrics(&plan);
        let table_done = plan
            .tables
            .get(table)
            .is_some_and(|t| t.done && t.abandoned.is_none());
        tracing::debug!(
            table = %table_name, %lsn, read, published,
            "incremental snapshot chunk published"
        );
        if table_done {
            tracing::info!(
                table = %table_name, id = %plan.id,
                "incremental snapshot: table read (done once Kafka holds its last chunk)"
            );
        }
        // Rows of this snapshot published before this chunk.
        let stored_rows = self.incremental_rows_before(&plan.id);
        self.incremental_pending
            .push_back((lsn, plan, stored_rows + published));
        // `exactly_once`: a commit here carries this chunk's progress with
        // its rows (pushed just above), never one without the other.
        self.at_commit_point().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_have_debeziums_shape() {
        let text = signal_json("orders", "s1", "public.outbox", Some("id > 5"));
        let signal = parse_signal(text.as_bytes(), "orders", Lsn(1))
            .unwrap()
            .unwrap();
        assert_eq!(signal.id, "s1");
        assert_eq!(
            signal.tables,
            [("public.outbox".to_owned(), Some("id > 5".to_owned()))]
        );
        // Another connector's signal is not ours.
        assert_eq!(
            parse_signal(text.as_bytes(), "billing", Lsn(1)).unwrap(),
            None
        );
        // Debezium's own shape, without a connector: for every connector.
        let debezium = br#"{"id":"d-1","type":"execute-snapshot","data":{"data-collections":["public.customers"],"type":"INCREMENTAL"}}"#;
        let signal = parse_signal(debezium, "orders", Lsn(1)).unwrap().unwrap();
        assert_eq!(signal.tables, [("public.customers".to_owned(), None)]);
        // What walrelay cannot do is said, not ignored.
        let blocking = br#"{"type":"execute-snapshot","data":{"data-collections":["public.t"],"type":"blocking"}}"#;
        assert!(
            parse_signal(blocking, "orders", Lsn(1))
                .unwrap_err()
                .contains("blocking")
        );
        assert!(parse_signal(br#"{"type":"pause-snapshot"}"#, "orders", Lsn(1)).is_err());
        // A stop names its tables, or none (all).
        let stop = parse_signal(br#"{"type":"stop-snapshot"}"#, "orders", Lsn(1))
            .unwrap()
            .unwrap();
        assert!(stop.stop && stop.tables.is_empty());
        let text = stop_signal_json("orders", "c1", Some("public.items"));
        let stop = parse_signal(text.as_bytes(), "orders", Lsn(1))
            .unwrap()
            .unwrap();
        assert_eq!((stop.id.as_str(), stop.stop), ("c1", true));
        assert_eq!(stop.tables, [("public.items".to_owned(), None)]);
        assert_eq!(
            parse_signal(text.as_bytes(), "billing", Lsn(1)).unwrap(),
            None
        );
        assert!(parse_signal(b"{", "orders", Lsn(1)).is_err());
    }

    #[test]
    fn stored_progress_round_trips() {
        let plan = IncrementalPlan {
            id: "x".into(),
            chunk_rows: 10,
            tables: vec![ChunkTable {
                schema: "public".into(),
                name: "outbox".into(),
                key: vec!["id".into()],
                filter: Some("a = 1".into()),
                inserts_only: true,
                after: Some(vec![Some("k".into()), None]),
                done: false,
                abandoned: None,
            }],
        };
        assert_eq!(from_stored(&to_stored(&plan, 3), 10), plan);
        assert_eq!(to_stored(&plan, 3).rows, 3);
    }
}
