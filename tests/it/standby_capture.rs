//! Capture from a hot standby (`postgres.capture_from = "standby"`,
//! PostgreSQL 16+) for real, on the pair of deploy/dev/pg_pair.sh: the slot
//! is created on the standby (the primary nudged to log its running
//! transactions), the initial snapshot is exported and read there (and
//! resumed there after a kill -9 in its middle), an incremental snapshot reads its chunks there between watermarks written
//! on the primary, and streaming goes on through a crash and restart of the
//! standby and through its promotion (the slot on the promoted standby goes
//! on, on the new timeline) — writers committing the whole time, and every
//! event the surviving server holds in Kafka.
//!
//! Needs `eval "$(PG_MAJOR=16|17|18 deploy/dev/pg_pair.sh up)"`
//! (deploy/test.sh runs it on 16, 17 and 18) and the Kafka broker of the
//! other tests. Not run against the shared single server: it crashes and
//! promotes servers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::HashSet;
use std::time::Duration;

use support::ledger::{CREATE_LEDGER, CREATE_OUTBOX, LedgerWriters, connect_primary, ledger};
use support::pair::{await_confirmed, connect_any, create_database, lsn_of};
use support::*;

const CATCH_UP: Duration = Duration::from_secs(180);
/// Outbox rows that exist before walrelay starts: the initial snapshot's
/// (enough that it is still being read when walrelay is killed).
const EXISTING: i64 = 40_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slot_on_a_standby_snapshots_streams_and_survives_a_restart_and_a_promotion() {
    require_kafka();
    let primary = support::pair::port("WALRELAY_PAIR_PRIMARY_PORT");
    let standby = support::pair::port("WALRELAY_PAIR_STANDBY_PORT");
    let names = Names::new("standby_capture");
    let database = unique("standby_capture");
    let db = create_database(primary, &database).await;
    // `seq`: the snapshot reads the existing rows in the order they were
    // written, so per aggregate they reach Kafka in commit order.
    db.batch_execute(&format!(
        "CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL,
                              aggregateid text, type text NOT NULL, payload jsonb,
                              seq bigserial UNIQUE);
         ALTER TABLE outbox OWNER TO walrelay;
         {CREATE_LEDGER};
         INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
           SELECT gen_random_uuid(), CASE WHEN g % 50 % 3 = 0 THEN 'invoice' ELSE 'order' END,
                  'agg-' || g % 50, 'Created', jsonb_build_object('w', 99, 's', g)
           FROM generate_series(1, {EXISTING}) g ORDER BY g;
         INSERT INTO ledger SELECT id, aggregatetype, aggregateid, payload FROM outbox;"
    ))
    .await
    .expect("tables");
    let existing: HashSet<String> = ledger(&db).await.into_keys().collect();

    let config = pair_config(
        &names,
        &database,
        &format!(
            "host = \"127.0.0.1:{primary},127.0.0.1:{standby}\"\ncapture_from = \"standby\"\n\
             standby_host = \"127.0.0.1:{standby}\""
        ),
        &format!(
            "[snapshot]\nparallelism = 2\nfetch_rows = 500\nchunk_rows = 500\n{}\
             snapshot_order_by = [\"seq\"]\n",
            outbox_route(&names)
        ),
    );
    let path = write_config(&config);
    // The standby has the database once it replayed its creation.
    wait_for("the standby has the database", CATCH_UP, || async {
        let client = connect_any(standby, "postgres").await;
        let found: bool = client
            .query_one(
                "SELECT count(*) = 1 FROM pg_database WHERE datname = $1",
                &[&database],
            )
            .await
            .ok()?
            .get(0);
        found.then_some(())
    })
    .await;
    let (code, report) = check(&path);
    assert_eq!(code, Some(0), "check passes:\n{report}");
    assert!(
        report.lines().any(|l| l.starts_with("ok")
            && l.contains("standby:")
            && l.contains("a hot standby")
            && l.contains("hot_standby_feedback = on")),
        "check says what it checked on the standby:\n{report}"
    );

    let mut first = RelayProcess::start_with(&path, &[]);
    first
        .wait_log(
            "created replication slot with an exported snapshot",
            CATCH_UP,
        )
        .await;
    let writers = LedgerWriters::start(&database, &[primary, standby], 6);
    // Killed once the snapshot is resumable (logged before any row is
    // published): the next start resumes it on the standby's slot.
    first.wait_log("the snapshot is resumable", CATCH_UP).await;
    first.kill9();
    let mut relay = RelayProcess::start_with(&path, &[]);
    relay
        .wait_log("resuming the initial snapshot", CATCH_UP)
        .await;
    relay.wait_log("streaming", CATCH_UP).await;

    // The slot lives on the standby, not on the primary.
    let standby_db = connect_any(standby, &database).await;
    for (client, n, where_) in [
        (&standby_db, 1, "on the standby"),
        (&db, 0, "on the primary"),
    ] {
        let found: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
                &[&names.slot],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(found, n, "slots named {} {where_}", names.slot);
    }

    // An incremental snapshot: watermarks on the primary, chunks on the standby.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args(["snapshot", "--config"])
        .arg(&path)
        .args(["--table", "public.outbox"])
        .output()
        .expect("run walrelay snapshot");
    assert!(
        out.status.success(),
        "walrelay snapshot: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    relay
        .wait_log("incremental snapshot completed", CATCH_UP)
        .await;

    // The standby crashes and comes back; then the primary crashes and the
    // standby is promoted.
    let sessions = |log: &str| log.matches("streaming").count();
    let before = sessions(&relay.log());
    support::pair::run("restart-standby-immediate");
    wait_for(
        "streaming again after the standby's restart",
        CATCH_UP,
        || {
            let now = sessions(&relay.log());
            async move { (now > before).then_some(()) }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    support::pair::run("stop-primary");
    tokio::time::sleep(Duration::from_millis(500)).await;
    support::pair::run("promote");
    let db = connect_primary(&database, &[standby]).await;
    relay.wait_log("timeline=2", CATCH_UP).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let written = writers.stop().await;

    await_confirmed(
        &db,
        &db,
        &names.slot,
        "the slot on the promoted standby confirms every write",
    )
    .await;
    let rows = ledger(&db).await;
    let topics = [names.topic("order"), names.topic("invoice")];
    let consumed = consume_to_end(&[topics[0].as_str(), topics[1].as_str()]);
    // The incremental snapshot's copies are events of their own (marked
    // `walrelay.snapshot = incremental`): it re-read every existing row.
    let (incremental, events): (Vec<_>, Vec<_>) = consumed
        .into_iter()
        .partition(|r| r.header_str("walrelay.snapshot").as_deref() == Some("incremental"));
    let reread: HashSet<String> = incremental
        .iter()
        .filter_map(|r| r.header_str("id"))
        .collect();
    let missed = existing.difference(&reread).count();
    assert_eq!(missed, 0, "existing rows the incremental snapshot missed");
    let duplicates = verify_outbox_delivery(&names, &rows, &events);
    let log = relay.log();
    assert!(
        !log.contains("refusing to start") && !log.contains("--accept-slot-position was given"),
        "walrelay went on with the promoted standby's slot by itself:\n{log}"
    );
    assert!(
        log.contains("is not in recovery (a promoted standby?)"),
        "walrelay says it captures from a promoted standby:\n{log}"
    );
    eprintln!(
        "standby capture (PostgreSQL {}): {} events ({EXISTING} by the initial snapshot, {written} \
         written), {} re-read by the incremental snapshot, {duplicates} duplicates, 0 lost",
        support::pair::major(),
        rows.len(),
        reread.len()
    );
    relay.stop();
}

/// A standby that applies the primary's commits late
/// (`recovery_min_apply_delay`): an incremental snapshot's chunk read there
/// right after its low watermark was written would see rows as they were
/// before changes the stream carries ahead of the watermark, and publish
/// them after those changes — stale. walrelay reads a chunk only once the
/// standby replayed the watermark's commit: the topic folds to the table,
/// under writers updating the rows throughout. Then the same again with
/// read-only watermarks (nothing written for the chunks, none waits for
/// replay: each is placed by its own snapshot on the standby).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_incremental_snapshot_on_a_lagging_standby_publishes_no_stale_row() {
    require_kafka();
    let primary = support::pair::port("WALRELAY_PAIR_PRIMARY_PORT");
    let standby = support::pair::port("WALRELAY_PAIR_STANDBY_PORT");
    let names = Names::new("standby_lag");
    let database = unique("standby_lag");
    let db = create_database(primary, &database).await;
    create_items(&db, 2_000).await;
    let prefix = format!("{}_cdc", names.connector);
    let config = |watermarks: &str| {
        pair_config(
            &names,
            &database,
            &format!(
                "host = \"127.0.0.1:{primary}\"\ncapture_from = \"standby\"\n\
                 standby_host = \"127.0.0.1:{standby}\""
            ),
            &format!(
                "[snapshot]\nmode = \"no_data\"\nchunk_rows = 700\nwatermarks = \"{watermarks}\"\n\
                 [table_defaults]\ntopic_prefix = \"{prefix}\"\n[[table]]\nname = \"public.items\"\n"
            ),
        )
    };
    let path = write_config(&config("messages"));
    wait_for("the standby has the table", CATCH_UP, || async {
        let client = connect_any(standby, &database).await;
        client
            .query_one("SELECT count(*) FROM items", &[])
            .await
            .ok()
            .filter(|r| r.get::<_, i64>(0) == 2_000)
            .map(drop)
    })
    .await;
    // Without hot_standby_feedback on the standby, check names the setting
    // (and run would refuse the same way).
    let standby_url = format!("postgres://postgres:postgres@127.0.0.1:{standby}/postgres");
    let feedback_is = |value: &'static str| {
        let standby_url = standby_url.clone();
        async move {
            wait_for(
                "the standby's reloaded hot_standby_feedback",
                CATCH_UP,
                || {
                    let standby_url = standby_url.clone();
                    async move {
                        let (client, conn) =
                            tokio_postgres::connect(&standby_url, tokio_postgres::NoTls)
                                .await
                                .ok()?;
                        tokio::spawn(conn);
                        let row = client
                            .query_one("SHOW hot_standby_feedback", &[])
                            .await
                            .ok()?;
                        (row.get::<_, String>(0) == value).then_some(())
                    }
                },
            )
            .await;
        }
    };
    {
        let _off = SystemSetting::set_at(standby_url.clone(), "hot_standby_feedback", "off").await;
        feedback_is("off").await;
        let (code, report) = check(&path);
        assert_eq!(code, Some(1), "check fails:\n{report}");
        assert!(
            failures(&report)
                .iter()
                .any(|f| f.contains("the standby runs with hot_standby_feedback = off")),
            "check names the setting:\n{report}"
        );
    }
    feedback_is("on").await;

    for watermarks in ["messages", "read_only"] {
        let path = write_config(&config(watermarks));
        let mut relay = RelayProcess::start_with(&path, &[]);
        relay.wait_log("streaming", CATCH_UP).await;
        let reads = snapshot_on_a_lagging_standby(
            &db,
            &database,
            primary,
            &standby_url,
            &path,
            &prefix,
            &mut relay,
        )
        .await;
        eprintln!(
            "lagging standby (PostgreSQL {}), {watermarks} watermarks: the topic folds to the \
             table, {reads} read events",
            support::pair::major(),
        );
        let waited = relay
            .log()
            .contains("waits for the standby to replay the primary's WAL");
        if watermarks == "messages" {
            assert!(
                waited,
                "the chunks waited for the lagging standby, and said so:\n{}",
                relay.log()
            );
        } else {
            assert!(
                !waited,
                "read-only chunks wait for no replay:\n{}",
                relay.log()
            );
        }
        relay.stop();
    }
}

/// One incremental snapshot of `items`, asked for with `walrelay snapshot`
/// while the standby applies every commit 6 s late and a writer updates
/// rows throughout; returns the read events once the topic folds to the
/// table.
async fn snapshot_on_a_lagging_standby(
    db: &tokio_postgres::Client,
    database: &str,
    primary: u16,
    standby_url: &str,
    path: &std::path::Path,
    prefix: &str,
    relay: &mut RelayProcess,
) -> usize {
    // From now on the standby applies every commit 6 s after the primary.
    let delay =
        SystemSetting::set_at(standby_url.to_owned(), "recovery_min_apply_delay", "6s").await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let db = connect_primary(database, &[primary]).await;
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut id = 0i64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                id = id % 2_000 + 7;
                db.execute(
                    "UPDATE items SET version = version + 1 WHERE id = $1",
                    &[&id],
                )
                .await
                .expect("update");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args(["snapshot", "--config"])
        .arg(path)
        .args(["--table", "public.items"])
        .output()
        .expect("run walrelay snapshot");
    assert!(
        out.status.success(),
        "walrelay snapshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    relay
        .wait_log("incremental snapshot completed", CATCH_UP)
        .await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    writer.await.unwrap();
    drop(delay);
    let table = items_state(db).await;
    let topic = format!("{prefix}.public.items");
    let reads = wait_for("the topic folds to the table", CATCH_UP, || {
        let topic = topic.clone();
        let table = &table;
        async move {
            let (state, reads) = fold_versions(&topic);
            (state == *table).then_some(reads)
        }
    })
    .await;
    assert!(reads > 0, "the snapshot read rows");
    reads
}

/// Moving a running connector from the primary to a standby, as
/// docs/operations.md says: a slot of the same name is created on the
/// standby while walrelay still streams from the primary; once the
/// primary's slot (and so the offset store) is past the new slot's
/// position, walrelay is restarted with `capture_from = "standby"` and
/// resumes there from its stored position — writers committing throughout,
/// nothing lost, no `--accept-slot-position`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_running_connector_moves_from_the_primary_to_a_standby_losing_nothing() {
    require_kafka();
    let primary = support::pair::port("WALRELAY_PAIR_PRIMARY_PORT");
    let standby = support::pair::port("WALRELAY_PAIR_STANDBY_PORT");
    let names = Names::new("standby_move");
    let database = unique("standby_move");
    let db = create_database(primary, &database).await;
    db.batch_execute(&format!("{CREATE_OUTBOX}; {CREATE_LEDGER}"))
        .await
        .expect("tables");
    let config = |capture: &str| {
        pair_config(
            &names,
            &database,
            &format!("host = \"127.0.0.1:{primary}\"\n{capture}"),
            &outbox_route(&names),
        )
    };
    let on_primary = write_config(&config(""));
    let mut relay = RelayProcess::start_with(&on_primary, &[]);
    relay.wait_log("streaming", CATCH_UP).await;
    let writers = LedgerWriters::start(&database, &[primary], 4);

    // The standby's slot, created while walrelay streams from the primary
    // (the primary asked for running-transactions records meanwhile).
    let standby_db = connect_any(standby, &database).await;
    let nudger = tokio::spawn(async move {
        let admin = connect_primary("postgres", &[primary]).await;
        loop {
            let _ = admin
                .batch_execute("SELECT pg_log_standby_snapshot()")
                .await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let created: String = standby_db
        .query_one(
            "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&names.slot],
        )
        .await
        .expect("create the slot on the standby")
        .get(0);
    nudger.abort();
    let created = parse_lsn(&created);
    wait_for(
        "the primary's slot (and the offset store) past the standby's slot",
        CATCH_UP,
        || async {
            let confirmed = lsn_of(
                &db,
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &names.slot,
            )
            .await?;
            (confirmed >= created).then_some(())
        },
    )
    .await;
    assert!(relay.stop().success(), "{}", relay.log());

    let on_standby = write_config(&config(&format!(
        "capture_from = \"standby\"\nstandby_host = \"127.0.0.1:{standby}\""
    )));
    let mut relay = RelayProcess::start_with(&on_standby, &[]);
    relay.wait_log("streaming", CATCH_UP).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let written = writers.stop().await;
    // The old slot is dropped, as the runbook's last step says.
    db.execute("SELECT pg_drop_replication_slot($1)", &[&names.slot])
        .await
        .expect("drop the primary's slot");

    await_confirmed(
        &db,
        &standby_db,
        &names.slot,
        "the standby's slot confirms every write",
    )
    .await;
    let rows = ledger(&db).await;
    let topics = [names.topic("order"), names.topic("invoice")];
    let consumed = consume_to_end(&[topics[0].as_str(), topics[1].as_str()]);
    let duplicates = verify_outbox_delivery(&names, &rows, &consumed);
    let log = relay.log();
    assert!(
        !log.contains("refusing to start") && !log.contains("taking the initial snapshot"),
        "walrelay resumed on the standby's slot from its stored position:\n{log}"
    );
    eprintln!(
        "moved to the standby (PostgreSQL {}): {} events ({written} written), {duplicates} \
         duplicates, 0 lost",
        support::pair::major(),
        rows.len()
    );
    relay.stop();
}

/// A connector's file on the pair: `servers` (the `[postgres]` lines that
/// name the servers and what is captured from where), the test's names,
/// then `rest` (the sections after `[kafka]`).
fn pair_config(names: &Names, database: &str, servers: &str, rest: &str) -> String {
    format!(
        r#"
[connector]
name = "{connector}"

[postgres]
{servers}
user = "walrelay"
password = "walrelay"
database = "{database}"
slot = "{slot}"
publication = "{publication}"
status_interval = "200ms"
reconnect_backoff_initial = "100ms"
reconnect_backoff_max = "1s"

[kafka]
brokers = "{brokers}"
linger = "2ms"

{rest}"#,
        connector = names.connector,
        slot = names.slot,
        publication = names.publication,
        brokers = kafka_brokers(),
    )
}

/// The `[[outbox]]` route of the ledger writers' table.
fn outbox_route(names: &Names) -> String {
    format!(
        "[[outbox]]\ntable = \"public.outbox\"\ntopic = \"{}.{{aggregatetype}}\"\n",
        names.topic_prefix
    )
}
