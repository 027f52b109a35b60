//! The replication slot's life, PostgreSQL's side of it: reading it before
//! a start, creating it (with an exported snapshot for a snapshot, or
//! without for a plain stream), dropping it to replace it, making it a
//! failover slot, and the check after every START_REPLICATION that it is
//! exactly where this instance expects it. The relay decides *what* to do
//! (startup's slot plan, with the offset store); this module is the only
//! place that does it.
//!
//! Invariants:
//! - **A slot another walsender holds is never touched.** [`inspect`]
//!   refuses it (transient: typically our own previous walsender, until
//!   `wal_sender_timeout` notices we are gone).
//! - **A created slot is read back.** [`create`] returns the slot as the
//!   catalog has it, or an error when it vanished at once: the start
//!   position is never guessed.
//! - **Waiting to create a slot is never silent.** PostgreSQL creates a
//!   logical slot only once every transaction holding an xid that was open
//!   when the creation began has ended; [`create_for_snapshot`] names them
//!   (pid, age, query) and counts them in the gauge it is given.
//! - **A slot created on a standby is not left waiting on an idle
//!   primary.** The standby creates it at the primary's next
//!   running-transactions record; while it waits, [`Nudge`] asks the
//!   primary for one (`pg_log_standby_snapshot()`) every few seconds, or,
//!   when the role may not, writes a logical message there (WAL activity,
//!   after which the primary writes such a record within 15 s) and says
//!   how to make it immediate.
//! - **After every start, the slot is where this instance left it**
//!   (`start_checked`): a slot someone advanced, or dropped and created
//!   again under the same name, is refused, never streamed from.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::Lsn;
use crate::pg::catalog::{self, SlotState};
use crate::pg::replication::{CreatedSlot, ReplicationClient, ReplicationStream};
use crate::pg::wire::{ConnectParams, ServerError, WireError};

use super::SourceError;

/// Reads `slot` from the catalog: `None` when it does not exist. A slot
/// that a walsender is using is refused (see the module doc).
pub async fn inspect(
    catalog: &tokio_postgres::Client,
    slot: &str,
) -> Result<Option<SlotState>, SourceError> {
    let state = catalog::slot_state(catalog, slot).await?;
    if let Some(pid) = state.as_ref().and_then(|s| s.active_pid) {
        return Err(SourceError::Wire(WireError::Server {
            context: "checking the slot".into(),
            error: Box::new(ServerError {
                severity: "ERROR".into(),
                code: "55006".into(),
                message: format!("replication slot {slot:?} is active for PID {pid}"),
                detail: None,
                hint: Some("another walrelay (or a dying walsender) uses this slot".into()),
            }),
        }));
    }
    Ok(state)
}

/// Creates `slot` for streaming from its creation point, and reads it back
/// (`catalog`: a session on the slot's server). `nudge`: the primary, when
/// the slot is created on a standby.
pub async fn create(
    repl: &mut ReplicationClient,
    catalog: &tokio_postgres::Client,
    slot: &str,
    failover: bool,
    nudge: Nudge<'_>,
) -> Result<SlotState, SourceError> {
    let at = nudge
        .while_creating(repl.create_slot(slot, failover))
        .await?;
    tracing::info!(slot, lsn = %at, "created replication slot");
    catalog::slot_state(catalog, slot)
        .await?
        .ok_or_else(|| SourceError::SlotVanished { slot: slot.into() })
}

/// Creates `slot` with an exported snapshot (dropping the existing one
/// first when `drop_first`): the snapshot's consistent point and name. The
/// connection must then stay idle until the snapshot was imported and read
/// (its next command ends the snapshot's life). While PostgreSQL waits for
/// open transactions to end, says which (`catalog`, `params`: the primary,
/// where they run), and counts them in `waiting`. `nudge`: the primary,
/// when the slot is created on a standby.
#[allow(clippy::too_many_arguments)] // the creation's whole context
pub async fn create_for_snapshot(
    repl: &mut ReplicationClient,
    catalog: &tokio_postgres::Client,
    params: &ConnectParams,
    slot: &str,
    failover: bool,
    drop_first: bool,
    waiting: &AtomicU64,
    nudge: Nudge<'_>,
) -> Result<CreatedSlot, SourceError> {
    if drop_first {
        repl.drop_slot(slot).await?;
        tracing::info!(slot, "dropped the replication slot");
    }
    let creating = nudge.while_creating(repl.create_slot_exporting_snapshot(slot, failover));
    let created = report_creation_waits(creating, catalog, params, waiting).await?;
    tracing::info!(
        slot, lsn = %created.consistent_point,
        "created replication slot with an exported snapshot"
    );
    Ok(created)
}

/// The prefix of the logical messages that nudge an idle primary: no one's
/// events (the relay ignores prefixes it does not know).
const NUDGE_PREFIX: &str = "walrelay.nudge";

/// The primary to nudge while a slot is created on a standby (module doc);
/// `Nudge(None)` creating on the primary.
#[derive(Clone, Copy)]
pub struct Nudge<'a>(pub Option<&'a tokio_postgres::Client>);

impl std::fmt::Debug for Nudge<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Nudge(primary)"
        } else {
            "Nudge(none)"
        })
    }
}

impl Nudge<'_> {
    /// Awaits `creating`, nudging the primary meanwhile.
    async fn while_creating<T>(
        self,
        creating: impl std::future::Future<Output = Result<T, WireError>>,
    ) -> Result<T, WireError> {
        const EVERY: Duration = Duration::from_secs(2);
        let Some(primary) = self.0 else {
            return creating.await;
        };
        tokio::pin!(creating);
        // The first nudge once the standby's creation has begun waiting.
        let mut next = tokio::time::Instant::now() + Duration::from_millis(200);
        let (mut logs, mut writes) = (true, true);
        loop {
            tokio::select! {
                r = &mut creating => return r,
                _ = tokio::time::sleep_until(next), if logs || writes => {
                    next = tokio::time::Instant::now() + EVERY;
                    if logs && let Err(e) = catalog::log_standby_snapshot(primary).await {
                        logs = false;
                        tracing::warn!(
                            error = %e,
                            "creating the slot on the standby waits for the primary's next \
                             running-transactions record, which it writes every 15 s after other \
                             WAL activity (walrelay writes some meanwhile); GRANT EXECUTE ON \
                             FUNCTION pg_log_standby_snapshot() TO the walrelay role makes it \
                             immediate"
                        );
                    }
                    if !logs && writes && let Err(e) = catalog::emit_message(primary, NUDGE_PREFIX, "").await {
                        writes = false;
                        tracing::warn!(
                            error = %e,
                            "creating the slot on the standby waits for the primary's next \
                             running-transactions record, written only after WAL activity on the \
                             primary, and walrelay may not write a logical message there either"
                        );
                    }
                }
            }
        }
    }
}

/// Makes `slot` a failover slot when `wanted` and it is not one (PostgreSQL
/// 17+: `state.failover` is `Some(false)`; before 17 there is no such slot).
pub async fn make_failover(
    repl: &mut ReplicationClient,
    state: &SlotState,
    slot: &str,
    wanted: bool,
) -> Result<(), SourceError> {
    if wanted && state.failover == Some(false) {
        repl.make_failover_slot(slot).await?;
        tracing::info!(
            slot,
            "made the replication slot a failover slot (postgres.failover_slot = true): \
             standbys with sync_replication_slots = on keep a copy of it"
        );
    }
    Ok(())
}

/// START_REPLICATION of `slot` from `from`, then the check both ways into
/// streaming share (resuming, and the hand-over after a snapshot): on
/// `catalog` (an ordinary connection), the slot's `confirmed_flush_lsn` must
/// be exactly `confirmed`, the position this instance read it at (or
/// created it at), and the slot not lost. (`from` may be past `confirmed`:
/// resuming from the stored offset when the slot's position on disk lags
/// it; the slot's position moves only with our first status update.)
///
/// Why exactly: PostgreSQL silently starts a slot at its own
/// `confirmed_flush_lsn` when asked for an older position, so a slot that
/// someone advanced, or dropped and created again under the same name (a
/// second instance, an operator), between our reading it and our START
/// would make the walsender skip every transaction in between without an
/// error. Nothing else confirms this slot while we hold the lease and
/// before our first status update, so any other value means another actor.
pub(super) async fn start_checked(
    client: ReplicationClient,
    catalog: &tokio_postgres::Client,
    slot: &str,
    from: Lsn,
    confirmed: Lsn,
    publication: &str,
) -> Result<ReplicationStream, SourceError> {
    let stream = client.start_replication(slot, from, publication).await?;
    let now = catalog::slot_state(catalog, slot).await?;
    if let Some(now) = &now
        && now.wal_status.as_deref() == Some("lost")
    {
        return Err(SourceError::SlotLost { slot: slot.into() });
    }
    let found = now.and_then(|s| s.confirmed_flush_lsn);
    if found != Some(confirmed) {
        return Err(SourceError::SlotMoved {
            slot: slot.into(),
            expected: confirmed,
            found,
        });
    }
    Ok(stream)
}

/// Awaits `creating` (the creation of the snapshot's slot), saying what it
/// waits for: after a few seconds, and then every half minute while it
/// still waits for the same ones, the open transactions are logged by pid
/// with their query, and `waiting` counts them.
async fn report_creation_waits<T>(
    creating: impl std::future::Future<Output = Result<T, WireError>>,
    catalog: &tokio_postgres::Client,
    params: &ConnectParams,
    waiting: &AtomicU64,
) -> Result<T, SourceError> {
    const FIRST: Duration = Duration::from_secs(3);
    const AGAIN: Duration = Duration::from_secs(30);
    let started = tokio::time::Instant::now();
    tokio::pin!(creating);
    let mut next = started + FIRST;
    // What was last said, and when: said again when it changes, or every
    // AGAIN while it does not.
    let mut reported: (Vec<i32>, Option<tokio::time::Instant>) = (Vec::new(), None);
    let result = loop {
        tokio::select! {
            r = &mut creating => break r.map_err(SourceError::from),
            _ = tokio::time::sleep_until(next) => {
                next = tokio::time::Instant::now() + FIRST;
                let waited = started.elapsed().as_secs_f64();
                let open = match catalog::slot_creation_blockers(catalog, &params.application_name, waited).await {
                    Ok(open) => open,
                    Err(e) => {
                        tracing::debug!(error = %e, "could not list the open transactions");
                        continue;
                    }
                };
                waiting.store(open.len() as u64, Ordering::Relaxed);
                let pids: Vec<i32> = open.iter().map(|t| t.pid).collect();
                let said_lately = reported.1.is_some_and(|at| at.elapsed() < AGAIN);
                if open.is_empty() || (pids == reported.0 && said_lately) {
                    continue;
                }
                reported = (pids, Some(tokio::time::Instant::now()));
                let list: Vec<String> = open.iter().map(ToString::to_string).collect();
                tracing::warn!(
                    waiting_secs = started.elapsed().as_secs(),
                    transactions = open.len(),
                    "creating the snapshot's replication slot waits for {} open transaction(s) to \
                     end (PostgreSQL needs a point where none that began before is still running): \
                     {}. End them (COMMIT/ROLLBACK, or SELECT pg_terminate_backend(pid)) and the \
                     snapshot starts",
                    open.len(),
                    list.join("; ")
                );
            }
        }
    };
    waiting.store(0, Ordering::Relaxed);
    result
}
