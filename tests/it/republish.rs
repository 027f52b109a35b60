//! Recovery that loses nothing when the runbook is followed to the letter
//! (issue 11): the slot is dropped while writers keep committing; the
//! operator follows docs/operations.md, "Lost slot" — note the stored
//! offset (`walrelay status`), start walrelay first with
//! `--accept-slot-position` (it creates the new slot and names the range it
//! never streamed), then `walrelay republish` the rows committed since the
//! stored offset was written. Every outbox row must then be in Kafka.
//! Reconciling *before* starting (the old order) loses whatever commits in
//! between.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;
use crate::support::runbook;

use std::time::Duration;

use runbook::walrelay;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_slot_recovered_by_the_runbook_loses_nothing_while_writers_commit() {
    require_kafka();
    let db = TestDb::new("recover").await;
    db.create_outbox("outbox").await;
    let names = Names::new("recover");
    let mut relay = RelayProcess::start(&relay_config(&db, &names, "", ""), &[]);
    relay.wait_log("streaming", START).await;
    let writers = Writers::start(&db);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The incident: walrelay stops, the slot is dropped, writers go on.
    assert!(relay.stop().success(), "{}", relay.log());
    db.client
        .execute("SELECT pg_drop_replication_slot($1)", &[&names.slot])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;

    runbook::recover(
        &db,
        &names,
        &relay.config_path,
        writers,
        false,
        "10 minutes",
    )
    .await;
}

/// `--dry-run` prints what would be published and publishes nothing; a
/// condition that is not SQL is PostgreSQL's error, exit 1; no --where, or
/// an unknown table, is a usage error (exit 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn republish_dry_run_and_bad_input() {
    require_kafka();
    let db = TestDb::new("repdry").await;
    db.create_outbox("outbox").await;
    let names = Names::new("repdry");
    let config = write_config(&relay_config(&db, &names, "", ""));
    let config_arg = config.to_str().unwrap();
    write_outbox_load(&db.name, 1, 5, 5, Duration::ZERO).await;
    let rows = outbox_rows(&db).await;
    let some = rows.keys().next().unwrap().clone();

    let filter = format!("id = '{some}'");
    let (code, out, err) = walrelay(&[
        "republish",
        "--config",
        config_arg,
        "--where",
        &filter,
        "--dry-run",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains(&some), "{out}");
    assert!(
        out.contains("would republish 1 record(s) of public.outbox"),
        "{out}"
    );
    assert!(consume_to_end(&[&names.topic("order"), &names.topic("invoice")]).is_empty());

    let (code, _, err) = walrelay(&[
        "republish",
        "--config",
        config_arg,
        "--where",
        "no such column = 1",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "walrelay: connector={}: PostgreSQL",
            names.connector
        )),
        "{err}"
    );

    let (code, _, err) = walrelay(&["republish", "--config", config_arg, "--where", " "]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--where is empty"), "{err}");
    let (code, _, err) = walrelay(&[
        "republish",
        "--config",
        config_arg,
        "--table",
        "public.nope",
        "--where",
        "true",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not an [[outbox]] table"), "{err}");

    // Issue 24: the condition cannot leave its parentheses to publish
    // another table's rows as outbox events (with or without a comment
    // swallowing the rest), nor run a statement of its own.
    db.client
        .batch_execute(
            "CREATE TABLE secrets AS SELECT * FROM outbox LIMIT 0; \
             INSERT INTO secrets (id, aggregatetype, aggregateid, type, payload) \
             VALUES (gen_random_uuid(), 'order', 'SECRET', 'Leaked', '{}')",
        )
        .await
        .unwrap();
    for (filter, why) in [
        ("false) UNION ALL SELECT * FROM secrets --", "closes more"),
        (
            "false) UNION ALL SELECT * FROM secrets WHERE (true",
            "closes more",
        ),
        ("true; DELETE FROM outbox", "';'"),
    ] {
        let (code, out, err) = walrelay(&["republish", "--config", config_arg, "--where", filter]);
        assert_eq!(code, Some(2), "{filter}: {out}{err}");
        assert!(
            err.contains("--where is refused") && err.contains(why),
            "{filter}: {err}"
        );
    }
    assert!(consume_to_end(&[&names.topic("order"), &names.topic("invoice")]).is_empty());
    assert_eq!(outbox_rows(&db).await.len(), rows.len());

    // A condition that runs too long is cancelled, and says so.
    let (code, out, err) = walrelay(&[
        "republish",
        "--config",
        config_arg,
        "--where",
        "pg_sleep(2) IS NOT NULL",
        "--statement-timeout",
        "500ms",
        "--dry-run",
    ]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("statement timeout"), "{err}");
}
