//! The producer properties built from `[kafka]`: guarantees first, the raw
//! map last, nothing that weakens delivery.

use super::*;

/// One request in flight per broker by default (see `sink::kafka` on
/// implicit acks); the raw map may raise it within what keeps idempotence.
#[test]
fn max_in_flight_defaults_to_one_and_may_be_raised_to_five() {
    let props = crate::sink::properties::producer_properties(&load(MINIMAL).unwrap());
    assert!(props.iter().any(|(k, v)| k == "max.in.flight" && v == "1"));
    let config = load(&minimal_with("[kafka.librdkafka]\n\"max.in.flight\" = 5")).unwrap();
    let props = crate::sink::properties::producer_properties(&config);
    assert_eq!(
        props.iter().rev().find(|(k, _)| k == "max.in.flight"),
        Some(&("max.in.flight".to_owned(), "5".to_owned())),
        "the raw map comes later, so librdkafka takes its value"
    );
    let error = load(&minimal_with("[kafka.librdkafka]\n\"max.in.flight\" = 6"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("1 to 5"), "{error}");
}

#[test]
fn producer_properties_format_brokers_compression_and_fractional_linger() {
    let mut config = load(MINIMAL).unwrap();
    config.kafka.brokers = " a:1 , b:2 ".into();
    config.kafka.compression = Compression::Zstd;
    config.kafka.linger = Duration::from_micros(1_250);
    let props: HashMap<_, _> = crate::sink::properties::producer_properties(&config)
        .into_iter()
        .collect();
    assert_eq!(props["bootstrap.servers"], "a:1,b:2");
    assert_eq!(props["compression.type"], "zstd");
    assert_eq!(props["linger.ms"], "1.25");
    config.kafka.linger = Duration::ZERO;
    let props: HashMap<_, _> = crate::sink::properties::producer_properties(&config)
        .into_iter()
        .collect();
    assert_eq!(props["linger.ms"], "0");
}

#[test]
fn producer_properties_never_emit_a_weakening_property_even_unvalidated() {
    let mut config = load(MINIMAL).unwrap();
    config.kafka.librdkafka.insert("acks".into(), "1".into());
    config
        .kafka
        .librdkafka
        .insert("linger.ms".into(), "100".into());
    config
        .kafka
        .librdkafka
        .insert("client.id".into(), "x".into());
    let props = crate::sink::properties::producer_properties(&config);
    assert!(!props.iter().any(|(k, v)| k == "acks" && v == "1"));
    assert!(!props.iter().any(|(k, v)| k == "linger.ms" && v == "100"));
    assert!(props.iter().any(|(k, _)| k == "client.id"));
    let error = config.validate().unwrap_err().to_string();
    assert!(error.contains("kafka.librdkafka.acks"), "{error}");
    assert!(error.contains("kafka.librdkafka.\"linger.ms\""), "{error}");
}

#[test]
fn librdkafka_properties_that_weaken_guarantees_are_rejected_with_a_reason() {
    let rejected = [
        ("acks", "1", "acks=all"),
        ("acks", "0", "acks=all"),
        ("request.required.acks", "1", "acks=all"),
        ("enable.idempotence", "false", "idempotent"),
        ("partitioner", "consistent_random", "murmur2_random"),
        ("partitioner", "murmur2", "murmur2_random"),
        ("bootstrap.servers", "a:1", "kafka.brokers"),
        ("metadata.broker.list", "a:1", "kafka.brokers"),
        ("compression.type", "lz4", "kafka.compression"),
        ("compression.codec", "gzip", "kafka.compression"),
        ("linger.ms", "5", "kafka.linger"),
        ("queue.buffering.max.ms", "5", "kafka.linger"),
        ("max.in.flight.requests.per.connection", "6", "1 to 5"),
        ("max.in.flight.requests.per.connection", "0", "1 to 5"),
        ("max.in.flight", "1000000", "1 to 5"),
        ("max.in.flight", "many", "1 to 5"),
        ("retries", "0", "retries > 0"),
        ("message.send.max.retries", "0", "retries > 0"),
        ("transactional.id", "x", "exactly_once"),
        (
            "transaction.timeout.ms",
            "1000",
            "kafka.transaction_timeout",
        ),
        ("ACKS", "1", "acks=all"),
    ];
    for (key, value, reason) in rejected {
        let why = librdkafka_property(key, value).unwrap_err();
        assert!(why.contains(reason), "{key}={value}: {why}");
    }
    let accepted = [
        ("acks", "all"),
        ("acks", "-1"),
        ("request.required.acks", "all"),
        ("enable.idempotence", "true"),
        ("partitioner", "murmur2_random"),
        ("max.in.flight.requests.per.connection", "5"),
        ("max.in.flight", "1"),
        ("enable.gapless.guarantee", "false"),
        ("enable.gapless.guarantee", "true"),
        ("retries", "2147483647"),
        ("batch.num.messages", "10000"),
        ("sasl.password", "anything"),
    ];
    for (key, value) in accepted {
        assert_eq!(librdkafka_property(key, value), Ok(()), "{key}={value}");
    }
}

#[test]
fn librdkafka_contradiction_in_a_file_names_key_line_and_reason() {
    let text = minimal_with("[kafka.librdkafka]\n\"enable.idempotence\" = false");
    let error = load_err(&text);
    let line = text.lines().count();
    assert!(
        error.starts_with(&format!(
            "test.toml:{line}:24: kafka.librdkafka.\"enable.idempotence\": \"false\" weakens"
        )),
        "{error}"
    );
}
