//! The publication as the catalog shows it: its settings ([`Publication`]),
//! the tables it publishes, one table's membership (directly, through a
//! schema or an ancestor; its row filter and column list on 15+), and
//! whether a slot may predate it.

use tokio_postgres::Client;

use super::error::CatalogError;
use super::settings::server_version;

/// A row of `pg_publication`, as far as walrelay cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    pub oid: u32,
    pub owner: String,
    /// The current role owns it (or is a member of its owner).
    pub owned: bool,
    pub all_tables: bool,
    pub inserts: bool,
    /// Publishes updates and deletes (`pubupdate AND pubdelete`).
    pub updates_and_deletes: bool,
    pub via_root: bool,
    /// `xmin` of the catalog row: the transaction that created (or last
    /// altered) the publication.
    pub xmin: u32,
}

/// Reads one publication, or `None` if it does not exist.
pub async fn publication(client: &Client, name: &str) -> Result<Option<Publication>, CatalogError> {
    let row = client
        .query_opt(
            "SELECT p.oid, pg_get_userbyid(p.pubowner)::text, \
                    pg_has_role(current_user, p.pubowner, 'USAGE'), \
                    p.puballtables, p.pubinsert, p.pubviaroot, p.xmin::text::int8, \
                    p.pubupdate AND p.pubdelete \
             FROM pg_publication p WHERE p.pubname = $1",
            &[&name],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading pg_publication",
            source,
        })?;
    Ok(row.map(|r| Publication {
        oid: r.get(0),
        owner: r.get(1),
        owned: r.get(2),
        all_tables: r.get(3),
        inserts: r.get(4),
        via_root: r.get(5),
        xmin: u32::try_from(r.get::<_, i64>(6)).unwrap_or(0),
        updates_and_deletes: r.get(7),
    }))
}

/// The tables publication `name` publishes (`schema.table`, sorted), as
/// `pg_publication_tables` lists them.
pub async fn published_tables(client: &Client, name: &str) -> Result<Vec<String>, CatalogError> {
    let rows = client
        .query(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables \
             WHERE pubname = $1 ORDER BY 1",
            &[&name],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading pg_publication_tables",
            source,
        })?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// How a publication covers one relation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Membership {
    /// `FOR ALL TABLES`.
    pub all_tables: bool,
    /// `FOR TABLES IN SCHEMA` this schema (15+), the table's or an ancestor's.
    pub schema: Option<String>,
    /// Listed `FOR TABLE` as this relation `(oid, schema, name)`: the table
    /// itself or one of its partition ancestors (nearest first).
    pub listed: Option<(u32, String, String)>,
    /// The row filter (`WHERE …`) of that listing (15+).
    pub row_filter: Option<String>,
    /// The column list of that listing (15+); `None` = all columns.
    pub columns: Option<Vec<String>>,
    /// Partition ancestors of the table (nearest first), excluding itself.
    pub ancestors: Vec<(u32, String, String)>,
}

impl Membership {
    pub fn covered(&self) -> bool {
        self.all_tables || self.schema.is_some() || self.listed.is_some()
    }
}

/// How publication `publication` covers relation `oid`: directly, through a
/// partition ancestor, `FOR ALL TABLES` or `FOR TABLES IN SCHEMA`.
/// (`pg_publication_tables` cannot answer this: it lists leaves or roots
/// depending on `publish_via_partition_root`.)
pub async fn membership(
    client: &Client,
    publication: &Publication,
    oid: u32,
) -> Result<Membership, CatalogError> {
    let query = |context| move |source| CatalogError::Query { context, source };
    let version = server_version(client).await?;
    let ancestors: Vec<(u32, String, String)> = client
        .query(
            // pg_partition_ancestors lists nothing for a table that is not
            // a partition: start with the table itself.
            "SELECT a.relid::oid, n.nspname::text, c.relname::text \
             FROM (SELECT $1::oid AS relid, 0::int8 AS ord \
                   UNION ALL \
                   SELECT p.relid, p.ord \
                   FROM pg_partition_ancestors($1::oid::regclass) WITH ORDINALITY AS p(relid, ord) \
                   WHERE p.relid <> $1::oid) a \
             JOIN pg_class c ON c.oid = a.relid JOIN pg_namespace n ON n.oid = c.relnamespace \
             ORDER BY a.ord",
            &[&oid],
        )
        .await
        .map_err(query("reading partition ancestors"))?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let listing = if version >= 150000 {
        "SELECT pr.prrelid, pg_get_expr(pr.prqual, pr.prrelid), \
                (SELECT array_agg(at.attname::text ORDER BY at.attnum) FROM pg_attribute at \
                 WHERE at.attrelid = pr.prrelid AND at.attnum = ANY (pr.prattrs::int2[])) \
         FROM pg_publication_rel pr WHERE pr.prpubid = $1::oid AND pr.prrelid = ANY ($2::oid[])"
    } else {
        "SELECT pr.prrelid, NULL::text, NULL::text[] \
         FROM pg_publication_rel pr WHERE pr.prpubid = $1::oid AND pr.prrelid = ANY ($2::oid[])"
    };
    let oids: Vec<u32> = ancestors.iter().map(|a| a.0).collect();
    let rows = client
        .query(listing, &[&publication.oid, &oids])
        .await
        .map_err(query("reading pg_publication_rel"))?;
    let mut m = Membership {
        all_tables: publication.all_tables,
        ..Membership::default()
    };
    // Nearest listed relation first: that listing's filter and columns apply.
    for a in &ancestors {
        if let Some(r) = rows.iter().find(|r| r.get::<_, u32>(0) == a.0) {
            m.listed = Some(a.clone());
            m.row_filter = r.get(1);
            // A listing without a column list has prattrs NULL: all columns.
            m.columns = r.get(2);
            break;
        }
    }
    if version >= 150000 {
        let schema = client
            .query_opt(
                "SELECT n.nspname::text FROM pg_publication_namespace pn \
                 JOIN pg_namespace n ON n.oid = pn.pnnspid \
                 WHERE pn.pnpubid = $1::oid AND pn.pnnspid IN \
                   (SELECT c.relnamespace FROM pg_class c WHERE c.oid = ANY ($2::oid[])) \
                 LIMIT 1",
                &[&publication.oid, &oids],
            )
            .await
            .map_err(query("reading pg_publication_namespace"))?;
        m.schema = schema.map(|r| r.get(0));
    }
    m.ancestors = ancestors.into_iter().filter(|a| a.0 != oid).collect();
    Ok(m)
}

/// Whether the slot may still decode changes from before `publication` was
/// created (or last altered): its `catalog_xmin` is not newer than the
/// publication row's `xmin`. `None` if the slot does not exist.
pub async fn slot_older_than_publication(
    client: &Client,
    slot: &str,
    publication: &Publication,
) -> Result<Option<bool>, CatalogError> {
    let row = client
        .query_opt(
            "SELECT catalog_xmin IS NOT NULL AND age(catalog_xmin) >= age($2::text::xid) \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot, &publication.xmin.to_string()],
        )
        .await
        .map_err(|source| CatalogError::Query {
            context: "comparing the slot with the publication",
            source,
        })?;
    Ok(row.map(|r| r.get(0)))
}
