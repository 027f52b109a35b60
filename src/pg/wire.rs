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
//!
//! Files by responsibility: `socket` TCP/Unix and TLS, `connection` the
//! connection (startup, authentication, simple query, CopyBoth), `frame`
//! backend message framing, `error` the errors. The session parameters
//! and [`ConnectParams`] are here.

mod connection;
mod error;
mod frame;
mod socket;

pub use connection::{Rows, WireConnection};

pub(crate) use error::is_transient_sqlstate;
pub use error::{ServerError, WireError};
pub use frame::Backend;

use std::time::Duration;

use secrecy::SecretString;

use super::tls::TlsSettings;

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
    /// Which server of a host list to take (a single host is taken as it
    /// is, unless only a standby will do).
    pub target: Target,
}

/// Which kind of server a connection wants: the first of the host list
/// that is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Target {
    /// A writable primary (libpq's `target_session_attrs=read-write`).
    #[default]
    Primary,
    /// A hot standby; failing that (a promoted one), the first server that answers.
    PreferStandby,
    /// A hot standby and nothing else.
    Standby,
}

impl ConnectParams {
    /// Whether `host` lists several servers (`db-a,db-b`): connections then
    /// go to the first one that is of the [`Target`] kind.
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

#[cfg(test)]
mod tests;
