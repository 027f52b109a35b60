//! What `check` and the start of a session ask the brokers without
//! producing: [`probe_cluster`] (metadata with the producer's own
//! properties, and how the connection was secured), [`tls_handshake`] (the
//! TLS version, from a handshake of our own with the same settings),
//! [`cluster_answers`] (the stall watchdog's question), and
//! [`probe_transactions`] (whether the principal may use transactions).
//!
//! Invariants:
//! - Refused credentials or certificates end a probe at once
//!   ([`ProbeError::Refused`], definite), as the producer treats them; a
//!   cluster that does not answer is [`ProbeError::Unreachable`].
//! - Nothing is written: the transactions probe registers an id of its own
//!   and begins no transaction.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, DeliveryResult, Producer, ProducerContext};

use super::error::{SinkError, security_failure};
use super::properties::PropertyError;

/// What a successful [`probe_cluster`] learned about the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeReport {
    /// Brokers listed in the metadata.
    pub brokers: usize,
    /// `security.protocol` as used (librdkafka's default `plaintext` when unset).
    pub protocol: String,
    /// `sasl.mechanisms` as used, with a `sasl_*` protocol.
    pub sasl_mechanism: Option<String>,
    /// librdkafka checked the broker's certificate chain against the CA: a
    /// TLS protocol with `enable.ssl.certificate.verification` on (see
    /// `certificate_verification_on`).
    pub certificate_verified: bool,
    /// Host-name verification was on (`ssl.endpoint.identification.algorithm`).
    pub host_name_checked: bool,
}

impl std::fmt::Display for ProbeReport {
    /// "over sasl_ssl (SASL SCRAM-SHA-512; TLS, broker certificate verified
    /// for its host name)".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "over {}", self.protocol)?;
        let mut parts = Vec::new();
        if let Some(m) = &self.sasl_mechanism {
            parts.push(format!("SASL {m}"));
        }
        if self.protocol.ends_with("ssl") {
            // librdkafka does not tell which TLS version it negotiated.
            parts.push(match (self.certificate_verified, self.host_name_checked) {
                (true, true) => "TLS, broker certificate verified for its host name".to_owned(),
                (true, false) => {
                    "TLS, broker certificate verified (host name NOT checked)".to_owned()
                }
                (false, _) => "TLS, broker certificate NOT verified".to_owned(),
            });
        }
        if !parts.is_empty() {
            write!(f, " ({})", parts.join("; "))?;
        }
        Ok(())
    }
}

/// Why [`probe_cluster`] failed.
#[derive(Debug, Clone)]
pub enum ProbeError {
    /// The brokers refused walrelay's credentials or certificates
    /// ([`security_failure`]): definite.
    Refused(SinkError),
    /// No answer (down, unreachable, timed out): retrying may help.
    Unreachable(String),
}

/// Collects librdkafka's error callbacks while probing: connection failures
/// carry their cause ("Connection refused"), `AllBrokersDown` says no broker
/// is left to try, and a security failure ends the probe at once.
#[derive(Default)]
struct ProbeWatch {
    errors: std::sync::Mutex<Vec<String>>,
    refused: std::sync::Mutex<Option<SinkError>>,
    all_down: std::sync::atomic::AtomicBool,
}

impl ClientContext for ProbeWatch {
    fn log(&self, _level: RDKafkaLogLevel, fac: &str, message: &str) {
        tracing::trace!(facility = fac, "librdkafka: {message}");
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        if code == Some(RDKafkaErrorCode::AllBrokersDown) {
            self.all_down
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(refused) = security_failure(code, reason)
            && let Ok(mut slot) = self.refused.lock()
        {
            slot.get_or_insert(refused);
        }
        if let Ok(mut errors) = self.errors.lock()
            && errors.len() < 8
            && !errors.iter().any(|e| e == reason)
        {
            errors.push(reason.to_owned());
        }
    }
}

impl ProducerContext for ProbeWatch {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

/// Whether librdkafka verifies the broker's certificate chain:
/// `enable.ssl.certificate.verification` (a librdkafka boolean: `true`,
/// `t`, `1` or `false`, `f`, `0`, any case; on by default). When it is on,
/// librdkafka has OpenSSL verify the peer (`SSL_VERIFY_PEER`) and refuse
/// the handshake of a certificate the CA does not sign (or, with
/// `ssl.endpoint.identification.algorithm = https`, one for another host),
/// so a connection it made was verified. Its `SSLVERIFY` debug line is no
/// evidence either way: it is not logged when OpenSSL completes the
/// handshake within its first `SSL_connect` (the broker's answer already
/// there when the client thread reads, as under load), and a report built
/// on it once said "NOT verified" of a verified broker.
fn certificate_verification_on(properties: &[(String, String)]) -> bool {
    properties
        .iter()
        .rev()
        .find(|(k, _)| k == "enable.ssl.certificate.verification")
        .is_none_or(|(_, v)| !matches!(v.trim().to_ascii_lowercase().as_str(), "false" | "f" | "0"))
}

/// Asks the brokers for metadata with the producer's own properties, in
/// short attempts until `timeout`, and reports how the connection was
/// secured. Gives up at once when the brokers refuse walrelay's credentials
/// or certificates ([`ProbeError::Refused`]) or every broker refused the
/// connection. Blocking.
pub fn probe_cluster(
    properties: &[(String, String)],
    timeout: Duration,
) -> Result<ProbeReport, ProbeError> {
    use std::sync::atomic::Ordering;
    let last = |key: &str| {
        properties
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.trim().to_ascii_lowercase())
    };
    let protocol = last("security.protocol").unwrap_or_else(|| "plaintext".to_owned());
    let mut cfg = ClientConfig::new();
    for (k, v) in properties {
        cfg.set(k, v);
    }
    cfg.set_log_level(RDKafkaLogLevel::Debug);
    let producer: BaseProducer<ProbeWatch> = cfg
        .create_with_context(ProbeWatch::default())
        .map_err(|e| {
            ProbeError::Unreachable(format!(
                "cannot create a Kafka client: {}",
                PropertyError::from_kafka(&e, properties)
            ))
        })?;
    let watch = producer.context().clone();
    let reasons = || {
        watch
            .errors
            .lock()
            .map(|e| e.join("; "))
            .unwrap_or_default()
    };
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let attempt = producer
            .client()
            .fetch_metadata(None, Duration::from_millis(500));
        // Serves the error and log callbacks: poll handles one event per
        // call unless given time, so give it some.
        producer.poll(Duration::from_millis(50));
        if let Ok(Some(refused)) = watch.refused.lock().map(|r| r.clone()) {
            return Err(ProbeError::Refused(refused));
        }
        let last_error = match attempt {
            Ok(metadata) => {
                return Ok(ProbeReport {
                    brokers: metadata.brokers().len(),
                    sasl_mechanism: protocol
                        .starts_with("sasl")
                        .then(|| last("sasl.mechanisms").or_else(|| last("sasl.mechanism")))
                        .flatten()
                        .map(|m| m.to_ascii_uppercase()),
                    // The metadata came over a TLS handshake that
                    // succeeded, with OpenSSL told to verify the peer.
                    certificate_verified: protocol.ends_with("ssl")
                        && certificate_verification_on(properties),
                    host_name_checked: last("ssl.endpoint.identification.algorithm")
                        .is_none_or(|v| v == "https"),
                    protocol,
                });
            }
            Err(e) => e,
        };
        if watch.all_down.load(Ordering::Relaxed) {
            return Err(ProbeError::Unreachable(format!(
                "no broker accepted a connection: {}",
                reasons()
            )));
        }
        if std::time::Instant::now() >= deadline {
            let seen = reasons();
            return Err(ProbeError::Unreachable(format!(
                "Kafka did not answer a metadata request within {timeout:?}: {last_error}{}{seen}",
                if seen.is_empty() { "" } else { "; " }
            )));
        }
    }
}

/// The TLS version and cipher a handshake with the first bootstrap broker
/// negotiates under the producer's TLS settings (`ssl.ca.location` or
/// `ssl.ca.pem`, client certificate and key, certificate and host-name
/// verification), e.g. `TLSv1.3 TLS_AES_256_GCM_SHA384`. librdkafka does not
/// tell which version it negotiated, so `check` asks OpenSSL (the library
/// librdkafka uses, with the same defaults) on a connection of its own that
/// it closes after the handshake. Blocking, at most `timeout`; `Err` says why
/// nothing could be learned (for the report, never a failure by itself).
pub fn tls_handshake(properties: &[(String, String)], timeout: Duration) -> Result<String, String> {
    use openssl::pkey::PKey;
    use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
    use openssl::x509::X509;
    let last = |key: &str| {
        properties
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.trim().to_owned())
    };
    let first = last("bootstrap.servers")
        .and_then(|b| b.split(',').next().map(|s| s.trim().to_owned()))
        .ok_or("no bootstrap.servers")?;
    let first = first
        .rsplit_once("://")
        .map_or(first.as_str(), |(_, hp)| hp)
        .to_owned();
    let (host, _) = first
        .rsplit_once(':')
        .ok_or_else(|| format!("{first:?} has no port"))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let tls = |what: &str, e: openssl::error::ErrorStack| format!("{what}: {e}");
    let mut builder =
        SslConnector::builder(SslMethod::tls_client()).map_err(|e| tls("TLS context", e))?;
    if let Some(pem) = last("ssl.ca.pem") {
        for cert in X509::stack_from_pem(pem.as_bytes()).map_err(|e| tls("ssl.ca.pem", e))? {
            builder
                .cert_store_mut()
                .add_cert(cert)
                .map_err(|e| tls("ssl.ca.pem", e))?;
        }
    } else if let Some(path) = last("ssl.ca.location") {
        builder
            .set_ca_file(&path)
            .map_err(|e| tls("ssl.ca.location", e))?;
    }
    if let Some(pem) = last("ssl.certificate.pem") {
        let cert = X509::from_pem(pem.as_bytes()).map_err(|e| tls("ssl.certificate.pem", e))?;
        builder
            .set_certificate(&cert)
            .map_err(|e| tls("ssl.certificate.pem", e))?;
    } else if let Some(path) = last("ssl.certificate.location") {
        builder
            .set_certificate_chain_file(&path)
            .map_err(|e| tls("ssl.certificate.location", e))?;
    }
    let key_pem = match (last("ssl.key.pem"), last("ssl.key.location")) {
        (Some(pem), _) => Some(("ssl.key.pem", pem.into_bytes())),
        (None, Some(path)) => Some((
            "ssl.key.location",
            std::fs::read(&path).map_err(|e| format!("ssl.key.location: {e}"))?,
        )),
        (None, None) => None,
    };
    if let Some((key_name, pem)) = key_pem {
        let key = match last("ssl.key.password") {
            Some(password) => PKey::private_key_from_pem_passphrase(&pem, password.as_bytes()),
            None => PKey::private_key_from_pem(&pem),
        }
        .map_err(|e| tls(key_name, e))?;
        builder
            .set_private_key(&key)
            .map_err(|e| tls(key_name, e))?;
    }
    let verify = certificate_verification_on(properties);
    builder.set_verify(if verify {
        SslVerifyMode::PEER
    } else {
        SslVerifyMode::NONE
    });
    let connector = builder.build();
    let mut configure = connector
        .configure()
        .map_err(|e| tls("TLS connection", e))?;
    configure.set_verify_hostname(
        verify
            && last("ssl.endpoint.identification.algorithm")
                .is_none_or(|v| v.eq_ignore_ascii_case("https")),
    );
    let address = std::net::ToSocketAddrs::to_socket_addrs(&first)
        .map_err(|e| format!("{first}: {e}"))?
        .next()
        .ok_or_else(|| format!("{first} resolves to no address"))?;
    let tcp = std::net::TcpStream::connect_timeout(&address, timeout)
        .map_err(|e| format!("{first}: {e}"))?;
    tcp.set_read_timeout(Some(timeout))
        .and_then(|()| tcp.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("{first}: {e}"))?;
    let stream = configure
        .connect(&host, tcp)
        .map_err(|e| format!("TLS handshake with {first}: {e}"))?;
    let ssl = stream.ssl();
    Ok(match ssl.current_cipher() {
        Some(cipher) => format!("{} {}", ssl.version_str(), cipher.name()),
        None => ssl.version_str().to_owned(),
    })
}

/// Whether the cluster answers a metadata request from a *fresh* client
/// with these properties (blocking, at most `timeout`). Tells a broker
/// that is away from a producer that is stuck although the broker is
/// back (librdkafka 2.12 can keep a partition without a leader for good
/// after a metadata update with leader -1: confluentinc/librdkafka#5430).
pub fn cluster_answers(properties: &[(String, String)], timeout: Duration) -> bool {
    let mut cfg = ClientConfig::new();
    for (k, v) in properties {
        cfg.set(k, v);
    }
    cfg.set_log_level(RDKafkaLogLevel::Emerg);
    let Ok(probe) = cfg.create::<BaseProducer>() else {
        return false;
    };
    probe.client().fetch_metadata(None, timeout).is_ok_and(|m| {
        !m.brokers().is_empty()
            && m.topics()
                .iter()
                .flat_map(|t| t.partitions())
                .all(|p| p.leader() >= 0)
    })
}

/// `check` with `exactly_once`: whether the cluster lets this principal
/// use Kafka transactions, tried with `transactional_id` (not the
/// connector's own: registering that would fence the running instance).
/// Registers the id (`init_transactions`, which needs WRITE on the
/// `TransactionalId` and a working transaction coordinator) and aborts
/// nothing: no transaction is begun.
pub fn probe_transactions(
    properties: &[(String, String)],
    transactional_id: &str,
    timeout: Duration,
) -> Result<(), SinkError> {
    let mut cfg = ClientConfig::new();
    for (k, v) in properties {
        cfg.set(k, v);
    }
    cfg.set("transactional.id", transactional_id);
    cfg.set_log_level(RDKafkaLogLevel::Emerg);
    let producer: BaseProducer = cfg.create().map_err(|e| SinkError::from_kafka(&e))?;
    producer
        .init_transactions(timeout)
        .map_err(|e| SinkError::transaction(&e))
}

#[cfg(test)]
mod tests;
