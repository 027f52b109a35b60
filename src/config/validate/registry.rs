//! `[kafka.schema_registry]` rules, and the formats that need it:
//! a usable URL (and a CA file only for https://), basic auth given whole, `use_latest_version` only without
//! `auto_register`, a registry for every `avro`/`json_schema` outbox, table
//! message and heartbeat section, one table format with `provide_transaction_metadata`
//! (its BEGIN/END records take `table_defaults.format`), and
//! the combinations this version does not carry yet (an envelope, a
//! record-name subject strategy for the outbox's non-record schemas).
//!
//! Each rule pushes a [`Problem`] naming the key, what is wrong and the fix.

use std::time::Duration;

use super::DurationRule;
use crate::config::Config;
use crate::config::error::{Problem, quoted};
use crate::config::schema::{SchemaRegistryConfig, SubjectNameStrategy};

const KEY: &str = "kafka.schema_registry";

/// A registry request may take at most this long.
const REQUEST_TIMEOUT_MAX: Duration = Duration::from_secs(600);

pub(super) fn registry(config: &Config, out: &mut Vec<Problem>) {
    let registry = config.kafka.schema_registry.as_ref();
    if let Some(r) = registry {
        section(r, out);
    }
    tables(config, registry.is_some(), out);
    messages(config, registry.is_some(), out);
    if registry.is_none() && config.heartbeat.format.uses_registry() {
        out.push(Problem::new(
            "heartbeat.format",
            format!(
                "format = \"{}\" needs a schema registry, and there is no \
                 [kafka.schema_registry] section; add one with url = \
                 \"http://registry:8081\", or set format = \"json\"",
                config.heartbeat.format.as_str()
            ),
        ));
    }
    for (i, outbox) in config.outbox.iter().enumerate() {
        if !outbox.format.uses_registry() {
            continue;
        }
        let format = outbox.format.as_str();
        let Some(r) = registry else {
            out.push(Problem::new(
                format!("outbox[{i}].format"),
                format!(
                    "format = \"{format}\" needs a schema registry, and there is no \
                     [kafka.schema_registry] section; add one with url = \
                     \"http://registry:8081\", or set format = \"raw\""
                ),
            ));
            continue;
        };
        if !outbox.envelope_columns.is_empty() {
            out.push(Problem::new(
                format!("outbox[{i}].envelope_columns"),
                format!(
                    "cannot be combined with format = \"{format}\" yet: the value would be a \
                     record of the payload and the columns, which this version does not \
                     write; remove envelope_columns or set format = \"raw\""
                ),
            ));
        }
        if r.subject_name_strategy != SubjectNameStrategy::Topic {
            out.push(Problem::new(
                format!("{KEY}.subject_name_strategy"),
                format!(
                    "\"{}\" names subjects after a record's name, but outbox[{i}] (format = \
                     \"{format}\") writes a string key and the payload as its value, which are \
                     not records (Debezium's outbox under Confluent's converters: the same); \
                     use subject_name_strategy = \"topic\"",
                    r.subject_name_strategy.as_str()
                ),
            ));
        }
    }
}

/// `[[table]]` (and `[table_defaults]`) `format = "avro" | "json_schema"`:
/// a registry is needed. With `provide_transaction_metadata` the BEGIN/END
/// records are written in `table_defaults.format`, which every table must
/// then have: a transaction's records and its events in one format, as
/// Debezium's one converter writes them.
fn tables(config: &Config, has_registry: bool, out: &mut Vec<Problem>) {
    let d = &config.table_defaults;
    let mut formats: Vec<(String, crate::config::TableFormat)> = Vec::new();
    for (i, t) in config.tables.iter().enumerate() {
        let (key, format) = match t.format {
            Some(f) => (format!("table[{i}].format"), f),
            None => ("table_defaults.format".to_owned(), d.format),
        };
        if format.uses_registry() && !formats.iter().any(|(k, _)| *k == key) {
            formats.push((key, format));
        }
        if d.provide_transaction_metadata && format != d.format {
            out.push(Problem::new(
                format!("table[{i}].format"),
                format!(
                    "format = \"{}\" differs from table_defaults.format (\"{}\"), and with \
                     table_defaults.provide_transaction_metadata the BEGIN/END records are \
                     written in table_defaults.format: a transaction's records in one format; \
                     remove table[{i}].format or set table_defaults.format = \"{}\"",
                    format.as_str(),
                    d.format.as_str(),
                    format.as_str()
                ),
            ));
        }
    }
    for (key, format) in formats {
        if !has_registry {
            out.push(Problem::new(
                key,
                format!(
                    "format = \"{}\" needs a schema registry, and there is no \
                     [kafka.schema_registry] section; add one with url = \
                     \"http://registry:8081\", or set format = \"json\"",
                    format.as_str()
                ),
            ));
        }
    }
}

/// `[[message]] format = "avro" | "json_schema"`: a registry is needed.
/// Any subject name strategy will do (the key and value are records);
/// `provide_transaction_metadata` does not touch message records (their
/// `transaction` is null, as with `format = "debezium"`).
fn messages(config: &Config, has_registry: bool, out: &mut Vec<Problem>) {
    if has_registry {
        return;
    }
    for (i, m) in config.messages.iter().enumerate() {
        if m.format.uses_registry() {
            out.push(Problem::new(
                format!("message[{i}].format"),
                format!(
                    "format = \"{}\" needs a schema registry, and there is no \
                     [kafka.schema_registry] section; add one with url = \
                     \"http://registry:8081\", or set format = \"debezium\" (the same event \
                     as JSON)",
                    m.format.as_str()
                ),
            ));
        }
    }
}

fn section(r: &SchemaRegistryConfig, out: &mut Vec<Problem>) {
    if let Some(why) = url_problem(&r.url) {
        out.push(Problem::new(
            format!("{KEY}.url"),
            format!(
                "{why} (got {}); e.g. url = \"http://registry:8081\" (Apicurio: \
                 \"http://registry:8080/apis/ccompat/v7\")",
                quoted(&r.url)
            ),
        ));
    } else if r.ssl_ca.is_some() && !r.url.starts_with("https://") {
        out.push(Problem::new(
            format!("{KEY}.ssl_ca"),
            "is set, but url is not https://: the CA would never be used; use an https:// \
             url or remove ssl_ca",
        ));
    }
    if let Some(ca) = &r.ssl_ca
        && !ca.is_file()
    {
        out.push(Problem::new(
            format!("{KEY}.ssl_ca"),
            format!(
                "{} is not a readable file; give the PEM file of the CA that signed the \
                 registry's certificate",
                ca.display()
            ),
        ));
    }
    match (&r.username, &r.password) {
        (Some(_), None) => out.push(Problem::new(
            format!("{KEY}.password"),
            "is missing: username is set, and basic auth needs both; add password = \
             \"${WALRELAY_REGISTRY_PASSWORD}\" or remove username",
        )),
        (None, Some(_)) => out.push(Problem::new(
            format!("{KEY}.username"),
            "is missing: password is set, and basic auth needs both; add username or remove \
             password",
        )),
        _ => {}
    }
    if r.use_latest_version && r.auto_register {
        out.push(Problem::new(
            format!("{KEY}.use_latest_version"),
            "needs auto_register = false (as Confluent's use.latest.version needs \
             auto.register.schemas=false): with both, which schema a record is written with \
             would be ambiguous; set auto_register = false or remove use_latest_version",
        ));
    }
    DurationRule {
        key: "kafka.schema_registry.request_timeout",
        value: r.request_timeout,
        zero_allowed: false,
        max: REQUEST_TIMEOUT_MAX,
        example: "10s",
    }
    .check(out);
}

/// Why `url` is not a usable registry URL, or `None`.
pub(crate) fn url_problem(url: &str) -> Option<&'static str> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let Some(rest) = rest else {
        return Some("must start with http:// or https://");
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() || authority.starts_with(':') {
        return Some("names no host");
    }
    if let Some((_, port)) = authority.rsplit_once(':')
        && !authority.ends_with(']')
        && port.parse::<u16>().is_err()
    {
        return Some("has a port that is not a number");
    }
    if authority.contains('@') {
        return Some("must not hold credentials: use username and password");
    }
    if rest.contains(['?', '#']) || rest.chars().any(char::is_whitespace) {
        return Some("must be a plain base URL, without query, fragment or spaces");
    }
    None
}
