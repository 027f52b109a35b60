use super::*;

const MINIMAL: &str = r#"
[inbox]
name = "orders"
topics = ["outbox.event.order"]
[inbox.kafka]
brokers = "${BROKERS}"
[inbox.postgres]
url = "postgres://app:${PW}@db/app"
[inbox.handler]
sql = "INSERT INTO t VALUES ($1)"
params = ["id", "header:type"]
"#;

fn env(name: &str) -> Option<String> {
    match name {
        "BROKERS" => Some("k:9092".into()),
        "PW" => Some("s3cret".into()),
        _ => None,
    }
}

#[test]
fn a_minimal_file_loads_with_defaults() {
    let c = from_str(MINIMAL, "f.toml", &env).unwrap();
    assert_eq!(c.inbox.kafka.brokers, "k:9092");
    assert_eq!(c.inbox.group_id(), "orders");
    assert_eq!(c.inbox.on_quarantine, OnQuarantine::Continue);
    assert_eq!(c.params, vec![Param::Id, Param::Header("type".into())]);
    assert!(!format!("{c:?}").contains("s3cret"));
}

/// The example sets every key and loads.
#[test]
fn the_example_file_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/inbox/inbox.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let env = |_: &str| Some("x".to_owned());
    let c = from_str(&text, "inbox.toml", &env).unwrap();
    assert_eq!(c.params, vec![Param::Id, Param::Key, Param::Value]);
    assert!(c.inbox.health.is_some());
}

#[test]
fn errors_name_the_key_and_the_fix() {
    let text = MINIMAL
        .replace("topics =", "workers = 0\ntopics =")
        .replace("params = [", "params = [\"nope\", ");
    let text = text.replace(
        "[inbox.kafka]",
        "[inbox.kafka]\nlibrdkafka = { \"isolation.level\" = \"read_uncommitted\" }",
    );
    let e = from_str(&text, "f.toml", &env).unwrap_err();
    assert!(
        e.contains("f.toml:4:11: inbox.workers: is 0; set 1 to 256"),
        "{e}"
    );
    assert!(e.contains("inbox.handler.params[0]"), "{e}");
    assert!(
        e.contains("inbox.kafka.librdkafka.\"isolation.level\""),
        "{e}"
    );
    for bad in ["\"\"", "\"^orders.*\""] {
        let text = MINIMAL.replace(
            "[inbox.kafka]",
            &format!("[inbox.kafka]\nquarantine_topic = {bad}"),
        );
        let e = from_str(&text, "f.toml", &env).unwrap_err();
        assert!(
            e.contains("f.toml:6:20: inbox.kafka.quarantine_topic: must name one topic"),
            "{e}"
        );
    }
    let text = MINIMAL.replace("[inbox.kafka]", "[inbox.kafka]\nquarantine_topic = \"q\"");
    let c = from_str(&text, "f.toml", &env).unwrap();
    assert_eq!(c.inbox.kafka.quarantine_topic.as_deref(), Some("q"));
    let e = from_str(&MINIMAL.replace("name =", "nam ="), "f.toml", &env).unwrap_err();
    assert!(
        e.contains("f.toml:3:1: inbox.nam: unknown key `nam` in [inbox]; did you mean `name`?"),
        "{e}"
    );
    let e = from_str(&MINIMAL.replace("${PW}", "${NOPE}"), "f.toml", &env).unwrap_err();
    assert!(
        e.contains("inbox.postgres.url: environment variable NOPE"),
        "{e}"
    );
}

/// Errors carry `line:column` as the connector's do (the same machinery),
/// the validation's too, placed at the key's value.
#[test]
fn every_error_names_its_line_and_column() {
    let text = MINIMAL.replace("topics = [", "workers = 0\ntopics = [");
    let e = from_str(&text, "f.toml", &env).unwrap_err();
    assert!(e.starts_with("f.toml:4:11: inbox.workers: is 0"), "{e}");
    let e = from_str(
        &MINIMAL.replace(
            "url = \"postgres://app:${PW}@db/app\"",
            "url = \"postgres://app:${PW}@/app\"",
        ),
        "f.toml",
        &env,
    )
    .unwrap_err();
    assert!(
        e.starts_with("f.toml:8:7: inbox.postgres.url: names no host"),
        "{e}"
    );
    assert!(!e.contains("s3cret"), "{e}");
    let e = from_str(
        &MINIMAL.replace("[inbox.handler]", "[inbox.hanlder]"),
        "f.toml",
        &env,
    )
    .unwrap_err();
    assert!(
        e.contains(
            "f.toml:9:8: inbox.hanlder: unknown key `hanlder` in [inbox]; did you mean `handler`?"
        ),
        "{e}"
    );
    let e = from_str("[inbox]\nname = 1\n", "f.toml", &env).unwrap_err();
    assert!(e.starts_with("f.toml:2:8: inbox.name: invalid type"), "{e}");
    let e = from_str("[inbox\n", "f.toml", &env).unwrap_err();
    assert!(e.starts_with("f.toml:1:"), "{e}");
}

/// A connector's file given to `walrelay inbox` says which command takes it.
#[test]
fn a_connector_file_names_the_command_that_takes_it() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/quickstart.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let e = from_str(&text, "quickstart.toml", &env).unwrap_err();
    assert!(e.contains("this is a connector's file"), "{e}");
    assert!(e.contains("walrelay run --config"), "{e}");
    assert!(e.starts_with("quickstart.toml:"), "{e}");
}
