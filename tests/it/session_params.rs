//! Role and database defaults for output formats (`bytea_output`,
//! `DateStyle`, `TimeZone`) cannot break routing: both of walrelay's
//! connections start with their own settings, which outrank those defaults.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use secrecy::SecretString;
use support::*;
use walrelay::pg::wire::{ConnectParams, WireConnection};

/// A test database whose defaults — for everyone, and for the `walrelay`
/// role in it — are the output formats the router cannot read.
async fn hostile_db(prefix: &str) -> TestDb {
    let db = TestDb::new(prefix).await;
    let name = &db.name;
    db.client
        .batch_execute(&format!(
            "ALTER DATABASE {name} SET bytea_output = 'escape';
             ALTER DATABASE {name} SET DateStyle = 'SQL, DMY';
             ALTER DATABASE {name} SET TimeZone = 'Asia/Kolkata';
             ALTER DATABASE {name} SET IntervalStyle = 'sql_standard';
             ALTER ROLE walrelay IN DATABASE {name} SET bytea_output = 'escape';"
        ))
        .await
        .expect("set database defaults");
    db
}

fn params(db: &TestDb) -> ConnectParams {
    ConnectParams {
        host: "127.0.0.1".into(),
        port: pg_port(),
        user: "walrelay".into(),
        password: Some(SecretString::from("walrelay")),
        database: db.name.clone(),
        application_name: "walrelay-test".into(),
        connect_timeout: Duration::from_secs(10),
        max_message_size: 1 << 20,
        tls: Default::default(),
        target: Default::default(),
    }
}

const SETTINGS: &str = "SELECT current_setting('bytea_output'), current_setting('DateStyle'), \
     current_setting('TimeZone'), current_setting('IntervalStyle')";
const EXPECTED: [&str; 4] = ["hex", "ISO, MDY", "UTC", "postgres"];

#[tokio::test]
async fn both_connections_override_role_and_database_defaults() {
    let db = hostile_db("sessdefaults").await;
    // The defaults do apply to an ordinary session of the role...
    let (plain, conn) = tokio_postgres::connect(
        &format!(
            "postgres://walrelay:walrelay@127.0.0.1:{}/{}",
            pg_port(),
            db.name
        ),
        tokio_postgres::NoTls,
    )
    .await
    .expect("plain connection");
    tokio::spawn(conn);
    let row = plain.query_one(SETTINGS, &[]).await.expect("settings");
    assert_eq!(row.get::<_, String>(0), "escape");
    assert_eq!(row.get::<_, String>(1), "SQL, DMY");

    // ...but not to walrelay's catalog connection,
    let catalog = walrelay::pg::catalog::connect(&params(&db))
        .await
        .expect("catalog connection");
    let row = catalog.query_one(SETTINGS, &[]).await.expect("settings");
    let got: Vec<String> = (0..4).map(|i| row.get(i)).collect();
    assert_eq!(got, EXPECTED, "catalog connection");

    // ...nor to its replication connection (where the walsender formats
    // pgoutput's text values).
    let mut repl = WireConnection::connect(&params(&db), true)
        .await
        .expect("replication connection");
    let rows = repl.simple_query(SETTINGS).await.expect("settings");
    let got: Vec<String> = rows[0]
        .iter()
        .map(|v| v.clone().unwrap_or_default())
        .collect();
    assert_eq!(got, EXPECTED, "replication connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bytea_outbox_with_a_timestamp_routes_despite_database_defaults() {
    require_kafka();
    let db = hostile_db("sessroute").await;
    db.client
        .batch_execute(
            "CREATE TABLE outbox (
                id uuid PRIMARY KEY,
                aggregatetype text NOT NULL,
                aggregateid text NOT NULL,
                type text NOT NULL,
                payload bytea,
                created_at timestamptz NOT NULL);
             ALTER TABLE outbox OWNER TO walrelay;",
        )
        .await
        .expect("create outbox");
    let names = Names::new("sessroute");
    let config = relay_config(&db, &names, "timestamp_column = \"created_at\"", "");
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", START).await;

    // Bytes that the escape format would mangle (NUL, backslash, high bytes).
    let payload: Vec<u8> = vec![0x00, b'\\', 0xff, b'{', b'}', 0x7f, 0x80];
    db.client
        .execute(
            "INSERT INTO outbox VALUES ('00000000-0000-4000-8000-0000000000b1', 'order', 'agg-1', \
             'Created', $1, '2026-11-30 06:32:03.123+05:30')",
            &[&payload],
        )
        .await
        .expect("insert");

    let consumed = consume(
        &[&names.topic("order")],
        1,
        Duration::from_secs(60),
        Duration::from_secs(1),
    );
    assert!(relay.is_running(), "walrelay stopped:\n{}", relay.log());
    assert_eq!(consumed.len(), 1, "log:\n{}", relay.log());
    let rec = &consumed[0];
    assert_eq!(
        rec.value.as_deref(),
        Some(payload.as_slice()),
        "payload bytes"
    );
    // 2026-11-30 01:02:03.123 UTC
    assert_eq!(rec.timestamp, Some(1_796_000_523_123), "record timestamp");
    assert!(relay.stop().success());
}
