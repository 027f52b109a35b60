//! Where each reader's part of each table of the initial snapshot can
//! resume from: the read key of the last row up to which Kafka holds every
//! row of the part.
//!
//! The source hands rows out in batches ([`SnapshotChunk`]): consecutive
//! rows of one table read by one reader, in the reader's key order, each
//! batch whole before the next. Kafka acknowledges records in any order
//! across partitions, so a part's position moves only over a prefix of its
//! batches that are all *closed* (the source moved past them: every row
//! was sent) and *fully acknowledged*. Invariants:
//! - **Never past a row Kafka lacks.** [`Parts::held`] names a key only
//!   when every row of the part up to it, in every earlier batch of the
//!   part, was acknowledged; a resumed part reads the rows after it, so
//!   none is skipped.
//! - **Bounded.** Only batches not yet retired are kept: at most those in
//!   flight, which the in-flight limits bound.
//! - Knows nothing of Kafka or the offset store: counts only.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::source::SnapshotChunk;

/// One reader's part of one table: (table index, part).
pub(super) type PartKey = (usize, u32);

#[derive(Debug)]
struct Chunk {
    part: PartKey,
    sent: u64,
    acked: u64,
    closed: bool,
    last_key: Option<Vec<Option<String>>>,
}

impl Chunk {
    fn complete(&self) -> bool {
        self.closed && self.acked == self.sent
    }
}

/// See the module doc.
#[derive(Debug, Default)]
pub(super) struct Parts {
    chunks: HashMap<u32, Chunk>,
    queues: BTreeMap<PartKey, VecDeque<u32>>,
    current: Option<u32>,
    held: BTreeMap<PartKey, Vec<Option<String>>>,
    moved: bool,
}

impl Parts {
    /// Starting from where a resumed snapshot's parts stood (empty: from
    /// the start).
    pub(super) fn new(resumed: BTreeMap<PartKey, Vec<Option<String>>>) -> Parts {
        Parts {
            held: resumed,
            ..Parts::default()
        }
    }

    /// A row of `chunk`, a batch of table #`table`, was sent.
    pub(super) fn sent(&mut self, table: usize, chunk: &SnapshotChunk) {
        if self.current != Some(chunk.id) {
            self.close_current();
            self.current = Some(chunk.id);
            let part = (table, chunk.part);
            self.queues.entry(part).or_default().push_back(chunk.id);
            self.chunks.insert(
                chunk.id,
                Chunk {
                    part,
                    sent: 0,
                    acked: 0,
                    closed: false,
                    last_key: chunk.last_key.clone(),
                },
            );
        }
        if let Some(c) = self.chunks.get_mut(&chunk.id) {
            c.sent += 1;
        }
    }

    /// The source moved past the batch in hand (a table or the snapshot
    /// was read): every row of it was sent.
    pub(super) fn close_current(&mut self) {
        if let Some(id) = self.current.take()
            && let Some(c) = self.chunks.get_mut(&id)
        {
            c.closed = true;
            let part = c.part;
            self.retire(part);
        }
    }

    /// A row of batch `chunk` was acknowledged: its table's index.
    pub(super) fn acked(&mut self, chunk: u32) -> Option<usize> {
        let c = self.chunks.get_mut(&chunk)?;
        c.acked += 1;
        let part = c.part;
        self.retire(part);
        Some(part.0)
    }

    /// Per part, the key after which a resumed part reads.
    pub(super) fn held(&self) -> &BTreeMap<PartKey, Vec<Option<String>>> {
        &self.held
    }

    /// Whether [`Parts::held`] moved since the last call.
    pub(super) fn take_moved(&mut self) -> bool {
        std::mem::take(&mut self.moved)
    }

    /// Retires the complete batches at the front of `part`'s queue.
    fn retire(&mut self, part: PartKey) {
        let Some(queue) = self.queues.get_mut(&part) else {
            return;
        };
        while let Some(id) = queue.front() {
            match self.chunks.get(id) {
                Some(c) if c.complete() => {
                    if let Some(key) = &c.last_key {
                        self.held.insert(part, key.clone());
                        self.moved = true;
                    }
                    self.chunks.remove(id);
                    queue.pop_front();
                }
                Some(_) => break,
                None => {
                    queue.pop_front();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
