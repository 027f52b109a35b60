//! `walrelay check`: everything `run` needs, verified without streaming.
//!
//! Each check reports ok, a warning, or a failure with the fix. Checks that
//! depend on an unreachable service are reported as skipped (with the reason
//! already given by the failed connection check), so one problem yields one
//! clear line rather than a cascade.

use std::fmt;
use std::time::Duration;

use crate::config::Config;
use crate::offsets::{self, OffsetStore, SlotPosition, StartDecision};
use crate::pg::catalog;
use crate::relay::{connect_params, producer_properties};
use crate::sink::kafka::KafkaSink;

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

/// Payload column types whose text form we pass through unchanged.
const PAYLOAD_TYPES: &[&str] = &["jsonb", "json", "text", "bytea"];

pub async fn check(config: &Config) -> Report {
    let mut report = Report::default();
    report.push(
        "config",
        Outcome::Ok(format!("{} is valid", config.origin())),
    );
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

    match catalog::setting(&client, "wal_level").await {
        Ok(l) if l == "logical" => report.push("wal_level", Outcome::Ok("logical".into())),
        Ok(l) => report.push(
            "wal_level",
            fail(
                format!("wal_level is {l}"),
                "set wal_level = logical in postgresql.conf and restart PostgreSQL",
            ),
        ),
        Err(e) => report.push("wal_level", fail(e.to_string(), "see the error")),
    }

    match client
        .query_one(
            "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .await
    {
        Ok(row) if row.get::<_, bool>(0) => report.push(
            "replication privilege",
            Outcome::Ok(format!("role {} may replicate", pg.user)),
        ),
        Ok(_) => report.push(
            "replication privilege",
            fail(
                format!("role {} lacks the REPLICATION attribute", pg.user),
                format!(
                    "ALTER ROLE {} REPLICATION;",
                    postgres_protocol::escape::escape_identifier(&pg.user)
                ),
            ),
        ),
        Err(e) => report.push(
            "replication privilege",
            fail(e.to_string(), "see the error"),
        ),
    }

    for outbox in &config.outbox {
        let (schema, table) = (&outbox.table.schema, &outbox.table.name);
        let name = format!("outbox table {schema}.{table}");
        match catalog::table_columns(&client, schema, table).await {
            Ok(cols) if cols.is_empty() => {
                report.push(&name, fail("the table does not exist", "create it (see docs/configuration.md for the expected columns) or fix outbox.table"))
            }
            Ok(cols) => {
                let mut required = vec![
                    &outbox.id_column,
                    &outbox.aggregate_id_column,
                    &outbox.payload_column,
                ];
                required.extend(outbox.header_columns.iter());
                let template: Vec<String> = outbox.template_columns().iter().map(|s| s.to_string()).collect();
                required.extend(template.iter());
                if let Some(ts) = &outbox.timestamp_column {
                    required.push(ts);
                }
                let missing: Vec<&String> =
                    required.into_iter().filter(|c| !cols.iter().any(|(n, _)| n == *c)).collect();
                let payload_type = cols
                    .iter()
                    .find(|(n, _)| *n == outbox.payload_column)
                    .map(|(_, t)| t.clone())
                    .unwrap_or_default();
                if !missing.is_empty() {
                    report.push(
                        &name,
                        fail(
                            format!("missing column(s): {}", missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")),
                            "add the columns or change the *_column settings of this [[outbox]] section",
                        ),
                    );
                } else if !PAYLOAD_TYPES.iter().any(|t| payload_type == *t || payload_type.starts_with("character varying")) {
                    report.push(
                        &name,
                        fail(
                            format!("payload column {} has type {payload_type}", outbox.payload_column),
                            "use jsonb, json, text, varchar or bytea for the payload",
                        ),
                    );
                } else {
                    report.push(&name, Outcome::Ok(format!("{} columns, payload {payload_type}", cols.len())));
                }
            }
            Err(e) => report.push(&name, fail(e.to_string(), "see the error")),
        }
    }

    let tables: Vec<(String, String)> = config
        .outbox
        .iter()
        .map(|o| (o.table.schema.clone(), o.table.name.clone()))
        .collect();
    match catalog::publication_tables(&client, &pg.publication).await {
        Ok(None) if pg.create_publication => report.push(
            "publication",
            Outcome::Ok(format!(
                "{} does not exist yet; run will create it",
                pg.publication
            )),
        ),
        Ok(None) => report.push(
            "publication",
            fail(
                format!("publication {} does not exist", pg.publication),
                "create it FOR TABLE the outbox tables, or set postgres.create_publication = true",
            ),
        ),
        Ok(Some(covered)) => {
            let missing: Vec<String> = tables
                .iter()
                .filter(|t| !covered.contains(t))
                .map(|(s, t)| format!("{s}.{t}"))
                .collect();
            if missing.is_empty() {
                report.push(
                    "publication",
                    Outcome::Ok(format!("{} covers the outbox tables", pg.publication)),
                )
            } else if pg.create_publication {
                report.push(
                    "publication",
                    Outcome::Warn(format!(
                        "run will add {} to {}",
                        missing.join(", "),
                        pg.publication
                    )),
                )
            } else {
                report.push(
                    "publication",
                    fail(format!("{} does not cover {}", pg.publication, missing.join(", ")), "ALTER PUBLICATION … ADD TABLE …, or set postgres.create_publication = true"),
                )
            }
        }
        Err(e) => report.push("publication", fail(e.to_string(), "see the error")),
    }

    // The checkpoint's timeline: after a promotion it lags until the first
    // checkpoint; `run` uses IDENTIFY_SYSTEM's.
    let system: Option<(String, u32)> = client
        .query_one(
            "SELECT s.system_identifier::text, c.timeline_id::int8 \
             FROM pg_control_system() s, pg_control_checkpoint() c",
            &[],
        )
        .await
        .ok()
        .and_then(|r| {
            let timeline = u32::try_from(r.try_get::<_, i64>(1).ok()?).ok()?;
            Some((r.try_get(0).ok()?, timeline))
        });
    match catalog::slot_state(&client, &pg.slot).await {
        Ok(None) if pg.create_slot => {
            report.push("replication slot", Outcome::Ok(format!("{} does not exist yet; run will create it", pg.slot)))
        }
        Ok(None) => report.push(
            "replication slot",
            fail(format!("slot {} does not exist", pg.slot), "set postgres.create_slot = true or create it with pg_create_logical_replication_slot(slot, 'pgoutput')"),
        ),
        Ok(Some(slot)) => {
            let position = SlotPosition {
                confirmed_flush: slot.confirmed_flush_lsn.unwrap_or_default(),
                wal_status: slot.wal_status.clone(),
            };
            let decision = match (&stored, &system) {
                (Some(stored), Some((system_id, timeline))) => {
                    let server = offsets::Server { system_id, timeline: *timeline, left_stored_timeline_at: None };
                    offsets::compare(stored.as_ref(), &position, &server, &pg.slot)
                }
                _ => StartDecision::Resume { from: position.confirmed_flush },
            };
            match decision {
                StartDecision::Refuse { reason, hint } => report.push("replication slot", fail(reason, hint)),
                StartDecision::Resume { from } => {
                    let active = slot.active_pid.map(|p| format!(", in use by PID {p}")).unwrap_or_default();
                    report.push(
                        "replication slot",
                        Outcome::Ok(format!(
                            "{} at {from}, wal_status {}{active}",
                            pg.slot,
                            slot.wal_status.as_deref().unwrap_or("?")
                        )),
                    )
                }
            }
        }
        Err(e) => report.push("replication slot", fail(e.to_string(), "see the error")),
    }
    report
}

/// Kafka reachability and the stored offset. Returns `Some(stored)` when the
/// offset store could be read.
async fn check_kafka(
    config: &Config,
    report: &mut Report,
) -> Option<Option<offsets::StoredOffset>> {
    let props = producer_properties(config);
    let brokers = config.kafka.bootstrap_servers();
    let reach = {
        let props = props.clone();
        tokio::task::spawn_blocking(move || {
            let (sink, _acks) = KafkaSink::new(&props)?;
            sink.check_reachable(Duration::from_secs(10))
        })
        .await
    };
    match reach {
        Ok(Ok(n)) => report.push(
            "kafka",
            Outcome::Ok(format!("{brokers} answered ({n} broker(s))")),
        ),
        Ok(Err(e)) => {
            report.push(
                "kafka",
                fail(
                    e.to_string(),
                    "check kafka.brokers and that the brokers are up and reachable from here",
                ),
            );
            return None;
        }
        Err(e) => {
            report.push("kafka", fail(e.to_string(), "report this as a bug"));
            return None;
        }
    }
    let store = OffsetStore::new(&props, &config.kafka.offsets_topic, &config.connector.name);
    match store.verify_topic(Duration::from_secs(10)).await {
        Ok(true) => {}
        Ok(false) => {
            report.push(
                "offset store",
                Outcome::Ok(format!(
                    "{} does not exist yet; run will create it (compacted)",
                    config.kafka.offsets_topic
                )),
            );
            return Some(None);
        }
        Err(e) => {
            report.push(
                "offset store",
                fail(e.to_string(), "see docs/operations.md, \"Offset store\""),
            );
            return None;
        }
    }
    let loaded = tokio::task::spawn_blocking(move || store.load(Duration::from_secs(10))).await;
    match loaded {
        Ok(Ok(Some(s))) => {
            report.push(
                "offset store",
                Outcome::Ok(format!(
                    "{} holds {} for slot {}",
                    config.kafka.offsets_topic, s.lsn, s.slot
                )),
            );
            Some(Some(s))
        }
        Ok(Ok(None)) => {
            report.push(
                "offset store",
                Outcome::Ok(format!(
                    "no offset stored yet in {}",
                    config.kafka.offsets_topic
                )),
            );
            Some(None)
        }
        Ok(Err(e)) => {
            report.push(
                "offset store",
                fail(
                    e.to_string(),
                    "check that the connector may read the offsets topic",
                ),
            );
            None
        }
        Err(e) => {
            report.push("offset store", fail(e.to_string(), "report this as a bug"));
            None
        }
    }
}
