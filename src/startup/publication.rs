//! The publication: it exists (or may be created), covers every captured
//! table, publishes inserts (and, with `[[table]]` tables, updates and
//! deletes), hides no outbox row (row filter, column list), and publishes
//! partitioned tables under their root's name. Nothing here changes the
//! server: what `run` may change is a [`PublicationPlan`], planned only
//! when `postgres.create_publication` allows it and the role owns what it
//! must, which `run` applies and `check` describes.

use postgres_protocol::escape::escape_identifier as ident;
use tokio_postgres::Client;

use super::CheckError;
use super::outbox::route_columns;
use crate::config::{OutboxConfig, PostgresConfig};
use crate::pg::catalog::{self, CapturedTable, CatalogError, Publication};

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
///
/// The steps, each refusing with its own words: a missing publication is
/// planned (`plan_creation`); an existing one must publish what is
/// captured (`publishes_what_is_captured`); each table's membership is
/// read in order (`table_membership`); the tables it lacks are added
/// (`add_tables`) and partitions published under their root
/// (`publish_via_root`); with only `[[message]]` sections, the tables it
/// publishes anyway are named (`unclaimed_tables`).
pub async fn publication(
    client: &Client,
    pg: &PostgresConfig,
    outboxes: &[(&OutboxConfig, &CapturedTable)],
    captured: &[&CapturedTable],
) -> Result<PublicationPlan, CheckError> {
    let name = &pg.publication;
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
        return plan_creation(client, pg, &all).await;
    };
    publishes_what_is_captured(name, &publication, messages_only, !captured.is_empty())?;
    let mut missing = Vec::new();
    let mut needs_root = Vec::new();
    for (needed, table) in &tables {
        match table_membership(client, name, &publication, needed, table).await? {
            Member::Missing => missing.push(*table),
            Member::NeedsRoot => needs_root.push(format!("{}.{}", table.schema, table.name)),
            Member::AsNeeded => {}
        }
    }
    let mut statements = Vec::new();
    if !missing.is_empty() {
        statements.push(add_tables(client, pg, &publication, &missing).await?);
    }
    if !needs_root.is_empty() {
        statements.push(publish_via_root(pg, &publication, &needs_root)?);
    }
    let unclaimed = if messages_only {
        unclaimed_tables(client, name, &publication).await?
    } else {
        Vec::new()
    };
    Ok(PublicationPlan {
        publication: name.clone(),
        statements,
        exists: true,
        messages_only,
        unclaimed,
    })
}

/// The publication does not exist: the `CREATE PUBLICATION` `run` will
/// run, when `postgres.create_publication` allows it and the role may
/// (owns every table, may create in the database).
async fn plan_creation(
    client: &Client,
    pg: &PostgresConfig,
    all: &[&CapturedTable],
) -> Result<PublicationPlan, CheckError> {
    let name = &pg.publication;
    let p = ident(name);
    let messages_only = all.is_empty();
    // With no table (only [[message]] sections) the publication is
    // empty: pgoutput sends logical messages whatever it publishes.
    let sql = if messages_only {
        format!("CREATE PUBLICATION {p} WITH (publish_via_partition_root = true)")
    } else {
        format!(
            "CREATE PUBLICATION {p} FOR TABLE {} WITH (publish_via_partition_root = true)",
            table_list(all)
        )
    };
    if !pg.create_publication {
        return Err(CheckError::setup(
            format!("publication {name} does not exist"),
            format!("create it with `{sql}`, or set postgres.create_publication = true"),
        ));
    }
    let mut not_owned = Vec::new();
    for t in all {
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
    Ok(PublicationPlan {
        publication: name.clone(),
        statements: vec![sql],
        exists: false,
        messages_only,
        unclaimed: Vec::new(),
    })
}

/// An existing publication publishes inserts (unless nothing is captured)
/// and, with `[[table]]` tables, updates and deletes.
fn publishes_what_is_captured(
    name: &str,
    publication: &Publication,
    messages_only: bool,
    table_events: bool,
) -> Result<(), CheckError> {
    let p = ident(name);
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
    if table_events && !publication.updates_and_deletes {
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
    Ok(())
}

/// How one captured table stands in the publication.
enum Member {
    /// Published as needed.
    AsNeeded,
    /// Not in the publication.
    Missing,
    /// A partitioned table in a publication without
    /// `publish_via_partition_root`: its rows would arrive under its
    /// partitions' names.
    NeedsRoot,
}

/// Where `table` stands in the publication; refused when the publication
/// hides some of its rows (a row filter), drops a column its route reads
/// (`needed`, from a column list), or publishes it under an ancestor's
/// name.
async fn table_membership(
    client: &Client,
    name: &str,
    publication: &Publication,
    needed: &[&str],
    table: &CapturedTable,
) -> Result<Member, CheckError> {
    let p = ident(name);
    let shown = format!("{}.{}", table.schema, table.name);
    let qualified = format!("{}.{}", ident(&table.schema), ident(&table.name));
    let m = catalog::membership(client, publication, table.oid).await?;
    if !m.covered() {
        return Ok(Member::Missing);
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
        return Ok(Member::NeedsRoot);
    }
    Ok(Member::AsNeeded)
}

/// The `ALTER PUBLICATION … ADD TABLE` for the tables it lacks, when
/// `postgres.create_publication` allows it and the role owns the
/// publication and the tables.
async fn add_tables(
    client: &Client,
    pg: &PostgresConfig,
    publication: &Publication,
    missing: &[&CapturedTable],
) -> Result<String, CheckError> {
    let name = &pg.publication;
    let p = ident(name);
    let sql = format!("ALTER PUBLICATION {p} ADD TABLE {}", table_list(missing));
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
    for t in missing {
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
    Ok(sql)
}

/// The `ALTER PUBLICATION … SET (publish_via_partition_root = true)` that
/// makes the partitions of `needs_root` arrive under their root's name,
/// when `postgres.create_publication` allows it and the role owns the
/// publication.
fn publish_via_root(
    pg: &PostgresConfig,
    publication: &Publication,
    needs_root: &[String],
) -> Result<String, CheckError> {
    let name = &pg.publication;
    let p = ident(name);
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
    Ok(sql)
}

/// With only `[[message]]` sections: the tables the publication publishes
/// anyway (the first ten, then how many more), whose rows walrelay
/// receives and drops.
async fn unclaimed_tables(
    client: &Client,
    name: &str,
    publication: &Publication,
) -> Result<Vec<String>, CheckError> {
    if publication.all_tables {
        return Ok(vec!["every table (FOR ALL TABLES)".to_owned()]);
    }
    let mut tables = catalog::published_tables(client, name).await?;
    const SHOWN: usize = 10;
    if tables.len() > SHOWN {
        let more = tables.len() - SHOWN;
        tables.truncate(SHOWN);
        tables.push(format!("and {more} more"));
    }
    Ok(tables)
}

/// For `check` only: a warning when the slot may decode changes from before
/// its publication existed (the slot was created first). PostgreSQL 14–17
/// then fail every start with `publication "…" does not exist` (which `run`
/// explains with `relay::explain_stream_error`); 18 skips those changes.
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
