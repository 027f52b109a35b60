//! The offset store against the real broker: a long-lived (big) offset topic
//! still loads, the topic is created compacted with short segments, and an
//! existing topic that is not compacted is refused by `run` and `check`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use support::*;
use walrelay::offsets::{OffsetStore, StoredOffset};

fn store(topic: &str, connector: &str) -> OffsetStore {
    OffsetStore::new(
        &[("bootstrap.servers".to_owned(), kafka_brokers())],
        topic,
        connector,
    )
}

fn admin() -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .expect("admin client")
}

fn offset(connector: &str, lsn: u64) -> StoredOffset {
    StoredOffset {
        connector: connector.to_owned(),
        system_id: "7000000000000000001".into(),
        timeline: 1,
        slot: format!("{connector}_slot"),
        lsn: walrelay::Lsn(lsn),
        written_at_ms: 1_700_000_000_000,
        committed_at_ms: Some(1_699_999_990_000),
        snapshot: None,
        accepted_gap: None,
        incremental: None,
        known_tables: Vec::new(),
        term: None,
    }
}

/// The topic's effective configuration, as the broker describes it. Right
/// after the topic is created a broker may describe it before its metadata
/// reached that broker (no entries, or an error): asked again until it
/// describes the topic, for at most 30 s.
async fn topic_config(topic: &str) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let described = admin()
            .describe_configs(&[ResourceSpecifier::Topic(topic)], &AdminOptions::new())
            .await
            .expect("describe configs")
            .into_iter()
            .next()
            .expect("one resource");
        match described {
            Ok(resource) if !resource.entries.is_empty() => {
                return resource
                    .entries
                    .into_iter()
                    .map(|e| (e.name, e.value.unwrap_or_default()))
                    .collect();
            }
            other if Instant::now() >= deadline => {
                panic!("the broker did not describe topic {topic} within 30 s: {other:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

fn config_value<'a>(config: &'a [(String, String)], key: &str) -> &'a str {
    config
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("{key} not in {config:?}"))
}

/// Weeks of offsets (one a second from several connectors, before
/// compaction caught up): 600,000 records, ours among other connectors'
/// keys and tombstones. The load reads them all and returns our newest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_returns_the_newest_offset_from_600k_records() {
    require_kafka();
    let topic = unique("offsets_big");
    let ours = "conn-ours";
    let store = store(&topic, ours);
    store
        .ensure_topic(Duration::from_secs(30))
        .await
        .expect("create the offset topic");

    const TOTAL: u64 = 600_000;
    const CONNECTORS: u64 = 20;
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .expect("producer");
    let started = Instant::now();
    let mut newest_ours = 0;
    for i in 0..TOTAL {
        // Connector n writes at i % CONNECTORS == n; ours is n == 0, so the
        // topic ends with other connectors' records after our newest one.
        let n = i % CONNECTORS;
        let connector = if n == 0 {
            ours.to_owned()
        } else {
            format!("conn-{n}")
        };
        let value = if n == 7 && i % 1000 == 7 {
            None // a tombstone (a connector's offset deleted by hand)
        } else {
            Some(serde_json::to_vec(&offset(&connector, 0x1_0000_0000 + i * 64)).unwrap())
        };
        if n == 0 {
            newest_ours = 0x1_0000_0000 + i * 64;
        }
        loop {
            let mut record = BaseRecord::<str, [u8]>::to(&topic).key(connector.as_str());
            if let Some(v) = &value {
                record = record.payload(v.as_slice());
            }
            match producer.send(record) {
                Ok(()) => break,
                Err((e, _)) if e.to_string().contains("Queue full") => {
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => panic!("produce: {e}"),
            }
        }
        if i % 10_000 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .expect("all offsets written");
    eprintln!("wrote {TOTAL} offset records in {:?}", started.elapsed());

    let started = Instant::now();
    // The limit is on stalls: reading takes longer than this (about 5 s in a
    // debug build here), which the old absolute limit refused.
    let loaded = tokio::task::spawn_blocking(move || store.load(Duration::from_secs(2)))
        .await
        .unwrap()
        .expect("the load finishes");
    eprintln!(
        "MEASURED: loaded the newest of {TOTAL} offset records in {:?}",
        started.elapsed()
    );
    assert_eq!(loaded, Some(offset(ours, newest_ours)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_offset_topic_is_compacted_with_hourly_segments() {
    require_kafka();
    let topic = unique("offsets_new");
    store(&topic, "c")
        .ensure_topic(Duration::from_secs(30))
        .await
        .expect("create the offset topic");
    let config = topic_config(&topic).await;
    assert_eq!(config_value(&config, "cleanup.policy"), "compact");
    assert_eq!(config_value(&config, "segment.ms"), "3600000");
    assert_eq!(config_value(&config, "min.cleanable.dirty.ratio"), "0.1");
    assert_eq!(config_value(&config, "min.compaction.lag.ms"), "0");
    assert_eq!(config_value(&config, "max.compaction.lag.ms"), "3600000");
    // Existing and compacted: accepted as it is.
    store(&topic, "c")
        .ensure_topic(Duration::from_secs(30))
        .await
        .expect("an existing compacted topic is fine");
}

/// Creates `topic` with `cleanup.policy=delete`, as a hand-made topic might be.
async fn create_delete_topic(topic: &str) {
    let res = admin()
        .create_topics(
            &[NewTopic::new(topic, 1, TopicReplication::Fixed(1)).set("cleanup.policy", "delete")],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .expect("create topic");
    for r in res {
        r.expect("topic created");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_topic_that_is_not_compacted_is_refused_for_good() {
    require_kafka();
    let topic = unique("offsets_delete");
    create_delete_topic(&topic).await;
    let e = store(&topic, "c")
        .ensure_topic(Duration::from_secs(30))
        .await
        .expect_err("a delete-policy topic is refused");
    let text = e.to_string();
    assert!(
        text.contains("cleanup.policy=delete")
            && text.contains(&format!(
                "kafka-configs.sh --bootstrap-server {} --alter --entity-type topics --entity-name {topic} --add-config cleanup.policy=compact,",
                kafka_brokers()
            )),
        "{text}"
    );
    // Retrying cannot fix it: the connector stops and says so.
    let relay_error = walrelay::relay::RelayError::Offsets(e);
    assert!(!relay_error.is_transient(), "{relay_error}");
}

/// Writes `offset` to `topic` and waits for the broker's acknowledgement.
fn write_offset(topic: &str, offset: &StoredOffset) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .expect("producer");
    let value = serde_json::to_vec(offset).unwrap();
    producer
        .send(
            BaseRecord::<str, [u8]>::to(topic)
                .key(offset.connector.as_str())
                .payload(value.as_slice()),
        )
        .map_err(|(e, _)| e)
        .expect("send");
    producer.flush(Duration::from_secs(30)).expect("flush");
}

fn walrelay_check(config: &std::path::Path) -> (Option<i32>, String) {
    let out = std::process::Command::new(walrelay_bin())
        .args(["check", "--config"])
        .arg(config)
        .output()
        .expect("run check");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `run` and `check` refuse a hand-made offset topic with `delete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_and_check_refuse_an_offset_topic_that_is_not_compacted() {
    require_kafka();
    let db = TestDb::new("offdel").await;
    db.create_outbox("outbox").await;
    let names = Names::new("offdel");
    let topic = unique("offsets_delete");
    create_delete_topic(&topic).await;
    let config = relay_config(&db, &names, "", "").replacen(
        "[kafka]\n",
        &format!("[kafka]\noffsets_topic = \"{topic}\"\n"),
        1,
    );
    let mut relay = RelayProcess::start(&config, &[]);
    let (code, text) = walrelay_check(&relay.config_path);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("FAIL  offset store")
            && text.contains("cleanup.policy=delete")
            && text.contains("kafka-configs.sh"),
        "{text}"
    );
    let log = relay.expect_exit(1, Duration::from_secs(60));
    assert!(
        log.contains("cleanup.policy=delete") && log.contains("kafka-configs.sh"),
        "{log}"
    );
}

/// The stored offset's slot name and timeline reach the start decision in
/// `check` and `run`: a stored offset for another slot, or from another
/// timeline (a point-in-time restore), is refused even though the slot is
/// not ahead of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_run_refuse_a_stored_offset_of_another_slot_or_timeline() {
    require_kafka();
    let db = TestDb::new("offtl").await;
    db.create_outbox("outbox").await;
    let names = Names::new("offtl");
    let topic = unique("offsets_tl");
    store(&topic, &names.connector)
        .ensure_topic(Duration::from_secs(30))
        .await
        .expect("offset topic");
    db.client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&names.slot],
        )
        .await
        .expect("create slot");
    let row = db
        .client
        .query_one(
            "SELECT s.system_identifier::text, c.timeline_id::int8 \
             FROM pg_control_system() s, pg_control_checkpoint() c",
            &[],
        )
        .await
        .unwrap();
    let (system_id, timeline): (String, i64) = (row.get(0), row.get(1));
    let slot_lsn = db
        .confirmed_flush(&names.slot)
        .await
        .expect("slot position");
    // Exactly where the slot is: the old rule resumed.
    let mut stored = StoredOffset {
        connector: names.connector.clone(),
        system_id,
        timeline: timeline as u32,
        slot: format!("{}_old", names.slot),
        lsn: walrelay::Lsn(slot_lsn),
        written_at_ms: 0,
        committed_at_ms: None,
        snapshot: None,
        accepted_gap: None,
        incremental: None,
        known_tables: Vec::new(),
        term: None,
    };
    write_offset(&topic, &stored);
    let dir = std::env::temp_dir().join(unique("offtl"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("walrelay.toml");
    let config = relay_config(&db, &names, "", "").replacen(
        "[kafka]\n",
        &format!("[kafka]\noffsets_topic = \"{topic}\"\n"),
        1,
    );
    std::fs::write(&path, &config).unwrap();

    let (code, text) = walrelay_check(&path);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("FAIL  replication slot")
            && text.contains(&format!(
                "describes replication slot \"{}_old\"",
                names.slot
            )),
        "{text}"
    );

    stored.slot = names.slot.clone();
    stored.timeline = timeline as u32 + 1;
    write_offset(&topic, &stored);
    let (code, text) = walrelay_check(&path);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("FAIL  replication slot")
            && text.contains(&format!("is on timeline {}", timeline + 1)),
        "{text}"
    );
    let mut relay = RelayProcess::start_with(&path, &[]);
    let log = relay.expect_exit(1, Duration::from_secs(60));
    assert!(
        log.contains(&format!(
            "is on timeline {} but PostgreSQL is on timeline {timeline}",
            timeline + 1
        )) && log.contains("--accept-slot-position"),
        "{log}"
    );

    // The same offset on the server's timeline: check passes.
    stored.timeline = timeline as u32;
    write_offset(&topic, &stored);
    let (code, text) = walrelay_check(&path);
    assert_eq!(code, Some(0), "{text}");
}

/// An offsets topic shared with an `exactly_once` connector: while its
/// transaction on the partition is open, a `read_committed` reader sees the
/// partition end at the transaction's start (the last stable offset), and
/// this connector's newer offset written behind it is not there yet. The
/// store waits for the transaction to end and returns the newest offset,
/// never the stale one before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_transaction_on_a_shared_topic_never_yields_a_stale_offset() {
    require_kafka();
    let topic = unique("offsets_shared");
    admin()
        .create_topics(
            &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .expect("create topic")
        .into_iter()
        .for_each(|r| {
            r.expect("topic created");
        });
    write_offset(&topic, &offset("conn_a", 100));
    // Another connector's transaction, left open.
    let other: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("transactional.id", unique("other_connector"))
        .create()
        .expect("transactional producer");
    other
        .init_transactions(Duration::from_secs(30))
        .expect("init");
    other.begin_transaction().expect("begin");
    let theirs = serde_json::to_vec(&offset("conn_b", 7)).unwrap();
    other
        .send(
            BaseRecord::<str, [u8]>::to(&topic)
                .key("conn_b")
                .payload(theirs.as_slice()),
        )
        .map_err(|(e, _)| e)
        .expect("send");
    other.flush(Duration::from_secs(30)).expect("flush");
    // Ours, newer, behind it.
    write_offset(&topic, &offset("conn_a", 200));
    // Set just before the abort: the load cannot have its answer earlier
    // if it waits for the open transaction (a condition, not a time).
    let aborting = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ends = std::thread::spawn({
        let aborting = aborting.clone();
        move || {
            std::thread::sleep(Duration::from_secs(2));
            aborting.store(true, std::sync::atomic::Ordering::SeqCst);
            other
                .abort_transaction(Duration::from_secs(30))
                .expect("abort");
        }
    });
    let loaded =
        tokio::task::spawn_blocking(move || store(&topic, "conn_a").load(Duration::from_secs(10)))
            .await
            .unwrap()
            .expect("load")
            .expect("an offset");
    ends.join().unwrap();
    assert_eq!(
        loaded.lsn,
        walrelay::Lsn(200),
        "the newest offset, not the one before the open transaction"
    );
    assert!(
        aborting.load(std::sync::atomic::Ordering::SeqCst),
        "the load answered before the open transaction ended: it did not wait for it"
    );
}

/// Issue 38, item 5: an offset record written by a holder that had lost
/// its lease (an older term) after the new holder's is ignored; a record
/// without a term (an older walrelay) counts as of the term before it; a
/// tombstone deletes whatever came before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offset_of_the_highest_lease_term_counts() {
    require_kafka();
    let topic = unique("offsets_terms");
    let ours = "conn-terms";
    store(&topic, ours)
        .ensure_topic(Duration::from_secs(30))
        .await
        .expect("create the offset topic");
    let with_term = |lsn: u64, term: Option<u64>| {
        let mut o = offset(ours, lsn);
        o.term = term;
        o
    };
    let load = || {
        let topic = topic.clone();
        async move {
            tokio::task::spawn_blocking(move || store(&topic, ours).load(Duration::from_secs(10)))
                .await
                .unwrap()
                .expect("load")
                .map(|o| (o.lsn, o.term))
        }
    };
    write_offset(&topic, &with_term(0x100, Some(10)));
    write_offset(&topic, &with_term(0x300, Some(20)));
    // The old holder's queued write, delivered after the new holder's.
    write_offset(&topic, &with_term(0x200, Some(10)));
    assert_eq!(load().await, Some((walrelay::Lsn(0x300), Some(20))));
    write_offset(&topic, &with_term(0x400, None));
    assert_eq!(load().await, Some((walrelay::Lsn(0x400), None)));
    write_offset(&topic, &with_term(0x350, Some(10)));
    assert_eq!(load().await, Some((walrelay::Lsn(0x400), None)));
    write_offset(&topic, &with_term(0x500, Some(30)));
    assert_eq!(load().await, Some((walrelay::Lsn(0x500), Some(30))));
}
