//! The Kafka producer and its delivery reports.
//!
//! Owns the librdkafka producer (`acks=all`, `enable.idempotence=true`,
//! `partitioner=murmur2_random`, set by [`super::properties`] and not
//! overridable). Knows nothing about PostgreSQL, positions or transactions:
//! each record comes in with the caller's opaque token and the token comes
//! back, in whatever order the brokers acknowledge them, in an [`Ack`] on a
//! channel — acknowledgements flow back by message, not shared state.
//!
//! Invariants:
//! - Every record handed to [`KafkaSink::send`] produces exactly one [`Ack`]
//!   (success or failure) unless the sink is dropped first; a full librdkafka
//!   queue is backpressure (we wait and retry), never a drop.
//! - Failures are classified ([`super::error`]): errors that retrying
//!   cannot fix (message too large, authorization, unknown topic with
//!   auto-create off) are [`SinkErrorKind::Definite`] and stop the
//!   connector; the rest are transient and restart the session from the
//!   confirmed position (a re-send, never a loss).
//! - **Delivered means written at an offset.** A success report without an
//!   offset is not trusted: it is reported as a transient failure, so the
//!   record is re-sent. librdkafka's idempotent producer issues such reports
//!   as *implicit acks*: when request R1 to a partition fails (e.g. "not
//!   leader") and a later request R2 succeeds, it assumes R1 was written and
//!   reports R1's records delivered. That holds only if the broker enforces
//!   sequence order, which it does not for a producer id it holds no state
//!   for on that partition (a new session's first writes, a new topic, state
//!   expired after `producer.id.expiration.ms`): it accepts R2, and R1's
//!   records are silently gone. [`super::properties`] also sets
//!   `max.in.flight=1`, so R2 is never in flight while R1 can fail.
//! - **Nothing overtakes a refused record.** After a definite failure the
//!   caller calls [`KafkaSink::purge_queued`]: records not yet sent are
//!   dropped from librdkafka's queue (each still gets its one [`Ack`], a
//!   failure), so later events of the same key do not reach Kafka before the
//!   refused one is fixed and re-sent.
//! - A fatal producer error ([`Ack::Fatal`]) makes this producer unusable,
//!   not the connector: it is transient, and the next session builds a fresh
//!   producer (librdkafka's documented recovery).
//! - **A refused credential is definite.** librdkafka reports a failed TLS
//!   handshake or SASL authentication only through its error callback and
//!   then retries the connection forever. [`security_failure`] recognises
//!   those reports (SASL authentication errors by code; TLS by the OpenSSL
//!   texts "certificate verify failed" and the certificate alerts a broker
//!   sends when it refuses a client certificate), and the producer turns one
//!   into a definite [`Ack::Fatal`]: retrying cannot fix a wrong password or
//!   an untrusted certificate. [`probe_cluster`](super::probe::probe_cluster) does the same for `check`
//!   and for the start of a session.
//! - **Two producers, one at a time, never overlapping.** A sink made with
//!   [`KafkaSink::with_bulk`] has a second producer with a longer linger
//!   (bigger produce requests: less CPU per record here and on the broker)
//!   for while the caller is behind. [`KafkaSink::use_bulk`] switches only
//!   once every record handed to the other producer is acknowledged (or
//!   failed): records of one partition never wait in both producers at
//!   once, so the switch cannot reorder them. Each producer keeps its own
//!   idempotent producer id and sequence numbers. Transactional sinks have
//!   no second producer (one transactional id, one fencing).
//! - **No busy waiting.** Each producer's delivery reports are served by a
//!   thread of its own (`Polled`) that sleeps until a report arrives or
//!   its 100 ms step ends; an idle connector's producers use no measurable
//!   CPU (rdkafka's `ThreadedProducer` spins through the last millisecond
//!   of every step: about 1 % of a core per producer).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext, PurgeConfig,
};
use tokio::sync::mpsc;

use crate::router::Record;
use crate::telemetry::outage::OutageLog;

use super::error::{SinkError, SinkErrorKind, security_failure};
use super::properties::PropertyError;

/// A delivery report, carrying back the caller's token for the record.
#[derive(Debug)]
pub enum Ack<T> {
    Delivered(T),
    Failed {
        token: T,
        topic: String,
        error: SinkError,
    },
    /// librdkafka reported a fatal client error (e.g. the idempotent
    /// producer lost its guarantees); the producer is unusable.
    Fatal(SinkError),
}

struct AckContext<T> {
    acks: mpsc::UnboundedSender<Ack<T>>,
    /// Broker connection failures, logged once per outage (see
    /// [`OutageLog`]) instead of once per reconnect attempt.
    outage: Arc<OutageLog>,
}

/// Whether librdkafka's error callback reports the brokers being out of
/// reach (it retries by itself): an outage, not news on every attempt.
fn is_unreachable(code: Option<RDKafkaErrorCode>) -> bool {
    matches!(
        code,
        Some(
            RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::Resolve
        )
    )
}

impl<T: Send + Sync + 'static> ClientContext for AckContext<T> {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        // A failed (re)connection: librdkafka logs one per attempt and
        // broker, for as long as the outage lasts.
        // Likewise a partition whose leader went away with its broker: one
        // line per partition and metadata refresh.
        let leaderless = fac == "METADATAUPDATE" && message.contains("leader");
        if (fac == "FAIL" || leaderless) && (level as i32) <= (RDKafkaLogLevel::Warning as i32) {
            self.outage.failed(message);
            return;
        }
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::error!(facility = fac, "librdkafka: {message}"),
            RDKafkaLogLevel::Warning => tracing::warn!(facility = fac, "librdkafka: {message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::debug!(facility = fac, "librdkafka: {message}")
            }
            RDKafkaLogLevel::Debug => tracing::trace!(facility = fac, "librdkafka: {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) {
            let _ = self.acks.send(Ack::Fatal(SinkError {
                // This producer is done for; a new session's fresh producer
                // is the recovery, so retrying helps.
                kind: SinkErrorKind::Transient,
                message: format!("fatal Kafka producer error: {reason}"),
                code: Some(RDKafkaErrorCode::Fatal),
            }));
        } else if let Some(refused) = security_failure(error.rdkafka_error_code(), reason) {
            tracing::error!(error = %refused, "Kafka refused the connection");
            let _ = self.acks.send(Ack::Fatal(refused));
        } else if is_unreachable(error.rdkafka_error_code()) && !reason.starts_with("0/") {
            // ("0/2 brokers are down" comes as the brokers return.)
            self.outage.failed(reason);
        } else {
            // Broker down, DNS, etc.: librdkafka retries by itself. Logged at
            // debug because it repeats; the connector logs the stall itself.
            tracing::debug!(error = %error, "librdkafka: {reason}");
        }
    }
}

impl<T: Send + Sync + 'static> ProducerContext for AckContext<T> {
    type DeliveryOpaque = Box<T>;

    fn delivery(&self, result: &DeliveryResult<'_>, token: Box<T>) {
        use rdkafka::Message;
        let ack = match result {
            Ok(msg) if msg.offset() >= 0 => {
                self.outage.succeeded();
                Ack::Delivered(*token)
            }
            // See the module doc: an implicit ack, not proof of a write.
            Ok(msg) => Ack::Failed {
                token: *token,
                topic: msg.topic().to_owned(),
                error: SinkError::unverified(msg.partition()),
            },
            Err((e, msg)) => Ack::Failed {
                token: *token,
                topic: msg.topic().to_owned(),
                error: SinkError::for_topic(e, Some(msg.topic())),
            },
        };
        // The receiver is gone only when the session is being torn down.
        let _ = self.acks.send(ack);
    }
}

/// The producer side of the connector. `T` is the caller's token for a
/// record: opaque here, handed back with the record's [`Ack`].
pub struct KafkaSink<T: Send + Sync + 'static> {
    producer: Arc<Polled<AckContext<T>>>,
    /// The producer for while the caller is behind (longer linger), if any.
    bulk: Option<Arc<Polled<AckContext<T>>>>,
    /// Whether [`Self::send`] uses `bulk`.
    bulk_active: std::sync::atomic::AtomicBool,
}

impl<T: Send + Sync + 'static> std::fmt::Debug for KafkaSink<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink").finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> KafkaSink<T> {
    /// Creates the producer from a complete librdkafka property list.
    ///
    /// `outage` logs the brokers going out of reach and coming back; share
    /// one across producers so that an outage spanning a session restart is
    /// one outage in the log.
    pub fn new(
        properties: &[(String, String)],
        outage: Arc<OutageLog>,
    ) -> Result<(KafkaSink<T>, mpsc::UnboundedReceiver<Ack<T>>), SinkError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let producer = create_producer(properties, AckContext { acks: tx, outage })?;
        Ok((
            KafkaSink {
                producer: Arc::new(producer),
                bulk: None,
                bulk_active: AtomicBool::new(false),
            },
            rx,
        ))
    }

    /// [`KafkaSink::new`] plus a second producer with `linger.ms` =
    /// `bulk_linger_ms` (its other properties the same), for while the caller
    /// is behind: see [`KafkaSink::use_bulk`]. Both report on the one channel.
    pub fn with_bulk(
        properties: &[(String, String)],
        bulk_linger_ms: &str,
        outage: Arc<OutageLog>,
    ) -> Result<(KafkaSink<T>, mpsc::UnboundedReceiver<Ack<T>>), SinkError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let bulk_properties: Vec<(String, String)> = properties
            .iter()
            .map(|(k, v)| match k.as_str() {
                "linger.ms" => (k.clone(), bulk_linger_ms.to_owned()),
                _ => (k.clone(), v.clone()),
            })
            .collect();
        let bulk = create_producer(
            &bulk_properties,
            AckContext {
                acks: tx.clone(),
                outage: outage.clone(),
            },
        )?;
        let producer = create_producer(properties, AckContext { acks: tx, outage })?;
        Ok((
            KafkaSink {
                producer: Arc::new(producer),
                bulk: Some(Arc::new(bulk)),
                bulk_active: AtomicBool::new(false),
            },
            rx,
        ))
    }

    /// The producer [`Self::send`] hands records to.
    fn active(&self) -> &Polled<AckContext<T>> {
        match &self.bulk {
            Some(bulk) if self.bulk_active.load(Ordering::Relaxed) => bulk,
            _ => &self.producer,
        }
    }

    /// How many times librdkafka reported a broker unreachable so far (to
    /// this sink's outage log, shared by sessions): a caller compares two
    /// readings to learn whether an outage happened in between.
    pub fn unreachable_reports(&self) -> u64 {
        self.producer.context().outage.failures()
    }

    /// Whether the sink has a second producer ([`Self::with_bulk`]).
    pub fn has_bulk(&self) -> bool {
        self.bulk.is_some()
    }

    /// Whether records go to the second producer (see [`Self::with_bulk`]).
    pub fn bulk_active(&self) -> bool {
        self.bulk.is_some() && self.bulk_active.load(Ordering::Relaxed)
    }

    /// Makes [`Self::send`] use the second producer (`true`) or the first.
    /// Switches only once every record handed to the producer in use is
    /// acknowledged or failed (sending what lingers in it at once), waiting
    /// up to `wait`; returns whether the requested producer is in use (always
    /// `false` for `true` without a second producer). Records of a partition
    /// so never wait in both producers, and cannot overtake each other.
    pub async fn use_bulk(&self, bulk: bool, wait: Duration) -> bool {
        if self.bulk.is_none() {
            return !bulk;
        }
        if self.bulk_active() == bulk {
            return true;
        }
        if !drain(self.active(), tokio::time::Instant::now() + wait).await {
            return false;
        }
        self.bulk_active.store(bulk, Ordering::Relaxed);
        true
    }

    /// Enqueues one record. When librdkafka's queue is full, waits (yielding
    /// to the runtime) and retries: backpressure, never a drop.
    pub async fn send(&self, record: &Record, token: T) -> Result<(), SinkError> {
        let mut token = Box::new(token);
        let mut backoff = Duration::from_micros(200);
        loop {
            let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
            for (k, v) in &record.headers {
                headers = headers.insert(Header {
                    key: k,
                    value: Some(v.as_ref()),
                });
            }
            let mut base: BaseRecord<'_, [u8], [u8], Box<T>> =
                BaseRecord::with_opaque_to(&record.topic, token).headers(headers);
            if let Some(k) = &record.key {
                base = base.key(k.as_ref());
            }
            if let Some(v) = &record.value {
                base = base.payload(v.as_ref());
            }
            if let Some(ts) = record.timestamp_ms {
                base = base.timestamp(ts);
            }
            match self.active().send(base) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    token = back.delivery_opaque;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(50));
                }
                Err((e, _)) => return Err(SinkError::from_kafka(&e)),
            }
        }
    }

    /// Transactional producers only (`transactional.id` set): registers
    /// the transactional id with its coordinator, which **fences** every
    /// earlier producer with the same id (their open transaction is
    /// aborted, their next send or commit fails as fenced). Once per
    /// producer, before [`KafkaSink::begin_transaction`].
    pub async fn init_transactions(&self, timeout: Duration) -> Result<(), SinkError> {
        self.blocking(move |p| p.init_transactions(timeout)).await
    }

    /// Opens a Kafka transaction: every record sent until the commit or
    /// abort belongs to it. Local (no request to a broker).
    pub fn begin_transaction(&self) -> Result<(), SinkError> {
        self.producer
            .begin_transaction()
            .map_err(|e| SinkError::transaction(&e))
    }

    /// Sends what is queued and commits the open transaction: its records
    /// become visible to `read_committed` consumers at once, all of them or
    /// (on an error) none. An error leaves the transaction to be aborted (by
    /// [`KafkaSink::abort_transaction`], or by the next producer's
    /// [`KafkaSink::init_transactions`]).
    pub async fn commit_transaction(&self, timeout: Duration) -> Result<(), SinkError> {
        // rdkafka's commit first flushes, polling the producer's event
        // queue in steps of 100 ms; with the Polled thread serving that
        // queue each step sleeps its full 100 ms, a floor
        // under every transaction. Wait for the outstanding records here
        // instead (librdkafka's flush with no wait only checks, and sends
        // what lingers), so that the commit's own flush finds none.
        if !drain(&self.producer, tokio::time::Instant::now() + timeout).await {
            return Err(SinkError::timed_out(timeout));
        }
        self.blocking(move |p| p.commit_transaction(timeout)).await
    }

    /// Aborts the open transaction: none of its records becomes visible to
    /// `read_committed` consumers.
    pub async fn abort_transaction(&self, timeout: Duration) -> Result<(), SinkError> {
        self.blocking(move |p| p.abort_transaction(timeout)).await
    }

    /// Runs a blocking librdkafka call off the async threads.
    async fn blocking(
        &self,
        call: impl FnOnce(&Polled<AckContext<T>>) -> rdkafka::error::KafkaResult<()> + Send + 'static,
    ) -> Result<(), SinkError> {
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || call(&producer))
            .await
            .map_err(|e| SinkError {
                kind: SinkErrorKind::Transient,
                message: format!("the Kafka transaction call did not complete: {e}"),
                code: None,
            })?
            .map_err(|e| SinkError::transaction(&e))
    }

    /// Drops every record still waiting in librdkafka's queue (not yet sent
    /// to a broker). Each dropped record is reported as a failure on the ack
    /// channel; requests already in flight complete normally.
    pub fn purge_queued(&self) {
        self.producer.purge(PurgeConfig::default().queue());
        if let Some(bulk) = &self.bulk {
            bulk.purge(PurgeConfig::default().queue());
        }
    }
}

/// A producer of `properties` reporting through `context`.
fn create_producer<T: Send + Sync + 'static>(
    properties: &[(String, String)],
    context: AckContext<T>,
) -> Result<Polled<AckContext<T>>, SinkError> {
    let mut cfg = ClientConfig::new();
    for (k, v) in properties {
        cfg.set(k, v);
    }
    // rdkafka derives librdkafka's log level from the `log` crate's
    // filter, which never enables debug here, so a `debug` property in
    // [kafka.librdkafka] would print nothing. Pass everything; the
    // tracing filter decides what is shown.
    let debugging = properties
        .iter()
        .any(|(k, v)| k == "debug" && !v.trim().is_empty());
    cfg.set_log_level(if debugging {
        RDKafkaLogLevel::Debug
    } else {
        RDKafkaLogLevel::Info
    });
    let producer: BaseProducer<AckContext<T>> =
        cfg.create_with_context(context).map_err(|e| SinkError {
            kind: SinkErrorKind::Definite,
            message: format!(
                "cannot create the Kafka producer: {}",
                PropertyError::from_kafka(&e, properties)
            ),
            code: e.rdkafka_error_code(),
        })?;
    Polled::start(producer).map_err(|e| SinkError {
        kind: SinkErrorKind::Definite,
        message: format!("cannot start the Kafka producer's delivery-report thread: {e}"),
        code: None,
    })
}

/// How long one [`BaseProducer::poll`] call of [`Polled`]'s thread waits
/// for a delivery report: 100 ms, plus a margin explained there.
const POLL_STEP: Duration = Duration::from_micros(100_050);

/// A producer with a thread of its own serving its delivery reports (they
/// reach [`AckContext`] on that thread), as rdkafka's `ThreadedProducer`,
/// without its busy wait. `BaseProducer::poll(d)` waits in whole
/// milliseconds, truncated, until `d` has passed: called with 100 ms, it
/// waits 99 ms (a few microseconds are gone by the first wait), then spins
/// through zero-millisecond waits for the last fraction of a millisecond,
/// about 1 % of a core per producer whether or not anything is produced
/// (seen in a profile of an idle connector: the thread's samples were
/// clock readings and empty queue polls). Polling for 100 ms plus 50 µs
/// makes the first wait a whole 100 ms, which ends past the deadline.
/// Dropping it stops the thread (within one step) and then the producer.
pub(crate) struct Polled<C: ProducerContext + 'static> {
    producer: Arc<BaseProducer<C>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<C: ProducerContext + 'static> Polled<C> {
    fn start(producer: BaseProducer<C>) -> std::io::Result<Polled<C>> {
        let producer = Arc::new(producer);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (producer, stop) = (producer.clone(), stop.clone());
            std::thread::Builder::new()
                .name("kafka reports".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        producer.poll(POLL_STEP);
                    }
                })?
        };
        Ok(Polled {
            producer,
            stop,
            thread: Some(thread),
        })
    }
}

impl<C: ProducerContext + 'static> std::ops::Deref for Polled<C> {
    type Target = BaseProducer<C>;
    fn deref(&self) -> &BaseProducer<C> {
        &self.producer
    }
}

impl<C: ProducerContext + 'static> Drop for Polled<C> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            // The thread only polls; it cannot panic but through the
            // context, whose panic the join would only report again.
            let _ = thread.join();
        }
    }
}

/// Sends what lingers in `producer` at once and waits (yielding to the
/// runtime, in 1 ms steps) until it holds no record that Kafka has not
/// acknowledged or failed and no undelivered report; `false` if `deadline`
/// comes first. librdkafka's flush with no wait only sends and checks, it
/// never blocks the async thread.
async fn drain<C: ProducerContext>(
    producer: &BaseProducer<C>,
    deadline: tokio::time::Instant,
) -> bool {
    loop {
        let _ = producer.flush(Duration::ZERO);
        if producer.in_flight_count() == 0 {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[cfg(test)]
mod tests;
