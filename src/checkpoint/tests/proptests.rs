//! Property tests for the acknowledgement frontier.
//!
//! `stream_with_acks_in_random_order` drives the checkpoint the way the
//! pipeline does — one transaction at a time, acks in any order after their
//! sends, keepalives in between — and checks the invariants after every step.
//! `matches_naive_reference` throws arbitrary calls, misuse included, at the
//! checkpoint and at an O(n) reference that recomputes everything from scratch,
//! and compares every observable after every call.

use super::super::*;
use proptest::prelude::*;

fn check<T>(result: Result<T, CheckpointError>) -> Result<T, TestCaseError> {
    result.map_err(|e| TestCaseError::fail(e.to_string()))
}

// ---------------------------------------------------------------------------
// A realistic stream.

#[derive(Debug, Clone)]
struct StreamCase {
    start: u64,
    /// `(end_lsn, record sizes)`, end_lsns strictly increasing; the first ones
    /// may lie below `start` (re-sent after a restart).
    txns: Vec<(u64, Vec<usize>)>,
    /// `(selector, pick)`: selector 0..4 advances the stream, 4..9 acks a
    /// random outstanding record, 9 sends a keepalive.
    steps: Vec<(u8, usize)>,
}

fn stream_case() -> impl Strategy<Value = StreamCase> {
    (
        0u64..2_000,
        0u64..3_000,
        prop::collection::vec(
            (1u64..200, prop::collection::vec(0usize..500, 0..20)),
            0..12,
        ),
        prop::collection::vec((0u8..10, any::<usize>()), 0..400),
    )
        .prop_map(|(start, first, txns, steps)| {
            let mut end = first;
            let txns = txns
                .into_iter()
                .map(|(gap, sizes)| {
                    end += gap;
                    (end, sizes)
                })
                .collect();
            StreamCase { start, txns, steps }
        })
}

const STREAM_LIMITS: Limits = Limits {
    max_in_flight_records: 8,
    max_in_flight_bytes: 1_500,
};

struct Stream<'a> {
    case: &'a StreamCase,
    cp: Checkpoint,
    /// Ids of the transactions begun so far, by index into `case.txns`.
    ids: Vec<TxnId>,
    /// Records not yet acked, per begun transaction.
    unacked: Vec<u64>,
    /// Whether the last begun transaction is still open.
    open: bool,
    /// Records of the open transaction sent so far.
    sent: usize,
    /// `(txn index, bytes)` of every record sent and not acked.
    outstanding: Vec<(usize, usize)>,
    /// Highest keepalive `wal_end` sent while the checkpoint was idle.
    idle_floor: u64,
    last_confirmed: Lsn,
}

impl<'a> Stream<'a> {
    fn new(case: &'a StreamCase) -> Self {
        Stream {
            case,
            cp: Checkpoint::new(Lsn(case.start), STREAM_LIMITS),
            ids: Vec::new(),
            unacked: Vec::new(),
            open: false,
            sent: 0,
            outstanding: Vec::new(),
            idle_floor: 0,
            last_confirmed: Lsn(case.start),
        }
    }

    fn committed(&self) -> usize {
        self.ids.len() - usize::from(self.open)
    }

    fn idle(&self) -> bool {
        !self.open && self.outstanding.is_empty()
    }

    /// The next message of the replication stream; false when it has ended.
    fn advance(&mut self) -> Result<bool, TestCaseError> {
        if self.open {
            let i = self.ids.len() - 1;
            let (end_lsn, sizes) = &self.case.txns[i];
            if let Some(&bytes) = sizes.get(self.sent) {
                check(self.cp.record_sent(self.ids[i], bytes))?;
                self.sent += 1;
                self.unacked[i] += 1;
                self.outstanding.push((i, bytes));
            } else {
                // Commit times grow with the stream, as PostgreSQL's do:
                // the model uses the end LSN as the time.
                let time = Some(*end_lsn as i64);
                check(self.cp.commit_at(self.ids[i], Lsn(*end_lsn), time))?;
                self.open = false;
            }
            Ok(true)
        } else if self.ids.len() < self.case.txns.len() {
            self.ids.push(check(self.cp.begin())?);
            self.unacked.push(0);
            self.open = true;
            self.sent = 0;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Acks one outstanding record chosen by `pick`; false if none.
    fn ack(&mut self, pick: usize) -> Result<bool, TestCaseError> {
        if self.outstanding.is_empty() {
            return Ok(false);
        }
        let (i, bytes) = self.outstanding.swap_remove(pick % self.outstanding.len());
        check(self.cp.ack(self.ids[i], bytes))?;
        self.unacked[i] -= 1;
        Ok(true)
    }

    /// A keepalive as PostgreSQL could send it here: below the end of every
    /// transaction not yet committed (at most the last end_lsn once all are).
    fn keepalive(&mut self, pick: usize) {
        let txns = &self.case.txns;
        let bound = match txns.get(self.committed()) {
            Some((end_lsn, _)) => *end_lsn,
            None => txns.last().map_or(5_000, |(end_lsn, _)| end_lsn + 1),
        };
        let wal_end = pick as u64 % bound.max(1);
        if self.idle() {
            self.idle_floor = self.idle_floor.max(wal_end);
        }
        self.cp.keepalive(Lsn(wal_end));
    }

    fn check_invariants(&mut self) -> Result<(), TestCaseError> {
        let txns = &self.case.txns;
        let confirmed = self.cp.confirmed();

        // Monotonic.
        prop_assert!(confirmed >= self.last_confirmed);
        self.last_confirmed = confirmed;

        let committed = self.committed();
        let complete = |i: usize| i < committed && self.unacked[i] == 0;

        // Never covers a transaction that is not complete (unless PostgreSQL
        // re-sent it from below the resume point).
        for (i, (end_lsn, _)) in txns.iter().enumerate() {
            if !complete(i) && *end_lsn > self.case.start {
                prop_assert!(
                    confirmed < Lsn(*end_lsn),
                    "confirmed {} covers incomplete txn {} ending at {}",
                    confirmed,
                    i,
                    Lsn(*end_lsn)
                );
            }
        }

        // Exactly the contiguous complete prefix (or the idle floor).
        let prefix_end = (0..txns.len())
            .take_while(|&i| complete(i))
            .map(|i| txns[i].0)
            .max()
            .unwrap_or(0);
        let expected = self.case.start.max(self.idle_floor).max(prefix_end);
        prop_assert_eq!(confirmed, Lsn(expected));

        // The commit time goes with the position: the newest of the
        // complete prefix, and of everything committed.
        let prefix_len = (0..txns.len()).take_while(|&i| complete(i)).count();
        let prefix_time = (prefix_len > 0).then_some(prefix_end as i64);
        prop_assert_eq!(self.cp.confirmed_commit_ms(), prefix_time);
        let committed_time = (committed > 0).then(|| txns[committed - 1].0 as i64);
        prop_assert_eq!(self.cp.committed_commit_ms(), committed_time);

        // Accounting.
        let bytes: usize = self.outstanding.iter().map(|(_, b)| b).sum();
        prop_assert_eq!(self.cp.in_flight_records(), self.outstanding.len() as u64);
        prop_assert_eq!(self.cp.in_flight_bytes(), bytes as u64);
        prop_assert_eq!(
            self.cp.is_full(),
            self.outstanding.len() as u64 >= STREAM_LIMITS.max_in_flight_records
                || bytes as u64 >= STREAM_LIMITS.max_in_flight_bytes
        );
        let all_confirmed = (0..self.ids.len()).all(complete);
        prop_assert_eq!(self.cp.pending_txns() == 0, all_confirmed);
        prop_assert_eq!(self.cp.open_txn().is_some(), self.open);
        Ok(())
    }
}

proptest! {
    #[test]
    fn stream_with_acks_in_random_order(case in stream_case()) {
        let mut s = Stream::new(&case);
        s.check_invariants()?;
        for &(selector, pick) in &case.steps {
            match selector {
                0..4 => { s.advance()?; }
                4..9 => { s.ack(pick)?; }
                _ => s.keepalive(pick),
            }
            s.check_invariants()?;
        }
        // The stream ends and Kafka acks everything.
        while s.advance()? {
            s.check_invariants()?;
        }
        while s.ack(0)? {
            s.check_invariants()?;
        }
        let expected = match case.txns.last() {
            Some((end_lsn, _)) => case.start.max(*end_lsn),
            None => case.start.max(s.idle_floor),
        };
        prop_assert_eq!(s.cp.confirmed(), Lsn(expected));
        prop_assert_eq!(s.cp.pending_txns(), 0);
        prop_assert_eq!(s.cp.in_flight_records(), 0);
        prop_assert_eq!(s.cp.in_flight_bytes(), 0);
    }
}

// ---------------------------------------------------------------------------
// Model comparison against a naive reference.

/// The specification, computed from scratch in O(n) on every question.
#[derive(Debug)]
struct Naive {
    start: Lsn,
    /// Highest keepalive `wal_end` seen while everything was complete.
    idle: Lsn,
    txns: Vec<NaiveTxn>,
    limits: Limits,
}

#[derive(Debug)]
struct NaiveTxn {
    open: bool,
    end_lsn: Option<Lsn>,
    records: u64,
    bytes: u64,
}

impl NaiveTxn {
    fn complete(&self) -> bool {
        !self.open && self.records == 0
    }
}

impl Naive {
    fn complete_prefix(&self) -> usize {
        self.txns.iter().take_while(|t| t.complete()).count()
    }

    fn confirmed(&self) -> Lsn {
        self.txns[..self.complete_prefix()]
            .iter()
            .filter_map(|t| t.end_lsn)
            .fold(self.start.max(self.idle), Lsn::max)
    }

    fn in_flight_records(&self) -> u64 {
        self.txns.iter().map(|t| t.records).sum()
    }

    fn in_flight_bytes(&self) -> u64 {
        self.txns.iter().map(|t| t.bytes).sum()
    }

    fn is_full(&self) -> bool {
        self.in_flight_records() >= self.limits.max_in_flight_records
            || self.in_flight_bytes() >= self.limits.max_in_flight_bytes
    }

    fn open(&mut self) -> Option<&mut NaiveTxn> {
        self.txns.iter_mut().find(|t| t.open)
    }

    fn begin(&mut self) -> bool {
        if self.open().is_some() {
            return false;
        }
        self.txns.push(NaiveTxn {
            open: true,
            end_lsn: None,
            records: 0,
            bytes: 0,
        });
        true
    }

    fn record_sent(&mut self, i: usize, bytes: u64) -> bool {
        let t = &mut self.txns[i];
        if !t.open {
            return false;
        }
        t.records += 1;
        t.bytes += bytes;
        true
    }

    fn commit(&mut self, i: usize, end_lsn: Lsn) -> bool {
        let t = &mut self.txns[i];
        if !t.open {
            return false;
        }
        t.open = false;
        t.end_lsn = Some(end_lsn);
        true
    }

    fn ack(&mut self, i: usize, bytes: u64) -> bool {
        let t = &mut self.txns[i];
        if t.records == 0 || bytes > t.bytes || (t.records == 1 && bytes != t.bytes) {
            return false;
        }
        t.records -= 1;
        t.bytes -= bytes;
        true
    }

    fn keepalive(&mut self, wal_end: Lsn) {
        if self.txns.iter().all(NaiveTxn::complete) {
            self.idle = self.idle.max(wal_end);
        }
    }

    fn abandon_open(&mut self) -> bool {
        match self.open() {
            Some(t) => {
                t.open = false;
                true
            }
            None => false,
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Begin,
    /// A record of the newest transaction.
    Send(u64),
    /// A record of any transaction (usually misuse).
    SendTo(usize, u64),
    /// Commit of the newest transaction.
    Commit(u64),
    /// Commit of any transaction (usually misuse).
    CommitTo(usize, u64),
    /// Ack for any transaction; the pick chooses a plausible byte count four
    /// times in five, an arbitrary one otherwise.
    Ack(usize, usize),
    Keepalive(u64),
    Abandon,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => Just(Op::Begin),
        6 => (0u64..100).prop_map(Op::Send),
        1 => (any::<usize>(), 0u64..100).prop_map(|(t, b)| Op::SendTo(t, b)),
        2 => (0u64..1_000).prop_map(Op::Commit),
        1 => (any::<usize>(), 0u64..1_000).prop_map(|(t, l)| Op::CommitTo(t, l)),
        8 => (any::<usize>(), any::<usize>()).prop_map(|(t, p)| Op::Ack(t, p)),
        1 => (0u64..1_200).prop_map(Op::Keepalive),
        1 => Just(Op::Abandon),
    ]
}

const MODEL_LIMITS: Limits = Limits {
    max_in_flight_records: 6,
    max_in_flight_bytes: 300,
};

fn observe(cp: &Checkpoint) -> (Lsn, u64, u64, usize, Option<TxnId>, bool) {
    (
        cp.confirmed(),
        cp.in_flight_records(),
        cp.in_flight_bytes(),
        cp.pending_txns(),
        cp.open_txn(),
        cp.is_full(),
    )
}

proptest! {
    #[test]
    fn matches_naive_reference(
        start in 0u64..500,
        ops in prop::collection::vec(op(), 0..300),
    ) {
        let mut cp = Checkpoint::new(Lsn(start), MODEL_LIMITS);
        let mut naive = Naive { start: Lsn(start), idle: Lsn(0), txns: Vec::new(), limits: MODEL_LIMITS };
        let mut ids: Vec<TxnId> = Vec::new();
        for op in ops {
            let before = observe(&cp);
            let (real_ok, naive_ok) = match op {
                Op::Begin => {
                    let real = cp.begin();
                    if let Ok(id) = real {
                        ids.push(id);
                    }
                    (real.is_ok(), naive.begin())
                }
                Op::Send(bytes) | Op::SendTo(_, bytes) | Op::Commit(bytes) | Op::CommitTo(_, bytes)
                    if ids.is_empty() =>
                {
                    let _ = bytes;
                    continue;
                }
                Op::Send(bytes) => {
                    let i = ids.len() - 1;
                    (cp.record_sent(ids[i], bytes as usize).is_ok(), naive.record_sent(i, bytes))
                }
                Op::SendTo(t, bytes) => {
                    let i = t % ids.len();
                    (cp.record_sent(ids[i], bytes as usize).is_ok(), naive.record_sent(i, bytes))
                }
                Op::Commit(lsn) => {
                    let i = ids.len() - 1;
                    (cp.commit(ids[i], Lsn(lsn)).is_ok(), naive.commit(i, Lsn(lsn)))
                }
                Op::CommitTo(t, lsn) => {
                    let i = t % ids.len();
                    (cp.commit(ids[i], Lsn(lsn)).is_ok(), naive.commit(i, Lsn(lsn)))
                }
                Op::Ack(_, _) if ids.is_empty() => continue,
                Op::Ack(t, pick) => {
                    let i = t % ids.len();
                    let txn = &naive.txns[i];
                    let bytes = if pick % 5 == 0 {
                        (pick / 5) as u64 % 64
                    } else if txn.records <= 1 {
                        txn.bytes
                    } else {
                        (pick / 5) as u64 % (txn.bytes + 1)
                    };
                    (cp.ack(ids[i], bytes as usize).is_ok(), naive.ack(i, bytes))
                }
                Op::Keepalive(wal_end) => {
                    cp.keepalive(Lsn(wal_end));
                    naive.keepalive(Lsn(wal_end));
                    (true, true)
                }
                Op::Abandon => (cp.abandon_open().is_some(), naive.abandon_open()),
            };
            prop_assert_eq!(real_ok, naive_ok, "disagree on {:?}", op);
            if !real_ok {
                prop_assert_eq!(observe(&cp), before, "failed {:?} changed state", op);
            }
            prop_assert!(cp.confirmed() >= before.0, "confirmed went backwards on {:?}", op);
            prop_assert_eq!(cp.confirmed(), naive.confirmed(), "after {:?}", op);
            prop_assert_eq!(cp.in_flight_records(), naive.in_flight_records());
            prop_assert_eq!(cp.in_flight_bytes(), naive.in_flight_bytes());
            prop_assert_eq!(cp.is_full(), naive.is_full());
            prop_assert_eq!(cp.open_txn().is_some(), naive.txns.iter().any(|t| t.open));
            // Folding merges entries, so the queue is never longer than the
            // unconfirmed suffix, and empty exactly when that suffix is.
            let unconfirmed = naive.txns.len() - naive.complete_prefix();
            prop_assert!(cp.pending_txns() <= unconfirmed);
            prop_assert_eq!(cp.pending_txns() == 0, unconfirmed == 0);
        }
    }
}
