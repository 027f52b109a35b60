//! The start-up checks that `walrelay run` and `walrelay check` share.
//!
//! Invariant: **check == run.** Every condition under which `run` refuses to
//! start is one function here. `run` (`relay::session`) calls it and stops
//! with its error; `check` (`preflight`) calls the same function and prints
//! the same words as a FAIL line. So `check` fails exactly when `run` would
//! refuse, and says it the same way.
//!
//! It speaks in its own error type ([`CheckError`]) and imports nothing of
//! `relay`: the relay turns a `CheckError` into its own error, and explains
//! the walsender's errors itself.
//!
//! Nothing here changes the server. What `run` may change (create the
//! publication, add tables to it, switch on `publish_via_partition_root`) is
//! returned as a [`PublicationPlan`] — only after checking that the role is
//! allowed to do it — which `run` applies and `check` describes.
//!
//! Silent loss is refused: a publication that does not publish inserts, a row
//! filter, or a column list without a column the route reads would let the
//! slot move past outbox rows that were never sent.

use postgres_protocol::escape::escape_identifier as ident;
use tokio_postgres::Client;

use crate::Lsn;
use crate::config::{Config, OutboxConfig, PostgresConfig, SnapshotMode, TableConfig};
use crate::offsets::{self, SlotPosition, StartDecision, StoredOffset};
use crate::pg::catalog::{self, CapturedTable, CatalogError, RowEstimate, SlotState};

/// Why start-up cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The server or its objects are not set up the way walrelay needs.
    #[error("{what}. What to do: {fix}")]
    Setup { what: String, fix: String },
    /// Starting would skip or re-read events: the slot against the offset store.
    #[error("refusing to start: {reason}. What to do: {hint}")]
    Refused { reason: String, hint: String },
    /// A catalog query failed (possibly transient).
    #[error(transparent)]
    Catalog(#[from] CatalogError),
}

impl CheckError {
    fn setup(what: impl Into<String>, fix: impl Into<String>) -> CheckError {
        CheckError::Setup {
            what: what.into(),
            fix: fix.into(),
        }
    }

    /// What is wrong, in the words `run` uses.
    pub fn problem(&self) -> String {
        match self {
            CheckError::Setup { what, .. } => what.clone(),
            CheckError::Refused { reason, .. } => reason.clone(),
            CheckError::Catalog(e) => e.to_string(),
        }
    }

    /// What to do about it.
    pub fn fix(&self) -> String {
        match self {
            CheckError::Setup { fix, .. } => fix.clone(),
            CheckError::Refused { hint, .. } => hint.clone(),
            CheckError::Catalog(_) => "see the error".into(),
        }
    }
}

/// `wal_level` must be `logical`.
pub async fn wal_level(client: &Client) -> Result<String, CheckError> {
    let level = catalog::setting(client, "wal_level").await?;
    if level != "logical" {
        return Err(CheckError::setup(
            format!("PostgreSQL runs with wal_level = {level}, logical decoding needs 'logical'"),
            "set wal_level = logical in postgresql.conf and restart PostgreSQL",
        ));
    }
    Ok(level)
}

/// The role needs the REPLICATION attribute (or to be a superuser).
pub async fn replication_privilege(client: &Client, user: &str) -> Result<String, CheckError> {
    let row = client
        .query_one(
            "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading the role's attributes",
            source,
        })?;
    if !row.get::<_, bool>(0) {
        return Err(CheckError::setup(
            format!("role {user} lacks the REPLICATION attribute"),
            format!(
                "run as a superuser: ALTER ROLE {} REPLICATION;",
                ident(user)
            ),
        ));
    }
    Ok(format!("role {user} may replicate"))
}

/// With `[heartbeat] interval` set, the role must be allowed to EXECUTE
/// `pg_logical_emit_message` (PUBLIC may, unless revoked). The fix names the
/// signature this server declares (it gained a fourth argument in 17).
pub async fn heartbeat_privilege(client: &Client, user: &str) -> Result<String, CheckError> {
    match catalog::emit_message_privilege(client).await? {
        Some((function, true)) => Ok(format!("role {user} may execute {function}")),
        Some((function, false)) => Err(CheckError::setup(
            format!(
                "role {user} may not execute {function}, which [heartbeat] interval calls to \
                 write heartbeats"
            ),
            format!(
                "run as a superuser: GRANT EXECUTE ON FUNCTION pg_catalog.{} TO {}; (or \
                 remove [heartbeat] interval)",
                function.trim_start_matches("pg_catalog."),
                ident(user)
            ),
        )),
        None => Err(CheckError::setup(
            "this server has no pg_logical_emit_message(boolean, text, text), which [heartbeat] \
             interval calls",
            "use PostgreSQL 14 or newer, or remove [heartbeat] interval",
        )),
    }
}

/// Payload column types whose text form is passed through unchanged.
const PAYLOAD_TYPES: &[&str] = &["jsonb", "json", "text", "bytea"];

/// The columns an `[[outbox]]` route reads from each row (what the router
/// binds): id, aggregate id, payload, topic template columns, header
/// and envelope columns, the timestamp and trace context columns, and with
/// `format = "cloudevents"` the type, `dataschema` and extension columns,
/// without duplicates.
pub fn route_columns(outbox: &OutboxConfig) -> Vec<&str> {
    let mut columns: Vec<&str> = vec![
        &outbox.id_column,
        &outbox.aggregate_id_column,
        &outbox.payload_column,
    ];
    columns.extend(outbox.topic.columns());
    columns.extend(outbox.header_placements().map(|(column, _)| column));
    columns.extend(outbox.envelope_placements().map(|(column, _)| column));
    columns.extend(outbox.timestamp_column.as_deref().filter(|c| !c.is_empty()));
    columns.extend(outbox.trace_context_column.as_deref());
    if outbox.format == crate::config::OutboxFormat::CloudEvents {
        let ce = &outbox.cloudevents;
        columns.push(&outbox.type_column);
        columns.extend(ce.dataschema_column.as_deref());
        columns.extend(ce.extensions.values().map(String::as_str));
    }
    let mut seen = Vec::with_capacity(columns.len());
    for c in columns {
        if !seen.contains(&c) {
            seen.push(c);
        }
    }
    seen
}

/// The outbox table exists, is an ordinary or partitioned table, has every
/// column the route reads, and a payload type walrelay passes through.
/// Returns the table and a one-line description.
pub async fn outbox_table(
    client: &Client,
    outbox: &OutboxConfig,
) -> Result<(CapturedTable, String), CheckError> {
    let (schema, name) = (&outbox.table.schema, &outbox.table.name);
    let Some(table) = catalog::relation(client, schema, name).await? else {
        return Err(CheckError::setup(
            format!("outbox table {schema}.{name} does not exist"),
            "create it (see docs/configuration.md for the expected columns) or fix outbox.table",
        ));
    };
    if !matches!(table.relkind, 'r' | 'p') {
        return Err(CheckError::setup(
            format!(
                "outbox table {schema}.{name} is {}, not a table: logical decoding only sees rows written to tables",
                table.kind()
            ),
            "point outbox.table at the (ordinary or partitioned) table the application inserts outbox rows into",
        ));
    }
    let columns = catalog::table_columns(client, schema, name).await?;
    let missing: Vec<&str> = route_columns(outbox)
        .into_iter()
        .filter(|c| !columns.iter().any(|(n, _)| n == c))
        .collect();
    if !missing.is_empty() {
        return Err(CheckError::setup(
            format!(
                "outbox table {schema}.{name} has no column(s) {} that its [[outbox]] section uses",
                missing.join(", ")
            ),
            "add the columns or change the *_column settings (and topic/header_columns/envelope_columns) of this [[outbox]] section",
        ));
    }
    let payload_type = columns
        .iter()
        .find(|(n, _)| *n == outbox.payload_column)
        .map(|(_, t)| t.as_str())
        .unwrap_or_default();
    if !PAYLOAD_TYPES.contains(&payload_type) && !payload_type.starts_with("character varying") {
        return Err(CheckError::setup(
            format!(
                "payload column {} of outbox table {schema}.{name} has type {payload_type}",
                outbox.payload_column
            ),
            "use jsonb, json, text, varchar or bytea for the payload",
        ));
    }
    let partitions = if table.relkind == 'p' {
        format!(", partitioned ({} partitions)", table.partitions.len())
    } else {
        String::new()
    };
    let format = match outbox.format {
        crate::config::OutboxFormat::Raw => String::new(),
        crate::config::OutboxFormat::CloudEvents => format!(
            ", CloudEvents ({})",
            match outbox.cloudevents.mode {
                crate::config::CloudEventsMode::Binary => "binary",
                crate::config::CloudEventsMode::Structured => "structured",
            }
        ),
    };
    let trace = outbox
        .trace_context_column
        .as_deref()
        .map(|c| format!(", trace context from {c}"))
        .unwrap_or_default();
    let detail = format!(
        "{} columns, payload {payload_type}{partitions}{format}{trace}",
        columns.len()
    );
    Ok((table, detail))
}

/// What `run` will do to the publication: nothing, or these statements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicationPlan {
    pub publication: String,
    /// SQL to run, in order; empty when the publication is as needed.
    pub statements: Vec<String>,
    /// The publication exists already (statements change it).
    pub exists: bool,
    /// No table is captured (only `[[message]]` sections): the publication
    /// only has to exist, since logical messages are not filtered by it.
    pub messages_only: bool,
    /// With `messages_only`: the tables the existing publication publishes
    /// anyway, whose rows walrelay receives and drops.
    pub unclaimed: Vec<String>,
}

impl PublicationPlan {
    /// For `check`: what is there, or what `run` will do.
    pub fn describe(&self) -> String {
        if self.statements.is_empty() && self.messages_only && !self.unclaimed.is_empty() {
            format!(
                "{} also publishes table(s) {} that no section claims: with only [[message]] \
                 sections walrelay receives their rows and drops them (counted in \
                 walrelay_rows_unclaimed_total, one warning per table); give walrelay a \
                 publication of its own, or remove them from this one",
                self.publication,
                self.unclaimed.join(", ")
            )
        } else if self.statements.is_empty() && self.messages_only {
            format!(
                "{} exists (only [[message]] sections: logical messages are not filtered by \
                 publication, so no table needs to be in it)",
                self.publication
            )
        } else if self.statements.is_empty() {
            format!("{} covers the captured tables", self.publication)
        } else if self.exists {
            format!("run will change {}: {}", self.publication, self.sql())
        } else {
            format!(
                "{} does not exist yet; run will create it: {}",
                self.publication,
                self.sql()
            )
        }
    }

    fn sql(&self) -> String {
        self.statements.join("; ")
    }

    /// Runs the statements (`run` only).
    pub async fn apply(&self, client: &Client) -> Result<(), CatalogError> {
        for sql in &self.statements {
            client
                .batch_execute(sql)
                .await
                .map_err(|source| CatalogError::Query {
                    context: if self.exists {
                        "changing the publication"
                    } else {
                        "creating the publication"
                    },
                    source,
                })?;
            tracing::info!(publication = %self.publication, %sql, "publication changed");
        }
        Ok(())
    }
}

fn table_list(tables: &[&CapturedTable]) -> String {
    tables
        .iter()
        .map(|t| format!("{}.{}", ident(&t.schema), ident(&t.name)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The publication exists (or may be created), covers every outbox table,
/// publishes inserts, hides no outbox row (row filter, column list), and
/// publishes partitioned tables under their root's name. Creating or
/// changing it is planned only when `postgres.create_publication` allows it
/// and the role owns what it must (the tables to add, the publication).
pub async fn publication(
    client: &Client,
    pg: &PostgresConfig,
    outboxes: &[(&OutboxConfig, &CapturedTable)],
    captured: &[&CapturedTable],
) -> Result<PublicationPlan, CheckError> {
    let name = &pg.publication;
    let p = ident(name);
    // The columns each table's rows must carry: an outbox route's, or none
    // in particular for a [[table]] (its events carry what is published).
    let tables: Vec<(Vec<&str>, &CapturedTable)> = outboxes
        .iter()
        .map(|(o, t)| (route_columns(o), *t))
        .chain(captured.iter().map(|t| (Vec::new(), *t)))
        .collect();
    let all: Vec<&CapturedTable> = tables.iter().map(|(_, t)| *t).collect();
    let messages_only = all.is_empty();
    let Some(publication) = catalog::publication(client, name).await? else {
        // With no table (only [[message]] sections) the publication is
        // empty: pgoutput sends logical messages whatever it publishes.
        let sql = if messages_only {
            format!("CREATE PUBLICATION {p} WITH (publish_via_partition_root = true)")
        } else {
            format!(
                "CREATE PUBLICATION {p} FOR TABLE {} WITH (publish_via_partition_root = true)",
                table_list(&all)
            )
        };
        if !pg.create_publication {
            return Err(CheckError::setup(
                format!("publication {name} does not exist"),
                format!("create it with `{sql}`, or set postgres.create_publication = true"),
            ));
        }
        let mut not_owned = Vec::new();
        for t in &all {
            if !catalog::owns_relation(client, t.oid).await? {
                not_owned.push(format!("{}.{}", t.schema, t.name));
            }
        }
        let may_create = catalog::may_create_in_database(client).await?;
        if !not_owned.is_empty() || !may_create {
            let why = if not_owned.is_empty() {
                format!("has no CREATE privilege on database {}", pg.database)
            } else {
                format!("does not own table {}", not_owned.join(", "))
            };
            return Err(CheckError::setup(
                format!(
                    "publication {name} does not exist, and role {} cannot create it: it {why}",
                    pg.user
                ),
                format!(
                    "run as the tables' owner or a superuser: `{sql}; ALTER PUBLICATION {p} OWNER TO {}`",
                    ident(&pg.user)
                ),
            ));
        }
        return Ok(PublicationPlan {
            publication: name.clone(),
            statements: vec![sql],
            exists: false,
            messages_only,
            unclaimed: Vec::new(),
        });
    };
    if !messages_only && !publication.inserts {
        return Err(CheckError::setup(
            format!(
                "publication {name} does not publish inserts (its publish setting lacks 'insert'), so outbox rows would never be sent"
            ),
            format!(
                "run `ALTER PUBLICATION {p} SET (publish = 'insert, update, delete, truncate')` as its owner ({})",
                publication.owner
            ),
        ));
    }
    if !captured.is_empty() && !publication.updates_and_deletes {
        return Err(CheckError::setup(
            format!(
                "publication {name} does not publish updates and deletes, so the [[table]] \
                 tables' updates and deletes would never be sent"
            ),
            format!(
                "run `ALTER PUBLICATION {p} SET (publish = 'insert, update, delete, truncate')` as its owner ({})",
                publication.owner
            ),
        ));
    }
    let mut missing = Vec::new();
    let mut needs_root = Vec::new();
    for (needed, table) in &tables {
        let table = *table;
        let shown = format!("{}.{}", table.schema, table.name);
        let qualified = format!("{}.{}", ident(&table.schema), ident(&table.name));
        let m = catalog::membership(client, &publication, table.oid).await?;
        if !m.covered() {
            missing.push(table);
            continue;
        }
        let readd = format!(
            "`ALTER PUBLICATION {p} DROP TABLE {qualified}; ALTER PUBLICATION {p} ADD TABLE {qualified}` as its owner ({})",
            publication.owner
        );
        if let Some(filter) = &m.row_filter {
            return Err(CheckError::setup(
                format!(
                    "publication {name} has a row filter WHERE {filter} on table {shown}: outbox rows it filters out would never be sent"
                ),
                format!("remove the filter: {readd}"),
            ));
        }
        if let Some(columns) = &m.columns {
            let dropped: Vec<&str> = needed
                .iter()
                .copied()
                .filter(|c| !columns.iter().any(|have| have == c))
                .collect();
            if !dropped.is_empty() {
                return Err(CheckError::setup(
                    format!(
                        "publication {name} has a column list ({}) on table {shown} without column(s) {} that its [[outbox]] section uses",
                        columns.join(", "),
                        dropped.join(", ")
                    ),
                    format!("publish all columns: {readd}"),
                ));
            }
        }
        // With publish_via_partition_root, changes of a partition arrive
        // under the name of its published ancestor, which is not the table
        // walrelay was told to capture.
        let via_ancestor = match &m.listed {
            Some((oid, _, _)) => *oid != table.oid,
            None => !m.ancestors.is_empty(),
        };
        if publication.via_root && via_ancestor {
            let root = m
                .listed
                .as_ref()
                .filter(|l| l.0 != table.oid)
                .or(m.ancestors.last())
                .map(|(_, s, n)| format!("{s}.{n}"))
                .unwrap_or_default();
            return Err(CheckError::setup(
                format!(
                    "publication {name} publishes partition {shown} under its partition root {root} (publish_via_partition_root = true), so its rows would not arrive as {shown}"
                ),
                format!("capture the root instead: outbox.table = \"{root}\""),
            ));
        }
        if table.relkind == 'p' && !publication.via_root {
            needs_root.push(shown);
        }
    }
    let mut statements = Vec::new();
    if !missing.is_empty() {
        let sql = format!("ALTER PUBLICATION {p} ADD TABLE {}", table_list(&missing));
        let shown = missing
            .iter()
            .map(|t| format!("{}.{}", t.schema, t.name))
            .collect::<Vec<_>>()
            .join(", ");
        if !pg.create_publication {
            return Err(CheckError::setup(
                format!("publication {name} does not cover {shown}"),
                format!("run `{sql}`, or set postgres.create_publication = true"),
            ));
        }
        if publication.all_tables {
            // Unreachable in practice: FOR ALL TABLES covers everything.
            return Err(CheckError::setup(
                format!("publication {name} is FOR ALL TABLES but does not cover {shown}"),
                "check that the tables are ordinary tables in this database",
            ));
        }
        let mut not_owned = Vec::new();
        for t in &missing {
            if !catalog::owns_relation(client, t.oid).await? {
                not_owned.push(format!("{}.{}", t.schema, t.name));
            }
        }
        if !publication.owned || !not_owned.is_empty() {
            let why = if publication.owned {
                format!("does not own table {}", not_owned.join(", "))
            } else {
                format!("does not own the publication (owner {})", publication.owner)
            };
            return Err(CheckError::setup(
                format!(
                    "publication {name} does not cover {shown}, and role {} cannot add it: it {why}",
                    pg.user
                ),
                format!("run `{sql}` as the owner or a superuser"),
            ));
        }
        statements.push(sql);
    }
    if !needs_root.is_empty() {
        let sql = format!("ALTER PUBLICATION {p} SET (publish_via_partition_root = true)");
        let what = format!(
            "publication {name} publishes the partitions of partitioned table {} under their own names (publish_via_partition_root = false), so their rows would not arrive as the outbox table",
            needs_root.join(", ")
        );
        if !pg.create_publication {
            return Err(CheckError::setup(
                what,
                format!("run `{sql}`, or set postgres.create_publication = true"),
            ));
        }
        if !publication.owned {
            return Err(CheckError::setup(
                format!(
                    "{what}; role {} cannot change it: it does not own the publication (owner {})",
                    pg.user, publication.owner
                ),
                format!("run `{sql}` as the owner or a superuser"),
            ));
        }
        statements.push(sql);
    }
    let unclaimed = if !messages_only {
        Vec::new()
    } else if publication.all_tables {
        vec!["every table (FOR ALL TABLES)".to_owned()]
    } else {
        let mut tables = catalog::published_tables(client, name).await?;
        const SHOWN: usize = 10;
        if tables.len() > SHOWN {
            let more = tables.len() - SHOWN;
            tables.truncate(SHOWN);
            tables.push(format!("and {more} more"));
        }
        tables
    };
    Ok(PublicationPlan {
        publication: name.clone(),
        statements,
        exists: true,
        messages_only,
        unclaimed,
    })
}

/// The slot does not exist: `Ok` means `run` will create it. Refused when the
/// offset store remembers a position (the slot was dropped: what was
/// committed since was never streamed), unless the operator accepted that.
pub fn missing_slot(
    pg: &PostgresConfig,
    stored: Option<&StoredOffset>,
    accept_slot_position: bool,
) -> Result<(), CheckError> {
    if let Some(stored) = stored
        && !accept_slot_position
    {
        return Err(CheckError::Refused {
            reason: format!(
                "replication slot {:?} does not exist, but the offset store says this connector had published up to {}: the slot was dropped, and changes since then were never streamed",
                pg.slot, stored.lsn
            ),
            hint: "in this order: start once with --accept-slot-position (walrelay creates the slot and names the range it never streamed), then reconcile that range with walrelay republish; reconciling first loses what commits in between (see docs/operations.md, \"Lost slot\")".into(),
        });
    }
    if !pg.create_slot {
        return Err(CheckError::setup(
            format!("replication slot {:?} does not exist", pg.slot),
            format!(
                "set postgres.create_slot = true, or create it: SELECT pg_create_logical_replication_slot('{}', 'pgoutput');",
                pg.slot
            ),
        ));
    }
    Ok(())
}

/// What `run` does about the slot and the initial snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotPlan {
    /// Stream from the existing slot ([`start_position`] says from where).
    Resume,
    /// Create the slot (no snapshot) and stream from its creation.
    CreateAndStream,
    /// Create the slot with an exported snapshot, publish the outbox tables'
    /// rows as of it, then stream (`initial_only`: stop). `drop_first`: a
    /// slot of that name exists and is dropped first (walrelay's own slot of
    /// an interrupted snapshot, or a lost slot under `when_needed`).
    ///
    /// `replaces_stream_at`: under `when_needed`, the stored offset the
    /// stream stopped at when its slot went missing or lost. The new
    /// snapshot holds the rows that exist at its consistent point, but what
    /// happened in between is gone: a row inserted and deleted (an outbox
    /// row cleaned up), and every update or delete of a `[[table]]`. That
    /// range is an accepted gap, stored and shown like one.
    Snapshot {
        drop_first: bool,
        why: String,
        replaces_stream_at: Option<String>,
    },
    /// `initial_only` with nothing left to do.
    NothingToDo { why: String },
}

/// Before a snapshot is taken again because the slot is lost: refused when
/// the lost slot was the last snapshot's, invalidated by PostgreSQL 18's
/// `idle_replication_slot_timeout` before streaming began (the offset store
/// holds the snapshot `completed` and no position past its consistent
/// point), and the setting (`idle_limit`, as `SHOW` prints it) is still on:
/// a snapshot's slot stays inactive until the snapshot is in Kafka, so the
/// next one would be invalidated the same way, again and again.
pub fn snapshot_outlived_idle_timeout(
    stored: Option<&StoredOffset>,
    slot: Option<&SlotState>,
    slot_name: &str,
    idle_limit: &str,
) -> Result<(), CheckError> {
    let idle_on = !matches!(idle_limit.trim(), "" | "0");
    let by_idle_timeout =
        slot.is_some_and(|s| s.invalidation_reason.as_deref() == Some("idle_timeout"));
    let never_streamed = stored.is_some_and(|s| {
        s.snapshot.as_ref().is_some_and(|p| {
            p.state == crate::offsets::SnapshotState::Completed
                && p.consistent_point
                    .as_deref()
                    .and_then(|c| c.parse::<Lsn>().ok())
                    == Some(s.lsn)
        })
    });
    if idle_on && by_idle_timeout && never_streamed {
        return Err(CheckError::setup(
            format!(
                "replication slot {slot_name:?} was invalidated by idle_replication_slot_timeout \
                 ({idle_limit}) before streaming from its snapshot began: a snapshot's slot stays \
                 inactive until every snapshot row is in Kafka, and this snapshot took longer, so \
                 taking it again would end the same way"
            ),
            "set idle_replication_slot_timeout = 0, or well above how long the snapshot takes \
             (its `snapshot progress` log lines), in postgresql.conf and reload \
             (SELECT pg_reload_conf()); the next start takes the snapshot again",
        ));
    }
    Ok(())
}

/// Decides [`SlotPlan`] from the snapshot mode (`None`: unset), the stored
/// offset and the slot. Refused: a mode that asks for a snapshot with a slot
/// walrelay did not create for it (a snapshot can only be aligned with a
/// slot created with an exported snapshot), and what [`missing_slot`]
/// refuses.
pub fn slot_plan(
    mode: Option<SnapshotMode>,
    stored: Option<&StoredOffset>,
    slot: Option<&SlotState>,
    pg: &PostgresConfig,
    accept_slot_position: bool,
) -> Result<SlotPlan, CheckError> {
    let wants_snapshot = mode != Some(SnapshotMode::NoData);
    let interrupted = stored.is_some_and(|s| s.snapshot_interrupted() && s.slot == pg.slot);
    let needs_create = |why: String| {
        if pg.create_slot {
            Ok(())
        } else {
            Err(CheckError::setup(
                format!("{why}, but postgres.create_slot = false"),
                "set postgres.create_slot = true (the snapshot needs the slot walrelay creates \
                 with it), or set [snapshot] mode = \"no_data\"",
            ))
        }
    };
    if interrupted && wants_snapshot {
        let why = "the previous snapshot did not complete (the offset store says it was \
                   running); its exported snapshot is gone, so it is taken again from the start"
            .to_owned();
        needs_create(why.clone())?;
        return Ok(SlotPlan::Snapshot {
            drop_first: slot.is_some(),
            why,
            replaces_stream_at: None,
        });
    }
    // Under no_data an interrupted snapshot is simply not resumed.
    let stored = stored.filter(|_| !interrupted);
    let name = |m: Option<SnapshotMode>| m.map_or("initial", SnapshotMode::as_str);
    match (stored, slot) {
        (None, None) => {
            if wants_snapshot {
                let why =
                    "a new connector (no stored offset, no slot) snapshots its tables".to_owned();
                needs_create(why.clone())?;
                Ok(SlotPlan::Snapshot {
                    drop_first: false,
                    why,
                    replaces_stream_at: None,
                })
            } else {
                missing_slot(pg, None, accept_slot_position)?;
                Ok(SlotPlan::CreateAndStream)
            }
        }
        (None, Some(_)) => match mode {
            None | Some(SnapshotMode::NoData) => Ok(SlotPlan::Resume),
            Some(m) => Err(CheckError::Refused {
                reason: format!(
                    "[snapshot] mode = \"{}\" asks for a snapshot, but replication slot {:?} exists \
                     already and no offset is stored: a snapshot can only be aligned with a slot \
                     walrelay creates itself (with an exported snapshot)",
                    name(Some(m)),
                    pg.slot
                ),
                hint: format!(
                    "drop the slot (SELECT pg_drop_replication_slot('{}')) so walrelay creates it \
                     with a snapshot, or set [snapshot] mode = \"no_data\" to stream from the \
                     slot's position without one",
                    pg.slot.replace('\'', "''")
                ),
            }),
        },
        (Some(_), _) if mode == Some(SnapshotMode::InitialOnly) => Ok(SlotPlan::NothingToDo {
            why: "the offset store says this connector already took its snapshot (or streams \
                  already); initial_only has nothing to do"
                .into(),
        }),
        (Some(stored), None) => {
            if mode == Some(SnapshotMode::WhenNeeded) {
                let why = format!(
                    "replication slot {:?} is missing (the offset store is at {}); when_needed \
                     snapshots again",
                    pg.slot, stored.lsn
                );
                needs_create(why.clone())?;
                return Ok(SlotPlan::Snapshot {
                    drop_first: false,
                    why,
                    replaces_stream_at: Some(stored.lsn.to_string()),
                });
            }
            missing_slot(pg, Some(stored), accept_slot_position)?;
            Ok(SlotPlan::CreateAndStream)
        }
        (Some(stored), Some(slot)) => {
            if mode == Some(SnapshotMode::WhenNeeded) && slot.wal_status.as_deref() == Some("lost")
            {
                let why = format!(
                    "replication slot {:?} is lost (PostgreSQL removed WAL it needed); \
                     when_needed drops it and snapshots again",
                    pg.slot
                );
                needs_create(why.clone())?;
                return Ok(SlotPlan::Snapshot {
                    drop_first: true,
                    why,
                    replaces_stream_at: Some(stored.lsn.to_string()),
                });
            }
            Ok(SlotPlan::Resume)
        }
    }
}

/// What the role lacks to read `table` (`USAGE` on its schema, `SELECT` on
/// it), with the `GRANT`s that fix it.
#[derive(Debug)]
pub struct MissingReadGrants {
    pub user: String,
    /// e.g. `SELECT on public.outbox`.
    pub missing: Vec<String>,
    /// The exact statements to run.
    pub grants: Vec<String>,
}

/// Whether the role may read `table` (a partitioned table is read through
/// its root, so the partitions need nothing): `None` when it may.
pub async fn missing_read_grants(
    client: &Client,
    table: &CapturedTable,
) -> Result<Option<MissingReadGrants>, CheckError> {
    let row = client
        .query_one(
            "SELECT current_user::text, has_schema_privilege(c.relnamespace, 'USAGE'), \
                    has_table_privilege(c.oid, 'SELECT') \
             FROM pg_class c WHERE c.oid = $1::oid",
            &[&table.oid],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading the role's privileges on the outbox table",
            source,
        })?;
    let (user, usage, select): (String, bool, bool) = (row.get(0), row.get(1), row.get(2));
    let (schema, name) = (ident(&table.schema), ident(&table.name));
    let role = ident(&user);
    let mut grants = Vec::new();
    let mut missing = Vec::new();
    if !usage {
        missing.push(format!("USAGE on schema {}", table.schema));
        grants.push(format!("GRANT USAGE ON SCHEMA {schema} TO {role};"));
    }
    if !select {
        missing.push(format!("SELECT on {}.{}", table.schema, table.name));
        grants.push(format!("GRANT SELECT ON {schema}.{name} TO {role};"));
    }
    Ok((!missing.is_empty()).then_some(MissingReadGrants {
        user,
        missing,
        grants,
    }))
}

/// The role may read `table` for the snapshot. Streaming needs no read
/// grant (pgoutput reads WAL, not the table), so this is checked only when
/// a snapshot is planned; the fix is the exact `GRANT` to run.
pub async fn snapshot_privileges(client: &Client, table: &CapturedTable) -> Result<(), CheckError> {
    let Some(m) = missing_read_grants(client, table).await? else {
        return Ok(());
    };
    Err(CheckError::setup(
        format!(
            "role {} lacks {}, which the initial snapshot needs to read outbox table {}.{}",
            m.user,
            m.missing.join(" and "),
            table.schema,
            table.name
        ),
        format!(
            "run as the table's owner or a superuser: {} (or set [snapshot] mode = \"no_data\" \
             to stream without a snapshot)",
            m.grants.join(" ")
        ),
    ))
}

/// The snapshot can read `table` in an order: the `snapshot_order_by`
/// columns of its `[[outbox]]` section are columns the snapshot publishes
/// (not generated), or, when none are set, the table has a primary key.
/// Checked before `run` stores the running marker and creates the slot, so
/// a table the snapshot cannot order refuses the start instead of failing
/// the snapshot it began.
pub async fn snapshot_order(
    client: &Client,
    outbox: &OutboxConfig,
    table: &CapturedTable,
) -> Result<(), CheckError> {
    let rows = client
        .query(
            "SELECT a.attname::text, a.attgenerated <> '', \
                    EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = a.attrelid \
                            AND i.indisprimary AND a.attnum = ANY (i.indkey::int2[])) \
             FROM pg_attribute a \
             WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            &[&table.oid],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading the table's columns and primary key",
            source,
        })?;
    let columns: Vec<(String, bool, bool)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let shown = format!("{}.{}", table.schema, table.name);
    if outbox.snapshot_order_by.is_empty() {
        if !columns.iter().any(|(_, _, in_pk)| *in_pk) {
            return Err(CheckError::setup(
                format!(
                    "outbox table {shown} has no primary key, so the initial snapshot has no order \
                     to read it in"
                ),
                "add a primary key, or set snapshot_order_by in its [[outbox]] section (the \
                 order of one aggregate's snapshot events), or set [snapshot] mode = \"no_data\"",
            ));
        }
        return Ok(());
    }
    for column in &outbox.snapshot_order_by {
        let usable = columns
            .iter()
            .any(|(name, generated, _)| name == column && !generated);
        if !usable {
            let published: Vec<&str> = columns
                .iter()
                .filter(|(_, generated, _)| !generated)
                .map(|(name, _, _)| name.as_str())
                .collect();
            return Err(CheckError::setup(
                format!(
                    "snapshot_order_by column {column:?} is not a column of outbox table {shown} \
                     (or is generated)"
                ),
                format!(
                    "fix snapshot_order_by of its [[outbox]] section; the table's columns are: {}",
                    published.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// A [`RowEstimate`] for `check`: `~1,234`, `unknown (never analyzed)`, or
/// `~1,234+ (…)` when some partitions were never analyzed.
pub fn describe_estimate(e: &RowEstimate) -> String {
    if e.relations > 0 && e.unknown == e.relations {
        "unknown (never vacuumed or analyzed)".into()
    } else if e.unknown > 0 {
        format!(
            "~{}+ ({} of {} partitions never vacuumed or analyzed)",
            thousands(e.rows),
            e.unknown,
            e.relations
        )
    } else {
        format!("~{}", thousands(e.rows))
    }
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The slot is a logical pgoutput slot of this database.
pub fn slot_shape(slot: &SlotState, name: &str, database: &str) -> Result<(), CheckError> {
    if slot.slot_type != "logical" || slot.plugin.as_deref() != Some("pgoutput") {
        return Err(CheckError::setup(
            format!(
                "replication slot {name:?} is a {} slot using plugin {}, walrelay needs a logical slot using pgoutput",
                slot.slot_type,
                slot.plugin.as_deref().unwrap_or("(none)")
            ),
            "configure another postgres.slot name, or drop this slot if nothing needs it",
        ));
    }
    if slot.database.as_deref() != Some(database) {
        return Err(CheckError::setup(
            format!(
                "replication slot {name:?} belongs to database {}, not {database}",
                slot.database.as_deref().unwrap_or("(none)")
            ),
            "use a slot name unique to this database",
        ));
    }
    Ok(())
}

/// Where streaming starts, and whether the operator's acceptance was needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    pub from: Lsn,
    /// The slot disagreed with the stored offset and `--accept-slot-position`
    /// overrode it: the caller stores `from` before streaming.
    pub accepted: bool,
}

/// Where streaming starts: the slot's confirmed position, if it agrees with
/// the stored offset (see [`offsets::compare`]). A disagreement is refused
/// unless the operator accepted the slot's position (never for a lost slot).
pub fn start_position(
    stored: Option<&StoredOffset>,
    slot: &SlotState,
    server: &offsets::Server<'_>,
    slot_name: &str,
    accept_slot_position: bool,
) -> Result<Start, CheckError> {
    let position = SlotPosition {
        confirmed_flush: slot.confirmed_flush_lsn.unwrap_or(Lsn::ZERO),
        wal_status: slot.wal_status.clone(),
    };
    match offsets::compare(stored, &position, server, slot_name) {
        StartDecision::Resume { from } => Ok(Start {
            from,
            accepted: false,
        }),
        StartDecision::Refuse { reason, hint } => {
            if !accept_slot_position || position.wal_status.as_deref() == Some("lost") {
                return Err(CheckError::Refused { reason, hint });
            }
            tracing::warn!(%reason, "starting anyway: --accept-slot-position was given");
            Ok(Start {
                from: position.confirmed_flush,
                accepted: true,
            })
        }
    }
}

/// For `check` only: a warning when the slot may decode changes from before
/// its publication existed (the slot was created first). PostgreSQL 14–17
/// then fail every start with `publication "…" does not exist` (which `run`
/// explains with [`explain_stream_error`]); 18 skips those changes.
///
/// The catalog keeps no creation time for either, so this compares the
/// slot's `catalog_xmin` with the `xmin` of the publication's row: it also
/// fires for a slot created (after the publication) while older
/// transactions were running, until the slot's first confirmed position
/// moves `catalog_xmin` on — hence a warning that says "may", and not a
/// refusal (nor a line in `run`'s log).
pub async fn slot_predates_publication(
    client: &Client,
    slot: &str,
    publication: &str,
) -> Result<Option<String>, CheckError> {
    let Some(p) = catalog::publication(client, publication).await? else {
        return Ok(None);
    };
    if catalog::slot_older_than_publication(client, slot, &p).await? != Some(true) {
        return Ok(None);
    }
    Ok(Some(format!(
        "replication slot {slot:?} may predate publication {publication} (or its last change): the slot still needs catalog state older than the publication, so it may decode changes committed before the publication existed; PostgreSQL 14–17 then fail with 'publication \"{publication}\" does not exist' and PostgreSQL 18 skips them (see docs/operations.md, \"Slot created before the publication\"; this also shows right after a slot was created while older transactions ran)"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_columns_are_what_the_router_reads_once_each() {
        let outbox: OutboxConfig = toml::from_str(
            "table = \"outbox\"\ntopic = \"ev.{aggregatetype}.{type}\"\n\
             header_columns = [\"type\", \"tenant\"]\ntimestamp_column = \"created_at\"",
        )
        .unwrap();
        assert_eq!(
            route_columns(&outbox),
            [
                "id",
                "aggregateid",
                "payload",
                "aggregatetype",
                "type",
                "tenant",
                "created_at"
            ]
        );
        // Placements name columns before the ':' (the rest is an alias).
        let placed: OutboxConfig = toml::from_str(
            "table = \"outbox\"\nheader_columns = [\"type:eventType\", \"tenant:t\"]\n\
             envelope_columns = [\"type:eventType\", \"region:r\", \"aggregatetype\"]",
        )
        .unwrap();
        assert_eq!(
            route_columns(&placed),
            [
                "id",
                "aggregateid",
                "payload",
                "aggregatetype",
                "type",
                "tenant",
                "region"
            ]
        );
    }

    fn pg(create_slot: bool) -> PostgresConfig {
        toml::from_str(&format!(
            "database = \"d\"\nslot = \"s\"\ncreate_slot = {create_slot}"
        ))
        .unwrap()
    }

    fn slot(wal_status: &str) -> SlotState {
        SlotState {
            plugin: Some("pgoutput".into()),
            slot_type: "logical".into(),
            database: Some("d".into()),
            active_pid: None,
            restart_lsn: Some(Lsn(0x100)),
            confirmed_flush_lsn: Some(Lsn(0x200)),
            wal_status: Some(wal_status.into()),
            failover: None,
            invalidation_reason: None,
        }
    }

    /// Refused only for the slot of a snapshot never streamed from, lost to
    /// the idle timeout, with the timeout still on.
    #[test]
    fn a_snapshot_lost_to_the_idle_timeout_is_not_taken_again_blindly() {
        use crate::offsets::{SnapshotProgress, SnapshotState};
        let mut lost = slot("lost");
        lost.invalidation_reason = Some("idle_timeout".into());
        let mut just_snapshotted = stored(Some(SnapshotState::Completed));
        just_snapshotted.lsn = "0/200".parse().unwrap();
        just_snapshotted.snapshot = Some(SnapshotProgress {
            state: SnapshotState::Completed,
            tables_done: Vec::new(),
            rows: 10,
            consistent_point: Some("0/200".into()),
        });
        let refused =
            snapshot_outlived_idle_timeout(Some(&just_snapshotted), Some(&lost), "s", "1min")
                .unwrap_err()
                .to_string();
        assert!(
            refused.contains("idle_replication_slot_timeout (1min)"),
            "{refused}"
        );
        assert!(refused.contains("pg_reload_conf"), "{refused}");
        // The timeout turned off since: taken again.
        assert!(
            snapshot_outlived_idle_timeout(Some(&just_snapshotted), Some(&lost), "s", "0").is_ok()
        );
        // Streamed past the consistent point (then down for long): taken again.
        let mut streamed = just_snapshotted.clone();
        streamed.lsn = "0/300".parse().unwrap();
        assert!(snapshot_outlived_idle_timeout(Some(&streamed), Some(&lost), "s", "1min").is_ok());
        // Lost for another reason: taken again.
        let mut removed = lost.clone();
        removed.invalidation_reason = Some("wal_removed".into());
        assert!(
            snapshot_outlived_idle_timeout(Some(&just_snapshotted), Some(&removed), "s", "1min")
                .is_ok()
        );
        assert!(snapshot_outlived_idle_timeout(None, Some(&lost), "s", "1min").is_ok());
    }

    fn stored(snapshot: Option<crate::offsets::SnapshotState>) -> StoredOffset {
        StoredOffset {
            connector: "c".into(),
            system_id: "1".into(),
            timeline: 1,
            slot: "s".into(),
            lsn: "0/200".parse().unwrap(),
            written_at_ms: 0,
            committed_at_ms: None,
            snapshot: snapshot.map(|state| crate::offsets::SnapshotProgress {
                state,
                tables_done: Vec::new(),
                rows: 0,
                consistent_point: None,
            }),
            accepted_gap: None,
            incremental: None,
            known_tables: Vec::new(),
            term: None,
        }
    }

    /// Every rule of the start decision, one case each.
    #[test]
    fn the_slot_plan_follows_the_mode_the_offset_and_the_slot() {
        use crate::offsets::SnapshotState::{Completed, Running};
        use SnapshotMode::*;
        let snap = |drop_first| move |p: &SlotPlan| matches!(p, SlotPlan::Snapshot { drop_first: d, .. } if *d == drop_first);
        let plan = |mode, st: Option<StoredOffset>, sl: Option<SlotState>| {
            slot_plan(mode, st.as_ref(), sl.as_ref(), &pg(true), false)
        };
        // A new connector snapshots unless told not to.
        for mode in [None, Some(Initial), Some(InitialOnly), Some(WhenNeeded)] {
            assert!(snap(false)(&plan(mode, None, None).unwrap()), "{mode:?}");
        }
        assert_eq!(
            plan(Some(NoData), None, None).unwrap(),
            SlotPlan::CreateAndStream
        );
        // An existing slot without an offset: streamed from when the mode is
        // unset or no_data, refused when a snapshot is asked for.
        assert_eq!(
            plan(None, None, Some(slot("reserved"))).unwrap(),
            SlotPlan::Resume
        );
        assert_eq!(
            plan(Some(NoData), None, Some(slot("reserved"))).unwrap(),
            SlotPlan::Resume
        );
        for mode in [Initial, InitialOnly, WhenNeeded] {
            let e = plan(Some(mode), None, Some(slot("reserved"))).unwrap_err();
            assert!(
                e.problem().contains("exists already") && e.fix().contains("no_data"),
                "{}",
                e.problem()
            );
        }
        // An interrupted snapshot is taken again, dropping our slot first.
        assert!(snap(true)(
            &plan(None, Some(stored(Some(Running))), Some(slot("reserved"))).unwrap()
        ));
        assert!(snap(false)(
            &plan(Some(Initial), Some(stored(Some(Running))), None).unwrap()
        ));
        // ... except under no_data, which streams from the slot.
        assert_eq!(
            plan(
                Some(NoData),
                Some(stored(Some(Running))),
                Some(slot("reserved"))
            )
            .unwrap(),
            SlotPlan::Resume
        );
        // A stored offset and its slot: stream on; initial_only has nothing to do.
        for st in [None, Some(Completed)] {
            assert_eq!(
                plan(None, Some(stored(st)), Some(slot("reserved"))).unwrap(),
                SlotPlan::Resume
            );
            assert!(matches!(
                plan(Some(InitialOnly), Some(stored(st)), Some(slot("reserved"))).unwrap(),
                SlotPlan::NothingToDo { .. }
            ));
        }
        // The slot is missing: refused, but when_needed snapshots again.
        assert!(plan(None, Some(stored(Some(Completed))), None).is_err());
        assert!(snap(false)(
            &plan(Some(WhenNeeded), Some(stored(Some(Completed))), None).unwrap()
        ));
        // A lost slot under when_needed is dropped and snapshotted again.
        assert!(snap(true)(
            &plan(Some(WhenNeeded), Some(stored(None)), Some(slot("lost"))).unwrap()
        ));
        assert_eq!(
            plan(None, Some(stored(None)), Some(slot("lost"))).unwrap(),
            SlotPlan::Resume
        );
        // A snapshot needs the slot walrelay creates.
        let e = slot_plan(None, None, None, &pg(false), false).unwrap_err();
        assert!(
            e.problem().contains("create_slot = false"),
            "{}",
            e.problem()
        );
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(123_456), "123,456");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn row_estimates_say_when_they_are_unknown_or_partial() {
        let e = |rows, unknown, relations| {
            describe_estimate(&RowEstimate {
                rows,
                unknown,
                relations,
            })
        };
        assert_eq!(e(123_456, 0, 1), "~123,456");
        assert_eq!(e(0, 1, 1), "unknown (never vacuumed or analyzed)");
        assert_eq!(
            e(500, 1, 3),
            "~500+ (1 of 3 partitions never vacuumed or analyzed)"
        );
        assert_eq!(e(0, 0, 0), "~0");
    }

    #[test]
    fn a_test_decoding_slot_is_named_with_its_plugin() {
        let slot = SlotState {
            plugin: Some("test_decoding".into()),
            slot_type: "logical".into(),
            database: Some("d".into()),
            active_pid: None,
            restart_lsn: None,
            confirmed_flush_lsn: None,
            wal_status: None,
            failover: None,
            invalidation_reason: None,
        };
        let e = slot_shape(&slot, "s", "d").unwrap_err();
        assert!(e.problem().contains("using plugin test_decoding"), "{e}");
    }
}

/// One table a `[[table]]` entry captures, resolved in the catalog.
#[derive(Debug, Clone)]
pub struct TableEventTable {
    /// The `[[table]]` entry (its index in the file) that captures it.
    pub entry: usize,
    pub table: CapturedTable,
    /// Its primary key's columns (empty: none).
    pub primary_key: Vec<String>,
    /// Its `REPLICA IDENTITY` and the columns a delete's old row holds
    /// ([`catalog::replica_identity`]).
    pub replica_identity: u8,
    pub identity: Vec<String>,
    /// User-defined types of its columns and what they are written as:
    /// `(type oid, written as type oid, type modifier)` — an enum as
    /// `text`, an array of enums as `text[]`, a domain as its base type.
    pub type_aliases: Vec<(u32, u32, i32)>,
    /// Its columns (not dropped, not generated), by name.
    pub columns: Vec<String>,
    /// Its columns of types without a mapping, written as their text form
    /// (`unmapped_types = "text"`): `column (type)`.
    pub as_text: Vec<String>,
}

impl TableEventTable {
    /// The columns keying its events ([`crate::router::table::key_columns`]).
    pub fn key<'c>(&'c self, config: &'c TableConfig) -> Vec<&'c str> {
        crate::router::table::key_columns(
            config,
            self.replica_identity,
            &self.identity,
            &self.primary_key,
        )
    }

    /// The columns the snapshot reads it in: `key_columns`, else the
    /// primary key.
    pub fn snapshot_order<'c>(&'c self, config: &'c TableConfig) -> &'c [String] {
        config.key_or(&self.primary_key)
    }
}

/// The tables the `[[table]]` entries capture: each named table must exist
/// and be a table; a pattern covers the tables of its schema that exist
/// now (none is a warning for `check`, not an error). A table matched by
/// several entries belongs to the first; an outbox table is never one
/// (validation refuses the overlap).
pub async fn table_event_tables(
    client: &Client,
    config: &Config,
) -> Result<Vec<TableEventTable>, CheckError> {
    let mut out: Vec<TableEventTable> = Vec::new();
    // Columns without a mapping under `unmapped_types = "fail"`, of every
    // table: one error names them all, not the first table's only.
    let mut unmapped_columns: Vec<String> = Vec::new();
    let mut listed: std::collections::HashMap<String, Vec<(u32, String, char)>> =
        std::collections::HashMap::new();
    // Validation compiled these already; an error here cannot happen.
    let default_columns = config.table_defaults.column_filter().ok().flatten();
    for (entry, t) in config.tables.iter().enumerate() {
        let schema = &t.name.schema;
        let names: Vec<String> = if t.is_pattern() {
            if !listed.contains_key(schema) {
                listed.insert(
                    schema.clone(),
                    catalog::schema_tables(client, schema).await?,
                );
            }
            listed[schema]
                .iter()
                .filter(|(_, n, _)| t.matches(schema, n))
                .map(|(_, n, _)| n.clone())
                .collect()
        } else {
            vec![t.name.name.clone()]
        };
        for name in names {
            if out
                .iter()
                .any(|o| o.table.schema == *schema && o.table.name == name)
                || config
                    .outbox
                    .iter()
                    .any(|o| o.table.schema == *schema && o.table.name == name)
            {
                continue;
            }
            let Some(table) = catalog::relation(client, schema, &name).await? else {
                return Err(CheckError::setup(
                    format!("table {schema}.{name} (table[{entry}].name) does not exist"),
                    "create it, or fix the name in its [[table]] section",
                ));
            };
            if !matches!(table.relkind, 'r' | 'p') {
                return Err(CheckError::setup(
                    format!(
                        "{schema}.{name} (table[{entry}].name) is {}, not a table: logical \
                         decoding only sees rows written to tables",
                        table.kind()
                    ),
                    "name an ordinary or partitioned table",
                ));
            }
            let primary_key = catalog::primary_key(client, table.oid).await?;
            let (replica_identity, identity) = catalog::replica_identity(client, table.oid).await?;
            let unmapped = t
                .unmapped_types
                .unwrap_or(config.table_defaults.unmapped_types);
            let key_columns =
                crate::router::table::key_columns(t, replica_identity, &identity, &primary_key);
            let identity_names: Vec<&str> = identity.iter().map(String::as_str).collect();
            let skipped = t
                .skipped_operations
                .unwrap_or(config.table_defaults.skipped_operations);
            if let Some((_, problem, fix)) = crate::router::table::key_outside_identity(
                &key_columns,
                replica_identity,
                &identity_names,
                skipped,
            ) {
                return Err(CheckError::setup(
                    format!("table {schema}.{name} (table[{entry}]): {problem}"),
                    fix,
                ));
            }
            // A column left out of before/after (and not in the key) is
            // never written: its type does not matter.
            let left_out = |column: &str| {
                !key_columns.contains(&column)
                    && !t.includes(default_columns.as_ref(), schema, &name, column)
            };
            let (type_aliases, columns, without_mapping) =
                column_types(client, &table, left_out).await?;
            let display = format!("{schema}.{name}");
            if unmapped == crate::config::UnmappedTypes::Fail && !without_mapping.is_empty() {
                unmapped_columns.extend(without_mapping.iter().map(|c| format!("{display}.{c}")));
                continue;
            }
            let as_text = without_mapping;
            crate::router::table::check_columns(t, entry, &display, &columns)
                .map_err(|(problem, fix)| CheckError::setup(problem, fix))?;
            out.push(TableEventTable {
                entry,
                table,
                primary_key,
                replica_identity,
                identity,
                type_aliases,
                columns: columns.into_iter().map(|(name, _)| name).collect(),
                as_text,
            });
        }
    }
    if !unmapped_columns.is_empty() {
        let (s, have) = if unmapped_columns.len() == 1 {
            ("", "has a type")
        } else {
            ("s", "have types")
        };
        return Err(CheckError::setup(
            format!(
                "column{s} {} {have} that table events do not map to a Debezium representation",
                unmapped_columns.join(", ")
            ),
            "change the column's type to a mapped one (docs/compatibility.md lists them), set \
             unmapped_types = \"text\" (in [table_defaults] or the table's [[table]]) to write \
             such values as their PostgreSQL text form, or remove the table from [[table]]",
        ));
    }
    Ok(out)
}

/// A `[[table]]` table can be snapshotted: it has an order to be read in
/// (`key_columns`, else its primary key).
pub fn table_snapshot_order(config: &Config, table: &TableEventTable) -> Result<(), CheckError> {
    let entry = config.tables.get(table.entry);
    if entry.is_some_and(|e| !table.snapshot_order(e).is_empty()) {
        return Ok(());
    }
    Err(CheckError::setup(
        format!(
            "table {}.{} has no primary key and no key_columns, so the initial snapshot has no \
             order to read it in",
            table.table.schema, table.table.name
        ),
        "add a primary key, or set key_columns in its [[table]] section, or set [snapshot] \
         mode = \"no_data\"",
    ))
}

/// The `text` and `text[]` type oids: what enums and enum arrays are
/// written as (Debezium writes enum values as strings).
const TEXT_OID: u32 = 25;
const TEXT_ARRAY_OID: u32 = 1009;
/// Types created after initdb (extensions', users') have oids from here on.
const FIRST_NORMAL_OID: u32 = 16384;

/// The aliases of a table's user-defined types, its columns with their
/// declared types, and its columns written as their text form.
type ColumnTypes = (Vec<(u32, u32, i32)>, Vec<(String, u32)>, Vec<String>);

/// The aliases of `table`'s user-defined enum and domain types, its
/// columns with their declared types, and the columns that are written
/// (not `left_out` of `before`/`after` and the key) but have a type the
/// table events do not map, as `column (type)`.
async fn column_types(
    client: &Client,
    table: &CapturedTable,
    left_out: impl Fn(&str) -> bool,
) -> Result<ColumnTypes, CheckError> {
    use crate::router::debezium::Mapping;
    let rows = client
        .query(
            "SELECT a.attname::text, a.atttypid, a.atttypmod, \
                    format_type(a.atttypid, a.atttypmod), t.typtype::text, t.typbasetype, \
                    t.typtypmod, coalesce(e.typtype::text, ''), t.typname::text \
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A' \
             WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped \
               AND a.attgenerated = '' ORDER BY a.attnum",
            &[&table.oid],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading the table's column types",
            source,
        })?;
    let mut aliases = Vec::new();
    let mut columns = Vec::with_capacity(rows.len());
    let mut without_mapping = Vec::new();
    for r in &rows {
        let (name, oid, typmod): (String, u32, i32) = (r.get(0), r.get(1), r.get(2));
        let type_name: String = r.get(3);
        let (typtype, base, base_typmod): (String, u32, i32) = (r.get(4), r.get(5), r.get(6));
        let elem_typtype: String = r.get(7);
        let typname: String = r.get(8);
        let (written_as, written_typmod) = match (typtype.as_str(), elem_typtype.as_str()) {
            ("e", _) => (TEXT_OID, -1),
            (_, "e") => (TEXT_ARRAY_OID, -1),
            // Extension types, found by name (their oids differ per
            // database): `citext` and `ltree` are strings, `hstore` is
            // Debezium's JSON form, as Debezium writes them.
            ("b", _)
                if oid >= FIRST_NORMAL_OID && matches!(typname.as_str(), "citext" | "ltree") =>
            {
                (TEXT_OID, -1)
            }
            ("b", _) if oid >= FIRST_NORMAL_OID && typname == "hstore" => {
                (crate::router::debezium::HSTORE, -1)
            }
            ("d", _) => (base, if typmod >= 0 { typmod } else { base_typmod }),
            _ => (oid, typmod),
        };
        if !Mapping::is_mapped(written_as, written_typmod) && !left_out(&name) {
            without_mapping.push(format!("{name} ({type_name})"));
        }
        if written_as != oid {
            aliases.push((oid, written_as, written_typmod));
        }
        columns.push((name, oid));
    }
    Ok((aliases, columns, without_mapping))
}
