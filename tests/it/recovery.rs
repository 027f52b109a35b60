//! Start-up and outage recovery: what is stored, what operators can see, and
//! how a dead connection is noticed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use support::*;

/// The value of a metric sample, if present.
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(name)
            .filter(|rest| rest.starts_with('{'))
            .and_then(|rest| rest.rsplit_once(' '))
            .and_then(|(_, v)| v.parse().ok())
    })
}

/// After `--accept-slot-position`, the accepted position is in the offset
/// store before streaming starts, so the next ordinary start is not refused
/// again — even when nothing was published in between (an idle database).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_slot_position_is_stored_at_once() {
    require_kafka();
    let db = TestDb::new("accept").await;
    db.create_outbox("outbox").await;
    let names = Names::new("accept");
    // Status updates (and with them idle offset writes) only every few
    // seconds, so only the accept itself can store a position in the short
    // life of the accepting process below.
    let config = relay_config(&db, &names, "", "")
        .replace("status_interval = \"200ms\"", "status_interval = \"30s\"");
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", START).await;
    db.client
        .batch_execute(
            "INSERT INTO outbox VALUES (gen_random_uuid(), 'order', 'a', 'Created', '{}')",
        )
        .await
        .unwrap();
    consume(&[&names.topic("order")], 1, START, Duration::ZERO);
    assert!(relay.stop().success());

    // The slot is recreated by hand, ahead of the stored offset.
    db.client
        .batch_execute(&format!(
            "SELECT pg_drop_replication_slot('{0}'); \
             SELECT pg_create_logical_replication_slot('{0}', 'pgoutput')",
            names.slot
        ))
        .await
        .unwrap();
    let mut refused = RelayProcess::start_with(&relay.config_path, &[]);
    refused.expect_exit(1, START);

    // Processes of this test share one log file: count the sessions.
    let sessions = |log: &str| log.matches(" streaming slot=").count();
    let mut accepted = RelayProcess::start_with(&relay.config_path, &["--accept-slot-position"]);
    wait_for("the accepting process to stream", START, || {
        let streaming = sessions(&accepted.log()) == 2;
        async move { streaming.then_some(()) }
    })
    .await;
    accepted.kill9();

    let refusals = |log: &str| log.matches("refusing to start").count();
    let refused_before = refusals(&accepted.log());
    let mut ordinary = RelayProcess::start_with(&relay.config_path, &[]);
    wait_for("an ordinary restart to stream", START, || {
        let log = ordinary.log();
        assert_eq!(
            refusals(&log),
            refused_before,
            "the ordinary restart was refused again: {log}"
        );
        let streaming = sessions(&log) == 3;
        async move { streaming.then_some(()) }
    })
    .await;
    let id = "00000000-0000-4000-8000-0000000000aa";
    db.client
        .batch_execute(&format!(
            "INSERT INTO outbox VALUES ('{id}', 'order', 'b', 'Created', '{{}}')"
        ))
        .await
        .unwrap();
    let consumed = consume(&[&names.topic("order")], 2, START, Duration::ZERO);
    assert!(
        consumed
            .iter()
            .any(|c| c.header_str("id").as_deref() == Some(id)),
        "{consumed:?}"
    );
    assert!(ordinary.stop().success());
}

/// Issue 40: `WALRELAY_ACCEPT_SLOT_POSITION` is `--accept-slot-position`
/// where the command line is fixed (a Kubernetes container's args, a systemd
/// unit): `false` still refuses, `true` accepts (and warns to unset it), a
/// value that is not a boolean is a usage error (exit 2), not a silent no.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_accept_environment_variable_is_the_flag() {
    require_kafka();
    let db = TestDb::new("accept_env").await;
    db.create_outbox("outbox").await;
    let names = Names::new("accept_env");
    let mut relay = RelayProcess::start(&relay_config(&db, &names, "", ""), &[]);
    relay.wait_log("streaming", START).await;
    db.client
        .batch_execute(
            "INSERT INTO outbox VALUES (gen_random_uuid(), 'order', 'a', 'Created', '{}')",
        )
        .await
        .unwrap();
    consume(&[&names.topic("order")], 1, START, Duration::ZERO);
    assert!(relay.stop().success());
    db.client
        .batch_execute(&format!(
            "SELECT pg_drop_replication_slot('{0}'); \
             SELECT pg_create_logical_replication_slot('{0}', 'pgoutput')",
            names.slot
        ))
        .await
        .unwrap();
    let env = "WALRELAY_ACCEPT_SLOT_POSITION";
    let mut typo = RelayProcess::start_with_env(&relay.config_path, &[], &[(env, "ture")]);
    typo.expect_exit(2, START);
    let mut refused = RelayProcess::start_with_env(&relay.config_path, &[], &[(env, "false")]);
    let log = refused.expect_exit(1, START);
    assert!(log.contains("refusing to start"), "{log}");

    let mut accepted = RelayProcess::start_with_env(&relay.config_path, &[], &[(env, "true")]);
    accepted.wait_log(" streaming slot=", START).await;
    let log = accepted.own_log();
    assert!(
        log.contains("--accept-slot-position was given")
            && log.contains("WALRELAY_ACCEPT_SLOT_POSITION is set"),
        "{log}"
    );
    let id = "00000000-0000-4000-8000-0000000000ab";
    db.client
        .batch_execute(&format!(
            "INSERT INTO outbox VALUES ('{id}', 'order', 'b', 'Created', '{{}}')"
        ))
        .await
        .unwrap();
    let consumed = consume(&[&names.topic("order")], 2, START, Duration::ZERO);
    assert!(
        consumed
            .iter()
            .any(|c| c.header_str("id").as_deref() == Some(id)),
        "{consumed:?}"
    );
    assert!(accepted.stop().success());
}

/// While Kafka is unreachable no session can start, yet the slot's gauges
/// keep following the slot (lag grows as WAL is written) and their age
/// stays small. The failed attempts are session errors, but no streaming
/// session ended: they are not restarts (alert `WalrelayRestarting`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_gauges_stay_fresh_while_kafka_is_unreachable() {
    let db = TestDb::new("gauges").await;
    db.create_outbox("outbox").await;
    let names = Names::new("gauges");
    db.client
        .batch_execute(&format!(
            "SELECT pg_create_logical_replication_slot('{}', 'pgoutput')",
            names.slot
        ))
        .await
        .unwrap();
    let addr = free_local_addr();
    let config = relay_config(&db, &names, "", &format!("[health]\nlisten = \"{addr}\"")).replace(
        &format!("brokers = \"{}\"", kafka_brokers()),
        "brokers = \"127.0.0.1:1\"",
    );
    assert!(config.contains("127.0.0.1:1\""));
    let _relay = RelayProcess::start(&config, &[]);

    let lag_of = |metrics: &str| sample(metrics, "walrelay_slot_lag_bytes").unwrap_or(-1.0);
    let first = wait_for("a slot lag reading without Kafka", START, || {
        let m = http_get(&addr, "/metrics");
        async move { (lag_of(&m) >= 0.0).then_some(lag_of(&m)) }
    })
    .await;
    db.client
        .batch_execute(
            "CREATE TABLE filler AS SELECT g, md5(g::text) FROM generate_series(1, 20000) g",
        )
        .await
        .unwrap();
    let metrics = wait_for("the slot lag to grow without Kafka", START, || {
        let m = http_get(&addr, "/metrics");
        async move { (lag_of(&m) > first).then_some(m) }
    })
    .await;
    let age = sample(&metrics, "walrelay_slot_poll_age_seconds")
        .unwrap_or_else(|| panic!("no poll age in:\n{metrics}"));
    assert!(age < 30.0, "stale slot gauges: {age} s\n{metrics}");
    assert!(
        metrics.contains("status=\"reserved\"} 1"),
        "wal_status is known: {metrics}"
    );
    let metrics = wait_for("a failed session attempt to be counted", START, || {
        let m = http_get(&addr, "/metrics");
        async move { (sample(&m, "walrelay_session_errors_total")? >= 1.0).then_some(m) }
    })
    .await;
    assert_eq!(
        sample(&metrics, "walrelay_streaming_session_errors_total"),
        Some(0.0),
        "{metrics}"
    );
}

/// Sessions PostgreSQL has counted for `db` (`pg_stat_database.sessions`,
/// PostgreSQL 14+): every connection made to it, ended ones included.
async fn sessions(db: &TestDb) -> i64 {
    db.client
        .query_one(
            "SELECT sessions FROM pg_stat_database WHERE datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// The slot watcher's query fails on every connection while connecting
/// works (here walrelay's role may not read `pg_stat_replication_slots`, as
/// after a revoked statistics view): it says so once as a warning, naming
/// what failed, backs off instead of reconnecting in a tight loop, and says
/// once that it recovered when the grant is back; the connector streams
/// throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_watcher_that_cannot_read_warns_once_backs_off_and_recovers() {
    require_kafka();
    let db = TestDb::new("watchdenied").await;
    db.create_outbox("outbox").await;
    // Only in this test's database: each database has its own pg_catalog.
    db.client
        .batch_execute("REVOKE SELECT ON pg_catalog.pg_stat_replication_slots FROM PUBLIC")
        .await
        .unwrap();
    let names = Names::new("watchdenied");
    let addr = free_local_addr();
    let mut relay = RelayProcess::start(
        &relay_config(&db, &names, "", &format!("[health]\nlisten = \"{addr}\"")),
        &[],
    );
    relay.wait_log("streaming", START).await;
    relay
        .wait_log("slot watcher cannot read the slot", START)
        .await;
    let warnings = |log: &str| {
        log.lines()
            .filter(|l| l.contains(" WARN ") && l.contains("slot watcher"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let said = warnings(&relay.log());
    assert_eq!(said.len(), 1, "{said:#?}");
    assert!(
        said[0].contains("permission denied for view pg_stat_replication_slots")
            && said[0].contains("walrelay_slot_* gauges keep their last values"),
        "{}",
        said[0]
    );

    // Backing off (100 ms doubling to 2 s in the test configuration): a
    // handful of connections in 6 s (3 here), where reconnecting at once made
    // dozens (45).
    let before = sessions(&db).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let made = sessions(&db).await - before;
    assert!(made <= 10, "{made} sessions in 6 s:\n{}", relay.log());
    assert_eq!(
        warnings(&relay.log()).len(),
        1,
        "said once:\n{}",
        relay.log()
    );
    let metrics = http_get(&addr, "/metrics");
    assert!(
        sample(&metrics, "walrelay_slot_poll_age_seconds").is_none(),
        "never read: no age\n{metrics}"
    );
    assert!(metrics.contains("walrelay_healthy{connector"), "{metrics}");
    assert_eq!(sample(&metrics, "walrelay_healthy"), Some(1.0), "{metrics}");

    db.client
        .batch_execute("GRANT SELECT ON pg_catalog.pg_stat_replication_slots TO walrelay")
        .await
        .unwrap();
    relay.wait_log("slot watcher recovered", START).await;
    let metrics = http_get(&addr, "/metrics");
    assert!(
        sample(&metrics, "walrelay_slot_poll_age_seconds").is_some_and(|age| age < 10.0),
        "{metrics}"
    );
    assert!(
        sample(&metrics, "walrelay_slot_lag_bytes").is_some(),
        "{metrics}"
    );
    assert_eq!(warnings(&relay.log()).len(), 1, "{}", relay.log());
    assert!(relay.stop().success(), "{}", relay.log());
}

/// A TCP proxy whose existing connections can be frozen: bytes stop flowing
/// both ways but neither side sees a FIN or RST — a half-open connection, as
/// when a peer or a middlebox disappears. New connections flow normally.
/// It tells replication connections (their startup packet asks for
/// `replication=database`; the test turns TLS off so it can be read) from
/// the others, so that one kind can be frozen alone.
struct FreezingProxy {
    port: u16,
    connections: std::sync::Arc<std::sync::Mutex<Vec<std::sync::Arc<Proxied>>>>,
}

/// One proxied connection's state.
#[derive(Default)]
struct Proxied {
    frozen: std::sync::atomic::AtomicBool,
    replication: std::sync::atomic::AtomicBool,
}

impl FreezingProxy {
    async fn start(upstream_port: u16) -> FreezingProxy {
        use std::sync::{Arc, Mutex};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections: Arc<Mutex<Vec<Arc<Proxied>>>> = Arc::default();
        let all = connections.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream_port)).await
                else {
                    continue;
                };
                let conn = Arc::new(Proxied::default());
                all.lock().unwrap().push(conn.clone());
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pump(cr, sw, conn.clone(), true));
                tokio::spawn(pump(sr, cw, conn, false));
            }
        });
        FreezingProxy { port, connections }
    }

    /// Freezes every connection made so far (`replication_only`: only the
    /// replication connections among them).
    fn freeze_existing(&self, replication_only: bool) {
        use std::sync::atomic::Ordering;
        for c in self.connections.lock().unwrap().iter() {
            if !replication_only || c.replication.load(Ordering::SeqCst) {
                c.frozen.store(true, Ordering::SeqCst);
            }
        }
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    conn: std::sync::Arc<Proxied>,
    from_client: bool,
) {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    let mut first = from_client;
    loop {
        if conn.frozen.load(Ordering::SeqCst) {
            // Hold both halves open forever, reading and writing nothing.
            std::future::pending::<()>().await;
        }
        let n = tokio::select! {
            r = from.read(&mut buf) => r,
            _ = tokio::time::sleep(Duration::from_millis(50)) => continue,
        };
        match n {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => {
                if std::mem::take(&mut first)
                    && buf[..n]
                        .windows(21)
                        .any(|w| w == b"replication\0database\0")
                {
                    conn.replication.store(true, Ordering::SeqCst);
                }
                if conn.frozen.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                if to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Starts walrelay with every PostgreSQL connection through a
/// [`FreezingProxy`], TLS off so the proxy can tell the connections apart,
/// streams one event, then freezes the existing connections (only the
/// replication connection with `replication_only`) and commits another:
/// returns the relay once that one is in Kafka, with the database (dropping
/// it ends the relay's connections: keep it until the relay has stopped).
async fn freeze_and_recover(prefix: &str, replication_only: bool) -> (RelayProcess, TestDb) {
    require_kafka();
    let db = TestDb::new(prefix).await;
    db.create_outbox("outbox").await;
    let names = Names::new(prefix);
    let proxy = FreezingProxy::start(pg_port()).await;
    let config = relay_config(&db, &names, "", "");
    let direct = format!("port = {}\n", pg_port());
    assert!(config.contains(&direct));
    let config = config.replace(
        &direct,
        &format!("port = {}\nsslmode = \"disable\"\n", proxy.port),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", START).await;
    let insert =
        |id: &str| format!("INSERT INTO outbox VALUES ('{id}', 'order', 'a', 'Created', '{{}}')");
    let before = "00000000-0000-4000-8000-000000000001";
    db.client.batch_execute(&insert(before)).await.unwrap();
    consume(&[&names.topic("order")], 1, START, Duration::ZERO);

    proxy.freeze_existing(replication_only);
    let after = "00000000-0000-4000-8000-000000000002";
    db.client.batch_execute(&insert(after)).await.unwrap();
    // wal_sender_timeout (10 s) frees the slot on the server side; walrelay
    // gives up on the silent connection after 30 s and reconnects.
    let consumed = consume(
        &[&names.topic("order")],
        2,
        Duration::from_secs(150),
        Duration::ZERO,
    );
    assert!(
        consumed
            .iter()
            .any(|c| c.header_str("id").as_deref() == Some(after)),
        "the event after the connection froze never arrived: {consumed:?}\n{}",
        relay.log()
    );
    (relay, db)
}

/// The replication connection goes half-open (nothing flows, nothing
/// closes): walrelay notices the silence, reconnects and streams on,
/// instead of waiting for the kernel's TCP timeouts (~15 minutes) with a
/// green health check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_connection_is_noticed_and_replaced() {
    let (mut relay, _db) = freeze_and_recover("halfopen", true).await;
    assert!(
        relay.log().contains("presumed dead"),
        "the dead connection is named in the log: {}",
        relay.log()
    );
    assert!(relay.stop().success());
}

/// Every connection goes half-open, the lease connection too: the server
/// still grants the lease to the frozen connection (the proxy answers its
/// keepalives), so walrelay, having given the lease up within seconds,
/// finds its own previous lease connection holding it, terminates it, and
/// streams on — instead of waiting as a standby behind itself forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_lease_connection_of_its_own_does_not_block_it() {
    let (mut relay, _db) = freeze_and_recover("halflease", false).await;
    let log = relay.log();
    assert!(log.contains("lost the lease"), "{log}");
    assert!(
        log.contains("terminated this instance's previous lease connection"),
        "{log}"
    );
    assert!(relay.stop().success());
}
