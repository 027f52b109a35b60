//! Writers that keep a ledger: every outbox row is also written to a
//! `ledger` table in the same transaction, and the outbox row is deleted
//! again by the writer's next transaction (the usual outbox pattern). The
//! ledger is the ground truth of what was committed — also across a crash
//! or a failover, where a COMMIT that failed may or may not have happened,
//! and a promoted standby holds only what it received.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};
use tokio_postgres::{Client, NoTls};

use super::OutboxRow;

/// The `ledger` table beside a test's `outbox` (same columns as the outbox
/// row it records).
pub const CREATE_LEDGER: &str = "CREATE TABLE ledger (id uuid PRIMARY KEY, aggregatetype text, \
                                 aggregateid text, payload jsonb)";

/// The outbox table the ledger writers write to (and, with
/// [`CREATE_LEDGER`], the ledger), owned by walrelay.
pub const CREATE_OUTBOX: &str = "CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text NOT \
                                 NULL, aggregateid text, type text NOT NULL, payload jsonb, \
                                 created_at timestamptz NOT NULL DEFAULT now()); \
                                 ALTER TABLE outbox OWNER TO walrelay";

/// A superuser connection to `database` on the first of `ports` (127.0.0.1)
/// that is a writable primary, waiting up to 2 minutes for one (a failover
/// in progress).
pub async fn connect_primary(database: &str, ports: &[u16]) -> Client {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        for port in ports {
            let url = format!("postgres://postgres:postgres@127.0.0.1:{port}/{database}");
            let Ok((client, conn)) = tokio_postgres::connect(&url, NoTls).await else {
                continue;
            };
            tokio::spawn(async move {
                let _ = conn.await;
            });
            if let Ok(row) = client.query_one("SELECT pg_is_in_recovery()", &[]).await
                && !row.get::<_, bool>(0)
            {
                return client;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no writable primary among ports {ports:?} for 2 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Writers committing, until stopped, transactions that insert 1–5 outbox
/// rows (and their ledger rows) and delete the outbox rows of the writer's
/// previous transaction. Payload `{"w": writer, "s": sequence}`. A writer
/// whose connection breaks reconnects to whichever of `ports` is the primary
/// then, and carries on.
pub struct LedgerWriters {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<usize>>,
}

impl LedgerWriters {
    pub fn start(database: &str, ports: &[u16], writers: usize) -> LedgerWriters {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tasks = (0..writers)
            .map(|w| {
                let database = database.to_owned();
                let ports = ports.to_vec();
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut client = connect_primary(&database, &ports).await;
                    let mut rng = rand::rngs::StdRng::seed_from_u64(
                        w as u64 ^ u64::from(std::process::id()),
                    );
                    let mut seq = 0usize;
                    let mut previous: Vec<String> = Vec::new();
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        let n = rng.random_range(1..=5usize);
                        let mut ids = Vec::new();
                        let mut values = Vec::new();
                        for i in 0..n {
                            let id = format!("{:032x}", rng.random::<u128>());
                            let agg = rng.random_range(0..50);
                            let kind = if agg % 3 == 0 { "invoice" } else { "order" };
                            values.push(format!(
                                "('{id}'::uuid, '{kind}', 'agg-{agg}', '{{\"w\": {w}, \"s\": {}}}'::jsonb)",
                                seq + i
                            ));
                            ids.push(format!("'{id}'::uuid"));
                        }
                        let delete = if previous.is_empty() {
                            String::new()
                        } else {
                            format!("DELETE FROM outbox WHERE id IN ({});", previous.join(","))
                        };
                        let values = values.join(",");
                        let sql = format!(
                            "BEGIN;
                             INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
                               SELECT v.id, v.t, v.a, 'Created', v.p
                               FROM (VALUES {values}) AS v(id, t, a, p);
                             INSERT INTO ledger VALUES {values};
                             {delete}
                             COMMIT;"
                        );
                        if client.batch_execute(&sql).await.is_err() {
                            // The server went away (a crash, a failover): the
                            // ledger says whether it committed.
                            client = connect_primary(&database, &ports).await;
                            continue;
                        }
                        previous = ids;
                        seq += n;
                        tokio::time::sleep(Duration::from_millis(rng.random_range(0..20))).await;
                    }
                    seq
                })
            })
            .collect();
        LedgerWriters { stop, tasks }
    }

    /// Stops the writers; returns how many events they committed.
    pub async fn stop(self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut total = 0;
        for t in self.tasks {
            total += t.await.expect("writer task");
        }
        total
    }
}

/// Every ledger row, as the outbox row it was.
pub async fn ledger(client: &Client) -> HashMap<String, OutboxRow> {
    super::rows_of(client, "ledger").await
}
