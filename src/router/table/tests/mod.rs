//! Envelope shapes. The expected values follow Debezium's PostgreSQL
//! connector documentation, section "Data change events" (subsections
//! "Change event keys", "create events", "update events", "Primary key
//! updates", "delete events", "Tombstone events") and "REPLICA IDENTITY",
//! as the JSON converter writes them with `schemas.enable=false` (the
//! `payload` part only). Deliberate differences (top-level `ts_ms` = commit
//! time, `sequence`'s first element null) are in docs/compatibility.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::pgoutput::{Cell, Column, Relation};
use crate::source::Position;

mod catalog;
mod direct;
mod registry;
mod txmeta;

const COMMIT: Lsn = Lsn(0x16B_3748);
const CHANGE_AT: Lsn = Lsn(0x16B_3700);
const TXN: TxnInfo = TxnInfo {
    commit_lsn: COMMIT,
    xid: 555,
    commit_ms: 1_704_067_200_000,
};

fn config(extra: &str) -> Config {
    Config::from_str(
        &format!(
            r#"
[connector]
name = "shop"
[postgres]
database = "app"
[kafka]
brokers = "k:9092"
{extra}
"#
        ),
        "test.toml",
    )
    .expect("valid config")
}

fn col(name: &str, type_oid: Oid, typmod: i32, key: bool) -> Column {
    Column {
        flags: u8::from(key),
        name: name.into(),
        type_oid,
        type_modifier: typmod,
    }
}

fn customers(identity: u8) -> Relation {
    Relation {
        oid: 7,
        namespace: "public".into(),
        name: "customers".into(),
        replica_identity: identity,
        columns: vec![
            col("id", 23, -1, true),
            col("name", 25, -1, false),
            col("balance", 1700, (10 << 16 | 2) + 4, false),
            col("note", 25, -1, false),
        ],
    }
}

fn t(s: &str) -> Cell {
    Cell::Text(Bytes::copy_from_slice(s.as_bytes()))
}

fn row(cells: Vec<Cell>) -> TupleData {
    TupleData(cells)
}

fn change(op: Op, rel: &Relation, old: Option<TupleData>, new: Option<TupleData>) -> Change {
    Change {
        pos: Position {
            commit_lsn: COMMIT,
            index: 3,
        },
        txn: crate::source::Txn {
            xid: 555,
            commit_time: 0,
        },
        lsn: CHANGE_AT,
        op,
        relation: Arc::new(rel.clone()),
        old,
        new,
    }
}

/// The `source` block Debezium writes for a streamed change.
fn source() -> String {
    format!(
        r#"{{"version":"{}","connector":"postgresql","name":"shop","ts_ms":1704067200000,"snapshot":"false","db":"app","sequence":"[null,\"{}\"]","schema":"public","table":"customers","txId":555,"lsn":{},"xmin":null}}"#,
        env!("CARGO_PKG_VERSION"),
        CHANGE_AT.0,
        CHANGE_AT.0
    )
}

fn envelope(before: &str, after: &str, op: char) -> String {
    format!(
        r#"{{"before":{before},"after":{after},"source":{},"op":"{op}","ts_ms":1704067200000,"transaction":null}}"#,
        source()
    )
}

fn router(extra: &str, rel: &Relation) -> TableRouter {
    let mut r = TableRouter::new(&config(extra));
    r.on_relation(rel, Lsn(1)).unwrap();
    r
}

fn text(b: &Option<Bytes>) -> Option<String> {
    b.as_ref().map(|b| String::from_utf8(b.to_vec()).unwrap())
}

fn header(r: &Record, name: &str) -> String {
    let (_, v) = r.headers.iter().find(|(k, _)| &**k == name).unwrap();
    String::from_utf8(v.to_vec()).unwrap()
}

const TABLE: &str = "[[table]]\nname = \"public.customers\"";

#[test]
fn insert_is_a_create_event_keyed_by_the_primary_key() {
    let rel = customers(b'd');
    let mut r = router(TABLE, &rel);
    let mut out = Vec::new();
    let new = row(vec![t("1"), t("Ann"), t("12.50"), Cell::Null]);
    r.on_change(&change(Op::Insert, &rel, None, Some(new)), TXN, &mut out)
        .unwrap();
    assert_eq!(out.len(), 1);
    let rec = &out[0];
    assert_eq!(&*rec.topic, "shop.public.customers");
    assert_eq!(text(&rec.key).as_deref(), Some(r#"{"id":1}"#));
    assert_eq!(
        text(&rec.value).unwrap(),
        envelope(
            "null",
            r#"{"id":1,"name":"Ann","balance":"BOI=","note":null}"#,
            'c'
        )
    );
    assert_eq!(header(rec, "walrelay.event_id"), "0/016B3748:3");
    assert_eq!(header(rec, "walrelay.lsn"), "0/016B3748");
}

#[test]
fn update_under_default_identity_has_no_before_and_marks_unchanged_toast() {
    let rel = customers(b'd');
    let mut r = router(TABLE, &rel);
    let mut out = Vec::new();
    let new = row(vec![t("1"), t("Bo"), t("0.00"), Cell::UnchangedToast]);
    r.on_change(&change(Op::Update, &rel, None, Some(new)), TXN, &mut out)
        .unwrap();
    assert_eq!(
        text(&out[0].value).unwrap(),
        envelope(
            "null",
            r#"{"id":1,"name":"Bo","balance":"AA==","note":"__debezium_unavailable_value"}"#,
            'u'
        )
    );
}

#[test]
fn update_under_full_identity_carries_the_whole_old_row() {
    let rel = customers(b'f');
    let mut r = router(TABLE, &rel);
    r.set_primary_key("public", "customers", vec!["id".into()]);
    r.on_relation(&rel, Lsn(1)).unwrap();
    let mut out = Vec::new();
    let old = row(vec![t("1"), t("Ann"), t("12.50"), t("x")]);
    let new = row(vec![t("1"), t("Bo"), t("12.50"), t("x")]);
    r.on_change(
        &change(Op::Update, &rel, Some(old), Some(new)),
        TXN,
        &mut out,
    )
    .unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(text(&out[0].key).as_deref(), Some(r#"{"id":1}"#));
    assert_eq!(
        text(&out[0].value).unwrap(),
        envelope(
            r#"{"id":1,"name":"Ann","balance":"BOI=","note":"x"}"#,
            r#"{"id":1,"name":"Bo","balance":"BOI=","note":"x"}"#,
            'u'
        )
    );
}

/// Issue 27: under REPLICA IDENTITY FULL the old row holds an unchanged
/// TOASTed value the new row lacks: `after` takes it (as Debezium does),
/// not the placeholder.
#[test]
fn full_identity_fills_unchanged_toast_in_after_from_the_old_row() {
    let rel = customers(b'f');
    let mut r = router(TABLE, &rel);
    r.set_primary_key("public", "customers", vec!["id".into()]);
    r.on_relation(&rel, Lsn(1)).unwrap();
    let mut out = Vec::new();
    let old = row(vec![t("1"), t("Ann"), t("12.50"), t("a long note")]);
    let new = row(vec![t("1"), t("Bo"), t("12.50"), Cell::UnchangedToast]);
    r.on_change(
        &change(Op::Update, &rel, Some(old), Some(new)),
        TXN,
        &mut out,
    )
    .unwrap();
    assert_eq!(
        text(&out[0].value).unwrap(),
        envelope(
            r#"{"id":1,"name":"Ann","balance":"BOI=","note":"a long note"}"#,
            r#"{"id":1,"name":"Bo","balance":"BOI=","note":"a long note"}"#,
            'u'
        )
    );
}

#[test]
fn full_identity_without_a_known_primary_key_has_a_null_key() {
    // pgoutput flags every column of a REPLICA IDENTITY FULL table as key:
    // only the catalog knows the primary key.
    let rel = customers(b'f');
    let mut r = router(TABLE, &rel);
    let mut out = Vec::new();
    let new = row(vec![t("1"), t("Ann"), t("1.00"), Cell::Null]);
    r.on_change(&change(Op::Insert, &rel, None, Some(new)), TXN, &mut out)
        .unwrap();
    assert_eq!(out[0].key, None);
}

#[test]
fn delete_has_the_old_key_in_before_and_is_followed_by_a_tombstone() {
    let rel = customers(b'd');
    let mut r = router(TABLE, &rel);
    let mut out = Vec::new();
    let old = row(vec![t("1"), Cell::Null, Cell::Null, Cell::Null]);
    r.on_change(&change(Op::Delete, &rel, Some(old), None), TXN, &mut out)
        .unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(
        text(&out[0].value).unwrap(),
        envelope(
            r#"{"id":1,"name":null,"balance":null,"note":null}"#,
            "null",
            'd'
        )
    );
    assert_eq!(text(&out[1].key).as_deref(), Some(r#"{"id":1}"#));
    assert_eq!(out[1].value, None);
    assert_eq!(&*out[1].topic, "shop.public.customers");
    assert_eq!(header(&out[0], "walrelay.event_id"), "0/016B3748:3");
    assert_eq!(
        header(&out[1], "walrelay.event_id"),
        "0/016B3748:3:tombstone"
    );
}

#[test]
fn tombstones_can_be_switched_off_per_table() {
    let rel = customers(b'd');
    let mut r = router(&format!("{TABLE}\ntombstones_on_delete = false"), &rel);
    let mut out = Vec::new();
    let old = row(vec![t("1"), Cell::Null, Cell::Null, Cell::Null]);
    r.on_change(&change(Op::Delete, &rel, Some(old), None), TXN, &mut out)
        .unwrap();
    assert_eq!(out.len(), 1);
}

#[test]
fn primary_key_change_is_delete_tombstone_create() {
    let rel = customers(b'd');
    let mut r = router(TABLE, &rel);
    let mut out = Vec::new();
    let old = row(vec![t("1"), Cell::Null, Cell::Null, Cell::Null]);
    let new = row(vec![t("2"), t("Ann"), t("1.00"), Cell::Null]);
    r.on_change(
        &change(Op::Update, &rel, Some(old), Some(new)),
        TXN,
        &mut out,
    )
    .unwrap();
    let ops: Vec<_> = out
        .iter()
        .map(|rec| {
            (
                text(&rec.key).unwrap(),
                text(&rec.value)
                    .map(|v| v.contains(r#""op":"d""#) as u8 + 2 * v.contains(r#""op":"c""#) as u8),
                header(rec, "walrelay.event_id"),
            )
        })
        .collect();
    assert_eq!(
        ops,
        [
            (
                r#"{"id":1}"#.to_owned(),
                Some(1),
                "0/016B3748:3:delete".to_owned()
            ),
            (
                r#"{"id":1}"#.to_owned(),
                None,
                "0/016B3748:3:tombstone".to_owned()
            ),
            (r#"{"id":2}"#.to_owned(), Some(2), "0/016B3748:3".to_owned()),
        ]
    );
}

#[test]
fn key_columns_key_a_table_without_primary_key() {
    let mut rel = customers(b'f');
    for c in &mut rel.columns {
        c.flags = 1;
    }
    let mut r = router(&format!("{TABLE}\nkey_columns = [\"name\", \"id\"]"), &rel);
    let mut out = Vec::new();
    let new = row(vec![t("1"), t("Ann"), t("1.00"), Cell::Null]);
    r.on_change(&change(Op::Insert, &rel, None, Some(new)), TXN, &mut out)
        .unwrap();
    assert_eq!(
        text(&out[0].key).as_deref(),
        Some(r#"{"name":"Ann","id":1}"#)
    );
}

/// REPLICA IDENTITY USING INDEX on `name` (not the primary key): a
/// delete's old row holds `name` only, so events are keyed by it — never
/// by a null id — and a change of `name` is delete + tombstone + create.
#[test]
fn replica_identity_using_index_keys_events_by_the_index_columns() {
    let mut rel = customers(b'i');
    rel.columns[0].flags = 0;
    rel.columns[1].flags = 1;
    let mut r = TableRouter::new(&config(TABLE));
    r.set_primary_key("public", "customers", vec!["id".into()]);
    r.on_relation(&rel, Lsn(1)).unwrap();
    let mut out = Vec::new();
    let old_key = row(vec![Cell::Null, t("Ann"), Cell::Null, Cell::Null]);
    r.on_change(
        &change(Op::Delete, &rel, Some(old_key), None),
        TXN,
        &mut out,
    )
    .unwrap();
    let keys: Vec<_> = out.iter().map(|r| text(&r.key)).collect();
    assert_eq!(
        keys,
        vec![
            Some(r#"{"name":"Ann"}"#.into()),
            Some(r#"{"name":"Ann"}"#.into())
        ],
        "delete and tombstone keyed by the identity index's column"
    );
    assert_eq!(out[1].value, None);

    out.clear();
    let old_key = row(vec![Cell::Null, t("Ann"), Cell::Null, Cell::Null]);
    let new = row(vec![t("1"), t("Bea"), t("1.00"), Cell::Null]);
    r.on_change(
        &change(Op::Update, &rel, Some(old_key), Some(new)),
        TXN,
        &mut out,
    )
    .unwrap();
    let shape: Vec<_> = out
        .iter()
        .map(|r| (text(&r.key).unwrap(), r.value.is_some()))
        .collect();
    assert_eq!(
        shape,
        vec![
            (r#"{"name":"Ann"}"#.to_owned(), true),
            (r#"{"name":"Ann"}"#.to_owned(), false),
            (r#"{"name":"Bea"}"#.to_owned(), true),
        ],
        "an identity change is delete + tombstone + create"
    );
}

/// A key column outside a non-FULL replica identity would key deletes by
/// null: refused, naming the column and the identity, unless deletes are
/// skipped; FULL holds every column.
#[test]
fn a_key_column_outside_the_replica_identity_is_refused_unless_deletes_are_skipped() {
    let mut rel = customers(b'd');
    let with_key = format!("{TABLE}\nkey_columns = [\"name\"]");
    let err = TableRouter::new(&config(&with_key))
        .on_relation(&rel, Lsn(1))
        .unwrap_err();
    assert_eq!(err.column, "name");
    assert!(
        err.reason
            .contains("not in the table's replica identity (id)")
            && err.fix.contains("REPLICA IDENTITY FULL"),
        "{err:?}"
    );
    let skipping = format!("{with_key}\nskipped_operations = \"d\"");
    TableRouter::new(&config(&skipping))
        .on_relation(&rel, Lsn(1))
        .unwrap();
    rel.replica_identity = b'f';
    for c in &mut rel.columns {
        c.flags = 1;
    }
    TableRouter::new(&config(&with_key))
        .on_relation(&rel, Lsn(1))
        .unwrap();
}

#[test]
fn a_table_without_any_key_has_null_keys() {
    let mut rel = customers(b'd');
    rel.columns[0].flags = 0;
    let mut r = router(TABLE, &rel);
    let mut out = Vec::new();
    let new = row(vec![t("1"), t("Ann"), t("1.00"), Cell::Null]);
    r.on_change(&change(Op::Insert, &rel, None, Some(new)), TXN, &mut out)
        .unwrap();
    assert_eq!(out[0].key, None);
}

/// Debezium 3.6's `SnapshotMarkerResolver` order: the snapshot's last, its
/// first, the table's last, the table's first, else `"true"`.
#[test]
fn snapshot_markers_follow_debeziums_precedence() {
    use SnapshotMarker as M;
    let of = |fs, ls, ft, lt| M::of(fs, ls, ft, lt).as_str();
    assert_eq!(of(false, false, false, false), "true");
    assert_eq!(of(false, false, true, false), "first_in_data_collection");
    assert_eq!(of(false, false, false, true), "last_in_data_collection");
    // A table's only row, not at either end of the snapshot.
    assert_eq!(of(false, false, true, true), "last_in_data_collection");
    // The first table's first row, also when it is the table's only row.
    assert_eq!(of(true, false, true, false), "first");
    assert_eq!(of(true, false, true, true), "first");
    assert_eq!(of(false, true, false, true), "last");
    assert_eq!(of(false, true, true, true), "last");
    // The snapshot's only row.
    assert_eq!(of(true, true, true, true), "last");
    // Each marker is written as its text.
    let rel = customers(b'd');
    let mut r = router(TABLE, &rel);
    let new = row(vec![t("1"), t("Ann"), t("1.00"), Cell::Null]);
    for m in [
        M::First,
        M::FirstInDataCollection,
        M::True,
        M::LastInDataCollection,
        M::Last,
    ] {
        let mut out = Vec::new();
        r.on_snapshot_row(7, &new, COMMIT, 9, 1, m, &mut out)
            .unwrap();
        let value: serde_json::Value =
            serde_json::from_slice(&out[0].value.clone().unwrap()).unwrap();
        assert_eq!(value["source"]["snapshot"], m.as_str());
    }
}

/// Snapshot rows past the 2^32nd keep distinct event ids (the row index
/// is 64-bit; it once saturated, so every later row shared one id and a
/// consumer de-duplicating by id dropped them).
#[test]
fn snapshot_row_ids_stay_distinct_past_four_billion_rows() {
    let rel = customers(b'd');
    let mut r = router(TABLE, &rel);
    let new = row(vec![t("1"), t("Ann"), t("1.00"), Cell::Null]);
    let mut ids = std::collections::HashSet::new();
    // The first attempt's numbers, then resumed attempts' (1 and 3):
    // `<attempt>.<row>`, never a number another attempt gave.
    for (index, suffix) in [
        (
            u64::from(u32::MAX) - 1,
            (u64::from(u32::MAX) - 1).to_string(),
        ),
        (u64::from(u32::MAX), u64::from(u32::MAX).to_string()),
        (
            u64::from(u32::MAX) + 1,
            (u64::from(u32::MAX) + 1).to_string(),
        ),
        ((1 << 40) - 1, ((1u64 << 40) - 1).to_string()),
        (1 << 40, "1.0".to_owned()),
        ((1 << 40) + 5, "1.5".to_owned()),
        ((3 << 40) + 5, "3.5".to_owned()),
    ] {
        let mut out = Vec::new();
        r.on_snapshot_row(7, &new, COMMIT, index, 1, SnapshotMarker::True, &mut out)
            .unwrap();
        let id = header(&out[0], EVENT_ID_HEADER);
        assert!(id.ends_with(&format!(":snapshot:{suffix}")), "{id}");
        assert!(ids.insert(id), "index {index} repeats an id");
    }
}

#[test]
fn snapshot_rows_are_read_events() {
    let rel = customers(b'd');
    let mut r = router(TABLE, &rel);
    let mut out = Vec::new();
    let new = row(vec![t("1"), t("Ann"), t("1.00"), Cell::Null]);
    r.on_snapshot_row(
        7,
        &new,
        COMMIT,
        9,
        1_700_000_000_000,
        SnapshotMarker::True,
        &mut out,
    )
    .unwrap();
    let value = text(&out[0].value).unwrap();
    assert_eq!(
        value,
        format!(
            r#"{{"before":null,"after":{{"id":1,"name":"Ann","balance":"ZA==","note":null}},"source":{{"version":"{}","connector":"postgresql","name":"shop","ts_ms":1700000000000,"snapshot":"true","db":"app","sequence":"[null,\"{c}\"]","schema":"public","table":"customers","txId":null,"lsn":{c},"xmin":null}},"op":"r","ts_ms":1700000000000,"transaction":null}}"#,
            env!("CARGO_PKG_VERSION"),
            c = COMMIT.0
        )
    );
    assert_eq!(
        header(&out[0], "walrelay.event_id"),
        "0/016B3748:snapshot:9"
    );
}

#[test]
fn a_new_relation_message_changes_the_columns_from_then_on() {
    let rel = customers(b'd');
    let mut r = router(TABLE, &rel);
    let mut wider = rel.clone();
    wider.columns.push(col("vip", 16, -1, false));
    r.on_relation(&wider, Lsn(2)).unwrap();
    let mut out = Vec::new();
    let new = row(vec![t("1"), t("Ann"), t("1.00"), Cell::Null, t("t")]);
    r.on_change(&change(Op::Insert, &wider, None, Some(new)), TXN, &mut out)
        .unwrap();
    assert!(
        text(&out[0].value)
            .unwrap()
            .contains(r#""note":null,"vip":true}"#)
    );
}

#[test]
fn an_unmapped_column_is_refused_when_its_relation_arrives() {
    let mut rel = customers(b'd');
    rel.columns.push(col("price", 718, -1, false));
    let mut r = TableRouter::new(&config(TABLE));
    let e = r.on_relation(&rel, Lsn(5)).unwrap_err();
    assert_eq!(e.table, "public.customers");
    assert_eq!(e.column, "price");
    assert!(e.to_string().contains("circle"), "{e}");
    // And its rows are refused too, never dropped.
    let new = row(vec![t("1"), t("A"), t("1.00"), Cell::Null, t("<(1,2),3>")]);
    let err = r
        .on_change(
            &change(Op::Insert, &rel, None, Some(new)),
            TXN,
            &mut Vec::new(),
        )
        .unwrap_err();
    assert_eq!(err.column, "price");
}

#[test]
fn key_columns_naming_a_missing_column_is_an_error_naming_it() {
    let rel = customers(b'd');
    let mut r = TableRouter::new(&config(&format!("{TABLE}\nkey_columns = [\"email\"]")));
    let e = r.on_relation(&rel, Lsn(5)).unwrap_err();
    assert_eq!(e.column, "email");
    assert!(e.fix.contains("key_columns"));
}

#[test]
fn a_bad_value_names_table_column_and_lsn() {
    let rel = customers(b'd');
    let mut r = router(TABLE, &rel);
    let new = row(vec![t("one"), t("A"), t("1.00"), Cell::Null]);
    let e = r
        .on_change(
            &change(Op::Insert, &rel, None, Some(new)),
            TXN,
            &mut Vec::new(),
        )
        .unwrap_err();
    assert_eq!(
        (e.table.as_str(), e.column.as_str(), e.lsn),
        ("public.customers", "id", COMMIT)
    );
    assert!(e.fix.contains("unmapped_types = \"text\""), "{e}");
}

#[test]
fn patterns_capture_matching_tables_with_their_own_topics_and_modes() {
    let mut rel = customers(b'd');
    rel.name = "orders".into();
    let mut r = router(
        "[table_defaults]\ntopic_prefix = \"cdc\"\ndecimal_handling_mode = \"string\"\n[[table]]\nname = \"public.*\"\ntopic = \"{prefix}-{table}\"",
        &rel,
    );
    assert!(r.claims(7));
    let mut out = Vec::new();
    let new = row(vec![t("1"), t("A"), t("1.50"), Cell::Null]);
    r.on_change(&change(Op::Insert, &rel, None, Some(new)), TXN, &mut out)
        .unwrap();
    assert_eq!(&*out[0].topic, "cdc-orders");
    let value = text(&out[0].value).unwrap();
    assert!(value.contains(r#""balance":"1.50""#), "{value}");
    assert!(value.contains(r#""name":"cdc""#), "{value}");
    // A relation no entry captures is not claimed.
    let mut other = customers(b'd');
    other.oid = 8;
    other.namespace = "audit".into();
    r.on_relation(&other, Lsn(3)).unwrap();
    assert!(!r.claims(8));
}

#[test]
fn enums_and_domains_are_written_as_the_type_the_catalog_names() {
    let mut rel = customers(b'd');
    rel.columns.push(col("mood", 16_941, -1, false));
    rel.columns.push(col("price", 16_950, -1, false));
    let mut r = TableRouter::new(&config(TABLE));
    // Unknown user-defined types are refused...
    assert_eq!(r.on_relation(&rel, Lsn(1)).unwrap_err().column, "mood");
    // ...and mapped once the catalog says what they are: an enum as text,
    // a domain over numeric(10,2) as that.
    r.set_type_alias(16_941, 25, -1);
    r.set_type_alias(16_950, 1700, (10 << 16 | 2) + 4);
    r.on_relation(&rel, Lsn(1)).unwrap();
    let mut out = Vec::new();
    let new = row(vec![
        t("1"),
        t("A"),
        t("1.00"),
        Cell::Null,
        t("happy"),
        t("12.50"),
    ]);
    r.on_change(&change(Op::Insert, &rel, None, Some(new)), TXN, &mut out)
        .unwrap();
    let value = text(&out[0].value).unwrap();
    assert!(
        value.contains(r#""mood":"happy","price":"BOI=""#),
        "{value}"
    );
}

#[test]
fn an_old_tuple_without_the_key_is_an_update_not_a_key_change() {
    // REPLICA IDENTITY USING INDEX on (name), keyed by id with deletes
    // skipped (else refused): the old tuple has the index columns only, so
    // it cannot show a change of the key.
    let mut rel = customers(b'i');
    rel.columns[0].flags = 0;
    rel.columns[1].flags = 1;
    let mut r = router(
        &format!("{TABLE}\nkey_columns = [\"id\"]\nskipped_operations = \"d\""),
        &rel,
    );
    let mut out = Vec::new();
    let old = row(vec![Cell::Null, t("Ann"), Cell::Null, Cell::Null]);
    let new = row(vec![t("1"), t("Bo"), t("1.00"), Cell::Null]);
    r.on_change(
        &change(Op::Update, &rel, Some(old), Some(new)),
        TXN,
        &mut out,
    )
    .unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(text(&out[0].key).as_deref(), Some(r#"{"id":1}"#));
    let value = text(&out[0].value).unwrap();
    assert!(value.contains(r#""op":"u""#), "{value}");
    assert!(
        value.contains(r#""before":{"id":null,"name":"Ann","balance":null,"note":null}"#),
        "{value}"
    );
}

// Column lists, masks and skipped operations (Debezium's
// column.include.list / column.exclude.list, column.mask.*,
// column.truncate.to.N.chars and skipped.operations).

fn ann() -> TupleData {
    row(vec![
        t("1"),
        t("Ann Smith"),
        t("12.50"),
        t("call after 5pm"),
    ])
}

fn insert_of(r: &mut TableRouter, rel: &Relation, new: TupleData) -> Vec<Record> {
    let mut out = Vec::new();
    r.on_change(&change(Op::Insert, rel, None, Some(new)), TXN, &mut out)
        .unwrap();
    out
}

#[test]
fn excluded_columns_leave_before_and_after_but_the_key_keeps_its_columns() {
    let rel = customers(b'f');
    let mut r = router(
        &format!("{TABLE}\ncolumn_exclude_list = [\"id\", \"note\"]"),
        &rel,
    );
    r.set_primary_key("public", "customers", vec!["id".into()]);
    r.on_relation(&rel, Lsn(1)).unwrap();
    let out = insert_of(&mut r, &rel, ann());
    assert_eq!(text(&out[0].key).as_deref(), Some(r#"{"id":1}"#));
    assert_eq!(
        text(&out[0].value).unwrap(),
        envelope("null", r#"{"name":"Ann Smith","balance":"BOI="}"#, 'c')
    );
    // The whole old row of REPLICA IDENTITY FULL is filtered the same way.
    let mut out = Vec::new();
    r.on_change(&change(Op::Delete, &rel, Some(ann()), None), TXN, &mut out)
        .unwrap();
    assert_eq!(
        text(&out[0].value).unwrap(),
        envelope(r#"{"name":"Ann Smith","balance":"BOI="}"#, "null", 'd')
    );
}

#[test]
fn an_include_list_keeps_only_its_columns() {
    let rel = customers(b'd');
    let mut r = router(&format!("{TABLE}\ncolumn_include_list = [\"name\"]"), &rel);
    let out = insert_of(&mut r, &rel, ann());
    assert_eq!(text(&out[0].key).as_deref(), Some(r#"{"id":1}"#));
    assert_eq!(
        text(&out[0].value).unwrap(),
        envelope("null", r#"{"name":"Ann Smith"}"#, 'c')
    );
}

/// `[table_defaults]` column lists are Debezium's: regular expressions over
/// `schema.table.column`, matched whole and ignoring case; a table's own
/// list replaces them.
#[test]
fn default_column_lists_match_schema_table_column_whole_ignoring_case() {
    let rel = customers(b'd');
    let value = |defaults: &str, table: &str| {
        let mut r = router(
            &format!("[table_defaults]\n{defaults}\n{TABLE}\n{table}"),
            &rel,
        );
        let out = insert_of(&mut r, &rel, ann());
        let v: serde_json::Value = serde_json::from_slice(&out[0].value.clone().unwrap()).unwrap();
        let mut after: Vec<String> = v["after"].as_object().unwrap().keys().cloned().collect();
        after.sort();
        (text(&out[0].key).unwrap(), after)
    };
    let include = r#"column_include_list = ['PUBLIC\.Customers\.(ID|name)', 'other\..*']"#;
    assert_eq!(
        value(include, ""),
        (
            r#"{"id":1}"#.to_owned(),
            vec!["id".to_owned(), "name".to_owned()]
        )
    );
    // Whole names only: "name" alone matches no schema.table.column, and
    // ".*note" not "public.customers.note_x" (there is none) but the note.
    let exclude = r#"column_exclude_list = ['name', '.*\.no', '.*note']"#;
    let (key, after) = value(exclude, "");
    assert_eq!(key, r#"{"id":1}"#, "the key keeps its columns");
    assert_eq!(after, ["balance", "id", "name"]);
    // The key keeps an excluded key column.
    let (key, after) = value(r#"column_exclude_list = ['public\.customers\.id']"#, "");
    assert_eq!((key.as_str(), after.len()), (r#"{"id":1}"#, 3));
    // A table's own list wins over the defaults.
    let (_, after) = value(include, r#"column_exclude_list = ["name"]"#);
    assert_eq!(after, ["balance", "id", "note"]);
    // `check` says what the defaults leave out.
    let cfg = config(&format!("[table_defaults]\n{exclude}\n{TABLE}"));
    let filter = cfg.table_defaults.column_filter().unwrap();
    let columns = ["id", "name", "note"].map(String::from);
    assert_eq!(
        describe_columns(
            &cfg.tables[0],
            filter.as_ref(),
            ("public", "customers"),
            &columns
        ),
        "; leaves out note"
    );
}

#[test]
fn masks_hash_replace_and_truncate_as_debezium_does() {
    let rel = customers(b'd');
    let mut r = router(
        &format!(
            "{TABLE}\n[[table.column_mask]]\ncolumns = [\"name\"]\nhash = \"SHA-256\"\n\
             salt = \"CzQMA0cB5K\"\n[[table.column_mask]]\ncolumns = [\"note\"]\n\
             truncate_to_chars = 4\n"
        ),
        &rel,
    );
    let out = insert_of(&mut r, &rel, ann());
    // SHA-256 of the salt and the Java serialization of "Ann Smith",
    // computed with Java 17 (see router::mask's tests).
    assert_eq!(
        text(&out[0].value).unwrap(),
        envelope(
            "null",
            r#"{"id":1,"name":"bb9b86ba11ee5278eabf42b0bfbaa8b0d42a77cbf5503b9123767f850f9269a3","balance":"BOI=","note":"call"}"#,
            'c'
        )
    );
    let mut r = router(
        &format!(
            "{TABLE}\n[[table.column_mask]]\ncolumns = [\"name\", \"note\"]\nwith_chars = 3\n"
        ),
        &rel,
    );
    // A fixed mask replaces NULL too (Debezium's MaskingValueConverter
    // ignores the value); the key is never masked.
    let out = insert_of(
        &mut r,
        &rel,
        row(vec![t("1"), t("Ann"), t("1.00"), Cell::Null]),
    );
    assert_eq!(
        text(&out[0].value).unwrap(),
        envelope(
            "null",
            r#"{"id":1,"name":"***","balance":"ZA==","note":"***"}"#,
            'c'
        )
    );
}

#[test]
fn a_hash_mask_keeps_null_and_masks_the_unchanged_toast_placeholder() {
    let rel = customers(b'd');
    let mut r = router(
        &format!(
            "{TABLE}\n[[table.column_mask]]\ncolumns = [\"note\"]\nhash = \"SHA-256\"\n\
             salt = \"s\"\nhash_version = 2\n"
        ),
        &rel,
    );
    let out = insert_of(
        &mut r,
        &rel,
        row(vec![t("1"), t("Ann"), t("1.00"), Cell::Null]),
    );
    assert!(text(&out[0].value).unwrap().contains(r#""note":null"#));
    let mut out = Vec::new();
    let new = row(vec![t("1"), t("Ann"), t("1.00"), Cell::UnchangedToast]);
    r.on_change(&change(Op::Update, &rel, None, Some(new)), TXN, &mut out)
        .unwrap();
    // sha256("s" + "__debezium_unavailable_value"), hashing version 2.
    let mut expected = Vec::new();
    super::super::mask::Mask::Hash {
        algorithm: 3,
        salt: secrecy::SecretString::from("s"),
        java_serialized: false,
        max_chars: None,
    }
    .write(
        &mut expected,
        Some("__debezium_unavailable_value"),
        &mut Vec::new(),
    )
    .unwrap();
    let expected = String::from_utf8(expected).unwrap();
    assert!(
        text(&out[0].value)
            .unwrap()
            .contains(&format!(r#""note":{expected}"#)),
        "{expected}"
    );
}

#[test]
fn a_mask_on_a_column_that_is_not_text_is_refused_naming_it() {
    let rel = customers(b'd');
    let mut r = TableRouter::new(&config(&format!(
        "{TABLE}\n[[table.column_mask]]\ncolumns = [\"balance\"]\nwith_chars = 3\n"
    )));
    let e = r.on_relation(&rel, Lsn(9)).unwrap_err();
    assert_eq!(e.table, "public.customers");
    assert_eq!(e.column, "balance");
    assert!(e.reason.contains("numeric"), "{e}");
    assert!(e.reason.contains("table[0].column_mask"), "{e}");
}

#[test]
fn check_columns_names_a_missing_column_and_an_unmaskable_one() {
    let cfg = config(&format!(
        "{TABLE}\ncolumn_exclude_list = [\"ssn\"]\n[[table.column_mask]]\ncolumns = [\"id\"]\n\
         with_chars = 3\n"
    ));
    let t = &cfg.tables[0];
    let columns = vec![("id".to_owned(), 23), ("name".to_owned(), 25)];
    let (problem, fix) = check_columns(t, 0, "public.customers", &columns).unwrap_err();
    assert!(
        problem.contains("table[0].column_exclude_list[0]"),
        "{problem}"
    );
    assert!(problem.contains("\"ssn\""), "{problem}");
    assert!(problem.contains("public.customers"), "{problem}");
    assert!(fix.contains("table[0].column_exclude_list[0]"), "{fix}");
    let columns = vec![("id".to_owned(), 23), ("ssn".to_owned(), 25)];
    let (problem, _) = check_columns(t, 0, "public.customers", &columns).unwrap_err();
    assert!(problem.contains("column id"), "{problem}");
    assert!(problem.contains("int4"), "{problem}");
    // A pattern's lists apply to the tables that have the column.
    let cfg = config("[[table]]\nname = \"public.*\"\ncolumn_exclude_list = [\"ssn\"]\n");
    let columns = vec![("id".to_owned(), 23)];
    assert!(check_columns(&cfg.tables[0], 0, "public.t", &columns).is_ok());
}

#[test]
fn truncates_are_skipped_by_default_and_are_keyless_t_events_when_not() {
    let rel = customers(b'd');
    let mut r = router(TABLE, &rel);
    let mut out = Vec::new();
    r.on_truncate(rel.oid, TXN, CHANGE_AT, 4, &mut out).unwrap();
    assert!(out.is_empty());
    let mut r = router(&format!("{TABLE}\nskipped_operations = \"none\""), &rel);
    r.on_truncate(rel.oid, TXN, CHANGE_AT, 4, &mut out).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(&*out[0].topic, "shop.public.customers");
    assert_eq!(out[0].key, None);
    assert_eq!(text(&out[0].value).unwrap(), envelope("null", "null", 't'));
    assert_eq!(header(&out[0], EVENT_ID_HEADER), format!("{COMMIT}:4"));
    assert_eq!(header(&out[0], LSN_HEADER), COMMIT.to_string());
    // A relation no [[table]] captures makes nothing.
    let mut other = customers(b'd');
    other.oid = 8;
    other.name = "other".into();
    out.clear();
    r.on_truncate(other.oid, TXN, CHANGE_AT, 5, &mut out)
        .unwrap();
    assert!(out.is_empty());
}

#[test]
fn skipped_operations_skip_records_by_their_op_defaults_then_per_table() {
    let rel = customers(b'd');
    let new = || row(vec![t("1"), t("Ann"), t("1.00"), Cell::Null]);
    // Deletes skipped in [table_defaults]: no delete, no tombstone.
    let mut r = router(
        &format!("[table_defaults]\nskipped_operations = \"d,t\"\n{TABLE}"),
        &rel,
    );
    let mut out = Vec::new();
    let old = row(vec![t("1"), Cell::Null, Cell::Null, Cell::Null]);
    r.on_change(&change(Op::Delete, &rel, Some(old), None), TXN, &mut out)
        .unwrap();
    assert!(out.is_empty());
    assert_eq!(insert_of(&mut r, &rel, new()).len(), 1);
    // A primary-key change is a delete + tombstone + create: skipping
    // updates keeps all three, skipping creates drops the create.
    let rel_full = customers(b'f');
    let key_change = |r: &mut TableRouter| {
        let mut out = Vec::new();
        let old = row(vec![t("1"), t("Ann"), t("1.00"), Cell::Null]);
        let new = row(vec![t("2"), t("Ann"), t("1.00"), Cell::Null]);
        r.on_change(
            &change(Op::Update, &rel_full, Some(old), Some(new)),
            TXN,
            &mut out,
        )
        .unwrap();
        out.iter()
            .map(|r| {
                text(&r.value).map_or("tombstone".to_owned(), |v| {
                    v[v.find(r#""op":"#).unwrap() + 6..][..1].to_owned()
                })
            })
            .collect::<Vec<_>>()
    };
    let mut r = router(&format!("{TABLE}\nskipped_operations = \"u\""), &rel_full);
    r.set_primary_key("public", "customers", vec!["id".into()]);
    r.on_relation(&rel_full, Lsn(1)).unwrap();
    assert_eq!(key_change(&mut r), ["d", "tombstone", "c"]);
    let mut same_key = Vec::new();
    let new = row(vec![t("1"), t("Bo"), t("1.00"), Cell::Null]);
    r.on_change(
        &change(Op::Update, &rel_full, Some(ann()), Some(new)),
        TXN,
        &mut same_key,
    )
    .unwrap();
    assert!(same_key.is_empty());
    // The per-table key overrides the default.
    let mut r = router(
        &format!(
            "[table_defaults]\nskipped_operations = \"u\"\n{TABLE}\nskipped_operations = \"c\""
        ),
        &rel_full,
    );
    r.set_primary_key("public", "customers", vec!["id".into()]);
    r.on_relation(&rel_full, Lsn(1)).unwrap();
    assert_eq!(key_change(&mut r), ["d", "tombstone"]);
    // Snapshot rows are never skipped.
    let mut out = Vec::new();
    r.on_snapshot_row(
        rel_full.oid,
        &ann(),
        COMMIT,
        0,
        1,
        SnapshotMarker::Last,
        &mut out,
    )
    .unwrap();
    assert_eq!(out.len(), 1);
}

#[test]
fn check_describes_left_out_and_masked_columns_without_the_salt() {
    let cfg = config(&format!(
        "{TABLE}\ncolumn_exclude_list = [\"ssn\"]\n[[table.column_mask]]\ncolumns = [\"email\"]\n\
         hash = \"SHA-256\"\nsalt = \"hidden-salt\"\n[[table.column_mask]]\ncolumns = [\"phone\"]\n\
         with_chars = 4\n[[table.column_mask]]\ncolumns = [\"bio\"]\ntruncate_to_chars = 20\n"
    ));
    let columns: Vec<String> = ["id", "email", "phone", "ssn", "bio"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        describe_columns(&cfg.tables[0], None, ("public", "customers"), &columns),
        "; leaves out ssn; masks email (SHA-256 hash v1), phone (4 *), bio (cut to 20 chars)"
    );
    assert_eq!(
        describe_columns(
            &config(TABLE).tables[0],
            None,
            ("public", "customers"),
            &columns
        ),
        ""
    );
}

/// Issue 27: an infinity date and a two-dimensional array are written (as
/// Debezium does; nested) by default, in streamed and snapshot rows alike,
/// and stop the connector only with `special_values = "fail"` — an error
/// naming table, column, LSN and the setting. The catalog's `hstore` alias
/// maps an extension's oid to Debezium's JSON form.
#[test]
fn special_values_are_written_by_default_and_refused_when_asked() {
    let mut rel = customers(b'd');
    rel.columns.push(col("until", 1082, -1, false));
    rel.columns.push(col("grid", 1007, -1, false));
    rel.columns.push(col("attrs", 16_555, -1, false));
    let cells = || {
        row(vec![
            t("1"),
            t("A"),
            t("1.00"),
            Cell::Null,
            t("infinity"),
            t("{{1,2},{3,4}}"),
            t(r#""a"=>"1""#),
        ])
    };
    let mut r = TableRouter::new(&config(TABLE));
    r.set_type_alias(16_555, super::debezium::HSTORE, -1);
    r.on_relation(&rel, Lsn(1)).unwrap();
    let mut out = Vec::new();
    r.on_change(
        &change(Op::Insert, &rel, None, Some(cells())),
        TXN,
        &mut out,
    )
    .unwrap();
    r.on_snapshot_row(7, &cells(), Lsn(1), 0, 0, SnapshotMarker::Last, &mut out)
        .unwrap();
    for record in &out {
        let value = text(&record.value).unwrap();
        assert!(
            value.contains(r#""until":-2147472692,"grid":[[1,2],[3,4]],"attrs":"{\"a\":\"1\"}""#),
            "{value}"
        );
    }
    let mut r = TableRouter::new(&config(&format!("{TABLE}\nspecial_values = \"fail\"")));
    r.set_type_alias(16_555, super::debezium::HSTORE, -1);
    r.on_relation(&rel, Lsn(1)).unwrap();
    let e = r
        .on_change(
            &change(Op::Insert, &rel, None, Some(cells())),
            TXN,
            &mut Vec::new(),
        )
        .unwrap_err();
    assert_eq!(
        (e.table.as_str(), e.column.as_str(), e.lsn),
        ("public.customers", "until", COMMIT)
    );
    assert!(e.reason.contains("special_values"), "{e}");
    assert!(e.fix.contains("special_values = \"write\""), "{e}");
}

#[test]
fn a_relation_that_changes_its_identity_moves_the_key_and_a_dropped_index_keys_by_the_primary_key()
{
    let mut r = TableRouter::new(&config(TABLE));
    r.set_primary_key("public", "customers", vec!["id".into()]);
    let mut by_name = customers(b'i');
    by_name.columns[0].flags = 0;
    by_name.columns[1].flags = 1;
    r.on_relation(&by_name, Lsn(1)).unwrap();
    assert_eq!(r.key_names(7), Some(vec!["name"]));
    r.on_relation(&customers(b'd'), Lsn(2)).unwrap();
    assert_eq!(r.key_names(7), Some(vec!["id"]));
    // USING INDEX whose index was dropped: no column is in the identity.
    let mut dropped = customers(b'i');
    dropped.columns[0].flags = 0;
    r.on_relation(&dropped, Lsn(3)).unwrap();
    assert_eq!(r.key_names(7), Some(vec!["id"]), "not a null key");
    assert_eq!(r.key_names(8), None, "not bound");
}

/// The key column renamed (`id` → `rid`) after changes that are still to
/// stream: the catalog's key at start says `rid`, the stream's relation
/// from before the rename says `id` (REPLICA IDENTITY DEFAULT: its
/// identity is the primary key as of that point). Those changes are keyed
/// by `id` — they used to stop the connector at every start ("key column
/// rid is not in the table's replica identity (id)").
#[test]
fn a_key_renamed_since_start_keys_earlier_changes_by_the_streams_identity() {
    let rel = customers(b'd');
    let mut r = router(TABLE, &rel);
    r.set_primary_key("public", "customers", vec!["rid".into()]);
    r.on_relation(&rel, Lsn(1)).unwrap();
    let mut out = Vec::new();
    let new = row(vec![t("1"), t("Bo"), t("12.50"), t("x")]);
    r.on_change(&change(Op::Insert, &rel, None, Some(new)), TXN, &mut out)
        .unwrap();
    assert_eq!(text(&out[0].key).as_deref(), Some(r#"{"id":1}"#));
    // The same key told by the catalog keeps the catalog's order.
    let mut r = router(TABLE, &rel);
    r.set_primary_key("public", "customers", vec!["id".into()]);
    r.on_relation(&rel, Lsn(1)).unwrap();
    let mut out = Vec::new();
    let new = row(vec![t("2"), t("Bo"), t("12.50"), t("x")]);
    r.on_change(&change(Op::Insert, &rel, None, Some(new)), TXN, &mut out)
        .unwrap();
    assert_eq!(text(&out[0].key).as_deref(), Some(r#"{"id":2}"#));
}
