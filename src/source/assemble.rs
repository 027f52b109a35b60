//! Transaction assembly: pgoutput messages in, [`SourceEvent`]s out, with
//! the relation cache, and without I/O. The invariants are the source's
//! (see [`super`]): every change inside `Begin … Commit` with its commit
//! LSN and index, every row of a known relation of the right width,
//! positions that never go back.

use bytes::Bytes;

use super::{Change, Op, Position, SourceError, SourceEvent, Txn};
use crate::Lsn;
use crate::pg::replication::{ReplicationMessage, StreamEvent};
use crate::pgoutput::{self, LogicalMessage, RelationCache, TupleData};

/// The transaction being assembled.
#[derive(Debug, Clone, Copy)]
struct Open {
    commit_lsn: Lsn,
    txn: Txn,
    next_index: u64,
}

/// Turns decoded messages into events: the relation cache and transaction
/// assembly, without I/O.
#[derive(Debug)]
pub(super) struct Assembler {
    pub(super) relations: RelationCache,
    open: Option<Open>,
    pub(super) received: Lsn,
}

impl Assembler {
    pub(super) fn new(start: Lsn) -> Assembler {
        Assembler {
            relations: RelationCache::new(),
            open: None,
            received: start,
        }
    }

    /// One message of the replication stream: a keepalive is an
    /// [`SourceEvent::Idle`], WAL data goes through [`Self::on_xlogdata`]
    /// (`None` while a transaction is still being assembled).
    pub(super) fn on_stream_event(
        &mut self,
        event: StreamEvent,
    ) -> Result<Option<SourceEvent>, SourceError> {
        match event {
            StreamEvent::End => Err(SourceError::Ended),
            StreamEvent::Message(ReplicationMessage::Keepalive { wal_end, reply, .. }) => {
                self.note_received(wal_end);
                Ok(Some(SourceEvent::Idle { wal_end, reply }))
            }
            StreamEvent::Message(ReplicationMessage::XLogData {
                wal_start,
                wal_end,
                send_time,
                data,
            }) => self.on_xlogdata(wal_start, wal_end, send_time, data),
        }
    }

    fn on_xlogdata(
        &mut self,
        wal_start: Lsn,
        wal_end: Lsn,
        send_time: i64,
        data: Bytes,
    ) -> Result<Option<SourceEvent>, SourceError> {
        // PostgreSQL sends 0/0 as wal_start and wal_end for every message but
        // the last of a write (Relation, Type, …): name the newest position
        // we know instead, and never let the received position drop to 0.
        let at = if wal_start == Lsn::ZERO {
            self.received
        } else {
            wal_start
        };
        self.note_received(wal_end);
        let msg =
            pgoutput::decode(data).map_err(|source| SourceError::Decode { lsn: at, source })?;
        self.on_message(msg, at, send_time)
    }

    fn on_message(
        &mut self,
        msg: LogicalMessage,
        at: Lsn,
        sent_time: i64,
    ) -> Result<Option<SourceEvent>, SourceError> {
        let out_of_order = |what: &str| SourceError::Stream {
            lsn: at,
            what: what.into(),
        };
        Ok(Some(match msg {
            LogicalMessage::Begin(b) => {
                if self.open.is_some() {
                    return Err(out_of_order("Begin inside a transaction"));
                }
                self.open = Some(Open {
                    commit_lsn: b.final_lsn,
                    txn: Txn {
                        xid: b.xid,
                        commit_time: b.commit_time,
                    },
                    next_index: 0,
                });
                SourceEvent::Begin {
                    commit_lsn: b.final_lsn,
                    xid: b.xid,
                    commit_time: b.commit_time,
                    lsn: at,
                    sent_time,
                }
            }
            LogicalMessage::Commit(c) => {
                let open = self
                    .open
                    .take()
                    .ok_or_else(|| out_of_order("Commit without Begin"))?;
                SourceEvent::Commit {
                    commit_lsn: open.commit_lsn,
                    end_lsn: c.end_lsn,
                    commit_time: open.txn.commit_time,
                }
            }
            LogicalMessage::Relation(r) => SourceEvent::Relation(self.relations.insert(r)),
            LogicalMessage::Insert(i) => {
                self.change(Op::Insert, i.relation, None, Some(i.new), at)?
            }
            LogicalMessage::Update(u) => self.change(
                Op::Update,
                u.relation,
                u.old.map(|o| match o {
                    pgoutput::OldTuple::Key(t) | pgoutput::OldTuple::Old(t) => t,
                }),
                Some(u.new),
                at,
            )?,
            LogicalMessage::Delete(d) => {
                let old = match d.old {
                    pgoutput::OldTuple::Key(t) | pgoutput::OldTuple::Old(t) => t,
                };
                self.change(Op::Delete, d.relation, Some(old), None, at)?
            }
            LogicalMessage::Message(m) if !m.transactional => {
                if self.open.is_some() {
                    // pgoutput v1 never interleaves: the reorder buffer
                    // replays a transaction whole at its commit.
                    return Err(out_of_order(
                        "non-transactional Message inside a transaction",
                    ));
                }
                SourceEvent::Message {
                    lsn: m.lsn,
                    prefix: m.prefix,
                    content: m.content,
                }
            }
            LogicalMessage::Message(m) => {
                let open = self
                    .open
                    .as_mut()
                    .ok_or_else(|| out_of_order("transactional Message outside Begin..Commit"))?;
                let pos = Position {
                    commit_lsn: open.commit_lsn,
                    index: open.next_index,
                };
                open.next_index = open.next_index.saturating_add(1);
                SourceEvent::TxnMessage {
                    pos,
                    txn: open.txn,
                    lsn: m.lsn,
                    prefix: m.prefix,
                    content: m.content,
                }
            }
            LogicalMessage::Truncate(t) => {
                let open = self
                    .open
                    .as_mut()
                    .ok_or_else(|| out_of_order("Truncate outside Begin..Commit"))?;
                let mut relations = Vec::with_capacity(t.relations.len());
                for oid in t.relations {
                    let rel = self
                        .relations
                        .require(oid)
                        .map_err(|e| SourceError::Stream {
                            lsn: at,
                            what: e.to_string(),
                        })?;
                    relations.push(rel.clone());
                }
                let pos = Position {
                    commit_lsn: open.commit_lsn,
                    index: open.next_index,
                };
                let count = relations.len() as u64;
                open.next_index = open.next_index.saturating_add(count);
                SourceEvent::Truncate {
                    pos,
                    txn: open.txn,
                    lsn: at,
                    relations,
                }
            }
            // Origins and types carry no change.
            LogicalMessage::Origin(_) | LogicalMessage::Type(_) => {
                return Ok(None);
            }
        }))
    }

    fn change(
        &mut self,
        op: Op,
        oid: pgoutput::Oid,
        old: Option<TupleData>,
        new: Option<TupleData>,
        at: Lsn,
    ) -> Result<SourceEvent, SourceError> {
        let open = self.open.as_mut().ok_or_else(|| SourceError::Stream {
            lsn: at,
            what: "row change outside Begin..Commit".into(),
        })?;
        let relation = {
            let check = |t: &TupleData, what| self.relations.require_for_tuple(oid, t, what);
            let rel = match (&new, &old) {
                (Some(t), _) => check(t, "new tuple"),
                (None, Some(t)) => check(t, "old tuple"),
                (None, None) => self.relations.require(oid),
            };
            rel.map_err(|e| SourceError::Stream {
                lsn: at,
                what: e.to_string(),
            })?
            .clone()
        };
        let pos = Position {
            commit_lsn: open.commit_lsn,
            index: open.next_index,
        };
        open.next_index = open.next_index.saturating_add(1);
        Ok(SourceEvent::Change(Change {
            pos,
            txn: open.txn,
            lsn: at,
            op,
            relation,
            old,
            new,
        }))
    }

    pub(super) fn note_received(&mut self, lsn: Lsn) {
        self.received = self.received.max(lsn);
    }
}

#[cfg(test)]
mod tests;
