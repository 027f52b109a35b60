//! Relay behaviour against the real services: what is published, what stops
//! the connector, and how the slot position is protected.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use support::*;

async fn insert(db: &TestDb, sql: &str) {
    db.client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

fn ids_of(consumed: &[Consumed]) -> Vec<String> {
    consumed.iter().filter_map(|c| c.header_str("id")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollbacks_deletes_and_updates_follow_the_outbox_rules() {
    require_kafka();
    let db = TestDb::new("rules").await;
    db.create_outbox("outbox").await;
    let names = Names::new("rules");
    let mut relay = RelayProcess::start(&relay_config(&db, &names, "", ""), &[]);
    relay.wait_log("streaming", START).await;

    let row = |id: &str, agg: &str| {
        format!(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('{id}', 'order', '{agg}', 'Created', '{{\"n\": 1}}')"
        )
    };
    let rolled_back = "00000000-0000-4000-8000-000000000001";
    let deleted = "00000000-0000-4000-8000-000000000002";
    let updated = "00000000-0000-4000-8000-000000000003";
    let marker = "00000000-0000-4000-8000-000000000004";
    insert(&db, &format!("BEGIN; {}; ROLLBACK", row(rolled_back, "a"))).await;
    insert(
        &db,
        &format!(
            "BEGIN; {}; DELETE FROM outbox WHERE id = '{deleted}'; COMMIT",
            row(deleted, "b")
        ),
    )
    .await;
    insert(&db, &row(updated, "c")).await;
    insert(
        &db,
        &format!("UPDATE outbox SET payload = '{{\"n\": 2}}' WHERE id = '{updated}'"),
    )
    .await;
    insert(&db, &row(marker, "d")).await;

    let consumed = consume(
        &[&names.topic("order")],
        3,
        Duration::from_secs(60),
        Duration::from_secs(2),
    );
    let mut ids = ids_of(&consumed);
    ids.sort();
    assert_eq!(
        ids,
        vec![deleted.to_owned(), updated.to_owned(), marker.to_owned()],
        "{consumed:?}"
    );
    let updated_rec = consumed
        .iter()
        .find(|c| c.header_str("id").as_deref() == Some(updated))
        .unwrap();
    assert_eq!(
        updated_rec.value.as_deref(),
        Some(&b"{\"n\": 1}"[..]),
        "the insert is published, not the update"
    );
    relay
        .wait_log("an outbox row was updated", Duration::from_secs(10))
        .await;
    assert!(relay.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_policy_fail_stops_the_connector() {
    require_kafka();
    let db = TestDb::new("updfail").await;
    db.create_outbox("outbox").await;
    let names = Names::new("updfail");
    let mut relay =
        RelayProcess::start(&relay_config(&db, &names, "on_update = \"fail\"", ""), &[]);
    relay.wait_log("streaming", START).await;
    insert(
        &db,
        "INSERT INTO outbox VALUES (gen_random_uuid(), 'order', 'a', 'Created', '{}')",
    )
    .await;
    insert(&db, "UPDATE outbox SET type = 'Changed'").await;
    relay.expect_exit(1, Duration::from_secs(30));
    assert!(
        relay.log().contains("on_update = \\\"fail\\\"")
            || relay.log().contains("on_update = \"fail\""),
        "{}",
        relay.log()
    );
}

/// Parses the `commit LSN X/Y` a route error names.
fn lsn_in(log: &str) -> u64 {
    let at = log
        .find("commit LSN ")
        .unwrap_or_else(|| panic!("no commit LSN in log:\n{log}"));
    let rest = &log[at + "commit LSN ".len()..];
    let end = rest
        .find(|c: char| !(c.is_ascii_hexdigit() || c == '/'))
        .unwrap_or(rest.len());
    parse_lsn(&rest[..end])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_aggregate_id_stops_the_connector_before_the_slot_passes_it() {
    require_kafka();
    let db = TestDb::new("nullagg").await;
    db.create_outbox("outbox").await;
    let names = Names::new("nullagg");
    let config = relay_config(&db, &names, "", "");
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", START).await;

    let good = "00000000-0000-4000-8000-00000000000a";
    let after = "00000000-0000-4000-8000-00000000000c";
    insert(
        &db,
        &format!("INSERT INTO outbox VALUES ('{good}', 'order', 'a', 'Created', '{{}}')"),
    )
    .await;
    insert(&db, "INSERT INTO outbox VALUES ('00000000-0000-4000-8000-00000000000b', 'order', NULL, 'Created', '{}')").await;
    insert(
        &db,
        &format!("INSERT INTO outbox VALUES ('{after}', 'order', 'c', 'Created', '{{}}')"),
    )
    .await;

    let log = relay.expect_exit(1, Duration::from_secs(30));
    assert!(
        log.contains("public.outbox") && log.contains("column aggregateid"),
        "{log}"
    );
    let bad_commit = lsn_in(&log);
    let confirmed = db.confirmed_flush(&names.slot).await.expect("slot");
    assert!(
        confirmed <= bad_commit,
        "slot confirmed {confirmed:X} past the unroutable row at {bad_commit:X}"
    );

    let consumed = consume(
        &[&names.topic("order")],
        1,
        Duration::from_secs(30),
        Duration::from_secs(2),
    );
    assert_eq!(
        ids_of(&consumed),
        vec![good.to_owned()],
        "only the row before the bad one is published"
    );

    // A restart meets the same row again: nothing was skipped.
    let mut again = RelayProcess::start_with(&relay.config_path, &[]);
    again.expect_exit(1, Duration::from_secs(60));
    assert_eq!(
        db.confirmed_flush(&names.slot).await.expect("slot"),
        confirmed
    );
}

/// Issue 11: the error names the row (its id) and the *end* LSN of its
/// transaction with the literal SQL that skips it; following it skips
/// exactly that transaction — the next one is published, the bad row is
/// not met again. (Advancing to the commit LSN, which the error used to
/// print, replays the transaction.) Writers commit before, during and
/// after the incident, and the runbook's last step re-publishes the
/// transaction's good rows: every row but the bad one reaches Kafka,
/// including those the first run sent just before it stopped (the advance
/// moves the slot past them, so they must have been delivered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unroutable_row_names_its_id_and_the_end_lsn_that_skips_its_transaction() {
    require_kafka();
    let db = TestDb::new("skiptx").await;
    db.create_outbox("outbox").await;
    let names = Names::new("skiptx");
    let mut relay = RelayProcess::start(&relay_config(&db, &names, "", ""), &[]);
    relay.wait_log("streaming", START).await;
    let writers = Writers::start(&db);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let skipped = [
        "00000000-0000-4000-8000-0000000000b1",
        "00000000-0000-4000-8000-0000000000b2",
        "00000000-0000-4000-8000-0000000000b3",
    ];
    let bad = skipped[1];
    let next = "00000000-0000-4000-8000-0000000000d4";
    insert(
        &db,
        &format!(
            "BEGIN;
             INSERT INTO outbox VALUES ('{}', 'order', 'a', 'Created', '{{}}');
             INSERT INTO outbox VALUES ('{bad}', 'order', NULL, 'Created', '{{}}');
             INSERT INTO outbox VALUES ('{}', 'order', 'c', 'Created', '{{}}');
             COMMIT;",
            skipped[0], skipped[2]
        ),
    )
    .await;
    let log = relay.expect_exit(1, Duration::from_secs(30));
    let error = log
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("walrelay: "))
        .unwrap_or_else(|| panic!("no error line:\n{log}"));
    assert!(error.contains(&format!("row id {bad}")), "{error}");
    let end = error
        .split("transaction ends at ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no end LSN: {error}"));
    let sql = format!(
        "SELECT pg_replication_slot_advance('{}', '{end}')",
        names.slot
    );
    assert!(error.contains(&sql), "the literal SQL {sql:?}: {error}");
    assert!(parse_lsn(end) > lsn_in(error), "end after commit: {error}");

    // Following it to the letter: advance, then start accepting the slot.
    insert(&db, &format!("{sql};")).await;
    insert(
        &db,
        &format!("INSERT INTO outbox VALUES ('{next}', 'order', 'd', 'Created', '{{}}')"),
    )
    .await;
    let mut again = RelayProcess::start_with(&relay.config_path, &["--accept-slot-position"]);
    again.wait_log("streaming", START).await;
    // Re-publish the transaction's good rows (the one before the bad row
    // reached Kafka before the connector stopped; its second copy is a
    // duplicate consumers drop by id).
    let republish = std::process::Command::new(walrelay_bin())
        .args(["republish", "--config"])
        .arg(&relay.config_path)
        .args([
            "--where",
            &format!("id IN ('{}', '{}')", skipped[0], skipped[2]),
        ])
        .output()
        .expect("run walrelay republish");
    assert!(
        republish.status.success(),
        "republish: {}{}",
        String::from_utf8_lossy(&republish.stdout),
        String::from_utf8_lossy(&republish.stderr)
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    writers.stop().await;
    let end_of_writes = db.current_wal_lsn().await;
    db.wait_confirmed(
        &names.slot,
        end_of_writes,
        "the slot to confirm the writers' last rows",
        START,
    )
    .await;
    assert!(
        again.is_running(),
        "the bad row is not met again:\n{}",
        again.log()
    );
    assert!(again.stop().success(), "{}", again.log());

    // (The bad row's NULL aggregate id is why outbox_rows() cannot read it.)
    let rows: Vec<String> = db
        .client
        .query("SELECT id::text FROM outbox", &[])
        .await
        .expect("read outbox")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let consumed = consume_to_end(&[&names.topic("order"), &names.topic("invoice")]);
    let ids: std::collections::HashSet<String> =
        consumed.iter().filter_map(|c| c.header_str("id")).collect();
    assert!(ids.contains(next), "the next transaction is published");
    assert!(!ids.contains(bad), "the unroutable row is not published");
    // Before the incident, the first run published (and Kafka
    // acknowledged) the row that precedes the bad one in its transaction.
    let first_run: Vec<&Consumed> = consumed
        .iter()
        .filter(|c| {
            c.header_str("id").as_deref() == Some(skipped[0])
                && c.header("walrelay.republished").is_none()
        })
        .collect();
    assert_eq!(
        first_run.len(),
        1,
        "the row before the bad one, streamed once"
    );
    for id in [skipped[0], skipped[2]] {
        assert!(
            consumed
                .iter()
                .any(|c| c.header_str("id").as_deref() == Some(id)
                    && c.header("walrelay.republished").is_some()),
            "{id} is republished"
        );
    }
    let lost: Vec<&String> = rows
        .iter()
        .filter(|id| id.as_str() != bad && !ids.contains(*id))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} routable rows are not in Kafka: {:?}",
        lost.len(),
        rows.len() - 1,
        &lost[..lost.len().min(5)]
    );
    assert!(
        rows.len() > 40,
        "the writers committed rows: {}",
        rows.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_slot_advances_while_another_database_writes() {
    require_kafka();
    let db = TestDb::new("idle").await;
    db.create_outbox("outbox").await;
    let names = Names::new("idle");
    let mut relay = RelayProcess::start(&relay_config(&db, &names, "", ""), &[]);
    relay.wait_log("streaming", START).await;
    let before = db.confirmed_flush(&names.slot).await.expect("slot");

    let other = TestDb::new("idle_other").await;
    other
        .client
        .batch_execute("CREATE TABLE filler AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 20000) g")
        .await
        .expect("write WAL elsewhere");
    let target = other.current_wal_lsn().await;
    assert!(target > before);
    db.wait_confirmed(
        &names.slot,
        target,
        "the idle slot to advance past the other database's WAL",
        Duration::from_secs(60),
    )
    .await;
    assert!(relay.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_or_recreated_slot_is_refused_at_start() {
    require_kafka();
    let db = TestDb::new("recreate").await;
    db.create_outbox("outbox").await;
    let names = Names::new("recreate");
    let config = relay_config(&db, &names, "", "");
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", START).await;
    insert(
        &db,
        "INSERT INTO outbox VALUES (gen_random_uuid(), 'order', 'a', 'Created', '{}')",
    )
    .await;
    consume(
        &[&names.topic("order")],
        1,
        Duration::from_secs(30),
        Duration::ZERO,
    );
    // Let the position reach the offset store, then stop cleanly.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(relay.stop().success());

    // Dropped: the slot is gone but the offset store remembers a position.
    db.client
        .batch_execute(&format!(
            "SELECT pg_drop_replication_slot('{}')",
            names.slot
        ))
        .await
        .expect("drop slot");
    insert(
        &db,
        "INSERT INTO outbox VALUES (gen_random_uuid(), 'order', 'lost', 'Created', '{}')",
    )
    .await;
    let mut dropped = RelayProcess::start_with(&relay.config_path, &[]);
    dropped.expect_exit(1, Duration::from_secs(60));
    assert!(
        dropped
            .log()
            .contains("does not exist, but the offset store says"),
        "{}",
        dropped.log()
    );
    assert!(
        db.confirmed_flush(&names.slot).await.is_none(),
        "the slot must not be recreated silently"
    );

    // Recreated by hand: the new slot is ahead of the stored offset.
    db.client
        .batch_execute(&format!(
            "SELECT pg_create_logical_replication_slot('{}', 'pgoutput')",
            names.slot
        ))
        .await
        .expect("recreate slot");
    let mut recreated = RelayProcess::start_with(&relay.config_path, &[]);
    let log = recreated.expect_exit(1, Duration::from_secs(60));
    assert!(
        log.contains("but Kafka holds events only up to") && log.contains("--accept-slot-position"),
        "{log}"
    );

    // After reconciling, the operator accepts the slot's position explicitly.
    let mut accepted = RelayProcess::start_with(&relay.config_path, &["--accept-slot-position"]);
    accepted.wait_log("streaming", START).await;
    let id = "00000000-0000-4000-8000-0000000000ff";
    insert(
        &db,
        &format!("INSERT INTO outbox VALUES ('{id}', 'order', 'z', 'Created', '{{}}')"),
    )
    .await;
    let consumed = consume(
        &[&names.topic("order")],
        2,
        Duration::from_secs(30),
        Duration::from_secs(1),
    );
    assert!(ids_of(&consumed).contains(&id.to_owned()), "{consumed:?}");
    assert!(accepted.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_each_problem_with_its_fix() {
    require_kafka();
    let db = TestDb::new("check").await;
    let names = Names::new("check");
    let dir = std::env::temp_dir().join(unique("check"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("walrelay.toml");
    std::fs::write(&path, relay_config(&db, &names, "", "")).unwrap();
    let run = || {
        std::process::Command::new(walrelay_bin())
            .args(["check", "--config"])
            .arg(&path)
            .output()
            .expect("run check")
    };
    let out = run();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(
            "FAIL  outbox table public.outbox: outbox table public.outbox does not exist"
        ),
        "{text}"
    );
    // A plaintext broker answers, and is said to be plaintext.
    assert!(
        text.contains("warn  kafka") && text.contains("WITHOUT TLS: records and credentials"),
        "{text}"
    );
    assert!(text.contains("ok    wal_level"), "{text}");
    // sslmode = "prefer" (the default) and a server with TLS: encrypted,
    // but nothing authenticated the server; said the same way.
    assert!(
        text.contains("warn  postgres connection")
            && text.contains("over TLS (TLSv1.")
            && text.contains("sslmode = prefer checks no certificate"),
        "{text}"
    );

    db.create_outbox("outbox").await;
    let out = run();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("all") && text.contains("checks passed"),
        "{text}"
    );

    // Plaintext is allowed but said out loud.
    let plain = relay_config(&db, &names, "", "").replacen(
        "status_interval = \"200ms\"",
        "status_interval = \"200ms\"\nsslmode = \"disable\"",
        1,
    );
    std::fs::write(&path, plain).unwrap();
    let out = run();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "a warning is not a failure: {text}");
    assert!(
        text.contains("warn  postgres connection") && text.contains("WITHOUT TLS"),
        "{text}"
    );
}

#[test]
fn bad_config_exits_2_naming_the_key() {
    let dir = std::env::temp_dir().join(unique("badcfg"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "[connector]\nname = \"x\"\n[postgres]\ndatabase = \"d\"\nslot = \"Bad-Slot\"\n[kafka]\nbrokers = \"k:1\"\n[[outbox]]\ntable = \"outbox\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(walrelay_bin())
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("postgres.slot") && err.contains("bad.toml"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_metrics_show_streaming_and_slot_lag() {
    require_kafka();
    let db = TestDb::new("health").await;
    db.create_outbox("outbox").await;
    let names = Names::new("health");
    let addr = free_local_addr();
    let mut relay = RelayProcess::start(
        &relay_config(&db, &names, "", &format!("[health]\nlisten = \"{addr}\"")),
        &[],
    );
    relay.wait_log("streaming", START).await;
    insert(
        &db,
        "INSERT INTO outbox VALUES (gen_random_uuid(), 'order', 'a', 'Created', '{}')",
    )
    .await;
    consume(
        &[&names.topic("order")],
        1,
        Duration::from_secs(30),
        Duration::ZERO,
    );

    let health = http_get(&addr, "/healthz");
    assert!(
        health.starts_with("HTTP/1.0 200") || health.starts_with("HTTP/1.1 200"),
        "{health}"
    );
    let metrics = wait_for(
        "metrics with the slot lag and the published record",
        Duration::from_secs(30),
        || {
            let m = http_get(&addr, "/metrics");
            let c = format!("{{connector=\"{}\"", names.connector);
            async move {
                (m.contains(&format!("walrelay_records_acked_total{c}}} 1\n"))
                    && m.contains(&format!("walrelay_streaming{c}}} 1\n"))
                    && m.contains(&format!(
                        "walrelay_records_published_by_topic_total{c},topic=\""
                    ))
                    && m.contains(&format!("walrelay_commit_to_ack_seconds_count{c}}} 1\n"))
                    && m.contains("walrelay_kafka_last_ack_age_seconds")
                    && m.contains("walrelay_offset_store_write_age_seconds")
                    && m.contains("walrelay_slot_total_txns_total")
                    && m.contains(&format!(
                        "walrelay_slot_wal_status{c},status=\"reserved\"}} 1"
                    )))
                .then_some(m)
            }
        },
    )
    .await;
    let lag: i64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("walrelay_slot_lag_bytes{")
                .and_then(|r| r.split_once("} "))
                .map(|(_, v)| v)
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no slot lag in:\n{metrics}"));
    assert!(lag >= 0, "slot lag is known once streaming: {lag}");
    assert!(relay.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconnects_when_postgres_drops_the_connection_and_loses_nothing() {
    require_kafka();
    let db = TestDb::new("reconnect").await;
    db.create_outbox("outbox").await;
    let names = Names::new("reconnect");
    let mut relay = RelayProcess::start(&relay_config(&db, &names, "", ""), &[]);
    relay.wait_log("streaming", START).await;

    let writer = tokio::spawn({
        let db_name = db.name.clone();
        async move { write_outbox_load(&db_name, 4, 4_000, 100, Duration::from_millis(10)).await }
    });
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(800)).await;
        db.client
            .batch_execute(&format!(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '{}' AND active_pid IS NOT NULL",
                names.slot
            ))
            .await
            .expect("terminate walsender");
    }
    writer.await.expect("writers");
    let rows = outbox_rows(&db).await;
    let consumed = consume(
        &[&names.topic("order"), &names.topic("invoice")],
        rows.len(),
        Duration::from_secs(120),
        Duration::from_secs(2),
    );
    verify_outbox_delivery(&names, &rows, &consumed);
    assert!(relay.is_running(), "{}", relay.log());
    let log = relay.log();
    assert!(
        log.contains("waiting for PostgreSQL"),
        "the outage is reported:\n{log}"
    );
    assert!(
        log.matches("streaming slot=").count() >= 2,
        "it reconnected:\n{log}"
    );
    assert!(relay.stop().success());
}

/// Peak resident memory of a process, from /proc (kB).
fn peak_rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// One 100,000-row transaction (~100 MB of payload) through a connector
/// capped at 2,000 records / 4 MiB in flight: everything arrives, and the
/// process never holds the transaction in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_transaction_streams_in_bounded_memory() {
    require_kafka();
    let db = TestDb::new("huge").await;
    db.create_outbox("outbox").await;
    let names = Names::new("huge");
    let mut relay = RelayProcess::start(
        &relay_config(&db, &names, "", "").replace(
            "linger = \"2ms\"",
            "linger = \"2ms\"\nmax_in_flight_records = 2000\nmax_in_flight_bytes = \"4MiB\"",
        ),
        &[],
    );
    relay.wait_log("streaming", START).await;
    db.client
        .batch_execute(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
             SELECT gen_random_uuid(), 'order', 'agg-' || (g % 1000), 'Created',
                    jsonb_build_object('n', g, 'pad', repeat('x', 1000))
             FROM generate_series(1, 100000) g",
        )
        .await
        .expect("one big transaction");
    let end = db.current_wal_lsn().await;
    db.wait_confirmed(
        &names.slot,
        end,
        "the huge transaction to be confirmed",
        Duration::from_secs(300),
    )
    .await;
    let peak_kb = peak_rss_kb(relay.child.id());
    let consumed = consume_to_end(&[&names.topic("order")]);
    let ids: std::collections::HashSet<String> =
        consumed.iter().filter_map(|c| c.header_str("id")).collect();
    assert_eq!(ids.len(), 100_000, "every row of the transaction arrived");
    // The payload alone is ~100 MB; holding the transaction would show.
    assert!(
        peak_kb > 0 && peak_kb < 80 * 1024,
        "peak RSS {peak_kb} kB: memory grew with the transaction"
    );
    eprintln!("peak RSS {peak_kb} kB for a 100,000-row (~100 MB) transaction");
    assert!(relay.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_outbox_tables_with_their_own_columns_and_topics() {
    require_kafka();
    let db = TestDb::new("multi").await;
    db.create_outbox("outbox").await;
    db.client
        .batch_execute(
            "CREATE SCHEMA billing AUTHORIZATION walrelay;
             CREATE TABLE billing.events (
                event_id uuid PRIMARY KEY, kind text NOT NULL, invoice text NOT NULL,
                body bytea, happened_at timestamptz NOT NULL);
             ALTER TABLE billing.events OWNER TO walrelay;",
        )
        .await
        .expect("second outbox table");
    let names = Names::new("multi");
    let billing_topic = format!("{}.billing", names.topic_prefix);
    let second = format!(
        r#"
[[outbox]]
table = "billing.events"
id_column = "event_id"
aggregate_type_column = "kind"
aggregate_id_column = "invoice"
type_column = "kind"
payload_column = "body"
topic = "{billing_topic}"
header_columns = ["kind"]
timestamp_column = "happened_at"
"#
    );
    let mut relay = RelayProcess::start(&relay_config(&db, &names, "", &second), &[]);
    relay.wait_log("streaming", START).await;
    // An hour ago, to the millisecond. Not a fixed date: the broker deletes
    // records older than its retention (7 days) at its next retention check.
    let happened_ms = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64)
        - 3_600_000;
    insert(
        &db,
        &format!(
            "BEGIN;
             INSERT INTO outbox VALUES ('00000000-0000-4000-8000-000000000101', 'order', 'o-1', 'Created', '{{\"x\": 1}}');
             INSERT INTO billing.events VALUES ('00000000-0000-4000-8000-000000000102', 'InvoiceIssued', 'inv-9',
                                                '\\x00ff', TIMESTAMPTZ 'epoch' + {happened_ms} * INTERVAL '1 millisecond');
             COMMIT;"
        ),
    )
    .await;
    let orders = consume(
        &[&names.topic("order")],
        1,
        Duration::from_secs(30),
        Duration::from_millis(500),
    );
    let bills = consume(
        &[&billing_topic],
        1,
        Duration::from_secs(30),
        Duration::from_millis(500),
    );
    assert_eq!(orders.len(), 1, "{orders:?}");
    assert_eq!(bills.len(), 1, "{bills:?}");
    let bill = &bills[0];
    assert_eq!(bill.key.as_deref(), Some(&b"inv-9"[..]));
    assert_eq!(
        bill.value.as_deref(),
        Some(&[0x00, 0xff][..]),
        "bytea payload bytes, unchanged"
    );
    assert_eq!(
        bill.header_str("id").as_deref(),
        Some("00000000-0000-4000-8000-000000000102")
    );
    assert_eq!(bill.header_str("kind").as_deref(), Some("InvoiceIssued"));
    assert_eq!(
        bill.timestamp,
        Some(happened_ms),
        "record timestamp from happened_at"
    );
    assert_eq!(
        bill.header_str("walrelay.lsn"),
        orders[0].header_str("walrelay.lsn"),
        "one transaction, one commit LSN"
    );
    assert!(relay.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_kafka_refuses_stops_the_connector_naming_the_event() {
    require_kafka();
    let db = TestDb::new("toolarge").await;
    db.create_outbox("outbox").await;
    let names = Names::new("toolarge");
    let mut relay = RelayProcess::start(&relay_config(&db, &names, "", ""), &[]);
    relay.wait_log("streaming", START).await;
    let big = "00000000-0000-4000-8000-0000000000bb";
    insert(
        &db,
        "INSERT INTO outbox VALUES (gen_random_uuid(), 'order', 'a', 'Created', '{}')",
    )
    .await;
    // Incompressible, well over the 1 MB default limits.
    insert(
        &db,
        &format!(
            "INSERT INTO outbox VALUES ('{big}', 'order', 'b', 'Created',
               jsonb_build_object('blob', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 100000) g)))"
        ),
    )
    .await;
    let log = relay.expect_exit(1, Duration::from_secs(60));
    assert!(
        log.contains(big) && log.contains("message.max.bytes"),
        "{log}"
    );
    let bad_commit = {
        let at = log.find("transaction committed at ").expect("lsn in error");
        let rest = &log[at + "transaction committed at ".len()..];
        parse_lsn(&rest[..rest.find(')').unwrap()])
    };
    let confirmed = db.confirmed_flush(&names.slot).await.unwrap();
    assert!(
        confirmed <= bad_commit,
        "slot {confirmed:X} passed the refused event at {bad_commit:X}"
    );
    let before = consume(
        &[&names.topic("order")],
        1,
        Duration::from_secs(20),
        Duration::from_millis(500),
    );
    assert_eq!(
        before.len(),
        1,
        "the event before it is delivered: {before:?}"
    );
}

/// With `sslmode = "verify-full"` and the dev CA, both of walrelay's
/// PostgreSQL sessions (catalog and walsender) are encrypted, and events
/// flow; with a CA that did not sign the server's certificate, walrelay stops
/// at once with the reason instead of retrying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_over_verified_tls_and_refuses_an_unknown_ca() {
    require_kafka();
    let db = TestDb::new("tls").await;
    db.create_outbox("outbox").await;
    let names = Names::new("tls");
    let with_ca = |ca: &str| {
        relay_config(&db, &names, "", "").replacen(
            "status_interval = \"200ms\"",
            &format!(
                "status_interval = \"200ms\"\nsslmode = \"verify-full\"\nsslrootcert = \"{}\"",
                pg_tls_file(ca).display()
            ),
            1,
        )
    };

    let mut refused = RelayProcess::start(&with_ca("other-ca.pem"), &[]);
    let log = refused.expect_exit(1, START);
    assert!(
        log.contains("certificate") && log.contains("verify-full"),
        "says why, once:\n{log}"
    );
    assert!(!log.contains("will retry"), "not retried:\n{log}");

    let mut relay = RelayProcess::start(&with_ca("ca.pem"), &[]);
    relay.wait_log("streaming", START).await;
    let admin = pg_connect("postgres").await;
    let sessions: Vec<(String, bool)> = admin
        .query(
            "SELECT a.backend_type, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.application_name = $1",
            &[&format!("walrelay-{}", names.connector)],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(
        sessions.iter().any(|(t, _)| t == "walsender"),
        "the walsender is there: {sessions:?}"
    );
    assert!(
        sessions.iter().all(|(_, ssl)| *ssl),
        "all encrypted: {sessions:?}"
    );

    insert(
        &db,
        "INSERT INTO outbox VALUES ('00000000-0000-4000-8000-0000000000f1', 'order', 'a', 'Created', '{}')",
    )
    .await;
    let got = consume(
        &[&names.topic("order")],
        1,
        Duration::from_secs(30),
        Duration::from_millis(200),
    );
    assert_eq!(ids_of(&got), ["00000000-0000-4000-8000-0000000000f1"]);
    assert!(relay.stop().success(), "{}", relay.log());
}

/// Issue 24: row values stay out of the log, `/healthz` and `/metrics`
/// (docs/security.md: errors name only table, column, LSN and id). A topic
/// template on the aggregate id makes one topic per aggregate: its records
/// are counted under the template, not one series per aggregate, and a row
/// that cannot be routed is named without its values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_values_stay_out_of_the_log_healthz_and_metrics() {
    require_kafka();
    let db = TestDb::new("rowdata").await;
    db.create_outbox("outbox").await;
    let names = Names::new("rowdata");
    let addr = free_local_addr();
    let template = format!("{}.{{aggregatetype}}.{{aggregateid}}", names.topic_prefix);
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[[outbox]]\ntable = \"public.outbox\"\ntopic = \"{template}\"\n\
             header_columns = [\"type\"]\n\n[health]\nlisten = \"{addr}\"\n"
        ),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", START).await;
    for i in 0..5 {
        insert(
            &db,
            &format!(
                "INSERT INTO outbox VALUES (gen_random_uuid(), 'order', 'SECRETAGG{i}', \
                 'SECRETTYPE', '{{\"card\": \"SECRETPAYLOAD\"}}')"
            ),
        )
        .await;
    }
    let topics: Vec<String> = (0..5)
        .map(|i| format!("{}.order.SECRETAGG{i}", names.topic_prefix))
        .collect();
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    consume(&topic_refs, 5, Duration::from_secs(60), Duration::ZERO);

    let metrics = wait_for("the records in /metrics", Duration::from_secs(30), || {
        let m = http_get(&addr, "/metrics");
        let series = format!(
            "walrelay_records_published_by_topic_total{{connector=\"{}\",topic=\"{template}\"}} 5\n",
            names.connector
        );
        async move { m.contains(&series).then_some(m) }
    })
    .await;
    assert!(!metrics.contains("SECRET"), "{metrics}");
    let health = http_get(&addr, "/healthz");
    assert!(!health.contains("SECRET"), "{health}");

    // A row whose values make an invalid topic stops the connector, named
    // by table, column, LSN and id only.
    let bad = "00000000-0000-4000-8000-0000000000bb";
    insert(
        &db,
        &format!(
            "INSERT INTO outbox VALUES ('{bad}', 'SECRET TYPE', 'SECRETAGG9', 'SECRETTYPE', \
             '{{\"card\": \"SECRETPAYLOAD\"}}')"
        ),
    )
    .await;
    let log = relay.expect_exit(1, Duration::from_secs(30));
    assert!(
        log.contains("public.outbox") && log.contains(bad) && log.contains("commit LSN"),
        "{log}"
    );
    assert!(!log.contains("SECRET"), "{log}");
}
