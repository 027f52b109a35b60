//! The examples, the sidecar config, `config/invalid/` and the configuration
//! reference checked against the schema: every key named, every example
//! loads, every invalid file fails naming its key.

use super::*;

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
