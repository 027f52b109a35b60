//! Issue 40 part 2: a migration from Debezium to walrelay, as
//! docs/migrating-from-debezium.md describes it, under concurrent writers.
//! Debezium's PostgreSQL connector with the Outbox Event Router
//! (`JsonConverter`, `schemas.enable=false`, the form Debezium's outbox
//! documentation shows; its own publication `dbz_publication`, which it
//! creates) streams an outbox table; its Kafka Connect worker is stopped
//! (SIGTERM: the graceful stop, offsets committed) while the writers go on;
//! walrelay starts on Debezium's slot and publication, with no stored
//! offset, `converter = "json"` and its default topic template, and writes
//! to the same topics.
//!
//! Invariants checked, on the topics after the writers stop:
//! - **None missing.** Every row the writers committed is a record (by its
//!   `id` header), whoever wrote it.
//! - **Same records.** A row published by both (the window Debezium had not
//!   confirmed to the slot) has the same key, value and partition on both
//!   sides.
//! - **Order per aggregate.** Each aggregate's records are on one
//!   partition, and its payloads' sequence numbers, de-duplicated by `id`
//!   in offset order, are 1, 2, 3, … without a gap or a step back.
//! - **Both wrote.** Debezium published some rows before the stop, walrelay
//!   the rows after it, and walrelay started from the slot without a
//!   snapshot.
//!
//! Two stops: SIGTERM (Connect stops the connector and commits its
//! offsets, Debezium confirms the slot) and SIGKILL (the slot keeps the
//! position of the last periodic commit, `offset.flush.interval.ms`, 1 s
//! in these workers). Re-sent: the records walrelay wrote again (same `id`
//! as one of Debezium's), printed by the test. Debezium is stopped once it
//! has written 200 records and confirmed a position to the slot. In a run
//! here: after SIGTERM 2 of Debezium's 1084 records (one transaction),
//! after SIGKILL 296 of its 804 (the writes since its last offset commit)
//! — PostgreSQL sends again what follows the confirmed position, and
//! nothing before it was left unwritten.

use super::*;

use support::Consumed;

/// Writers, each owning [`AGGREGATES`] aggregates, each transaction one row
/// of each of two of them.
const WRITERS: usize = 3;
const AGGREGATES: usize = 4;
/// Partitions of the outbox topic.
const PARTITIONS: i32 = 4;

const OUTBOX: &str = "CREATE TABLE outbox (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregatetype varchar(255) NOT NULL,
    aggregateid varchar(255) NOT NULL,
    type varchar(255) NOT NULL,
    payload jsonb);
  ALTER TABLE outbox OWNER TO walrelay;";

/// Writes until `stop`: writer `w`'s transactions insert the next event of
/// two of its aggregates (`w<w>-<k>`, payload `{"agg": …, "seq": n}`, `n`
/// counting each aggregate's events from 1). Returns the number of rows.
async fn write(
    db: String,
    aggregate_type: String,
    w: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> usize {
    let client = pg_connect(&db).await;
    let mut seq = [0u64; AGGREGATES];
    let mut rows = 0;
    let mut turn = 0;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let (a, b) = (turn % AGGREGATES, (turn + 1) % AGGREGATES);
        turn += 1;
        seq[a] += 1;
        seq[b] += 1;
        let row = |k: usize, n: u64| {
            format!(
                "('{aggregate_type}', 'w{w}-{k}', 'Changed', \
                 jsonb_build_object('agg', 'w{w}-{k}', 'seq', {n}))"
            )
        };
        client
            .batch_execute(&format!(
                "INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES {}, {}",
                row(a, seq[a]),
                row(b, seq[b])
            ))
            .await
            .expect("insert");
        rows += 2;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    rows
}

/// The aggregate id in a `JsonConverter` key (a JSON string).
fn aggregate(r: &Consumed) -> String {
    let key: Value = serde_json::from_slice(r.key.as_deref().expect("a key")).expect("JSON key");
    key.as_str().expect("a JSON string key").to_owned()
}

/// The sequence number in a `JsonConverter` value (a JSON string holding
/// the payload's JSON).
fn seq(r: &Consumed) -> u64 {
    let text: Value =
        serde_json::from_slice(r.value.as_deref().expect("a value")).expect("JSON value");
    let payload: Value = serde_json::from_str(text.as_str().expect("a JSON string value"))
        .expect("the payload's JSON");
    payload["seq"].as_u64().expect("seq")
}

/// Stops a Connect worker as an operator does: SIGTERM, then wait (the
/// worker stops its connectors and commits their offsets).
fn stop_gracefully(connect: &mut Connect) {
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(connect.child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if !matches!(connect.child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("Kafka Connect did not stop within 60 s of SIGTERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_takes_over_debeziums_slot_and_loses_nothing() {
    migrate(Stop::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_takes_over_the_slot_of_a_killed_debezium_and_loses_nothing() {
    migrate(Stop::Kill).await;
}

/// How the Connect worker is stopped.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stop {
    /// SIGTERM: connectors stopped, offsets committed, the slot confirmed.
    Graceful,
    /// SIGKILL: the slot keeps the position of the last periodic commit.
    Kill,
}

async fn migrate(how: Stop) {
    let _one = ONE_AT_A_TIME.lock().await;
    require_kafka();
    let (libs, debezium_version) = connect_libs();
    let db = TestDb::new("wr_dbz_migration").await;
    let names = Names::new("wr_dm");
    let aggregate_type = format!("Mig_{}", names.connector);
    let topic = format!("outbox.event.{aggregate_type}");
    db.client.batch_execute(OUTBOX).await.expect("outbox table");
    create_topics(std::slice::from_ref(&topic), PARTITIONS).await;

    // Debezium as its outbox documentation sets it up: the EventRouter's
    // defaults, JsonConverter without schemas, its publication created
    // by the connector (`filtered`: `all_tables` needs a superuser).
    let publication = "dbz_publication";
    let connector = Debezium {
        name: &names.connector,
        topic_prefix: &names.connector,
        slot: &names.slot,
        snapshot_mode: "initial",
        tables: "public\\\\.outbox",
        more: "publication.autocreate.mode=filtered
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
",
    }
    .properties(&db, publication);
    let mut connect = Connect::start(
        "walrelay_dbz_migration",
        &libs,
        JSON_WITHOUT_SCHEMAS,
        &[connector],
    );
    let created = wait_for("Debezium's slot", DEBEZIUM_READY, || {
        connect.assert_alive();
        let db = &db;
        let slot = &names.slot;
        async move { db.confirmed_flush(slot).await }
    })
    .await;

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            tokio::spawn(write(
                db.name.clone(),
                aggregate_type.clone(),
                w,
                stop.clone(),
            ))
        })
        .collect();

    // Debezium streams for a while, and confirms a position to the slot …
    wait_for(
        "Debezium's first 200 records and a confirmed position",
        CATCH_UP,
        || {
            connect.assert_alive();
            let n = consume_to_end(&[topic.as_str()]).len();
            let (db, slot) = (&db, &names.slot);
            async move {
                let confirmed = db.confirmed_flush(slot).await?;
                (n >= 200 && confirmed > created).then_some(())
            }
        },
    )
    .await;
    // … and is stopped while the writers go on.
    match how {
        Stop::Graceful => stop_gracefully(&mut connect),
        Stop::Kill => {
            let _ = connect.child.kill();
            let _ = connect.child.wait();
        }
    }
    let debezium_records = consume_to_end(&[topic.as_str()]).len();
    let confirmed = db
        .confirmed_flush(&names.slot)
        .await
        .expect("the slot stays");
    eprintln!(
        "Debezium {debezium_version} stopped after {debezium_records} records; slot confirmed at {confirmed:X}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;

    // walrelay on Debezium's slot and publication, no stored offset, the
    // matching form, its default topic template (Debezium's route).
    let config = connector_config(
        &db,
        &Names {
            publication: publication.to_owned(),
            ..names.clone()
        },
        "[[outbox]]\ntable = \"public.outbox\"\nconverter = \"json\"\n",
    );
    let mut relay = RelayProcess::start(&config, &[]);
    let written_before = consume_to_end(&[topic.as_str()]).len();
    wait_for("walrelay's first records", CATCH_UP, || {
        let n = consume_to_end(&[topic.as_str()]).len();
        async move { (n > written_before + 50).then_some(()) }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut rows = 0;
    for w in writers {
        rows += w.await.expect("writer");
    }
    let committed: std::collections::HashSet<String> = db
        .client
        .query("SELECT id::text FROM outbox", &[])
        .await
        .expect("outbox rows")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(committed.len(), rows, "rows the writers committed");

    // Every row on the topic, or (after the deadline) how many are not.
    let deadline = Instant::now() + CATCH_UP;
    let records = loop {
        let got = consume_to_end(&[topic.as_str()]);
        let ids: std::collections::HashSet<String> =
            got.iter().filter_map(|r| r.header_str("id")).collect();
        let missing = committed.iter().filter(|id| !ids.contains(*id)).count();
        if missing == 0 {
            break got;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of {rows} rows missing from {topic} after {CATCH_UP:?}; walrelay's log:\n{}",
            relay.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        records
            .iter()
            .all(|r| r.header("walrelay.snapshot").is_none()),
        "walrelay took a snapshot instead of streaming from Debezium's slot:\n{}",
        relay.log()
    );

    let mut problems = Vec::new();
    // By aggregate, in offset order; the first record of each id kept.
    let mut first: std::collections::HashMap<String, &Consumed> = Default::default();
    let mut resent = 0;
    let mut by_aggregate: BTreeMap<String, Vec<&Consumed>> = BTreeMap::new();
    let mut sorted: Vec<&Consumed> = records.iter().collect();
    sorted.sort_by_key(|r| (r.partition, r.offset));
    for r in sorted {
        let id = r.header_str("id").expect("an id header");
        if let Some(earlier) = first.get(&id) {
            resent += 1;
            if (&earlier.key, &earlier.value, earlier.partition) != (&r.key, &r.value, r.partition)
            {
                problems.push(format!(
                    "{id}: sent twice, differently: {earlier:?} and {r:?}"
                ));
            }
            continue;
        }
        first.insert(id, r);
        by_aggregate.entry(aggregate(r)).or_default().push(r);
    }
    for (agg, recs) in &by_aggregate {
        let partitions: std::collections::BTreeSet<i32> =
            recs.iter().map(|r| r.partition).collect();
        if partitions.len() != 1 {
            problems.push(format!("{agg}: on partitions {partitions:?}"));
        }
        let seqs: Vec<u64> = recs.iter().map(|r| seq(r)).collect();
        let want: Vec<u64> = (1..=seqs.len() as u64).collect();
        if seqs != want {
            problems.push(format!("{agg}: sequence numbers {seqs:?}"));
        }
    }
    let extra: Vec<&String> = first.keys().filter(|id| !committed.contains(*id)).collect();
    if !extra.is_empty() {
        problems.push(format!("{} records of rows not in the table", extra.len()));
    }
    let walrelay_records = records.len() - debezium_records;
    eprintln!(
        "{how:?} stop, {rows} rows: Debezium wrote {debezium_records} records, walrelay \
         {walrelay_records}, of which {resent} re-sent (already written by Debezium); {} \
         aggregates",
        by_aggregate.len()
    );
    assert!(
        debezium_records > 0 && walrelay_records > resent,
        "both must have written new records"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(first.len(), rows);
    assert_eq!(relay.stop().code(), Some(0), "{}", relay.log());
}
