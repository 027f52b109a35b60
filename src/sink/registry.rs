//! The schema registry client: frames `format = "avro" | "json_schema" |
//! "protobuf"` records in the Confluent wire format (magic byte 0, the schema
//! id as 4 big-endian bytes, for Protobuf the message indexes of the
//! record's message — always `[0]`, the byte 0 —, then the body the router
//! made) with ids it gets from a
//! Confluent-compatible registry (Confluent Schema Registry, Apicurio's
//! `/apis/ccompat/v7`), over HTTP/1.1 or HTTPS (OpenSSL, the certificate
//! checked against `ssl_ca` or the system's trust store, and the URL's host).
//!
//! Invariants:
//! - **No record leaves without its schema id.** [`Registry::frame`] either
//!   returns the framed record or an error; the caller publishes nothing in
//!   its place (the session ends before the slot can pass it).
//! - **One round trip per (subject, schema), not per record.** Ids are
//!   cached for the life of the process (they never change for a schema
//!   under a subject); only a miss, or a retry after a failure, asks.
//! - **Errors are classified.** Unreachable, timed out, 5xx, 408 and 429 are
//!   transient (the session restarts with backoff from the confirmed
//!   position); anything else the registry refuses (409 incompatible, 422
//!   invalid, 401/403, a subject without the schema) is definite and
//!   carries the subject and the registry's own message.
//! - **Secrets stay secret.** The basic-auth password goes only into the
//!   `Authorization` header, never into `Debug`, logs or errors.
//! - Subject names follow Confluent's strategies ([`subject`]).

use std::fmt;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use secrecy::ExposeSecret;

use crate::config::{SchemaRegistryConfig, SubjectNameStrategy};
use crate::router::Record;
use crate::router::arena::Arena;
use crate::router::schema::{Schema, SchemaKind};
use crate::telemetry::Metrics;

/// The registry's media type (Confluent's API).
const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";
/// A registry answer larger than this is refused (schemas are small).
const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// Why a schema id could not be had.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    /// Not reached, or no answer in time: transient.
    #[error("schema registry {url} unreachable: {cause}")]
    Unreachable { url: String, cause: String },
    /// The registry answered with an error status.
    #[error(
        "schema registry refused subject {subject:?} (HTTP {status}{}): {message}",
        code.map(|c| format!(", error code {c}")).unwrap_or_default()
    )]
    Refused {
        subject: String,
        status: u16,
        /// Confluent's `error_code` (40401 subject not found, 409 …).
        code: Option<i64>,
        /// The registry's own `message`.
        message: String,
    },
    /// The registry's TLS certificate is not trusted (or names another
    /// host): definite, retrying cannot fix it.
    #[error("schema registry {url}: {cause}")]
    Untrusted { url: String, cause: String },
    /// `use_latest_version`: the subject's latest schema is another one.
    #[error(
        "the latest schema of subject {subject:?} (id {id}) is not the one walrelay writes \
         ({ours}); register it as the subject's latest version, or set use_latest_version = false"
    )]
    LatestDiffers {
        subject: String,
        id: u32,
        ours: String,
    },
    /// The subject already holds a schema of another type (Avro under a
    /// JSON Schema record's subject, or the reverse): definite. Some
    /// registries (Apicurio) answer that registration with a 500.
    #[error(
        "subject {subject:?} holds schemas of type {held}, and walrelay writes type {ours} \
         there; the registry refuses to register it ({cause})"
    )]
    OtherType {
        subject: String,
        held: String,
        ours: String,
        cause: String,
    },
    /// The answer made no sense (not JSON, no id).
    #[error("schema registry answered subject {subject:?} with something unexpected: {what}")]
    Unexpected { subject: String, what: String },
}

impl RegistryError {
    /// Whether retrying later may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            RegistryError::Unreachable { .. } => true,
            RegistryError::Refused { status, .. } => {
                *status >= 500 || *status == 408 || *status == 429
            }
            RegistryError::LatestDiffers { .. }
            | RegistryError::OtherType { .. }
            | RegistryError::Unexpected { .. }
            | RegistryError::Untrusted { .. } => false,
        }
    }

    /// What to do, for the definite ones.
    pub fn fix(&self) -> &'static str {
        match self {
            RegistryError::Refused { status: 409, .. } => {
                "the subject's compatibility rule refuses the new schema: make the change \
                 compatible, or change the subject's compatibility in the registry (or delete the \
                 subject) if the consumers can take it; the connector stays stopped before the \
                 record"
            }
            RegistryError::Refused {
                status: 401 | 403, ..
            } => "check kafka.schema_registry.username and password, and the user's rights",
            RegistryError::Untrusted { .. } => {
                "set kafka.schema_registry.ssl_ca to the PEM file of the CA that signed the \
                 registry's certificate, and use a URL whose host the certificate names"
            }
            RegistryError::OtherType { .. } => {
                "one subject holds one schema type: write the topic's records in the format its \
                 subject holds, or name subjects by record (subject_name_strategy = \"record\" \
                 or \"topic_record\"), or delete the subject if no consumer needs it"
            }
            RegistryError::Refused { status: 404, .. } => {
                "with auto_register = false the schema must be registered under the subject \
                 before walrelay writes it: register it, or set auto_register = true"
            }
            _ => "see the registry's message",
        }
    }
}

/// The subject of a key (`is_key`) or value schema of a record for
/// `topic` under `strategy`; `record_name` is the schema's full record name
/// (`None` for a schema that is no record, which only `topic` takes).
pub fn subject(
    strategy: SubjectNameStrategy,
    topic: &str,
    is_key: bool,
    record_name: Option<&str>,
) -> Option<String> {
    let part = if is_key { "key" } else { "value" };
    match strategy {
        SubjectNameStrategy::Topic => Some(format!("{topic}-{part}")),
        SubjectNameStrategy::Record => record_name.map(str::to_owned),
        SubjectNameStrategy::TopicRecord => record_name.map(|name| format!("{topic}-{name}")),
    }
}

/// The Confluent wire format: magic byte 0, the id big-endian, then (for
/// `kind` Protobuf) the message indexes of the record's message, then the
/// body.
pub fn framed(id: u32, kind: SchemaKind, body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(6 + body.len());
    out.put_slice(&prefix(id, kind));
    out.put_slice(body);
    out.freeze()
}

/// The message index array of Confluent's Protobuf wire format for the
/// message at `indexes` (a path through nested messages, the first
/// top-level message `[0]`): a zigzag varint count, then each index as a
/// zigzag varint — except `[0]`, the common case, written as the single
/// byte 0 (a count of zero).
pub fn message_indexes(indexes: &[i32], out: &mut Vec<u8>) {
    if indexes == [0] {
        out.push(0);
        return;
    }
    let zigzag = |out: &mut Vec<u8>, n: i64| {
        let mut z = ((n << 1) ^ (n >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8 & 0x7f) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    };
    zigzag(out, indexes.len() as i64);
    for &i in indexes {
        zigzag(out, i64::from(i));
    }
}

/// What goes before a body of `kind` with schema `id`: magic byte, id,
/// and for Protobuf the record's message index (`[0]`: walrelay writes the
/// record's message first in its file).
fn prefix(id: u32, kind: SchemaKind) -> Vec<u8> {
    let mut out = Vec::with_capacity(6);
    out.push(0);
    out.extend_from_slice(&id.to_be_bytes());
    if kind == SchemaKind::Protobuf {
        message_indexes(&[0], &mut out);
    }
    out
}

/// [`framed`], into `arena` (no allocation per record).
fn framed_in(arena: &mut Arena, id: u32, kind: SchemaKind, body: &[u8]) -> Bytes {
    let [a, b, c, d] = id.to_be_bytes();
    match kind {
        SchemaKind::Protobuf => arena.copy2(&[0, a, b, c, d, 0], body),
        SchemaKind::Avro | SchemaKind::Json => arena.copy2(&[0, a, b, c, d], body),
    }
}

/// Where the registry is: scheme, host, port and the base path of its API.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    /// `https://`.
    tls: bool,
    host: String,
    port: u16,
    /// Without a trailing `/` (`""` for the root).
    base: String,
}

impl Endpoint {
    fn parse(url: &str) -> Result<Endpoint, String> {
        let (tls, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (false, rest),
            (_, Some(rest)) => (true, rest),
            _ => return Err("the URL must start with http:// or https://".to_owned()),
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => (
                h,
                p.parse::<u16>()
                    .map_err(|_| format!("port {p:?} is not a number"))?,
            ),
            _ => (authority, if tls { 443 } else { 80 }),
        };
        if host.is_empty() {
            return Err("no host".to_owned());
        }
        Ok(Endpoint {
            tls,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
            base: path.trim_end_matches('/').to_owned(),
        })
    }
}

/// What a cached id is found by: the subject's topic and part, and the
/// schema's fingerprint; the entry holds the schema's text, compared on a
/// hit (by pointer first: records of one shape share it), so two schemas
/// of one fingerprint never share an id.
type CacheKey = (Arc<str>, bool, u64);

/// The client, shared by every session of the process (its cache with it).
pub struct Registry {
    url: String,
    endpoint: Endpoint,
    /// `https://`: the TLS client context (trust: `ssl_ca` or the system's).
    tls: Option<openssl::ssl::SslConnector>,
    /// `Basic …`, when basic auth is configured.
    authorization: Option<String>,
    strategy: SubjectNameStrategy,
    auto_register: bool,
    use_latest_version: bool,
    timeout: Duration,
    cache: Mutex<std::collections::HashMap<CacheKey, (Arc<str>, u32)>>,
    /// Where framed keys and values are copied (slices of shared chunks,
    /// as the routers' records are: no allocation per record).
    frames: Mutex<Arena>,
    metrics: Arc<Metrics>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("url", &self.url)
            .field("basic_auth", &self.authorization.is_some())
            .field("strategy", &self.strategy)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// A client for `config` (validated: an http:// URL), counting its
    /// requests and failures in `metrics`.
    pub fn new(config: &SchemaRegistryConfig, metrics: Arc<Metrics>) -> Result<Registry, String> {
        let endpoint = Endpoint::parse(&config.url)?;
        let authorization = match (&config.username, &config.password) {
            (Some(user), Some(password)) => {
                let mut token = Vec::new();
                crate::router::schema::base64_into(
                    format!("{user}:{}", password.expose_secret()).as_bytes(),
                    &mut token,
                );
                Some(format!("Basic {}", String::from_utf8_lossy(&token)))
            }
            _ => None,
        };
        let tls = if endpoint.tls {
            Some(tls_connector(config.ssl_ca.as_deref())?)
        } else {
            None
        };
        Ok(Registry {
            url: config.url.clone(),
            endpoint,
            tls,
            authorization,
            strategy: config.subject_name_strategy,
            auto_register: config.auto_register,
            use_latest_version: config.use_latest_version,
            timeout: config.request_timeout,
            cache: Mutex::default(),
            frames: Mutex::new(Arena::new(256 * 1024)),
            metrics,
        })
    }

    /// `record` framed in the wire format when it carries schemas, `None`
    /// when it does not (or is a tombstone with no key): sent as it is.
    pub async fn frame(&self, record: &Record) -> Result<Option<Record>, RegistryError> {
        let Some(schemas) = &record.schemas else {
            return Ok(None);
        };
        let key_id = match (&record.key, &schemas.key) {
            (Some(_), Some(schema)) => {
                Some((self.id(&record.topic, true, schema).await?, schema.kind))
            }
            _ => None,
        };
        let value_id = match &record.value {
            Some(_) => Some((
                self.id(&record.topic, false, &schemas.value).await?,
                schemas.value.kind,
            )),
            None => None,
        };
        let mut out = record.clone();
        {
            let mut frames = self
                .frames
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let (Some(key), Some((id, kind))) = (&record.key, key_id) {
                out.key = Some(framed_in(&mut frames, id, kind, key));
            }
            if let (Some(value), Some((id, kind))) = (&record.value, value_id) {
                out.value = Some(framed_in(&mut frames, id, kind, value));
            }
        }
        out.schemas = None;
        out.recount();
        Ok(Some(out))
    }

    /// The id of `schema` as the key or value schema of `topic`: cached, or
    /// asked for.
    async fn id(
        &self,
        topic: &Arc<str>,
        is_key: bool,
        schema: &Schema,
    ) -> Result<u32, RegistryError> {
        let key: CacheKey = (topic.clone(), is_key, schema.fingerprint);
        let cached = self.cache.lock().ok().and_then(|c| {
            c.get(&key)
                .filter(|(text, _)| Arc::ptr_eq(text, &schema.text) || **text == *schema.text)
                .map(|&(_, id)| id)
        });
        if let Some(id) = cached {
            return Ok(id);
        }
        let subject =
            subject(self.strategy, topic, is_key, schema.name.as_deref()).ok_or_else(|| {
                RegistryError::Unexpected {
                    subject: topic.to_string(),
                    what: "a record-name subject strategy for a schema that is no record".into(),
                }
            })?;
        let id = self.ask(&subject, schema).await?;
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(key, (schema.text.clone(), id));
        }
        tracing::info!(subject = %subject, id, "schema registry: schema id");
        Ok(id)
    }

    /// One request for the id of `schema` under `subject`, as configured.
    async fn ask(&self, subject: &str, schema: &Schema) -> Result<u32, RegistryError> {
        let path = format!("/subjects/{}", encode_path(subject));
        let answer = match self.register_or_look_up(&path, subject, schema).await {
            Err(e @ RegistryError::Refused { status: 500.., .. }) => {
                return Err(self.explain_server_error(&path, subject, schema, e).await);
            }
            answer => answer?,
        };
        let id = answer
            .get("id")
            .and_then(serde_json::Value::as_u64)
            .and_then(|id| u32::try_from(id).ok())
            .ok_or_else(|| RegistryError::Unexpected {
                subject: subject.to_owned(),
                what: "no schema id in the answer".into(),
            })?;
        if self.use_latest_version {
            let latest = answer.get("schema").and_then(serde_json::Value::as_str);
            let same = latest.is_some_and(|text| same_json(text, &schema.text));
            if !same {
                return Err(RegistryError::LatestDiffers {
                    subject: subject.to_owned(),
                    id,
                    ours: schema.text.to_string(),
                });
            }
        }
        Ok(id)
    }

    /// A server error answering for `subject`: [`RegistryError::OtherType`]
    /// when the subject's latest schema is of another type than `schema`
    /// (a definite error some registries answer with a 500), else `error`
    /// (transient) as it was.
    async fn explain_server_error(
        &self,
        path: &str,
        subject: &str,
        schema: &Schema,
        error: RegistryError,
    ) -> RegistryError {
        let Ok(latest) = self
            .call(
                Method::GET,
                &format!("{path}/versions/latest"),
                None,
                subject,
            )
            .await
        else {
            return error;
        };
        // Confluent's API leaves `schemaType` out for Avro.
        let held = latest
            .get("schemaType")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("AVRO")
            .to_ascii_uppercase();
        let ours = schema.kind.schema_type();
        if held == ours {
            return error;
        }
        RegistryError::OtherType {
            subject: subject.to_owned(),
            held,
            ours: ours.to_owned(),
            cause: error.to_string(),
        }
    }

    /// The request `ask` makes, as configured: the subject's latest version,
    /// a registration, or a look-up of `schema` under `subject`.
    async fn register_or_look_up(
        &self,
        path: &str,
        subject: &str,
        schema: &Schema,
    ) -> Result<serde_json::Value, RegistryError> {
        let body = || {
            let mut body = serde_json::json!({ "schema": &*schema.text });
            if schema.kind != SchemaKind::Avro {
                body["schemaType"] = schema.kind.schema_type().into();
            }
            body.to_string()
        };
        if self.use_latest_version {
            self.call(
                Method::GET,
                &format!("{path}/versions/latest"),
                None,
                subject,
            )
            .await
        } else if self.auto_register {
            self.call(
                Method::POST,
                &format!("{path}/versions"),
                Some(body()),
                subject,
            )
            .await
        } else {
            self.call(Method::POST, path, Some(body()), subject).await
        }
    }

    /// Reaches the registry and reads its global compatibility level
    /// (`GET /config`): what `walrelay check` reports.
    pub async fn probe(&self) -> Result<String, RegistryError> {
        let answer = self
            .call(Method::GET, "/config", None, "(global config)")
            .await?;
        Ok(answer
            .get("compatibilityLevel")
            .or_else(|| answer.get("compatibility"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or("unknown")
            .to_owned())
    }

    /// One HTTP request (a connection of its own: requests are rare), its
    /// JSON answer; counted, and failures classified.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
        subject: &str,
    ) -> Result<serde_json::Value, RegistryError> {
        self.metrics
            .schema_registry_requests
            .fetch_add(1, Ordering::Relaxed);
        let result = tokio::time::timeout(self.timeout, self.exchange(method, path, body))
            .await
            .unwrap_or_else(|_| {
                Err(Failed::Away(format!(
                    "no answer within {:?} (kafka.schema_registry.request_timeout)",
                    self.timeout
                )))
            });
        let result = match result {
            Err(Failed::Away(cause)) => Err(RegistryError::Unreachable {
                url: self.url.clone(),
                cause,
            }),
            Err(Failed::Untrusted(cause)) => Err(RegistryError::Untrusted {
                url: self.url.clone(),
                cause,
            }),
            Ok((status, bytes)) => {
                let json: Option<serde_json::Value> = serde_json::from_slice(&bytes).ok();
                if status.is_success() {
                    json.ok_or_else(|| RegistryError::Unexpected {
                        subject: subject.to_owned(),
                        what: format!("HTTP {status} with a body that is not JSON"),
                    })
                } else {
                    let field = |name: &str| json.as_ref().and_then(|j| j.get(name).cloned());
                    Err(RegistryError::Refused {
                        subject: subject.to_owned(),
                        status: status.as_u16(),
                        code: field("error_code").and_then(|c| c.as_i64()),
                        message: field("message")
                            .and_then(|m| m.as_str().map(str::to_owned))
                            .unwrap_or_else(|| {
                                String::from_utf8_lossy(&bytes[..bytes.len().min(500)]).into_owned()
                            }),
                    })
                }
            }
        };
        if result.is_err() {
            self.metrics
                .schema_registry_errors
                .fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<(StatusCode, Bytes), Failed> {
        let ep = &self.endpoint;
        let tcp = tokio::net::TcpStream::connect((ep.host.as_str(), ep.port))
            .await
            .map_err(|e| Failed::Away(format!("cannot connect to {}:{}: {e}", ep.host, ep.port)))?;
        let request = self.request(method, path, body).map_err(Failed::Away)?;
        match &self.tls {
            None => send(tcp, request).await.map_err(Failed::Away),
            Some(connector) => {
                let ssl = connector
                    .configure()
                    .and_then(|c| c.into_ssl(&ep.host))
                    .map_err(|e| Failed::Away(format!("TLS set-up: {e}")))?;
                let mut stream = tokio_openssl::SslStream::new(ssl, tcp)
                    .map_err(|e| Failed::Away(format!("TLS set-up: {e}")))?;
                std::pin::Pin::new(&mut stream)
                    .connect()
                    .await
                    .map_err(|e| {
                        let verify = stream.ssl().verify_result();
                        if verify == openssl::x509::X509VerifyResult::OK {
                            // The connection broke mid-handshake: worth retrying.
                            Failed::Away(format!("TLS handshake: {e}"))
                        } else {
                            Failed::Untrusted(format!(
                                "TLS handshake: the registry's certificate is not trusted ({})",
                                verify.error_string()
                            ))
                        }
                    })?;
                send(stream, request).await.map_err(Failed::Away)
            }
        }
    }

    /// The request for `path` under the API's base.
    fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<Request<Full<Bytes>>, String> {
        let ep = &self.endpoint;
        let host = if ep.port == if ep.tls { 443 } else { 80 } {
            ep.host.clone()
        } else {
            format!("{}:{}", ep.host, ep.port)
        };
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", ep.base))
            .header("host", host)
            .header("accept", CONTENT_TYPE)
            .header(
                "user-agent",
                concat!("walrelay/", env!("CARGO_PKG_VERSION")),
            );
        if body.is_some() {
            request = request.header("content-type", CONTENT_TYPE);
        }
        if let Some(auth) = &self.authorization {
            request = request.header("authorization", auth);
        }
        request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| format!("cannot build the request: {e}"))
    }
}

/// Why one exchange failed.
enum Failed {
    /// Not reached, broken off, no answer: transient.
    Away(String),
    /// The certificate check failed: definite.
    Untrusted(String),
}

/// Sends `request` over `stream` (one HTTP/1.1 exchange), the answer's
/// status and body.
async fn send<S>(stream: S, request: Request<Full<Bytes>>) -> Result<(StatusCode, Bytes), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    let driver = tokio::spawn(connection);
    let result = async {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let status = response.status();
        let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
            .to_bytes();
        Ok((status, bytes))
    }
    .await;
    driver.abort();
    result
}

/// The TLS client context: peer verification on, trusting `ca` (a PEM
/// file) or the system's default paths.
fn tls_connector(ca: Option<&std::path::Path>) -> Result<openssl::ssl::SslConnector, String> {
    use openssl::ssl::{SslConnector, SslMethod};
    let mut builder =
        SslConnector::builder(SslMethod::tls_client()).map_err(|e| format!("TLS context: {e}"))?;
    match ca {
        Some(ca) => builder
            .set_ca_file(ca)
            .map_err(|e| format!("kafka.schema_registry.ssl_ca {}: {e}", ca.display()))?,
        None => builder
            .set_default_verify_paths()
            .map_err(|e| format!("the system's trust store: {e}"))?,
    }
    Ok(builder.build())
}

/// A subject as one URL path segment (percent-encoded but for unreserved
/// characters).
fn encode_path(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether two schema texts are the same JSON (the registry may store a
/// schema re-formatted).
fn same_json(a: &str, b: &str) -> bool {
    match (
        serde_json::from_str::<serde_json::Value>(a),
        serde_json::from_str::<serde_json::Value>(b),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests;
