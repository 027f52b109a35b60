//! Validation rules that serde cannot express: name syntax, ranges, cross-key
//! consistency, and the librdkafka properties that must not be overridden.
//!
//! Each rule yields a [`Problem`] naming the key path, what is wrong and the
//! fix. All problems are collected, so one run reports everything.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::time::Duration;

use super::Config;
use super::error::{Problem, join_key};
use super::schema::{KafkaConfig, OutboxConfig, PostgresConfig};
use super::template::{MAX_IDENTIFIER_BYTES, Segment, topic_name_problem};

/// librdkafka's upper bound for `linger.ms`.
const MAX_LINGER: Duration = Duration::from_secs(900);

/// Every problem in `config`, in no particular order.
pub(crate) fn problems(config: &Config) -> Vec<Problem> {
    let mut out = Vec::new();
    connector_name(&config.connector.name, &mut out);
    postgres(&config.postgres, &mut out);
    kafka(&config.kafka, &mut out);
    outboxes(&config.outbox, &mut out);
    out
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
                "{name:?} is not a valid connector name; use 1 to 64 characters from A-Z a-z 0-9 \
                 . _ - (it is part of the offset-store key, log fields and metric labels)"
            ),
        ));
    }
}

fn postgres(pg: &PostgresConfig, out: &mut Vec<Problem>) {
    if pg.host.trim().is_empty() {
        out.push(Problem::new(
            "postgres.host",
            "is empty; set a host name, an IP address, or a Unix socket directory such as \
             \"/var/run/postgresql\"",
        ));
    } else if pg.host.chars().any(char::is_whitespace) {
        out.push(Problem::new(
            "postgres.host",
            format!(
                "{:?} contains whitespace; give one host name, IP address or socket directory",
                pg.host
            ),
        ));
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
                "{:?} is not a valid replication slot name; PostgreSQL allows only lower-case \
                 letters, digits and '_', at most 63 characters (e.g. \"walrelay_orders\")",
                pg.slot
            ),
        ));
    }
    positive("postgres.connect_timeout", pg.connect_timeout, out);
    positive("postgres.status_interval", pg.status_interval, out);
    positive(
        "postgres.reconnect_backoff_initial",
        pg.reconnect_backoff_initial,
        out,
    );
    if pg.reconnect_backoff_initial > pg.reconnect_backoff_max {
        out.push(Problem::new(
            "postgres.reconnect_backoff_max",
            format!(
                "{} is less than reconnect_backoff_initial ({}); raise it or lower the initial backoff",
                humantime_serde::re::humantime::format_duration(pg.reconnect_backoff_max),
                humantime_serde::re::humantime::format_duration(pg.reconnect_backoff_initial),
            ),
        ));
    }
    if pg.max_message_size == 0 {
        out.push(Problem::new(
            "postgres.max_message_size",
            "must be greater than 0, e.g. \"64MiB\"",
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
            if broker.is_empty() {
                out.push(Problem::new(
                    "kafka.brokers",
                    format!(
                        "{:?} has an empty entry; separate brokers with single commas, e.g. \
                         \"kafka1:9092,kafka2:9092\"",
                        kafka.brokers
                    ),
                ));
                break;
            }
            if broker.chars().any(char::is_whitespace) {
                out.push(Problem::new(
                    "kafka.brokers",
                    format!("{broker:?} contains whitespace; separate brokers with commas"),
                ));
                break;
            }
        }
    }
    if kafka.linger > MAX_LINGER {
        out.push(Problem::new(
            "kafka.linger",
            "librdkafka allows at most 900s; a few milliseconds is usual",
        ));
    }
    if kafka.max_in_flight_records == 0 {
        out.push(Problem::new(
            "kafka.max_in_flight_records",
            "must be greater than 0 (it bounds unacknowledged records; e.g. 100000)",
        ));
    }
    if kafka.max_in_flight_bytes == 0 {
        out.push(Problem::new(
            "kafka.max_in_flight_bytes",
            "must be greater than 0 (it bounds unacknowledged bytes; e.g. \"64MiB\")",
        ));
    }
    if let Some(why) = topic_name_problem(&kafka.offsets_topic) {
        out.push(Problem::new("kafka.offsets_topic", why));
    }
    librdkafka_map(&kafka.librdkafka, out);
}

fn librdkafka_map(map: &BTreeMap<String, String>, out: &mut Vec<Problem>) {
    for (key, value) in map {
        if let Err(why) = librdkafka_property(key, value) {
            out.push(Problem::new(join_key("kafka.librdkafka", key), why));
        }
    }
}

/// Whether a raw librdkafka property may be set, and if not, why. Values of
/// the properties checked here are not secret, so they may be quoted.
pub(crate) fn librdkafka_property(key: &str, value: &str) -> Result<(), String> {
    let v = value.trim();
    let weakens = |what: &str| format!("{v:?} weakens a delivery guarantee: {what}");
    match key.trim().to_ascii_lowercase().as_str() {
        "" => Err("an empty property name; remove it".to_owned()),
        "acks" | "request.required.acks" => match v.to_ascii_lowercase().as_str() {
            "all" | "-1" => Ok(()),
            _ => Err(weakens(
                "walrelay needs acks=all, or a broker failover can lose records whose WAL \
                 PostgreSQL has already been allowed to recycle; remove the key (walrelay sets \
                 acks=all)",
            )),
        },
        "enable.idempotence" => match v.to_ascii_lowercase().as_str() {
            "true" | "t" | "1" => Ok(()),
            _ => Err(weakens(
                "the idempotent producer keeps retries from duplicating or reordering an \
                 aggregate's records; remove the key (walrelay sets enable.idempotence=true)",
            )),
        },
        "partitioner" => match v {
            "murmur2_random" => Ok(()),
            _ => Err(weakens(
                "records must be partitioned with murmur2_random so keys land on the same \
                 partitions as Java producers such as Debezium; remove the key",
            )),
        },
        "bootstrap.servers" | "metadata.broker.list" => {
            Err("set the brokers with kafka.brokers instead; remove this key".to_owned())
        }
        "compression.type" | "compression.codec" => {
            Err("set the codec with kafka.compression instead; remove this key".to_owned())
        }
        "linger.ms" | "queue.buffering.max.ms" => Err(
            "set the linger time with kafka.linger (e.g. \"5ms\") instead; remove this key"
                .to_owned(),
        ),
        "max.in.flight.requests.per.connection" | "max.in.flight" => match v.parse::<i64>() {
            Ok(1..=5) => Ok(()),
            _ => Err(weakens(
                "the idempotent producer keeps per-partition order only with 1 to 5 requests \
                 in flight; use a value from 1 to 5 or remove the key",
            )),
        },
        "retries" | "message.send.max.retries" => match v.parse::<i64>() {
            Ok(n) if n > 0 => Ok(()),
            _ => Err(weakens(
                "the idempotent producer needs retries > 0; remove the key or set a positive \
                 number",
            )),
        },
        "transactional.id" => Err(
            "walrelay does not use Kafka transactions, and a transactional producer rejects \
             records sent outside one; remove the key"
                .to_owned(),
        ),
        _ => Ok(()),
    }
}

fn outboxes(outboxes: &[OutboxConfig], out: &mut Vec<Problem>) {
    if outboxes.is_empty() {
        out.push(Problem::new(
            "outbox",
            "no outbox table is configured; add at least one [[outbox]] section with \
             table = \"public.outbox\"",
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
        for (j, column) in outbox.header_columns.iter().enumerate() {
            let key = at(&format!("header_columns[{j}]"));
            identifier(&key, column, out);
            if column == "id" {
                out.push(Problem::new(
                    key,
                    "the \"id\" header is reserved: every record carries the event id \
                     (id_column) in it; remove \"id\" from header_columns",
                ));
            } else if outbox.header_columns[..j].contains(column) {
                out.push(Problem::new(
                    key,
                    format!("{column:?} is listed twice; remove the duplicate"),
                ));
            }
        }
        topic(outbox, &at("topic"), out);
    }
}

fn topic(outbox: &OutboxConfig, key: &str, out: &mut Vec<Problem>) {
    let allowed = outbox.template_columns();
    let mut has_placeholder = false;
    for segment in outbox.topic.segments() {
        if let Segment::Column(column) = segment {
            has_placeholder = true;
            if !allowed.contains(&column.as_str()) {
                let choices = allowed
                    .iter()
                    .map(|c| format!("{{{c}}}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                out.push(Problem::new(
                    key,
                    format!(
                        "template references {{{column}}}, which is not a configured column; \
                         use one of {choices} or add the column to header_columns"
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

fn identifier(key: &str, value: &str, out: &mut Vec<Problem>) {
    if value.is_empty() {
        out.push(Problem::new(key, "is empty; set a name"));
    } else if value.len() > MAX_IDENTIFIER_BYTES {
        out.push(Problem::new(
            key,
            format!(
                "{value:?} is longer than {MAX_IDENTIFIER_BYTES} bytes, the most PostgreSQL keeps \
                 of a name; shorten it"
            ),
        ));
    } else if value.contains('\0') {
        out.push(Problem::new(key, "contains a NUL character; remove it"));
    }
}

fn positive(key: &str, value: Duration, out: &mut Vec<Problem>) {
    if value.is_zero() {
        out.push(Problem::new(key, "must be longer than 0, e.g. \"1s\""));
    }
}
