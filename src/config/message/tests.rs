#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::super::Config;

fn load(sections: &str) -> Result<Config, String> {
    let text = crate::config::test_config_text(sections);
    Config::from_str(&text, "test.toml").map_err(|e| e.to_string())
}

#[test]
fn a_message_section_loads_with_its_defaults() {
    let c = load("[[message]]\nprefix = \"orders\"\ntopic = \"orders.{type}\"\n").unwrap();
    let m = &c.messages[0];
    assert_eq!(m.prefix, "orders");
    assert_eq!(m.topic.as_str(), "orders.{type}");
    assert_eq!(m.key_field, None);
    assert!(m.header_fields.is_empty());
    assert!(m.reads_payload());
    assert_eq!(
        m.describe(),
        "transactional messages to topic orders.{type}, key = the prefix"
    );
    let c = load("[[message]]\nprefix = \"a\"\ntopic = \"{prefix}\"\n").unwrap();
    assert!(!c.messages[0].reads_payload());
}

#[test]
fn invalid_message_sections_name_the_key_and_the_fix() {
    let cases = [
        (
            "prefix = \"\"\ntopic = \"t\"",
            "message[0].prefix",
            "is empty",
        ),
        (
            "prefix = \"*\"\ntopic = \"t\"",
            "message[0].prefix",
            "is empty",
        ),
        (
            "prefix = \"a*b\"\ntopic = \"t\"",
            "message[0].prefix",
            "only as the last",
        ),
        (
            "prefix = \"walrelay.heartbeat\"\ntopic = \"t\"",
            "message[0].prefix",
            "walrelay writes itself",
        ),
        (
            "prefix = \"wal*\"\ntopic = \"t\"",
            "message[0].prefix",
            "walrelay writes itself",
        ),
        (
            "prefix = \"a\"\ntopic = \"{}\"",
            "message[0].topic",
            "empty placeholder",
        ),
        (
            "prefix = \"a\"\ntopic = \"t\"\nkey_field = \"\"",
            "message[0].key_field",
            "empty field",
        ),
        (
            "prefix = \"a\"\ntopic = \"t\"\nheader_fields = [\"h\", \"h\"]",
            "message[0].header_fields",
            "listed twice",
        ),
        (
            "prefix = \"a\"\ntopic = \"t\"\nheader_fields = [\"walrelay.lsn\"]",
            "message[0].header_fields",
            "clash",
        ),
        ("prefix = \"a\"", "message", "topic"),
        (
            "prefix = \"a\"\ntopic = \"t\"\nformat = \"debezium\"\nkey_field = \"k\"",
            "message[0].key_field",
            "remove key_field",
        ),
        (
            "prefix = \"a\"\ntopic = \"t\"\nformat = \"json\"",
            "message",
            "unknown variant",
        ),
        (
            "prefix = \"a\"\ntopic = \"t\"\nkey_column = \"k\"",
            "message",
            "unknown key `key_column` in [[message]]",
        ),
    ];
    for (body, key, what) in cases {
        let e = load(&format!("[[message]]\n{body}\n")).unwrap_err();
        assert!(e.contains(key) && e.contains(what), "{body:?}: {e}");
    }
}

#[test]
fn overlapping_prefixes_are_refused() {
    for (a, b) in [
        ("orders", "orders"),
        ("orders.*", "orders.created"),
        ("orders.created", "orders.*"),
        ("orders*", "orders.*"),
    ] {
        let e = load(&format!(
            "[[message]]\nprefix = \"{a}\"\ntopic = \"t\"\n[[message]]\nprefix = \"{b}\"\ntopic = \"u\"\n"
        ))
        .unwrap_err();
        assert!(
            e.contains("message[1].prefix") && e.contains("overlaps message[0]"),
            "{a} {b}: {e}"
        );
    }
    load("[[message]]\nprefix = \"orders.*\"\ntopic = \"t\"\n[[message]]\nprefix = \"order\"\ntopic = \"u\"\n")
        .unwrap();
}

#[test]
fn message_sections_alone_are_something_to_capture() {
    let text = r#"
[connector]
name = "t"
[postgres]
database = "d"
[kafka]
brokers = "k:9092"
[[message]]
prefix = "orders"
topic = "orders"
"#;
    let c = Config::from_str(text, "test.toml").unwrap();
    assert!(c.outbox.is_empty() && c.tables.is_empty());
    assert_eq!(c.messages.len(), 1);
    // Without it, nothing is configured: the error names all three.
    let none = text.split("[[message]]").next().unwrap();
    let e = Config::from_str(none, "test.toml").unwrap_err().to_string();
    assert!(e.contains("[[message]] section"), "{e}");
}

#[test]
fn registry_formats_need_a_registry_and_keep_debeziums_key() {
    let registry = "[kafka.schema_registry]\nurl = \"http://registry:8081\"\n";
    for format in ["avro", "json_schema", "protobuf"] {
        let section =
            format!("[[message]]\nprefix = \"orders\"\ntopic = \"t\"\nformat = \"{format}\"\n");
        // No registry: the key, the format and both fixes named.
        let e = load(&section).unwrap_err();
        assert!(
            e.contains("message[0].format")
                && e.contains(&format!("format = \"{format}\" needs a schema registry"))
                && e.contains("[kafka.schema_registry]")
                && e.contains("format = \"debezium\""),
            "{e}"
        );
        // With one: loads, and check says what it writes.
        let c = load(&format!("{section}{registry}")).unwrap();
        let m = &c.messages[0];
        assert!(m.format.uses_registry() && m.format.is_debezium_event());
        assert_eq!(m.format.as_str(), format);
        assert_eq!(
            m.describe(),
            format!(
                "transactional messages to topic t, Debezium's op \"m\" events in {format} \
                 (schema registry, Debezium's MessageKey and MessageValue schemas), key = \
                 {{\"prefix\": …}}"
            )
        );
        // Debezium's key: no key_field.
        let e = load(&format!("{section}key_field = \"k\"\n{registry}")).unwrap_err();
        assert!(
            e.contains("message[0].key_field")
                && e.contains(&format!("with format = \"{format}\""))
                && e.contains("remove key_field"),
            "{e}"
        );
        // Record names: every subject name strategy will do.
        for strategy in ["record", "topic_record"] {
            load(&format!(
                "{section}{registry}subject_name_strategy = \"{strategy}\"\n"
            ))
            .unwrap();
        }
    }
    // The other formats need none.
    for format in ["raw", "debezium"] {
        let c = load(&format!(
            "[[message]]\nprefix = \"orders\"\ntopic = \"t\"\nformat = \"{format}\"\n"
        ))
        .unwrap();
        assert!(!c.messages[0].format.uses_registry());
    }
}
