//! `[postgres]` rules: host list, names PostgreSQL would truncate, the
//! slot name's syntax, TLS and client-certificate files (present, a key
//! that matches, not readable by others), timeouts and backoffs in range.
//!
//! Each rule pushes a [`Problem`] naming the key, what is wrong and the
//! fix; nothing stops at the first problem.

use humantime_serde::re::humantime::format_duration;

use super::{DurationRule, limits, private_key_problem};
use crate::config::error::{Problem, quoted};
use crate::config::schema::{PostgresConfig, SslMode};
use crate::config::template::{MAX_IDENTIFIER_BYTES, identifier};

/// A host, or a comma-separated list of them, at `key`.
fn hosts(key: &str, host: &str, out: &mut Vec<Problem>) {
    if host.contains("://") || host.contains('@') {
        // Not quoted: a connection string may hold a password, and this
        // value would reach logs, `check`, `/healthz` and `status`.
        out.push(Problem::new(
            key,
            "looks like a connection string or holds user info (\"postgres://user:password@host\" \
             or \"user@host\"), which may carry a password, so it is not repeated here; give the \
             host name only, and the rest in postgres.user, postgres.password (or \
             \"${file:/run/secrets/pg_password}\"), postgres.port and postgres.database",
        ));
    } else if host.trim().is_empty() {
        out.push(Problem::new(
            key,
            "is empty; set a host name, an IP address, or a Unix socket directory such as \
             \"/var/run/postgresql\"",
        ));
    } else if host.chars().any(char::is_whitespace) {
        out.push(Problem::new(
            key,
            format!(
                "{} contains whitespace; give one host name, IP address or socket directory, or \
                 several separated by commas without spaces (\"db-a,db-b:5433\")",
                quoted(host)
            ),
        ));
    } else if host.contains(',') {
        for entry in host.split(',') {
            let (name, port) = crate::config::units::split_host_port(entry);
            let bad_port = port.is_none() && name == entry && entry.matches(':').count() == 1;
            if entry.is_empty() || name.is_empty() || bad_port || port == Some(0) {
                out.push(Problem::new(
                    key,
                    format!(
                        "{} is not a list of servers: each entry is a host name, an IP address \
                         ([::1] with a port) or a socket directory, optionally with :port, e.g. \
                         \"db-a,db-b:5433\"",
                        quoted(host)
                    ),
                ));
                break;
            }
        }
    }
}

/// `capture_from`, `standby_host` and `standby_port` agree.
fn standby(pg: &PostgresConfig, out: &mut Vec<Problem>) {
    match (&pg.standby_host, pg.capture_from.from_standby()) {
        (Some(host), true) => hosts("postgres.standby_host", host, out),
        (None, true) => out.push(Problem::new(
            "postgres.standby_host",
            format!(
                "is required with postgres.capture_from = {}: set it to the hot standby that \
                 holds the slot (e.g. \"replica-1\"), or set capture_from = \"primary\"",
                quoted(pg.capture_from.as_str())
            ),
        )),
        (Some(_), false) => out.push(Problem::new(
            "postgres.standby_host",
            "is set but postgres.capture_from is \"primary\", so it would not be used: set \
             capture_from = \"standby\" to capture from that standby, or remove standby_host",
        )),
        (None, false) => {}
    }
    if pg.standby_port == Some(0) {
        out.push(Problem::new(
            "postgres.standby_port",
            "must be between 1 and 65535",
        ));
    } else if pg.standby_port.is_some() && pg.standby_host.is_none() {
        out.push(Problem::new(
            "postgres.standby_port",
            "is set without postgres.standby_host; set both, or neither",
        ));
    }
}

pub(super) fn postgres(pg: &PostgresConfig, out: &mut Vec<Problem>) {
    hosts("postgres.host", &pg.host, out);
    standby(pg, out);
    if pg.port == 0 {
        out.push(Problem::new("postgres.port", "must be between 1 and 65535"));
    }
    identifier("postgres.user", &pg.user, out);
    identifier("postgres.database", &pg.database, out);
    identifier("postgres.publication", &pg.publication, out);
    let slot_ok = (1..=MAX_IDENTIFIER_BYTES).contains(&pg.slot.len())
        && pg
            .slot
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !slot_ok {
        out.push(Problem::new(
            "postgres.slot",
            format!(
                "{} is not a valid replication slot name; PostgreSQL allows only lower-case \
                 letters, digits and '_', at most 63 characters (e.g. \"walrelay_orders\")",
                quoted(&pg.slot)
            ),
        ));
    }
    let positive = |key, value, max, example| DurationRule {
        key,
        value,
        zero_allowed: false,
        max,
        example,
    };
    for rule in [
        positive(
            "postgres.connect_timeout",
            pg.connect_timeout,
            limits::CONNECT_TIMEOUT,
            "10s",
        ),
        positive(
            "postgres.status_interval",
            pg.status_interval,
            limits::STATUS_INTERVAL,
            "1s",
        ),
        positive(
            "postgres.reconnect_backoff_initial",
            pg.reconnect_backoff_initial,
            limits::RECONNECT_BACKOFF,
            "500ms",
        ),
        positive(
            "postgres.reconnect_backoff_max",
            pg.reconnect_backoff_max,
            limits::RECONNECT_BACKOFF,
            "30s",
        ),
    ] {
        rule.check(out);
    }
    if pg.reconnect_backoff_initial > pg.reconnect_backoff_max {
        out.push(Problem::new(
            "postgres.reconnect_backoff_max",
            format!(
                "{} is less than reconnect_backoff_initial ({}); raise it or lower the initial backoff",
                format_duration(pg.reconnect_backoff_max),
                format_duration(pg.reconnect_backoff_initial),
            ),
        ));
    }
    if !(1..=limits::MAX_MESSAGE_SIZE).contains(&pg.max_message_size) {
        out.push(Problem::new(
            "postgres.max_message_size",
            format!(
                "must be greater than 0 and at most 1GiB, the largest message PostgreSQL can \
                 build (got {} bytes); e.g. \"64MiB\"",
                pg.max_message_size
            ),
        ));
    }
    if pg.stream_memory_limit > limits::MAX_STREAM_MEMORY {
        out.push(Problem::new(
            "postgres.stream_memory_limit",
            format!(
                "at most 64GiB (got {} bytes): what does not fit is held in \
                 postgres.stream_spill_dir; e.g. \"64MiB\"",
                pg.stream_memory_limit
            ),
        ));
    }
    if pg.sslmode == SslMode::VerifyCa && pg.sslrootcert.is_none() {
        // libpq refuses this too: the system store trusts every public CA,
        // and verify-ca checks no host name, so any certificate any public
        // CA issued for any host would pass.
        out.push(Problem::new(
            "postgres.sslmode",
            "\"verify-ca\" needs postgres.sslrootcert: without it the server is verified against \
             the system's trust store and no host name is checked, so any certificate a public CA \
             issued for any host would pass; set postgres.sslrootcert to the PEM file of the CA \
             that signed the server's certificate, or use sslmode = \"verify-full\" (which also \
             checks the host name)",
        ));
    }
    if let Some(path) = &pg.sslrootcert {
        if !pg.sslmode.verifies_certificate() {
            out.push(Problem::new(
                "postgres.sslrootcert",
                format!(
                    "is only used to verify the server with sslmode \"verify-ca\" or \
                     \"verify-full\", but sslmode is \"{}\"; set postgres.sslmode = \
                     \"verify-full\" or remove the key",
                    pg.sslmode.as_str()
                ),
            ));
        } else if !path.is_file() {
            out.push(Problem::new(
                "postgres.sslrootcert",
                format!(
                    "{} is not a readable file; give the path of the PEM file holding the CA \
                     certificate(s) that signed the server's certificate",
                    path.display()
                ),
            ));
        }
    }
    client_certificate(pg, out);
}

/// `postgres.sslcert`, `sslkey`, `sslpassword`: present together, over TLS,
/// files that exist. Whether the key matches the certificate and opens with
/// the password is checked where the PEM files are parsed (`pg::tls`).
fn client_certificate(pg: &PostgresConfig, out: &mut Vec<Problem>) {
    match (&pg.sslcert, &pg.sslkey) {
        (Some(_), None) => out.push(Problem::new(
            "postgres.sslkey",
            "is required with postgres.sslcert; give the path of the certificate's private key \
             (PEM)",
        )),
        (None, Some(_)) => out.push(Problem::new(
            "postgres.sslcert",
            "is required with postgres.sslkey; give the path of the client certificate (PEM) \
             that belongs to the key",
        )),
        _ => {}
    }
    if pg.sslpassword.is_some() && pg.sslkey.is_none() {
        out.push(Problem::new(
            "postgres.sslpassword",
            "is the password of an encrypted postgres.sslkey, but no sslkey is set; set \
             postgres.sslcert and postgres.sslkey, or remove the key",
        ));
    }
    for (key, path, what) in [
        ("postgres.sslcert", &pg.sslcert, "the client certificate"),
        (
            "postgres.sslkey",
            &pg.sslkey,
            "the client certificate's private key",
        ),
    ] {
        let Some(path) = path else { continue };
        if pg.sslmode == SslMode::Disable {
            out.push(Problem::new(
                key,
                "is only sent over TLS, but sslmode is \"disable\"; set postgres.sslmode = \
                 \"verify-full\" (or \"require\") or remove the key",
            ));
        } else if let Err(e) = std::fs::File::open(path) {
            out.push(Problem::new(
                key,
                format!(
                    "cannot read {}: {e}; give the path of the PEM file holding {what}",
                    path.display()
                ),
            ));
        } else if !path.is_file() {
            out.push(Problem::new(
                key,
                format!(
                    "{} is not a file; give the path of the PEM file holding {what}",
                    path.display()
                ),
            ));
        } else if key == "postgres.sslkey"
            && let Some(why) = private_key_problem(path)
        {
            out.push(Problem::new(key, why));
        }
    }
}
