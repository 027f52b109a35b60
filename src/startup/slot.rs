//! The slot against the configuration and the offset store: its shape (a
//! logical pgoutput slot of this database), the slot plan (resume, create
//! and stream, snapshot, or nothing to do; [`SlotPlan`]), a missing slot,
//! a snapshot lost to `idle_replication_slot_timeout`, and where streaming
//! starts ([`start_position`], on `offsets::compare`'s decision). A slot
//! ahead of the stored offset, dropped or lost is refused unless the
//! operator accepted its position — never for a lost slot.

use super::CheckError;
use crate::Lsn;
use crate::config::{PostgresConfig, SnapshotMode};
use crate::offsets::{self, SlotPosition, StartDecision, StoredOffset};
use crate::pg::catalog::SlotState;

/// The slot does not exist: `Ok` means `run` will create it. Refused when the
/// offset store remembers a position (the slot was dropped: what was
/// committed since was never streamed), unless the operator accepted that.
pub fn missing_slot(
    pg: &PostgresConfig,
    stored: Option<&StoredOffset>,
    accept_slot_position: bool,
) -> Result<(), CheckError> {
    if let Some(stored) = stored
        && !accept_slot_position
    {
        return Err(CheckError::Refused {
            reason: format!(
                "replication slot {:?} does not exist, but the offset store says this connector had published up to {}: the slot was dropped, and changes since then were never streamed",
                pg.slot, stored.lsn
            ),
            hint: "in this order: start once with --accept-slot-position (walrelay creates the slot and names the range it never streamed), then reconcile that range with walrelay republish; reconciling first loses what commits in between (see docs/operations.md, \"Lost slot\")".into(),
        });
    }
    if !pg.create_slot {
        return Err(CheckError::setup(
            format!("replication slot {:?} does not exist", pg.slot),
            format!(
                "set postgres.create_slot = true, or create it: SELECT pg_create_logical_replication_slot('{}', 'pgoutput');",
                pg.slot
            ),
        ));
    }
    Ok(())
}

/// What `run` does about the slot and the initial snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotPlan {
    /// Stream from the existing slot ([`start_position`] says from where).
    Resume,
    /// Create the slot (no snapshot) and stream from its creation.
    CreateAndStream,
    /// Create the slot with an exported snapshot, publish the outbox tables'
    /// rows as of it, then stream (`initial_only`: stop). `drop_first`: a
    /// slot of that name exists and is dropped first (walrelay's own slot of
    /// an interrupted snapshot, or a lost slot under `when_needed`).
    ///
    /// `replaces_stream_at`: under `when_needed`, the stored offset the
    /// stream stopped at when its slot went missing or lost. The new
    /// snapshot holds the rows that exist at its consistent point, but what
    /// happened in between is gone: a row inserted and deleted (an outbox
    /// row cleaned up), and every update or delete of a `[[table]]`. That
    /// range is an accepted gap, stored and shown like one.
    ///
    /// `resume`: the interrupted snapshot's slot is still at its consistent
    /// point (this LSN) and its readers' snapshot is stored, so the slot is
    /// kept and the tables not done yet are read as that snapshot saw them
    /// (`crate::source::Origin::Resumed`), if [`resumable`] agrees;
    /// `drop_first` is then false.
    Snapshot {
        drop_first: bool,
        why: String,
        replaces_stream_at: Option<String>,
        resume: Option<Lsn>,
    },
    /// `initial_only` with nothing left to do.
    NothingToDo { why: String },
}

/// Before a snapshot is taken again because the slot is lost: refused when
/// the lost slot was the last snapshot's, invalidated by PostgreSQL 18's
/// `idle_replication_slot_timeout` before streaming began (the offset store
/// holds the snapshot `completed` and no position past its consistent
/// point), and the setting (`idle_limit`, as `SHOW` prints it) is still on:
/// a snapshot's slot stays inactive until the snapshot is in Kafka, so the
/// next one would be invalidated the same way, again and again.
pub fn snapshot_outlived_idle_timeout(
    stored: Option<&StoredOffset>,
    slot: Option<&SlotState>,
    slot_name: &str,
    idle_limit: &str,
) -> Result<(), CheckError> {
    let idle_on = !matches!(idle_limit.trim(), "" | "0");
    let by_idle_timeout =
        slot.is_some_and(|s| s.invalidation_reason.as_deref() == Some("idle_timeout"));
    let never_streamed = stored.is_some_and(|s| {
        s.snapshot.as_ref().is_some_and(|p| {
            p.state == crate::offsets::SnapshotState::Completed
                && p.consistent_point
                    .as_deref()
                    .and_then(|c| c.parse::<Lsn>().ok())
                    == Some(s.lsn)
        })
    });
    if idle_on && by_idle_timeout && never_streamed {
        return Err(CheckError::setup(
            format!(
                "replication slot {slot_name:?} was invalidated by idle_replication_slot_timeout \
                 ({idle_limit}) before streaming from its snapshot began: a snapshot's slot stays \
                 inactive until every snapshot row is in Kafka, and this snapshot took longer, so \
                 taking it again would end the same way"
            ),
            "set idle_replication_slot_timeout = 0, or well above how long the snapshot takes \
             (its `snapshot progress` log lines), in postgresql.conf and reload \
             (SELECT pg_reload_conf()); the next start takes the snapshot again",
        ));
    }
    Ok(())
}

/// How the interrupted snapshot `progress` is resumed on this server now,
/// checked on `catalog`: `Ok(None)` with its `xmin` filter, `Ok(Some(why))`
/// without it; `Err` when the server could not be asked.
///
/// A resumed read keeps the rows whose `xmin` the stored snapshot saw: the
/// rows as of the consistent point, none the stream also carries. That is
/// exact only while the cluster's transaction ids fit in 32 bits
/// ([`crate::pg::snapshot::full_xids`]) and no table was rewritten or
/// changed since ([`crate::pg::snapshot::changed_since`]: an `ALTER TABLE`
/// rewrite gives every row a new `xmin`, which would hide them all). Then
/// the tables not done are read unfiltered and as they are now (each part
/// from its stored key unless the table's columns changed), still on the
/// same slot: a row written since the consistent point may come twice (the
/// snapshot's copy and the stream's), but none is lost — taking the
/// snapshot again on a new slot would lose every row inserted and deleted
/// while walrelay was down.
pub async fn resumable(
    catalog: &tokio_postgres::Client,
    progress: &crate::offsets::SnapshotProgress,
) -> Result<Option<String>, String> {
    use crate::pg::snapshot::{changed_since, full_xids, table_shapes};
    match full_xids(catalog).await {
        Ok(true) => {}
        Ok(false) => {
            return Ok(Some(
                "the cluster has used 2^32 transaction ids or more, so a row's xmin no longer \
                 tells whether the interrupted snapshot saw it"
                    .to_owned(),
            ));
        }
        Err(e) => return Err(e.to_string()),
    }
    let oids: Vec<u32> = progress.shapes.iter().map(|(oid, _)| *oid).collect();
    match table_shapes(catalog, &oids).await {
        Ok(now) => Ok(changed_since(&progress.shapes, &now)),
        Err(e) => Err(e.to_string()),
    }
}

/// Decides [`SlotPlan`] from the snapshot mode (`None`: unset), the stored
/// offset and the slot. Refused: a mode that asks for a snapshot with a slot
/// walrelay did not create for it (a snapshot can only be aligned with a
/// slot created with an exported snapshot), and what [`missing_slot`]
/// refuses.
pub fn slot_plan(
    mode: Option<SnapshotMode>,
    stored: Option<&StoredOffset>,
    slot: Option<&SlotState>,
    pg: &PostgresConfig,
    accept_slot_position: bool,
) -> Result<SlotPlan, CheckError> {
    let wants_snapshot = mode != Some(SnapshotMode::NoData);
    let interrupted = stored.is_some_and(|s| s.snapshot_interrupted() && s.slot == pg.slot);
    let needs_create = |why: String| {
        if pg.create_slot {
            Ok(())
        } else {
            Err(CheckError::setup(
                format!("{why}, but postgres.create_slot = false"),
                "set postgres.create_slot = true (the snapshot needs the slot walrelay creates \
                 with it), or set [snapshot] mode = \"no_data\"",
            ))
        }
    };
    if interrupted && wants_snapshot {
        let progress = stored.and_then(|s| s.snapshot.as_ref());
        let point = progress
            .and_then(|p| p.consistent_point.as_deref())
            .and_then(|c| c.parse::<Lsn>().ok());
        let why_not = match (point, slot) {
            _ if progress.is_none_or(|p| p.taken.is_none() || p.shapes.is_empty()) => {
                "its readers' snapshot was never stored".to_owned()
            }
            (None, _) => "its slot's consistent point was never stored".to_owned(),
            (_, None) => format!("replication slot {:?} is gone", pg.slot),
            (Some(_), Some(s))
                if s.wal_status.as_deref() == Some("lost") || s.invalidation_reason.is_some() =>
            {
                format!(
                    "replication slot {:?} was invalidated ({})",
                    pg.slot,
                    s.invalidation_reason.as_deref().unwrap_or("lost")
                )
            }
            (Some(point), Some(s)) if s.confirmed_flush_lsn != Some(point) => format!(
                "replication slot {:?} is at {}, not at the snapshot's consistent point {point}",
                pg.slot,
                s.confirmed_flush_lsn
                    .map_or_else(|| "no position".to_owned(), |l| l.to_string())
            ),
            (Some(point), Some(_)) => {
                return Ok(SlotPlan::Snapshot {
                    drop_first: false,
                    why: format!(
                        "the previous snapshot did not complete (the offset store says it was \
                         running); its slot is still at its consistent point {point}, so it is \
                         resumed: the tables not done yet are read as of that point, and the \
                         stream goes on from it"
                    ),
                    replaces_stream_at: None,
                    resume: Some(point),
                });
            }
        };
        let why = format!(
            "the previous snapshot did not complete (the offset store says it was running) and \
             cannot be resumed: {why_not}; it is taken again from the start"
        );
        needs_create(why.clone())?;
        return Ok(SlotPlan::Snapshot {
            drop_first: slot.is_some(),
            why,
            replaces_stream_at: None,
            resume: None,
        });
    }
    // Under no_data an interrupted snapshot is simply not resumed.
    let stored = stored.filter(|_| !interrupted);
    let name = |m: Option<SnapshotMode>| m.map_or("initial", SnapshotMode::as_str);
    match (stored, slot) {
        (None, None) => {
            if wants_snapshot {
                let why =
                    "a new connector (no stored offset, no slot) snapshots its tables".to_owned();
                needs_create(why.clone())?;
                Ok(SlotPlan::Snapshot {
                    drop_first: false,
                    why,
                    replaces_stream_at: None,
                    resume: None,
                })
            } else {
                missing_slot(pg, None, accept_slot_position)?;
                Ok(SlotPlan::CreateAndStream)
            }
        }
        (None, Some(_)) => match mode {
            None | Some(SnapshotMode::NoData) => Ok(SlotPlan::Resume),
            Some(m) => Err(CheckError::Refused {
                reason: format!(
                    "[snapshot] mode = \"{}\" asks for a snapshot, but replication slot {:?} exists \
                     already and no offset is stored: a snapshot can only be aligned with a slot \
                     walrelay creates itself (with an exported snapshot)",
                    name(Some(m)),
                    pg.slot
                ),
                hint: format!(
                    "drop the slot (SELECT pg_drop_replication_slot('{}')) so walrelay creates it \
                     with a snapshot, or set [snapshot] mode = \"no_data\" to stream from the \
                     slot's position without one",
                    pg.slot.replace('\'', "''")
                ),
            }),
        },
        (Some(_), _) if mode == Some(SnapshotMode::InitialOnly) => Ok(SlotPlan::NothingToDo {
            why: "the offset store says this connector already took its snapshot (or streams \
                  already); initial_only has nothing to do"
                .into(),
        }),
        (Some(stored), None) => {
            if mode == Some(SnapshotMode::WhenNeeded) {
                let why = format!(
                    "replication slot {:?} is missing (the offset store is at {}); when_needed \
                     snapshots again",
                    pg.slot, stored.lsn
                );
                needs_create(why.clone())?;
                return Ok(SlotPlan::Snapshot {
                    drop_first: false,
                    why,
                    replaces_stream_at: Some(stored.lsn.to_string()),
                    resume: None,
                });
            }
            missing_slot(pg, Some(stored), accept_slot_position)?;
            Ok(SlotPlan::CreateAndStream)
        }
        (Some(stored), Some(slot)) => {
            if mode == Some(SnapshotMode::WhenNeeded) && slot.wal_status.as_deref() == Some("lost")
            {
                let why = format!(
                    "replication slot {:?} is lost (PostgreSQL removed WAL it needed); \
                     when_needed drops it and snapshots again",
                    pg.slot
                );
                needs_create(why.clone())?;
                return Ok(SlotPlan::Snapshot {
                    drop_first: true,
                    why,
                    replaces_stream_at: Some(stored.lsn.to_string()),
                    resume: None,
                });
            }
            Ok(SlotPlan::Resume)
        }
    }
}

/// The slot is a logical pgoutput slot of this database.
pub fn slot_shape(slot: &SlotState, name: &str, database: &str) -> Result<(), CheckError> {
    if slot.slot_type != "logical" || slot.plugin.as_deref() != Some("pgoutput") {
        return Err(CheckError::setup(
            format!(
                "replication slot {name:?} is a {} slot using plugin {}, walrelay needs a logical slot using pgoutput",
                slot.slot_type,
                slot.plugin.as_deref().unwrap_or("(none)")
            ),
            "configure another postgres.slot name, or drop this slot if nothing needs it",
        ));
    }
    if slot.database.as_deref() != Some(database) {
        return Err(CheckError::setup(
            format!(
                "replication slot {name:?} belongs to database {}, not {database}",
                slot.database.as_deref().unwrap_or("(none)")
            ),
            "use a slot name unique to this database",
        ));
    }
    Ok(())
}

/// Where streaming starts, and whether the operator's acceptance was needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    pub from: Lsn,
    /// The slot disagreed with the stored offset and `--accept-slot-position`
    /// overrode it: the caller stores `from` before streaming.
    pub accepted: bool,
}

/// Where streaming starts: the slot's confirmed position, if it agrees with
/// the stored offset (see [`offsets::compare`]). A disagreement is refused
/// unless the operator accepted the slot's position (never for a lost slot).
pub fn start_position(
    stored: Option<&StoredOffset>,
    slot: &SlotState,
    server: &offsets::Server<'_>,
    slot_name: &str,
    accept_slot_position: bool,
) -> Result<Start, CheckError> {
    let position = SlotPosition {
        confirmed_flush: slot.confirmed_flush_lsn.unwrap_or(Lsn::ZERO),
        wal_status: slot.wal_status.clone(),
    };
    match offsets::compare(stored, &position, server, slot_name) {
        StartDecision::Resume { from } => Ok(Start {
            from,
            accepted: false,
        }),
        StartDecision::Refuse { reason, hint } => {
            if !accept_slot_position || position.wal_status.as_deref() == Some("lost") {
                return Err(CheckError::Refused { reason, hint });
            }
            tracing::warn!(%reason, "starting anyway: --accept-slot-position was given");
            Ok(Start {
                from: position.confirmed_flush,
                accepted: true,
            })
        }
    }
}

#[cfg(test)]
mod tests;
