//! The `[[outbox]]` tables: each exists, is a table, has every column its
//! route reads, a payload type walrelay passes through unchanged, and under
//! the JSON converter forms columns whose Debezium form walrelay writes
//! ([`converter_problem`]).
//! [`route_columns`] is the one list of the columns a route reads; the
//! publication's column-list check uses it too.

use tokio_postgres::Client;

use super::CheckError;
use crate::config::{Converter, OutboxConfig};
use crate::pg::catalog::{self, CapturedTable};

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
    if outbox.key_form() != Converter::String || outbox.value_form() == Converter::JsonWithSchema {
        let not_null = catalog::not_null_columns(client, schema, name).await?;
        if let Some((problem, fix)) = converter_problem(outbox, &columns, &not_null) {
            return Err(CheckError::setup(
                format!("outbox table {schema}.{name}: {problem}"),
                fix,
            ));
        }
    }
    let partitions = if table.relkind == 'p' {
        format!(", partitioned ({} partitions)", table.partitions.len())
    } else {
        String::new()
    };
    let format = match outbox.format {
        crate::config::OutboxFormat::Raw => String::new(),
        crate::config::OutboxFormat::Avro => ", Avro (schema registry)".to_owned(),
        crate::config::OutboxFormat::JsonSchema => ", JSON Schema (schema registry)".to_owned(),
        crate::config::OutboxFormat::Protobuf => ", Protobuf (schema registry)".to_owned(),
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

/// Aggregate id types the JSON key forms write as Debezium does (as
/// `format_type` names them; `character varying(n)` and `character(n)` by
/// prefix).
const KEY_TYPES: &[&str] = &["text", "name", "uuid", "smallint", "integer", "bigint"];

/// Why the table's columns do not fit the route's converter forms, and the
/// fix: a JSON key of a type the router does not write as Debezium does,
/// or (`json_with_schema`) a nullability other than Debezium's documented
/// outbox table's, which the schemas walrelay writes assume (Debezium
/// writes `"optional"` from it; a nullable key column would be other key
/// bytes, so another partition). `columns` as (name, `format_type`).
pub fn converter_problem(
    outbox: &OutboxConfig,
    columns: &[(String, String)],
    not_null: &[String],
) -> Option<(String, &'static str)> {
    let key = &outbox.aggregate_id_column;
    let key_type = columns
        .iter()
        .find(|(n, _)| n == key)
        .map_or("", |(_, t)| t.as_str());
    let key_form = outbox.key_form();
    if key_form != Converter::String
        && !KEY_TYPES.contains(&key_type)
        && !key_type.starts_with("character")
    {
        return Some((
            format!(
                "aggregate id column {key} has type {key_type}, which key_converter = {:?} does \
                 not write (text, varchar, char, name, uuid, smallint, integer or bigint)",
                key_form.as_str()
            ),
            "set key_converter = \"string\" for this [[outbox]], or change the column's type",
        ));
    }
    let is_not_null = |c: &str| not_null.iter().any(|n| n == c);
    if key_form == Converter::JsonWithSchema && !is_not_null(key) {
        return Some((
            format!(
                "aggregate id column {key} is nullable: Debezium's key schema would say \
                 \"optional\":true, walrelay writes that of Debezium's documented outbox table \
                 (\"optional\":false), other key bytes and so another partition"
            ),
            "declare the column NOT NULL (ALTER TABLE … ALTER COLUMN … SET NOT NULL; walrelay \
             refuses a NULL aggregate id anyway), or use key_converter = \"json\"",
        ));
    }
    let payload = &outbox.payload_column;
    if outbox.envelope_columns.is_empty()
        && outbox.value_form() == Converter::JsonWithSchema
        && is_not_null(payload)
    {
        return Some((
            format!(
                "payload column {payload} is NOT NULL: Debezium's value schema would say \
                 \"optional\":false, walrelay writes that of Debezium's documented outbox table \
                 (\"optional\":true)"
            ),
            "drop the NOT NULL (ALTER TABLE … ALTER COLUMN … DROP NOT NULL), or use \
             value_converter = \"json\"",
        ));
    }
    None
}

#[cfg(test)]
mod tests;
