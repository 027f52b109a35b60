//! The runnable form's handler: one SQL statement per event
//! (`[inbox.handler] sql`), its `$1`, `$2`, … bound to parts of the record
//! (`params`).
//!
//! Every parameter is sent as `text` (NULL when the record has no such
//! part); the statement casts what it needs (`$2::jsonb`, `$3::bigint`).
//! A key, value or header that is not UTF-8 is a handler error (the record
//! is retried, then quarantined with it), never replaced.

use tokio_postgres::types::{ToSql, Type};

use super::config::Param;
use super::{Event, Handler, HandlerError};

/// Runs `sql` with `params` for each new event.
#[derive(Debug, Clone)]
pub struct SqlHandler {
    sql: String,
    params: Vec<Param>,
}

impl SqlHandler {
    pub fn new(sql: impl Into<String>, params: Vec<Param>) -> SqlHandler {
        SqlHandler {
            sql: sql.into(),
            params,
        }
    }

    /// The text bound to `param` for `event`.
    fn bind(param: &Param, event: &Event) -> Result<Option<String>, HandlerError> {
        let text = |what: &str, bytes: Option<&[u8]>| -> Result<Option<String>, HandlerError> {
            bytes
                .map(|b| {
                    String::from_utf8(b.to_vec())
                        .map_err(|_| format!("the record's {what} is not UTF-8 text").into())
                })
                .transpose()
        };
        Ok(match param {
            Param::Id => Some(event.id.clone()),
            Param::Key => text("key", event.key.as_deref())?,
            Param::Value => text("value", event.value.as_deref())?,
            Param::Topic => Some(event.topic.clone()),
            Param::Partition => Some(event.partition.to_string()),
            Param::Offset => Some(event.offset.to_string()),
            Param::Timestamp => event.timestamp_ms.map(|t| t.to_string()),
            Param::Header(name) => text(&format!("header {name}"), event.header(name))?,
        })
    }
}

impl Handler for SqlHandler {
    async fn apply<'a>(
        &'a self,
        tx: &'a tokio_postgres::Transaction<'a>,
        event: &'a Event,
    ) -> Result<(), HandlerError> {
        let values = self
            .params
            .iter()
            .map(|p| Self::bind(p, event))
            .collect::<Result<Vec<_>, _>>()?;
        let typed: Vec<(&(dyn ToSql + Sync), Type)> = values
            .iter()
            .map(|v| (v as &(dyn ToSql + Sync), Type::TEXT))
            .collect();
        tx.query_typed(&self.sql, &typed).await?;
        Ok(())
    }
}
