//! Transaction metadata against what Debezium 3.6.1 wrote (its
//! `.transaction` topic, read back from Kafka, PostgreSQL 18).

use super::*;

fn names(tables: &[&str], order: &[usize]) -> Vec<String> {
    order.iter().map(|&i| tables[i].to_owned()).collect()
}

/// Debezium 3.6.1's END records, `data_collections` in the order it wrote
/// them, for tables that first had an event in the order given.
#[test]
fn data_collections_come_in_debeziums_hashmap_order() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["public.a", "public.b"], &["public.a", "public.b"]),
        (
            &["public.a", "public.b", "public.t1"],
            &["public.a", "public.b", "public.t1"],
        ),
        (&["public.t2", "public.t3"], &["public.t3", "public.t2"]),
        // 20 tables: the map grew to 32 buckets.
        (
            &[
                "public.t1",
                "public.t2",
                "public.t3",
                "public.t4",
                "public.t5",
                "public.t6",
                "public.t7",
                "public.t8",
                "public.t9",
                "public.t10",
                "public.t11",
                "public.t12",
                "public.t13",
                "public.t14",
                "public.t15",
                "public.t16",
                "public.t17",
                "public.t18",
                "public.t19",
                "public.t20",
            ],
            &[
                "public.t14",
                "public.t15",
                "public.t12",
                "public.t13",
                "public.t18",
                "public.t19",
                "public.t16",
                "public.t17",
                "public.t8",
                "public.t7",
                "public.t9",
                "public.t4",
                "public.t3",
                "public.t6",
                "public.t5",
                "public.t10",
                "public.t11",
                "public.t2",
                "public.t1",
                "public.t20",
            ],
        ),
    ];
    for (put, iterated) in cases {
        let order = java_hashmap_order(put.iter().copied());
        assert_eq!(names(put, &order), *iterated, "{put:?}");
    }
}

/// Nine keys in one bucket of a 16-bucket map: Java doubles the table to
/// 32 (once, at the ninth put) instead of making the bucket a tree, and the
/// keys spread over two buckets; below eight, they stay in one.
#[test]
fn a_crowded_bucket_grows_the_map_as_java_does() {
    let spread = |s: &str| {
        let h = debezium::java_hash(s) as u32;
        h ^ (h >> 16)
    };
    // Four keys of bucket 19 of 32, then five of bucket 3: all in bucket 3
    // of 16.
    let find = |bucket: u32, n: usize| -> Vec<String> {
        (0..100_000)
            .map(|i| format!("s.t{i}"))
            .filter(|k| spread(k) & 31 == bucket)
            .take(n)
            .collect()
    };
    let mut keys = find(19, 4);
    keys.extend(find(3, 5));
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let order = java_hashmap_order(refs[..8].iter().copied());
    assert_eq!(order, (0..8).collect::<Vec<_>>(), "one bucket of 16");
    let order = java_hashmap_order(refs.iter().copied());
    assert_eq!(
        order,
        [4, 5, 6, 7, 8, 0, 1, 2, 3],
        "bucket 3, then 19, of 32"
    );
}

fn headers() -> (Arc<str>, Arc<str>) {
    (Arc::from("walrelay.event_id"), Arc::from("walrelay.lsn"))
}

fn text(b: &Option<Bytes>) -> &str {
    std::str::from_utf8(b.as_deref().unwrap()).unwrap()
}

/// BEGIN, the blocks and END of one transaction, byte for byte as
/// Debezium 3.6.1 wrote them for xid 348865 (an insert into a, a TRUNCATE
/// of b and t1, an insert into b), committed at 1796294894176 ms.
#[test]
fn begin_blocks_and_end_are_debeziums() {
    let (id_h, lsn_h) = headers();
    let lsn_text = Bytes::from_static(b"0/6E73CE00");
    let hdrs = || (&id_h, &lsn_h, lsn_text.clone());
    let (mut buf, mut values, mut ids) = (Vec::new(), Arena::new(1024), Arena::new(1024));
    let mut meta = TxnMetadata::new("dz", None);
    let commit = Lsn(0x6E73CE00);
    meta.begin(348865, Lsn(1853051688), commit, 1796294894176);
    let begin = meta
        .begin_record(&mut buf, &mut values, &mut ids, hdrs())
        .unwrap()
        .unwrap();
    assert_eq!(&*begin.topic, "dz.transaction");
    assert_eq!(text(&begin.key), r#"{"id":"348865:1853051688"}"#);
    assert_eq!(
        text(&begin.value),
        r#"{"status":"BEGIN","id":"348865:1853051688","event_count":null,"data_collections":null,"ts_ms":1796294894176}"#
    );
    assert_eq!(
        begin.headers,
        vec![
            (id_h.clone(), Bytes::from_static(b"0/6E73CE00:begin")),
            (lsn_h.clone(), lsn_text.clone())
        ]
    );
    let (a, b, t1): (Arc<str>, Arc<str>, Arc<str>) =
        ("public.a".into(), "public.b".into(), "public.t1".into());
    let events = [
        (
            &a,
            1853051688,
            r#"{"id":"348865:1853051688","total_order":1,"data_collection_order":1}"#,
        ),
        (
            &b,
            1853091944,
            r#"{"id":"348865:1853091944","total_order":2,"data_collection_order":1}"#,
        ),
        (
            &t1,
            1853091944,
            r#"{"id":"348865:1853091944","total_order":3,"data_collection_order":1}"#,
        ),
        (
            &b,
            1853091992,
            r#"{"id":"348865:1853091992","total_order":4,"data_collection_order":2}"#,
        ),
    ];
    for (table, lsn, block) in events {
        let order = meta.count(commit, table).unwrap();
        let mut out = Vec::new();
        TxnMetadata::write_block(&mut out, order, Lsn(lsn));
        assert_eq!(std::str::from_utf8(&out).unwrap(), block);
    }
    let end = meta
        .end_record(
            commit,
            Lsn(1853092736),
            &mut buf,
            &mut values,
            &mut ids,
            hdrs(),
        )
        .unwrap()
        .unwrap();
    assert_eq!(text(&end.key), r#"{"id":"348865:1853092736"}"#);
    assert_eq!(
        text(&end.value),
        r#"{"status":"END","id":"348865:1853092736","event_count":4,"data_collections":[{"data_collection":"public.a","event_count":1},{"data_collection":"public.b","event_count":2},{"data_collection":"public.t1","event_count":1}],"ts_ms":1796294894176}"#
    );
    assert_eq!(end.headers[0].1, Bytes::from_static(b"0/6E73CE00:end"));
    // Ended: nothing more until the next Begin.
    assert_eq!(meta.count(commit, &a), None);
    assert!(
        meta.end_record(
            commit,
            Lsn(1853092736),
            &mut buf,
            &mut values,
            &mut ids,
            hdrs()
        )
        .unwrap()
        .is_none()
    );
}

/// A transaction without an event writes no END; the next one counts from
/// 1 again; an event of another transaction than the open one is refused.
#[test]
fn counts_are_per_transaction_and_empty_ones_end_silently() {
    let (id_h, lsn_h) = headers();
    let hdrs = || (&id_h, &lsn_h, Bytes::from_static(b"0/10"));
    let (mut buf, mut values, mut ids) = (Vec::new(), Arena::new(1024), Arena::new(1024));
    let mut meta = TxnMetadata::new("p", None);
    let a: Arc<str> = "public.a".into();
    meta.begin(1, Lsn(0x10), Lsn(0x20), 5);
    assert!(
        meta.end_record(
            Lsn(0x20),
            Lsn(0x28),
            &mut buf,
            &mut values,
            &mut ids,
            hdrs()
        )
        .unwrap()
        .is_none()
    );
    meta.begin(2, Lsn(0x30), Lsn(0x40), 6);
    assert_eq!(meta.count(Lsn(0x20), &a), None, "not the open transaction");
    for n in 1..=3 {
        let order = meta.count(Lsn(0x40), &a).unwrap();
        assert_eq!((order.xid, order.total, order.in_table), (2, n, n));
    }
    meta.begin(3, Lsn(0x50), Lsn(0x60), 7);
    let order = meta.count(Lsn(0x60), &a).unwrap();
    assert_eq!((order.total, order.in_table), (1, 1));
    // Same input, same bytes: a re-sent transaction's END is identical.
    let end = |meta: &mut TxnMetadata, buf: &mut Vec<u8>, v: &mut Arena, i: &mut Arena| {
        meta.end_record(Lsn(0x60), Lsn(0x68), buf, v, i, hdrs())
            .unwrap()
            .unwrap()
    };
    let first = end(&mut meta, &mut buf, &mut values, &mut ids);
    meta.begin(3, Lsn(0x50), Lsn(0x60), 7);
    meta.count(Lsn(0x60), &a).unwrap();
    let again = end(&mut meta, &mut buf, &mut values, &mut ids);
    assert_eq!(first, again);
}

/// Memory: a transaction of many rows over few tables keeps one counter
/// per table.
#[test]
fn counters_are_per_table_not_per_row() {
    let mut meta = TxnMetadata::new("p", None);
    let tables: Vec<Arc<str>> = (0..3).map(|i| Arc::from(format!("s.t{i}"))).collect();
    meta.begin(1, Lsn(1), Lsn(2), 0);
    for n in 0..100_000u64 {
        let order = meta.count(Lsn(2), &tables[(n % 3) as usize]).unwrap();
        assert_eq!(order.total, n + 1);
    }
    assert_eq!(meta.tables.len(), 3);
    assert_eq!(meta.index.len(), 3);
    assert_eq!(meta.tables[0].1, 33_334);
}
