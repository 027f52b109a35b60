//! The restart supervisor: [`run`] holds the connector's lease, sets up
//! and runs one session after another, and decides after each failure
//! whether to retry (transient: capped exponential backoff, one log line per
//! change of problem) or stop (definite).
//!
//! Invariants:
//! - **Lease first, and only while held.** Each pass first holds the lease
//!   ([`crate::source::lease`]), waiting as a standby while another instance
//!   holds it; a session is set up and runs only under a held lease, and is
//!   dropped where it stands the moment the lease is lost.
//! - A signal before a session ends is a clean stop, except under
//!   `initial_only`, whose snapshot is then not done (`stopped_by_signal`).
//! - The slot's gauges and the Kafka outage clock run for the life of the
//!   process, also while no session runs (tasks aborted when `run` returns).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::pg::catalog::CatalogError;
use crate::pg::params::connect_params;
use crate::source::lease::{Instance, Lease};
use crate::task::AbortOnDrop;
use crate::telemetry::outage::{Outage, OutageLog, Said};
use crate::telemetry::{self, Metrics, Role};

use super::error::{RelayError, stopped_by_signal};
use super::session::Session;
use super::slot_watch;

/// How long librdkafka must report no broker failure before a delivery
/// ends a Kafka outage in the log: longer than its longest reconnect backoff
/// (`reconnect.backoff.max.ms`, 10 s), so a broker that stays down while the
/// others take records is one outage.
const KAFKA_OUTAGE_SETTLE: Duration = Duration::from_secs(15);

/// Knobs from the command line.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Start even if the slot is ahead of the stored offset (after the
    /// operator has reconciled the gap). Applies to the first session only.
    pub accept_slot_position: bool,
}

/// Takes the lease of this connector's slot (see [`crate::source::lease`]),
/// saying once, as a standby, who holds it.
async fn take_lease(
    config: &Config,
    instance: &Instance,
    stale: Option<i32>,
    metrics: &Metrics,
) -> Result<Lease, CatalogError> {
    let slot = &config.postgres.slot;
    Lease::acquire(&connect_params(config), slot, instance, stale, |holder| {
        let holder = holder.map(ToString::to_string).unwrap_or_default();
        metrics.set_role(Role::Standby, &holder);
        tracing::info!(
            slot = %slot, active = %holder,
            "standby: another instance of this connector holds the lease; taking over when it \
             stops or dies"
        );
    })
    .await
}

/// Runs the connector until `shutdown` is cancelled (Ok) or a definite error.
pub async fn run(
    config: Config,
    options: RunOptions,
    shutdown: CancellationToken,
) -> Result<(), RelayError> {
    let config = Arc::new(config);
    let metrics = Arc::new(Metrics::new(&config.connector.name));
    if let Some(health) = &config.health {
        let addr =
            telemetry::serve(health.listen, metrics.clone()).map_err(|what| RelayError::Setup {
                what,
                fix: "choose a free address for [health] listen, or remove the [health] section"
                    .into(),
            })?;
        tracing::info!(%addr, "serving /healthz and /metrics");
    }
    // The slot's gauges are read for the whole life of the connector, also
    // while no session runs (that is when they matter most).
    let _slot_watch = AbortOnDrop::from(tokio::spawn(slot_watch::watch(
        crate::pg::params::capture_params(&config),
        config.postgres.slot.clone(),
        metrics.clone(),
        config.postgres.reconnect_backoff_initial,
        config.postgres.reconnect_backoff_max,
    )));
    // Outbox retention (`[outbox.retention] interval`): beside the
    // sessions, never in their way.
    let _retention = AbortOnDrop::from(tokio::spawn(super::retention::every(
        config.clone(),
        metrics.clone(),
        shutdown.clone(),
    )));
    // One schema registry client for the process: its id cache outlives
    // the sessions.
    let registry = match &config.kafka.schema_registry {
        Some(r) => Some(Arc::new(
            crate::sink::registry::Registry::new(r, metrics.clone()).map_err(|what| {
                RelayError::Setup {
                    what: format!("kafka.schema_registry.url: {what}"),
                    fix: "use an http:// or https:// URL such as \"http://registry:8081\", and a \
                          readable kafka.schema_registry.ssl_ca"
                        .into(),
                }
            })?,
        )),
        None => None,
    };
    let kafka_outage = Arc::new(OutageLog::new("Kafka", KAFKA_OUTAGE_SETTLE));
    let _outage_clock = AbortOnDrop::from(tokio::spawn({
        let outage = kafka_outage.clone();
        async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            loop {
                every.tick().await;
                outage.tick();
            }
        }
    }));
    let mut backoff = config.postgres.reconnect_backoff_initial;
    let mut last_problem: Option<String> = None;
    // Time without a streaming session: said once, reminded, ended.
    let mut without_session = Outage::new(Duration::ZERO);
    let mut accept = options.accept_slot_position;
    let instance = Instance::this();
    tracing::info!(instance = %instance, slot = %config.postgres.slot, "walrelay instance starting");
    let mut lease: Option<Lease> = None;
    // The server process of a lease this instance lost (see Lease::acquire).
    let mut stale_lease: Option<i32> = None;
    loop {
        let result: Result<(), RelayError> = 'attempt: {
            // 0. The lease, before anything of the connector is read or
            //    changed (crate::source::lease): wait as a standby while
            //    another instance holds it.
            let (lost, fence) = match &lease {
                Some(l) if !l.is_lost() => (l.lost().clone(), l.fence()),
                _ => {
                    if let Some(old) = lease.take() {
                        stale_lease = Some(old.backend_pid());
                    }
                    metrics.set_role(Role::Unknown, "");
                    let acquired = tokio::select! {
                        r = take_lease(&config, &instance, stale_lease, &metrics) => r,
                        _ = shutdown.cancelled() => return stopped_by_signal(&config),
                    };
                    match acquired {
                        Ok(l) => {
                            stale_lease = None;
                            metrics.set_role(Role::Active, "");
                            tracing::info!(
                                instance = %instance, slot = %config.postgres.slot,
                                "holding the lease: this instance is the active one"
                            );
                            let taken = (l.lost().clone(), l.fence());
                            lease = Some(l);
                            taken
                        }
                        Err(e) => break 'attempt Err(e.into()),
                    }
                }
            };
            let session = Session {
                config: config.clone(),
                accept_slot_position: accept,
                metrics: metrics.clone(),
                kafka_outage: kafka_outage.clone(),
                fence,
                registry: registry.clone(),
            };
            // Setup (connecting, checks) is simply abandoned on shutdown; once
            // streaming, the session stops gracefully by itself. Losing the
            // lease drops the session wherever it is: nothing further is
            // produced or confirmed (dropping the producer purges its queue).
            let started = tokio::select! {
                r = session.setup() => r,
                _ = shutdown.cancelled() => return stopped_by_signal(&config),
                _ = lost.cancelled() => Err(RelayError::LeaseLost),
            };
            match started {
                Ok(None) => return Ok(()),
                Ok(Some(started)) => {
                    // It got as far as streaming: the next failure starts a new story.
                    backoff = config.postgres.reconnect_backoff_initial;
                    last_problem = None;
                    accept = false;
                    if let Said::Back { after } = without_session.succeeded(Instant::now()) {
                        tracing::info!(
                            down_secs = after.as_secs(),
                            "streaming again after {} s without a session",
                            after.as_secs()
                        );
                    }
                    metrics.sessions_started.fetch_add(1, Ordering::Relaxed);
                    metrics.streaming.store(true, Ordering::Relaxed);
                    metrics.set_error("");
                    let r = tokio::select! {
                        r = started.run(&shutdown) => r,
                        _ = lost.cancelled() => Err(RelayError::LeaseLost),
                    };
                    metrics.streaming.store(false, Ordering::Relaxed);
                    if r.is_err() {
                        metrics
                            .streaming_session_errors
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    r
                }
                Err(e) => Err(e),
            }
        };
        if let Err(e) = &result {
            metrics.session_error(e.class().as_str(), e.cause());
            metrics.set_error(&e.to_string());
        }
        match result {
            Ok(()) => return Ok(()),
            Err(e) if e.is_transient() => {
                let problem = e.to_string();
                let said = without_session.failed(Instant::now());
                if let Said::StillDown { for_ } = said {
                    tracing::warn!(
                        error = %problem,
                        down_secs = for_.as_secs(),
                        retry_in = ?backoff,
                        "still waiting for {} after {} s without a session",
                        e.waiting_for(),
                        for_.as_secs()
                    );
                    last_problem = Some(problem);
                } else if last_problem.as_deref() != Some(problem.as_str()) {
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
                    _ = shutdown.cancelled() => return stopped_by_signal(&config),
                }
                backoff = (backoff * 2).min(config.postgres.reconnect_backoff_max);
            }
            Err(e) => return Err(e),
        }
    }
}
