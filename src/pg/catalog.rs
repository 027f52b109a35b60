//! Ordinary SQL against the source database, through `tokio-postgres`:
//! slot state, server settings, publication and outbox-table checks.
//!
//! Nothing here streams; it answers "what does the server look like" for the
//! start-up checks (`crate::startup`) that `walrelay run` and `walrelay check`
//! share.
//!
//! Invariants:
//! - Errors carry the server's own words: a [`CatalogError`] prints the
//!   server's message, detail and hint (or the I/O cause chain), never a bare
//!   "db error".
//! - The SQL works on PostgreSQL 14–18; catalog columns that exist only on
//!   newer servers (row filters, column lists, schema publications: 15+) are
//!   read only when `server_version_num` says they exist.

use postgres_openssl::MakeTlsConnector;
use secrecy::ExposeSecret;
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, NoTls};

use crate::Lsn;
use crate::pg::tls;
use crate::pg::wire::ConnectParams;

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("cannot connect to PostgreSQL at {address} for catalog queries: {}{fix}", describe(.source))]
    Connect {
        address: String,
        source: tokio_postgres::Error,
        /// `. What to do: …` when the server's refusal has a known fix
        /// (a missing grant), else empty.
        fix: String,
    },
    #[error("catalog query failed while {context}: {}", describe(.source))]
    Query {
        context: &'static str,
        source: tokio_postgres::Error,
    },
    #[error("{0}")]
    Invalid(String),
    /// A connection ended while walrelay still needed it (the server
    /// restarting): retried.
    #[error("the PostgreSQL connection for {0} ended")]
    Ended(&'static str),
    /// `postgres.host` lists several servers and none is a writable primary.
    #[error(
        "none of the servers in postgres.host is a writable primary (waiting for one to be \
         promoted): {tried}"
    )]
    NoPrimary { tried: String },
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
            // Unreachable or refusing connections: retry. But a server that
            // answered with a definite error (authentication failed, a
            // certificate for another user, no such database) gives the same
            // answer next time, exactly as on the replication connection.
            CatalogError::Connect { source, .. } => source
                .code()
                .is_none_or(|code| crate::pg::wire::is_transient_sqlstate(code.code())),
            // A refused certificate, or a server that will not do TLS when
            // sslmode requires it, stays that way until someone acts.
            CatalogError::Tls { .. } => false,
            // A connection that closed, or a server that ended the session
            // mid-query (57P01 when an administrator or a fast shutdown
            // terminates it, 57P02/57P03 around a crash or a start-up, 08*
            // connection exceptions): the next connection may succeed. Any
            // other answer to a query (a missing function, no permission,
            // a slot in use) is the same next time.
            CatalogError::Query { source, .. } => {
                source.is_closed()
                    || source.code().is_none_or(|code| {
                        let code = code.code();
                        code.starts_with("57P") || code.starts_with("08")
                    })
            }
            CatalogError::Invalid(_) => false,
            CatalogError::NoPrimary { .. } | CatalogError::Ended(_) => true,
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
    /// PostgreSQL 17+: whether it is a failover slot (`None` before 17).
    pub failover: Option<bool>,
    /// PostgreSQL 17+: why the slot was invalidated (`wal_removed`,
    /// `rows_removed`, `wal_level_insufficient`, 18's `idle_timeout`);
    /// `None` when it was not, or before 17.
    pub invalidation_reason: Option<String>,
}

/// Connects a plain (non-replication) session.
pub async fn connect(params: &ConnectParams) -> Result<Client, CatalogError> {
    // The connection task runs on detached; it ends when the client is dropped.
    connect_owned(params).await.map(|(client, _task)| client)
}

/// [`connect`], also returning the task that drives the connection: it ends
/// when the connection does (closed by either side), and aborting it closes
/// the socket at once, even with a query still waiting in the server.
///
/// With a host list in `params.host`, the first server of it that is not in
/// recovery (`pg_is_in_recovery()`), as the replication connection chooses
/// (see [`crate::pg::wire::WireConnection::connect`]).
pub async fn connect_owned(
    params: &ConnectParams,
) -> Result<(Client, tokio::task::JoinHandle<()>), CatalogError> {
    if !params.is_host_list() {
        return connect_one(params).await;
    }
    let mut tried = Vec::new();
    for target in params.targets() {
        match connect_one(&target).await {
            Ok((client, task)) => {
                let standby = client
                    .query_one("SELECT pg_is_in_recovery()", &[])
                    .await
                    .map_err(|source| CatalogError::Query {
                        context: "asking whether the server is a standby",
                        source,
                    })?
                    .get::<_, bool>(0);
                if !standby {
                    return Ok((client, task));
                }
                task.abort();
                tried.push(format!("{}: a standby (in recovery)", target.address()));
            }
            Err(e) if !e.is_transient() => return Err(e),
            Err(e) => tried.push(format!("{}: {e}", target.address())),
        }
    }
    Err(CatalogError::NoPrimary {
        tried: tried.join("; "),
    })
}

async fn connect_one(
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
async fn open_session(
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
    let connector = if params.is_unix() {
        None
    } else {
        tls::connector(&params.tls).map_err(|e| CatalogError::Tls {
            address: params.address(),
            mode: params.tls.mode.as_str(),
            reason: e.message,
        })?
    };
    let Some(connector) = connector else {
        cfg.ssl_mode(SslMode::Disable);
        let (client, connection) = cfg.connect(NoTls).await.map_err(connect_error)?;
        return Ok((client, spawn_connection(connection)));
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
    Ok((client, spawn_connection(connection)))
}

/// The statement that lets `user` in, when the server refused the login
/// for a missing privilege: `CONNECT` on the database, or the `LOGIN`
/// attribute.
fn missing_grant(e: &tokio_postgres::Error, user: &str, database: &str) -> Option<String> {
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

/// The server's message, detail and hint when the server reported the error,
/// otherwise the error and its causes (tokio-postgres alone prints "db error"
/// or "error connecting to server" without saying why).
pub fn describe(e: &tokio_postgres::Error) -> String {
    let Some(db) = e.as_db_error() else {
        return error_chain(e);
    };
    let mut text = format!(
        "{}: {} (SQLSTATE {})",
        db.severity(),
        db.message(),
        db.code().code()
    );
    if let Some(detail) = db.detail() {
        text.push_str("; detail: ");
        text.push_str(detail);
    }
    if let Some(hint) = db.hint() {
        text.push_str("; hint: ");
        text.push_str(hint);
    }
    text
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

fn spawn_connection<F>(connection: F) -> tokio::task::JoinHandle<()>
where
    F: std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "catalog connection ended");
        }
    })
}

fn lsn(text: Option<String>) -> Option<Lsn> {
    text.and_then(|t| t.parse().ok())
}

/// Reads one slot, or `None` if it does not exist.
pub async fn slot_state(client: &Client, slot: &str) -> Result<Option<SlotState>, CatalogError> {
    let row = client
        .query_opt(
            "SELECT plugin::text, slot_type::text, database::text, active_pid, \
                    restart_lsn::text, confirmed_flush_lsn::text, wal_status::text, \
                    (to_jsonb(s) ->> 'failover')::bool, \
                    to_jsonb(s) ->> 'invalidation_reason' \
             FROM pg_replication_slots s WHERE slot_name = $1",
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
        failover: r.get(7),
        invalidation_reason: r.get(8),
    }))
}

/// Writes a non-transactional logical decoding message (`pg_logical_emit_message(false,
/// prefix, content)`, the text variant; never the `flush` argument, which is
/// PostgreSQL 17+ only) and returns the LSN PostgreSQL reports for it.
pub async fn emit_message(
    client: &Client,
    prefix: &str,
    content: &str,
) -> Result<Lsn, CatalogError> {
    let row = client
        .query_one(
            "SELECT pg_logical_emit_message(false, $1::text, $2::text)::text",
            &[&prefix, &content],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "writing a heartbeat with pg_logical_emit_message",
            source,
        })?;
    let text: String = row.get(0);
    text.parse().map_err(|_| {
        CatalogError::Invalid(format!(
            "pg_logical_emit_message returned {text:?}, which is not an LSN"
        ))
    })
}

/// [`emit_message`], and the WAL flushed past it before this returns (a
/// non-transactional message is otherwise sent to the walsender only when
/// something else flushes WAL, up to `wal_writer_delay` later): it runs in a
/// transaction that takes a transaction id, whose synchronous commit
/// flushes. The message is written when called, not at the commit, so its
/// LSN orders it before any transaction that commits after this returns.
pub async fn emit_message_flushed(
    client: &Client,
    prefix: &str,
    content: &str,
) -> Result<Lsn, CatalogError> {
    let query = |context| move |source| CatalogError::Query { context, source };
    client
        .batch_execute("BEGIN; SET LOCAL synchronous_commit = on")
        .await
        .map_err(query("beginning a watermark transaction"))?;
    let lsn = emit_message(client, prefix, content).await;
    let end = client
        .batch_execute("SELECT pg_current_xact_id(); COMMIT")
        .await
        .map_err(query("committing a watermark transaction"));
    let lsn = lsn?;
    end?;
    Ok(lsn)
}

/// The text variant of `pg_logical_emit_message` as this server declares it
/// (`pg_logical_emit_message(boolean,text,text)` up to PostgreSQL 16, with a
/// fourth `flush boolean` argument from 17), and whether the current role may
/// execute it. `None` when the server has no such function.
pub async fn emit_message_privilege(
    client: &Client,
) -> Result<Option<(String, bool)>, CatalogError> {
    let row = client
        .query_opt(
            "SELECT p.oid::regprocedure::text, has_function_privilege(p.oid, 'EXECUTE') \
             FROM pg_proc p \
             WHERE p.proname = 'pg_logical_emit_message' \
               AND p.pronamespace = 'pg_catalog'::regnamespace \
               AND p.proargtypes[2] = 'text'::regtype \
             ORDER BY p.pronargs LIMIT 1",
            &[],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading the privileges on pg_logical_emit_message",
            source,
        })?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
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

/// `server_version_num`, e.g. `180004`.
pub async fn server_version(client: &Client) -> Result<i32, CatalogError> {
    let row = client
        .query_one("SELECT current_setting('server_version_num')::int4", &[])
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading server_version_num",
            source,
        })?;
    Ok(row.get(0))
}

/// A captured (outbox) table as the catalog knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedTable {
    pub schema: String,
    pub name: String,
    pub oid: u32,
    /// `pg_class.relkind`: `r` ordinary table, `p` partitioned table, `v`
    /// view, `m` materialized view, `f` foreign table, ...
    pub relkind: char,
    /// Every partition below the table, at any depth (intermediate
    /// partitioned tables and leaves): `(oid, schema, name)`. Empty for an
    /// ordinary table. pgoutput reports a change under the leaf's oid and
    /// name unless the publication has `publish_via_partition_root`.
    pub partitions: Vec<(u32, String, String)>,
}

impl CapturedTable {
    /// What `relkind` means, for messages.
    pub fn kind(&self) -> &'static str {
        match self.relkind {
            'r' => "an ordinary table",
            'p' => "a partitioned table",
            'v' => "a view",
            'm' => "a materialized view",
            'f' => "a foreign table",
            'i' | 'I' => "an index",
            'S' => "a sequence",
            'c' => "a composite type",
            't' => "a TOAST table",
            _ => "not a table",
        }
    }
}

/// One relation by name, with its partitions; `None` if it does not exist.
pub async fn relation(
    client: &Client,
    schema: &str,
    name: &str,
) -> Result<Option<CapturedTable>, CatalogError> {
    let query = |context| move |source| CatalogError::Query { context, source };
    let Some(row) = client
        .query_opt(
            "SELECT c.oid, c.relkind::text FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2",
            &[&schema, &name],
        )
        .await
        .map_err(query("reading pg_class"))?
    else {
        return Ok(None);
    };
    let oid: u32 = row.get(0);
    let relkind = row.get::<_, String>(1).chars().next().unwrap_or('?');
    let partitions = if relkind == 'p' {
        client
            .query(
                "SELECT t.relid::oid, n.nspname::text, c.relname::text \
                 FROM pg_partition_tree($1::oid::regclass) t \
                 JOIN pg_class c ON c.oid = t.relid \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE t.relid <> $1::oid::regclass ORDER BY t.level, c.relname",
                &[&oid],
            )
            .await
            .map_err(query("listing partitions"))?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    } else {
        Vec::new()
    };
    Ok(Some(CapturedTable {
        schema: schema.to_owned(),
        name: name.to_owned(),
        oid,
        relkind,
        partitions,
    }))
}

/// The tables (ordinary or partitioned, not partitions) of `schema`, by
/// name, with their oids and relkinds.
pub async fn schema_tables(
    client: &Client,
    schema: &str,
) -> Result<Vec<(u32, String, char)>, CatalogError> {
    let rows = client
        .query(
            "SELECT c.oid, c.relname::text, c.relkind::text FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition \
             ORDER BY c.relname",
            &[&schema],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "listing the tables of a schema",
            source,
        })?;
    Ok(rows
        .iter()
        .map(|r| {
            let kind: String = r.get(2);
            (r.get(0), r.get(1), kind.chars().next().unwrap_or('?'))
        })
        .collect())
}

/// The primary key's columns of relation `oid`, in key order; empty
/// without a primary key.
pub async fn primary_key(client: &Client, oid: u32) -> Result<Vec<String>, CatalogError> {
    let rows = client
        .query(
            "SELECT a.attname::text FROM pg_index i \
             CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE i.indrelid = $1::oid AND i.indisprimary ORDER BY k.ord",
            &[&oid],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading the primary key",
            source,
        })?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The table's `REPLICA IDENTITY` (`pg_class.relreplident`: `b'd'`
/// default, `b'i'` index, `b'f'` full, `b'n'` nothing) and the columns it
/// holds in a delete's old row, in index order: the primary key's under
/// DEFAULT, the index's under USING INDEX, none under FULL (every column)
/// and NOTHING.
pub async fn replica_identity(
    client: &Client,
    oid: u32,
) -> Result<(u8, Vec<String>), CatalogError> {
    let query = |context| move |source| CatalogError::Query { context, source };
    let identity = client
        .query_opt(
            "SELECT relreplident::text FROM pg_class WHERE oid = $1::oid",
            &[&oid],
        )
        .await
        .map_err(query("reading the replica identity"))?
        .and_then(|r| r.get::<_, Option<String>>(0))
        .and_then(|s| s.bytes().next())
        .unwrap_or(b'd');
    let rows = client
        .query(
            "SELECT a.attname::text FROM pg_index i \
             CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE i.indrelid = $1::oid AND CASE $2::text \
                   WHEN 'd' THEN i.indisprimary WHEN 'i' THEN i.indisreplident ELSE false END \
             ORDER BY k.ord",
            &[&oid, &(identity as char).to_string()],
        )
        .await
        .map_err(query("reading the replica identity index"))?;
    Ok((identity, rows.iter().map(|r| r.get(0)).collect()))
}

/// The captured tables `(schema, name)`: oid, relkind and all partitions, in
/// the order given. A table that does not exist is an error naming it.
/// The router uses the partitions to map a leaf relation pgoutput reports
/// back to the captured table.
pub async fn captured_relations(
    client: &Client,
    tables: &[(String, String)],
) -> Result<Vec<CapturedTable>, CatalogError> {
    let mut out = Vec::with_capacity(tables.len());
    for (schema, name) in tables {
        match relation(client, schema, name).await? {
            Some(t) => out.push(t),
            None => {
                return Err(CatalogError::Invalid(format!(
                    "outbox table {schema}.{name} does not exist; create it or fix outbox.table"
                )));
            }
        }
    }
    Ok(out)
}

/// Whether the current role owns relation `oid` (directly or through a role
/// it belongs to; superusers own everything).
pub async fn owns_relation(client: &Client, oid: u32) -> Result<bool, CatalogError> {
    let row = client
        .query_one(
            "SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class WHERE oid = $1::oid",
            &[&oid],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading a table's owner",
            source,
        })?;
    Ok(row.get(0))
}

/// Whether the current role may create publications in this database.
pub async fn may_create_in_database(client: &Client) -> Result<bool, CatalogError> {
    let row = client
        .query_one(
            "SELECT has_database_privilege(current_database(), 'CREATE')",
            &[],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading the database privileges",
            source,
        })?;
    Ok(row.get(0))
}

/// A row of `pg_publication`, as far as walrelay cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    pub oid: u32,
    pub owner: String,
    /// The current role owns it (or is a member of its owner).
    pub owned: bool,
    pub all_tables: bool,
    pub inserts: bool,
    /// Publishes updates and deletes (`pubupdate AND pubdelete`).
    pub updates_and_deletes: bool,
    pub via_root: bool,
    /// `xmin` of the catalog row: the transaction that created (or last
    /// altered) the publication.
    pub xmin: u32,
}

/// Reads one publication, or `None` if it does not exist.
pub async fn publication(client: &Client, name: &str) -> Result<Option<Publication>, CatalogError> {
    let row = client
        .query_opt(
            "SELECT p.oid, pg_get_userbyid(p.pubowner)::text, \
                    pg_has_role(current_user, p.pubowner, 'USAGE'), \
                    p.puballtables, p.pubinsert, p.pubviaroot, p.xmin::text::int8, \
                    p.pubupdate AND p.pubdelete \
             FROM pg_publication p WHERE p.pubname = $1",
            &[&name],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading pg_publication",
            source,
        })?;
    Ok(row.map(|r| Publication {
        oid: r.get(0),
        owner: r.get(1),
        owned: r.get(2),
        all_tables: r.get(3),
        inserts: r.get(4),
        via_root: r.get(5),
        xmin: u32::try_from(r.get::<_, i64>(6)).unwrap_or(0),
        updates_and_deletes: r.get(7),
    }))
}

/// The tables publication `name` publishes (`schema.table`, sorted), as
/// `pg_publication_tables` lists them.
pub async fn published_tables(client: &Client, name: &str) -> Result<Vec<String>, CatalogError> {
    let rows = client
        .query(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables \
             WHERE pubname = $1 ORDER BY 1",
            &[&name],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading pg_publication_tables",
            source,
        })?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// How a publication covers one relation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Membership {
    /// `FOR ALL TABLES`.
    pub all_tables: bool,
    /// `FOR TABLES IN SCHEMA` this schema (15+), the table's or an ancestor's.
    pub schema: Option<String>,
    /// Listed `FOR TABLE` as this relation `(oid, schema, name)`: the table
    /// itself or one of its partition ancestors (nearest first).
    pub listed: Option<(u32, String, String)>,
    /// The row filter (`WHERE …`) of that listing (15+).
    pub row_filter: Option<String>,
    /// The column list of that listing (15+); `None` = all columns.
    pub columns: Option<Vec<String>>,
    /// Partition ancestors of the table (nearest first), excluding itself.
    pub ancestors: Vec<(u32, String, String)>,
}

impl Membership {
    pub fn covered(&self) -> bool {
        self.all_tables || self.schema.is_some() || self.listed.is_some()
    }
}

/// How publication `publication` covers relation `oid`: directly, through a
/// partition ancestor, `FOR ALL TABLES` or `FOR TABLES IN SCHEMA`.
/// (`pg_publication_tables` cannot answer this: it lists leaves or roots
/// depending on `publish_via_partition_root`.)
pub async fn membership(
    client: &Client,
    publication: &Publication,
    oid: u32,
) -> Result<Membership, CatalogError> {
    let query = |context| move |source| CatalogError::Query { context, source };
    let version = server_version(client).await?;
    let ancestors: Vec<(u32, String, String)> = client
        .query(
            // pg_partition_ancestors lists nothing for a table that is not
            // a partition: start with the table itself.
            "SELECT a.relid::oid, n.nspname::text, c.relname::text \
             FROM (SELECT $1::oid AS relid, 0::int8 AS ord \
                   UNION ALL \
                   SELECT p.relid, p.ord \
                   FROM pg_partition_ancestors($1::oid::regclass) WITH ORDINALITY AS p(relid, ord) \
                   WHERE p.relid <> $1::oid) a \
             JOIN pg_class c ON c.oid = a.relid JOIN pg_namespace n ON n.oid = c.relnamespace \
             ORDER BY a.ord",
            &[&oid],
        )
        .await
        .map_err(query("reading partition ancestors"))?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let listing = if version >= 150000 {
        "SELECT pr.prrelid, pg_get_expr(pr.prqual, pr.prrelid), \
                (SELECT array_agg(at.attname::text ORDER BY at.attnum) FROM pg_attribute at \
                 WHERE at.attrelid = pr.prrelid AND at.attnum = ANY (pr.prattrs::int2[])) \
         FROM pg_publication_rel pr WHERE pr.prpubid = $1::oid AND pr.prrelid = ANY ($2::oid[])"
    } else {
        "SELECT pr.prrelid, NULL::text, NULL::text[] \
         FROM pg_publication_rel pr WHERE pr.prpubid = $1::oid AND pr.prrelid = ANY ($2::oid[])"
    };
    let oids: Vec<u32> = ancestors.iter().map(|a| a.0).collect();
    let rows = client
        .query(listing, &[&publication.oid, &oids])
        .await
        .map_err(query("reading pg_publication_rel"))?;
    let mut m = Membership {
        all_tables: publication.all_tables,
        ..Membership::default()
    };
    // Nearest listed relation first: that listing's filter and columns apply.
    for a in &ancestors {
        if let Some(r) = rows.iter().find(|r| r.get::<_, u32>(0) == a.0) {
            m.listed = Some(a.clone());
            m.row_filter = r.get(1);
            // A listing without a column list has prattrs NULL: all columns.
            m.columns = r.get(2);
            break;
        }
    }
    if version >= 150000 {
        let schema = client
            .query_opt(
                "SELECT n.nspname::text FROM pg_publication_namespace pn \
                 JOIN pg_namespace n ON n.oid = pn.pnnspid \
                 WHERE pn.pnpubid = $1::oid AND pn.pnnspid IN \
                   (SELECT c.relnamespace FROM pg_class c WHERE c.oid = ANY ($2::oid[])) \
                 LIMIT 1",
                &[&publication.oid, &oids],
            )
            .await
            .map_err(query("reading pg_publication_namespace"))?;
        m.schema = schema.map(|r| r.get(0));
    }
    m.ancestors = ancestors.into_iter().filter(|a| a.0 != oid).collect();
    Ok(m)
}

/// Whether the slot may still decode changes from before `publication` was
/// created (or last altered): its `catalog_xmin` is not newer than the
/// publication row's `xmin`. `None` if the slot does not exist.
pub async fn slot_older_than_publication(
    client: &Client,
    slot: &str,
    publication: &Publication,
) -> Result<Option<bool>, CatalogError> {
    let row = client
        .query_opt(
            "SELECT catalog_xmin IS NOT NULL AND age(catalog_xmin) >= age($2::text::xid) \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot, &publication.xmin.to_string()],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "comparing the slot with the publication",
            source,
        })?;
    Ok(row.map(|r| r.get(0)))
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

/// The planner's idea of how many rows a table holds, from
/// `pg_class.reltuples`: of the table itself, or of the leaf partitions of a
/// partitioned table (a partitioned parent's own `reltuples`, set by
/// `ANALYZE`, repeats its leaves' total, so it is never added). For progress
/// reports and `check` only; nothing is decided on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowEstimate {
    /// Sum over the relations whose `reltuples` is known.
    pub rows: u64,
    /// Relations never vacuumed or analyzed (`reltuples = -1`): not counted.
    pub unknown: u64,
    /// Relations looked at (1, or the number of leaf partitions).
    pub relations: u64,
}

impl RowEstimate {
    /// The row count when the planner has one (some relation analyzed and
    /// rows in it), else `None`.
    pub fn known(&self) -> Option<u64> {
        (self.rows > 0).then_some(self.rows)
    }
}

/// [`RowEstimate`] of the table (or partitioned table) with OID `oid`. The
/// caller names the table in the error (`describe` gives the server's words).
pub async fn row_estimate(client: &Client, oid: u32) -> Result<RowEstimate, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT coalesce(sum(c.reltuples) FILTER (WHERE c.reltuples >= 0), 0)::float8, \
                    count(*) FILTER (WHERE c.reltuples < 0), count(*) \
             FROM pg_class c \
             WHERE (c.oid = $1::oid AND c.relkind <> 'p') \
                OR c.oid IN (SELECT t.relid FROM pg_partition_tree($1::oid::regclass) t \
                             WHERE t.isleaf)",
            &[&oid],
        )
        .await?;
    let rows: f64 = row.get(0);
    let unknown: i64 = row.get(1);
    let relations: i64 = row.get(2);
    Ok(RowEstimate {
        rows: if rows.is_finite() && rows > 0.0 {
            rows.round() as u64
        } else {
            0
        },
        unknown: u64::try_from(unknown).unwrap_or(0),
        relations: u64::try_from(relations).unwrap_or(0),
    })
}

/// A transaction that the creation of a logical slot waits for:
/// PostgreSQL creates the slot only once every transaction that held an
/// xid when the creation began (in any database) has ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenTransaction {
    /// Its backend (0: a prepared transaction).
    pub pid: i32,
    pub database: Option<String>,
    pub user: Option<String>,
    pub application_name: Option<String>,
    /// `None` when PostgreSQL hides another role's session from this role
    /// (its state, query and times need `pg_read_all_stats`).
    pub state: Option<String>,
    /// Seconds since the transaction began.
    pub open_seconds: Option<i64>,
    /// The start of its current or last statement.
    pub query: Option<String>,
}

impl std::fmt::Display for OpenTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let user = self.user.as_deref().unwrap_or("?");
        let database = self.database.as_deref().unwrap_or("?");
        if self.state.is_none() {
            // PostgreSQL shows another role's session only in outline.
            return write!(
                f,
                "pid {} ({user}@{database}; walrelay's role needs pg_read_all_stats to show its \
                 query)",
                self.pid
            );
        }
        write!(
            f,
            "pid {} ({user}@{database}, application {:?}, {}, open {} s): {}",
            self.pid,
            self.application_name.as_deref().unwrap_or(""),
            self.state.as_deref().unwrap_or("?"),
            self.open_seconds.unwrap_or(0),
            self.query.as_deref().unwrap_or("")
        )
    }
}

/// What the walsender creating a slot for the connection named
/// `application_name` waits for right now: the sessions
/// `pg_blocking_pids` names (visible to any role), with what
/// `pg_stat_activity` shows of them, and the prepared transactions older
/// than the wait. Query text is cut to 120 characters.
pub async fn slot_creation_blockers(
    client: &Client,
    application_name: &str,
    waiting_seconds: f64,
) -> Result<Vec<OpenTransaction>, CatalogError> {
    let rows = client
        .query(
            "WITH creating AS ( \
                 SELECT pid FROM pg_stat_activity \
                 WHERE backend_type = 'walsender' AND application_name = $1 \
                   AND query LIKE 'CREATE\\_REPLICATION\\_SLOT%') \
             SELECT b.pid, a.datname::text, a.usename::text, a.application_name, a.state, \
                    extract(epoch FROM now() - a.xact_start)::int8, left(a.query, 120) \
             FROM creating, unnest(pg_blocking_pids(creating.pid)) AS b(pid) \
             LEFT JOIN pg_stat_activity a ON a.pid = b.pid \
             WHERE b.pid <> 0 \
             UNION ALL \
             SELECT 0, database::text, owner::text, 'prepared transaction ' || gid, 'prepared', \
                    extract(epoch FROM now() - prepared)::int8, \
                    'end it: COMMIT PREPARED or ROLLBACK PREPARED ' || quote_literal(gid) \
             FROM pg_prepared_xacts WHERE prepared < now() - make_interval(secs => $2)",
            &[&application_name, &waiting_seconds],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "listing what the slot creation waits for (pg_blocking_pids)",
            source,
        })?;
    Ok(rows
        .iter()
        .map(|r| OpenTransaction {
            pid: r.get(0),
            database: r.get(1),
            user: r.get(2),
            application_name: r.get(3),
            state: r.get(4),
            open_seconds: r.get(5),
            query: r.get(6),
        })
        .collect())
}

#[cfg(test)]
mod open_transaction_tests {
    use super::OpenTransaction;

    #[test]
    fn a_hidden_session_says_which_privilege_shows_it() {
        let mut t = OpenTransaction {
            pid: 42,
            database: Some("app".into()),
            user: Some("writer".into()),
            application_name: None,
            state: None,
            open_seconds: None,
            query: Some("<insufficient privilege>".into()),
        };
        let text = t.to_string();
        assert!(text.starts_with("pid 42 (writer@app;"), "{text}");
        assert!(text.contains("pg_read_all_stats"), "{text}");
        assert!(!text.contains("insufficient"), "{text}");
        t.state = Some("idle in transaction".into());
        t.open_seconds = Some(7);
        t.query = Some("INSERT INTO outbox".into());
        assert_eq!(
            t.to_string(),
            "pid 42 (writer@app, application \"\", idle in transaction, open 7 s): INSERT INTO outbox"
        );
    }
}
