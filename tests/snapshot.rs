//! Snapshot, then stream, against the real services: existing outbox rows
//! are published before the changes that follow them, nothing is lost at
//! the handover or after a crash mid-snapshot, and each `[snapshot] mode`
//! does what it says.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use support::*;

const START: Duration = Duration::from_secs(60);
const CATCH_UP: Duration = Duration::from_secs(240);

/// An outbox with a `seq` column: the order rows were written in (by one
/// writer), which the snapshot is told to follow.
async fn create_outbox(db: &TestDb) {
    db.create_outbox("outbox").await;
    db.client
        .batch_execute("ALTER TABLE outbox ADD COLUMN seq bigserial")
        .await
        .expect("seq column");
}

/// `n` rows over `aggregates` aggregates, written in one statement (one
/// writer, so `seq` order is commit order). Payload `{"pre": seq}`.
async fn prefill(db: &TestDb, n: usize, aggregates: usize) {
    db.client
        .batch_execute(&format!(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
             SELECT gen_random_uuid(), CASE WHEN g % 3 = 0 THEN 'invoice' ELSE 'order' END,
                    'agg-' || (g % {aggregates}), 'Created', jsonb_build_object('pre', g)
             FROM generate_series(1, {n}) g"
        ))
        .await
        .expect("prefill");
}

fn config(db: &TestDb, names: &Names, snapshot: &str) -> String {
    relay_config(
        db,
        names,
        "snapshot_order_by = [\"seq\"]",
        &format!("[snapshot]\n{snapshot}\n"),
    )
}

fn topics(names: &Names) -> [String; 2] {
    [names.topic("order"), names.topic("invoice")]
}

fn consumed(names: &Names) -> Vec<Consumed> {
    let t = topics(names);
    consume_to_end(&[t[0].as_str(), t[1].as_str()])
}

fn is_snapshot(r: &Consumed) -> bool {
    r.header_str("walrelay.snapshot").as_deref() == Some("true")
}

/// Waits until every row of the outbox is in Kafka; returns what was read.
async fn all_arrived(db: &TestDb, names: &Names) -> Vec<Consumed> {
    let rows = outbox_rows(db).await;
    wait_for("every outbox row in Kafka", CATCH_UP, || {
        let names = names.clone();
        let rows = &rows;
        async move {
            let got = consumed(&names);
            let ids: HashSet<String> = got.iter().filter_map(|r| r.header_str("id")).collect();
            rows.keys().all(|id| ids.contains(id)).then_some(got)
        }
    })
    .await
}

/// The handover guarantees, per aggregate in partition order: every
/// snapshot record comes before every streamed one; within one snapshot
/// (one consistent point) records follow `seq`; streamed ones follow commit
/// order. Every row arrived; a row's copies agree on topic, key and value.
async fn verify_handover(db: &TestDb, names: &Names, got: &[Consumed]) -> (usize, usize) {
    let rows = outbox_rows(db).await;
    let mut seqs: HashMap<String, i64> = HashMap::new();
    for r in db
        .client
        .query("SELECT id::text, seq FROM outbox", &[])
        .await
        .unwrap()
    {
        seqs.insert(r.get(0), r.get(1));
    }
    let mut seen: HashMap<String, &Consumed> = HashMap::new();
    let (mut snapshot, mut streamed) = (0, 0);
    for rec in got {
        let id = rec.header_str("id").expect("id header");
        let row = rows.get(&id).unwrap_or_else(|| panic!("{id} is not a row"));
        assert_eq!(rec.topic, names.topic(&row.aggregate_type), "topic of {id}");
        assert_eq!(
            rec.key.as_deref(),
            Some(row.aggregate_id.as_bytes()),
            "key of {id}"
        );
        assert_eq!(
            rec.value.as_deref(),
            Some(row.payload.as_bytes()),
            "value of {id}"
        );
        if is_snapshot(rec) {
            snapshot += 1;
        } else {
            streamed += 1;
        }
        seen.entry(id).or_insert(rec);
    }
    let missing: Vec<_> = rows.keys().filter(|id| !seen.contains_key(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} rows never arrived: {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );

    let mut by_agg: HashMap<(String, Vec<u8>), Vec<&Consumed>> = HashMap::new();
    for rec in got {
        by_agg
            .entry((rec.topic.clone(), rec.key.clone().unwrap_or_default()))
            .or_default()
            .push(rec);
    }
    for ((topic, key), mut recs) in by_agg {
        let agg = String::from_utf8_lossy(&key).into_owned();
        let partitions: HashSet<i32> = recs.iter().map(|r| r.partition).collect();
        assert_eq!(
            partitions.len(),
            1,
            "{topic} {agg} spread over {partitions:?}"
        );
        recs.sort_by_key(|r| r.offset);
        let first_streamed = recs.iter().position(|r| !is_snapshot(r));
        if let Some(i) = first_streamed {
            assert!(
                recs[i..].iter().all(|r| !is_snapshot(r)),
                "{topic} {agg}: a snapshot record after a streamed one"
            );
        }
        // Within each snapshot (consistent point): seq order.
        let mut per_point: HashMap<String, Vec<i64>> = HashMap::new();
        for r in recs.iter().filter(|r| is_snapshot(r)) {
            let id = r.header_str("id").unwrap();
            per_point
                .entry(r.header_str("walrelay.lsn").unwrap_or_default())
                .or_default()
                .push(seqs[&id]);
        }
        for (point, order) in per_point {
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(
                order, sorted,
                "{topic} {agg}: snapshot at {point} out of seq order"
            );
        }
        // Streamed: commit order (lsn, then writer sequence).
        let order: Vec<(u64, i64)> = recs
            .iter()
            .filter(|r| !is_snapshot(r))
            .map(|r| {
                let v: serde_json::Value =
                    serde_json::from_slice(r.value.as_deref().unwrap_or_default()).unwrap();
                (
                    parse_lsn(&r.header_str("walrelay.lsn").unwrap_or_default()),
                    v["s"].as_i64().unwrap_or(-1),
                )
            })
            .collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(
            order, sorted,
            "{topic} {agg}: streamed records out of commit order"
        );
    }
    (snapshot, streamed)
}

/// 200,000 existing rows, then 8 writers inserting while the snapshot runs:
/// every row arrives, none is missing at the handover, and per aggregate the
/// snapshot's records come before the streamed ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_rows_are_published_before_the_changes_that_follow() {
    require_kafka();
    let db = TestDb::new("snap_handover").await;
    create_outbox(&db).await;
    prefill(&db, 200_000, 500).await;
    let names = Names::new("snap_handover");
    let mut relay = RelayProcess::start(&config(&db, &names, ""), &[]);
    relay
        .wait_log("created replication slot with an exported snapshot", START)
        .await;
    // Writers start while the snapshot is read.
    write_outbox_load(&db.name, 8, 4_000, 500, Duration::from_millis(5)).await;
    let got = all_arrived(&db, &names).await;
    relay.wait_log("snapshot completed", START).await;
    let (snapshot, streamed) = verify_handover(&db, &names, &got).await;
    assert_eq!(
        snapshot, 200_000,
        "each existing row once from the snapshot"
    );
    assert!(streamed >= 4_000, "{streamed} streamed");
    relay.stop();
    assert!(
        relay.log().contains("snapshot progress") || relay.log().contains("snapshot: table read")
    );
}
