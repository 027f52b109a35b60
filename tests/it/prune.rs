//! `walrelay prune` (issue 42, part 2) against the real servers: it never
//! deletes an outbox row whose event is not in Kafka — with walrelay killed
//! (-9) and stopped while writers commit, and the prune itself killed (-9)
//! mid-batch — and it deletes those rows once the stored offset passes
//! them. A trigger writes every deleted id to a ledger, so a deletion by a
//! killed prune is checked too: each one must be a record in Kafka.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;
use crate::support::runbook::walrelay;

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use support::*;

/// Retention that lets age protect nothing: only the stored offset does.
const RETENTION: &str = "[outbox.retention]\nkeep = \"1s\"\nmargin = \"1s\"\nbatch_rows = 5\n\
                         lock_timeout = \"200ms\"\n";

/// A ledger of every deleted outbox row and when it was deleted, filled by
/// a trigger in the deleting transaction (so a batch that a kill rolled
/// back is not in it).
async fn add_ledger(db: &TestDb) {
    db.client
        .batch_execute(
            "CREATE TABLE deleted_ids (id uuid NOT NULL, at timestamptz NOT NULL);
             CREATE FUNCTION note_delete() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN INSERT INTO deleted_ids VALUES (OLD.id, clock_timestamp());
                  RETURN OLD; END $$;
             CREATE TRIGGER note_delete AFTER DELETE ON outbox
               FOR EACH ROW EXECUTE FUNCTION note_delete();
             ALTER TABLE deleted_ids OWNER TO walrelay;",
        )
        .await
        .unwrap();
}

async fn deleted_ids(db: &TestDb) -> HashSet<String> {
    db.client
        .query("SELECT id::text FROM deleted_ids", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Every deleted row is a record in Kafka (its `id` header). Returns how
/// many were deleted.
async fn assert_deleted_were_published(db: &TestDb, names: &Names, when: &str) -> usize {
    let deleted = deleted_ids(db).await;
    let published: HashSet<String> =
        consume_to_end(&[&names.topic("order"), &names.topic("invoice")])
            .iter()
            .filter_map(|c| c.header_str("id"))
            .collect();
    let missing: Vec<&String> = deleted.difference(&published).collect();
    assert!(
        missing.is_empty(),
        "{when}: prune deleted {} row(s) whose events are not in Kafka, e.g. {:?}",
        missing.len(),
        missing.iter().take(5).collect::<Vec<_>>()
    );
    deleted.len()
}

fn prune_json(config: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["prune", "--config", config.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let (code, out, err) = walrelay(&args);
    assert_eq!(code, Some(0), "prune failed:\n{out}{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn table(report: &serde_json::Value) -> &serde_json::Value {
    &report["tables"][0]
}

async fn insert_marked(db: &TestDb, n: usize) -> HashSet<String> {
    db.client
        .query(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
             SELECT gen_random_uuid(), 'order', 'marked-' || g, 'Created', '{}' \
             FROM generate_series(1, $1::int4) g RETURNING id::text",
            &[&i32::try_from(n).unwrap()],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn remaining(db: &TestDb, ids: &HashSet<String>) -> usize {
    let present: HashSet<String> = outbox_rows(db).await.into_keys().collect();
    ids.intersection(&present).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prune_never_deletes_an_unpublished_row_through_kills_and_deletes_it_once_published() {
    require_kafka();
    let db = TestDb::new("prune").await;
    db.create_outbox("outbox").await;
    add_ledger(&db).await;
    let names = Names::new("prune");
    let config = write_config(&relay_config(&db, &names, RETENTION, ""));

    // No offset stored yet: nothing is deleted, and the report says why.
    let early = insert_marked(&db, 20).await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let report = prune_json(&config, &[]);
    assert_eq!(table(&report)["deleted"], 0, "{report}");
    assert!(
        table(&report)["kept_all"]
            .as_str()
            .unwrap()
            .contains("no offset is stored"),
        "{report}"
    );
    assert_eq!(remaining(&db, &early).await, early.len());

    // walrelay streams under writers, then is killed -9 mid-stream.
    let mut relay = RelayProcess::start_with(&config, &[]);
    relay.wait_log("streaming", START).await;
    let writers = Writers::start(&db);
    tokio::time::sleep(Duration::from_secs(4)).await;
    relay.kill9();

    // While it is down (writers go on): rows that cannot be in Kafka.
    let unpublished = insert_marked(&db, 50).await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let report = prune_json(&config, &[]);
    let t = table(&report);
    assert_eq!(
        remaining(&db, &unpublished).await,
        unpublished.len(),
        "prune deleted rows committed while walrelay was down: {report}"
    );
    assert!(
        t["kept_unpublished"].as_u64().unwrap() >= unpublished.len() as u64,
        "{report}"
    );
    assert!(
        t["deleted"].as_u64().unwrap() > 0,
        "rows published before the kill and older than the margin should go: {report}"
    );
    assert_deleted_were_published(&db, &names, "walrelay killed").await;

    // A bulk the prune needs many batches for; the prune is killed -9 while
    // a batch waits for a table lock (its transaction open).
    let bulk = insert_marked(&db, 20_000).await;
    let mut relay = RelayProcess::start_with(&config, &[]);
    relay.wait_log("streaming", START).await;
    wait_for("the bulk in Kafka", Duration::from_secs(120), || async {
        let published: HashSet<String> = consume_to_end(&[&names.topic("order")])
            .iter()
            .filter_map(|c| c.header_str("id"))
            .collect();
        bulk.is_subset(&published).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let slow = write_config(
        &relay_config(&db, &names, RETENTION, "")
            .replace("lock_timeout = \"200ms\"", "lock_timeout = \"60s\""),
    );
    let before = deleted_ids(&db).await.len();
    let mut prune = std::process::Command::new(walrelay_bin())
        .args(["prune", "--config", slow.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(
        "the prune's first batches",
        Duration::from_secs(60),
        || async { (deleted_ids(&db).await.len() > before).then_some(()) },
    )
    .await;
    let mut locker = pg_connect(&db.name).await;
    let lock = locker.transaction().await.unwrap();
    lock.batch_execute("LOCK TABLE outbox IN SHARE MODE")
        .await
        .unwrap();
    wait_for(
        "the prune waiting on the lock",
        Duration::from_secs(30),
        || async {
            let n: i64 = db
                .client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock' AND query LIKE 'WITH v AS%'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            (n > 0).then_some(())
        },
    )
    .await;
    assert!(
        prune.try_wait().unwrap().is_none(),
        "the prune finished before the kill"
    );
    let _ = prune.kill();
    let _ = prune.wait();
    lock.rollback().await.unwrap();
    let mid = assert_deleted_were_published(&db, &names, "prune killed mid-batch").await;
    assert!(mid > before && remaining(&db, &bulk).await > 0);

    // A table lock held throughout: batches time out, the rest is left.
    let lock = locker.transaction().await.unwrap();
    lock.batch_execute("LOCK TABLE outbox IN SHARE MODE")
        .await
        .unwrap();
    let report = prune_json(&config, &["--wait", "30s"]);
    lock.rollback().await.unwrap();
    assert_eq!(table(&report)["skipped_batches"], 3, "{report}");
    assert_eq!(table(&report)["left_locked"], true, "{report}");
    assert_eq!(table(&report)["deleted"], 0, "{report}");

    // walrelay is back: once the stored offset passes the rows written
    // while it was down, they go (writers keep the offset moving).
    wait_for(
        "the rows written while walrelay was down pruned",
        Duration::from_secs(120),
        || async {
            let _ = prune_json(&config, &[]);
            (remaining(&db, &unpublished).await == 0 && remaining(&db, &bulk).await == 0)
                .then_some(())
        },
    )
    .await;
    writers.stop().await;
    let total = assert_deleted_were_published(&db, &names, "after walrelay caught up").await;
    assert!(
        total >= unpublished.len() + bulk.len() + early.len(),
        "{total}"
    );
    assert!(relay.stop().success(), "{}", relay.log());
}

/// Bad input names the key or flag and the fix (exit 2, or 1 for what the
/// server says); Kafka unreachable is waited for, then given up with exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_refuses_bad_input_naming_the_key() {
    require_kafka();
    let db = TestDb::new("prunebad").await;
    db.create_outbox("outbox").await;
    let names = Names::new("prunebad");
    let arg = |p: &Path| p.to_str().unwrap().to_owned();

    let none = write_config(&relay_config(&db, &names, "", ""));
    let (code, _, err) = walrelay(&["prune", "--config", &arg(&none)]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("outbox[*].retention") && err.contains("keep"),
        "{err}"
    );

    let tables = write_config(&relay_config(
        &db,
        &names,
        RETENTION,
        "[[table]]\nname = \"public.orders\"\n",
    ));
    let (code, _, err) = walrelay(&[
        "prune",
        "--config",
        &arg(&tables),
        "--table",
        "public.orders",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("table[0] captures it") && err.contains("delete events"),
        "{err}"
    );

    let column = write_config(&relay_config(
        &db,
        &names,
        "[outbox.retention]\nkeep = \"1d\"\ncolumn = \"type\"\nmargin = \"1h\"\n",
        "",
    ));
    let (code, _, err) = walrelay(&["prune", "--config", &arg(&column)]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("outbox[0].retention.column") && err.contains("not timestamptz"),
        "{err}"
    );

    let missing_margin = write_config(&relay_config(
        &db,
        &names,
        "[outbox.retention]\nkeep = \"1d\"\ncolumn = \"created_at\"\n",
        "",
    ));
    let (code, _, err) = walrelay(&["prune", "--config", &arg(&missing_margin)]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("outbox[0].retention.margin"), "{err}");

    let unreachable = write_config(&relay_config(&db, &names, RETENTION, "").replace(
        &format!("brokers = \"{}\"", kafka_brokers()),
        "brokers = \"127.0.0.1:9\"",
    ));
    let (code, _, err) = walrelay(&["prune", "--config", &arg(&unreachable), "--wait", "1s"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("gave up after waiting") && err.contains("Kafka (the offset store)"),
        "{err}"
    );
    assert_eq!(outbox_rows(&db).await.len(), 0);
}

/// `[outbox.retention] interval`: `walrelay run` prunes in the background
/// under writers, killed -9 once mid-way and restarted: rows go, and every
/// one that went is in Kafka; the pass is reported in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_prunes_in_the_background_only_what_kafka_holds() {
    require_kafka();
    let db = TestDb::new("prunerun").await;
    db.create_outbox("outbox").await;
    add_ledger(&db).await;
    let names = Names::new("prunerun");
    let config = relay_config(&db, &names, &format!("{RETENTION}interval = \"1s\"\n"), "");
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", START).await;
    let writers = Writers::start(&db);
    wait_for(
        "the connector's first pruned rows",
        Duration::from_secs(120),
        || async { (!deleted_ids(&db).await.is_empty()).then_some(()) },
    )
    .await;
    relay
        .wait_log("outbox retention: public.outbox: deleted", START)
        .await;
    relay.kill9();
    let unpublished = insert_marked(&db, 50).await;
    let before = assert_deleted_were_published(&db, &names, "walrelay killed").await;
    assert_eq!(remaining(&db, &unpublished).await, unpublished.len());

    let mut relay = RelayProcess::start_with(&relay.config_path, &[]);
    relay.wait_log("streaming", START).await;
    wait_for(
        "the rows written while walrelay was down pruned by it",
        Duration::from_secs(120),
        || async { (remaining(&db, &unpublished).await == 0).then_some(()) },
    )
    .await;
    writers.stop().await;
    let after = assert_deleted_were_published(&db, &names, "after the restart").await;
    assert!(
        after > before + unpublished.len() - 1,
        "{before} -> {after}"
    );
    assert!(relay.stop().success(), "{}", relay.log());
}

/// `[outbox.retention] interval` while walrelay runs behind its commits:
/// its producers linger 3 s, so every record reaches Kafka seconds after
/// its row was committed and the stored offset trails the writers by more
/// than the retention's `keep` and `margin` together. Every row the
/// background prune deleted had its record appended to Kafka before the
/// deletion (the topics stamp each record with the broker's append time,
/// the ledger each deletion with the server's clock; one machine, one
/// clock), and the passes say they kept rows not yet published.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lagging_connector_prunes_only_rows_kafka_held_before_it_deleted_them() {
    require_kafka();
    let db = TestDb::new("prunelag").await;
    db.create_outbox("outbox").await;
    add_ledger(&db).await;
    let names = Names::new("prunelag");
    let topics = [names.topic("order"), names.topic("invoice")];
    for t in &topics {
        create_topic_with_config(t, &[("message.timestamp.type", "LogAppendTime")]).await;
    }
    let config = relay_config(&db, &names, &format!("{RETENTION}interval = \"1s\"\n"), "").replace(
        "linger = \"2ms\"\n",
        "linger = \"3s\"\nlinger_while_behind = \"3s\"\n",
    );
    assert!(config.contains("linger = \"3s\""), "{config}");
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", START).await;
    let writers = Writers::start(&db);
    wait_for(
        "the connector's background passes to delete 100 rows",
        Duration::from_secs(120),
        || async { (deleted_ids(&db).await.len() >= 100).then_some(()) },
    )
    .await;
    writers.stop().await;

    let deleted: Vec<(String, i64)> = db
        .client
        .query(
            "SELECT id::text, (extract(epoch FROM at) * 1000)::int8 FROM deleted_ids",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    let appended: std::collections::HashMap<String, i64> = consume_to_end(&refs)
        .iter()
        .filter_map(|c| Some((c.header_str("id")?, c.timestamp?)))
        .collect();
    let early: Vec<String> = deleted
        .iter()
        .filter(|(id, at)| appended.get(id).is_none_or(|appended| appended > at))
        .map(|(id, at)| format!("{id} deleted at {at}, appended at {:?}", appended.get(id)))
        .collect();
    assert!(
        early.is_empty(),
        "{} of {} deleted rows were deleted before Kafka held their records, e.g. {:?}",
        early.len(),
        deleted.len(),
        early.iter().take(5).collect::<Vec<_>>()
    );
    let log = relay.log();
    assert!(
        log.lines().any(|l| {
            l.contains("outbox retention: public.outbox: deleted")
                && !l.contains("(0 not yet published")
        }),
        "no pass kept a row for not being published: the connector did not lag\n{log}"
    );
    assert!(relay.stop().success(), "{log}");
}

/// Only the instance that holds the lease prunes: a standby of the same
/// connector writes no pass while the active one deletes; once the active
/// one is killed (-9) the standby takes over and its passes delete, each
/// row once and only what Kafka holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_lease_holder_prunes_and_a_standby_takes_over() {
    require_kafka();
    let db = TestDb::new("prunelease").await;
    db.create_outbox("outbox").await;
    add_ledger(&db).await;
    let names = Names::new("prunelease");
    let config = relay_config(&db, &names, &format!("{RETENTION}interval = \"1s\"\n"), "");
    let mut active = RelayProcess::start(&config, &[]);
    active.wait_log("streaming", START).await;
    let mut standby = RelayProcess::start(&config, &[]);
    standby.wait_log("standby", START).await;
    let writers = Writers::start(&db);
    wait_for(
        "the active instance's passes to delete rows",
        Duration::from_secs(120),
        || async { (deleted_ids(&db).await.len() >= 50).then_some(()) },
    )
    .await;
    active
        .wait_log("outbox retention: public.outbox: deleted", START)
        .await;
    // Passes every second: several of the standby's would have run by now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !standby.log().contains("outbox retention: public.outbox"),
        "a standby pruned:\n{}",
        standby.log()
    );

    active.kill9();
    let before = deleted_ids(&db).await.len();
    standby
        .wait_log("outbox retention: public.outbox: deleted", START)
        .await;
    wait_for(
        "the new holder's passes to delete rows",
        Duration::from_secs(120),
        || async { (deleted_ids(&db).await.len() >= before + 50).then_some(()) },
    )
    .await;
    writers.stop().await;
    let deleted: Vec<String> = db
        .client
        .query("SELECT id::text FROM deleted_ids", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let unique: HashSet<&String> = deleted.iter().collect();
    assert_eq!(unique.len(), deleted.len(), "a row deleted twice");
    assert_deleted_were_published(&db, &names, "after the takeover").await;
    assert!(standby.stop().success(), "{}", standby.log());
}
