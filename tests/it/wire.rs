//! Our replication-mode connection against the real server: every
//! authentication method the dev cluster offers, TCP and Unix socket.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use secrecy::SecretString;
use support::*;
use walrelay::config::SslMode;
use walrelay::pg::replication::ReplicationClient;
use walrelay::pg::tls::TlsSettings;
use walrelay::pg::wire::{ConnectParams, WireError};

fn params(host: &str, user: &str, password: Option<&str>) -> ConnectParams {
    ConnectParams {
        host: host.into(),
        port: pg_port(),
        user: user.into(),
        password: password.map(SecretString::from),
        database: "postgres".into(),
        application_name: "walrelay-test".into(),
        connect_timeout: Duration::from_secs(10),
        max_message_size: 1 << 20,
        tls: Default::default(),
        target: Default::default(),
    }
}

async fn identify(p: &ConnectParams) -> Result<String, WireError> {
    let mut client = ReplicationClient::connect(p).await?;
    assert_eq!(
        client.server_version_num() / 10000,
        pg_major().parse::<u32>().unwrap()
    );
    Ok(client.identify_system().await?.system_id)
}

#[tokio::test]
async fn authenticates_with_scram_md5_cleartext_and_trust() {
    let cases = [
        ("walrelay", Some("walrelay")),             // SCRAM-SHA-256
        ("walrelay_md5", Some("walrelay_md5")),     // MD5
        ("walrelay_plain", Some("walrelay_plain")), // cleartext password
        ("walrelay_trust", None),                   // trust
    ];
    let mut ids = Vec::new();
    for (user, password) in cases {
        let id = identify(&params("127.0.0.1", user, password))
            .await
            .unwrap_or_else(|e| panic!("{user}: {e}"));
        assert!(id.parse::<u64>().is_ok(), "{user}: system id {id:?}");
        ids.push(id);
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "one cluster, one system identifier");
}

#[tokio::test]
async fn a_wrong_password_is_a_definite_error_without_the_password_in_it() {
    for user in ["walrelay", "walrelay_md5", "walrelay_plain"] {
        let err = identify(&params("127.0.0.1", user, Some("not-the-password-x7")))
            .await
            .expect_err("wrong password must fail");
        assert!(
            !err.is_transient(),
            "{user}: retrying a bad password cannot help: {err}"
        );
        assert_eq!(err.sqlstate(), Some("28P01"), "{user}: {err}");
        let text = format!("{err} {err:?}");
        assert!(
            !text.contains("not-the-password-x7"),
            "{user}: password leaked: {text}"
        );
    }
    let err = identify(&params("127.0.0.1", "walrelay", None))
        .await
        .expect_err("no password");
    assert!(err.to_string().contains("postgres.password"), "{err}");
}

#[tokio::test]
async fn connects_over_the_unix_socket() {
    let dir = std::env::var("WALRELAY_PG_SOCKET_DIR")
        .unwrap_or_else(|_| format!("/tmp/walrelay-pg-{}", pg_port()));
    identify(&params(&dir, "walrelay", Some("walrelay")))
        .await
        .unwrap_or_else(|e| panic!("{dir}: {e}"));
}

#[tokio::test]
async fn an_unreachable_server_is_transient_and_names_the_address() {
    let mut p = params("127.0.0.1", "walrelay", Some("walrelay"));
    p.port = 1;
    let err = identify(&p).await.expect_err("nothing listens on port 1");
    assert!(err.is_transient(), "{err}");
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
}

fn tls_params(host: &str, mode: SslMode, ca: Option<&str>) -> ConnectParams {
    let mut p = params(host, "walrelay_tls", Some("walrelay_tls"));
    p.tls = TlsSettings {
        mode,
        root_cert: ca.map(pg_tls_file),
        ..TlsSettings::default()
    };
    p
}

/// Whether the server sees the session of `application_name` encrypted.
async fn server_sees_tls(application_name: &str) -> bool {
    let admin = pg_connect("postgres").await;
    let row = admin
        .query_one(
            "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = $1",
            &[&application_name],
        )
        .await
        .unwrap();
    row.get::<_, Option<bool>>(0).unwrap_or(false)
}

/// `walrelay_tls` is admitted over TLS only (`hostnossl … reject`), so a
/// successful connection proves encryption; the certificate names 127.0.0.1
/// and not `localhost`, and `other-ca.pem` did not sign it.
#[tokio::test]
async fn sslmodes_encrypt_and_verify_like_libpq() {
    use SslMode::*;
    let accepted = [
        ("127.0.0.1", Prefer, None),
        ("127.0.0.1", Require, None),
        ("127.0.0.1", VerifyCa, Some("ca.pem")),
        ("localhost", VerifyCa, Some("ca.pem")),
        ("127.0.0.1", VerifyFull, Some("ca.pem")),
    ];
    for (host, mode, ca) in accepted {
        let mut p = tls_params(host, mode, ca);
        p.application_name = unique("walrelay_tls_test");
        let mut client = ReplicationClient::connect(&p)
            .await
            .unwrap_or_else(|e| panic!("{host} {mode:?}: {e}"));
        client.identify_system().await.unwrap();
        assert!(
            server_sees_tls(&p.application_name).await,
            "{host} {mode:?}"
        );
        let catalog = walrelay::pg::catalog::connect(&p)
            .await
            .unwrap_or_else(|e| panic!("catalog {host} {mode:?}: {e}"));
        let ssl: bool = catalog
            .query_one(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(ssl, "catalog {host} {mode:?}");
    }

    let refused = [
        ("localhost", VerifyFull, Some("ca.pem"), "certificate"),
        ("127.0.0.1", VerifyFull, Some("other-ca.pem"), "certificate"),
        ("127.0.0.1", VerifyCa, Some("other-ca.pem"), "certificate"),
    ];
    for (host, mode, ca, says) in refused {
        let p = tls_params(host, mode, ca);
        let err = identify(&p)
            .await
            .expect_err("the certificate must be refused");
        assert!(!err.is_transient(), "{host} {mode:?}: {err}");
        let text = err.to_string();
        assert!(
            text.contains(says) && text.contains(mode.as_str()),
            "{text}"
        );
        let err = walrelay::pg::catalog::connect(&p)
            .await
            .expect_err("the catalog connection refuses it too");
        assert!(!err.is_transient(), "catalog {host} {mode:?}: {err}");
    }

    // Plaintext is refused by the server for this role: a definite error.
    let err = identify(&tls_params("127.0.0.1", Disable, None))
        .await
        .expect_err("hostnossl rejects walrelay_tls");
    assert!(!err.is_transient(), "{err}");
    assert_eq!(err.sqlstate(), Some("28000"), "{err}");
}
