//! The contiguous-completion frontier of one partition, and the same-key
//! order of the records in progress. Pure: no I/O, no clock (the caller
//! passes what it wants kept per record, e.g. when it arrived).
//!
//! Invariants (tests/it/inbox.rs checks them with proptests):
//! 1. [`Frontier::position`] — the offset to commit to Kafka, i.e. the next
//!    offset a restarted consumer reads — is never past a record received
//!    and not yet completed: it is the lowest such offset, or one past the
//!    highest offset received when none is in progress. Completions may
//!    come in any order; the position moves only over the contiguous
//!    completed prefix of what was received (offsets need not be dense:
//!    transaction markers and compaction leave gaps).
//! 2. The position never goes backwards while records arrive in order.
//! 3. [`KeyOrder`] lets at most one record per key run at a time, and hands
//!    a key's records out in the order they were admitted; records without
//!    a key are never held back.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::Hash;

/// Why the frontier refused a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrontierError {
    /// A record at or below one already received: the partition was
    /// re-assigned or sought back. The caller starts a new frontier there.
    #[error("offset {offset} is not after the last offset received ({last})")]
    Rewound { offset: i64, last: i64 },
    /// A completion for an offset that is not in progress.
    #[error("offset {0} is not in progress")]
    NotInProgress(i64),
}

/// The records of one partition received and not yet done, and the
/// highest offset received. `V` is kept per record in progress (the
/// consumer keeps when it arrived, for the oldest-record age).
#[derive(Debug, Clone)]
pub struct Frontier<V = ()> {
    pending: BTreeMap<i64, V>,
    /// One past the highest offset received; `None` before the first.
    next: Option<i64>,
}

impl<V> Default for Frontier<V> {
    fn default() -> Self {
        Frontier {
            pending: BTreeMap::new(),
            next: None,
        }
    }
}

impl<V> Frontier<V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// A record arrived (offsets arrive in increasing order).
    pub fn receive(&mut self, offset: i64, value: V) -> Result<(), FrontierError> {
        if let Some(next) = self.next
            && offset < next
        {
            return Err(FrontierError::Rewound {
                offset,
                last: next - 1,
            });
        }
        self.pending.insert(offset, value);
        self.next = Some(offset.saturating_add(1));
        Ok(())
    }

    /// The record at `offset` is done (applied, skipped as a duplicate, or
    /// quarantined); returns what was kept for it.
    pub fn complete(&mut self, offset: i64) -> Result<V, FrontierError> {
        self.pending
            .remove(&offset)
            .ok_or(FrontierError::NotInProgress(offset))
    }

    /// The offset to commit: the lowest offset in progress, else one past
    /// the highest received; `None` before anything arrived.
    pub fn position(&self) -> Option<i64> {
        self.pending.keys().next().copied().or(self.next)
    }

    /// Records received and not done.
    pub fn in_progress(&self) -> usize {
        self.pending.len()
    }

    /// The oldest record in progress (the lowest offset) and its value.
    pub fn oldest(&self) -> Option<(i64, &V)> {
        self.pending.iter().next().map(|(o, v)| (*o, v))
    }

    /// How far the committable position is behind what was received, in
    /// offsets: `0` when everything received is done.
    pub fn lag(&self) -> i64 {
        match (self.next, self.position()) {
            (Some(next), Some(position)) => next - position,
            _ => 0,
        }
    }
}

/// Same-key order: at most one record per key is handed out at a time, a
/// key's records in admission order. `K` names the key (the consumer uses
/// topic, partition and record key); `T` is the waiting work.
#[derive(Debug)]
pub struct KeyOrder<K, T> {
    /// A key present here has a record running; its deque holds the
    /// records admitted after it, waiting.
    busy: HashMap<K, VecDeque<T>>,
}

impl<K: Hash + Eq, T> Default for KeyOrder<K, T> {
    fn default() -> Self {
        KeyOrder {
            busy: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq, T> KeyOrder<K, T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Admits `task`; returns it when it may run now (no earlier record of
    /// its key is still running or waiting). A record without a key runs
    /// at once.
    pub fn admit(&mut self, key: Option<K>, task: T) -> Option<T> {
        let Some(key) = key else {
            return Some(task);
        };
        match self.busy.get_mut(&key) {
            Some(waiting) => {
                waiting.push_back(task);
                None
            }
            None => {
                self.busy.insert(key, VecDeque::new());
                Some(task)
            }
        }
    }

    /// The running record of `key` is done; returns the key's next record,
    /// which may run now.
    pub fn finish(&mut self, key: Option<&K>) -> Option<T> {
        let key = key?;
        let waiting = self.busy.get_mut(key)?;
        match waiting.pop_front() {
            Some(next) => Some(next),
            None => {
                self.busy.remove(key);
                None
            }
        }
    }

    /// The key will not run again (its partition stopped at its running
    /// record): forgets it and returns the records that waited behind it.
    pub fn abandon(&mut self, key: Option<&K>) -> Vec<T> {
        key.and_then(|k| self.busy.remove(k))
            .map(Vec::from)
            .unwrap_or_default()
    }

    /// Records waiting behind a running record of their key.
    pub fn waiting(&self) -> usize {
        self.busy.values().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests;
