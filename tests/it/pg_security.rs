//! PostgreSQL security against the real server: client certificates
//! (`cert` authentication of role `walrelay_cert`, set up by
//! `deploy/dev/postgres.sh up`), and the least-privileged role that runs
//! walrelay (docs/security.md).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::*;

/// The password of `client-walrelay_cert.enc.key` (the dev script's).
const KEY_PASSWORD: &str = "walrelay_cert_key";

async fn sql(db: &TestDb, sql: &str) {
    db.client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

fn write_file(dir: &Path, name: &str, content: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

/// `config` connecting as `user` with the given `[postgres]` keys instead of
/// the `walrelay` password.
fn as_user(config: &str, user: &str, keys: &str) -> String {
    let replaced = config.replacen(
        "user = \"walrelay\"\npassword = \"walrelay\"",
        &format!("user = \"{user}\"\n{keys}"),
        1,
    );
    assert_ne!(replaced, config, "relay_config changed its user lines");
    replaced
}

/// A client-certificate file of the dev cluster (`deploy/dev/postgres.sh
/// up` adds them, also to a cluster that was made before they existed).
fn cert_file(name: &str) -> PathBuf {
    let ca = pg_tls_file("ca.pem");
    let path = ca.with_file_name(name);
    assert!(
        path.is_file(),
        "{} is missing: run `deploy/dev/postgres.sh up` (with this PG_MAJOR); it adds role \
         walrelay_cert, its pg_hba.conf line and the client certificates to a running cluster",
        path.display()
    );
    path
}

/// TLS keys presenting client certificate `cert` with key `key`.
fn cert_keys(cert: &str, key: &Path, extra: &str) -> String {
    format!(
        "sslmode = \"verify-full\"\nsslrootcert = \"{ca}\"\nsslcert = \"{cert}\"\n\
         sslkey = \"{key}\"\n{extra}",
        ca = pg_tls_file("ca.pem").display(),
        cert = cert_file(cert).display(),
        key = key.display(),
    )
}

/// `n` outbox rows before walrelay starts (read by the snapshot), each its
/// own aggregate so per-aggregate order is trivially commit order.
async fn snapshot_rows(db: &TestDb, n: usize) {
    sql(
        db,
        &format!(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
             SELECT gen_random_uuid(), 'order', 'snap-' || i, 'Created', \
                    jsonb_build_object('snap', i) FROM generate_series(1, {n}) i"
        ),
    )
    .await;
}

/// Runs the relay on `config` over a snapshot of 300 rows and 2,000 streamed
/// ones and checks every record (topic, key, value, id; per-aggregate order).
async fn snapshot_and_stream(db: &TestDb, names: &Names, config: &str) -> RelayProcess {
    snapshot_rows(db, 300).await;
    let mut relay = RelayProcess::start(config, &[]);
    relay.wait_log("streaming", START).await;
    write_outbox_load(&db.name, 4, 2_000, 200, Duration::ZERO).await;
    let rows = outbox_rows(db).await;
    assert_eq!(rows.len(), 2_300);
    let consumed = consume(
        &[&names.topic("order"), &names.topic("invoice")],
        rows.len(),
        Duration::from_secs(120),
        Duration::from_secs(1),
    );
    let duplicates = verify_outbox_delivery(names, &rows, &consumed);
    assert_eq!(
        duplicates,
        0,
        "no restart happened, yet records came twice:\n{}",
        relay.log()
    );
    assert!(relay.is_running(), "walrelay exited:\n{}", relay.log());
    relay
}

/// A relay role that owns nothing: the publication exists (made by the
/// table owner, `walrelay`), and it may read the outbox for the snapshot.
async fn publish_and_grant(db: &TestDb, names: &Names, role: &str) {
    sql(
        db,
        &format!(
            "SET ROLE walrelay; CREATE PUBLICATION {publication} FOR TABLE public.outbox; \
             RESET ROLE; GRANT SELECT ON public.outbox TO {role};",
            publication = names.publication
        ),
    )
    .await;
}

/// Client certificate for `walrelay_cert` with its key encrypted, the key's
/// password read from a file: both connections (catalog and replication)
/// log in by certificate, and the relay takes the snapshot and streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_certificate_logs_in_both_connections_and_the_relay_streams() {
    require_kafka();
    let db = TestDb::new("pgcert").await;
    db.create_outbox("outbox").await;
    let names = Names::new("pgcert");
    publish_and_grant(&db, &names, "walrelay_cert").await;
    let dir = std::env::temp_dir().join(unique("pgcert"));
    let password_file = write_file(&dir, "key_password", &format!("{KEY_PASSWORD}\n"));
    let config = as_user(
        &relay_config(&db, &names, "", ""),
        "walrelay_cert",
        &format!(
            "create_publication = false\n{}",
            cert_keys(
                "client-walrelay_cert.pem",
                &cert_file("client-walrelay_cert.enc.key"),
                &format!("sslpassword = \"${{file:{}}}\"", password_file.display()),
            )
        ),
    );
    let mut relay = snapshot_and_stream(&db, &names, &config).await;

    // The server saw the certificate on the walsender and on the catalog
    // connection (the slot watcher keeps one open).
    let admin = pg_connect("postgres").await;
    let application = format!("walrelay-{}", names.connector);
    let kinds: Vec<String> = admin
        .query(
            "SELECT DISTINCT a.backend_type FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.application_name = $1 AND a.usename = 'walrelay_cert' AND s.ssl \
               AND s.client_dn = '/CN=walrelay_cert' ORDER BY 1",
            &[&application],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        kinds,
        ["client backend", "walsender"],
        "both connections authenticate with the certificate"
    );
    assert!(relay.stop().success(), "{}", relay.log());
    assert!(
        !relay.log().contains(KEY_PASSWORD),
        "the key password is never logged:\n{}",
        relay.log()
    );
}

/// A valid certificate (signed by the server's CA) for another user: the
/// server refuses it, and walrelay stops at once with the server's reason
/// instead of retrying; `check` says the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_user_is_refused_without_retrying() {
    let db = TestDb::new("pgcertother").await;
    db.create_outbox("outbox").await;
    let names = Names::new("pgcertother");
    let config = as_user(
        &relay_config(&db, &names, "", ""),
        "walrelay_cert",
        &cert_keys(
            "client-someone_else.pem",
            &cert_file("client-someone_else.key"),
            "",
        ),
    );
    let needle = "certificate authentication failed for user \"walrelay_cert\"";
    let mut relay = RelayProcess::start(&config, &[]);
    let log = relay.expect_exit(1, START);
    let error = log
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("walrelay: "))
        .unwrap_or_else(|| panic!("run printed no error:\n{log}"));
    assert!(error.contains(needle), "{error}");
    assert!(error.contains("28000"), "the SQLSTATE: {error}");
    assert!(
        !log.contains("will retry"),
        "a refused certificate is definite, not retried:\n{log}"
    );
    let (code, report) = check_all(&relay.config_path);
    assert_eq!(code, Some(1), "{report}");
    assert!(report.contains(needle), "{report}");
}

/// `walrelay check`: exit code and stdout + stderr.
fn check_all(path: &Path) -> (Option<i32>, String) {
    let (code, stdout, stderr) = run_check(path);
    (code, format!("{stdout}{stderr}"))
}

/// Client-certificate mistakes are configuration errors (exit code 2, before
/// any connection) naming the key and the fix: a missing key file, a
/// certificate without a key, a key of another certificate, an encrypted key
/// without a password or with a wrong one (which is never shown).
#[tokio::test]
async fn client_certificate_mistakes_are_config_errors_naming_the_key() {
    let dir = std::env::temp_dir().join(unique("pgcertcfg"));
    let wrong = "not-the-key-Pw9!";
    let wrong_file = write_file(&dir, "wrong", wrong);
    let base = format!(
        "[connector]\nname = \"certcfg\"\n[postgres]\nhost = \"127.0.0.1\"\nport = {port}\n\
         user = \"walrelay_cert\"\ndatabase = \"postgres\"\n{{keys}}\n[kafka]\n\
         brokers = \"{brokers}\"\n[[outbox]]\ntable = \"public.outbox\"\n",
        port = pg_port(),
        brokers = kafka_brokers(),
    );
    let missing_key = dir.join("no-such.key");
    let cases: Vec<(String, &str, &str)> = vec![
        (
            cert_keys("client-walrelay_cert.pem", &missing_key, ""),
            "postgres.sslkey",
            "No such file or directory",
        ),
        (
            format!(
                "sslmode = \"require\"\nsslcert = \"{}\"",
                cert_file("client-walrelay_cert.pem").display()
            ),
            "postgres.sslkey",
            "is required with postgres.sslcert",
        ),
        (
            cert_keys(
                "client-walrelay_cert.pem",
                &cert_file("client-someone_else.key"),
                "",
            ),
            "postgres.sslkey",
            "does not belong to the certificate",
        ),
        (
            cert_keys(
                "client-walrelay_cert.pem",
                &cert_file("client-walrelay_cert.enc.key"),
                "",
            ),
            "postgres.sslpassword",
            "is encrypted; set postgres.sslpassword",
        ),
        (
            cert_keys(
                "client-walrelay_cert.pem",
                &cert_file("client-walrelay_cert.enc.key"),
                &format!("sslpassword = \"${{file:{}}}\"", wrong_file.display()),
            ),
            "postgres.sslpassword",
            "does not decrypt postgres.sslkey",
        ),
    ];
    for (keys, key, what) in cases {
        let config = base.replace("{keys}", &keys);
        let path = write_file(&dir, "walrelay.toml", &config);
        for command in ["check", "run"] {
            let out = std::process::Command::new(walrelay_bin())
                .args([command, "--config"])
                .arg(&path)
                .output()
                .expect("run walrelay");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(out.status.code(), Some(2), "{command}:\n{text}");
            assert!(text.contains("invalid configuration"), "{command}: {text}");
            assert!(text.contains(&format!(": {key}: ")), "{command}: {text}");
            assert!(text.contains(what), "{command}: {text}");
            assert!(!text.contains(wrong), "{command}: {text}");
        }
    }
}

/// A login role made for one test, dropped when the test ends (after its
/// database: declare it first).
struct TestRole {
    name: String,
}

impl TestRole {
    /// `CREATE ROLE <name> <attributes> PASSWORD '<name>'`.
    async fn new(prefix: &str, attributes: &str) -> TestRole {
        let name = unique(prefix);
        pg_connect("postgres")
            .await
            .batch_execute(&format!(
                "CREATE ROLE {name} {attributes} PASSWORD '{name}'"
            ))
            .await
            .expect("create role");
        TestRole { name }
    }
}

impl Drop for TestRole {
    fn drop(&mut self) {
        let _ = std::process::Command::new("psql")
            .args(["-X", "-q", "-h", "127.0.0.1", "-p", &pg_port().to_string()])
            .args(["-U", "postgres", "-d", "postgres"])
            .args(["-c", &format!("DROP ROLE IF EXISTS {}", self.name)])
            .env("PGPASSWORD", "postgres")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// The grants of docs/security.md, and nothing else: a role with LOGIN and
/// REPLICATION (no superuser, no pg_monitor, owns nothing), SELECT on the
/// outbox table; the publication made by the table's owner. The relay takes
/// the snapshot and streams, and `check` passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_least_privileged_role_runs_the_whole_relay() {
    require_kafka();
    let role = TestRole::new("walrelay_lp", "LOGIN REPLICATION").await;
    let db = TestDb::new("pglp").await;
    db.create_outbox("outbox").await;
    let names = Names::new("pglp");
    publish_and_grant(&db, &names, &role.name).await;
    let config = as_user(
        &relay_config(&db, &names, "", ""),
        &role.name,
        &format!("password = \"{}\"\ncreate_publication = false", role.name),
    );
    let path = std::env::temp_dir()
        .join(unique("pglp"))
        .join("walrelay.toml");
    write_file(path.parent().unwrap(), "walrelay.toml", &config);
    let (code, report) = check_all(&path);
    assert_eq!(
        code,
        Some(0),
        "check passes for the least-privileged role:\n{report}"
    );
    assert!(report.contains("may replicate"), "{report}");
    let mut relay = snapshot_and_stream(&db, &names, &config).await;
    assert!(relay.stop().success(), "{}", relay.log());
}

/// `check` fails and `run` exits 1 with the same words, naming `needle`.
async fn check_and_run_refuse(config: &str, needle: &str) {
    let path = std::env::temp_dir()
        .join(unique("pglpmissing"))
        .join("walrelay.toml");
    write_file(path.parent().unwrap(), "walrelay.toml", config);
    let (code, report) = check_all(&path);
    assert_eq!(code, Some(1), "check must fail:\n{report}");
    assert!(
        report.lines().any(
            |l| (l.starts_with("FAIL") || l.trim_start().starts_with("fix:")) && l.contains(needle)
        ),
        "check does not say {needle:?}:\n{report}"
    );
    run_refuses(&path, needle);
}

/// Each grant of docs/security.md, missing alone: `check` and `run` name it
/// with the statement that adds it. The snapshot's SELECT and schema USAGE
/// are needed only when a snapshot is planned (`no_data` streams without;
/// `check` still warns, since `republish` needs them after a lost slot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_each_missing_grant_with_the_statement_to_run() {
    let no_replication = TestRole::new("walrelay_norepl", "LOGIN").await;
    let no_select = TestRole::new("walrelay_nosel", "LOGIN REPLICATION").await;
    let no_login = TestRole::new("walrelay_nologin", "REPLICATION").await;
    let db = TestDb::new("pglpmissing").await;
    db.create_outbox("outbox").await;
    sql(
        &db,
        "CREATE SCHEMA app AUTHORIZATION walrelay; SET ROLE walrelay; \
         CREATE TABLE app.outbox (LIKE public.outbox INCLUDING ALL); RESET ROLE;",
    )
    .await;
    let config = |role: &TestRole, names: &Names, extra: &str| {
        as_user(
            &relay_config(&db, names, "", extra),
            &role.name,
            &format!("password = \"{}\"\ncreate_publication = false", role.name),
        )
    };

    // REPLICATION
    let names = Names::new("pglpmissing");
    publish_and_grant(&db, &names, &no_replication.name).await;
    check_and_run_refuse(
        &config(&no_replication, &names, ""),
        &format!("ALTER ROLE \"{}\" REPLICATION;", no_replication.name),
    )
    .await;

    // LOGIN
    check_and_run_refuse(
        &config(&no_login, &names, ""),
        &format!("ALTER ROLE \"{}\" LOGIN;", no_login.name),
    )
    .await;

    // SELECT on the outbox table (the snapshot reads it) ...
    let names = Names::new("pglpmissing");
    sql(
        &db,
        &format!(
            "SET ROLE walrelay; CREATE PUBLICATION {} FOR TABLE public.outbox; RESET ROLE;",
            names.publication
        ),
    )
    .await;
    check_and_run_refuse(
        &config(&no_select, &names, ""),
        &format!(
            "GRANT SELECT ON \"public\".\"outbox\" TO \"{}\";",
            no_select.name
        ),
    )
    .await;
    // ... but not without a snapshot.
    let config_no_data = config(&no_select, &names, "[snapshot]\nmode = \"no_data\"");
    let path = std::env::temp_dir()
        .join(unique("pglpnodata"))
        .join("walrelay.toml");
    write_file(path.parent().unwrap(), "walrelay.toml", &config_no_data);
    let (code, report) = check_all(&path);
    assert_eq!(code, Some(0), "no snapshot, no SELECT needed:\n{report}");
    // Yet the lost-slot recovery reads the table: said now, with the grant,
    // not in the middle of an incident.
    assert!(
        report.contains(
            "warn  recovery reads: the role lacks SELECT on public.outbox: streaming does not \
             need it, but the recovery from a lost slot does"
        ) && report.contains(&format!(
            "grant it now: GRANT SELECT ON \"public\".\"outbox\" TO \"{}\";",
            no_select.name
        )),
        "{report}"
    );

    // USAGE on the outbox table's schema (and SELECT, both named).
    let names = Names::new("pglpmissing");
    sql(
        &db,
        &format!(
            "SET ROLE walrelay; CREATE PUBLICATION {} FOR TABLE app.outbox; RESET ROLE;",
            names.publication
        ),
    )
    .await;
    let in_app = config(&no_select, &names, "").replacen(
        "table = \"public.outbox\"",
        "table = \"app.outbox\"",
        1,
    );
    check_and_run_refuse(
        &in_app,
        &format!(
            "GRANT USAGE ON SCHEMA \"app\" TO \"{role}\"; \
             GRANT SELECT ON \"app\".\"outbox\" TO \"{role}\";",
            role = no_select.name
        ),
    )
    .await;
    sql(
        &db,
        &format!("GRANT SELECT ON app.outbox TO {}", no_select.name),
    )
    .await;
    check_and_run_refuse(
        &in_app,
        &format!(
            // Only the USAGE is left to grant.
            "GRANT USAGE ON SCHEMA \"app\" TO \"{}\"; (or set [snapshot] mode",
            no_select.name
        ),
    )
    .await;

    // SELECT on a [[table]] table, which the snapshot reads too.
    let names = Names::new("pglpmissing");
    sql(
        &db,
        &format!(
            "GRANT SELECT ON public.outbox TO {role}; SET ROLE walrelay; \
             CREATE TABLE public.customers (id int PRIMARY KEY, name text); \
             CREATE PUBLICATION {publication} FOR TABLE public.outbox, public.customers; \
             RESET ROLE;",
            role = no_select.name,
            publication = names.publication
        ),
    )
    .await;
    check_and_run_refuse(
        &config(&no_select, &names, "[[table]]\nname = \"public.customers\""),
        &format!(
            "GRANT SELECT ON \"public\".\"customers\" TO \"{}\";",
            no_select.name
        ),
    )
    .await;

    // CONNECT on the database (granted to PUBLIC by default; revoked here).
    sql(
        &db,
        &format!(
            "REVOKE CONNECT ON DATABASE {db} FROM PUBLIC; \
             GRANT SELECT ON public.outbox TO {role}",
            db = db.name,
            role = no_select.name
        ),
    )
    .await;
    let names = Names::new("pglpmissing");
    check_and_run_refuse(
        &config(&no_select, &names, ""),
        &format!(
            "GRANT CONNECT ON DATABASE \"{}\" TO \"{}\";",
            db.name, no_select.name
        ),
    )
    .await;
}
