//! Transaction metadata (`provide_transaction_metadata = true`) through
//! `kill -9`: the real binary captures two tables under a load of
//! transactions and is killed and restarted (up to five times, each once it streams again). Checked:
//! - every transaction has one BEGIN and one END (`<commit LSN>:begin` /
//!   `:end`), each re-sent copy identical to the first (partition, key,
//!   value, headers), and at least one was re-sent;
//! - the slot never confirmed a transaction whose BEGIN or END Kafka did
//!   not hold at that moment (they are records of their transaction);
//! - END's counts are the transaction's events, per table, in Debezium's
//!   (Java `HashMap`) order, and every event's `transaction` block names
//!   its place;
//! - a transaction without a table event (a TRUNCATE, skipped by default)
//!   has no BEGIN/END.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use support::*;

const TABLES: &str = "CREATE TABLE a (id int8 PRIMARY KEY, v text);
  CREATE TABLE b (id int8 PRIMARY KEY, v text);
  ALTER TABLE a OWNER TO walrelay;
  ALTER TABLE b OWNER TO walrelay;";

/// Transactions of the load: each inserts two rows into `a` and one into
/// `b`, then updates the first `a` row: 4 events (a: 3, b: 1).
const TRANSACTIONS: usize = 600;

fn parsed(b: &Option<Vec<u8>>) -> Value {
    b.as_deref()
        .map_or(Value::Null, |b| serde_json::from_slice(b).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn begin_and_end_survive_kill_9_identical_and_are_confirmed_only_once_in_kafka() {
    require_kafka();
    let db = TestDb::new("txmeta").await;
    let (names, prefix, config) = setup(&db, "txmeta").await;
    let mut relay = RelayProcess::start(&config, &[]);
    let config_path = relay.config_path.clone();
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    let tx_topic = format!("{prefix}.transaction");
    let topics = [
        tx_topic.clone(),
        format!("{prefix}.public.a"),
        format!("{prefix}.public.b"),
    ];
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();

    // A transaction without a table event: no BEGIN/END.
    let truncate_xid: i64 = {
        let tx = db
            .client
            .simple_query("BEGIN; TRUNCATE a; SELECT txid_current()::int8 % 4294967296; COMMIT")
            .await
            .unwrap();
        tx.iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(|s| s.parse().unwrap()),
                _ => None,
            })
            .unwrap()
    };

    let writer = spawn_writer(&db, TRANSACTIONS);

    // (slot position right after the kill, transaction records Kafka held)
    let mut kill_points: Vec<(u64, HashSet<String>)> = Vec::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(std::process::id()));
    while kill_points.len() < 5 && !writer.is_finished() {
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..1000))).await;
        relay.kill9();
        let confirmed = db.confirmed_flush(&names.slot).await.expect("slot exists");
        let records = consume_to_end(&[&tx_topic]);
        let held: HashSet<String> = records
            .iter()
            .filter_map(|c| c.header_str("walrelay.event_id"))
            .collect();
        kill_points.push((confirmed, held));
        relay = RelayProcess::start_with(&config_path, &[]);
        // Streaming again (it published more) before the next kill.
        wait_for(
            "the restarted walrelay to publish",
            Duration::from_secs(60),
            || {
                let (tx_topic, before) = (tx_topic.clone(), records.len());
                let done = writer.is_finished();
                async move { (done || consume_to_end(&[&tx_topic]).len() > before).then_some(()) }
            },
        )
        .await;
    }
    assert!(
        kill_points.len() >= 3,
        "the load ended after {} kills",
        kill_points.len()
    );
    writer.await.expect("writer");

    // Everything arrives: one END per transaction.
    let consumed = wait_for(
        &format!("{TRANSACTIONS} END records in {tx_topic} and their events"),
        Duration::from_secs(180),
        || async {
            let got = consume_to_end(&topic_refs);
            let ends: HashSet<String> = got
                .iter()
                .filter(|c| c.topic == tx_topic)
                .filter_map(|c| c.header_str("walrelay.event_id"))
                .filter(|id| id.ends_with(":end"))
                .collect();
            // And every change event: an END can be in Kafka before an
            // event of its transaction on another partition is.
            let changes: HashSet<(&str, String)> = got
                .iter()
                .filter(|c| c.topic != tx_topic)
                .filter_map(|c| Some((c.topic.as_str(), c.header_str("walrelay.event_id")?)))
                .collect();
            (ends.len() >= TRANSACTIONS && changes.len() >= 4 * TRANSACTIONS).then_some(got)
        },
    )
    .await;

    // Every copy of a record (by event id) identical to the first.
    let mut first: BTreeMap<(String, String), &Consumed> = BTreeMap::new();
    let mut resent = 0;
    for c in &consumed {
        let id = c.header_str("walrelay.event_id").expect("event id");
        match first.get(&(c.topic.clone(), id.clone())) {
            None => {
                first.insert((c.topic.clone(), id), c);
            }
            Some(f) => {
                assert_eq!(
                    (f.partition, &f.key, &f.value, &f.headers),
                    (c.partition, &c.key, &c.value, &c.headers),
                    "{id}: a re-sent copy differs from the first"
                );
                if c.topic == tx_topic {
                    resent += 1;
                }
            }
        }
    }
    assert!(
        resent > 0,
        "no BEGIN/END was re-sent after 5 kills under load; the test proved nothing"
    );

    // One BEGIN and one END per transaction, END counting its events.
    let tx: Vec<(&String, &&Consumed)> = first
        .iter()
        .filter(|((t, _), _)| *t == tx_topic)
        .map(|((_, id), c)| (id, c))
        .collect();
    let begins = tx.iter().filter(|(id, _)| id.ends_with(":begin")).count();
    let ends: Vec<&&Consumed> = tx
        .iter()
        .filter(|(id, _)| id.ends_with(":end"))
        .map(|(_, c)| *c)
        .collect();
    assert_eq!((begins, ends.len()), (TRANSACTIONS, TRANSACTIONS));
    // Events per xid and table, from the change events themselves.
    let mut events: BTreeMap<String, Vec<(String, Value)>> = BTreeMap::new();
    for ((topic, _), c) in &first {
        if *topic == tx_topic || c.value.is_none() {
            continue;
        }
        let v = parsed(&c.value);
        let block = v["transaction"].clone();
        let xid = block["id"]
            .as_str()
            .unwrap()
            .split(':')
            .next()
            .unwrap()
            .to_owned();
        assert_eq!(
            block["id"],
            json!(format!("{xid}:{}", v["source"]["lsn"])),
            "{v}"
        );
        events
            .entry(xid)
            .or_default()
            .push((v["source"]["table"].as_str().unwrap().to_owned(), block));
    }
    for end in &ends {
        let v = parsed(&end.value);
        let id = v["id"].as_str().unwrap();
        assert_eq!(parsed(&end.key), json!({ "id": id }));
        let xid = id.split(':').next().unwrap();
        assert_eq!(v["status"], "END");
        assert_eq!(v["event_count"], 4, "{v}");
        assert_eq!(
            v["data_collections"],
            json!([{"data_collection": "public.a", "event_count": 3},
                   {"data_collection": "public.b", "event_count": 1}]),
            "{v}"
        );
        let mut orders: Vec<(String, i64, i64)> = events[xid]
            .iter()
            .map(|(t, b)| {
                (
                    t.clone(),
                    b["total_order"].as_i64().unwrap(),
                    b["data_collection_order"].as_i64().unwrap(),
                )
            })
            .collect();
        orders.sort_by_key(|o| o.1);
        assert_eq!(
            orders,
            [
                ("a".to_owned(), 1, 1),
                ("a".to_owned(), 2, 2),
                ("b".to_owned(), 3, 1),
                ("a".to_owned(), 4, 3)
            ],
            "transaction {xid}"
        );
    }
    for (id, c) in &tx {
        let v = parsed(&c.value);
        let xid = v["id"].as_str().unwrap().split(':').next().unwrap();
        assert_ne!(
            xid,
            truncate_xid.to_string(),
            "{id}: the TRUNCATE-only transaction has no table event, so no BEGIN/END"
        );
    }

    // Invariant: at every kill, each transaction the slot had confirmed
    // (end LSN at or below confirmed_flush_lsn; END's id names it) had its
    // BEGIN and END in Kafka.
    for (i, (confirmed, held)) in kill_points.iter().enumerate() {
        let mut covered = 0;
        for end in &ends {
            let v = parsed(&end.value);
            let end_lsn: u64 = v["id"]
                .as_str()
                .unwrap()
                .split(':')
                .nth(1)
                .unwrap()
                .parse()
                .unwrap();
            if end_lsn <= *confirmed {
                covered += 1;
                let id = end.header_str("walrelay.event_id").unwrap();
                let begin = id.replace(":end", ":begin");
                assert!(
                    held.contains(&id) && held.contains(&begin),
                    "kill {i}: slot confirmed {confirmed:X}, past {id} (end {end_lsn:X}), \
                     but Kafka did not hold its BEGIN and END"
                );
            }
        }
        eprintln!(
            "kill {i}: slot at {confirmed:X}, {} transaction records in Kafka, {covered} \
             transactions confirmed",
            held.len()
        );
    }
    eprintln!("{resent} BEGIN/END records re-sent, all identical to their first copies");
    assert!(relay.stop().success(), "{}", relay.log());
}

/// `delivery = "exactly_once"`: a transaction's BEGIN, events and END are
/// in one Kafka transaction. Through three kills a `read_committed` reader
/// sees, at every moment, a BEGIN only with its END (and the reverse), and
/// in the end each BEGIN, END and event exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_exactly_once_begin_events_and_end_commit_together_once() {
    const N: usize = 300;
    require_kafka();
    let db = TestDb::new("txmeta_eos").await;
    let (_, prefix, config) = setup(&db, "txmeta_eos").await;
    let config = config.replace("[kafka]\n", "[kafka]\ndelivery = \"exactly_once\"\n");
    let mut relay = RelayProcess::start(&config, &[]);
    let config_path = relay.config_path.clone();
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    let tx_topic = format!("{prefix}.transaction");
    let topics = [
        tx_topic.clone(),
        format!("{prefix}.public.a"),
        format!("{prefix}.public.b"),
    ];
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    let writer = spawn_writer(&db, N);
    // BEGIN ⇔ END among what a read_committed reader sees now.
    let whole = |records: &[Consumed]| -> Result<usize, String> {
        let ids: HashSet<String> = records
            .iter()
            .filter_map(|c| c.header_str("walrelay.event_id"))
            .collect();
        for id in &ids {
            let pair = match id.strip_suffix(":begin") {
                Some(commit) => format!("{commit}:end"),
                None => id.replace(":end", ":begin"),
            };
            if !ids.contains(&pair) {
                return Err(format!("{id} is committed without {pair}"));
            }
        }
        Ok(ids.len())
    };
    let mut kills = 0;
    while kills < 3 && !writer.is_finished() {
        tokio::time::sleep(Duration::from_millis(700)).await;
        relay.kill9();
        kills += 1;
        let committed = consume_committed(&[&tx_topic]);
        let seen = whole(&committed).unwrap_or_else(|e| panic!("after kill {kills}: {e}"));
        eprintln!("kill {kills}: {seen} BEGIN/END records committed, each with its pair");
        relay = RelayProcess::start_with(&config_path, &[]);
        wait_for(
            "the restarted walrelay to commit more",
            Duration::from_secs(60),
            || {
                let tx_topic = tx_topic.clone();
                let done = writer.is_finished();
                async move { (done || consume_committed(&[&tx_topic]).len() > seen).then_some(()) }
            },
        )
        .await;
    }
    assert!(kills >= 2, "the load ended after {kills} kills");
    writer.await.expect("writer");
    let records = wait_for(
        &format!("{N} END records committed in {tx_topic}"),
        Duration::from_secs(180),
        || async {
            let got = consume_committed(&topic_refs);
            let ends = got
                .iter()
                .filter_map(|c| c.header_str("walrelay.event_id"))
                .filter(|id| id.ends_with(":end"))
                .count();
            (ends >= N).then_some(got)
        },
    )
    .await;
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for c in &records {
        let id = c.header_str("walrelay.event_id").expect("event id");
        *seen.entry((c.topic.clone(), id)).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(twice.is_empty(), "committed twice: {twice:?}");
    let tx: Vec<&Consumed> = records.iter().filter(|c| c.topic == tx_topic).collect();
    assert_eq!(tx.len(), 2 * N, "one BEGIN and one END per transaction");
    whole(&records).unwrap();
    for end in tx.iter().filter(|c| parsed(&c.value)["status"] == "END") {
        assert_eq!(parsed(&end.value)["event_count"], 4);
    }
    assert_eq!(records.len() - tx.len(), 4 * N, "every event once");
    eprintln!("exactly_once: {N} transactions, BEGIN/END and events once each after {kills} kills");
    assert!(relay.stop().success(), "{}", relay.log());
}

/// Writes `transactions` transactions, 20 ms apart, each with two inserts
/// into `a`, one into `b` and an update of `a` (four table events, two
/// tables): transaction `n` inserts ids `2n`, `2n + 1` into `a` and `n` into `b`.
fn spawn_writer(db: &TestDb, transactions: usize) -> tokio::task::JoinHandle<()> {
    let db_name = db.name.clone();
    tokio::spawn(async move {
        let client = pg_connect(&db_name).await;
        for n in 0..transactions as i64 {
            let (x, y) = (2 * n, 2 * n + 1);
            client
                .batch_execute(&format!(
                    "BEGIN; INSERT INTO a VALUES ({x}, 'x'), ({y}, 'y');
                     INSERT INTO b VALUES ({n}, 'b');
                     UPDATE a SET v = 'u' WHERE id = {x}; COMMIT;"
                ))
                .await
                .expect("transaction");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// Tables `a` and `b` in `db`, and a connector capturing both with
/// transaction metadata on: its names, topic prefix and config text.
async fn setup(db: &TestDb, name: &str) -> (Names, String, String) {
    db.client.batch_execute(TABLES).await.expect("tables");
    let names = Names::new(name);
    let prefix = names.connector.clone();
    let config = connector_config(
        db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\nprovide_transaction_metadata = true\n\
             [[table]]\nname = \"public.a\"\n[[table]]\nname = \"public.b\"\n"
        ),
    );
    (names, prefix, config)
}
