//! `walrelay check`: everything `run` needs, verified without streaming.
//!
//! Invariant: `check` fails exactly when `run` would refuse to start, in the
//! same words — the PostgreSQL checks are the functions of
//! [`crate::startup`] that `run` calls too; `check` only reports instead of
//! acting (it never creates the publication or the slot).
//!
//! Each check reports ok, a warning, or a failure with the fix. Checks that
//! depend on an unreachable service are reported as skipped (with the reason
//! already given by the failed connection check), so one problem yields one
//! clear line rather than a cascade.
//!
//! Reaching Kafka and reading the offset store ([`reach_kafka`],
//! [`read_offset_store`]) are shared with `walrelay status`, so both say a
//! broker refusing connections at once and in the same words.

use std::fmt;
use std::time::Duration;

use crate::config::{Config, OutboxConfig, SnapshotMode};
use crate::offsets::{self, OffsetStore};
use crate::pg::catalog;
use crate::pg::replication::ReplicationClient;
use crate::relay::{connect_params, producer_properties};
use crate::sink::kafka::{ProbeError, probe_cluster, tls_handshake};
use crate::startup::{self, CheckError, SlotPlan};

/// Result of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok(String),
    Warn(String),
    Fail { problem: String, fix: String },
}

/// All checks, in order.
#[derive(Debug, Default)]
pub struct Report {
    pub checks: Vec<(String, Outcome)>,
}

impl Report {
    fn push(&mut self, name: &str, outcome: Outcome) {
        self.checks.push((name.to_owned(), outcome));
    }

    pub fn ok(&self) -> bool {
        !self
            .checks
            .iter()
            .any(|(_, o)| matches!(o, Outcome::Fail { .. }))
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, outcome) in &self.checks {
            match outcome {
                Outcome::Ok(detail) => writeln!(f, "ok    {name}: {detail}")?,
                Outcome::Warn(detail) => writeln!(f, "warn  {name}: {detail}")?,
                Outcome::Fail { problem, fix } => {
                    writeln!(f, "FAIL  {name}: {problem}\n      fix: {fix}")?
                }
            }
        }
        let failed = self
            .checks
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::Fail { .. }))
            .count();
        if failed == 0 {
            writeln!(f, "all {} checks passed", self.checks.len())
        } else {
            writeln!(f, "{failed} of {} checks failed", self.checks.len())
        }
    }
}

fn fail(problem: impl Into<String>, fix: impl Into<String>) -> Outcome {
    Outcome::Fail {
        problem: problem.into(),
        fix: fix.into(),
    }
}

/// A shared start-up check's result as a report line.
fn outcome<T>(result: Result<T, CheckError>, ok: impl FnOnce(T) -> Outcome) -> Outcome {
    match result {
        Ok(v) => ok(v),
        Err(e) => fail(e.problem(), e.fix()),
    }
}

/// Streaming needs no read grant on the tables, but the recovery from a
/// lost slot does (`walrelay republish` reads the outbox tables, `walrelay
/// snapshot` any table): a role that lacks it would fail in the middle of
/// an incident, so say so now.
async fn recovery_reads<'a>(
    client: &tokio_postgres::Client,
    tables: impl Iterator<Item = &'a crate::pg::catalog::CapturedTable>,
) -> Outcome {
    let mut missing = Vec::new();
    let mut grants = Vec::new();
    for table in tables {
        match startup::missing_read_grants(client, table).await {
            Ok(None) => {}
            Ok(Some(m)) => {
                missing.extend(m.missing);
                grants.extend(m.grants);
            }
            Err(e) => return fail(e.problem(), e.fix()),
        }
    }
    if missing.is_empty() {
        return Outcome::Ok(
            "the role may read every configured table (walrelay republish and walrelay \
             snapshot, the lost-slot recovery, need it)"
                .into(),
        );
    }
    Outcome::Warn(format!(
        "the role lacks {}: streaming does not need it, but the recovery from a lost slot does \
         (walrelay republish and walrelay snapshot read the tables), and would fail in the \
         middle of an incident; grant it now: {}",
        missing.join(", "),
        grants.join(" ")
    ))
}

pub async fn check(config: &Config) -> Report {
    let mut report = Report::default();
    report.push(
        "config",
        Outcome::Ok(format!("{} is valid", config.origin())),
    );
    for warning in config.warnings() {
        report.push("config", Outcome::Warn(warning.clone()));
    }
    let pg = &config.postgres;
    let params = connect_params(config);

    let stored = check_kafka(config, &mut report).await;

    let client = match catalog::connect(&params).await {
        Ok(c) => {
            let tls = c
                .query_opt(
                    "SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid() AND ssl",
                    &[],
                )
                .await
                .ok()
                .flatten()
                .map(|row| row.get::<_, Option<String>>(0).unwrap_or_default());
            let mode = pg.sslmode.as_str();
            let outcome = match tls {
                // Encrypted, but nobody checked whom to: a man in the middle
                // passes (prefer and require verify no certificate).
                Some(version) if !pg.sslmode.verifies_certificate() => Outcome::Warn(format!(
                    "connected to {} over TLS ({version}), but sslmode = {mode} checks no \
                     certificate: the server is not authenticated; set postgres.sslmode = \
                     \"verify-full\" (with postgres.sslrootcert for a private CA)",
                    params.address()
                )),
                Some(version) => Outcome::Ok(format!(
                    "connected to {} over TLS ({version}, sslmode = {mode})",
                    params.address()
                )),
                None if params.is_unix() => Outcome::Ok(format!(
                    "connected to {} (Unix socket, no TLS)",
                    params.address()
                )),
                None => Outcome::Warn(format!(
                    "connected to {} WITHOUT TLS (sslmode = {mode}); set postgres.sslmode = \
                     \"verify-full\" unless the network is trusted",
                    params.address()
                )),
            };
            report.push("postgres connection", outcome);
            c
        }
        Err(e) => {
            report.push(
                "postgres connection",
                fail(e.to_string(), "check postgres.host/port/user/password/database and that the server accepts connections from here (pg_hba.conf)"),
            );
            return report;
        }
    };

    report.push(
        "wal_level",
        outcome(startup::wal_level(&client).await, Outcome::Ok),
    );
    report.push(
        "replication privilege",
        outcome(
            startup::replication_privilege(&client, &pg.user).await,
            Outcome::Ok,
        ),
    );
    if config.heartbeat.enabled().is_some() {
        report.push(
            "heartbeat privilege",
            outcome(
                startup::heartbeat_privilege(&client, &pg.user).await,
                Outcome::Ok,
            ),
        );
    }
    // `run` identifies the system on a replication connection (pg_hba.conf
    // has separate `replication` lines): so does `check`.
    let system = match ReplicationClient::connect(&params).await {
        Ok(mut repl) => match repl.identify_system().await {
            Ok(system) => {
                report.push(
                    "replication connection",
                    Outcome::Ok(format!(
                        "system {}, timeline {}",
                        system.system_id, system.timeline
                    )),
                );
                // Unreadable history: a timeline change is then refused, as
                // `run` would refuse it.
                let history = repl.timeline_history(system.timeline).await.ok().flatten();
                Some((system.system_id, system.timeline, history))
            }
            Err(e) => {
                report.push(
                    "replication connection",
                    fail(e.to_string(), "see the error"),
                );
                None
            }
        },
        Err(e) => {
            report.push(
                "replication connection",
                fail(
                    e.to_string(),
                    if e.sqlstate() == Some("42501") {
                        "give the role the REPLICATION attribute (see the replication privilege \
                         check above)"
                    } else {
                        "allow the role a `replication` connection in pg_hba.conf"
                    },
                ),
            );
            None
        }
    };

    let mut routes = Vec::with_capacity(config.outbox.len());
    for outbox in &config.outbox {
        let name = format!("outbox table {}", outbox.table);
        match startup::outbox_table(&client, outbox).await {
            Ok((table, detail)) => {
                report.push(&name, Outcome::Ok(detail));
                routes.push((outbox, table));
            }
            Err(e) => report.push(&name, fail(e.problem(), e.fix())),
        }
    }

    let captured = match startup::table_event_tables(&client, config).await {
        Ok(captured) => {
            let default_columns = config.table_defaults.column_filter().ok().flatten();
            for c in &captured {
                let entry = &config.tables[c.entry];
                let key_columns = c.key(entry);
                let key = if key_columns.is_empty() {
                    "no primary key: null keys (set key_columns)".to_owned()
                } else {
                    format!("key {}", key_columns.join(", "))
                };
                let identity = replica_identity(&client, c.table.oid).await;
                let mut detail = format!("{key}, {identity}")
                    + &crate::router::table::describe_columns(
                        entry,
                        default_columns.as_ref(),
                        (&c.table.schema, &c.table.name),
                        &c.columns,
                    );
                if !c.as_text.is_empty() {
                    detail += &format!(
                        "; written as their text form (unmapped_types = \"text\"): {}",
                        c.as_text.join(", ")
                    );
                }
                // Debezium's keys ignore column lists and masks; say so
                // where that puts a hidden column in the clear.
                let exposed: Vec<&str> = key_columns
                    .iter()
                    .filter(|k| {
                        entry.mask_of(k).is_some()
                            || !entry.includes(
                                default_columns.as_ref(),
                                &c.table.schema,
                                &c.table.name,
                                k,
                            )
                    })
                    .copied()
                    .collect();
                let outcome = if exposed.is_empty() {
                    Outcome::Ok(detail)
                } else {
                    Outcome::Warn(format!(
                        "{detail}; key column(s) {} are masked or left out of before/after \
                         but stay unmasked in the record key (as with Debezium): key the table \
                         by other columns with key_columns if they must not reach Kafka",
                        exposed.join(", ")
                    ))
                };
                report.push(
                    &format!("table {}.{}", c.table.schema, c.table.name),
                    outcome,
                );
            }
            captured
        }
        Err(e) => {
            report.push("[[table]] tables", fail(e.problem(), e.fix()));
            Vec::new()
        }
    };
    for m in &config.messages {
        report.push(
            &format!("message prefix {}", m.prefix),
            Outcome::Ok(m.describe()),
        );
    }
    if routes.len() == config.outbox.len() {
        let routes: Vec<_> = routes.iter().map(|(o, t)| (*o, t)).collect();
        let captured_tables: Vec<_> = captured.iter().map(|c| &c.table).collect();
        let result = startup::publication(&client, pg, &routes, &captured_tables).await;
        report.push(
            "publication",
            outcome(result, |plan| {
                if plan.exists && (!plan.statements.is_empty() || !plan.unclaimed.is_empty()) {
                    Outcome::Warn(plan.describe())
                } else {
                    Outcome::Ok(plan.describe())
                }
            }),
        );
    } else {
        report.push(
            "publication",
            Outcome::Warn("not checked until the outbox tables are right".into()),
        );
    }

    report.push(
        "recovery reads",
        recovery_reads(
            &client,
            routes
                .iter()
                .map(|(_, t)| t)
                .chain(captured.iter().map(|c| &c.table)),
        )
        .await,
    );

    // `stored` is None when Kafka could not be read: `run` would wait for it.
    let tables: Vec<_> = routes.iter().map(|(o, t)| (*o, t)).collect();
    match catalog::slot_state(&client, &pg.slot).await {
        Ok(slot) => {
            let stored = reread_after_slot(config, stored).await;
            let line = slot_line(
                config,
                &client,
                slot.as_ref(),
                stored.as_ref(),
                system.as_ref(),
                &tables,
                &captured,
            )
            .await;
            report.push("replication slot", line);
            report.push(
                "failover",
                failover_readiness(&client, slot.as_ref(), config).await,
            );
            if slot.is_some() {
                report.push("slot WAL", slot_wal(&client, &pg.slot).await);
                match startup::slot_predates_publication(&client, &pg.slot, &pg.publication).await {
                    Ok(Some(warning)) => report.push("replication slot", Outcome::Warn(warning)),
                    Ok(None) => {}
                    Err(e) => report.push("replication slot", fail(e.problem(), e.fix())),
                }
            }
        }
        Err(e) => report.push("replication slot", fail(e.to_string(), "see the error")),
    }
    report
}

/// The offset store read again, now that the slot has been read: a running
/// connector stores a position before it confirms it to the slot, so the
/// store read before the slot (by [`check_kafka`]) can be behind a slot that
/// moved in between — a slot "ahead of the stored offset" that is not. Read
/// in the connector's own order (slot, then store), `slot ≤ stored` holds
/// for a running connector. Keeps the first read if this one fails (it was
/// reported above), and reads nothing when that one failed.
async fn reread_after_slot(
    config: &Config,
    first: Option<Option<offsets::StoredOffset>>,
) -> Option<Option<offsets::StoredOffset>> {
    first.as_ref()?;
    match read_offset_store(config, &producer_properties(config)).await {
        Ok(StoredRead::NoTopic | StoredRead::Nothing) => Some(None),
        Ok(StoredRead::At(s)) => Some(Some(*s)),
        Err(_) => first,
    }
}

/// The table's REPLICA IDENTITY and what it means for `before`.
async fn replica_identity(client: &tokio_postgres::Client, oid: u32) -> String {
    let row = client
        .query_opt(
            "SELECT relreplident::text FROM pg_class WHERE oid = $1",
            &[&oid],
        )
        .await;
    match row
        .ok()
        .flatten()
        .and_then(|r| r.get::<_, Option<String>>(0))
        .as_deref()
    {
        Some("d") => "REPLICA IDENTITY DEFAULT (before: the key columns of a delete, none for an \
                      update)"
            .to_owned(),
        Some("f") => "REPLICA IDENTITY FULL (before: the whole old row)".to_owned(),
        Some("i") => {
            "REPLICA IDENTITY USING INDEX (before: the index columns of a delete)".to_owned()
        }
        Some("n") => "REPLICA IDENTITY NOTHING (no before; PostgreSQL refuses updates and deletes \
                      on a published table without one)"
            .to_owned(),
        _ => "replica identity unknown".to_owned(),
    }
}

/// The "slot WAL" line: how much WAL the slot holds and may still hold.
/// `extended` and `unreserved` warn (the second one is a checkpoint away
/// from `lost`, and a slot can go from `reserved` to `lost` in one
/// checkpoint, so the sizes are printed whatever the status).
async fn slot_wal(client: &tokio_postgres::Client, slot: &str) -> Outcome {
    match crate::status::read_slot(client, slot).await {
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
    system: Option<&(String, u32, Option<String>)>,
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

/// `delivery = "exactly_once"`: whether the principal may use Kafka
/// transactions, tried with `<transactional id>.check` (registering the
/// connector's own id would fence the running instance; a prefixed ACL on
/// the id covers both).
async fn check_transactions(config: &Config, props: &[(String, String)], report: &mut Report) {
    let id = crate::relay::transactional_id(config);
    let probe_id = format!("{id}.check");
    let tried = {
        let props = props.to_vec();
        let probe_id = probe_id.clone();
        tokio::task::spawn_blocking(move || {
            crate::sink::kafka::probe_transactions(&props, &probe_id, Duration::from_secs(10))
        })
        .await
    };
    match tried {
        Ok(Ok(())) => report.push(
            "transactions",
            Outcome::Ok(format!(
                "delivery = exactly_once: the brokers accept transactional id {probe_id} (run \
                 uses {id}; consumers must read with isolation.level=read_committed)"
            )),
        ),
        Ok(Err(e)) => {
            let (problem, fix) = e.message.rsplit_once("; ").unwrap_or((
                e.message.as_str(),
                "check that the brokers support transactions (Kafka 0.11+) and that their \
                 transaction coordinator works: on a cluster with fewer brokers than \
                 transaction.state.log.replication.factor (3 by default) it never does",
            ));
            report.push("transactions", fail(problem, fix));
        }
        Err(e) => report.push("transactions", fail(e.to_string(), "report this as a bug")),
    }
}

/// `[dead_letter] topic`: exists, or will be created on the first dead
/// letter (the broker's `auto.create.topics.enable`), and may be described
/// (an ACL). Writing is not tried: `check` sends nothing.
async fn check_dead_letter(topic: &str, props: &[(String, String)], report: &mut Report) {
    use crate::sink::kafka::TopicState;
    let outcome =
        match crate::sink::kafka::describe_topic(props, topic, Duration::from_secs(10)).await {
            Ok(TopicState::Exists {
                partitions,
                max_message_bytes,
            }) => Outcome::Ok(format!(
                "{topic} exists ({partitions} partition(s), max.message.bytes {}); a change that \
             cannot be published goes there instead of stopping the connector (the WRITE ACL \
             is proven only by the first dead letter)",
                max_message_bytes.as_deref().unwrap_or("not readable")
            )),
            Ok(TopicState::Missing {
                auto_create: Some(true),
            }) => Outcome::Warn(format!(
                "{topic} does not exist; the broker creates it at the first dead letter \
             (auto.create.topics.enable = true) with its default settings: create it \
             yourself to choose its retention and partitions"
            )),
            Ok(TopicState::Missing {
                auto_create: Some(false),
            }) => fail(
                format!(
                    "{topic} does not exist and the broker does not create topics on first write \
                 (auto.create.topics.enable = false)"
                ),
                format!(
                    "create it, e.g. kafka-topics.sh --create --topic {topic} (a dead letter to a \
                 missing topic stops the connector)"
                ),
            ),
            Ok(TopicState::Missing { auto_create: None }) => Outcome::Warn(format!(
                "{topic} does not exist, and whether the broker creates it at the first dead \
             letter is unknown (auto.create.topics.enable is not readable here): create it, \
             or a dead letter may stop the connector"
            )),
            Ok(TopicState::Denied(code)) => fail(
                format!("may not describe {topic} ({code})"),
                format!(
                    "grant the connector's principal WRITE and DESCRIBE on topic {topic} \
                 (docs/security.md, \"ACLs walrelay needs\")"
                ),
            ),
            Err(e) => fail(e.message, "check that the brokers are reachable".to_owned()),
        };
    report.push("dead-letter topic", outcome);
}

/// Why Kafka or the offset store could not be read: the words of `check`'s
/// FAIL line, which `status` prints too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KafkaFailure {
    pub problem: String,
    pub fix: String,
}

impl KafkaFailure {
    fn new(problem: impl Into<String>, fix: impl Into<String>) -> KafkaFailure {
        KafkaFailure {
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

/// Reaches the brokers with the producer's properties ([`probe_cluster`]):
/// fails at once, with librdkafka's reason, when every broker refuses the
/// connection or walrelay's credentials, else after 10 s without an answer.
pub(crate) async fn reach_kafka(
    props: &[(String, String)],
) -> Result<crate::sink::kafka::ProbeReport, KafkaFailure> {
    let reach = {
        let props = props.to_vec();
        tokio::task::spawn_blocking(move || probe_cluster(&props, Duration::from_secs(10))).await
    };
    match reach {
        Ok(Ok(probe)) => Ok(probe),
        Ok(Err(ProbeError::Refused(e))) => {
            // The error carries its own fix after the last "; ".
            let (problem, fix) = e
                .message
                .rsplit_once("; ")
                .unwrap_or((e.message.as_str(), "see docs/security.md"));
            Err(KafkaFailure::new(problem, fix))
        }
        Ok(Err(ProbeError::Unreachable(e))) => Err(KafkaFailure::new(
            e,
            "check kafka.brokers and that the brokers are up and reachable from here",
        )),
        Err(e) => Err(KafkaFailure::new(e.to_string(), "report this as a bug")),
    }
}

/// What the offset store holds for this connector.
#[derive(Debug)]
pub(crate) enum StoredRead {
    /// The offsets topic does not exist yet (`run` creates it).
    NoTopic,
    /// The topic holds nothing for this connector.
    Nothing,
    At(Box<offsets::StoredOffset>),
}

impl StoredRead {
    pub(crate) fn into_offset(self) -> Option<offsets::StoredOffset> {
        match self {
            StoredRead::At(s) => Some(*s),
            StoredRead::NoTopic | StoredRead::Nothing => None,
        }
    }
}

/// Reads the offset store as `run` will ([`OffsetStore`]), after checking
/// the topic is compacted; call it once [`reach_kafka`] succeeded.
pub(crate) async fn read_offset_store(
    config: &Config,
    props: &[(String, String)],
) -> Result<StoredRead, KafkaFailure> {
    let store = OffsetStore::new(props, &config.kafka.offsets_topic, &config.connector.name);
    match store.verify_topic(Duration::from_secs(10)).await {
        Ok(true) => {}
        Ok(false) => return Ok(StoredRead::NoTopic),
        Err(e) => {
            return Err(KafkaFailure::new(
                e.to_string(),
                "see docs/operations.md, \"Offset store\"",
            ));
        }
    }
    match tokio::task::spawn_blocking(move || store.load(Duration::from_secs(10))).await {
        Ok(Ok(Some(s))) => Ok(StoredRead::At(Box::new(s))),
        Ok(Ok(None)) => Ok(StoredRead::Nothing),
        Ok(Err(e)) => Err(KafkaFailure::new(
            e.to_string(),
            "check that the connector may read the offsets topic",
        )),
        Err(e) => Err(KafkaFailure::new(e.to_string(), "report this as a bug")),
    }
}

/// Kafka reachability and the stored offset. Returns `Some(stored)` when the
/// offset store could be read.
async fn check_kafka(
    config: &Config,
    report: &mut Report,
) -> Option<Option<offsets::StoredOffset>> {
    let props = producer_properties(config);
    let brokers = config.kafka.bootstrap_servers();
    let probe = match reach_kafka(&props).await {
        Ok(probe) => probe,
        Err(f) => {
            report.push("kafka", fail(f.problem, f.fix));
            return None;
        }
    };
    // librdkafka does not say which TLS version it negotiated; a handshake
    // of our own with the same settings does.
    let tls = if probe.protocol.ends_with("ssl") {
        let props = props.clone();
        match tokio::task::spawn_blocking(move || tls_handshake(&props, Duration::from_secs(10)))
            .await
        {
            Ok(Ok(negotiated)) => format!("; negotiated {negotiated}"),
            Ok(Err(why)) => format!("; TLS version unknown ({why})"),
            Err(e) => format!("; TLS version unknown ({e})"),
        }
    } else {
        String::new()
    };
    let answered = format!(
        "{brokers} answered ({} broker(s)) {probe}{tls}",
        probe.brokers
    );
    // Plaintext: neither encrypted nor authenticated, said the way an
    // unverified PostgreSQL connection is.
    let outcome = if probe.protocol.ends_with("ssl") {
        Outcome::Ok(answered)
    } else {
        Outcome::Warn(format!(
            "{answered}; WITHOUT TLS: records and credentials cross the network in the clear \
             and the brokers are not authenticated; set kafka.security_protocol = \"ssl\" or \
             \"sasl_ssl\" unless the network is trusted"
        ))
    };
    report.push("kafka", outcome);
    if config.kafka.delivery == crate::config::Delivery::ExactlyOnce {
        check_transactions(config, &props, report).await;
    }
    if let Some(dl) = &config.dead_letter {
        check_dead_letter(&dl.topic, &props, report).await;
    }
    let topic = &config.kafka.offsets_topic;
    let (outcome, stored) = match read_offset_store(config, &props).await {
        Ok(StoredRead::NoTopic) => (
            Outcome::Ok(format!(
                "{topic} does not exist yet; run will create it (compacted)"
            )),
            Some(None),
        ),
        Ok(StoredRead::Nothing) => (
            Outcome::Ok(format!("no offset stored yet in {topic}")),
            Some(None),
        ),
        Ok(StoredRead::At(s)) => (
            Outcome::Ok(format!("{topic} holds {} for slot {}", s.lsn, s.slot)),
            Some(Some(*s)),
        ),
        Err(f) => (fail(f.problem, f.fix), None),
    };
    report.push("offset store", outcome);
    stored
}
