//! The start-up decision: the slot against the stored offset.
//!
//! [`compare`] is pure: given the slot's state, the stored offset and the
//! server (system identifier, timeline, its history), it says where to
//! resume or why not to start, with what to do. `run`, `check` and
//! `status` all take their decision from it, so the three never disagree.
//! Its rules, in order, are on [`compare`]; the one invariant behind them:
//! never a silent jump over events that were never published, nor a silent
//! re-use of LSNs that name other changes.

use super::stored::StoredOffset;
use crate::Lsn;

/// The slot's state as read from `pg_replication_slots`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotPosition {
    pub confirmed_flush: Lsn,
    /// `reserved`, `extended`, `unreserved`, `lost` (PostgreSQL 13+).
    pub wal_status: Option<String>,
}

/// The server walrelay is connected to, as far as the start decision cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server<'a> {
    /// `IDENTIFY_SYSTEM`'s system identifier.
    pub system_id: &'a str,
    /// The server's current timeline (`IDENTIFY_SYSTEM`, in `run` and
    /// `check` alike).
    pub timeline: u32,
    /// The history file of the server's timeline (`TIMELINE_HISTORY`), when
    /// it is past timeline 1 and could be read: where it left the stored
    /// offset's timeline ([`switch_point`]) decides a timeline change.
    /// `None` makes any timeline change a refusal.
    pub history: Option<&'a str>,
}

/// Where a timeline history file says `timeline` ended: the switch point on
/// its line `timeline<TAB>X/Y<TAB>reason`. `None` when `timeline` is not an
/// ancestor in it (or the file cannot be read as one).
pub fn switch_point(history: &str, timeline: u32) -> Option<Lsn> {
    history.lines().find_map(|line| {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        let mut fields = line.split_whitespace();
        let tli: u32 = fields.next()?.parse().ok()?;
        let lsn: Lsn = fields.next()?.parse().ok()?;
        (tli == timeline).then_some(lsn)
    })
}

/// How the slot relates to the stored offset at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartDecision {
    /// Resume streaming at `from`: the stored offset, or the slot's position
    /// when nothing is stored.
    Resume { from: Lsn },
    /// Refuse to start, with the reason and what to do.
    Refuse { reason: String, hint: String },
}

/// Compares the slot with the stored offset (see the module doc).
///
/// The rules, in order:
/// 1. a lost slot is refused (WAL is gone; overriding does not help);
/// 2. no stored offset: resume from the slot;
/// 3. another system identifier is refused (another cluster);
/// 4. another slot name is refused: the stored offset describes a different
///    slot, so comparing positions means nothing;
/// 5. another timeline is refused — a point-in-time restore or a promotion
///    re-uses LSNs after the switch point for different changes, so events
///    could be skipped or wrongly taken for duplicates (LSN-derived ids) —
///    unless the stored LSN is at or before the point where the server's
///    history left the stored timeline: then every LSN up to the stored one
///    means the same on both timelines (a failover to a standby whose
///    synced slot is behind the stored offset), and the slot is compared as
///    usual;
/// 6. a slot ahead of the stored LSN is refused (recreated or advanced);
/// 7. otherwise resume at the stored LSN. Everything below it is in Kafka,
///    and `START_REPLICATION` at a position past the slot's makes the
///    walsender skip transactions that committed before it (it starts at
///    "the given location or the slot's confirmed_flush_lsn, whichever is
///    greater"). A slot behind the stored offset is normal after a
///    PostgreSQL restart: a logical slot's confirmed position reaches disk
///    only when the slot is saved for other reasons (16 and older: not even
///    at a clean shutdown), so resuming from the slot would re-send
///    thousands of events.
pub fn compare(
    stored: Option<&StoredOffset>,
    slot: &SlotPosition,
    server: &Server<'_>,
    slot_name: &str,
) -> StartDecision {
    let recovery = "see docs/operations.md, \"Slot ahead of the stored offset\"";
    let system_id = server.system_id;
    if slot.wal_status.as_deref() == Some("lost") {
        return StartDecision::Refuse {
            reason: format!(
                "replication slot {slot_name:?} is lost (wal_status = 'lost'): PostgreSQL removed WAL it still needed, so changes after {} can no longer be streamed",
                slot.confirmed_flush
            ),
            hint: format!(
                "events committed after the stored offset are missing from Kafka. In this order: drop the slot (SELECT pg_drop_replication_slot('{slot_name}');), start once with --accept-slot-position (walrelay creates a new slot and names the range it never streamed), then reconcile that range with walrelay republish; see docs/operations.md, \"Lost slot\""
            ),
        };
    }
    let Some(stored) = stored else {
        return StartDecision::Resume {
            from: slot.confirmed_flush,
        };
    };
    if stored.system_id != system_id {
        return StartDecision::Refuse {
            reason: format!(
                "the offset store belongs to PostgreSQL system {} but this server is system {system_id} (a different cluster, or a restored/rebuilt one)",
                stored.system_id
            ),
            hint: format!(
                "point the connector at the right database, or if the move is intended start once with --accept-slot-position; {recovery}"
            ),
        };
    }
    if stored.slot != slot_name {
        return StartDecision::Refuse {
            reason: format!(
                "the stored offset of this connector describes replication slot {:?}, but postgres.slot is {slot_name:?}: the two positions cannot be compared",
                stored.slot
            ),
            hint: format!(
                "set postgres.slot back to {:?}; or, if the switch to {slot_name:?} is intended, make sure events committed after {} are in Kafka (reconcile from the outbox table) and start once with --accept-slot-position; {recovery}",
                stored.slot, stored.lsn
            ),
        };
    }
    let stored_lsn = stored.lsn;
    if stored.timeline != server.timeline {
        let left_at = server
            .history
            .and_then(|h| switch_point(h, stored.timeline));
        let continuous =
            stored.timeline < server.timeline && left_at.is_some_and(|switch| stored_lsn <= switch);
        if !continuous {
            return StartDecision::Refuse {
                reason: format!(
                    "the stored offset {stored_lsn} is on timeline {} but PostgreSQL is on timeline {}: the server was restored to a point in time or a standby was promoted, and LSNs after the switch point now name different changes, so resuming could skip events or make consumers drop new events as duplicates",
                    stored.timeline, server.timeline
                ),
                hint: format!(
                    "find the switch point in the timeline history (SELECT pg_read_file('pg_wal/{:08X}.history') as a superuser); after a failover whose switch point is at or after {stored_lsn}, nothing is lost: start once with --accept-slot-position. After a point-in-time restore to before {stored_lsn}, events after the restore point are in Kafka but no longer in the database: tell consumers, reconcile, then start once with --accept-slot-position; see docs/operations.md, \"Timeline change (restore or failover)\"",
                    server.timeline
                ),
            };
        }
    }
    if slot.confirmed_flush > stored_lsn {
        return StartDecision::Refuse {
            reason: format!(
                "replication slot {slot_name:?} is at {} but Kafka holds events only up to {stored_lsn}: the slot was dropped and recreated, or advanced by hand, and the WAL in between will never be streamed",
                slot.confirmed_flush
            ),
            hint: format!(
                "events committed between {stored_lsn} and {} may be missing from Kafka. In this order: start once with --accept-slot-position, then reconcile that range with walrelay republish (reconciling first loses what commits in between); {recovery}",
                slot.confirmed_flush
            ),
        };
    }
    StartDecision::Resume { from: stored_lsn }
}

#[cfg(test)]
mod tests;
