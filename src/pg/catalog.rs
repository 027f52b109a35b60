//! Ordinary SQL against the source database, through `tokio-postgres`:
//! slot state, server settings, publication and outbox-table checks.
//!
//! Nothing here streams; it answers "what does the server look like" for the
//! relay's start-up checks and for `walrelay check`.

use postgres_openssl::MakeTlsConnector;
use secrecy::ExposeSecret;
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, NoTls};

use crate::Lsn;
use crate::pg::tls;
use crate::pg::wire::ConnectParams;

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("cannot connect to PostgreSQL at {address} for catalog queries: {source}")]
    Connect {
        address: String,
        source: tokio_postgres::Error,
    },
    #[error("catalog query failed while {context}: {source}")]
    Query {
        context: &'static str,
        source: tokio_postgres::Error,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("TLS to PostgreSQL at {address} for catalog queries (sslmode = {mode}): {reason}")]
    Tls {
        address: String,
        mode: &'static str,
        reason: String,
    },
}

impl CatalogError {
    pub fn is_transient(&self) -> bool {
        match self {
            CatalogError::Connect { .. } => true,
            // A refused certificate, or a server that will not do TLS when
            // sslmode requires it, stays that way until someone acts.
            CatalogError::Tls { .. } => false,
            CatalogError::Query { source, .. } => source.is_closed() || source.code().is_none(),
            CatalogError::Invalid(_) => false,
        }
    }
}

/// A row of `pg_replication_slots`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotState {
    pub plugin: Option<String>,
    pub slot_type: String,
    pub database: Option<String>,
    pub active_pid: Option<i32>,
    pub restart_lsn: Option<Lsn>,
    pub confirmed_flush_lsn: Option<Lsn>,
    pub wal_status: Option<String>,
}

/// Connects a plain (non-replication) session.
pub async fn connect(params: &ConnectParams) -> Result<Client, CatalogError> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.user(&params.user)
        .dbname(&params.database)
        .application_name(&params.application_name)
        .options(crate::pg::wire::session_options())
        .connect_timeout(params.connect_timeout);
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
        if is_tls_refusal(&source) {
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
            CatalogError::Connect {
                address: params.address(),
                source,
            }
        }
    };
    // As in libpq (and our replication connection), no TLS on Unix sockets.
    let connector = if params.is_unix() {
        None
    } else {
        tls::connector(&params.tls).map_err(|e| CatalogError::Tls {
            address: params.address(),
            mode: params.tls.mode.as_str(),
            reason: e.0,
        })?
    };
    let Some(connector) = connector else {
        cfg.ssl_mode(SslMode::Disable);
        let (client, connection) = cfg.connect(NoTls).await.map_err(connect_error)?;
        spawn_connection(connection);
        return Ok(client);
    };
    cfg.ssl_mode(if params.tls.mode.allows_plaintext() {
        SslMode::Prefer
    } else {
        SslMode::Require
    });
    let mut tls = MakeTlsConnector::new(connector);
    let verify_host_name = params.tls.mode.verifies_host_name();
    tls.set_callback(move |config, _domain| {
        config.set_verify_hostname(verify_host_name);
        Ok(())
    });
    let (client, connection) = cfg.connect(tls).await.map_err(connect_error)?;
    spawn_connection(connection);
    Ok(client)
}

/// Whether tokio-postgres failed the TLS negotiation itself (its message for
/// that error kind), as opposed to the network failing underneath it.
fn is_tls_refusal(e: &tokio_postgres::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut io_failure = false;
    while let Some(c) = cause {
        io_failure |= c.downcast_ref::<std::io::Error>().is_some_and(|io| {
            io.get_ref().is_none() // a plain OS error, not a wrapped TLS error
        });
        cause = c.source();
    }
    e.to_string().starts_with("error performing TLS handshake") && !io_failure
}

/// `e` and its causes, `: `-separated (tokio-postgres prints only the first).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

fn spawn_connection<F>(connection: F)
where
    F: std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "catalog connection ended");
        }
    });
}

fn lsn(text: Option<String>) -> Option<Lsn> {
    text.and_then(|t| t.parse().ok())
}

/// Reads one slot, or `None` if it does not exist.
pub async fn slot_state(client: &Client, slot: &str) -> Result<Option<SlotState>, CatalogError> {
    let row = client
        .query_opt(
            "SELECT plugin::text, slot_type::text, database::text, active_pid, \
                    restart_lsn::text, confirmed_flush_lsn::text, wal_status::text \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading pg_replication_slots",
            source,
        })?;
    Ok(row.map(|r| SlotState {
        plugin: r.get(0),
        slot_type: r.get::<_, Option<String>>(1).unwrap_or_default(),
        database: r.get(2),
        active_pid: r.get(3),
        restart_lsn: lsn(r.get(4)),
        confirmed_flush_lsn: lsn(r.get(5)),
        wal_status: r.get(6),
    }))
}

/// `SHOW name`.
pub async fn setting(client: &Client, name: &'static str) -> Result<String, CatalogError> {
    let row = client
        .query_one("SELECT current_setting($1)", &[&name])
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading a server setting",
            source,
        })?;
    Ok(row.get(0))
}

/// Tables `(schema, table)` a publication covers, or `None` if it does not exist.
pub async fn publication_tables(
    client: &Client,
    publication: &str,
) -> Result<Option<Vec<(String, String)>>, CatalogError> {
    let exists = client
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading pg_publication",
            source,
        })?;
    if exists.is_none() {
        return Ok(None);
    }
    let rows = client
        .query(
            "SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(|source| CatalogError::Query { context: "reading pg_publication_tables", source })?;
    Ok(Some(rows.iter().map(|r| (r.get(0), r.get(1))).collect()))
}

/// Makes sure `publication` exists and covers `tables`; creates or extends it
/// when `create` is set, otherwise explains what to run.
pub async fn ensure_publication(
    client: &Client,
    publication: &str,
    tables: &[(String, String)],
    create: bool,
) -> Result<(), CatalogError> {
    use postgres_protocol::escape::escape_identifier as ident;
    let list = |ts: &[&(String, String)]| {
        ts.iter()
            .map(|(s, t)| format!("{}.{}", ident(s), ident(t)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match publication_tables(client, publication).await? {
        None => {
            let all: Vec<&(String, String)> = tables.iter().collect();
            let sql = format!(
                "CREATE PUBLICATION {} FOR TABLE {}",
                ident(publication),
                list(&all)
            );
            if !create {
                return Err(CatalogError::Invalid(format!(
                    "publication {publication:?} does not exist; create it with `{sql}` or set postgres.create_publication = true"
                )));
            }
            client
                .batch_execute(&sql)
                .await
                .map_err(|source| CatalogError::Query {
                    context: "creating the publication",
                    source,
                })?;
            tracing::info!(publication, "created publication");
        }
        Some(covered) => {
            let missing: Vec<&(String, String)> =
                tables.iter().filter(|t| !covered.contains(t)).collect();
            if missing.is_empty() {
                return Ok(());
            }
            let sql = format!(
                "ALTER PUBLICATION {} ADD TABLE {}",
                ident(publication),
                list(&missing)
            );
            if !create {
                return Err(CatalogError::Invalid(format!(
                    "publication {publication:?} does not cover {}; run `{sql}` or set postgres.create_publication = true",
                    list(&missing)
                )));
            }
            client
                .batch_execute(&sql)
                .await
                .map_err(|source| CatalogError::Query {
                    context: "extending the publication",
                    source,
                })?;
            tracing::info!(publication, tables = %list(&missing), "added tables to publication");
        }
    }
    Ok(())
}

/// Columns `(name, type name)` of a table, empty if it does not exist.
pub async fn table_columns(
    client: &Client,
    schema: &str,
    table: &str,
) -> Result<Vec<(String, String)>, CatalogError> {
    let rows = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) \
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            &[&schema, &table],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading table columns",
            source,
        })?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
