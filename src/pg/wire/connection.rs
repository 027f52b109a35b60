//! [`WireConnection`]: one authenticated connection, in replication mode or
//! not. Connect (each address in turn, within the connect timeout), the
//! startup packet with the session parameters, authentication (trust,
//! cleartext, MD5, SCRAM-SHA-256), the simple-query protocol, CopyBoth, and
//! cancel-safe reads: what is buffered is parsed first, else more is read
//! into the same buffer.

use std::path::PathBuf;

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{ChannelBinding, SCRAM_SHA_256, ScramSha256};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use secrecy::ExposeSecret;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use super::error::{WireError, first_words, server_error};
use super::frame::{Backend, parse_frame, unexpected};
use super::socket::{Socket, negotiate_tls, set_dead_peer_detection};
use super::{ConnectParams, SESSION_PARAMETERS, Target};

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

impl WireConnection {
    /// Connects, authenticates and waits for ReadyForQuery, all within the
    /// connect timeout. `replication` adds the `replication=database` startup
    /// parameter.
    /// Connects to `params.host`; with a host list, to the first server of
    /// it of the kind `params.target` asks for, told by its `in_hot_standby`
    /// parameter (which PostgreSQL 14+ reports at startup): not a standby,
    /// as libpq's `target_session_attrs=read-write` would; or a standby
    /// (`standby`), and failing that the first that answered
    /// (`prefer-standby`). A single host is taken as it is, unless only a
    /// standby will do. A definite error (refused credentials, TLS) ends the
    /// search: it would be the same elsewhere.
    pub async fn connect(params: &ConnectParams, replication: bool) -> Result<Self, WireError> {
        if !params.is_host_list() && params.target != Target::Standby {
            return Self::connect_one(params, replication).await;
        }
        let mut tried = Vec::new();
        let mut fallback = None;
        for target in params.targets() {
            match Self::connect_one(&target, replication).await {
                Ok(conn) => match (params.target, conn.in_hot_standby) {
                    (Target::Primary, false) | (Target::PreferStandby | Target::Standby, true) => {
                        return Ok(conn);
                    }
                    (Target::Primary, true) => {
                        tried.push(format!("{}: a hot standby", target.address()));
                    }
                    (Target::PreferStandby | Target::Standby, false) => {
                        tried.push(format!("{}: not a standby", target.address()));
                        if fallback.is_none() && params.target == Target::PreferStandby {
                            fallback = Some(conn);
                        }
                    }
                },
                Err(e) if !e.is_transient() => return Err(e),
                Err(e) => tried.push(format!("{}: {e}", target.address())),
            }
        }
        let tried = tried.join("; ");
        match params.target {
            Target::Primary => Err(WireError::NoPrimary { tried }),
            Target::Standby => Err(WireError::NoStandby { tried }),
            Target::PreferStandby => fallback.ok_or(WireError::NoStandby { tried }),
        }
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

/// "18.4" -> 180004, "14.12 (Debian …)" -> 140012, "9.6.3" -> 90603.
pub(super) fn parse_server_version(v: &str) -> u32 {
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
mod tests;
