//! Tests for the configuration module. The example files under `config/` and
//! the bad ones under `config/invalid/` are loaded here, so they cannot rot.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::env::VarError;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use proptest::prelude::*;
use secrecy::ExposeSecret;

mod keys;

use super::interpolate::{InterpolateError, interpolate};
use super::producer::librdkafka_property;
use super::*;

const PASSWORD: &str = "pg-s3cret-Zq9!";
const KAFKA_PASSWORD: &str = "kafka-s3cret-Xw7!";
const MASK_SALT: &str = "mask-s4lt-Qz9!";

/// The variables the example files refer to, with recognisable values.
fn fake_env(name: &str) -> Result<String, VarError> {
    match name {
        "WALRELAY_PG_PASSWORD" => Ok(PASSWORD.to_owned()),
        "WALRELAY_KAFKA_PASSWORD" => Ok(KAFKA_PASSWORD.to_owned()),
        "PGHOST" => Ok("db.internal".to_owned()),
        "WALRELAY_MASK_SALT" => Ok(MASK_SALT.to_owned()),
        _ => Err(VarError::NotPresent),
    }
}

fn load(text: &str) -> Result<Config, ConfigError> {
    Config::from_str_with_env(text, "test.toml", &fake_env)
}

fn load_err(text: &str) -> String {
    match load(text) {
        Ok(config) => panic!("expected an error, got {config:?}"),
        Err(e) => e.to_string(),
    }
}

const MINIMAL: &str = r#"
[connector]
name = "orders"
[postgres]
database = "app"
[kafka]
brokers = "127.0.0.1:9092"
[[outbox]]
table = "public.outbox"
"#;

/// `MINIMAL` with `extra` appended (TOML lets a later header reopen nothing,
/// so extras are whole sections or keys for the last `[[outbox]]`).
fn minimal_with(extra: &str) -> String {
    format!("{MINIMAL}{extra}\n")
}

fn toml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

fn config_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config")
}

#[test]
fn every_example_config_loads_and_validates() {
    let files = toml_files(&config_dir());
    assert!(files.len() >= 2, "expected example configs in config/");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let origin = file.display().to_string();
        if let Err(e) = Config::from_str_with_env(&text, &origin, &fake_env) {
            panic!("example {origin} does not load:\n{e}");
        }
    }
}

/// The walrelay.toml inside deploy/kubernetes/sidecar.yaml loads like the
/// examples do (its secret read from a file, as the mounted Secret is).
#[test]
fn the_kubernetes_sidecar_config_loads() {
    let manifest = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/sidecar.yaml"),
    )
    .unwrap();
    let toml: String = manifest
        .lines()
        .skip_while(|l| l.trim_end() != "  walrelay.toml: |")
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .map(|l| format!("{}\n", l.get(4..).unwrap_or_default()))
        .collect();
    assert!(
        toml.contains("[connector]"),
        "no walrelay.toml in the manifest"
    );
    let secret = std::env::temp_dir().join(format!("walrelay_sidecar_{}", std::process::id()));
    std::fs::write(&secret, "s3cret\n").unwrap();
    let toml = toml.replace(
        "${file:/run/secrets/walrelay/pg_password}",
        &format!("${{file:{}}}", secret.display()),
    );
    let config = Config::from_str_with_env(&toml, "sidecar.yaml", &fake_env)
        .unwrap_or_else(|e| panic!("the sidecar's walrelay.toml does not load:\n{e}"));
    let _ = std::fs::remove_file(&secret);
    assert_eq!(config.connector.name, "orders");
    assert_eq!(
        config.health.map(|h| h.listen.to_string()).as_deref(),
        Some("0.0.0.0:9187")
    );
}

/// The walk of the schema finds keys at every depth, arrays of tables and
/// free-form maps included (so the two tests below are not vacuous).
#[test]
fn the_schema_walk_finds_every_kind_of_key() {
    let keys: Vec<String> = keys::schema_keys().iter().map(|k| k.path()).collect();
    for expected in [
        "connector.name",
        "postgres.sslkey",
        "kafka.librdkafka",
        "health.listen",
        "outbox[].table",
        "table[].column_mask[].salt",
        "table_defaults.column_include_list",
        "heartbeat.topic",
        "log.format",
    ] {
        assert!(
            keys.iter().any(|k| k == expected),
            "{expected} not in {keys:#?}"
        );
    }
    assert!(keys.len() > 80, "{keys:#?}");
}

/// (section, key) pairs config/example.toml names: set, or commented out
/// (`# sslkey = …`) where a value cannot be given (a file that must exist, a
/// key that excludes another). A `[section.key]` header names `key` too.
fn keys_in_example(text: &str) -> KeySet {
    let mut out = KeySet::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if let Some(header) = line.strip_prefix('[') {
            section = header.trim_matches(['[', ']']).to_owned();
            let (parent, name) = section.rsplit_once('.').unwrap_or(("", &section));
            out.insert((parent.to_owned(), name.to_owned()));
            continue;
        }
        let line = line.trim_start_matches('#').trim_start();
        if let Some((key, _)) = line.split_once('=') {
            let key = key.trim();
            if !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                out.insert((section.clone(), key.to_owned()));
            }
        }
    }
    out
}

/// Every key of the schema (derived from the structs, not listed by hand)
/// is in config/example.toml, which docs/configuration.md says names every
/// key.
#[test]
fn example_toml_names_every_key_of_the_schema() {
    let text = std::fs::read_to_string(config_dir().join("example.toml")).unwrap();
    let named = keys_in_example(&text);
    let missing: Vec<String> = keys::schema_keys()
        .iter()
        .filter(|k| !named.contains(&(k.section(), k.name().to_owned())))
        .map(|k| k.path())
        .collect();
    assert!(
        missing.is_empty(),
        "config/example.toml does not name {missing:?} (set it, or write it commented out with \
         a comment why)"
    );
}

/// The lines of `doc` under the heading that names `section` (`[postgres]`,
/// `[[outbox]]`, `[[table.column_mask]]`), up to the next heading of the
/// same or a higher level; the whole document for the top level.
fn doc_part<'a>(doc: &'a str, section: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = doc.lines().collect();
    if section.is_empty() {
        return lines;
    }
    let level = |line: &str| line.chars().take_while(|&c| c == '#').count();
    let names = |line: &str| {
        level(line) > 0
            && (line.contains(&format!("`[{section}]`"))
                || line.contains(&format!("`[[{section}]]`")))
    };
    let Some(start) = lines.iter().position(|l| names(l)) else {
        return Vec::new();
    };
    let depth = level(lines[start]);
    lines[start..]
        .iter()
        .enumerate()
        .take_while(|&(i, l)| i == 0 || !(1..=depth).contains(&level(l)))
        .map(|(_, l)| *l)
        .collect()
}

/// Every key of the schema (derived from the structs) has a row in its
/// section of docs/configuration.md, or (a table of its own) a heading.
#[test]
fn configuration_reference_documents_every_key() {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md");
    let doc = std::fs::read_to_string(doc_path).unwrap();
    let mut missing = Vec::new();
    for key in keys::schema_keys() {
        let part = doc_part(&doc, &key.section());
        let row = format!("| `{}` |", key.name());
        let own = if key.section().is_empty() {
            key.name().to_owned()
        } else {
            format!("{}.{}", key.section(), key.name())
        };
        let heading = |l: &&str| {
            l.starts_with('#')
                && (l.contains(&format!("`[{own}]`")) || l.contains(&format!("`[[{own}]]`")))
        };
        if !part.iter().any(|l| l.starts_with(&row) || heading(l)) {
            missing.push(key.path());
        }
    }
    assert!(
        missing.is_empty(),
        "docs/configuration.md documents no {missing:?} (a `| `key` |` row under the section's \
         heading)"
    );
}

/// (section, key) pairs, sections as TOML headers write them.
type KeySet = std::collections::BTreeSet<(String, String)>;

/// The keys config/example.toml names that expand `${VAR}`, and those that
/// also read `${file:...}` (the secrets), found by trying each: the line is
/// set to a reference that cannot resolve and the error says how it was
/// read.
fn interpolating_keys() -> (KeySet, KeySet) {
    let text = std::fs::read_to_string(config_dir().join("example.toml")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (mut vars, mut secrets) = (KeySet::new(), KeySet::new());
    let mut section = String::new();
    for (i, line) in lines.iter().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            section = header.trim_matches(['[', ']']).to_owned();
            continue;
        }
        let Some((key, _)) = line.trim_start_matches('#').trim_start().split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            continue;
        }
        let with = |value: &str| {
            let mut variant = lines.clone();
            let line = format!("{key} = \"{value}\"");
            variant[i] = &line;
            match load(&variant.join("\n")) {
                Ok(_) => String::new(),
                Err(e) => e.to_string(),
            }
        };
        let entry = (section.clone(), key.to_owned());
        if with("${WALRELAY_DOC_PROBE}")
            .contains("environment variable WALRELAY_DOC_PROBE is not set")
        {
            vars.insert(entry.clone());
        }
        if with("${file:/nonexistent/walrelay-doc-probe}").contains("cannot read secret file") {
            secrets.insert(entry);
        }
    }
    (vars, secrets)
}

/// The backquoted key paths in the first `|`-column of the table rows, or
/// the whole text, of the paragraph of `doc` that starts with `start`, with
/// array indices dropped (`table[i].column_mask[j].salt` →
/// `table.column_mask.salt`).
fn keys_in_paragraph(
    doc: &str,
    start: &str,
    first_column: bool,
) -> std::collections::BTreeSet<String> {
    let at = doc
        .find(start)
        .unwrap_or_else(|| panic!("{start:?} not found"));
    let rest = &doc[at..];
    let paragraph = &rest[..rest.find("\n\n").unwrap_or(rest.len())];
    let paragraph = if rest[..paragraph.len()].ends_with(':') {
        // The table follows the introducing sentence.
        let table = &rest[paragraph.len() + 2..];
        &table[..table.find("\n\n").unwrap_or(table.len())]
    } else {
        paragraph
    };
    let mut out = std::collections::BTreeSet::new();
    for line in paragraph.lines() {
        let text = if first_column {
            line.split('|').nth(1).unwrap_or_default()
        } else {
            line
        };
        for token in text.split('`').skip(1).step_by(2) {
            if token.starts_with('[') || !token.contains('.') {
                continue;
            }
            let mut key = String::new();
            let mut depth = 0;
            for c in token.chars() {
                match c {
                    '[' => depth += 1,
                    ']' => depth -= 1,
                    c if depth == 0 => key.push(c),
                    _ => {}
                }
            }
            out.insert(key);
        }
    }
    out
}

/// Issue 24 (item 16): the reference's lists of the keys that take `${VAR}`
/// and of the secret keys that take `${file:...}` (and security.md's) match
/// what the code does with each key of config/example.toml, tried one by
/// one (the lists had lost the mask salt, and the certificate paths).
#[test]
fn the_lists_of_interpolating_and_secret_keys_match_the_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let reference = std::fs::read_to_string(root.join("docs/configuration.md")).unwrap();
    let security = std::fs::read_to_string(root.join("docs/security.md")).unwrap();
    let (vars, secrets) = interpolating_keys();
    let path = |(section, key): &(String, String)| format!("{section}.{key}");
    let vars: std::collections::BTreeSet<String> = vars.iter().map(path).collect();
    let secrets: std::collections::BTreeSet<String> = secrets.iter().map(path).collect();
    assert!(vars.contains("postgres.host") && secrets.contains("postgres.password"));
    assert!(!secrets.contains("postgres.host") && !vars.contains("postgres.slot"));

    let table = keys_in_paragraph(&reference, "**Environment variables.**", true);
    assert_eq!(table, vars, "the ${{VAR}} table of docs/configuration.md");
    let files = keys_in_paragraph(&reference, "Those keys are", false);
    assert_eq!(
        files, secrets,
        "the ${{file:}} keys of docs/configuration.md"
    );
    for (doc, start) in [(&reference, "**Secrets.**"), (&security, "Secret keys are")] {
        let listed = keys_in_paragraph(doc, start, false);
        let missing: Vec<_> = secrets.difference(&listed).collect();
        assert!(missing.is_empty(), "{start:?} lacks {missing:?}");
    }
}

/// Issue 24 (item 16): the documentation and examples never set a setting
/// that has a typed `[kafka]` key as a `[kafka.librdkafka]` property (the
/// sidecar example did, for TLS and SASL; the reference for a `${file:...}`
/// password): the typed keys are checked at load, and setting both is an
/// error.
#[test]
fn no_example_sets_a_typed_security_setting_through_librdkafka() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs"), root.join("deploy"), root.join("config")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                // config/invalid/ shows mistakes on purpose; deploy/dev holds
                // the dev services' own (Java) settings.
                if !path.ends_with("invalid") && !path.ends_with("dev") {
                    dirs.push(path);
                }
            } else if path
                .extension()
                .is_some_and(|e| ["md", "toml", "yaml", "in", "sh"].iter().any(|x| e == *x))
            {
                files.push(path);
            }
        }
    }
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (typed, properties) in schema::SECURITY_KEYS {
            for property in *properties {
                for (n, line) in text.lines().enumerate() {
                    if line.contains(&format!("\"{property}\" =")) {
                        found.push(format!(
                            "{}:{}: {property} (use {typed})",
                            file.display(),
                            n + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn example_toml_values_reach_the_typed_config() {
    let path = config_dir().join("example.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let config = Config::from_str_with_env(&text, "example.toml", &fake_env).unwrap();
    assert_eq!(config.postgres.host, "db.internal");
    assert_eq!(
        config.kafka.sasl_password.as_ref().unwrap().expose_secret(),
        KAFKA_PASSWORD,
        "the Kafka password is interpolated"
    );
    assert_eq!(config.kafka.librdkafka["batch.num.messages"], "10000");
    assert_eq!(config.outbox.len(), 2);
    let billing = &config.outbox[1];
    assert_eq!(
        billing.table,
        TableRef {
            schema: "billing".into(),
            name: "outbox".into()
        }
    );
    assert_eq!(billing.timestamp_column.as_deref(), Some("created_at"));
    assert_eq!(billing.on_update, OnUpdate::Fail);
    assert_eq!(
        billing.topic.columns().collect::<Vec<_>>(),
        ["aggregatetype", "type"]
    );
    assert_eq!(config.outbox[0].timestamp_column, None, "\"\" means unset");
}

#[test]
fn quickstart_targets_the_dev_services() {
    let text = std::fs::read_to_string(config_dir().join("quickstart.toml")).unwrap();
    let config = Config::from_str_with_env(&text, "quickstart.toml", &fake_env).unwrap();
    assert_eq!(config.postgres.host, "127.0.0.1");
    assert_eq!(config.postgres.port, 54318);
    assert_eq!(config.postgres.database, "walrelay_quickstart");
    assert_eq!(config.postgres.user, "walrelay");
    assert_eq!(
        config.postgres.password.as_ref().unwrap().expose_secret(),
        PASSWORD
    );
    assert_eq!(config.kafka.brokers, "127.0.0.1:19092");
    assert_eq!(config.outbox.len(), 1);
    let outbox = &config.outbox[0];
    assert_eq!(outbox.table.to_string(), "public.outbox");
    assert_eq!(outbox.id_column, "id");
    assert_eq!(outbox.aggregate_type_column, "aggregatetype");
    assert_eq!(outbox.aggregate_id_column, "aggregateid");
    assert_eq!(outbox.type_column, "type");
    assert_eq!(outbox.payload_column, "payload");
    assert_eq!(outbox.topic.as_str(), "outbox.event.{aggregatetype}");
}

#[test]
fn every_invalid_config_fails_naming_the_expected_key() {
    let dir = config_dir().join("invalid");
    let files = toml_files(&dir);
    assert!(
        files.len() >= 20,
        "expected the bad configs in config/invalid/"
    );
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let expects: Vec<&str> = text
            .lines()
            .map_while(|l| l.strip_prefix("# expect: "))
            .collect();
        let origin = file.display().to_string();
        assert!(
            !expects.is_empty(),
            "{origin}: first line must be `# expect: <substring of the error>`"
        );
        let error = match Config::from_str_with_env(&text, &origin, &fake_env) {
            Ok(_) => panic!("{origin} loaded, but it is meant to be invalid"),
            Err(e) => e.to_string(),
        };
        assert!(
            error.starts_with(&origin),
            "{origin}: error does not start with the file name:\n{error}"
        );
        for expect in expects {
            assert!(
                error.contains(expect),
                "{origin}: error does not mention {expect:?}:\n{error}"
            );
        }
    }
}

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
        ("[snapshot]\nfetch = 10", "snapshot.fetch", "unknown field"),
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
            "unknown field",
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
            "unknown field",
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

#[test]
fn producer_properties_put_guarantees_first_and_raw_map_last() {
    let config = load(&minimal_with(
        "[kafka.librdkafka]\n\"batch.num.messages\" = 10000\n\"enable.gapless.guarantee\" = false\nacks = \"all\"",
    ))
    .unwrap();
    let props = config.kafka.producer_properties();
    let pairs: Vec<(&str, &str)> = props.iter().map(|(k, v)| (&**k, &**v)).collect();
    assert_eq!(
        pairs,
        [
            ("bootstrap.servers", "127.0.0.1:9092"),
            ("acks", "all"),
            ("enable.idempotence", "true"),
            ("partitioner", "murmur2_random"),
            ("compression.type", "lz4"),
            ("linger.ms", "5"),
            ("max.in.flight", "1"),
            ("acks", "all"),
            ("batch.num.messages", "10000"),
            ("enable.gapless.guarantee", "false"),
        ]
    );
}

/// One request in flight per broker by default (see `sink::kafka` on
/// implicit acks); the raw map may raise it within what keeps idempotence.
#[test]
fn max_in_flight_defaults_to_one_and_may_be_raised_to_five() {
    let props = load(MINIMAL).unwrap().kafka.producer_properties();
    assert!(props.iter().any(|(k, v)| k == "max.in.flight" && v == "1"));
    let config = load(&minimal_with("[kafka.librdkafka]\n\"max.in.flight\" = 5")).unwrap();
    let props = config.kafka.producer_properties();
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
    let props: HashMap<_, _> = config.kafka.producer_properties().into_iter().collect();
    assert_eq!(props["bootstrap.servers"], "a:1,b:2");
    assert_eq!(props["compression.type"], "zstd");
    assert_eq!(props["linger.ms"], "1.25");
    config.kafka.linger = Duration::ZERO;
    let props: HashMap<_, _> = config.kafka.producer_properties().into_iter().collect();
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
    let props = config.kafka.producer_properties();
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

#[test]
fn interpolates_every_key_that_allows_it() {
    let env = |name: &str| match name {
        "H" => Ok("db".to_owned()),
        "U" => Ok("relay".to_owned()),
        "D" => Ok("appdb".to_owned()),
        "B" => Ok("k1:9092".to_owned()),
        "P" => Ok("pw".to_owned()),
        "C" => Ok("client-7".to_owned()),
        _ => Err(VarError::NotPresent),
    };
    let text = r#"
[connector]
name = "orders"
[postgres]
host = "${H}"
user = "${U}"
database = "${D}_x"
password = "a${P}b"
[kafka]
brokers = "${B},k2:9092"
[kafka.librdkafka]
"client.id" = "${C}"
[[outbox]]
table = "public.outbox"
"#;
    let config = Config::from_str_with_env(text, "t.toml", &env).unwrap();
    assert_eq!(config.postgres.host, "db");
    assert_eq!(config.postgres.user, "relay");
    assert_eq!(config.postgres.database, "appdb_x");
    assert_eq!(
        config.postgres.password.as_ref().unwrap().expose_secret(),
        "apwb"
    );
    assert_eq!(config.kafka.brokers, "k1:9092,k2:9092");
    assert_eq!(config.kafka.librdkafka["client.id"], "client-7");
}

#[test]
fn keys_without_interpolation_keep_dollar_signs_literally() {
    let config = load(&minimal_with("[kafka.librdkafka]\n\"client.id\" = \"a$b\"")).unwrap();
    assert_eq!(config.kafka.librdkafka["client.id"], "a$b");
    // The slot is not interpolated; `${X}` there is just an invalid slot name.
    let error = load_err(&MINIMAL.replace("database", "slot = \"${X}\"\ndatabase"));
    assert!(error.contains("postgres.slot"), "{error}");
}

#[test]
fn missing_variable_names_the_key_the_variable_and_the_line() {
    let text = MINIMAL.replace("database = \"app\"", "database = \"${NO_SUCH_DB_VAR}\"");
    let error = load_err(&text);
    assert!(
        error.starts_with(
            "test.toml:5:12: postgres.database: environment variable NO_SUCH_DB_VAR is not set"
        ),
        "{error}"
    );
    let text = minimal_with("[kafka.librdkafka]\n\"sasl.password\" = \"${NO_SUCH_KAFKA_VAR}\"");
    let error = load_err(&text);
    assert!(
        error.contains(
            "kafka.librdkafka.\"sasl.password\": environment variable NO_SUCH_KAFKA_VAR is not set"
        ),
        "{error}"
    );
}

#[test]
fn interpolation_escape_unterminated_and_invalid_names() {
    let env = |name: &str| match name {
        "A" => Ok("x".to_owned()),
        "RAW" => Ok("${A}".to_owned()),
        "BAD" => Err(VarError::NotUnicode(OsString::from("x"))),
        _ => Err(VarError::NotPresent),
    };
    let run = |s: &str| interpolate(s, &env);
    assert_eq!(run("plain"), Ok(None));
    assert_eq!(run("$${A}"), Ok(Some("${A}".into())));
    assert_eq!(run("$${A} ${A}"), Ok(Some("${A} x".into())));
    assert_eq!(run("a$b$"), Ok(Some("a$b$".into())));
    assert_eq!(run("$$"), Ok(Some("$$".into())));
    assert_eq!(run("${A}${A}"), Ok(Some("xx".into())));
    assert_eq!(
        run("${RAW}"),
        Ok(Some("${A}".into())),
        "values are not re-interpolated"
    );
    assert_eq!(run("${A"), Err(InterpolateError::Unterminated));
    assert_eq!(
        run("${}"),
        Err(InterpolateError::InvalidName {
            name: String::new()
        })
    );
    assert_eq!(
        run("${1A}"),
        Err(InterpolateError::InvalidName { name: "1A".into() })
    );
    assert_eq!(
        run("${A:-default}"),
        Err(InterpolateError::InvalidName {
            name: "A:-default".into()
        })
    );
    assert_eq!(
        run("${NOPE}"),
        Err(InterpolateError::Unset { var: "NOPE".into() })
    );
    assert_eq!(
        run("${BAD}"),
        Err(InterpolateError::NotUnicode { var: "BAD".into() })
    );
}

#[test]
fn escaped_dollar_brace_reaches_the_config_literally() {
    let text = MINIMAL.replace(
        "database = \"app\"",
        "database = \"app\"\npassword = \"p$${x}\"",
    );
    let config = load(&text).unwrap();
    assert_eq!(
        config.postgres.password.as_ref().unwrap().expose_secret(),
        "p${x}"
    );
}

#[test]
fn password_errors_do_not_repeat_the_password() {
    // A literal password with a malformed reference: the message must not quote it.
    let text = MINIMAL.replace(
        "database = \"app\"",
        "database = \"app\"\npassword = \"hunter2${bad name}\"",
    );
    let error = load_err(&text);
    assert!(error.contains("postgres.password"), "{error}");
    assert!(
        !error.contains("hunter2") && !error.contains("bad name"),
        "{error}"
    );
    // A password of the wrong type: the value is not echoed either.
    let text = MINIMAL.replace(
        "database = \"app\"",
        "database = \"app\"\npassword = 987654321",
    );
    let error = load_err(&text);
    assert!(error.contains("postgres.password"), "{error}");
    assert!(!error.contains("987654321"), "{error}");
    // Other problems in a file with a password never print it.
    let text = MINIMAL.replace(
        "database = \"app\"",
        "database = \"app\"\npassword = \"${WALRELAY_PG_PASSWORD}\"\nslot = \"Bad\"",
    );
    let error = load_err(&text);
    assert!(!error.contains(PASSWORD), "{error}");
}

#[test]
fn debug_redacts_password_and_secret_librdkafka_properties() {
    let text = std::fs::read_to_string(config_dir().join("example.toml")).unwrap();
    let config = Config::from_str_with_env(&text, "example.toml", &fake_env).unwrap();
    for debug in [format!("{config:?}"), format!("{config:#?}")] {
        assert!(!debug.contains(PASSWORD), "{debug}");
        assert!(!debug.contains(KAFKA_PASSWORD), "{debug}");
        assert!(debug.contains("REDACTED"), "{debug}");
        assert!(
            debug.contains("walrelay-orders"),
            "non-secret values still print"
        );
    }
    assert!(!format!("{:?}", config.postgres).contains(PASSWORD));
    assert!(!format!("{:?}", config.kafka).contains(KAFKA_PASSWORD));
}

#[test]
fn secret_property_names() {
    for key in [
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.key.pem",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
    ] {
        assert!(is_secret_property(key), "{key}");
    }
    for key in [
        "sasl.username",
        "client.id",
        "ssl.ca.location",
        "batch.num.messages",
    ] {
        assert!(!is_secret_property(key), "{key}");
    }
}

/// Runs itself in a child process with the password in the real process
/// environment (setting variables in this process would need `unsafe`).
#[test]
fn debug_hides_a_password_taken_from_the_process_environment() {
    const CHILD: &str = "WALRELAY_CONFIG_TEST_CHILD";
    const VAR: &str = "WALRELAY_CONFIG_TEST_PG_PASSWORD";
    const SECRET: &str = "from-the-environment-9f3K";
    if std::env::var_os(CHILD).is_none() {
        let test = concat!(
            module_path!(),
            "::debug_hides_a_password_taken_from_the_process_environment"
        );
        let test = test.split_once("::").unwrap().1;
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env(VAR, SECRET)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        return;
    }
    let text = MINIMAL.replace(
        "database = \"app\"",
        &format!("database = \"app\"\npassword = \"${{{VAR}}}\""),
    );
    let config = Config::from_str(&text, "env.toml").unwrap();
    assert_eq!(
        config.postgres.password.as_ref().unwrap().expose_secret(),
        SECRET
    );
    let debug = format!("{config:?} {config:#?}");
    assert!(!debug.contains(SECRET), "{debug}");
    let bad = text.replace("name = \"orders\"", "name = \"no spaces allowed\"");
    let error = Config::from_str(&bad, "env.toml").unwrap_err();
    assert!(!error.to_string().contains(SECRET));
    assert!(!format!("{error:?}").contains(SECRET));
}

#[test]
fn unknown_keys_and_type_errors_report_file_line_and_column() {
    let text = minimal_with("tombstone_on_empty_payloads = true");
    let error = load_err(&text);
    let line = text.lines().count();
    assert!(
        error.starts_with(&format!(
            "test.toml:{line}:1: outbox[0].tombstone_on_empty_payloads: unknown field"
        )),
        "{error}"
    );
    let text = minimal_with("tombstone_on_empty_payload = \"yes\"");
    let error = load_err(&text);
    assert!(
        error.starts_with(&format!(
            "test.toml:{line}:30: outbox[0].tombstone_on_empty_payload: invalid type"
        )),
        "{error}"
    );
    let error = load_err(&MINIMAL.replace("[postgres]", "[postgres]\nport = 70000"));
    assert!(
        error.starts_with("test.toml:5:8: postgres.port: invalid value: integer `70000`, expected a port number from 1 to 65535"),
        "{error}"
    );
    let error = load_err(&MINIMAL.replace("[[outbox]]", "[unknown]\n[[outbox]]"));
    assert!(error.contains("unknown field `unknown`"), "{error}");
}

#[test]
fn missing_required_sections_and_keys_are_named() {
    let error = load_err(&MINIMAL.replace("brokers = \"127.0.0.1:9092\"", ""));
    assert!(
        error.contains("kafka.brokers: this required key is missing"),
        "{error}"
    );
    let error = load_err(&MINIMAL.replace("table = \"public.outbox\"", ""));
    assert!(
        error.contains("outbox[0].table: this required key is missing"),
        "{error}"
    );
    // A missing section belongs to the document, not to the first table in it.
    for text in ["[connector]\nname = \"x\"\n", "connector.name = \"x\"\n"] {
        let error = load_err(text);
        assert!(
            error.starts_with("test.toml:1:1: postgres: this required key is missing"),
            "{error}"
        );
    }
    let error = load_err("[connector]\nname = \"x\"\n[postgres]\ndatabase = \"d\"\n");
    assert!(
        error.contains(": kafka: this required key is missing"),
        "{error}"
    );
    // `[kafka.librdkafka]` alone defines `kafka` implicitly; `brokers` is what is missing.
    let error = load_err(
        "[connector]\nname = \"x\"\n[postgres]\ndatabase = \"d\"\n[kafka.librdkafka]\na = 1\n",
    );
    assert!(
        error.contains(": kafka.brokers: this required key is missing"),
        "{error}"
    );
}

#[test]
fn validation_errors_point_at_the_key_and_list_every_problem() {
    let text = MINIMAL
        .replace("[postgres]", "[postgres]\nslot = \"A\"")
        .replace("brokers = \"127.0.0.1:9092\"", "brokers = \"\"");
    let error = load(&text).unwrap_err();
    let problems = error.problems();
    assert_eq!(problems.len(), 2, "{error}");
    assert_eq!(problems[0].key.as_deref(), Some("postgres.slot"));
    assert_eq!(problems[0].location, Some(Location { line: 5, column: 8 }));
    assert_eq!(problems[1].key.as_deref(), Some("kafka.brokers"));
    assert_eq!(
        problems[1].location,
        Some(Location {
            line: 8,
            column: 11
        })
    );
    let text = error.to_string();
    assert!(
        text.starts_with("test.toml: 2 configuration problems:\n  test.toml:5:8: postgres.slot:"),
        "{text}"
    );
}

#[test]
fn validate_after_changing_fields_uses_the_nearest_known_location() {
    let mut config = load(MINIMAL).unwrap();
    config.outbox[0].header_columns = vec!["type".into(), "type".into()];
    let error = config.validate().unwrap_err();
    let problem = &error.problems()[0];
    assert_eq!(problem.key.as_deref(), Some("outbox[0].header_columns[1]"));
    assert!(problem.message.contains("listed twice"));
    // header_columns is not in the file: the location is that of outbox[0].
    assert_eq!(problem.location.map(|l| l.line), Some(8));
}

#[test]
fn topic_template_columns_are_checked_against_the_configured_ones() {
    let ok = minimal_with(
        "topic = \"{aggregatetype}.{type}.{tenant}.{id}.{aggregateid}\"\nheader_columns = [\"type\", \"tenant\"]",
    );
    load(&ok).unwrap();
    let error = load_err(&minimal_with("topic = \"events.{payload}\""));
    assert!(
        error.contains(
            "outbox[0].topic: template references {payload}, which is not a configured column; \
             use one of {id}, {aggregatetype}, {aggregateid}, {type} or add the column to header_columns (or envelope_columns)"
        ),
        "{error}"
    );
    let renamed = minimal_with("aggregate_type_column = \"kind\"\ntopic = \"ev.{kind}\"");
    load(&renamed).unwrap();
    let error = load_err(&minimal_with("aggregate_type_column = \"kind\""));
    assert!(
        error.contains("{aggregatetype}, which is not a configured column"),
        "{error}"
    );
}

#[test]
fn fixed_topic_must_be_a_valid_topic_name() {
    load(&minimal_with("topic = \"events\"")).unwrap();
    let error = load_err(&minimal_with(&format!("topic = \"{}\"", "a".repeat(250))));
    assert!(error.contains("at most 249"), "{error}");
    let error = load_err(&minimal_with("topic = \"..\""));
    assert!(error.contains("outbox[0].topic"), "{error}");
}

#[test]
fn topic_template_parsing() {
    let t = TopicTemplate::parse("outbox.{aggregatetype}-{type}").unwrap();
    assert_eq!(
        t.segments(),
        [
            Segment::Literal("outbox.".into()),
            Segment::Column("aggregatetype".into()),
            Segment::Literal("-".into()),
            Segment::Column("type".into()),
        ]
    );
    assert_eq!(t.to_string(), "outbox.{aggregatetype}-{type}");
    let values = HashMap::from([("aggregatetype", "Order"), ("type", "Created")]);
    assert_eq!(
        t.render(|c| values.get(c).copied()),
        Ok("outbox.Order-Created".to_owned())
    );
    assert_eq!(t.render(|_| None::<&str>), Err("aggregatetype"));
    for (bad, why) in [
        ("", "empty"),
        ("a{b", "never closed"),
        ("a}b", "no matching"),
        ("{a{b}}", "cannot nest"),
        ("a.{}", "empty placeholder"),
        ("a b", "not allowed"),
        ("a/{b}", "not allowed"),
    ] {
        let e = TopicTemplate::parse(bad).unwrap_err();
        assert!(e.contains(why), "{bad:?}: {e}");
    }
    assert_eq!(
        TopicTemplate::default_template(),
        TopicTemplate::parse(TopicTemplate::DEFAULT).unwrap()
    );
}

#[test]
fn table_names() {
    assert_eq!(
        TableRef::parse("outbox").unwrap(),
        TableRef {
            schema: "public".into(),
            name: "outbox".into()
        }
    );
    assert_eq!(
        TableRef::parse("App.Outbox").unwrap().to_string(),
        "App.Outbox"
    );
    for bad in [
        "",
        ".x",
        "x.",
        "a.b.c",
        "public.\"Outbox\"",
        &"x".repeat(64),
    ] {
        assert!(TableRef::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn duplicate_tables_are_found_after_schema_defaulting() {
    let error = load_err(&minimal_with("[[outbox]]\ntable = \"outbox\""));
    assert!(
        error.contains("outbox[1].table: table public.outbox is already configured in outbox[0]"),
        "{error}"
    );
    load(&minimal_with("[[outbox]]\ntable = \"other.outbox\"")).unwrap();
}

#[test]
fn byte_sizes() {
    for (text, bytes) in [
        ("0", 0),
        ("4096", 4096),
        ("64MiB", 64 << 20),
        ("64 MiB", 64 << 20),
        ("64mib", 64 << 20),
        ("1KiB", 1024),
        ("1kB", 1000),
        ("2MB", 2_000_000),
        ("3GiB", 3 << 30),
        ("1TiB", 1 << 40),
        ("10B", 10),
    ] {
        assert_eq!(parse_byte_size(text), Ok(bytes), "{text}");
    }
    for bad in [
        "",
        "MiB",
        "1.5MiB",
        "-1",
        "64 MeB",
        "99999999999999999999",
        "20000000TiB",
    ] {
        assert!(parse_byte_size(bad).is_err(), "{bad:?}");
    }
    let config =
        load(&MINIMAL.replace("[kafka]", "[kafka]\nmax_in_flight_bytes = 1048576")).unwrap();
    assert_eq!(config.kafka.max_in_flight_bytes, 1 << 20);
    let error = load_err(&MINIMAL.replace("[kafka]", "[kafka]\nmax_in_flight_bytes = -1"));
    assert!(
        error.contains("kafka.max_in_flight_bytes: a size cannot be negative"),
        "{error}"
    );
}

#[test]
fn durations_parse_with_units_and_name_the_key_when_they_do_not() {
    let config = load(&MINIMAL.replace(
        "[postgres]",
        "[postgres]\nconnect_timeout = \"1m 30s\"\nstatus_interval = \"250ms\"",
    ))
    .unwrap();
    assert_eq!(config.postgres.connect_timeout, Duration::from_secs(90));
    assert_eq!(config.postgres.status_interval, Duration::from_millis(250));
    let error = load_err(&MINIMAL.replace("[kafka]", "[kafka]\nlinger = \"5 parsecs\""));
    assert!(
        error.contains("kafka.linger: invalid duration \"5 parsecs\""),
        "{error}"
    );
    let error = load_err(&MINIMAL.replace("[kafka]", "[kafka]\nlinger = \"20m\""));
    assert!(
        error.contains("kafka.linger: must be at most 1m (got 20m)"),
        "{error}"
    );
    let error = load_err(&MINIMAL.replace("[postgres]", "[postgres]\nstatus_interval = \"0s\""));
    assert!(
        error.contains("postgres.status_interval: must be longer than 0"),
        "{error}"
    );
}

#[test]
fn names_are_checked() {
    for (replace, with, key) in [
        ("name = \"orders\"", "name = \"\"", "connector.name"),
        (
            "name = \"orders\"",
            &format!("name = \"{}\"", "n".repeat(65)),
            "connector.name",
        ),
        (
            "[postgres]",
            "[postgres]\nslot = \"UPPER\"",
            "postgres.slot",
        ),
        (
            "[postgres]",
            &format!("[postgres]\nslot = \"{}\"", "s".repeat(64)),
            "postgres.slot",
        ),
        ("[postgres]", "[postgres]\nhost = \"\"", "postgres.host"),
        ("[postgres]", "[postgres]\nhost = \"a b\"", "postgres.host"),
        ("[postgres]", "[postgres]\nport = 0", "postgres.port"),
        (
            "[postgres]",
            "[postgres]\npublication = \"\"",
            "postgres.publication",
        ),
        (
            "[postgres]",
            &format!("[postgres]\nuser = \"{}\"", "u".repeat(64)),
            "postgres.user",
        ),
        (
            "[kafka]",
            "[kafka]\noffsets_topic = \"offsets store\"",
            "kafka.offsets_topic",
        ),
        (
            "table = \"public.outbox\"",
            "table = \"public.outbox\"\nid_column = \"\"",
            "outbox[0].id_column",
        ),
        (
            "table = \"public.outbox\"",
            "table = \"public.outbox\"\nheader_columns = [\"\"]",
            "outbox[0].header_columns[0]",
        ),
    ] {
        let error = load_err(&MINIMAL.replace(replace, with));
        assert!(error.contains(&format!(": {key}: ")), "{key}: {error}");
    }
    let config =
        load(&MINIMAL.replace("[postgres]", "[postgres]\nhost = \"/var/run/postgresql\"")).unwrap();
    assert_eq!(config.postgres.host, "/var/run/postgresql");
}

#[test]
fn from_file_reads_and_names_the_file() {
    let path = config_dir().join("invalid").join("bad_slot.toml");
    let error = Config::from_file(&path).unwrap_err();
    assert!(
        error.to_string().starts_with(&path.display().to_string()),
        "{error}"
    );
    let missing = config_dir().join("does-not-exist.toml");
    let error = Config::from_file(&missing).unwrap_err();
    assert!(matches!(error, ConfigError::Read { .. }));
    assert!(
        error
            .to_string()
            .contains("does-not-exist.toml: cannot read"),
        "{error}"
    );
}

#[test]
fn from_file_loads_a_config_without_variables() {
    let dir = std::env::temp_dir().join(format!("walrelay-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("plain.toml");
    std::fs::write(&path, MINIMAL).unwrap();
    let config = Config::from_file(&path).unwrap();
    assert_eq!(config.origin(), path.display().to_string());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn locations_count_characters_not_bytes() {
    let text = "ä = 1\nkey = \"é\"x";
    assert_eq!(Location::at(text, 0), Location { line: 1, column: 1 });
    assert_eq!(
        Location::at(text, "ä = ".len()),
        Location { line: 1, column: 5 }
    );
    let offset = text.find('x').unwrap();
    assert_eq!(
        Location::at(text, offset),
        Location {
            line: 2,
            column: 10
        }
    );
    assert_eq!(
        Location::at(text, 10_000).line,
        2,
        "past the end is clamped"
    );
}

/// A file with `n` extra librdkafka keys, the last of which is refused.
fn many_keys(n: usize) -> String {
    use std::fmt::Write;
    let mut text = minimal_with("[kafka.librdkafka]");
    for i in 0..n {
        writeln!(text, "\"x.prop{i}\" = \"{i}\"").unwrap();
    }
    text.push_str("acks = \"1\"\n");
    text
}

/// Loading locates every key of the file. That used to rescan the file from
/// its start for each key: quadratic, 16.6 s for 40,000 keys in a release
/// build, and a test build did not finish this test in 10 minutes (with
/// 100,000 keys). Now the file is indexed once. The refused key at the end
/// must still be placed exactly.
#[test]
fn a_file_with_many_keys_loads_and_places_its_last_key() {
    let n = 40_000;
    let text = many_keys(n);
    let error = load(&text).unwrap_err();
    let problem = &error.problems()[0];
    assert_eq!(problem.key.as_deref(), Some("kafka.librdkafka.acks"));
    assert_eq!(
        problem.location,
        Some(Location {
            line: text.lines().count(),
            column: 8
        })
    );
}

#[test]
fn syntax_errors_have_a_location_but_no_key() {
    let error =
        load(&MINIMAL.replace("brokers = \"127.0.0.1:9092\"", "brokers = \"x")).unwrap_err();
    let problem = &error.problems()[0];
    assert_eq!(problem.key, None);
    assert_eq!(problem.location.map(|l| l.line), Some(7));
}

proptest! {
    #[test]
    fn strings_without_dollar_are_left_alone(s in "[^$]*") {
        prop_assert_eq!(interpolate(&s, &fake_env), Ok(None));
    }

    #[test]
    fn escaped_references_come_out_literally(a in "[^$]*", name in "[A-Za-z_][A-Za-z0-9_]{0,10}", b in "[^$]*") {
        let input = format!("{a}$${{{name}}}{b}");
        prop_assert_eq!(interpolate(&input, &fake_env), Ok(Some(format!("{a}${{{name}}}{b}"))));
    }

    #[test]
    fn byte_sizes_multiply_out_or_fail(n in any::<u64>(), unit in prop::sample::select(vec![
        ("", 1u64), ("B", 1), ("KiB", 1 << 10), ("kB", 1000), ("MiB", 1 << 20),
        ("MB", 1_000_000), ("GiB", 1 << 30), ("GB", 1_000_000_000), ("TiB", 1 << 40),
    ])) {
        let (suffix, multiplier) = unit;
        let parsed = parse_byte_size(&format!("{n}{suffix}"));
        match n.checked_mul(multiplier) {
            Some(bytes) => prop_assert_eq!(parsed, Ok(bytes)),
            None => prop_assert!(parsed.is_err()),
        }
    }

    #[test]
    fn templates_round_trip_their_segments(parts in prop::collection::vec(
        prop_oneof!["[A-Za-z0-9._-]{1,8}".prop_map(Segment::Literal), "[a-z_]{1,8}".prop_map(Segment::Column)],
        1..6,
    )) {
        // Adjacent literals merge when parsed; compare rendered text instead.
        let text: String = parts.iter().map(|p| match p {
            Segment::Literal(l) => l.clone(),
            Segment::Column(c) => format!("{{{c}}}"),
        }).collect();
        let template = TopicTemplate::parse(&text).unwrap();
        let columns: Vec<_> = parts.iter().filter_map(|p| match p {
            Segment::Column(c) => Some(c.as_str()),
            Segment::Literal(_) => None,
        }).collect();
        prop_assert_eq!(template.columns().collect::<Vec<_>>(), columns);
        let rendered = template.render(|c| Some(c.to_owned())).unwrap();
        prop_assert_eq!(rendered, text.replace(['{', '}'], ""));
    }

    #[test]
    fn loading_never_panics(text in "[\\[\\]a-z_.=\" \n0-9${}]{0,200}") {
        let _ = Config::from_str_with_env(&text, "fuzz.toml", &fake_env);
    }
}

fn with_postgres(keys: &str) -> String {
    MINIMAL.replace("database = \"app\"", &format!("database = \"app\"\n{keys}"))
}

#[test]
fn sslmode_takes_libpq_names_and_defaults_to_prefer() {
    assert_eq!(load(MINIMAL).unwrap().postgres.sslmode, SslMode::Prefer);
    let ca = existing_file();
    for (name, mode) in [
        ("disable", SslMode::Disable),
        ("prefer", SslMode::Prefer),
        ("require", SslMode::Require),
        ("verify-ca", SslMode::VerifyCa),
        ("verify-full", SslMode::VerifyFull),
    ] {
        // verify-ca needs its CA (sslmode_verify_ca_needs_sslrootcert).
        let root = if mode == SslMode::VerifyCa {
            format!("\nsslrootcert = \"{ca}\"")
        } else {
            String::new()
        };
        let config = load(&with_postgres(&format!("sslmode = \"{name}\"{root}"))).unwrap();
        assert_eq!(config.postgres.sslmode, mode, "{name}");
        assert_eq!(mode.as_str(), name);
    }
    let error = load_err(&with_postgres("sslmode = \"verify_full\""));
    assert!(error.contains("postgres.sslmode"), "{error}");
    assert!(
        error.contains("verify-full"),
        "lists the accepted values: {error}"
    );
}

/// A connection string or user info in a host is refused without the
/// value: it may hold a password, which would then reach logs, `check`,
/// `/healthz` and `status`.
#[test]
fn hosts_with_credentials_are_refused_without_repeating_them() {
    for host in [
        "postgres://walrelay:S3cretPW@db/shop",
        "postgresql://db",
        "walrelay:S3cretPW@db",
    ] {
        let error = load_err(&MINIMAL.replace(
            "database = \"app\"",
            &format!("database = \"app\"\nhost = \"{host}\""),
        ));
        assert!(
            error.contains("postgres.host: looks like a connection string"),
            "{error}"
        );
        assert!(
            !error.contains("S3cretPW") && !error.contains(host),
            "{error}"
        );
    }
    for brokers in ["user:S3cretPW@kafka:9092", "k1:9092,user:S3cretPW@k2:9092"] {
        let error = load_err(&MINIMAL.replace(
            "brokers = \"127.0.0.1:9092\"",
            &format!("brokers = \"{brokers}\""),
        ));
        assert!(
            error.contains("kafka.brokers: an entry holds user info"),
            "{error}"
        );
        assert!(!error.contains("S3cretPW"), "{error}");
        assert!(!error.contains("IPv6"), "no wrong diagnosis: {error}");
    }
}

/// libpq refuses verify-ca without a root certificate: against the system
/// store and without host-name checks, any publicly issued certificate for
/// any host passes. So does walrelay, naming both ways out.
#[test]
fn sslmode_verify_ca_needs_sslrootcert() {
    let error = load_err(&with_postgres("sslmode = \"verify-ca\""));
    assert!(
        error.contains("postgres.sslmode: \"verify-ca\" needs postgres.sslrootcert"),
        "{error}"
    );
    assert!(error.contains("verify-full"), "{error}");
    // verify-full with the system store checks the host name: accepted.
    load(&with_postgres("sslmode = \"verify-full\"")).unwrap();
}

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

#[test]
fn sslrootcert_needs_a_verifying_mode_and_an_existing_file() {
    let error = load_err(&with_postgres(
        "sslmode = \"require\"\nsslrootcert = \"/etc/hostname\"",
    ));
    assert!(error.contains("postgres.sslrootcert"), "{error}");
    assert!(error.contains("verify-full"), "says the fix: {error}");
    let error = load_err(&with_postgres(
        "sslmode = \"verify-full\"\nsslrootcert = \"/nonexistent/ca.pem\"",
    ));
    assert!(error.contains("/nonexistent/ca.pem"), "{error}");
    let dir = std::env::temp_dir().join(format!("walrelay-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, "PEM").unwrap();
    let config = load(&with_postgres(&format!(
        "sslmode = \"verify-ca\"\nsslrootcert = \"{}\"",
        ca.display()
    )))
    .unwrap();
    assert_eq!(config.postgres.sslrootcert.as_deref(), Some(ca.as_path()));
}

fn with_kafka(keys: &str) -> String {
    MINIMAL.replace("[kafka]", &format!("[kafka]\n{keys}"))
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
    let properties = crate::relay::producer_properties(&config);
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
    let at_least_once = crate::relay::producer_properties(&load(MINIMAL).unwrap());
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

#[test]
fn outbox_written_with_single_brackets_gets_a_hint() {
    let error = load_err(&MINIMAL.replace("[[outbox]]", "[outbox]"));
    assert!(error.contains("outbox: invalid type: map"), "{error}");
    assert!(error.contains("[[outbox]]"), "{error}");
    assert!(error.contains("one [[outbox]] per table"), "{error}");
}

/// A huge value is repeated in an error only as a short prefix with its size.
#[test]
fn errors_cut_long_values_by_characters() {
    let huge = "é".repeat(500_000); // 1 MB
    let size = format!("({} bytes)", huge.len());
    let cases = [
        // Our own validation messages.
        MINIMAL.replace("name = \"orders\"", &format!("name = \"{huge}\"")),
        with_postgres(&format!("slot = \"{huge}\"")),
        MINIMAL.replace("127.0.0.1:9092", &format!("{huge}:1")),
        // Messages of the parser and of serde.
        with_kafka(&format!("compression = \"{huge}\"")),
        with_kafka(&format!("linger = \"{huge}\"")),
        with_postgres(&format!("port = \"{huge}\"")),
        MINIMAL.replace(
            "[postgres]",
            &format!("[postgres]\n{} = 1", "k".repeat(1_000_000)),
        ),
    ];
    for (i, text) in cases.iter().enumerate() {
        // Not `load_err`: a failure must not print the 10 MB config.
        let Err(error) = load(text) else {
            panic!("case {i} loaded")
        };
        let error = error.to_string();
        let head: String = error.chars().take(300).collect();
        assert!(
            error.len() < 2_000,
            "case {i}: {} bytes: {head}",
            error.len()
        );
        assert!(
            error.contains('…') && error.contains(&size),
            "case {i}: {error}"
        );
    }
    assert_eq!(shorten("abc", 2), "ab… (3 bytes)");
    assert_eq!(shorten("äbc", 2), "äb… (4 bytes)");
    assert_eq!(shorten("abc", 3), "abc");
    assert_eq!(quoted("a\"b"), "\"a\\\"b\"");
}

/// Many problems are counted, not all listed.
#[test]
fn a_long_list_of_problems_is_cut() {
    let mut text = minimal_with("[kafka.librdkafka]");
    for i in 0..1000 {
        text.push_str(&format!("\"Bad{i}\" = 1\n"));
    }
    let error = load_err(&text);
    assert!(error.contains("1000 configuration problems"), "{error}");
    assert!(error.contains("… and 950 more"), "{error}");
    assert_eq!(error.lines().count(), 52, "{error}");
}

#[test]
fn a_file_larger_than_any_configuration_is_not_read() {
    let dir = std::env::temp_dir().join(format!("walrelay-config-huge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("huge.toml");
    let mut text = MINIMAL.to_owned();
    text.push_str(&"#".repeat(MAX_FILE_BYTES as usize));
    std::fs::write(&path, text).unwrap();
    let error = Config::from_file(&path).unwrap_err();
    assert!(matches!(error, ConfigError::TooLarge { .. }), "{error}");
    assert!(error.to_string().contains("larger than 16 MiB"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The loader's line index places every offset as a scan from the start
/// of the text would.
fn location_by_scanning(text: &str, offset: usize) -> Location {
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    Location {
        line: before.matches('\n').count() + 1,
        column: before[line_start..].chars().count() + 1,
    }
}

proptest! {
    #[test]
    fn line_index_agrees_with_a_scan(
        lines in prop::collection::vec("[a-zé€😀 =\"]{0,40}", 0..30),
        long_line in 0usize..12_000,
        picks in prop::collection::vec(any::<prop::sample::Index>(), 1..20),
    ) {
        let mut text = lines.join("\n");
        // One line longer than the index's block of 4096 bytes.
        text.push('\n');
        text.push_str(&"é".repeat(long_line));
        text.push_str("\nend");
        let boundaries: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
        let index = super::error::LineIndex::new(&text);
        for pick in picks {
            let offset = boundaries[pick.index(boundaries.len())];
            prop_assert_eq!(index.location(offset), location_by_scanning(&text, offset));
        }
    }
}

/// A fresh directory for secret files of test `name`.
fn secret_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("walrelay-secrets-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn with_password(value: &str) -> String {
    MINIMAL.replace(
        "database = \"app\"",
        &format!("database = \"app\"\npassword = \"{value}\""),
    )
}

#[test]
fn file_secrets_fill_the_password_and_secret_librdkafka_properties() {
    let dir = secret_dir("fill");
    let write = |name: &str, content: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        path.display().to_string()
    };
    let password = |text: &str| {
        load(&with_password(text))
            .unwrap()
            .postgres
            .password
            .unwrap()
            .expose_secret()
            .to_owned()
    };
    // One trailing line ending is removed, nothing else.
    let lf = write("lf", b"pg-file-s3cret\n");
    assert_eq!(password(&format!("${{file:{lf}}}")), "pg-file-s3cret");
    let crlf = write("crlf", b"pg-file-s3cret\r\n");
    assert_eq!(password(&format!("${{file:{crlf}}}")), "pg-file-s3cret");
    let bare = write("bare", b" pg-file-s3cret ");
    assert_eq!(password(&format!("${{file:{bare}}}")), " pg-file-s3cret ");
    let two = write("two", b"pg-file-s3cret\n\n");
    assert_eq!(password(&format!("${{file:{two}}}")), "pg-file-s3cret\n");
    // Mixed with text and variables; the content is never interpolated again.
    let dollar = write("dollar", b"a${WALRELAY_PG_PASSWORD}b\n");
    assert_eq!(
        password(&format!("x${{file:{dollar}}}-${{WALRELAY_PG_PASSWORD}}")),
        format!("xa${{WALRELAY_PG_PASSWORD}}b-{PASSWORD}")
    );
    let kafka = write("kafka", KAFKA_PASSWORD.as_bytes());
    let config = load(&minimal_with(&format!(
        "[kafka.librdkafka]\n\"sasl.password\" = \"${{file:{kafka}}}\""
    )))
    .unwrap();
    assert_eq!(config.kafka.librdkafka["sasl.password"], KAFKA_PASSWORD);
    // Never printed.
    let config = load(&with_password(&format!("${{file:{lf}}}"))).unwrap();
    let debug = format!("{config:?}");
    assert!(!debug.contains("pg-file-s3cret"), "{debug}");
    let config = load(&minimal_with(&format!(
        "[kafka.librdkafka]\n\"sasl.password\" = \"${{file:{kafka}}}\""
    )))
    .unwrap();
    let debug = format!("{config:#?}");
    assert!(!debug.contains(KAFKA_PASSWORD), "{debug}");
}

#[test]
fn file_secrets_are_refused_where_no_secret_goes() {
    let dir = secret_dir("refused");
    let path = dir.join("user");
    std::fs::write(&path, "file-user-name\n").unwrap();
    let reference = format!("${{file:{}}}", path.display());
    for (text, key) in [
        (
            MINIMAL.replace(
                "database = \"app\"",
                &format!("database = \"app\"\nuser = \"{reference}\""),
            ),
            "postgres.user",
        ),
        (
            MINIMAL.replace("database = \"app\"", &format!("database = \"{reference}\"")),
            "postgres.database",
        ),
        (
            MINIMAL.replace("127.0.0.1:9092", &reference),
            "kafka.brokers",
        ),
        (
            minimal_with(&format!(
                "[kafka.librdkafka]\n\"client.id\" = \"{reference}\""
            )),
            "kafka.librdkafka.\"client.id\"",
        ),
    ] {
        let error = load_err(&text);
        assert!(
            error.contains(&format!(
                "{key}: \"${{file:...}}\" is allowed only in keys that hold secrets"
            )),
            "{error}"
        );
        assert!(!error.contains("file-user-name"), "{error}");
    }
}

#[test]
fn a_secret_file_that_cannot_be_used_is_named_with_its_key_never_its_content() {
    let dir = secret_dir("bad");
    let content = "pg-file-s3cret-never-shown";
    let missing = dir.join("missing");
    let empty = dir.join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let binary = dir.join("binary");
    std::fs::write(&binary, [content.as_bytes(), &[0xff, 0xfe]].concat()).unwrap();
    let huge = dir.join("huge");
    std::fs::write(&huge, content.repeat(3000)).unwrap();
    // A FIFO nobody writes to: opening it would wait forever.
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");
    let cases = [
        (missing.display().to_string(), "cannot read secret file"),
        (dir.display().to_string(), "not a regular file"),
        (fifo.display().to_string(), "not a regular file"),
        (empty.display().to_string(), "is empty"),
        (binary.display().to_string(), "is not valid UTF-8"),
        (huge.display().to_string(), "is larger than 65536 bytes"),
        (
            "run/secrets/pg_password".to_owned(),
            "is relative; write an absolute path",
        ),
    ];
    for (path, what) in cases {
        let error = load_err(&with_password(&format!("${{file:{path}}}")));
        assert!(
            error.starts_with("test.toml:6:12: postgres.password: "),
            "names the key and its line: {error}"
        );
        assert!(
            error.contains(&format!("{path:?}")),
            "names the path: {error}"
        );
        assert!(error.contains(what), "{error}");
        assert!(!error.contains(content), "{error}");
        let error = load_err(&minimal_with(&format!(
            "[kafka.librdkafka]\n\"ssl.key.password\" = \"${{file:{path}}}\""
        )));
        assert!(
            error.contains("kafka.librdkafka.\"ssl.key.password\": "),
            "{error}"
        );
        assert!(error.contains(what), "{error}");
    }
    let missing_error = load_err(&with_password(&format!("${{file:{}}}", missing.display())));
    assert!(
        missing_error.contains("No such file or directory"),
        "says why: {missing_error}"
    );
}

#[test]
fn client_certificate_keys_come_together_over_tls() {
    let dir = secret_dir("clientcert");
    let cert = dir.join("client.pem");
    let key = dir.join("client.key");
    std::fs::write(&cert, "PEM").unwrap();
    std::fs::write(&key, "PEM").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let password = dir.join("key_password");
    std::fs::write(&password, "key-s3cret-Vb2\n").unwrap();
    let (cert, key, password) = (cert.display(), key.display(), password.display());
    let config = load(&with_postgres(&format!(
        "sslmode = \"verify-full\"\nsslcert = \"{cert}\"\nsslkey = \"{key}\"\n\
         sslpassword = \"${{file:{password}}}\""
    )))
    .unwrap();
    assert_eq!(
        config
            .postgres
            .sslpassword
            .as_ref()
            .unwrap()
            .expose_secret(),
        "key-s3cret-Vb2"
    );
    let debug = format!("{config:?}");
    assert!(!debug.contains("key-s3cret-Vb2"), "{debug}");
    for (keys, key_path, fix) in [
        (
            format!("sslmode = \"require\"\nsslcert = \"{cert}\""),
            "postgres.sslkey",
            "is required with postgres.sslcert",
        ),
        (
            format!("sslmode = \"require\"\nsslkey = \"{key}\""),
            "postgres.sslcert",
            "is required with postgres.sslkey",
        ),
        (
            "sslpassword = \"x\"".to_owned(),
            "postgres.sslpassword",
            "no sslkey is set",
        ),
        (
            format!("sslmode = \"disable\"\nsslcert = \"{cert}\"\nsslkey = \"{key}\""),
            "postgres.sslcert",
            "only sent over TLS",
        ),
        (
            format!("sslcert = \"{cert}\"\nsslkey = \"/nonexistent/client.key\""),
            "postgres.sslkey",
            "cannot read /nonexistent/client.key",
        ),
        (
            format!("sslcert = \"{}\"\nsslkey = \"{key}\"", dir.display()),
            "postgres.sslcert",
            "is not a file",
        ),
    ] {
        let error = load_err(&with_postgres(&keys));
        assert!(error.contains(&format!("{key_path}: ")), "{error}");
        assert!(error.contains(fix), "{error}");
    }
}

/// A file that exists, for the TLS path keys (its content does not matter
/// to validation).
fn existing_file() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml").to_owned()
}

/// A file only its owner may read (what a private key must be).
fn private_file(name: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = secret_dir(name).join("client.key");
    std::fs::write(&path, "PEM").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.display().to_string()
}

/// Issue 24 (item 3): a `${file:...}` secret the group or others may read is
/// used, with a warning naming the key, the file and the chmod — never its
/// content; private key files are refused by the same rule. A file only its
/// owner reads gives no warning.
#[test]
fn a_secret_file_others_may_read_is_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let dir = secret_dir("loose");
    let file = dir.join("pg_password");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    let text = with_password(&format!("${{file:{}}}", file.display()));

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let config = load(&text).unwrap();
    assert_eq!(
        config.postgres.password.as_ref().unwrap().expose_secret(),
        PASSWORD
    );
    let warnings = config.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(&format!(
            "test.toml:6:12: postgres.password: secret file \"{}\" is readable by the group or \
             by others (mode 0644)",
            file.display()
        )),
        "{warnings:?}"
    );
    assert!(
        warnings[0].contains(&format!("run chmod 600 {}", file.display())),
        "{warnings:?}"
    );
    assert!(!warnings[0].contains(PASSWORD), "{warnings:?}");

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(load(&text).unwrap().warnings().is_empty());
    assert!(load(MINIMAL).unwrap().warnings().is_empty());
}

/// Issue 24: an empty `${file:...}` secret was refused but an empty
/// `${VAR}` one accepted (and a server that asks for no password then
/// hides the mistake until it does). Both are refused, naming the key and
/// the variable; an empty variable elsewhere is used as is.
#[test]
fn an_empty_variable_in_a_secret_key_is_refused() {
    let env = |name: &str| match name {
        "EMPTY" => Ok(String::new()),
        _ => fake_env(name),
    };
    let load_env = |text: &str| Config::from_str_with_env(text, "test.toml", &env);
    for (text, key) in [
        (with_password("${EMPTY}"), "postgres.password"),
        (with_password("x${EMPTY}"), "postgres.password"),
        (
            kafka_with(
                "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
                 sasl_username = \"u\"\nsasl_password = \"${EMPTY}\"",
            ),
            "kafka.sasl_password",
        ),
        (
            minimal_with("[kafka.librdkafka]\n\"sasl.password\" = \"${EMPTY}\""),
            "kafka.librdkafka.\"sasl.password\"",
        ),
    ] {
        let error = load_env(&text).unwrap_err().to_string();
        assert!(
            error.contains(&format!(
                "{key}: environment variable EMPTY is set but empty; a secret cannot be empty"
            )),
            "{error}"
        );
    }
    // Not a secret: as before, used as is (here: a client id).
    let config = load_env(&minimal_with(
        "[kafka.librdkafka]\n\"client.id\" = \"w${EMPTY}\"",
    ))
    .unwrap();
    assert_eq!(config.kafka.librdkafka["client.id"], "w");
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
        let props: HashMap<_, _> = config.kafka.producer_properties().into_iter().collect();
        assert_eq!(props["security.protocol"], protocol.as_str());
    }
    let error = load_err(&kafka_with("security_protocol = \"SASL-SSL\""));
    assert!(
        error.contains("kafka.security_protocol: unknown variant `SASL-SSL`, expected one of"),
        "{error}"
    );
    assert!(error.contains("`sasl_ssl`"), "{error}");
}

/// Issue 24: a key or section given twice was "TOML syntax error: duplicate
/// key" with a line only. The error names the key path, as every other
/// error does, and the line of the first one, never the value.
#[test]
fn a_duplicate_key_is_named_with_both_lines() {
    for (text, expected) in [
        (
            MINIMAL.replace(
                "database = \"app\"",
                "database = \"app\"\nport = 1\nport = 2",
            ),
            "test.toml:7:1: postgres.port: is set twice (first on line 6); keep one of the two",
        ),
        (
            MINIMAL.replace(
                "database = \"app\"",
                "database = \"app\"\npassword = \"s3cret-1\"\n  password   = \"s3cret-2\"",
            ),
            "test.toml:7:3: postgres.password: is set twice (first on line 6)",
        ),
        (
            minimal_with("[postgres]\nport = 1"),
            "test.toml:10:2: postgres: [postgres] appears twice (first on line 4); write its keys \
             in one section",
        ),
        (
            minimal_with("[kafka.librdkafka]\n\"linger.ms\" = 1\n# a comment\n\"linger.ms\" = 2"),
            "test.toml:13:1: kafka.librdkafka.\"linger.ms\": is set twice (first on line 11)",
        ),
        (
            minimal_with("[[outbox]]\ntable = \"a\"\ntable = \"b\""),
            "test.toml:12:1: outbox[1].table: is set twice (first on line 11)",
        ),
        (
            format!(
                "{TABLES_ONLY}[[table]]\nname = \"t\"\n[[table.column_mask]]\ncolumns = [\"a\"]\n\
                 with_chars = 1\n[[table]]\nname = \"u\"\n[[table.column_mask]]\n\
                 with_chars = 1\n[[table.column_mask]]\ncolumns = [\"b\"]\ncolumns = [\"c\"]\n"
            ),
            "table[1].column_mask[1].columns: is set twice",
        ),
        (
            minimal_with("[kafka.librdkafka]\n\"a\" = 1\n[[kafka.librdkafka]]"),
            "kafka.librdkafka: [[kafka.librdkafka]] here and [kafka.librdkafka] on line 10 define \
             kafka.librdkafka twice",
        ),
    ] {
        let error = load_err(&text);
        assert!(error.contains(expected), "{expected:?} not in:\n{error}");
        assert!(!error.contains("s3cret"), "{error}");
    }
}

/// Issue 24: `${VAR}` in a file path was taken literally (a file named
/// `${CERTS}/ca.pem`), while the librdkafka properties the Kafka paths stand
/// for expand it. Paths expand it like the other per-environment keys, with
/// the same errors; `${file:...}` stays for secrets.
#[test]
fn file_paths_take_environment_variables() {
    use std::os::unix::fs::PermissionsExt;
    let dir = secret_dir("paths");
    for name in ["ca.pem", "client.pem", "client.key"] {
        std::fs::write(dir.join(name), "PEM").unwrap();
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let certs = dir.display().to_string();
    let env = |name: &str| match name {
        "CERTS" => Ok(certs.clone()),
        _ => Err(VarError::NotPresent),
    };
    let text = with_postgres(
        "sslmode = \"verify-full\"\nsslrootcert = \"${CERTS}/ca.pem\"\n\
         sslcert = \"${CERTS}/client.pem\"\nsslkey = \"${CERTS}/client.key\"",
    )
    .replace(
        "[kafka]",
        "[kafka]\nsecurity_protocol = \"ssl\"\nssl_ca = \"${CERTS}/ca.pem\"\n\
         ssl_certificate = \"${CERTS}/client.pem\"\nssl_key = \"${CERTS}/client.key\"",
    );
    let config = Config::from_str_with_env(&text, "test.toml", &env).unwrap();
    let path = |name: &str| Some(dir.join(name));
    assert_eq!(config.postgres.sslrootcert, path("ca.pem"));
    assert_eq!(config.postgres.sslcert, path("client.pem"));
    assert_eq!(config.postgres.sslkey, path("client.key"));
    assert_eq!(config.kafka.ssl_ca, path("ca.pem"));
    assert_eq!(config.kafka.ssl_certificate, path("client.pem"));
    assert_eq!(config.kafka.ssl_key, path("client.key"));

    let error = load_err(&text);
    for key in [
        "postgres.sslrootcert",
        "postgres.sslkey",
        "kafka.ssl_ca",
        "kafka.ssl_key",
    ] {
        assert!(
            error.contains(&format!("{key}: environment variable CERTS is not set")),
            "{error}"
        );
    }
    let error = load_err(&with_postgres(
        "sslmode = \"verify-full\"\nsslrootcert = \"${file:/run/secrets/ca}\"",
    ));
    assert!(
        error.contains(
            "postgres.sslrootcert: \"${file:...}\" is allowed only in keys that hold secrets"
        ),
        "{error}"
    );
}

/// A private key the group or others may read is refused, as libpq refuses
/// it, with the chmod to run; 0600 is accepted.
#[test]
fn private_keys_readable_by_others_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let key = private_file("loosekey");
    let cert = existing_file();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let error = load_err(&with_postgres(&format!(
        "sslmode = \"verify-full\"\nsslcert = \"{cert}\"\nsslkey = \"{key}\""
    )));
    assert!(error.contains("postgres.sslkey"), "{error}");
    assert!(
        error.contains("(mode 0644)") && error.contains(&format!("chmod 600 {key}")),
        "{error}"
    );
    let error = load_err(&kafka_with(&format!(
        "security_protocol = \"ssl\"\nssl_certificate = \"{cert}\"\nssl_key = \"{key}\""
    )));
    assert!(
        error.contains("kafka.ssl_key") && error.contains("chmod 600"),
        "{error}"
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    load(&with_postgres(&format!(
        "sslmode = \"verify-full\"\nsslcert = \"{cert}\"\nsslkey = \"{key}\""
    )))
    .unwrap();
}

/// `MINIMAL` with `[kafka]` keys inserted after `brokers`.
fn kafka_with(keys: &str) -> String {
    MINIMAL.replace(
        "brokers = \"127.0.0.1:9092\"\n",
        &format!("brokers = \"127.0.0.1:9092\"\n{keys}\n"),
    )
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
    let props: HashMap<_, _> = config.kafka.producer_properties().into_iter().collect();
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
    let props: HashMap<_, _> = config.kafka.producer_properties().into_iter().collect();
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
    let props = load(MINIMAL).unwrap().kafka.producer_properties();
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
    let props: HashMap<_, _> = config.kafka.producer_properties().into_iter().collect();
    assert_eq!(props["sasl.password"], "from-a-file-Zq9");
    let file = existing_file();
    let key = private_file("filekey");
    let config = load(&kafka_with(&format!(
        "security_protocol = \"ssl\"\nssl_certificate = \"{file}\"\nssl_key = \"{key}\"\n\
         ssl_key_password = \"${{file:{}}}\"",
        key_password.display()
    )))
    .unwrap();
    let props: HashMap<_, _> = config.kafka.producer_properties().into_iter().collect();
    assert_eq!(props["ssl.key.password"], "key-from-a-file");
    let error = load_err(&kafka_with(&format!(
        "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
         sasl_username = \"${{file:{}}}\"\nsasl_password = \"p\"",
        password.display()
    )));
    assert!(error.contains("kafka.sasl_username"), "{error}");
    assert!(!error.contains("from-a-file"), "{error}");
}

const TABLES_ONLY: &str = r#"
[connector]
name = "shop"
[postgres]
database = "app"
[kafka]
brokers = "127.0.0.1:9092"
"#;

#[test]
fn tables_alone_are_enough_and_take_debezium_defaults() {
    let config = load(&format!("{TABLES_ONLY}[[table]]\nname = \"customers\"\n")).unwrap();
    assert!(config.outbox.is_empty());
    let t = &config.tables[0];
    assert_eq!(t.name.to_string(), "public.customers");
    assert_eq!(t.topic.as_str(), "{prefix}.{schema}.{table}");
    assert!(t.key_columns.is_empty());
    let d = &config.table_defaults;
    assert!(d.tombstones_on_delete);
    assert_eq!(d.decimal_handling_mode, DecimalHandlingMode::Precise);
    assert_eq!(d.time_precision_mode, TimePrecisionMode::Adaptive);
    assert_eq!(d.binary_handling_mode, BinaryHandlingMode::Bytes);
    assert_eq!(
        d.unavailable_value_placeholder,
        "__debezium_unavailable_value"
    );
    assert_eq!(d.unmapped_types, UnmappedTypes::Fail);
    // Debezium's topic.prefix defaults to the connector name here.
    assert_eq!(config.topic_prefix(), "shop");
}

#[test]
fn nothing_to_capture_is_an_error_naming_both_sections() {
    let e = load_err(TABLES_ONLY);
    assert!(e.contains("[[outbox]]") && e.contains("[[table]]"), "{e}");
}

#[test]
fn table_patterns_match_table_names_in_their_schema_only() {
    assert!(glob_match("*", "orders"));
    assert!(glob_match("order_*", "order_items"));
    assert!(glob_match("*_log", "audit_log"));
    assert!(glob_match("a*b*c", "axxbyyc"));
    assert!(!glob_match("order_*", "orders"));
    assert!(!glob_match("a*b", "a"));
    assert!(glob_match("exact", "exact"));
    let config = load(&format!("{TABLES_ONLY}[[table]]\nname = \"sales.*\"\n")).unwrap();
    assert!(config.tables[0].is_pattern());
    assert!(config.tables[0].matches("sales", "orders"));
    assert!(!config.tables[0].matches("public", "orders"));
}

#[test]
fn a_table_cannot_be_both_outbox_and_table_and_the_error_names_both() {
    let e = load_err(&minimal_with("[[table]]\nname = \"public.outbox\"\n"));
    assert!(e.contains("table[0].name"), "{e}");
    assert!(e.contains("outbox[0]"), "{e}");
    assert!(e.contains("not both"), "{e}");
}

#[test]
fn table_entries_are_unique_and_patterns_only_in_the_table_part() {
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"a.b\"\n[[table]]\nname = \"a.b\"\n[[table]]\nname = \"s*.t\"\n"
    ));
    assert!(
        e.contains("table[1].name") && e.contains("already configured in table[0]"),
        "{e}"
    );
    assert!(
        e.contains("table[2].name") && e.contains("only be used in the table part"),
        "{e}"
    );
}

#[test]
fn per_table_overrides_and_an_empty_placeholder_is_refused() {
    let config = load(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\ndecimal_handling_mode = \"double\"\n"
    ))
    .unwrap();
    assert_eq!(
        config.tables[0].decimal_handling_mode,
        Some(DecimalHandlingMode::Double)
    );
    let e = load_err(&format!(
        "{TABLES_ONLY}[table_defaults]\nunavailable_value_placeholder = \"\"\n[[table]]\nname = \"t\"\n"
    ));
    assert!(
        e.contains("table_defaults.unavailable_value_placeholder"),
        "{e}"
    );
    let e = load_err(&format!(
        "{TABLES_ONLY}[table_defaults]\ntopic_prefix = \"a b\"\n[[table]]\nname = \"t\"\n"
    ));
    assert!(e.contains("table_defaults.topic_prefix"), "{e}");
}

#[test]
fn skipped_operations_take_debezium_letters_and_refuse_others_naming_the_key() {
    let config = load(&format!("{TABLES_ONLY}[[table]]\nname = \"t\"\n")).unwrap();
    let d = config.table_defaults.skipped_operations;
    assert!(d.skips(b't') && !d.skips(b'c') && !d.skips(b'u') && !d.skips(b'd'));
    assert_eq!(format!("{d:?}"), "t");
    let config = load(&format!(
        "{TABLES_ONLY}[table_defaults]\nskipped_operations = \"none\"\n[[table]]\nname = \"t\"\n\
         skipped_operations = \" c, d \"\n"
    ))
    .unwrap();
    assert_eq!(
        config.table_defaults.skipped_operations,
        SkippedOperations::NONE
    );
    let t = config.tables[0].skipped_operations.unwrap();
    assert!(t.skips(b'c') && t.skips(b'd') && !t.skips(b't') && !t.skips(b'r'));
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\nskipped_operations = \"c,x\"\n"
    ));
    assert!(e.contains("skipped_operations"), "{e}");
    assert!(e.contains("\"x\" is not an operation"), "{e}");
    assert!(e.contains("test.toml:"), "{e}");
    let e = load_err(&format!(
        "{TABLES_ONLY}[table_defaults]\nskipped_operations = \"r\"\n[[table]]\nname = \"t\"\n"
    ));
    assert!(
        e.contains("skipped_operations") && e.contains("\"r\""),
        "{e}"
    );
}

#[test]
fn default_column_lists_are_regular_expressions_named_when_they_do_not_compile() {
    let e = load_err(&format!(
        "{TABLES_ONLY}[table_defaults]\ncolumn_include_list = ['public\\.t\\..*', 'a(?=b)', '(']\n\
         column_exclude_list = ['x']\n[[table]]\nname = \"t\"\n"
    ));
    assert!(e.contains("table_defaults.column_exclude_list:"), "{e}");
    assert!(
        e.contains("table_defaults.column_include_list[1]")
            && e.contains("look-around")
            && e.contains("schema.table.column"),
        "{e}"
    );
    let ok = format!(
        "{TABLES_ONLY}[table_defaults]\ncolumn_exclude_list = ['public\\.t\\.(ssn|email)', '.*\\.secret_.*']\n\
         [[table]]\nname = \"t\"\n"
    );
    let config = load(&ok).unwrap();
    let filter = config.table_defaults.column_filter().unwrap().unwrap();
    assert!(!filter.includes("public", "t", "ssn"));
    assert!(!filter.includes("PUBLIC", "T", "Email"));
    assert!(!filter.includes("other", "u", "secret_key"));
    assert!(filter.includes("public", "t", "ssn_hash"));
    assert!(filter.includes("public", "t", "id"));
}

#[test]
fn column_lists_are_one_or_the_other_and_masks_have_one_kind() {
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\ncolumn_include_list = [\"a\"]\n\
         column_exclude_list = [\"b\", \"b\"]\n"
    ));
    assert!(e.contains("table[0].column_exclude_list:"), "{e}");
    assert!(e.contains("column_include_list"), "{e}");
    assert!(
        e.contains("table[0].column_exclude_list[1]") && e.contains("already named"),
        "{e}"
    );
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\ncolumn_exclude_list = [\"ssn\"]\n\
         [[table.column_mask]]\ncolumns = [\"ssn\", \"\"]\nwith_chars = 3\ntruncate_to_chars = 2\n\
         [[table.column_mask]]\ncolumns = [\"ssn\"]\nhash = \"SHA-999\"\nhash_version = 3\n\
         [[table.column_mask]]\ncolumns = [\"x\"]\nsalt = \"s\"\ntruncate_to_chars = 0\n\
         [[table.column_mask]]\ncolumns = []\nwith_chars = 1\n"
    ));
    for expected in [
        "table[0].column_mask[0].columns[0]",
        "masked but left out",
        "table[0].column_mask[0].columns[1]",
        "table[0].column_mask[0]",
        "exactly one of hash",
        "table[0].column_mask[1].columns[0]",
        "already named in table[0].column_mask[0].columns[0]",
        "table[0].column_mask[1].hash",
        "SHA-256",
        "table[0].column_mask[1].salt",
        "table[0].column_mask[1].hash_version",
        "table[0].column_mask[2].salt",
        "set without hash",
        "table[0].column_mask[2].truncate_to_chars",
        "table[0].column_mask[3].columns",
    ] {
        assert!(e.contains(expected), "{expected} missing in {e}");
    }
}

#[test]
fn a_mask_salt_comes_from_the_environment_and_stays_secret() {
    let config = load(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\n[[table.column_mask]]\ncolumns = [\"email\"]\n\
         hash = \"sha-256\"\nsalt = \"${{WALRELAY_MASK_SALT}}\"\n"
    ))
    .unwrap();
    let mask = &config.tables[0].column_mask[0];
    assert_eq!(mask.salt.as_ref().unwrap().expose_secret(), MASK_SALT);
    assert!(!format!("{config:?}").contains(MASK_SALT));
    assert!(!format!("{mask:?}").contains(MASK_SALT));
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\n[[table.column_mask]]\ncolumns = [\"email\"]\n\
         hash = \"SHA-256\"\nsalt = \"${{NO_SUCH_SALT_VAR}}\"\n"
    ));
    assert!(e.contains("table[0].column_mask[0].salt"), "{e}");
    assert!(e.contains("NO_SUCH_SALT_VAR"), "{e}");
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\n[[table.column_mask]]\ncolumns = [\"email\"]\n\
         hash = \"SHA-256\"\nsalt = \"\"\n"
    ));
    assert!(e.contains("table[0].column_mask[0].salt: is empty"), "{e}");
}

/// Issue 27: `special_values` is `write` (the default) or `fail`, per
/// table too; anything else names the key and the two choices.
#[test]
fn special_values_is_write_or_fail_and_a_table_may_override_it() {
    let config = load(&format!("{TABLES_ONLY}[[table]]\nname = \"t\"\n")).unwrap();
    assert_eq!(config.table_defaults.special_values, SpecialValues::Write);
    let config = load(&format!(
        "{TABLES_ONLY}[table_defaults]\nspecial_values = \"fail\"\n[[table]]\nname = \"t\"\n\
         [[table]]\nname = \"u\"\nspecial_values = \"write\"\n"
    ))
    .unwrap();
    assert_eq!(config.table_defaults.special_values, SpecialValues::Fail);
    assert_eq!(config.tables[0].special_values, None);
    assert_eq!(config.tables[1].special_values, Some(SpecialValues::Write));
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\nspecial_values = \"stop\"\n"
    ));
    assert!(
        e.contains("special_values") && e.contains("`write`") && e.contains("`fail`"),
        "{e}"
    );
}

#[test]
fn unmapped_types_is_fail_or_text_and_a_table_may_override_it() {
    let config = load(&format!(
        "{TABLES_ONLY}[table_defaults]\nunmapped_types = \"text\"\n[[table]]\nname = \"t\"\n\
         [[table]]\nname = \"u\"\nunmapped_types = \"fail\"\n"
    ))
    .unwrap();
    assert_eq!(config.table_defaults.unmapped_types, UnmappedTypes::Text);
    assert_eq!(config.tables[0].unmapped_types, None);
    assert_eq!(config.tables[1].unmapped_types, Some(UnmappedTypes::Fail));
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\nunmapped_types = \"string\"\n"
    ));
    assert!(
        e.contains("unmapped_types") && e.contains("`fail`") && e.contains("`text`"),
        "{e}"
    );
}

#[test]
fn topic_names_are_sanitized_as_debezium_sanitizes_them() {
    use super::sanitized_topic_name as s;
    assert_eq!(s("shop.public.orders"), None);
    assert_eq!(s("a-b_c.D9"), None);
    assert_eq!(
        s("shop.Sales.Order Items").as_deref(),
        Some("shop.Sales.Order_Items")
    );
    assert_eq!(s("p.s.Straße").as_deref(), Some("p.s.Stra_e"));
    // Outside the BMP: two UTF-16 units, two underscores.
    assert_eq!(s("p.s.a😀b").as_deref(), Some("p.s.a__b"));
    assert_eq!(s("p.s.\"x\"/y").as_deref(), Some("p.s._x__y"));
    let long = format!("p.s.{}", "t".repeat(300));
    assert_eq!(s(&long).map(|n| n.len()), Some(249));
    assert_eq!(s(".").as_deref(), Some("_"));
    assert_eq!(s("..").as_deref(), Some("__"));
    for name in ["shop.Sales.Order Items", "p.s.a😀b", &long] {
        let fixed = s(name).unwrap();
        assert_eq!(super::topic_name_problem(&fixed), None, "{fixed}");
    }
}

/// `postgres.host` may list several servers (a primary and its standbys):
/// each entry a host, an IP (IPv6 in brackets with a port) or a socket
/// directory, with an optional `:port`.
#[test]
fn postgres_host_lists_are_split_and_checked() {
    assert_eq!(split_host_port("db-a"), ("db-a", None));
    assert_eq!(split_host_port("db-b:5433"), ("db-b", Some(5433)));
    assert_eq!(split_host_port("[::1]:5434"), ("::1", Some(5434)));
    assert_eq!(split_host_port("[::1]"), ("::1", None));
    assert_eq!(split_host_port("::1"), ("::1", None));
    assert_eq!(split_host_port("/run/pg"), ("/run/pg", None));
    assert_eq!(split_host_port("db:x"), ("db:x", None));

    let config = load(&MINIMAL.replace(
        "[postgres]\n",
        "[postgres]\nhost = \"db-a,db-b:5433,[::1]:5434\"\nport = 5432\n",
    ))
    .unwrap();
    let params = crate::relay::connect_params(&config);
    assert!(params.is_host_list());
    let targets: Vec<(String, u16)> = params
        .targets()
        .into_iter()
        .map(|t| (t.host, t.port))
        .collect();
    assert_eq!(
        targets,
        [
            ("db-a".to_owned(), 5432),
            ("db-b".to_owned(), 5433),
            ("::1".to_owned(), 5434)
        ]
    );
    assert_eq!(params.address(), "db-a:5432,db-b:5433,::1:5434");

    for bad in ["db-a,", ",db-b", "db-a,db-b:x", "db-a,db-b:0"] {
        let error =
            load_err(&MINIMAL.replace("[postgres]\n", &format!("[postgres]\nhost = \"{bad}\"\n")));
        assert!(
            error.contains("postgres.host") && error.contains("is not a list of servers"),
            "{bad}: {error}"
        );
    }
    let error = load_err(&MINIMAL.replace("[postgres]\n", "[postgres]\nhost = \"db-a, db-b\"\n"));
    assert!(
        error.contains("separated by commas without spaces"),
        "{error}"
    );
}

/// `provide_transaction_metadata`: off by default; on, its topic
/// `<prefix>.transaction` must be a valid name — a prefix that is valid
/// alone but too long with the suffix is refused under this key (such a
/// prefix is valid only with a heartbeat topic of its own: the default
/// one is longer still).
#[test]
fn transaction_metadata_is_off_by_default_and_its_topic_name_checked() {
    let config = Config::from_str(&minimal_with(""), "test.toml").unwrap();
    assert!(!config.table_defaults.provide_transaction_metadata);
    let on = Config::from_str(
        &minimal_with("[table_defaults]\nprovide_transaction_metadata = true"),
        "test.toml",
    )
    .unwrap();
    assert!(on.table_defaults.provide_transaction_metadata);
    let error = load_err(&minimal_with(&format!(
        "[table_defaults]\ntopic_prefix = \"{}\"\nprovide_transaction_metadata = true\n\
         [heartbeat]\ninterval = \"10s\"\ntopic = \"hb\"",
        "p".repeat(240)
    )));
    assert!(
        error.contains(
            "table_defaults.provide_transaction_metadata: writes the transaction records to \"ppp"
        ),
        "{error}"
    );
    assert!(
        error.contains("shorten table_defaults.topic_prefix"),
        "{error}"
    );
    assert!(!error.contains("heartbeat"), "{error}");
    // Off, the same prefix is fine.
    Config::from_str(
        &minimal_with(&format!(
            "[table_defaults]\ntopic_prefix = \"{}\"\n[heartbeat]\ninterval = \"10s\"\ntopic = \"hb\"",
            "p".repeat(240)
        )),
        "test.toml",
    )
    .unwrap();
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
