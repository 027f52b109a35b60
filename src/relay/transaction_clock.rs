//! `exactly_once`: how long the open Kafka transaction has been open, and
//! what keeps it open — the rule that tells a PostgreSQL transaction too big
//! for `kafka.transaction_timeout` from a broker outage.
//!
//! A Kafka transaction is committed only where no PostgreSQL transaction
//! (nor the initial snapshot) is partly in it, so one of them that takes
//! longer than `kafka.transaction_timeout` to hand to Kafka keeps its Kafka
//! transaction open past the timeout: the broker aborts it and fences the
//! producer, and a new session, sending the same transaction again at the
//! same speed, fails the same way — forever, with the slot's lag growing.
//!
//! Invariants:
//! - **A transaction too big for the timeout stops the connector, once.**
//!   When the open Kafka transaction has been open for `transaction_timeout`
//!   (by our clock, from its first record) while a PostgreSQL transaction or
//!   the initial snapshot is partly in it, and no broker was reported
//!   unreachable since it began, [`TransactionClock::overrun`] says so; the
//!   session aborts the Kafka transaction (nothing of it becomes visible to
//!   `read_committed` consumers, the slot stays before it) and stops with a
//!   definite [`Overrun`] that names the PostgreSQL transaction (xid, commit
//!   LSN) or the snapshot, what of it was handed to Kafka so far, how long
//!   the Kafka transaction was open, and the settings to raise. Never a
//!   retried error: a retry fails the same way.
//! - **The same verdict when Kafka reports it first.** A transient Kafka
//!   failure (fenced, invalid epoch, timed out) of a Kafka transaction open
//!   for the timeout, without a broker outage, is the same [`Overrun`]
//!   ([`TransactionClock::explain`]) when a PostgreSQL transaction or the
//!   snapshot is partly in it, or when the newest one in it alone kept it
//!   open for `transaction_timeout - transaction_max_time` (the bound commits
//!   at every commit point past it, so no earlier one can have).
//! - **A broker outage stays transient.** Any report of an unreachable
//!   broker since the Kafka transaction began (librdkafka's connection
//!   failures, counted by the sink) leaves the failure as it was: the
//!   session restarts and waits for the broker, as at `at_least_once`.
//! - Pure: the caller passes the time and the outage count in.

use std::time::{Duration, Instant};

use crate::Lsn;

/// What is partly in (or newest in) the open Kafka transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A PostgreSQL transaction.
    Pg { xid: u32, commit_lsn: Lsn },
    /// The initial snapshot (one Kafka transaction).
    Snapshot,
}

/// A unit and what of it went to Kafka.
#[derive(Debug, Clone, Copy)]
struct Held {
    unit: Unit,
    records: u64,
    bytes: u64,
    /// Its first record's send.
    first_sent: Option<Instant>,
    /// When it entered the checkpoint whole (its Commit); `None` while open.
    closed: Option<Instant>,
}

/// A Kafka transaction kept open past `kafka.transaction_timeout` by one
/// PostgreSQL transaction or the initial snapshot (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overrun {
    pub unit: Unit,
    /// Records and bytes of it handed to Kafka (so far, if still open).
    pub records: u64,
    pub bytes: u64,
    /// Whether all of it had been handed over.
    pub whole: bool,
    /// From its first record to now (or to its end).
    pub unit_time: Duration,
    /// How long the Kafka transaction was open.
    pub open_for: Duration,
    pub timeout: Duration,
}

impl std::fmt::Display for Overrun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let so_far = if self.whole { "" } else { " so far" };
        let size = format!(
            "{} records ({:.1} MiB){so_far}, handed to Kafka in {:.1} s",
            self.records,
            self.bytes as f64 / f64::from(1u32 << 20),
            self.unit_time.as_secs_f64()
        );
        let timeout = humantime_serde::re::humantime::format_duration(self.timeout);
        match self.unit {
            Unit::Pg { xid, commit_lsn } => write!(
                f,
                "exactly_once: PostgreSQL transaction xid {xid} (commit LSN {commit_lsn}) is too \
                 big to reach Kafka within kafka.transaction_timeout ({timeout}): {size}; its \
                 Kafka transaction was open for {:.1} s with Kafka acknowledging (no broker \
                 outage), and one PostgreSQL transaction is never split across Kafka \
                 transactions, so every retry would fail the same way. Aborted: nothing of it is \
                 visible to read_committed consumers, the slot stays before it. What to do: \
                 raise kafka.transaction_timeout above the time this transaction takes to reach \
                 Kafka (the brokers cap it at their transaction.max.timeout.ms, 15 minutes by \
                 default: raise that too if needed), then start again; or make the application \
                 commit smaller transactions (docs/operations.md, \"A transaction too big for \
                 transaction_timeout\")",
                self.open_for.as_secs_f64()
            ),
            Unit::Snapshot => write!(
                f,
                "exactly_once: the initial snapshot (one Kafka transaction) is too big to reach \
                 Kafka within kafka.transaction_timeout ({timeout}): {size}; its Kafka \
                 transaction was open for {:.1} s with Kafka acknowledging (no broker outage), \
                 so every retry would fail the same way. Aborted: nothing of it is visible to \
                 read_committed consumers. What to do: raise kafka.transaction_timeout above the \
                 time the snapshot takes (the brokers cap it at their \
                 transaction.max.timeout.ms, 15 minutes by default: raise that too if needed), \
                 or take the big tables as incremental snapshots (snapshot.mode = \"no_data\", \
                 then walrelay snapshot), committed chunk by chunk (docs/operations.md, \"A \
                 transaction too big for transaction_timeout\")",
                self.open_for.as_secs_f64()
            ),
        }
    }
}

/// See the module doc.
#[derive(Debug, Clone)]
pub struct TransactionClock {
    timeout: Duration,
    max_time: Duration,
    /// The open Kafka transaction: when it began, and the sink's count of
    /// unreachable-broker reports then.
    kafka: Option<(Instant, u64)>,
    /// The newest unit with records in the open Kafka transaction, or the
    /// one open now.
    held: Option<Held>,
}

impl TransactionClock {
    /// A clock for `kafka.transaction_timeout` and
    /// `kafka.transaction_max_time`.
    pub fn new(timeout: Duration, max_time: Duration) -> TransactionClock {
        TransactionClock {
            timeout,
            max_time,
            kafka: None,
            held: None,
        }
    }

    /// A Kafka transaction began at `now`; `outages`: the sink's count of
    /// unreachable-broker reports.
    pub fn kafka_began(&mut self, now: Instant, outages: u64) {
        self.kafka = Some((now, outages));
    }

    /// The Kafka transaction was committed or aborted: nothing is in it.
    pub fn kafka_ended(&mut self) {
        self.kafka = None;
        if self.held.is_some_and(|h| h.closed.is_some()) {
            self.held = None;
        }
    }

    /// A PostgreSQL transaction (or the snapshot) begins.
    pub fn unit_begins(&mut self, unit: Unit) {
        self.held = Some(Held {
            unit,
            records: 0,
            bytes: 0,
            first_sent: None,
            closed: None,
        });
    }

    /// One record of `bytes` of the open unit was handed to Kafka at `now`.
    pub fn sent(&mut self, bytes: usize, now: Instant) {
        if let Some(h) = self.held.as_mut().filter(|h| h.closed.is_none()) {
            h.records += 1;
            h.bytes = h.bytes.saturating_add(bytes as u64);
            h.first_sent.get_or_insert(now);
        }
    }

    /// The open unit entered the checkpoint whole at `now`. One that sent
    /// nothing is forgotten.
    pub fn unit_ends(&mut self, now: Instant) {
        match self.held.as_mut() {
            Some(h) if h.records == 0 => self.held = None,
            Some(h) if h.closed.is_none() => h.closed = Some(now),
            _ => {}
        }
    }

    /// The Kafka transaction's age at `now`, if it is past the timeout and
    /// no broker was reported unreachable since it began.
    fn past_timeout(&self, now: Instant, outages: u64) -> Option<Duration> {
        let (began, outages_then) = self.kafka?;
        let open_for = now.saturating_duration_since(began);
        (!self.timeout.is_zero() && open_for >= self.timeout && outages == outages_then)
            .then_some(open_for)
    }

    fn overrun_of(&self, held: &Held, open_for: Duration, now: Instant) -> Overrun {
        let end = held.closed.unwrap_or(now);
        Overrun {
            unit: held.unit,
            records: held.records,
            bytes: held.bytes,
            whole: held.closed.is_some(),
            unit_time: held
                .first_sent
                .map_or(Duration::ZERO, |t| end.saturating_duration_since(t)),
            open_for,
            timeout: self.timeout,
        }
    }

    /// Checked while records are sent and at every tick: the open unit has
    /// kept the Kafka transaction open for the timeout (module doc).
    pub fn overrun(&self, now: Instant, outages: u64) -> Option<Overrun> {
        let open_for = self.past_timeout(now, outages)?;
        let held = self.held.as_ref().filter(|h| h.closed.is_none())?;
        (held.records > 0).then(|| self.overrun_of(held, open_for, now))
    }

    /// A transient Kafka failure of the open transaction at `now`: the
    /// [`Overrun`] it stands for, if any (module doc).
    pub fn explain(&self, now: Instant, outages: u64) -> Option<Overrun> {
        let open_for = self.past_timeout(now, outages)?;
        let held = self.held.as_ref().filter(|h| h.records > 0)?;
        let alone = match (held.first_sent, held.closed) {
            (_, None) => true,
            (Some(first), Some(closed)) => {
                closed.saturating_duration_since(first)
                    >= self.timeout.saturating_sub(self.max_time)
            }
            (None, Some(_)) => false,
        };
        alone.then(|| self.overrun_of(held, open_for, now))
    }
}

#[cfg(test)]
mod tests;
