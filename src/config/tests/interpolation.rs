//! `${VAR}` and `${file:...}` interpolation, secrets that stay secret
//! (`Debug`, errors), secret files and their permissions.

use super::*;

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
