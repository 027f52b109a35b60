//! Incremental snapshots on the relay's side: which tables, with which key,
//! when (a table added to the configuration, a signal, a stored snapshot to
//! go on with — [`plan`]), each chunk published like a transaction at its
//! high watermark, and the progress stored once Kafka holds the chunk. The
//! chunks and their reconciliation with the stream are the source's
//! ([`crate::source::IncrementalPlan`]). [`Incremental`] is the phase's
//! state; it publishes through the session's [`Publisher`] (and
//! `[[table]]` rows through [`TableEvents`]).
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

mod plan;

pub(super) use plan::to_stored;
pub(crate) use plan::{Specs, plan_at_start};

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::RelayError;
use super::publish::{Counted, Publisher};
use super::signal::parse_signal;
use super::table_events::TableEvents;
use crate::Lsn;
use crate::pgoutput::{Relation, TupleData};
use crate::source::{ChunkTable, IncrementalPlan, Position, Source};

/// Incremental snapshots: the phase's state.
#[derive(Debug, Default)]
pub(super) struct Incremental {
    /// The configured tables' keys.
    specs: Specs,
}

impl Incremental {
    pub(super) fn new(specs: Specs) -> Incremental {
        Incremental { specs }
    }

    /// Whether chunks are placed by read-only watermarks.
    pub(super) fn read_only(&self) -> bool {
        self.specs.read_only
    }

    /// A signal in the stream: starts (or extends) an incremental snapshot.
    /// A signal that is not for this connector is ignored; one that is but
    /// cannot be followed is logged, and streaming goes on.
    pub(super) fn on_signal(
        &mut self,
        publisher: &mut Publisher,
        lsn: Lsn,
        content: &[u8],
        source: &mut Source,
    ) {
        let config = publisher.config().clone();
        let signal = match parse_signal(content, &config.connector.name, lsn) {
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
                    carry(publisher, lsn, &plan, 0);
                    gauges(publisher, &plan);
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
            match self.specs.chunk_table(&table, filter) {
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
            chunk_rows: config.snapshot.chunk_rows,
        };
        start(publisher, source, plan, self.specs.read_only);
        // Stored with the first offset at or past the signal, before any
        // chunk: the offset store passing the signal means it is never
        // replayed, so the snapshot it asked for must be in the stored
        // progress from then on (a kill before the first chunk lost it).
        if let Some(plan) = source.incremental_plan() {
            carry(publisher, lsn, plan, 0);
        }
    }

    /// Publishes one chunk as a transaction of its own at its high
    /// watermark `lsn`, and keeps its progress until the offset store may
    /// hold it. Without `relation` the table was given up: an empty
    /// transaction carries the plan that says so.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn on_chunk(
        &mut self,
        publisher: &mut Publisher,
        table_events: &mut TableEvents,
        lsn: Lsn,
        table: usize,
        relation: Option<&Arc<Relation>>,
        rows: Vec<TupleData>,
        read: usize,
        plan: IncrementalPlan,
        source: &Source,
    ) -> Result<(), RelayError> {
        if publisher.checkpoint().open_txn().is_some() {
            return Err(RelayError::Stream {
                lsn,
                what: "an incremental snapshot chunk inside a transaction".into(),
            });
        }
        let table_name = plan
            .tables
            .get(table)
            .map(ChunkTable::display)
            .unwrap_or_default();
        let txn = publisher.checkpoint_mut().begin()?;
        let Some(relation) = relation else {
            publisher.checkpoint_mut().commit(txn, lsn)?;
            return chunk_published(publisher, lsn, table, 0, read, plan).await;
        };
        // Route with the chunk's shape, then put back the stream's.
        publisher.router_mut().on_relation(relation);
        table_events.rebind(relation, lsn)?;
        let published = rows.len() as u64;
        let now_ms = crate::telemetry::unix_ms();
        let result = async {
            for (index, row) in rows.iter().enumerate() {
                let pos = Position {
                    commit_lsn: lsn,
                    index: index as u64,
                };
                if table_events.claims(relation.oid) {
                    table_events
                        .publish_chunk_row(publisher, txn, pos, relation, row, now_ms)
                        .await?;
                    continue;
                }
                match publisher
                    .router_mut()
                    .on_incremental_row(relation.oid, row, lsn)?
                {
                    crate::router::Routed::Record(record) => {
                        publisher.publish(txn, pos, &record, Counted::Other).await?;
                    }
                    other => {
                        return Err(RelayError::Stream {
                            lsn,
                            what: format!(
                                "an incremental snapshot row of {table_name} was not routed: {other:?}"
                            ),
                        });
                    }
                }
            }
            Ok::<(), RelayError>(())
        }
        .await;
        if let Some(streamed) = source.streamed_relation(relation.oid)
            && streamed.as_ref() != relation.as_ref()
        {
            publisher.router_mut().on_relation(&streamed);
            table_events.rebind(&streamed, lsn)?;
        }
        result?;
        publisher.checkpoint_mut().commit(txn, lsn)?;
        chunk_published(publisher, lsn, table, published, read, plan).await
    }
}

/// Starts `plan` beside the stream (see [`Source::start_incremental`]).
pub(super) fn start(
    publisher: &Publisher,
    source: &mut Source,
    plan: IncrementalPlan,
    read_only: bool,
) {
    let config = publisher.config();
    let reads = config
        .postgres
        .capture_from
        .from_standby()
        .then(|| crate::pg::params::capture_params(config));
    source.start_incremental(
        &crate::pg::params::connect_params(config),
        reads.as_ref(),
        &config.postgres.publication,
        &config.connector.name,
        plan,
        read_only,
    );
    if let Some(plan) = source.incremental_plan() {
        gauges(publisher, plan);
    }
}

/// The running and remaining-tables gauges for `plan`.
fn gauges(publisher: &Publisher, plan: &IncrementalPlan) {
    let metrics = publisher.metrics();
    metrics
        .incremental_running
        .store(!plan.done(), Ordering::Relaxed);
    metrics.incremental_tables_remaining.store(
        plan.tables.iter().filter(|t| !t.done).count() as u64,
        Ordering::Relaxed,
    );
}

/// `plan`, with `published` more rows than before, goes into the offset
/// store with the first write at or past `lsn`.
fn carry(publisher: &mut Publisher, lsn: Lsn, plan: &IncrementalPlan, published: u64) {
    // Rows of this snapshot published before (carried, else stored).
    let rows = publisher.offsets().incremental_rows(&plan.id) + published;
    publisher.offsets_mut().carry(lsn, to_stored(plan, rows));
}

/// A chunk's `published` rows are in the checkpoint's transaction at
/// `lsn`: counts them and keeps the plan until the offset store may hold
/// it.
async fn chunk_published(
    publisher: &mut Publisher,
    lsn: Lsn,
    table: usize,
    published: u64,
    read: usize,
    plan: IncrementalPlan,
) -> Result<(), RelayError> {
    let table_name = plan
        .tables
        .get(table)
        .map(ChunkTable::display)
        .unwrap_or_default();
    publisher
        .metrics()
        .incremental_rows
        .fetch_add(published, Ordering::Relaxed);
    gauges(publisher, &plan);
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
    carry(publisher, lsn, &plan, published);
    // `exactly_once`: a commit here carries this chunk's progress with its
    // rows (carried just above), never one without the other.
    publisher.at_commit_point().await
}
