//! `[kafka]`: brokers, numbers and durations in range, `exactly_once`, typed
//! security settings (TLS, SASL) and their librdkafka form, secrets,
//! `linger_while_behind`.

use super::*;

/// The same on the Kafka side: no host-name check needs a pinned CA.
#[test]
fn kafka_without_host_name_checks_needs_a_pinned_ca() {
    let error = load_err(&kafka_with(
        "security_protocol = \"ssl\"\nssl_verify_hostname = false",
    ));
    assert!(
        error.contains("kafka.ssl_verify_hostname: false needs kafka.ssl_ca"),
        "{error}"
    );
    let file = existing_file();
    load(&kafka_with(&format!(
        "security_protocol = \"ssl\"\nssl_verify_hostname = false\nssl_ca = \"{file}\""
    )))
    .unwrap();
    load(&kafka_with("security_protocol = \"ssl\"")).unwrap();
}

/// A secret property whose name is off by case or a space is refused by
/// name at load: librdkafka would not know it (so nothing marks it secret)
/// and its error would repeat the value.
#[test]
fn librdkafka_property_names_must_be_lower_case_without_spaces() {
    for (name, fixed) in [
        ("SASL.Password", "sasl.password"),
        ("sasl.password ", "sasl.password"),
        (" sasl.password", "sasl.password"),
        ("sasl .password", "sasl.password"),
        ("Batch.Num.Messages", "batch.num.messages"),
    ] {
        let text = minimal_with(&format!(
            "[kafka.librdkafka]\n\"{name}\" = \"${{WALRELAY_KAFKA_PASSWORD}}\""
        ));
        let error = load_err(&text);
        assert!(
            error.contains(&format!("kafka.librdkafka.\"{name}\"")),
            "{name}: {error}"
        );
        assert!(
            error.contains(&format!("write \"{fixed}\"")),
            "{name}: {error}"
        );
        assert!(!error.contains(KAFKA_PASSWORD), "{name}: {error}");
        assert_eq!(error.lines().count(), 1, "{name}: {error}");
    }
    // Names librdkafka uses are accepted as they are.
    load(&minimal_with(
        "[kafka.librdkafka]\n\"ssl.ca.location\" = \"/etc/ca.pem\"\n\"sasl.oauthbearer.client.id\" = \"x\"",
    ))
    .unwrap();
}

/// Every number and duration has an upper bound, named with the range.
#[test]
fn numbers_and_durations_are_bounded_and_the_error_gives_the_range() {
    let cases = [
        (
            with_kafka("max_in_flight_records = 18446744073709551615"),
            "kafka.max_in_flight_records: must be greater than 0 and at most 10000000 (got 18446744073709551615)",
        ),
        (
            with_kafka("max_in_flight_bytes = \"17GiB\""),
            "kafka.max_in_flight_bytes: must be greater than 0 and at most 16GiB",
        ),
        (
            with_kafka("shutdown_flush_timeout = \"500000y\""),
            "kafka.shutdown_flush_timeout: must be at most 1h (got ",
        ),
        (
            with_kafka("linger = \"300s\""),
            "kafka.linger: must be at most 1m (got 5m)",
        ),
        (
            with_postgres("connect_timeout = \"1d\""),
            "postgres.connect_timeout: must be longer than 0 and at most 10m (got 1day)",
        ),
        (
            with_postgres("status_interval = \"11m\""),
            "postgres.status_interval: must be longer than 0 and at most 10m (got 11m)",
        ),
        (
            with_postgres("reconnect_backoff_initial = \"2h\"\nreconnect_backoff_max = \"3h\""),
            "postgres.reconnect_backoff_initial: must be longer than 0 and at most 1h (got 2h)",
        ),
        (
            with_postgres("reconnect_backoff_max = \"100000000h\""),
            "postgres.reconnect_backoff_max: must be longer than 0 and at most 1h",
        ),
        (
            with_postgres("max_message_size = \"2GiB\""),
            "postgres.max_message_size: must be greater than 0 and at most 1GiB",
        ),
    ];
    for (text, expected) in cases {
        let error = load_err(&text);
        assert!(
            error.contains(expected),
            "expected {expected:?} in:\n{error}"
        );
    }
    // The upper bounds themselves are allowed.
    let config = load(&with_kafka(
        "max_in_flight_records = 10000000\nmax_in_flight_bytes = \"16GiB\"\nlinger = \"60s\"\nshutdown_flush_timeout = \"1h\"",
    ))
    .unwrap();
    assert_eq!(config.kafka.linger, Duration::from_secs(60));
    load(&with_postgres(
        "connect_timeout = \"10m\"\nstatus_interval = \"10m\"\nreconnect_backoff_initial = \"1h\"\nreconnect_backoff_max = \"1h\"\nmax_message_size = \"1GiB\"",
    ))
    .unwrap();
}

/// `delivery` takes the two names; the transaction bounds are checked
/// (whatever `delivery` is) with their ranges, and a transaction may not be
/// meant to stay open as long as the broker lets it live.
#[test]
fn exactly_once_and_its_transaction_bounds() {
    let config = load(&with_kafka(
        "delivery = \"exactly_once\"\ntransaction_max_records = 500\n\
         transaction_max_bytes = \"1MiB\"\ntransaction_max_time = \"250ms\"\n\
         transaction_timeout = \"15m\"",
    ))
    .unwrap();
    let kafka = &config.kafka;
    assert_eq!(kafka.delivery, Delivery::ExactlyOnce);
    assert_eq!(kafka.transaction_max_records, 500);
    assert_eq!(kafka.transaction_max_bytes, 1 << 20);
    assert_eq!(kafka.transaction_max_time, Duration::from_millis(250));
    assert_eq!(kafka.transaction_timeout, Duration::from_secs(900));
    let properties = crate::sink::properties::producer_properties(&config);
    let get = |k: &str| {
        properties
            .iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(get("transactional.id"), Some("walrelay-orders"));
    assert_eq!(get("transaction.timeout.ms"), Some("900000"));
    assert_eq!(get("message.timeout.ms"), Some("900000"));
    let at_least_once = crate::sink::properties::producer_properties(&load(MINIMAL).unwrap());
    assert!(!at_least_once.iter().any(|(k, _)| k == "transactional.id"));

    for (keys, expected) in [
        (
            "delivery = \"once\"",
            "kafka.delivery: unknown variant `once`",
        ),
        (
            "transaction_max_records = 0",
            "kafka.transaction_max_records: must be greater than 0 and at most 10000000 (got 0)",
        ),
        (
            "transaction_max_bytes = \"17GiB\"",
            "kafka.transaction_max_bytes: must be greater than 0 and at most 16GiB",
        ),
        (
            "transaction_max_time = \"0s\"",
            "kafka.transaction_max_time: must be longer than 0 and at most 1m (got 0s)",
        ),
        (
            "transaction_timeout = \"2h\"",
            "kafka.transaction_timeout: must be longer than 0 and at most 1h (got 2h)",
        ),
        (
            "transaction_timeout = \"500ms\"",
            "kafka.transaction_timeout: must be at least 1s (got 500ms)",
        ),
        (
            "transaction_max_time = \"30s\"\ntransaction_timeout = \"30s\"",
            "kafka.transaction_max_time: must be shorter than kafka.transaction_timeout (30s)",
        ),
    ] {
        let error = load_err(&with_kafka(keys));
        assert!(
            error.contains(expected),
            "{keys}: expected {expected:?} in:\n{error}"
        );
    }
}

#[test]
fn broker_entries_need_a_host_and_a_valid_port() {
    for (brokers, entry) in [
        ("host:99999", "host:99999"),
        ("host:abc", "host:abc"),
        ("host:", "host:"),
        ("k1:9092, host:0", "host:0"),
        (":9092", ":9092"),
        ("::1:9092", "::1:9092"),
        ("[::1:9092", "[::1:9092"),
        ("[::1]9092", "[::1]9092"),
    ] {
        let error = load_err(&MINIMAL.replace("127.0.0.1:9092", brokers));
        assert!(
            error.contains(&format!("kafka.brokers: entry \"{entry}\"")),
            "{brokers}: {error}"
        );
    }
    for ok in [
        "k1:9092,k2:9093",
        "kafka",
        "[::1]:9092",
        "[::1]",
        "SSL://kafka:9093",
        "k1:65535",
    ] {
        let config = load(&MINIMAL.replace("127.0.0.1:9092", ok));
        assert!(config.is_ok(), "{ok}: {:?}", config.err());
    }
}

/// Issue 24: librdkafka reads `security.protocol` in any case, and its
/// documentation (like Java's) spells it `SASL_SSL`; so does walrelay.
/// Anything else is refused naming the key and the accepted values.
#[test]
fn security_protocol_is_read_in_any_case() {
    let sasl = "\nsasl_mechanism = \"SCRAM-SHA-512\"\nsasl_username = \"u\"\nsasl_password = \"p\"";
    for (written, protocol) in [
        ("PLAINTEXT", SecurityProtocol::Plaintext),
        ("SSL", SecurityProtocol::Ssl),
        ("Sasl_Plaintext", SecurityProtocol::SaslPlaintext),
        ("SASL_SSL", SecurityProtocol::SaslSsl),
        ("sasl_ssl", SecurityProtocol::SaslSsl),
    ] {
        let extra = if protocol.uses_sasl() { sasl } else { "" };
        let config = load(&kafka_with(&format!(
            "security_protocol = \"{written}\"{extra}"
        )))
        .unwrap_or_else(|e| panic!("{written}: {e}"));
        assert_eq!(config.kafka.security_protocol, Some(protocol), "{written}");
        let props: HashMap<_, _> = crate::sink::properties::producer_properties(&config)
            .into_iter()
            .collect();
        assert_eq!(props["security.protocol"], protocol.as_str());
    }
    let error = load_err(&kafka_with("security_protocol = \"SASL-SSL\""));
    assert!(
        error.contains("kafka.security_protocol: unknown variant `SASL-SSL`, expected one of"),
        "{error}"
    );
    assert!(error.contains("`sasl_ssl`"), "{error}");
}

#[test]
fn typed_sasl_ssl_settings_become_librdkafka_properties() {
    let config = load(&kafka_with(&format!(
        "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
         sasl_username = \"walrelay\"\nsasl_password = \"${{WALRELAY_KAFKA_PASSWORD}}\"\n\
         ssl_ca = \"{}\"",
        existing_file()
    )))
    .unwrap();
    let props: HashMap<_, _> = crate::sink::properties::producer_properties(&config)
        .into_iter()
        .collect();
    assert_eq!(props["security.protocol"], "sasl_ssl");
    assert_eq!(props["sasl.mechanisms"], "SCRAM-SHA-512");
    assert_eq!(props["sasl.username"], "walrelay");
    assert_eq!(props["sasl.password"], KAFKA_PASSWORD);
    assert_eq!(props["ssl.ca.location"], existing_file());
    // Host-name verification is on by default.
    assert_eq!(props["ssl.endpoint.identification.algorithm"], "https");
    let debug = format!("{config:?}");
    assert!(!debug.contains(KAFKA_PASSWORD), "{debug}");
    assert!(
        debug.contains("sasl_password: Some(\"[REDACTED]\")"),
        "{debug}"
    );
}

#[test]
fn typed_mutual_tls_settings_become_librdkafka_properties() {
    let file = existing_file();
    let key = private_file("mtlskey");
    let config = load(&kafka_with(&format!(
        "security_protocol = \"ssl\"\nssl_ca = \"{file}\"\nssl_certificate = \"{file}\"\n\
         ssl_key = \"{key}\"\nssl_key_password = \"${{WALRELAY_KAFKA_PASSWORD}}\"\n\
         ssl_verify_hostname = false",
    )))
    .unwrap();
    let props: HashMap<_, _> = crate::sink::properties::producer_properties(&config)
        .into_iter()
        .collect();
    assert_eq!(props["security.protocol"], "ssl");
    assert_eq!(props["ssl.certificate.location"], file);
    assert_eq!(props["ssl.key.location"], key);
    assert_eq!(props["ssl.key.password"], KAFKA_PASSWORD);
    assert_eq!(props["ssl.endpoint.identification.algorithm"], "none");
    assert!(!props.contains_key("sasl.mechanisms"));
    let debug = format!("{config:?}");
    assert!(!debug.contains(KAFKA_PASSWORD), "{debug}");
}

/// Without typed security keys nothing is emitted: the raw map (or
/// librdkafka's defaults) decides, as before the typed keys existed.
#[test]
fn no_typed_security_keys_emit_no_security_properties() {
    let props = crate::sink::properties::producer_properties(&load(MINIMAL).unwrap());
    assert!(
        !props.iter().any(|(k, _)| k.starts_with("ssl.")
            || k.starts_with("sasl.")
            || k.starts_with("security.")),
        "{props:?}"
    );
}

#[test]
fn sasl_keys_without_a_sasl_protocol_name_the_key_and_the_fix() {
    let error = load_err(&kafka_with("sasl_mechanism = \"SCRAM-SHA-512\""));
    assert!(
        error.contains("kafka.sasl_mechanism: is set but kafka.security_protocol is not; set kafka.security_protocol = \"sasl_ssl\""),
        "{error}"
    );
    let error = load_err(&kafka_with(
        "security_protocol = \"ssl\"\nsasl_username = \"u\"\nsasl_password = \"hunter2-Zq9\"",
    ));
    assert!(
        error.contains(
            "kafka.sasl_username: is only used with kafka.security_protocol = \"sasl_ssl\""
        ),
        "{error}"
    );
    assert!(error.contains("kafka.sasl_password:"), "{error}");
    assert!(!error.contains("hunter2"), "{error}");
}

#[test]
fn a_sasl_protocol_needs_mechanism_username_and_password() {
    let error = load_err(&kafka_with("security_protocol = \"sasl_ssl\""));
    for key in [
        "kafka.sasl_mechanism: is missing",
        "kafka.sasl_username: is missing",
        "kafka.sasl_password: is missing",
    ] {
        assert!(error.contains(key), "{key}: {error}");
    }
    // Given in the raw map instead, they count.
    load(&kafka_with(
        "security_protocol = \"sasl_ssl\"\n[kafka.librdkafka]\n\"sasl.mechanisms\" = \"PLAIN\"\n\
         \"sasl.username\" = \"u\"\n\"sasl.password\" = \"p\"",
    ))
    .unwrap();
}

#[test]
fn plain_over_sasl_plaintext_is_refused() {
    let error = load_err(&kafka_with(
        "security_protocol = \"sasl_plaintext\"\nsasl_mechanism = \"PLAIN\"\n\
         sasl_username = \"u\"\nsasl_password = \"p\"",
    ));
    assert!(
        error.contains(
            "kafka.sasl_mechanism: PLAIN over sasl_plaintext sends the password in the clear"
        ),
        "{error}"
    );
}

#[test]
fn tls_files_must_exist_and_need_a_tls_protocol() {
    let error = load_err(&kafka_with(
        "security_protocol = \"ssl\"\nssl_ca = \"/nonexistent/ca.pem\"",
    ));
    assert!(
        error.contains("kafka.ssl_ca: /nonexistent/ca.pem is not a readable file; give the path of the PEM file"),
        "{error}"
    );
    let error = load_err(&kafka_with(&format!(
        "security_protocol = \"sasl_plaintext\"\nsasl_mechanism = \"SCRAM-SHA-256\"\n\
         sasl_username = \"u\"\nsasl_password = \"p\"\nssl_ca = \"{}\"",
        existing_file()
    )));
    assert!(
        error.contains("kafka.ssl_ca: is only used with kafka.security_protocol = \"ssl\" or \"sasl_ssl\", but it is \"sasl_plaintext\""),
        "{error}"
    );
    let error = load_err(&kafka_with(&format!(
        "security_protocol = \"ssl\"\nssl_certificate = \"{}\"",
        existing_file()
    )));
    assert!(error.contains("kafka.ssl_key: is missing"), "{error}");
    let error = load_err(&kafka_with(&format!(
        "security_protocol = \"ssl\"\nssl_key = \"{}\"",
        existing_file()
    )));
    assert!(
        error.contains("kafka.ssl_certificate: is missing"),
        "{error}"
    );
    let error = load_err(&kafka_with("ssl_verify_hostname = false"));
    assert!(
        error.contains("kafka.ssl_verify_hostname: is set but kafka.security_protocol is not"),
        "{error}"
    );
}

#[test]
fn a_setting_given_typed_and_raw_is_refused_naming_both() {
    let error = load_err(&kafka_with(
        "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
         sasl_username = \"u\"\nsasl_password = \"hunter2-Zq9\"\n\
         [kafka.librdkafka]\n\"sasl.password\" = \"other-Zq9\"\n\"sasl.mechanism\" = \"PLAIN\"",
    ));
    assert!(
        error.contains("kafka.librdkafka.\"sasl.password\": sets the same thing as kafka.sasl_password; keep one of them"),
        "{error}"
    );
    assert!(
        error.contains(
            "kafka.librdkafka.\"sasl.mechanism\": sets the same thing as kafka.sasl_mechanism"
        ),
        "{error}"
    );
    assert!(
        !error.contains("hunter2") && !error.contains("other-Zq9"),
        "{error}"
    );
}

#[test]
fn unknown_protocol_and_mechanism_names_are_refused() {
    let error = load_err(&kafka_with("security_protocol = \"SASL_SSL\""));
    assert!(error.contains("kafka.security_protocol"), "{error}");
    assert!(error.contains("sasl_ssl"), "{error}");
    let error = load_err(&kafka_with(
        "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"scram-sha-512\"",
    ));
    assert!(error.contains("kafka.sasl_mechanism"), "{error}");
    assert!(error.contains("SCRAM-SHA-512"), "{error}");
}

#[test]
fn kafka_secrets_are_interpolated_and_never_repeated_in_errors() {
    let error = load_err(&kafka_with(
        "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
         sasl_username = \"u\"\nsasl_password = \"hunter2-Zq9${NOT SET}\"",
    ));
    assert!(error.contains("kafka.sasl_password"), "{error}");
    assert!(!error.contains("hunter2"), "{error}");
    let error = load_err(&kafka_with(
        "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
         sasl_username = \"${NO_SUCH_USER_VAR}\"\nsasl_password = \"p\"",
    ));
    assert!(
        error.contains("kafka.sasl_username: environment variable NO_SUCH_USER_VAR is not set"),
        "{error}"
    );
}

/// The Kafka secrets take `${file:...}` like the PostgreSQL ones (the
/// Kubernetes-mounted-secret way), trailing newline trimmed; the user name,
/// not a secret, does not.
#[test]
fn kafka_secrets_come_from_files_too() {
    let dir = secret_dir("kafka");
    let password = dir.join("kafka_password");
    std::fs::write(&password, "from-a-file-Zq9\n").unwrap();
    let key_password = dir.join("key_password");
    std::fs::write(&key_password, "key-from-a-file").unwrap();
    let config = load(&kafka_with(&format!(
        "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
         sasl_username = \"u\"\nsasl_password = \"${{file:{}}}\"",
        password.display()
    )))
    .unwrap();
    let props: HashMap<_, _> = crate::sink::properties::producer_properties(&config)
        .into_iter()
        .collect();
    assert_eq!(props["sasl.password"], "from-a-file-Zq9");
    let file = existing_file();
    let key = private_file("filekey");
    let config = load(&kafka_with(&format!(
        "security_protocol = \"ssl\"\nssl_certificate = \"{file}\"\nssl_key = \"{key}\"\n\
         ssl_key_password = \"${{file:{}}}\"",
        key_password.display()
    )))
    .unwrap();
    let props: HashMap<_, _> = crate::sink::properties::producer_properties(&config)
        .into_iter()
        .collect();
    assert_eq!(props["ssl.key.password"], "key-from-a-file");
    let error = load_err(&kafka_with(&format!(
        "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
         sasl_username = \"${{file:{}}}\"\nsasl_password = \"p\"",
        password.display()
    )));
    assert!(error.contains("kafka.sasl_username"), "{error}");
    assert!(!error.contains("from-a-file"), "{error}");
}

/// `linger_while_behind`: the larger of `linger` and 20 ms unless set, never
/// below `linger`, and no second producer when it equals `linger` or the
/// producer is transactional.
#[test]
fn linger_while_behind_defaults_bounds_and_when_there_is_a_second_producer() {
    let kafka = |extra: &str| {
        load(&MINIMAL.replace("[kafka]", &format!("[kafka]\n{extra}")))
            .unwrap()
            .kafka
    };
    assert_eq!(kafka("").bulk_linger_ms().as_deref(), Some("20"));
    assert_eq!(kafka("linger = \"50ms\"").bulk_linger_ms(), None);
    assert_eq!(
        kafka("linger = \"50ms\"").linger_while_behind(),
        Duration::from_millis(50)
    );
    assert_eq!(
        kafka("linger = \"1ms\"\nlinger_while_behind = \"12.5ms\"")
            .bulk_linger_ms()
            .as_deref(),
        Some("12.5")
    );
    assert_eq!(
        kafka("linger_while_behind = \"5ms\"").bulk_linger_ms(),
        None
    );
    assert_eq!(kafka("delivery = \"exactly_once\"").bulk_linger_ms(), None);
    let error = load_err(&MINIMAL.replace(
        "[kafka]",
        "[kafka]\nlinger = \"10ms\"\nlinger_while_behind = \"5ms\"",
    ));
    assert!(
        error.contains("kafka.linger_while_behind: must be at least kafka.linger (10ms; got 5ms)"),
        "{error}"
    );
    let error = load_err(&MINIMAL.replace("[kafka]", "[kafka]\nlinger_while_behind = \"2m\""));
    assert!(
        error.contains("kafka.linger_while_behind: must be at most 1m (got 2m)"),
        "{error}"
    );
}
