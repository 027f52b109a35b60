//! `[kafka.schema_registry]`: the Confluent-compatible Schema Registry that
//! `[[outbox]]`, `[[table]]` and `[[message]]` `format = "avro" |
//! "json_schema"` records take their schema ids from — its URL, basic auth, TLS trust, and how subjects are named and
//! ids chosen (Confluent's serializer options under walrelay's names).
//!
//! Field documentation here is the source for `docs/configuration.md`;
//! keep the two in step.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use secrecy::SecretString;
use serde::Deserialize;

use crate::config::units;

/// `schema_registry.subject_name_strategy`, Confluent's
/// `key/value.subject.name.strategy` by the names Debezium's and Confluent's
/// documentation use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubjectNameStrategy {
    /// `<topic>-key` and `<topic>-value` (`TopicNameStrategy`).
    #[default]
    Topic,
    /// The schema's fully-qualified record name (`RecordNameStrategy`).
    Record,
    /// `<topic>-<record name>` (`TopicRecordNameStrategy`).
    TopicRecord,
}

impl SubjectNameStrategy {
    /// The name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            SubjectNameStrategy::Topic => "topic",
            SubjectNameStrategy::Record => "record",
            SubjectNameStrategy::TopicRecord => "topic_record",
        }
    }
}

/// `[kafka.schema_registry]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaRegistryConfig {
    /// Base URL of the registry's Confluent-compatible API, `http://` or
    /// `https://` (Apicurio: `…/apis/ccompat/v7`); `${ENV}` is interpolated.
    /// Required.
    pub url: String,
    /// Basic-auth user name; `${ENV}` is interpolated. With `password`.
    #[serde(default)]
    pub username: Option<String>,
    /// Basic-auth password; `${ENV}` and `${file:...}` are interpolated.
    /// Never printed.
    #[serde(default, deserialize_with = "units::secret")]
    pub password: Option<SecretString>,
    /// PEM file of the CA certificate(s) that signed an `https://`
    /// registry's certificate; the system trust store when unset. The
    /// certificate must name the URL's host.
    #[serde(default)]
    pub ssl_ca: Option<PathBuf>,
    /// How subjects are named: `topic` (default), `record` or `topic_record`.
    #[serde(default)]
    pub subject_name_strategy: SubjectNameStrategy,
    /// Register a schema the subject does not have yet (Confluent's
    /// `auto.register.schemas`, default true). `false`: the schema must be
    /// registered already; walrelay only looks its id up.
    #[serde(default = "yes")]
    pub auto_register: bool,
    /// Write with the subject's latest schema version's id (Confluent's
    /// `use.latest.version`); the latest schema must be the one walrelay
    /// writes. Needs `auto_register = false`.
    #[serde(default)]
    pub use_latest_version: bool,
    /// How long one request to the registry may take.
    #[serde(default = "request_timeout", deserialize_with = "units::duration")]
    pub request_timeout: Duration,
}

fn yes() -> bool {
    true
}

fn request_timeout() -> Duration {
    Duration::from_secs(10)
}

impl fmt::Debug for SchemaRegistryConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemaRegistryConfig")
            .field("url", &self.url)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "[REDACTED]"))
            .field("ssl_ca", &self.ssl_ca)
            .field("subject_name_strategy", &self.subject_name_strategy)
            .field("auto_register", &self.auto_register)
            .field("use_latest_version", &self.use_latest_version)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}
