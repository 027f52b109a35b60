//! The table router with `provide_transaction_metadata`: which records a
//! transaction makes (BEGIN before its first event, the `transaction`
//! blocks, END at its Commit), in Debezium 3.6.1's shape (see
//! `router/txmeta/tests.rs` for the bytes Debezium wrote).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};

use super::super::*;
use crate::pgoutput::{Cell, Column, Relation};
use crate::source::{Position, Txn};

const COMMIT: Lsn = Lsn(0x16B_3748);
const END: Lsn = Lsn(0x16B_3790);
const BEGIN_AT: Lsn = Lsn(0x16B_3600);
const TXN: TxnInfo = TxnInfo {
    commit_lsn: COMMIT,
    xid: 555,
    commit_ms: 1_704_067_200_000,
};

fn config(defaults: &str, tables: &str) -> Config {
    Config::from_str(
        &format!(
            "[connector]\nname = \"shop\"\n[postgres]\ndatabase = \"app\"\n\
             [kafka]\nbrokers = \"k:9092\"\n[table_defaults]\n{defaults}\n{tables}\n"
        ),
        "test.toml",
    )
    .expect("valid config")
}

fn relation(oid: Oid, name: &str) -> Relation {
    Relation {
        oid,
        namespace: "public".into(),
        name: name.into(),
        replica_identity: b'd',
        columns: vec![
            Column {
                flags: 1,
                name: "id".into(),
                type_oid: 23,
                type_modifier: -1,
            },
            Column {
                flags: 0,
                name: "v".into(),
                type_oid: 25,
                type_modifier: -1,
            },
        ],
    }
}

fn row(id: &str, v: &str) -> TupleData {
    TupleData(vec![
        Cell::Text(Bytes::copy_from_slice(id.as_bytes())),
        Cell::Text(Bytes::copy_from_slice(v.as_bytes())),
    ])
}

fn change(
    op: Op,
    rel: &Relation,
    index: u64,
    lsn: u64,
    old: Option<TupleData>,
    new: Option<TupleData>,
) -> Change {
    Change {
        pos: Position {
            commit_lsn: COMMIT,
            index,
        },
        txn: Txn {
            xid: 555,
            commit_time: 0,
        },
        lsn: Lsn(lsn),
        op,
        relation: Arc::new(rel.clone()),
        old,
        new,
    }
}

const TABLES: &str = "[[table]]\nname = \"public.a\"\n[[table]]\nname = \"public.b\"";

fn router(defaults: &str) -> (TableRouter, Relation, Relation) {
    let (a, b) = (relation(7, "a"), relation(8, "b"));
    let mut r = TableRouter::new(&config(defaults, TABLES));
    r.on_relation(&a, Lsn(1)).unwrap();
    r.on_relation(&b, Lsn(1)).unwrap();
    (r, a, b)
}

fn json_of(b: &Option<Bytes>) -> Value {
    b.as_ref()
        .map_or(Value::Null, |b| serde_json::from_slice(b).unwrap())
}

fn header(r: &Record, name: &str) -> String {
    let (_, v) = r.headers.iter().find(|(k, _)| &**k == name).unwrap();
    String::from_utf8(v.to_vec()).unwrap()
}

/// One transaction: insert a 1, delete b 2 (+ tombstone), a key change of
/// a (delete + tombstone + create), then Commit.
fn one_transaction(r: &mut TableRouter, a: &Relation, b: &Relation) -> Vec<Record> {
    let mut out = Vec::new();
    r.on_begin(TXN, BEGIN_AT);
    let changes = [
        change(Op::Insert, a, 0, 0x16B_3600, None, Some(row("1", "x"))),
        change(Op::Delete, b, 1, 0x16B_3640, Some(row("2", "")), None),
        change(
            Op::Update,
            a,
            2,
            0x16B_3680,
            Some(row("1", "x")),
            Some(row("9", "x")),
        ),
    ];
    for c in &changes {
        r.on_change(c, TXN, &mut out).unwrap();
    }
    r.on_commit(COMMIT, END, &mut out).unwrap();
    out
}

#[test]
fn a_transaction_is_begin_its_events_with_their_blocks_and_end() {
    let (mut r, a, b) = router("provide_transaction_metadata = true");
    assert!(r.provides_transaction_metadata());
    let out = one_transaction(&mut r, &a, &b);
    let shape: Vec<(String, Value, Value, String)> = out
        .iter()
        .map(|rec| {
            let v = json_of(&rec.value);
            let what = if &*rec.topic == "shop.transaction" {
                v.clone()
            } else {
                v["transaction"].clone()
            };
            (
                rec.topic.to_string(),
                json_of(&rec.key),
                what,
                header(rec, EVENT_ID_HEADER),
            )
        })
        .collect();
    let begin_id = format!("555:{}", BEGIN_AT.0);
    let block = |lsn: u64, total: u64, table: u64| json!({"id": format!("555:{lsn}"), "total_order": total, "data_collection_order": table});
    let expected = vec![
        (
            "shop.transaction".to_owned(),
            json!({"id": begin_id}),
            json!({"status": "BEGIN", "id": begin_id, "event_count": null,
                   "data_collections": null, "ts_ms": 1_704_067_200_000_i64}),
            "0/016B3748:begin".to_owned(),
        ),
        (
            "shop.public.a".into(),
            json!({"id": 1}),
            block(0x16B_3600, 1, 1),
            "0/016B3748:0".into(),
        ),
        (
            "shop.public.b".into(),
            json!({"id": 2}),
            block(0x16B_3640, 2, 1),
            "0/016B3748:1".into(),
        ),
        // A tombstone is no event: no value, not counted.
        (
            "shop.public.b".into(),
            json!({"id": 2}),
            Value::Null,
            "0/016B3748:1:tombstone".into(),
        ),
        (
            "shop.public.a".into(),
            json!({"id": 1}),
            block(0x16B_3680, 3, 2),
            "0/016B3748:2:delete".into(),
        ),
        (
            "shop.public.a".into(),
            json!({"id": 1}),
            Value::Null,
            "0/016B3748:2:tombstone".into(),
        ),
        (
            "shop.public.a".into(),
            json!({"id": 9}),
            block(0x16B_3680, 4, 3),
            "0/016B3748:2".into(),
        ),
        (
            "shop.transaction".into(),
            json!({"id": format!("555:{}", END.0)}),
            json!({"status": "END", "id": format!("555:{}", END.0), "event_count": 4,
                   "data_collections": [{"data_collection": "public.a", "event_count": 3},
                                        {"data_collection": "public.b", "event_count": 1}],
                   "ts_ms": 1_704_067_200_000_i64}),
            "0/016B3748:end".into(),
        ),
    ];
    assert_eq!(shape, expected);
    for rec in &out {
        assert_eq!(header(rec, LSN_HEADER), "0/016B3748");
    }
}

/// The same transaction again (a re-send after a restart) gives the same
/// records, byte for byte, in a new router too.
#[test]
fn a_re_sent_transaction_makes_the_same_records() {
    let (mut r, a, b) = router("provide_transaction_metadata = true");
    let first = one_transaction(&mut r, &a, &b);
    let again = one_transaction(&mut r, &a, &b);
    assert_eq!(first, again);
    let (mut fresh, a, b) = router("provide_transaction_metadata = true");
    assert_eq!(first, one_transaction(&mut fresh, &a, &b));
}

/// Off (the default): no BEGIN/END, `transaction` null, as before.
#[test]
fn off_by_default() {
    let (mut r, a, b) = router("");
    assert!(!r.provides_transaction_metadata());
    let out = one_transaction(&mut r, &a, &b);
    assert_eq!(out.len(), 6);
    for rec in &out {
        assert_ne!(&*rec.topic, "shop.transaction");
        if rec.value.is_some() {
            assert_eq!(json_of(&rec.value)["transaction"], Value::Null);
        }
    }
}

/// A transaction whose changes make no event — only skipped operations
/// (a TRUNCATE under the default `skipped_operations`), or a table that is
/// not captured — has no BEGIN/END; a TRUNCATE that is published counts
/// per table, each `transaction.id` with the Truncate message's LSN.
#[test]
fn transactions_without_events_have_no_begin_or_end_and_truncates_count() {
    let (mut r, a, b) = router("provide_transaction_metadata = true");
    let other = relation(9, "other");
    r.on_relation(&other, Lsn(1)).unwrap();
    let mut out = Vec::new();
    r.on_begin(TXN, BEGIN_AT);
    r.on_truncate(a.oid, TXN, Lsn(0x16B_3700), 0, &mut out)
        .unwrap();
    r.on_change(
        &change(Op::Insert, &other, 1, 0x16B_3710, None, Some(row("1", "x"))),
        TXN,
        &mut out,
    )
    .unwrap();
    r.on_commit(COMMIT, END, &mut out).unwrap();
    assert!(out.is_empty(), "{out:?}");

    let (mut r, a, _) =
        router("provide_transaction_metadata = true\nskipped_operations = \"none\"");
    r.on_begin(TXN, BEGIN_AT);
    for (k, rel) in [&a, &b].into_iter().enumerate() {
        r.on_truncate(rel.oid, TXN, Lsn(0x16B_3700), k as u64, &mut out)
            .unwrap();
    }
    r.on_commit(COMMIT, END, &mut out).unwrap();
    let values: Vec<Value> = out.iter().map(|rec| json_of(&rec.value)).collect();
    assert_eq!(values.len(), 4, "{values:?}");
    assert_eq!(values[0]["status"], "BEGIN");
    assert_eq!(
        values[1]["transaction"],
        json!({"id": format!("555:{}", 0x16B_3700), "total_order": 1, "data_collection_order": 1})
    );
    assert_eq!(values[2]["transaction"]["total_order"], 2);
    assert_eq!(values[3]["event_count"], 2);
    assert_eq!(
        values[3]["data_collections"],
        json!([{"data_collection": "public.a", "event_count": 1},
               {"data_collection": "public.b", "event_count": 1}])
    );
}

/// Snapshot rows belong to no transaction: `transaction` null, not counted.
#[test]
fn snapshot_rows_have_no_transaction() {
    let (mut r, a, _) = router("provide_transaction_metadata = true");
    let mut out = Vec::new();
    r.on_snapshot_row(
        a.oid,
        &row("1", "x"),
        Lsn(0x100),
        0,
        5,
        SnapshotMarker::Last,
        &mut out,
    )
    .unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(json_of(&out[0].value)["transaction"], Value::Null);
    r.on_commit(COMMIT, END, &mut out).unwrap();
    assert_eq!(out.len(), 1);
}

/// A change of a transaction the router was not told began is a bug the
/// router names rather than a guessed BEGIN.
#[test]
fn a_change_outside_a_begun_transaction_is_an_error() {
    let (mut r, a, _) = router("provide_transaction_metadata = true");
    let mut out = Vec::new();
    let e = r
        .on_change(
            &change(Op::Insert, &a, 0, 0x16B_3600, None, Some(row("1", "x"))),
            TXN,
            &mut out,
        )
        .unwrap_err();
    assert_eq!(e.table, "public.a");
    assert!(e.reason.contains("outside the transaction"), "{e}");
    assert!(out.is_empty());
}

/// A change that cannot be encoded leaves nothing behind: no records (not
/// even the BEGIN it would have opened, or the delete half of a key
/// change), no count. A caller that goes on without it (a dead-letter
/// path) gets BEGIN with the next event and an END counting what it
/// published.
#[test]
fn a_change_that_fails_is_not_counted_and_leaves_no_records() {
    let (mut r, a, b) = router("provide_transaction_metadata = true");
    let bad = TupleData(vec![
        Cell::Text(Bytes::from_static(b"5")),
        Cell::Binary(Bytes::from_static(b"\x00")),
    ]);
    let mut out = Vec::new();
    r.on_begin(TXN, BEGIN_AT);
    let first = change(Op::Insert, &a, 0, 0x16B_3600, None, Some(bad.clone()));
    assert!(r.on_change(&first, TXN, &mut out).is_err());
    assert!(out.is_empty(), "{out:?}");
    let good = change(Op::Insert, &b, 1, 0x16B_3640, None, Some(row("2", "y")));
    r.on_change(&good, TXN, &mut out).unwrap();
    // A table that already has an event: its count stays.
    let bad_b = change(Op::Insert, &b, 2, 0x16B_3660, None, Some(bad.clone()));
    assert!(r.on_change(&bad_b, TXN, &mut out).is_err());
    // A key change whose create fails: its delete (and tombstone) go too.
    let key_change = change(
        Op::Update,
        &a,
        2,
        0x16B_3680,
        Some(row("1", "x")),
        Some(bad),
    );
    let len = out.len();
    assert!(r.on_change(&key_change, TXN, &mut out).is_err());
    assert_eq!(out.len(), len);
    r.on_commit(COMMIT, END, &mut out).unwrap();
    let values: Vec<Value> = out.iter().map(|rec| json_of(&rec.value)).collect();
    assert_eq!(values.len(), 3, "{values:?}");
    assert_eq!(values[0]["status"], "BEGIN");
    assert_eq!(values[1]["transaction"]["total_order"], 1);
    assert_eq!(values[2]["event_count"], 1);
    assert_eq!(
        values[2]["data_collections"],
        json!([{"data_collection": "public.b", "event_count": 1}])
    );
}
