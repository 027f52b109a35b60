use super::*;
use crate::config::Config;
use crate::pgoutput::Column;

fn config(outbox_extra: &str) -> Vec<OutboxConfig> {
    let text = crate::config::test_config_text(outbox_extra);
    Config::from_str(&text, "test.toml")
        .expect("valid config")
        .outbox
}

fn col(name: &str, type_oid: Oid) -> Column {
    Column {
        flags: 0,
        name: name.into(),
        type_oid,
        type_modifier: -1,
    }
}

fn relation(columns: Vec<Column>) -> Relation {
    Relation {
        oid: 42,
        namespace: "public".into(),
        name: "outbox".into(),
        replica_identity: b'd',
        columns,
    }
}

fn debezium_columns() -> Vec<Column> {
    vec![
        col("id", 2950),
        col("aggregatetype", 25),
        col("aggregateid", 25),
        col("type", 25),
        col("payload", 3802),
        col("created_at", 1184),
    ]
}

fn text(s: &str) -> Cell {
    Cell::Text(Bytes::copy_from_slice(s.as_bytes()))
}

fn row(cells: Vec<Cell>) -> TupleData {
    TupleData(cells)
}

fn order_row() -> TupleData {
    row(vec![
        text("5b8f3c1e-0000-4000-8000-000000000001"),
        text("order"),
        text("order-17"),
        text("OrderCreated"),
        text(r#"{"total": 10}"#),
        text("2026-11-30 01:02:03.456789+00"),
    ])
}

const LSN: Lsn = Lsn(0x1_0000_0A00);

fn router(extra: &str) -> Router {
    let mut r = Router::new(&config(extra));
    r.on_relation(&relation(debezium_columns()));
    r
}

#[test]
fn routes_like_debeziums_outbox_event_router() {
    let r = router("");
    let Ok(Routed::Record(rec)) = r.on_insert(42, &order_row(), LSN, None) else {
        panic!("not routed")
    };
    assert_eq!(&*rec.topic, "outbox.event.order");
    assert_eq!(rec.key.as_deref(), Some(&b"order-17"[..]));
    assert_eq!(rec.value.as_deref(), Some(&br#"{"total": 10}"#[..]));
    assert_eq!(
        rec.headers,
        vec![
            (
                "id".into(),
                Bytes::from_static(b"5b8f3c1e-0000-4000-8000-000000000001")
            ),
            // header_columns defaults to ["type"].
            ("type".into(), Bytes::from_static(b"OrderCreated")),
            ("walrelay.lsn".into(), Bytes::from_static(b"1/00000A00")),
        ]
    );
    assert_eq!(rec.timestamp_ms, None);
}

#[test]
fn same_row_same_record() {
    let r = router("");
    assert_eq!(
        r.on_insert(42, &order_row(), LSN, None),
        r.on_insert(42, &order_row(), LSN, None)
    );
}

#[test]
fn header_columns_template_and_timestamp() {
    let r = router(
        "topic = \"events.{aggregatetype}.{type}\"\nheader_columns = [\"type\"]\ntimestamp_column = \"created_at\"",
    );
    let Ok(Routed::Record(rec)) = r.on_insert(42, &order_row(), LSN, None) else {
        panic!("not routed")
    };
    assert_eq!(&*rec.topic, "events.order.OrderCreated");
    assert!(
        rec.headers
            .contains(&("type".into(), Bytes::from_static(b"OrderCreated")))
    );
    // 2026-11-30T01:02:03.456Z
    assert_eq!(rec.timestamp_ms, Some(1_796_000_523_456));
}

#[test]
fn null_aggregate_id_names_table_column_and_lsn() {
    let r = router("");
    let mut bad = order_row();
    bad.0[2] = Cell::Null;
    let err = r
        .on_insert(42, &bad, LSN, None)
        .expect_err("must not route");
    assert_eq!(
        (err.table.as_str(), err.column.as_str(), err.lsn),
        ("public.outbox", "aggregateid", LSN)
    );
    let msg = err.to_string();
    assert!(
        msg.contains("public.outbox") && msg.contains("aggregateid") && msg.contains("1/00000A00"),
        "{msg}"
    );
}

/// A snapshot row that cannot be routed gets advice that works for a
/// snapshot row (change the row), not the streaming one (skip the
/// transaction, advance the slot: the next start reads the row again).
#[test]
fn an_unroutable_snapshot_row_is_told_to_fix_the_row() {
    let r = router("");
    let mut bad = order_row();
    bad.0[2] = Cell::Null;
    let err = r
        .on_snapshot_row(42, &bad, LSN)
        .expect_err("must not route");
    assert_eq!(err.column, "aggregateid");
    let msg = err.to_string();
    assert!(msg.contains("read by the snapshot"), "{msg}");
    assert!(msg.contains("UPDATE it"), "{msg}");
    assert!(!msg.contains("skip its transaction"), "{msg}");
    let streamed = r
        .on_insert(42, &bad, LSN, None)
        .expect_err("must not route");
    assert!(streamed.to_string().contains("skip its transaction"));
}

#[test]
fn null_id_is_an_error() {
    let r = router("");
    let mut bad = order_row();
    bad.0[0] = Cell::Null;
    assert_eq!(
        r.on_insert(42, &bad, LSN, None).expect_err("error").column,
        "id"
    );
}

#[test]
fn missing_configured_column_is_an_error_on_the_first_row() {
    let mut r = Router::new(&config(""));
    let mut cols = debezium_columns();
    cols.retain(|c| c.name != "aggregateid");
    r.on_relation(&relation(cols));
    let err = r.on_insert(42, &order_row(), LSN, None).expect_err("error");
    assert_eq!(err.column, "aggregateid");
    assert!(err.reason.contains("no such column"));
}

/// Records of one topic share its name (no allocation per record); each
/// row still gets its own topic, and a bad one is refused every time, not
/// only the first.
#[test]
fn records_of_one_topic_share_its_name() {
    let r = router("");
    let topic = |aggregate_type: &str| {
        let mut row = order_row();
        row.0[1] = text(aggregate_type);
        r.on_insert(42, &row, LSN, None).map(|routed| match routed {
            Routed::Record(rec) => rec.topic,
            other => panic!("not routed: {other:?}"),
        })
    };
    let (a, b, c) = (topic("order"), topic("payment"), topic("order"));
    let (a, b, c) = (a.expect("a"), b.expect("b"), c.expect("c"));
    assert_eq!(
        (&*a, &*b, &*c),
        (
            "outbox.event.order",
            "outbox.event.payment",
            "outbox.event.order"
        )
    );
    assert!(std::sync::Arc::ptr_eq(&a, &c));
    for _ in 0..2 {
        assert!(topic("has space").is_err());
    }
    // Many distinct topics (a template on a column with many values) do
    // not grow the router without bound, and stay correct past the limit.
    for i in 0..5_000 {
        assert_eq!(
            &*topic(&format!("t{i}")).expect("routed"),
            format!("outbox.event.t{i}")
        );
    }
}

#[test]
fn invalid_topic_from_row_values_is_an_error() {
    let r = router("");
    let mut bad = order_row();
    bad.0[1] = text("has space SECRET-VALUE");
    let err = r.on_insert(42, &bad, LSN, None).expect_err("error");
    assert!(err.reason.contains("invalid"), "{err}");
    // Issue 24: row values stay out of errors (logs, /healthz, status).
    assert!(!err.to_string().contains("SECRET"), "{err}");
    // Issue 11: the template is named as a template, the columns it reads
    // as columns, and the fix does not ask to fix the (immutable) row.
    assert_eq!(err.column, "aggregatetype", "{err}");
    assert!(
        err.reason
            .contains("topic template \"outbox.event.{aggregatetype}\""),
        "{err}"
    );
    assert!(err.fix.contains("skip the row's transaction"), "{err}");
    // The relay names the row by its id.
    assert_eq!(
        r.row_id(42, &bad).as_deref(),
        Some("5b8f3c1e-0000-4000-8000-000000000001"),
        "{err}"
    );
}

#[test]
fn null_payload_is_a_tombstone_and_empty_payload_follows_the_option() {
    let r = router("");
    let mut null_payload = order_row();
    null_payload.0[4] = Cell::Null;
    let Ok(Routed::Record(rec)) = r.on_insert(42, &null_payload, LSN, None) else {
        panic!()
    };
    assert_eq!(rec.value, None);

    let mut empty = order_row();
    empty.0[4] = text("");
    let Ok(Routed::Record(rec)) = r.on_insert(42, &empty, LSN, None) else {
        panic!()
    };
    assert_eq!(rec.value.as_deref(), Some(&b""[..]));
    let r = router("tombstone_on_empty_payload = true");
    let Ok(Routed::Record(rec)) = r.on_insert(42, &empty, LSN, None) else {
        panic!()
    };
    assert_eq!(rec.value, None);
}

#[test]
fn bytea_payload_is_decoded_from_hex() {
    let mut r = Router::new(&config(""));
    let mut cols = debezium_columns();
    cols[4] = col("payload", BYTEA_OID);
    r.on_relation(&relation(cols));
    let mut bytes_row = order_row();
    bytes_row.0[4] = text("\\x00ff10");
    let Ok(Routed::Record(rec)) = r.on_insert(42, &bytes_row, LSN, None) else {
        panic!()
    };
    assert_eq!(rec.value.as_deref(), Some(&[0x00, 0xff, 0x10][..]));
    bytes_row.0[4] = text("\\x0");
    assert!(r.on_insert(42, &bytes_row, LSN, None).is_err());
}

/// Other published tables publish nothing, but are reported (see
/// `a_row_no_route_claims_is_reported_as_unclaimed`); a relation never
/// described publishes nothing (the relay refuses it before routing).
#[test]
fn other_tables_and_unknown_relations_publish_nothing() {
    let mut r = router("");
    let mut other = relation(debezium_columns());
    other.oid = 7;
    other.name = "orders".into();
    r.on_relation(&other);
    assert_eq!(
        r.on_insert(7, &order_row(), LSN, None),
        Ok(Routed::Unclaimed {
            table: "public.orders".into()
        })
    );
    assert_eq!(
        r.on_insert(999, &order_row(), LSN, None),
        Ok(Routed::Nothing)
    );
}

#[test]
fn update_policy() {
    assert_eq!(
        router("").on_update(42, LSN),
        Ok(Routed::IgnoredUpdate {
            table: "public.outbox".into(),
            warn: true
        })
    );
    assert_eq!(
        router("on_update = \"skip\"").on_update(42, LSN),
        Ok(Routed::IgnoredUpdate {
            table: "public.outbox".into(),
            warn: false
        })
    );
    let err = router("on_update = \"fail\"")
        .on_update(42, LSN)
        .expect_err("fail policy");
    assert_eq!(err.lsn, LSN);
}

#[test]
fn an_infinite_timestamp_stops_routing_with_a_clear_reason() {
    let r = router("timestamp_column = \"created_at\"");
    let mut row = order_row();
    row.0[5] = text("infinity");
    let err = match r.on_insert(42, &row, LSN, None) {
        Err(e) => e,
        Ok(other) => panic!("routed {other:?}"),
    };
    let text = err.to_string();
    assert!(
        text.contains("created_at") && text.contains("infinity"),
        "{text}"
    );
    assert!(text.contains("timestamp_column"), "{text}");
}

#[test]
fn lsn_header_follows_the_transaction() {
    let r = router("");
    let lsn_of = |lsn: Lsn| {
        let Ok(Routed::Record(rec)) = r.on_insert(42, &order_row(), lsn, None) else {
            panic!("not routed")
        };
        rec.headers
            .iter()
            .find(|(k, _)| &**k == "walrelay.lsn")
            .map(|(_, v)| v.clone())
    };
    assert_eq!(lsn_of(LSN).as_deref(), Some(&b"1/00000A00"[..]));
    assert_eq!(
        lsn_of(Lsn(0x2_0000_0001)).as_deref(),
        Some(&b"2/00000001"[..])
    );
    assert_eq!(lsn_of(LSN).as_deref(), Some(&b"1/00000A00"[..]));
}

/// pgoutput names the leaf partition when the publication does not publish
/// via the partition root: its rows are still the outbox table's.
#[test]
fn a_partition_of_a_captured_table_is_routed_as_the_table() {
    let mut r = Router::new(&config(""));
    r.add_partitions(
        "public",
        "outbox",
        &[("public".to_owned(), "outbox_2026_11".to_owned())],
    );
    let mut leaf = relation(debezium_columns());
    leaf.oid = 77;
    leaf.name = "outbox_2026_11".into();
    r.on_relation(&leaf);
    match r.on_insert(77, &order_row(), LSN, None).unwrap() {
        Routed::Record(rec) => assert_eq!(rec.key.as_deref(), Some(&b"order-17"[..])),
        other => panic!("a partition's row must be routed, got {other:?}"),
    }
}

/// A row of a published relation that no route claims is reported, never
/// dropped without a trace.
#[test]
fn a_row_no_route_claims_is_reported_as_unclaimed() {
    let mut r = router("");
    let mut other = relation(debezium_columns());
    other.oid = 99;
    other.name = "outbox_copy".into();
    r.on_relation(&other);
    assert_eq!(
        r.on_insert(99, &order_row(), LSN, None).unwrap(),
        Routed::Unclaimed {
            table: "public.outbox_copy".into()
        }
    );
    // A relation later claimed (re-sent Relation message) is routed again.
    let mut claimed = relation(debezium_columns());
    claimed.oid = 99;
    r.on_relation(&claimed);
    assert!(matches!(
        r.on_insert(99, &order_row(), LSN, None).unwrap(),
        Routed::Record(_)
    ));
}

/// Each kind of unroutable row carries its fixed label (the dead-letter
/// topic's reason; never row data), and [`Router::salvage`] keeps the
/// row's payload (bytea decoded), key and id for its dead letter.
#[test]
fn unroutable_rows_carry_their_kind_and_salvage_keeps_the_row() {
    let r = router("");
    let kind = |i: usize, cell: Cell| {
        let mut bad = order_row();
        bad.0[i] = cell;
        r.on_insert(42, &bad, LSN, None).expect_err("error").kind
    };
    assert_eq!(kind(2, Cell::Null), Unroutable::NullValue);
    assert_eq!(kind(0, Cell::Null), Unroutable::NullValue);
    assert_eq!(kind(1, text("has space")), Unroutable::InvalidTopic);
    assert_eq!(Unroutable::InvalidTopic.as_str(), "invalid_topic");

    let mut missing = Router::new(&config(""));
    let mut cols = debezium_columns();
    cols.retain(|c| c.name != "aggregateid");
    missing.on_relation(&relation(cols));
    let err = missing
        .on_insert(42, &order_row(), LSN, None)
        .expect_err("error");
    assert_eq!(err.kind, Unroutable::MissingColumn);
    assert_eq!(missing.salvage(42, &order_row()), Salvaged::default());

    let ce = router("format = \"cloudevents\"\n[outbox.cloudevents]\nsource = \"/shop\"");
    let mut no_type = order_row();
    no_type.0[3] = text("");
    let err = ce.on_insert(42, &no_type, LSN, None).expect_err("error");
    assert_eq!(err.kind, Unroutable::CloudEvents, "{err}");

    let mut bad = order_row();
    bad.0[1] = text("has space");
    assert_eq!(
        r.salvage(42, &bad),
        Salvaged {
            value: Some(Bytes::from_static(br#"{"total": 10}"#)),
            key: Some(Bytes::from_static(b"order-17")),
            id: Some(Bytes::from_static(b"5b8f3c1e-0000-4000-8000-000000000001")),
            route: Some("outbox.event.{aggregatetype}".into()),
        }
    );
    let mut cols = debezium_columns();
    cols[4] = col("payload", 17);
    let mut b = Router::new(&config(""));
    b.on_relation(&relation(cols));
    let mut bytea = order_row();
    bytea.0[4] = text("\\x00ff");
    assert_eq!(
        b.salvage(42, &bytea).value,
        Some(Bytes::from_static(&[0, 255]))
    );
}

/// The size a record reports is the sum of its parts, counted once when it
/// is built (and again after a change in place).
fn summed_size(r: &Record) -> usize {
    r.topic.len()
        + r.key.as_ref().map_or(0, Bytes::len)
        + r.value.as_ref().map_or(0, Bytes::len)
        + r.headers
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
        + 64
}

#[test]
fn a_routed_record_carries_its_event_id_and_size() {
    let cloudevents = "format = \"cloudevents\"\n[outbox.cloudevents]\nsource = \"/shop\"";
    for extra in ["", cloudevents] {
        let r = router(extra);
        let Ok(Routed::Record(rec)) = r.on_insert(42, &order_row(), LSN, None) else {
            panic!("not routed with {extra:?}")
        };
        let id = rec
            .headers
            .iter()
            .find(|(k, _)| &**k == "id")
            .map(|(_, v)| v.clone())
            .unwrap();
        assert_eq!(rec.event_id(), Some(&EventId::OutboxRow(id)), "{extra:?}");
        assert_eq!(rec.size(), summed_size(&rec), "{extra:?}");
    }
}

#[test]
fn a_record_built_elsewhere_reads_its_event_id_from_its_headers_once() {
    let h = |pairs: &[(&str, &str)]| -> Vec<(Arc<str>, Bytes)> {
        pairs
            .iter()
            .map(|(k, v)| (Arc::from(*k), Bytes::from(v.to_string())))
            .collect()
    };
    let outbox = Record::new("t".into(), None, None, h(&[("x", "1"), ("id", "7")]), None);
    assert_eq!(
        outbox.event_id(),
        Some(&EventId::OutboxRow(Bytes::from_static(b"7")))
    );
    let change = Record::new(
        "t".into(),
        None,
        None,
        h(&[(table::EVENT_ID_HEADER, "0/1:2"), ("id", "7")]),
        None,
    );
    assert_eq!(
        change.event_id(),
        Some(&EventId::Change(Bytes::from_static(b"0/1:2")))
    );
    let mut none = Record::new(
        "t".into(),
        Some(Bytes::from_static(b"k")),
        None,
        h(&[]),
        None,
    );
    assert_eq!(none.event_id(), None);
    assert_eq!(none.size(), summed_size(&none));
    none.headers
        .push((Arc::from("extra"), Bytes::from_static(b"abc")));
    none.recount();
    assert_eq!(none.size(), summed_size(&none));
}
