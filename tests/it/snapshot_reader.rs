//! The snapshot building blocks against the real PostgreSQL: a slot created
//! with an exported snapshot, readers importing it (`pg::snapshot`), and the
//! handover — rows committed before the slot are in the snapshot, rows after
//! it only in the stream, and both forms of a row are byte-identical.
//!
//! Runs on any major (`WALRELAY_PG_MAJOR`/`WALRELAY_PG_PORT`; 14 uses the old
//! `EXPORT_SNAPSHOT` syntax).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use secrecy::SecretString;
use support::*;
use walrelay::Lsn;
use walrelay::pg::replication::{CreatedSlot, ReplicationClient, ReplicationMessage, StreamEvent};
use walrelay::pg::snapshot::{HashSplit, SnapshotError, SnapshotReader};
use walrelay::pg::wire::ConnectParams;
use walrelay::pgoutput::{Cell, LogicalMessage, Relation, TupleData, decode};
use walrelay::source::{SnapshotTable, Source, SourceError};

const DEADLINE: Duration = Duration::from_secs(60);

fn params(db: &TestDb) -> ConnectParams {
    ConnectParams {
        host: "127.0.0.1".into(),
        port: pg_port(),
        user: "walrelay".into(),
        password: Some(SecretString::from("walrelay")),
        database: db.name.clone(),
        application_name: "walrelay-snapshot-test".into(),
        connect_timeout: Duration::from_secs(10),
        max_message_size: 64 << 20,
        tls: Default::default(),
        target: Default::default(),
    }
}

/// A replication connection that created `slot` exporting its snapshot; keep
/// it idle while readers import.
async fn export(db: &TestDb, slot: &str) -> (ReplicationClient, CreatedSlot) {
    let mut client = ReplicationClient::connect(&params(db))
        .await
        .expect("replication connection");
    let created = client
        .create_slot_exporting_snapshot(slot, false)
        .await
        .expect("create slot exporting a snapshot");
    (client, created)
}

/// Every row of `relation` (in `split`), batch by batch; checks each batch's size.
async fn read_all(
    reader: &mut SnapshotReader,
    relation: &Relation,
    order_by: &[String],
    split: Option<&HashSplit>,
    max_rows: usize,
) -> Vec<TupleData> {
    let mut rows = reader
        .read(relation, order_by, split)
        .await
        .expect("start reading");
    let mut out = Vec::new();
    while let Some(batch) = rows.next_batch(max_rows, usize::MAX).await.expect("batch") {
        assert!(
            !batch.is_empty() && batch.len() <= max_rows,
            "{}",
            batch.len()
        );
        out.extend(batch);
    }
    assert_eq!(rows.rows_read(), out.len() as u64);
    out
}

fn text(cell: Option<&Cell>) -> Option<String> {
    match cell {
        Some(Cell::Text(b)) => Some(String::from_utf8(b.to_vec()).unwrap()),
        Some(Cell::Null) => None,
        other => panic!("unexpected cell {other:?}"),
    }
}

fn id(row: &TupleData) -> i64 {
    text(row.get(0)).unwrap().parse().unwrap()
}

/// Streams from `start` until `inserts` Insert messages arrived; returns the
/// Relation message the inserts refer to (via the root, pgoutput also sends
/// the leaf's), the inserts' tuples and the commit LSNs seen.
async fn stream_inserts(
    client: ReplicationClient,
    slot: &str,
    start: Lsn,
    publication: &str,
    inserts: usize,
) -> (Relation, Vec<TupleData>, Vec<Lsn>) {
    let mut stream = client
        .start_replication(slot, start, publication)
        .await
        .expect("start replication");
    let mut relations = HashMap::new();
    let mut relation = None;
    let mut rows = Vec::new();
    let mut commits = Vec::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while rows.len() < inserts || commits.is_empty() {
        let event = tokio::time::timeout_at(deadline, stream.recv())
            .await
            .unwrap_or_else(|_| panic!("timed out streaming; got {} inserts", rows.len()))
            .expect("recv");
        match event {
            StreamEvent::Message(ReplicationMessage::XLogData { data, .. }) => {
                match decode(data).expect("decode") {
                    LogicalMessage::Relation(r) => {
                        relations.insert(r.oid, r);
                    }
                    LogicalMessage::Insert(i) => {
                        let r = relations.get(&i.relation).expect("Relation before Insert");
                        assert!(relation.as_ref().is_none_or(|seen| seen == r));
                        relation = Some(r.clone());
                        rows.push(i.new);
                    }
                    LogicalMessage::Commit(c) => commits.push(c.commit_lsn),
                    _ => {}
                }
            }
            StreamEvent::Message(ReplicationMessage::Keepalive { reply: true, .. }) => {
                stream.send_status(start, false).await.expect("status");
            }
            StreamEvent::Message(_) => {}
            StreamEvent::End => panic!("stream ended"),
        }
    }
    let _ = stream.shutdown(start).await;
    (relation.expect("a Relation message"), rows, commits)
}

async fn outbox_table(db: &TestDb, table: &str, publication: &str) {
    db.client
        .batch_execute(&format!(
            "CREATE TABLE {table} (id int8 PRIMARY KEY, aggregateid text, payload text);
             ALTER TABLE {table} OWNER TO walrelay;
             CREATE PUBLICATION {publication} FOR TABLE {table};"
        ))
        .await
        .expect("create table");
}

/// (a) Rows committed before the slot are in the snapshot and not in the
/// stream; rows committed after it are in the stream and not in the snapshot.
#[tokio::test]
async fn snapshot_and_stream_split_at_the_consistent_point() {
    let db = TestDb::new("snapsplit").await;
    let slot = unique("snapsplit");
    outbox_table(&db, "outbox", "snap_pub").await;
    db.client
        .batch_execute(
            "INSERT INTO outbox SELECT i, 'a' || i, 'before' FROM generate_series(1, 5) i",
        )
        .await
        .unwrap();
    let (client, created) = export(&db, &slot).await;
    assert!(!created.snapshot_name.is_empty());
    assert!(created.consistent_point.0 > 0);

    // Committed after the slot, before the reader imports: not in the snapshot.
    db.client
        .batch_execute(
            "INSERT INTO outbox SELECT i, 'a' || i, 'after' FROM generate_series(6, 8) i",
        )
        .await
        .unwrap();
    let after_lsn = Lsn(db.current_wal_lsn().await);
    assert!(created.consistent_point <= after_lsn);

    let mut reader = SnapshotReader::open(&params(&db), &created.snapshot_name)
        .await
        .expect("import the snapshot");
    let relation = reader
        .table_relation("public", "outbox", None)
        .await
        .unwrap();
    assert_eq!(
        reader.estimate_rows(&relation).await.unwrap(),
        None,
        "never analyzed"
    );
    let rows = read_all(&mut reader, &relation, &[], None, 2).await;
    assert_eq!(rows.iter().map(id).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    assert!(
        rows.iter()
            .all(|r| text(r.get(2)).as_deref() == Some("before"))
    );
    // The reader's transaction keeps seeing the snapshot.
    db.client
        .batch_execute("INSERT INTO outbox VALUES (9, 'a9', 'after')")
        .await
        .unwrap();
    let again = read_all(&mut reader, &relation, &["id".to_owned()], None, 100).await;
    assert_eq!(again, rows);
    reader.finish().await.unwrap();

    // The stream from the consistent point has exactly the later rows.
    let (streamed_relation, streamed, commits) =
        stream_inserts(client, &slot, created.consistent_point, "snap_pub", 4).await;
    assert_eq!(streamed.iter().map(id).collect::<Vec<_>>(), [6, 7, 8, 9]);
    assert!(commits.iter().all(|c| *c >= created.consistent_point));
    assert_eq!(streamed_relation, relation);
}

/// An exported snapshot dies with the next command on its connection; the
/// import error says so. The slot can be dropped on that connection.
#[tokio::test]
async fn snapshot_cannot_be_imported_after_the_connection_moved_on() {
    let db = TestDb::new("snapgone").await;
    let slot = unique("snapgone");
    let (mut client, created) = export(&db, &slot).await;
    client.identify_system().await.unwrap();
    let err = SnapshotReader::open(&params(&db), &created.snapshot_name)
        .await
        .unwrap_err();
    assert!(matches!(err, SnapshotError::Import { .. }), "{err:?}");
    assert!(!err.is_transient(), "{err}");
    let text = err.to_string();
    assert!(text.contains("start the snapshot over"), "{text}");
    assert!(text.contains(&created.snapshot_name), "{text}");

    client.drop_slot(&slot).await.expect("drop slot");
    assert!(db.confirmed_flush(&slot).await.is_none());
    let row = db
        .client
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 0);
    assert!(client.drop_slot(&slot).await.is_err(), "already dropped");
}

/// (b) The snapshot's cells are byte-identical to pgoutput's for values
/// that need COPY escaping or depend on session settings, under database
/// defaults that would change the text forms; the relation matches the
/// Relation message (dropped and generated columns left out).
#[tokio::test]
async fn snapshot_values_are_byte_identical_to_pgoutput() {
    let db = TestDb::new("snapbytes").await;
    let name = &db.name;
    db.client
        .batch_execute(&format!(
            "ALTER DATABASE {name} SET bytea_output = 'escape';
             ALTER DATABASE {name} SET DateStyle = 'SQL, DMY';
             ALTER DATABASE {name} SET TimeZone = 'Asia/Kolkata';
             ALTER DATABASE {name} SET IntervalStyle = 'sql_standard';
             ALTER DATABASE {name} SET extra_float_digits = 0;
             CREATE TABLE tricky (
                 id int8 PRIMARY KEY, gone int, t text, b bytea, j jsonb, ts timestamptz,
                 n numeric, ia int4[], ta text[], f float8, iv interval, d date,
                 g int8 GENERATED ALWAYS AS (id * 2) STORED, e text);
             ALTER TABLE tricky DROP COLUMN gone;
             ALTER TABLE tricky OWNER TO walrelay;
             CREATE PUBLICATION bytes_pub FOR TABLE tricky;
             INSERT INTO tricky (id, t, b, j, ts, n, ia, ta, f, iv, d, e) VALUES
               (1, E'tab\\there\\nnew\\rcr\\\\back\\\\N\\bbs\\fff\\x0bvt', '\\x00ff5c0a09'::bytea,
                '{{\"a\": \"x\\ty\\n\\\\z\", \"b\": [1, null, \"\\\\N\"]}}',
                '2024-02-29 23:59:59.123456+05:30', 123456789012345678901234567890.000000001,
                '{{1,NULL,3}}', ARRAY['a b', 'c\"d', E'e\\\\f', NULL, '', E'x\\ty'], 0.1,
                '1 day 02:03:04.5', '2024-02-29', NULL),
               (2, '\\N', '', '\"é漢字\"', '-infinity', 'NaN', '{{}}', '{{}}', '-Infinity',
                '-1 mons', 'infinity', ''),
               (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
               (4, E'\\x01\\x7f ü', decode(repeat('ab5c', 5000), 'hex'), '[]', 'epoch', '-0.5',
                '{{{{1,2}},{{3,4}}}}', ARRAY[repeat('\\', 3)], 1e300, '0', '0001-01-01 BC',
                repeat(E'x\\t\\\\', 20000));"
        ))
        .await
        .expect("create tricky table");
    let slot = unique("snapbytes");
    let (client, created) = export(&db, &slot).await;
    // The same values again, after the slot: these arrive through pgoutput.
    db.client
        .batch_execute(
            "INSERT INTO tricky (id, t, b, j, ts, n, ia, ta, f, iv, d, e) \
             SELECT id + 100, t, b, j, ts, n, ia, ta, f, iv, d, e FROM tricky ORDER BY id",
        )
        .await
        .unwrap();

    let mut reader = SnapshotReader::open(&params(&db), &created.snapshot_name)
        .await
        .unwrap();
    let relation = reader
        .table_relation("public", "tricky", None)
        .await
        .unwrap();
    let names: Vec<&str> = relation.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "id", "t", "b", "j", "ts", "n", "ia", "ta", "f", "iv", "d", "e"
        ]
    );
    let snapshot = read_all(&mut reader, &relation, &[], None, 3).await;
    assert_eq!(snapshot.len(), 4);

    let (streamed_relation, streamed, _) =
        stream_inserts(client, &slot, created.consistent_point, "bytes_pub", 4).await;
    assert_eq!(streamed_relation, relation, "relation as pgoutput sends it");
    for (s, p) in snapshot.iter().zip(&streamed) {
        assert_eq!(id(s) + 100, id(p));
        for (i, column) in relation.columns.iter().enumerate().skip(1) {
            assert_eq!(
                s.get(i),
                p.get(i),
                "row {} column {}: snapshot vs pgoutput",
                id(s),
                column.name
            );
        }
    }
    // The session settings applied, not the database's defaults.
    let b = text(snapshot[0].get(2)).unwrap();
    assert_eq!(b, "\\x00ff5c0a09");
    assert_eq!(
        text(snapshot[0].get(4)).unwrap(),
        "2024-02-29 18:29:59.123456+00"
    );
    assert_eq!(
        text(snapshot[0].get(1)).unwrap(),
        "tab\there\nnew\rcr\\back\\N\x08bs\x0cff\x0bvt"
    );
    assert_eq!(text(snapshot[1].get(1)).unwrap(), "\\N");
    assert_eq!(snapshot[2].get(1), Some(&Cell::Null));
    assert_eq!(text(snapshot[0].get(8)).unwrap(), "0.1");
    assert_eq!(text(snapshot[0].get(9)).unwrap(), "1 day 02:03:04.5");
}

/// (c) Three readers with a hash split on the aggregate id see every row
/// exactly once, each aggregate (NULL included) in one reader only, each
/// share in id order.
#[tokio::test]
async fn hash_split_readers_cover_every_row_once() {
    let db = TestDb::new("snapsplit3").await;
    outbox_table(&db, "outbox", "split_pub").await;
    db.client
        .batch_execute(
            "INSERT INTO outbox SELECT i, CASE WHEN i % 50 = 0 THEN NULL ELSE 'agg-' || (i % 97) END, \
             'p' FROM generate_series(1, 3000) i",
        )
        .await
        .unwrap();
    let slot = unique("snapsplit3");
    let (_client, created) = export(&db, &slot).await;
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(
            SnapshotReader::open(&params(&db), &created.snapshot_name)
                .await
                .unwrap(),
        );
    }
    let relation = readers[0]
        .table_relation("public", "outbox", None)
        .await
        .unwrap();
    let splits = HashSplit::all("aggregateid", 3).unwrap();
    let mut seen: HashMap<i64, usize> = HashMap::new();
    let mut owner: HashMap<Option<String>, usize> = HashMap::new();
    for (part, (reader, split)) in readers.iter_mut().zip(&splits).enumerate() {
        let rows = read_all(reader, &relation, &[], Some(split), 128).await;
        assert!(!rows.is_empty(), "part {part} is empty");
        let ids: Vec<i64> = rows.iter().map(id).collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "part {part} not in id order"
        );
        for row in &rows {
            assert!(
                seen.insert(id(row), part).is_none(),
                "row {} twice",
                id(row)
            );
            let aggregate = text(row.get(1));
            let first = *owner.entry(aggregate.clone()).or_insert(part);
            assert_eq!(first, part, "aggregate {aggregate:?} in two parts");
        }
    }
    assert_eq!(seen.len(), 3000);
    assert_eq!(
        seen.keys().copied().collect::<HashSet<_>>(),
        (1..=3000).collect::<HashSet<_>>()
    );
    assert_eq!(
        owner.get(&None),
        Some(&0),
        "NULL aggregate ids go to part 0"
    );
}

/// (d) 200,000 rows read in batches, in primary-key order; a byte budget
/// cuts a batch short; the estimate follows ANALYZE.
#[tokio::test]
async fn large_table_is_read_in_batches() {
    const ROWS: i64 = 200_000;
    let db = TestDb::new("snapbig").await;
    outbox_table(&db, "outbox", "big_pub").await;
    db.client
        .batch_execute(&format!(
            "INSERT INTO outbox SELECT i, 'agg-' || (i % 1000), repeat('x', 100) \
             FROM generate_series({ROWS}, 1, -1) i; ANALYZE outbox;"
        ))
        .await
        .unwrap();
    let slot = unique("snapbig");
    let (_client, created) = export(&db, &slot).await;
    let mut reader = SnapshotReader::open(&params(&db), &created.snapshot_name)
        .await
        .unwrap();
    let relation = reader
        .table_relation("public", "outbox", None)
        .await
        .unwrap();
    let estimate = reader.estimate_rows(&relation).await.unwrap().unwrap();
    assert!(
        (ROWS as u64 * 9 / 10..=ROWS as u64 * 11 / 10).contains(&estimate),
        "{estimate}"
    );
    let mut rows = reader.read(&relation, &[], None).await.unwrap();
    // A row is about 115 bytes: a 10,000-byte budget stops well before 5,000 rows.
    let first = rows.next_batch(5_000, 10_000).await.unwrap().unwrap();
    assert!((80..200).contains(&first.len()), "{}", first.len());
    let mut next = 1;
    let mut batches = 1;
    for row in &first {
        assert_eq!(id(row), next);
        next += 1;
    }
    while let Some(batch) = rows.next_batch(5_000, usize::MAX).await.unwrap() {
        assert!(batch.len() <= 5_000);
        batches += 1;
        for row in &batch {
            assert_eq!(id(row), next, "primary-key order");
            assert_eq!(row.len(), 3);
            next += 1;
        }
    }
    assert_eq!(next - 1, ROWS);
    assert!(batches > ROWS / 5_000, "{batches} batches");
    assert!(rows.next_batch(5_000, usize::MAX).await.unwrap().is_none());
}

/// Errors name the table, the column and the fix.
#[tokio::test]
async fn reader_errors_name_table_and_column() {
    let db = TestDb::new("snaperr").await;
    db.client
        .batch_execute(
            "CREATE TABLE nokey (a text, b text); ALTER TABLE nokey OWNER TO walrelay;
             CREATE VIEW v AS SELECT 1 AS x; ALTER VIEW v OWNER TO walrelay;
             INSERT INTO nokey VALUES ('1', '2');",
        )
        .await
        .unwrap();
    let slot = unique("snaperr");
    let (_client, created) = export(&db, &slot).await;
    let mut reader = SnapshotReader::open(&params(&db), &created.snapshot_name)
        .await
        .unwrap();
    let err = reader
        .table_relation("public", "missing", None)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("public.missing does not exist"),
        "{err}"
    );
    let err = reader
        .table_relation("public", "v", None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("public.v is a view"), "{err}");
    let relation = reader
        .table_relation("public", "nokey", None)
        .await
        .unwrap();
    assert!(relation.columns.iter().all(|c| !c.is_key()));
    let err = reader.read(&relation, &[], None).await.unwrap_err();
    assert!(matches!(err, SnapshotError::NoOrder { .. }), "{err}");
    let err = reader
        .read(&relation, &["c".to_owned()], None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("column \"c\""), "{err}");
    assert!(!err.is_transient());
    let rows = read_all(&mut reader, &relation, &["a".to_owned()], None, 10).await;
    assert_eq!(text(rows[0].get(1)).as_deref(), Some("2"));
}

/// A partitioned table published through its root: the relation matches the
/// Relation message pgoutput sends under the root's name, the read covers
/// every partition in key order, and the estimate sums the partitions.
#[tokio::test]
async fn partitioned_table_reads_like_its_root() {
    let db = TestDb::new("snappart").await;
    db.client
        .batch_execute(
            "CREATE TABLE outbox (id int8 PRIMARY KEY, aggregateid text, payload text)
                 PARTITION BY RANGE (id);
             CREATE TABLE outbox_low PARTITION OF outbox FOR VALUES FROM (0) TO (1000);
             CREATE TABLE outbox_high PARTITION OF outbox FOR VALUES FROM (1000) TO (MAXVALUE);
             ALTER TABLE outbox OWNER TO walrelay;
             ALTER TABLE outbox_low OWNER TO walrelay;
             ALTER TABLE outbox_high OWNER TO walrelay;
             CREATE PUBLICATION part_pub FOR TABLE outbox WITH (publish_via_partition_root = true);
             INSERT INTO outbox SELECT i, 'a' || (i % 7), 'p' FROM generate_series(1, 2000) i;
             ANALYZE outbox_low; ANALYZE outbox_high;",
        )
        .await
        .unwrap();
    let slot = unique("snappart");
    let (client, created) = export(&db, &slot).await;
    db.client
        .batch_execute("INSERT INTO outbox VALUES (5000, 'a', 'after')")
        .await
        .unwrap();
    let mut reader = SnapshotReader::open(&params(&db), &created.snapshot_name)
        .await
        .unwrap();
    let relation = reader
        .table_relation("public", "outbox", None)
        .await
        .unwrap();
    let estimate = reader.estimate_rows(&relation).await.unwrap();
    assert_eq!(estimate, Some(2000), "the partitions' reltuples summed");
    let rows = read_all(&mut reader, &relation, &[], None, 500).await;
    assert_eq!(
        rows.iter().map(id).collect::<Vec<_>>(),
        (1..=2000).collect::<Vec<_>>()
    );
    let (streamed_relation, streamed, _) =
        stream_inserts(client, &slot, created.consistent_point, "part_pub", 1).await;
    assert_eq!(streamed.iter().map(id).collect::<Vec<_>>(), [5000]);
    assert_eq!(streamed_relation, relation);
}

fn snapshot_table(name: &str) -> SnapshotTable {
    SnapshotTable {
        schema: "public".into(),
        name: name.into(),
        order_by: Vec::new(),
        split_by: "aggregateid".into(),
    }
}

/// Opens the snapshot `created` exported on `tables` the way `walrelay run`
/// does (every reader locks every table, then the check).
async fn open_source(
    db: &TestDb,
    client: ReplicationClient,
    created: &CreatedSlot,
    publication: &str,
    tables: &[&str],
) -> Result<Source, SourceError> {
    let tables: Vec<SnapshotTable> = tables.iter().map(|t| snapshot_table(t)).collect();
    let origin = walrelay::source::Origin::Exported(created.snapshot_name.clone());
    Source::snapshot(
        client,
        (created.consistent_point, &origin),
        &params(db),
        publication,
        &tables,
        2,
        100,
    )
    .await
}

/// Each kind of DDL PostgreSQL does not show to an older snapshot
/// (TRUNCATE, a rewriting ALTER TABLE, a dropped or renamed column, a
/// dropped table), committed after the consistent point and before the
/// readers lock the tables: the snapshot refuses to read (it would see the
/// table empty or fail mid-way), transiently, naming the table — it is
/// taken again from a new point. Without DDL the same steps succeed.
#[tokio::test]
async fn ddl_after_the_consistent_point_is_found_before_any_row_is_read() {
    let ddl = [
        ("TRUNCATE outbox_b", "filenode"),
        (
            "ALTER TABLE outbox_b ADD COLUMN r float8 DEFAULT random()",
            "filenode",
        ),
        ("ALTER TABLE outbox_b DROP COLUMN payload", "became"),
        (
            "ALTER TABLE outbox_b RENAME COLUMN payload TO body",
            "became",
        ),
        ("DROP TABLE outbox_b", "dropped"),
        ("", ""),
    ];
    for (statement, says) in ddl {
        let db = TestDb::new("snapddl").await;
        outbox_table(&db, "outbox", "ddl_pub").await;
        db.client
            .batch_execute(
                "CREATE TABLE outbox_b (id int8 PRIMARY KEY, aggregateid text, payload text);
                 ALTER TABLE outbox_b OWNER TO walrelay;
                 ALTER PUBLICATION ddl_pub ADD TABLE outbox_b;
                 INSERT INTO outbox SELECT i, 'a' || i, 'x' FROM generate_series(1, 50) i;
                 INSERT INTO outbox_b SELECT i, 'a' || i, 'x' FROM generate_series(1, 50) i;",
            )
            .await
            .unwrap();
        let slot = unique("snapddl");
        let (client, created) = export(&db, &slot).await;
        if !statement.is_empty() {
            db.client.batch_execute(statement).await.unwrap();
        }
        let result = open_source(&db, client, &created, "ddl_pub", &["outbox", "outbox_b"]).await;
        if statement.is_empty() {
            let mut source = result.expect("no DDL: the snapshot opens");
            let mut rows = 0;
            loop {
                match source.next().await.expect("snapshot event") {
                    walrelay::source::SourceEvent::SnapshotRow { .. } => rows += 1,
                    walrelay::source::SourceEvent::SnapshotDone { .. } => break,
                    _ => {}
                }
            }
            assert_eq!(rows, 100);
            continue;
        }
        let Err(SourceError::Snapshot(e)) = result else {
            panic!("{statement}: the snapshot must refuse, got {result:?}")
        };
        let text = e.to_string();
        assert!(
            matches!(e, SnapshotError::ChangedSinceSnapshot { .. }) && e.is_transient(),
            "{statement}: {text}"
        );
        assert!(text.contains(says), "{statement}: {text}");
        assert!(text.contains("taken again"), "{statement}: {text}");
    }
}

/// While a snapshot reads its first table, DDL on a later one waits for the
/// snapshot (the readers locked every table first) instead of making the
/// snapshot see the later table empty: every row present at the consistent
/// point is read.
#[tokio::test]
async fn ddl_during_the_snapshot_waits_and_every_row_is_read() {
    let db = TestDb::new("snapddlwait").await;
    outbox_table(&db, "outbox", "wait_pub").await;
    db.client
        .batch_execute(
            "CREATE TABLE outbox_b (id int8 PRIMARY KEY, aggregateid text, payload text);
             ALTER TABLE outbox_b OWNER TO walrelay;
             ALTER PUBLICATION wait_pub ADD TABLE outbox_b;
             INSERT INTO outbox SELECT i, 'a' || i, 'x' FROM generate_series(1, 2000) i;
             INSERT INTO outbox_b SELECT i, 'a' || i, 'x' FROM generate_series(1, 1000) i;",
        )
        .await
        .unwrap();
    let slot = unique("snapddlwait");
    let (client, created) = export(&db, &slot).await;
    let mut source = open_source(&db, client, &created, "wait_pub", &["outbox", "outbox_b"])
        .await
        .expect("open");
    // The first rows of the first table are out: the DDL starts now.
    loop {
        if let walrelay::source::SourceEvent::SnapshotRow { .. } = source.next().await.unwrap() {
            break;
        }
    }
    let ddl = {
        let name = db.name.clone();
        tokio::spawn(async move {
            let (client, conn) = tokio_postgres::connect(
                &format!(
                    "postgres://postgres:postgres@127.0.0.1:{}/{name}",
                    pg_port()
                ),
                tokio_postgres::NoTls,
            )
            .await
            .unwrap();
            tokio::spawn(conn);
            client
                .batch_execute(
                    "BEGIN; TRUNCATE outbox_b;
                     INSERT INTO outbox_b SELECT i, 'n' || i, 'new' FROM generate_series(5001, 5010) i;
                     COMMIT;
                     ALTER TABLE outbox ADD COLUMN r float8 DEFAULT random();",
                )
                .await
                .unwrap();
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !ddl.is_finished(),
        "the DDL must wait for the snapshot's locks"
    );
    let mut per_table: HashMap<usize, HashSet<String>> = HashMap::new();
    loop {
        match source.next().await.unwrap() {
            walrelay::source::SourceEvent::SnapshotRow { table, row, .. } => {
                per_table
                    .entry(table)
                    .or_default()
                    .insert(text(row.get(0)).unwrap());
            }
            walrelay::source::SourceEvent::SnapshotDone { .. } => break,
            _ => {}
        }
    }
    assert_eq!(
        per_table.get(&0).map(HashSet::len),
        Some(1999),
        "the first row came before"
    );
    assert_eq!(per_table.get(&1).map(HashSet::len), Some(1000));
    drop(source);
    tokio::time::timeout(DEADLINE, ddl)
        .await
        .expect("the DDL runs once the snapshot ended")
        .unwrap();
}

/// A plain table is read without its inheritance children: pgoutput streams
/// a child's rows as the child's, so reading them as the parent's would
/// publish them under the parent (twice, with the child captured too).
#[tokio::test]
async fn inheritance_children_are_not_read_as_the_parent() {
    let db = TestDb::new("snapinherit").await;
    outbox_table(&db, "outbox", "inh_pub").await;
    db.client
        .batch_execute(
            "CREATE TABLE outbox_child (extra text) INHERITS (outbox);
             ALTER TABLE outbox_child OWNER TO walrelay;
             INSERT INTO outbox VALUES (1, 'a', 'parent');
             INSERT INTO outbox_child VALUES (2, 'b', 'child', 'x');",
        )
        .await
        .unwrap();
    let slot = unique("snapinherit");
    let (_client, created) = export(&db, &slot).await;
    let mut reader = SnapshotReader::open(&params(&db), &created.snapshot_name)
        .await
        .unwrap();
    let parent = reader
        .table_relation("public", "outbox", None)
        .await
        .unwrap();
    let rows = read_all(&mut reader, &parent, &[], None, 10).await;
    assert_eq!(rows.iter().map(id).collect::<Vec<_>>(), [1]);
    let child = reader
        .table_relation("public", "outbox_child", None)
        .await
        .unwrap();
    let rows = read_all(&mut reader, &child, &["id".to_owned()], None, 10).await;
    assert_eq!(rows.iter().map(id).collect::<Vec<_>>(), [2]);
}

/// The role's timeouts (`statement_timeout`,
/// `idle_in_transaction_session_timeout`, `idle_session_timeout`, and on
/// 17+ `transaction_timeout`) cannot end a snapshot: a COPY that outlives
/// them, a reader idle in its transaction between tables, and the exporting
/// replication connection idle in its transaction all carry on.
#[tokio::test]
async fn role_timeouts_do_not_end_a_snapshot() {
    let db = TestDb::new("snaptimeouts").await;
    outbox_table(&db, "outbox", "to_pub").await;
    let major: u32 = pg_major().parse().unwrap_or(18);
    let mut settings = String::from(
        "ALTER ROLE walrelay IN DATABASE {db} SET statement_timeout = '1s';
         ALTER ROLE walrelay IN DATABASE {db} SET idle_in_transaction_session_timeout = '1s';
         ALTER ROLE walrelay IN DATABASE {db} SET idle_session_timeout = '1s';",
    );
    if major >= 17 {
        settings.push_str("ALTER ROLE walrelay IN DATABASE {db} SET transaction_timeout = '2s';");
    }
    db.client
        .batch_execute(&format!(
            "{}
             INSERT INTO outbox SELECT i, 'a' || i, repeat('x', 100) FROM generate_series(1, 20000) i;",
            settings.replace("{db}", &db.name)
        ))
        .await
        .unwrap();
    let slot = unique("snaptimeouts");
    let (client, created) = export(&db, &slot).await;
    let mut reader = SnapshotReader::open(&params(&db), &created.snapshot_name)
        .await
        .unwrap();
    let relation = reader
        .table_relation("public", "outbox", None)
        .await
        .unwrap();
    let mut count = 0;
    {
        let mut rows = reader.read(&relation, &[], None).await.unwrap();
        let mut first = true;
        while let Some(batch) = rows.next_batch(100, usize::MAX).await.unwrap() {
            count += batch.len();
            if first {
                // The COPY runs on while the consumer is slow.
                tokio::time::sleep(Duration::from_millis(2_500)).await;
                first = false;
            }
        }
    }
    assert_eq!(count, 20_000);
    // Idle in the snapshot's transaction between two tables.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let again = read_all(&mut reader, &relation, &[], None, 5_000).await;
    assert_eq!(again.len(), 20_000);
    reader.finish().await.unwrap();
    // The exporting connection idled in its transaction all along.
    db.client
        .batch_execute("INSERT INTO outbox VALUES (30000, 'z', 'after')")
        .await
        .unwrap();
    let (_, streamed, _) =
        stream_inserts(client, &slot, created.consistent_point, "to_pub", 1).await;
    assert_eq!(streamed.iter().map(id).collect::<Vec<_>>(), [30000]);
}

/// The snapshot reads the columns the publication streams: its column list
/// (15+) leaves a column out of both, and on 18 a stored generated column
/// that `publish_generated_columns` publishes is in both. The snapshot's
/// Relation equals the streamed one.
#[tokio::test]
async fn snapshot_columns_are_the_publications_columns() {
    let major: u32 = pg_major().parse().unwrap_or(18);
    if major < 15 {
        // PostgreSQL 14 has no column lists: nothing to differ (the
        // byte-identity test covers its columns).
        return;
    }
    let db = TestDb::new("snapcollist").await;
    let generated = if major >= 18 {
        ", doubled int8 GENERATED ALWAYS AS (id * 2) STORED"
    } else {
        ""
    };
    let with = if major >= 18 {
        " WITH (publish_generated_columns = stored)"
    } else {
        ""
    };
    let listed = if major >= 18 {
        "id, aggregateid, payload, doubled"
    } else {
        "id, aggregateid, payload"
    };
    db.client
        .batch_execute(&format!(
            "CREATE TABLE outbox (id int8 PRIMARY KEY, aggregateid text, secret text, payload text{generated});
             ALTER TABLE outbox OWNER TO walrelay;
             CREATE PUBLICATION col_pub FOR TABLE outbox ({listed}){with};
             INSERT INTO outbox VALUES (1, 'a', 'hidden', 'p');"
        ))
        .await
        .unwrap();
    let slot = unique("snapcollist");
    let (client, created) = export(&db, &slot).await;
    db.client
        .batch_execute("INSERT INTO outbox VALUES (2, 'b', 'hidden', 'q')")
        .await
        .unwrap();
    let mut reader = SnapshotReader::open(&params(&db), &created.snapshot_name)
        .await
        .unwrap();
    let relation = reader
        .table_relation("public", "outbox", Some("col_pub"))
        .await
        .unwrap();
    let names: Vec<&str> = relation.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.join(", "), listed);
    let rows = read_all(&mut reader, &relation, &[], None, 10).await;
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0]
            .0
            .iter()
            .all(|c| text(Some(c)).as_deref() != Some("hidden")),
        "{rows:?}"
    );
    let (streamed_relation, streamed, _) =
        stream_inserts(client, &slot, created.consistent_point, "col_pub", 1).await;
    assert_eq!(streamed_relation, relation);
    assert_eq!(streamed[0].0.len(), rows[0].0.len());
}
