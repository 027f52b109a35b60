//! The relation cache: relation OID → the latest [`Relation`] message.
//!
//! pgoutput sends a Relation message before the first change of each table in
//! a replication session, and again whenever the table's published shape
//! changes (e.g. after `ALTER TABLE`), always before the change that needs it.
//! Changes carry only the OID, so the consumer keeps this map.
//!
//! Invariants:
//! - The newest Relation message for an OID replaces the older one; entries
//!   are `Arc`s so rows already decoded keep the shape they were decoded with.
//! - One cache per replication session: the server forgets what it sent when
//!   the connection ends and re-sends Relation messages on the next session,
//!   so start a fresh cache (or [`RelationCache::clear`]) on every reconnect.
//! - A change for an OID not in the cache is an error
//!   ([`RelationError::Unknown`]), never a guess.

use std::collections::HashMap;
use std::sync::Arc;

use super::{LogicalMessage, Oid, Relation, TupleData};

/// Why a change could not be matched to a known relation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelationError {
    /// A change referred to an OID with no Relation message in this session.
    #[error(
        "change for relation oid {oid} arrived before its Relation message; pgoutput always sends the \
         Relation message first in a replication session, so messages were lost or the relation cache \
         was reset mid-session: restart replication from the last confirmed position"
    )]
    Unknown {
        /// The unknown relation OID.
        oid: Oid,
    },

    /// A tuple's cell count differs from the relation's column count.
    #[error(
        "{tuple} of relation {namespace}.{name} (oid {oid}) has {actual} columns but its Relation message \
         declared {expected}; the stream is inconsistent: restart replication from the last confirmed position"
    )]
    ColumnCountMismatch {
        /// Relation OID.
        oid: Oid,
        /// Schema name as sent (empty means `pg_catalog`).
        namespace: String,
        /// Table name.
        name: String,
        /// Which tuple (`new tuple`, `old key tuple`, `old tuple`).
        tuple: &'static str,
        /// Columns in the Relation message.
        expected: usize,
        /// Cells in the tuple.
        actual: usize,
    },
}

/// Relation OID → latest [`Relation`] message of this replication session.
#[derive(Debug, Clone, Default)]
pub struct RelationCache {
    relations: HashMap<Oid, Arc<Relation>>,
}

impl RelationCache {
    /// An empty cache, for the start of a replication session.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores `relation`, replacing any earlier entry for its OID, and returns the shared entry.
    pub fn insert(&mut self, relation: Relation) -> Arc<Relation> {
        let relation = Arc::new(relation);
        self.relations.insert(relation.oid, Arc::clone(&relation));
        relation
    }

    /// The latest Relation message for `oid`, if any.
    pub fn get(&self, oid: Oid) -> Option<&Arc<Relation>> {
        self.relations.get(&oid)
    }

    /// The latest Relation message for `oid`, or [`RelationError::Unknown`].
    pub fn require(&self, oid: Oid) -> Result<&Arc<Relation>, RelationError> {
        self.get(oid).ok_or(RelationError::Unknown { oid })
    }

    /// Like [`require`](Self::require), and also checks that `tuple` has one
    /// cell per column. `what` names the tuple in the error (`new tuple`, ...).
    pub fn require_for_tuple(
        &self,
        oid: Oid,
        tuple: &TupleData,
        what: &'static str,
    ) -> Result<&Arc<Relation>, RelationError> {
        let relation = self.require(oid)?;
        if relation.columns.len() != tuple.len() {
            return Err(RelationError::ColumnCountMismatch {
                oid,
                namespace: relation.namespace.clone(),
                name: relation.name.clone(),
                tuple: what,
                expected: relation.columns.len(),
                actual: tuple.len(),
            });
        }
        Ok(relation)
    }

    /// Feeds one decoded message through the cache: stores Relation messages,
    /// and checks that every change (Insert, Update, Delete, Truncate) refers
    /// to a known relation with tuples of the right width. Other messages pass.
    pub fn observe(&mut self, msg: &LogicalMessage) -> Result<(), RelationError> {
        match msg {
            LogicalMessage::Relation(rel) => {
                self.insert(rel.clone());
            }
            LogicalMessage::Insert(ins) => {
                self.require_for_tuple(ins.relation, &ins.new, "new tuple")?;
            }
            LogicalMessage::Update(upd) => {
                if let Some(old) = &upd.old {
                    self.require_for_tuple(upd.relation, old.tuple(), old_name(old))?;
                }
                self.require_for_tuple(upd.relation, &upd.new, "new tuple")?;
            }
            LogicalMessage::Delete(del) => {
                self.require_for_tuple(del.relation, del.old.tuple(), old_name(&del.old))?;
            }
            LogicalMessage::Truncate(t) => {
                for &oid in &t.relations {
                    self.require(oid)?;
                }
            }
            LogicalMessage::Begin(_)
            | LogicalMessage::Commit(_)
            | LogicalMessage::Origin(_)
            | LogicalMessage::Type(_)
            | LogicalMessage::Message(_) => {}
        }
        Ok(())
    }

    /// Removes `oid`'s entry, returning it.
    pub fn remove(&mut self, oid: Oid) -> Option<Arc<Relation>> {
        self.relations.remove(&oid)
    }

    /// Forgets everything, for a new replication session.
    pub fn clear(&mut self) {
        self.relations.clear();
    }

    /// Number of cached relations.
    pub fn len(&self) -> usize {
        self.relations.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.relations.is_empty()
    }
}

fn old_name(old: &super::OldTuple) -> &'static str {
    match old {
        super::OldTuple::Key(_) => "old key tuple",
        super::OldTuple::Old(_) => "old tuple",
    }
}
