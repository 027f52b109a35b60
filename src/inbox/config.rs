//! The inbox consumer's TOML file (`walrelay inbox --config FILE`): its own
//! format, apart from the connector's (the consumer runs beside the
//! consuming service, not beside the source database).
//!
//! Invariants:
//! - Unknown keys and wrongly typed values are errors naming the file, the
//!   line and the key (toml's own message); every validation error names
//!   the key and the fix.
//! - `${NAME}` in `inbox.postgres.url` and `inbox.kafka.brokers` is replaced
//!   by environment variable `NAME` (`$${` is a literal `${`), after
//!   parsing. The URL holds a password: it never appears in `Debug` output
//!   or error text.
//! - The consumer properties the guarantees rest on (`enable.auto.commit`,
//!   `isolation.level`, `enable.auto.offset.store`) cannot be set through
//!   `[inbox.kafka.librdkafka]`.

pub mod url;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use crate::config::{Parsed, Problem};

/// Properties the consumer sets itself and refuses from the raw map.
pub const FIXED_PROPERTIES: &[(&str, &str)] = &[
    ("enable.auto.commit", "false"),
    ("enable.auto.offset.store", "false"),
    ("isolation.level", "read_committed"),
];

/// The file: one `[inbox]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InboxFile {
    pub inbox: InboxConfig,
}

/// `[inbox]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InboxConfig {
    /// Names this consumer in logs and metrics (`consumer` label); the
    /// Kafka group id unless `group_id` is set.
    pub name: String,
    #[serde(default)]
    pub group_id: Option<String>,
    /// Topics to consume; a name starting with `^` is a regular expression.
    pub topics: Vec<String>,
    #[serde(default = "default_workers")]
    pub workers: usize,
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    #[serde(default = "default_commit_interval", with = "humantime_serde")]
    pub commit_interval: Duration,
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    #[serde(default = "default_backoff_initial", with = "humantime_serde")]
    pub retry_backoff_initial: Duration,
    #[serde(default = "default_backoff_max", with = "humantime_serde")]
    pub retry_backoff_max: Duration,
    #[serde(default)]
    pub on_quarantine: OnQuarantine,
    /// Headers holding the event id, the first present wins.
    #[serde(default = "default_id_headers")]
    pub id_headers: Vec<String>,
    /// How long a graceful stop waits for records in progress.
    #[serde(default = "default_shutdown_timeout", with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    pub kafka: KafkaSection,
    pub postgres: PostgresSection,
    pub handler: HandlerSection,
    #[serde(default)]
    pub health: Option<HealthSection>,
}

/// What happens to a partition after one of its records is quarantined.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnQuarantine {
    /// The record is set aside (quarantine table, inbox row) and the
    /// partition goes on.
    #[default]
    Continue,
    /// The partition stops at the record: nothing after it is committed,
    /// the record is retried from the start after a restart.
    Stop,
}

/// `[inbox.kafka]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSection {
    pub brokers: String,
    #[serde(default = "default_offset_reset")]
    pub auto_offset_reset: String,
    #[serde(default)]
    pub librdkafka: BTreeMap<String, String>,
    /// Quarantined records go to this topic instead of the quarantine
    /// table.
    #[serde(default)]
    pub quarantine_topic: Option<String>,
}

/// `[inbox.postgres]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresSection {
    /// `postgres://user:password@host:port/db?sslmode=…`; a secret.
    #[serde(deserialize_with = "secret")]
    pub url: SecretString,
    #[serde(default = "default_inbox_table")]
    pub inbox_table: String,
    #[serde(default = "default_quarantine_table")]
    pub quarantine_table: String,
    #[serde(default = "default_true")]
    pub create_tables: bool,
}

/// `[inbox.handler]`: the statement that applies one event.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerSection {
    pub sql: String,
    #[serde(default)]
    pub params: Vec<String>,
}

/// `[inbox.health]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthSection {
    pub listen: SocketAddr,
}

fn secret<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SecretString, D::Error> {
    String::deserialize(d).map(SecretString::from)
}

fn default_workers() -> usize {
    4
}
fn default_max_in_flight() -> usize {
    1000
}
fn default_commit_interval() -> Duration {
    Duration::from_secs(1)
}
fn default_max_attempts() -> u32 {
    5
}
fn default_backoff_initial() -> Duration {
    Duration::from_millis(200)
}
fn default_backoff_max() -> Duration {
    Duration::from_secs(30)
}
fn default_shutdown_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_id_headers() -> Vec<String> {
    vec!["id".into(), "walrelay.event_id".into()]
}
fn default_offset_reset() -> String {
    "earliest".into()
}
fn default_inbox_table() -> String {
    "inbox".into()
}
fn default_quarantine_table() -> String {
    "inbox_quarantine".into()
}
fn default_true() -> bool {
    true
}

/// A parameter of the handler statement: what of the record it binds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Param {
    Id,
    Key,
    Value,
    Topic,
    Partition,
    Offset,
    Timestamp,
    Header(String),
}

impl Param {
    fn parse(text: &str) -> Option<Param> {
        Some(match text {
            "id" => Param::Id,
            "key" => Param::Key,
            "value" => Param::Value,
            "topic" => Param::Topic,
            "partition" => Param::Partition,
            "offset" => Param::Offset,
            "timestamp" => Param::Timestamp,
            other => Param::Header(other.strip_prefix("header:")?.to_owned()),
        })
    }
}

/// A configuration that loaded and passed validation.
#[derive(Debug)]
pub struct Loaded {
    pub inbox: InboxConfig,
    pub params: Vec<Param>,
}

impl InboxConfig {
    pub fn group_id(&self) -> &str {
        self.group_id.as_deref().unwrap_or(&self.name)
    }
}

/// Reads and validates `path`; errors name the file.
pub fn load(path: &Path) -> Result<Loaded, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read the file: {e}", path.display()))?;
    from_str(&text, &path.display().to_string(), &|name| {
        std::env::var(name).ok()
    })
}

/// Parses, interpolates and validates `text` (from `origin`). Every
/// problem is placed as the connector's are (`file:line:column: key: …`,
/// by [`crate::config::parse_toml`]); an unknown key names the nearest
/// known one.
pub fn from_str(
    text: &str,
    origin: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Loaded, String> {
    let parsed: Parsed<InboxFile> =
        crate::config::parse_toml(text, origin, &inbox_file_hint).map_err(|e| e.to_string())?;
    let (InboxFile { mut inbox }, positions) = parsed.into_parts();
    let error = |problems: Vec<Problem>| positions.error(problems).to_string();
    let mut found = Vec::new();
    match interpolate(inbox.postgres.url.expose_secret(), env) {
        Ok(url) => inbox.postgres.url = SecretString::from(url),
        Err(e) => found.push(Problem::new("inbox.postgres.url", e)),
    }
    match interpolate(&inbox.kafka.brokers, env) {
        Ok(brokers) => inbox.kafka.brokers = brokers,
        Err(e) => found.push(Problem::new("inbox.kafka.brokers", e)),
    }
    if !found.is_empty() {
        return Err(error(found));
    }
    let params = validate(&inbox).map_err(|problems| {
        error(
            problems
                .into_iter()
                .map(|(key, what)| Problem::new(format!("inbox.{key}"), what))
                .collect(),
        )
    })?;
    Ok(Loaded { inbox, params })
}

/// A connector's file given to `walrelay inbox`.
fn inbox_file_hint(top: &[&str]) -> Option<Problem> {
    if top.contains(&"inbox") {
        return None;
    }
    let key = [
        "connector",
        "postgres",
        "kafka",
        "outbox",
        "table",
        "message",
    ]
    .into_iter()
    .find(|k| top.contains(k))?;
    Some(Problem::new(
        key,
        "this is a connector's file ([connector], [postgres], [kafka]), not an inbox \
         consumer's: run it with `walrelay run --config <file>` (or `walrelay check`); \
         `walrelay inbox` takes a file with one [inbox] section (docs/consumers.md)",
    ))
}

/// `${NAME}` → the variable; `$${` → `${`. The error names the variable,
/// never the text around it (a URL holds a password).
fn interpolate(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let end = after
                .find('}')
                .ok_or("an unclosed `${`: write ${NAME}, or $${ for a literal ${")?;
            let name = &after[..end];
            let value = env(name).ok_or_else(|| {
                format!("environment variable {name} is not set (referenced as ${{{name}}})")
            })?;
            out.push_str(&value);
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn is_table_name(name: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty()
            && p.len() <= 63
            && p.chars()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    match name.split_once('.') {
        Some((schema, table)) => part(schema) && part(table),
        None => part(name),
    }
}

/// Every problem, each naming its key and the fix; the handler's
/// parameters when there is none.
fn validate(c: &InboxConfig) -> Result<Vec<Param>, Vec<(String, String)>> {
    let mut problems = Vec::new();
    let mut bad = |key: &str, what: String| problems.push((key.to_owned(), what));
    if c.name.trim().is_empty() {
        bad(
            "name",
            "is empty; name the consumer, e.g. \"orders-inbox\"".into(),
        );
    }
    if c.group_id.as_deref().is_some_and(|g| g.trim().is_empty()) {
        bad(
            "group_id",
            "is empty; leave it out to use inbox.name".into(),
        );
    }
    if c.topics.is_empty() || c.topics.iter().any(|t| t.trim().is_empty()) {
        bad(
            "topics",
            "must list at least one topic, none empty, e.g. [\"outbox.event.order\"]".into(),
        );
    }
    if !(1..=256).contains(&c.workers) {
        bad("workers", format!("is {}; set 1 to 256", c.workers));
    }
    if !(1..=1_000_000).contains(&c.max_in_flight) {
        bad(
            "max_in_flight",
            format!("is {}; set 1 to 1000000", c.max_in_flight),
        );
    }
    if c.commit_interval.is_zero() || c.commit_interval > Duration::from_secs(3600) {
        bad(
            "commit_interval",
            "must be more than 0 and at most 1h".into(),
        );
    }
    if !(1..=1000).contains(&c.max_attempts) {
        bad(
            "max_attempts",
            format!("is {}; set 1 to 1000", c.max_attempts),
        );
    }
    if c.retry_backoff_initial.is_zero() || c.retry_backoff_initial > c.retry_backoff_max {
        bad(
            "retry_backoff_initial",
            "must be more than 0 and at most retry_backoff_max".into(),
        );
    }
    if c.retry_backoff_max > Duration::from_secs(3600) {
        bad("retry_backoff_max", "must be at most 1h".into());
    }
    if c.shutdown_timeout > Duration::from_secs(3600) {
        bad("shutdown_timeout", "must be at most 1h".into());
    }
    if c.id_headers.is_empty() || c.id_headers.iter().any(|h| h.is_empty()) {
        bad(
            "id_headers",
            "must name at least one header, none empty, e.g. [\"id\"]".into(),
        );
    }
    if c.kafka.brokers.trim().is_empty() {
        bad("kafka.brokers", "is empty; e.g. \"kafka:9092\"".into());
    }
    if c.kafka
        .quarantine_topic
        .as_deref()
        .is_some_and(|t| t.trim().is_empty() || t.starts_with('^'))
    {
        bad(
            "kafka.quarantine_topic",
            "must name one topic (not empty, not a pattern), e.g. \"orders-inbox.quarantine\"; \
             leave it out to quarantine to inbox.postgres.quarantine_table"
                .into(),
        );
    }
    if !["earliest", "latest"].contains(&c.kafka.auto_offset_reset.as_str()) {
        bad(
            "kafka.auto_offset_reset",
            "must be \"earliest\" or \"latest\"".into(),
        );
    }
    for key in c.kafka.librdkafka.keys() {
        if let Some((_, value)) = FIXED_PROPERTIES.iter().find(|(k, _)| k == key) {
            bad(
                &format!("kafka.librdkafka.\"{key}\""),
                format!(
                    "is set by the inbox ({key}={value}, which its guarantees rest on); remove it"
                ),
            );
        }
        if key == "group.id" || key == "bootstrap.servers" {
            bad(
                &format!("kafka.librdkafka.\"{key}\""),
                "is set from inbox.group_id / inbox.kafka.brokers; remove it".into(),
            );
        }
    }
    for (key, name) in [
        ("postgres.inbox_table", &c.postgres.inbox_table),
        ("postgres.quarantine_table", &c.postgres.quarantine_table),
    ] {
        if !is_table_name(name) {
            bad(
                key,
                format!(
                    "{} is not a plain table name; write table or schema.table in lower case \
                     letters, digits and _",
                    crate::config::quoted(name)
                ),
            );
        }
    }
    if c.postgres.inbox_table == c.postgres.quarantine_table {
        bad(
            "postgres.quarantine_table",
            "is the inbox table; give it another name".into(),
        );
    }
    if let Err(e) = url::parse(c.postgres.url.expose_secret()) {
        bad("postgres.url", e);
    }
    if c.handler.sql.trim().is_empty() {
        bad(
            "handler.sql",
            "is empty; write the statement that applies one event, e.g. \
             \"INSERT INTO orders (id, body) VALUES ($1::uuid, $2::jsonb)\""
                .into(),
        );
    }
    let mut params = Vec::new();
    for (i, p) in c.handler.params.iter().enumerate() {
        match Param::parse(p) {
            Some(Param::Header(h)) if h.is_empty() => bad(
                &format!("handler.params[{i}]"),
                "names no header; write header:<name>".into(),
            ),
            Some(param) => params.push(param),
            None => bad(
                &format!("handler.params[{i}]"),
                format!(
                    "{} is not a parameter; use id, key, value, topic, partition, offset, \
                     timestamp or header:<name>",
                    crate::config::quoted(p)
                ),
            ),
        }
    }
    if problems.is_empty() {
        Ok(params)
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests;
