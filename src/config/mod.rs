//! Configuration: the TOML schema, `${VAR}` interpolation, and validation.
//!
//! [`Config::from_file`] / [`Config::from_str`] parse TOML into typed sections,
//! substitute environment variables, and run [`Config::validate`]. A `Config`
//! returned by a loader has passed validation.
//!
//! Invariants:
//! - Unknown keys and wrongly typed values are errors, reported with the file,
//!   line and column, and the key path (`outbox[1].topic`); every validation
//!   error names the file, the key path and the fix.
//! - The producer settings walrelay's guarantees rest on (`acks=all`,
//!   `enable.idempotence=true`, `partitioner=murmur2_random`) cannot be
//!   weakened through `[kafka.librdkafka]`: validation rejects such properties
//!   and the producer's properties (`sink::properties`) never emits them.
//! - Secrets (`postgres.password`, `postgres.sslpassword`, librdkafka properties such as
//!   `sasl.password`) never appear in `Debug` output or error messages.
//!   librdkafka property names must be spelt as librdkafka spells them
//!   (lower-case, no spaces), so a misspelt secret is refused by name before
//!   librdkafka could repeat its value.
//! - Every number and duration has a range (`validate::limits`), so nothing
//!   derived from them (queue sizes, doubled backoffs, deadlines) overflows.
//! - Error messages repeat a value only as a short prefix with its size
//!   ([`quoted`], [`shorten`]), and list at most 50 problems.
//! - Loading is linear in the size of the file: key positions come from a
//!   line index built once. Files over [`MAX_FILE_BYTES`] are not read.
//!
//! `${NAME}` in `postgres.host`, `postgres.user`, `postgres.password`,
//! `postgres.database`, `postgres.sslpassword`, the file paths
//! (`postgres.sslrootcert`, `postgres.sslcert`, `postgres.sslkey`,
//! `kafka.ssl_ca`, `kafka.ssl_certificate`, `kafka.ssl_key`,
//! `kafka.schema_registry.ssl_ca`),
//! `kafka.brokers`, `kafka.sasl_username`, `kafka.sasl_password`,
//! `kafka.ssl_key_password`, `kafka.schema_registry.url`/`username`/
//! `password`, the mask salts and `[kafka.librdkafka]`
//! values is replaced by environment variable `NAME`; `$${` stands for a
//! literal `${`. `${file:/absolute/path}` is replaced by a file's content (one
//! trailing newline removed) in the keys that hold secrets only:
//! `postgres.password`, `postgres.sslpassword`, `kafka.sasl_password`,
//! `kafka.ssl_key_password`, `kafka.schema_registry.password`, the salts of column masks
//! (`table[i].column_mask[j].salt`) and the secret librdkafka properties
//! ([`is_secret_property`]). The salts are secrets too.
//! Interpolation runs after parsing, so errors keep their line numbers.

mod cloudevents;
mod duplicate_key;
mod envelope;
mod error;
mod interpolate;
mod message;
mod producer;
mod schema;
mod template;
mod units;
mod validate;

#[cfg(test)]
mod tests;

/// A valid configuration text with one `[[outbox]]` section on
/// `public.outbox` and `extra` appended (keys of that section, or whole
/// sections): what the modules' unit tests build on.
#[cfg(test)]
pub(crate) fn test_config_text(extra: &str) -> String {
    format!(
        "[connector]\nname = \"t\"\n[postgres]\ndatabase = \"d\"\n[kafka]\nbrokers = \"k:9092\"\n\
         [[outbox]]\ntable = \"public.outbox\"\n{extra}\n"
    )
}

use std::fmt;
use std::path::{Path, PathBuf};

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use error::{Origin, SourceMap};
use interpolate::{Files, interpolate_with};

pub use cloudevents::{CORE_ATTRIBUTES, absolute_uri_problem};
pub use error::{ConfigError, Location, Problem, quoted, shorten};
pub use interpolate::EnvLookup;
pub use message::{MessageConfig, MessageFormat, PREFIX_PLACEHOLDER};
pub(crate) use producer::librdkafka_property;
pub use schema::{
    BinaryHandlingMode, CaptureFrom, CloudEventsConfig, CloudEventsMode, ColumnFilter, ColumnMask,
    Compression, ConnectorConfig, Converter, DeadLetterConfig, DecimalHandlingMode, Delivery,
    HASH_ALGORITHMS, HealthConfig, HeartbeatConfig, IntervalHandlingMode, KafkaConfig, LogConfig,
    LogFormat, OnUpdate, OutboxConfig, OutboxFormat, PostgresConfig, RetentionConfig,
    SaslMechanism, SchemaRegistryConfig, SecurityProtocol, SkippedOperations, SnapshotConfig,
    SnapshotMode, SpecialValues, SslMode, SubjectNameStrategy, TableConfig, TableDefaults,
    TableFormat, TimePrecisionMode, UnmappedTypes, Watermarks, glob_match, is_secret_property,
    placement,
};
pub use template::{
    Segment, TableRef, TopicTemplate, is_topic_char, sanitized_topic_name, topic_name_problem,
};
pub use units::{parse_byte_size, split_host_port};

/// The largest configuration file [`Config::from_file`] reads (16 MiB). A
/// real one is a few kilobytes; the bound keeps a wrong path (a log file, a
/// device) from being read into memory whole.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// A complete, validated walrelay configuration.
#[derive(Clone)]
pub struct Config {
    /// `[connector]`
    pub connector: ConnectorConfig,
    /// `[postgres]`
    pub postgres: PostgresConfig,
    /// `[kafka]`
    pub kafka: KafkaConfig,
    /// `[health]`; `None` when the section is absent (no HTTP endpoint).
    pub health: Option<HealthConfig>,
    /// `[[outbox]]` sections, in file order.
    pub outbox: Vec<OutboxConfig>,
    /// `[[table]]` sections, in file order. Once validated, `outbox` and
    /// `tables` are not both empty.
    pub tables: Vec<TableConfig>,
    /// `[[message]]` sections (transactional logical decoding messages
    /// routed by prefix), in file order.
    pub messages: Vec<MessageConfig>,
    /// `[table_defaults]`; the defaults when the section is absent.
    pub table_defaults: TableDefaults,
    /// `[snapshot]`; the defaults when the section is absent.
    pub snapshot: SnapshotConfig,
    /// `[heartbeat]`; off when the section is absent.
    pub heartbeat: HeartbeatConfig,
    /// `[log]`; the defaults when the section is absent.
    pub log: LogConfig,
    /// `[dead_letter]`; `None` when the section is absent (an unroutable
    /// row stops the connector).
    pub dead_letter: Option<DeadLetterConfig>,
    origin: Origin,
    /// What loading found worth a warning but not a refusal, rendered as
    /// problems are (`file:line:column: key: …`).
    warnings: Vec<String>,
}

/// The file's shape; [`Config`] adds where it came from.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    connector: ConnectorConfig,
    postgres: PostgresConfig,
    kafka: KafkaConfig,
    #[serde(default)]
    health: Option<HealthConfig>,
    #[serde(default)]
    outbox: Vec<OutboxConfig>,
    #[serde(default)]
    table: Vec<TableConfig>,
    #[serde(default)]
    message: Vec<MessageConfig>,
    #[serde(default)]
    table_defaults: TableDefaults,
    #[serde(default)]
    snapshot: SnapshotConfig,
    #[serde(default)]
    heartbeat: HeartbeatConfig,
    #[serde(default)]
    log: LogConfig,
    #[serde(default)]
    dead_letter: Option<DeadLetterConfig>,
}

/// The `[log] format` of the file at `path`, read on its own so that the
/// errors of a file that does not load can still be written in the format
/// it asks for. `None` when the file cannot be read or parsed, or does not
/// say (or says something invalid, which loading the file reports).
pub fn log_format_in(path: &Path) -> Option<LogFormat> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_FILE_BYTES).read_to_string(&mut text))
        .ok()?;
    let table: toml::Table = text.parse().ok()?;
    match table.get("log")?.get("format")?.as_str()? {
        "json" => Some(LogFormat::Json),
        "text" => Some(LogFormat::Text),
        _ => None,
    }
}

/// A TOML text parsed into `T`, with the position of every key kept for
/// the problems validation finds later ([`Parsed::error`]).
pub struct Parsed<T> {
    pub value: T,
    origin: Origin,
}

impl<T> fmt::Debug for Parsed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parsed")
            .field("origin", &self.origin.name)
            .finish_non_exhaustive()
    }
}

impl<T> Parsed<T> {
    /// The value, and the key positions (to place later problems).
    pub fn into_parts(self) -> (T, Parsed<()>) {
        (
            self.value,
            Parsed {
                value: (),
                origin: self.origin,
            },
        )
    }

    /// `problems` (each keyed by its key path) as one error, each placed at
    /// its key's line and column, in file order.
    pub fn error(&self, problems: Vec<Problem>) -> ConfigError {
        self.origin.error(problems)
    }
}

/// Parses `text` (from `origin`, usually the file name) into `T` as every
/// walrelay file is parsed: a syntax error, a duplicate key, an unknown key
/// (with the nearest known one) or a wrongly typed value is an error naming
/// the line, the column and the key path. `wrong_file` sees the top-level
/// keys first: when they say the file is meant for another command, its
/// problem is the error (instead of the first key `T` does not know).
pub fn parse_toml<T: serde::de::DeserializeOwned>(
    text: &str,
    origin: &str,
    wrong_file: &dyn Fn(&[&str]) -> Option<Problem>,
) -> Result<Parsed<T>, ConfigError> {
    let syntax_error = |e: toml::de::Error| ConfigError::Invalid {
        origin: origin.to_owned(),
        problems: vec![match e.span() {
            Some(span) if e.message().starts_with("duplicate key") => {
                duplicate_key::duplicate_key(text, span.start)
            }
            span => Problem {
                key: None,
                location: span.map(|s| Location::at(text, s.start)),
                message: format!("TOML syntax error: {}", e.message().trim_end()),
            },
        }],
    };
    let root = toml::de::DeTable::parse(text).map_err(syntax_error)?;
    let map = SourceMap::new(text, &root);
    let origin = Origin {
        name: origin.to_owned(),
        locations: map.locations(),
    };
    let top: Vec<&str> = root
        .get_ref()
        .keys()
        .map(|k| k.get_ref().as_ref())
        .collect();
    if let Some(problem) = wrong_file(&top) {
        return Err(origin.error(vec![problem]));
    }
    let value =
        T::deserialize(toml::de::Deserializer::from(root)).map_err(|e| ConfigError::Invalid {
            origin: origin.name.clone(),
            problems: vec![map.problem(&e)],
        })?;
    Ok(Parsed { value, origin })
}

/// An inbox consumer's file given to a connector command.
fn connector_file_hint(top: &[&str]) -> Option<Problem> {
    (top.contains(&"inbox") && !top.contains(&"connector")).then(|| {
        Problem::new(
            "inbox",
            "this is an inbox consumer's file (an [inbox] section), not a connector's: run it \
             with `walrelay inbox --config <file>`; `walrelay run`, `check` and the other \
             commands take the connector's file ([connector], [postgres], [kafka]; \
             docs/configuration.md)",
        )
    })
}

impl Config {
    /// Reads, interpolates and validates the configuration file at `path`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        use std::io::Read;
        let path = path.as_ref();
        let read_error = |source| ConfigError::Read {
            path: path.to_owned(),
            source,
        };
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|file| file.take(MAX_FILE_BYTES + 1).read_to_string(&mut text))
            .map_err(read_error)?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(ConfigError::TooLarge {
                path: path.to_owned(),
                limit: MAX_FILE_BYTES,
            });
        }
        Config::from_str(&text, &path.display().to_string())
    }

    /// Parses, interpolates (from the process environment) and validates
    /// `text`; `origin` names it in errors (usually the file name).
    pub fn from_str(text: &str, origin: &str) -> Result<Config, ConfigError> {
        Config::from_str_with_env(text, origin, &|name| std::env::var(name))
    }

    /// Like [`Config::from_str`], with `env` answering `${VAR}` lookups.
    pub fn from_str_with_env(
        text: &str,
        origin: &str,
        env: EnvLookup<'_>,
    ) -> Result<Config, ConfigError> {
        let Parsed {
            value: document,
            origin,
        } = parse_toml::<Document>(text, origin, &connector_file_hint)?;
        let mut config = Config {
            connector: document.connector,
            postgres: document.postgres,
            kafka: document.kafka,
            health: document.health,
            outbox: document.outbox,
            tables: document.table,
            messages: document.message,
            table_defaults: document.table_defaults,
            snapshot: document.snapshot,
            heartbeat: document.heartbeat,
            log: document.log,
            dead_letter: document.dead_letter,
            origin,
            warnings: Vec::new(),
        };
        let found = config.interpolate(env);
        if !found.problems.is_empty() {
            return Err(config.origin.error(found.problems));
        }
        config.validate()?;
        config.warnings = config.origin.render(found.warnings);
        Ok(config)
    }

    /// Checks every rule serde cannot express and reports all problems at once.
    /// The loaders call this; call it again after changing fields by hand.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let problems = validate::problems(self);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(self.origin.error(problems))
        }
    }

    /// An error about `key` (a key path such as `kafka.linger`), placed at
    /// the key's line when it is in the file: for checks made outside this
    /// module, such as librdkafka's view of the producer settings.
    pub fn error_at(&self, key: &str, message: impl Into<String>) -> ConfigError {
        self.origin.error(vec![Problem::new(key, message)])
    }

    /// The Debezium `topic.prefix` of table events: `table_defaults.topic_prefix`,
    /// or the connector's name.
    pub fn topic_prefix(&self) -> &str {
        self.table_defaults
            .topic_prefix
            .as_deref()
            .unwrap_or(&self.connector.name)
    }

    /// Where the configuration came from (the file name given to the loader).
    pub fn origin(&self) -> &str {
        &self.origin.name
    }

    /// What loading found worth a warning (a secret file others may read),
    /// one line each, placed and keyed as errors are. `run` and the other
    /// commands log them; `check` lists them.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Substitutes `${VAR}` in the keys that allow it; returns the problems
    /// and warnings.
    fn interpolate(&mut self, env: EnvLookup<'_>) -> Findings {
        let mut found = Findings::default();
        let pg = &mut self.postgres;
        for (key, value) in [
            ("postgres.host", &mut pg.host),
            ("postgres.user", &mut pg.user),
            ("postgres.database", &mut pg.database),
            ("kafka.brokers", &mut self.kafka.brokers),
        ] {
            substitute(key, value, false, env, &mut found);
        }
        for (key, path) in [
            ("postgres.sslrootcert", &mut pg.sslrootcert),
            ("postgres.sslcert", &mut pg.sslcert),
            ("postgres.sslkey", &mut pg.sslkey),
            ("kafka.ssl_ca", &mut self.kafka.ssl_ca),
            ("kafka.ssl_certificate", &mut self.kafka.ssl_certificate),
            ("kafka.ssl_key", &mut self.kafka.ssl_key),
        ] {
            substitute_path(key, path, env, &mut found);
        }
        if let Some(host) = &mut pg.standby_host {
            substitute("postgres.standby_host", host, false, env, &mut found);
        }
        substitute_secret("postgres.password", &mut pg.password, env, &mut found);
        substitute_secret("postgres.sslpassword", &mut pg.sslpassword, env, &mut found);
        if let Some(username) = &mut self.kafka.sasl_username {
            substitute("kafka.sasl_username", username, false, env, &mut found);
        }
        substitute_secret(
            "kafka.sasl_password",
            &mut self.kafka.sasl_password,
            env,
            &mut found,
        );
        substitute_secret(
            "kafka.ssl_key_password",
            &mut self.kafka.ssl_key_password,
            env,
            &mut found,
        );
        if let Some(registry) = &mut self.kafka.schema_registry {
            substitute(
                "kafka.schema_registry.url",
                &mut registry.url,
                false,
                env,
                &mut found,
            );
            if let Some(username) = &mut registry.username {
                substitute(
                    "kafka.schema_registry.username",
                    username,
                    false,
                    env,
                    &mut found,
                );
            }
            substitute_secret(
                "kafka.schema_registry.password",
                &mut registry.password,
                env,
                &mut found,
            );
            substitute_path(
                "kafka.schema_registry.ssl_ca",
                &mut registry.ssl_ca,
                env,
                &mut found,
            );
        }
        for (key, value) in &mut self.kafka.librdkafka {
            let path = error::join_key("kafka.librdkafka", key);
            substitute(&path, value, is_secret_property(key), env, &mut found);
        }
        for (i, table) in self.tables.iter_mut().enumerate() {
            for (j, mask) in table.column_mask.iter_mut().enumerate() {
                let key = format!("table[{i}].column_mask[{j}].salt");
                substitute_secret(&key, &mut mask.salt, env, &mut found);
            }
        }
        found
    }
}

/// The key path of librdkafka property `property` in `[kafka.librdkafka]`
/// (`kafka.librdkafka."message.timeout.ms"`).
pub fn librdkafka_key_path(property: &str) -> String {
    error::join_key("kafka.librdkafka", property)
}

/// What interpolation found: problems (the file is refused) and warnings
/// (it is used, and the operator told).
#[derive(Default)]
struct Findings {
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
}

impl Findings {
    /// Records the outcome of interpolating `key`; returns the new value.
    fn note(
        &mut self,
        key: &str,
        secret: bool,
        result: Result<Option<String>, interpolate::InterpolateError>,
        warnings: Vec<String>,
    ) -> Option<String> {
        self.warnings
            .extend(warnings.into_iter().map(|w| Problem::new(key, w)));
        match result {
            Ok(value) => value,
            Err(e) => {
                self.problems.push(Problem::new(key, e.describe(secret)));
                None
            }
        }
    }
}

/// Interpolates `value` of `key`; a `secret` key also takes `${file:...}`
/// and its errors never repeat the value.
fn substitute(
    key: &str,
    value: &mut String,
    secret: bool,
    env: EnvLookup<'_>,
    found: &mut Findings,
) {
    let files = if secret {
        Files::Allowed
    } else {
        Files::Refused
    };
    let mut warnings = Vec::new();
    let result = interpolate_with(value, env, files, &mut warnings);
    if let Some(resolved) = found.note(key, secret, result, warnings) {
        *value = resolved;
    }
}

/// Interpolates path-valued `key` (`${VAR}` only: a path is not a secret),
/// as the librdkafka properties the Kafka ones stand for are.
fn substitute_path(
    key: &str,
    value: &mut Option<PathBuf>,
    env: EnvLookup<'_>,
    found: &mut Findings,
) {
    // Paths come from TOML strings, so they are UTF-8.
    let Some(mut text) = value.as_ref().and_then(|p| p.to_str()).map(str::to_owned) else {
        return;
    };
    substitute(key, &mut text, false, env, found);
    *value = Some(PathBuf::from(text));
}

/// Interpolates secret `key` (`${VAR}` and `${file:...}`), keeping the
/// result wrapped so it is never printed.
fn substitute_secret(
    key: &str,
    value: &mut Option<SecretString>,
    env: EnvLookup<'_>,
    found: &mut Findings,
) {
    let Some(secret) = value else { return };
    let mut warnings = Vec::new();
    let result = interpolate_with(secret.expose_secret(), env, Files::Allowed, &mut warnings);
    if let Some(resolved) = found.note(key, true, result, warnings) {
        *secret = SecretString::from(resolved);
    }
}

/// Prints every section; secrets print as `[REDACTED]`.
impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("origin", &self.origin.name)
            .field("connector", &self.connector)
            .field("postgres", &self.postgres)
            .field("kafka", &self.kafka)
            .field("health", &self.health)
            .field("outbox", &self.outbox)
            .field("tables", &self.tables)
            .field("messages", &self.messages)
            .field("table_defaults", &self.table_defaults)
            .field("snapshot", &self.snapshot)
            .field("heartbeat", &self.heartbeat)
            .field("dead_letter", &self.dead_letter)
            .finish()
    }
}
