//! What capture from a hot standby (`postgres.capture_from = "standby"`
//! or `"standby_only"`) needs of the server that holds the slot:
//! PostgreSQL 16+, `wal_level = logical` there too, and
//! `hot_standby_feedback = on` (else VACUUM on the primary removes catalog
//! rows the slot still needs, and PostgreSQL invalidates the slot). A
//! server out of recovery (a promoted standby) is captured from under
//! `"standby"`, said as a warning, and refused under `"standby_only"`.
//!
//! Invariant: the same checks in `run` and `check` (see [`crate::startup`]).

use tokio_postgres::Client;

use super::{CheckError, wal_level};
use crate::config::CaptureFrom;
use crate::pg::catalog;

/// The server of `postgres.standby_host` as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureServer {
    /// It is a standby (in recovery); `false`: a promoted one.
    pub in_recovery: bool,
    /// What was checked, in `check`'s words.
    pub checked: String,
    /// What works but deserves the operator's attention.
    pub warnings: Vec<String>,
}

/// Checks the server of `postgres.standby_host` (see the module doc).
pub async fn capture_server(
    client: &Client,
    capture: CaptureFrom,
) -> Result<CaptureServer, CheckError> {
    let in_recovery = catalog::in_recovery(client).await?;
    let mut warnings = Vec::new();
    if !in_recovery {
        if capture == CaptureFrom::StandbyOnly {
            return Err(CheckError::setup(
                "the server of postgres.standby_host is not in recovery (a promoted standby, or a \
                 primary), and postgres.capture_from = \"standby_only\" captures only from a \
                 standby",
                "point postgres.standby_host at a hot standby, or set postgres.capture_from = \
                 \"standby\" to go on capturing from this server (a promoted standby keeps its \
                 slot)",
            ));
        }
        wal_level(client).await?;
        warnings.push(
            "the server of postgres.standby_host is not in recovery (a promoted standby?): \
             walrelay captures from it as from a primary, which capture_from = \"standby\" allows"
                .to_owned(),
        );
        return Ok(CaptureServer {
            in_recovery,
            checked: "the server of postgres.standby_host is not in recovery; wal_level = logical"
                .into(),
            warnings,
        });
    }
    let version = catalog::server_version(client).await?;
    if version < 160_000 {
        return Err(CheckError::setup(
            format!(
                "the standby runs PostgreSQL {}.{}, and logical decoding on a standby needs 16 or \
                 newer",
                version / 10_000,
                version % 10_000
            ),
            "upgrade the standby (and its primary) to PostgreSQL 16+, or set \
             postgres.capture_from = \"primary\"",
        ));
    }
    wal_level(client).await?;
    let feedback = catalog::setting(client, "hot_standby_feedback").await?;
    if feedback != "on" {
        return Err(CheckError::setup(
            "the standby runs with hot_standby_feedback = off: VACUUM on the primary may then \
             remove catalog rows the slot still needs, and PostgreSQL invalidates the slot \
             (rows_removed), which forces a new snapshot",
            "set hot_standby_feedback = on on the standby (postgresql.conf, then SELECT \
             pg_reload_conf())",
        ));
    }
    let physical_slot = catalog::setting(client, "primary_slot_name").await?;
    if physical_slot.is_empty() {
        warnings.push(
            "the standby streams from its primary without a physical replication slot \
             (primary_slot_name is empty): hot_standby_feedback then protects the slot's catalog \
             rows only while the standby is connected, and the primary may recycle WAL the \
             standby has not received yet; set primary_slot_name to a physical slot on the primary"
                .to_owned(),
        );
    }
    Ok(CaptureServer {
        in_recovery,
        checked: format!(
            "a hot standby (PostgreSQL {}), wal_level = logical, hot_standby_feedback = on{}",
            version / 10_000,
            if physical_slot.is_empty() {
                String::new()
            } else {
                format!(", primary_slot_name = {physical_slot}")
            }
        ),
        warnings,
    })
}
