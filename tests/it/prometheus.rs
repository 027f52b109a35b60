//! The dashboards and alerts, checked against a real Prometheus (issue 11):
//! Prometheus (Debian's `prometheus` package, which deploy/prometheus/check.sh
//! installs) scrapes a running walrelay on loopback every second; every
//! expression of `deploy/grafana/walrelay.json` and every series an alert
//! rule of `deploy/prometheus/alerts.yaml` reads must evaluate without an
//! error and return series; then a record that Kafka cannot take (its topic
//! does not exist and may not be auto-created) drives the Kafka-stalled, the
//! unhealthy and the slot-lag alerts to firing, and killing walrelay drives
//! `WalrelayDown` for its target. The scrape job is named as the annotation
//! discovery of deploy/kubernetes names it (`kubernetes-pods`), not
//! "walrelay": no rule may depend on the job's name to work. The rules are
//! loaded with their durations shrunk to seconds and the lag threshold to 0
//! bytes, the expressions otherwise as shipped.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::*;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A Prometheus server, killed on drop.
struct Prometheus {
    child: Child,
    addr: String,
    dir: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(self.dir.join("data"));
    }
}

/// `alerts.yaml` with `for:` and range windows in seconds and the lag
/// threshold at 0, so the test need not wait ten minutes.
fn fast_rules(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let line = if line.trim_start().starts_with("for:") {
            let indent = &line[..line.len() - line.trim_start().len()];
            format!("{indent}for: 5s")
        } else {
            line.replace("[5m]", "[20s]")
                .replace("[10m]", "[20s]")
                .replace("[15m]", "[20s]")
                .replace(
                    "walrelay_slot_lag_bytes > 1073741824",
                    "walrelay_slot_lag_bytes > 0",
                )
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn start_prometheus(target: &str) -> Prometheus {
    let binary = std::env::var("WALRELAY_PROMETHEUS").unwrap_or_else(|_| "prometheus".into());
    let dir = std::env::temp_dir().join(unique("walrelay_prometheus"));
    std::fs::create_dir_all(&dir).unwrap();
    let rules =
        fast_rules(&std::fs::read_to_string(repo().join("deploy/prometheus/alerts.yaml")).unwrap());
    std::fs::write(dir.join("alerts.yaml"), rules).unwrap();
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files: [alerts.yaml]\n\
             scrape_configs:\n  - job_name: kubernetes-pods\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let addr = free_local_addr();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(&binary)
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {binary:?} ({e}): install Prometheus (deploy/prometheus/check.sh \
                 installs Debian's prometheus package) or set WALRELAY_PROMETHEUS"
            )
        });
    Prometheus { child, addr, dir }
}

/// GET on Prometheus' HTTP API; the parsed `data`, or the error.
fn api(prometheus: &Prometheus, path_and_query: &str) -> Result<Value, String> {
    let answer = http_get(&prometheus.addr, path_and_query);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .ok_or_else(|| format!("no HTTP answer: {answer:?}"))?;
    let json: Value = serde_json::from_str(body).map_err(|e| format!("{e}: {body}"))?;
    if json["status"] != "success" {
        return Err(format!("{}: {}", json["errorType"], json["error"]));
    }
    Ok(json["data"].clone())
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The number of series `expr` returns now.
fn series(prometheus: &Prometheus, expr: &str) -> Result<usize, String> {
    let data = api(prometheus, &format!("/api/v1/query?query={}", encode(expr)))?;
    Ok(data["result"].as_array().map_or(0, Vec::len))
}

/// Every target expression of the Grafana dashboard, with its variables
/// replaced as Grafana would for one connector.
fn dashboard_exprs(connector: &str) -> Vec<(String, String)> {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("deploy/grafana/walrelay.json")).unwrap(),
    )
    .unwrap();
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"]
                .as_str()
                .unwrap()
                .replace("$connector", connector)
                .replace("$__rate_interval", "20s")
                .replace("$__range", "5m");
            out.push((panel["title"].as_str().unwrap().to_owned(), expr));
        }
    }
    assert!(out.len() >= 10, "the dashboard has its panels");
    out
}

/// The metric names an alert rule's expression reads.
fn alert_selectors(rules: &str) -> Vec<(String, String)> {
    let yaml: Vec<(String, String)> = rules
        .split("- alert: ")
        .skip(1)
        .map(|rule| {
            let name = rule.lines().next().unwrap().trim().to_owned();
            let expr_start = rule.find("expr:").unwrap();
            let expr_end = rule[expr_start..].find("for:").unwrap() + expr_start;
            (name, rule[expr_start + 5..expr_end].to_owned())
        })
        .collect();
    let mut out = Vec::new();
    for (name, expr) in yaml {
        let mut rest = expr.as_str();
        while let Some(at) = rest.find("walrelay_") {
            let metric: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[at + metric.len()..];
            if !out.contains(&(name.clone(), metric.clone())) {
                out.push((name.clone(), metric));
            }
        }
    }
    out
}

/// The firing alerts' names.
fn firing(prometheus: &Prometheus) -> Vec<String> {
    firing_labels(prometheus)
        .iter()
        .map(|labels| labels["alertname"].as_str().unwrap().to_owned())
        .collect()
}

/// The firing alerts' labels.
fn firing_labels(prometheus: &Prometheus) -> Vec<Value> {
    api(prometheus, "/api/v1/alerts")
        .map(|d| {
            d["alerts"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|a| a["state"] == "firing")
                .map(|a| a["labels"].clone())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_alert_expressions_work_against_a_real_prometheus() {
    require_kafka();
    // safe_wal_size exists only with a limit (walrelay leaves it out when
    // unlimited): give the server a generous one for this test.
    let _keep_size = SystemSetting::set("max_slot_wal_keep_size", "100GB").await;

    let db = TestDb::new("prom").await;
    db.create_outbox("outbox").await;
    let names = Names::new("prom");
    create_topic(&names.topic("order")).await;
    let listen = free_local_addr();
    let config = relay_config(
        &db,
        &names,
        "",
        &format!("[health]\nlisten = \"{listen}\"\n[heartbeat]\ninterval = \"1s\"\n"),
    )
    .replacen(
        "linger = \"2ms\"",
        "linger = \"2ms\"\nlibrdkafka = { \"allow.auto.create.topics\" = \"false\", \
         \"topic.metadata.propagation.max.ms\" = \"600000\" }",
        1,
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", START).await;
    let prometheus = start_prometheus(&listen);

    // Healthy traffic, and one session error (the walsender terminated) so
    // that the restarts-by-cause series exist.
    let insert = |aggregate_type: &'static str| {
        let client = &db.client;
        async move {
            client
                .execute(
                    "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
                     VALUES (gen_random_uuid(), $1, 'a', 'Created', '{}')",
                    &[&aggregate_type],
                )
                .await
                .unwrap();
        }
    };
    for _ in 0..5 {
        insert("order").await;
    }
    // The walsender exists only once the session streams (the log's
    // "streaming" may come from the snapshot's end, just before it).
    wait_for("a walsender to terminate", START, || async {
        let terminated = db
            .client
            .execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots \
                 WHERE slot_name = $1 AND active_pid IS NOT NULL",
                &[&names.slot],
            )
            .await
            .unwrap();
        (terminated > 0).then_some(())
    })
    .await;
    relay.wait_log("streaming again", START).await;
    for _ in 0..5 {
        insert("order").await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    wait_for("Prometheus to scrape walrelay", START, || async {
        (series(&prometheus, "walrelay_records_acked_total > 9").ok()? > 0).then_some(())
    })
    .await;
    // A few more scrapes, so rates have two samples.
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The terminated walsender ended one streaming session (the reconnect
    // attempts that found the slot still active, if any, are not counted).
    assert_eq!(
        series(&prometheus, "walrelay_streaming_session_errors_total == 1"),
        Ok(1),
        "{}",
        http_get(&listen, "/metrics")
    );

    let mut problems = Vec::new();
    for (panel, expr) in dashboard_exprs(&names.connector) {
        match series(&prometheus, &expr) {
            Ok(0) => problems.push(format!("dashboard panel {panel:?}: no series from {expr}")),
            Ok(_) => {}
            Err(e) => problems.push(format!("dashboard panel {panel:?}: {expr}: {e}")),
        }
    }
    let rules = std::fs::read_to_string(repo().join("deploy/prometheus/alerts.yaml")).unwrap();
    for (alert, metric) in alert_selectors(&rules) {
        match series(&prometheus, &metric) {
            Ok(0) => problems.push(format!("alert {alert}: no series of {metric}")),
            Ok(_) => {}
            Err(e) => problems.push(format!("alert {alert}: {metric}: {e}")),
        }
    }
    let rule_health = api(&prometheus, "/api/v1/rules").unwrap();
    for group in rule_health["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            if rule["health"] == "err" {
                problems.push(format!("rule {}: {}", rule["name"], rule["lastError"]));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        firing(&prometheus).is_empty(),
        "nothing fires while healthy: {:?}",
        firing(&prometheus)
    );

    // Kafka cannot take a record (its topic does not exist): the record
    // stays in flight, the slot falls behind, /healthz turns 503.
    insert("stalled").await;
    wait_for(
        "the Kafka-stalled, unhealthy and slot-lag alerts to fire",
        Duration::from_secs(120),
        || async {
            let firing = firing(&prometheus);
            [
                "WalrelayKafkaStalled",
                "WalrelayUnhealthy",
                "WalrelaySlotLagHigh",
            ]
            .iter()
            .all(|a| firing.iter().any(|f| f == a))
            .then_some(())
        },
    )
    .await;

    // walrelay gone: its target, found by the metrics it served before, not
    // by the job's name.
    relay.kill9();
    wait_for(
        "WalrelayDown to fire for the target",
        Duration::from_secs(60),
        || async {
            firing_labels(&prometheus)
                .iter()
                .any(|l| l["alertname"] == "WalrelayDown" && l["instance"] == listen.as_str())
                .then_some(())
        },
    )
    .await;
}
