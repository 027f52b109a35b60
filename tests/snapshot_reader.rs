//! The snapshot building blocks against the real PostgreSQL: a slot created
//! with an exported snapshot, readers importing it (`pg::snapshot`), and the
//! handover — rows committed before the slot are in the snapshot, rows after
//! it only in the stream, and both forms of a row are byte-identical.
//!
//! Runs on any major (`WALRELAY_PG_MAJOR`/`WALRELAY_PG_PORT`; 14 uses the old
//! `EXPORT_SNAPSHOT` syntax).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use secrecy::SecretString;
use support::*;
use walrelay::Lsn;
use walrelay::pg::replication::{CreatedSlot, ReplicationClient, ReplicationMessage, StreamEvent};
use walrelay::pg::snapshot::{HashSplit, SnapshotError, SnapshotReader};
use walrelay::pg::wire::ConnectParams;
use walrelay::pgoutput::{Cell, LogicalMessage, Relation, TupleData, decode};

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
    let relation = reader.table_relation("public", "outbox").await.unwrap();
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
    let relation = reader.table_relation("public", "tricky").await.unwrap();
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
    let relation = readers[0].table_relation("public", "outbox").await.unwrap();
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
    let relation = reader.table_relation("public", "outbox").await.unwrap();
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
        .table_relation("public", "missing")
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("public.missing does not exist"),
        "{err}"
    );
    let err = reader.table_relation("public", "v").await.unwrap_err();
    assert!(err.to_string().contains("public.v is a view"), "{err}");
    let relation = reader.table_relation("public", "nokey").await.unwrap();
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
    let relation = reader.table_relation("public", "outbox").await.unwrap();
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
