//! [`CatalogError`]: a connection or query that failed, printed with the
//! server's own words (message, detail, hint) or the I/O cause chain,
//! never a bare "db error"; classified transient or definite.

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
    /// `postgres.capture_from` is a standby and no server of
    /// `postgres.standby_host` is one now (nor, for `"standby"`, answers).
    #[error(
        "none of the servers in postgres.standby_host is a hot standby that walrelay may capture \
         from now (waiting for one; with postgres.capture_from = \"standby\" a promoted one \
         will do, with \"standby_only\" it will not): {tried}"
    )]
    NoStandby { tried: String },
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
            CatalogError::NoPrimary { .. }
            | CatalogError::NoStandby { .. }
            | CatalogError::Ended(_) => true,
        }
    }
}

/// The server's message, detail and hint when the server reported the error,
/// otherwise the error and its causes (tokio-postgres alone prints "db error"
/// or "error connecting to server" without saying why).
pub fn describe(e: &tokio_postgres::Error) -> String {
    let Some(db) = e.as_db_error() else {
        return crate::pg::tls::error_chain(e);
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
