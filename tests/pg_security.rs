//! PostgreSQL security against the real server: client certificates
//! (`cert` authentication of role `walrelay_cert`, set up by
//! `deploy/dev/postgres.sh up`), and the least-privileged role that runs
//! walrelay (docs/security.md).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::*;

const START: Duration = Duration::from_secs(60);
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

/// TLS keys presenting client certificate `cert` with key `key`.
fn cert_keys(cert: &str, key: &Path, extra: &str) -> String {
    format!(
        "sslmode = \"verify-full\"\nsslrootcert = \"{ca}\"\nsslcert = \"{cert}\"\n\
         sslkey = \"{key}\"\n{extra}",
        ca = pg_tls_file("ca.pem").display(),
        cert = pg_tls_file(cert).display(),
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
    assert_eq!(duplicates, 0, "no restart happened");
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
                &pg_tls_file("client-walrelay_cert.enc.key"),
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
            &pg_tls_file("client-someone_else.key"),
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
    let (code, report) = check(&relay.config_path);
    assert_eq!(code, Some(1), "{report}");
    assert!(report.contains(needle), "{report}");
}

/// `walrelay check`: exit code and stdout + stderr.
fn check(path: &Path) -> (Option<i32>, String) {
    let out = std::process::Command::new(walrelay_bin())
        .args(["check", "--config"])
        .arg(path)
        .output()
        .expect("run walrelay check");
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
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
                pg_tls_file("client-walrelay_cert.pem").display()
            ),
            "postgres.sslkey",
            "is required with postgres.sslcert",
        ),
        (
            cert_keys(
                "client-walrelay_cert.pem",
                &pg_tls_file("client-someone_else.key"),
                "",
            ),
            "postgres.sslkey",
            "does not belong to the certificate",
        ),
        (
            cert_keys(
                "client-walrelay_cert.pem",
                &pg_tls_file("client-walrelay_cert.enc.key"),
                "",
            ),
            "postgres.sslpassword",
            "is encrypted; set postgres.sslpassword",
        ),
        (
            cert_keys(
                "client-walrelay_cert.pem",
                &pg_tls_file("client-walrelay_cert.enc.key"),
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
