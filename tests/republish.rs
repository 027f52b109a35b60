//! Recovery that loses nothing when the runbook is followed to the letter
//! (issue 11): the slot is dropped while writers keep committing; the
//! operator follows docs/operations.md, "Lost slot" — note the stored
//! offset (`walrelay status`), start walrelay first with
//! `--accept-slot-position` (it creates the new slot and names the range it
//! never streamed), then `walrelay republish` the rows committed since the
//! stored offset was written. Every outbox row must then be in Kafka.
//! Reconciling *before* starting (the old order) loses whatever commits in
//! between.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use support::*;

fn walrelay(args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(walrelay_bin())
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run walrelay");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_slot_recovered_by_the_runbook_loses_nothing_while_writers_commit() {
    require_kafka();
    let db = TestDb::new("recover").await;
    db.create_outbox("outbox").await;
    let names = Names::new("recover");
    let mut relay = RelayProcess::start(&relay_config(&db, &names, "", ""), &[]);
    relay.wait_log("streaming", START).await;
    let config = relay.config_path.clone();
    let config_arg = config.to_str().unwrap().to_owned();

    // Writers commit all along: before, during and after the recovery.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn({
        let db_name = db.name.clone();
        let stop = stop.clone();
        async move {
            while !stop.load(Ordering::SeqCst) {
                write_outbox_load(&db_name, 2, 40, 10, Duration::from_millis(20)).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The incident: walrelay stops, the slot is dropped, writers go on.
    assert!(relay.stop().success(), "{}", relay.log());
    db.client
        .execute("SELECT pg_drop_replication_slot($1)", &[&names.slot])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 1. Note the stored offset and when it was written.
    let (code, out, err) = walrelay(&["status", "--config", &config_arg, "--json"]);
    assert_eq!(code, Some(1), "a dropped slot is a problem:\n{out}{err}");
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    let written_at_ms = status["stored_offset"]["written_at_ms"].as_i64().unwrap();
    let stored_lsn = status["stored_offset"]["lsn"].as_str().unwrap().to_owned();

    // 2. Start walrelay first: it creates the new slot and names the range
    // it never streamed.
    let mut relay = RelayProcess::start_with(&config, &["--accept-slot-position"]);
    relay.wait_log("were never streamed", START).await;
    relay.wait_log("streaming", START).await;
    let log = relay.log();
    assert!(
        log.contains(&format!("changes committed between {stored_lsn} and ")),
        "the range begins at the stored offset:\n{log}"
    );
    let (_, text, _) = walrelay(&["status", "--config", &config_arg]);
    assert!(
        text.contains(&format!(
            "accepted gap       changes committed between {stored_lsn} and "
        )),
        "status keeps naming the range:\n{text}"
    );

    // 3. Reconcile: republish the rows committed since the stored offset
    // was written (with the runbook's margin for transactions that began
    // earlier), while the writers still commit.
    let filter =
        format!("created_at >= to_timestamp({written_at_ms} / 1000.0) - interval '10 minutes'");
    let (code, out, err) = walrelay(&["republish", "--config", &config_arg, "--where", &filter]);
    assert_eq!(code, Some(0), "republish:\n{out}{err}");
    assert!(out.contains("republished "), "{out}");

    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    let end = db.current_wal_lsn().await;
    wait_for(
        "the new slot to confirm the writers' last rows",
        START,
        || async { (db.confirmed_flush(&names.slot).await? >= end).then_some(()) },
    )
    .await;
    assert!(relay.stop().success(), "{}", relay.log());

    // Every outbox row is in Kafka (republished ones marked as such, with
    // the same key and id a streamed record of the row would have).
    let rows = outbox_rows(&db).await;
    let consumed = consume_to_end(&[&names.topic("order"), &names.topic("invoice")]);
    let ids: HashSet<String> = consumed.iter().filter_map(|c| c.header_str("id")).collect();
    let lost: Vec<&String> = rows.keys().filter(|id| !ids.contains(*id)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} rows never reached Kafka: {:?}",
        lost.len(),
        rows.len(),
        &lost[..lost.len().min(5)]
    );
    let republished: Vec<&Consumed> = consumed
        .iter()
        .filter(|c| c.header_str("walrelay.republished").as_deref() == Some("true"))
        .collect();
    assert!(!republished.is_empty());
    for c in &republished {
        assert!(
            c.header("walrelay.lsn").is_none(),
            "no walrelay.lsn on a republished record"
        );
        let id = c.header_str("id").unwrap();
        let row = &rows[&id];
        assert_eq!(
            c.key.as_deref(),
            Some(row.aggregate_id.as_bytes()),
            "key of {id}"
        );
    }
}

/// `--dry-run` prints what would be published and publishes nothing; a
/// condition that is not SQL is PostgreSQL's error, exit 1; no --where, or
/// an unknown table, is a usage error (exit 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn republish_dry_run_and_bad_input() {
    require_kafka();
    let db = TestDb::new("repdry").await;
    db.create_outbox("outbox").await;
    let names = Names::new("repdry");
    let config = write_config(&relay_config(&db, &names, "", ""));
    let config_arg = config.to_str().unwrap();
    write_outbox_load(&db.name, 1, 5, 5, Duration::ZERO).await;
    let rows = outbox_rows(&db).await;
    let some = rows.keys().next().unwrap().clone();

    let filter = format!("id = '{some}'");
    let (code, out, err) = walrelay(&[
        "republish",
        "--config",
        config_arg,
        "--where",
        &filter,
        "--dry-run",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains(&some), "{out}");
    assert!(
        out.contains("would republish 1 record(s) of public.outbox"),
        "{out}"
    );
    assert!(consume_to_end(&[&names.topic("order"), &names.topic("invoice")]).is_empty());

    let (code, _, err) = walrelay(&[
        "republish",
        "--config",
        config_arg,
        "--where",
        "no such column = 1",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("walrelay: PostgreSQL"), "{err}");

    let (code, _, err) = walrelay(&["republish", "--config", config_arg, "--where", " "]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--where is empty"), "{err}");
    let (code, _, err) = walrelay(&[
        "republish",
        "--config",
        config_arg,
        "--table",
        "public.nope",
        "--where",
        "true",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not an [[outbox]] table"), "{err}");
}
