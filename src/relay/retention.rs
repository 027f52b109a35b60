//! `[outbox.retention] interval`: `walrelay run` prunes its outbox tables in
//! the background, with the rule and code of `walrelay prune`
//! (`crate::retention`).
//!
//! Invariants:
//! - **Never on the delivery path.** A task of its own with its own
//!   PostgreSQL connection and its own read of the offset store; nothing of
//!   the session waits for it, and it takes no lock the session needs (its
//!   batches are short, under `lock_timeout`, and skip locked rows).
//! - **The stored offset decides**, as for the command: it is read from
//!   Kafka before every pass; no offset, nothing deleted.
//! - **A failed pass is said and retried at the next interval**; it never
//!   stops the connector. Stopping aborts a batch, which PostgreSQL rolls
//!   back.
//! - **Only the lease holder prunes.** A standby (or an instance that lost
//!   the lease and has not taken it again) skips its passes, so one
//!   connector's instances do not double the work or the locks. Should the
//!   lease move during a pass, two passes at once are still safe: each
//!   skips the other's locked rows, and both obey the same stored offset.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::offsets::OffsetStore;
use crate::pg::catalog;
use crate::pg::params::connect_params;
use crate::retention::{self, Options};
use crate::sink::properties::producer_properties;
use crate::telemetry::{Metrics, Role};

/// Prunes each `[[outbox]]` with a retention interval every interval while
/// this instance holds the lease (`metrics`' role), until `shutdown`.
pub(super) async fn every(config: Arc<Config>, metrics: Arc<Metrics>, shutdown: CancellationToken) {
    let tables: Vec<(usize, Duration)> = config
        .outbox
        .iter()
        .enumerate()
        .filter_map(|(i, o)| Some((i, o.retention.as_ref()?.interval?)))
        .collect();
    if tables.is_empty() {
        return;
    }
    let mut due: Vec<Instant> = tables.iter().map(|(_, d)| Instant::now() + *d).collect();
    loop {
        let Some(next) = due.iter().min().copied() else {
            return;
        };
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = shutdown.cancelled() => return,
        }
        let now = Instant::now();
        let indices: Vec<usize> = tables
            .iter()
            .zip(&due)
            .filter(|(_, at)| **at <= now)
            .map(|((i, _), _)| *i)
            .collect();
        for ((_, interval), at) in tables.iter().zip(due.iter_mut()) {
            if *at <= now {
                *at = now + *interval;
            }
        }
        if metrics.role() != Role::Active {
            tracing::debug!("outbox retention: not the lease holder; this pass is skipped");
            continue;
        }
        if let Err(e) = pass(&config, &indices, &shutdown).await {
            tracing::warn!(
                error = %e,
                "outbox retention: this pass stopped; the next runs at the next interval"
            );
        }
    }
}

async fn pass(
    config: &Config,
    indices: &[usize],
    shutdown: &CancellationToken,
) -> Result<(), String> {
    let store = OffsetStore::new(
        &producer_properties(config),
        &config.kafka.offsets_topic,
        &config.connector.name,
    );
    let offset = tokio::task::spawn_blocking(move || store.load(Duration::from_secs(10)))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("reading the stored offset: {e}"))?;
    let mut client = catalog::connect(&connect_params(config))
        .await
        .map_err(|e| e.to_string())?;
    let mut reports = Vec::new();
    let result = retention::pass(
        &mut client,
        config,
        indices,
        offset.as_ref(),
        Options::default(),
        shutdown,
        &mut reports,
    )
    .await;
    for report in &reports {
        tracing::info!(
            table = %report.table,
            deleted = report.deleted,
            kept = report.kept(),
            "outbox retention: {report}"
        );
    }
    result.map_err(|e| e.to_string())
}
