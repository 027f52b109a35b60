//! `[[message]]`: transactional logical decoding messages published as
//! records of their transaction (see [`crate::router::message`]).
//!
//! A routed message is a change of its transaction like a row: it counts in
//! the transaction's checkpoint entry, so the slot is confirmed past it only
//! once Kafka acknowledged its record, and under `exactly_once` the record
//! is in the Kafka transaction that holds the rest of its PostgreSQL
//! transaction. A message that cannot be routed stops the connector at its
//! transaction's Commit (naming the end LSN that skips it), as an outbox row
//! does. A *non-transactional* message with a routed prefix is not part of
//! any transaction (PostgreSQL decodes it at once, even if the writer's
//! transaction rolls back): it is ignored, with one warning per prefix per
//! session.

use std::collections::HashSet;

use bytes::Bytes;

use super::RelayError;
use super::dead_letter::{Failure, Reason};
use super::publish::{Counted, Publisher};
use crate::Lsn;
use crate::router::message::{MessageAt, MessageRouter};
use crate::source::{Position, Txn};

/// The session's message routes and what it warned about.
#[derive(Debug)]
pub(super) struct Messages {
    router: MessageRouter,
    warned_non_transactional: HashSet<String>,
}

impl Messages {
    pub(super) fn new(config: &crate::config::Config) -> Messages {
        Messages {
            router: MessageRouter::new(config),
            warned_non_transactional: HashSet::new(),
        }
    }

    /// A non-transactional message with `prefix` at `lsn`: warns once per
    /// prefix when a `[[message]]` section would route it.
    pub(super) fn non_transactional(&mut self, prefix: &str, lsn: Lsn) {
        if self.router.routes(prefix) && self.warned_non_transactional.insert(prefix.to_owned()) {
            tracing::warn!(
                prefix, %lsn,
                "a non-transactional logical decoding message (pg_logical_emit_message(false, …)) \
                 has a prefix a [[message]] section routes; it is ignored: it belongs to no \
                 transaction (PostgreSQL decodes it at once, even when the writer's transaction \
                 rolls back), so it cannot be published with a transaction's guarantees. Write \
                 it with pg_logical_emit_message(true, …) (logged once per prefix per session)"
            );
        }
    }
}

impl Messages {
    /// A transactional message of the open transaction at `pos`: publishes
    /// its record when a section routes its prefix.
    pub(super) async fn on_txn_message(
        &mut self,
        publisher: &mut Publisher,
        pos: Position,
        txn: Txn,
        lsn: Lsn,
        prefix: &str,
        content: &Bytes,
    ) -> Result<(), RelayError> {
        let open = publisher.open_txn(pos.commit_lsn)?;
        let commit_ms = crate::pg::replication::pg_us_to_unix_ms(txn.commit_time);
        let at = MessageAt {
            commit_lsn: pos.commit_lsn,
            index: pos.index,
            xid: txn.xid,
            commit_ms,
            lsn,
        };
        if publisher.refusing() {
            // Stopping at this transaction's Commit: publish nothing more.
            return Ok(());
        }
        let record = match self.router.on_message(at, prefix, content) {
            Ok(Some(record)) => record,
            Ok(None) => return Ok(()),
            Err(e) if publisher.has_dead_letter() => {
                // The dead-letter record takes the message's place.
                let failure = Failure {
                    reason: Reason::Outbox(e.kind),
                    error: e.to_string(),
                    table: e.table,
                    pos,
                    id: None,
                    topic: self.router.topic_template(prefix),
                    key: None,
                    value: Some(content.clone()),
                    refused_bytes: None,
                };
                return publisher
                    .publish_dead_letter(open, failure, Counted::Streamed { commit_ms })
                    .await;
            }
            Err(e) => {
                publisher.refuse_rest_of_transaction(e, None);
                return Ok(());
            }
        };
        publisher
            .publish(open, pos, &record, Counted::Streamed { commit_ms })
            .await
    }
}
