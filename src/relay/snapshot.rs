//! The snapshot phase of a session: snapshot rows in, records out, and the
//! offset store told `completed` only once Kafka holds every one of them.
//! The phase runs in the session's one loop ([`Streaming::stream`]: sends,
//! acknowledgements, the stall watchdog, offset writes); this module is its
//! share of that loop: the rows, the per-table counts, the progress, and
//! `completed`.
//!
//! Invariants (beside the parent module's):
//! - **Nothing streams before the snapshot is safe.** Streaming starts (the
//!   caller's `start_streaming`) only after every snapshot record was
//!   acknowledged and the offset store acknowledged `completed` with the
//!   consistent point. A crash before that leaves `running` stored, and the
//!   next session takes the snapshot again.
//! - **Bounded memory.** Snapshot records count against the same in-flight
//!   limits as streamed ones (one checkpoint transaction spans the
//!   snapshot); while full, the readers are not read, and they stop reading
//!   the server.
//! - **A table is done when Kafka holds it**: the progress stored and
//!   logged names a table done only when all its rows were read and
//!   acknowledged.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::streaming::{Counted, Streaming};
use super::{Ack, RelayError};
use crate::Lsn;
use crate::offsets::{SnapshotProgress, SnapshotState};
use crate::pgoutput::{Relation, TupleData};
use crate::router::Routed;
use crate::source::{Position, Source, SourceEvent};

/// How often progress is logged (and stored in the offset store).
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// How the snapshot phase ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SnapshotEnd {
    /// Every record acknowledged and `completed` stored at this position.
    Completed { consistent_point: Lsn, rows: u64 },
    /// Shutdown was asked for first; `running` stays stored.
    Stopped,
}

/// Per-table bookkeeping: rows read, acknowledged, whether reading ended.
#[derive(Debug, Clone, Default)]
pub(super) struct TableCount {
    pub(super) table: String,
    pub(super) sent: u64,
    pub(super) acked: u64,
    pub(super) read: bool,
}

impl TableCount {
    fn done(&self) -> bool {
        self.read && self.acked == self.sent
    }
}

/// The initial snapshot under way: what the session's one loop
/// ([`Streaming::stream`]) needs besides what streaming needs.
#[derive(Debug)]
pub(super) struct InitialSnapshot {
    /// The checkpoint transaction every snapshot record belongs to.
    txn: crate::checkpoint::TxnId,
    started: Instant,
    last_report: Instant,
    rows_read: u64,
    rates: RateWindow,
    /// Every table was read: the consistent point.
    read_all: Option<Lsn>,
}

impl Streaming {
    /// Starts the snapshot phase: the loop then publishes the rows `source`
    /// reads (see the module doc) until [`Streaming::snapshot_safe`].
    pub(super) fn begin_snapshot(&mut self, source: &Source) -> Result<(), RelayError> {
        let started = Instant::now();
        let txn = self.checkpoint.begin()?;
        self.offsets
            .unit_begins(super::transaction_clock::Unit::Snapshot);
        self.snapshot_marks = Default::default();
        self.snapshot_tables = source
            .snapshot_progress()
            .iter()
            .map(|p| TableCount {
                table: p.table.clone(),
                ..TableCount::default()
            })
            .collect();
        self.metrics.snapshot_running.store(true, Ordering::Relaxed);
        self.metrics
            .snapshot_tables_remaining
            .store(self.snapshot_tables.len() as u64, Ordering::Relaxed);
        self.initial = Some(InitialSnapshot {
            txn,
            started,
            last_report: started,
            rows_read: 0,
            rates: RateWindow::new(started),
            read_all: None,
        });
        Ok(())
    }

    /// Whether every table was read (the source has nothing more before
    /// streaming starts).
    pub(super) fn snapshot_read_all(&self) -> bool {
        self.initial.as_ref().is_some_and(|i| i.read_all.is_some())
    }

    /// Every table was read and every record acknowledged, no offset write
    /// pending: the loop ends, and [`Streaming::complete_snapshot`] stores
    /// `completed`. Also keeps the tables-remaining gauge current.
    pub(super) fn snapshot_safe(&self) -> bool {
        self.metrics.snapshot_tables_remaining.store(
            self.snapshot_tables.iter().filter(|t| !t.done()).count() as u64,
            Ordering::Relaxed,
        );
        self.snapshot_read_all()
            && self.awaiting_reports == 0
            && self.checkpoint.pending_txns() == 0
            && self.offsets.in_flight().is_none()
    }

    /// The snapshot's share of a tick: progress logged and stored every
    /// [`PROGRESS_EVERY`].
    pub(super) async fn snapshot_tick(&mut self, source: &Source) -> Result<(), RelayError> {
        let Some(initial) = self.initial.as_mut() else {
            return Ok(());
        };
        if initial.last_report.elapsed() < PROGRESS_EVERY {
            return Ok(());
        }
        initial.last_report = Instant::now();
        initial.rates.note(initial.rows_read);
        report_progress(source, initial.rows_read, &initial.rates, initial.started);
        self.store_snapshot_progress().await
    }

    /// One event of the snapshot phase.
    pub(super) async fn on_snapshot_event(&mut self, event: SourceEvent) -> Result<(), RelayError> {
        let Some(initial) = self.initial.as_mut() else {
            return Err(RelayError::Stream {
                lsn: Lsn::ZERO,
                what: format!("a snapshot event while streaming: {event:?}"),
            });
        };
        let txn = initial.txn;
        match event {
            SourceEvent::SnapshotRow {
                pos,
                table,
                relation,
                row,
            } => {
                initial.rows_read += 1;
                self.metrics.snapshot_rows.fetch_add(1, Ordering::Relaxed);
                self.publish_snapshot_row(txn, pos, table, &relation, &row)
                    .await
            }
            SourceEvent::SnapshotTableDone { table, rows } => {
                // `snapshot_tables` mirrors the source's progress list, index
                // for index.
                let count = self.snapshot_tables.get_mut(table);
                let name = count.as_ref().map_or("?", |t| t.table.as_str()).to_owned();
                if let Some(t) = count {
                    t.read = true;
                }
                tracing::info!(table = %name, rows, "snapshot: table read");
                self.note_invalid_trace_contexts();
                match u32::try_from(table) {
                    Ok(i) => self.table_snapshot_read(i).await,
                    Err(_) => Ok(()),
                }
            }
            SourceEvent::SnapshotDone { consistent_point } => {
                initial.read_all = Some(consistent_point);
                self.finish_table_snapshot().await?;
                self.checkpoint
                    .commit(txn, consistent_point)
                    .map_err(RelayError::from)
            }
            other => Err(RelayError::Stream {
                lsn: Lsn::ZERO,
                what: format!("unexpected event while reading the snapshot: {other:?}"),
            }),
        }
    }

    /// The snapshot phase ended without `completed` (shutdown, an error):
    /// `running` stays stored, and the next start takes it again.
    pub(super) fn snapshot_abandoned(&mut self) {
        self.initial = None;
        self.metrics
            .snapshot_running
            .store(false, Ordering::Relaxed);
    }

    /// After [`Streaming::snapshot_safe`]: stores `completed` with the
    /// consistent point and waits until Kafka holds it.
    pub(super) async fn complete_snapshot(
        &mut self,
        acks: &mut mpsc::UnboundedReceiver<Ack>,
    ) -> Result<SnapshotEnd, RelayError> {
        let Some(InitialSnapshot {
            started,
            rows_read,
            read_all: Some(consistent_point),
            ..
        }) = self.initial.take()
        else {
            return Err(RelayError::Stream {
                lsn: Lsn::ZERO,
                what: "the snapshot completed before it was read".into(),
            });
        };
        // Every record is acknowledged and no write is in flight (the loop
        // ends only then): `completed` is the one thing awaited.
        self.offsets.unit_ends();
        self.note_snapshot_progress(SnapshotState::Completed);
        let stored = self
            .offsets
            .store(
                &self.sink,
                acks,
                consistent_point,
                "the offset-store write marking the snapshot completed",
                &self.config,
                &self.metrics,
            )
            .await;
        self.metrics
            .snapshot_running
            .store(false, Ordering::Relaxed);
        stored?;
        self.metrics
            .snapshot_tables_remaining
            .store(0, Ordering::Relaxed);
        self.metrics
            .snapshot_duration_ms
            .store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
        let secs = started.elapsed().as_secs_f64();
        tracing::info!(
            rows = rows_read,
            tables = self.snapshot_tables.len(),
            took = ?started.elapsed(),
            rows_per_second = (rows_read as f64 / secs.max(0.001)).round(),
            lsn = %consistent_point,
            "snapshot completed: every row is in Kafka; streaming continues from the snapshot's consistent point"
        );
        Ok(SnapshotEnd::Completed {
            consistent_point,
            rows: rows_read,
        })
    }

    async fn publish_snapshot_row(
        &mut self,
        txn: crate::checkpoint::TxnId,
        pos: Position,
        table: usize,
        relation: &Arc<Relation>,
        row: &TupleData,
    ) -> Result<(), RelayError> {
        if self.tables.claims(relation.oid) {
            let table_index = u32::try_from(table).ok();
            return self
                .publish_table_snapshot_row(txn, pos, relation, row, table_index)
                .await;
        }
        let record = match self
            .router
            .on_snapshot_row(relation.oid, row, pos.commit_lsn)?
        {
            Routed::Record(record) => record,
            // Only configured tables are read; a row no route takes is a bug.
            other => {
                return Err(RelayError::Stream {
                    lsn: pos.commit_lsn,
                    what: format!(
                        "a snapshot row of {}.{} was not routed: {other:?}",
                        relation.namespace, relation.name
                    ),
                });
            }
        };
        // `snapshot_tables` mirrors the source's progress list, index for
        // index (built from it when the snapshot started).
        let count = self
            .snapshot_tables
            .get_mut(table)
            .ok_or_else(|| RelayError::Stream {
                lsn: pos.commit_lsn,
                what: format!(
                    "a snapshot row of {}.{} names table #{table}, which the snapshot does not have",
                    relation.namespace, relation.name
                ),
            })?;
        count.sent += 1;
        let counted = u32::try_from(table).map_or(Counted::Other, Counted::SnapshotTable);
        if self.dead_letter.is_some() {
            self.publishing = Some(relation.clone());
        }
        let sent = self.publish(txn, pos, &record, counted).await;
        self.publishing = None;
        sent
    }

    /// Writes the snapshot's progress (`running`) to the offset store unless
    /// a write is pending (then the next tick writes).
    /// (`exactly_once`: never; the whole snapshot is one Kafka transaction,
    /// and a write inside it would be visible only with `completed`.)
    async fn store_snapshot_progress(&mut self) -> Result<(), RelayError> {
        if self.offsets.in_flight().is_some() || self.offsets.exactly_once() {
            return Ok(());
        }
        self.note_snapshot_progress(SnapshotState::Running);
        self.write_offset(Lsn::ZERO).await
    }

    /// Puts the snapshot's progress, in `state`, into what the next
    /// offset-store write carries.
    fn note_snapshot_progress(&mut self, state: SnapshotState) {
        let tables_done: Vec<String> = self
            .snapshot_tables
            .iter()
            .filter(|t| t.done())
            .map(|t| t.table.clone())
            .collect();
        let rows = self.snapshot_tables.iter().map(|t| t.acked).sum();
        let template = self.offsets.template_mut();
        let consistent_point = template
            .snapshot
            .as_ref()
            .and_then(|s| s.consistent_point.clone());
        template.snapshot = Some(SnapshotProgress {
            state,
            tables_done,
            rows,
            consistent_point,
        });
    }
}

/// Rows per second over the last minute or so.
#[derive(Debug)]
struct RateWindow {
    samples: std::collections::VecDeque<(Instant, u64)>,
}

impl RateWindow {
    fn new(started: Instant) -> RateWindow {
        RateWindow {
            samples: std::collections::VecDeque::from([(started, 0)]),
        }
    }

    fn note(&mut self, rows: u64) {
        let now = Instant::now();
        self.samples.push_back((now, rows));
        while self.samples.len() > 2
            && self
                .samples
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > Duration::from_secs(60))
        {
            self.samples.pop_front();
        }
    }

    fn per_second(&self) -> f64 {
        match (self.samples.front(), self.samples.back()) {
            (Some((t0, r0)), Some((t1, r1))) if t1 > t0 => {
                (r1 - r0) as f64 / t1.duration_since(*t0).as_secs_f64()
            }
            _ => 0.0,
        }
    }
}

/// One progress line per table being read: rows, estimate, %, rate, ETA.
fn report_progress(source: &Source, rows_read: u64, rates: &RateWindow, started: Instant) {
    let rate = rates.per_second();
    let progress = source.snapshot_progress();
    let estimated: Option<u64> = progress
        .iter()
        .map(|p| p.estimated_rows.map(|e| e.max(p.rows_read)))
        .sum();
    let eta = estimated
        .filter(|_| rate > 0.0)
        .map(|total| Duration::from_secs_f64(total.saturating_sub(rows_read) as f64 / rate));
    for p in progress.iter().filter(|p| !p.done) {
        let percent = p
            .estimated_rows
            .filter(|e| *e > 0)
            .map(|e| format!("{:.0}%", (p.rows_read as f64 * 100.0 / e as f64).min(99.0)));
        tracing::info!(
            table = %p.table,
            rows_read = p.rows_read,
            estimated_rows = p.estimated_rows,
            percent = percent.as_deref().unwrap_or("?"),
            "snapshot in progress"
        );
    }
    tracing::info!(
        rows_read,
        rows_per_second = rate.round(),
        eta = ?eta.map(|d| Duration::from_secs(d.as_secs())),
        elapsed = ?Duration::from_secs(started.elapsed().as_secs()),
        "snapshot progress"
    );
}
