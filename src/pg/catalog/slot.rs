//! The slot as `pg_replication_slots` shows it ([`SlotState`]), and the
//! transactions a slot's creation waits for ([`slot_creation_blockers`]),
//! each named with what shows it to this role.

use tokio_postgres::Client;

use crate::Lsn;

use super::error::CatalogError;

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

pub(super) fn lsn(text: Option<String>) -> Option<Lsn> {
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
mod tests;
