//! `[postgres]`: TLS modes and files, client certificates, host lists.

use super::*;

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
    let params = crate::pg::params::connect_params(&config);
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

/// `capture_from` a standby needs `standby_host` (checked like `host`),
/// and `standby_host`/`standby_port` without it are refused, not ignored;
/// the capture connections then go to the standby, everything else to
/// `host`.
#[test]
fn capture_from_a_standby_needs_its_host_and_nothing_dangles() {
    let with = |lines: &str| MINIMAL.replace("[postgres]\n", &format!("[postgres]\n{lines}\n"));
    assert_eq!(
        load(MINIMAL).unwrap().postgres.capture_from,
        CaptureFrom::Primary
    );
    let error = load_err(&with("capture_from = \"standby\""));
    assert!(
        error.contains(
            "postgres.standby_host: is required with postgres.capture_from = \"standby\""
        ),
        "{error}"
    );
    let error = load_err(&with("standby_host = \"replica\""));
    assert!(
        error.contains("postgres.standby_host: is set but postgres.capture_from is \"primary\""),
        "{error}"
    );
    let error = load_err(&with("standby_port = 5433"));
    assert!(error.contains("postgres.standby_port"), "{error}");
    let error = load_err(&with(
        "capture_from = \"standby\"\nstandby_host = \"postgres://u:S3cret@replica\"",
    ));
    assert!(
        error.contains("postgres.standby_host: looks like a connection string")
            && !error.contains("S3cret"),
        "{error}"
    );
    let error = load_err(&with("capture_from = \"replica\""));
    assert!(
        error.contains("postgres.capture_from") && error.contains("standby_only"),
        "lists the accepted values: {error}"
    );

    let config = load(&with(
        "host = \"db-a\"\ncapture_from = \"standby_only\"\nstandby_host = \"replica-1:5433\"",
    ))
    .unwrap();
    let capture = crate::pg::params::capture_params(&config);
    assert_eq!((capture.host.as_str(), capture.port), ("replica-1", 5433));
    assert_eq!(capture.target, crate::pg::wire::Target::Standby);
    let primary = crate::pg::params::connect_params(&config);
    assert_eq!(
        (primary.host.as_str(), primary.target),
        ("db-a", crate::pg::wire::Target::Primary)
    );

    let config = load(&with(
        "capture_from = \"standby\"\nstandby_host = \"replica-1,replica-2\"\nstandby_port = 6432",
    ))
    .unwrap();
    let capture = crate::pg::params::capture_params(&config);
    let targets: Vec<(String, u16)> = capture
        .targets()
        .into_iter()
        .map(|t| (t.host, t.port))
        .collect();
    assert_eq!(
        targets,
        [
            ("replica-1".to_owned(), 6432),
            ("replica-2".to_owned(), 6432)
        ]
    );
    assert_eq!(capture.target, crate::pg::wire::Target::PreferStandby);
}
