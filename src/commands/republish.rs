//! `walrelay republish`: publishes outbox rows that are still in their table
//! exactly as the router publishes a streamed insert — for reconciling after
//! a lost or recreated slot, or the good rows of a skipped transaction.
//!
//! Invariants:
//! - **The same records.** Topic, key (aggregate id), value, the `id` header
//!   and the header columns come from [`Router`], the code that routes
//!   streamed rows, so consumers de-duplicate a republished event by `id`
//!   like any re-sent one; the same producer settings (murmur2 partitioner,
//!   idempotence) put each key on the partition a streamed record of it
//!   takes. Only two headers differ: no `walrelay.lsn` (the row's commit is
//!   not known) and `walrelay.republished: true`.
//! - **Per-aggregate order** among the republished rows follows the
//!   table's `snapshot_order_by` (default: the primary key), as the
//!   snapshot's does, read in one repeatable-read transaction.
//! - **Nothing is reported done until Kafka holds it**: the command exits 0
//!   only after every record is acknowledged; a refused record stops it with
//!   the row's id, exit 1, and what was acknowledged before it is said.
//! - **No record leaves without its schema id.** With `format = "avro" |
//!   "json_schema" | "protobuf"` each record is framed by the same registry client as
//!   the stream's ([`Registry::frame`]: same subjects, same schemas, so the
//!   same ids) before it goes to the producer; a registry that cannot give
//!   an id stops the command (exit 1) with the registry's message and what
//!   was acknowledged before — never a schema-less record. A dry run prints
//!   the records unframed and never asks the registry.
//! - It never touches the slot or the offset store.
//! - **`--where` is trusted, read-only SQL that stays a condition.** It
//!   runs in a `READ ONLY` transaction under `statement_timeout`, and
//!   `pg::filter` refuses a condition that could close its parentheses
//!   (and so select another table's rows, or run a statement of its own);
//!   it may read other tables only to choose among the outbox table's rows.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::Lsn;
use crate::config::{Config, OutboxConfig};
use crate::pg::catalog;
use crate::pg::params::connect_params;
use crate::pg::snapshot::SnapshotReader;
use crate::router::{Record, Routed, Router};
use crate::sink::kafka::{Ack, KafkaSink};
use crate::sink::properties::producer_properties;
use crate::sink::registry::Registry;
use crate::startup;
use crate::telemetry::outage::OutageLog;

/// Header marking a republished record.
pub const REPUBLISHED_HEADER: &str = "walrelay.republished";

/// Rows read and handed to the producer per batch.
const BATCH_ROWS: usize = 1_000;
const BATCH_BYTES: usize = 8 << 20;

/// What to republish.
#[derive(Debug, Clone)]
pub struct Request {
    /// The `[[outbox]]` table (`schema.table` or `table`); may be left out
    /// when the configuration has one.
    pub table: Option<String>,
    /// A SQL condition on the table's rows (`id IN (…)`,
    /// `created_at >= '…'`).
    pub filter: String,
    /// Print the records instead of publishing them.
    pub dry_run: bool,
    /// The longest any one statement may run (the COPY of the rows
    /// included, which streams as fast as Kafka acknowledges).
    pub statement_timeout: Duration,
}

/// What was republished.
#[derive(Debug, Default)]
pub struct Summary {
    pub table: String,
    pub records: u64,
    /// Records per topic.
    pub topics: BTreeMap<String, u64>,
}

/// Why republishing stopped.
#[derive(Debug, thiserror::Error)]
pub enum RepublishError {
    #[error("{0}")]
    Usage(String),
    #[error("PostgreSQL: {0}")]
    Postgres(String),
    #[error("{0}")]
    Route(#[from] crate::router::RouteError),
    #[error(
        "Kafka: {what}; {acked} record(s) were acknowledged before it (re-running the same \
         command is safe: consumers de-duplicate by the id header)"
    )]
    Kafka { what: String, acked: u64 },
    #[error(
        "schema registry: {what}; {acked} record(s) were acknowledged before it (re-running the \
         same command is safe: consumers de-duplicate by the id header)"
    )]
    Registry { what: String, acked: u64 },
}

/// The `[[outbox]]` entry `table` names.
fn pick<'c>(config: &'c Config, table: Option<&str>) -> Result<&'c OutboxConfig, RepublishError> {
    let names = || {
        config
            .outbox
            .iter()
            .map(|o| o.table.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match table {
        None if config.outbox.len() == 1 => Ok(&config.outbox[0]),
        None => Err(RepublishError::Usage(format!(
            "the configuration has {} [[outbox]] tables ({}): name one with --table",
            config.outbox.len(),
            names()
        ))),
        Some(wanted) => config
            .outbox
            .iter()
            .find(|o| {
                o.table.to_string() == wanted
                    || o.table.name == wanted
                    || format!("{}.{}", o.table.schema, o.table.name) == wanted
            })
            .ok_or_else(|| {
                RepublishError::Usage(format!(
                    "--table {wanted:?} is not an [[outbox]] table of this configuration (it has: {})",
                    names()
                ))
            }),
    }
}

/// The record a streamed insert of `row` would be, with the republish headers.
fn republished(mut record: Record, marker: &Arc<str>) -> Record {
    record.headers.retain(|(k, _)| &**k != "walrelay.lsn");
    record
        .headers
        .push((marker.clone(), Bytes::from_static(b"true")));
    record.recount();
    record
}

/// Reads the rows and publishes them; `print` gets each record on a dry run.
pub async fn republish(
    config: &Config,
    request: &Request,
    mut print: impl FnMut(&Record),
) -> Result<Summary, RepublishError> {
    if request.filter.trim().is_empty() {
        return Err(RepublishError::Usage(
            "--where is empty: give the condition that selects the rows to republish, e.g. \
             --where \"id IN ('…')\""
                .into(),
        ));
    }
    crate::pg::filter::check(&request.filter)
        .map_err(|why| RepublishError::Usage(format!("--where is refused: {why}")))?;
    let outbox = pick(config, request.table.as_deref())?;
    // Records with schemas get their ids as the stream's do.
    let registry = match &config.kafka.schema_registry {
        Some(r) if outbox.format.uses_registry() && !request.dry_run => Some(
            Registry::new(
                r,
                Arc::new(crate::telemetry::Metrics::new(&config.connector.name)),
            )
            .map_err(|what| {
                RepublishError::Usage(format!(
                    "kafka.schema_registry.url: {what}; use an http:// or https:// URL such as \
                     \"http://registry:8081\", and a readable kafka.schema_registry.ssl_ca"
                ))
            })?,
        ),
        _ => None,
    };
    let params = connect_params(config);
    let client = catalog::connect(&params)
        .await
        .map_err(|e| RepublishError::Postgres(e.to_string()))?;
    let (table, _) = startup::outbox_table(&client, outbox)
        .await
        .map_err(|e| RepublishError::Postgres(format!("{}; {}", e.problem(), e.fix())))?;
    let mut reader = SnapshotReader::open_now(&params)
        .await
        .map_err(|e| RepublishError::Postgres(e.to_string()))?;
    reader
        .limit_statements(request.statement_timeout)
        .await
        .map_err(|e| RepublishError::Postgres(e.to_string()))?;
    let relation = reader
        .table_relation(
            &table.schema,
            &table.name,
            Some(&config.postgres.publication),
        )
        .await
        .map_err(|e| RepublishError::Postgres(e.to_string()))?;
    let mut router = Router::new(std::slice::from_ref(outbox));
    router.on_relation(&relation);

    let mut sink =
        if request.dry_run {
            None
        } else {
            let outage = Arc::new(OutageLog::new("Kafka", Duration::from_secs(15)));
            let (sink, acks) = KafkaSink::<u64>::new(&producer_properties(config), outage)
                .map_err(|e| RepublishError::Kafka {
                    what: e.to_string(),
                    acked: 0,
                })?;
            Some((sink, acks))
        };
    let marker: Arc<str> = Arc::from(REPUBLISHED_HEADER);
    let mut summary = Summary {
        table: format!("{}.{}", table.schema, table.name),
        ..Summary::default()
    };
    let mut acked = 0u64;
    let mut ids: Vec<String> = Vec::new();
    {
        let mut rows = reader
            .read_where(
                &relation,
                &outbox.snapshot_order_by,
                None,
                Some(&request.filter),
            )
            .await
            .map_err(|e| RepublishError::Postgres(e.to_string()))?;
        while let Some(batch) = rows
            .next_batch(BATCH_ROWS, BATCH_BYTES)
            .await
            .map_err(|e| RepublishError::Postgres(e.to_string()))?
        {
            for row in batch {
                let Routed::Record(record) =
                    router.on_insert(relation.oid, &row, Lsn::ZERO, None)?
                else {
                    continue;
                };
                let mut record = republished(record, &marker);
                if let Some(registry) = &registry {
                    match registry.frame(&record).await {
                        Ok(Some(framed)) => record = framed,
                        Ok(None) => {}
                        Err(e) => {
                            return Err(RepublishError::Registry {
                                what: format!(
                                    "no schema id for a record to topic {:?}: {e}; {}",
                                    record.topic,
                                    e.fix()
                                ),
                                acked,
                            });
                        }
                    }
                }
                *summary.topics.entry(record.topic.to_string()).or_default() += 1;
                match &mut sink {
                    None => print(&record),
                    Some((sink, acks)) => {
                        ids.push(router.row_id(relation.oid, &row).unwrap_or_default());
                        sink.send(&record, summary.records).await.map_err(|e| {
                            RepublishError::Kafka {
                                what: e.to_string(),
                                acked,
                            }
                        })?;
                        while let Ok(ack) = acks.try_recv() {
                            settle(ack, &ids, &mut acked)?;
                        }
                    }
                }
                summary.records += 1;
            }
        }
    }
    let _ = reader.finish().await;
    if let Some((_sink, mut acks)) = sink {
        let deadline = config
            .kafka
            .shutdown_flush_timeout
            .max(Duration::from_secs(60));
        while acked < summary.records {
            match tokio::time::timeout(deadline, acks.recv()).await {
                Ok(Some(ack)) => settle(ack, &ids, &mut acked)?,
                Ok(None) => break,
                Err(_) => {
                    return Err(RepublishError::Kafka {
                        what: format!(
                            "no acknowledgement for {} s; is the broker reachable?",
                            deadline.as_secs()
                        ),
                        acked,
                    });
                }
            }
        }
    }
    Ok(summary)
}

fn settle(ack: Ack<u64>, ids: &[String], acked: &mut u64) -> Result<(), RepublishError> {
    match ack {
        Ack::Delivered(_) => {
            *acked += 1;
            Ok(())
        }
        Ack::Failed {
            token,
            topic,
            error,
        } => {
            let id = usize::try_from(token)
                .ok()
                .and_then(|i| ids.get(i))
                .map_or("?", String::as_str);
            Err(RepublishError::Kafka {
                what: format!(
                    "Kafka rejected the record of row id {id} for topic {topic:?}: {error}"
                ),
                acked: *acked,
            })
        }
        Ack::Fatal(error) => Err(RepublishError::Kafka {
            what: error.to_string(),
            acked: *acked,
        }),
    }
}

#[cfg(test)]
mod tests;
