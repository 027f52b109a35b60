//! Watches the replication slot for the operator, independently of sessions.
//!
//! Slot lag, retained WAL, `safe_wal_size` and `wal_status` matter most when
//! no session streams — Kafka down, a session refused — because that is when
//! the slot holds WAL back. So the watcher runs for the life of the
//! connector on its own catalog connection, not inside a session, and
//! records when it last read the slot: `walrelay_slot_poll_age_seconds`
//! tells a stale gauge from a fresh one.
//!
//! Invariants:
//! - It only observes: nothing here feeds back into the data path, and no
//!   failure of its own stops the connector.
//! - A failed read (connect, server version, the slot query, a query that
//!   hangs) is retried on a new connection after a wait that doubles from
//!   `postgres.reconnect_backoff_initial` to `reconnect_backoff_max` while
//!   reads keep failing, and starts over after a read succeeds — never in a
//!   tight loop, also when connecting succeeds and the query fails every
//!   time (a revoked statistics view).
//! - It reads the server that holds the slot: with capture from a standby,
//!   the standby, where lag is measured from its replay position.
//! - The log says a failure once, at `warn`, naming the step and the error;
//!   again only when the error changes; and `recovered` once, at `info`,
//!   when a read succeeds again ([`Failures`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::pg::catalog;
use crate::pg::wire::ConnectParams;
use crate::telemetry::Metrics;

/// How often the slot is read.
const POLL_INTERVAL: Duration = Duration::from_secs(5);

/// How long one read of the slot may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(15);

/// The slot's sizes and state, and its decoding statistics
/// (`pg_stat_replication_slots`, PostgreSQL 14+); `invalidation_reason`
/// exists from 17 on.
fn slot_sql(server_version: i32) -> String {
    let reason = if server_version >= 170_000 {
        "s.invalidation_reason::text"
    } else {
        "NULL::text"
    };
    // The server's own WAL position: a standby's is what it replayed.
    let wal = catalog::WAL_POSITION;
    format!(
        "SELECT pg_wal_lsn_diff({wal}, s.confirmed_flush_lsn)::int8, \
                pg_wal_lsn_diff({wal}, s.restart_lsn)::int8, \
                s.safe_wal_size::int8, s.wal_status::text, {reason}, \
                st.spill_txns, st.spill_count, st.spill_bytes, st.stream_txns, \
                st.stream_count, st.stream_bytes, st.total_txns, st.total_bytes \
         FROM pg_replication_slots s \
         LEFT JOIN pg_stat_replication_slots st ON st.slot_name = s.slot_name \
         WHERE s.slot_name = $1"
    )
}

/// The watcher's failures, as the log and the backoff see them (pure: the
/// clock is passed in).
#[derive(Debug)]
struct Failures {
    initial: Duration,
    max: Duration,
    /// The wait after the next failure.
    next: Duration,
    /// The failure last said, and when the failures began.
    said: Option<(String, Instant)>,
}

/// What a failure means for the log.
#[derive(Debug, PartialEq, Eq)]
enum Said {
    /// The first failure, or a different error than the one said: warn.
    New,
    /// The same error again: nothing new.
    Again,
}

impl Failures {
    fn new(initial: Duration, max: Duration) -> Failures {
        Failures {
            initial,
            max,
            next: initial,
            said: None,
        }
    }

    /// A read failed with `error` at `now`: whether that is news, and how
    /// long to wait before the next attempt.
    fn failed(&mut self, error: &str, now: Instant) -> (Said, Duration) {
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        let said = match &mut self.said {
            Some((last, _)) if last == error => Said::Again,
            Some((last, _)) => {
                error.clone_into(last);
                Said::New
            }
            None => {
                self.said = Some((error.to_owned(), now));
                Said::New
            }
        };
        (said, wait)
    }

    /// A read succeeded at `now`: how long reads had failed, when they had
    /// (say "recovered" once).
    fn succeeded(&mut self, now: Instant) -> Option<Duration> {
        self.next = self.initial;
        self.said
            .take()
            .map(|(_, since)| now.saturating_duration_since(since))
    }
}

/// Reads the slot into `metrics` every [`POLL_INTERVAL`] until aborted.
pub(super) async fn watch(
    params: ConnectParams,
    slot: String,
    metrics: Arc<Metrics>,
    backoff_initial: Duration,
    backoff_max: Duration,
) {
    let mut failures = Failures::new(backoff_initial, backoff_max);
    loop {
        let failure = read_until_failure(&params, &slot, &metrics, &mut failures).await;
        let (said, retry_in) = failures.failed(&failure, Instant::now());
        if said == Said::New {
            tracing::warn!(
                %slot, error = %failure, ?retry_in,
                "slot watcher cannot read the slot: the walrelay_slot_* gauges keep their last \
                 values until it can; retrying with backoff up to {backoff_max:?} (said again \
                 only if the error changes)"
            );
        } else {
            tracing::debug!(%slot, error = %failure, ?retry_in, "slot watcher: still failing");
        }
        tokio::time::sleep(retry_in).await;
    }
}

/// Connects and reads the slot every [`POLL_INTERVAL`] until something
/// fails; returns what failed.
async fn read_until_failure(
    params: &ConnectParams,
    slot: &str,
    metrics: &Metrics,
    failures: &mut Failures,
) -> String {
    let client = match catalog::connect(params).await {
        Ok(c) => c,
        Err(e) => return e.to_string(),
    };
    let sql = match catalog::server_version(&client).await {
        Ok(v) => slot_sql(v),
        Err(e) => return e.to_string(),
    };
    let mut warned_status = String::new();
    loop {
        // A query that hangs (a half-open connection) must not freeze the
        // gauges' age silently: give up and reconnect.
        let read =
            tokio::time::timeout(QUERY_TIMEOUT, client.query_opt(sql.as_str(), &[&slot])).await;
        let row = match read {
            Err(_) => {
                return format!(
                    "the slot query got no answer within {QUERY_TIMEOUT:?} (reconnecting)"
                );
            }
            Ok(Err(source)) => {
                return catalog::CatalogError::Query {
                    context: "reading the slot from pg_replication_slots and \
                              pg_stat_replication_slots",
                    source,
                }
                .to_string();
            }
            Ok(Ok(row)) => row,
        };
        match row {
            Some(row) => {
                let get = |i: usize| row.get::<_, Option<i64>>(i);
                metrics.slot_lag_bytes.set(get(0));
                metrics.slot_retained_bytes.set(get(1));
                metrics.slot_safe_wal_bytes.set(get(2));
                let reason: Option<String> = row.get(4);
                metrics.set_invalidation_reason(reason.as_deref().unwrap_or_default());
                let stats: Option<Vec<u64>> = (5..13)
                    .map(|i| get(i).and_then(|v| u64::try_from(v).ok()))
                    .collect();
                metrics.set_slot_stats(stats.and_then(|v| v.try_into().ok()));
                let status: Option<String> = row.get(3);
                let status = status.unwrap_or_default();
                if (status == "unreserved" || status == "lost") && status != warned_status {
                    tracing::warn!(%slot, wal_status = %status, "the slot is about to lose (or lost) WAL it needs; see docs/operations.md");
                }
                warned_status.clone_from(&status);
                metrics.set_wal_status(&status);
            }
            None => {
                // Not created yet, or dropped: the gauges are unknown.
                metrics.slot_lag_bytes.set(None);
                metrics.slot_retained_bytes.set(None);
                metrics.slot_safe_wal_bytes.set(None);
                metrics.set_invalidation_reason("");
                metrics.set_slot_stats(None);
                metrics.set_wal_status("");
            }
        }
        metrics.slot_polled();
        if let Some(after) = failures.succeeded(Instant::now()) {
            tracing::info!(
                %slot, failing_secs = after.as_secs(),
                "slot watcher recovered: read the slot again after {} s of failures",
                after.as_secs()
            );
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests;
