use super::*;

const SECRET: &str = "s3cret-Kq8!";

fn config(extra: &str) -> Result<Config, ConfigError> {
    let text = format!(
        "[connector]\nname = \"c\"\n[postgres]\ndatabase = \"d\"\n[[outbox]]\n\
         table = \"outbox\"\n[kafka]\nbrokers = \"k:9092\"\n{extra}\n"
    );
    Config::from_str_with_env(&text, "c.toml", &|_| Err(std::env::VarError::NotPresent))
}

fn refused(extra: &str) -> String {
    let config = config(extra).unwrap();
    let error = check_producer_config(&config).unwrap_err().to_string();
    assert!(!error.contains(SECRET), "{error}");
    error
}

#[test]
fn queue_sizes_saturate_instead_of_wrapping() {
    let mut config = config("").unwrap();
    config.kafka.max_in_flight_records = usize::MAX;
    config.kafka.max_in_flight_bytes = u64::MAX;
    config.postgres.max_message_size = u64::MAX;
    let props = producer_properties(&config);
    let get = |key: &str| props.iter().find(|(k, _)| k == key).unwrap().1.clone();
    assert_eq!(get("queue.buffering.max.messages"), "2147483647");
    assert_eq!(get("queue.buffering.max.kbytes"), "2147483647");
}

#[test]
fn the_default_producer_configuration_passes_librdkafka() {
    check_producer_config(&config("").unwrap()).unwrap();
    // With message.timeout.ms = 0 (no timeout) librdkafka does not
    // bound linger.ms by it.
    check_producer_config(
        &config("linger = \"60s\"\n[kafka.librdkafka]\n\"message.timeout.ms\" = 0").unwrap(),
    )
    .unwrap();
}

/// librdkafka's verdict on the producer settings comes at load, naming
/// the configuration key and its line, never the value.
#[test]
fn a_property_librdkafka_refuses_is_named_with_its_line_not_its_value() {
    let error = refused(&format!(
        "[kafka.librdkafka]\n\"sasl.pasword\" = \"{SECRET}\""
    ));
    assert!(
        error.starts_with("c.toml:10:18: kafka.librdkafka.\"sasl.pasword\": librdkafka has no property named \"sasl.pasword\""),
        "{error}"
    );
    let error = refused(&format!(
        "[kafka.librdkafka]\n\"security.protocol\" = \"{SECRET}\""
    ));
    assert!(
        error.contains("kafka.librdkafka.\"security.protocol\": librdkafka refuses the value of property \"security.protocol\""),
        "{error}"
    );
    let error = refused("[kafka.librdkafka]\n\"batch.num.messages\" = 0");
    assert!(
        error.contains("kafka.librdkafka.\"batch.num.messages\"")
            && error.contains("must be in the range 1..1000000"),
        "{error}"
    );
    // A TLS file librdkafka cannot load: under the typed key that names
    // it, not [kafka.librdkafka], which the user did not write.
    let not_pem = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let key_file = std::env::temp_dir().join(format!("walrelay-junk-{}.key", std::process::id()));
    std::fs::write(&key_file, "not a key").unwrap();
    std::fs::set_permissions(
        &key_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let with_key = format!("\nssl_key = \"{}\"", key_file.display());
    for (key, property, more) in [
        ("ssl_ca", "ssl.ca.location", ""),
        (
            "ssl_certificate",
            "ssl.certificate.location",
            with_key.as_str(),
        ),
    ] {
        let error = refused(&format!(
            "security_protocol = \"ssl\"\n{key} = \"{not_pem}\"{more}"
        ));
        let at = key.len() + 4;
        assert!(
            error.starts_with(&format!("c.toml:10:{at}: kafka.{key}: librdkafka refuses"))
                && error.contains(&format!("{property} failed"))
                && error.contains(&format!("(kafka.{key} is librdkafka's {property})")),
            "{error}"
        );
    }
    let error = refused("linger = \"2s\"\n[kafka.librdkafka]\n\"message.timeout.ms\" = 1000");
    assert!(
        error.starts_with("c.toml:11:24: kafka.librdkafka.\"message.timeout.ms\": librdkafka refuses the producer configuration: ")
            && error.contains("`message.timeout.ms` must be greater than `linger.ms`"),
        "{error}"
    );
}

/// The order and the values the producer gets: walrelay's derived settings,
/// then the guarantees, then the raw map, one value per property.
#[test]
fn the_raw_map_comes_last_and_replaces_in_place() {
    let config = config(
        "[kafka.librdkafka]\n\"batch.num.messages\" = 10000\n\"enable.gapless.guarantee\" = false\nacks = \"all\"",
    )
    .unwrap();
    let props = ProducerProperties::from_config(&config);
    let names: Vec<&str> = props.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "client.id",
            "message.timeout.ms",
            "queue.buffering.max.messages",
            "queue.buffering.max.kbytes",
            "bootstrap.servers",
            "acks",
            "enable.idempotence",
            "partitioner",
            "compression.type",
            "linger.ms",
            "max.in.flight",
            "batch.num.messages",
            "enable.gapless.guarantee",
        ]
    );
    assert_eq!(props.get("acks"), Some("all"));
    assert_eq!(props.origin("acks"), Some(Origin::Raw));
    assert_eq!(props.get("enable.idempotence"), Some("true"));
    assert_eq!(props.get("partitioner"), Some("murmur2_random"));
    assert_eq!(props.get("max.in.flight"), Some("1"));
    assert_eq!(props.get("batch.num.messages"), Some("10000"));
}

/// A hand-built, unvalidated configuration cannot weaken a guarantee
/// through the raw map: the property is left out.
#[test]
fn the_raw_map_never_weakens_a_guarantee_even_unvalidated() {
    let mut config = config("").unwrap();
    for (k, v) in [("acks", "1"), ("linger.ms", "100"), ("client.id", "x")] {
        config.kafka.librdkafka.insert(k.into(), v.into());
    }
    let props = ProducerProperties::from_config(&config);
    assert_eq!(props.get("acks"), Some("all"));
    assert_eq!(props.get("linger.ms"), Some("5"));
    assert!(props.get("client.id").is_some());
}

#[test]
fn brokers_compression_and_fractional_linger_are_formatted_for_librdkafka() {
    let mut config = config("").unwrap();
    config.kafka.brokers = " a:1 , b:2 ".into();
    config.kafka.compression = crate::config::Compression::Zstd;
    config.kafka.linger = Duration::from_micros(1_250);
    let props = ProducerProperties::from_config(&config);
    assert_eq!(props.get("bootstrap.servers"), Some("a:1,b:2"));
    assert_eq!(props.get("compression.type"), Some("zstd"));
    assert_eq!(props.get("linger.ms"), Some("1.25"));
    config.kafka.linger = Duration::ZERO;
    let props = ProducerProperties::from_config(&config);
    assert_eq!(props.get("linger.ms"), Some("0"));
}

/// `exactly_once`: the transactional id, and a delivery timeout equal to
/// the transaction's (replacing walrelay's infinite one, in place).
#[test]
fn exactly_once_sets_the_transaction_and_bounds_the_delivery_timeout() {
    let eos = config("delivery = \"exactly_once\"\ntransaction_timeout = \"15m\"").unwrap();
    let props = ProducerProperties::from_config(&eos);
    assert_eq!(props.get("transactional.id"), Some("walrelay-c"));
    assert_eq!(props.get("transaction.timeout.ms"), Some("900000"));
    assert_eq!(props.get("message.timeout.ms"), Some("900000"));
    assert_eq!(props.get("retry.backoff.ms"), Some("20"));
    let pairs = producer_properties(&eos);
    assert_eq!(
        pairs
            .iter()
            .filter(|(k, _)| k == "message.timeout.ms")
            .count(),
        1
    );
    let at_least_once = ProducerProperties::from_config(&config("").unwrap());
    assert_eq!(at_least_once.get("transactional.id"), None);
    assert_eq!(at_least_once.get("message.timeout.ms"), Some("0"));
}

/// The typed security keys are set under librdkafka's names, and say so
/// in errors; TLS verifies the host name unless told not to.
#[test]
fn typed_security_keys_are_aliases_of_librdkafka_properties() {
    let sasl = config(
        "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
         sasl_username = \"u\"\nsasl_password = \"p\"",
    )
    .unwrap();
    let props = ProducerProperties::from_config(&sasl);
    assert_eq!(props.get("security.protocol"), Some("sasl_ssl"));
    assert_eq!(
        props.origin("security.protocol"),
        Some(Origin::Alias("kafka.security_protocol"))
    );
    assert_eq!(props.get("sasl.mechanisms"), Some("SCRAM-SHA-512"));
    assert_eq!(props.get("sasl.password"), Some("p"));
    assert_eq!(
        props.get("ssl.endpoint.identification.algorithm"),
        Some("https")
    );
    let plain = ProducerProperties::from_config(&config("").unwrap());
    assert_eq!(plain.get("ssl.endpoint.identification.algorithm"), None);
}
