//! walrelay against the dev broker's secured listeners (`deploy/dev/kafka.sh`
//! prints them as `WALRELAY_KAFKA_SASL_SSL_BROKERS`, `..._MTLS_BROKERS`,
//! `..._WRONG_HOST_BROKERS`, `..._TLS_DIR`): the relay end to end over
//! SASL_SSL with SCRAM-SHA-512 and over mutual TLS; every refused credential
//! or certificate answered by `check` and `run` with a definite error that
//! repeats no secret; and a user holding only the ACLs docs/security.md
//! lists streams, while one without WRITE on the event topic is stopped
//! with an error naming the topic and the ACL.
//!
//! Records are read back over PLAINTEXT (the same cluster; User:ANONYMOUS is
//! a super user there).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

use support::*;

const SCRAM_USER: &str = "walrelay";
const SCRAM_PASSWORD: &str = "walrelay-dev-scram";
const ACL_USER: &str = "walrelay-acl";
const ACL_PASSWORD: &str = "walrelay-dev-acl";
const NOWRITE_USER: &str = "walrelay-nowrite";
const NOWRITE_PASSWORD: &str = "walrelay-dev-nowrite";
const KEY_PASSWORD: &str = "walrelay-dev-keypass";
/// Topic name prefixes the ACL-restricted users may use (kafka.sh).
const ACL_TOPIC_PREFIX: &str = "acl-events-";
const ACL_OFFSETS_PREFIX: &str = "acl-offsets-";

/// `relay_config` pointed at `brokers` with `keys` added to `[kafka]`.
fn secured_config(db: &TestDb, names: &Names, brokers: &str, keys: &str) -> String {
    let config = relay_config(db, names, "", "");
    let plain = format!("brokers = \"{}\"", kafka_brokers());
    assert!(config.contains(&plain));
    config.replacen(&plain, &format!("brokers = \"{brokers}\"\n{keys}"), 1)
}

fn sasl_keys(k: &SecuredKafka, user: &str, password: &str) -> String {
    format!(
        "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
         sasl_username = \"{user}\"\nsasl_password = \"{password}\"\nssl_ca = \"{}\"",
        k.file("ca.pem")
    )
}

fn mtls_keys(k: &SecuredKafka, cert: &str, key: &str, key_password: Option<&str>) -> String {
    let mut keys = format!(
        "security_protocol = \"ssl\"\nssl_ca = \"{}\"\nssl_certificate = \"{}\"\nssl_key = \"{}\"",
        k.file("ca.pem"),
        k.file(cert),
        k.file(key)
    );
    if let Some(p) = key_password {
        keys.push_str(&format!("\nssl_key_password = \"{p}\""));
    }
    keys
}

/// Creates `topics` over PLAINTEXT (the restricted users may not create them).
async fn create_topics(topics: &[&str]) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .expect("admin client");
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| NewTopic::new(t, 3, TopicReplication::Fixed(1)))
        .collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin
        .create_topics(&new, &opts)
        .await
        .expect("create topics")
    {
        result.unwrap_or_else(|(t, e)| panic!("creating {t}: {e}"));
    }
}

/// Runs a relay to the end of a `rows`-event load from concurrent writers and
/// verifies every record as the plaintext tests do.
async fn stream_and_verify(
    db: &TestDb,
    names: &Names,
    config: &str,
    rows_total: usize,
    expect_log: &str,
) {
    let mut relay = RelayProcess::start(config, &[]);
    relay.wait_log("streaming", Duration::from_secs(90)).await;
    assert!(relay.log().contains(expect_log), "{}", relay.log());
    write_outbox_load(&db.name, 8, rows_total, 500, Duration::ZERO).await;
    let rows = outbox_rows(db).await;
    assert_eq!(rows.len(), rows_total);
    let end = db.current_wal_lsn().await;
    let consumed = consume(
        &[&names.topic("order"), &names.topic("invoice")],
        rows.len(),
        Duration::from_secs(180),
        Duration::from_secs(1),
    );
    let duplicates = verify_outbox_delivery(names, &rows, &consumed);
    assert_eq!(
        duplicates, 0,
        "no restart happened, so nothing may be sent twice"
    );
    db.wait_confirmed(
        &names.slot,
        end,
        "the slot to confirm the whole load",
        Duration::from_secs(60),
    )
    .await;
    assert!(relay.is_running(), "walrelay exited:\n{}", relay.log());
    assert!(
        relay.stop().success(),
        "SIGTERM exits 0; log:\n{}",
        relay.log()
    );
}

/// 20,000 events over SASL_SSL with SCRAM-SHA-512, host name verified.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sasl_ssl_scram_streams_twenty_thousand_events() {
    require_kafka();
    let k = SecuredKafka::from_env();
    let db = TestDb::new("ksasl").await;
    db.create_outbox("outbox").await;
    let names = Names::new("ksasl");
    let config = secured_config(
        &db,
        &names,
        &k.sasl_ssl,
        &sasl_keys(&k, SCRAM_USER, SCRAM_PASSWORD),
    );
    stream_and_verify(
        &db,
        &names,
        &config,
        20_000,
        "connected to Kafka over sasl_ssl (SASL SCRAM-SHA-512; TLS, broker certificate verified for its host name)",
    )
    .await;
}

/// 20,000 events over mutual TLS, the client key encrypted (ssl_key_password).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_tls_streams_twenty_thousand_events() {
    require_kafka();
    let k = SecuredKafka::from_env();
    let db = TestDb::new("kmtls").await;
    db.create_outbox("outbox").await;
    let names = Names::new("kmtls");
    let keys = mtls_keys(&k, "client.pem", "client-encrypted.key", Some(KEY_PASSWORD));
    let config = secured_config(&db, &names, &k.mtls, &keys);
    stream_and_verify(
        &db,
        &names,
        &config,
        20_000,
        "connected to Kafka over ssl (TLS, broker certificate verified for its host name)",
    )
    .await;
}

/// `walrelay check` on `config`: exit code and stdout + stderr.
fn check_config(config: &str) -> (Option<i32>, String) {
    let (code, stdout, stderr) = run_check(&write_config(config));
    (code, format!("{stdout}{stderr}"))
}

/// `check` says which TLS version and cipher the brokers negotiate (over
/// SASL_SSL and over mutual TLS with an encrypted client key), which
/// librdkafka itself does not report.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_reports_the_negotiated_tls_version() {
    require_kafka();
    let k = SecuredKafka::from_env();
    let db = TestDb::new("ktlsv").await;
    db.create_outbox("outbox").await;
    let names = Names::new("ktlsv");
    let mtls = mtls_keys(&k, "client.pem", "client-encrypted.key", Some(KEY_PASSWORD));
    for (brokers, keys) in [
        (&k.sasl_ssl, sasl_keys(&k, SCRAM_USER, SCRAM_PASSWORD)),
        (&k.mtls, mtls),
    ] {
        let (_, out) = check_config(&secured_config(&db, &names, brokers, &keys));
        let line = out
            .lines()
            .find(|l| l.contains("kafka") && l.contains("answered"))
            .unwrap_or_else(|| panic!("no Kafka line in check's report:\n{out}"));
        assert!(line.contains("; negotiated TLSv1."), "{line}");
        assert!(
            !out.contains(SCRAM_PASSWORD) && !out.contains(KEY_PASSWORD),
            "{out}"
        );
    }
}

/// How the broker's certificate was checked, as `check` reports it: with
/// host-name verification (the default), without it (`ssl_verify_hostname =
/// false`), and not at all (librdkafka's `enable.ssl.certificate.verification
/// = false`, in any of the spellings librdkafka reads). The first once read
/// "NOT verified" under load: it came from a librdkafka debug line that is
/// not logged when OpenSSL ends the handshake within its first call.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_says_how_the_broker_certificate_was_checked() {
    require_kafka();
    let k = SecuredKafka::from_env();
    let db = TestDb::new("kverify").await;
    db.create_outbox("outbox").await;
    let names = Names::new("kverify");
    let sasl = sasl_keys(&k, SCRAM_USER, SCRAM_PASSWORD);
    let off = |value: &str| {
        format!(
            "{}\n[kafka.librdkafka]\n\"enable.ssl.certificate.verification\" = \"{value}\"\n",
            secured_config(&db, &names, &k.sasl_ssl, &sasl)
        )
    };
    for (config, expected) in [
        (
            secured_config(&db, &names, &k.sasl_ssl, &sasl),
            "(SASL SCRAM-SHA-512; TLS, broker certificate verified for its host name)",
        ),
        (
            secured_config(
                &db,
                &names,
                &k.sasl_ssl,
                &format!("{sasl}\nssl_verify_hostname = false"),
            ),
            "(SASL SCRAM-SHA-512; TLS, broker certificate verified (host name NOT checked))",
        ),
        (
            off("false"),
            "(SASL SCRAM-SHA-512; TLS, broker certificate NOT verified)",
        ),
        (
            off("0"),
            "(SASL SCRAM-SHA-512; TLS, broker certificate NOT verified)",
        ),
        (
            off("true"),
            "(SASL SCRAM-SHA-512; TLS, broker certificate verified for its host name)",
        ),
    ] {
        let (_, out) = check_config(&config);
        let line = out
            .lines()
            .find(|l| l.contains("kafka") && l.contains("answered"))
            .unwrap_or_else(|| panic!("no Kafka line in check's report:\n{out}"));
        assert!(line.contains(expected), "expected {expected}:\n{line}");
    }
}

/// Each refused credential or certificate: `check` names it with the fix,
/// and `run` exits 1 with the same explanation — at once, not after a
/// retry loop — and neither repeats a password.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_credentials_and_certificates_are_definite_errors() {
    require_kafka();
    let k = SecuredKafka::from_env();
    let db = TestDb::new("krefused").await;
    db.create_outbox("outbox").await;
    let wrong_password = "not-the-password-Zq9";
    let cases = [
        (
            "wrong SASL password",
            k.sasl_ssl.clone(),
            sasl_keys(&k, SCRAM_USER, wrong_password),
            "SASL authentication failed",
            "kafka.sasl_password",
        ),
        (
            "unknown CA",
            k.sasl_ssl.clone(),
            sasl_keys(&k, SCRAM_USER, SCRAM_PASSWORD)
                .replace(&k.file("ca.pem"), &k.file("other-ca.pem")),
            "the broker's certificate could not be verified",
            "kafka.ssl_ca",
        ),
        (
            "certificate for another host",
            k.wrong_host.clone(),
            format!(
                "security_protocol = \"ssl\"\nssl_ca = \"{}\"",
                k.file("ca.pem")
            ),
            "the broker's certificate could not be verified",
            "kafka.ssl_verify_hostname",
        ),
        (
            "client certificate from another CA",
            k.mtls.clone(),
            mtls_keys(&k, "rogue-client.pem", "rogue-client.key", None),
            "the broker refused walrelay's client certificate",
            "kafka.ssl_certificate",
        ),
        (
            "no client certificate",
            k.mtls.clone(),
            format!(
                "security_protocol = \"ssl\"\nssl_ca = \"{}\"",
                k.file("ca.pem")
            ),
            "the broker refused walrelay's client certificate",
            "kafka.ssl_certificate",
        ),
    ];
    for (case, brokers, keys, problem, fix) in cases {
        let names = Names::new("krefused");
        let config = secured_config(&db, &names, &brokers, &keys);

        let (code, out) = check_config(&config);
        assert_eq!(code, Some(1), "{case}: check must fail:\n{out}");
        let kafka_line = out
            .lines()
            .skip_while(|l| !l.starts_with("FAIL  kafka:"))
            .take(2)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(kafka_line.contains(problem), "{case}:\n{out}");
        assert!(
            kafka_line.contains("fix: ") && kafka_line.contains(fix),
            "{case}:\n{out}"
        );
        for secret in [wrong_password, SCRAM_PASSWORD, KEY_PASSWORD] {
            assert!(
                !out.contains(secret),
                "{case}: check printed a password:\n{out}"
            );
        }
        // No retry loop: the answer is the refusal itself, not check's
        // 10 s Kafka deadline running out (a condition, not a time: a
        // loaded machine may take longer to get there).
        assert!(
            !kafka_line.contains("did not answer"),
            "{case}: check waited out its deadline instead of failing at the refusal:\n{out}"
        );

        let mut relay = RelayProcess::start(&config, &[]);
        let log = relay.expect_exit(1, Duration::from_secs(60));
        assert!(log.contains(problem), "{case}:\n{log}");
        assert!(log.contains(fix), "{case}:\n{log}");
        assert!(!log.contains("will retry"), "{case}: run retried:\n{log}");
        for secret in [wrong_password, SCRAM_PASSWORD, KEY_PASSWORD] {
            assert!(
                !log.contains(secret),
                "{case}: run logged a password:\n{log}"
            );
        }
    }
}

/// A SCRAM user with only the ACLs docs/security.md lists (WRITE+DESCRIBE on
/// the event topics; CREATE, DESCRIBE_CONFIGS, DESCRIBE, READ, WRITE on the
/// offsets topic; nothing on the cluster) streams end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_user_with_only_the_documented_acls_streams_end_to_end() {
    require_kafka();
    let k = SecuredKafka::from_env();
    let db = TestDb::new("kacl").await;
    db.create_outbox("outbox").await;
    let mut names = Names::new("kacl");
    names.topic_prefix = format!("{ACL_TOPIC_PREFIX}{}", names.connector);
    create_topics(&[&names.topic("order"), &names.topic("invoice")]).await;
    let keys = format!(
        "{}\noffsets_topic = \"{ACL_OFFSETS_PREFIX}{}\"",
        sasl_keys(&k, ACL_USER, ACL_PASSWORD),
        names.connector
    );
    let config = secured_config(&db, &names, &k.sasl_ssl, &keys);
    stream_and_verify(
        &db,
        &names,
        &config,
        2_000,
        "connected to Kafka over sasl_ssl",
    )
    .await;
}

/// The same user set-up without WRITE on the event topics: `run` stops with
/// an error naming the topic, the broker's TOPIC_AUTHORIZATION_FAILED and
/// the ACL to grant; the slot does not move past the refused event.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_topic_write_acl_names_the_topic_and_the_acl() {
    require_kafka();
    let k = SecuredKafka::from_env();
    let db = TestDb::new("knowrite").await;
    db.create_outbox("outbox").await;
    let mut names = Names::new("knowrite");
    names.topic_prefix = format!("{ACL_TOPIC_PREFIX}{}", names.connector);
    let topic = names.topic("order");
    create_topics(&[&topic]).await;
    let keys = format!(
        "{}\noffsets_topic = \"{ACL_OFFSETS_PREFIX}{}\"",
        sasl_keys(&k, NOWRITE_USER, NOWRITE_PASSWORD),
        names.connector
    );
    let config = secured_config(&db, &names, &k.sasl_ssl, &keys);
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(90)).await;
    db.client
        .batch_execute(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
             VALUES (gen_random_uuid(), 'order', 'agg-1', 'Created', '{}')",
        )
        .await
        .unwrap();
    let log = relay.expect_exit(1, Duration::from_secs(60));
    assert!(
        log.contains(&format!("{topic:?}")),
        "names the topic:\n{log}"
    );
    assert!(log.contains("TOPIC_AUTHORIZATION_FAILED"), "{log}");
    assert!(
        log.contains("--operation Write"),
        "names the ACL to grant:\n{log}"
    );
    assert!(!log.contains(NOWRITE_PASSWORD), "{log}");
    assert!(
        consume_to_end(&[&topic]).is_empty(),
        "nothing reached the topic"
    );
}

/// `delivery = "exactly_once"` for the ACL-restricted user, whose ACLs add
/// only what docs/security.md lists for it: WRITE and DESCRIBE on the
/// transactional ids with the prefix `walrelay-<connector.name>`. `check`
/// says transactions work (tried with `<id>.check`, which that prefix
/// covers), and `run` streams end to end in transactions.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_once_with_the_documented_acls_streams_end_to_end() {
    require_kafka();
    let k = SecuredKafka::from_env();
    let db = TestDb::new("keos").await;
    db.create_outbox("outbox").await;
    let mut names = Names::new("keos");
    // kafka.sh grants walrelay-acl the transactional ids walrelay-acl-*.
    names.connector = format!("acl-{}", names.connector);
    names.topic_prefix = format!("{ACL_TOPIC_PREFIX}{}", names.connector);
    create_topics(&[&names.topic("order"), &names.topic("invoice")]).await;
    let keys = format!(
        "{}\noffsets_topic = \"{ACL_OFFSETS_PREFIX}{}\"\ndelivery = \"exactly_once\"",
        sasl_keys(&k, ACL_USER, ACL_PASSWORD),
        names.connector
    );
    let config = secured_config(&db, &names, &k.sasl_ssl, &keys);
    let (code, out) = check_config(&config);
    assert!(
        out.contains(&format!(
            "the brokers accept transactional id walrelay-{}.check",
            names.connector
        )),
        "{out}"
    );
    assert_eq!(code, Some(0), "{out}");
    stream_and_verify(
        &db,
        &names,
        &config,
        2_000,
        "exactly_once: transactional producer ready",
    )
    .await;
}

/// A user without any `TransactionalId` ACL: `check` fails naming the ACL to
/// grant, and `run` stops with a definite error that says the same, before
/// anything is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_once_without_a_transactional_id_acl_names_the_acl() {
    require_kafka();
    let k = SecuredKafka::from_env();
    let db = TestDb::new("knotxn").await;
    db.create_outbox("outbox").await;
    let mut names = Names::new("knotxn");
    names.topic_prefix = format!("{ACL_TOPIC_PREFIX}{}", names.connector);
    create_topics(&[&names.topic("order")]).await;
    let keys = format!(
        "{}\noffsets_topic = \"{ACL_OFFSETS_PREFIX}{}\"\ndelivery = \"exactly_once\"",
        sasl_keys(&k, NOWRITE_USER, NOWRITE_PASSWORD),
        names.connector
    );
    let config = secured_config(&db, &names, &k.sasl_ssl, &keys);
    let (code, out) = check_config(&config);
    assert_ne!(code, Some(0), "{out}");
    assert!(
        out.contains("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
            || out.contains("Transactional Id authorization failed"),
        "{out}"
    );
    assert!(
        out.contains("--transactional-id"),
        "names the ACL to grant:\n{out}"
    );
    let mut relay = RelayProcess::start(&config, &[]);
    let log = relay.expect_exit(1, Duration::from_secs(90));
    assert!(
        log.contains("--transactional-id"),
        "names the ACL to grant:\n{log}"
    );
    assert!(!log.contains(NOWRITE_PASSWORD), "{log}");
}

/// `check` with `[dead_letter]` for the ACL-restricted user: a dead-letter
/// topic under its ACLs (WRITE and DESCRIBE, as docs/security.md lists for
/// event topics) is reported as existing; one outside them fails naming
/// the topic and the ACL to grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_reports_the_dead_letter_topic_and_its_acl() {
    require_kafka();
    let k = SecuredKafka::from_env();
    let db = TestDb::new("kdlq").await;
    db.create_outbox("outbox").await;
    let mut names = Names::new("kdlq");
    names.topic_prefix = format!("{ACL_TOPIC_PREFIX}{}", names.connector);
    let allowed = names.topic("dead-letter");
    create_topics(&[&allowed]).await;
    let keys = format!(
        "{}\noffsets_topic = \"{ACL_OFFSETS_PREFIX}{}\"",
        sasl_keys(&k, ACL_USER, ACL_PASSWORD),
        names.connector
    );
    let line = |topic: &str| {
        let config = format!(
            "{}\n[dead_letter]\ntopic = \"{topic}\"\n",
            secured_config(&db, &names, &k.sasl_ssl, &keys)
        );
        let (_, report) = check(&write_config(&config));
        let at = report
            .find("dead-letter topic")
            .unwrap_or_else(|| panic!("no dead-letter line:\n{report}"));
        let start = report[..at].rfind('\n').map_or(0, |i| i + 1);
        report[start..].to_owned()
    };
    let ok = line(&allowed);
    assert!(
        ok.starts_with("ok ") && ok.contains(&format!("{allowed} exists")),
        "{ok}"
    );
    let denied_topic = format!("dlq-denied-{}", names.connector);
    let denied = line(&denied_topic);
    assert!(denied.starts_with("FAIL"), "{denied}");
    assert!(
        denied.contains(&format!(
            "may not describe {denied_topic} (TopicAuthorizationFailed)"
        )) && denied.contains(&format!(
            "grant the connector's principal WRITE and DESCRIBE on topic {denied_topic}"
        )),
        "{denied}"
    );
}
