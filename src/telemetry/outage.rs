//! Outage logging: what an on-call engineer reads while a dependency
//! (Kafka, PostgreSQL) is away.
//!
//! A broker outage makes librdkafka report a failure on every reconnect
//! attempt (hundreds of lines in 20 s), and a reconnect loop fails on every
//! retry. Neither is news after the first. The rule kept here:
//!
//! - **One line when it goes away** ([`Said::Down`]), with the first cause.
//! - **A reminder at most every [`REMIND_EVERY`]** while it stays away
//!   ([`Said::StillDown`]), saying for how long and the latest cause.
//! - **One line when it is back** ([`Said::Back`]), saying after how long:
//!   at a success once no failure has come for a settling time (one broker
//!   of several staying down is one outage, not a pair of lines per
//!   reconnect attempt), or at a later [`Outage::tick`].
//! - Everything else is [`Said::Nothing`] (the caller may log it at debug).
//!
//! [`Outage`] is the pure state machine (the clock is passed in, so it is
//! tested without sleeping); [`OutageLog`] wraps it for callers on several
//! threads (librdkafka's callbacks) and writes the lines. Its success path is
//! one relaxed atomic load while nothing is down, so it can sit on the
//! delivery path of every record.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often a continuing outage is logged again.
pub const REMIND_EVERY: Duration = Duration::from_secs(60);

/// What an event means for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Said {
    /// It just went away: log it.
    Down,
    /// Still away for `for_`: remind.
    StillDown { for_: Duration },
    /// Back after `after`: log it.
    Back { after: Duration },
    /// Nothing new.
    Nothing,
}

/// One dependency's availability, as far as the log is concerned.
///
/// An outage ends at a success only once no failure has come for `settle`:
/// while one broker of a cluster is down, librdkafka keeps reporting it
/// (every reconnect attempt, at most 10 s apart) while the other brokers
/// take records, and that is one continuing outage, reminded every
/// [`REMIND_EVERY`], not a "down"/"back" pair per attempt.
#[derive(Debug, Clone, Default)]
pub struct Outage {
    settle: Duration,
    down: Option<Down>,
}

#[derive(Debug, Clone, Copy)]
struct Down {
    since: Instant,
    said_at: Instant,
    last_failure: Instant,
    /// The first success after the last failure.
    recovered_at: Option<Instant>,
}

impl Outage {
    /// An outage that ends at the first success `settle` after the last
    /// failure.
    pub fn new(settle: Duration) -> Outage {
        Outage { settle, down: None }
    }

    /// A failure at `now`.
    pub fn failed(&mut self, now: Instant) -> Said {
        match &mut self.down {
            None => {
                self.down = Some(Down {
                    since: now,
                    said_at: now,
                    last_failure: now,
                    recovered_at: None,
                });
                Said::Down
            }
            Some(d) => {
                d.last_failure = d.last_failure.max(now);
                d.recovered_at = None;
                if now.saturating_duration_since(d.said_at) >= REMIND_EVERY {
                    d.said_at = now;
                    Said::StillDown {
                        for_: now.saturating_duration_since(d.since),
                    }
                } else {
                    Said::Nothing
                }
            }
        }
    }

    /// A success at `now`.
    pub fn succeeded(&mut self, now: Instant) -> Said {
        if let Some(d) = &mut self.down {
            d.recovered_at.get_or_insert(now);
        }
        self.tick(now)
    }

    /// Time passing: ends an outage that has recovered and stayed free of
    /// failures for `settle` (its "back" is then said even if nothing else
    /// succeeds).
    pub fn tick(&mut self, now: Instant) -> Said {
        match self.down {
            Some(Down {
                since,
                last_failure,
                recovered_at: Some(recovered),
                ..
            }) if now.saturating_duration_since(last_failure) >= self.settle => {
                self.down = None;
                Said::Back {
                    after: recovered.saturating_duration_since(since),
                }
            }
            _ => Said::Nothing,
        }
    }

    /// Whether an outage is under way.
    pub fn is_down(&self) -> bool {
        self.down.is_some()
    }
}

/// An [`Outage`] shared by threads, writing its lines as `warn`/`info`
/// with the dependency's name.
#[derive(Debug)]
pub struct OutageLog {
    what: &'static str,
    down: AtomicBool,
    /// Every [`OutageLog::failed`] call so far.
    failures: AtomicU64,
    state: Mutex<Outage>,
}

impl OutageLog {
    /// `what` names the dependency in the lines ("Kafka"); `settle` as in
    /// [`Outage::new`].
    pub fn new(what: &'static str, settle: Duration) -> OutageLog {
        OutageLog {
            what,
            down: AtomicBool::new(false),
            failures: AtomicU64::new(0),
            state: Mutex::new(Outage::new(settle)),
        }
    }

    /// Something failed because `what` is unreachable; `cause` says how.
    /// Returns whether this call wrote a line.
    pub fn failed(&self, cause: &str) -> bool {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let said = self.with(|o| {
            let said = o.failed(Instant::now());
            self.down.store(true, Ordering::Relaxed);
            said
        });
        match said {
            Said::Down => {
                tracing::warn!(
                    cause,
                    "{} is unreachable; walrelay keeps what it has not delivered and waits \
                     (reminder every {} s while it lasts)",
                    self.what,
                    REMIND_EVERY.as_secs()
                );
                true
            }
            Said::StillDown { for_ } => {
                tracing::warn!(
                    cause,
                    down_secs = for_.as_secs(),
                    "{} is still unreachable after {} s",
                    self.what,
                    for_.as_secs()
                );
                true
            }
            Said::Back { .. } | Said::Nothing => {
                tracing::debug!(cause, "{} is still unreachable", self.what);
                false
            }
        }
    }

    /// Something succeeded that needs `what`: ends an outage (once it has
    /// settled). Cheap while nothing is down.
    pub fn succeeded(&self) {
        if self.down.load(Ordering::Relaxed) {
            self.end(|o, now| o.succeeded(now));
        }
    }

    /// Call every second or so: says "back" for an outage that has settled
    /// since the last success.
    pub fn tick(&self) {
        if self.down.load(Ordering::Relaxed) {
            self.end(|o, now| o.tick(now));
        }
    }

    fn end(&self, f: impl FnOnce(&mut Outage, Instant) -> Said) {
        let said = self.with(|o| {
            let said = f(o, Instant::now());
            self.down.store(o.is_down(), Ordering::Relaxed);
            said
        });
        if let Said::Back { after } = said {
            tracing::info!(
                down_secs = after.as_secs(),
                "{} is back after {} s",
                self.what,
                after.as_secs()
            );
        }
    }

    /// Whether an outage is under way.
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }

    /// How many failures were reported so far (never decreases).
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    fn with<R>(&self, f: impl FnOnce(&mut Outage) -> R) -> R {
        // A poisoned lock only means a panic elsewhere while logging; the
        // state itself is always consistent.
        let mut guard = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard)
    }
}

#[cfg(test)]
mod tests;
