//! Validation of `[outbox.cloudevents]` and `outbox.trace_context_column`,
//! and the CloudEvents 1.0.2 syntax rules the router relies on: a
//! configuration that passes here makes only valid attributes, so the
//! router checks per row only what a row can get wrong (an empty id or
//! type, a value that is not UTF-8, a `dataschema` column that is not an
//! absolute URI).

use super::error::{Problem, quoted};
use super::schema::{OutboxConfig, OutboxFormat};

/// Attribute names the CloudEvents 1.0.2 core (and its JSON format) define:
/// no extension may take them.
pub const CORE_ATTRIBUTES: [&str; 11] = [
    "specversion",
    "id",
    "source",
    "type",
    "datacontenttype",
    "dataschema",
    "subject",
    "time",
    "data",
    "data_base64",
    // Not an attribute of 1.0, but a 0.3 one SDKs still recognise.
    "schemaurl",
];

/// The Distributed Tracing extension's attributes, filled from
/// `trace_context_column`.
pub const TRACE_ATTRIBUTES: [&str; 2] = ["traceparent", "tracestate"];

/// Why `name` cannot be a CloudEvents attribute name: the spec (3.1.1)
/// says names MUST be lower-case ASCII letters or digits (and SHOULD be at
/// most 20 characters: longer ones are allowed, as the spec allows them).
pub fn attribute_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("is empty; name the attribute".into());
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return Some(format!(
            "{} is not a CloudEvents attribute name: only lower-case ASCII letters and digits \
             are allowed (CloudEvents 1.0.2, 3.1.1), e.g. \"schemaversion\"",
            quoted(name)
        ));
    }
    None
}

/// Characters RFC 3986 allows in a URI-reference, `%` aside.
fn is_uri_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~:/?#[]@!$&'()*+,;=".contains(&b)
}

/// Why `text` is not an RFC 3986 URI-reference (the `source` attribute's
/// type): a character outside the URI set, or a `%` not followed by two
/// hex digits.
pub fn uri_reference_problem(text: &str) -> Option<&'static str> {
    if text.is_empty() {
        return Some("is empty; CloudEvents requires a non-empty URI-reference");
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = |j: usize| bytes.get(j).is_some_and(u8::is_ascii_hexdigit);
            if !(hex(i + 1) && hex(i + 2)) {
                return Some("has a '%' not followed by two hex digits (percent-encode it as %25)");
            }
            i += 3;
            continue;
        }
        if !is_uri_char(b) {
            return Some(
                "has a character a URI-reference cannot hold (a space, a quote, a non-ASCII \
                 character, …); percent-encode it",
            );
        }
        i += 1;
    }
    None
}

/// Why `text` is not an absolute URI (the `dataschema` attribute's type):
/// it needs a scheme (`https:`, `urn:`) and URI characters only.
pub fn absolute_uri_problem(text: &str) -> Option<&'static str> {
    if let Some(problem) = uri_reference_problem(text) {
        return Some(problem);
    }
    let scheme = text.split(':').next().unwrap_or_default();
    let valid_scheme = text.contains(':')
        && scheme
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    if !valid_scheme {
        return Some("is not an absolute URI: it needs a scheme, e.g. \"https://…\" or \"urn:…\"");
    }
    None
}

/// Why `text` is not a media type (`type/subtype`, parameters allowed).
fn media_type_problem(text: &str) -> Option<&'static str> {
    let essence = text.split(';').next().unwrap_or_default().trim();
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    match essence.split_once('/') {
        Some((t, s)) if token(t) && token(s) && text.bytes().all(|b| (0x20..0x7f).contains(&b)) => {
            None
        }
        _ => Some("is not a media type (RFC 2046 type/subtype, e.g. \"application/json\")"),
    }
}

/// Checks the CloudEvents and trace-context keys of `outbox[i]`.
pub(super) fn check(outbox: &OutboxConfig, at: &dyn Fn(&str) -> String, out: &mut Vec<Problem>) {
    let ce = &outbox.cloudevents;
    // A header column must not pose as a header walrelay writes.
    for (j, (_, column)) in outbox.header_placements().enumerate() {
        let lower = column.to_ascii_lowercase();
        let trace =
            outbox.trace_context_column.is_some() && TRACE_ATTRIBUTES.contains(&lower.as_str());
        let cloudevents = outbox.format == OutboxFormat::CloudEvents
            && (lower.starts_with("ce_") || lower == "content-type");
        if trace || cloudevents {
            out.push(Problem::new(
                at(&format!("header_columns[{j}]")),
                format!(
                    "a header named {} would stand beside (and contradict) the one walrelay \
                     writes for {}; remove it from header_columns",
                    quoted(column),
                    if trace {
                        "trace_context_column"
                    } else {
                        "format = \"cloudevents\""
                    }
                ),
            ));
        }
    }
    if outbox.format != OutboxFormat::CloudEvents {
        let set = ce.source.is_some()
            || ce.dataschema.is_some()
            || ce.dataschema_column.is_some()
            || ce.datacontenttype.is_some()
            || !ce.extensions.is_empty()
            || ce.mode != Default::default();
        if set {
            out.push(Problem::new(
                at("cloudevents"),
                "is set, but format is \"raw\", which ignores it; set format = \"cloudevents\" \
                 or remove the [outbox.cloudevents] section",
            ));
        }
        return;
    }
    match ce.source.as_deref() {
        None => out.push(Problem::new(
            at("cloudevents.source"),
            "is required with format = \"cloudevents\": the CloudEvents source attribute, a \
             URI-reference naming the context the events come from, e.g. \"/shop/orders\" or \
             \"https://shop.example.com/orders\"",
        )),
        Some(source) => {
            if let Some(problem) = uri_reference_problem(source) {
                out.push(Problem::new(
                    at("cloudevents.source"),
                    format!("{} {problem}", quoted(source)),
                ));
            }
        }
    }
    if let Some(schema) = ce.dataschema.as_deref() {
        if let Some(problem) = absolute_uri_problem(schema) {
            out.push(Problem::new(
                at("cloudevents.dataschema"),
                format!("{} {problem}", quoted(schema)),
            ));
        }
        if ce.dataschema_column.is_some() {
            out.push(Problem::new(
                at("cloudevents.dataschema_column"),
                "and cloudevents.dataschema are both set; keep one (a fixed schema URI, or a \
                 column holding one per row)",
            ));
        }
    }
    if let Some(media) = ce.datacontenttype.as_deref()
        && let Some(problem) = media_type_problem(media)
    {
        out.push(Problem::new(
            at("cloudevents.datacontenttype"),
            format!("{} {problem}", quoted(media)),
        ));
    }
    for (name, column) in &ce.extensions {
        let key = at(&format!("cloudevents.extensions.{name}"));
        if let Some(problem) = attribute_name_problem(name) {
            out.push(Problem::new(key.clone(), problem));
        } else if CORE_ATTRIBUTES.contains(&name.as_str()) {
            out.push(Problem::new(
                key.clone(),
                format!(
                    "{} is a CloudEvents core attribute, not an extension; choose another name",
                    quoted(name)
                ),
            ));
        } else if TRACE_ATTRIBUTES.contains(&name.as_str()) && outbox.trace_context_column.is_some()
        {
            out.push(Problem::new(
                key.clone(),
                format!(
                    "{} is filled from trace_context_column; remove the extension or the \
                     trace_context_column",
                    quoted(name)
                ),
            ));
        }
        if column.is_empty() {
            out.push(Problem::new(key, "names no column; set the column name"));
        }
    }
}

#[cfg(test)]
mod tests;
