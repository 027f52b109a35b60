//! `check`'s slot lines: what `run` will do about the slot and the initial
//! snapshot (decided by the functions `run` uses, [`startup::slot_plan`]
//! after [`startup::slot_shape`], so a refusal is `run`'s error word for
//! word), whether the slot survives a failover, and how much WAL it holds.
//!
//! The slot is read before the offset store is read again
//! ([`super::kafka::reread_after_slot`]): a running connector stores a
//! position before it confirms it, so in this order the slot is never seen
//! ahead of the stored offset by the race between the two reads.

use crate::commands::probe::read_slot;
use crate::config::{Config, OutboxConfig, SnapshotMode};
use crate::offsets;
use crate::pg::catalog;
use crate::startup::{self, SlotPlan};

use super::{Outcome, Report, System, fail, outcome};

/// The "replication slot", "failover" and "slot WAL" lines. `stored` is
/// `None` when the offset store could not be read, `system` when the
/// replication connection failed.
pub(super) async fn slot_lines(
    config: &Config,
    client: &tokio_postgres::Client,
    stored: Option<Option<offsets::StoredOffset>>,
    system: Option<&System>,
    tables: &[(&OutboxConfig, &catalog::CapturedTable)],
    captured: &[startup::TableEventTable],
    report: &mut Report,
) {
    let pg = &config.postgres;
    match catalog::slot_state(client, &pg.slot).await {
        Ok(slot) => {
            let stored = super::kafka::reread_after_slot(config, stored).await;
            let line = slot_line(
                config,
                client,
                slot.as_ref(),
                stored.as_ref(),
                system,
                tables,
                captured,
            )
            .await;
            report.push("replication slot", line);
            report.push(
                "failover",
                failover_readiness(client, slot.as_ref(), config).await,
            );
            if slot.is_some() {
                report.push("slot WAL", slot_wal(client, &pg.slot).await);
                match startup::slot_predates_publication(client, &pg.slot, &pg.publication).await {
                    Ok(Some(warning)) => report.push("replication slot", Outcome::Warn(warning)),
                    Ok(None) => {}
                    Err(e) => report.push("replication slot", fail(e.problem(), e.fix())),
                }
            }
        }
        Err(e) => report.push("replication slot", fail(e.to_string(), "see the error")),
    }
}

/// The "slot WAL" line: how much WAL the slot holds and may still hold.
/// `extended` and `unreserved` warn (the second one is a checkpoint away
/// from `lost`, and a slot can go from `reserved` to `lost` in one
/// checkpoint, so the sizes are printed whatever the status).
async fn slot_wal(client: &tokio_postgres::Client, slot: &str) -> Outcome {
    match read_slot(client, slot).await {
        Ok(Some(s)) => {
            let summary = s.wal_summary();
            match s.wal_status.as_deref() {
                Some("extended") => Outcome::Warn(format!(
                    "{summary}: the slot holds more than max_wal_size; see docs/operations.md, \
                     \"WAL growth\""
                )),
                Some("unreserved") => Outcome::Warn(format!(
                    "{summary}: the next checkpoint may remove WAL the slot needs (then it is \
                     lost); see docs/operations.md, \"WAL growth\", now"
                )),
                _ => Outcome::Ok(summary),
            }
        }
        Ok(None) => Outcome::Warn(format!("{slot} disappeared while checking")),
        Err(e) => Outcome::Warn(format!("sizes unknown: {e}")),
    }
}

/// The "failover" line: whether the slot survives the promotion of a
/// standby, and what to set where it would not (docs/operations.md,
/// "PostgreSQL failover"). Only the primary's side can be read from here:
/// the standbys' settings are named, not checked.
async fn failover_readiness(
    client: &tokio_postgres::Client,
    slot: Option<&catalog::SlotState>,
    config: &Config,
) -> Outcome {
    const STANDBY: &str = "on each standby: sync_replication_slots = on, hot_standby_feedback = \
                           on, primary_slot_name = '<its physical slot>', and dbname=<database> \
                           in primary_conninfo";
    if config.postgres.capture_from.from_standby() {
        // `client` is the standby's session here.
        return Outcome::Ok(format!(
            "{} lives on the standby walrelay captures from (postgres.standby_host): a promotion \
             of that standby keeps it, and walrelay goes on with it on the new timeline; losing \
             that standby loses the slot (a slot on a standby cannot be a failover slot), and a \
             new one on another standby takes the snapshot again",
            config.postgres.slot
        ));
    }
    let version = match catalog::server_version(client).await {
        Ok(v) => v,
        Err(e) => return Outcome::Warn(format!("unknown: {e}")),
    };
    if version < 170000 {
        return Outcome::Warn(format!(
            "PostgreSQL {}: a logical slot does not survive a failover to a standby (failover \
             slots need 17+); after a promotion walrelay refuses to start until the slot is \
             recreated (docs/operations.md, \"PostgreSQL failover\")",
            version / 10000
        ));
    }
    let pg = &config.postgres;
    if !pg.failover_slot {
        return Outcome::Warn(
            "postgres.failover_slot = false: standbys keep no copy of the slot, so a promotion \
             loses it; set it to true (the default)"
                .into(),
        );
    }
    let slot_says = match slot.and_then(|s| s.failover) {
        Some(true) => format!("{} is a failover slot", pg.slot),
        Some(false) => format!("run will make {} a failover slot", pg.slot),
        None => format!("run will create {} as a failover slot", pg.slot),
    };
    let synced = catalog::setting(client, "synchronized_standby_slots")
        .await
        .unwrap_or_default();
    if synced.trim().is_empty() {
        return Outcome::Warn(format!(
            "{slot_says}, but synchronized_standby_slots is empty on this primary: walrelay may \
             publish changes a standby has not received yet, and a promotion of that standby \
             then refuses to resume (its timeline left before walrelay's position). Set \
             synchronized_standby_slots = '<the standbys' physical slots>' here, and {STANDBY}"
        ));
    }
    // What the primary can see of each standby named there: its physical
    // slot, whether it is connected, and whether it sends hot standby
    // feedback (the slot then has an xmin).
    let mut problems = Vec::new();
    for name in synced.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let row = client
            .query_opt(
                "SELECT active, xmin IS NOT NULL FROM pg_replication_slots \
                 WHERE slot_name = $1 AND slot_type = 'physical'",
                &[&name],
            )
            .await;
        match row {
            Ok(None) => problems.push(format!(
                "{name} is not a physical slot on this primary (logical walsenders wait for it: \
                 walrelay stalls)"
            )),
            Ok(Some(r)) if !r.get::<_, bool>(0) => problems.push(format!(
                "the standby of slot {name} is not connected (walrelay waits for it)"
            )),
            Ok(Some(r)) if !r.get::<_, bool>(1) => problems.push(format!(
                "the standby of slot {name} sends no hot standby feedback (set \
                 hot_standby_feedback = on there, or its copy of the slot cannot be used)"
            )),
            Ok(Some(_)) => {}
            Err(e) => problems.push(format!("slot {name} unreadable: {e}")),
        }
    }
    if !problems.is_empty() {
        return Outcome::Warn(format!(
            "{slot_says}; synchronized_standby_slots = '{synced}': {}; {STANDBY}",
            problems.join("; ")
        ));
    }
    Outcome::Ok(format!(
        "{slot_says}; synchronized_standby_slots = '{synced}', each standby connected with hot \
         standby feedback (walrelay never gets ahead of them); {STANDBY}"
    ))
}

/// The "replication slot" line: what `run` will do about the slot and the
/// initial snapshot, decided by the function `run` uses
/// ([`startup::slot_plan`], after [`startup::slot_shape`]); a refusal is
/// `run`'s error word for word. `stored` is `None` when the offset store
/// could not be read, `system` when the replication connection failed:
/// then only what does not depend on them is said.
async fn slot_line(
    config: &Config,
    client: &tokio_postgres::Client,
    slot: Option<&catalog::SlotState>,
    stored: Option<&Option<offsets::StoredOffset>>,
    system: Option<&System>,
    tables: &[(&OutboxConfig, &catalog::CapturedTable)],
    captured: &[startup::TableEventTable],
) -> Outcome {
    let pg = &config.postgres;
    if let Some(slot) = slot
        && let Err(e) = startup::slot_shape(slot, &pg.slot, &pg.database)
    {
        return fail(e.problem(), e.fix());
    }
    let Some(stored) = stored else {
        return Outcome::Warn(match slot {
            Some(_) => format!(
                "{} exists; not compared with the offset store (Kafka failed above)",
                pg.slot
            ),
            None => format!(
                "{} does not exist; whether run creates it, snapshots or refuses depends on the \
                 offset store, which could not be read (Kafka failed above)",
                pg.slot
            ),
        });
    };
    let plan = startup::slot_plan(config.snapshot.mode, stored.as_ref(), slot, pg, false);
    let plan = match plan {
        Ok(plan) => plan,
        Err(e) => return fail(e.problem(), e.fix()),
    };
    match plan {
        SlotPlan::Resume => {
            let (Some(slot), Some((system_id, timeline, history))) = (slot, system) else {
                return Outcome::Warn(format!(
                    "{} exists; not compared with the offset store (the replication connection \
                     failed above)",
                    pg.slot
                ));
            };
            let server = offsets::Server {
                system_id,
                timeline: *timeline,
                history: history.as_deref(),
            };
            let specs = crate::relay::incremental::Specs::new(config, captured);
            let (incremental, added) =
                crate::relay::incremental::plan_at_start(config, stored.as_ref(), &specs);
            let incremental = match (incremental, added.is_empty()) {
                (None, _) => String::new(),
                (Some(_), false) => format!(
                    "; run will publish the existing rows of {} (added to the configuration) by \
                     an incremental snapshot beside the stream",
                    added.join(", ")
                ),
                (Some(plan), true) if plan.done() => format!(
                    "; run will give up the stored incremental snapshot {} ({})",
                    plan.id,
                    plan.tables
                        .iter()
                        .filter_map(|t| Some(format!("{}: {}", t.display(), t.abandoned.as_ref()?)))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                (Some(plan), true) => format!(
                    "; run will go on with incremental snapshot {} ({} of {} tables done)",
                    plan.id,
                    plan.tables.iter().filter(|t| t.done).count(),
                    plan.tables.len()
                ),
            };
            outcome(
                startup::start_position(stored.as_ref(), slot, &server, &pg.slot, false),
                |start| {
                    let active = slot
                        .active_pid
                        .map(|p| format!(", in use by PID {p}"))
                        .unwrap_or_default();
                    Outcome::Ok(format!(
                        "{} at {}, wal_status {}{active}{incremental}",
                        pg.slot,
                        start.from,
                        slot.wal_status.as_deref().unwrap_or("?")
                    ))
                },
            )
        }
        SlotPlan::CreateAndStream => Outcome::Ok(format!(
            "{} does not exist yet; run will create it and stream from its creation, without a \
             snapshot ([snapshot] mode = \"no_data\")",
            pg.slot
        )),
        SlotPlan::NothingToDo { why } => {
            Outcome::Ok(format!("run will stop at once, leaving {}: {why}", pg.slot))
        }
        SlotPlan::Snapshot {
            drop_first,
            why,
            replaces_stream_at,
            resume,
        } => {
            for (outbox, table) in tables {
                if let Err(e) = startup::snapshot_privileges(client, table).await {
                    return fail(e.problem(), e.fix());
                }
                if let Err(e) = startup::snapshot_order(client, outbox, table).await {
                    return fail(e.problem(), e.fix());
                }
            }
            for c in captured {
                if let Err(e) = startup::snapshot_privileges(client, &c.table).await {
                    return fail(e.problem(), e.fix());
                }
                if let Err(e) = startup::table_snapshot_order(config, c) {
                    return fail(e.problem(), e.fix());
                }
            }
            if let Some(point) = resume {
                let progress = stored.as_ref().and_then(|s| s.snapshot.as_ref());
                let checked = match progress {
                    Some(p) => startup::resumable(client, p).await,
                    None => Err("its progress is not stored".to_owned()),
                };
                return match checked {
                    Ok(None) => Outcome::Ok(format!(
                        "{} is at the interrupted snapshot's consistent point {point}; run will \
                         resume the snapshot ({} of its tables done) and stream from that point: \
                         {why}",
                        pg.slot,
                        progress.map_or(0, |p| p.tables_done.len())
                    )),
                    Ok(Some(unfiltered)) => Outcome::Warn(format!(
                        "{} is at the interrupted snapshot's consistent point {point}; run will \
                         resume the snapshot on it ({} of its tables done), reading the others \
                         unfiltered and as they are now ({unfiltered}): rows written since that \
                         point may come twice, none is lost; {why}",
                        pg.slot,
                        progress.map_or(0, |p| p.tables_done.len())
                    )),
                    Err(why_not) => Outcome::Warn(format!(
                        "{} exists; the interrupted snapshot cannot be resumed ({why_not}), so \
                         run will drop the slot and create it again with a new snapshot",
                        pg.slot
                    )),
                };
            }
            let then = if config.snapshot.mode == Some(SnapshotMode::InitialOnly) {
                "then stop (initial_only)"
            } else {
                "then stream from its consistent point"
            };
            let what = format!(
                "an exported snapshot and snapshot {} ({}), {then}: {why}",
                plural(config.outbox.len() + captured.len(), "table"),
                estimate(
                    client,
                    tables
                        .iter()
                        .map(|(_, t)| *t)
                        .chain(captured.iter().map(|c| &c.table))
                )
                .await
            );
            if let Some(from) = replaces_stream_at {
                // Changes between the stream's stop and the new snapshot are
                // gone: say so before run does it.
                Outcome::Warn(format!(
                    "run will {} {} with {what}. Changes committed after the stored offset {from} \
                     and before the new snapshot are never streamed (rows inserted and deleted \
                     in between, updates and deletes of [[table]] captures): run records that \
                     range as an accepted gap (docs/operations.md, \"Lost slot\")",
                    if drop_first {
                        "drop and re-create"
                    } else {
                        "create"
                    },
                    pg.slot
                ))
            } else if drop_first {
                // Re-sends what the first snapshot published: worth a look.
                Outcome::Warn(format!(
                    "{} exists; run will drop it and create it again with {what}",
                    pg.slot
                ))
            } else {
                Outcome::Ok(format!(
                    "{} does not exist yet; run will create it with {what}",
                    pg.slot
                ))
            }
        }
    }
}

/// `~M rows estimated from pg_class.reltuples: public.outbox ~M, …`.
async fn estimate<'a>(
    client: &tokio_postgres::Client,
    tables: impl Iterator<Item = &'a catalog::CapturedTable>,
) -> String {
    let mut total = 0u64;
    let mut parts = Vec::new();
    let mut unknown = false;
    for table in tables {
        match catalog::row_estimate(client, table.oid).await {
            Ok(e) => {
                total = total.saturating_add(e.rows);
                unknown |= e.unknown > 0;
                parts.push(format!(
                    "{}.{} {}",
                    table.schema,
                    table.name,
                    startup::describe_estimate(&e)
                ));
            }
            Err(e) => {
                return format!(
                    "no row estimate for {}.{}: {}",
                    table.schema,
                    table.name,
                    catalog::describe(&e)
                );
            }
        }
    }
    let total = if unknown {
        format!("~{}+ rows", startup::thousands(total))
    } else {
        format!("~{} rows", startup::thousands(total))
    };
    format!(
        "{total} estimated from pg_class.reltuples: {}",
        parts.join(", ")
    )
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}
