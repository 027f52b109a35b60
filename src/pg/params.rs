//! The PostgreSQL connection parameters of a configuration: one
//! [`ConnectParams`] for both connections (`tokio-postgres` for ordinary SQL,
//! our own replication-mode connection), built from `[postgres]`.
//!
//! Invariants:
//! - Both connections use the same parameters: the same hosts, role, TLS
//!   settings and `application_name` (`walrelay-<connector.name>`, which
//!   `pg_stat_activity` shows).
//! - An unusable TLS client set-up is refused when the configuration is
//!   loaded ([`check_tls_config`]), naming the key to fix, never the
//!   password.

use crate::config::{Config, ConfigError};

use super::tls::TlsSettings;
use super::wire::ConnectParams;

/// Connection parameters for both PostgreSQL connections.
pub fn connect_params(config: &Config) -> ConnectParams {
    let pg = &config.postgres;
    ConnectParams {
        host: pg.host.clone(),
        port: pg.port,
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
