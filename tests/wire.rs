//! Our replication-mode connection against the real server: every
//! authentication method the dev cluster offers, TCP and Unix socket.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use secrecy::SecretString;
use support::*;
use walrelay::pg::replication::ReplicationClient;
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
        .unwrap_or_else(|_| format!("{}/.state/pg{}/run", env!("CARGO_MANIFEST_DIR"), pg_major()));
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
