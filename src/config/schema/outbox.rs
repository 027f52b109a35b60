//! `[[outbox]]`: an outbox table, its columns, where each column goes
//! (header, key, value, envelope), the topic template, the update rule and
//! the CloudEvents form.
//!
//! Field documentation here is the source for `docs/configuration.md`;
//! keep the two in step.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::defaults;
use crate::config::template::{TableRef, TopicTemplate};
use crate::config::units;

/// What to do when a row of an outbox table is UPDATEd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnUpdate {
    /// Publish nothing for the update and log a warning.
    #[default]
    Warn,
    /// Publish nothing for the update; only a metric counts it.
    Skip,
    /// Stop the connector with an error naming the table and LSN.
    Fail,
}

/// `[[outbox]]`: one outbox table and how its rows become Kafka records.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxConfig {
    /// The table, `schema.table` or `table` (schema `public`). Required.
    pub table: TableRef,
    /// Unique event id; becomes the record's `id` header.
    #[serde(default = "defaults::id_column")]
    pub id_column: String,
    /// Aggregate type (e.g. `Order`); usually used in the topic template.
    #[serde(default = "defaults::aggregate_type_column")]
    pub aggregate_type_column: String,
    /// Aggregate id; becomes the record key, so one aggregate's events stay in order.
    #[serde(default = "defaults::aggregate_id_column")]
    pub aggregate_id_column: String,
    /// Event type (e.g. `OrderCreated`).
    #[serde(default = "defaults::type_column")]
    pub type_column: String,
    /// Event body; becomes the record value.
    #[serde(default = "defaults::payload_column")]
    pub payload_column: String,
    /// Destination topic, with `{column}` placeholders.
    #[serde(default = "TopicTemplate::default_template")]
    pub topic: TopicTemplate,
    /// Columns copied into record headers: `"column"` (header name =
    /// column name) or `"column:alias"` ([`placement`]).
    #[serde(default = "defaults::header_columns")]
    pub header_columns: Vec<String>,
    /// Columns placed beside the payload in a JSON envelope value
    /// (`{"payload": …, "<alias>": …}`, Debezium's
    /// `table.fields.additional.placement=<column>:envelope:<alias>`):
    /// `"column"` or `"column:alias"`. Empty: the value is the payload.
    #[serde(default)]
    pub envelope_columns: Vec<String>,
    /// Debezium's `table.expand.json.payload`. With `envelope_columns`: a
    /// json/jsonb payload (and a text payload holding a JSON object) is
    /// embedded as JSON (`true`, the default) or as a JSON string
    /// (`false`). With `value_converter = "json"` or `"json_with_schema"`:
    /// `true` writes an object payload as Debezium's EventRouter and Kafka
    /// Connect's `JsonConverter` do after inferring a schema from it
    /// (`false`, the default: the payload's text as a JSON string). `None`:
    /// not set (only allowed with an envelope or a JSON value).
    #[serde(default)]
    pub expand_json_payload: Option<bool>,
    /// The form of both key and value, as the Kafka Connect converter of a
    /// Debezium deployment would write them; shorthand for `key_converter`
    /// and `value_converter` alike (not with either).
    #[serde(default)]
    pub converter: Option<Converter>,
    /// The key's form: the aggregate id's bytes (`"string"`, the default:
    /// Connect's `StringConverter`), a JSON value (`"json"`:
    /// `JsonConverter`, `schemas.enable=false`), or a JSON value in
    /// Connect's schema envelope (`"json_with_schema"`).
    #[serde(default)]
    pub key_converter: Option<Converter>,
    /// The value's form, the same choices as `key_converter`. Default
    /// `"string"` (the payload's bytes); with `envelope_columns` the value
    /// is a JSON envelope, which is `"json"` (the only form allowed there).
    #[serde(default)]
    pub value_converter: Option<Converter>,
    /// A `timestamptz` column used as the record timestamp; `None` lets Kafka
    /// stamp the record. `""` in the file means `None`.
    #[serde(default, deserialize_with = "units::optional_name")]
    pub timestamp_column: Option<String>,
    /// Publish a tombstone (null value) for a row whose payload is NULL.
    #[serde(default)]
    pub tombstone_on_empty_payload: bool,
    /// What to do when an outbox row is updated.
    #[serde(default)]
    pub on_update: OnUpdate,
    /// Order of the table's rows in the snapshot (and so of one aggregate's
    /// snapshot events); empty means the table's primary key.
    #[serde(default)]
    pub snapshot_order_by: Vec<String>,
    /// How a row becomes a record: the payload as is (`raw`), a
    /// CloudEvent (`cloudevents`, configured in `cloudevents`), or key and
    /// value through the schema registry (`avro`, `json_schema`).
    #[serde(default)]
    pub format: OutboxFormat,
    /// `[outbox.cloudevents]`: the CloudEvents attributes, read when
    /// `format = "cloudevents"`.
    #[serde(default)]
    pub cloudevents: CloudEventsConfig,
    /// A column holding the W3C trace context of the transaction that wrote
    /// the row (a `traceparent` value, or Debezium's `tracingspancontext`
    /// Java-properties text); becomes the `traceparent` (and `tracestate`)
    /// header. `None`/`""`: no trace headers.
    #[serde(default, deserialize_with = "units::optional_name")]
    pub trace_context_column: Option<String>,
    /// `[outbox.retention]`: delete rows older than `keep` whose events the
    /// stored offset covers (`walrelay prune`, and `run` every `interval`).
    /// `None`: rows are never deleted by walrelay.
    #[serde(default)]
    pub retention: Option<RetentionConfig>,
}

/// `[outbox.retention]`: how old outbox rows are deleted, never before the
/// stored offset covers their events (`crate::retention`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    /// Rows younger than this are kept (by their commit time, or by
    /// `column`). Required.
    #[serde(deserialize_with = "units::duration")]
    pub keep: Duration,
    /// A `timestamptz` column to judge rows by instead of their
    /// transaction's commit timestamp (which needs
    /// `track_commit_timestamp = on`). `None`: the commit timestamp.
    #[serde(default, deserialize_with = "units::optional_name")]
    pub column: Option<String>,
    /// How far before the stored offset's commit time a row must be to
    /// count as published. Default 5 minutes with the commit timestamp;
    /// required with `column` (it must exceed the longest transaction
    /// writing the outbox, from setting the column to its commit).
    #[serde(default, deserialize_with = "units::optional_duration")]
    pub margin: Option<Duration>,
    /// Rows deleted per transaction, about (the batch is a range of heap
    /// pages sized to hold about this many).
    #[serde(default = "defaults::retention_batch_rows")]
    pub batch_rows: u32,
    /// `lock_timeout` of each batch: a batch that waits longer for a table
    /// lock is skipped (and counted), never waited for.
    #[serde(
        default = "defaults::retention_lock_timeout",
        deserialize_with = "units::duration"
    )]
    pub lock_timeout: Duration,
    /// `statement_timeout` of each batch's statements.
    #[serde(
        default = "defaults::retention_statement_timeout",
        deserialize_with = "units::duration"
    )]
    pub statement_timeout: Duration,
    /// How often `walrelay run` prunes this table in the background.
    /// `None`: only `walrelay prune` does (e.g. from cron).
    #[serde(default, deserialize_with = "units::optional_duration")]
    pub interval: Option<Duration>,
}

impl RetentionConfig {
    /// The default margin with the commit timestamp.
    pub const COMMIT_TIMESTAMP_MARGIN: Duration = Duration::from_secs(300);

    /// The margin kept behind the stored offset's commit time.
    pub fn margin(&self) -> Duration {
        self.margin.unwrap_or(Self::COMMIT_TIMESTAMP_MARGIN)
    }
}

/// `outbox.key_converter`/`value_converter`: how a Debezium deployment's
/// Kafka Connect converter would write the key or value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Converter {
    /// `StringConverter`: the column's bytes unchanged (walrelay's form).
    #[default]
    String,
    /// `JsonConverter` with `schemas.enable=false`: a JSON value.
    Json,
    /// `JsonConverter` with `schemas.enable=true` (its default):
    /// `{"schema": …, "payload": …}`.
    JsonWithSchema,
}

impl Converter {
    /// The name as the configuration spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Converter::String => "string",
            Converter::Json => "json",
            Converter::JsonWithSchema => "json_with_schema",
        }
    }
}

/// `outbox.format`: the shape of an outbox record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutboxFormat {
    /// The payload as the value, unchanged (Debezium's Outbox Event Router).
    #[default]
    Raw,
    /// A CloudEvents 1.0 event in the Kafka protocol binding.
    CloudEvents,
    /// Key and value in Avro, in the Confluent wire format (magic byte 0,
    /// 4-byte schema id, body), with the schemas Debezium's outbox writes
    /// under Confluent's `AvroConverter`; needs `[kafka.schema_registry]`.
    Avro,
    /// Key and value as JSON under a JSON Schema, in the Confluent wire
    /// format (`JsonSchemaConverter`); needs `[kafka.schema_registry]`.
    #[serde(rename = "json_schema")]
    JsonSchema,
    /// Key and value as Protobuf (proto3) messages in the Confluent wire
    /// format; needs `[kafka.schema_registry]`.
    Protobuf,
}

impl OutboxFormat {
    /// The name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxFormat::Raw => "raw",
            OutboxFormat::CloudEvents => "cloudevents",
            OutboxFormat::Avro => "avro",
            OutboxFormat::JsonSchema => "json_schema",
            OutboxFormat::Protobuf => "protobuf",
        }
    }

    /// Whether records of this format take schema ids from the registry.
    pub fn uses_registry(self) -> bool {
        matches!(
            self,
            OutboxFormat::Avro | OutboxFormat::JsonSchema | OutboxFormat::Protobuf
        )
    }
}

/// `outbox.cloudevents.mode`: the Kafka protocol binding's content mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CloudEventsMode {
    /// Attributes in `ce_*` headers, the payload as the value.
    #[default]
    Binary,
    /// The whole event as `application/cloudevents+json` in the value.
    Structured,
}

/// `[outbox.cloudevents]`: how an outbox row maps to CloudEvents
/// attributes (`id`, `type` and `subject` come from the id, type and
/// aggregate id columns; `time` is the commit time).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudEventsConfig {
    /// Binary or structured content mode.
    #[serde(default)]
    pub mode: CloudEventsMode,
    /// The `source` attribute (a URI-reference). Required with
    /// `format = "cloudevents"`.
    #[serde(default, deserialize_with = "units::optional_name")]
    pub source: Option<String>,
    /// A fixed `dataschema` attribute (an absolute URI).
    #[serde(default, deserialize_with = "units::optional_name")]
    pub dataschema: Option<String>,
    /// A column whose value is the `dataschema` attribute (an absolute URI;
    /// NULL leaves it out). Excludes `dataschema`.
    #[serde(default, deserialize_with = "units::optional_name")]
    pub dataschema_column: Option<String>,
    /// The `datacontenttype` attribute (`content-type` header in binary
    /// mode); default from the payload column's type.
    #[serde(default, deserialize_with = "units::optional_name")]
    pub datacontenttype: Option<String>,
    /// Extension attributes: attribute name → column.
    #[serde(default)]
    pub extensions: BTreeMap<String, String>,
}

impl OutboxConfig {
    /// Columns a topic template may refer to: the id, aggregate type,
    /// aggregate id and type columns, then the header columns.
    pub fn template_columns(&self) -> Vec<&str> {
        let mut columns = vec![
            self.id_column.as_str(),
            self.aggregate_type_column.as_str(),
            self.aggregate_id_column.as_str(),
            self.type_column.as_str(),
        ];
        for (column, _) in self.header_placements().chain(self.envelope_placements()) {
            if !columns.contains(&column) {
                columns.push(column);
            }
        }
        columns
    }

    /// `header_columns` as (column, header name).
    pub fn header_placements(&self) -> impl Iterator<Item = (&str, &str)> {
        self.header_columns.iter().map(|e| placement(e))
    }

    /// `envelope_columns` as (column, member name).
    pub fn envelope_placements(&self) -> impl Iterator<Item = (&str, &str)> {
        self.envelope_columns.iter().map(|e| placement(e))
    }

    /// Whether an envelope embeds a JSON payload as JSON (the default).
    pub fn expands_json_payload(&self) -> bool {
        self.expand_json_payload.unwrap_or(true)
    }

    /// The key's form (`key_converter`, else `converter`, else `string`).
    pub fn key_form(&self) -> Converter {
        self.key_converter.or(self.converter).unwrap_or_default()
    }

    /// The value's form (`value_converter`, else `converter`, else
    /// `string`; with `envelope_columns` unset means `json`).
    pub fn value_form(&self) -> Converter {
        match self.value_converter.or(self.converter) {
            Some(c) => c,
            None if !self.envelope_columns.is_empty() => Converter::Json,
            None => Converter::String,
        }
    }
}

/// An entry of `header_columns` or `envelope_columns`, `"column"` or
/// `"column:alias"`, as (column, the name it is placed under). Split at the
/// first `:`; validation refuses entries with more than one.
pub fn placement(entry: &str) -> (&str, &str) {
    entry.split_once(':').unwrap_or((entry, entry))
}
