//! The PostgreSQL connection parameters of a configuration, built from
//! `[postgres]`: [`connect_params`] for the primary (everything that
//! writes), [`capture_params`] for the server that holds the slot (the
//! replication connection, the slot's catalog rows, the snapshot's
//! readers) — the same parameters unless `capture_from` names a standby.
//!
//! Invariants:
//! - Every connection uses the same role, database, TLS settings and
//!   `application_name` (`walrelay-<connector.name>`, which
//!   `pg_stat_activity` shows); only the hosts and the kind of server
//!   wanted differ.
//! - An unusable TLS client set-up is refused when the configuration is
//!   loaded ([`check_tls_config`]), naming the key to fix, never the
//!   password.

use crate::config::{Config, ConfigError};

use super::tls::TlsSettings;
use super::wire::{ConnectParams, Target};
use crate::config::CaptureFrom;

/// The server that holds the slot: with `capture_from = "standby"` (or
/// `"standby_only"`) the first hot standby of `standby_host`; else the
/// primary's parameters.
pub fn capture_params(config: &Config) -> ConnectParams {
    let pg = &config.postgres;
    let mut params = connect_params(config);
    if let (Some(host), true) = (&pg.standby_host, pg.capture_from.from_standby()) {
        (params.host, params.port) = server(host, pg.standby_port.unwrap_or(pg.port));
        params.target = match pg.capture_from {
            CaptureFrom::StandbyOnly => Target::Standby,
            _ => Target::PreferStandby,
        };
    }
    params
}

/// The primary's connection parameters (with a host list, the first server
/// of it that is a writable primary).
pub fn connect_params(config: &Config) -> ConnectParams {
    let pg = &config.postgres;
    let (host, port) = server(&pg.host, pg.port);
    ConnectParams {
        host,
        port,
        user: pg.user.clone(),
        password: pg.password.clone(),
        database: pg.database.clone(),
        application_name: format!("walrelay-{}", config.connector.name),
        connect_timeout: pg.connect_timeout,
        max_message_size: usize::try_from(pg.max_message_size).unwrap_or(usize::MAX),
        tls: TlsSettings {
            mode: pg.sslmode,
            root_cert: pg.sslrootcert.clone(),
            client_cert: pg.sslcert.clone(),
            client_key: pg.sslkey.clone(),
            key_password: pg.sslpassword.clone(),
            keys: super::tls::TlsKeys::POSTGRES,
        },
        target: Target::Primary,
    }
}

/// `host` and the port for entries without one. A single server may carry
/// its port (`db:5433`), as an entry of a list does; a list is kept whole
/// (`ConnectParams::targets` splits it).
fn server(host: &str, port: u16) -> (String, u16) {
    match crate::config::split_host_port(host) {
        (name, Some(own)) if !host.contains(',') => (name.to_owned(), own),
        _ => (host.to_owned(), port),
    }
}

/// Builds the PostgreSQL TLS set-up once without connecting, so that `check`
/// and `run` refuse an unusable client certificate at start (exit code 2):
/// an unreadable `postgres.sslcert`, a `postgres.sslkey` that does not belong
/// to it, an encrypted key without (or with a wrong) `postgres.sslpassword`.
/// The error names the key to fix, never the password.
pub fn check_tls_config(config: &Config) -> Result<(), ConfigError> {
    let params = connect_params(config);
    if params.is_unix() {
        return Ok(()); // no TLS on Unix sockets, as in libpq
    }
    super::tls::connector(&params.tls)
        .map(drop)
        .map_err(|e| config.error_at(e.key.unwrap_or("postgres.sslmode"), e.message))
}

#[cfg(test)]
mod tests {
    use super::server;

    #[test]
    fn a_single_server_may_carry_its_port_and_a_list_is_kept_whole() {
        assert_eq!(server("db", 5432), ("db".into(), 5432));
        assert_eq!(server("db:5433", 5432), ("db".into(), 5433));
        assert_eq!(server("127.0.0.1:55418", 5432), ("127.0.0.1".into(), 55418));
        assert_eq!(server("[::1]:5433", 5432), ("::1".into(), 5433));
        assert_eq!(
            server("/var/run/postgresql", 5433),
            ("/var/run/postgresql".into(), 5433)
        );
        assert_eq!(server("a,b:5433", 5432), ("a,b:5433".into(), 5432));
    }
}
