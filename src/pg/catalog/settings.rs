//! Server settings (`SHOW`) and the server's version number.

use tokio_postgres::Client;

use super::error::CatalogError;

/// `SHOW name`.
pub async fn setting(client: &Client, name: &'static str) -> Result<String, CatalogError> {
    let row = client
        .query_one("SELECT current_setting($1)", &[&name])
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading a server setting",
            source,
        })?;
    Ok(row.get(0))
}

/// `server_version_num`, e.g. `180004`.
pub async fn server_version(client: &Client) -> Result<i32, CatalogError> {
    let row = client
        .query_one("SELECT current_setting('server_version_num')::int4", &[])
        .await
        .map_err(|source| CatalogError::Query {
            context: "reading server_version_num",
            source,
        })?;
    Ok(row.get(0))
}
