//! docs/operations.md, "Lost slot", followed word for word while writers
//! keep committing (tests/it/republish.rs: a dropped slot; tests/it/lost_slot.rs:
//! a slot PostgreSQL invalidated). Every outbox row must reach Kafka.

use std::collections::HashSet;
use std::path::Path;

use crate::support::*;

/// `walrelay <args>`: exit code, stdout, stderr.
pub fn walrelay(args: &[&str]) -> (Option<i32>, String, String) {
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

/// The stored offset as `walrelay status --json` shows it (exit 1: the
/// slot is dropped or lost).
pub fn stored_offset(config: &Path) -> serde_json::Value {
    let config_arg = config.to_str().unwrap();
    let (code, out, err) = walrelay(&["status", "--config", config_arg, "--json"]);
    assert_eq!(
        code,
        Some(1),
        "a dropped or lost slot is a problem:\n{out}{err}"
    );
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    status["stored_offset"].clone()
}

/// The runbook's steps after the incident; `drop_slot`: step 2 (a lost
/// slot must be dropped; a dropped one is gone already); `margin`: the
/// runbook's "longest transaction" margin, as an SQL interval.
pub async fn recover(
    db: &TestDb,
    names: &Names,
    config: &Path,
    writers: Writers,
    drop_slot: bool,
    margin: &str,
) {
    let config_arg = config.to_str().unwrap().to_owned();
    // 1. Note the stored offset and the commit time that goes with it.
    let stored = stored_offset(config);
    let committed_at_ms = stored["committed_at_ms"].as_i64().unwrap();
    let stored_lsn = stored["lsn"].as_str().unwrap().to_owned();

    // 2. Drop the lost slot.
    if drop_slot {
        db.client
            .execute("SELECT pg_drop_replication_slot($1)", &[&names.slot])
            .await
            .unwrap();
    }

    // 3. Start walrelay first: it creates the new slot and names the range
    // it never streamed.
    let mut relay = RelayProcess::start_with(config, &["--accept-slot-position"]);
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
    assert!(
        text.contains("(the outbox rows committed since "),
        "status names the commit time to reconcile from:\n{text}"
    );

    // 4. Reconcile: republish the rows committed since the stored offset's
    // commit time (with the runbook's margin for transactions that began
    // earlier), while the writers still commit.
    let filter =
        format!("created_at >= to_timestamp({committed_at_ms} / 1000.0) - interval '{margin}'");
    let (code, out, err) = walrelay(&["republish", "--config", &config_arg, "--where", &filter]);
    assert_eq!(code, Some(0), "republish:\n{out}{err}");
    assert!(out.contains("republished "), "{out}");

    writers.stop().await;
    let end = db.current_wal_lsn().await;
    db.wait_confirmed(
        &names.slot,
        end,
        "the new slot to confirm the writers' last rows",
        START,
    )
    .await;
    assert!(relay.stop().success(), "{}", relay.log());

    // Every outbox row is in Kafka (republished ones marked as such, with
    // the same key and id a streamed record of the row would have).
    let rows = outbox_rows(db).await;
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
