//! `[[outbox]] format = "avro" | "json_schema"` against a real schema
//! registry (Apicurio Registry 3.3.3, `deploy/dev/registry.sh`): every
//! record is decoded by Confluent's own Python client (not ours,
//! `tests/support/sr_decode.py`) and equals its row; schema ids are asked
//! for once per subject, not per record (counted in the registry's access
//! log); the registry unreachable mid-stream loses nothing and sends
//! nothing schema-less; a schema the registry refuses stops the connector
//! naming table, subject and the registry's message.
//!
//! Needs `WALRELAY_REGISTRY_URL`, `WALRELAY_REGISTRY_LOG` and
//! `WALRELAY_REGISTRY_PYTHON` (`deploy/dev/registry.sh up` prints them).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

use crate::support::*;

pub(crate) fn registry_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: start the registry with `eval \"$(deploy/dev/registry.sh up)\"` \
             (deploy/test.sh does), then run the test again"
        )
    })
}

pub(crate) fn registry_url() -> String {
    registry_env("WALRELAY_REGISTRY_URL")
}

/// The registry's access-log lines for requests on subjects whose names
/// start with `prefix` (Apicurio logs one line per HTTP request): what
/// walrelay asks (registration, lookup), not the decoder's reads by id.
pub(crate) fn registry_requests(prefix: &str) -> usize {
    let log = std::fs::read_to_string(registry_env("WALRELAY_REGISTRY_LOG")).unwrap_or_default();
    let needle = format!("path=\"/apis/ccompat/v7/subjects/{prefix}");
    log.lines()
        .filter(|l| l.contains("apicurio-registry.access") && l.contains(&needle))
        .count()
}

/// Every record of `topics`, decoded by Confluent's Python client.
pub(crate) fn decode(format: &str, url: &str, topics: &[String]) -> Vec<Value> {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/sr_decode.py");
    let out = std::process::Command::new(registry_env("WALRELAY_REGISTRY_PYTHON"))
        .arg(script)
        .arg(kafka_brokers())
        .arg(url)
        .arg(format)
        .args(topics)
        .output()
        .expect("run sr_decode.py");
    assert!(
        out.status.success(),
        "Confluent's client could not decode the records: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("sr_decode.py prints JSON"))
        .collect()
}

pub(crate) fn registry_section(url: &str) -> String {
    format!("[kafka.schema_registry]\nurl = \"{url}\"\n")
}

/// Checks every row arrived (by id), decoded to its aggregate id and
/// payload; returns the records decoded and the distinct ids.
fn verify(rows: &HashMap<String, OutboxRow>, decoded: &[Value], names: &Names) -> (usize, usize) {
    let mut seen = HashSet::new();
    for r in decoded {
        let id = r["id"].as_str().unwrap();
        let row = rows
            .get(id)
            .unwrap_or_else(|| panic!("a record of no row: {r}"));
        assert_eq!(r["topic"], names.topic(&row.aggregate_type).as_str(), "{r}");
        assert_eq!(r["key"], row.aggregate_id.as_str(), "key of {id}");
        let value: Value = serde_json::from_str(r["value"].as_str().expect("value is a string"))
            .expect("the value is the payload's JSON text");
        let payload: Value = serde_json::from_str(&row.payload).unwrap();
        assert_eq!(value, payload, "value of {id}");
        assert!(r["key_schema_id"].as_u64().is_some() && r["value_schema_id"].as_u64().is_some());
        seen.insert(id.to_owned());
    }
    let missing: Vec<_> = rows.keys().filter(|id| !seen.contains(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} rows never arrived, e.g. {:?}",
        missing.len(),
        missing.first()
    );
    (decoded.len(), seen.len())
}

async fn wait_all(format: &str, url: &str, db: &TestDb, topics: &[String]) -> Vec<Value> {
    let want = outbox_rows(db).await.len();
    wait_for(
        "every row decoded from Kafka",
        Duration::from_secs(180),
        || {
            let topics = topics.to_vec();
            let url = url.to_owned();
            let format = format.to_owned();
            async move {
                let decoded = decode(&format, &url, &topics);
                let ids: HashSet<_> = decoded
                    .iter()
                    .map(|r| r["id"].as_str().unwrap().to_owned())
                    .collect();
                (ids.len() >= want).then_some(decoded)
            }
        },
    )
    .await
}

/// Outbox rows of the initial snapshot and under concurrent writers, in
/// `format`, decoded by Confluent's client; the registry is asked once per
/// subject.
async fn writers_decoded_by_confluents_client(format: &str) {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("sr").await;
    db.create_outbox("outbox").await;
    let names = Names::new("sr");
    let health = free_local_addr();
    let config = relay_config(
        &db,
        &names,
        &format!("format = \"{format}\""),
        &format!(
            "{}\n[health]\nlisten = \"{health}\"\n",
            registry_section(&url)
        ),
    );
    // Rows before the start: the initial snapshot's records, framed too.
    insert(&db, "order", 10).await;
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    let writers = Writers::start(&db);
    // Enough rows to show caching, however slow the machine: written
    // until there are 300 (not for a fixed time: under load 4 s once
    // wrote 160).
    wait_for(
        "300 outbox rows written",
        Duration::from_secs(180),
        || async {
            let n: i64 = db
                .client
                .query_one("SELECT count(*) FROM outbox", &[])
                .await
                .ok()?
                .get(0);
            (n >= 300).then_some(())
        },
    )
    .await;
    writers.stop().await;
    let topics = vec![names.topic("order"), names.topic("invoice")];
    let decoded = wait_all(format, &url, &db, &topics).await;
    let rows = outbox_rows(&db).await;
    let (records, ids) = verify(&rows, &decoded, &names);
    // Ids cached: one request per subject (key and value of two topics),
    // whatever the number of records.
    let requests = registry_requests(&names.topic_prefix);
    let metrics = http_get(&health, "/metrics");
    eprintln!(
        "{format}: {records} records decoded ({ids} rows); registry requests for them: {requests}"
    );
    assert!(records >= 200, "too few records to show caching: {records}");
    assert_eq!(
        requests, 4,
        "one registry request per subject, not per record"
    );
    assert!(
        metrics.contains("walrelay_schema_registry_requests_total{connector=")
            && metrics
                .lines()
                .any(|l| l.starts_with("walrelay_schema_registry_requests_total")
                    && l.ends_with(" 4")),
        "{metrics}"
    );
    let schema_ids: HashSet<_> = decoded
        .iter()
        .map(|r| (r["topic"].to_string(), r["value_schema_id"].to_string()))
        .collect();
    assert_eq!(
        schema_ids.len(),
        2,
        "one value schema id per topic: {schema_ids:?}"
    );
    relay.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn avro_records_decode_with_confluents_client() {
    writers_decoded_by_confluents_client("avro").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn json_schema_records_decode_with_confluents_client() {
    writers_decoded_by_confluents_client("json_schema").await;
}

/// A TCP proxy in front of the registry that can be taken down (every
/// connection refused or cut) and brought back.
struct Proxy {
    addr: String,
    up: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let up = Arc::new(AtomicBool::new(true));
        let task = tokio::spawn({
            let up = up.clone();
            async move {
                loop {
                    let Ok((mut client, _)) = listener.accept().await else {
                        continue;
                    };
                    if !up.load(Ordering::SeqCst) {
                        let _ = client.shutdown().await;
                        continue;
                    }
                    let upstream = upstream.clone();
                    let up = up.clone();
                    tokio::spawn(async move {
                        let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                            return;
                        };
                        let copy = tokio::io::copy_bidirectional(&mut client, &mut server);
                        tokio::select! {
                            _ = copy => {}
                            _ = async { while up.load(Ordering::SeqCst) { tokio::time::sleep(Duration::from_millis(50)).await } } => {}
                        }
                    });
                }
            }
        });
        Proxy { addr, up, task }
    }

    fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn metric(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn insert(db: &TestDb, aggregate_type: &str, n: usize) {
    for i in 0..n {
        db.client
            .batch_execute(&format!(
                "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES \
                 (gen_random_uuid(), '{aggregate_type}', 'agg-{i}', 'Created', '{{\"n\": {i}}}')"
            ))
            .await
            .unwrap();
    }
}

/// The registry unreachable mid-stream: records of a subject already
/// cached keep flowing; the first record of a new subject waits (nothing of
/// it, nothing schema-less, reaches its topic; health says so; the error
/// metric moves); once the registry is back every row arrives, decoded.
#[tokio::test(flavor = "multi_thread")]
async fn registry_outage_mid_stream_loses_nothing() {
    require_kafka();
    let url = registry_url();
    let upstream = url
        .strip_prefix("http://")
        .and_then(|r| r.split('/').next())
        .unwrap()
        .to_owned();
    let base_path = url
        .strip_prefix("http://")
        .unwrap()
        .trim_start_matches(&upstream)
        .to_owned();
    let proxy = Proxy::start(upstream).await;
    let proxied = format!("http://{}{base_path}", proxy.addr);
    let db = TestDb::new("sr_outage").await;
    db.create_outbox("outbox").await;
    let names = Names::new("sr_outage");
    let health = free_local_addr();
    let config = relay_config(
        &db,
        &names,
        "format = \"avro\"",
        &format!(
            "{}\n[health]\nlisten = \"{health}\"\n",
            registry_section(&proxied)
        ),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    insert(&db, "order", 20).await;
    let order = vec![names.topic("order")];
    wait_for("the first orders", Duration::from_secs(60), || {
        let n = records_in(&order);
        async move { (n >= 20).then_some(()) }
    })
    .await;

    proxy.set_up(false);
    insert(&db, "refund", 5).await;
    insert(&db, "order", 5).await;
    let refund = vec![names.topic("refund")];
    let down_health = wait_for(
        "health to say the registry is away",
        Duration::from_secs(60),
        || {
            let body = http_get(&health, "/healthz");
            async move { body.contains("schema registry").then_some(body) }
        },
    )
    .await;
    let errors = metric(
        &http_get(&health, "/metrics"),
        "walrelay_schema_registry_errors_total",
    );
    assert!(errors >= 1, "the error metric did not move");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        records_in(&refund),
        0,
        "a record reached Kafka without its schema id"
    );
    assert!(
        relay.is_running(),
        "a registry outage must not stop the connector"
    );

    proxy.set_up(true);
    let decoded = wait_all("avro", &url, &db, &[order[0].clone(), refund[0].clone()]).await;
    let rows = outbox_rows(&db).await;
    let (records, ids) = verify(&rows, &decoded, &names);
    let errors_after = metric(
        &http_get(&health, "/metrics"),
        "walrelay_schema_registry_errors_total",
    );
    eprintln!(
        "outage: health said {:?}; {errors_after} failed registry requests; {records} records \
         decoded for {ids} rows",
        down_health.lines().last().unwrap_or_default()
    );
    relay.stop();
}

/// A schema the registry refuses (the subject holds an incompatible one,
/// BACKWARD): the connector stops, naming table, subject and the registry's
/// message, and nothing is confirmed past the row.
#[tokio::test(flavor = "multi_thread")]
async fn an_incompatible_schema_stops_the_connector() {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("sr_incompat").await;
    db.create_outbox("outbox").await;
    let names = Names::new("sr_incompat");
    let subject = format!("{}-value", names.topic("order"));
    // Someone registered a long as the subject's value schema.
    let status = std::process::Command::new("curl")
        .args([
            "-sf",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/vnd.schemaregistry.v1+json",
        ])
        .args(["-d", r#"{"schema":"\"long\""}"#])
        .arg(format!("{url}/subjects/{subject}/versions"))
        .status()
        .unwrap();
    assert!(status.success(), "could not register the old schema");
    let config = relay_config(&db, &names, "format = \"avro\"", &registry_section(&url));
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    let before = db.current_wal_lsn().await;
    insert(&db, "order", 1).await;
    let log = relay.expect_exit(1, Duration::from_secs(60));
    let line = log
        .lines()
        .find(|l| l.contains("schema registry") && l.contains("HTTP 409"))
        .unwrap_or_else(|| panic!("no refusal naming the registry in:\n{log}"));
    for needle in [
        "public.outbox",
        subject.as_str(),
        "Incompatible",
        "compatib",
    ] {
        assert!(line.contains(needle), "{needle:?} missing from: {line}");
    }
    assert_eq!(records_in(&[names.topic("order")]), 0);
    let confirmed = db.confirmed_flush(&names.slot).await.unwrap_or(0);
    assert!(confirmed <= before, "the slot passed the refused row");
}

/// `walrelay check` reaches the registry and says so; an unreachable one
/// is a FAIL line naming it.
#[tokio::test(flavor = "multi_thread")]
async fn check_reaches_the_registry() {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("sr_check").await;
    db.create_outbox("outbox").await;
    let names = Names::new("sr_check");
    let path = write_config(&relay_config(
        &db,
        &names,
        "format = \"avro\"",
        &registry_section(&url),
    ));
    let (_, report) = check(&path);
    let line = report
        .lines()
        .find(|l| l.contains("schema registry"))
        .unwrap_or_else(|| panic!("no schema registry line in:\n{report}"));
    assert!(
        line.starts_with("ok") && line.contains("BACKWARD"),
        "{line}"
    );
    let dead = format!("http://{}", free_local_addr());
    let path = write_config(&relay_config(
        &db,
        &names,
        "format = \"avro\"",
        &registry_section(&dead),
    ));
    let (code, report) = check(&path);
    assert_ne!(code, Some(0));
    assert!(
        failures(&report)
            .iter()
            .any(|f| f.contains("unreachable") && f.contains(&dead)),
        "{report}"
    );
}

/// Registers `schema` (an Avro schema's JSON text) under `subject`.
fn register(url: &str, subject: &str, schema: &str) {
    let body = serde_json::json!({ "schema": schema }).to_string();
    let out = std::process::Command::new("curl")
        .args([
            "-sf",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/vnd.schemaregistry.v1+json",
        ])
        .args(["-d", &body])
        .arg(format!("{url}/subjects/{subject}/versions"))
        .output()
        .unwrap();
    assert!(out.status.success(), "could not register under {subject}");
}

/// `auto_register = false`: a subject without the schema stops the
/// connector naming it (and nothing is registered); once the schemas are
/// registered, records carry their ids. `use_latest_version`: the latest
/// version's id, and a latest version that is another schema stops it.
#[tokio::test(flavor = "multi_thread")]
async fn schemas_registered_beforehand_lookup_and_latest_version() {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("sr_lookup").await;
    db.create_outbox("outbox").await;
    let names = Names::new("sr_lookup");
    let topic = names.topic("order");
    let lookup = format!("{}auto_register = false\n", registry_section(&url));
    let config = relay_config(&db, &names, "format = \"avro\"", &lookup);
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    insert(&db, "order", 3).await;
    let log = relay.expect_exit(1, Duration::from_secs(60));
    assert!(
        log.contains(&format!("refused subject \"{topic}-key\" (HTTP 404"))
            && log.contains("auto_register = true"),
        "no refusal naming the unregistered subject:\n{log}"
    );
    assert_eq!(records_in(&[topic.as_str()]), 0);
    assert_eq!(
        registry_requests(&format!("{topic}-key/versions")),
        0,
        "it registered"
    );

    register(&url, &format!("{topic}-key"), r#""string""#);
    let value =
        r#"["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}]"#;
    register(&url, &format!("{topic}-value"), value);
    let mut relay = RelayProcess::start_with(&relay.config_path, &[]);
    let decoded = wait_all("avro", &url, &db, std::slice::from_ref(&topic)).await;
    verify(&outbox_rows(&db).await, &decoded, &names);
    relay.stop();

    // The latest version of the value subject is now another schema.
    register(
        &url,
        &format!("{topic}-value"),
        r#"["null","string","long"]"#,
    );
    let latest = format!("{lookup}use_latest_version = true\n");
    let path = write_config(&relay_config(&db, &names, "format = \"avro\"", &latest));
    let mut relay = RelayProcess::start_with(&path, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    insert(&db, "order", 1).await;
    let log = relay.expect_exit(1, Duration::from_secs(60));
    assert!(
        log.contains(&format!("the latest schema of subject \"{topic}-value\""))
            && log.contains("is not the one walrelay writes"),
        "no refusal of the other latest schema:\n{log}"
    );
}

/// `https://` with `ssl_ca`: check reaches it and records go out framed;
/// without the CA the certificate is not trusted, which retrying cannot fix:
/// check fails and run stops, both saying so.
#[tokio::test(flavor = "multi_thread")]
async fn https_with_the_registrys_ca_and_without() {
    require_kafka();
    let url = registry_url();
    let tls_url = registry_env("WALRELAY_REGISTRY_TLS_URL");
    let ca = registry_env("WALRELAY_REGISTRY_CA");
    let db = TestDb::new("sr_tls").await;
    db.create_outbox("outbox").await;
    let names = Names::new("sr_tls");
    let trusted = format!("{}ssl_ca = \"{ca}\"\n", registry_section(&tls_url));
    let path = write_config(&relay_config(&db, &names, "format = \"avro\"", &trusted));
    let (_, report) = check(&path);
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("ok") && l.contains("schema registry") && l.contains(&tls_url)),
        "{report}"
    );
    let mut relay = RelayProcess::start_with(&path, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    insert(&db, "order", 5).await;
    let topic = names.topic("order");
    let decoded = wait_all("avro", &url, &db, std::slice::from_ref(&topic)).await;
    verify(&outbox_rows(&db).await, &decoded, &names);
    relay.stop();

    let untrusted = write_config(&relay_config(
        &db,
        &names,
        "format = \"avro\"",
        &registry_section(&tls_url),
    ));
    let (code, report) = check(&untrusted);
    assert_ne!(code, Some(0));
    assert!(
        failures(&report).iter().any(|f| f.contains("not trusted")),
        "{report}"
    );
    let names2 = Names::new("sr_tls2");
    let config = relay_config(
        &db,
        &names2,
        "format = \"avro\"",
        &registry_section(&tls_url),
    );
    // (Its initial snapshot holds the rows above: the first needs an id.)
    let mut relay = RelayProcess::start(&config, &[]);
    let log = relay.expect_exit(1, Duration::from_secs(60));
    assert!(
        log.contains("not trusted") && log.contains("kafka.schema_registry.ssl_ca"),
        "no definite TLS refusal:\n{log}"
    );
}

/// `walrelay republish` of an Avro outbox frames its records with the ids
/// the stream registered (same subjects, same schemas): Confluent's client
/// decodes the republished copies to their rows, under the streamed ones'
/// schema ids, marked `walrelay.republished`. With the registry
/// unreachable it exits 1 naming the registry and publishes nothing —
/// never a schema-less record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn republish_frames_its_records_with_the_streams_schema_ids() {
    use crate::support::runbook::walrelay;
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("sr_rep").await;
    db.create_outbox("outbox").await;
    let names = Names::new("sr_rep");
    let config = relay_config(&db, &names, "format = \"avro\"", &registry_section(&url));
    let path = write_config(&config);
    let topics = vec![names.topic("order"), names.topic("invoice")];
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    insert(&db, "order", 4).await;
    insert(&db, "invoice", 3).await;
    let streamed = wait_all("avro", &url, &db, &topics).await;
    assert!(relay.stop().success());
    let rows = outbox_rows(&db).await;
    let ids_of = |decoded: &[Value]| -> HashSet<(String, String)> {
        decoded
            .iter()
            .map(|r| (r["topic"].to_string(), r["value_schema_id"].to_string()))
            .collect()
    };

    let (code, out, err) = walrelay(&[
        "republish",
        "--config",
        path.to_str().unwrap(),
        "--where",
        "true",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("republished 7 record(s) of public.outbox"),
        "{out}"
    );
    let all = decode("avro", &url, &topics);
    let republished: Vec<Value> = all
        .iter()
        .filter(|r| r["headers"]["walrelay.republished"] == "true")
        .cloned()
        .collect();
    assert_eq!(republished.len(), 7, "{all:?}");
    verify(&rows, &republished, &names);
    assert_eq!(
        ids_of(&republished),
        ids_of(&streamed),
        "republished records under other schema ids than the streamed ones"
    );

    // The registry unreachable: exit 1, nothing sent.
    let gone = format!("http://{}/apis/ccompat/v7", free_local_addr());
    let path = write_config(&relay_config(
        &db,
        &names,
        "format = \"avro\"",
        &registry_section(&gone),
    ));
    let (code, out, err) = walrelay(&[
        "republish",
        "--config",
        path.to_str().unwrap(),
        "--where",
        "true",
    ]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("schema registry: no schema id for a record to topic")
            && err.contains("0 record(s) were acknowledged"),
        "{err}"
    );
    assert_eq!(
        decode("avro", &url, &topics).len(),
        14,
        "a record reached Kafka without its schema id"
    );
}

/// `[heartbeat] format = "avro" | "json_schema"`: heartbeat records
/// decoded by Confluent's client (not ours) to Debezium's key
/// `{"serverName": …}` and value `{"ts_ms": …}`, under the
/// `io.debezium.connector.common.ServerNameKey` / `.Heartbeat` schemas the
/// registry holds; one schema id per part for every record.
async fn heartbeats_through_the_registry(format: &str) {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("hbsr").await;
    db.create_outbox("outbox").await;
    let names = Names::new("hbsr");
    let topic = format!("{}.heartbeats", names.connector);
    let config = relay_config(
        &db,
        &names,
        "",
        &format!(
            "{}[heartbeat]\ninterval = \"200ms\"\npublish = true\ntopic = \"{topic}\"\n\
             format = \"{format}\"\n",
            registry_section(&url)
        ),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    let started = now_ms();
    wait_for("3 heartbeat records", Duration::from_secs(60), || {
        let topic = topic.clone();
        async move { (consume_to_end(&[topic.as_str()]).len() >= 3).then_some(()) }
    })
    .await;
    // Stopped first: the decoder reads to the end of the topic, which a
    // record every 200 ms may never let it reach.
    assert!(relay.stop().success());
    let decoded = decode(
        &format!("{format}:schemas"),
        &url,
        std::slice::from_ref(&topic),
    );
    assert!(decoded.len() >= 3, "{decoded:?}");
    let mut ids = HashSet::new();
    for r in &decoded {
        assert_eq!(
            r["key"],
            serde_json::json!({ "serverName": names.connector }),
            "{r}"
        );
        let ts = r["value"]["ts_ms"].as_i64().expect("ts_ms");
        assert!(ts >= started - 60_000 && ts <= now_ms(), "{r}");
        let key_schema = r["key_schema"].as_str().expect("key schema");
        let value_schema = r["value_schema"].as_str().expect("value schema");
        assert!(
            key_schema.contains("io.debezium.connector.common.ServerNameKey")
                && value_schema.contains("io.debezium.connector.common.Heartbeat"),
            "{key_schema} / {value_schema}"
        );
        ids.insert((r["key_schema_id"].clone(), r["value_schema_id"].clone()));
    }
    assert_eq!(ids.len(), 1, "one key and one value schema id: {ids:?}");
    eprintln!("{format}: {} heartbeat records decoded", decoded.len());
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_heartbeats_decode_with_confluents_client() {
    heartbeats_through_the_registry("avro").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_heartbeats_decode_with_confluents_client() {
    heartbeats_through_the_registry("json_schema").await;
}
