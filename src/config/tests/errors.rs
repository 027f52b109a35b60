//! How errors are reported: file, line, column and key; every problem listed;
//! long values and lists cut; duplicate keys; locations by characters.

use super::*;

#[test]
fn unknown_keys_and_type_errors_report_file_line_and_column() {
    let text = minimal_with("tombstone_on_empty_payloads = true");
    let error = load_err(&text);
    let line = text.lines().count();
    assert!(
        error.starts_with(&format!(
            "test.toml:{line}:1: outbox[0].tombstone_on_empty_payloads: unknown key \
             `tombstone_on_empty_payloads` in [[outbox]]"
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
    assert!(
        error.contains(
            "unknown key `unknown` at the top level of the file; remove it or \
             correct its spelling (the keys there: `connector`, `postgres`, `kafka`"
        ),
        "{error}"
    );
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

/// An unknown key names the nearest known key of its section when one is
/// close, in every section (the message comes from one place).
#[test]
fn unknown_keys_name_the_nearest_known_key() {
    for (extra, want) in [
        (
            "tabel = \"x\"",
            "outbox[0].tabel: unknown key `tabel` in [[outbox]]; did you mean `table`?",
        ),
        (
            "[snapshot]\nmode = \"initial\"\nfecth_rows = 10",
            "snapshot.fecth_rows: unknown key `fecth_rows` in [snapshot]; did you mean `fetch_rows`?",
        ),
        (
            "[dead_letter]\ntopic = \"x\"\nTopic = \"y\"",
            "dead_letter.Topic: unknown key `Topic` in [dead_letter]; did you mean `topic`?",
        ),
        (
            "[[table]]\ntable = \"public.t\"\n[[table.column_mask]]\ncolumns = [\"c\"]\nhsah = \"sha256\"",
            "in [[table.column_mask]]; did you mean `hash`?",
        ),
    ] {
        let error = load_err(&minimal_with(extra));
        assert!(error.contains(want), "{want}\nnot in: {error}");
    }
    // Nothing close: the keys of the section instead of a guess.
    let error = load_err(&minimal_with("zzzzzz = 1"));
    assert!(
        error.contains("unknown key `zzzzzz` in [[outbox]]; remove it or correct its spelling (the keys there: `table`"),
        "{error}"
    );
    assert!(!error.contains("did you mean"), "{error}");
}

#[test]
fn the_nearest_key_is_close_enough_to_be_meant() {
    use crate::config::error::{edit_distance, nearest};
    assert_eq!(edit_distance("tabel", "table"), 1, "a swap is one edit");
    assert_eq!(edit_distance("", "abc"), 3);
    assert_eq!(edit_distance("kitten", "sitting"), 3);
    let known = ["table", "topic", "id_column"];
    assert_eq!(nearest("tabel", &known), Some("table"));
    assert_eq!(nearest("topc", &known), Some("topic"));
    assert_eq!(nearest("TOPIC", &known), Some("topic"));
    assert_eq!(nearest("idcolumn", &known), Some("id_column"));
    assert_eq!(nearest("xyz", &known), None);
    assert_eq!(
        nearest("tab", &known),
        None,
        "two edits on three letters is a guess"
    );
}

/// An inbox consumer's file given to `run`/`check` says which command
/// takes it.
#[test]
fn an_inbox_file_names_the_command_that_takes_it() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/inbox/inbox.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let error = load_err(&text);
    assert!(
        error.contains("this is an inbox consumer's file"),
        "{error}"
    );
    assert!(error.contains("walrelay inbox --config"), "{error}");
    assert!(error.starts_with("test.toml:"), "{error}");
}
