//! The relay: one replication session from slot to Kafka, and the loop that
//! restarts it.
//!
//! Data moves one way: walsender → [`ReplicationStream`] → [`pgoutput::decode`]
//! → [`Router`] → [`KafkaSink`]. Acknowledgements move back: delivery reports
//! arrive as [`Ack`]s on a channel and advance the [`Checkpoint`]; the
//! checkpoint's confirmed position is written to the offset store, and only an
//! *acknowledged* offset write is reported to PostgreSQL as the slot's flush
//! position.
//!
//! Invariants kept here (the pieces keep their own):
//! - **Confirm only what Kafka holds.** The status update's flush LSN is
//!   always an offset-store write that Kafka acknowledged, and that write
//!   carried `checkpoint.confirmed()`, which covers only fully acked
//!   transactions. So the slot is never ahead of Kafka, nor of the offset store.
//! - **Bounded memory.** While the checkpoint is full, the socket is not read
//!   (TCP backpressure reaches the walsender), but status updates keep going
//!   so the walsender does not time us out.
//! - **Never skip silently.** Decode, route, delivery and frontier errors end
//!   the session before the position passes the offending change.
//! - **Errors say what to do.** Each error is transient (the outer loop
//!   retries with capped exponential backoff, logging once per state change)
//!   or definite (the connector stops with the explanation).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::Lsn;
use crate::checkpoint::{Checkpoint, CheckpointError, Limits, TxnId};
use crate::config::Config;
use crate::offsets::{self, OffsetStore, SlotPosition, StartDecision, StoredOffset};
use crate::pg::catalog::{self, CatalogError};
use crate::pg::replication::{
    ReplicationClient, ReplicationMessage, ReplicationStream, StreamEvent,
};
use crate::pg::wire::{ConnectParams, WireError};
use crate::pgoutput::{self, DecodeError, LogicalMessage, RelationCache};
use crate::router::{RouteError, Routed, Router};
use crate::sink::kafka::{Ack, Delivery, KafkaSink, SinkError, SinkErrorKind};
use crate::telemetry::{self, Metrics};
use std::sync::atomic::Ordering;

/// How long Kafka may leave records unacknowledged before we warn.
const STALL_WARNING: Duration = telemetry::STALL;

/// How often the slot's lag is read for the metrics.
const SLOT_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// Knobs from the command line.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Start even if the slot is ahead of the stored offset (after the
    /// operator has reconciled the gap). Applies to the first session only.
    pub accept_slot_position: bool,
}

/// Why a session or the connector stopped.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("cannot decode the replication stream at {lsn}: {source}")]
    Decode { lsn: Lsn, source: DecodeError },
    #[error("replication stream out of order at {lsn}: {what}")]
    Stream { lsn: Lsn, what: String },
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error("Kafka rejected {event} for topic {topic:?} (transaction committed at {lsn}): {error}")]
    Delivery {
        topic: String,
        lsn: Lsn,
        /// Which event: the outbox row id when known.
        event: String,
        error: SinkError,
    },
    #[error("Kafka: {0}")]
    Sink(SinkError),
    #[error("offset store: {0}")]
    Offsets(#[from] offsets::OffsetStoreError),
    #[error("internal consistency check failed: {0}")]
    Checkpoint(#[from] CheckpointError),
    #[error("refusing to start: {reason}. What to do: {hint}")]
    Refused { reason: String, hint: String },
    #[error("{what}. What to do: {fix}")]
    Setup { what: String, fix: String },
    #[error("{0} ended unexpectedly")]
    Ended(&'static str),
}

impl RelayError {
    /// Whether the outer loop should retry.
    pub fn is_transient(&self) -> bool {
        match self {
            RelayError::Wire(e) => e.is_transient(),
            RelayError::Catalog(e) => e.is_transient(),
            RelayError::Delivery { error, .. } | RelayError::Sink(error) => {
                error.kind == SinkErrorKind::Transient
            }
            RelayError::Offsets(_) => true,
            RelayError::Ended(_) => true,
            RelayError::Decode { .. }
            | RelayError::Stream { .. }
            | RelayError::Route(_)
            | RelayError::Checkpoint(_)
            | RelayError::Refused { .. }
            | RelayError::Setup { .. } => false,
        }
    }

    /// What we are waiting for, for the retry log line.
    fn waiting_for(&self) -> &'static str {
        match self {
            RelayError::Wire(_) | RelayError::Catalog(_) => "PostgreSQL",
            RelayError::Delivery { .. } | RelayError::Sink(_) | RelayError::Offsets(_) => "Kafka",
            _ => "the session to restart",
        }
    }
}

/// Connection parameters for both PostgreSQL connections.
pub fn connect_params(config: &Config) -> ConnectParams {
    let pg = &config.postgres;
    ConnectParams {
        host: pg.host.clone(),
        port: pg.port,
        user: pg.user.clone(),
        password: pg.password.clone(),
        database: pg.database.clone(),
        application_name: format!("walrelay-{}", config.connector.name),
        connect_timeout: pg.connect_timeout,
        max_message_size: usize::try_from(pg.max_message_size).unwrap_or(usize::MAX),
    }
}

/// librdkafka properties: the config's, plus queue sizes derived from our
/// in-flight caps so that librdkafka's queue never fills before ours does.
pub fn producer_properties(config: &Config) -> Vec<(String, String)> {
    let k = &config.kafka;
    let mut props = vec![
        (
            "client.id".to_owned(),
            format!("walrelay-{}", config.connector.name),
        ),
        (
            "queue.buffering.max.messages".to_owned(),
            (k.max_in_flight_records as u64 + 10_000)
                .min(2_147_483_647)
                .to_string(),
        ),
        (
            "queue.buffering.max.kbytes".to_owned(),
            ((k.max_in_flight_bytes + config.postgres.max_message_size) / 1024 + 1024)
                .min(2_147_483_647)
                .to_string(),
        ),
    ];
    // The config's list last, so its raw map can still tune these.
    props.extend(k.producer_properties());
    props
}

/// Runs the connector until `shutdown` is cancelled (Ok) or a definite error.
pub async fn run(
    config: Config,
    options: RunOptions,
    shutdown: CancellationToken,
) -> Result<(), RelayError> {
    let config = Arc::new(config);
    let metrics = Arc::new(Metrics::default());
    if let Some(health) = &config.health {
        let addr =
            telemetry::serve(health.listen, metrics.clone()).map_err(|what| RelayError::Setup {
                what,
                fix: "choose a free address for [health] listen, or remove the [health] section"
                    .into(),
            })?;
        tracing::info!(%addr, "serving /healthz and /metrics");
    }
    let mut backoff = config.postgres.reconnect_backoff_initial;
    let mut last_problem: Option<String> = None;
    let mut accept = options.accept_slot_position;
    loop {
        let session = Session {
            config: config.clone(),
            accept_slot_position: accept,
            metrics: metrics.clone(),
        };
        // Setup (connecting, checks) is simply abandoned on shutdown; once
        // streaming, the session stops gracefully by itself.
        let started = tokio::select! {
            r = session.setup() => r,
            _ = shutdown.cancelled() => return Ok(()),
        };
        let result = match started {
            Ok(started) => {
                // It got as far as streaming: the next failure starts a new story.
                backoff = config.postgres.reconnect_backoff_initial;
                last_problem = None;
                accept = false;
                metrics.sessions_started.fetch_add(1, Ordering::Relaxed);
                metrics.streaming.store(true, Ordering::Relaxed);
                metrics.set_error("");
                let r = started.run(&shutdown).await;
                metrics.streaming.store(false, Ordering::Relaxed);
                r
            }
            Err(e) => Err(e),
        };
        if let Err(e) = &result {
            metrics.session_errors.fetch_add(1, Ordering::Relaxed);
            metrics.set_error(&e.to_string());
        }
        match result {
            Ok(()) => return Ok(()),
            Err(e) if e.is_transient() => {
                let problem = e.to_string();
                if last_problem.as_deref() != Some(problem.as_str()) {
                    tracing::warn!(
                        error = %problem,
                        retry_in = ?backoff,
                        "waiting for {}; will retry with backoff",
                        e.waiting_for()
                    );
                    last_problem = Some(problem);
                } else {
                    tracing::debug!(retry_in = ?backoff, "still waiting for {}", e.waiting_for());
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.cancelled() => return Ok(()),
                }
                backoff = (backoff * 2).min(config.postgres.reconnect_backoff_max);
            }
            Err(e) => return Err(e),
        }
    }
}

/// State of the transaction currently streaming.
#[derive(Debug, Clone, Copy)]
struct OpenTxn {
    id: TxnId,
    commit_lsn: Lsn,
    next_index: u32,
}

/// Everything needed to start one replication session.
struct Session {
    config: Arc<Config>,
    accept_slot_position: bool,
    metrics: Arc<Metrics>,
}

/// A session that reached START_REPLICATION.
struct Started {
    run: Streaming,
    stream: ReplicationStream,
    acks: mpsc::UnboundedReceiver<Ack>,
    status_interval: Duration,
    /// Polls the slot's lag for the metrics; aborted with the session.
    _slot_poller: AbortOnDrop,
}

/// Aborts a background task when the session ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

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
    async fn run(mut self, shutdown: &CancellationToken) -> Result<(), RelayError> {
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
    async fn setup(&self) -> Result<Started, RelayError> {
        let config = self.config.clone();
        let pg = &config.postgres;
        let params = connect_params(&config);
        let router = Router::new(&config.outbox);

        // 1. Server checks and publication, on an ordinary connection.
        let catalog = catalog::connect(&params).await?;
        let wal_level = catalog::setting(&catalog, "wal_level").await?;
        if wal_level != "logical" {
            return Err(RelayError::Setup {
                what: format!(
                    "PostgreSQL runs with wal_level = {wal_level}, logical decoding needs 'logical'"
                ),
                fix: "set wal_level = logical in postgresql.conf and restart PostgreSQL".into(),
            });
        }
        catalog::ensure_publication(
            &catalog,
            &pg.publication,
            &router.tables(),
            pg.create_publication,
        )
        .await?;
        let status_interval = effective_status_interval(
            pg.status_interval,
            &catalog::setting(&catalog, "wal_sender_timeout").await?,
        );

        // 2. Kafka: producer, offset topic, stored offset.
        let (sink, acks) =
            KafkaSink::new(&producer_properties(&config)).map_err(RelayError::Sink)?;
        let store = OffsetStore::new(
            &producer_properties(&config),
            &config.kafka.offsets_topic,
            &config.connector.name,
        );
        let stored = {
            let store = store.clone();
            tokio::task::spawn_blocking(move || {
                store.ensure_topic(Duration::from_secs(10))?;
                store.load(Duration::from_secs(10))
            })
            .await
            .map_err(|_| RelayError::Ended("offset store reader"))??
        };

        // 3. Replication connection, slot, and the start decision.
        let mut repl = ReplicationClient::connect(&params).await?;
        let system = repl.identify_system().await?;
        let slot = match catalog::slot_state(&catalog, &pg.slot).await? {
            Some(s) => s,
            None => {
                if let Some(stored) = &stored
                    && !self.accept_slot_position
                {
                    return Err(RelayError::Refused {
                        reason: format!(
                            "replication slot {:?} does not exist, but the offset store says this connector had published up to {}: the slot was dropped, and changes since then were never streamed",
                            pg.slot, stored.lsn
                        ),
                        hint: "reconcile events committed after that position from the outbox table, then start once with --accept-slot-position (see docs/operations.md, \"Slot ahead of the stored offset\")".into(),
                    });
                }
                if !pg.create_slot {
                    return Err(RelayError::Setup {
                        what: format!("replication slot {:?} does not exist", pg.slot),
                        fix: "set postgres.create_slot = true, or create it with SELECT pg_create_logical_replication_slot('<slot>', 'pgoutput')".into(),
                    });
                }
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
        check_slot_shape(&slot, &pg.slot, &pg.database)?;
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
        let position = SlotPosition {
            confirmed_flush: slot.confirmed_flush_lsn.unwrap_or(Lsn::ZERO),
            wal_status: slot.wal_status.clone(),
        };
        let start = match offsets::compare(stored.as_ref(), &position, &system.system_id, &pg.slot)
        {
            StartDecision::Resume { from } => from,
            StartDecision::Refuse { reason, hint } => {
                if !self.accept_slot_position || position.wal_status.as_deref() == Some("lost") {
                    return Err(RelayError::Refused { reason, hint });
                }
                tracing::warn!(%reason, "starting anyway: --accept-slot-position was given");
                position.confirmed_flush
            }
        };

        let stream = repl
            .start_replication(&pg.slot, start, &pg.publication)
            .await?;
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

/// "outbox row id=…" for error messages (never the payload).
fn describe_record(record: &crate::router::Record) -> String {
    match record.headers.iter().find(|(k, _)| k == "id") {
        Some((_, id)) => format!("outbox row id={}", String::from_utf8_lossy(id)),
        None => "a record".to_owned(),
    }
}

fn check_slot_shape(
    slot: &catalog::SlotState,
    name: &str,
    database: &str,
) -> Result<(), RelayError> {
    if slot.slot_type != "logical" || slot.plugin.as_deref() != Some("pgoutput") {
        return Err(RelayError::Setup {
            what: format!(
                "replication slot {name:?} is a {} slot using {:?}, walrelay needs a logical slot using pgoutput",
                slot.slot_type, slot.plugin
            ),
            fix: "configure another postgres.slot name, or drop this slot if nothing needs it"
                .into(),
        });
    }
    if slot.database.as_deref() != Some(database) {
        return Err(RelayError::Setup {
            what: format!(
                "replication slot {name:?} belongs to database {:?}, not {database:?}",
                slot.database
            ),
            fix: "use a slot name unique to this database".into(),
        });
    }
    Ok(())
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

struct Streaming {
    metrics: Arc<Metrics>,
    config: Arc<Config>,
    sink: KafkaSink,
    router: Router,
    relations: RelationCache,
    checkpoint: Checkpoint,
    open: Option<OpenTxn>,
    offset_template: StoredOffset,
    /// An offset-store write Kafka has not acknowledged yet.
    offset_in_flight: Option<Lsn>,
    /// The newest acknowledged offset-store write: what we report.
    offset_acked: Lsn,
    warned_updates: HashSet<String>,
}

impl Streaming {
    async fn stream(
        &mut self,
        stream: &mut ReplicationStream,
        acks: &mut mpsc::UnboundedReceiver<Ack>,
        status_interval: Duration,
        shutdown: &CancellationToken,
    ) -> Result<(), RelayError> {
        let mut ticker = tokio::time::interval(status_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut full_since: Option<Instant> = None;
        // When Kafka last acknowledged anything, and whether we said it stalled.
        let mut last_ack = Instant::now();
        let mut stall_reported = false;
        loop {
            let full = self.checkpoint.is_full();
            match (full, full_since) {
                (true, None) => {
                    full_since = Some(Instant::now());
                    tracing::debug!(
                        records = self.checkpoint.in_flight_records(),
                        bytes = self.checkpoint.in_flight_bytes(),
                        "in-flight limit reached; pausing reads until Kafka acknowledges"
                    );
                }
                (false, Some(_)) => full_since = None,
                _ => {}
            }
            let waiting =
                self.checkpoint.in_flight_records() > 0 || self.offset_in_flight.is_some();
            if !waiting {
                last_ack = Instant::now();
                self.metrics.kafka_progress();
            }
            self.metrics
                .in_flight_records
                .store(self.checkpoint.in_flight_records(), Ordering::Relaxed);
            self.metrics
                .in_flight_bytes
                .store(self.checkpoint.in_flight_bytes(), Ordering::Relaxed);
            self.metrics
                .confirmed_lsn
                .store(stream.last_reported().0, Ordering::Relaxed);
            if waiting && !stall_reported && last_ack.elapsed() > STALL_WARNING {
                stall_reported = true;
                tracing::warn!(
                    records = self.checkpoint.in_flight_records(),
                    reads_paused = full,
                    "Kafka has not acknowledged records for {}s; waiting for Kafka (is the broker reachable?)",
                    STALL_WARNING.as_secs()
                );
            }
            if shutdown.is_cancelled() {
                return Ok(());
            }
            // Unbiased on purpose: under a backlog both the stream and the
            // acks are always ready, and a fixed order would starve one
            // (reads, or acks and with them the status updates).
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                ack = acks.recv() => {
                    let Some(ack) = ack else { return Err(RelayError::Ended("Kafka delivery channel")) };
                    if stall_reported {
                        stall_reported = false;
                        tracing::info!(stalled_for = ?last_ack.elapsed(), "Kafka acknowledges again");
                    }
                    last_ack = Instant::now();
                    self.metrics.kafka_progress();
                    if self.on_ack(ack)? {
                        stream.send_status(self.offset_acked, false).await?;
                    }
                    // Drain what else is ready without going back to select.
                    while let Ok(ack) = acks.try_recv() {
                        if self.on_ack(ack)? {
                            stream.send_status(self.offset_acked, false).await?;
                        }
                    }
                }
                _ = ticker.tick() => {
                    self.write_offset_if_due().await?;
                    stream.send_status(self.offset_acked, false).await?;
                }
                event = stream.recv(), if !full => {
                    match event? {
                        StreamEvent::End => return Err(RelayError::Ended("the replication stream")),
                        StreamEvent::Message(ReplicationMessage::Keepalive { wal_end, reply, .. }) => {
                            self.checkpoint.keepalive(wal_end);
                            if reply {
                                self.write_offset_if_due().await?;
                                stream.send_status(self.offset_acked, false).await?;
                            }
                        }
                        StreamEvent::Message(ReplicationMessage::XLogData { wal_start, wal_end, data, .. }) => {
                            self.metrics.received_lsn.store(wal_end.0, Ordering::Relaxed);
                            let msg = pgoutput::decode(data)
                                .map_err(|source| RelayError::Decode { lsn: wal_start, source })?;
                            self.on_message(msg, wal_start).await?;
                        }
                    }
                }
            }
        }
    }

    async fn on_message(&mut self, msg: LogicalMessage, wal_start: Lsn) -> Result<(), RelayError> {
        match msg {
            LogicalMessage::Begin(b) => {
                let id = self.checkpoint.begin()?;
                self.open = Some(OpenTxn {
                    id,
                    commit_lsn: b.final_lsn,
                    next_index: 0,
                });
            }
            LogicalMessage::Commit(c) => {
                let open = self.open.take().ok_or_else(|| RelayError::Stream {
                    lsn: wal_start,
                    what: "Commit without Begin".into(),
                })?;
                self.checkpoint.commit(open.id, c.end_lsn)?;
                self.metrics.transactions.fetch_add(1, Ordering::Relaxed);
            }
            LogicalMessage::Relation(r) => {
                self.router.on_relation(&r);
                self.relations.insert(r);
            }
            LogicalMessage::Insert(i) => {
                let open = self.current(wal_start)?;
                self.relations
                    .require(i.relation)
                    .map_err(|e| RelayError::Stream {
                        lsn: wal_start,
                        what: e.to_string(),
                    })?;
                if let Routed::Record(record) =
                    self.router.on_insert(i.relation, &i.new, open.commit_lsn)?
                {
                    let bytes = record.size();
                    self.checkpoint.record_sent(open.id, bytes)?;
                    self.metrics
                        .records_published
                        .fetch_add(1, Ordering::Relaxed);
                    let delivery = Delivery::Record {
                        txn: open.id,
                        bytes,
                        commit_lsn: open.commit_lsn,
                        index: open.next_index,
                    };
                    if let Some(o) = self.open.as_mut() {
                        o.next_index += 1;
                    }
                    self.sink.send(&record, delivery).await.map_err(|error| {
                        RelayError::Delivery {
                            topic: record.topic.clone(),
                            lsn: open.commit_lsn,
                            event: describe_record(&record),
                            error,
                        }
                    })?;
                }
            }
            LogicalMessage::Update(u) => {
                let open = self.current(wal_start)?;
                if let Routed::IgnoredUpdate { table } =
                    self.router.on_update(u.relation, open.commit_lsn)?
                {
                    if self.warned_updates.insert(table.clone()) {
                        tracing::warn!(
                            %table, lsn = %open.commit_lsn,
                            "an outbox row was updated; updates are not published (on_update = \"warn\"; \
                             logged once per table per session)"
                        );
                    }
                }
            }
            // Deletes (insert-then-delete is the usual outbox pattern),
            // truncates, origins, types and logical messages publish nothing.
            LogicalMessage::Delete(_)
            | LogicalMessage::Truncate(_)
            | LogicalMessage::Origin(_)
            | LogicalMessage::Type(_)
            | LogicalMessage::Message(_) => {}
        }
        Ok(())
    }

    fn current(&self, wal_start: Lsn) -> Result<OpenTxn, RelayError> {
        self.open.ok_or_else(|| RelayError::Stream {
            lsn: wal_start,
            what: "row change outside Begin..Commit".into(),
        })
    }

    /// Applies one delivery report. Returns true when an offset write was
    /// acknowledged (so a status update is worth sending now).
    fn on_ack(&mut self, ack: Ack) -> Result<bool, RelayError> {
        match ack {
            Ack::Delivered(Delivery::Record { txn, bytes, .. }) => {
                self.checkpoint.ack(txn, bytes)?;
                self.metrics.records_acked.fetch_add(1, Ordering::Relaxed);
                Ok(false)
            }
            Ack::Delivered(Delivery::Offset { lsn }) => {
                if self.offset_in_flight == Some(lsn) {
                    self.offset_in_flight = None;
                }
                if lsn > self.offset_acked {
                    self.offset_acked = lsn;
                }
                Ok(true)
            }
            Ack::Failed {
                delivery:
                    Delivery::Record {
                        commit_lsn, index, ..
                    },
                topic,
                error,
            } => {
                tracing::error!(%topic, lsn = %commit_lsn, index, error = %error, "Kafka did not take a record");
                Err(RelayError::Delivery {
                    topic,
                    lsn: commit_lsn,
                    event: format!("record #{index} of the transaction"),
                    error,
                })
            }
            Ack::Failed {
                delivery: Delivery::Offset { lsn },
                topic,
                error,
            } => Err(RelayError::Delivery {
                topic,
                lsn,
                event: "the offset-store write".into(),
                error,
            }),
            Ack::Fatal(e) => Err(RelayError::Sink(e)),
        }
    }

    /// Writes the confirmed position to the offset store if it moved and no
    /// write is pending.
    async fn write_offset_if_due(&mut self) -> Result<(), RelayError> {
        let confirmed = self.checkpoint.confirmed();
        if self.offset_in_flight.is_some() || confirmed <= self.offset_acked {
            return Ok(());
        }
        let mut offset = self.offset_template.clone();
        offset.lsn = confirmed.to_string();
        offset.written_at_ms =
            crate::pg::replication::pg_us_to_unix_ms(crate::pg::replication::pg_now_us());
        let record = offset.to_record(&self.config.kafka.offsets_topic);
        self.sink
            .send(&record, Delivery::Offset { lsn: confirmed })
            .await
            .map_err(|error| RelayError::Delivery {
                topic: record.topic.clone(),
                lsn: confirmed,
                event: "the offset-store write".into(),
                error,
            })?;
        self.offset_in_flight = Some(confirmed);
        Ok(())
    }

    /// Graceful stop: waits (bounded) for Kafka to take what is in flight,
    /// stores the final position and returns what may be reported.
    async fn finish(&mut self, acks: &mut mpsc::UnboundedReceiver<Ack>) -> Lsn {
        let deadline = Instant::now() + self.config.kafka.shutdown_flush_timeout;
        let mut wrote_final = false;
        loop {
            while let Ok(ack) = acks.try_recv() {
                if let Err(e) = self.on_ack(ack) {
                    tracing::warn!(error = %e, "delivery failed during shutdown; the position stays at the last stored offset");
                    return self.offset_acked;
                }
            }
            let idle = self.checkpoint.in_flight_records() == 0 && self.offset_in_flight.is_none();
            if idle && (wrote_final || self.checkpoint.confirmed() <= self.offset_acked) {
                return self.offset_acked;
            }
            if idle && !wrote_final {
                if let Err(e) = self.write_offset_if_due().await {
                    tracing::warn!(error = %e, "could not store the final offset");
                    return self.offset_acked;
                }
                wrote_final = true;
            }
            if Instant::now() > deadline {
                tracing::warn!(
                    in_flight = self.checkpoint.in_flight_records(),
                    "shutdown flush timeout reached; unacknowledged records will be re-sent on restart"
                );
                return self.offset_acked;
            }
            match tokio::time::timeout(Duration::from_millis(100), acks.recv()).await {
                Ok(Some(ack)) => {
                    if let Err(e) = self.on_ack(ack) {
                        tracing::warn!(error = %e, "delivery failed during shutdown");
                        return self.offset_acked;
                    }
                }
                Ok(None) => return self.offset_acked,
                Err(_) => {}
            }
        }
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
