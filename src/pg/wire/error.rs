//! The connection's errors: [`WireError`] (I/O, protocol, authentication,
//! a server's error with its SQLSTATE, an oversized message) classified
//! transient or definite, and [`ServerError`], an `ErrorResponse` with its
//! fields. No password ever reaches their text.

use std::io;
use std::time::Duration;

use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::ErrorResponseBody;

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
    /// `postgres.capture_from` is a standby and no server of
    /// `postgres.standby_host` is one now (nor, for `"standby"`, answers).
    #[error(
        "none of the servers in postgres.standby_host is a hot standby that walrelay may capture \
         from now (waiting for one; with postgres.capture_from = \"standby\" a promoted one \
         will do, with \"standby_only\" it will not): {tried}"
    )]
    NoStandby { tried: String },
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
            | WireError::NoPrimary { .. }
            | WireError::NoStandby { .. } => true,
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

pub(super) fn server_error(context: &str, body: &ErrorResponseBody) -> WireError {
    WireError::Server {
        context: context.to_owned(),
        error: Box::new(ServerError::from_body(body)),
    }
}

/// The first words of a statement, at most 60 characters, for error context.
pub(super) fn first_words(sql: &str) -> String {
    let s = sql.split_whitespace().take(4).collect::<Vec<_>>().join(" ");
    // By characters: identifiers may be non-ASCII, and a byte cut could split one.
    s.chars().take(60).collect()
}

#[cfg(test)]
mod tests;
