//! Logical messages: `pg_logical_emit_message` (the heartbeat and the
//! incremental snapshot's watermarks), flushed or not, and whether the role
//! may call it, with the signature this server declares; and an empty
//! committed transaction, which moves the stream without either.

use tokio_postgres::Client;

use crate::Lsn;

use super::error::CatalogError;

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

/// Commits a transaction that only takes a transaction id: one commit
/// record in the WAL, flushed, and no row, message or privilege needed.
/// A logical stream waiting for WAL past a position then moves.
pub async fn commit_empty_transaction(client: &Client) -> Result<(), CatalogError> {
    client
        .batch_execute(
            "BEGIN; SET LOCAL synchronous_commit = on; SELECT pg_current_xact_id(); COMMIT",
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "committing an empty transaction to move the stream",
            source,
        })
}
