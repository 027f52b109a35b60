//! `walrelay status`: what an on-call engineer asks first, answered without
//! a running instance.
//!
//! It reads, and never changes: the slot (`pg_replication_slots`: active
//! pid, confirmed and restart positions, lag and retained WAL, `wal_status`,
//! `safe_wal_size`, and on PostgreSQL 17+ `invalidation_reason`), the stored
//! offset and its age, the difference between the two with what `run` would
//! do about it (the decision function `run` uses, [`offsets::compare`]), the
//! publication's tables, the instances (who holds the lease, who waits as a
//! standby: `crate::source::lease`), and an instance's `/healthz`
//! ([`HealthProbe`]: by default the `[health] listen` address of the
//! configuration, on this host; `--health-url` for one elsewhere;
//! `--no-health` for none).
//!
//! Invariants:
//! - Every part is read on its own: PostgreSQL down still shows the stored
//!   offset, Kafka down still shows the slot; an unreadable part says why.
//!   Kafka is reached the way `check` reaches it (`super::probe`), so
//!   brokers refusing connections are said at once with librdkafka's
//!   reason, not after a timeout.
//! - [`Status::problems`] lists what needs a person (a missing, lost or
//!   `unreserved` slot, a slot ahead of the stored offset, an unreachable
//!   service, an unhealthy instance); the command exits 1 when it is not
//!   empty, 0 otherwise, so scripts can use the exit code alone.
//! - Nothing secret is printed: no password, no connection string.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::Lsn;
use crate::commands::probe::{
    StoredRead, bytes, or_dash, reach_kafka, read_offset_store, read_slot,
};
use crate::config::Config;
use crate::offsets::{self, StartDecision};
use crate::pg::catalog::{self, CatalogError};
use crate::pg::params::{capture_params, connect_params};
use crate::pg::replication::ReplicationClient;
use crate::pg::wire::WireError;
use crate::sink::properties::producer_properties;
use crate::source::lease::Peer;
use crate::telemetry::unix_ms as now_ms;

pub use crate::commands::probe::{KafkaFailure, SlotStatus};

/// How long an instance may take to answer `GET /healthz`.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(3);

/// Whose `/healthz` `status` asks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum HealthProbe {
    /// The configuration's `[health] listen` address, on this host (an
    /// unspecified address, `0.0.0.0` or `::`, is asked on loopback); none
    /// without a `[health]` section.
    #[default]
    Configured,
    /// An instance anywhere (`--health-url`).
    Url(HealthUrl),
    /// None (`--no-health`): e.g. from a host that cannot reach any.
    Off,
}

/// `http://HOST:PORT[/PATH]`: where to `GET` an instance's health, `PATH`
/// being `/healthz` unless given (a proxy's path, say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthUrl {
    /// `HOST:PORT` (`[v6]:PORT` for an IPv6 address).
    pub address: String,
    pub path: String,
}

impl HealthUrl {
    /// The `[health] listen` address as seen from this host.
    fn local(listen: SocketAddr) -> HealthUrl {
        let mut addr = listen;
        if addr.ip().is_unspecified() {
            addr.set_ip(if addr.is_ipv4() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            });
        }
        HealthUrl {
            address: addr.to_string(),
            path: "/healthz".to_owned(),
        }
    }
}

impl fmt::Display for HealthUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.address, self.path)
    }
}

impl FromStr for HealthUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<HealthUrl, String> {
        let example = "e.g. http://10.0.3.17:9187";
        let rest = s.strip_prefix("http://").ok_or_else(|| {
            format!("{s:?} is not an http:// URL (/healthz is plain HTTP), {example}")
        })?;
        let (address, path) = rest
            .find(['/', '?', '#'])
            .map_or((rest, ""), |at| rest.split_at(at));
        let path = match path {
            "" | "/" => "/healthz",
            p if p.starts_with('/') => p,
            _ => return Err(format!("{s:?}: the path must start with '/', {example}")),
        };
        let port = address
            .rsplit_once(':')
            .filter(|(host, _)| !host.is_empty() && (!host.contains(':') || host.starts_with('[')))
            .and_then(|(_, port)| port.parse::<u16>().ok());
        if port.is_none() || address.contains('@') || path.contains(char::is_whitespace) {
            return Err(format!(
                "{s:?}: expected http://HOST:PORT[/PATH], {example}"
            ));
        }
        Ok(HealthUrl {
            address: address.to_owned(),
            path: path.to_owned(),
        })
    }
}

/// One part of the status: its readings, or why they could not be read.
/// In JSON: the readings, or `{"error": "…"}` with the error's words.
pub type Part<T> = Result<T, Unreadable>;

/// Why a part of the status could not be read. Each variant keeps the
/// error of the layer that failed (its `source`); the words printed are
/// that error's, after the service it concerns where the error does not
/// name it.
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    /// No connection to PostgreSQL: every part read there says so (one
    /// error, shared by the slot, the publication, the instances and the
    /// server's identity).
    #[error("PostgreSQL: {0}")]
    Postgres(Arc<CatalogError>),
    /// A catalog query on a server that was reached.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The replication connection (`IDENTIFY_SYSTEM`, which the comparison
    /// with the stored offset needs).
    #[error(transparent)]
    Replication(#[from] WireError),
    /// The brokers, or the offset store on them.
    #[error("Kafka: {}", .0.problem)]
    Kafka(KafkaFailure),
    /// The instance's `/healthz`.
    #[error(transparent)]
    Health(#[from] HealthError),
}

/// `GET /healthz` got no answer.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("no instance answers on {url}: {source}{}", local_hint(*.local))]
    NoAnswer {
        url: String,
        source: std::io::Error,
        /// Asked at the configuration's `[health] listen`, on this host.
        local: bool,
    },
    #[error("no answer from {url} within {} s{}", .after.as_secs(), local_hint(*.local))]
    Timeout {
        url: String,
        after: Duration,
        local: bool,
    },
}

/// What to do when the configuration's own `[health] listen` (asked on
/// this host) does not answer.
fn local_hint(local: bool) -> &'static str {
    if local {
        " ([health] listen, asked on this host; for an instance on another host: \
         --health-url http://HOST:PORT, or --no-health)"
    } else {
        ""
    }
}

fn part<T: Serialize, S: serde::Serializer>(p: &Part<T>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    match p {
        Ok(v) => v.serialize(s),
        Err(e) => {
            let mut map = s.serialize_map(Some(1))?;
            map.serialize_entry("error", &e.to_string())?;
            map.end()
        }
    }
}

fn optional_part<T: Serialize, S: serde::Serializer>(
    p: &Option<Part<T>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => part(p, s),
        None => s.serialize_none(),
    }
}

/// Everything `walrelay status` reports.
#[derive(Debug, Serialize)]
pub struct Status {
    pub connector: String,
    pub slot_name: String,
    /// `None` when the slot does not exist.
    #[serde(serialize_with = "part")]
    pub slot: Part<Option<SlotStatus>>,
    /// `None` when nothing is stored for this connector.
    #[serde(serialize_with = "part")]
    pub stored_offset: Part<Option<StoredStatus>>,
    /// The slot against the stored offset, when both were read.
    pub comparison: Option<Comparison>,
    /// `None` when the publication does not exist.
    #[serde(serialize_with = "part")]
    pub publication: Part<Option<PublicationStatus>>,
    /// Who holds the lease (the active instance) and who waits for it.
    #[serde(serialize_with = "part")]
    pub instances: Part<InstancesStatus>,
    /// `None` when no instance was asked (no `[health]` section, or
    /// `--no-health`).
    #[serde(serialize_with = "optional_part")]
    pub instance: Option<Part<InstanceStatus>>,
    /// What needs a person; empty when all is well.
    pub problems: Vec<String>,
}

/// The stored offset of this connector.
#[derive(Debug, Serialize)]
pub struct StoredStatus {
    pub lsn: String,
    pub slot: String,
    pub system_id: String,
    pub timeline: u32,
    pub written_at_ms: i64,
    /// Seconds since it was written (by this machine's clock).
    pub age_seconds: f64,
    /// Commit time (Unix ms) of the newest transaction at or below `lsn`:
    /// every later transaction committed at or after it. What a lost slot's
    /// reconciliation selects rows by (`written_at_ms` is no such bound).
    pub committed_at_ms: Option<i64>,
    /// `running` or `completed` when this connector took a snapshot.
    pub snapshot: Option<String>,
    /// The last range accepted as never streamed: what to reconcile.
    pub accepted_gap: Option<offsets::AcceptedGap>,
    /// The incremental snapshot under way (or the last one).
    pub incremental: Option<offsets::IncrementalProgress>,
}

/// The slot's confirmed position against the stored offset.
#[derive(Debug, Serialize)]
pub struct Comparison {
    /// Stored offset minus the slot's confirmed position: positive when the
    /// slot is behind (normal), negative when it is ahead.
    pub stored_minus_slot_bytes: i128,
    /// What `run` would do, in its own words.
    pub run_would: String,
}

/// The publication's tables.
#[derive(Debug, Serialize)]
pub struct PublicationStatus {
    pub name: String,
    pub all_tables: bool,
    pub tables: Vec<String>,
}

/// The instances of this connector, from PostgreSQL's lock table.
#[derive(Debug, Serialize)]
pub struct InstancesStatus {
    /// The lease holder; `None` when no instance runs.
    pub active: Option<Peer>,
    pub standbys: Vec<Peer>,
}

/// The running instance's `/healthz`.
#[derive(Debug, Serialize)]
pub struct InstanceStatus {
    /// `HOST:PORT` asked.
    pub address: String,
    /// The URL asked.
    pub url: String,
    pub healthy: bool,
    pub says: String,
}

/// Reads everything; never fails as a whole. `health` says whose
/// `/healthz` to ask.
pub async fn status(config: &Config, health: &HealthProbe) -> Status {
    let pg = &config.postgres;
    let params = connect_params(config);
    // The slot first, the stored offset after: a running instance stores a
    // position before it confirms it, so read in this order the slot is
    // never seen ahead of the offset by the race between the two reads.
    // The slot and the system it streams from live on the standby when
    // walrelay captures from one.
    let capture = capture_params(config);
    let (slot, publication, server, instances) = match catalog::connect(&params).await {
        Ok(client) => {
            let slot = if pg.capture_from.from_standby() {
                match catalog::connect(&capture).await {
                    Ok(standby) => read_slot(&standby, &pg.slot).await,
                    Err(e) => Err(e),
                }
            } else {
                read_slot(&client, &pg.slot).await
            };
            let publication = read_publication(&client, &pg.publication).await;
            let instances = crate::source::lease::peers(&client, &pg.slot)
                .await
                .map(|p| InstancesStatus {
                    active: p.active,
                    standbys: p.standbys,
                })
                .map_err(Unreadable::from);
            let server = identify(&capture).await;
            (
                slot.map_err(Unreadable::from),
                publication,
                server,
                instances,
            )
        }
        Err(e) => {
            let why = Arc::new(e);
            (
                Err(Unreadable::Postgres(why.clone())),
                Err(Unreadable::Postgres(why.clone())),
                Err(Unreadable::Postgres(why.clone())),
                Err(Unreadable::Postgres(why)),
            )
        }
    };
    let stored = read_stored(config).await;

    let comparison = match (&slot, &stored, &server) {
        (Ok(Some(slot)), Ok(stored), Ok((system_id, timeline, history))) => compare(
            config,
            slot,
            stored.as_ref(),
            system_id,
            *timeline,
            history.as_deref(),
        ),
        _ => None,
    };
    let instance = match (health, &config.health) {
        (HealthProbe::Url(url), _) => Some(healthz(url, false).await),
        (HealthProbe::Configured, Some(section)) => {
            Some(healthz(&HealthUrl::local(section.listen), true).await)
        }
        (HealthProbe::Configured, None) | (HealthProbe::Off, _) => None,
    };

    let mut status = Status {
        connector: config.connector.name.clone(),
        slot_name: pg.slot.clone(),
        slot,
        stored_offset: stored.map(|s| s.map(|s| stored_status(&s))),
        comparison,
        publication,
        instances,
        instance,
        problems: Vec::new(),
    };
    status.problems = problems(&status);
    status
}

/// The server's system id, timeline and that timeline's history (what
/// the start decision compares the stored offset with).
async fn identify(params: &crate::pg::wire::ConnectParams) -> Part<(String, u32, Option<String>)> {
    let mut repl = ReplicationClient::connect(params).await?;
    let s = repl.identify_system().await?;
    let history = repl.timeline_history(s.timeline).await.ok().flatten();
    Ok((s.system_id, s.timeline, history))
}

/// The stored offset, read as `check` reads it: the brokers first, so that
/// refused connections are said at once.
async fn read_stored(config: &Config) -> Part<Option<offsets::StoredOffset>> {
    let props = producer_properties(config);
    reach_kafka(&props).await.map_err(Unreadable::Kafka)?;
    read_offset_store(config, &props)
        .await
        .map(StoredRead::into_offset)
        .map_err(Unreadable::Kafka)
}

async fn read_publication(
    client: &tokio_postgres::Client,
    name: &str,
) -> Part<Option<PublicationStatus>> {
    let Some(publication) = catalog::publication(client, name).await? else {
        return Ok(None);
    };
    let tables = catalog::published_tables(client, name).await?;
    Ok(Some(PublicationStatus {
        name: name.to_owned(),
        all_tables: publication.all_tables,
        tables,
    }))
}

/// Unix milliseconds as RFC 3339 UTC, e.g. `2026-12-03T07:10:00.123Z`.
fn unix_ms_text(ms: i64) -> String {
    let time = u64::try_from(ms)
        .ok()
        .and_then(|ms| std::time::UNIX_EPOCH.checked_add(Duration::from_millis(ms)));
    match time {
        Some(t) => humantime_serde::re::humantime::format_rfc3339_millis(t).to_string(),
        None => format!("{ms} ms since 1970"),
    }
}

fn stored_status(s: &offsets::StoredOffset) -> StoredStatus {
    let now_ms = now_ms();
    StoredStatus {
        lsn: s.lsn.to_string(),
        slot: s.slot.clone(),
        system_id: s.system_id.clone(),
        timeline: s.timeline,
        written_at_ms: s.written_at_ms,
        age_seconds: now_ms.saturating_sub(s.written_at_ms) as f64 / 1000.0,
        committed_at_ms: s.committed_at_ms,
        snapshot: s.snapshot.as_ref().map(|p| {
            let state = format!("{:?}", p.state).to_lowercase();
            let done = if p.state == crate::offsets::SnapshotState::Running {
                format!(
                    "; tables done: {}; {} records in Kafka{}",
                    if p.tables_done.is_empty() {
                        "none".to_owned()
                    } else {
                        p.tables_done.join(", ")
                    },
                    p.rows,
                    if p.taken.is_some() {
                        "; a restart resumes it"
                    } else {
                        ""
                    }
                )
            } else {
                String::new()
            };
            match &p.consistent_point {
                Some(at) => format!("{state} (its slot was created at {at}{done})"),
                None if done.is_empty() => state,
                None => format!("{state} ({})", done.trim_start_matches("; ")),
            }
        }),
        accepted_gap: s.accepted_gap.clone(),
        incremental: s.incremental.clone(),
    }
}

fn compare(
    config: &Config,
    slot: &SlotStatus,
    stored: Option<&offsets::StoredOffset>,
    system_id: &str,
    timeline: u32,
    history: Option<&str>,
) -> Option<Comparison> {
    let confirmed: Lsn = slot.confirmed_flush_lsn.as_deref()?.parse().ok()?;
    let stored_lsn: Option<Lsn> = stored.map(|s| s.lsn);
    let decision = offsets::compare(
        stored,
        &offsets::SlotPosition {
            confirmed_flush: confirmed,
            wal_status: slot.wal_status.clone(),
        },
        &offsets::Server {
            system_id,
            timeline,
            history,
        },
        &config.postgres.slot,
    );
    let run_would = match decision {
        StartDecision::Resume { from } => format!("resume streaming at {from}"),
        StartDecision::Refuse { reason, hint } => {
            format!("refuse to start: {reason}. What to do: {hint}")
        }
    };
    Some(Comparison {
        stored_minus_slot_bytes: stored_lsn
            .map_or(0, |s| i128::from(s.0) - i128::from(confirmed.0)),
        run_would,
    })
}

/// `GET` on `url`; `local`: the configuration's `[health] listen` on
/// this host, which an error explains.
async fn healthz(url: &HealthUrl, local: bool) -> Part<InstanceStatus> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = &url.address;
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        stream
            .write_all(format!("GET {} HTTP/1.0\r\nHost: {address}\r\n\r\n", url.path).as_bytes())
            .await?;
        let mut answer = Vec::new();
        stream.take(64 * 1024).read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&answer).into_owned())
    };
    let answer = match tokio::time::timeout(HEALTH_TIMEOUT, exchange).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(source)) => {
            return Err(HealthError::NoAnswer {
                url: url.to_string(),
                source,
                local,
            }
            .into());
        }
        Err(_) => {
            return Err(HealthError::Timeout {
                url: url.to_string(),
                after: HEALTH_TIMEOUT,
                local,
            }
            .into());
        }
    };
    let healthy = answer
        .split_whitespace()
        .nth(1)
        .is_some_and(|code| code == "200");
    let says = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .trim()
        .to_owned();
    Ok(InstanceStatus {
        address: address.clone(),
        url: url.to_string(),
        healthy,
        says,
    })
}

fn problems(s: &Status) -> Vec<String> {
    let mut problems = Vec::new();
    match &s.slot {
        Err(e) => problems.push(format!("slot unreadable: {e}")),
        // Before the first start there is neither: run creates the slot.
        Ok(None) if matches!(s.stored_offset, Ok(None)) => {}
        Ok(None) => problems.push(format!(
            "slot {:?} does not exist: nothing holds WAL for this connector",
            s.slot_name
        )),
        Ok(Some(slot)) => match slot.wal_status.as_deref() {
            Some("lost") => problems.push(format!(
                "slot {:?} is lost{}: see docs/operations.md, \"Lost slot\"",
                s.slot_name,
                slot.invalidation_reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            )),
            Some("unreserved") => problems.push(format!(
                "slot {:?} is unreserved: it will be lost at the next checkpoint unless it \
                 catches up; see docs/operations.md, \"WAL growth\"",
                s.slot_name
            )),
            _ => {}
        },
    }
    if let Err(e) = &s.stored_offset {
        problems.push(format!("stored offset unreadable: {e}"));
    }
    if let Some(c) = &s.comparison
        && c.run_would.starts_with("refuse")
    {
        problems.push(format!("run would {}", c.run_would));
    }
    if let Err(e) = &s.publication {
        problems.push(format!("publication unreadable: {e}"));
    }
    match &s.instance {
        Some(Err(e)) => problems.push(format!("instance: {e}")),
        Some(Ok(i)) if !i.healthy => problems.push(format!("instance unhealthy: {}", i.says)),
        _ => {}
    }
    problems
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "connector            {}", self.connector)?;
        match &self.slot {
            Err(e) => writeln!(
                f,
                "slot                 {}: unreadable: {e}",
                self.slot_name
            )?,
            Ok(None) => writeln!(f, "slot                 {}: does not exist", self.slot_name)?,
            Ok(Some(s)) => {
                let active = s
                    .active_pid
                    .map_or("inactive".to_owned(), |p| format!("active (pid {p})"));
                writeln!(f, "slot                 {}: {active}", self.slot_name)?;
                writeln!(
                    f,
                    "  confirmed          {}",
                    or_dash(s.confirmed_flush_lsn.as_deref())
                )?;
                writeln!(
                    f,
                    "  restart            {}",
                    or_dash(s.restart_lsn.as_deref())
                )?;
                writeln!(
                    f,
                    "  server WAL at      {}",
                    or_dash(s.current_wal_lsn.as_deref())
                )?;
                writeln!(f, "  lag                {}", bytes(s.lag_bytes))?;
                writeln!(f, "  retained WAL       {}", bytes(s.retained_wal_bytes))?;
                writeln!(
                    f,
                    "  wal_status         {}",
                    or_dash(s.wal_status.as_deref())
                )?;
                let safe = match s.safe_wal_size_bytes {
                    None => "unlimited (max_slot_wal_keep_size = -1)".to_owned(),
                    n => bytes(n),
                };
                writeln!(f, "  safe_wal_size      {safe}")?;
                if let Some(reason) = &s.invalidation_reason {
                    writeln!(f, "  invalidated        {reason}")?;
                }
            }
        }
        match &self.stored_offset {
            Err(e) => writeln!(f, "stored offset        unreadable: {e}")?,
            Ok(None) => writeln!(f, "stored offset        none stored yet")?,
            Ok(Some(s)) => {
                writeln!(
                    f,
                    "stored offset        {} (slot {}, timeline {}), written {:.0} s ago",
                    s.lsn, s.slot, s.timeline, s.age_seconds
                )?;
                if let Some(at) = s.committed_at_ms {
                    writeln!(
                        f,
                        "  committed at       {}: every later transaction committed after it",
                        unix_ms_text(at)
                    )?;
                }
                if let Some(snapshot) = &s.snapshot {
                    writeln!(f, "  snapshot           {snapshot}")?;
                }
                if let Some(incremental) = &s.incremental {
                    writeln!(f, "  incremental        {incremental}")?;
                }
                if let Some(gap) = &s.accepted_gap {
                    let since = gap.from_committed_at_ms.map_or_else(String::new, |at| {
                        format!(
                            " (the outbox rows committed since {}, less your longest transaction)",
                            unix_ms_text(at)
                        )
                    });
                    writeln!(
                        f,
                        "  accepted gap       changes committed between {} and {} were never \
                         streamed (accepted {:.0} s ago): reconcile them{since} with walrelay \
                         republish",
                        gap.from,
                        gap.to,
                        (now_ms().saturating_sub(gap.accepted_at_ms) as f64 / 1000.0)
                    )?;
                }
            }
        }
        if let Some(c) = &self.comparison {
            let gap = i64::try_from(c.stored_minus_slot_bytes).ok();
            let relation = match c.stored_minus_slot_bytes {
                0 => "slot at the stored offset".to_owned(),
                d if d > 0 => format!("slot {} behind the stored offset (normal)", bytes(gap)),
                _ => format!(
                    "slot {} AHEAD of the stored offset: changes committed between {} and {} \
                     may be missing from Kafka",
                    bytes(gap.map(i64::saturating_neg)),
                    self.stored_offset
                        .as_ref()
                        .ok()
                        .and_then(Option::as_ref)
                        .map_or("-", |s| s.lsn.as_str()),
                    self.slot
                        .as_ref()
                        .ok()
                        .and_then(Option::as_ref)
                        .and_then(|s| s.confirmed_flush_lsn.as_deref())
                        .unwrap_or("-")
                ),
            };
            writeln!(f, "slot vs stored       {relation}")?;
            writeln!(f, "  run would          {}", c.run_would)?;
        }
        match &self.instances {
            Err(e) => writeln!(f, "instances            unreadable: {e}")?,
            Ok(i) => {
                match &i.active {
                    None => writeln!(f, "active instance      none (no instance holds the lease)")?,
                    Some(p) => writeln!(f, "active instance      {p}")?,
                }
                for p in &i.standbys {
                    writeln!(f, "  standby            {p}")?;
                }
            }
        }
        match &self.publication {
            Err(e) => writeln!(f, "publication          unreadable: {e}")?,
            Ok(None) => writeln!(f, "publication          does not exist")?,
            Ok(Some(p)) if p.all_tables => {
                writeln!(f, "publication          {}: FOR ALL TABLES", p.name)?
            }
            Ok(Some(p)) => writeln!(
                f,
                "publication          {}: {}",
                p.name,
                if p.tables.is_empty() {
                    "no tables".to_owned()
                } else {
                    p.tables.join(", ")
                }
            )?,
        }
        match &self.instance {
            None => writeln!(
                f,
                "instance             not asked (no [health] section, or --no-health)"
            )?,
            Some(Err(e)) => writeln!(f, "instance             {e}")?,
            Some(Ok(i)) => writeln!(
                f,
                "instance             {}: {} {}",
                i.url,
                if i.healthy { "healthy" } else { "UNHEALTHY" },
                i.says
            )?,
        }
        if self.problems.is_empty() {
            writeln!(f, "no problems")
        } else {
            for p in &self.problems {
                writeln!(f, "PROBLEM  {p}")?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests;
