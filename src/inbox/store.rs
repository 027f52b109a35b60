//! The consuming service's database: the inbox and quarantine tables, one
//! transaction per record, retries and quarantine.
//!
//! Invariants:
//! - The inbox row and the handler's writes are in one transaction; the
//!   handler runs only when the inbox insert added a row.
//! - A lost connection (the server restarted, the network broke) is not a
//!   handler failure: the worker reconnects with backoff and tries the
//!   record again without counting an attempt. Whether the lost
//!   transaction committed does not matter: the inbox row says so.
//! - A handler that panics has failed an attempt, like one that returns an
//!   error: the panic is caught around the call, the transaction rolled
//!   back, the connection made anew; the worker lives on.
//! - A quarantined record's row holds the record (key, value, headers) and
//!   the last error, so it can be applied by hand later.

use std::time::Duration;

use futures_util::FutureExt;
use tokio_postgres::Client;
use tokio_postgres::types::Type;
use tokio_util::sync::CancellationToken;

use super::config::OnQuarantine;
use super::metrics::InboxMetrics;
use super::{Event, Handler, HandlerError};

/// The two tables' names and statements.
#[derive(Debug, Clone)]
pub struct InboxTables {
    pub inbox: String,
    pub quarantine: String,
    insert_inbox: String,
    insert_quarantine: String,
}

impl InboxTables {
    /// `inbox` and `quarantine` are plain names (`table` or
    /// `schema.table`, checked by the configuration).
    pub fn new(inbox: &str, quarantine: &str) -> InboxTables {
        InboxTables {
            inbox: inbox.to_owned(),
            quarantine: quarantine.to_owned(),
            insert_inbox: format!(
                "INSERT INTO {inbox} (event_id, topic, \"partition\", \"offset\", received_at) \
                 VALUES ($1, $2, $3, $4, now()) ON CONFLICT (event_id) DO NOTHING RETURNING 1"
            ),
            insert_quarantine: format!(
                "INSERT INTO {quarantine} (topic, \"partition\", \"offset\", event_id, key, value, \
                 headers, error, attempts, quarantined_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, now()) \
                 ON CONFLICT (topic, \"partition\", \"offset\") DO UPDATE SET error = EXCLUDED.error, \
                 attempts = {quarantine}.attempts + EXCLUDED.attempts, quarantined_at = now()"
            ),
        }
    }

    /// `CREATE TABLE IF NOT EXISTS` of both tables (and the index that
    /// retention deletes by).
    pub fn create_sql(&self) -> String {
        let (inbox, quarantine) = (&self.inbox, &self.quarantine);
        let index = inbox.rsplit('.').next().unwrap_or(inbox);
        // No NOTICE per existing table at every start.
        format!(
            "SET client_min_messages = warning;
             CREATE TABLE IF NOT EXISTS {inbox} (
                event_id text PRIMARY KEY,
                topic text NOT NULL,
                \"partition\" integer NOT NULL,
                \"offset\" bigint NOT NULL,
                received_at timestamptz NOT NULL DEFAULT now());
             CREATE INDEX IF NOT EXISTS {index}_received_at ON {inbox} (received_at);
             CREATE TABLE IF NOT EXISTS {quarantine} (
                topic text NOT NULL,
                \"partition\" integer NOT NULL,
                \"offset\" bigint NOT NULL,
                event_id text,
                key bytea,
                value bytea,
                headers jsonb NOT NULL,
                error text NOT NULL,
                attempts integer NOT NULL,
                quarantined_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (topic, \"partition\", \"offset\"));"
        )
    }
}

/// How one record ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkOutcome {
    /// New id: the handler's writes committed with the inbox row.
    Applied,
    /// The id was in the inbox: nothing done.
    Duplicate,
    /// Set aside; the partition goes on.
    Quarantined,
    /// Quarantined with `on_quarantine = "stop"`: the partition stops here.
    Stopped(String),
    /// The consumer is stopping; the record is left for the next run.
    Abandoned,
    /// The quarantine row could not be written: the consumer stops.
    Fatal(String),
}

/// Retry and quarantine settings.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub max_attempts: u32,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    pub on_quarantine: OnQuarantine,
    pub quarantine_to: QuarantineSink,
}

/// Where quarantined records go: the quarantine table, or a Kafka topic
/// (`[inbox.kafka] quarantine_topic`).
#[derive(Clone)]
pub(crate) enum QuarantineSink {
    Table,
    Topic {
        producer: rdkafka::producer::FutureProducer,
        topic: String,
    },
}

impl std::fmt::Debug for QuarantineSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QuarantineSink::Table => f.write_str("Table"),
            QuarantineSink::Topic { topic, .. } => write!(f, "Topic({topic})"),
        }
    }
}

impl QuarantineSink {
    /// For logs: where a quarantined record went.
    fn describe(&self, tables: &InboxTables) -> String {
        match self {
            QuarantineSink::Table => format!("table {}", tables.quarantine),
            QuarantineSink::Topic { topic, .. } => format!("topic {topic}"),
        }
    }
}

/// The quarantine topic's record: the original key, value and headers,
/// plus `walrelay.inbox.*` headers saying where it came from and why.
async fn produce_quarantined(
    producer: &rdkafka::producer::FutureProducer,
    topic: &str,
    event: &Event,
    error: &str,
    attempts: u32,
) -> Result<(), Failure> {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::FutureRecord;
    let mut headers = OwnedHeaders::new_with_capacity(event.headers.len() + 5);
    for (k, v) in &event.headers {
        headers = headers.insert(Header {
            key: k,
            value: Some(v.as_slice()),
        });
    }
    let (partition, offset, attempts) = (
        event.partition.to_string(),
        event.offset.to_string(),
        attempts.to_string(),
    );
    for (k, v) in [
        ("walrelay.inbox.error", error),
        ("walrelay.inbox.attempts", attempts.as_str()),
        ("walrelay.inbox.topic", event.topic.as_str()),
        ("walrelay.inbox.partition", partition.as_str()),
        ("walrelay.inbox.offset", offset.as_str()),
    ] {
        headers = headers.insert(Header {
            key: k,
            value: Some(v),
        });
    }
    let mut record = FutureRecord::<[u8], [u8]>::to(topic).headers(headers);
    if let Some(key) = &event.key {
        record = record.key(key.as_slice());
    }
    if let Some(value) = &event.value {
        record = record.payload(value.as_slice());
    }
    match producer.send(record, Duration::from_secs(0)).await {
        Ok(_) => Ok(()),
        Err((e, _)) => {
            let text = format!("cannot produce to quarantine_topic {topic}: {e}");
            // Timed out (the broker away): tried again like a lost database
            // connection; anything else (no such topic, not authorized)
            // stops the consumer.
            if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::MessageTimedOut) {
                Err(Failure::Connection(text))
            } else {
                Err(Failure::Attempt(text))
            }
        }
    }
}

impl Policy {
    /// The wait before attempt `attempt + 1` (1-based `attempt` failed).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1).min(20))
            .unwrap_or(u32::MAX);
        self.backoff_initial
            .checked_mul(factor)
            .unwrap_or(self.backoff_max)
            .min(self.backoff_max)
    }
}

/// One worker's database connection, made again when lost.
pub(crate) struct Connection {
    url: secrecy::SecretString,
    client: Option<Client>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("connected", &self.client.is_some())
            .finish()
    }
}

/// Connects to `url` (TLS as its `sslmode` says, with libpq's meanings:
/// [`super::config::url`]). The error text never holds the URL; it names
/// the server and the `sslmode`.
pub(crate) async fn connect(url: &secrecy::SecretString) -> Result<Client, ConnectFailure> {
    use secrecy::ExposeSecret;
    // Loading the configuration parsed the same URL: an error here is not
    // expected, and is reported like any other.
    let mut target = super::config::url::parse(url.expose_secret())
        .map_err(|e| ConnectFailure::Refused(format!("inbox.postgres.url {e}")))?;
    let mode = target.tls.mode.as_str();
    let address = target.address();
    let failed = |e: tokio_postgres::Error| {
        let refused = crate::pg::tls::is_tls_refusal(&e);
        let mut text = format!(
            "cannot connect to inbox.postgres.url ({address}, sslmode={mode}): {}",
            crate::pg::tls::error_chain(&e)
        );
        if text.contains("TLS handshake") {
            text.push_str(if target.tls.mode.verifies_certificate() {
                "; the server's certificate was refused: name the CA that signed it with \
                 sslrootcert=<file> in the URL (and with verify-full the certificate must name \
                 the host)"
            } else {
                "; the server would not complete TLS: check its ssl settings, or set \
                 sslmode=disable in the URL on a trusted network"
            });
        }
        if refused {
            ConnectFailure::Refused(text)
        } else {
            ConnectFailure::Unreachable(text)
        }
    };
    let tls = if target.is_unix() {
        target
            .config
            .ssl_mode(tokio_postgres::config::SslMode::Disable);
        None
    } else {
        crate::pg::tls::tokio_postgres_tls(&mut target.config, &target.tls)
            .map_err(|e| ConnectFailure::Refused(e.message))?
    };
    let (client, task) = match tls {
        Some(tls) => {
            let (client, conn) = target.config.connect(tls).await.map_err(failed)?;
            (client, tokio::spawn(drive(conn)))
        }
        None => {
            let (client, conn) = target
                .config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(failed)?;
            (client, tokio::spawn(drive(conn)))
        }
    };
    drop(task); // runs on detached; ends when the client is dropped
    Ok(client)
}

/// Why [`connect`] made no connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConnectFailure {
    /// Retrying cannot fix it: the server's certificate refused, TLS
    /// refused under a mode that needs it, a URL or TLS file unusable.
    Refused(String),
    /// The server cannot be reached (yet): waited for, with backoff.
    Unreachable(String),
}

impl std::fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectFailure::Refused(text) | ConnectFailure::Unreachable(text) => f.write_str(text),
        }
    }
}

/// Drives one connection until it ends.
async fn drive<F>(conn: F)
where
    F: std::future::Future<Output = Result<(), tokio_postgres::Error>>,
{
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "inbox database connection ended");
    }
}

impl Connection {
    pub fn new(url: secrecy::SecretString) -> Connection {
        Connection { url, client: None }
    }

    /// A live client, connecting (with backoff) until one is made or
    /// `shutdown`; `None` on shutdown.
    async fn client(
        &mut self,
        metrics: &InboxMetrics,
        shutdown: &CancellationToken,
    ) -> Option<&mut Client> {
        if self.client.as_ref().is_some_and(Client::is_closed) {
            // Lost while idle (the server restarted or ended the session).
            self.client = None;
            metrics
                .db_reconnects
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let mut wait = Duration::from_millis(100);
        while self.client.is_none() {
            match connect(&self.url).await {
                Ok(c) => {
                    metrics.set_trouble(None);
                    self.client = Some(c);
                }
                Err(e) => {
                    // A refusal mid-run (a certificate replaced) is retried
                    // too: the records wait, /healthz says why.
                    tracing::warn!(error = %e, "inbox database unreachable; retrying");
                    metrics.set_trouble(Some(e.to_string()));
                    tokio::select! {
                        _ = shutdown.cancelled() => return None,
                        _ = tokio::time::sleep(wait) => {}
                    }
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
            }
        }
        self.client.as_mut()
    }
}

/// Why one attempt failed.
enum Failure {
    /// The connection broke: not the handler's fault.
    Connection(String),
    /// The handler, or the inbox insert, failed.
    Attempt(String),
    /// The handler panicked: an attempt that failed, on a connection that
    /// is then made anew (the handler may have left it mid-statement or
    /// with session state changed).
    Panicked(String),
}

/// The text of a panic's payload (`panic!` with a message gives a `&str`
/// or a `String`).
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a payload that is not text".to_owned());
    format!("the handler panicked: {message}")
}

pub(crate) fn is_connection_error(e: &tokio_postgres::Error) -> bool {
    e.is_closed()
        || e.as_db_error().is_some_and(|d| {
            let code = d.code().code();
            code.starts_with("08") || code.starts_with("57P")
        })
        || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

fn classify_db(e: tokio_postgres::Error) -> Failure {
    if is_connection_error(&e) {
        Failure::Connection(e.to_string())
    } else {
        Failure::Attempt(describe(&e))
    }
}

/// A database error with its detail (the server's message, not just
/// "db error").
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!(
            "{}: {} (SQLSTATE {})",
            d.severity(),
            d.message(),
            d.code().code()
        ),
        None => e.to_string(),
    }
}

fn classify_handler(e: HandlerError, client_closed: bool) -> Failure {
    if let Some(pg) = e.downcast_ref::<tokio_postgres::Error>() {
        return classify_db_ref(pg, client_closed);
    }
    if client_closed {
        Failure::Connection(e.to_string())
    } else {
        Failure::Attempt(e.to_string())
    }
}

fn classify_db_ref(e: &tokio_postgres::Error, client_closed: bool) -> Failure {
    if client_closed || is_connection_error(e) {
        Failure::Connection(e.to_string())
    } else {
        Failure::Attempt(describe(e))
    }
}

/// One attempt: the inbox row, then the handler, in one transaction.
/// `Ok(true)`: applied; `Ok(false)`: a duplicate.
async fn attempt<H: Handler>(
    client: &mut Client,
    tables: &InboxTables,
    handler: &H,
    event: &Event,
) -> Result<bool, Failure> {
    let tx = client.transaction().await.map_err(classify_db)?;
    if !insert_inbox_row(&tx, tables, event).await? {
        // Nothing was written: ending the transaction either way is the same.
        tx.rollback().await.map_err(classify_db)?;
        return Ok(false);
    }
    // A panic in the handler is its failure like an error (retried, then
    // quarantined), never the end of the worker: an ended worker would
    // leave the record in progress and its partition's frontier stuck.
    let applied = std::panic::AssertUnwindSafe(handler.apply(&tx, event))
        .catch_unwind()
        .await;
    let failure = match applied {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(classify_handler(e, tx.client().is_closed())),
        Err(payload) => Some(Failure::Panicked(panic_text(payload.as_ref()))),
    };
    if let Some(failure) = failure {
        // Dropping `tx` rolls it back.
        drop(tx);
        return Err(failure);
    }
    tx.commit().await.map_err(classify_db)?;
    Ok(true)
}

/// Inserts the event's inbox row (`ON CONFLICT DO NOTHING`): `true` when it
/// is new, `false` when the id was in the inbox already.
async fn insert_inbox_row(
    tx: &tokio_postgres::Transaction<'_>,
    tables: &InboxTables,
    event: &Event,
) -> Result<bool, Failure> {
    let new = tx
        .query_typed(
            &tables.insert_inbox,
            &[
                (&event.id, Type::TEXT),
                (&event.topic, Type::TEXT),
                (&event.partition, Type::INT4),
                (&event.offset, Type::INT8),
            ],
        )
        .await
        .map_err(classify_db)?;
    Ok(!new.is_empty())
}

/// Writes the quarantine row (and, when the partition goes on, the inbox
/// row) in one transaction. `Ok(false)`: the id turned out to be in the
/// inbox already (another copy was applied meanwhile).
#[allow(clippy::too_many_arguments)]
async fn quarantine(
    client: &mut Client,
    tables: &InboxTables,
    sink: &QuarantineSink,
    event: &Event,
    missing_id: bool,
    error: &str,
    attempts: u32,
    with_inbox_row: bool,
) -> Result<bool, Failure> {
    let tx = client.transaction().await.map_err(classify_db)?;
    if with_inbox_row && !missing_id && !insert_inbox_row(&tx, tables, event).await? {
        tx.rollback().await.map_err(classify_db)?;
        return Ok(false);
    }
    if let QuarantineSink::Topic { producer, topic } = sink {
        // The inbox row (if any) commits only once Kafka holds the record;
        // a crash between the two quarantines it again (a second copy on
        // the topic, with the same headers).
        produce_quarantined(producer, topic, event, error, attempts).await?;
        tx.commit().await.map_err(classify_db)?;
        return Ok(true);
    }
    let headers: serde_json::Map<String, serde_json::Value> = event
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned().into()))
        .collect();
    let headers = serde_json::Value::Object(headers).to_string();
    let id = (!missing_id).then_some(event.id.as_str());
    let attempts = i32::try_from(attempts).unwrap_or(i32::MAX);
    tx.query_typed(
        &tables.insert_quarantine,
        &[
            (&event.topic, Type::TEXT),
            (&event.partition, Type::INT4),
            (&event.offset, Type::INT8),
            (&id, Type::TEXT),
            (&event.key, Type::BYTEA),
            (&event.value, Type::BYTEA),
            (&headers, Type::TEXT),
            (&error, Type::TEXT),
            (&attempts, Type::INT4),
        ],
    )
    .await
    .map_err(classify_db)?;
    tx.commit().await.map_err(classify_db)?;
    Ok(true)
}

/// Applies one record: attempts with backoff, then quarantine. Returns
/// only when the record is done (or the consumer stops).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn process<H: Handler>(
    conn: &mut Connection,
    tables: &InboxTables,
    handler: &H,
    event: &Event,
    missing_id: Option<&str>,
    policy: &Policy,
    metrics: &InboxMetrics,
    shutdown: &CancellationToken,
) -> WorkOutcome {
    use std::sync::atomic::Ordering::Relaxed;
    let mut attempts = 0u32;
    let mut last_error = missing_id.map(str::to_owned);
    let mut reconnect_wait = Duration::from_millis(100);
    // Applying, until done or out of attempts.
    while last_error.is_none() || (missing_id.is_none() && attempts < policy.max_attempts) {
        if shutdown.is_cancelled() {
            return WorkOutcome::Abandoned;
        }
        let Some(client) = conn.client(metrics, shutdown).await else {
            return WorkOutcome::Abandoned;
        };
        match attempt(client, tables, handler, event).await {
            Ok(true) => return WorkOutcome::Applied,
            Ok(false) => return WorkOutcome::Duplicate,
            Err(Failure::Connection(e)) => {
                tracing::warn!(error = %e, topic = %event.topic, partition = event.partition,
                    offset = event.offset, "inbox database connection lost; reconnecting");
                conn.client = None;
                metrics.db_reconnects.fetch_add(1, Relaxed);
                tokio::select! {
                    _ = shutdown.cancelled() => return WorkOutcome::Abandoned,
                    _ = tokio::time::sleep(reconnect_wait) => {}
                }
                reconnect_wait = (reconnect_wait * 2).min(Duration::from_secs(5));
            }
            Err(failure @ (Failure::Attempt(_) | Failure::Panicked(_))) => {
                let e = match failure {
                    Failure::Panicked(e) => {
                        conn.client = None;
                        e
                    }
                    Failure::Attempt(e) | Failure::Connection(e) => e,
                };
                attempts += 1;
                if attempts < policy.max_attempts {
                    let wait = policy.backoff(attempts);
                    tracing::warn!(error = %e, event_id = %event.id, topic = %event.topic,
                        partition = event.partition, offset = event.offset, attempt = attempts,
                        retry_in = ?wait, "handler failed; retrying");
                    metrics.retries.fetch_add(1, Relaxed);
                    metrics.running.fetch_sub(1, Relaxed);
                    metrics.retry_wait.fetch_add(1, Relaxed);
                    let cancelled = tokio::select! {
                        _ = shutdown.cancelled() => true,
                        _ = tokio::time::sleep(wait) => false,
                    };
                    metrics.retry_wait.fetch_sub(1, Relaxed);
                    metrics.running.fetch_add(1, Relaxed);
                    if cancelled {
                        return WorkOutcome::Abandoned;
                    }
                }
                last_error = Some(e);
            }
        }
    }
    let error = last_error.unwrap_or_default();
    let goes_on = policy.on_quarantine == OnQuarantine::Continue;
    loop {
        let Some(client) = conn.client(metrics, shutdown).await else {
            return WorkOutcome::Abandoned;
        };
        match quarantine(
            client,
            tables,
            &policy.quarantine_to,
            event,
            missing_id.is_some(),
            &error,
            attempts,
            goes_on,
        )
        .await
        {
            Ok(false) => return WorkOutcome::Duplicate,
            Ok(true) => {
                metrics.quarantined.fetch_add(1, Relaxed);
                tracing::error!(error = %error, event_id = %event.id, topic = %event.topic,
                    partition = event.partition, offset = event.offset, attempts,
                    quarantined_to = %policy.quarantine_to.describe(tables),
                    partition_stops = !goes_on, "record quarantined");
                return if goes_on {
                    WorkOutcome::Quarantined
                } else {
                    WorkOutcome::Stopped(error)
                };
            }
            Err(Failure::Connection(e)) => {
                tracing::warn!(error = %e, "inbox database connection lost; reconnecting");
                conn.client = None;
                metrics.db_reconnects.fetch_add(1, Relaxed);
                tokio::select! {
                    _ = shutdown.cancelled() => return WorkOutcome::Abandoned,
                    _ = tokio::time::sleep(reconnect_wait) => {}
                }
                reconnect_wait = (reconnect_wait * 2).min(Duration::from_secs(5));
            }
            Err(Failure::Attempt(e) | Failure::Panicked(e)) => {
                return WorkOutcome::Fatal(format!(
                    "cannot quarantine {}/{} offset {} to the {}: {e} (the record's last \
                     error: {error})",
                    event.topic,
                    event.partition,
                    event.offset,
                    policy.quarantine_to.describe(tables)
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests;
