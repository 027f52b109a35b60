//! PostgreSQL failover for real: a primary and a physical standby
//! (deploy/dev/pg_pair.sh, PostgreSQL 17+), writers committing the whole
//! time, walrelay configured with both servers in `postgres.host`. The
//! primary crashes (`pg_ctl stop -m immediate`), the standby is promoted,
//! the writers move to it — and walrelay follows by itself: it finds the
//! new primary in its host list, finds its failover slot synchronized
//! there, reads the new timeline's history, sees that its stored position
//! is before the switch point, and resumes without `--accept-slot-position`.
//! Every event committed on either server that the new primary holds is in
//! Kafka; none that it does not hold (synchronized_standby_slots), and none
//! is lost.
//!
//! Needs `eval "$(PG_MAJOR=17|18 deploy/dev/pg_pair.sh up)"` (deploy/test.sh
//! does it for 17 and 18) and the Kafka broker of the other tests. Not run
//! against the shared single server: it crashes its primary.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use support::ledger::{CREATE_LEDGER, CREATE_OUTBOX, LedgerWriters, connect_primary, ledger};
use support::pair::{await_confirmed, create_database, lsn_of};
use support::*;

const CATCH_UP: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn walrelay_follows_a_promoted_standby_and_loses_nothing() {
    require_kafka();
    let primary = support::pair::port("WALRELAY_PAIR_PRIMARY_PORT");
    let standby = support::pair::port("WALRELAY_PAIR_STANDBY_PORT");
    let pair = support::pair::run;
    let names = Names::new("failover");
    let database = unique("failover");
    let db = create_database(primary, &database).await;
    db.batch_execute(&format!("{CREATE_OUTBOX}; {CREATE_LEDGER}"))
        .await
        .expect("tables");
    let config = format!(
        r#"
[connector]
name = "{connector}"

[postgres]
host = "127.0.0.1:{primary},127.0.0.1:{standby}"
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

[[outbox]]
table = "public.outbox"
topic = "{prefix}.{{aggregatetype}}"
"#,
        connector = names.connector,
        slot = names.slot,
        publication = names.publication,
        brokers = kafka_brokers(),
        prefix = names.topic_prefix,
    );
    let path = write_config(&config);
    let (code, report) = check(&path);
    assert_eq!(code, Some(0), "check passes on the primary:\n{report}");
    assert!(
        report.lines().any(|l| l.starts_with("ok")
            && l.contains("failover:")
            && l.contains("synchronized_standby_slots = 'standby1'")),
        "check says the slot will follow a failover:\n{report}"
    );

    let mut relay = RelayProcess::start_with(&path, &[]);
    relay
        .wait_log(
            "created replication slot with an exported snapshot",
            CATCH_UP,
        )
        .await;
    let writers = LedgerWriters::start(&database, &[primary, standby], 8);
    relay.wait_log("streaming", CATCH_UP).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    // The standby keeps a copy of the failover slot.
    let on_standby = support::pair::connect_any(standby, "postgres").await;
    let failover: bool = db
        .query_one(
            "SELECT failover FROM pg_replication_slots WHERE slot_name = $1",
            &[&names.slot],
        )
        .await
        .expect("read the slot")
        .get(0);
    assert!(failover, "walrelay created a failover slot");
    wait_for("the standby synchronizes the slot", CATCH_UP, || async {
        lsn_of(
            &on_standby,
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots \
             WHERE slot_name = $1 AND synced AND NOT temporary",
            &names.slot,
        )
        .await
    })
    .await;

    // Crash the primary, promote the standby.
    pair("stop-primary");
    tokio::time::sleep(Duration::from_millis(500)).await;
    pair("promote");
    let db = connect_primary(&database, &[standby]).await;
    relay.wait_log("timeline=2", CATCH_UP).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let written = writers.stop().await;

    await_confirmed(
        &db,
        &db,
        &names.slot,
        "the slot on the new primary confirms every write",
    )
    .await;
    let rows = ledger(&db).await;
    let topics = [names.topic("order"), names.topic("invoice")];
    let consumed = consume_to_end(&[topics[0].as_str(), topics[1].as_str()]);
    let duplicates = verify_outbox_delivery(&names, &rows, &consumed);
    let log = relay.log();
    assert!(
        !log.contains("refusing to start") && !log.contains("--accept-slot-position was given"),
        "walrelay resumed on the new timeline by itself:\n{log}"
    );
    eprintln!(
        "failover: {} events on the new primary ({written} written), {duplicates} duplicates, 0 lost",
        rows.len()
    );
    // The new primary has no standby yet: check says the next failover
    // would not find the slot.
    let (_, report) = check(&path);
    assert!(
        report.lines().any(|l| l.starts_with("warn  failover:")
            && l.contains("is a failover slot")
            && l.contains("synchronized_standby_slots is empty")),
        "check warns that the new primary has no standby for the slot:\n{report}"
    );
    relay.stop();
}
