//! Outbox rows in the stream: an inserted row of an `[[outbox]]` table
//! becomes one record of its transaction; updates are ignored (or warned
//! about, `on_update`), deletes publish nothing (insert-then-delete is the
//! usual pattern). A row that cannot be routed goes to the dead-letter
//! topic when one is configured, else stops the session at its
//! transaction's Commit (naming the end LSN that skips it).
//!
//! [`OutboxRows`] is the phase's state (what it warned about this session);
//! the outbox router itself is the publisher's, shared with the snapshots.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use super::RelayError;
use super::dead_letter::{Failure, Reason};
use super::publish::{Counted, Publisher};
use crate::checkpoint::TxnId;
use crate::router::Routed;
use crate::source::{Change, Op};

/// What the outbox phase warned about this session (once per table).
#[derive(Debug, Default)]
pub(super) struct OutboxRows {
    warned_updates: HashSet<String>,
    /// Tables whose unclaimed rows were logged.
    warned_unclaimed: HashSet<String>,
}

impl OutboxRows {
    /// A change of an outbox table (or of a table no section claims) in the
    /// open transaction `open`.
    pub(super) async fn on_change(
        &mut self,
        publisher: &mut Publisher,
        change: &Change,
        open: TxnId,
    ) -> Result<(), RelayError> {
        let commit_lsn = change.pos.commit_lsn;
        let (Op::Insert, Some(new)) = (change.op, &change.new) else {
            if change.op == Op::Update
                && let Err(e) = self.on_update(publisher, change)
            {
                match e {
                    RelayError::Route(e) => publisher.refuse_rest_of_transaction(e, None),
                    e => return Err(e),
                }
            }
            // Deletes (insert-then-delete is the usual outbox pattern)
            // publish nothing.
            return Ok(());
        };
        let routed = match publisher.router_mut().on_insert(
            change.relation.oid,
            new,
            commit_lsn,
            Some(change.txn.commit_time),
        ) {
            Ok(routed) => routed,
            Err(e) if publisher.has_dead_letter() => {
                let router = publisher.router();
                let salvaged = router.salvage(change.relation.oid, new);
                let row_id = router.row_id(change.relation.oid, new);
                let failure = Failure {
                    reason: Reason::Outbox(e.kind),
                    error: match row_id {
                        Some(id) => format!("{e} (row id {id})"),
                        None => e.to_string(),
                    },
                    table: e.table,
                    pos: change.pos,
                    id: salvaged.id,
                    topic: salvaged.route,
                    key: salvaged.key,
                    value: salvaged.value,
                    refused_bytes: None,
                };
                let commit_ms = crate::pg::replication::pg_us_to_unix_ms(change.txn.commit_time);
                return publisher
                    .publish_dead_letter(open, failure, Counted::Streamed { commit_ms })
                    .await;
            }
            Err(e) => {
                let row_id = publisher.router().row_id(change.relation.oid, new);
                publisher.refuse_rest_of_transaction(e, row_id);
                return Ok(());
            }
        };
        let record = match routed {
            Routed::Record(record) => record,
            Routed::Unclaimed { table } => {
                publisher
                    .metrics()
                    .rows_unclaimed
                    .fetch_add(1, Ordering::Relaxed);
                if self.warned_unclaimed.insert(table.clone()) {
                    tracing::warn!(
                        %table, lsn = %commit_lsn,
                        "the publication publishes rows of a table that no [[outbox]] section \
                         claims; they are not published (add the table to the configuration, \
                         or remove it from the publication; logged once per table per session)"
                    );
                }
                return Ok(());
            }
            Routed::Nothing | Routed::IgnoredUpdate { .. } => return Ok(()),
        };
        let commit_ms = crate::pg::replication::pg_us_to_unix_ms(change.txn.commit_time);
        publisher
            .publish_row(
                &change.relation,
                open,
                change.pos,
                &record,
                Counted::Streamed { commit_ms },
            )
            .await
    }

    fn on_update(&mut self, publisher: &mut Publisher, change: &Change) -> Result<(), RelayError> {
        let lsn = change.pos.commit_lsn;
        if let Routed::IgnoredUpdate { table, warn } =
            publisher.router_mut().on_update(change.relation.oid, lsn)?
        {
            publisher
                .metrics()
                .updates_ignored
                .fetch_add(1, Ordering::Relaxed);
            if warn && self.warned_updates.insert(table.clone()) {
                tracing::warn!(
                    %table, %lsn,
                    "an outbox row was updated; updates are not published (on_update = \"warn\"; \
                     logged once per table per session)"
                );
            }
        }
        Ok(())
    }
}
