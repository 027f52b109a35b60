//! `walrelay prune`: deletes outbox rows older than their `[outbox.retention]`
//! whose events the stored offset covers, and says what it deleted and what
//! it kept and why (the rule and its margin: `crate::retention`).
//!
//! Invariants:
//! - **The offset first.** The stored offset is read from Kafka before any
//!   row is looked at; an offset written later only covers more, so a row
//!   deleted under the earlier one is covered by both. No offset: nothing is
//!   deleted, and the report says so.
//! - **Waiting is said, not hidden.** Kafka or PostgreSQL unreachable: it
//!   retries with backoff, one warning per attempt naming what it waits for,
//!   until `--wait`; then it stops with exit 1 and the last error. A lost
//!   connection mid-table resumes where the last committed batch ended.
//! - **Bad input is exit 2**, naming the key or flag and the fix: an
//!   unknown `--table`, a table without `retention`.
//! - A kill at any moment loses nothing: each batch is its own short
//!   transaction, and the next run starts over.

use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::offsets::StoredOffset;
use crate::pg::catalog;
use crate::pg::params::connect_params;
use crate::retention::{self, Options, PruneError, TableReport};
use crate::sink::properties::producer_properties;

use super::probe::read_offset_store;

/// What to prune.
#[derive(Debug, Clone)]
pub struct Request {
    /// One `[[outbox]]` table (`schema.table` or `table`); `None`: every
    /// one with `retention`.
    pub table: Option<String>,
    pub dry_run: bool,
    /// Prune the rows of an accepted gap too (after republishing them).
    pub gap_republished: bool,
    /// How long to wait for Kafka and PostgreSQL before giving up.
    pub wait: Duration,
}

/// What was pruned.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub dry_run: bool,
    /// The stored offset the pass went by (`None`: none stored).
    pub offset_lsn: Option<String>,
    pub offset_committed_at_ms: Option<i64>,
    pub tables: Vec<TableReport>,
    /// Stopped (SIGINT/SIGTERM) before every table was done.
    pub stopped: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum PruneCommandError {
    /// Exit 2: the request or the configuration.
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Prune(#[from] PruneError),
    #[error("gave up after waiting {waited:?} for {what}: {last}")]
    GaveUp {
        what: &'static str,
        waited: Duration,
        last: String,
    },
}

/// The `[[outbox]]` indices to prune.
fn pick(config: &Config, table: Option<&str>) -> Result<Vec<usize>, PruneCommandError> {
    let with_retention: Vec<usize> = (0..config.outbox.len())
        .filter(|&i| config.outbox[i].retention.is_some())
        .collect();
    let Some(wanted) = table else {
        if with_retention.is_empty() {
            return Err(PruneCommandError::Usage(
                "outbox[*].retention: no [[outbox]] table has a retention; add \
                 [outbox.retention] with keep = \"7d\" to the tables to prune \
                 (docs/configuration.md)"
                    .into(),
            ));
        }
        return Ok(with_retention);
    };
    let found = config.outbox.iter().position(|o| {
        o.table.to_string() == wanted
            || o.table.name == wanted
            || format!("{}.{}", o.table.schema, o.table.name) == wanted
    });
    match found {
        Some(i) if config.outbox[i].retention.is_some() => Ok(vec![i]),
        Some(i) => Err(PruneCommandError::Usage(format!(
            "outbox[{i}].retention: {wanted} has no retention; add [outbox.retention] with \
             keep = \"7d\" to its [[outbox]] section (docs/configuration.md)"
        ))),
        None => {
            let captured = config.tables.iter().position(|t| {
                t.name.to_string() == wanted || {
                    let r = crate::config::TableRef::parse(wanted);
                    r.is_ok_and(|r| t.matches(&r.schema, &r.name))
                }
            });
            Err(PruneCommandError::Usage(match captured {
                Some(j) => format!(
                    "--table {wanted}: table[{j}] captures it as change events, and its deletes \
                     would be published as delete events; walrelay prunes only [[outbox]] \
                     tables, whose deletes publish nothing"
                ),
                None => format!(
                    "--table {wanted:?} is not an [[outbox]] table of this configuration (it \
                     has: {})",
                    config
                        .outbox
                        .iter()
                        .map(|o| o.table.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }))
        }
    }
}

/// Backoff between attempts: 1 s doubling to 30 s.
fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1u64 << attempt.min(5)).min(Duration::from_secs(30))
}

/// Sleeps `d` or until `stop`; false when stopped.
async fn pause(d: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        () = tokio::time::sleep(d) => true,
        () = stop.cancelled() => false,
    }
}

/// Reads the stored offset, retrying until `wait`.
async fn stored_offset(
    config: &Config,
    wait: Duration,
    stop: &CancellationToken,
) -> Result<Option<StoredOffset>, PruneCommandError> {
    let props = producer_properties(config);
    let started = Instant::now();
    let mut attempt = 0;
    loop {
        match read_offset_store(config, &props).await {
            Ok(read) => return Ok(read.into_offset()),
            Err(failure) => {
                let last = format!("{}; {}", failure.problem, failure.fix);
                if started.elapsed() >= wait || stop.is_cancelled() {
                    return Err(PruneCommandError::GaveUp {
                        what: "Kafka (the offset store)",
                        waited: started.elapsed(),
                        last,
                    });
                }
                tracing::warn!(
                    topic = %config.kafka.offsets_topic,
                    error = %last,
                    retry_in = ?backoff(attempt),
                    "waiting for Kafka: the stored offset decides what may be pruned"
                );
                if !pause(backoff(attempt), stop).await {
                    continue;
                }
                attempt += 1;
            }
        }
    }
}

/// Reads the offset, then prunes every picked table, reconnecting after a
/// transient error until `request.wait` passes without progress.
pub async fn prune(
    config: &Config,
    request: &Request,
    stop: &CancellationToken,
) -> Result<Summary, PruneCommandError> {
    let indices = pick(config, request.table.as_deref())?;
    let offset = stored_offset(config, request.wait, stop).await?;
    let params = connect_params(config);
    let options = Options {
        dry_run: request.dry_run,
        gap_republished: request.gap_republished,
    };
    let mut reports = Vec::new();
    let mut since = Instant::now();
    let mut attempt = 0;
    loop {
        let last = match catalog::connect(&params).await {
            Ok(mut client) => {
                let before = reports.iter().map(|r: &TableReport| r.batches).sum::<u64>();
                match retention::pass(
                    &mut client,
                    config,
                    &indices,
                    offset.as_ref(),
                    options,
                    stop,
                    &mut reports,
                )
                .await
                {
                    Ok(()) => break,
                    Err(e) if e.is_transient() => {
                        if reports.iter().map(|r| r.batches).sum::<u64>() > before {
                            since = Instant::now();
                            attempt = 0;
                        }
                        e.to_string()
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) if e.is_transient() => e.to_string(),
            Err(e) => return Err(PruneError::from(e).into()),
        };
        if since.elapsed() >= request.wait || stop.is_cancelled() {
            return Err(PruneCommandError::GaveUp {
                what: "PostgreSQL",
                waited: since.elapsed(),
                last,
            });
        }
        tracing::warn!(
            error = %last,
            retry_in = ?backoff(attempt),
            "waiting for PostgreSQL to prune the outbox (batches done so far stay done)"
        );
        pause(backoff(attempt), stop).await;
        attempt += 1;
    }
    Ok(Summary {
        dry_run: request.dry_run,
        offset_lsn: offset.as_ref().map(|o| o.lsn.to_string()),
        offset_committed_at_ms: offset.as_ref().and_then(|o| o.committed_at_ms),
        stopped: reports.len() < indices.len() || reports.iter().any(|r| !r.finished()),
        tables: reports,
    })
}

#[cfg(test)]
mod tests;
