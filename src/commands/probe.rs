//! What `check` and `status` both read, read one way: the brokers reached
//! with the producer's properties ([`reach_kafka`]), the offset store read as
//! `run` reads it ([`read_offset_store`]), and the slot's row with its sizes
//! ([`read_slot`]).
//!
//! Invariants:
//! - Both commands say the same thing in the same words: a broker refusing
//!   connections or credentials is said at once with librdkafka's reason
//!   (not after a timeout), an offsets topic that is not compacted is
//!   refused as `run` refuses it.
//! - Reading only: nothing here creates a topic, writes an offset or touches
//!   the slot.
//! - The commands import this module; it imports neither of them (nor does
//!   anything of the pipeline import the commands).

use std::time::Duration;

use serde::Serialize;

use crate::config::Config;
use crate::offsets::{self, OffsetStore};
use crate::pg::catalog::{self, CatalogError};
use crate::sink::probe::{ProbeError, ProbeReport, probe_cluster};

/// Why Kafka or the offset store could not be read: the words of `check`'s
/// FAIL line, which `status` prints too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaFailure {
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
pub(crate) async fn reach_kafka(props: &[(String, String)]) -> Result<ProbeReport, KafkaFailure> {
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

/// A row of `pg_replication_slots`, with the sizes worked out.
#[derive(Debug, Serialize)]
pub struct SlotStatus {
    pub active_pid: Option<i32>,
    pub confirmed_flush_lsn: Option<String>,
    pub restart_lsn: Option<String>,
    pub current_wal_lsn: Option<String>,
    /// WAL written since the confirmed position.
    pub lag_bytes: Option<i64>,
    /// WAL the slot holds back (since `restart_lsn`).
    pub retained_wal_bytes: Option<i64>,
    pub wal_status: Option<String>,
    /// How much more WAL may be written before the slot is lost (`None`:
    /// unlimited, `max_slot_wal_keep_size = -1`).
    pub safe_wal_size_bytes: Option<i64>,
    /// PostgreSQL 17+: why the slot was invalidated.
    pub invalidation_reason: Option<String>,
    pub plugin: Option<String>,
}

/// A size for people: `16.0 MiB`.
pub(crate) fn bytes(n: Option<i64>) -> String {
    match n {
        None => "unknown".to_owned(),
        Some(n) if n.unsigned_abs() >= 1 << 30 => {
            format!("{:.1} GiB", n as f64 / f64::from(1 << 30))
        }
        Some(n) if n.unsigned_abs() >= 1 << 20 => {
            format!("{:.1} MiB", n as f64 / f64::from(1 << 20))
        }
        Some(n) if n.unsigned_abs() >= 1 << 10 => {
            format!("{:.1} KiB", n as f64 / f64::from(1 << 10))
        }
        Some(n) => format!("{n} B"),
    }
}

impl SlotStatus {
    /// Lag, retained WAL and how much more may be written, in one line.
    pub fn wal_summary(&self) -> String {
        let safe = match self.safe_wal_size_bytes {
            None => "unlimited (max_slot_wal_keep_size = -1)".to_owned(),
            n => bytes(n),
        };
        format!(
            "wal_status {}, lag {}, retained WAL {}, safe_wal_size {safe}",
            or_dash(self.wal_status.as_deref()),
            bytes(self.lag_bytes),
            bytes(self.retained_wal_bytes)
        )
    }
}

pub(crate) fn or_dash(v: Option<&str>) -> &str {
    v.unwrap_or("-")
}

/// Reads the slot's row with its sizes (`check` reports them too).
pub(crate) async fn read_slot(
    client: &tokio_postgres::Client,
    slot: &str,
) -> Result<Option<SlotStatus>, CatalogError> {
    let version = catalog::server_version(client).await?;
    // invalidation_reason exists from PostgreSQL 17 on.
    let reason = if version >= 170_000 {
        "invalidation_reason::text"
    } else {
        "NULL::text"
    };
    // The server's own WAL position: a standby's is what it replayed.
    let wal = catalog::WAL_POSITION;
    let sql = format!(
        "SELECT active_pid, confirmed_flush_lsn::text, restart_lsn::text, \
                ({wal})::text, \
                pg_wal_lsn_diff({wal}, confirmed_flush_lsn)::int8, \
                pg_wal_lsn_diff({wal}, restart_lsn)::int8, \
                wal_status::text, safe_wal_size::int8, {reason}, plugin::text \
         FROM pg_replication_slots WHERE slot_name = $1"
    );
    let row = client
        .query_opt(&sql, &[&slot])
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading pg_replication_slots",
            source,
        })?;
    Ok(row.map(|r| SlotStatus {
        active_pid: r.get(0),
        confirmed_flush_lsn: r.get(1),
        restart_lsn: r.get(2),
        current_wal_lsn: r.get(3),
        lag_bytes: r.get(4),
        retained_wal_bytes: r.get(5),
        wal_status: r.get(6),
        safe_wal_size_bytes: r.get(7),
        invalidation_reason: r.get(8),
        plugin: r.get(9),
    }))
}
