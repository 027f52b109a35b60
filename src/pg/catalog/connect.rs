//! Opening an ordinary `tokio-postgres` session: TLS as configured, the
//! session settings every walrelay session runs with, a refused TLS or a
//! missing `CONNECT` grant explained, the connection driven by a task of
//! its own.

use secrecy::ExposeSecret;
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, NoTls};

use crate::pg::tls;
use crate::pg::wire::{ConnectParams, Target};

use super::error::CatalogError;
use crate::pg::tls::error_chain;

/// Connects a plain (non-replication) session.
pub async fn connect(params: &ConnectParams) -> Result<Client, CatalogError> {
    // The connection task runs on detached; it ends when the client is dropped.
    connect_owned(params).await.map(|(client, _task)| client)
}

/// [`connect`], also returning the task that drives the connection: it ends
/// when the connection does (closed by either side), and aborting it closes
/// the socket at once, even with a query still waiting in the server.
///
/// With a host list in `params.host`, the first server of it of the kind
/// `params.target` asks for, told by `pg_is_in_recovery()`, as the
/// replication connection chooses (see
/// [`crate::pg::wire::WireConnection::connect`]).
pub async fn connect_owned(
    params: &ConnectParams,
) -> Result<(Client, tokio::task::JoinHandle<()>), CatalogError> {
    if !params.is_host_list() && params.target != Target::Standby {
        return connect_one(params).await;
    }
    let mut tried = Vec::new();
    let mut fallback: Option<(Client, tokio::task::JoinHandle<()>)> = None;
    for target in params.targets() {
        match connect_one(&target).await {
            Ok((client, task)) => {
                let standby = in_recovery(&client).await?;
                match (params.target, standby) {
                    (Target::Primary, false) | (Target::PreferStandby | Target::Standby, true) => {
                        if let Some((_, other)) = fallback.take() {
                            other.abort();
                        }
                        return Ok((client, task));
                    }
                    (Target::Primary, true) => {
                        tried.push(format!("{}: a standby (in recovery)", target.address()));
                        task.abort();
                    }
                    (Target::PreferStandby | Target::Standby, false) => {
                        tried.push(format!("{}: not a standby", target.address()));
                        if fallback.is_none() && params.target == Target::PreferStandby {
                            fallback = Some((client, task));
                        } else {
                            task.abort();
                        }
                    }
                }
            }
            Err(e) if !e.is_transient() => return Err(e),
            Err(e) => tried.push(format!("{}: {e}", target.address())),
        }
    }
    let tried = tried.join("; ");
    match params.target {
        Target::Primary => Err(CatalogError::NoPrimary { tried }),
        Target::Standby => Err(CatalogError::NoStandby { tried }),
        Target::PreferStandby => fallback.ok_or(CatalogError::NoStandby { tried }),
    }
}

/// `pg_is_in_recovery()`: whether the server is a standby.
pub async fn in_recovery(client: &Client) -> Result<bool, CatalogError> {
    Ok(client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .map_err(|source| CatalogError::Query {
            context: "asking whether the server is a standby",
            source,
        })?
        .get::<_, bool>(0))
}

pub(super) async fn connect_one(
    params: &ConnectParams,
) -> Result<(Client, tokio::task::JoinHandle<()>), CatalogError> {
    let (client, task) = open_session(params).await?;
    if let Err(source) = client
        .batch_execute(crate::pg::wire::TRANSACTION_TIMEOUT_OFF)
        .await
    {
        task.abort();
        return Err(CatalogError::Query {
            context: "turning transaction_timeout off for walrelay's session",
            source,
        });
    }
    Ok((client, task))
}

/// Connects one server: settings, keepalives, TLS as `params` say.
pub(super) async fn open_session(
    params: &ConnectParams,
) -> Result<(Client, tokio::task::JoinHandle<()>), CatalogError> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.user(&params.user)
        .dbname(&params.database)
        .application_name(&params.application_name)
        .options(crate::pg::wire::session_options())
        .connect_timeout(params.connect_timeout)
        // The same dead-peer detection as the replication connection.
        .keepalives(true)
        .keepalives_idle(std::time::Duration::from_secs(30))
        .keepalives_interval(std::time::Duration::from_secs(10))
        .keepalives_retries(3)
        .tcp_user_timeout(std::time::Duration::from_secs(60));
    if params.host.starts_with('/') {
        cfg.host_path(&params.host);
    } else {
        cfg.host(&params.host);
    }
    cfg.port(params.port);
    if let Some(p) = &params.password {
        cfg.password(p.expose_secret());
    }
    let connect_error = |source: tokio_postgres::Error| {
        if tls::is_tls_refusal(&source) {
            CatalogError::Tls {
                address: params.address(),
                mode: params.tls.mode.as_str(),
                reason: format!(
                    "{}; {}",
                    error_chain(&source),
                    if params.tls.mode.verifies_certificate() {
                        "if the server's certificate was refused, check that postgres.sslrootcert \
                         holds the CA that signed it (and, with verify-full, that the certificate \
                         names postgres.host)"
                    } else {
                        "enable ssl on the server, or set postgres.sslmode = \"prefer\" to allow \
                         plaintext"
                    }
                ),
            }
        } else {
            let fix = missing_grant(&source, &params.user, &params.database)
                .map(|sql| {
                    format!(". What to do: run as a superuser (or the database owner): {sql}")
                })
                .unwrap_or_default();
            CatalogError::Connect {
                address: params.address(),
                source,
                fix,
            }
        }
    };
    // As in libpq (and our replication connection), no TLS on Unix sockets.
    let tls = if params.is_unix() {
        cfg.ssl_mode(SslMode::Disable);
        None
    } else {
        tls::tokio_postgres_tls(&mut cfg, &params.tls).map_err(|e| CatalogError::Tls {
            address: params.address(),
            mode: params.tls.mode.as_str(),
            reason: e.message,
        })?
    };
    let Some(tls) = tls else {
        let (client, connection) = cfg.connect(NoTls).await.map_err(connect_error)?;
        return Ok((client, spawn_connection(connection)));
    };
    let (client, connection) = cfg.connect(tls).await.map_err(connect_error)?;
    Ok((client, spawn_connection(connection)))
}

/// The statement that lets `user` in, when the server refused the login
/// for a missing privilege: `CONNECT` on the database, or the `LOGIN`
/// attribute.
pub(super) fn missing_grant(
    e: &tokio_postgres::Error,
    user: &str,
    database: &str,
) -> Option<String> {
    use postgres_protocol::escape::escape_identifier as ident;
    let db = e.as_db_error()?;
    match db.code().code() {
        "42501" if db.message().starts_with("permission denied for database") => Some(format!(
            "GRANT CONNECT ON DATABASE {} TO {};",
            ident(database),
            ident(user)
        )),
        "28000" if db.message().contains("not permitted to log in") => {
            Some(format!("ALTER ROLE {} LOGIN;", ident(user)))
        }
        _ => None,
    }
}

pub(super) fn spawn_connection<F>(connection: F) -> tokio::task::JoinHandle<()>
where
    F: std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "catalog connection ended");
        }
    })
}
