//! What capture from a hot standby needs of SQL: the primary's WAL
//! position, a standby's replay position (and waiting for it), the nudge
//! that lets a standby create a logical slot without waiting for the
//! primary's next running-transactions record, and the WAL position of
//! either kind of server (for slot lag).
//!
//! Invariants:
//! - **Waiting is never silent.** [`await_replay`] says after a few
//!   seconds, and every half minute after, what it waits for and where the
//!   standby is; a standby that was promoted meanwhile has replayed all
//!   there is, and the wait ends.

use std::time::Duration;

use tokio_postgres::Client;

use super::error::CatalogError;
use super::slot::lsn;
use crate::Lsn;

fn query(context: &'static str) -> impl Fn(tokio_postgres::Error) -> CatalogError {
    move |source| CatalogError::Query { context, source }
}

/// `pg_current_wal_lsn()` of a primary: past every commit it has flushed.
pub async fn current_wal_lsn(client: &Client) -> Result<Lsn, CatalogError> {
    let row = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .map_err(query("reading the primary's WAL position"))?;
    lsn(row.get(0)).ok_or(CatalogError::Ended(
        "pg_current_wal_lsn() returned no position",
    ))
}

/// The server's WAL position: what a primary has written
/// (`pg_current_wal_lsn()`), what a standby has replayed
/// (`pg_last_wal_replay_lsn()`) — the end a slot there can decode up to.
pub const WAL_POSITION: &str = "CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() \
                                ELSE pg_current_wal_lsn() END";

/// Waits until the standby of `client` has replayed up to `target` (at
/// once when it is not, or no longer, a standby), saying so while it waits
/// for `what`.
pub async fn await_replay(client: &Client, target: Lsn, what: &str) -> Result<(), CatalogError> {
    const FIRST: Duration = Duration::from_secs(5);
    const AGAIN: Duration = Duration::from_secs(30);
    let started = tokio::time::Instant::now();
    let mut next_word = started + FIRST;
    let mut pause = Duration::from_millis(5);
    loop {
        let row = client
            .query_one(
                "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text",
                &[],
            )
            .await
            .map_err(query("reading the standby's replay position"))?;
        let (standby, replayed): (bool, Option<String>) = (row.get(0), row.get(1));
        let replayed = lsn(replayed);
        if !standby || replayed.is_some_and(|r| r >= target) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= next_word {
            next_word = tokio::time::Instant::now() + AGAIN;
            tracing::warn!(
                waiting_secs = started.elapsed().as_secs(),
                target = %target,
                replayed = %replayed.map_or_else(|| "nothing".to_owned(), |r| r.to_string()),
                "{what} waits for the standby to replay the primary's WAL up to {target}; is it \
                 connected to the primary, and replaying (SELECT pg_is_wal_replay_paused() there; \
                 recovery_min_apply_delay)?"
            );
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// Asks the primary to log its running transactions now
/// (`pg_log_standby_snapshot()`, PostgreSQL 16+): a logical slot being
/// created on a standby waits for such a record, which the primary
/// otherwise writes every 15 s, and only after other WAL activity.
/// `Err` when the role may not (it is granted to superusers only by default).
pub async fn log_standby_snapshot(client: &Client) -> Result<(), CatalogError> {
    client
        .batch_execute("SELECT pg_log_standby_snapshot()")
        .await
        .map_err(query(
            "asking the primary to log its running transactions (pg_log_standby_snapshot)",
        ))
}
