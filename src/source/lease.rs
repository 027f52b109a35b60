//! The lease: at most one active instance per connector, enforced by
//! PostgreSQL.
//!
//! Every instance with the same configuration (a sidecar in each pod of a
//! scaled application, a second copy started by mistake, the old and the new
//! pod of a rolling update) asks for a session-level advisory lock in the
//! connector's database, keyed by the slot name ([`key`]), on a connection
//! of its own kept for as long as it holds the lock. The holder is the
//! active instance; the others wait in the lock's queue as standbys. Nothing
//! else decides who is active: no file, no Kafka state, no clock.
//!
//! Invariants:
//! 1. **Lease before anything.** An instance reads or changes nothing that
//!    belongs to the connector — slot, offset store, publication, Kafka
//!    records — before [`Lease::acquire`] returned. (The slot's single
//!    walsender stays a second fence, for the streaming phase only.)
//! 2. **PostgreSQL releases the lease of a dead holder.** The lock belongs to
//!    the holder's backend: it goes when that connection closes (process
//!    exit, kill -9, the pod's network namespace gone) or when the server
//!    notices a silent peer. The lease connection sets the server's TCP
//!    keepalives and `tcp_user_timeout` so that a holder whose node
//!    vanished is noticed in about [`SERVER_NOTICES_DEAD_PEER`], not after
//!    the kernel's two hours.
//! 3. **A holder learns of a loss within [`DETECT`].** The connection's task
//!    ending (the server closed it) cancels [`Lease::lost`] at once; a ping
//!    every [`PING_EVERY`] that fails or has no answer within
//!    [`PING_TIMEOUT`] cancels it too. The caller stops publishing and
//!    confirming at once on that token (it drops its session: queued
//!    records are purged, nothing further is confirmed).
//! 4. **A new holder waits out the old one's detection.** [`Lease::acquire`]
//!    returns only [`GRACE`] (> [`DETECT`]) after PostgreSQL granted the
//!    lock, and only if the lease is still held then. A previous holder cut
//!    off at the moment the lock moved has stopped by then. In the other
//!    direction (a holder's node vanished, its connection silent) the
//!    holder's own pings give up long before the server releases the lock
//!    (invariant 2), so the two never overlap — except for a holder whose
//!    whole host freezes and later resumes with records already handed to
//!    its producer: docs/delivery.md, "Fencing and its limits".
//!
//! 5. **Every grant has a term, and a holder checks its lease before it
//!    hands anything over.** Right after the lock is granted the holder
//!    writes a WAL record (`pg_logical_emit_message`, prefix
//!    [`LEASE_PREFIX`]); its LSN is the lease's **term**, greater than
//!    every earlier grant's. Offset records carry the term, and the offset
//!    store's reader takes the newest record of the highest term, so a
//!    holder that returns after losing its lease (a frozen VM, a long
//!    pause) cannot move the stored offset backwards. Before each record
//!    or offset write the holder asks its [`Fence`]: a lease not confirmed
//!    by a ping *sent* within [`DETECT`] (the process was paused, or the
//!    pings are late) is confirmed by a ping now before anything more is
//!    handed over; a lost one stops the session, whose producer's queue is
//!    purged. What librdkafka had already queued before the pause is
//!    beyond that check: docs/delivery.md, "Fencing and its limits".
//!
//! 6. **A silent lease connection of our own does not block us.** A lease
//!    connection can go half-open behind a proxy or NAT that keeps answering
//!    the server's keepalives: the holder gives the lease up (invariant 3),
//!    but the server still grants the lock to that connection. When the same
//!    instance asks again and finds its own previous server process holding
//!    the lock, it terminates it (`pg_terminate_backend`, allowed for the
//!    same role) — safe, since it stopped publishing when it gave up.
//!
//! Knows nothing of Kafka or the slot: the caller says what the lease is for
//! (the slot name) and what to do while it waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use crate::pg::catalog::{self, CatalogError};
use crate::pg::wire::ConnectParams;
use crate::task::AbortOnDrop;

/// The prefix of the WAL record whose LSN is a lease's term.
pub const LEASE_PREFIX: &str = "walrelay.lease";

/// How often the holder checks its lease connection.
pub const PING_EVERY: Duration = Duration::from_millis(500);
/// How long a ping may go unanswered before the lease counts as lost.
pub const PING_TIMEOUT: Duration = Duration::from_millis(1500);
/// The longest a holder may go on after PostgreSQL released its lock:
/// one ping interval plus one ping timeout.
pub const DETECT: Duration = Duration::from_millis(2000);
/// How long a new holder waits after PostgreSQL granted it the lock.
pub const GRACE: Duration = Duration::from_millis(2500);
/// About how long the server takes to drop the lease connection of a
/// holder that went silent (keepalives 4 s idle + 3 × 2 s; 10 s
/// `tcp_user_timeout` for unacknowledged data).
pub const SERVER_NOTICES_DEAD_PEER: Duration = Duration::from_secs(10);

/// Settings of the lease connection: no server-side timeout may end the
/// wait for the lock or the idle holding of it, and a dead peer is noticed
/// in about [`SERVER_NOTICES_DEAD_PEER`] (the TCP settings are ignored on
/// Unix sockets, where a dead peer is noticed at once).
const SESSION_SETUP: &str = "SET statement_timeout = 0; SET lock_timeout = 0; \
     SET idle_in_transaction_session_timeout = 0; SET idle_session_timeout = 0; \
     SET tcp_keepalives_idle = 4; SET tcp_keepalives_interval = 2; \
     SET tcp_keepalives_count = 3; SET tcp_user_timeout = 10000";

/// The advisory lock key of the connector that uses `slot`: FNV-1a (64 bit)
/// of `walrelay lease` and the slot name, stable across versions and
/// platforms (every instance must compute the same key).
pub fn key(slot: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in b"walrelay lease\0".iter().chain(slot.as_bytes()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash as i64
}

/// This process, as other instances and `walrelay status` see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub host: String,
    pub pid: u32,
}

impl Instance {
    /// The running process: the kernel's host name (the pod's name in
    /// Kubernetes) and the process id.
    pub fn this() -> Instance {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "unknown-host".to_owned());
        Instance {
            host,
            pid: std::process::id(),
        }
    }

    /// The lease connection's `application_name`: `walrelay-<connector>
    /// <host>:<pid>`, cut to PostgreSQL's 63 bytes (on a character
    /// boundary), printable ASCII only (the server would write `?` for the
    /// rest).
    pub fn application_name(&self, connector_application_name: &str) -> String {
        let full = format!("{connector_application_name} {}:{}", self.host, self.pid);
        let mut out: String = full
            .chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        out.truncate(63);
        out
    }
}

impl std::fmt::Display for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.pid)
    }
}

/// A session holding or waiting for the lease, as `pg_stat_activity` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Peer {
    /// The server process of its lease connection.
    pub backend_pid: i32,
    /// `walrelay-<connector> <host>:<pid>` (see [`Instance::application_name`]).
    pub application_name: String,
    /// The client's address (absent on Unix sockets, or when this role may
    /// not see it).
    pub client_addr: Option<String>,
    /// When its lease connection was opened, as the server prints it.
    pub connected_at: Option<String>,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (backend pid {}",
            self.application_name, self.backend_pid
        )?;
        if let Some(addr) = &self.client_addr {
            write!(f, ", from {addr}")?;
        }
        if let Some(at) = &self.connected_at {
            write!(f, ", connected {at}")?;
        }
        write!(f, ")")
    }
}

/// Who holds the lease and who waits for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peers {
    pub active: Option<Peer>,
    pub standbys: Vec<Peer>,
}

/// Reads who holds and who waits for the lease of `slot` (any connection to
/// the connector's database; needs no privilege).
pub async fn peers(client: &Client, slot: &str) -> Result<Peers, CatalogError> {
    let k = key(slot) as u64;
    let (high, low) = ((k >> 32) as i64, (k & 0xffff_ffff) as i64);
    let rows = client
        .query(
            "SELECT l.pid, l.granted, COALESCE(a.application_name, ''), \
                    host(a.client_addr), a.backend_start::text \
             FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.objsubid = 1 \
               AND l.classid::bigint = $1 AND l.objid::bigint = $2 \
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             ORDER BY l.granted DESC, a.backend_start",
            &[&high, &low],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading who holds the lease (pg_locks)",
            source,
        })?;
    let mut peers = Peers::default();
    for row in rows {
        let peer = Peer {
            backend_pid: row.get(0),
            application_name: row.get(2),
            client_addr: row.get(3),
            connected_at: row.get(4),
        };
        if row.get::<_, bool>(1) {
            peers.active = Some(peer);
        } else {
            peers.standbys.push(peer);
        }
    }
    Ok(peers)
}

/// A held lease (see the module doc). Dropping it releases the lock: its
/// connection is closed at once.
#[derive(Debug)]
pub struct Lease {
    lost: CancellationToken,
    /// The server process of the lease connection (`pg_backend_pid()`).
    backend_pid: i32,
    fence: Fence,
    /// The ping loop (owns the client) and the connection's task.
    _tasks: [AbortOnDrop; 3],
}

/// What a holder checks before it hands a record or an offset over
/// (invariant 5): cheap while the lease's pings are answered; after a
/// pause, a ping now.
#[derive(Debug, Clone)]
pub struct Fence {
    term: u64,
    epoch: Instant,
    /// When (ms after `epoch`) the newest answered ping was sent.
    confirmed_ms: Arc<AtomicU64>,
    /// Asks the pinger for a ping now.
    confirm: Arc<Notify>,
    lost: CancellationToken,
}

/// The lease is lost (or may have passed to another instance).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseGone;

impl Fence {
    /// The lease's term: the LSN of the WAL record written when it was
    /// granted, greater than every earlier grant's.
    pub fn term(&self) -> u64 {
        self.term
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether a ping sent within [`DETECT`] was answered.
    fn fresh(&self) -> bool {
        self.now_ms()
            .saturating_sub(self.confirmed_ms.load(Ordering::Acquire))
            < DETECT.as_millis() as u64
    }

    /// Returns at once while the lease is fresh; otherwise asks for a ping
    /// now and returns once one sent after this call is answered, or
    /// [`LeaseGone`] when the lease is lost.
    pub async fn check(&self) -> Result<(), LeaseGone> {
        if self.lost.is_cancelled() {
            return Err(LeaseGone);
        }
        if self.fresh() {
            return Ok(());
        }
        let asked = self.now_ms();
        self.confirm.notify_one();
        loop {
            tokio::select! {
                _ = self.lost.cancelled() => return Err(LeaseGone),
                _ = tokio::time::sleep(Duration::from_millis(10)) => {
                    if self.confirmed_ms.load(Ordering::Acquire) >= asked {
                        return Ok(());
                    }
                }
            }
        }
    }
}

impl Lease {
    /// Takes the lease of `slot`, waiting as long as another instance holds
    /// it; `standby` is called once if it has to wait, with the holder when
    /// PostgreSQL names one. Returns [`GRACE`] after the lock was granted.
    /// Cancel-safe: dropping the future closes the connection, which ends
    /// the wait in the server too (no lock is ever granted to a connection
    /// nobody reads).
    ///
    /// `stale`: the server process of this instance's own previous lease
    /// connection, when that lease was lost. A connection that went silent
    /// (a half-open TCP connection behind a proxy or NAT that keeps
    /// answering the server's keepalives) may still hold the lock in the
    /// server; this instance stopped publishing when it lost it, so the
    /// server process is terminated instead of waited for forever.
    pub async fn acquire(
        params: &ConnectParams,
        slot: &str,
        instance: &Instance,
        stale: Option<i32>,
        standby: impl FnOnce(Option<&Peer>),
    ) -> Result<Lease, CatalogError> {
        let mut params = params.clone();
        params.application_name = instance.application_name(&params.application_name);
        let (client, connection) = catalog::connect_owned(&params).await?;
        let connection_abort = AbortOnDrop(connection.abort_handle());
        let lost = CancellationToken::new();
        // The connection ending, for whatever reason, is the loss of the lease.
        let watcher = {
            let lost = lost.clone();
            tokio::spawn(async move {
                let _ = connection.await;
                lost.cancel();
            })
        };
        let watcher = AbortOnDrop(watcher.abort_handle());
        client
            .batch_execute(SESSION_SETUP)
            .await
            .map_err(|source| CatalogError::Query {
                context: "setting up the lease connection",
                source,
            })?;
        let k = key(slot);
        let backend_pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .map_err(|source| CatalogError::Query {
                context: "setting up the lease connection",
                source,
            })?
            .get(0);
        let try_lock = || async {
            client
                .query_one("SELECT pg_try_advisory_lock($1)", &[&k])
                .await
                .map_err(|source| CatalogError::Query {
                    context: "asking for the lease (pg_try_advisory_lock)",
                    source,
                })
                .map(|row| row.get::<_, bool>(0))
        };
        let mut free = try_lock().await?;
        // Ours: the same server process, under this instance's name (not a
        // process id the server has since given to another instance).
        let ours = |p: &Peer| {
            Some(p.backend_pid) == stale && p.application_name == params.application_name
        };
        if !free
            && let Some(stale) = stale
            && peers(&client, slot)
                .await?
                .active
                .as_ref()
                .is_some_and(ours)
        {
            client
                .execute("SELECT pg_terminate_backend($1, 5000)", &[&stale])
                .await
                .map_err(|source| CatalogError::Query {
                    context: "terminating this instance's previous lease connection",
                    source,
                })?;
            tracing::warn!(
                backend_pid = stale,
                "terminated this instance's previous lease connection, which had stopped \
                 answering but still held the lease in PostgreSQL"
            );
            free = try_lock().await?;
        }
        if !free {
            let holder = peers(&client, slot).await.ok().and_then(|p| p.active);
            standby(holder.as_ref());
            client
                .execute("SELECT pg_advisory_lock($1)", &[&k])
                .await
                .map_err(|source| CatalogError::Query {
                    context: "waiting for the lease (pg_advisory_lock)",
                    source,
                })?;
        }
        let term = lease_term(&client, &params.application_name).await?;
        let fence = Fence {
            term,
            epoch: Instant::now(),
            confirmed_ms: Arc::new(AtomicU64::new(0)),
            confirm: Arc::new(Notify::new()),
            lost: lost.clone(),
        };
        let pinger = {
            let (lost, fence) = (lost.clone(), fence.clone());
            tokio::spawn(async move {
                loop {
                    // The send time counts: an answer read after a pause
                    // proves nothing about the pause.
                    let sent = fence.now_ms();
                    let ping =
                        tokio::time::timeout(PING_TIMEOUT, client.simple_query("SELECT 1")).await;
                    if !matches!(ping, Ok(Ok(_))) {
                        lost.cancel();
                        break;
                    }
                    fence.confirmed_ms.fetch_max(sent, Ordering::AcqRel);
                    tokio::select! {
                        _ = tokio::time::sleep(PING_EVERY) => {}
                        _ = fence.confirm.notified() => {}
                        _ = lost.cancelled() => break,
                    }
                }
            })
        };
        let lease = Lease {
            lost,
            backend_pid,
            fence,
            _tasks: [
                AbortOnDrop(pinger.abort_handle()),
                watcher,
                connection_abort,
            ],
        };
        tokio::time::sleep(GRACE).await;
        if lease.is_lost() {
            // The server went away during the grace (a restart): ask again.
            return Err(CatalogError::Ended("the lease, right after it was granted"));
        }
        Ok(lease)
    }

    /// Cancelled the moment the lease is (or may be) lost.
    pub fn lost(&self) -> &CancellationToken {
        &self.lost
    }

    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// The server process of the lease connection: what to pass as `stale`
    /// to the next [`Lease::acquire`] once this lease is lost.
    pub fn backend_pid(&self) -> i32 {
        self.backend_pid
    }

    /// The check before handing anything over, and the term.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }
}

/// The term of a lease just granted (invariant 5): the LSN of a WAL record
/// written now. Without `EXECUTE` on `pg_logical_emit_message`, the WAL's
/// current end (greater than any earlier grant's unless no WAL at all was
/// written between the two).
async fn lease_term(client: &Client, holder: &str) -> Result<u64, CatalogError> {
    let content = serde_json::json!({"holder": holder}).to_string();
    let row = match client
        .query_one(
            "SELECT pg_logical_emit_message(false, $1, $2)::text",
            &[&LEASE_PREFIX, &content],
        )
        .await
    {
        Ok(row) => row,
        Err(e) => {
            tracing::debug!(error = %e, "lease term from the WAL's end instead of a lease record");
            client
                .query_one("SELECT pg_current_wal_lsn()::text", &[])
                .await
                .map_err(|source| CatalogError::Query {
                    context: "reading the lease's term (pg_current_wal_lsn)",
                    source,
                })?
        }
    };
    let text: String = row.get(0);
    Ok(text.parse::<crate::Lsn>().map_or(0, |l| l.0))
}

#[cfg(test)]
mod tests;
