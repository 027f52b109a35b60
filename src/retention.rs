//! Outbox retention: deleting old outbox rows, never one whose event the
//! stored offset does not cover (`walrelay prune`, and `walrelay run` every
//! `[outbox.retention] interval`).
//!
//! **The rule.** A row is deleted only when its time `t` — its creating
//! transaction's commit timestamp (`pg_xact_commit_timestamp(xmin)`, needs
//! `track_commit_timestamp = on`), or the `timestamptz` column
//! `retention.column` — satisfies both
//! - `t < committed_at - margin`, where `committed_at` is the stored
//!   offset's `committed_at_ms`: the commit time of the newest transaction at
//!   or below the stored LSN (`crate::offsets::StoredOffset`), and
//! - `t < now() - keep` (the retention itself),
//!
//! and it is not in an accepted gap (below). Everything else is kept and
//! counted by why.
//!
//! Invariants:
//! 1. **Never a row whose event is not in Kafka.** The stored offset is
//!    written only after Kafka acknowledged everything at or below it, and
//!    its `committed_at` is the server's commit timestamp of the transaction
//!    at its position. PostgreSQL takes a commit timestamp just before it
//!    writes the commit record, so commit timestamps are in commit-LSN order
//!    except for transactions that took their timestamp and then waited to
//!    write the record (WAL insertion locks, a descheduled backend):
//!    microseconds, rarely milliseconds. A transaction after the stored
//!    position therefore has a commit timestamp later than
//!    `committed_at - margin` unless it waited longer than `margin` (default
//!    5 minutes) between the two, or the server's clock was stepped back by
//!    more. Before the connector streamed any transaction `committed_at` is
//!    walrelay's clock before it created the slot: the margin also covers
//!    the skew between that host's clock and the server's. With `column`,
//!    the column's value may precede the commit by the whole transaction:
//!    the configured margin must exceed the longest transaction writing the
//!    outbox (no default).
//! 2. **Unknown is kept.** A NULL time (commit timestamps switched on after
//!    the row was written, or truncated with the commit log for transactions
//!    older than the database's freeze horizon; a NULL column) never
//!    qualifies: such rows are counted as "commit time unknown".
//! 3. **No stored offset, no deletion.** No offset (or one without
//!    `committed_at`, written by an older walrelay), an offset of another
//!    slot, an initial snapshot still running, a table the offset does not
//!    know yet (`known_tables`) or an incremental snapshot of the table
//!    under way: every row is kept, and the report says why ([`KeepAll`]).
//! 4. **An accepted gap is kept.** Rows committed in a range the operator
//!    accepted as never streamed (`--accept-slot-position`) are kept —
//!    `walrelay republish` may still need them — until the operator says
//!    they were republished (`gap_republished`).
//! 5. **Small, short, never waiting.** Each batch is one transaction over a
//!    range of heap pages sized to about `batch_rows` rows, under
//!    `lock_timeout` and `statement_timeout`; rows another transaction has
//!    locked are skipped (`SKIP LOCKED`) and counted; a batch that times out
//!    is skipped and counted. Rows written while it runs land after the
//!    pages it reads, or are young: they are kept.
//! 6. **Only outbox tables.** Walrelay publishes nothing for a delete of an
//!    outbox row. A table whose deletes become change events (`[[table]]`)
//!    is refused ([`deletes_published`]).
//!
//! It imports the configuration, the catalog client and the stored offset's
//! type; the caller reads the offset store (the command through
//! `commands::probe`, the relay through its own clients).

use std::time::Duration;

use postgres_protocol::escape::escape_identifier;
use serde::Serialize;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, OutboxConfig, RetentionConfig};
use crate::offsets::{SnapshotState, StoredOffset};
use crate::pg::catalog::{self, CatalogError};

/// Why a table is pruned not at all: the stored offset says nothing about
/// its rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeepAll {
    /// No offset stored for the connector.
    NoOffset,
    /// The stored offset has no commit time (written by an older walrelay).
    NoCommitTime,
    /// The stored offset is of another slot than `postgres.slot`.
    OtherSlot { stored: String, configured: String },
    /// The initial snapshot has not completed.
    SnapshotRunning,
    /// The table was configured after the offset was written.
    TableNotKnown,
    /// An incremental snapshot of the table is under way.
    IncrementalRunning(String),
}

impl std::fmt::Display for KeepAll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeepAll::NoOffset => f.write_str(
                "no offset is stored for this connector yet, so no row is known to be in Kafka \
                 (run walrelay until it streams)",
            ),
            KeepAll::NoCommitTime => f.write_str(
                "the stored offset has no commit time (written by an older walrelay); it \
                 will once walrelay streams a transaction",
            ),
            KeepAll::OtherSlot { stored, configured } => write!(
                f,
                "the stored offset is of slot {stored:?}, not postgres.slot {configured:?}; it \
                 says nothing about this slot's events"
            ),
            KeepAll::SnapshotRunning => f.write_str(
                "the initial snapshot has not completed, so the rows it reads are not all in \
                 Kafka",
            ),
            KeepAll::TableNotKnown => f.write_str(
                "the stored offset predates this table's configuration; its existing rows are \
                 in Kafka only after an incremental snapshot",
            ),
            KeepAll::IncrementalRunning(id) => {
                write!(f, "incremental snapshot {id} of this table is under way")
            }
        }
    }
}

/// What may be deleted, from the stored offset: rows before
/// `published_before_ms` and outside `gap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guard {
    /// Unix ms: the stored offset's commit time minus the margin.
    pub published_before_ms: i64,
    /// Unix ms, inclusive: rows whose time falls here are in an accepted
    /// gap and kept.
    pub gap: Option<(i64, i64)>,
}

/// The guard the stored offset gives `table` (`schema.table`), or why it
/// gives none. Pure: the rule of invariants 1, 3 and 4.
pub fn guard(
    offset: Option<&StoredOffset>,
    slot: &str,
    table: &str,
    margin: Duration,
    gap_republished: bool,
) -> Result<Guard, KeepAll> {
    let offset = offset.ok_or(KeepAll::NoOffset)?;
    if offset.slot != slot {
        return Err(KeepAll::OtherSlot {
            stored: offset.slot.clone(),
            configured: slot.to_owned(),
        });
    }
    if offset
        .snapshot
        .as_ref()
        .is_some_and(|s| s.state == SnapshotState::Running)
    {
        return Err(KeepAll::SnapshotRunning);
    }
    if !offset.known_tables.is_empty() && !offset.known_tables.iter().any(|t| t == table) {
        return Err(KeepAll::TableNotKnown);
    }
    if let Some(inc) = &offset.incremental
        && inc.tables.iter().any(|t| t.table == table && !t.done)
    {
        return Err(KeepAll::IncrementalRunning(inc.id.clone()));
    }
    let committed_at = offset.committed_at_ms.ok_or(KeepAll::NoCommitTime)?;
    let margin = i64::try_from(margin.as_millis()).unwrap_or(i64::MAX);
    let gap = match &offset.accepted_gap {
        Some(gap) if !gap_republished => Some((
            gap.from_committed_at_ms
                .map_or(i64::MIN, |from| from.saturating_sub(margin)),
            gap.accepted_at_ms.saturating_add(margin),
        )),
        _ => None,
    };
    Ok(Guard {
        published_before_ms: committed_at.saturating_sub(margin),
        gap,
    })
}

/// The `[[table]]` entry that would publish a change event for each row
/// prune deletes from `outbox`'s table: `(key, message)`. The configuration
/// refuses a table that is both an outbox and a `[[table]]`; this keeps the
/// rule where the deletes are made.
pub fn deletes_published(config: &Config, outbox: &OutboxConfig) -> Option<(String, String)> {
    let (schema, name) = (&outbox.table.schema, &outbox.table.name);
    config.tables.iter().enumerate().find_map(|(j, t)| {
        let skipped = t
            .skipped_operations
            .unwrap_or(config.table_defaults.skipped_operations);
        (t.matches(schema, name) && !skipped.skips(b'd')).then(|| {
            (
                format!("table[{j}].skipped_operations"),
                format!(
                    "table[{j}] ({}) captures {schema}.{name} and publishes its deletes as change \
                     events (with tombstones), so pruning would publish one delete per pruned \
                     row. What to do: remove {schema}.{name} from [[table]] (narrow the \
                     pattern), or add \"d\" to table[{j}].skipped_operations",
                    t.name
                ),
            )
        })
    })
}

/// Why pruning a table stopped.
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    /// The configuration or the table does not allow pruning: definite.
    #[error("{key}: {problem}. What to do: {fix}")]
    Setup {
        key: String,
        problem: String,
        fix: String,
    },
    #[error(transparent)]
    Catalog(#[from] CatalogError),
}

impl PruneError {
    /// Whether retrying may help (a server restarting, a connection lost).
    pub fn is_transient(&self) -> bool {
        match self {
            PruneError::Setup { .. } => false,
            PruneError::Catalog(e) => e.is_transient(),
        }
    }
}

fn query_error(context: &'static str) -> impl FnOnce(tokio_postgres::Error) -> PruneError {
    move |source| PruneError::Catalog(CatalogError::Query { context, source })
}

/// What one table's prune did, and what it kept and why.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct TableReport {
    /// `schema.table`.
    pub table: String,
    /// Rows deleted (on a dry run: that would be).
    pub deleted: u64,
    /// Kept: committed after the stored offset's commit time minus the margin.
    pub kept_unpublished: u64,
    /// Kept: published, but younger than `keep`.
    pub kept_younger: u64,
    /// Kept: no commit time (or a NULL column).
    pub kept_unknown_time: u64,
    /// Kept: in an accepted gap.
    pub kept_accepted_gap: u64,
    /// Kept: locked by another transaction when its batch ran.
    pub kept_locked: u64,
    /// Batches skipped because they hit `lock_timeout` or
    /// `statement_timeout` (their rows are not counted above).
    pub skipped_batches: u64,
    /// Batches (transactions) run.
    pub batches: u64,
    /// The table's rest was left for the next run after
    /// [`TIMEOUTS_IN_A_ROW`] batches in a row timed out (a table lock held
    /// by someone else: waiting batch after batch would only queue behind
    /// it).
    pub left_locked: bool,
    /// When nothing was deleted because the offset says nothing: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_all: Option<String>,
    /// Rows of the table when `kept_all`.
    pub kept_all_rows: u64,
    /// Where the next batch starts (a retry after a lost connection goes on
    /// from here).
    #[serde(skip)]
    cursor: Cursor,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Cursor {
    /// Index of the leaf (partition) being pruned.
    leaf: usize,
    /// Its first block not yet pruned.
    block: u32,
    /// Blocks per batch, adapted to the rows found.
    blocks: u32,
    done: bool,
}

impl TableReport {
    pub fn new(table: String) -> TableReport {
        TableReport {
            table,
            ..TableReport::default()
        }
    }

    /// Whether the table was pruned to its end (not stopped by shutdown).
    pub fn finished(&self) -> bool {
        self.cursor.done
    }

    /// Rows kept, all reasons.
    pub fn kept(&self) -> u64 {
        self.kept_unpublished
            + self.kept_younger
            + self.kept_unknown_time
            + self.kept_accepted_gap
            + self.kept_locked
            + self.kept_all_rows
    }
}

impl std::fmt::Display for TableReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(why) = &self.kept_all {
            return write!(
                f,
                "{}: deleted 0, kept {} (all: {why})",
                self.table, self.kept_all_rows
            );
        }
        write!(
            f,
            "{}: deleted {}, kept {} ({} not yet published, {} younger than the retention, {} \
             with unknown commit time, {} in an accepted gap, {} locked by other transactions); \
             {} batch(es), {} skipped on lock or statement timeout{}",
            self.table,
            self.deleted,
            self.kept(),
            self.kept_unpublished,
            self.kept_younger,
            self.kept_unknown_time,
            self.kept_accepted_gap,
            self.kept_locked,
            self.batches,
            self.skipped_batches,
            if self.left_locked {
                " (the rest of the table left for the next run: it stayed locked)"
            } else {
                ""
            }
        )
    }
}

/// A table to prune with its settings, resolved against the server.
#[derive(Debug, Clone)]
pub struct Target {
    /// `outbox[i]`, for error keys.
    pub key: String,
    /// `schema.table`.
    pub table: String,
    /// The leaves (the table itself, or its partitions), quoted.
    leaves: Vec<String>,
    /// The SQL expression of a row's time.
    time: String,
    pub retention: RetentionConfig,
}

/// Checks `outbox` can be pruned on this server and resolves its leaves and
/// the expression of a row's time.
pub async fn target(client: &Client, config: &Config, index: usize) -> Result<Target, PruneError> {
    let outbox = config.outbox.get(index).ok_or_else(|| PruneError::Setup {
        key: "outbox".into(),
        problem: format!("there is no outbox[{index}]"),
        fix: "name an [[outbox]] table of this configuration".into(),
    })?;
    let key = format!("outbox[{index}]");
    let Some(retention) = outbox.retention.clone() else {
        return Err(PruneError::Setup {
            key: format!("{key}.retention"),
            problem: format!("{} has no retention configured", outbox.table),
            fix: "add an [outbox.retention] section with keep = \"7d\" (how long to keep rows) \
                  to this [[outbox]] (docs/configuration.md)"
                .into(),
        });
    };
    if let Some((key, problem)) = deletes_published(config, outbox) {
        return Err(PruneError::Setup {
            key,
            problem,
            fix: "see docs/operations.md, \"Outbox retention\"".into(),
        });
    }
    let (schema, name) = (&outbox.table.schema, &outbox.table.name);
    let table = format!("{schema}.{name}");
    let Some(relation) = catalog::relation(client, schema, name).await? else {
        return Err(PruneError::Setup {
            key: format!("{key}.table"),
            problem: format!("outbox table {table} does not exist"),
            fix: "create it or fix outbox.table".into(),
        });
    };
    let time = match &retention.column {
        None => {
            let on = catalog::setting(client, "track_commit_timestamp").await?;
            if on != "on" {
                return Err(PruneError::Setup {
                    key: format!("{key}.retention"),
                    problem: format!(
                        "judges rows of {table} by their commit timestamp, but \
                         track_commit_timestamp is {on}"
                    ),
                    fix: "ALTER SYSTEM SET track_commit_timestamp = on and restart PostgreSQL \
                          (rows committed before that have no commit timestamp and are kept), or \
                          set retention.column to a timestamptz column with a margin"
                        .into(),
                });
            }
            "pg_catalog.pg_xact_commit_timestamp(xmin)".to_owned()
        }
        Some(column) => {
            let row = client
                .query_opt(
                    "SELECT pg_catalog.format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute \
                     WHERE attrelid = $1 AND attname = $2 AND attnum > 0 AND NOT attisdropped",
                    &[&relation.oid, column],
                )
                .await
                .map_err(query_error("reading the retention column's type"))?;
            let kind: Option<String> = row.map(|r| r.get(0));
            if kind.as_deref() != Some("timestamp with time zone") {
                return Err(PruneError::Setup {
                    key: format!("{key}.retention.column"),
                    problem: match kind {
                        None => format!("{table} has no column {column:?}"),
                        Some(k) => format!("{table}.{column} is {k}, not timestamptz"),
                    },
                    fix: "name a timestamptz column set when the row is written (e.g. \
                          created_at timestamptz NOT NULL DEFAULT now()), or remove \
                          retention.column to use commit timestamps"
                        .into(),
                });
            }
            escape_identifier(column)
        }
    };
    // A partitioned table's rows are in its leaves; an ordinary table's in
    // itself (not in inheritance children, which the publication leaves out).
    let leaves: Vec<String> = if relation.relkind == 'p' {
        client
            .query(
                "SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) \
                 FROM pg_catalog.pg_partition_tree($1::oid) t \
                 JOIN pg_catalog.pg_class c ON c.oid = t.relid \
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                 WHERE t.isleaf ORDER BY 1",
                &[&relation.oid],
            )
            .await
            .map_err(query_error("listing the outbox table's partitions"))?
            .iter()
            .map(|r| r.get(0))
            .collect()
    } else {
        vec![format!(
            "{}.{}",
            escape_identifier(schema),
            escape_identifier(name)
        )]
    };
    Ok(Target {
        key,
        table,
        leaves,
        time,
        retention,
    })
}

/// Counts a table's rows (a table kept whole: [`KeepAll`]).
pub async fn count_rows(client: &Client, target: &Target) -> Result<u64, PruneError> {
    let mut rows = 0u64;
    for leaf in &target.leaves {
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM {leaf}"), &[])
            .await
            .map_err(query_error("counting the outbox table's rows"))?
            .get(0);
        rows += u64::try_from(n).unwrap_or(0);
    }
    Ok(rows)
}

/// What one pass is asked to do.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Count, delete nothing.
    pub dry_run: bool,
    /// The operator republished the accepted gap's rows: prune them too.
    pub gap_republished: bool,
}

/// One pass over the `[[outbox]]` tables `indices` under the stored
/// `offset` (read before the pass: a later offset only covers more), one
/// report per table in `reports`. Resumable: after a transient error, call
/// it again with a new client and the same `reports`; finished tables are
/// not pruned again and the unfinished one goes on where it stopped.
pub async fn pass(
    client: &mut Client,
    config: &Config,
    indices: &[usize],
    offset: Option<&StoredOffset>,
    options: Options,
    stop: &CancellationToken,
    reports: &mut Vec<TableReport>,
) -> Result<(), PruneError> {
    for (n, &index) in indices.iter().enumerate() {
        if stop.is_cancelled() {
            return Ok(());
        }
        let target = target(client, config, index).await?;
        if reports.len() <= n {
            reports.push(TableReport::new(target.table.clone()));
        }
        let report = &mut reports[n];
        if report.finished() {
            continue;
        }
        match guard(
            offset,
            &config.postgres.slot,
            &target.table,
            target.retention.margin(),
            options.gap_republished,
        ) {
            Err(why) => {
                report.kept_all = Some(why.to_string());
                report.kept_all_rows = count_rows(client, &target).await?;
                report.cursor.done = true;
            }
            Ok(guard) => prune(client, &target, guard, options.dry_run, stop, report).await?,
        }
    }
    Ok(())
}

/// Batches in a row that may time out before a table's rest is left for
/// the next run.
pub const TIMEOUTS_IN_A_ROW: u32 = 3;

/// Most blocks one batch reads.
const MAX_BLOCKS: u32 = 1 << 14;

/// Prunes `target` under `guard` from where `report` left off, batch by
/// batch, until its end or `stop`. On a dry run nothing is deleted and
/// `deleted` counts what would be.
pub async fn prune(
    client: &mut Client,
    target: &Target,
    guard: Guard,
    dry_run: bool,
    stop: &CancellationToken,
    report: &mut TableReport,
) -> Result<(), PruneError> {
    let r = &target.retention;
    let keep_secs = r.keep.as_secs_f64();
    let (gap_lo, gap_hi) = guard.unzip_gap();
    let t = &target.time;
    let candidate = eligible(t);
    let range = "ctid >= $1::text::tid AND ctid < $2::text::tid";
    let settings = format!(
        "SET LOCAL lock_timeout = '{}ms'; SET LOCAL statement_timeout = '{}ms'",
        r.lock_timeout.as_millis().max(1),
        r.statement_timeout.as_millis().max(1)
    );
    if report.cursor.blocks == 0 {
        report.cursor.blocks = 8;
    }
    let mut timeouts = 0;
    while let Some(leaf) = target.leaves.get(report.cursor.leaf) {
        let size: i64 = client
            .query_one(
                "SELECT pg_catalog.pg_relation_size($1::text::regclass) \
                 / current_setting('block_size')::int8",
                &[leaf],
            )
            .await
            .map_err(query_error("reading the outbox table's size"))?
            .get(0);
        let blocks = u32::try_from(size).unwrap_or(u32::MAX);
        let delete = format!(
            "WITH v AS (SELECT ctid FROM {leaf} WHERE {range} AND {candidate} \
                        FOR UPDATE SKIP LOCKED) \
             DELETE FROM {leaf} WHERE ctid = ANY(ARRAY(SELECT ctid FROM v))"
        );
        let classify = format!(
            "SELECT count(*) FILTER (WHERE t IS NULL), \
                    count(*) FILTER (WHERE t >= pg_catalog.to_timestamp($3::int8 / 1000.0::float8)), \
                    count(*) FILTER (WHERE t < pg_catalog.to_timestamp($3::int8 / 1000.0::float8) \
                        AND coalesce(t BETWEEN pg_catalog.to_timestamp($5::int8 / 1000.0::float8) \
                            AND pg_catalog.to_timestamp($6::int8 / 1000.0::float8), false)), \
                    count(*) FILTER (WHERE t < pg_catalog.to_timestamp($3::int8 / 1000.0::float8) \
                        AND NOT coalesce(t BETWEEN pg_catalog.to_timestamp($5::int8 / 1000.0::float8) \
                            AND pg_catalog.to_timestamp($6::int8 / 1000.0::float8), false) \
                        AND t >= now() - pg_catalog.make_interval(secs => $4::float8)), \
                    count(*) FILTER (WHERE {eligible_t}) \
             FROM (SELECT {t} AS t FROM {leaf} WHERE {range}) rows",
            eligible_t = eligible("t"),
        );
        while report.cursor.block < blocks {
            if stop.is_cancelled() {
                return Ok(());
            }
            let lo = report.cursor.block;
            let hi = lo.saturating_add(report.cursor.blocks);
            let (lo_tid, hi_tid) = (format!("({lo},0)"), format!("({hi},0)"));
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
                &lo_tid,
                &hi_tid,
                &guard.published_before_ms,
                &keep_secs,
                &gap_lo,
                &gap_hi,
            ];
            let tx = client
                .transaction()
                .await
                .map_err(query_error("starting a prune batch"))?;
            tx.batch_execute(&settings)
                .await
                .map_err(query_error("setting a prune batch's timeouts"))?;
            let outcome = async {
                let deleted = if dry_run {
                    0
                } else {
                    tx.execute(&delete, &params).await?
                };
                let row = tx.query_one(&classify, &params).await?;
                Ok::<_, tokio_postgres::Error>((deleted, row))
            }
            .await;
            report.batches += 1;
            match outcome {
                Ok((deleted, row)) => {
                    tx.commit()
                        .await
                        .map_err(query_error("committing a prune batch"))?;
                    let n = |i: usize| u64::try_from(row.get::<_, i64>(i)).unwrap_or(0);
                    let remaining = n(4);
                    report.kept_unknown_time += n(0);
                    report.kept_unpublished += n(1);
                    report.kept_accepted_gap += n(2);
                    report.kept_younger += n(3);
                    if dry_run {
                        report.deleted += remaining;
                    } else {
                        report.deleted += deleted;
                        report.kept_locked += remaining;
                    }
                    let found = if dry_run {
                        remaining
                    } else {
                        deleted + remaining
                    };
                    report.cursor.blocks = next_blocks(report.cursor.blocks, found, r.batch_rows);
                }
                Err(e) if is_timeout(&e) => {
                    drop(tx);
                    report.skipped_batches += 1;
                    tracing::warn!(
                        table = %target.table,
                        leaf = %leaf,
                        blocks = %format!("{lo}..{hi}"),
                        error = %catalog::describe(&e),
                        "prune batch skipped: it waited longer than retention.lock_timeout or \
                         ran longer than retention.statement_timeout; its rows are kept until \
                         the next prune"
                    );
                    if is_statement_timeout(&e) {
                        report.cursor.blocks = (report.cursor.blocks / 2).max(1);
                    }
                    timeouts += 1;
                    if timeouts >= TIMEOUTS_IN_A_ROW {
                        report.left_locked = true;
                        report.cursor.block = blocks;
                        tracing::warn!(
                            table = %target.table,
                            leaf = %leaf,
                            "{TIMEOUTS_IN_A_ROW} prune batches in a row timed out: the rest of \
                             the table is left for the next prune"
                        );
                        continue;
                    }
                }
                Err(e) => return Err(query_error("pruning a batch")(e)),
            }
            report.cursor.block = hi;
        }
        report.cursor.leaf += 1;
        report.cursor.block = 0;
    }
    report.cursor.done = true;
    Ok(())
}

/// The condition a row's time `t` meets when the row may go; parameters
/// `$3` published-before (Unix ms), `$4` keep (seconds), `$5`/`$6` the
/// accepted gap (Unix ms, NULL: none).
fn eligible(t: &str) -> String {
    format!(
        "{t} < pg_catalog.to_timestamp($3::int8 / 1000.0::float8) \
         AND {t} < now() - pg_catalog.make_interval(secs => $4::float8) \
         AND NOT coalesce({t} BETWEEN pg_catalog.to_timestamp($5::int8 / 1000.0::float8) \
                             AND pg_catalog.to_timestamp($6::int8 / 1000.0::float8), false)"
    )
}

impl Guard {
    fn unzip_gap(&self) -> (Option<i64>, Option<i64>) {
        match self.gap {
            Some((lo, hi)) => (Some(lo), Some(hi)),
            None => (None, None),
        }
    }
}

/// Blocks for the next batch: scaled towards `batch_rows` rows, at most
/// doubling, between 1 and [`MAX_BLOCKS`].
fn next_blocks(blocks: u32, found: u64, batch_rows: u32) -> u32 {
    let target = u64::from(batch_rows.max(1));
    let doubled = u64::from(blocks) * 2;
    let next = (u64::from(blocks) * target)
        .checked_div(found)
        .map_or(doubled, |n| n.min(doubled));
    u32::try_from(next.clamp(1, u64::from(MAX_BLOCKS))).unwrap_or(MAX_BLOCKS)
}

/// `statement_timeout` (57014).
fn is_statement_timeout(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| c.code() == "57014")
}

/// `lock_timeout` (55P03) or `statement_timeout` (57014).
fn is_timeout(e: &tokio_postgres::Error) -> bool {
    e.code()
        .is_some_and(|c| matches!(c.code(), "55P03" | "57014"))
}

#[cfg(test)]
mod tests;
