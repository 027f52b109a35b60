//! Validation rules that serde cannot express: name syntax, ranges, cross-key
//! consistency, and the librdkafka properties that must not be overridden.
//!
//! Each rule yields a [`Problem`] naming the key path, what is wrong and the
//! fix. All problems are collected, so one run reports everything.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use humantime_serde::re::humantime::format_duration;

use super::Config;
use super::error::{MAX_VALUE_CHARS, Problem, join_key, quoted, shorten};
use super::producer::{librdkafka_property, property_name_problem};
use super::schema::HeartbeatConfig;
use super::schema::{
    KafkaConfig, OutboxConfig, PostgresConfig, SECURITY_KEYS, SaslMechanism, SecurityProtocol,
    SnapshotConfig, SnapshotMode, SslMode, TableDefaults,
};
use super::template::{MAX_IDENTIFIER_BYTES, Segment, identifier, topic_name_problem};

/// Upper bounds of the numeric and duration keys. Each is far above any
/// useful setting and low enough that arithmetic on it (doubling a backoff,
/// adding to an `Instant`, deriving librdkafka queue sizes) cannot overflow.
pub(crate) mod limits {
    use std::time::Duration;

    pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(600);
    pub(crate) const STATUS_INTERVAL: Duration = Duration::from_secs(600);
    pub(crate) const RECONNECT_BACKOFF: Duration = Duration::from_secs(3600);
    /// PostgreSQL cannot build a message over 1 GiB (MaxAllocSize).
    pub(crate) const MAX_MESSAGE_SIZE: u64 = 1 << 30;
    /// Batches wait at most this long (librdkafka itself allows 900s).
    pub(crate) const LINGER: Duration = Duration::from_secs(60);
    pub(crate) const MAX_IN_FLIGHT_RECORDS: usize = 10_000_000;
    pub(crate) const MAX_IN_FLIGHT_BYTES: u64 = 16 << 30;
    pub(crate) const SHUTDOWN_FLUSH_TIMEOUT: Duration = Duration::from_secs(3600);
    /// Records and bytes of one Kafka transaction (`exactly_once`).
    pub(crate) const TRANSACTION_MAX_RECORDS: usize = 10_000_000;
    pub(crate) const TRANSACTION_MAX_BYTES: u64 = 16 << 30;
    /// How long a Kafka transaction may collect records.
    pub(crate) const TRANSACTION_MAX_TIME: Duration = Duration::from_secs(60);
    /// librdkafka's `transaction.timeout.ms` (the broker caps it lower).
    pub(crate) const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(3600);
    /// Snapshot readers per table, each a PostgreSQL connection.
    pub(crate) const SNAPSHOT_PARALLELISM: u32 = 16;
    /// Rows per snapshot batch.
    pub(crate) const SNAPSHOT_FETCH_ROWS: usize = 1_000_000;
    /// Heartbeats: at least this far apart (each is a WAL record and a round
    /// trip on the catalog connection) …
    pub(crate) const HEARTBEAT_MIN: Duration = Duration::from_millis(100);
    /// … and at most this far (longer is no longer a heartbeat).
    pub(crate) const HEARTBEAT_MAX: Duration = Duration::from_secs(3600);
}

/// `kafka.transaction_*`: checked whatever `delivery` is, so that a value
/// that would be refused later is refused now.
fn transactions(kafka: &KafkaConfig, out: &mut Vec<Problem>) {
    if !(1..=limits::TRANSACTION_MAX_RECORDS).contains(&kafka.transaction_max_records) {
        out.push(Problem::new(
            "kafka.transaction_max_records",
            format!(
                "must be greater than 0 and at most {} (got {}); it bounds the records of one \
                 Kafka transaction, e.g. 20000",
                limits::TRANSACTION_MAX_RECORDS,
                kafka.transaction_max_records
            ),
        ));
    }
    if !(1..=limits::TRANSACTION_MAX_BYTES).contains(&kafka.transaction_max_bytes) {
        out.push(Problem::new(
            "kafka.transaction_max_bytes",
            format!(
                "must be greater than 0 and at most 16GiB (got {} bytes); it bounds the bytes \
                 of one Kafka transaction, e.g. \"32MiB\"",
                kafka.transaction_max_bytes
            ),
        ));
    }
    DurationRule {
        key: "kafka.transaction_max_time",
        value: kafka.transaction_max_time,
        zero_allowed: false,
        max: limits::TRANSACTION_MAX_TIME,
        example: "100ms",
    }
    .check(out);
    DurationRule {
        key: "kafka.transaction_timeout",
        value: kafka.transaction_timeout,
        zero_allowed: false,
        max: limits::TRANSACTION_TIMEOUT,
        example: "60s",
    }
    .check(out);
    if !kafka.transaction_timeout.is_zero() && kafka.transaction_timeout < Duration::from_secs(1) {
        out.push(Problem::new(
            "kafka.transaction_timeout",
            format!(
                "must be at least 1s (got {}): Kafka counts it in whole milliseconds and a \
                 transaction needs time to commit, e.g. \"60s\"",
                format_duration(kafka.transaction_timeout)
            ),
        ));
    } else if !kafka.transaction_timeout.is_zero()
        && kafka.transaction_max_time >= kafka.transaction_timeout
    {
        out.push(Problem::new(
            "kafka.transaction_max_time",
            format!(
                "must be shorter than kafka.transaction_timeout ({}), or every transaction \
                 would be aborted by the broker (got {}), e.g. \"100ms\"",
                format_duration(kafka.transaction_timeout),
                format_duration(kafka.transaction_max_time)
            ),
        ));
    }
}

/// Every problem in `config`, in no particular order.
pub(crate) fn problems(config: &Config) -> Vec<Problem> {
    let mut out = Vec::new();
    connector_name(&config.connector.name, &mut out);
    postgres(&config.postgres, &mut out);
    kafka(&config.kafka, &mut out);
    outboxes(
        &config.outbox,
        !config.tables.is_empty() || !config.messages.is_empty(),
        &mut out,
    );
    tables(config, &mut out);
    super::message::problems(&config.messages, &mut out);
    snapshot(&config.snapshot, &mut out);
    heartbeat(
        &config.heartbeat,
        config.topic_prefix(),
        &config.kafka.offsets_topic,
        &mut out,
    );
    dead_letter(config, &mut out);
    out
}

/// `[dead_letter] topic`: a valid name of its own, never a topic that
/// carries other records (the offset store, heartbeats, an outbox route's
/// fixed topic), whose readers would take dead letters for their own.
fn dead_letter(config: &Config, out: &mut Vec<Problem>) {
    let Some(dl) = &config.dead_letter else {
        return;
    };
    let topic = dl.topic.as_str();
    let clash = |what: String| {
        Problem::new(
            "dead_letter.topic",
            format!(
                "is {what}; dead-letter records would be read as its records: choose a topic                  of its own, e.g. \"{}.dead-letter\"",
                config.connector.name
            ),
        )
    };
    if let Some(why) = topic_name_problem(topic) {
        out.push(Problem::new("dead_letter.topic", why));
    } else if topic == config.kafka.offsets_topic {
        out.push(clash(format!(
            "the offset-store topic (kafka.offsets_topic = {})",
            quoted(topic)
        )));
    } else if config.heartbeat.publish && config.heartbeat.topic_for(config.topic_prefix()) == topic
    {
        out.push(clash("the heartbeat topic".into()));
    } else if let Some(i) = config
        .outbox
        .iter()
        .position(|o| o.topic.columns().next().is_none() && o.topic.as_str() == topic)
    {
        out.push(clash(format!("the topic of outbox[{i}]")));
    }
}

fn heartbeat(
    hb: &HeartbeatConfig,
    topic_prefix: &str,
    offsets_topic: &str,
    out: &mut Vec<Problem>,
) {
    if let Some(interval) = hb.enabled()
        && !(limits::HEARTBEAT_MIN..=limits::HEARTBEAT_MAX).contains(&interval)
    {
        out.push(Problem::new(
            "heartbeat.interval",
            format!(
                "must be from {} to {} (got {}), e.g. \"10s\"; \"0s\" or no interval turns \
                 heartbeats off",
                format_duration(limits::HEARTBEAT_MIN),
                format_duration(limits::HEARTBEAT_MAX),
                format_duration(interval)
            ),
        ));
    }
    let off = hb.enabled().is_none();
    if off && hb.publish {
        out.push(Problem::new(
            "heartbeat.publish",
            "publishes the heartbeats that come back, but heartbeats are off; set \
             heartbeat.interval (e.g. \"10s\") or remove publish",
        ));
    }
    if off && hb.topic.is_some() {
        out.push(Problem::new(
            "heartbeat.topic",
            "names the heartbeat topic, but heartbeats are off; set heartbeat.interval \
             (e.g. \"10s\") and publish = true, or remove topic",
        ));
    }
    let topic = hb.topic_for(topic_prefix);
    if hb.topic.is_none() && topic_name_problem(topic_prefix).is_some() {
        // The default topic only inherits the prefix's problem, which is
        // reported under the prefix's own key (connector.name or
        // table_defaults.topic_prefix): the cause, not this consequence.
    } else if let Some(why) = topic_name_problem(&topic) {
        let why = if hb.topic.is_some() {
            why
        } else {
            format!(
                "defaults to {} (from table_defaults.topic_prefix, or connector.name): \
                 {why}; set heartbeat.topic",
                quoted(&topic)
            )
        };
        out.push(Problem::new("heartbeat.topic", why));
    } else if topic == offsets_topic {
        out.push(Problem::new(
            "heartbeat.topic",
            format!(
                "is the offset-store topic (kafka.offsets_topic = {}); heartbeat records \
                 would be read back as offsets: choose another topic",
                quoted(offsets_topic)
            ),
        ));
    }
}

fn snapshot(snapshot: &SnapshotConfig, out: &mut Vec<Problem>) {
    if snapshot.mode == Some(SnapshotMode::Always) {
        out.push(Problem::new(
            "snapshot.mode",
            "\"always\" is not supported: it would publish every table again at every \
             start; use initial or when_needed, and `walrelay snapshot --table …` (an \
             incremental snapshot beside the stream) when a table must be read again",
        ));
    }
    if !(1..=limits::SNAPSHOT_PARALLELISM).contains(&snapshot.parallelism) {
        out.push(Problem::new(
            "snapshot.parallelism",
            format!(
                "must be from 1 to {} (got {}); it is the number of readers per table, each \
                 a PostgreSQL connection, e.g. 4",
                limits::SNAPSHOT_PARALLELISM,
                snapshot.parallelism
            ),
        ));
    }
    if !(1..=limits::SNAPSHOT_FETCH_ROWS).contains(&snapshot.fetch_rows) {
        out.push(Problem::new(
            "snapshot.fetch_rows",
            format!(
                "must be from 1 to {} (got {}); it is the number of rows a snapshot reader \
                 hands on at a time, e.g. 10000",
                limits::SNAPSHOT_FETCH_ROWS,
                snapshot.fetch_rows
            ),
        ));
    }
    if !(1..=limits::SNAPSHOT_FETCH_ROWS).contains(&snapshot.chunk_rows) {
        out.push(Problem::new(
            "snapshot.chunk_rows",
            format!(
                "must be from 1 to {} (got {}); it is the number of rows an incremental \
                 snapshot reads per chunk, e.g. 4096",
                limits::SNAPSHOT_FETCH_ROWS,
                snapshot.chunk_rows
            ),
        ));
    }
}

fn connector_name(name: &str, out: &mut Vec<Problem>) {
    let ok = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !ok {
        out.push(Problem::new(
            "connector.name",
            format!(
                "{} is not a valid connector name; use 1 to 64 characters from A-Z a-z 0-9 \
                 . _ - (it is part of the offset-store key, log fields and metric labels)",
                quoted(name)
            ),
        ));
    }
}

fn postgres(pg: &PostgresConfig, out: &mut Vec<Problem>) {
    if pg.host.contains("://") || pg.host.contains('@') {
        // Not quoted: a connection string may hold a password, and this
        // value would reach logs, `check`, `/healthz` and `status`.
        out.push(Problem::new(
            "postgres.host",
            "looks like a connection string or holds user info (\"postgres://user:password@host\" \
             or \"user@host\"), which may carry a password, so it is not repeated here; give the \
             host name only, and the rest in postgres.user, postgres.password (or \
             \"${file:/run/secrets/pg_password}\"), postgres.port and postgres.database",
        ));
    } else if pg.host.trim().is_empty() {
        out.push(Problem::new(
            "postgres.host",
            "is empty; set a host name, an IP address, or a Unix socket directory such as \
             \"/var/run/postgresql\"",
        ));
    } else if pg.host.chars().any(char::is_whitespace) {
        out.push(Problem::new(
            "postgres.host",
            format!(
                "{} contains whitespace; give one host name, IP address or socket directory, or \
                 several separated by commas without spaces (\"db-a,db-b:5433\")",
                quoted(&pg.host)
            ),
        ));
    } else if pg.host.contains(',') {
        for entry in pg.host.split(',') {
            let (host, port) = super::units::split_host_port(entry);
            let bad_port = port.is_none() && host == entry && entry.matches(':').count() == 1;
            if entry.is_empty() || host.is_empty() || bad_port || port == Some(0) {
                out.push(Problem::new(
                    "postgres.host",
                    format!(
                        "{} is not a list of servers: each entry is a host name, an IP address \
                         ([::1] with a port) or a socket directory, optionally with :port, e.g. \
                         \"db-a,db-b:5433\"",
                        quoted(&pg.host)
                    ),
                ));
                break;
            }
        }
    }
    if pg.port == 0 {
        out.push(Problem::new("postgres.port", "must be between 1 and 65535"));
    }
    identifier("postgres.user", &pg.user, out);
    identifier("postgres.database", &pg.database, out);
    identifier("postgres.publication", &pg.publication, out);
    let slot_ok = (1..=MAX_IDENTIFIER_BYTES).contains(&pg.slot.len())
        && pg
            .slot
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !slot_ok {
        out.push(Problem::new(
            "postgres.slot",
            format!(
                "{} is not a valid replication slot name; PostgreSQL allows only lower-case \
                 letters, digits and '_', at most 63 characters (e.g. \"walrelay_orders\")",
                quoted(&pg.slot)
            ),
        ));
    }
    let positive = |key, value, max, example| DurationRule {
        key,
        value,
        zero_allowed: false,
        max,
        example,
    };
    for rule in [
        positive(
            "postgres.connect_timeout",
            pg.connect_timeout,
            limits::CONNECT_TIMEOUT,
            "10s",
        ),
        positive(
            "postgres.status_interval",
            pg.status_interval,
            limits::STATUS_INTERVAL,
            "1s",
        ),
        positive(
            "postgres.reconnect_backoff_initial",
            pg.reconnect_backoff_initial,
            limits::RECONNECT_BACKOFF,
            "500ms",
        ),
        positive(
            "postgres.reconnect_backoff_max",
            pg.reconnect_backoff_max,
            limits::RECONNECT_BACKOFF,
            "30s",
        ),
    ] {
        rule.check(out);
    }
    if pg.reconnect_backoff_initial > pg.reconnect_backoff_max {
        out.push(Problem::new(
            "postgres.reconnect_backoff_max",
            format!(
                "{} is less than reconnect_backoff_initial ({}); raise it or lower the initial backoff",
                format_duration(pg.reconnect_backoff_max),
                format_duration(pg.reconnect_backoff_initial),
            ),
        ));
    }
    if !(1..=limits::MAX_MESSAGE_SIZE).contains(&pg.max_message_size) {
        out.push(Problem::new(
            "postgres.max_message_size",
            format!(
                "must be greater than 0 and at most 1GiB, the largest message PostgreSQL can \
                 build (got {} bytes); e.g. \"64MiB\"",
                pg.max_message_size
            ),
        ));
    }
    if pg.sslmode == SslMode::VerifyCa && pg.sslrootcert.is_none() {
        // libpq refuses this too: the system store trusts every public CA,
        // and verify-ca checks no host name, so any certificate any public
        // CA issued for any host would pass.
        out.push(Problem::new(
            "postgres.sslmode",
            "\"verify-ca\" needs postgres.sslrootcert: without it the server is verified against \
             the system's trust store and no host name is checked, so any certificate a public CA \
             issued for any host would pass; set postgres.sslrootcert to the PEM file of the CA \
             that signed the server's certificate, or use sslmode = \"verify-full\" (which also \
             checks the host name)",
        ));
    }
    if let Some(path) = &pg.sslrootcert {
        if !pg.sslmode.verifies_certificate() {
            out.push(Problem::new(
                "postgres.sslrootcert",
                format!(
                    "is only used to verify the server with sslmode \"verify-ca\" or \
                     \"verify-full\", but sslmode is \"{}\"; set postgres.sslmode = \
                     \"verify-full\" or remove the key",
                    pg.sslmode.as_str()
                ),
            ));
        } else if !path.is_file() {
            out.push(Problem::new(
                "postgres.sslrootcert",
                format!(
                    "{} is not a readable file; give the path of the PEM file holding the CA \
                     certificate(s) that signed the server's certificate",
                    path.display()
                ),
            ));
        }
    }
    client_certificate(pg, out);
}

/// `postgres.sslcert`, `sslkey`, `sslpassword`: present together, over TLS,
/// files that exist. Whether the key matches the certificate and opens with
/// the password is checked where the PEM files are parsed (`pg::tls`).
fn client_certificate(pg: &PostgresConfig, out: &mut Vec<Problem>) {
    match (&pg.sslcert, &pg.sslkey) {
        (Some(_), None) => out.push(Problem::new(
            "postgres.sslkey",
            "is required with postgres.sslcert; give the path of the certificate's private key \
             (PEM)",
        )),
        (None, Some(_)) => out.push(Problem::new(
            "postgres.sslcert",
            "is required with postgres.sslkey; give the path of the client certificate (PEM) \
             that belongs to the key",
        )),
        _ => {}
    }
    if pg.sslpassword.is_some() && pg.sslkey.is_none() {
        out.push(Problem::new(
            "postgres.sslpassword",
            "is the password of an encrypted postgres.sslkey, but no sslkey is set; set \
             postgres.sslcert and postgres.sslkey, or remove the key",
        ));
    }
    for (key, path, what) in [
        ("postgres.sslcert", &pg.sslcert, "the client certificate"),
        (
            "postgres.sslkey",
            &pg.sslkey,
            "the client certificate's private key",
        ),
    ] {
        let Some(path) = path else { continue };
        if pg.sslmode == SslMode::Disable {
            out.push(Problem::new(
                key,
                "is only sent over TLS, but sslmode is \"disable\"; set postgres.sslmode = \
                 \"verify-full\" (or \"require\") or remove the key",
            ));
        } else if let Err(e) = std::fs::File::open(path) {
            out.push(Problem::new(
                key,
                format!(
                    "cannot read {}: {e}; give the path of the PEM file holding {what}",
                    path.display()
                ),
            ));
        } else if !path.is_file() {
            out.push(Problem::new(
                key,
                format!(
                    "{} is not a file; give the path of the PEM file holding {what}",
                    path.display()
                ),
            ));
        } else if key == "postgres.sslkey"
            && let Some(why) = private_key_problem(path)
        {
            out.push(Problem::new(key, why));
        }
    }
}

/// libpq's rule for a private key file: no access for others, and none for
/// the group unless root owns it (`0600`, or `0640` owned by root, at most).
/// Returns the file's mode when it allows more. The same rule judges secret
/// files (`${file:...}`, see `interpolate`).
pub(super) fn readable_by_others(meta: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let mode = meta.mode() & 0o777;
    let allowed = if meta.uid() == 0 { 0o037 } else { 0o077 };
    (mode & allowed != 0).then_some(mode)
}

/// A private key anyone on the host can read is not private: refused, with
/// the `chmod` to run ([`readable_by_others`]).
fn private_key_problem(path: &std::path::Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    readable_by_others(&meta).map(|mode| {
        format!(
            "{} is readable by the group or by others (mode {mode:04o}); a private key must not \
             be: run chmod 600 {} (as libpq requires)",
            path.display(),
            path.display()
        )
    })
}

fn kafka(kafka: &KafkaConfig, out: &mut Vec<Problem>) {
    if kafka.brokers.trim().is_empty() {
        out.push(Problem::new(
            "kafka.brokers",
            "is empty; list at least one broker as host:port, e.g. \"127.0.0.1:9092\" (comma \
             separated for several)",
        ));
    } else {
        for broker in kafka.brokers.split(',').map(str::trim) {
            if broker.contains('@') {
                // Not quoted: user info may hold a password.
                out.push(Problem::new(
                    "kafka.brokers",
                    "an entry holds user info (\"user:password@host:9092\"), which may carry a \
                     password, so it is not repeated here; give host:port only, and the \
                     credentials in kafka.sasl_username and kafka.sasl_password (with \
                     kafka.security_protocol and kafka.sasl_mechanism)",
                ));
                break;
            }
            if broker.is_empty() {
                out.push(Problem::new(
                    "kafka.brokers",
                    format!(
                        "{} has an empty entry; separate brokers with single commas, e.g. \
                         \"kafka1:9092,kafka2:9092\"",
                        quoted(&kafka.brokers)
                    ),
                ));
                break;
            }
            if let Some(why) = broker_problem(broker) {
                out.push(Problem::new(
                    "kafka.brokers",
                    format!("entry {}: {why}", quoted(broker)),
                ));
            }
        }
    }
    DurationRule {
        key: "kafka.linger",
        value: kafka.linger,
        zero_allowed: true,
        max: limits::LINGER,
        example: "5ms",
    }
    .check(out);
    if let Some(behind) = kafka.linger_while_behind {
        DurationRule {
            key: "kafka.linger_while_behind",
            value: behind,
            zero_allowed: true,
            max: limits::LINGER,
            example: "20ms",
        }
        .check(out);
        if behind < kafka.linger {
            out.push(Problem::new(
                "kafka.linger_while_behind",
                format!(
                    "must be at least kafka.linger ({}; got {}); set it equal to kafka.linger \
                     to linger alike at any lag (one producer)",
                    format_duration(kafka.linger),
                    format_duration(behind)
                ),
            ));
        }
    }
    DurationRule {
        key: "kafka.shutdown_flush_timeout",
        value: kafka.shutdown_flush_timeout,
        zero_allowed: true,
        max: limits::SHUTDOWN_FLUSH_TIMEOUT,
        example: "10s",
    }
    .check(out);
    if !(1..=limits::MAX_IN_FLIGHT_RECORDS).contains(&kafka.max_in_flight_records) {
        out.push(Problem::new(
            "kafka.max_in_flight_records",
            format!(
                "must be greater than 0 and at most {} (got {}); it bounds unacknowledged \
                 records, e.g. 100000",
                limits::MAX_IN_FLIGHT_RECORDS,
                kafka.max_in_flight_records
            ),
        ));
    }
    if !(1..=limits::MAX_IN_FLIGHT_BYTES).contains(&kafka.max_in_flight_bytes) {
        out.push(Problem::new(
            "kafka.max_in_flight_bytes",
            format!(
                "must be greater than 0 and at most 16GiB (got {} bytes); it bounds \
                 unacknowledged bytes, e.g. \"64MiB\"",
                kafka.max_in_flight_bytes
            ),
        ));
    }
    if let Some(why) = topic_name_problem(&kafka.offsets_topic) {
        out.push(Problem::new("kafka.offsets_topic", why));
    }
    transactions(kafka, out);
    librdkafka_map(&kafka.librdkafka, out);
    security(kafka, out);
}

/// The typed security keys: each used only with a protocol that needs it,
/// the ones a protocol needs present, files that exist, and no setting given
/// both as a typed key and in `[kafka.librdkafka]`. Reads file metadata
/// (exists, is a file) and nothing else.
fn security(kafka: &KafkaConfig, out: &mut Vec<Problem>) {
    for (key, properties) in SECURITY_KEYS {
        let typed_set = match *key {
            "kafka.security_protocol" => kafka.security_protocol.is_some(),
            "kafka.sasl_mechanism" => kafka.sasl_mechanism.is_some(),
            "kafka.sasl_username" => kafka.sasl_username.is_some(),
            "kafka.sasl_password" => kafka.sasl_password.is_some(),
            "kafka.ssl_ca" => kafka.ssl_ca.is_some(),
            "kafka.ssl_certificate" => kafka.ssl_certificate.is_some(),
            "kafka.ssl_key" => kafka.ssl_key.is_some(),
            "kafka.ssl_key_password" => kafka.ssl_key_password.is_some(),
            _ => kafka.ssl_verify_hostname.is_some(),
        };
        if !typed_set {
            continue;
        }
        for property in properties
            .iter()
            .filter(|p| kafka.librdkafka.contains_key(**p))
        {
            out.push(Problem::new(
                join_key("kafka.librdkafka", property),
                format!(
                    "sets the same thing as {key}; keep one of them (the typed key {key} is \
                     checked at load time, so remove this entry)"
                ),
            ));
        }
    }
    let raw = |p: &str| kafka.librdkafka.contains_key(p);
    let protocol = kafka.security_protocol;
    let sasl = protocol.is_some_and(|p| p.uses_sasl());
    let tls = protocol.is_some_and(|p| p.uses_tls());
    let need = |what: &str| match protocol {
        None => format!(
            "is set but kafka.security_protocol is not; set kafka.security_protocol = {what}"
        ),
        Some(p) => format!(
            "is only used with kafka.security_protocol = {what}, but it is {}; change the \
             protocol or remove this key",
            quoted(p.as_str())
        ),
    };
    if !sasl {
        let needs_sasl = "\"sasl_ssl\" (or \"sasl_plaintext\")";
        for (key, set) in [
            ("kafka.sasl_mechanism", kafka.sasl_mechanism.is_some()),
            ("kafka.sasl_username", kafka.sasl_username.is_some()),
            ("kafka.sasl_password", kafka.sasl_password.is_some()),
        ] {
            if set {
                out.push(Problem::new(key, need(needs_sasl)));
            }
        }
    } else {
        for (key, set, example) in [
            (
                "kafka.sasl_mechanism",
                kafka.sasl_mechanism.is_some() || raw("sasl.mechanisms") || raw("sasl.mechanism"),
                "\"SCRAM-SHA-512\" (or \"SCRAM-SHA-256\", \"PLAIN\")",
            ),
            (
                "kafka.sasl_username",
                kafka.sasl_username.is_some() || raw("sasl.username"),
                "the user the brokers know walrelay as",
            ),
            (
                "kafka.sasl_password",
                kafka.sasl_password.is_some() || raw("sasl.password"),
                "\"${WALRELAY_KAFKA_PASSWORD}\" (from the environment)",
            ),
        ] {
            if !set {
                out.push(Problem::new(
                    key,
                    format!(
                        "is missing: kafka.security_protocol = {} authenticates with SASL; set \
                         it, e.g. {example}",
                        quoted(protocol.map_or("", |p| p.as_str()))
                    ),
                ));
            }
        }
        if kafka.security_protocol == Some(SecurityProtocol::SaslPlaintext)
            && kafka.sasl_mechanism == Some(SaslMechanism::Plain)
        {
            out.push(Problem::new(
                "kafka.sasl_mechanism",
                "PLAIN over sasl_plaintext sends the password in the clear; use \
                 kafka.security_protocol = \"sasl_ssl\" (or a SCRAM mechanism)",
            ));
        }
    }
    let tls_files = [
        (
            "kafka.ssl_ca",
            &kafka.ssl_ca,
            "the CA certificate(s) that signed the brokers' certificates",
        ),
        (
            "kafka.ssl_certificate",
            &kafka.ssl_certificate,
            "walrelay's client certificate",
        ),
        (
            "kafka.ssl_key",
            &kafka.ssl_key,
            "the client certificate's private key",
        ),
    ];
    let needs_tls = "\"ssl\" or \"sasl_ssl\"";
    for (key, path, what) in tls_files {
        let Some(path) = path else { continue };
        if !tls {
            out.push(Problem::new(key, need(needs_tls)));
        } else if !path.is_file() {
            out.push(Problem::new(
                key,
                format!(
                    "{} is not a readable file; give the path of the PEM file holding {what}",
                    path.display()
                ),
            ));
        } else if key == "kafka.ssl_key"
            && let Some(why) = private_key_problem(path)
        {
            out.push(Problem::new(key, why));
        }
    }
    if kafka.ssl_key_password.is_some() && !tls {
        out.push(Problem::new("kafka.ssl_key_password", need(needs_tls)));
    }
    if kafka.ssl_verify_hostname.is_some() && !tls {
        out.push(Problem::new("kafka.ssl_verify_hostname", need(needs_tls)));
    } else if kafka.ssl_verify_hostname == Some(false) && kafka.ssl_ca.is_none() {
        out.push(Problem::new(
            "kafka.ssl_verify_hostname",
            "false needs kafka.ssl_ca: without host-name checks and with the system's trust \
             store, any certificate a public CA issued for any host would pass; pin kafka.ssl_ca \
             to the PEM file of the private CA that signed the brokers' certificates, or remove \
             the key",
        ));
    }
    if tls {
        match (&kafka.ssl_certificate, &kafka.ssl_key) {
            (Some(_), None) => out.push(Problem::new(
                "kafka.ssl_key",
                "is missing: kafka.ssl_certificate is set, and a client certificate needs its \
                 private key; set kafka.ssl_key to the key's PEM file",
            )),
            (None, Some(_)) => out.push(Problem::new(
                "kafka.ssl_certificate",
                "is missing: kafka.ssl_key is set, and a private key needs its certificate; \
                 set kafka.ssl_certificate to the certificate's PEM file",
            )),
            _ => {}
        }
        if kafka.ssl_key_password.is_some() && kafka.ssl_key.is_none() {
            out.push(Problem::new(
                "kafka.ssl_key_password",
                "is set but kafka.ssl_key is not; it is the password of an encrypted \
                 kafka.ssl_key, so set that or remove this key",
            ));
        }
    }
}

/// What is wrong with one `kafka.brokers` entry, written
/// `[scheme://]host[:port]` as librdkafka reads it (IPv6 in brackets);
/// without a port librdkafka uses 9092.
fn broker_problem(entry: &str) -> Option<String> {
    const EXAMPLE: &str = "write host:port, e.g. \"kafka-1:9092\" or \"[::1]:9092\"";
    if entry.chars().any(char::is_whitespace) {
        return Some("contains whitespace; separate brokers with commas".to_owned());
    }
    let address = entry.split_once("://").map_or(entry, |(_, rest)| rest);
    let (host, port) = if let Some(bracketed) = address.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            return Some(format!("'[' is not closed by ']'; {EXAMPLE}"));
        };
        if after.is_empty() {
            (host, None)
        } else if let Some(port) = after.strip_prefix(':') {
            (host, Some(port))
        } else {
            return Some(format!("unexpected text after ']'; {EXAMPLE}"));
        }
    } else {
        match address.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => {
                return Some(format!("write an IPv6 address in brackets; {EXAMPLE}"));
            }
            Some((host, port)) => (host, Some(port)),
            None => (address, None),
        }
    };
    if host.is_empty() {
        return Some(format!("the host is missing; {EXAMPLE}"));
    }
    let host_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '%');
    if host.len() > 253 || !host.chars().all(host_char) {
        return Some(format!(
            "{} is not a host name or IP address (letters, digits, '.', '-', at most 253 \
             characters); {EXAMPLE}",
            quoted(host)
        ));
    }
    match port {
        None => None,
        Some("") => Some(format!("the port after ':' is missing; {EXAMPLE}")),
        Some(port) => match port.parse::<u16>() {
            Ok(1..) => None,
            _ => Some(format!(
                "port {} is not a number from 1 to 65535; {EXAMPLE}",
                quoted(port)
            )),
        },
    }
}

fn librdkafka_map(map: &BTreeMap<String, String>, out: &mut Vec<Problem>) {
    for (key, value) in map {
        let why = property_name_problem(key).or_else(|| librdkafka_property(key, value).err());
        if let Some(why) = why {
            out.push(Problem::new(join_key("kafka.librdkafka", key), why));
        }
    }
}

/// `others`: a `[[table]]` or `[[message]]` section is configured (either
/// is something to capture without an outbox).
fn outboxes(outboxes: &[OutboxConfig], others: bool, out: &mut Vec<Problem>) {
    if outboxes.is_empty() && !others {
        out.push(Problem::new(
            "outbox",
            "nothing to capture: no outbox table, no table and no message prefix is \
             configured; add an [[outbox]] section with table = \"public.outbox\", a [[table]] \
             section with name = \"public.orders\", or a [[message]] section with \
             prefix = \"orders\"",
        ));
    }
    let mut seen = BTreeMap::new();
    for (i, outbox) in outboxes.iter().enumerate() {
        let at = |key: &str| format!("outbox[{i}].{key}");
        match seen.entry(&outbox.table) {
            Entry::Vacant(slot) => {
                slot.insert(i);
            }
            Entry::Occupied(first) => out.push(Problem::new(
                at("table"),
                format!(
                    "table {} is already configured in outbox[{}]; each table may appear \
                     once (route by aggregate type with the topic template instead)",
                    outbox.table,
                    first.get()
                ),
            )),
        }
        for (key, column) in [
            ("id_column", &outbox.id_column),
            ("aggregate_type_column", &outbox.aggregate_type_column),
            ("aggregate_id_column", &outbox.aggregate_id_column),
            ("type_column", &outbox.type_column),
            ("payload_column", &outbox.payload_column),
        ] {
            identifier(&at(key), column, out);
        }
        if let Some(column) = &outbox.timestamp_column {
            identifier(&at("timestamp_column"), column, out);
        }
        if let Some(column) = &outbox.trace_context_column {
            identifier(&at("trace_context_column"), column, out);
        }
        if let Some(column) = &outbox.cloudevents.dataschema_column {
            identifier(&at("cloudevents.dataschema_column"), column, out);
        }
        for (name, column) in &outbox.cloudevents.extensions {
            if !column.is_empty() {
                identifier(&at(&format!("cloudevents.extensions.{name}")), column, out);
            }
        }
        super::cloudevents::check(outbox, &at, out);
        super::envelope::check(outbox, &at, out);
        topic(outbox, &at("topic"), out);
        let mut ordered = HashSet::new();
        for (j, column) in outbox.snapshot_order_by.iter().enumerate() {
            let key = at(&format!("snapshot_order_by[{j}]"));
            identifier(&key, column, out);
            if !ordered.insert(column) {
                out.push(Problem::new(
                    key,
                    format!("{} is listed twice; remove the duplicate", quoted(column)),
                ));
            }
        }
    }
}

/// Placeholders a `[[table]]` topic template may use.
const TABLE_PLACEHOLDERS: [&str; 3] = ["prefix", "schema", "table"];

fn tables(config: &Config, out: &mut Vec<Problem>) {
    table_defaults(&config.table_defaults, out);
    // The prefix of table events' topics and of the default heartbeat topic.
    // Unset, it is connector.name, whose own rule (connector_name) keeps it
    // to characters topic names allow.
    if let Some(prefix) = &config.table_defaults.topic_prefix
        && let Some(why) = topic_name_problem(prefix)
    {
        out.push(Problem::new(
            "table_defaults.topic_prefix",
            format!(
                "is the prefix of the table events' topics and of the default heartbeat topic, \
                 and {why}"
            ),
        ));
    }
    // The transaction topic, `<prefix>.transaction`: only its length can
    // be wrong once the prefix is right (a prefix problem is reported as
    // itself, above or under connector.name).
    let prefix = config.topic_prefix();
    if config.table_defaults.provide_transaction_metadata
        && topic_name_problem(prefix).is_none()
        && let Some(why) = topic_name_problem(&format!("{prefix}.transaction"))
    {
        out.push(Problem::new(
            "table_defaults.provide_transaction_metadata",
            format!(
                "writes the transaction records to \"{prefix}.transaction\", which {why}; \
                 shorten table_defaults.topic_prefix (or connector.name)"
            ),
        ));
    }
    let mut seen: BTreeMap<&super::TableRef, usize> = BTreeMap::new();
    for (i, table) in config.tables.iter().enumerate() {
        let at = |key: &str| format!("table[{i}].{key}");
        if let Some(first) = seen.insert(&table.name, i) {
            out.push(Problem::new(
                at("name"),
                format!(
                    "{} is already configured in table[{first}]; list each table once",
                    table.name
                ),
            ));
        }
        if table.name.schema.contains('*') {
            out.push(Problem::new(
                at("name"),
                format!(
                    "{}: '*' may only be used in the table part (e.g. \"public.*\"); name \
                     each schema in its own [[table]] section",
                    table.name
                ),
            ));
        }
        for (j, outbox) in config.outbox.iter().enumerate() {
            if table.matches(&outbox.table.schema, &outbox.table.name) {
                out.push(Problem::new(
                    at("name"),
                    format!(
                        "{} captures {}, which is the outbox table of outbox[{j}]; a table is \
                         either an outbox or a captured table, not both: remove it from one \
                         section (narrow the pattern if it is one)",
                        table.name, outbox.table
                    ),
                ));
            }
        }
        let mut listed = HashSet::new();
        for (j, column) in table.key_columns.iter().enumerate() {
            let key = at(&format!("key_columns[{j}]"));
            identifier(&key, column, out);
            if !listed.insert(column) {
                out.push(Problem::new(
                    key,
                    format!("{} is listed twice; remove the duplicate", quoted(column)),
                ));
            }
        }
        if let Some(p) = &table.unavailable_value_placeholder {
            placeholder(&at("unavailable_value_placeholder"), p, out);
        }
        column_rules(i, table, out);
        let mut has_placeholder = false;
        for segment in table.topic.segments() {
            if let Segment::Column(name) = segment {
                has_placeholder = true;
                if !TABLE_PLACEHOLDERS.contains(&name.as_str()) {
                    out.push(Problem::new(
                        at("topic"),
                        format!(
                            "template references {{{}}}; a table's topic may use only \
                             {{prefix}}, {{schema}} and {{table}} (default \"{}\")",
                            shorten(name, MAX_VALUE_CHARS),
                            super::TopicTemplate::TABLE_DEFAULT
                        ),
                    ));
                }
            }
        }
        if !has_placeholder && table.is_pattern() {
            out.push(Problem::new(
                at("topic"),
                format!(
                    "is a fixed topic, but {} is a pattern: every matching table would share \
                     it; use {{table}} in the template (default \"{}\")",
                    table.name,
                    super::TopicTemplate::TABLE_DEFAULT
                ),
            ));
        } else if !has_placeholder && let Some(why) = topic_name_problem(table.topic.as_str()) {
            out.push(Problem::new(at("topic"), why));
        }
    }
}

/// The column lists and masks of `table[i]`: names well formed, each
/// column masked at most once and never masked while left out, exactly one
/// mask kind per `[[table.column_mask]]`, salts only with hashes.
fn column_rules(i: usize, table: &super::TableConfig, out: &mut Vec<Problem>) {
    let at = |key: &str| format!("table[{i}].{key}");
    if !table.column_include_list.is_empty() && !table.column_exclude_list.is_empty() {
        out.push(Problem::new(
            at("column_exclude_list"),
            "is set together with column_include_list; Debezium takes one or the other: keep \
             only the one that is shorter to write",
        ));
    }
    // Per list (the include list, the exclude list, all masks together):
    // where each column was first named.
    let mut listed: BTreeMap<(&str, &str), String> = BTreeMap::new();
    for (key, column) in table.named_columns(i) {
        identifier(&key, column, out);
        let list: &'static str = if key.contains(".column_mask[") {
            "column_mask"
        } else if key.contains(".column_include_list[") {
            "include"
        } else {
            "exclude"
        };
        if let Some(first) = listed.get(&(list, column)) {
            out.push(Problem::new(
                key,
                format!(
                    "{} is already named in {first}; name a column once per list, and give it \
                     at most one mask",
                    quoted(column)
                ),
            ));
            continue;
        }
        listed.insert((list, column), key.clone());
        if list == "column_mask" && !table.includes_column(column) {
            out.push(Problem::new(
                key,
                format!(
                    "{} is masked but left out of the events by the column lists; remove the \
                     mask or the exclusion",
                    quoted(column)
                ),
            ));
        }
    }
    for (j, mask) in table.column_mask.iter().enumerate() {
        let key = |k: &str| at(&format!("column_mask[{j}].{k}"));
        if mask.columns.is_empty() {
            out.push(Problem::new(
                key("columns"),
                "is empty; name the columns to mask",
            ));
        }
        let kinds = [
            mask.hash.is_some(),
            mask.with_chars.is_some(),
            mask.truncate_to_chars.is_some(),
        ];
        if kinds.iter().filter(|&&k| k).count() != 1 {
            out.push(Problem::new(
                at(&format!("column_mask[{j}]")),
                "needs exactly one of hash (with salt), with_chars and truncate_to_chars; \
                 use one [[table.column_mask]] per kind",
            ));
        }
        match &mask.hash {
            Some(name) => {
                if !super::HASH_ALGORITHMS
                    .iter()
                    .any(|a| a.eq_ignore_ascii_case(name))
                {
                    out.push(Problem::new(
                        key("hash"),
                        format!(
                            "{} is not a supported hash algorithm; use one of {}",
                            quoted(name),
                            super::HASH_ALGORITHMS.join(", ")
                        ),
                    ));
                }
                if mask
                    .salt
                    .as_ref()
                    .is_some_and(|salt| secrecy::ExposeSecret::expose_secret(salt).is_empty())
                {
                    out.push(Problem::new(
                        key("salt"),
                        "is empty; Debezium's salt cannot be empty, and an unsalted hash of a \
                         short value (an e-mail, a phone number) is easily reversed: set a long \
                         random salt",
                    ));
                }
                if mask.salt.is_none() {
                    out.push(Problem::new(
                        key("salt"),
                        "is missing; a hash mask needs a salt (Debezium's \
                         column.mask.hash.<algorithm>.with.salt.<salt>), e.g. salt = \
                         \"${WALRELAY_MASK_SALT}\"",
                    ));
                }
                if let Some(v) = mask.hash_version
                    && !matches!(v, 1 | 2)
                {
                    out.push(Problem::new(
                        key("hash_version"),
                        format!(
                            "is {v}; use 1 (Debezium's column.mask.hash.…) or 2 \
                             (column.mask.hash.v2.…)"
                        ),
                    ));
                }
            }
            None => {
                for (k, set) in [
                    ("salt", mask.salt.is_some()),
                    ("hash_version", mask.hash_version.is_some()),
                ] {
                    if set {
                        out.push(Problem::new(
                            key(k),
                            "is set without hash; remove it or set hash = \"SHA-256\"",
                        ));
                    }
                }
            }
        }
        if mask.truncate_to_chars == Some(0) {
            out.push(Problem::new(
                key("truncate_to_chars"),
                "is 0; it must be positive (Debezium refuses 0 too)",
            ));
        }
    }
}

fn table_defaults(defaults: &TableDefaults, out: &mut Vec<Problem>) {
    placeholder(
        "table_defaults.unavailable_value_placeholder",
        &defaults.unavailable_value_placeholder,
        out,
    );
    if !defaults.column_include_list.is_empty() && !defaults.column_exclude_list.is_empty() {
        out.push(Problem::new(
            "table_defaults.column_exclude_list",
            "is set together with column_include_list; Debezium takes one or the other: keep \
             only the one that is shorter to write",
        ));
    }
    if let Err((key, reason)) = defaults.column_filter() {
        out.push(Problem::new(
            key,
            format!(
                "is not a regular expression walrelay can use: {reason}. Write it as Debezium \
                 does, matched against the whole schema.table.column (e.g. \
                 \"public\\.customers\\.(ssn|email)\"); look-around and back-references are \
                 not supported"
            ),
        ));
    }
}

fn placeholder(key: &str, value: &str, out: &mut Vec<Problem>) {
    if value.is_empty() {
        out.push(Problem::new(
            key,
            "is empty; consumers could not tell an unchanged TOASTed value from an empty one: \
             use Debezium's \"__debezium_unavailable_value\"",
        ));
    }
}

fn topic(outbox: &OutboxConfig, key: &str, out: &mut Vec<Problem>) {
    let allowed = outbox.template_columns();
    let allowed_set: HashSet<&str> = allowed.iter().copied().collect();
    let mut has_placeholder = false;
    for segment in outbox.topic.segments() {
        if let Segment::Column(column) = segment {
            has_placeholder = true;
            if !allowed_set.contains(column.as_str()) {
                let mut choices = allowed
                    .iter()
                    .take(10)
                    .map(|c| format!("{{{}}}", shorten(c, MAX_VALUE_CHARS)))
                    .collect::<Vec<_>>()
                    .join(", ");
                if allowed.len() > 10 {
                    choices.push_str(", …");
                }
                out.push(Problem::new(
                    key,
                    format!(
                        "template references {{{}}}, which is not a configured column; \
                         use one of {choices} or add the column to header_columns (or envelope_columns)",
                        shorten(column, MAX_VALUE_CHARS)
                    ),
                ));
            }
        }
    }
    if !has_placeholder {
        if let Some(why) = topic_name_problem(outbox.topic.as_str()) {
            out.push(Problem::new(key, why));
        }
    }
}

/// A duration key and its allowed range.
struct DurationRule {
    key: &'static str,
    value: Duration,
    zero_allowed: bool,
    max: Duration,
    example: &'static str,
}

impl DurationRule {
    fn check(&self, out: &mut Vec<Problem>) {
        let too_small = self.value.is_zero() && !self.zero_allowed;
        if too_small || self.value > self.max {
            let range = if self.zero_allowed {
                format!("at most {}", format_duration(self.max))
            } else {
                format!("longer than 0 and at most {}", format_duration(self.max))
            };
            out.push(Problem::new(
                self.key,
                format!(
                    "must be {range} (got {}), e.g. \"{}\"",
                    format_duration(self.value),
                    self.example
                ),
            ));
        }
    }
}
