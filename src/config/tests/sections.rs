//! The small sections and their defaults: `[snapshot]`, `[heartbeat]`,
//! `[dead_letter]`, `[health]`, the topic prefix.

use super::*;

#[test]
fn defaults_apply_to_every_optional_key() {
    let config = load(MINIMAL).unwrap();
    let pg = &config.postgres;
    assert_eq!(pg.host, "127.0.0.1");
    assert_eq!(pg.port, 5432);
    assert_eq!(pg.user, "walrelay");
    assert!(pg.password.is_none());
    assert_eq!(pg.slot, "walrelay");
    assert_eq!(pg.publication, "walrelay");
    assert!(pg.create_slot);
    assert!(pg.create_publication);
    assert_eq!(pg.connect_timeout, Duration::from_secs(10));
    assert_eq!(pg.status_interval, Duration::from_secs(1));
    assert_eq!(pg.max_message_size, 64 * 1024 * 1024);
    assert_eq!(pg.reconnect_backoff_initial, Duration::from_millis(500));
    assert_eq!(pg.reconnect_backoff_max, Duration::from_secs(30));

    let kafka = &config.kafka;
    assert_eq!(kafka.compression, Compression::Lz4);
    assert_eq!(kafka.linger, Duration::from_millis(5));
    assert_eq!(kafka.max_in_flight_records, 100_000);
    assert_eq!(kafka.max_in_flight_bytes, 64 * 1024 * 1024);
    assert_eq!(kafka.shutdown_flush_timeout, Duration::from_secs(10));
    assert_eq!(kafka.offsets_topic, "walrelay.offsets");
    assert!(kafka.librdkafka.is_empty());
    assert_eq!(kafka.delivery, Delivery::AtLeastOnce);
    assert_eq!(kafka.transaction_max_records, 20_000);
    assert_eq!(kafka.transaction_max_bytes, 32 << 20);
    assert_eq!(kafka.transaction_max_time, Duration::from_millis(100));
    assert_eq!(kafka.transaction_timeout, Duration::from_secs(60));

    assert!(config.health.is_none());

    let outbox = &config.outbox[0];
    assert_eq!(outbox.id_column, "id");
    assert_eq!(outbox.aggregate_type_column, "aggregatetype");
    assert_eq!(outbox.aggregate_id_column, "aggregateid");
    assert_eq!(outbox.type_column, "type");
    assert_eq!(outbox.payload_column, "payload");
    assert_eq!(
        outbox.topic,
        TopicTemplate::parse(TopicTemplate::DEFAULT).unwrap()
    );
    assert_eq!(outbox.header_columns, ["type"]);
    assert_eq!(outbox.timestamp_column, None);
    assert!(!outbox.tombstone_on_empty_payload);
    assert_eq!(outbox.on_update, OnUpdate::Warn);
    assert!(outbox.snapshot_order_by.is_empty(), "the primary key");

    assert_eq!(config.snapshot, SnapshotConfig::default());
    assert_eq!(config.snapshot.mode, None);
    assert_eq!(config.snapshot.parallelism, 1);
    assert_eq!(config.snapshot.fetch_rows, 10_000);
}

#[test]
fn snapshot_section_takes_debezium_mode_names() {
    for (name, mode) in [
        ("initial", SnapshotMode::Initial),
        ("no_data", SnapshotMode::NoData),
        ("initial_only", SnapshotMode::InitialOnly),
        ("when_needed", SnapshotMode::WhenNeeded),
    ] {
        let config = load(&minimal_with(&format!("[snapshot]\nmode = \"{name}\""))).unwrap();
        assert_eq!(config.snapshot.mode, Some(mode));
        assert_eq!(mode.as_str(), name);
    }
    let config = load(&minimal_with(
        "snapshot_order_by = [\"created_at\", \"id\"]\n[snapshot]\nparallelism = 16\nfetch_rows = 1000000",
    ))
    .unwrap();
    assert_eq!(config.snapshot.parallelism, 16);
    assert_eq!(config.snapshot.fetch_rows, 1_000_000);
    assert_eq!(config.outbox[0].snapshot_order_by, ["created_at", "id"]);
}

#[test]
fn snapshot_mode_always_is_refused_with_the_alternatives() {
    let error = load_err(&minimal_with("[snapshot]\nmode = \"always\""));
    assert!(
        error.contains(
            "test.toml:11:8: snapshot.mode: \"always\" is not supported: it would publish every \
             table again at every start; use initial or when_needed, and `walrelay snapshot \
             --table …`"
        ),
        "{error}"
    );
    let error = load_err(&minimal_with("[snapshot]\nmode = \"never\""));
    assert!(error.contains("snapshot.mode"), "{error}");
    assert!(error.contains("`initial`, `no_data`"), "{error}");
}

#[test]
fn snapshot_numbers_have_ranges_and_order_columns_are_names() {
    for (extra, key, words) in [
        (
            "[snapshot]\nparallelism = 0",
            "snapshot.parallelism",
            "from 1 to 16 (got 0)",
        ),
        (
            "[snapshot]\nparallelism = 17",
            "snapshot.parallelism",
            "from 1 to 16 (got 17)",
        ),
        (
            "[snapshot]\nfetch_rows = 0",
            "snapshot.fetch_rows",
            "from 1 to 1000000 (got 0)",
        ),
        (
            "[snapshot]\nfetch_rows = 1000001",
            "snapshot.fetch_rows",
            "from 1 to 1000000 (got 1000001)",
        ),
        (
            "snapshot_order_by = [\"id\", \"\"]",
            "outbox[0].snapshot_order_by[1]",
            "is empty; set a name",
        ),
        (
            "snapshot_order_by = [\"id\", \"id\"]",
            "outbox[0].snapshot_order_by[1]",
            "\"id\" is listed twice; remove the duplicate",
        ),
        (
            "[snapshot]\nfetch = 10",
            "snapshot.fetch",
            "unknown key `fetch` in [snapshot]",
        ),
    ] {
        let error = load_err(&minimal_with(extra));
        assert!(error.contains(&format!("{key}: ")), "{extra}: {error}");
        assert!(error.contains(words), "{extra}: {error}");
    }
}

#[test]
fn heartbeats_are_off_by_default_and_take_a_duration() {
    let config = load(MINIMAL).unwrap();
    assert_eq!(config.heartbeat, HeartbeatConfig::default());
    assert_eq!(config.heartbeat.enabled(), None);
    let config = load(&minimal_with("[heartbeat]\ninterval = \"0s\"")).unwrap();
    assert_eq!(
        config.heartbeat.enabled(),
        None,
        "0s is off, as in Debezium"
    );
    let config = load(&minimal_with(
        "[heartbeat]\ninterval = \"10s\"\npublish = true",
    ))
    .unwrap();
    assert_eq!(
        config.heartbeat.enabled(),
        Some(std::time::Duration::from_secs(10))
    );
    assert!(config.heartbeat.publish);
    assert_eq!(
        config.heartbeat.topic_for(config.topic_prefix()),
        "__debezium-heartbeat.orders"
    );
    // Debezium's topic.prefix is table_defaults.topic_prefix when set.
    let config = load(&minimal_with(
        "[table_defaults]\ntopic_prefix = \"dbserver1\"\n[heartbeat]\ninterval = \"10s\"\npublish = true",
    ))
    .unwrap();
    assert_eq!(
        config.heartbeat.topic_for(config.topic_prefix()),
        "__debezium-heartbeat.dbserver1"
    );
    let config = load(&minimal_with(
        "[heartbeat]\ninterval = \"1m\"\npublish = true\ntopic = \"beats.orders\"",
    ))
    .unwrap();
    assert_eq!(config.heartbeat.topic_for("orders"), "beats.orders");
}

#[test]
fn heartbeat_problems_name_the_key_and_the_fix() {
    for (extra, key, words) in [
        (
            "[heartbeat]\ninterval = \"10ms\"",
            "heartbeat.interval",
            "must be from 100ms to 1h (got 10ms)",
        ),
        (
            "[heartbeat]\ninterval = \"2h\"",
            "heartbeat.interval",
            "must be from 100ms to 1h (got 2h)",
        ),
        (
            "[heartbeat]\ninterval = 10",
            "heartbeat.interval",
            "a duration needs a unit",
        ),
        (
            "[heartbeat]\npublish = true",
            "heartbeat.publish",
            "heartbeats are off; set heartbeat.interval",
        ),
        (
            "[heartbeat]\ntopic = \"beats\"",
            "heartbeat.topic",
            "heartbeats are off; set heartbeat.interval",
        ),
        (
            "[heartbeat]\ninterval = \"10s\"\npublish = true\ntopic = \"beats/orders\"",
            "heartbeat.topic",
            "character '/' is not allowed in a Kafka topic name",
        ),
        (
            "[heartbeat]\ninterval = \"10s\"\npublish = true\ntopic = \"walrelay.offsets\"",
            "heartbeat.topic",
            "is the offset-store topic",
        ),
        (
            "[heartbeat]\nintreval = \"10s\"",
            "heartbeat.intreval",
            "unknown key `intreval` in [heartbeat]; did you mean `interval`?",
        ),
    ] {
        let error = load_err(&minimal_with(extra));
        assert!(error.contains(&format!("{key}: ")), "{extra}: {error}");
        assert!(error.contains(words), "{extra}: {error}");
    }
}

/// `[dead_letter]`: absent by default (stop on an unroutable row); its
/// topic is required, a valid name, and no topic that carries other
/// records.
#[test]
fn dead_letter_is_off_by_default_and_its_topic_is_checked() {
    assert_eq!(load(MINIMAL).unwrap().dead_letter, None);
    let config = load(&minimal_with("[dead_letter]\ntopic = \"orders.dlq\"")).unwrap();
    assert_eq!(
        config.dead_letter,
        Some(crate::config::DeadLetterConfig {
            topic: "orders.dlq".into()
        })
    );
    for (extra, key, words) in [
        (
            "[dead_letter]",
            "dead_letter.topic",
            "this required key is missing",
        ),
        (
            "[dead_letter]\ntopic = \"dead letters\"",
            "dead_letter.topic",
            "character ' ' is not allowed",
        ),
        (
            "[dead_letter]\ntopic = \"walrelay.offsets\"",
            "dead_letter.topic",
            "is the offset-store topic",
        ),
        (
            "[heartbeat]\ninterval = \"10s\"\npublish = true\ntopic = \"beats\"\n\
             [dead_letter]\ntopic = \"beats\"",
            "dead_letter.topic",
            "is the heartbeat topic",
        ),
        (
            "topic = \"orders.events\"\n[dead_letter]\ntopic = \"orders.events\"",
            "dead_letter.topic",
            "is the topic of outbox[0]",
        ),
        (
            "[dead_letter]\ntopic = \"x\"\ntopc = \"y\"",
            "dead_letter.topc",
            "unknown key `topc` in [dead_letter]; did you mean `topic`?",
        ),
    ] {
        let error = load_err(&minimal_with(extra));
        assert!(error.contains(&format!("{key}: ")), "{extra}: {error}");
        assert!(error.contains(words), "{extra}: {error}");
    }
}

/// Issue 24: an invalid connector.name is reported as itself — not first as
/// the heartbeat topic derived from it (a consequence, without a line in
/// the file), with or without heartbeats; likewise an invalid
/// table_defaults.topic_prefix, tables or not.
#[test]
fn an_invalid_topic_prefix_is_reported_under_its_own_key_only() {
    for extra in ["", "[heartbeat]\ninterval = \"10s\"\npublish = true"] {
        let text = minimal_with(extra).replace("name = \"orders\"", "name = \"orders service\"");
        let error = load_err(&text);
        assert!(
            error.starts_with("test.toml:3:8: connector.name: \"orders service\" is not a valid"),
            "{error}"
        );
        assert!(!error.contains("heartbeat"), "{error}");
    }
    let error = load_err(&minimal_with(
        "[table_defaults]\ntopic_prefix = \"shop floor\"\n[heartbeat]\ninterval = \"10s\"\npublish = true",
    ));
    assert!(
        error.starts_with("test.toml:11:16: table_defaults.topic_prefix: is the prefix of"),
        "{error}"
    );
    assert!(error.contains("character ' ' is not allowed"), "{error}");
    assert!(!error.contains("heartbeat.topic"), "{error}");
}

#[test]
fn a_default_heartbeat_topic_too_long_for_kafka_names_the_key() {
    let extra = format!(
        "[table_defaults]\ntopic_prefix = \"{}\"\n[heartbeat]\ninterval = \"10s\"",
        "p".repeat(240)
    );
    let error = load_err(&minimal_with(&extra));
    assert!(
        error.contains("heartbeat.topic: defaults to \"__debezium-heartbeat.ppp"),
        "{error}"
    );
    assert!(error.contains("set heartbeat.topic"), "{error}");
}

#[test]
fn empty_health_section_listens_on_the_default_address() {
    let config = load(&minimal_with("[health]")).unwrap();
    assert_eq!(
        config.health.unwrap().listen,
        "127.0.0.1:9187".parse().unwrap()
    );
}
