//! Start-up checks against the real services: `walrelay check` fails exactly
//! when `walrelay run` refuses, with the same words; publication settings that
//! would hide outbox inserts are refused; a partitioned outbox table streams.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::*;

async fn sql(db: &TestDb, sql: &str) {
    db.client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// `config` with extra keys in its `[postgres]` section.
fn with_postgres(config: &str, keys: &str) -> String {
    config.replacen(
        "status_interval = \"200ms\"",
        &format!("status_interval = \"200ms\"\n{keys}"),
        1,
    )
}

/// `check` fails, `run` exits 1, and `run`'s error is one of `check`'s
/// failures word for word; both name `needle`.
async fn check_and_run_refuse(path: &Path, needle: &str) {
    let (code, report) = check(path);
    assert_eq!(code, Some(1), "check must fail:\n{report}");
    let problems = failures(&report);
    assert!(
        problems.iter().any(|p| p.contains(needle)),
        "check does not say {needle:?}:\n{report}"
    );
    let error = run_refuses(path, needle);
    assert!(
        problems.iter().any(|p| error.contains(p.as_str())),
        "run's error is none of check's failures\nrun: {error}\ncheck:\n{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_outbox_streams_every_row_and_restarts() {
    require_kafka();
    let db = TestDb::new("part").await;
    sql(
        &db,
        "CREATE TABLE outbox (
            id uuid NOT NULL,
            aggregatetype text NOT NULL,
            aggregateid text,
            type text NOT NULL,
            payload jsonb,
            PRIMARY KEY (id, aggregatetype)) PARTITION BY LIST (aggregatetype);
         CREATE TABLE outbox_order PARTITION OF outbox FOR VALUES IN ('order');
         CREATE TABLE outbox_other PARTITION OF outbox DEFAULT;
         ALTER TABLE outbox OWNER TO walrelay;
         ALTER TABLE outbox_order OWNER TO walrelay;
         ALTER TABLE outbox_other OWNER TO walrelay;",
    )
    .await;
    let names = Names::new("part");
    let path = write_config(&relay_config(&db, &names, "", ""));
    let (code, report) = check(&path);
    assert_eq!(code, Some(0), "{report}");

    let mut relay = RelayProcess::start_with(&path, &[]);
    relay.wait_log("streaming", START).await;
    for i in 0..10 {
        let kind = if i % 2 == 0 { "order" } else { "invoice" };
        sql(
            &db,
            &format!(
                "INSERT INTO outbox VALUES (gen_random_uuid(), '{kind}', 'a{i}', 'Created', '{{\"i\": {i}}}')"
            ),
        )
        .await;
    }
    let topics = [names.topic("order"), names.topic("invoice")];
    let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
    let consumed = consume(&topics, 10, Duration::from_secs(60), Duration::ZERO);
    let ids: std::collections::HashSet<String> =
        consumed.iter().filter_map(|c| c.header_str("id")).collect();
    assert_eq!(ids.len(), 10, "{consumed:?}\nlog:\n{}", relay.log());
    assert!(relay.stop().success());

    // The second start finds the publication as the first one left it.
    let (code, report) = check(&path);
    assert_eq!(code, Some(0), "{report}");
    let mut again = RelayProcess::start_with(&path, &[]);
    again.wait_log("streaming", START).await;
    sql(
        &db,
        "INSERT INTO outbox VALUES (gen_random_uuid(), 'order', 'b', 'Created', '{}')",
    )
    .await;
    let consumed = consume(&topics, 11, Duration::from_secs(60), Duration::ZERO);
    let ids: std::collections::HashSet<String> =
        consumed.iter().filter_map(|c| c.header_str("id")).collect();
    assert_eq!(ids.len(), 11, "{consumed:?}\nlog:\n{}", again.log());
    assert!(again.stop().success());
}

/// An existing publication on a partitioned outbox without
/// `publish_via_partition_root`: refused when walrelay may not change it,
/// switched on when it may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_outbox_needs_publish_via_partition_root() {
    require_kafka();
    let db = TestDb::new("viaroot").await;
    sql(
        &db,
        "CREATE TABLE outbox (
            id uuid NOT NULL, aggregatetype text NOT NULL, aggregateid text,
            type text NOT NULL, payload jsonb,
            PRIMARY KEY (id, aggregatetype)) PARTITION BY LIST (aggregatetype);
         CREATE TABLE outbox_rest PARTITION OF outbox DEFAULT;
         ALTER TABLE outbox OWNER TO walrelay;
         ALTER TABLE outbox_rest OWNER TO walrelay;",
    )
    .await;
    let names = Names::new("viaroot");
    sql(
        &db,
        &format!(
            "CREATE PUBLICATION {} FOR TABLE outbox; ALTER PUBLICATION {} OWNER TO walrelay",
            names.publication, names.publication
        ),
    )
    .await;
    let config = relay_config(&db, &names, "", "");
    let fixed = write_config(&with_postgres(&config, "create_publication = false"));
    check_and_run_refuse(&fixed, "publish_via_partition_root").await;

    // Allowed to manage the publication: check says what run will do, run does it.
    let path = write_config(&config);
    let (code, report) = check(&path);
    assert_eq!(code, Some(0), "{report}");
    assert!(report.contains("publish_via_partition_root"), "{report}");
    let mut relay = RelayProcess::start_with(&path, &[]);
    relay.wait_log("streaming", START).await;
    assert!(relay.stop().success());
    let viaroot: bool = db
        .client
        .query_one(
            "SELECT pubviaroot FROM pg_publication WHERE pubname = $1",
            &[&names.publication],
        )
        .await
        .unwrap()
        .get(0);
    assert!(viaroot);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_run_refuse_a_test_decoding_slot_alike() {
    require_kafka();
    let db = TestDb::new("tdslot").await;
    db.create_outbox("outbox").await;
    let names = Names::new("tdslot");
    sql(
        &db,
        &format!(
            "SELECT pg_create_logical_replication_slot('{}', 'test_decoding')",
            names.slot
        ),
    )
    .await;
    let path = write_config(&relay_config(&db, &names, "", ""));
    check_and_run_refuse(&path, "test_decoding").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_run_refuse_a_missing_slot_with_an_offset_stored_alike() {
    require_kafka();
    let db = TestDb::new("noslot").await;
    db.create_outbox("outbox").await;
    let names = Names::new("noslot");
    let path = write_config(&relay_config(&db, &names, "", ""));
    let mut relay = RelayProcess::start_with(&path, &[]);
    relay.wait_log("streaming", START).await;
    sql(
        &db,
        "INSERT INTO outbox VALUES (gen_random_uuid(), 'order', 'a', 'Created', '{}')",
    )
    .await;
    consume(
        &[&names.topic("order")],
        1,
        Duration::from_secs(30),
        Duration::ZERO,
    );
    assert!(relay.stop().success());
    sql(
        &db,
        &format!("SELECT pg_drop_replication_slot('{}')", names.slot),
    )
    .await;
    check_and_run_refuse(&path, "does not exist, but the offset store says").await;
    assert!(
        db.confirmed_flush(&names.slot).await.is_none(),
        "neither check nor run may recreate the slot"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_run_refuse_a_publication_without_inserts_alike() {
    require_kafka();
    let db = TestDb::new("noins").await;
    db.create_outbox("outbox").await;
    let names = Names::new("noins");
    sql(
        &db,
        &format!(
            "CREATE PUBLICATION {} FOR TABLE outbox WITH (publish = 'update, delete')",
            names.publication
        ),
    )
    .await;
    let path = write_config(&relay_config(&db, &names, "", ""));
    check_and_run_refuse(&path, "does not publish inserts").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_run_refuse_to_create_a_publication_for_a_table_they_do_not_own() {
    require_kafka();
    let db = TestDb::new("notown").await;
    db.create_outbox("outbox").await;
    sql(
        &db,
        "ALTER TABLE outbox OWNER TO postgres; GRANT SELECT ON outbox TO walrelay",
    )
    .await;
    let names = Names::new("notown");
    let path = write_config(&relay_config(&db, &names, "", ""));
    check_and_run_refuse(&path, "does not own").await;
}

/// Row filters and column lists exist from PostgreSQL 15 on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_filters_and_column_lists_that_hide_outbox_rows_are_refused() {
    require_kafka();
    if pg_major().parse::<u32>().unwrap_or(18) < 15 {
        eprintln!(
            "PostgreSQL {} has no row filters or column lists",
            pg_major()
        );
        return;
    }
    let db = TestDb::new("filter").await;
    db.create_outbox("outbox").await;
    let names = Names::new("filter");
    let path = write_config(&relay_config(&db, &names, "", ""));
    let publication = &names.publication;

    sql(
        &db,
        &format!(
            "CREATE PUBLICATION {publication} FOR TABLE outbox WHERE (aggregatetype = 'order')"
        ),
    )
    .await;
    check_and_run_refuse(&path, "row filter").await;

    sql(
        &db,
        &format!(
            "DROP PUBLICATION {publication};
             CREATE PUBLICATION {publication} FOR TABLE outbox (id, aggregatetype, aggregateid, type)"
        ),
    )
    .await;
    let (code, report) = check(&path);
    assert_eq!(code, Some(1), "{report}");
    assert!(
        failures(&report)
            .iter()
            .any(|p| p.contains("column list") && p.contains("payload")),
        "{report}"
    );

    // A column list that keeps every column the route uses is fine.
    sql(
        &db,
        &format!(
            "DROP PUBLICATION {publication};
             CREATE PUBLICATION {publication} FOR TABLE outbox (id, aggregatetype, aggregateid, type, payload)"
        ),
    )
    .await;
    let (code, report) = check(&path);
    assert_eq!(code, Some(0), "{report}");
}

/// Publications that cover the table without naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publications_for_all_tables_or_a_schema_cover_the_outbox() {
    require_kafka();
    let db = TestDb::new("allpub").await;
    db.create_outbox("outbox").await;
    let names = Names::new("allpub");
    let path = write_config(&with_postgres(
        &relay_config(&db, &names, "", ""),
        "create_publication = false",
    ));
    sql(
        &db,
        &format!("CREATE PUBLICATION {} FOR ALL TABLES", names.publication),
    )
    .await;
    let (code, report) = check(&path);
    assert_eq!(code, Some(0), "{report}");
    if pg_major().parse::<u32>().unwrap_or(18) >= 15 {
        sql(
            &db,
            &format!(
                "DROP PUBLICATION {p}; CREATE PUBLICATION {p} FOR TABLES IN SCHEMA public",
                p = names.publication
            ),
        )
        .await;
        let (code, report) = check(&path);
        assert_eq!(code, Some(0), "{report}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_as_outbox_is_refused_by_name() {
    require_kafka();
    let db = TestDb::new("view").await;
    db.create_outbox("real_outbox").await;
    sql(
        &db,
        "CREATE VIEW outbox AS SELECT * FROM real_outbox; ALTER VIEW outbox OWNER TO walrelay",
    )
    .await;
    let names = Names::new("view");
    let path = write_config(&relay_config(&db, &names, "", ""));
    check_and_run_refuse(&path, "public.outbox is a view").await;
}

/// A slot made before its publication: `check` warns; on PostgreSQL 14–17
/// the walsender fails with `publication "…" does not exist` until the slot
/// is recreated, and `run` explains that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_warns_when_the_slot_predates_the_publication() {
    require_kafka();
    let db = TestDb::new("early").await;
    db.create_outbox("outbox").await;
    let names = Names::new("early");
    sql(
        &db,
        &format!(
            "SELECT pg_create_logical_replication_slot('{}', 'pgoutput')",
            names.slot
        ),
    )
    .await;
    sql(
        &db,
        "INSERT INTO outbox VALUES (gen_random_uuid(), 'order', 'a', 'Created', '{}')",
    )
    .await;
    sql(
        &db,
        &format!("CREATE PUBLICATION {} FOR TABLE outbox", names.publication),
    )
    .await;
    let path = write_config(&relay_config(&db, &names, "", ""));
    let (_, report) = check(&path);
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("warn  replication slot") && l.contains("may predate")),
        "{report}"
    );

    // PostgreSQL 14–17: the walsender fails at the insert made before the
    // publication, and run says why. (18 skips that insert and streams.)
    if pg_major().parse::<u32>().unwrap_or(18) < 18 {
        let mut run = RelayProcess::start_with(&path, &[]);
        let log = run.expect_exit(1, START);
        assert!(
            log.contains("created before the publication")
                && log.contains("SELECT pg_drop_replication_slot("),
            "{log}"
        );
    }
}

/// The server's own words reach the operator, not "db error".
#[tokio::test]
async fn catalog_errors_carry_the_server_message_and_the_io_cause() {
    let db = TestDb::new("caterr").await;
    let mut params = walrelay::pg::wire::ConnectParams {
        host: "127.0.0.1".into(),
        port: pg_port(),
        user: "walrelay".into(),
        password: Some("walrelay".to_owned().into()),
        database: db.name.clone(),
        application_name: "walrelay-test".into(),
        connect_timeout: Duration::from_secs(10),
        max_message_size: 1 << 20,
        tls: Default::default(),
        target: Default::default(),
    };
    let client = walrelay::pg::catalog::connect(&params).await.unwrap();
    let e = walrelay::pg::catalog::setting(&client, "walrelay.no_such_setting")
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("unrecognized configuration parameter"),
        "{text}"
    );

    // A port nobody listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    params.port = port;
    let text = match walrelay::pg::catalog::connect(&params).await {
        Ok(_) => panic!("connected to a closed port"),
        Err(e) => e.to_string(),
    };
    assert!(text.contains("Connection refused"), "{text}");
}

#[tokio::test]
async fn check_says_kafka_refused_the_connection() {
    let db = TestDb::new("kafkadown").await;
    let names = Names::new("kafkadown");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = relay_config(&db, &names, "", "").replace(
        &format!("brokers = \"{}\"", kafka_brokers()),
        &format!("brokers = \"127.0.0.1:{port}\""),
    );
    let (code, report) = check(&write_config(&config));
    assert_eq!(code, Some(1), "{report}");
    let kafka = report
        .lines()
        .find(|l| l.starts_with("FAIL  kafka"))
        .unwrap_or_else(|| panic!("{report}"));
    // The fast path's words: it gave up when librdkafka said all brokers
    // were down, with their reason, rather than after the metadata timeout.
    assert!(
        kafka.contains("no broker accepted a connection") && kafka.contains("Connection refused"),
        "{report}"
    );
}

/// The "replication slot" line of `check`.
fn slot_line(report: &str) -> &str {
    report
        .lines()
        .find(|l| l.contains("  replication slot: "))
        .unwrap_or_else(|| panic!("no replication slot line:\n{report}"))
}

/// A new connector (no slot, no stored offset) with rows already in its
/// outbox: `check` says `run` will take a snapshot and how large it is (the
/// planner's estimate, unknown until the table is analyzed), from the same
/// decision `run` takes; `run` then does what `check` said, and afterwards
/// `check` says what the next `run` would do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_prints_the_snapshot_plan_for_a_new_connector_with_existing_rows() {
    require_kafka();
    let db = TestDb::new("snapplan").await;
    db.create_outbox("outbox").await;
    sql(
        &db,
        "ALTER TABLE outbox SET (autovacuum_enabled = false);
         INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
         SELECT gen_random_uuid(), 'order', 'a' || g % 7, 'Created', '{}'
         FROM generate_series(1, 1234) g",
    )
    .await;
    let names = Names::new("snapplan");
    let unset = write_config(&relay_config(&db, &names, "", ""));
    let initial_only = write_config(&relay_config(
        &db,
        &names,
        "",
        "[snapshot]\nmode = \"initial_only\"",
    ));

    let (code, report) = check(&unset);
    assert_eq!(code, Some(0), "{report}");
    let line = slot_line(&report);
    assert!(
        line.starts_with("ok    replication slot: ")
            && line.contains(&format!(
                "{} does not exist yet; run will create it with an exported snapshot and snapshot 1 table",
                names.slot
            ))
            && line.contains("public.outbox unknown (never vacuumed or analyzed)")
            && line.contains("then stream from its consistent point")
            && line.contains("a new connector"),
        "{report}"
    );

    sql(&db, "ANALYZE outbox").await;
    let (code, report) = check(&initial_only);
    assert_eq!(code, Some(0), "{report}");
    let line = slot_line(&report);
    assert!(
        line.contains(
            "snapshot 1 table (~1,234 rows estimated from pg_class.reltuples: public.outbox ~1,234), then stop (initial_only)"
        ),
        "{report}"
    );
    assert!(
        db.confirmed_flush(&names.slot).await.is_none(),
        "check must not create the slot"
    );

    // run does what check said: the snapshot, then exit 0.
    let mut run = RelayProcess::start_with(&initial_only, &[]);
    run.expect_exit(0, START);
    let topic = names.topic("order");
    let snapshot = consume_to_end(&[topic.as_str()])
        .iter()
        .filter(|r| r.header_str("walrelay.snapshot").as_deref() == Some("true"))
        .count();
    assert_eq!(snapshot, 1234);

    // And now: initial_only has nothing left to do; the unset mode streams
    // from the slot the snapshot left.
    let (code, report) = check(&initial_only);
    assert_eq!(code, Some(0), "{report}");
    assert!(
        slot_line(&report).starts_with("ok    replication slot: run will stop at once")
            && slot_line(&report).contains("initial_only has nothing to do"),
        "{report}"
    );
    let (code, report) = check(&unset);
    assert_eq!(code, Some(0), "{report}");
    assert!(
        slot_line(&report).starts_with(&format!("ok    replication slot: {} at ", names.slot)),
        "{report}"
    );
}

/// An explicit `mode = "initial"` cannot be honoured with a slot walrelay
/// did not create (no exported snapshot to align with): `check` fails, and
/// `run` refuses, in the same words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_run_refuse_an_explicit_initial_snapshot_with_an_existing_slot_alike() {
    require_kafka();
    let db = TestDb::new("snapslot").await;
    db.create_outbox("outbox").await;
    let names = Names::new("snapslot");
    sql(
        &db,
        &format!("CREATE PUBLICATION {} FOR TABLE outbox", names.publication),
    )
    .await;
    sql(
        &db,
        &format!(
            "SELECT pg_create_logical_replication_slot('{}', 'pgoutput')",
            names.slot
        ),
    )
    .await;
    let path = write_config(&relay_config(
        &db,
        &names,
        "",
        "[snapshot]\nmode = \"initial\"",
    ));
    check_and_run_refuse(&path, "asks for a snapshot, but replication slot").await;
}

/// A partitioned outbox: the estimate is the sum over its leaf partitions
/// (an analyzed partitioned parent's own reltuples repeats that total and
/// is not added to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_estimates_a_partitioned_outbox_over_its_leaves() {
    require_kafka();
    let db = TestDb::new("snappart").await;
    sql(
        &db,
        "CREATE TABLE outbox (
            id uuid NOT NULL,
            aggregatetype text NOT NULL,
            aggregateid text,
            type text NOT NULL,
            payload jsonb,
            PRIMARY KEY (id, aggregatetype)) PARTITION BY LIST (aggregatetype);
         CREATE TABLE outbox_order PARTITION OF outbox FOR VALUES IN ('order');
         CREATE TABLE outbox_other PARTITION OF outbox DEFAULT PARTITION BY LIST (aggregatetype);
         CREATE TABLE outbox_invoice PARTITION OF outbox_other FOR VALUES IN ('invoice');
         CREATE TABLE outbox_rest PARTITION OF outbox_other DEFAULT;
         ALTER TABLE outbox OWNER TO walrelay;
         INSERT INTO outbox SELECT gen_random_uuid(), CASE WHEN g % 3 = 0 THEN 'invoice' ELSE 'order' END,
                'a' || g, 'Created', '{}'
         FROM generate_series(1, 300) g;
         ANALYZE outbox;",
    )
    .await;
    let names = Names::new("snappart");
    let path = write_config(&relay_config(&db, &names, "", ""));
    let (code, report) = check(&path);
    assert_eq!(code, Some(0), "{report}");
    assert!(
        slot_line(&report)
            .contains("(~300 rows estimated from pg_class.reltuples: public.outbox ~300)"),
        "{report}"
    );
}

/// A new connector snapshots its outbox tables, which needs an order to
/// read each in: a table without a primary key and without
/// `snapshot_order_by`, or an order column the table lacks, is refused by
/// `check` and `run` alike, before `run` creates the slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_run_refuse_a_snapshot_without_an_order_alike() {
    require_kafka();
    let db = TestDb::new("snapnopk").await;
    sql(
        &db,
        "CREATE TABLE outbox (
            id uuid NOT NULL, aggregatetype text NOT NULL, aggregateid text,
            type text NOT NULL, payload jsonb,
            seq bigint GENERATED ALWAYS AS IDENTITY,
            twice bigint GENERATED ALWAYS AS (seq * 2) STORED);
         ALTER TABLE outbox OWNER TO walrelay;",
    )
    .await;
    let names = Names::new("snapnopk");
    let path = write_config(&relay_config(&db, &names, "", ""));
    check_and_run_refuse(&path, "public.outbox has no primary key").await;
    let path = write_config(&relay_config(
        &db,
        &names,
        "snapshot_order_by = [\"twice\"]",
        "",
    ));
    check_and_run_refuse(&path, "snapshot_order_by column \"twice\"").await;
    assert!(
        db.confirmed_flush(&names.slot).await.is_none(),
        "run must refuse before it creates the slot"
    );
    // An order the snapshot can read: both go ahead.
    let path = write_config(&relay_config(
        &db,
        &names,
        "snapshot_order_by = [\"seq\"]",
        "",
    ));
    let (code, report) = check(&path);
    assert_eq!(code, Some(0), "{report}");
    let mut relay = RelayProcess::start_with(&path, &[]);
    relay.wait_log("snapshot completed", START).await;
    assert!(relay.stop().success());
}

/// `check` beside a running connector under writers never reports the slot
/// ahead of the stored offset: the connector stores a position before it
/// confirms it to the slot, so `check` compares the slot with the store
/// read after it, in the same order. (Reading the store first, one check
/// in a few saw a slot that had moved on since.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_beside_a_running_connector_never_sees_the_slot_ahead_of_its_offset() {
    require_kafka();
    let db = TestDb::new("chk_live").await;
    db.create_outbox("outbox").await;
    let names = Names::new("chk_live");
    // Confirmed often: the slot moves several times during each check.
    let config = relay_config(&db, &names, "", "").replacen(
        "status_interval = \"200ms\"",
        "status_interval = \"50ms\"",
        1,
    );
    let path = write_config(&config);
    let mut relay = RelayProcess::start_with(&path, &[]);
    relay.wait_log("streaming", START).await;
    let writers = Writers::start(&db);
    for round in 0..10 {
        let (_, report) = check(&path);
        let problems = failures(&report);
        assert!(
            problems.is_empty(),
            "check {round} beside the running connector failed:\n{report}"
        );
    }
    writers.stop().await;
    assert!(relay.stop().success(), "{}", relay.log());
}

/// Issue 40 part 2: under the JSON converter forms the table must be one
/// whose Debezium form walrelay writes: `json_with_schema` writes the key
/// schema of a `NOT NULL` aggregate id (Debezium's follows nullability, and
/// a nullable column's key bytes, so partitions, would differ); a JSON key
/// of a type walrelay does not write as Debezium is refused too. `check`
/// and `run` alike, naming the fix; fixed, `check` passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_run_refuse_a_table_the_converter_forms_cannot_write_alike() {
    require_kafka();
    let db = TestDb::new("convforms").await;
    db.create_outbox("outbox").await;
    let names = Names::new("convforms");
    let schemas = write_config(&relay_config(
        &db,
        &names,
        "converter = \"json_with_schema\"",
        "",
    ));
    check_and_run_refuse(&schemas, "aggregate id column aggregateid is nullable").await;
    sql(
        &db,
        "ALTER TABLE outbox ALTER COLUMN aggregateid SET NOT NULL",
    )
    .await;
    let (code, report) = check(&schemas);
    assert_eq!(code, Some(0), "{report}");
    sql(&db, "ALTER TABLE outbox ALTER COLUMN payload SET NOT NULL").await;
    check_and_run_refuse(&schemas, "payload column payload is NOT NULL").await;
    sql(
        &db,
        "ALTER TABLE outbox ALTER COLUMN aggregateid TYPE numeric USING 0",
    )
    .await;
    let json = write_config(&relay_config(&db, &names, "key_converter = \"json\"", ""));
    check_and_run_refuse(&json, "aggregate id column aggregateid has type numeric").await;
}
