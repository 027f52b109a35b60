//! The consumer loop: Kafka in, jobs out to the workers, completions back,
//! the frontier committed every `commit_interval`.
//!
//! One loop owns all partition state (frontiers, same-key order, the count
//! in progress); workers own a database connection each and report back
//! over a channel — no shared mutable state besides the metrics.
//!
//! A rebalance needs no code here: records in progress of a revoked
//! partition finish (their inbox rows make the new owner skip them), and a
//! partition handed back starts again at its committed offset, below what
//! this loop received: the frontier is started afresh there
//! ([`FrontierError::Rewound`]), the same-key order kept across.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use rdkafka::client::ClientContext;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::config::{FIXED_PROPERTIES, InboxConfig, Loaded};
use super::frontier::{Frontier, FrontierError, KeyOrder};
use super::metrics::{InboxMetrics, PartitionReading};
use super::sql_handler::SqlHandler;
use super::store::{self, Connection, InboxTables, Policy, QuarantineSink, WorkOutcome};
use super::{Event, Handler};

/// Why the consumer stopped.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    #[error("inbox database: {0}")]
    Database(String),
    #[error("Kafka: {0}")]
    Kafka(String),
    #[error("{0}")]
    Fatal(String),
    #[error("{0}")]
    Health(String),
}

type Tp = (String, i32);
type KeyId = (String, i32, Vec<u8>);

#[derive(Debug)]
struct Job {
    event: Event,
    missing_id: Option<String>,
    generation: u64,
}

#[derive(Debug)]
struct Done {
    topic: String,
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
    generation: u64,
    outcome: WorkOutcome,
}

#[derive(Debug, Default)]
struct PartitionState {
    frontier: Frontier<Instant>,
    /// Bumped when the frontier starts afresh; completions of an older
    /// generation do not touch the new frontier.
    generation: u64,
    stopped: bool,
    committed: Option<i64>,
}

/// The runnable form: [`SqlHandler`] from the file, `/metrics` and
/// `/healthz` on `[inbox.health] listen` when set.
pub async fn run(loaded: Loaded, shutdown: CancellationToken) -> Result<(), InboxError> {
    let metrics = Arc::new(InboxMetrics::new(&loaded.inbox.name));
    if let Some(health) = &loaded.inbox.health {
        let (h, r) = (metrics.clone(), metrics.clone());
        let bound = crate::telemetry::serve_routes(
            health.listen,
            "walrelay-inbox-http",
            move || h.health(),
            move || r.render(),
        )
        .map_err(InboxError::Health)?;
        tracing::info!(listen = %bound, "serving /healthz and /metrics");
    }
    let handler = SqlHandler::new(loaded.inbox.handler.sql.clone(), loaded.params.clone());
    run_with(&loaded.inbox, handler, metrics, shutdown).await
}

/// Consumes `config.topics` and applies each new event with `handler`
/// until `shutdown` (then finishes what is running, for up to
/// `shutdown_timeout`, and commits the frontier) or a fatal error.
pub async fn run_with<H: Handler>(
    config: &InboxConfig,
    handler: H,
    metrics: Arc<InboxMetrics>,
    shutdown: CancellationToken,
) -> Result<(), InboxError> {
    let tables = InboxTables::new(
        &config.postgres.inbox_table,
        &config.postgres.quarantine_table,
    );
    if config.postgres.create_tables && !create_tables(config, &tables, &metrics, &shutdown).await?
    {
        return Ok(());
    }
    let consumer = Arc::new(make_consumer(config)?);
    let topics: Vec<&str> = config.topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .map_err(|e| InboxError::Kafka(format!("cannot subscribe to {topics:?}: {e}")))?;
    tracing::info!(group_id = config.group_id(), topics = ?topics, workers = config.workers,
        max_in_flight = config.max_in_flight, "inbox consumer started");

    let policy = Policy {
        max_attempts: config.max_attempts,
        backoff_initial: config.retry_backoff_initial,
        backoff_max: config.retry_backoff_max,
        on_quarantine: config.on_quarantine,
        quarantine_to: match &config.kafka.quarantine_topic {
            None => QuarantineSink::Table,
            Some(topic) => QuarantineSink::Topic {
                producer: make_quarantine_producer(config)?,
                topic: topic.clone(),
            },
        },
    };
    let handler = Arc::new(handler);
    // Workers stop taking new records on `stop_work` (set with `shutdown`
    // or on a fatal error); the loop keeps committing until they are done.
    let stop_work = shutdown.child_token();
    let (job_tx, job_rx) = mpsc::unbounded_channel::<Job>();
    let job_rx = Arc::new(tokio::sync::Mutex::new(job_rx));
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..config.workers {
        let (jobs, done) = (job_rx.clone(), done_tx.clone());
        let (handler, tables, policy) = (handler.clone(), tables.clone(), policy.clone());
        let (metrics, stop) = (metrics.clone(), stop_work.clone());
        let mut conn = Connection::new(config.postgres.url.clone());
        workers.spawn(async move {
            loop {
                let job = { jobs.lock().await.recv().await };
                let Some(job) = job else { break };
                metrics.running.fetch_add(1, Relaxed);
                let outcome = store::process(
                    &mut conn,
                    &tables,
                    &*handler,
                    &job.event,
                    job.missing_id.as_deref(),
                    &policy,
                    &metrics,
                    &stop,
                )
                .await;
                metrics.running.fetch_sub(1, Relaxed);
                let e = job.event;
                let _ = done.send(Done {
                    topic: e.topic,
                    partition: e.partition,
                    offset: e.offset,
                    key: e.key,
                    generation: job.generation,
                    outcome,
                });
            }
        });
    }
    drop(done_tx);

    let mut parts: HashMap<Tp, PartitionState> = HashMap::new();
    let mut keys: KeyOrder<KeyId, Job> = KeyOrder::new();
    let mut in_flight = 0usize;
    let mut fatal: Option<InboxError> = None;
    let mut last_kafka_error: Option<String> = None;
    let mut tick = tokio::time::interval(config.commit_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    // Receiving.
    while !stop_work.is_cancelled() {
        tokio::select! {
            biased;
            _ = stop_work.cancelled() => break,
            Some(done) = done_rx.recv() => {
                in_flight = in_flight.saturating_sub(1);
                if let Err(e) = finish(done, &mut parts, &mut keys, &mut in_flight, &job_tx,
                    &consumer, &metrics) {
                    fatal = Some(e);
                    stop_work.cancel();
                }
            }
            _ = tick.tick() => commit(&consumer, &mut parts, &metrics).await,
            message = consumer.recv(), if in_flight < config.max_in_flight => {
                let m = match message {
                    Ok(m) => {
                        last_kafka_error = None;
                        m
                    }
                    Err(e) => {
                        // One line per distinct error, not one per poll.
                        let text = e.to_string();
                        if last_kafka_error.as_deref() != Some(text.as_str()) {
                            tracing::warn!(error = %text, "Kafka consumer error; librdkafka retries");
                            last_kafka_error = Some(text);
                        }
                        continue;
                    }
                };
                let (event, missing_id) = to_event(&m, &config.id_headers);
                drop(m);
                let tp = (event.topic.clone(), event.partition);
                let st = parts.entry(tp).or_default();
                if st.stopped {
                    // Not received: the frontier stays at the stopped record.
                    continue;
                }
                if let Err(FrontierError::Rewound { offset, last }) =
                    st.frontier.receive(event.offset, Instant::now())
                {
                    tracing::info!(topic = %event.topic, partition = event.partition, offset, last,
                        "partition delivered again from an earlier offset (re-assigned); its \
                         frontier starts there");
                    st.frontier = Frontier::new();
                    st.generation += 1;
                    st.committed = None;
                    let _ = st.frontier.receive(event.offset, Instant::now());
                }
                in_flight += 1;
                metrics.in_progress.store(in_flight as i64, Relaxed);
                let key = key_id(&event.topic, event.partition, &event.key);
                let job = Job { event, missing_id, generation: st.generation };
                if let Some(job) = keys.admit(key, job) {
                    let _ = job_tx.send(job);
                }
            }
        }
    }

    // Stopping: no new records; the workers end what they run (a record
    // waiting for a retry is left for the next run) and the frontier is
    // committed once more.
    stop_work.cancel();
    drop(job_tx);
    let deadline = tokio::time::Instant::now() + config.shutdown_timeout;
    loop {
        tokio::select! {
            done = done_rx.recv() => match done {
                Some(done) => {
                    in_flight = in_flight.saturating_sub(1);
                    let (tx, _rx) = mpsc::unbounded_channel();
                    if let Err(e) = finish(done, &mut parts, &mut keys, &mut in_flight, &tx,
                        &consumer, &metrics) {
                        fatal.get_or_insert(e);
                    }
                }
                None => break,
            },
            _ = tokio::time::sleep_until(deadline) => {
                tracing::warn!(timeout = ?config.shutdown_timeout,
                    "records still in progress at inbox.shutdown_timeout; they are delivered again next time");
                workers.abort_all();
                break;
            }
        }
    }
    commit(&consumer, &mut parts, &metrics).await;
    tracing::info!(
        applied = metrics.applied.load(Relaxed),
        duplicates = metrics.duplicates.load(Relaxed),
        quarantined = metrics.quarantined.load(Relaxed),
        "inbox consumer stopped"
    );
    match fatal {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Creates the tables, waiting (with backoff, `/healthz` saying why) while
/// the database cannot be reached — a consumer started while its database
/// restarts waits for it, as its workers do, instead of exiting. A
/// statement the server refuses is fatal. `Ok(false)`: shut down while
/// waiting.
async fn create_tables(
    config: &InboxConfig,
    tables: &InboxTables,
    metrics: &InboxMetrics,
    shutdown: &CancellationToken,
) -> Result<bool, InboxError> {
    let mut wait = std::time::Duration::from_millis(200);
    let mut last: Option<String> = None;
    loop {
        let problem = match store::connect(&config.postgres.url).await {
            Ok(client) => match client.batch_execute(&tables.create_sql()).await {
                Ok(()) => {
                    metrics.set_trouble(None);
                    return Ok(true);
                }
                Err(e) if !store::is_connection_error(&e) => {
                    return Err(InboxError::Database(format!(
                        "cannot create {} and {} (inbox.postgres.create_tables): {}",
                        tables.inbox,
                        tables.quarantine,
                        e.as_db_error()
                            .map_or(e.to_string(), |d| d.message().to_owned())
                    )));
                }
                Err(e) => format!("inbox database connection lost while creating the tables: {e}"),
            },
            Err(store::ConnectFailure::Refused(e)) => return Err(InboxError::Database(e)),
            Err(store::ConnectFailure::Unreachable(e)) => e,
        };
        // One line per distinct problem, not one per attempt.
        if last.as_deref() != Some(problem.as_str()) {
            tracing::warn!(error = %problem, "inbox database unreachable at start; waiting for it");
            last = Some(problem.clone());
        }
        metrics.set_trouble(Some(problem));
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(false),
            _ = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(std::time::Duration::from_secs(5));
    }
}

/// What orders a record among others: its topic, partition and key (none
/// for a record without a key).
fn key_id(topic: &str, partition: i32, key: &Option<Vec<u8>>) -> Option<KeyId> {
    key.as_ref()
        .map(|k| (topic.to_owned(), partition, k.clone()))
}

/// A completed record: counted, the frontier and the key's order moved on.
#[allow(clippy::too_many_arguments)]
fn finish(
    done: Done,
    parts: &mut HashMap<Tp, PartitionState>,
    keys: &mut KeyOrder<KeyId, Job>,
    in_flight: &mut usize,
    job_tx: &mpsc::UnboundedSender<Job>,
    consumer: &InboxConsumer,
    metrics: &InboxMetrics,
) -> Result<(), InboxError> {
    metrics.in_progress.store(*in_flight as i64, Relaxed);
    let key = key_id(&done.topic, done.partition, &done.key);
    let st = parts
        .entry((done.topic.clone(), done.partition))
        .or_default();
    let complete = |st: &mut PartitionState| {
        if st.generation == done.generation {
            let _ = st.frontier.complete(done.offset);
        }
    };
    match done.outcome {
        WorkOutcome::Applied => {
            metrics.applied.fetch_add(1, Relaxed);
            complete(st);
        }
        WorkOutcome::Duplicate => {
            metrics.duplicates.fetch_add(1, Relaxed);
            complete(st);
        }
        WorkOutcome::Quarantined => complete(st),
        WorkOutcome::Abandoned => {}
        WorkOutcome::Stopped(error) => {
            st.stopped = true;
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&done.topic, done.partition);
            if let Err(e) = consumer.pause(&tpl) {
                tracing::warn!(error = %e, "cannot pause the stopped partition; its records are dropped as they arrive");
            }
            tracing::error!(topic = %done.topic, partition = done.partition, offset = done.offset,
                error = %error, "partition stopped at a quarantined record (on_quarantine = \
                \"stop\"); fix the cause and restart the consumer to retry it");
            if let Ok(mut s) = metrics.stopped.lock() {
                s.insert(
                    (done.topic.clone(), done.partition),
                    format!("offset {} quarantined: {error}", done.offset),
                );
            }
            let dropped = keys.abandon(key.as_ref()).len();
            *in_flight = in_flight.saturating_sub(dropped);
            metrics.in_progress.store(*in_flight as i64, Relaxed);
            return Ok(());
        }
        WorkOutcome::Fatal(error) => return Err(InboxError::Fatal(error)),
    }
    if let Some(next) = keys.finish(key.as_ref()) {
        let _ = job_tx.send(next);
    }
    Ok(())
}

/// Commits every partition's frontier that moved, and updates the
/// frontier gauges.
async fn commit(
    consumer: &Arc<InboxConsumer>,
    parts: &mut HashMap<Tp, PartitionState>,
    metrics: &InboxMetrics,
) {
    let mut tpl = TopicPartitionList::new();
    let mut moved = Vec::new();
    let mut oldest: Option<Instant> = None;
    let mut readings = std::collections::BTreeMap::new();
    for (tp, st) in parts.iter() {
        if let Some((_, since)) = st.frontier.oldest() {
            oldest = Some(oldest.map_or(*since, |o| o.min(*since)));
        }
        let Some(position) = st.frontier.position() else {
            continue;
        };
        readings.insert(
            tp.clone(),
            PartitionReading {
                position: st.committed.unwrap_or(-1),
                lag: st.frontier.lag(),
            },
        );
        if st.committed != Some(position)
            && tpl
                .add_partition_offset(&tp.0, tp.1, Offset::Offset(position))
                .is_ok()
        {
            moved.push((tp.clone(), position));
        }
    }
    metrics.oldest_ms.store(
        oldest.map_or(-1, |o| o.elapsed().as_millis() as i64),
        Relaxed,
    );
    if !moved.is_empty() {
        let c = consumer.clone();
        let result = tokio::task::spawn_blocking(move || c.commit(&tpl, CommitMode::Sync)).await;
        match result {
            Ok(Ok(())) => {
                metrics.offset_commits.fetch_add(1, Relaxed);
                for (tp, position) in moved {
                    if let Some(st) = parts.get_mut(&tp) {
                        st.committed = Some(position);
                    }
                    if let Some(r) = readings.get_mut(&tp) {
                        r.position = position;
                    }
                }
            }
            Ok(Err(e)) => {
                metrics.offset_commit_errors.fetch_add(1, Relaxed);
                tracing::warn!(error = %e, "offset commit failed; the next one commits the frontier again");
            }
            Err(e) => {
                metrics.offset_commit_errors.fetch_add(1, Relaxed);
                tracing::warn!(error = %e, "offset commit task failed");
            }
        }
    }
    readings.retain(|_, r| r.position >= 0);
    if let Ok(mut p) = metrics.partitions.lock() {
        *p = readings;
    }
}

/// Logs each rebalance: one line per assignment or revocation.
#[derive(Debug)]
pub(crate) struct InboxContext;

impl ClientContext for InboxContext {}

impl ConsumerContext for InboxContext {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let list = |tpl: &TopicPartitionList| {
            tpl.elements()
                .iter()
                .map(|e| format!("{}/{}", e.topic(), e.partition()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match rebalance {
            Rebalance::Assign(tpl) => {
                tracing::info!(partitions = %list(tpl), "partitions assigned")
            }
            Rebalance::Revoke(tpl) => {
                tracing::info!(partitions = %list(tpl), "partitions revoked; records in progress of them finish")
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance failed"),
        }
    }
}

type InboxConsumer = StreamConsumer<InboxContext>;

fn make_consumer(config: &InboxConfig) -> Result<InboxConsumer, InboxError> {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &config.kafka.brokers)
        .set("group.id", config.group_id())
        .set("auto.offset.reset", &config.kafka.auto_offset_reset)
        .set("enable.partition.eof", "false");
    for (k, v) in &config.kafka.librdkafka {
        cfg.set(k, v);
    }
    for (k, v) in FIXED_PROPERTIES {
        cfg.set(*k, *v);
    }
    cfg.create_with_context(InboxContext).map_err(|e| {
        InboxError::Kafka(format!(
            "cannot create the consumer (check [inbox.kafka] and [inbox.kafka.librdkafka]): {e}"
        ))
    })
}

/// The producer of `[inbox.kafka] quarantine_topic`: idempotent, acks=all,
/// the same brokers and raw properties (librdkafka ignores the consumer's
/// own, with a warning).
fn make_quarantine_producer(
    config: &InboxConfig,
) -> Result<rdkafka::producer::FutureProducer, InboxError> {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &config.kafka.brokers)
        .set("message.timeout.ms", "30000");
    for (k, v) in &config.kafka.librdkafka {
        cfg.set(k, v);
    }
    cfg.set("enable.idempotence", "true").set("acks", "all");
    cfg.create().map_err(|e| {
        InboxError::Kafka(format!(
            "cannot create the producer of inbox.kafka.quarantine_topic (check [inbox.kafka] and \
             [inbox.kafka.librdkafka]): {e}"
        ))
    })
}

/// The record as an [`Event`], and why it has no usable id (if so).
fn to_event<M: Message>(m: &M, id_headers: &[String]) -> (Event, Option<String>) {
    let headers: Vec<(String, Vec<u8>)> = m
        .headers()
        .map(|hs| {
            hs.iter()
                .map(|h| {
                    (
                        h.key.to_owned(),
                        h.value.map(<[u8]>::to_vec).unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let id = id_headers.iter().find_map(|name| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    });
    let missing = id.is_none().then(|| {
        format!(
            "the record has no event id: none of the headers {} is present and UTF-8 \
             (inbox.id_headers)",
            id_headers.join(", ")
        )
    });
    let event = Event {
        id: id.unwrap_or_default(),
        topic: m.topic().to_owned(),
        partition: m.partition(),
        offset: m.offset(),
        key: m.key().map(<[u8]>::to_vec),
        value: m.payload().map(<[u8]>::to_vec),
        headers,
        timestamp_ms: m.timestamp().to_millis(),
    };
    (event, missing)
}
