//! The acknowledgement frontier: which WAL position may be confirmed to PostgreSQL.
//!
//! PostgreSQL (pgoutput protocol v1) sends only committed transactions, each as
//! `Begin`, its changes, `Commit(end_lsn)`. The pipeline hands every record to the
//! Kafka producer as soon as its change arrives — before the transaction's
//! `Commit`, so a transaction of any size streams through without being buffered —
//! and Kafka's delivery reports come back out of order, relayed from another
//! thread over a channel. A [`Checkpoint`] is the bookkeeping between the two. It is
//! plain single-threaded state owned by one task: the reader calls
//! [`begin`](Checkpoint::begin), [`record_sent`](Checkpoint::record_sent) and
//! [`commit`](Checkpoint::commit) in stream order, the same task calls
//! [`ack`](Checkpoint::ack) for every delivery report it receives, and
//! [`confirmed`](Checkpoint::confirmed) is the position that may be written to the
//! offset store and then reported to PostgreSQL as the slot's flush LSN.
//!
//! # Invariants
//!
//! 1. **Confirm only what Kafka holds.** `confirmed()` is the `end_lsn` of the
//!    newest transaction T such that T and every transaction begun before it are
//!    committed (closed) and have no record awaiting an ack. Acks may arrive in any
//!    order; the frontier moves over the contiguous complete prefix only. A
//!    committed transaction with zero records (nothing routed) is complete at once,
//!    but still only in order: it does not move the frontier past an older
//!    transaction that awaits acks.
//! 2. **Monotonic.** `confirmed()` starts at the resume position given to
//!    [`Checkpoint::new`] and never decreases: not when a transaction whose
//!    `end_lsn` is below it completes (after a restart PostgreSQL re-sends
//!    transactions from before the slot's confirmed point), and not on a keepalive
//!    with an older `wal_end`.
//! 3. **Idle advance is safe.** [`keepalive(wal_end)`](Checkpoint::keepalive) moves
//!    the frontier to `wal_end` only when no transaction is open, no record is in
//!    flight and no committed transaction awaits acks. Otherwise it is ignored and
//!    not remembered: when the pending transactions later drain, the frontier stops
//!    at the newest of their `end_lsn`s, never at an earlier keepalive's `wal_end`.
//! 4. **Misuse is an error, never a wrong LSN.** Whatever the server stream or a
//!    bug in the caller can get wrong — `Begin` while a transaction is open, a
//!    record or `Commit` for a transaction that is not the open one, an ack for a
//!    transaction never begun, more acks than records sent, more bytes acked than
//!    sent — returns a [`CheckpointError`] and leaves the state exactly as it was.
//!    The caller stops the connector; nothing is confirmed on a guess.
//! 5. **O(1) amortised per call.** Transactions not yet confirmed live in a
//!    `VecDeque` in the order they began. A [`TxnId`] finds its entry by its offset
//!    from the front; complete transactions are popped from the front as they
//!    complete, so no call scans the queue.
//! 6. **Bounded memory.** [`in_flight_records`](Checkpoint::in_flight_records) and
//!    [`in_flight_bytes`](Checkpoint::in_flight_bytes) count records sent and not
//!    yet acked; [`is_full`](Checkpoint::is_full) says when either is at or over
//!    its [`Limits`], and the caller then stops reading the socket until acks
//!    drain (TCP backpressure reaches the walsender). A record is never refused: one
//!    larger than the byte limit is accepted and the checkpoint reports full until
//!    it is acked. The queue itself does not grow with transactions that are
//!    already complete when they close behind an incomplete one (empty ones above
//!    all: PostgreSQL before 15 sends `Begin`/`Commit` for every transaction, even
//!    those that touch no published table): such a transaction is folded into its
//!    predecessor, whose completion then confirms the folded `end_lsn` too. So while
//!    Kafka is down the queue holds at most one entry per in-flight record, plus
//!    the open transaction.
//! 7. **The commit time travels with its position.** A transaction closed with
//!    [`commit_at`](Checkpoint::commit_at) carries its commit time;
//!    [`confirmed_commit_ms`](Checkpoint::confirmed_commit_ms) is the newest commit
//!    time among the transactions at or below `confirmed()` (folds keep the newer),
//!    [`committed_commit_ms`](Checkpoint::committed_commit_ms) the same for
//!    `committed()`. A keepalive moves the positions but not the times: a time is
//!    never newer than the commit of a transaction at or below its position, so
//!    every transaction after that position committed at or after it (up to the
//!    server clock's own steps). The lost-slot procedure selects rows to
//!    re-publish by it.
//!
//! # What the caller must do
//!
//! - Call [`record_sent`](Checkpoint::record_sent) before handing the record to the
//!   producer (at least before the task next reads the ack channel), so an ack is
//!   never processed before its send.
//! - Pass to [`ack`](Checkpoint::ack) the same `TxnId` and byte count as to
//!   `record_sent` (carry them in the delivery opaque).
//! - A `TxnId` from another `Checkpoint` is not detected, so acks must only
//!   ever reach the `Checkpoint` whose records they acknowledge. The relay keeps
//!   one `Checkpoint` per replication session, with its own producer and ack
//!   channel, all dropped together. A caller that instead keeps one `Checkpoint`
//!   across a reconnect must call [`abandon_open`](Checkpoint::abandon_open) when
//!   the connection drops mid-transaction: PostgreSQL re-sends the whole
//!   transaction, the abandoned one's records already sent keep counting as in
//!   flight, and newer transactions are not confirmed before those are acked.
//! - Call [`keepalive`](Checkpoint::keepalive) in stream order, with the `wal_end`
//!   of a keepalive read after every message before it was processed.
//! - Store `confirmed()` in the offset store before reporting it to PostgreSQL.
//! - Reject zero [`Limits`] in configuration: with a zero limit `is_full()` is
//!   always true.

use std::collections::VecDeque;
use std::fmt;

use crate::Lsn;

/// Identifies one transaction within one [`Checkpoint`].
///
/// Opaque and `Copy`; assigned by [`Checkpoint::begin`] in increasing order. The
/// `slot` locates the queue entry (offset from the front); `seq` is unique for the
/// life of the checkpoint, so a slot reused after a fold is never mistaken for the
/// transaction that held it before.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TxnId {
    slot: u64,
    seq: u64,
}

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "txn#{}", self.seq)
    }
}

impl fmt::Debug for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TxnId({})", self.seq)
    }
}

/// Caps on records handed to the producer and not yet acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// [`Checkpoint::is_full`] when this many records are in flight.
    pub max_in_flight_records: u64,
    /// [`Checkpoint::is_full`] when this many bytes are in flight.
    pub max_in_flight_bytes: u64,
}

/// Misuse of the checkpoint by the replication stream or by the caller.
///
/// Every variant means the connector's view of the stream is broken; the caller
/// stops rather than confirm a position that might not be in Kafka.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// `Begin` arrived while another transaction was open.
    #[error(
        "Begin received while {open} is still open: the replication stream lost a Commit; \
         restart the connector to resume from the last confirmed position"
    )]
    AlreadyOpen {
        /// The transaction still open.
        open: TxnId,
    },
    /// A record or `Commit` named a transaction that is not the open one.
    #[error(
        "{operation} for {txn}, which is not the open transaction (open: {open:?}): \
         a record or Commit arrived outside Begin..Commit"
    )]
    NotOpen {
        /// `"record_sent"` or `"commit"`.
        operation: &'static str,
        /// The transaction named.
        txn: TxnId,
        /// The transaction actually open, if any.
        open: Option<TxnId>,
    },
    /// An ack named a transaction this checkpoint never began.
    #[error(
        "ack for {txn}, which this checkpoint never began: acks are being routed to the wrong checkpoint"
    )]
    UnknownTxn {
        /// The transaction named.
        txn: TxnId,
    },
    /// An ack arrived for a transaction with no record awaiting acknowledgement.
    #[error(
        "ack for {txn}, which has no record awaiting acknowledgement: more acks than records sent"
    )]
    TooManyAcks {
        /// The transaction named.
        txn: TxnId,
    },
    /// An ack's byte count does not fit what was sent for the transaction.
    #[error(
        "ack of {bytes} bytes for {txn}, which has {outstanding_bytes} bytes in \
         {outstanding_records} records awaiting acknowledgement: acks must carry the byte \
         count given to record_sent"
    )]
    AckBytesMismatch {
        /// The transaction named.
        txn: TxnId,
        /// Bytes in the ack.
        bytes: u64,
        /// Records of `txn` awaiting acknowledgement.
        outstanding_records: u64,
        /// Bytes of `txn` awaiting acknowledgement.
        outstanding_bytes: u64,
    },
    /// An in-flight counter would overflow.
    #[error("in-flight {counter} counter overflow")]
    CounterOverflow {
        /// `"record"` or `"byte"`.
        counter: &'static str,
    },
}

/// Where a transaction is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Begun; more records may follow.
    Open,
    /// No more records will be sent. `end_lsn` is `None` for a transaction
    /// abandoned on disconnect: its completion confirms nothing by itself.
    Closed { end_lsn: Option<Lsn> },
}

/// One not-yet-confirmed transaction (or several, after folds).
#[derive(Debug, Clone)]
struct Entry {
    seq: u64,
    phase: Phase,
    records: u64,
    bytes: u64,
    /// Commit time (Unix ms) of the newest transaction of the entry that has one.
    commit_ms: Option<i64>,
}

impl Entry {
    fn is_complete(&self) -> bool {
        matches!(self.phase, Phase::Closed { .. }) && self.records == 0
    }
}

/// The acknowledgement frontier; see the [module documentation](self).
pub struct Checkpoint {
    confirmed: Lsn,
    /// The end of the newest committed transaction (or a keepalive's
    /// `wal_end` with nothing pending): everything up to it was sent.
    committed: Lsn,
    /// Newest commit time at or below `confirmed` (invariant 7).
    confirmed_commit_ms: Option<i64>,
    /// Newest commit time at or below `committed`.
    committed_commit_ms: Option<i64>,
    limits: Limits,
    /// Transactions not yet confirmed, oldest first; the open one, if any, last.
    queue: VecDeque<Entry>,
    /// Slot of `queue[0]`; `queue[i]` has slot `front_slot + i`.
    front_slot: u64,
    /// `seq` for the next `begin`.
    next_seq: u64,
    /// Sum of `records` over `queue`.
    in_flight_records: u64,
    /// Sum of `bytes` over `queue`.
    in_flight_bytes: u64,
}

impl fmt::Debug for Checkpoint {
    /// A summary: the queue may hold many entries.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checkpoint")
            .field("confirmed", &self.confirmed)
            .field("pending_txns", &self.queue.len())
            .field("open", &self.open_txn())
            .field("in_flight_records", &self.in_flight_records)
            .field("in_flight_bytes", &self.in_flight_bytes)
            .field("limits", &self.limits)
            .finish()
    }
}

impl Checkpoint {
    /// A checkpoint resuming from `start`, a position already confirmed.
    pub fn new(start: Lsn, limits: Limits) -> Self {
        Checkpoint {
            confirmed: start,
            committed: start,
            confirmed_commit_ms: None,
            committed_commit_ms: None,
            limits,
            queue: VecDeque::new(),
            front_slot: 0,
            next_seq: 0,
            in_flight_records: 0,
            in_flight_bytes: 0,
        }
    }

    /// A transaction opened (`Begin`). Fails if one is already open.
    pub fn begin(&mut self) -> Result<TxnId, CheckpointError> {
        if let Some(open) = self.open_txn() {
            return Err(CheckpointError::AlreadyOpen { open });
        }
        let txn = TxnId {
            slot: self.front_slot + self.queue.len() as u64,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        self.queue.push_back(Entry {
            seq: txn.seq,
            phase: Phase::Open,
            records: 0,
            bytes: 0,
            commit_ms: None,
        });
        Ok(txn)
    }

    /// One record of the open transaction `txn`, of `bytes` bytes, handed to the
    /// producer.
    pub fn record_sent(&mut self, txn: TxnId, bytes: usize) -> Result<(), CheckpointError> {
        let bytes = bytes_u64(bytes)?;
        self.require_open(txn, "record_sent")?;
        let in_flight_records = self
            .in_flight_records
            .checked_add(1)
            .ok_or(CheckpointError::CounterOverflow { counter: "record" })?;
        let in_flight_bytes = self
            .in_flight_bytes
            .checked_add(bytes)
            .ok_or(CheckpointError::CounterOverflow { counter: "byte" })?;
        // Per-transaction counts are bounded by the totals, so they cannot overflow.
        if let Some(entry) = self.queue.back_mut() {
            entry.records += 1;
            entry.bytes += bytes;
        }
        self.in_flight_records = in_flight_records;
        self.in_flight_bytes = in_flight_bytes;
        Ok(())
    }

    /// `Commit` of the open transaction `txn`: no more records; it ends at
    /// `end_lsn`.
    pub fn commit(&mut self, txn: TxnId, end_lsn: Lsn) -> Result<(), CheckpointError> {
        self.commit_at(txn, end_lsn, None)
    }

    /// [`commit`](Checkpoint::commit) of a transaction that committed at
    /// `commit_ms` (Unix ms; `None`: not a PostgreSQL transaction, e.g. a
    /// heartbeat): the time goes with `end_lsn` (invariant 7).
    pub fn commit_at(
        &mut self,
        txn: TxnId,
        end_lsn: Lsn,
        commit_ms: Option<i64>,
    ) -> Result<(), CheckpointError> {
        self.require_open(txn, "commit")?;
        self.committed = self.committed.max(end_lsn);
        self.committed_commit_ms = self.committed_commit_ms.max(commit_ms);
        if let Some(entry) = self.queue.back_mut() {
            entry.phase = Phase::Closed {
                end_lsn: Some(end_lsn),
            };
            entry.commit_ms = entry.commit_ms.max(commit_ms);
        }
        self.settle();
        Ok(())
    }

    /// One record of `txn`, of `bytes` bytes, acknowledged by Kafka.
    pub fn ack(&mut self, txn: TxnId, bytes: usize) -> Result<(), CheckpointError> {
        let bytes = bytes_u64(bytes)?;
        if txn.seq >= self.next_seq {
            return Err(CheckpointError::UnknownTxn { txn });
        }
        // Not in the queue: popped or folded, so already complete.
        let index = self
            .index_of(txn)
            .ok_or(CheckpointError::TooManyAcks { txn })?;
        let entry = &self.queue[index];
        if entry.records == 0 {
            return Err(CheckpointError::TooManyAcks { txn });
        }
        let last = entry.records == 1;
        if bytes > entry.bytes || (last && bytes != entry.bytes) {
            return Err(CheckpointError::AckBytesMismatch {
                txn,
                bytes,
                outstanding_records: entry.records,
                outstanding_bytes: entry.bytes,
            });
        }
        // The totals are sums over the queue, so these cannot underflow.
        self.in_flight_records -= 1;
        self.in_flight_bytes -= bytes;
        let entry = &mut self.queue[index];
        entry.records -= 1;
        entry.bytes -= bytes;
        if last {
            self.settle();
        }
        Ok(())
    }

    /// A keepalive (or XLogData header) says the server's WAL ends at `wal_end`.
    /// Moves the frontier there if nothing is open, in flight or awaiting acks;
    /// otherwise does nothing and remembers nothing.
    pub fn keepalive(&mut self, wal_end: Lsn) {
        if self.queue.is_empty() {
            self.confirmed = self.confirmed.max(wal_end);
            self.committed = self.committed.max(wal_end);
        }
    }

    /// The connection dropped while `Begin` had arrived and `Commit` had not: closes
    /// the open transaction without an `end_lsn`, so its completion confirms
    /// nothing by itself. Its records already sent still count as in flight, and
    /// newer transactions wait for them. Returns the abandoned transaction, if any.
    pub fn abandon_open(&mut self) -> Option<TxnId> {
        let open = self.open_txn()?;
        if let Some(entry) = self.queue.back_mut() {
            entry.phase = Phase::Closed { end_lsn: None };
        }
        self.settle();
        Some(open)
    }

    /// The position that may be confirmed to PostgreSQL (after storing it).
    pub fn confirmed(&self) -> Lsn {
        self.confirmed
    }

    /// The end of the newest committed transaction, or the newest keepalive
    /// position reached with nothing pending: every record of everything up
    /// to it was sent, though not necessarily acknowledged. What a Kafka
    /// transaction holding all of them may store (`exactly_once`), when no
    /// transaction is open.
    pub fn committed(&self) -> Lsn {
        self.committed.max(self.confirmed)
    }

    /// Commit time (Unix ms) of the newest transaction at or below
    /// [`confirmed`](Checkpoint::confirmed) that was closed with one, since
    /// this checkpoint began (invariant 7).
    pub fn confirmed_commit_ms(&self) -> Option<i64> {
        self.confirmed_commit_ms
    }

    /// The same for [`committed`](Checkpoint::committed).
    pub fn committed_commit_ms(&self) -> Option<i64> {
        self.committed_commit_ms.max(self.confirmed_commit_ms)
    }

    /// Records handed to the producer and not yet acknowledged.
    pub fn in_flight_records(&self) -> u64 {
        self.in_flight_records
    }

    /// Bytes of the records in flight.
    pub fn in_flight_bytes(&self) -> u64 {
        self.in_flight_bytes
    }

    /// True when in-flight records or bytes are at or over their [`Limits`]: the
    /// caller stops reading the replication socket until acks drain.
    pub fn is_full(&self) -> bool {
        self.in_flight_records >= self.limits.max_in_flight_records
            || self.in_flight_bytes >= self.limits.max_in_flight_bytes
    }

    /// Transactions begun and not yet confirmed, counting the open one. A
    /// transaction already complete when it closed behind an incomplete one is
    /// folded into its predecessor and not counted separately.
    pub fn pending_txns(&self) -> usize {
        self.queue.len()
    }

    /// The open transaction, if `Begin` arrived and `Commit` has not.
    pub fn open_txn(&self) -> Option<TxnId> {
        let entry = self.queue.back()?;
        (entry.phase == Phase::Open).then(|| TxnId {
            slot: self.front_slot + self.queue.len() as u64 - 1,
            seq: entry.seq,
        })
    }

    /// The limits this checkpoint was created with.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn require_open(&self, txn: TxnId, operation: &'static str) -> Result<(), CheckpointError> {
        let open = self.open_txn();
        if open == Some(txn) {
            Ok(())
        } else {
            Err(CheckpointError::NotOpen {
                operation,
                txn,
                open,
            })
        }
    }

    /// Queue index of `txn`, if it is still in the queue.
    fn index_of(&self, txn: TxnId) -> Option<usize> {
        let offset = txn.slot.checked_sub(self.front_slot)?;
        let index = usize::try_from(offset).ok()?;
        let entry = self.queue.get(index)?;
        (entry.seq == txn.seq).then_some(index)
    }

    /// Restores the queue's shape after a transaction closed or completed: folds
    /// complete entries at the back into their predecessors, then pops complete
    /// entries from the front, advancing the frontier. Each step removes an entry,
    /// so the cost is amortised O(1) per transaction.
    fn settle(&mut self) {
        while self.queue.len() >= 2 && self.queue.back().is_some_and(Entry::is_complete) {
            let Some(Entry {
                phase: Phase::Closed { end_lsn: folded },
                commit_ms: folded_ms,
                ..
            }) = self.queue.pop_back()
            else {
                break;
            };
            // The predecessor is closed: only the newest entry can be open.
            if let Some(Entry {
                phase: Phase::Closed { end_lsn },
                commit_ms,
                ..
            }) = self.queue.back_mut()
            {
                // `None < Some(_)`, so an abandoned predecessor takes the folded LSN.
                *end_lsn = (*end_lsn).max(folded);
                *commit_ms = (*commit_ms).max(folded_ms);
            }
        }
        while self.queue.front().is_some_and(Entry::is_complete) {
            if let Some(Entry {
                phase: Phase::Closed {
                    end_lsn: Some(end_lsn),
                },
                commit_ms,
                ..
            }) = self.queue.pop_front()
            {
                self.confirmed = self.confirmed.max(end_lsn);
                self.confirmed_commit_ms = self.confirmed_commit_ms.max(commit_ms);
            }
            self.front_slot += 1;
        }
    }
}

fn bytes_u64(bytes: usize) -> Result<u64, CheckpointError> {
    u64::try_from(bytes).map_err(|_| CheckpointError::CounterOverflow { counter: "byte" })
}

#[cfg(test)]
mod tests;
