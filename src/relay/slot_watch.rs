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
use std::time::Duration;

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
    format!(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::int8, \
                pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::int8, \
                s.safe_wal_size::int8, s.wal_status::text, {reason}, \
                st.spill_txns, st.spill_count, st.spill_bytes, st.stream_txns, \
                st.stream_count, st.stream_bytes, st.total_txns, st.total_bytes \
         FROM pg_replication_slots s \
         LEFT JOIN pg_stat_replication_slots st ON st.slot_name = s.slot_name \
         WHERE s.slot_name = $1"
    )
}

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
        let sql = match catalog::server_version(&client).await {
            Ok(v) => slot_sql(v),
            Err(e) => {
                tracing::debug!(error = %e, "slot watcher cannot read the server version");
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        let mut warned_status = String::new();
        loop {
            // A query that hangs (a half-open connection) must not freeze
            // the gauges' age silently: give up and reconnect.
            let read =
                tokio::time::timeout(QUERY_TIMEOUT, client.query_opt(sql.as_str(), &[&slot])).await;
            let Ok(result) = read else {
                tracing::debug!("slot query timed out; reconnecting the slot watcher");
                break;
            };
            match result {
                Ok(Some(row)) => {
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
                    metrics.slot_polled();
                }
                Ok(None) => {
                    // Not created yet, or dropped: the gauges are unknown.
                    metrics.slot_lag_bytes.set(None);
                    metrics.slot_retained_bytes.set(None);
                    metrics.slot_safe_wal_bytes.set(None);
                    metrics.set_invalidation_reason("");
                    metrics.set_slot_stats(None);
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
