//! Setting up one replication session: server checks, publication, Kafka
//! producer and offset store, slot, the start decision, START_REPLICATION.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::streaming::Streaming;
use super::{RelayError, SLOT_POLL_INTERVAL, connect_params, producer_properties};
use crate::checkpoint::{Checkpoint, Limits};
use crate::config::Config;
use crate::offsets::{OffsetStore, StoredOffset};
use crate::pg::catalog;
use crate::pg::replication::{ReplicationClient, ReplicationStream};
use crate::pg::wire::WireError;
use crate::pgoutput::RelationCache;
use crate::router::Router;
use crate::sink::kafka::{Ack, KafkaSink, SinkErrorKind};
use crate::startup;
use crate::telemetry::Metrics;

/// Everything needed to start one replication session.
pub(super) struct Session {
    pub(super) config: Arc<Config>,
    pub(super) accept_slot_position: bool,
    pub(super) metrics: Arc<Metrics>,
}

/// A session that reached START_REPLICATION.
pub(super) struct Started {
    pub(super) run: Streaming,
    pub(super) stream: ReplicationStream,
    pub(super) acks: mpsc::UnboundedReceiver<Ack>,
    pub(super) status_interval: Duration,
    /// Polls the slot's lag for the metrics; aborted with the session.
    pub(super) _slot_poller: AbortOnDrop,
}

/// Aborts a background task when the session ends.
pub(super) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Every few seconds, reads the slot's lag and WAL retention into the metrics.
async fn poll_slot(client: tokio_postgres::Client, slot: String, metrics: Arc<Metrics>) {
    let sql = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::int8, \
                      pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::int8, \
                      safe_wal_size, wal_status::text \
               FROM pg_replication_slots WHERE slot_name = $1";
    loop {
        match client.query_opt(sql, &[&slot]).await {
            Ok(Some(row)) => {
                let get = |i: usize| row.get::<_, Option<i64>>(i).unwrap_or(-1);
                metrics.slot_lag_bytes.store(get(0), Ordering::Relaxed);
                metrics.slot_retained_bytes.store(get(1), Ordering::Relaxed);
                metrics.slot_safe_wal_bytes.store(get(2), Ordering::Relaxed);
                let status: Option<String> = row.get(3);
                let status = status.unwrap_or_default();
                if status == "unreserved" || status == "lost" {
                    tracing::warn!(%slot, wal_status = %status, "the slot is about to lose (or lost) WAL it needs; see docs/operations.md");
                }
                metrics.set_wal_status(&status);
            }
            Ok(None) => tracing::warn!(%slot, "the replication slot disappeared"),
            Err(e) => tracing::debug!(error = %e, "slot lag query failed"),
        }
        tokio::time::sleep(SLOT_POLL_INTERVAL).await;
    }
}

impl Started {
    /// Streams until shutdown (then stops gracefully) or an error.
    pub(super) async fn run(mut self, shutdown: &CancellationToken) -> Result<(), RelayError> {
        let result = self
            .run
            .stream(
                &mut self.stream,
                &mut self.acks,
                self.status_interval,
                shutdown,
            )
            .await;
        if let Err(e) = result {
            let one_bad_change = match &e {
                RelayError::Route(_) | RelayError::Decode { .. } | RelayError::Stream { .. } => {
                    true
                }
                RelayError::Delivery { error, .. } => error.kind == SinkErrorKind::Definite,
                _ => false,
            };
            let e = startup::explain_stream_error(e, &self.run.config.postgres.publication);
            if one_bad_change {
                // The connections are fine and the problem is one change: let
                // Kafka take (and the slot confirm) everything before it, so
                // the operator restarts right at the bad change.
                let final_pos = self.run.finish(&mut self.acks).await;
                if let Ok(pos) = self.stream.shutdown(final_pos).await {
                    tracing::info!(lsn = %pos, "confirmed everything before the failing change");
                }
            }
            return Err(e);
        }
        let final_pos = self.run.finish(&mut self.acks).await;
        match self.stream.shutdown(final_pos).await {
            Ok(pos) => tracing::info!(lsn = %pos, "stopped; final position reported"),
            Err(e) => tracing::warn!(error = %e, "stopped; could not send the final status update"),
        }
        Ok(())
    }
}

impl Session {
    /// Checks, connects and starts replication (see the module doc).
    pub(super) async fn setup(&self) -> Result<Started, RelayError> {
        let config = self.config.clone();
        let pg = &config.postgres;
        let params = connect_params(&config);
        let router = Router::new(&config.outbox);

        // 1. Server checks and publication, on an ordinary connection: the
        //    same checks `walrelay check` runs (crate::startup).
        let catalog = catalog::connect(&params).await?;
        startup::wal_level(&catalog).await?;
        startup::replication_privilege(&catalog, &pg.user).await?;
        let mut tables = Vec::with_capacity(config.outbox.len());
        for outbox in &config.outbox {
            tables.push(startup::outbox_table(&catalog, outbox).await?.0);
        }
        let routes: Vec<_> = config.outbox.iter().zip(&tables).collect();
        startup::publication(&catalog, pg, &routes)
            .await?
            .apply(&catalog)
            .await?;
        let status_interval = effective_status_interval(
            pg.status_interval,
            &catalog::setting(&catalog, "wal_sender_timeout").await?,
        );

        // 2. Kafka: producer, offset topic, stored offset.
        let properties = producer_properties(&config);
        let (sink, acks) = KafkaSink::new(&properties).map_err(RelayError::Sink)?;
        let store = OffsetStore::new(
            &properties,
            &config.kafka.offsets_topic,
            &config.connector.name,
        );
        store.ensure_topic(Duration::from_secs(10)).await?;
        // Reading the topic polls a consumer, which blocks.
        let stored = tokio::task::spawn_blocking(move || store.load(Duration::from_secs(10)))
            .await
            .map_err(|_| RelayError::Ended("offset store reader"))??;

        // 3. Replication connection, slot, and the start decision.
        let mut repl = ReplicationClient::connect(&params).await?;
        let system = repl.identify_system().await?;
        let slot = match catalog::slot_state(&catalog, &pg.slot).await? {
            Some(s) => s,
            None => {
                startup::missing_slot(pg, stored.as_ref(), self.accept_slot_position)?;
                let at = repl.create_slot(&pg.slot).await?;
                tracing::info!(slot = %pg.slot, lsn = %at, "created replication slot");
                catalog::slot_state(&catalog, &pg.slot)
                    .await?
                    .ok_or_else(|| RelayError::Setup {
                        what: format!(
                            "replication slot {:?} vanished right after it was created",
                            pg.slot
                        ),
                        fix: "make sure nothing else drops walrelay's slot".into(),
                    })?
            }
        };
        startup::slot_shape(&slot, &pg.slot, &pg.database)?;
        if let Some(pid) = slot.active_pid {
            // Typically our own previous walsender, until wal_sender_timeout
            // notices we are gone: transient.
            return Err(RelayError::Wire(WireError::Server {
                context: "checking the slot".into(),
                error: Box::new(crate::pg::wire::ServerError {
                    severity: "ERROR".into(),
                    code: "55006".into(),
                    message: format!("replication slot {:?} is active for PID {pid}", pg.slot),
                    detail: None,
                    hint: Some("another walrelay (or a dying walsender) uses this slot".into()),
                }),
            }));
        }
        let start = startup::start_position(
            stored.as_ref(),
            &slot,
            &system.system_id,
            &pg.slot,
            self.accept_slot_position,
        )?;

        let stream = repl
            .start_replication(&pg.slot, start, &pg.publication)
            .await
            .map_err(|e| startup::explain_stream_error(e.into(), &pg.publication))?;
        // The slot may have moved between our read and START_REPLICATION.
        if let Some(now) = catalog::slot_state(&catalog, &pg.slot).await? {
            if now.wal_status.as_deref() == Some("lost") {
                return Err(RelayError::Refused {
                    reason: format!("replication slot {:?} became lost", pg.slot),
                    hint: "see docs/operations.md, \"Lost slot\"".into(),
                });
            }
            if let Some(c) = now.confirmed_flush_lsn
                && c > start
            {
                return Err(RelayError::Refused {
                    reason: format!(
                        "replication slot {:?} moved from {start} to {c} while walrelay was starting (someone advanced it)",
                        pg.slot
                    ),
                    hint: "make sure only walrelay consumes this slot, then restart".into(),
                });
            }
        }
        tracing::info!(
            slot = %pg.slot, publication = %pg.publication, lsn = %start,
            system_id = %system.system_id, timeline = system.timeline,
            ?status_interval, "streaming"
        );

        let run = Streaming {
            config: config.clone(),
            sink,
            router,
            relations: RelationCache::new(),
            checkpoint: Checkpoint::new(
                start,
                Limits {
                    max_in_flight_records: config.kafka.max_in_flight_records as u64,
                    max_in_flight_bytes: config.kafka.max_in_flight_bytes,
                },
            ),
            open: None,
            offset_template: StoredOffset {
                connector: config.connector.name.clone(),
                system_id: system.system_id.clone(),
                timeline: system.timeline,
                slot: pg.slot.clone(),
                lsn: String::new(),
                written_at_ms: 0,
            },
            offset_in_flight: None,
            offset_acked: start,
            warned_updates: HashSet::new(),
            metrics: self.metrics.clone(),
        };
        let slot_poller = AbortOnDrop(tokio::spawn(poll_slot(
            catalog,
            pg.slot.clone(),
            self.metrics.clone(),
        )));
        Ok(Started {
            _slot_poller: slot_poller,
            run,
            stream,
            acks,
            status_interval,
        })
    }
}

/// `min(configured, wal_sender_timeout / 2)`; the setting text is like `10s`,
/// `60000` (ms) or `0` (disabled).
fn effective_status_interval(configured: Duration, wal_sender_timeout: &str) -> Duration {
    let t = wal_sender_timeout.trim();
    let parsed = if let Some(ms) = t.strip_suffix("ms") {
        ms.trim().parse::<u64>().ok().map(Duration::from_millis)
    } else if let Some(s) = t.strip_suffix("min") {
        s.trim()
            .parse::<u64>()
            .ok()
            .map(|m| Duration::from_secs(m * 60))
    } else if let Some(s) = t.strip_suffix('s') {
        s.trim().parse::<u64>().ok().map(Duration::from_secs)
    } else if let Some(h) = t.strip_suffix('h') {
        h.trim()
            .parse::<u64>()
            .ok()
            .map(|h| Duration::from_secs(h * 3600))
    } else {
        t.parse::<u64>().ok().map(Duration::from_millis)
    };
    match parsed {
        Some(d) if !d.is_zero() => configured.min(d / 2).max(Duration::from_millis(10)),
        _ => configured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_interval_is_capped_by_half_the_sender_timeout() {
        let one = Duration::from_secs(1);
        assert_eq!(effective_status_interval(one, "10s"), one);
        assert_eq!(
            effective_status_interval(one, "1s"),
            Duration::from_millis(500)
        );
        assert_eq!(
            effective_status_interval(one, "600ms"),
            Duration::from_millis(300)
        );
        assert_eq!(effective_status_interval(one, "1min"), one);
        assert_eq!(effective_status_interval(one, "0"), one);
        assert_eq!(
            effective_status_interval(one, "1000"),
            Duration::from_millis(500)
        );
    }
}
