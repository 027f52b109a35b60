//! The reference inbox consumer (`walrelay inbox`, `walrelay::inbox`):
//! the frontier's properties, and against the real services every
//! committed outbox event applied exactly once through consumer kills,
//! walrelay kills and re-sent duplicates; quarantine that goes on and
//! quarantine that stops the partition.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use proptest::prelude::*;
use rand::{RngExt, SeedableRng};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use support::ledger::{CREATE_LEDGER, LedgerWriters, ledger};
use support::*;
use walrelay::inbox::frontier::{Frontier, KeyOrder};

// ---------------------------------------------------------------- frontier

proptest! {
    /// Out-of-order completions never move the position past a record in
    /// progress; it never goes backwards; once all are done it is one past
    /// the highest offset received.
    #[test]
    fn the_frontier_never_passes_a_record_in_progress(
        gaps in prop::collection::vec(1i64..4, 1..60),
        order in prop::collection::vec(any::<prop::sample::Index>(), 60),
        interleave in prop::collection::vec(any::<bool>(), 120),
    ) {
        let offsets: Vec<i64> = gaps.iter().scan(0i64, |o, g| { *o += g; Some(*o) }).collect();
        let mut f = Frontier::new();
        let mut pending: Vec<i64> = Vec::new();
        let mut next_in = 0;
        let mut last_position = None;
        let mut picks = order.iter().cycle();
        let mut steps = interleave.iter().cycle();
        while next_in < offsets.len() || !pending.is_empty() {
            let receive = next_in < offsets.len() && (pending.is_empty() || *steps.next().unwrap());
            if receive {
                f.receive(offsets[next_in], ()).unwrap();
                pending.push(offsets[next_in]);
                next_in += 1;
            } else {
                let i = picks.next().unwrap().index(pending.len());
                let o = pending.swap_remove(i);
                f.complete(o).unwrap();
            }
            let position = f.position().unwrap();
            if let Some(lowest) = pending.iter().min() {
                prop_assert_eq!(position, *lowest, "the position is the lowest record in progress");
            } else {
                prop_assert_eq!(position, offsets[next_in - 1] + 1);
            }
            if let Some(last) = last_position {
                prop_assert!(position >= last, "went back from {} to {}", last, position);
            }
            last_position = Some(position);
            prop_assert_eq!(f.in_progress(), pending.len());
        }
        prop_assert_eq!(f.lag(), 0);
    }

    /// Same-key order: whatever completes first, at most one record per key
    /// runs, and each key's records run in admission order; keyless
    /// records are never held back.
    #[test]
    fn key_order_runs_one_record_per_key_in_order(
        keys in prop::collection::vec(prop::option::of(0u8..4), 1..80),
        picks in prop::collection::vec(any::<prop::sample::Index>(), 80),
    ) {
        let mut order: KeyOrder<u8, usize> = KeyOrder::new();
        let mut running: Vec<usize> = Vec::new();
        let mut started: Vec<usize> = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            if let Some(t) = order.admit(*k, i) {
                running.push(t);
                started.push(t);
            } else {
                prop_assert!(k.is_some(), "a keyless record was held back");
            }
        }
        let mut picks = picks.iter().cycle();
        while !running.is_empty() {
            // No two running records share a key.
            let mut seen = std::collections::HashSet::new();
            for t in &running {
                if let Some(k) = keys[*t] {
                    prop_assert!(seen.insert(k), "two records of key {} run at once", k);
                }
            }
            let t = running.swap_remove(picks.next().unwrap().index(running.len()));
            if let Some(next) = order.finish(keys[t].as_ref()) {
                running.push(next);
                started.push(next);
            }
        }
        prop_assert_eq!(started.len(), keys.len(), "every record ran");
        for k in 0u8..4 {
            let of_key: Vec<usize> = started.iter().copied().filter(|t| keys[*t] == Some(k)).collect();
            let mut sorted = of_key.clone();
            sorted.sort_unstable();
            prop_assert_eq!(of_key, sorted, "key {} out of order", k);
        }
        prop_assert_eq!(order.waiting(), 0);
    }
}

// ---------------------------------------------------------------- helpers

/// `walrelay inbox` started from the real binary.
struct InboxProcess {
    child: std::process::Child,
    log_path: std::path::PathBuf,
}

impl InboxProcess {
    fn start(config_path: &std::path::Path) -> InboxProcess {
        let log_path = config_path.with_extension("log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        eprintln!("inbox log: {}", log_path.display());
        let child = std::process::Command::new(walrelay_bin())
            .args(["inbox", "--config"])
            .arg(config_path)
            .env("WALRELAY_LOG", "info,walrelay=debug")
            .env("PGPASSWORD_FOR_INBOX", "postgres")
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start walrelay inbox");
        InboxProcess { child, log_path }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and the exit code.
    fn stop(&mut self) -> Option<i32> {
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        for _ in 0..300 {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.kill9();
        panic!("walrelay inbox did not stop on SIGTERM:\n{}", self.log());
    }
}

impl Drop for InboxProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An inbox configuration file for `db`; `extra` goes into `[inbox]`.
fn inbox_config(
    db: &TestDb,
    group: &str,
    topics: &[String],
    listen: &str,
    sql: &str,
    params: &str,
    extra: &str,
) -> std::path::PathBuf {
    let topics: Vec<String> = topics.iter().map(|t| format!("\"{t}\"")).collect();
    write_config(&format!(
        r#"
[inbox]
name = "{group}"
topics = [{topics}]
commit_interval = "300ms"
retry_backoff_initial = "20ms"
retry_backoff_max = "100ms"
shutdown_timeout = "10s"
{extra}

[inbox.kafka]
brokers = "{brokers}"
librdkafka = {{ "session.timeout.ms" = "6000", "fetch.wait.max.ms" = "50" }}

[inbox.postgres]
url = "postgres://postgres:${{PGPASSWORD_FOR_INBOX}}@127.0.0.1:{port}/{db}?sslmode=disable"

[inbox.handler]
sql = "{sql}"
params = {params}

[inbox.health]
listen = "{listen}"
"#,
        topics = topics.join(", "),
        brokers = kafka_brokers(),
        port = pg_port(),
        db = db.name,
    ))
}

/// The group's committed offsets, by (topic, partition).
fn committed(group: &str, topics: &[String]) -> BTreeMap<(String, i32), i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", group)
        .create()
        .unwrap();
    let mut out = BTreeMap::new();
    for t in topics {
        let md = consumer
            .fetch_metadata(Some(t), Duration::from_secs(10))
            .unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in md.topics()[0].partitions() {
            tpl.add_partition(t, p.id());
        }
        let c = consumer
            .committed_offsets(tpl, Duration::from_secs(10))
            .unwrap();
        for e in c.elements() {
            if let rdkafka::Offset::Offset(o) = e.offset() {
                out.insert((e.topic().to_owned(), e.partition()), o);
            }
        }
    }
    out
}

fn producer() -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("enable.idempotence", "true")
        .set("partitioner", "murmur2_random")
        .create()
        .unwrap()
}

/// Produces `(key, value, id)` records to `topic` (in order).
async fn produce(topic: &str, records: &[(String, String, Option<String>)]) {
    let p = producer();
    for (key, value, id) in records {
        let mut headers = OwnedHeaders::new();
        if let Some(id) = id {
            headers = headers.insert(Header {
                key: "id",
                value: Some(id.as_str()),
            });
        }
        p.send(
            FutureRecord::to(topic)
                .key(key)
                .payload(value)
                .headers(headers),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    }
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

// ---------------------------------------------------------------- end to end

/// Writers (outbox row + ledger row per event, one transaction) →
/// `walrelay run` (killed once) → Kafka (with re-sent copies produced
/// again) → `walrelay inbox` (kill -9 at random, several times; for a while
/// a second member of the group, then killed: rebalances) → a
/// business table: every committed event applied exactly once, each
/// aggregate's events in commit order, nothing quarantined; and at least
/// one kill landed between the database commit and the offset commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_committed_event_is_applied_exactly_once_through_kills_and_resends() {
    require_kafka();
    let src = TestDb::new("inbox_src").await;
    src.create_outbox("outbox").await;
    src.client.batch_execute(CREATE_LEDGER).await.unwrap();
    let dst = TestDb::new("inbox_dst").await;
    dst.client
        .batch_execute(
            "CREATE TABLE applied (n bigserial PRIMARY KEY, event_id uuid NOT NULL, \
             aggregate text NOT NULL, payload jsonb NOT NULL, kafka_partition int, kafka_offset bigint)",
        )
        .await
        .unwrap();
    let names = Names::new("inbox_e2e");
    let topics = vec![names.topic("order"), names.topic("invoice")];
    create_topics(&topics, 3).await;
    let mut relay = RelayProcess::start(&relay_config(&src, &names, "", ""), &[]);
    relay.wait_log("streaming", START).await;

    let group = unique("inbox_e2e_group");
    let listen = free_local_addr();
    let config = inbox_config(
        &dst,
        &group,
        &topics,
        &listen,
        "INSERT INTO applied (event_id, aggregate, payload, kafka_partition, kafka_offset) \
         VALUES ($1::uuid, $2, $3::jsonb, $4::int, $5::bigint)",
        r#"["id", "key", "value", "partition", "offset"]"#,
        "workers = 4\nmax_in_flight = 64",
    );
    // The same with its own /metrics address, for a second member.
    let second_config = inbox_config(
        &dst,
        &group,
        &topics,
        &free_local_addr(),
        "INSERT INTO applied (event_id, aggregate, payload, kafka_partition, kafka_offset) \
         VALUES ($1::uuid, $2, $3::jsonb, $4::int, $5::bigint)",
        r#"["id", "key", "value", "partition", "offset"]"#,
        "workers = 4\nmax_in_flight = 64",
    );
    // The password comes from the environment (${PGPASSWORD_FOR_INBOX}).
    let start_inbox = || InboxProcess::start(&config);
    let mut inbox = start_inbox();
    let writers = LedgerWriters::start(&src.name, &[pg_port()], 3);

    let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(std::process::id()));
    let mut kills_between_commits = 0;
    let mut second: Option<InboxProcess> = None;
    for round in 0..6 {
        let applied_before = applied_count(&dst.client).await;
        tokio::time::sleep(Duration::from_millis(rng.random_range(700..2200))).await;
        // Each kill falls while this consumer applies: on a loaded machine
        // joining the group (a killed member stays in it until its session
        // times out) can take longer than the pause above.
        wait_for(
            "the consumer to apply events since its start",
            Duration::from_secs(120),
            || async { (applied_count(&dst.client).await > applied_before).then_some(()) },
        )
        .await;
        if round == 4 {
            // The consumer's database connections cut (as by a server
            // restart) while it applies: reconnected, nothing counted as a
            // handler failure.
            wait_for("inbox connections to cut", Duration::from_secs(20), || {
                let dst = &dst.client;
                async move {
                    let cut: i64 = dst
                        .query_one(
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                             WHERE datname = current_database() AND pid <> pg_backend_pid() \
                             AND backend_type = 'client backend'",
                            &[],
                        )
                        .await
                        .ok()?
                        .get(0);
                    (cut > 0).then_some(())
                }
            })
            .await;
            let metrics = wait_for("the inbox reconnected", Duration::from_secs(20), || {
                let listen = listen.clone();
                async move {
                    let m = http_get(&listen, "/metrics");
                    (metric(&m, "walrelay_inbox_db_reconnects_total") > 0.0).then_some(m)
                }
            })
            .await;
            assert_eq!(
                metric(&metrics, "walrelay_inbox_retries_total"),
                0.0,
                "a lost connection is not a handler failure: {metrics}"
            );
        }
        inbox.kill9();
        // Was anything applied (committed to the database) above the
        // offset committed to Kafka? Then this kill fell between the two.
        let offsets = committed(&group, &topics);
        let rows = dst
            .client
            .query(
                "SELECT topic, \"partition\", max(\"offset\") FROM inbox GROUP BY 1, 2",
                &[],
            )
            .await
            .unwrap_or_default();
        if rows.iter().any(|r| {
            let (t, p, max): (String, i32, i64) = (r.get(0), r.get(1), r.get(2));
            offsets.get(&(t, p)).is_none_or(|c| max >= *c)
        }) {
            kills_between_commits += 1;
        }
        if round == 2 {
            // walrelay killed too: it re-sends the unconfirmed tail.
            relay.kill9();
            relay = RelayProcess::start_with(&relay.config_path.clone(), &[]);
        }
        if round == 3 {
            // Re-sent duplicates: some records produced again as they are.
            let consumed = consume_to_end(&[topics[0].as_str(), topics[1].as_str()]);
            let mut again: Vec<&Consumed> =
                consumed.iter().filter(|_| rng.random_bool(0.1)).collect();
            again.truncate(200);
            let p = producer();
            for c in &again {
                let mut headers = OwnedHeaders::new();
                for (k, v) in &c.headers {
                    headers = headers.insert(Header {
                        key: k.as_str(),
                        value: Some(v.as_slice()),
                    });
                }
                let mut r = FutureRecord::to(&c.topic)
                    .partition(c.partition)
                    .headers(headers);
                if let Some(k) = &c.key {
                    r = r.key(k.as_slice());
                }
                if let Some(v) = &c.value {
                    r = r.payload(v.as_slice());
                }
                p.send(r, Duration::from_secs(10)).await.unwrap();
            }
            eprintln!("produced {} records again", again.len());
            assert!(!again.is_empty(), "nothing to re-send");
        }
        inbox = start_inbox();
        // A second consumer in the group for a while: partitions move
        // between the two (and, when it is killed, back), records of a
        // moved partition still in progress on the other.
        if round == 1 {
            second = Some(InboxProcess::start(&second_config));
        }
        if round == 3
            && let Some(mut s) = second.take()
        {
            // It took part: some partitions were its own.
            wait_for(
                "the second consumer's partitions",
                Duration::from_secs(30),
                || {
                    let log = s.log();
                    async move {
                        log.lines()
                            .any(|l| l.contains("partitions assigned") && l.contains(".ev."))
                            .then_some(())
                    }
                },
            )
            .await;
            s.kill9();
        }
    }
    drop(second);
    let events = writers.stop().await;
    assert!(events > 100, "writers committed only {events} events");

    let truth = ledger(&src.client).await;
    // A bound on liveness only: after the last kill the consumer may wait for
    // the killed member's session (45 s) to end before it gets partitions.
    wait_for(
        "every ledger event applied",
        Duration::from_secs(180),
        || {
            let dst = &dst.client;
            let want = truth.len() as i64;
            async move {
                let n: i64 = dst
                    .query_one("SELECT count(DISTINCT event_id) FROM applied", &[])
                    .await
                    .ok()?
                    .get(0);
                (n >= want).then_some(())
            }
        },
    )
    .await;
    // Let the consumer finish and commit, so its counters are final.
    let metrics = http_get(&listen, "/metrics");
    assert_eq!(inbox.stop(), Some(0), "{}", inbox.log());
    relay.stop();

    let rows = dst
        .client
        .query(
            "SELECT event_id::text, aggregate, payload->>'w', (payload->>'s')::bigint, \
             kafka_partition, kafka_offset FROM applied ORDER BY n",
            &[],
        )
        .await
        .unwrap();
    let mut times: HashMap<String, usize> = HashMap::new();
    // aggregate → writer → last sequence applied; aggregate → last offset.
    let mut last_seq: HashMap<(String, String), i64> = HashMap::new();
    let mut last_offset: HashMap<String, (i32, i64)> = HashMap::new();
    for r in &rows {
        let (id, agg, w, s, p, o): (String, String, String, i64, i32, i64) =
            (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5));
        *times.entry(id.clone()).or_default() += 1;
        assert!(
            truth.contains_key(&id),
            "applied {id}, which no writer committed"
        );
        if let Some(prev) = last_seq.insert((agg.clone(), w.clone()), s) {
            assert!(
                prev < s,
                "aggregate {agg}: writer {w}'s event {s} applied after {prev}"
            );
        }
        if let Some((pp, po)) = last_offset.insert(agg.clone(), (p, o)) {
            assert!(
                pp == p && po < o,
                "aggregate {agg}: offset {p}/{o} applied after {pp}/{po}"
            );
        }
    }
    let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "applied more than once: {twice:?}");
    let missing: Vec<_> = truth.keys().filter(|id| !times.contains_key(*id)).collect();
    assert!(missing.is_empty(), "committed, never applied: {missing:?}");
    let quarantined: i64 = dst
        .client
        .query_one("SELECT count(*) FROM inbox_quarantine", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(quarantined, 0);
    assert!(
        kills_between_commits > 0,
        "no kill fell between a database commit and its offset commit"
    );
    assert!(
        metric(&metrics, "walrelay_inbox_records_applied_total") > 0.0,
        "{metrics}"
    );
    eprintln!(
        "{} events applied once; {kills_between_commits} of 6 kills between the commits",
        truth.len()
    );
}

/// Rows in the business table `applied`.
async fn applied_count(dst: &tokio_postgres::Client) -> i64 {
    dst.query_one("SELECT count(*) FROM applied", &[])
        .await
        .map(|r| r.get(0))
        .unwrap_or(0)
}

// ---------------------------------------------------------------- quarantine

/// A topic of one partition holding `n` records of one key, the one at
/// `bad` with a value the handler cannot apply (not JSON); a business table
/// `applied`. Returns the topic and the ids in order.
async fn one_key_topic(dst: &TestDb, n: usize, bad: usize) -> (String, Vec<String>) {
    dst.client
        .batch_execute(
            "CREATE TABLE applied (n bigserial PRIMARY KEY, event_id text NOT NULL, body jsonb NOT NULL)",
        )
        .await
        .unwrap();
    let topic = unique("inbox_q");
    create_topic(&topic).await;
    let records: Vec<(String, String, Option<String>)> = (0..n)
        .map(|i| {
            let value = if i == bad {
                "not json".to_owned()
            } else {
                format!("{{\"i\": {i}}}")
            };
            ("k1".to_owned(), value, Some(format!("ev-{i}")))
        })
        .collect();
    produce(&topic, &records).await;
    let ids = records.into_iter().map(|r| r.2.unwrap()).collect();
    (topic, ids)
}

/// Waits (up to a minute) until `group` has committed offset `end` of
/// partition 0 of `topic`: the inbox's frontier there. `what` names the wait.
async fn wait_committed(group: &str, topic: &str, end: i64, what: &str) {
    wait_for(what, Duration::from_secs(60), || {
        let (group, topic) = (group.to_owned(), topic.to_owned());
        async move {
            let c = committed(&group, std::slice::from_ref(&topic));
            (c.get(&(topic, 0)) == Some(&end)).then_some(())
        }
    })
    .await;
}

/// Runs the inbox as a library (`run_with`, `extra` added to its
/// `[inbox]` config) with `handler` on the one-partition `topic` of
/// [`one_key_topic`]'s six records until its group has committed offset 6
/// (`what` names that wait), stops it, and returns its metrics.
async fn run_handler_until<H>(
    dst: &TestDb,
    name: &str,
    topic: &str,
    extra: &str,
    handler: H,
    what: &str,
) -> std::sync::Arc<walrelay::inbox::InboxMetrics>
where
    H: walrelay::inbox::Handler + Send + Sync + 'static,
{
    use std::sync::Arc;
    let group = unique(&format!("{name}_group"));
    let topics = [topic.to_owned()];
    let path = inbox_config(dst, &group, &topics, "127.0.0.1:0", "unused", "[]", extra);
    let text = std::fs::read_to_string(&path).unwrap();
    let env = |name: &str| (name == "PGPASSWORD_FOR_INBOX").then(|| "postgres".to_owned());
    let loaded = walrelay::inbox::config::from_str(&text, "inbox.toml", &env).unwrap();
    let metrics = Arc::new(walrelay::inbox::InboxMetrics::new(name));
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn({
        let (metrics, shutdown) = (metrics.clone(), shutdown.clone());
        async move { walrelay::inbox::run_with(&loaded.inbox, handler, metrics, shutdown).await }
    });
    wait_committed(&group, topic, 6, what).await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    metrics
}

async fn applied_ids(dst: &TestDb) -> Vec<String> {
    dst.client
        .query("SELECT event_id FROM applied ORDER BY n", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A record the handler fails on 3 times is quarantined (with its value
/// and the error), and one without an event id at once, and the partition
/// goes on: every other record applied, the frontier committed to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_keeps_failing_is_quarantined_and_the_partition_goes_on() {
    require_kafka();
    let dst = TestDb::new("inbox_qc").await;
    let (topic, ids) = one_key_topic(&dst, 10, 4).await;
    // And one without an event id: quarantined at once.
    produce(&topic, &[("k1".into(), "{}".into(), None)]).await;
    let group = unique("inbox_qc_group");
    let listen = free_local_addr();
    let config = inbox_config(
        &dst,
        &group,
        std::slice::from_ref(&topic),
        &listen,
        "INSERT INTO applied (event_id, body) VALUES ($1, $2::jsonb)",
        r#"["id", "value"]"#,
        "max_attempts = 3\non_quarantine = \"continue\"",
    );
    let mut inbox = InboxProcess::start(&config);
    wait_committed(&group, &topic, 11, "the frontier at the end of the topic").await;
    let metrics = http_get(&listen, "/metrics");
    assert_eq!(inbox.stop(), Some(0), "{}", inbox.log());

    let mut want = ids.clone();
    want.remove(4);
    assert_eq!(
        applied_ids(&dst).await,
        want,
        "all but the bad one, in order"
    );
    let q = dst
        .client
        .query(
            "SELECT event_id, \"offset\", convert_from(value, 'UTF8'), error, attempts \
             FROM inbox_quarantine WHERE event_id IS NOT NULL",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(q.len(), 1);
    let (id, offset, value, error, attempts): (String, i64, String, String, i32) = (
        q[0].get(0),
        q[0].get(1),
        q[0].get(2),
        q[0].get(3),
        q[0].get(4),
    );
    assert_eq!(
        (id.as_str(), offset, value.as_str(), attempts),
        ("ev-4", 4, "not json", 3)
    );
    assert!(error.contains("json"), "{error}");
    let no_id = dst
        .client
        .query_one(
            "SELECT \"offset\", error, attempts FROM inbox_quarantine WHERE event_id IS NULL",
            &[],
        )
        .await
        .unwrap();
    let (offset, error, attempts): (i64, String, i32) = (no_id.get(0), no_id.get(1), no_id.get(2));
    assert_eq!((offset, attempts), (10, 0));
    assert!(error.contains("no event id"), "{error}");
    // Continue: its inbox row is written too, so a re-sent copy is skipped.
    let in_inbox: i64 = dst
        .client
        .query_one("SELECT count(*) FROM inbox", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(in_inbox, 10);
    assert_eq!(
        metric(&metrics, "walrelay_inbox_quarantined_total"),
        2.0,
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "walrelay_inbox_retries_total"),
        2.0,
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "walrelay_inbox_records_applied_total"),
        9.0,
        "{metrics}"
    );
    assert!(
        metrics.contains("walrelay_inbox_frontier_lag_records{"),
        "{metrics}"
    );
}

/// With `[inbox.kafka] quarantine_topic`, a record that keeps failing goes
/// to that topic — its key, value and headers, plus where it came from and
/// why — not to the table; its inbox row is written once Kafka holds it,
/// and the partition goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_keeps_failing_goes_to_the_quarantine_topic() {
    require_kafka();
    let dst = TestDb::new("inbox_qt").await;
    let (topic, ids) = one_key_topic(&dst, 6, 3).await;
    let quarantine_topic = unique("inbox_qt_quarantine");
    create_topic(&quarantine_topic).await;
    let group = unique("inbox_qt_group");
    let listen = free_local_addr();
    let config = inbox_config(
        &dst,
        &group,
        std::slice::from_ref(&topic),
        &listen,
        "INSERT INTO applied (event_id, body) VALUES ($1, $2::jsonb)",
        r#"["id", "value"]"#,
        "max_attempts = 2",
    );
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "[inbox.kafka]\n",
        &format!("[inbox.kafka]\nquarantine_topic = \"{quarantine_topic}\"\n"),
    );
    std::fs::write(&config, text).unwrap();
    let mut inbox = InboxProcess::start(&config);
    wait_committed(&group, &topic, 6, "the frontier at the end of the topic").await;
    let metrics = http_get(&listen, "/metrics");
    assert_eq!(inbox.stop(), Some(0), "{}", inbox.log());

    let mut want = ids.clone();
    want.remove(3);
    assert_eq!(
        applied_ids(&dst).await,
        want,
        "all but the bad one, in order"
    );
    let count = |sql: &'static str| {
        let client = &dst.client;
        async move { client.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(count("SELECT count(*) FROM inbox_quarantine").await, 0);
    assert_eq!(
        count("SELECT count(*) FROM inbox").await,
        6,
        "its inbox row too"
    );
    let q = consume_to_end(&[quarantine_topic.as_str()]);
    assert_eq!(q.len(), 1, "{q:?}");
    let r = &q[0];
    assert_eq!(r.key.as_deref(), Some(b"k1".as_slice()));
    assert_eq!(r.value.as_deref(), Some(b"not json".as_slice()));
    assert_eq!(r.header_str("id").as_deref(), Some("ev-3"));
    assert_eq!(r.header_str("walrelay.inbox.topic"), Some(topic.clone()));
    assert_eq!(
        r.header_str("walrelay.inbox.partition").as_deref(),
        Some("0")
    );
    assert_eq!(r.header_str("walrelay.inbox.offset").as_deref(), Some("3"));
    assert_eq!(
        r.header_str("walrelay.inbox.attempts").as_deref(),
        Some("2")
    );
    let error = r.header_str("walrelay.inbox.error").unwrap_or_default();
    assert!(error.contains("json"), "{error}");
    assert_eq!(
        metric(&metrics, "walrelay_inbox_quarantined_total"),
        1.0,
        "{metrics}"
    );
}

/// The consumer's database cannot be reached at start (here: it does not
/// exist yet; as when the database restarts while the consumer does): the
/// consumer waits — running, `/healthz` 503 naming the cause — instead of
/// exiting, and once the database is there it creates its tables and
/// applies every event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_unreachable_at_start_is_waited_for() {
    require_kafka();
    let dst = TestDb::new("inbox_late").await;
    let late = format!("{}_l", dst.name);
    let topic = unique("inbox_late");
    create_topic(&topic).await;
    let records: Vec<(String, String, Option<String>)> = (0..3)
        .map(|i| {
            (
                "k1".to_owned(),
                format!("{{\"i\": {i}}}"),
                Some(format!("ev-{i}")),
            )
        })
        .collect();
    produce(&topic, &records).await;
    let group = unique("inbox_late_group");
    let listen = free_local_addr();
    let config = inbox_config(
        &dst,
        &group,
        std::slice::from_ref(&topic),
        &listen,
        "INSERT INTO applied (event_id, body) VALUES ($1, $2::jsonb)",
        r#"["id", "value"]"#,
        "",
    );
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(&format!("/{}?", dst.name), &format!("/{late}?"));
    std::fs::write(&config, text).unwrap();
    let mut inbox = InboxProcess::start(&config);
    let health = wait_for(
        "/healthz naming the database",
        Duration::from_secs(30),
        || {
            let listen = listen.clone();
            async move {
                let h = http_get(&listen, "/healthz");
                (h.contains(" 503 ") && h.contains("cannot connect to inbox.postgres.url"))
                    .then_some(h)
            }
        },
    )
    .await;
    assert!(!health.contains("postgres:postgres@"), "{health}");
    assert!(
        matches!(inbox.child.try_wait(), Ok(None)),
        "the consumer exited instead of waiting:\n{}",
        inbox.log()
    );
    let admin = pg_connect("postgres").await;
    admin
        .batch_execute(&format!("CREATE DATABASE {late}"))
        .await
        .unwrap();
    let client = pg_connect(&late).await;
    client
        .batch_execute(
            "CREATE TABLE applied (n bigserial PRIMARY KEY, event_id text NOT NULL, body jsonb NOT NULL)",
        )
        .await
        .unwrap();
    wait_committed(&group, &topic, 3, "the frontier at the end of the topic").await;
    assert_eq!(inbox.stop(), Some(0), "{}", inbox.log());
    let applied: Vec<String> = client
        .query("SELECT event_id FROM applied ORDER BY n", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(applied, ["ev-0", "ev-1", "ev-2"]);
    drop(client);
    let _ = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {late} WITH (FORCE)"))
        .await;
}

/// With `on_quarantine = "stop"` the partition stops at the quarantined
/// record: nothing of its key after it is applied, the committed offset
/// stays at it, health says so. Restarted with a handler that can apply
/// it, the record and the rest are applied once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_on_quarantine_stop_the_partition_stops_at_the_record_until_fixed() {
    require_kafka();
    let dst = TestDb::new("inbox_qs").await;
    let (topic, ids) = one_key_topic(&dst, 8, 3).await;
    let group = unique("inbox_qs_group");
    let listen = free_local_addr();
    let config = inbox_config(
        &dst,
        &group,
        std::slice::from_ref(&topic),
        &listen,
        "INSERT INTO applied (event_id, body) VALUES ($1, $2::jsonb)",
        r#"["id", "value"]"#,
        "max_attempts = 2\non_quarantine = \"stop\"",
    );
    let mut inbox = InboxProcess::start(&config);
    let health = wait_for("the partition stopped", Duration::from_secs(30), || {
        let listen = listen.clone();
        async move {
            let h = http_get(&listen, "/healthz");
            h.contains("stopped").then_some(h)
        }
    })
    .await;
    assert!(
        health.contains("503") && health.contains(&format!("{topic}/0")),
        "{health}"
    );
    // Let a commit pass: it must not move past the stopped record.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(inbox.stop(), Some(0), "{}", inbox.log());
    assert_eq!(
        committed(&group, std::slice::from_ref(&topic)).get(&(topic.clone(), 0)),
        Some(&3)
    );
    assert_eq!(applied_ids(&dst).await, ids[..3].to_vec());
    let in_inbox: i64 = dst
        .client
        .query_one("SELECT count(*) FROM inbox WHERE event_id = 'ev-3'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        in_inbox, 0,
        "stop: no inbox row, so the record is tried again"
    );
    let quarantined: i64 = dst
        .client
        .query_one(
            "SELECT count(*) FROM inbox_quarantine WHERE event_id = 'ev-3'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(quarantined, 1);

    // The fix: a handler that stores a non-JSON value as a JSON string.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("$2::jsonb", "to_jsonb($2)");
    std::fs::write(&config, text).unwrap();
    let mut inbox = InboxProcess::start(&config);
    wait_committed(&group, &topic, 8, "the frontier at the end of the topic").await;
    assert_eq!(inbox.stop(), Some(0), "{}", inbox.log());
    assert_eq!(applied_ids(&dst).await, ids, "each once, in order");
}

// ---------------------------------------------------------------- library

/// A handler of the library's own (Rust code in the inbox transaction)
/// that fails twice on one event: the retries succeed, nothing is
/// quarantined, every event applied once in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_handler_retried_after_failures_applies_every_event_once() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use walrelay::inbox::{Event, Handler, HandlerError};

    struct Flaky {
        failures_left: AtomicU32,
    }
    impl Handler for Flaky {
        async fn apply<'a>(
            &'a self,
            tx: &'a tokio_postgres::Transaction<'a>,
            event: &'a Event,
        ) -> Result<(), HandlerError> {
            let body = std::str::from_utf8(event.value.as_deref().unwrap_or_default())?;
            tx.execute(
                "INSERT INTO applied (event_id, body) VALUES ($1, $2::text::jsonb)",
                &[&event.id, &body],
            )
            .await?;
            if event.id == "ev-2"
                && self
                    .failures_left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
            {
                return Err("downstream not ready".into());
            }
            Ok(())
        }
    }

    require_kafka();
    let dst = TestDb::new("inbox_lib").await;
    let (topic, ids) = one_key_topic(&dst, 6, usize::MAX).await;
    let handler = Flaky {
        failures_left: AtomicU32::new(2),
    };
    let metrics = run_handler_until(
        &dst,
        "inbox_lib",
        &topic,
        "max_attempts = 3",
        handler,
        "the frontier at the end of the topic",
    )
    .await;
    assert_eq!(
        applied_ids(&dst).await,
        ids,
        "each once, in order (the failed attempts rolled back)"
    );
    let render = metrics.render();
    assert_eq!(
        metric(&render, "walrelay_inbox_retries_total"),
        2.0,
        "{render}"
    );
    assert_eq!(
        metric(&render, "walrelay_inbox_quarantined_total"),
        0.0,
        "{render}"
    );
    assert_eq!(
        metric(&render, "walrelay_inbox_records_applied_total"),
        6.0,
        "{render}"
    );
}

/// A handler that panics has failed an attempt, like one that returns an
/// error: with a single worker (whose end would stop everything), one event
/// that always panics is quarantined after `max_attempts` with the panic's
/// message, one that panics once is retried and applied, every other event
/// applied once in order, and the frontier committed to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_retried_then_quarantined_and_the_worker_lives_on() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use walrelay::inbox::{Event, Handler, HandlerError};

    struct Panicky {
        once_left: AtomicU32,
    }
    impl Handler for Panicky {
        async fn apply<'a>(
            &'a self,
            tx: &'a tokio_postgres::Transaction<'a>,
            event: &'a Event,
        ) -> Result<(), HandlerError> {
            let body = std::str::from_utf8(event.value.as_deref().unwrap_or_default())?;
            // Written before the panic: rolled back with the attempt.
            tx.execute(
                "INSERT INTO applied (event_id, body) VALUES ($1, $2::text::jsonb)",
                &[&event.id, &body],
            )
            .await?;
            if event.id == "ev-2" {
                panic!("no handler for {}", event.id);
            }
            if event.id == "ev-4"
                && self
                    .once_left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
            {
                panic!("flaky once");
            }
            Ok(())
        }
    }

    require_kafka();
    let dst = TestDb::new("inbox_panic").await;
    let (topic, ids) = one_key_topic(&dst, 6, usize::MAX).await;
    let handler = Panicky {
        once_left: AtomicU32::new(1),
    };
    let metrics = run_handler_until(
        &dst,
        "inbox_panic",
        &topic,
        "max_attempts = 3\nworkers = 1",
        handler,
        "the frontier at the end of the topic (a dead worker leaves it at 2)",
    )
    .await;
    let mut want = ids.clone();
    want.remove(2);
    assert_eq!(
        applied_ids(&dst).await,
        want,
        "all but ev-2, each once, in order (the panicked attempts rolled back)"
    );
    let q = dst
        .client
        .query(
            "SELECT event_id, \"offset\", error, attempts FROM inbox_quarantine",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(q.len(), 1);
    let (id, offset, error, attempts): (String, i64, String, i32) =
        (q[0].get(0), q[0].get(1), q[0].get(2), q[0].get(3));
    assert_eq!((id.as_str(), offset, attempts), ("ev-2", 2, 3));
    assert_eq!(error, "the handler panicked: no handler for ev-2");
    let render = metrics.render();
    for (name, want) in [
        ("walrelay_inbox_retries_total", 3.0),
        ("walrelay_inbox_quarantined_total", 1.0),
        ("walrelay_inbox_records_applied_total", 5.0),
    ] {
        assert_eq!(metric(&render, name), want, "{name}: {render}");
    }
}

/// The consumer side is separate (design.md's module rules): nothing in
/// src/inbox/ imports the connector's modules.
#[test]
fn the_inbox_imports_nothing_of_the_connector() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/inbox");
    let forbidden = [
        "relay",
        "source",
        "sink",
        "pg",
        "pgoutput",
        "checkpoint",
        "offsets",
        "router",
        "startup",
    ];
    let mut files = 0;
    // Every file of the folder, its modules' test folders included.
    let mut dirs = vec![dir];
    let mut paths = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                paths.push(path);
            }
        }
    }
    for path in paths {
        let text = std::fs::read_to_string(&path).unwrap();
        files += 1;
        // `pg::tls` alone is shared: the inbox's connection gets libpq's
        // sslmode meanings from the code the connector's connections use.
        let text = text.replace("crate::pg::tls", "");
        for m in forbidden {
            for pattern in [
                format!("crate::{m}::"),
                format!("crate::{m};"),
                format!("crate::{{{m}"),
            ] {
                assert!(
                    !text.contains(&pattern),
                    "{} uses {pattern}: the inbox must not know the connector's side",
                    path.display()
                );
            }
        }
    }
    assert!(files >= 5);
}

/// A bad file: exit 2, every problem named with its key and fix, the
/// password in the URL never repeated.
#[test]
fn a_bad_inbox_file_exits_2_naming_each_key() {
    let path = write_config(
        "[inbox]\nname = \"x\"\ntopics = []\nworkers = 0\non_quarantine = \"stop\"\n\
         [inbox.kafka]\nbrokers = \"k:9092\"\nlibrdkafka = { \"enable.auto.commit\" = \"true\" }\n\
         [inbox.postgres]\nurl = \"postgres://u:hunter2@h/d\"\n\
         [inbox.handler]\nsql = \"SELECT 1\"\nparams = [\"header:\"]\n",
    );
    let out = std::process::Command::new(walrelay_bin())
        .args(["inbox", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for needle in [
        "inbox.topics: must list at least one topic",
        "inbox.workers: is 0; set 1 to 256",
        "inbox.kafka.librdkafka.\"enable.auto.commit\": is set by the inbox",
        "inbox.handler.params[0]: names no header",
    ] {
        assert!(stderr.contains(needle), "{needle} not in:\n{stderr}");
    }
    assert!(!stderr.contains("hunter2"), "{stderr}");
    let typo = write_config("[inbox]\nnmae = \"x\"\n");
    let out = std::process::Command::new(walrelay_bin())
        .args(["inbox", "--config"])
        .arg(&typo)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(":2:1: inbox.nmae: unknown key `nmae` in [inbox]; did you mean `name`?"),
        "{stderr}"
    );
}

/// The exit code and text of `walrelay <command> --config <path>`, which
/// must end within 20 s.
fn run_briefly(command: &str, path: &std::path::Path) -> (Option<i32>, String) {
    let mut child = std::process::Command::new(walrelay_bin())
        .args([command, "--config"])
        .arg(path)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..200 {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            return (out.status.code(), text);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    panic!(
        "walrelay {command} still running after 20 s:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A database URL that cannot work whatever the server does (issue 40: it
/// used to wait forever) is a configuration error: exit 2 at once, the key
/// with its line and column, the password never repeated.
#[test]
fn a_malformed_database_url_exits_2_at_once() {
    for (url, needle) in [
        (
            "postgres://u:hunter2@127.0.0.1:notaport/d",
            "is not a PostgreSQL connection URL",
        ),
        ("postgres://u:hunter2@/d", "names no host"),
        (
            "postgres://u:hunter2@127.0.0.1/d?sslmode=verify",
            "is not a mode",
        ),
        (
            "postgres://u:hunter2@127.0.0.1/d?sslmode=verify-ca",
            "needs sslrootcert",
        ),
    ] {
        let path = write_config(&format!(
            "[inbox]\nname = \"x\"\ntopics = [\"t\"]\n[inbox.kafka]\nbrokers = \"k:9092\"\n\
             [inbox.postgres]\nurl = \"{url}\"\n[inbox.handler]\nsql = \"SELECT 1\"\n"
        ));
        let (code, text) = run_briefly("inbox", &path);
        assert_eq!(code, Some(2), "{url}: {text}");
        assert!(
            text.contains(":7:7: inbox.postgres.url: ") && text.contains(needle),
            "{url}: {needle} not in:\n{text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
    }
}

/// A file given to the wrong command says which command takes it: exit 2.
#[test]
fn a_file_given_to_the_wrong_command_names_the_right_one() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let inbox_file = root.join("config/inbox/inbox.toml");
    for command in ["run", "check"] {
        let (code, text) = run_briefly(command, &inbox_file);
        assert_eq!(code, Some(2), "{command}: {text}");
        assert!(
            text.contains("this is an inbox consumer's file")
                && text.contains("walrelay inbox --config"),
            "{command}: {text}"
        );
    }
    let (code, text) = run_briefly("inbox", &root.join("config/quickstart.toml"));
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("this is a connector's file") && text.contains("walrelay run --config"),
        "{text}"
    );
}

/// Whether the session of `client` is encrypted, as the server sees it.
async fn session_encrypted(client: &tokio_postgres::Client) -> bool {
    client
        .query_one(
            "SELECT coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// `inbox.postgres.url`'s `sslmode` means what it means to libpq (issue
/// 40: without one, the dev server — which offers TLS — was never
/// reached): no `sslmode` and `require` encrypt without checking the
/// certificate; `verify-ca` and `verify-full` check it against
/// `sslrootcert`, `verify-full` the host name too; `disable` is
/// plaintext. A refused certificate says so, naming the mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_url_takes_sslmode_as_libpq_does() {
    let port = pg_port();
    let ca = pg_tls_file("ca.pem");
    let other_ca = pg_tls_file("other-ca.pem");
    let url = |host: &str, query: &str| {
        secrecy::SecretString::from(format!(
            "postgresql://postgres:postgres@{host}:{port}/postgres{query}"
        ))
    };
    for (host, query, encrypted) in [
        ("127.0.0.1", String::new(), true),
        ("127.0.0.1", "?sslmode=prefer".to_owned(), true),
        ("127.0.0.1", "?sslmode=require".to_owned(), true),
        ("127.0.0.1", "?sslmode=disable".to_owned(), false),
        (
            "127.0.0.1",
            format!("?sslmode=verify-full&sslrootcert={}", ca.display()),
            true,
        ),
        // The certificate names 127.0.0.1, not localhost: verify-ca does
        // not look.
        (
            "localhost",
            format!("?sslmode=verify-ca&sslrootcert={}", ca.display()),
            true,
        ),
    ] {
        let client = walrelay::inbox::connect(&url(host, &query))
            .await
            .unwrap_or_else(|e| panic!("{host}{query}: {e}"));
        assert_eq!(session_encrypted(&client).await, encrypted, "{host}{query}");
    }
    for (host, query) in [
        (
            "127.0.0.1",
            format!("?sslmode=verify-full&sslrootcert={}", other_ca.display()),
        ),
        (
            "localhost",
            format!("?sslmode=verify-full&sslrootcert={}", ca.display()),
        ),
    ] {
        let e = walrelay::inbox::connect(&url(host, &query))
            .await
            .err()
            .unwrap_or_else(|| panic!("{host}{query} connected"));
        assert!(
            e.contains("sslmode=verify-full") && e.contains("certificate"),
            "{host}{query}: {e}"
        );
        assert!(!e.contains("postgres:postgres@"), "{e}");
    }
}

/// The consumer itself, with a URL without `sslmode` against the dev
/// server (which offers TLS): it connects and creates its tables, instead
/// of waiting on "error performing TLS handshake".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_reaches_a_tls_server_with_no_sslmode_in_its_url() {
    require_kafka();
    let dst = TestDb::new("inbox_tls").await;
    let topic = unique("inbox_tls");
    create_topic(&topic).await;
    let group = unique("inbox_tls_group");
    let listen = free_local_addr();
    let config = inbox_config(
        &dst,
        &group,
        std::slice::from_ref(&topic),
        &listen,
        "SELECT 1",
        "[]",
        "",
    );
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("?sslmode=disable", "");
    assert!(!text.contains("sslmode"), "{text}");
    std::fs::write(&config, text).unwrap();
    let mut inbox = InboxProcess::start(&config);
    wait_for("the inbox table", Duration::from_secs(30), || {
        let client = &dst.client;
        async move {
            client
                .query_opt("SELECT 1 FROM pg_tables WHERE tablename = 'inbox'", &[])
                .await
                .ok()
                .flatten()
        }
    })
    .await;
    assert!(!inbox.log().contains("TLS handshake"), "{}", inbox.log());
    assert_eq!(inbox.stop(), Some(0), "{}", inbox.log());
}

/// Table-event topics too (issue 26: "outbox topics (and table-event
/// topics)"): `[[table]]` change events of inserts, updates and deletes
/// (their tombstones included, null values) carry `walrelay.event_id`,
/// which the inbox's default `id_headers` take. walrelay is killed -9 once
/// mid-stream, so a tail is re-sent with the same ids: each distinct event
/// is applied exactly once, the re-sent copies are skipped, and each row's
/// events are applied in commit order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_events_are_applied_once_by_their_event_id() {
    require_kafka();
    let src = TestDb::new("inbox_tsrc").await;
    src.client
        .batch_execute(
            "CREATE TABLE accounts (id int4 PRIMARY KEY, v int4 NOT NULL);
             ALTER TABLE accounts OWNER TO walrelay;",
        )
        .await
        .unwrap();
    let dst = TestDb::new("inbox_tdst").await;
    dst.client
        .batch_execute(
            "CREATE TABLE applied (n bigserial PRIMARY KEY, event_id text NOT NULL, \
             row_key jsonb NOT NULL, body jsonb)",
        )
        .await
        .unwrap();
    let names = Names::new("inbox_te");
    let prefix = format!("{}_cdc", names.connector);
    let topic = format!("{prefix}.public.accounts");
    let relay_toml = connector_config(
        &src,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\n[[table]]\nname = \"public.accounts\"\n"
        ),
    );
    let mut relay = RelayProcess::start(&relay_toml, &[]);
    relay.wait_log("streaming", Duration::from_secs(120)).await;
    // 40 rows, each inserted, updated twice and (every other one) deleted,
    // in transactions of a few changes; walrelay killed half-way.
    for round in 0..4 {
        for i in 0..10 {
            let id = round * 10 + i;
            let delete = if id % 2 == 0 {
                format!("DELETE FROM accounts WHERE id = {id};")
            } else {
                String::new()
            };
            src.client
                .batch_execute(&format!(
                    "BEGIN; INSERT INTO accounts VALUES ({id}, 0); \
                     UPDATE accounts SET v = 1 WHERE id = {id}; COMMIT; \
                     BEGIN; UPDATE accounts SET v = 2 WHERE id = {id}; {delete} COMMIT;"
                ))
                .await
                .unwrap();
        }
        if round == 1 {
            relay.kill9();
            relay = RelayProcess::start(&relay_toml, &[]);
            relay.wait_log("streaming", Duration::from_secs(120)).await;
        }
    }
    let end = src.current_wal_lsn().await;
    src.wait_confirmed(
        &names.slot,
        end,
        "every change in Kafka",
        Duration::from_secs(120),
    )
    .await;
    // 40 inserts + 80 updates + 20 deletes + 20 tombstones.
    let in_kafka = consume_to_end(&[topic.as_str()]);
    let event_id = |r: &Consumed| {
        r.headers
            .iter()
            .find(|(k, _)| k == "walrelay.event_id")
            .map(|(_, v)| String::from_utf8(v.clone()).unwrap())
            .unwrap()
    };
    let distinct: std::collections::BTreeSet<String> = in_kafka.iter().map(event_id).collect();
    assert_eq!(distinct.len(), 160, "distinct table events in Kafka");

    let group = unique("inbox_te_group");
    let listen = free_local_addr();
    let config = inbox_config(
        &dst,
        &group,
        std::slice::from_ref(&topic),
        &listen,
        "INSERT INTO applied (event_id, row_key, body) VALUES ($1, $2::jsonb, $3::jsonb)",
        r#"["id", "key", "value"]"#,
        "workers = 4",
    );
    let mut inbox = InboxProcess::start(&config);
    // Every record read: the distinct ones applied, the re-sent copies
    // counted as skipped.
    let resent = in_kafka.len() - 160;
    wait_for(
        "every table event applied and every re-sent copy skipped",
        Duration::from_secs(60),
        || async {
            let n: i64 = dst
                .client
                .query_one("SELECT count(*) FROM applied", &[])
                .await
                .unwrap()
                .get(0);
            let metrics = http_get(&listen, "/metrics");
            let skipped = metric(&metrics, "walrelay_inbox_duplicates_skipped_total") as usize;
            (n >= 160 && skipped >= resent).then_some(())
        },
    )
    .await;
    let metrics = http_get(&listen, "/metrics");
    assert_eq!(inbox.stop(), Some(0), "{}", inbox.log());

    let rows = dst
        .client
        .query(
            "SELECT event_id, row_key::text, body::text FROM applied ORDER BY n",
            &[],
        )
        .await
        .unwrap();
    let applied: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    let unique_applied: std::collections::BTreeSet<String> = applied.iter().cloned().collect();
    assert_eq!(applied.len(), 160, "each event applied once");
    assert_eq!(unique_applied, distinct, "exactly the events in Kafka");
    // Per row, in commit order: c, u, u, then (even ids) d and its tombstone.
    let mut per_row: HashMap<String, Vec<String>> = HashMap::new();
    for r in &rows {
        let body: Option<String> = r.get(2);
        let op = body.map_or("tombstone".to_owned(), |b| {
            serde_json::from_str::<serde_json::Value>(&b).unwrap()["op"]
                .as_str()
                .unwrap()
                .to_owned()
        });
        per_row.entry(r.get(1)).or_default().push(op);
    }
    assert_eq!(per_row.len(), 40, "{per_row:?}");
    for (key, ops) in &per_row {
        let id: i64 = serde_json::from_str::<serde_json::Value>(key).unwrap()["id"]
            .as_i64()
            .unwrap();
        let want: &[&str] = if id % 2 == 0 {
            &["c", "u", "u", "d", "tombstone"]
        } else {
            &["c", "u", "u"]
        };
        assert_eq!(ops, want, "row {id}");
    }
    assert_eq!(
        metric(&metrics, "walrelay_inbox_duplicates_skipped_total") as usize,
        resent,
        "the re-sent copies are skipped, nothing else: {metrics}"
    );
    assert_eq!(
        metric(&metrics, "walrelay_inbox_records_applied_total") as usize,
        160,
        "{metrics}"
    );
    assert!(relay.stop().success(), "{}", relay.log());
}

/// A server certificate the URL's `sslmode=verify-full` refuses is an
/// error retrying cannot fix, as for the connector's own connections: the
/// consumer stops at start (exit 1) naming the mode and the certificate,
/// instead of waiting for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_server_certificate_stops_the_consumer_naming_it() {
    require_kafka();
    let dst = TestDb::new("inbox_tlsno").await;
    let topic = unique("inbox_tlsno");
    let group = unique("inbox_tlsno_group");
    let listen = free_local_addr();
    let config = inbox_config(
        &dst,
        &group,
        std::slice::from_ref(&topic),
        &listen,
        "SELECT 1",
        "[]",
        "",
    );
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "?sslmode=disable",
        &format!(
            "?sslmode=verify-full&sslrootcert={}",
            pg_tls_file("other-ca.pem").display()
        ),
    );
    std::fs::write(&config, text).unwrap();
    let mut inbox = InboxProcess::start(&config);
    let mut code = None;
    for _ in 0..300 {
        if let Ok(Some(status)) = inbox.child.try_wait() {
            code = Some(status.code());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = inbox.log();
    assert_eq!(code, Some(Some(1)), "still running or another exit:\n{log}");
    assert!(
        log.contains("sslmode=verify-full") && log.contains("certificate"),
        "{log}"
    );
    assert!(!log.contains("postgres:postgres@"), "{log}");
}
