//! Validation of `outbox.header_columns` and `outbox.envelope_columns`
//! (entries `"column"` or `"column:alias"`, Debezium's
//! `table.fields.additional.placement=<column>:header|envelope[:<alias>]`)
//! and `outbox.expand_json_payload`, and the converter forms
//! (`converter`, `key_converter`, `value_converter`). A configuration that
//! passes here places every column under a name of its own that no name
//! walrelay writes takes, and asks only for key and value forms the router
//! writes as Debezium does: the router then only binds columns to
//! positions.

use std::collections::HashSet;

use super::error::{Problem, quoted};
use super::schema::{Converter, OutboxConfig, OutboxFormat, placement};
use super::template::identifier;

/// The envelope member holding the payload.
pub const PAYLOAD_MEMBER: &str = "payload";

/// Checks the placements of `outbox[i]`.
pub(super) fn check(outbox: &OutboxConfig, at: &dyn Fn(&str) -> String, out: &mut Vec<Problem>) {
    let mut names = HashSet::new();
    for (j, entry) in outbox.header_columns.iter().enumerate() {
        let key = at(&format!("header_columns[{j}]"));
        let Some(name) = entry_problem(&key, entry, "header", out) else {
            continue;
        };
        if name == "id" {
            out.push(Problem::new(
                key,
                "the \"id\" header is reserved: every record carries the event id \
                 (id_column) in it; remove \"id\" from header_columns (or give the column \
                 another header name, \"id:alias\")",
            ));
        } else if !names.insert(name) {
            out.push(duplicate(key, entry, name, "header"));
        }
    }
    let mut names = HashSet::new();
    for (j, entry) in outbox.envelope_columns.iter().enumerate() {
        let key = at(&format!("envelope_columns[{j}]"));
        let Some(name) = entry_problem(&key, entry, "envelope", out) else {
            continue;
        };
        if name == PAYLOAD_MEMBER {
            out.push(Problem::new(
                key,
                format!(
                    "{} would be placed as the envelope's \"payload\" member, which holds the \
                     payload column; give it another name, e.g. \"{}:{}_column\"",
                    quoted(entry),
                    placement(entry).0,
                    placement(entry).0
                ),
            ));
        } else if !names.insert(name) {
            out.push(duplicate(key, entry, name, "envelope member"));
        }
    }
    if !outbox.envelope_columns.is_empty() && outbox.format == OutboxFormat::CloudEvents {
        out.push(Problem::new(
            at("envelope_columns"),
            "cannot be combined with format = \"cloudevents\": both decide what the record \
             value is (a CloudEvent carries the payload as its data); remove envelope_columns \
             and carry the columns as CloudEvents extensions \
             ([outbox.cloudevents] extensions = { name = \"column\" }), or set format = \"raw\"",
        ));
    }
    converters(outbox, at, out);
}

/// Checks `converter`, `key_converter`, `value_converter` and
/// `expand_json_payload` together: each combination left is one the
/// router writes as Debezium would.
fn converters(outbox: &OutboxConfig, at: &dyn Fn(&str) -> String, out: &mut Vec<Problem>) {
    let both = outbox.converter.map(Converter::as_str);
    if let Some(both) = both {
        for (key, set) in [
            ("key_converter", outbox.key_converter),
            ("value_converter", outbox.value_converter),
        ] {
            if set.is_some() {
                out.push(Problem::new(
                    at(key),
                    format!(
                        "is set beside converter = {}, which sets key and value alike; remove \
                         converter and set key_converter and value_converter, or remove {key}",
                        quoted(both)
                    ),
                ));
            }
        }
    }
    // The key that chose the value's form, for messages.
    let value_key = if outbox.value_converter.is_some() {
        "value_converter"
    } else {
        "converter"
    };
    let envelope = !outbox.envelope_columns.is_empty();
    let explicit_value = outbox.value_converter.or(outbox.converter);
    match (envelope, explicit_value) {
        (true, Some(Converter::String)) => out.push(Problem::new(
            at(value_key),
            "is \"string\", but envelope_columns makes the value a JSON envelope (what \
             Debezium writes through JsonConverter with schemas.enable=false); remove it or \
             set it to \"json\"",
        )),
        (true, Some(Converter::JsonWithSchema)) => out.push(Problem::new(
            at(value_key),
            "is \"json_with_schema\", but an envelope in Connect's schema form is not \
             supported; set it to \"json\" (schemas.enable=false), or remove envelope_columns",
        )),
        _ => {}
    }
    let value = outbox.value_form();
    // Formats that write the record themselves take no converter form.
    let own_form = match outbox.format {
        OutboxFormat::CloudEvents => Some("the CloudEvents Kafka binding"),
        OutboxFormat::Avro | OutboxFormat::JsonSchema | OutboxFormat::Protobuf => {
            Some("the schema registry's wire format, as Confluent's converters do")
        }
        _ => None,
    };
    if let Some(own) = own_form {
        for (key, form) in [("key_converter", outbox.key_form()), (value_key, value)] {
            if form != Converter::String {
                out.push(Problem::new(
                    at(key),
                    format!(
                        "is {}, but format = {} writes the record itself ({own}); remove it, \
                         or set format = \"raw\"",
                        quoted(form.as_str()),
                        quoted(outbox.format.as_str())
                    ),
                ));
            }
        }
    }
    if outbox.expand_json_payload.is_some() && !envelope && value == Converter::String {
        out.push(Problem::new(
            at("expand_json_payload"),
            "is set, but the value is the payload's bytes unchanged (value_converter = \
             \"string\"; a JSON payload is JSON already); to write it as Debezium's \
             table.expand.json.payload does through JsonConverter set value_converter = \
             \"json\" (or \"json_with_schema\"), to embed it in an envelope set \
             envelope_columns, else remove expand_json_payload",
        ));
    }
}

/// The name `entry` places its column under, or `None` after reporting
/// why it is not `"column"` or `"column:alias"`.
fn entry_problem<'a>(
    key: &str,
    entry: &'a str,
    what: &str,
    out: &mut Vec<Problem>,
) -> Option<&'a str> {
    if entry.matches(':').count() > 1 {
        let parts: Vec<&str> = entry.split(':').collect();
        let hint = match parts.as_slice() {
            [column, "header" | "envelope", alias] => {
                format!(
                    " (Debezium's \"{column}:{}:{alias}\" is \"{column}:{alias}\" here)",
                    parts[1]
                )
            }
            _ => String::new(),
        };
        out.push(Problem::new(
            key,
            format!(
                "{} has more than one ':'; write \"column\" or \"column:alias\"{hint}",
                quoted(entry)
            ),
        ));
        return None;
    }
    let (column, name) = placement(entry);
    let before = out.len();
    identifier(key, column, out);
    if out.len() > before {
        return None;
    }
    if name.is_empty() {
        out.push(Problem::new(
            key,
            format!(
                "{} has an empty {what} name after ':'; write \"{column}\" or \"{column}:alias\"",
                quoted(entry)
            ),
        ));
        return None;
    }
    if name.chars().any(char::is_control) {
        out.push(Problem::new(
            key,
            format!(
                "the {what} name of {} contains a control character; remove it",
                quoted(entry)
            ),
        ));
        return None;
    }
    Some(name)
}

fn duplicate(key: String, entry: &str, name: &str, what: &str) -> Problem {
    let message = if placement(entry).0 == name {
        format!("{} is listed twice; remove the duplicate", quoted(entry))
    } else {
        format!(
            "{} places a second {what} named {}; each name may be used once: remove one or \
             give it another alias",
            quoted(entry),
            quoted(name)
        )
    };
    Problem::new(key, message)
}

#[cfg(test)]
mod tests;
