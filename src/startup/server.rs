//! The server's settings and the role's attributes that streaming needs:
//! `wal_level = logical`, the REPLICATION attribute, and (with
//! `[heartbeat] interval`) the right to call `pg_logical_emit_message`;
//! which watermarks incremental snapshots use (`[snapshot] watermarks`).

use postgres_protocol::escape::escape_identifier as ident;
use tokio_postgres::Client;

use super::CheckError;
use crate::config::Watermarks;
use crate::pg::catalog::{self, CatalogError};

/// `wal_level` must be `logical`.
pub async fn wal_level(client: &Client) -> Result<String, CheckError> {
    let level = catalog::setting(client, "wal_level").await?;
    if level != "logical" {
        return Err(CheckError::setup(
            format!("PostgreSQL runs with wal_level = {level}, logical decoding needs 'logical'"),
            "set wal_level = logical in postgresql.conf and restart PostgreSQL",
        ));
    }
    Ok(level)
}

/// The role needs the REPLICATION attribute (or to be a superuser).
pub async fn replication_privilege(client: &Client, user: &str) -> Result<String, CheckError> {
    let row = client
        .query_one(
            "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading the role's attributes",
            source,
        })?;
    if !row.get::<_, bool>(0) {
        return Err(CheckError::setup(
            format!("role {user} lacks the REPLICATION attribute"),
            format!(
                "run as a superuser: ALTER ROLE {} REPLICATION;",
                ident(user)
            ),
        ));
    }
    Ok(format!("role {user} may replicate"))
}

/// With `[heartbeat] interval` set, the role must be allowed to EXECUTE
/// `pg_logical_emit_message` (PUBLIC may, unless revoked). The fix names the
/// signature this server declares (it gained a fourth argument in 17).
pub async fn heartbeat_privilege(client: &Client, user: &str) -> Result<String, CheckError> {
    match catalog::emit_message_privilege(client).await? {
        Some((function, true)) => Ok(format!("role {user} may execute {function}")),
        Some((function, false)) => Err(CheckError::setup(
            format!(
                "role {user} may not execute {function}, which [heartbeat] interval calls to \
                 write heartbeats"
            ),
            format!(
                "run as a superuser: GRANT EXECUTE ON FUNCTION pg_catalog.{} TO {}; (or \
                 remove [heartbeat] interval)",
                function.trim_start_matches("pg_catalog."),
                ident(user)
            ),
        )),
        None => Err(CheckError::setup(
            "this server has no pg_logical_emit_message(boolean, text, text), which [heartbeat] \
             interval calls",
            "use PostgreSQL 14 or newer, or remove [heartbeat] interval",
        )),
    }
}

/// How incremental snapshots place their chunks in the stream on this
/// server (`[snapshot] watermarks`): `true` for read-only watermarks, with
/// the line `check` prints. `messages` needs the right to EXECUTE
/// `pg_logical_emit_message` on the primary (`client`); `auto` takes
/// read-only watermarks without it.
pub async fn incremental_watermarks(
    client: &Client,
    watermarks: Watermarks,
    user: &str,
) -> Result<(bool, String), CheckError> {
    if watermarks == Watermarks::ReadOnly {
        return Ok((
            true,
            "read-only watermarks (watermarks = \"read_only\"): nothing is written".to_owned(),
        ));
    }
    match (catalog::emit_message_privilege(client).await?, watermarks) {
        (Some((function, true)), _) => Ok((
            false,
            format!("watermarks as logical messages: role {user} may execute {function}"),
        )),
        (Some((function, false)), Watermarks::Auto) => Ok((
            true,
            format!(
                "read-only watermarks: role {user} may not execute {function} (watermarks = \
                 \"auto\")"
            ),
        )),
        (None, Watermarks::Auto) => Ok((
            true,
            "read-only watermarks: this server has no pg_logical_emit_message(boolean, text, \
             text) (watermarks = \"auto\")"
                .to_owned(),
        )),
        (Some((function, false)), _) => Err(CheckError::setup(
            format!(
                "role {user} may not execute {function}, which [snapshot] watermarks = \
                 \"messages\" calls around each incremental snapshot chunk"
            ),
            format!(
                "run as a superuser: GRANT EXECUTE ON FUNCTION pg_catalog.{} TO {}; or set \
                 [snapshot] watermarks = \"read_only\" (or \"auto\")",
                function.trim_start_matches("pg_catalog."),
                ident(user)
            ),
        )),
        (None, _) => Err(CheckError::setup(
            "this server has no pg_logical_emit_message(boolean, text, text), which [snapshot] \
             watermarks = \"messages\" calls",
            "set [snapshot] watermarks = \"read_only\" (or \"auto\")",
        )),
    }
}
