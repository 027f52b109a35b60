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
//! Reaching Kafka and reading the offset store (`super::probe`) are
//! shared with `walrelay status`, so both say a broker refusing connections
//! at once and in the same words. The Kafka lines are `kafka`'s, the slot's
//! lines (what `run` will do about it, its WAL, failover) `slot`'s.

mod kafka;
mod slot;

use std::fmt;
use std::sync::Arc;

use super::probe::bytes;
use crate::config::{Config, ConfigError, OutboxConfig};
use crate::pg::catalog;
use crate::pg::params::{capture_params, connect_params};
use crate::pg::replication::ReplicationClient;
use crate::pg::wire::ConnectParams;
use crate::startup::{self, CheckError};

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
    /// Made with `--offline`: PostgreSQL and Kafka were not contacted.
    pub offline: bool,
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

    /// The report as `walrelay check --json` prints it (docs/operations.md,
    /// "walrelay check"): `ok`, `offline`, the counts, and one object per
    /// line in order — `{"name", "status": "ok"|"warn", "detail"}` or
    /// `{"name", "status": "fail", "problem", "fix"}`.
    pub fn to_json(&self) -> serde_json::Value {
        let count = |f: fn(&Outcome) -> bool| self.checks.iter().filter(|(_, o)| f(o)).count();
        let checks: Vec<serde_json::Value> = self
            .checks
            .iter()
            .map(|(name, outcome)| match outcome {
                Outcome::Ok(detail) => {
                    serde_json::json!({"name": name, "status": "ok", "detail": detail})
                }
                Outcome::Warn(detail) => {
                    serde_json::json!({"name": name, "status": "warn", "detail": detail})
                }
                Outcome::Fail { problem, fix } => serde_json::json!({
                    "name": name, "status": "fail", "problem": problem, "fix": fix
                }),
            })
            .collect();
        serde_json::json!({
            "ok": self.ok(),
            "offline": self.offline,
            "passed": count(|o| matches!(o, Outcome::Ok(_))),
            "warnings": count(|o| matches!(o, Outcome::Warn(_))),
            "failed": count(|o| matches!(o, Outcome::Fail { .. })),
            "checks": checks,
        })
    }
}

/// `walrelay check --json` for a file that does not load (exit 2): the
/// report's shape, one failed `config` line per problem, each with the
/// `file`, `key`, `line` and `column` when known (a file that cannot be
/// read: one line without them).
pub fn invalid_config_json(error: &ConfigError, offline: bool) -> serde_json::Value {
    const FIX: &str = "edit the file at the key and line given; the problem says what to do";
    let file = match error {
        ConfigError::Invalid { origin, .. } => Some(origin.clone()),
        _ => None,
    };
    let mut checks: Vec<serde_json::Value> = error
        .problems()
        .iter()
        .map(|p| {
            serde_json::json!({
                "name": "config",
                "status": "fail",
                "problem": p.message,
                "fix": FIX,
                "file": file,
                "key": p.key,
                "line": p.location.map(|l| l.line),
                "column": p.location.map(|l| l.column),
            })
        })
        .collect();
    if checks.is_empty() {
        checks.push(serde_json::json!({
            "name": "config", "status": "fail", "problem": error.to_string(), "fix": FIX,
        }));
    }
    serde_json::json!({
        "ok": false,
        "offline": offline,
        "passed": 0,
        "warnings": 0,
        "failed": checks.len(),
        "checks": checks,
    })
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
        let offline = if self.offline {
            " (offline: PostgreSQL and Kafka not contacted)"
        } else {
            ""
        };
        if failed == 0 {
            writeln!(f, "all {} checks passed{offline}", self.checks.len())
        } else {
            writeln!(
                f,
                "{failed} of {} checks failed{offline}",
                self.checks.len()
            )
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

/// `walrelay check --offline`: the checks that need no connection (for a
/// CI pipeline): the file loads and validates (which includes librdkafka's
/// view of the producer settings and the PostgreSQL TLS files, as for
/// every command), its warnings, how large transactions are taken, the
/// `[[message]]` prefixes. What `run` would find on the servers is not
/// checked.
pub fn check_offline(config: &Config) -> Report {
    let mut report = Report {
        offline: true,
        ..Report::default()
    };
    config_lines(config, &mut report);
    large_transactions(config, None, &mut report);
    message_lines(config, &mut report);
    report
}

/// One line per `[[message]]` prefix.
fn message_lines(config: &Config, report: &mut Report) {
    for m in &config.messages {
        report.push(
            &format!("message prefix {}", m.prefix),
            Outcome::Ok(m.describe()),
        );
    }
}

/// Runs every check, in the order the report prints them: the
/// configuration, Kafka and the offset store, the PostgreSQL connection, the
/// server's settings and the role's privileges, the replication connection,
/// the captured tables, the publication, the reads a recovery needs, the
/// slot. Stops after the PostgreSQL connection when that fails.
pub async fn check(config: &Config) -> Report {
    let mut report = Report::default();
    config_lines(config, &mut report);
    let params = connect_params(config);
    // `None` when Kafka could not be read: `run` would wait for it.
    let stored = kafka::check_kafka(config, &mut report).await;
    schema_registry(config, &mut report).await;
    let Some(client) = postgres_connection(config, &params, &mut report).await else {
        large_transactions(config, None, &mut report);
        return report;
    };
    let version = catalog::server_version(&client).await.ok();
    large_transactions(
        config,
        version.and_then(|v| u32::try_from(v).ok()),
        &mut report,
    );
    server_settings(config, &client, &mut report).await;
    // With capture from a standby, the slot's server is checked too, and
    // the replication connection and the slot's lines are its.
    let standby = standby_server(config, &mut report).await;
    let slots = standby.as_ref().unwrap_or(&client);
    let system = replication_connection(&capture_params(config), &mut report).await;
    let routes = outbox_tables(config, &client, &mut report).await;
    let captured = table_event_tables(config, &client, &mut report).await;
    message_lines(config, &mut report);
    publication(config, &client, &routes, &captured, &mut report).await;
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
    let tables: Vec<_> = routes.iter().map(|(o, t)| (*o, t)).collect();
    slot::slot_lines(
        config,
        slots,
        stored,
        system.as_ref(),
        &tables,
        &captured,
        &mut report,
    )
    .await;
    report
}

/// `[kafka.schema_registry]`: reached, and its global compatibility level
/// (what a new schema version must keep).
async fn schema_registry(config: &Config, report: &mut Report) {
    let Some(registry) = &config.kafka.schema_registry else {
        return;
    };
    let metrics = Arc::new(crate::telemetry::Metrics::new(&config.connector.name));
    let outcome = match crate::sink::registry::Registry::new(registry, metrics) {
        Err(what) => fail(
            format!("kafka.schema_registry.url: {what}"),
            "use an http:// or https:// URL such as \"http://registry:8081\"",
        ),
        Ok(client) => match client.probe().await {
            Ok(level) => Outcome::Ok(format!(
                "{} reached; global compatibility {level}; schemas {}",
                registry.url,
                if registry.use_latest_version {
                    "must be registered (each subject's latest version is used)"
                } else if registry.auto_register {
                    "are registered when first written"
                } else {
                    "must be registered already (looked up, never registered)"
                }
            )),
            Err(e) => fail(
                e.to_string(),
                if e.is_transient() {
                    "start the registry, or fix kafka.schema_registry.url; run would wait for it \
                     (retrying) before the first record that needs a schema id"
                } else {
                    e.fix()
                },
            ),
        },
    };
    report.push("schema registry", outcome);
}

/// The server as the replication connection identifies it: system
/// identifier, timeline, and the timeline's history when readable.
type System = (String, u32, Option<String>);

/// The "config" lines: the file is valid (it was loaded), and its warnings.
fn config_lines(config: &Config, report: &mut Report) {
    report.push(
        "config",
        Outcome::Ok(format!("{} is valid", config.origin())),
    );
    for warning in config.warnings() {
        report.push("config", Outcome::Warn(warning.clone()));
    }
}

/// The "large transactions" line: streamed while they run or taken whole
/// after their commit, on this server (`None`: not reached), and whether
/// the spill directory takes files. Offline, the spill directory is not
/// tried: it is the one of the host walrelay runs on, not of a CI runner.
fn large_transactions(config: &Config, server_version_num: Option<u32>, report: &mut Report) {
    let requested = if report.offline {
        match crate::source::taken_whole(config, server_version_num) {
            Some(_) => Ok(None),
            None => Ok(Some(crate::pg::replication::InProgress {
                memory_limit: config.postgres.stream_memory_limit,
                spill_dir: config
                    .postgres
                    .stream_spill_dir
                    .clone()
                    .unwrap_or_else(std::env::temp_dir),
            })),
        }
    } else {
        crate::source::in_progress_requested(config, server_version_num)
    };
    let outcome = match requested {
        Ok(Some(p)) => Outcome::Ok(format!(
            "sent while they run (protocol 2) when larger than the server's \
             logical_decoding_work_mem; held in up to {} of memory, then in {}{}",
            bytes(Some(i64::try_from(p.memory_limit).unwrap_or(i64::MAX))),
            p.spill_dir.display(),
            if report.offline {
                " (not tried offline: it must take files on the host walrelay runs on)"
            } else {
                ""
            }
        )),
        Ok(None) => Outcome::Ok(format!(
            "each after its commit (protocol 1), because of {}",
            crate::source::taken_whole(config, server_version_num).unwrap_or("the configuration")
        )),
        Err(e) => fail(e.to_string(), e.fix()),
    };
    report.push("large transactions", outcome);
}

/// The "postgres connection" line: connected, and how safely (TLS, and
/// whether the certificate was checked). `None` when it failed.
async fn postgres_connection(
    config: &Config,
    params: &ConnectParams,
    report: &mut Report,
) -> Option<tokio_postgres::Client> {
    let pg = &config.postgres;
    let client = match catalog::connect(params).await {
        Ok(c) => c,
        Err(e) => {
            report.push(
                "postgres connection",
                fail(e.to_string(), "check postgres.host/port/user/password/database and that the server accepts connections from here (pg_hba.conf)"),
            );
            return None;
        }
    };
    let tls = client
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
    Some(client)
}

/// With `postgres.capture_from` a standby: the "standby" line (what
/// [`startup::capture_server`] checks), and a session there; `None` when
/// walrelay captures from the primary, or the standby cannot be reached
/// (said in the line).
async fn standby_server(config: &Config, report: &mut Report) -> Option<tokio_postgres::Client> {
    if !config.postgres.capture_from.from_standby() {
        return None;
    }
    let params = capture_params(config);
    let client = match catalog::connect(&params).await {
        Ok(c) => c,
        Err(e) => {
            report.push(
                "standby",
                fail(
                    format!("{} (postgres.standby_host)", e),
                    "check postgres.standby_host/standby_port and that the standby accepts \
                     connections from here (pg_hba.conf)",
                ),
            );
            return None;
        }
    };
    let line = match startup::capture_server(&client, config.postgres.capture_from).await {
        Ok(server) if server.warnings.is_empty() => {
            Outcome::Ok(format!("{}: {}", params.address(), server.checked))
        }
        Ok(server) => Outcome::Warn(format!(
            "{}: {}; {}",
            params.address(),
            server.checked,
            server.warnings.join("; ")
        )),
        Err(e) => outcome(Err(e), Outcome::Ok),
    };
    report.push("standby", line);
    Some(client)
}

/// `wal_level` and the role's privileges (replication; the heartbeat's
/// when `[heartbeat]` writes one; which watermarks incremental snapshots
/// use).
async fn server_settings(config: &Config, client: &tokio_postgres::Client, report: &mut Report) {
    let pg = &config.postgres;
    report.push(
        "wal_level",
        outcome(startup::wal_level(client).await, Outcome::Ok),
    );
    report.push(
        "replication privilege",
        outcome(
            startup::replication_privilege(client, &pg.user).await,
            Outcome::Ok,
        ),
    );
    if config.heartbeat.enabled().is_some() {
        report.push(
            "heartbeat privilege",
            outcome(
                startup::heartbeat_privilege(client, &pg.user).await,
                Outcome::Ok,
            ),
        );
    }
    report.push(
        "incremental snapshots",
        outcome(
            startup::incremental_watermarks(client, config.snapshot.watermarks, &pg.user)
                .await
                .map(|(_, line)| line),
            Outcome::Ok,
        ),
    );
}

/// The "replication connection" line. `run` identifies the system on a
/// replication connection (pg_hba.conf has separate `replication` lines):
/// so does `check`. `None` when it failed.
async fn replication_connection(params: &ConnectParams, report: &mut Report) -> Option<System> {
    match ReplicationClient::connect(params).await {
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
    }
}

/// One line per `[[outbox]]` table; the tables that passed, with their
/// configuration.
async fn outbox_tables<'c>(
    config: &'c Config,
    client: &tokio_postgres::Client,
    report: &mut Report,
) -> Vec<(&'c OutboxConfig, catalog::CapturedTable)> {
    let mut routes = Vec::with_capacity(config.outbox.len());
    for outbox in &config.outbox {
        let name = format!("outbox table {}", outbox.table);
        match startup::outbox_table(client, outbox).await {
            Ok((table, detail)) => {
                report.push(&name, Outcome::Ok(detail));
                routes.push((outbox, table));
            }
            Err(e) => report.push(&name, fail(e.problem(), e.fix())),
        }
    }
    routes
}

/// One line per `[[table]]` table (key, replica identity, columns, keys a
/// mask or column list does not hide); one failure line when they cannot
/// be read, and then none of them.
async fn table_event_tables(
    config: &Config,
    client: &tokio_postgres::Client,
    report: &mut Report,
) -> Vec<startup::TableEventTable> {
    let captured = match startup::table_event_tables(client, config).await {
        Ok(captured) => captured,
        Err(e) => {
            report.push("[[table]] tables", fail(e.problem(), e.fix()));
            return Vec::new();
        }
    };
    let default_columns = config.table_defaults.column_filter().ok().flatten();
    for c in &captured {
        let entry = &config.tables[c.entry];
        let key_columns = c.key(entry);
        let key = if key_columns.is_empty() {
            "no primary key: null keys (set key_columns)".to_owned()
        } else {
            format!("key {}", key_columns.join(", "))
        };
        let identity = replica_identity(client, c.table.oid).await;
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
                    || !entry.includes(default_columns.as_ref(), &c.table.schema, &c.table.name, k)
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

/// The "publication" line: what `run` would create or add, once every
/// outbox table passed.
async fn publication(
    config: &Config,
    client: &tokio_postgres::Client,
    routes: &[(&OutboxConfig, catalog::CapturedTable)],
    captured: &[startup::TableEventTable],
    report: &mut Report,
) {
    if routes.len() != config.outbox.len() {
        report.push(
            "publication",
            Outcome::Warn("not checked until the outbox tables are right".into()),
        );
        return;
    }
    let routes: Vec<_> = routes.iter().map(|(o, t)| (*o, t)).collect();
    let captured_tables: Vec<_> = captured.iter().map(|c| &c.table).collect();
    let result = startup::publication(client, &config.postgres, &routes, &captured_tables).await;
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
