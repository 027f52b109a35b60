//! The primary/standby pair of `deploy/dev/pg_pair.sh` as the tests that
//! need one see it: its ports (from the environment `pg_pair.sh up`
//! prints) and its commands (crash, promote, restart).

use std::time::Duration;

/// A port of the pair from the environment `pg_pair.sh up` prints
/// (`WALRELAY_PAIR_PRIMARY_PORT`, `WALRELAY_PAIR_STANDBY_PORT`).
pub fn port(name: &str) -> u16 {
    std::env::var(name)
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "{name} is not set: start the pair first: \
                 eval \"$(PG_MAJOR=18 deploy/dev/pg_pair.sh up)\""
            )
        })
}

/// The pair's PostgreSQL major (`WALRELAY_PAIR_MAJOR`, default 18).
pub fn major() -> String {
    std::env::var("WALRELAY_PAIR_MAJOR").unwrap_or_else(|_| "18".into())
}

/// Runs `deploy/dev/pg_pair.sh <command>` on the pair; panics if it fails.
pub fn run(command: &str) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/dev/pg_pair.sh");
    let status = std::process::Command::new(&script)
        .arg(command)
        .env("PG_MAJOR", major())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run deploy/dev/pg_pair.sh");
    assert!(status.success(), "deploy/dev/pg_pair.sh {command} failed");
}

/// An LSN column of `sql` (one `$1` parameter, the slot) on `client`.
pub async fn lsn_of(client: &tokio_postgres::Client, sql: &str, slot: &str) -> Option<u64> {
    client
        .query_opt(sql, &[&slot])
        .await
        .ok()
        .flatten()
        .and_then(|r| r.get::<_, Option<String>>(0))
        .map(|t| super::parse_lsn(&t))
}

/// A superuser session on `port`'s `database` (127.0.0.1), whether it is
/// a primary or a standby, retried for up to 2 minutes (a restart).
pub async fn connect_any(port: u16, database: &str) -> tokio_postgres::Client {
    let url = format!("postgres://postgres:postgres@127.0.0.1:{port}/{database}");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok((client, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
            tokio::spawn(async move {
                let _ = conn.await;
            });
            return client;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "127.0.0.1:{port} refused connections for 2 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates `database` on the primary at `primary`, owned by walrelay, and
/// returns a superuser session to it.
pub async fn create_database(primary: u16, database: &str) -> tokio_postgres::Client {
    let admin = super::ledger::connect_primary("postgres", &[primary]).await;
    admin
        .batch_execute(&format!("CREATE DATABASE {database} OWNER walrelay"))
        .await
        .expect("create database");
    super::ledger::connect_primary(database, &[primary]).await
}

/// Waits until `slot` on `slot_server` has confirmed everything `primary`
/// has written so far (`what` names the wait).
pub async fn await_confirmed(
    primary: &tokio_postgres::Client,
    slot_server: &tokio_postgres::Client,
    slot: &str,
    what: &str,
) {
    let written = super::parse_lsn(
        &primary
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await
            .expect("read the primary's WAL position")
            .get::<_, String>(0),
    );
    super::wait_for(what, Duration::from_secs(180), || async {
        let confirmed = lsn_of(
            slot_server,
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            slot,
        )
        .await?;
        (confirmed >= written).then_some(())
    })
    .await;
}
