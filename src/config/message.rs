//! `[[message]]` sections: transactional logical decoding messages
//! (`pg_logical_emit_message(true, prefix, payload)`) routed by prefix to
//! Kafka topics — an outbox without a table.
//!
//! A section names a `prefix` (exact, or ending in `*` for every prefix
//! that starts with the rest), a `topic` template whose placeholders are
//! `{prefix}` or top-level fields of the JSON payload, an optional
//! `key_field` (default: the key is the prefix), `header_fields` and a
//! `format`: the payload as is, or Debezium's `op: "m"` message event as
//! JSON, or in the Confluent wire format as Avro or JSON Schema (those two
//! need `[kafka.schema_registry]`, checked with the other registry rules in
//! `validate/registry.rs`). Validation here needs no I/O; the router
//! ([`crate::router::message`]) applies a section to a message.

use serde::Deserialize;

use super::error::{Problem, quoted};
use super::template::TopicTemplate;

/// The placeholder that stands for the message's prefix in a topic template.
pub const PREFIX_PLACEHOLDER: &str = "prefix";

/// The longest prefix or field name accepted (a prefix is free text in
/// PostgreSQL; a bound keeps error messages and headers short).
const MAX_NAME_BYTES: usize = 255;

/// Prefixes walrelay itself writes (heartbeats, incremental snapshot
/// watermarks and signals): non-transactional and never routed.
pub const RESERVED_PREFIX: &str = "walrelay.";

/// One `[[message]]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageConfig {
    /// The prefix to route: exact, or `something*` for every prefix that
    /// starts with `something`. Required.
    pub prefix: String,
    /// The destination topic, with `{prefix}` and `{field}` placeholders
    /// (`field`: a top-level field of the JSON payload). Required.
    pub topic: TopicTemplate,
    /// A top-level field of the JSON payload whose value becomes the record
    /// key; `None`: the key is the prefix.
    #[serde(default)]
    pub key_field: Option<String>,
    /// Top-level payload fields copied into headers (header name = field
    /// name); a missing or null field adds no header.
    #[serde(default)]
    pub header_fields: Vec<String>,
    /// The record's shape: the payload as is (`raw`), or Debezium's
    /// `op: "m"` message event as JSON (`debezium`), Avro (`avro`) or JSON
    /// Schema (`json_schema`).
    #[serde(default)]
    pub format: MessageFormat,
}

/// `message.format`: the shape of a message record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageFormat {
    /// The payload as the value, unchanged.
    #[default]
    Raw,
    /// Debezium's PostgreSQL connector's logical decoding message event
    /// (`op: "m"`, key `{"prefix": …}`, the content base64 in
    /// `message.content`), as its JSON converter writes it with
    /// `schemas.enable=false`.
    Debezium,
    /// The same event in Avro, in the Confluent wire format, with the
    /// schemas Debezium's Avro converter gives message events
    /// (`io.debezium.connector.postgresql.MessageKey`, `.MessageValue`):
    /// schema ids from `[kafka.schema_registry]`.
    Avro,
    /// The same event as JSON under the JSON Schemas Confluent's
    /// `JsonSchemaConverter` makes of those schemas, in the wire format.
    JsonSchema,
    /// The same event as Protobuf (proto3) messages in the wire format.
    Protobuf,
}

impl MessageFormat {
    /// The name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageFormat::Raw => "raw",
            MessageFormat::Debezium => "debezium",
            MessageFormat::Avro => "avro",
            MessageFormat::JsonSchema => "json_schema",
            MessageFormat::Protobuf => "protobuf",
        }
    }

    /// Whether the record is Debezium's `op: "m"` event (key
    /// `{"prefix": …}`), in whichever encoding.
    pub fn is_debezium_event(self) -> bool {
        self != MessageFormat::Raw
    }

    /// Whether records take schema ids from a registry.
    pub fn uses_registry(self) -> bool {
        matches!(
            self,
            MessageFormat::Avro | MessageFormat::JsonSchema | MessageFormat::Protobuf
        )
    }
}

impl MessageConfig {
    /// Whether this section routes messages with `prefix`.
    pub fn matches(&self, prefix: &str) -> bool {
        match self.prefix.strip_suffix('*') {
            Some(start) => prefix.starts_with(start),
            None => prefix == self.prefix,
        }
    }

    /// Whether routing needs the payload parsed as JSON (a field is used
    /// for the topic, the key or a header).
    pub fn reads_payload(&self) -> bool {
        self.key_field.is_some()
            || !self.header_fields.is_empty()
            || self.topic.columns().any(|c| c != PREFIX_PLACEHOLDER)
    }

    /// One line for `walrelay check`.
    pub fn describe(&self) -> String {
        let key = match (&self.key_field, self.format) {
            (_, MessageFormat::Debezium) => {
                "Debezium's op \"m\" events, key = {\"prefix\": …}".to_owned()
            }
            (_, f) if f.uses_registry() => format!(
                "Debezium's op \"m\" events in {} (schema registry, Debezium's MessageKey and \
                 MessageValue schemas), key = {{\"prefix\": …}}",
                f.as_str()
            ),
            (Some(field), _) => format!("key = payload field {field}"),
            (None, _) => "key = the prefix".to_owned(),
        };
        let headers = if self.header_fields.is_empty() {
            String::new()
        } else {
            format!(", headers from {}", self.header_fields.join(", "))
        };
        format!(
            "transactional messages to topic {}, {key}{headers}",
            self.topic
        )
    }
}

/// The problems of the `[[message]]` sections.
pub(super) fn problems(messages: &[MessageConfig], out: &mut Vec<Problem>) {
    for (i, m) in messages.iter().enumerate() {
        let at = |key: &str| format!("message[{i}].{key}");
        let start = m.prefix.strip_suffix('*').unwrap_or(&m.prefix);
        if start.is_empty() {
            out.push(Problem::new(
                at("prefix"),
                "is empty (or only \"*\"); name the prefix the application passes to \
                 pg_logical_emit_message, e.g. \"orders\" or \"orders.*\"",
            ));
        } else if start.contains('*') {
            out.push(Problem::new(
                at("prefix"),
                format!(
                    "{} has a '*' before its end; '*' is allowed only as the last character \
                     (every prefix that starts with the rest), e.g. \"orders.*\"",
                    quoted(&m.prefix)
                ),
            ));
        } else if m.prefix.len() > MAX_NAME_BYTES || m.prefix.contains('\0') {
            out.push(Problem::new(
                at("prefix"),
                format!(
                    "must be at most {MAX_NAME_BYTES} bytes without NUL characters; shorten it"
                ),
            ));
        } else if m.prefix.starts_with(RESERVED_PREFIX) || RESERVED_PREFIX.starts_with(start) {
            out.push(Problem::new(
                at("prefix"),
                format!(
                    "{} covers prefixes walrelay writes itself ({RESERVED_PREFIX}heartbeat, \
                     {RESERVED_PREFIX}watermark, {RESERVED_PREFIX}signal); choose a prefix \
                     that does not start with {}",
                    quoted(&m.prefix),
                    quoted(RESERVED_PREFIX)
                ),
            ));
        }
        for (j, earlier) in messages[..i].iter().enumerate() {
            let overlap = if m.prefix == earlier.prefix {
                Some("the same prefix")
            } else if earlier.prefix.ends_with('*') && earlier.matches(start) {
                Some("a prefix its pattern already covers")
            } else if m.prefix.ends_with('*')
                && m.matches(earlier.prefix.strip_suffix('*').unwrap_or(&earlier.prefix))
            {
                Some("a pattern that covers its prefix")
            } else {
                None
            };
            if let Some(what) = overlap {
                out.push(Problem::new(
                    at("prefix"),
                    format!(
                        "{} overlaps message[{j}] (prefix {}): {what}; each message must \
                         match one section, so make the prefixes distinct",
                        quoted(&m.prefix),
                        quoted(&earlier.prefix)
                    ),
                ));
            }
        }
        for field in m.topic.columns() {
            field_name(&at("topic"), field, out);
        }
        if let Some(field) = &m.key_field {
            field_name(&at("key_field"), field, out);
            if m.format.is_debezium_event() {
                out.push(Problem::new(
                    at("key_field"),
                    format!(
                        "with format = \"{}\" the key is Debezium's {{\"prefix\": …}}; remove \
                         key_field, or use format = \"raw\"",
                        m.format.as_str()
                    ),
                ));
            }
        }
        for (j, field) in m.header_fields.iter().enumerate() {
            let key = at("header_fields");
            field_name(&key, field, out);
            if field.starts_with("walrelay.") {
                out.push(Problem::new(
                    key.clone(),
                    format!(
                        "{} would clash with walrelay's own headers (walrelay.event_id, \
                         walrelay.lsn, walrelay.prefix); rename the payload field",
                        quoted(field)
                    ),
                ));
            }
            if m.header_fields[..j].contains(field) {
                out.push(Problem::new(
                    key,
                    format!("{} is listed twice; list each field once", quoted(field)),
                ));
            }
        }
    }
}

/// A payload field name: non-empty, bounded, no NUL.
fn field_name(key: &str, field: &str, out: &mut Vec<Problem>) {
    if field.is_empty() {
        out.push(Problem::new(
            key.to_owned(),
            "names an empty field; name a top-level field of the JSON payload",
        ));
    } else if field.len() > MAX_NAME_BYTES || field.contains('\0') {
        out.push(Problem::new(
            key.to_owned(),
            format!(
                "field names must be at most {MAX_NAME_BYTES} bytes without NUL characters; \
                 shorten it"
            ),
        ));
    }
}

#[cfg(test)]
mod tests;
