//! The snapshot phase of a session: snapshot rows in, records out, and the
//! offset store told `completed` only once Kafka holds every one of them.
//! The phase runs in the session's one loop (`Streaming::stream`: sends,
//! acknowledgements, the stall watchdog, offset writes); this module is its
//! share of that loop: the rows, the per-table counts, the progress, and
//! `completed`. [`InitialSnapshot`] is the phase's state; it publishes
//! through the session's [`Publisher`] (and `[[table]]` rows through
//! [`TableEvents`]).
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
//! - **A part resumes from what Kafka holds** ([`parts`]): each reader's
//!   part of a table is stored at the key of the last row up to which every
//!   row of the part was acknowledged, as soon as it moves (one offset
//!   write per batch at most), so a crash re-sends about what was in
//!   flight.

mod parts;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::publish::{Counted, Publisher};
use super::table_events::TableEvents;
use super::{Ack, RelayError};
use crate::Lsn;
use crate::offsets::{SnapshotPart, SnapshotProgress, SnapshotState, StoredOffset};
use crate::pgoutput::{Relation, TupleData};
use crate::router::Routed;
use crate::source::{Origin, PartFrom, Position, Source, SourceEvent};
use crate::startup::SlotPlan;

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
struct TableCount {
    table: String,
    /// The columns its parts resume by (`TableProgress::key`).
    key: Vec<String>,
    sent: u64,
    acked: u64,
    read: bool,
}

impl TableCount {
    fn done(&self) -> bool {
        self.read && self.acked == self.sent
    }
}

/// The initial snapshot under way: what the session's one loop needs
/// besides what streaming needs.
#[derive(Debug)]
pub(super) struct InitialSnapshot {
    /// The snapshot's tables (records sent and acknowledged per table),
    /// index for index the source's progress list.
    tables: Vec<TableCount>,
    /// The checkpoint transaction every snapshot record belongs to.
    txn: crate::checkpoint::TxnId,
    started: Instant,
    last_report: Instant,
    rows_read: u64,
    rates: RateWindow,
    /// Every table was read: the consistent point.
    read_all: Option<Lsn>,
    /// A resumed snapshot: the tables an earlier session's records of
    /// which Kafka acknowledged whole, and how many records it had
    /// acknowledged (what the stored progress said).
    done_before: Vec<String>,
    rows_before: u64,
    /// Where each reader's part of each table can resume from.
    parts: parts::Parts,
    /// The readers: the parts of each table.
    readers: u32,
}

impl InitialSnapshot {
    /// Starts the snapshot phase: the loop then publishes the rows `source`
    /// reads (see the module doc) until [`InitialSnapshot::safe`].
    pub(super) fn begin(
        publisher: &mut Publisher,
        table_events: &mut TableEvents,
        source: &Source,
    ) -> Result<InitialSnapshot, RelayError> {
        let started = Instant::now();
        let txn = publisher.checkpoint_mut().begin()?;
        publisher
            .offsets_mut()
            .unit_begins(super::transaction_clock::Unit::Snapshot);
        publisher.hold_commits();
        table_events.snapshot_begins();
        let tables: Vec<TableCount> = source
            .snapshot_progress()
            .iter()
            .map(|p| TableCount {
                table: p.table.clone(),
                key: p.key.clone(),
                ..TableCount::default()
            })
            .collect();
        let (done_before, rows_before, stored_parts) = publisher
            .offsets_mut()
            .template_mut()
            .snapshot
            .as_ref()
            .map(|s| (s.tables_done.clone(), s.rows, s.parts.clone()))
            .unwrap_or_default();
        let readers = source.snapshot_readers();
        // A resumed snapshot's parts stay where they were until they move
        // — those the source went on from: as many readers, the same key.
        let resumed = stored_parts
            .into_iter()
            .filter(|p| p.of == readers)
            .filter_map(|p| {
                let table = tables
                    .iter()
                    .position(|t| t.table == p.table && !t.key.is_empty() && t.key == p.key)?;
                Some(((table, p.part), p.after))
            })
            .collect();
        let metrics = publisher.metrics();
        metrics.snapshot_running.store(true, Ordering::Relaxed);
        metrics
            .snapshot_tables_remaining
            .store(tables.len() as u64, Ordering::Relaxed);
        Ok(InitialSnapshot {
            tables,
            txn,
            started,
            last_report: started,
            rows_read: 0,
            rates: RateWindow::new(started),
            read_all: None,
            done_before,
            rows_before,
            parts: parts::Parts::new(resumed),
            readers,
        })
    }

    /// Whether every table was read (the source has nothing more before
    /// streaming starts).
    pub(super) fn read_all(&self) -> bool {
        self.read_all.is_some()
    }

    /// Every table was read and every record acknowledged, no offset write
    /// pending: the loop ends, and [`InitialSnapshot::complete`] stores
    /// `completed`. Also keeps the tables-remaining gauge current.
    pub(super) fn safe(&self, publisher: &Publisher) -> bool {
        publisher.metrics().snapshot_tables_remaining.store(
            self.tables.iter().filter(|t| !t.done()).count() as u64,
            Ordering::Relaxed,
        );
        self.read_all()
            && publisher.awaiting_reports() == 0
            && publisher.checkpoint().pending_txns() == 0
            && publisher.offsets().in_flight().is_none()
    }

    /// A record of snapshot batch #`chunk` was acknowledged.
    pub(super) fn acked(&mut self, chunk: u32) {
        if let Some(t) = self
            .parts
            .acked(chunk)
            .and_then(|table| self.tables.get_mut(table))
        {
            t.acked += 1;
        }
    }

    /// The snapshot's share of a tick: progress logged and stored every
    /// [`PROGRESS_EVERY`].
    pub(super) async fn tick(
        &mut self,
        publisher: &mut Publisher,
        source: &Source,
    ) -> Result<(), RelayError> {
        if self.last_report.elapsed() < PROGRESS_EVERY {
            return Ok(());
        }
        self.last_report = Instant::now();
        self.rates.note(self.rows_read);
        report_progress(source, self.rows_read, &self.rates, self.started);
        self.store_progress(publisher).await
    }

    /// One event of the snapshot phase.
    pub(super) async fn on_event(
        &mut self,
        publisher: &mut Publisher,
        table_events: &mut TableEvents,
        event: SourceEvent,
    ) -> Result<(), RelayError> {
        let txn = self.txn;
        match event {
            SourceEvent::SnapshotRow {
                pos,
                table,
                relation,
                row,
                chunk,
            } => {
                self.rows_read += 1;
                publisher
                    .metrics()
                    .snapshot_rows
                    .fetch_add(1, Ordering::Relaxed);
                self.parts.sent(table, &chunk);
                self.publish_row(
                    publisher,
                    table_events,
                    txn,
                    pos,
                    (table, chunk.id),
                    &relation,
                    &row,
                )
                .await?;
                // Where the parts stand, stored as soon as a batch is in
                // Kafka: a crash re-sends at most what is in flight.
                if self.parts.take_moved() {
                    self.store_progress(publisher).await?;
                }
                Ok(())
            }
            SourceEvent::SnapshotTableDone { table, rows } => {
                self.parts.close_current();
                // `tables` mirrors the source's progress list, index for
                // index.
                let count = self.tables.get_mut(table);
                let name = count.as_ref().map_or("?", |t| t.table.as_str()).to_owned();
                if let Some(t) = count {
                    t.read = true;
                }
                tracing::info!(table = %name, rows, "snapshot: table read");
                publisher.note_invalid_trace_contexts();
                match u32::try_from(table) {
                    Ok(i) => table_events.snapshot_table_read(publisher, i).await,
                    Err(_) => Ok(()),
                }
            }
            SourceEvent::SnapshotDone { consistent_point } => {
                self.parts.close_current();
                self.read_all = Some(consistent_point);
                table_events.snapshot_read(publisher).await?;
                publisher
                    .checkpoint_mut()
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
    pub(super) fn abandoned(self, publisher: &mut Publisher) {
        publisher.release_commits();
        publisher
            .metrics()
            .snapshot_running
            .store(false, Ordering::Relaxed);
    }

    /// After [`InitialSnapshot::safe`]: stores `completed` with the
    /// consistent point and waits until Kafka holds it.
    pub(super) async fn complete(
        self,
        publisher: &mut Publisher,
        acks: &mut mpsc::UnboundedReceiver<Ack>,
    ) -> Result<SnapshotEnd, RelayError> {
        publisher.release_commits();
        let Some(consistent_point) = self.read_all else {
            return Err(RelayError::Stream {
                lsn: Lsn::ZERO,
                what: "the snapshot completed before it was read".into(),
            });
        };
        // Every record is acknowledged and no write is in flight (the loop
        // ends only then): `completed` is the one thing awaited.
        publisher.offsets_mut().unit_ends();
        self.note_progress(publisher, SnapshotState::Completed);
        let stored = publisher
            .store_offset(
                acks,
                consistent_point,
                "the offset-store write marking the snapshot completed",
            )
            .await;
        let metrics = publisher.metrics();
        metrics.snapshot_running.store(false, Ordering::Relaxed);
        stored?;
        metrics
            .snapshot_tables_remaining
            .store(0, Ordering::Relaxed);
        metrics
            .snapshot_duration_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
        let secs = self.started.elapsed().as_secs_f64();
        tracing::info!(
            rows = self.rows_read,
            tables = self.tables.len(),
            took = ?self.started.elapsed(),
            rows_per_second = (self.rows_read as f64 / secs.max(0.001)).round(),
            lsn = %consistent_point,
            "snapshot completed: every row is in Kafka; streaming continues from the snapshot's consistent point"
        );
        Ok(SnapshotEnd::Completed {
            consistent_point,
            rows: self.rows_read,
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn publish_row(
        &mut self,
        publisher: &mut Publisher,
        table_events: &mut TableEvents,
        txn: crate::checkpoint::TxnId,
        pos: Position,
        (table, chunk): (usize, u32),
        relation: &Arc<Relation>,
        row: &TupleData,
    ) -> Result<(), RelayError> {
        if table_events.claims(relation.oid) {
            let table_index = u32::try_from(table).ok();
            // Counted as sent at once, so the table is not reported done
            // before its held row is acknowledged.
            if let Some(t) = table_index.and_then(|i| self.tables.get_mut(i as usize)) {
                t.sent += 1;
            }
            return table_events
                .publish_snapshot_row(publisher, txn, pos, relation, row, (table_index, chunk))
                .await;
        }
        let record =
            match publisher
                .router_mut()
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
        // `tables` mirrors the source's progress list, index for index
        // (built from it when the snapshot started).
        let count = self
            .tables
            .get_mut(table)
            .ok_or_else(|| RelayError::Stream {
                lsn: pos.commit_lsn,
                what: format!(
                    "a snapshot row of {}.{} names table #{table}, which the snapshot does not have",
                    relation.namespace, relation.name
                ),
            })?;
        count.sent += 1;
        let counted = Counted::SnapshotTable(chunk);
        publisher
            .publish_row(relation, txn, pos, &record, counted)
            .await
    }

    /// Writes the snapshot's progress (`running`) to the offset store unless
    /// a write is pending (then the next tick writes).
    /// (`exactly_once`: never; the whole snapshot is one Kafka transaction,
    /// and a write inside it would be visible only with `completed`.)
    async fn store_progress(&self, publisher: &mut Publisher) -> Result<(), RelayError> {
        if publisher.offsets().in_flight().is_some() || publisher.offsets().exactly_once() {
            return Ok(());
        }
        self.note_progress(publisher, SnapshotState::Running);
        publisher.write_offset(Lsn::ZERO).await
    }

    /// Puts the snapshot's progress, in `state`, into what the next
    /// offset-store write carries: the tables done (by an interrupted
    /// session this one resumed, or by this one) and the records
    /// acknowledged, beside what the marker already holds (the consistent
    /// point, the readers' snapshot, the tables' shapes, the attempt).
    fn note_progress(&self, publisher: &mut Publisher, state: SnapshotState) {
        let mut tables_done = self.done_before.clone();
        tables_done.extend(
            self.tables
                .iter()
                .filter(|t| t.done() && !self.done_before.contains(&t.table))
                .map(|t| t.table.clone()),
        );
        let rows = self.rows_before + self.tables.iter().map(|t| t.acked).sum::<u64>();
        let template = publisher.offsets_mut().template_mut();
        let (consistent_point, mut taken, mut shapes, attempt) = template
            .snapshot
            .take()
            .map(|s| (s.consistent_point, s.taken, s.shapes, s.attempt))
            .unwrap_or_default();
        if state == SnapshotState::Completed {
            // Only an interrupted snapshot is resumed.
            (taken, shapes) = (None, Vec::new());
        }
        // Where each part of a table not done resumes from.
        let parts = if state == SnapshotState::Completed {
            Vec::new()
        } else {
            self.parts
                .held()
                .iter()
                .filter_map(|(&(table, part), after)| {
                    let t = self.tables.get(table)?;
                    (!tables_done.contains(&t.table)).then(|| SnapshotPart {
                        table: t.table.clone(),
                        part,
                        of: self.readers,
                        after: after.clone(),
                        key: t.key.clone(),
                    })
                })
                .collect()
        };
        template.snapshot = Some(SnapshotProgress {
            state,
            tables_done,
            rows,
            consistent_point,
            taken,
            shapes,
            attempt,
            parts,
        });
    }
}

/// A plan to resume an interrupted snapshot, checked against the server
/// as it is now (`startup::resumable`): kept, with why its reads go without
/// the `xmin` filter when they must; or, when the server could not be
/// asked, turned into taking the snapshot again from the start, saying why.
pub(super) async fn checked_plan(
    plan: SlotPlan,
    stored: Option<&StoredOffset>,
    catalog: &tokio_postgres::Client,
) -> (SlotPlan, Option<String>) {
    let SlotPlan::Snapshot {
        resume: Some(point),
        why,
        ..
    } = plan
    else {
        return (plan, None);
    };
    let checked = match stored.and_then(|s| s.snapshot.as_ref()) {
        Some(progress) => crate::startup::resumable(catalog, progress).await,
        None => Err("its progress is not stored".to_owned()),
    };
    match checked {
        Ok(unfiltered) => (
            SlotPlan::Snapshot {
                drop_first: false,
                why,
                replaces_stream_at: None,
                resume: Some(point),
            },
            unfiltered,
        ),
        Err(why_not) => (
            SlotPlan::Snapshot {
                drop_first: true,
                why: format!(
                    "the previous snapshot did not complete (the offset store says it was \
                     running) and cannot be resumed: {why_not}; it is taken again from the start"
                ),
                replaces_stream_at: None,
                resume: None,
            },
            None,
        ),
    }
}

/// The origin of a resumed snapshot's readers from its stored `progress`
/// (read with its `xmin` filter when `filtered`), and the progress with
/// this attempt counted.
pub(super) fn resumed(
    mut progress: SnapshotProgress,
    filtered: bool,
) -> (Origin, SnapshotProgress) {
    progress.attempt += 1;
    let origin = Origin::Resumed {
        taken: progress.taken.clone().unwrap_or_default(),
        shapes: progress.shapes.clone(),
        attempt: progress.attempt,
        // Unfiltered too: the source reads a table whose columns changed
        // whole, and goes on from the stored keys in the others.
        parts: progress
            .parts
            .iter()
            .map(|p| PartFrom {
                table: p.table.clone(),
                part: p.part,
                of: p.of,
                key: p.key.clone(),
                after: p.after.clone(),
            })
            .collect(),
        filtered,
    };
    (origin, progress)
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
