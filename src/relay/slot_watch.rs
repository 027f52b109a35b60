//! Watches the replication slot for the operator, independently of sessions.
//!
//! Slot lag, retained WAL, `safe_wal_size` and `wal_status` matter most when
//! no session streams — Kafka down, a session refused — because that is when
//! the slot holds WAL back. So the watcher runs for the life of the
//! connector on its own catalog connection (reconnecting with the relay's
//! backoff), not inside a session, and records when it last read the slot:
//! `walrelay_slot_poll_age_seconds` tells a stale gauge from a fresh one.
//!
//! It only observes: nothing here feeds back into the data path.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::pg::catalog;
use crate::pg::wire::ConnectParams;
use crate::telemetry::Metrics;

/// How often the slot is read.
const POLL_INTERVAL: Duration = Duration::from_secs(5);

/// How long one read of the slot may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(15);

const SLOT_SQL: &str = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::int8, \
                               pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::int8, \
                               safe_wal_size, wal_status::text \
                        FROM pg_replication_slots WHERE slot_name = $1";

/// Reads the slot into `metrics` every [`POLL_INTERVAL`] until aborted.
pub(super) async fn watch(
    params: ConnectParams,
    slot: String,
    metrics: Arc<Metrics>,
    backoff_initial: Duration,
    backoff_max: Duration,
) {
    let mut backoff = backoff_initial;
    let mut warned_down = false;
    loop {
        let client = match catalog::connect(&params).await {
            Ok(c) => c,
            Err(e) => {
                if !warned_down {
                    tracing::debug!(error = %e, "slot watcher cannot connect; slot gauges go stale");
                    warned_down = true;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(backoff_max);
                continue;
            }
        };
        backoff = backoff_initial;
        warned_down = false;
        let mut warned_status = String::new();
        loop {
            // A query that hangs (a half-open connection) must not freeze
            // the gauges' age silently: give up and reconnect.
            let read =
                tokio::time::timeout(QUERY_TIMEOUT, client.query_opt(SLOT_SQL, &[&slot])).await;
            let Ok(result) = read else {
                tracing::debug!("slot query timed out; reconnecting the slot watcher");
                break;
            };
            match result {
                Ok(Some(row)) => {
                    let get = |i: usize| row.get::<_, Option<i64>>(i).unwrap_or(-1);
                    metrics.slot_lag_bytes.store(get(0), Ordering::Relaxed);
                    metrics.slot_retained_bytes.store(get(1), Ordering::Relaxed);
                    metrics.slot_safe_wal_bytes.store(get(2), Ordering::Relaxed);
                    let status: Option<String> = row.get(3);
                    let status = status.unwrap_or_default();
                    if (status == "unreserved" || status == "lost") && status != warned_status {
                        tracing::warn!(%slot, wal_status = %status, "the slot is about to lose (or lost) WAL it needs; see docs/operations.md");
                    }
                    warned_status.clone_from(&status);
                    metrics.set_wal_status(&status);
                    metrics.slot_polled();
                }
                Ok(None) => {
                    // Not created yet, or dropped: the gauges are unknown.
                    metrics.slot_lag_bytes.store(-1, Ordering::Relaxed);
                    metrics.slot_retained_bytes.store(-1, Ordering::Relaxed);
                    metrics.slot_safe_wal_bytes.store(-1, Ordering::Relaxed);
                    metrics.set_wal_status("");
                    metrics.slot_polled();
                }
                Err(e) => {
                    tracing::debug!(error = %e, "slot query failed; reconnecting the slot watcher");
                    break;
                }
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}
