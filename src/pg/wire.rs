//! The frontend/backend wire protocol for our replication-mode connection.
//!
//! `tokio-postgres` cannot open a `replication=database` connection or speak
//! CopyBoth, so this module does it on top of `postgres-protocol`: it owns the
//! socket (TCP or Unix), the startup and authentication exchange (trust,
//! cleartext, MD5, SCRAM-SHA-256), the simple-query protocol, and CopyBoth
//! framing. It knows nothing about pgoutput or Kafka.
//!
//! Invariants:
//! - A backend message's declared length is checked against
//!   [`ConnectParams::max_message_size`] *before* any of it is buffered, so a
//!   hostile or broken server cannot make us allocate without bound.
//! - Reads are cancel-safe: [`WireConnection::read_message`] parses what is
//!   buffered, else reads more into the same buffer; dropping the future
//!   between reads loses nothing. The replication loop relies on this to
//!   `select!` between the socket and its status-update timer.
//! - CopyBothResponse (`'W'`), which `postgres_protocol` does not parse, is
//!   handled here; every other message goes through `Message::parse`.
//! - The password is only ever held as a [`SecretString`] and never appears in
//!   `Debug` output or error text.
//! - Every session walrelay opens (this one and the catalog connection) starts
//!   with [`SESSION_PARAMETERS`] in its startup packet. The server applies
//!   them as client settings, which outrank `ALTER ROLE … SET` and
//!   `ALTER DATABASE … SET` defaults, so those cannot change the text form of
//!   the values pgoutput sends (bytea in hex, timestamps in ISO) and break
//!   routing — nor can a role's `statement_timeout`,
//!   `idle_in_transaction_session_timeout` or `idle_session_timeout` cancel
//!   a long snapshot COPY or end the exporting connection while readers
//!   work. (`transaction_timeout`, PostgreSQL 17+, is unknown to older
//!   servers, so it cannot go in the startup packet:
//!   [`TRANSACTION_TIMEOUT_OFF`] turns it off right after connecting.)

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{ChannelBinding, SCRAM_SHA_256, ScramSha256};
use postgres_protocol::message::backend::{ErrorResponseBody, Message};
use postgres_protocol::message::frontend;
use secrecy::{ExposeSecret, SecretString};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use super::tls::{self, TlsSettings};

/// Settings every walrelay session starts with: the text formats the router
/// relies on (bytea as `\x…` hex, timestamptz as ISO in UTC), whatever the
/// role's or database's defaults say. In a logical replication session the
/// walsender formats pgoutput's text values with them.
pub const SESSION_PARAMETERS: &[(&str, &str)] = &[
    ("DateStyle", "ISO, MDY"),
    ("TimeZone", "UTC"),
    ("bytea_output", "hex"),
    ("IntervalStyle", "postgres"),
    ("extra_float_digits", "3"),
    // `money` as `$1,234.56` whatever the server's locale.
    ("lc_monetary", "C"),
    // Operator-written conditions (`pg::filter`) are checked under this
    // lexer rule: a backslash in '…' is an ordinary character.
    ("standard_conforming_strings", "on"),
    // A role's or database's timeouts must not cancel a snapshot's COPY,
    // end the replication connection idling in its exported snapshot's
    // transaction, or close an idle catalog connection.
    ("statement_timeout", "0"),
    ("lock_timeout", "0"),
    ("idle_in_transaction_session_timeout", "0"),
    ("idle_session_timeout", "0"),
];

/// Turns `transaction_timeout` (PostgreSQL 17+) off for the session, and
/// does nothing on older servers: one statement, run right after connecting
/// on every catalog session (the replication connection knows the server's
/// version from its startup and sets it directly). A role's `transaction_timeout` would
/// otherwise end the snapshot readers' long transaction.
pub const TRANSACTION_TIMEOUT_OFF: &str = "SELECT set_config('transaction_timeout', '0', false) \
     WHERE current_setting('server_version_num')::int >= 170000";

/// [`SESSION_PARAMETERS`] as a libpq-style `options` string
/// (`-c DateStyle=ISO,\ MDY -c …`) for connections made by `tokio-postgres`;
/// spaces and backslashes are escaped as the server's option splitter
/// expects.
pub fn session_options() -> String {
    let mut out = String::new();
    for (name, value) in SESSION_PARAMETERS {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str("-c ");
        for c in format!("{name}={value}").chars() {
            if c == ' ' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out
}

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct ConnectParams {
    /// Host name or IP, or an absolute directory holding the Unix socket.
    pub host: String,
    pub port: u16,
    pub user: String,
    /// Never printed: `SecretString`'s `Debug` is redacted.
    pub password: Option<SecretString>,
    pub database: String,
    pub application_name: String,
    pub connect_timeout: Duration,
    /// Largest backend message we accept, in bytes (header included).
    pub max_message_size: usize,
    /// `sslmode` and CA file (see [`super::tls`]).
    pub tls: TlsSettings,
}

impl ConnectParams {
    /// Whether `host` lists several servers (`db-a,db-b`): connections then
    /// go to the first one that is a writable primary.
    pub fn is_host_list(&self) -> bool {
        self.host.contains(',')
    }

    /// One set of parameters per server of `host`, in order: each entry a
    /// host name, an IP address (IPv6 in brackets when it carries a port),
    /// or a socket directory, optionally followed by `:port` (else `port`).
    /// A single host gives itself.
    pub fn targets(&self) -> Vec<ConnectParams> {
        self.host
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(|entry| {
                let (host, port) = crate::config::split_host_port(entry);
                ConnectParams {
                    host: host.to_owned(),
                    port: port.unwrap_or(self.port),
                    ..self.clone()
                }
            })
            .collect()
    }

    /// Human-readable address for logs and errors (no credentials).
    pub fn address(&self) -> String {
        if self.is_host_list() {
            return self
                .targets()
                .iter()
                .map(ConnectParams::address)
                .collect::<Vec<_>>()
                .join(",");
        }
        if self.is_unix() {
            format!("{}/.s.PGSQL.{}", self.host.trim_end_matches('/'), self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    pub fn is_unix(&self) -> bool {
        self.host.starts_with('/')
    }
}

/// An error reported by the server in an `ErrorResponse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    pub severity: String,
    /// SQLSTATE, e.g. `28P01` (invalid password) or `55006` (object in use).
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.severity, self.code, self.message)?;
        if let Some(d) = &self.detail {
            write!(f, " (detail: {d})")?;
        }
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

impl ServerError {
    pub(crate) fn from_body(body: &ErrorResponseBody) -> ServerError {
        let mut err = ServerError {
            severity: String::new(),
            code: String::new(),
            message: String::new(),
            detail: None,
            hint: None,
        };
        let mut fields = body.fields();
        while let Ok(Some(field)) = fields.next() {
            let value = String::from_utf8_lossy(field.value_bytes()).into_owned();
            match field.type_() {
                b'V' => err.severity = value,
                b'S' if err.severity.is_empty() => err.severity = value,
                b'C' => err.code = value,
                b'M' => err.message = value,
                b'D' => err.detail = Some(value),
                b'H' => err.hint = Some(value),
                _ => {}
            }
        }
        err
    }
}

/// Errors of the wire layer.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("cannot connect to PostgreSQL at {address}: {source}")]
    Connect { address: String, source: io::Error },
    #[error("timed out after {timeout:?} connecting to PostgreSQL at {address}")]
    ConnectTimeout { address: String, timeout: Duration },
    #[error("I/O error on the PostgreSQL connection while {context}: {source}")]
    Io {
        context: &'static str,
        source: io::Error,
    },
    #[error("PostgreSQL closed the connection while {context}")]
    Closed { context: &'static str },
    #[error("PostgreSQL error while {context}: {error}")]
    Server {
        context: String,
        error: Box<ServerError>,
    },
    #[error(
        "PostgreSQL sent a {len}-byte message (tag {tag:?}), over the {max}-byte limit; raise postgres.max_message_size if this is legitimate"
    )]
    MessageTooLarge { tag: char, len: usize, max: usize },
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// The replication connection went silent although we asked for replies:
    /// a half-open connection (peer or middlebox gone without closing it).
    #[error(
        "PostgreSQL sent nothing for {silent_for:.0?}, not even an answer to walrelay's keepalive \
         requests: the replication connection is presumed dead (a half-open TCP connection); \
         reconnecting"
    )]
    Silent { silent_for: Duration },
    #[error("authentication failed for user {user:?}: {reason}")]
    Auth { user: String, reason: String },
    /// `postgres.host` lists several servers and none is a writable primary
    /// now (during a failover: the old primary gone, the standby not yet
    /// promoted).
    #[error(
        "none of the servers in postgres.host is a writable primary (waiting for one to be \
         promoted): {tried}"
    )]
    NoPrimary { tried: String },
    /// TLS could not be set up or the server's certificate was refused.
    #[error("TLS to PostgreSQL at {address} (sslmode = {mode}): {reason}")]
    Tls {
        address: String,
        mode: &'static str,
        reason: String,
    },
}

impl WireError {
    /// Whether retrying (with backoff) may succeed without anyone changing anything.
    pub fn is_transient(&self) -> bool {
        match self {
            WireError::Connect { .. }
            | WireError::ConnectTimeout { .. }
            | WireError::Io { .. }
            | WireError::Closed { .. }
            | WireError::Silent { .. }
            | WireError::NoPrimary { .. } => true,
            WireError::Server { error, .. } => is_transient_sqlstate(&error.code),
            WireError::MessageTooLarge { .. }
            | WireError::Protocol(_)
            | WireError::Auth { .. }
            | WireError::Tls { .. } => false,
        }
    }

    /// The SQLSTATE when the server reported the error.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            WireError::Server { error, .. } => Some(&error.code),
            _ => None,
        }
    }
}

/// SQLSTATEs worth retrying: the server is starting or shutting down, too many
/// connections, the slot is (still) in use by a previous walsender, I/O errors.
pub(crate) fn is_transient_sqlstate(code: &str) -> bool {
    matches!(
        code,
        "57P01" | "57P02" | "57P03" | "53300" | "55006" | "08000" | "08003" | "08006" | "58030"
    ) || code.starts_with("08")
}

trait Socket: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Socket for T {}

/// Asks the server for TLS (SSLRequest) when `sslmode` wants it, and
/// returns the socket to speak the protocol on: encrypted, or plaintext when
/// the mode allows it (see [`super::tls`]).
async fn negotiate_tls(
    mut tcp: TcpStream,
    params: &ConnectParams,
) -> Result<Box<dyn Socket>, WireError> {
    let settings = &params.tls;
    let tls_error = |reason: String| WireError::Tls {
        address: params.address(),
        mode: settings.mode.as_str(),
        reason,
    };
    let Some(context) = tls::replication_context(settings).map_err(|e| tls_error(e.message))?
    else {
        return Ok(Box::new(tcp));
    };
    let io = |context| move |source| WireError::Io { context, source };
    let mut request = BytesMut::with_capacity(8);
    frontend::ssl_request(&mut request);
    tcp.write_all(&request)
        .await
        .map_err(io("asking for TLS"))?;
    let answer = tcp.read_u8().await.map_err(io("asking for TLS"))?;
    match answer {
        b'S' => {}
        b'N' if settings.mode.allows_plaintext() => return Ok(Box::new(tcp)),
        b'N' => {
            return Err(tls_error(
                "the server does not accept TLS connections; enable ssl on the server, or set \
                 postgres.sslmode = \"prefer\" to allow plaintext"
                    .into(),
            ));
        }
        other => {
            return Err(WireError::Protocol(format!(
                "unexpected answer {:?} to SSLRequest",
                other as char
            )));
        }
    }
    let ssl =
        tls::replication_ssl(&context, settings, &params.host).map_err(|e| tls_error(e.message))?;
    let mut stream = tokio_openssl::SslStream::new(ssl, tcp)
        .map_err(|e| tls_error(format!("cannot start the handshake: {e}")))?;
    match std::pin::Pin::new(&mut stream).connect().await {
        Ok(()) => Ok(Box::new(stream)),
        Err(e) => {
            let verify = stream.ssl().verify_result();
            match e.into_io_error() {
                // The connection broke mid-handshake: worth retrying.
                Ok(source) => Err(WireError::Io {
                    context: "the TLS handshake",
                    source,
                }),
                Err(e) => Err(tls_error(describe_handshake_error(&e, verify, settings))),
            }
        }
    }
}

/// Why a handshake failed, with what to do about a refused certificate.
fn describe_handshake_error(
    e: &openssl::ssl::Error,
    verify: openssl::x509::X509VerifyResult,
    settings: &TlsSettings,
) -> String {
    match (verify.as_raw() != 0).then_some(verify) {
        Some(result) => format!(
            "the server's certificate was refused: {} — {}",
            result.error_string(),
            if settings.mode.verifies_host_name() {
                "check that postgres.sslrootcert holds the CA that signed it and that the \
                 certificate names postgres.host"
            } else {
                "check that postgres.sslrootcert holds the CA that signed it"
            }
        ),
        None => format!("the TLS handshake failed: {e}"),
    }
}

/// What a simple query returned: rows of text columns (NULL = `None`).
pub type Rows = Vec<Vec<Option<String>>>;

/// One authenticated connection in replication mode.
pub struct WireConnection {
    socket: Box<dyn Socket>,
    read_buf: BytesMut,
    write_buf: BytesMut,
    max_message_size: usize,
    server_version_num: u32,
    /// The server said `in_hot_standby = on` at startup (a standby).
    in_hot_standby: bool,
}

impl std::fmt::Debug for WireConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireConnection")
            .field("server_version_num", &self.server_version_num)
            .finish_non_exhaustive()
    }
}

/// A backend message, or the CopyBothResponse that `postgres_protocol` lacks.
pub enum Backend {
    CopyBothResponse,
    Message(Message),
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::CopyBothResponse => f.write_str("CopyBothResponse"),
            Backend::Message(m) => f.write_str(message_name(m)),
        }
    }
}

/// TCP keepalives (probe after 30 s idle, every 10 s, 3 tries) and a 60 s
/// TCP user timeout (unacknowledged data): the kernel's own ways to notice a
/// peer that vanished without closing the connection, beside the relay's
/// receive timeout. Best effort: a platform without them keeps the defaults.
fn set_dead_peer_detection(s: &TcpStream) {
    let socket = socket2::SockRef::from(s);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(30))
        .with_interval(Duration::from_secs(10))
        .with_retries(3);
    if let Err(e) = socket.set_tcp_keepalive(&keepalive) {
        tracing::debug!(error = %e, "cannot enable TCP keepalives");
    }
    if let Err(e) = socket.set_tcp_user_timeout(Some(Duration::from_secs(60))) {
        tracing::debug!(error = %e, "cannot set the TCP user timeout");
    }
}

impl WireConnection {
    /// Connects, authenticates and waits for ReadyForQuery, all within the
    /// connect timeout. `replication` adds the `replication=database` startup
    /// parameter.
    /// Connects to `params.host`; with a host list, to the first server of
    /// it that is not a hot standby (its `in_hot_standby` parameter, which
    /// PostgreSQL 14+ reports at startup), as libpq's
    /// `target_session_attrs=read-write` would. A definite error (refused
    /// credentials, TLS) ends the search: it would be the same elsewhere.
    pub async fn connect(params: &ConnectParams, replication: bool) -> Result<Self, WireError> {
        if !params.is_host_list() {
            return Self::connect_one(params, replication).await;
        }
        let mut tried = Vec::new();
        for target in params.targets() {
            match Self::connect_one(&target, replication).await {
                Ok(conn) if !conn.in_hot_standby => return Ok(conn),
                Ok(_) => tried.push(format!("{}: a hot standby", target.address())),
                Err(e) if !e.is_transient() => return Err(e),
                Err(e) => tried.push(format!("{}: {e}", target.address())),
            }
        }
        Err(WireError::NoPrimary {
            tried: tried.join("; "),
        })
    }

    async fn connect_one(params: &ConnectParams, replication: bool) -> Result<Self, WireError> {
        let address = params.address();
        match tokio::time::timeout(
            params.connect_timeout,
            Self::connect_inner(params, replication),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => Err(WireError::ConnectTimeout {
                address,
                timeout: params.connect_timeout,
            }),
        }
    }

    async fn connect_inner(params: &ConnectParams, replication: bool) -> Result<Self, WireError> {
        let address = params.address();
        let socket: Box<dyn Socket> = if params.is_unix() {
            let path = PathBuf::from(&address);
            let s = UnixStream::connect(&path)
                .await
                .map_err(|source| WireError::Connect {
                    address: address.clone(),
                    source,
                })?;
            Box::new(s)
        } else {
            let s = TcpStream::connect((params.host.as_str(), params.port))
                .await
                .map_err(|source| WireError::Connect {
                    address: address.clone(),
                    source,
                })?;
            // Status updates are tiny and latency matters more than packet count.
            let _ = s.set_nodelay(true);
            set_dead_peer_detection(&s);
            negotiate_tls(s, params).await?
        };
        let mut conn = WireConnection {
            socket,
            read_buf: BytesMut::with_capacity(64 * 1024),
            write_buf: BytesMut::with_capacity(1024),
            max_message_size: params.max_message_size.max(64 * 1024),
            server_version_num: 0,
            in_hot_standby: false,
        };
        conn.startup(params, replication).await?;
        if conn.server_version_num >= 170000 {
            conn.simple_query("SET transaction_timeout = 0").await?;
        }
        Ok(conn)
    }

    /// Server version as `server_version_num` (e.g. 180004), parsed from the
    /// `server_version` parameter status.
    pub fn server_version_num(&self) -> u32 {
        self.server_version_num
    }

    async fn startup(
        &mut self,
        params: &ConnectParams,
        replication: bool,
    ) -> Result<(), WireError> {
        let mut startup: Vec<(&str, &str)> = vec![
            ("user", params.user.as_str()),
            ("database", params.database.as_str()),
            ("application_name", params.application_name.as_str()),
            ("client_encoding", "UTF8"),
        ];
        startup.extend_from_slice(SESSION_PARAMETERS);
        if replication {
            startup.push(("replication", "database"));
        }
        frontend::startup_message(startup.iter().copied(), &mut self.write_buf)
            .map_err(|e| WireError::Protocol(format!("cannot encode startup message: {e}")))?;
        self.flush("sending the startup message").await?;
        self.authenticate(params).await?;
        loop {
            match self.read_message("finishing startup").await? {
                Backend::Message(Message::ParameterStatus(body)) => {
                    match (body.name(), body.value()) {
                        (Ok("server_version"), Ok(value)) => {
                            self.server_version_num = parse_server_version(value);
                        }
                        (Ok("in_hot_standby"), Ok(value)) => self.in_hot_standby = value == "on",
                        _ => {}
                    }
                }
                Backend::Message(Message::BackendKeyData(_)) => {}
                Backend::Message(Message::NoticeResponse(_)) => {}
                Backend::Message(Message::ReadyForQuery(_)) => return Ok(()),
                Backend::Message(Message::ErrorResponse(body)) => {
                    return Err(server_error("finishing startup", &body));
                }
                other => return Err(unexpected("finishing startup", &other)),
            }
        }
    }

    async fn authenticate(&mut self, params: &ConnectParams) -> Result<(), WireError> {
        let auth_err = |reason: String| WireError::Auth {
            user: params.user.clone(),
            reason,
        };
        let password = || {
            params
                .password
                .as_ref()
                .map(|p| p.expose_secret().as_bytes())
                .ok_or_else(|| {
                    auth_err(
                    "the server asks for a password but none is configured (set postgres.password)"
                        .into(),
                )
                })
        };
        match self.read_message("authenticating").await? {
            Backend::Message(Message::AuthenticationOk) => return Ok(()),
            Backend::Message(Message::AuthenticationCleartextPassword) => {
                frontend::password_message(password()?, &mut self.write_buf)
                    .map_err(|e| auth_err(format!("cannot encode password message: {e}")))?;
                self.flush("sending the password").await?;
            }
            Backend::Message(Message::AuthenticationMd5Password(body)) => {
                let hash = md5_hash(params.user.as_bytes(), password()?, body.salt());
                frontend::password_message(hash.as_bytes(), &mut self.write_buf)
                    .map_err(|e| auth_err(format!("cannot encode password message: {e}")))?;
                self.flush("sending the password").await?;
            }
            Backend::Message(Message::AuthenticationSasl(body)) => {
                let mut mechanisms = body.mechanisms();
                let mut has_scram = false;
                while let Ok(Some(m)) = mechanisms.next() {
                    has_scram |= m == SCRAM_SHA_256;
                }
                if !has_scram {
                    return Err(auth_err(
                        "the server offers no SASL mechanism we support (need SCRAM-SHA-256)"
                            .into(),
                    ));
                }
                // No TLS yet, so no channel binding to offer.
                let mut scram = ScramSha256::new(password()?, ChannelBinding::unsupported());
                frontend::sasl_initial_response(
                    SCRAM_SHA_256,
                    scram.message(),
                    &mut self.write_buf,
                )
                .map_err(|e| auth_err(format!("cannot encode SASL response: {e}")))?;
                self.flush("sending the SCRAM first message").await?;
                match self.read_message("authenticating (SCRAM)").await? {
                    Backend::Message(Message::AuthenticationSaslContinue(body)) => {
                        scram
                            .update(body.data())
                            .map_err(|e| auth_err(format!("SCRAM exchange failed: {e}")))?;
                    }
                    Backend::Message(Message::ErrorResponse(body)) => {
                        return Err(server_error("authenticating", &body));
                    }
                    other => return Err(unexpected("authenticating (SCRAM)", &other)),
                }
                frontend::sasl_response(scram.message(), &mut self.write_buf)
                    .map_err(|e| auth_err(format!("cannot encode SASL response: {e}")))?;
                self.flush("sending the SCRAM final message").await?;
                match self.read_message("authenticating (SCRAM)").await? {
                    Backend::Message(Message::AuthenticationSaslFinal(body)) => {
                        scram.finish(body.data()).map_err(|e| {
                            auth_err(format!("server signature did not verify: {e}"))
                        })?;
                    }
                    Backend::Message(Message::ErrorResponse(body)) => {
                        return Err(server_error("authenticating", &body));
                    }
                    other => return Err(unexpected("authenticating (SCRAM)", &other)),
                }
            }
            Backend::Message(Message::ErrorResponse(body)) => {
                return Err(server_error("authenticating", &body));
            }
            Backend::Message(
                Message::AuthenticationGss
                | Message::AuthenticationKerberosV5
                | Message::AuthenticationSspi
                | Message::AuthenticationScmCredential,
            ) => {
                return Err(auth_err(
                    "the server requires GSSAPI/SSPI/Kerberos, which walrelay does not support; \
                     use scram-sha-256 in pg_hba.conf"
                        .into(),
                ));
            }
            other => return Err(unexpected("authenticating", &other)),
        }
        match self.read_message("authenticating").await? {
            Backend::Message(Message::AuthenticationOk) => Ok(()),
            Backend::Message(Message::ErrorResponse(body)) => {
                Err(server_error("authenticating", &body))
            }
            other => Err(unexpected("authenticating", &other)),
        }
    }

    /// Runs one statement with the simple-query protocol and returns its rows
    /// as text. Errors from the server are returned after ReadyForQuery, so
    /// the connection stays usable.
    pub async fn simple_query(&mut self, sql: &str) -> Result<Rows, WireError> {
        frontend::query(sql, &mut self.write_buf)
            .map_err(|e| WireError::Protocol(format!("cannot encode query: {e}")))?;
        self.flush("sending a query").await?;
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            match self.read_message("reading a query result").await? {
                Backend::Message(Message::DataRow(body)) => {
                    let buf = body.buffer();
                    let mut ranges = body.ranges();
                    let mut row = Vec::new();
                    while let Some(range) = ranges
                        .next()
                        .map_err(|e| WireError::Protocol(format!("malformed DataRow: {e}")))?
                    {
                        row.push(range.map(|r| String::from_utf8_lossy(&buf[r]).into_owned()));
                    }
                    rows.push(row);
                }
                Backend::Message(
                    Message::RowDescription(_)
                    | Message::CommandComplete(_)
                    | Message::EmptyQueryResponse
                    | Message::NoticeResponse(_)
                    | Message::ParameterStatus(_),
                ) => {}
                Backend::Message(Message::ErrorResponse(body)) => {
                    error = Some(server_error(
                        &format!("running `{}`", first_words(sql)),
                        &body,
                    ));
                }
                Backend::Message(Message::ReadyForQuery(_)) => {
                    return match error {
                        Some(e) => Err(e),
                        None => Ok(rows),
                    };
                }
                other => return Err(unexpected("reading a query result", &other)),
            }
        }
    }

    /// Sends a query that starts a COPY BOTH sub-protocol (START_REPLICATION)
    /// and waits for the CopyBothResponse.
    pub async fn start_copy_both(&mut self, sql: &str) -> Result<(), WireError> {
        frontend::query(sql, &mut self.write_buf)
            .map_err(|e| WireError::Protocol(format!("cannot encode query: {e}")))?;
        self.flush("sending START_REPLICATION").await?;
        loop {
            match self.read_message("starting replication").await? {
                Backend::CopyBothResponse => return Ok(()),
                Backend::Message(Message::NoticeResponse(_) | Message::ParameterStatus(_)) => {}
                Backend::Message(Message::ErrorResponse(body)) => {
                    let err = server_error("starting replication", &body);
                    // Drain to ReadyForQuery so the connection could be reused.
                    let _ = self.drain_until_ready().await;
                    return Err(err);
                }
                other => return Err(unexpected("starting replication", &other)),
            }
        }
    }

    async fn drain_until_ready(&mut self) -> Result<(), WireError> {
        loop {
            if let Backend::Message(Message::ReadyForQuery(_)) =
                self.read_message("draining after an error").await?
            {
                return Ok(());
            }
        }
    }

    /// Queues a CopyData message; it is sent by the next [`Self::flush`].
    pub fn queue_copy_data(&mut self, payload: &[u8]) -> Result<(), WireError> {
        frontend::CopyData::new(payload)
            .map_err(|e| WireError::Protocol(format!("cannot encode CopyData: {e}")))?
            .write(&mut self.write_buf);
        Ok(())
    }

    /// Queues CopyDone, ending our half of COPY BOTH.
    pub fn queue_copy_done(&mut self) {
        frontend::copy_done(&mut self.write_buf);
    }

    /// Queues Terminate.
    pub fn queue_terminate(&mut self) {
        frontend::terminate(&mut self.write_buf);
    }

    /// Writes everything queued.
    pub async fn flush(&mut self, context: &'static str) -> Result<(), WireError> {
        if self.write_buf.is_empty() {
            return Ok(());
        }
        self.socket
            .write_all(&self.write_buf)
            .await
            .map_err(|source| WireError::Io { context, source })?;
        self.write_buf.clear();
        self.socket
            .flush()
            .await
            .map_err(|source| WireError::Io { context, source })
    }

    /// Reads the next backend message. Cancel-safe (see the module doc).
    pub async fn read_message(&mut self, context: &'static str) -> Result<Backend, WireError> {
        loop {
            if let Some(msg) = self.parse_buffered()? {
                return Ok(msg);
            }
            let n = self
                .socket
                .read_buf(&mut self.read_buf)
                .await
                .map_err(|source| WireError::Io { context, source })?;
            if n == 0 {
                return Err(WireError::Closed { context });
            }
        }
    }

    /// The next backend message if it is already buffered (no I/O);
    /// `Ok(None)` when reading it would need the socket.
    pub fn try_read_message(&mut self) -> Result<Option<Backend>, WireError> {
        self.parse_buffered()
    }

    /// Parses one complete message from the read buffer, if there is one.
    fn parse_buffered(&mut self) -> Result<Option<Backend>, WireError> {
        parse_frame(&mut self.read_buf, self.max_message_size)
    }
}

/// Frame parser shared by the connection and its tests: checks the size limit
/// before buffering, handles `'W'` itself and hands the rest to
/// `Message::parse`.
fn parse_frame(buf: &mut BytesMut, max: usize) -> Result<Option<Backend>, WireError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let tag = buf[0];
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if len < 4 {
        return Err(WireError::Protocol(format!(
            "backend message {:?} declares length {len}, below the 4-byte minimum",
            tag as char
        )));
    }
    let total = len + 1;
    if total > max {
        return Err(WireError::MessageTooLarge {
            tag: tag as char,
            len: total,
            max,
        });
    }
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    if tag == b'W' {
        // CopyBothResponse: format i8, column count i16, formats i16 each.
        // We only need to know it arrived.
        buf.advance(total);
        return Ok(Some(Backend::CopyBothResponse));
    }
    match Message::parse(buf) {
        Ok(Some(msg)) => Ok(Some(Backend::Message(msg))),
        Ok(None) => Ok(None),
        Err(e) => Err(WireError::Protocol(format!(
            "cannot parse backend message {:?}: {e}",
            tag as char
        ))),
    }
}

fn server_error(context: &str, body: &ErrorResponseBody) -> WireError {
    WireError::Server {
        context: context.to_owned(),
        error: Box::new(ServerError::from_body(body)),
    }
}

fn unexpected(context: &str, msg: &Backend) -> WireError {
    let name = match msg {
        Backend::CopyBothResponse => "CopyBothResponse",
        Backend::Message(m) => message_name(m),
    };
    WireError::Protocol(format!("unexpected {name} while {context}"))
}

fn message_name(m: &Message) -> &'static str {
    match m {
        Message::AuthenticationOk => "AuthenticationOk",
        Message::CopyData(_) => "CopyData",
        Message::CopyDone => "CopyDone",
        Message::CommandComplete(_) => "CommandComplete",
        Message::DataRow(_) => "DataRow",
        Message::ErrorResponse(_) => "ErrorResponse",
        Message::ReadyForQuery(_) => "ReadyForQuery",
        Message::RowDescription(_) => "RowDescription",
        Message::CopyInResponse(_) => "CopyInResponse",
        Message::CopyOutResponse(_) => "CopyOutResponse",
        _ => "backend message",
    }
}

/// The first words of a statement, at most 60 characters, for error context.
fn first_words(sql: &str) -> String {
    let s = sql.split_whitespace().take(4).collect::<Vec<_>>().join(" ");
    // By characters: identifiers may be non-ASCII, and a byte cut could split one.
    s.chars().take(60).collect()
}

/// "18.4" -> 180004, "14.12 (Debian …)" -> 140012, "9.6.3" -> 90603.
fn parse_server_version(v: &str) -> u32 {
    let numeric: String = v
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let parts: Vec<u32> = numeric.split('.').filter_map(|p| p.parse().ok()).collect();
    match parts.as_slice() {
        [major, minor, ..] if *major >= 10 => major * 10000 + minor,
        [major] if *major >= 10 => major * 10000,
        [major, minor, patch, ..] => major * 10000 + minor * 100 + patch,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn session_options_escape_spaces_for_the_server() {
        let options = session_options();
        assert!(
            options.starts_with(r"-c DateStyle=ISO,\ MDY -c TimeZone=UTC -c bytea_output=hex"),
            "{options}"
        );
        assert_eq!(options.matches("-c ").count(), SESSION_PARAMETERS.len());
    }

    #[test]
    fn error_context_cuts_long_statements_by_characters() {
        let sql = format!("SELECT {} FROM t", "é".repeat(100));
        let words = first_words(&sql);
        assert_eq!(words.chars().count(), 60);
        assert!(words.starts_with("SELECT éé"));
    }

    #[test]
    fn server_versions() {
        assert_eq!(parse_server_version("18.4"), 180004);
        assert_eq!(parse_server_version("14.12 (Debian 14.12-1)"), 140012);
        assert_eq!(parse_server_version("17devel"), 170000);
        assert_eq!(parse_server_version("9.6.3"), 90603);
        assert_eq!(parse_server_version("garbage"), 0);
    }

    #[test]
    fn parses_copy_both_and_waits_for_partial_frames() {
        let bytes = frame(b'W', &[0, 0, 0]);
        let mut buf = BytesMut::new();
        for (i, b) in bytes.iter().enumerate() {
            buf.extend_from_slice(&[*b]);
            let r = parse_frame(&mut buf, 1024).expect("no error");
            assert_eq!(r.is_some(), i == bytes.len() - 1, "at byte {i}");
        }
        assert!(buf.is_empty());
    }

    #[test]
    fn copy_data_is_handed_to_postgres_protocol() {
        let mut buf = BytesMut::from(&frame(b'd', b"wxyz")[..]);
        match parse_frame(&mut buf, 1024) {
            Ok(Some(Backend::Message(Message::CopyData(body)))) => {
                assert_eq!(body.data(), b"wxyz")
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn rejects_oversized_message_before_buffering() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[b'd', 0x7f, 0xff, 0xff, 0xff]);
        match parse_frame(&mut buf, 1 << 20) {
            Err(WireError::MessageTooLarge { tag: 'd', max, .. }) => assert_eq!(max, 1 << 20),
            other => panic!("unexpected {other:?}"),
        }
        assert!(
            buf.capacity() < 1 << 20,
            "buffer grew to {}",
            buf.capacity()
        );
    }

    #[test]
    fn rejects_impossible_length() {
        let mut buf = BytesMut::from(&[b'd', 0, 0, 0, 2][..]);
        assert!(matches!(
            parse_frame(&mut buf, 1024),
            Err(WireError::Protocol(_))
        ));
    }

    #[test]
    fn unknown_tag_is_an_error_not_a_panic() {
        let mut buf = BytesMut::from(&frame(b'?', b"")[..]);
        assert!(matches!(
            parse_frame(&mut buf, 1024),
            Err(WireError::Protocol(_))
        ));
    }

    #[test]
    fn transient_classification() {
        let server = |code: &str| WireError::Server {
            context: "x".into(),
            error: Box::new(ServerError {
                severity: "ERROR".into(),
                code: code.into(),
                message: "m".into(),
                detail: None,
                hint: None,
            }),
        };
        assert!(
            server("55006").is_transient(),
            "slot in use by a dying walsender"
        );
        assert!(server("57P01").is_transient(), "admin shutdown");
        assert!(!server("28P01").is_transient(), "bad password");
        assert!(!server("42704").is_transient(), "slot does not exist");
        assert!(WireError::Closed { context: "x" }.is_transient());
    }

    #[test]
    fn debug_does_not_show_password() {
        let p = ConnectParams {
            host: "h".into(),
            port: 1,
            user: "u".into(),
            password: Some(SecretString::from("hunter2-secret")),
            database: "d".into(),
            application_name: "a".into(),
            connect_timeout: Duration::from_secs(1),
            max_message_size: 1,
            tls: TlsSettings::default(),
        };
        assert!(!format!("{p:?}").contains("hunter2"));
    }
}
