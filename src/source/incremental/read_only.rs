//! Read-only watermarks: a chunk placed in the stream by its own snapshot
//! and horizon instead of watermarks written around its read (the parent
//! module's doc says how, and what holds).

use std::collections::HashSet;

use super::task::{ChunkRead, Request};
use super::{Incremental, Key, Phase, SourceEvent};
use crate::Lsn;
use crate::pg::snapshot::{Chunk, SnapshotError};

/// A chunk read under read-only watermarks, waiting for its place in the
/// stream.
#[derive(Debug)]
pub(super) struct Arrived {
    pub(super) outcome: Result<Chunk, String>,
    /// The chunk's snapshot: the transactions it did not see.
    pub(super) xip: HashSet<u32>,
    pub(super) xmax: u32,
    /// The first position the chunk may be yielded at ([`horizon`]).
    pub(super) horizon: Lsn,
    /// Keys changed by transactions the snapshot did not see, since the
    /// request.
    pub(super) stale: HashSet<Key>,
    /// A transaction the snapshot did not see truncated the table.
    pub(super) truncated: bool,
    /// When the rows arrived, when the source should next call
    /// [`Incremental::on_wait`], whether the primary was nudged and whether
    /// the wait was logged.
    pub(super) at: tokio::time::Instant,
    pub(super) wake: tokio::time::Instant,
    pub(super) nudged: bool,
    pub(super) warned: bool,
}

impl Arrived {
    /// Whether the chunk's snapshot did not see transaction `xid`.
    pub(super) fn unseen(&self, xid: u32) -> bool {
        unseen(&self.xip, self.xmax, xid)
    }
}

/// Whether a snapshot with running transactions `xip` and `xmax` did not
/// see transaction `xid` (32-bit xids compared as PostgreSQL does, modulo
/// 2^32).
pub(super) fn unseen(xip: &HashSet<u32>, xmax: u32, xid: u32) -> bool {
    xip.contains(&xid) || (xid.wrapping_sub(xmax) as i32) >= 0
}

/// The first position a chunk read with `horizon` may be yielded at. A
/// position just past a page header holds nothing the page start does not:
/// the walsender's positions end records, and may stop at the page start.
pub(super) fn horizon(lsn: Lsn) -> Lsn {
    const PAGE: u64 = 8192;
    // Short (24) and long (40, a segment's first page) page headers.
    match lsn.0 % PAGE {
        24 | 40 => Lsn(lsn.0 - lsn.0 % PAGE),
        _ => lsn,
    }
}

/// Why [`Incremental::wake`] returned.
#[derive(Debug)]
pub(in crate::source) enum Wake {
    /// The chunk task failed: the session ends with this.
    Failed(SnapshotError),
    /// Something changed (rows arrived, the task ended cleanly): look again.
    Again,
    /// A waiting chunk's instant came: call [`Incremental::on_wait`].
    Timer,
}

/// What the source should do for a read-only chunk waiting for its place
/// ([`Incremental::waiting`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::source) enum Waiting {
    /// Nothing: no chunk waits.
    No,
    /// Wake at this instant and call [`Incremental::on_wait`].
    Until(tokio::time::Instant),
}

impl Incremental {
    /// Read-only watermarks: takes the chunk's rows if they arrived (see
    /// [`Incremental::arrive`]).
    pub(super) fn take_rows(&mut self) -> Result<(), SnapshotError> {
        if !matches!(self.phase, Phase::Reading { read: None, .. }) {
            return Ok(());
        }
        match self.chunks.try_recv() {
            Ok(arrived) => self.arrive(arrived),
            Err(_) => Ok(()),
        }
    }

    /// Read-only watermarks: the chunk's rows arrived; the changes seen
    /// since the request are sorted by the rows' snapshot.
    fn arrive(&mut self, arrived: ChunkRead) -> Result<(), SnapshotError> {
        let Phase::Reading {
            chunk,
            seen,
            truncates,
            read: read @ None,
            ..
        } = &mut self.phase
        else {
            return Ok(());
        };
        if arrived.chunk != *chunk {
            return Err(SnapshotError::Malformed {
                table: String::from("(incremental snapshot)"),
                row: 0,
                reason: format!(
                    "chunk {} arrived while chunk {chunk} was read",
                    arrived.chunk
                ),
            });
        }
        let (xip, xmax, at) = match &arrived.outcome {
            Ok(c) => (
                c.invisible.iter().copied().collect(),
                c.xmax,
                horizon(c.horizon),
            ),
            // Given up: nothing to place, but past every position yielded.
            Err(_) => (HashSet::new(), 0, Lsn::ZERO),
        };
        let mut rows = Arrived {
            outcome: arrived.outcome,
            xip,
            xmax,
            horizon: at,
            stale: HashSet::new(),
            truncated: false,
            at: tokio::time::Instant::now(),
            wake: tokio::time::Instant::now() + std::time::Duration::from_millis(100),
            nudged: false,
            warned: false,
        };
        if rows.outcome.is_ok() {
            rows.truncated = truncates.iter().any(|&xid| rows.unseen(xid));
            rows.stale = std::mem::take(seen)
                .into_iter()
                .filter(|(xid, _)| rows.unseen(*xid))
                .map(|(_, k)| k)
                .collect();
        }
        *read = Some(Box::new(rows));
        Ok(())
    }

    /// Read-only watermarks: the position to yield the waiting chunk at, in
    /// front of `event`, if this is its place (module doc).
    pub(super) fn place(&self, event: &SourceEvent) -> Option<Lsn> {
        let Phase::Reading {
            read: Some(rows), ..
        } = &self.phase
        else {
            return None;
        };
        if self.xid.is_some() {
            return None;
        }
        let at = match event {
            SourceEvent::Begin { commit_lsn, .. } => *commit_lsn,
            SourceEvent::Idle { wal_end, .. } => *wal_end,
            SourceEvent::Message { lsn, .. } => *lsn,
            _ => return None,
        };
        (at > self.yielded && at >= rows.horizon).then_some(at)
    }

    /// Read-only watermarks: the waiting chunk's event at `lsn`.
    pub(super) fn yield_read_only(&mut self, lsn: Lsn) -> SourceEvent {
        let Phase::Reading {
            table,
            read: Some(rows),
            ..
        } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            // `place` found it waiting.
            return self.next_after(usize::MAX, None, Vec::new(), 0, lsn);
        };
        self.yielded = lsn;
        let rows = *rows;
        match rows.outcome {
            Ok(chunk) => {
                self.finish_chunk(table, chunk, Vec::new(), rows.stale, rows.truncated, lsn)
            }
            Err(why) => self.give_up(table, &why, lsn),
        }
    }

    /// Whether a read-only chunk waits for its place, and until when the
    /// source may wait before calling [`Incremental::on_wait`].
    pub(in crate::source) fn waiting(&mut self) -> Result<Waiting, SnapshotError> {
        self.take_rows()?;
        Ok(match &self.phase {
            Phase::Reading {
                read: Some(rows), ..
            } => Waiting::Until(rows.wake),
            _ => Waiting::No,
        })
    }

    /// What the source waits for besides the stream (cancel-safe): the
    /// chunk task failing, a read-only chunk's rows arriving (taken in), or
    /// the instant a waiting chunk gave ([`Incremental::waiting`]).
    pub(in crate::source) async fn wake(&mut self, until: Waiting) -> Wake {
        let reading = matches!(self.phase, Phase::Reading { read: None, .. });
        let failed = &mut self.failed;
        let chunks = &mut self.chunks;
        let woke = tokio::select! {
            e = async {
                match failed.as_mut() {
                    Some(f) => f.await,
                    None => std::future::pending().await,
                }
            } => match e {
                Ok(e) => Wake::Failed(e),
                // The task ended without an error: nothing to watch.
                Err(_) => {
                    *failed = None;
                    Wake::Again
                }
            },
            read = chunks.recv(), if reading => match read {
                Some(read) => return match self.arrive(read) {
                    Ok(()) => Wake::Again,
                    Err(e) => Wake::Failed(e),
                },
                None => std::future::pending().await,
            },
            () = async {
                match until {
                    Waiting::Until(at) => tokio::time::sleep_until(at).await,
                    Waiting::No => std::future::pending().await,
                }
            } => Wake::Timer,
        };
        woke
    }

    /// A read-only chunk waited until the instant [`Incremental::waiting`]
    /// gave: nudges the primary once (module doc), and says what it waits
    /// for after 30 s. The caller then asks the server for its position.
    pub(in crate::source) fn on_wait(&mut self) {
        let Phase::Reading {
            table,
            read: Some(rows),
            ..
        } = &mut self.phase
        else {
            return;
        };
        let now = tokio::time::Instant::now();
        rows.wake = if rows.nudged {
            now + std::time::Duration::from_secs(1)
        } else {
            // The server is asked again once the nudge has likely
            // committed: its answer to this first ask predates it (and an
            // idle walsender reports a new position only when asked).
            rows.nudged = true;
            let _ = self.requests.try_send(Request::Nudge);
            now + std::time::Duration::from_millis(50)
        };
        if !rows.warned
            && now.duration_since(rows.at) >= std::time::Duration::from_secs(30)
            && let Some(t) = self.plan.tables.get(*table)
        {
            rows.warned = true;
            tracing::warn!(
                table = %t.display(), horizon = %rows.horizon, stream = %self.yielded,
                "incremental snapshot of {}: a chunk read 30 s ago waits for the stream to pass \
                 {} (read-only watermarks place it there); the stream is at {}: is the slot's \
                 server writing WAL, and replaying it if it is a standby?",
                t.display(),
                rows.horizon,
                self.yielded
            );
        }
    }
}
