//! [`HashSplit`]: one part of a table by a hash of one column's text (the
//! aggregate id), so parallel readers never share an aggregate and every
//! row, NULLs included, falls in exactly one part.

use postgres_protocol::escape::escape_identifier;

use super::error::SnapshotError;

/// Part `index` of `parts` of a table, by a hash of one column's text (the
/// aggregate id): every row falls in exactly one part, rows with a NULL in
/// the column in part 0. The hash is the server's `hashtext`, so readers on
/// one server agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashSplit {
    column: String,
    parts: u32,
    index: u32,
}

impl HashSplit {
    /// Part `index` (0-based) of `parts`, split by `column`.
    pub fn new(column: &str, parts: u32, index: u32) -> Result<HashSplit, SnapshotError> {
        if parts == 0 || index >= parts || parts > i32::MAX as u32 {
            return Err(SnapshotError::InvalidSplit { parts, index });
        }
        Ok(HashSplit {
            column: column.to_owned(),
            parts,
            index,
        })
    }

    /// All `parts` parts split by `column`.
    pub fn all(column: &str, parts: u32) -> Result<Vec<HashSplit>, SnapshotError> {
        (0..parts.max(1))
            .map(|index| HashSplit::new(column, parts, index))
            .collect()
    }

    /// The split column.
    pub fn column(&self) -> &str {
        &self.column
    }

    /// The SQL condition selecting this part's rows.
    pub fn filter_sql(&self) -> String {
        format!(
            "(coalesce(hashtext({}::text), 0) & 2147483647) % {} = {}",
            escape_identifier(&self.column),
            self.parts,
            self.index
        )
    }
}

#[cfg(test)]
mod tests;
