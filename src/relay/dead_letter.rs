//! The dead-letter topic (`[dead_letter] topic`): where a change that
//! cannot become its record goes instead of stopping the connector.
//!
//! A dead-letter record takes the failed change's place in the stream: it
//! is published at the change's position, in its transaction, through the
//! one send path every record takes ([`Publisher::publish`]), so the
//! checkpoint confirms past the change only once Kafka acknowledged the
//! dead-letter record, `exactly_once` puts it in the same Kafka
//! transaction, and a restart re-sends the same record (every header is
//! made from the change and its position, never from a clock).
//!
//! Invariants:
//! - **Stable identity.** A dead-letter record depends only on the change,
//!   its position and the error: `walrelay.event_id` is `<commit LSN>:<index>`
//!   (a table event's own id; for an outbox row its `id` header too when
//!   the id column is not NULL).
//! - **One partition per dead letter.** Its key is the change's key, or,
//!   when the change has none (a NULL aggregate id, a table change that
//!   could not be encoded), its `walrelay.event_id`: the producer's
//!   partitioner then puts a re-sent copy on the first copy's partition,
//!   where a keyless record would land on any. `walrelay.dead_letter.key`
//!   is present only for an original key.
//! - **Row data stays out of logs and metrics.** The one log line per
//!   dead letter names table, LSN, position and reason; the metric's labels
//!   are a fixed reason and a table name (at most [`MAX_TABLE_LABELS`]
//!   names, then `other`). The row's bytes go only to Kafka.
//!
//! [`Publisher::publish`]: super::publish::Publisher::publish

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;

use crate::pgoutput::{Cell, Relation, TupleData};
use crate::router::Record;
use crate::router::table::{EVENT_ID_HEADER, LSN_HEADER};
use crate::source::Position;
use crate::telemetry::Metrics;

/// Header: the reason label ([`Reason`]).
pub const REASON_HEADER: &str = "walrelay.dead_letter.reason";
/// Header: the error text, as the connector would have stopped with it.
pub const ERROR_HEADER: &str = "walrelay.dead_letter.error";
/// Header: the source table (`schema.name`).
pub const TABLE_HEADER: &str = "walrelay.dead_letter.table";
/// Header: the topic the record was meant for (or the route's topic
/// template when the topic itself could not be made).
pub const TOPIC_HEADER: &str = "walrelay.dead_letter.topic";
/// Header: the key the record would have had, when there was one.
pub const KEY_HEADER: &str = "walrelay.dead_letter.key";
/// Header: the refused value's size in bytes (`too_large` only: the value
/// itself is what the broker refused, so it is not in the record).
pub const SIZE_HEADER: &str = "walrelay.dead_letter.value_bytes";

/// Distinct table names that get a metric series of their own.
pub const MAX_TABLE_LABELS: usize = 100;

/// Why a change was dead-lettered: the metric's `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reason {
    /// An outbox row the router refused ([`crate::router::Unroutable`]).
    Outbox(crate::router::Unroutable),
    /// A table change walrelay cannot encode (`special_values = "fail"`, a
    /// type retyped mid-stream, text that is not the type's output).
    Unencodable,
    /// The producer refused the record as larger than `message.max.bytes`.
    TooLarge,
}

impl Reason {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Reason::Outbox(kind) => kind.as_str(),
            Reason::Unencodable => "unencodable_value",
            Reason::TooLarge => "too_large",
        }
    }
}

/// One change that goes to the dead-letter topic.
pub(super) struct Failure {
    pub reason: Reason,
    pub error: String,
    pub table: String,
    pub pos: Position,
    /// The outbox row's id column, when not NULL.
    pub id: Option<Bytes>,
    /// The topic (or topic template) the record was meant for.
    pub topic: Option<String>,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// `too_large`: the refused value's size.
    pub refused_bytes: Option<usize>,
}

/// The configured dead-letter topic and this session's label set.
pub(super) struct DeadLetter {
    topic: Arc<str>,
    names: Names,
    tables: HashSet<String>,
}

struct Names {
    id: Arc<str>,
    event_id: Arc<str>,
    lsn: Arc<str>,
    reason: Arc<str>,
    error: Arc<str>,
    table: Arc<str>,
    topic: Arc<str>,
    key: Arc<str>,
    size: Arc<str>,
}

impl DeadLetter {
    pub(super) fn new(config: &crate::config::Config) -> Option<DeadLetter> {
        let dl = config.dead_letter.as_ref()?;
        Some(DeadLetter {
            topic: Arc::from(dl.topic.as_str()),
            names: Names {
                id: Arc::from("id"),
                event_id: Arc::from(EVENT_ID_HEADER),
                lsn: Arc::from(LSN_HEADER),
                reason: Arc::from(REASON_HEADER),
                error: Arc::from(ERROR_HEADER),
                table: Arc::from(TABLE_HEADER),
                topic: Arc::from(TOPIC_HEADER),
                key: Arc::from(KEY_HEADER),
                size: Arc::from(SIZE_HEADER),
            },
            tables: HashSet::new(),
        })
    }

    /// The dead-letter record of `f`: key = the original key (else the
    /// event id, see the module's invariants), value = the original bytes,
    /// headers naming what failed and where.
    pub(super) fn record(&self, f: &Failure) -> Record {
        let n = &self.names;
        let mut headers = Vec::with_capacity(9);
        if let Some(id) = &f.id {
            headers.push((n.id.clone(), id.clone()));
        }
        let event_id = Bytes::from(format!("{}:{}", f.pos.commit_lsn, f.pos.index));
        headers.push((n.event_id.clone(), event_id.clone()));
        headers.push((n.lsn.clone(), Bytes::from(f.pos.commit_lsn.to_string())));
        headers.push((
            n.reason.clone(),
            Bytes::from_static(f.reason.as_str().as_bytes()),
        ));
        headers.push((n.error.clone(), Bytes::from(f.error.clone())));
        headers.push((n.table.clone(), Bytes::from(f.table.clone())));
        if let Some(topic) = &f.topic {
            headers.push((n.topic.clone(), Bytes::from(topic.clone())));
        }
        if let Some(key) = &f.key {
            headers.push((n.key.clone(), key.clone()));
        }
        if let Some(size) = f.refused_bytes {
            headers.push((n.size.clone(), Bytes::from(size.to_string())));
        }
        Record::new(
            self.topic.clone(),
            Some(f.key.clone().unwrap_or(event_id)),
            f.value.clone(),
            headers,
            None,
        )
    }

    /// Counts and logs one dead letter handed to the producer: one line,
    /// naming table, LSN, position and reason (never row values).
    pub(super) fn note(&mut self, f: &Failure, metrics: &Metrics) {
        let label = if self.tables.contains(&f.table) {
            f.table.clone()
        } else if self.tables.len() < MAX_TABLE_LABELS {
            self.tables.insert(f.table.clone());
            f.table.clone()
        } else {
            crate::relay::topic_metric::OTHER.to_owned()
        };
        metrics.dead_letter(f.reason.as_str(), label);
        tracing::warn!(
            table = %f.table,
            lsn = %f.pos.commit_lsn,
            index = f.pos.index,
            reason = f.reason.as_str(),
            topic = %self.topic,
            "a change that cannot be published goes to the dead-letter topic instead; the \
             connector goes on (its error is in the record's walrelay.dead_letter.error header)"
        );
    }
}

/// A table change's row as a dead-letter value: a JSON object of its
/// columns as PostgreSQL sent them (text output; binary cells as
/// lossy UTF-8), NULL as `null`, unchanged TOAST values left out.
pub(super) fn row_json(relation: &Relation, row: &TupleData) -> Bytes {
    let mut map = serde_json::Map::with_capacity(row.len());
    for (col, cell) in relation.columns.iter().zip(row.cells()) {
        let value = match cell {
            Cell::Null => serde_json::Value::Null,
            Cell::UnchangedToast => continue,
            Cell::Text(b) | Cell::Binary(b) => {
                serde_json::Value::String(String::from_utf8_lossy(b).into_owned())
            }
        };
        map.insert(col.name.clone(), value);
    }
    Bytes::from(serde_json::Value::Object(map).to_string())
}

#[cfg(test)]
mod tests;
