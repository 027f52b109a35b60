//! Byte sizes, durations and names as the files write them.

use super::*;

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
