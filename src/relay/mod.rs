//! The relay: one replication session from slot to Kafka, and the loop that
//! restarts it.
//!
//! Wiring only. Data moves one way: [`Source`](crate::source::Source) (replication stream, relation
//! cache, transactions) → [`Router`] → [`KafkaSink`]. Acknowledgements move
//! back: delivery reports return each record's [`Token`] on a channel and
//! advance the [`Checkpoint`]; the
//! checkpoint's confirmed position is written to the offset store, and only an
//! *acknowledged* offset write is reported to PostgreSQL as the slot's flush
//! position.
//!
//! Invariants kept here (the pieces keep their own):
//! - **Lease first, and only while held.** Each pass of the outer loop
//!   first holds the connector's lease ([`crate::source::lease`]), waiting
//!   as a standby while another instance holds it; a session is set up and
//!   runs only under a held lease, and the moment it is lost the session is
//!   dropped where it stands (no further record produced — dropping the
//!   producer purges its queue — nothing further confirmed).
//! - **Confirm only what Kafka holds.** The status update's flush LSN is
//!   always an offset-store write that Kafka acknowledged, and that write
//!   carried `checkpoint.confirmed()`, which covers only fully acked
//!   transactions. So the slot is never ahead of Kafka, nor of the offset store.
//! - **A heartbeat is a transaction.** A walrelay heartbeat message
//!   (`[heartbeat]`, see `heartbeat.rs`) enters the checkpoint as a
//!   transaction of its own ending at the message, with its heartbeat record
//!   when published: the frontier reaches it only over an acknowledged prefix.
//!   The writer runs only while a session streams and never ends one.
//! - **Bounded memory.** While the checkpoint is full, the socket is not read
//!   (TCP backpressure reaches the walsender), but status updates keep going
//!   so the walsender does not time us out.
//! - **Never skip silently.** Decode, route, delivery and frontier errors end
//!   the session before the position passes the offending change.
//! - **Errors say what to do.** Each error is transient (the outer loop
//!   retries with capped exponential backoff, logging once per state change)
//!   or definite (the connector stops with the explanation).

mod dead_letter;
mod heartbeat;
pub(crate) mod incremental;
mod messages;
mod offset_writer;
mod pace;
mod session;
mod slot_watch;
mod snapshot;
mod stop;
mod streaming;
mod table_events;
pub(crate) mod topic_metric;
mod transaction_clock;
mod watchdog;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::Lsn;
use crate::checkpoint::{CheckpointError, TxnId};
use crate::config::{Config, ConfigError, KafkaConfig, librdkafka_key_path};
use crate::offsets;
use crate::pg::catalog::CatalogError;
use crate::pg::tls::TlsSettings;
use crate::pg::wire::{ConnectParams, WireError};
use crate::pgoutput::DecodeError;
use crate::router::RouteError;
use crate::sink::kafka::{KafkaSink, SinkError, SinkErrorKind};
use crate::source::SourceError;
use crate::source::lease::{Instance, Lease};
use crate::telemetry::outage::{Outage, OutageLog, Said};
use crate::telemetry::{self, Metrics, Role};

pub use incremental::{SIGNAL_PREFIX, cancel_snapshot, request_snapshot, signal_json};
use session::Session;

/// What a produced record stands for: handed to the sink with the record,
/// and back with its delivery report (the sink never looks inside).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// A record of transaction `txn`, committed at `commit_lsn`; `index` is
    /// the change's position in its transaction.
    Record {
        txn: TxnId,
        bytes: usize,
        commit_lsn: Lsn,
        index: u64,
        /// The event's id, to name it in errors.
        event_id: Option<EventId>,
        /// For a snapshot record: its table's index in the snapshot.
        snapshot_table: Option<u32>,
        /// The transaction's commit time, ms since 1970 (0: none, e.g. a
        /// snapshot record), for `walrelay_commit_to_ack_seconds`.
        commit_ms: i64,
    },
    /// An offset-store write for position `lsn`.
    Offset { lsn: Lsn },
}

/// How a record names its event in errors (never by its payload); the
/// router sets it on each record it builds.
pub use crate::router::EventId;

/// The producer, carrying [`Token`]s.
pub(crate) type Sink = KafkaSink<Token>;
/// A delivery report for one [`Token`].
pub(crate) type Ack = crate::sink::kafka::Ack<Token>;

impl From<SourceError> for RelayError {
    fn from(e: SourceError) -> RelayError {
        match e {
            SourceError::Wire(e) => RelayError::Wire(e),
            SourceError::Decode { lsn, source } => RelayError::Decode { lsn, source },
            SourceError::Stream { lsn, what } => RelayError::Stream { lsn, what },
            SourceError::Ended => RelayError::Ended("the replication stream"),
            SourceError::Snapshot(e) => RelayError::Snapshot(e),
            SourceError::Catalog(e) => RelayError::Catalog(e),
            e @ SourceError::SlotVanished { .. } => RelayError::Setup {
                what: e.to_string(),
                fix: "make sure nothing else drops walrelay's slot".into(),
            },
            SourceError::SlotLost { slot } => RelayError::Refused {
                reason: format!("replication slot {slot:?} became lost"),
                hint: "see docs/operations.md, \"Lost slot\"".into(),
            },
            e @ SourceError::SlotMoved { .. } => RelayError::Refused {
                reason: format!(
                    "{e}: another actor advanced, or dropped and recreated, the slot (an operator, \
                     or a process that does not take walrelay's lease); streaming from it would \
                     skip what was committed in between"
                ),
                hint: "make sure only walrelay consumes this slot (docs/operations.md, \"Running \
                       several instances\"), then restart: the stored offset and the slot's \
                       position decide the next start"
                    .into(),
            },
            SourceError::Misuse(what) => RelayError::Stream {
                lsn: Lsn::ZERO,
                what: what.into(),
            },
        }
    }
}

/// How long Kafka may leave records unacknowledged before we warn.
const STALL_WARNING: Duration = telemetry::STALL;

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
    /// A streamed row that cannot be routed, named by its id and the end of
    /// its transaction, which is what skips it.
    #[error(
        "cannot route outbox row of {} (column {}{}, commit LSN {}, transaction ends at \
         {end_lsn}): {}; {}. To skip the rest of this transaction deliberately (its rows before \
         this one are published already): SELECT pg_replication_slot_advance('{slot}', \
         '{end_lsn}'); then start with --accept-slot-position and re-publish its other rows \
         with walrelay republish (docs/operations.md, \"A row cannot be routed\")",
        error.table,
        error.column,
        row_id.as_deref().map(|id| format!(", row id {id}")).unwrap_or_default(),
        error.lsn,
        error.reason,
        error.fix
    )]
    Unroutable {
        error: Box<RouteError>,
        row_id: Option<String>,
        end_lsn: Lsn,
        slot: String,
    },
    #[error(transparent)]
    TableEvent(#[from] crate::router::table::TableEventError),
    #[error("Kafka rejected {event} for topic {topic:?} (transaction committed at {lsn}): {error}")]
    Delivery {
        topic: String,
        lsn: Lsn,
        /// Which event: the outbox row id when known.
        event: String,
        error: SinkError,
        /// The producer refused it when handed it (a client-side check, e.g.
        /// its size): nothing of it, and nothing after it, is queued, so the
        /// records queued before it may still be delivered.
        at_send: bool,
    },
    #[error("Kafka: {0}")]
    Sink(SinkError),
    /// `exactly_once`: one PostgreSQL transaction (or the initial snapshot)
    /// kept its Kafka transaction open past `kafka.transaction_timeout`
    /// (see `transaction_clock`): a retry would fail the same way.
    #[error("{0}")]
    TransactionOverrun(Box<transaction_clock::Overrun>),
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
    #[error("snapshot: {0}; the next start takes the snapshot again from the beginning")]
    Snapshot(#[from] crate::pg::snapshot::SnapshotError),
    /// The lease connection ended or stopped answering: this instance may
    /// no longer be the active one. The session was dropped at once.
    #[error(
        "lost the lease (its PostgreSQL connection ended or stopped answering): stopped \
         publishing and confirming at once; taking it again, or waiting as a standby"
    )]
    LeaseLost,
}

impl From<crate::startup::CheckError> for RelayError {
    fn from(e: crate::startup::CheckError) -> RelayError {
        use crate::startup::CheckError;
        match e {
            CheckError::Setup { what, fix } => RelayError::Setup { what, fix },
            CheckError::Refused { reason, hint } => RelayError::Refused { reason, hint },
            CheckError::Catalog(e) => RelayError::Catalog(e),
        }
    }
}

/// Explains a walsender error that the slot's history causes: on PostgreSQL
/// 14–17 a slot created before its publication fails every start with
/// `publication "…" does not exist` (the walsender reads the publication as
/// of each change). Other errors pass through unchanged.
pub(crate) fn explain_stream_error(e: RelayError, publication: &str, slot: &str) -> RelayError {
    let RelayError::Wire(WireError::Server { error, .. }) = &e else {
        return e;
    };
    // The server quotes the name as given, without escaping.
    let quoted = format!("publication \"{publication}\" does not exist");
    if !error.message.contains(&quoted) {
        return e;
    }
    RelayError::Setup {
        what: format!(
            "the walsender stopped with '{}' although the publication exists: the replication slot was created before the publication, and PostgreSQL 14–17 read the publication as of each change, so every start fails at the first change committed before the publication existed",
            error.message
        ),
        fix: format!(
            "SELECT pg_drop_replication_slot('{slot}'); then start walrelay once with \
             --accept-slot-position (it creates the slot after the publication and names the \
             range it never streamed) and reconcile that range with walrelay republish (see \
             docs/operations.md, \"Slot created before the publication\")"
        ),
    }
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
            RelayError::Offsets(e) => e.is_transient(),
            RelayError::Ended(_) | RelayError::LeaseLost => true,
            RelayError::Snapshot(e) => e.is_transient(),
            RelayError::Decode { .. }
            | RelayError::Stream { .. }
            | RelayError::Route(_)
            | RelayError::Unroutable { .. }
            | RelayError::TableEvent(_)
            | RelayError::Checkpoint(_)
            | RelayError::Refused { .. }
            | RelayError::Setup { .. }
            | RelayError::TransactionOverrun(_) => false,
        }
    }

    /// The table, LSN and event the error is about, where it names them:
    /// fields for the log line (JSON logs carry them as keys).
    pub fn about(&self) -> ErrorAbout<'_> {
        match self {
            RelayError::Route(e) => ErrorAbout::route(e),
            RelayError::Unroutable {
                error,
                row_id,
                end_lsn,
                ..
            } => ErrorAbout {
                end_lsn: Some(*end_lsn),
                event: row_id.as_deref(),
                ..ErrorAbout::route(error)
            },
            RelayError::TableEvent(e) => ErrorAbout {
                table: Some(&e.table),
                column: Some(&e.column),
                lsn: Some(e.lsn),
                ..ErrorAbout::default()
            },
            RelayError::Delivery {
                topic, lsn, event, ..
            } => ErrorAbout {
                lsn: Some(*lsn),
                event: Some(event),
                topic: Some(topic),
                ..ErrorAbout::default()
            },
            RelayError::Decode { lsn, .. } | RelayError::Stream { lsn, .. } => ErrorAbout {
                lsn: Some(*lsn),
                ..ErrorAbout::default()
            },
            RelayError::TransactionOverrun(o) => match o.unit {
                transaction_clock::Unit::Pg { commit_lsn, .. } => ErrorAbout {
                    lsn: Some(commit_lsn),
                    ..ErrorAbout::default()
                },
                transaction_clock::Unit::Snapshot => ErrorAbout::default(),
            },
            _ => ErrorAbout::default(),
        }
    }

    /// `transient` (retried), `resync` (the slot needs an operator: lost,
    /// dropped, ahead of the stored offset) or `definite` (stopped).
    pub fn class(&self) -> &'static str {
        match self {
            _ if self.is_transient() => "transient",
            RelayError::Refused { .. } => "resync",
            _ => "definite",
        }
    }

    /// What failed, for `walrelay_session_errors_by_cause`.
    pub fn cause(&self) -> &'static str {
        match self {
            RelayError::Wire(_) | RelayError::Catalog(_) => "postgres",
            RelayError::Decode { .. } => "decode",
            RelayError::Stream { .. } | RelayError::Ended(_) => "stream",
            RelayError::Route(_) | RelayError::Unroutable { .. } => "route",
            RelayError::TableEvent(_) => "table_event",
            RelayError::Delivery { .. } => "delivery",
            RelayError::Sink(_) => "kafka",
            RelayError::TransactionOverrun(_) => "transaction_timeout",
            RelayError::Offsets(_) => "offset_store",
            RelayError::Checkpoint(_) => "checkpoint",
            RelayError::Refused { .. } => "slot",
            RelayError::Setup { .. } => "setup",
            RelayError::Snapshot(_) => "snapshot",
            RelayError::LeaseLost => "lease",
        }
    }

    /// What we are waiting for, for the retry log line.
    fn waiting_for(&self) -> &'static str {
        match self {
            RelayError::Wire(_) | RelayError::Catalog(_) | RelayError::Snapshot(_) => "PostgreSQL",
            RelayError::LeaseLost => "the lease",
            RelayError::Delivery { .. } | RelayError::Sink(_) | RelayError::Offsets(_) => "Kafka",
            _ => "the session to restart",
        }
    }
}

/// What a [`RelayError`] is about, as log fields; `None` where it does not
/// say. Never a payload or a secret.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ErrorAbout<'a> {
    pub table: Option<&'a str>,
    pub column: Option<&'a str>,
    /// The transaction's commit LSN.
    pub lsn: Option<Lsn>,
    /// Where the transaction ends, when known (what skips it).
    pub end_lsn: Option<Lsn>,
    /// The event (outbox row id or change event id), as the error names it.
    pub event: Option<&'a str>,
    pub topic: Option<&'a str>,
}

impl<'a> ErrorAbout<'a> {
    fn route(e: &'a RouteError) -> ErrorAbout<'a> {
        ErrorAbout {
            table: Some(&e.table),
            column: Some(&e.column),
            lsn: Some(e.lsn),
            ..ErrorAbout::default()
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
        tls: TlsSettings {
            mode: pg.sslmode,
            root_cert: pg.sslrootcert.clone(),
            client_cert: pg.sslcert.clone(),
            client_key: pg.sslkey.clone(),
            key_password: pg.sslpassword.clone(),
        },
    }
}

/// Builds the PostgreSQL TLS set-up once without connecting, so that `check`
/// and `run` refuse an unusable client certificate at start (exit code 2):
/// an unreadable `postgres.sslcert`, a `postgres.sslkey` that does not belong
/// to it, an encrypted key without (or with a wrong) `postgres.sslpassword`.
/// The error names the key to fix, never the password.
pub fn check_tls_config(config: &Config) -> Result<(), ConfigError> {
    let params = connect_params(config);
    if params.is_unix() {
        return Ok(()); // no TLS on Unix sockets, as in libpq
    }
    crate::pg::tls::connector(&params.tls)
        .map(drop)
        .map_err(|e| config.error_at(e.key.unwrap_or("postgres.sslmode"), e.message))
}

/// The largest value librdkafka accepts for its queue sizes (`i32::MAX`).
const LIBRDKAFKA_QUEUE_MAX: u64 = 2_147_483_647;

/// Checks the complete producer configuration ([`producer_properties`]) as
/// librdkafka will read it, without connecting anywhere, so that `check` and
/// `run` refuse a bad property at start, before PostgreSQL or Kafka are
/// needed. The error names the configuration key behind the property
/// (a `[kafka.librdkafka]` entry, or the `[kafka]` key it is derived from),
/// never a value.
pub fn check_producer_config(config: &Config) -> Result<(), ConfigError> {
    let properties = producer_properties(config);
    crate::sink::kafka::check_producer_properties(&properties).map_err(|e| {
        let Some(property) = e.property.as_deref() else {
            return config.error_at("kafka.librdkafka", e.message);
        };
        if config.kafka.librdkafka.contains_key(property) {
            return config.error_at(&librdkafka_key_path(property), e.message);
        }
        if let Some(typed) = KafkaConfig::typed_key_of(property) {
            let message = format!("{} ({typed} is librdkafka's {property})", e.message);
            return config.error_at(typed, message);
        }
        let key = match property {
            "bootstrap.servers" => "kafka.brokers",
            "compression.type" => "kafka.compression",
            "linger.ms" => "kafka.linger",
            "queue.buffering.max.messages" => "kafka.max_in_flight_records",
            "queue.buffering.max.kbytes" => "kafka.max_in_flight_bytes",
            "client.id" => "connector.name",
            _ => "kafka.librdkafka",
        };
        config.error_at(key, e.message)
    })
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
        // No local delivery timeout (0 = infinite): a record waits for the
        // broker as long as it takes, with our in-flight caps as the bound.
        // A finite timeout fails the records of a long outage while later
        // ones may still be written, breaking per-aggregate order when the
        // failed ones are re-sent; the stall warning and /healthz tell the
        // operator instead.
        ("message.timeout.ms".to_owned(), "0".to_owned()),
        (
            "queue.buffering.max.messages".to_owned(),
            u64::try_from(k.max_in_flight_records)
                .unwrap_or(u64::MAX)
                .saturating_add(10_000)
                .min(LIBRDKAFKA_QUEUE_MAX)
                .to_string(),
        ),
        (
            "queue.buffering.max.kbytes".to_owned(),
            (k.max_in_flight_bytes
                .saturating_add(config.postgres.max_message_size)
                / 1024)
                .saturating_add(1024)
                .min(LIBRDKAFKA_QUEUE_MAX)
                .to_string(),
        ),
    ];
    if k.delivery == crate::config::Delivery::ExactlyOnce {
        // One id for every instance of the connector: the active one's
        // `init_transactions` fences the producer of the one before.
        props.push(("transactional.id".to_owned(), transactional_id(config)));
        let timeout = k.transaction_timeout.as_millis().to_string();
        props.push(("transaction.timeout.ms".to_owned(), timeout.clone()));
        // A transactional producer's records may not outlive its
        // transaction (librdkafka refuses 0 = infinite here); a record that
        // times out fails its whole transaction, which is aborted and sent
        // again: nothing of it is ever visible, so no order breaks.
        if let Some(p) = props.iter_mut().find(|(k, _)| k == "message.timeout.ms") {
            p.1 = timeout;
        }
        // Right after a commit the coordinator is still writing the
        // transaction's markers, and the next transaction's first send is
        // answered CONCURRENT_TRANSACTIONS, retried after retry.backoff.ms:
        // librdkafka's 100 ms put a floor under every transaction. 20 ms,
        // as the Java producer uses for this case (KAFKA-5477); still
        // exponential up to retry.backoff.max.ms, and the raw map may
        // change it.
        props.push(("retry.backoff.ms".to_owned(), "20".to_owned()));
    }
    // The config's list last, so its raw map can still tune these.
    props.extend(k.producer_properties());
    props
}

/// `exactly_once`: the connector's Kafka transactional id,
/// `walrelay-<connector.name>` (ACLs: `TransactionalId` with that name or
/// prefix; docs/security.md).
pub fn transactional_id(config: &Config) -> String {
    format!("walrelay-{}", config.connector.name)
}

/// Aborts a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
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
    let _slot_watch = AbortOnDrop(tokio::spawn(slot_watch::watch(
        connect_params(&config),
        config.postgres.slot.clone(),
        metrics.clone(),
        config.postgres.reconnect_backoff_initial,
        config.postgres.reconnect_backoff_max,
    )));
    let kafka_outage = Arc::new(OutageLog::new("Kafka", KAFKA_OUTAGE_SETTLE));
    let _outage_clock = AbortOnDrop(tokio::spawn({
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
            metrics.session_error(e.class(), e.cause());
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

/// What stopping by a signal before a session ended means: done, except
/// for `initial_only`, whose job (the snapshot) is not done — a supervisor
/// or script must not take that exit for success.
fn stopped_by_signal(config: &Config) -> Result<(), RelayError> {
    if config.snapshot.mode == Some(crate::config::SnapshotMode::InitialOnly) {
        return Err(RelayError::Setup {
            what: "initial_only: stopped before the snapshot completed (by a signal); not every \
                   row is in Kafka"
                .into(),
            fix: "run walrelay again: the snapshot is taken again from the start".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::wire::ServerError;

    fn server_error(message: &str) -> RelayError {
        RelayError::Wire(WireError::Server {
            context: "streaming".into(),
            error: Box::new(ServerError {
                severity: "ERROR".into(),
                code: "42704".into(),
                message: message.into(),
                detail: None,
                hint: None,
            }),
        })
    }

    #[test]
    fn a_missing_publication_during_streaming_is_explained() {
        let e = explain_stream_error(
            server_error("publication \"walrelay\" does not exist"),
            "walrelay",
            "orders",
        );
        assert!(!e.is_transient());
        let text = e.to_string();
        assert!(
            text.contains("created before the publication")
                && text.contains("SELECT pg_drop_replication_slot('orders');")
                && text.contains("docs/operations.md"),
            "{text}"
        );
    }

    #[test]
    fn other_errors_pass_through() {
        let e = explain_stream_error(
            server_error("publication \"other\" does not exist"),
            "w",
            "s",
        );
        assert!(matches!(e, RelayError::Wire(_)), "{e}");
        let e = explain_stream_error(server_error("out of memory"), "w", "s");
        assert!(matches!(e, RelayError::Wire(_)), "{e}");
    }

    /// A record Kafka only inferred was written (see `sink::kafka`) is not
    /// confirmed: the session restarts and re-sends it, the connector runs on.
    #[test]
    fn an_unverified_delivery_restarts_the_session() {
        let e = RelayError::Delivery {
            topic: "t".into(),
            lsn: Lsn(1),
            event: "record #0 of the transaction".into(),
            error: SinkError::unverified(0),
            at_send: false,
        };
        assert!(e.is_transient(), "{e}");
        assert_eq!(e.waiting_for(), "Kafka");
    }

    /// A record that cannot be delivered is named by its outbox row id or
    /// its table change event id, never by its payload.
    #[test]
    fn undeliverable_records_are_named_by_their_ids() {
        let record = |headers: &[(&str, &str)]| {
            crate::router::Record::new(
                "t".into(),
                None,
                Some(bytes::Bytes::from_static(b"{\"secret\":1}")),
                headers
                    .iter()
                    .map(|(k, v)| (std::sync::Arc::from(*k), bytes::Bytes::from(v.to_string())))
                    .collect(),
                None,
            )
        };
        let outbox = record(&[("id", "7b0c"), ("walrelay.lsn", "0/1")]);
        assert_eq!(streaming::describe_record(&outbox), "outbox row id=7b0c");
        let change = record(&[
            ("walrelay.lsn", "0/16B3748"),
            (crate::router::table::EVENT_ID_HEADER, "0/16B3748:3"),
        ]);
        assert_eq!(
            streaming::describe_record(&change),
            "table change event_id=0/16B3748:3"
        );
        assert!(!streaming::describe_record(&record(&[])).contains("secret"));
    }

    const SECRET: &str = "s3cret-Kq8!";

    fn config(extra: &str) -> Result<Config, ConfigError> {
        let text = format!(
            "[connector]\nname = \"c\"\n[postgres]\ndatabase = \"d\"\n[[outbox]]\n\
             table = \"outbox\"\n[kafka]\nbrokers = \"k:9092\"\n{extra}\n"
        );
        Config::from_str_with_env(&text, "c.toml", &|_| Err(std::env::VarError::NotPresent))
    }

    fn refused(extra: &str) -> String {
        let config = config(extra).unwrap();
        let error = check_producer_config(&config).unwrap_err().to_string();
        assert!(!error.contains(SECRET), "{error}");
        error
    }

    #[test]
    fn queue_sizes_saturate_instead_of_wrapping() {
        let mut config = config("").unwrap();
        config.kafka.max_in_flight_records = usize::MAX;
        config.kafka.max_in_flight_bytes = u64::MAX;
        config.postgres.max_message_size = u64::MAX;
        let props = producer_properties(&config);
        let get = |key: &str| props.iter().find(|(k, _)| k == key).unwrap().1.clone();
        assert_eq!(get("queue.buffering.max.messages"), "2147483647");
        assert_eq!(get("queue.buffering.max.kbytes"), "2147483647");
    }

    #[test]
    fn the_default_producer_configuration_passes_librdkafka() {
        check_producer_config(&config("").unwrap()).unwrap();
        // With message.timeout.ms = 0 (no timeout) librdkafka does not
        // bound linger.ms by it.
        check_producer_config(
            &config("linger = \"60s\"\n[kafka.librdkafka]\n\"message.timeout.ms\" = 0").unwrap(),
        )
        .unwrap();
    }

    /// librdkafka's verdict on the producer settings comes at load, naming
    /// the configuration key and its line, never the value.
    #[test]
    fn a_property_librdkafka_refuses_is_named_with_its_line_not_its_value() {
        let error = refused(&format!(
            "[kafka.librdkafka]\n\"sasl.pasword\" = \"{SECRET}\""
        ));
        assert!(
            error.starts_with("c.toml:10:18: kafka.librdkafka.\"sasl.pasword\": librdkafka has no property named \"sasl.pasword\""),
            "{error}"
        );
        let error = refused(&format!(
            "[kafka.librdkafka]\n\"security.protocol\" = \"{SECRET}\""
        ));
        assert!(
            error.contains("kafka.librdkafka.\"security.protocol\": librdkafka refuses the value of property \"security.protocol\""),
            "{error}"
        );
        let error = refused("[kafka.librdkafka]\n\"batch.num.messages\" = 0");
        assert!(
            error.contains("kafka.librdkafka.\"batch.num.messages\"")
                && error.contains("must be in the range 1..1000000"),
            "{error}"
        );
        // A TLS file librdkafka cannot load: under the typed key that names
        // it, not [kafka.librdkafka], which the user did not write.
        let not_pem = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        let key_file =
            std::env::temp_dir().join(format!("walrelay-junk-{}.key", std::process::id()));
        std::fs::write(&key_file, "not a key").unwrap();
        std::fs::set_permissions(
            &key_file,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let with_key = format!("\nssl_key = \"{}\"", key_file.display());
        for (key, property, more) in [
            ("ssl_ca", "ssl.ca.location", ""),
            (
                "ssl_certificate",
                "ssl.certificate.location",
                with_key.as_str(),
            ),
        ] {
            let error = refused(&format!(
                "security_protocol = \"ssl\"\n{key} = \"{not_pem}\"{more}"
            ));
            let at = key.len() + 4;
            assert!(
                error.starts_with(&format!("c.toml:10:{at}: kafka.{key}: librdkafka refuses"))
                    && error.contains(&format!("{property} failed"))
                    && error.contains(&format!("(kafka.{key} is librdkafka's {property})")),
                "{error}"
            );
        }
        let error = refused("linger = \"2s\"\n[kafka.librdkafka]\n\"message.timeout.ms\" = 1000");
        assert!(
            error.starts_with("c.toml:11:24: kafka.librdkafka.\"message.timeout.ms\": librdkafka refuses the producer configuration: ")
                && error.contains("`message.timeout.ms` must be greater than `linger.ms`"),
            "{error}"
        );
    }
}
