//! `format = "avro"` events are written from the cells
//! (`encode/avro.rs`), `json_schema` ones by the JSON path with their
//! decimals re-encoded alone, `protobuf` ones re-encoded whole after the
//! JSON path (`encode_tail`): every record must be byte for byte what the
//! transcoder (`schemas::body`) makes of the JSON path's record under the
//! same schemas, and every error the same error — on every type the router
//! maps, NULLs, masks, unchanged TOAST, key changes, tombstones, snapshot
//! rows and transaction blocks.

use super::*;
use crate::router::table::schemas::body::{BodyError, avro_from_json, json_from_json};
use crate::router::table::schemas::protobuf::protobuf_from_json;
use crate::router::table::schemas::{Schema, Type};

const FORMATS: [&str; 3] = ["avro", "json_schema", "protobuf"];

/// The transcoder of `format`.
fn transcode(format: &str, schema: &Schema, json: &[u8]) -> Result<Vec<u8>, BodyError> {
    let mut out = Vec::new();
    match format {
        "avro" => avro_from_json(schema, json, &mut out),
        "json_schema" => json_from_json(schema, json, &mut out),
        _ => protobuf_from_json(schema, json, &mut out),
    }
    .map(|()| out)
}

const KINDS: &str = "[[table]]\nname = \"public.kinds\"\n\
    [[table.column_mask]]\ncolumns = [\"masked\"]\nwith_chars = 3\n\
    [[table.column_mask]]\ncolumns = [\"hashed\"]\nhash = \"SHA-256\"\nsalt = \"s\"\n";

/// Every mapped kind, arrays of some, an enum, two masked columns.
fn kinds(identity: u8) -> Relation {
    let types: &[(&str, Oid, i32)] = &[
        ("i2", 21, -1),
        ("i4", 23, -1),
        ("o", 26, -1),
        ("flag", 16, -1),
        ("f4", 700, -1),
        ("f8", 701, -1),
        ("num", 1700, (10 << 16 | 2) + 4),
        ("vnum", 1700, -1),
        ("txt", 25, -1),
        ("vc", 1043, 36),
        ("ch", 1042, 5),
        ("uid", 2950, -1),
        ("js", 3802, -1),
        ("bin", 17, -1),
        ("d", 1082, -1),
        ("tm", 1083, -1),
        ("tsp", 1114, -1),
        ("tsz", 1184, -1),
        ("ttz", 1266, -1),
        ("iv", 1186, -1),
        ("cash", 790, -1),
        ("b1", 1560, 1),
        ("bits", 1562, -1),
        ("pt", 600, -1),
        ("ints", 1007, -1),
        ("texts", 1009, -1),
        ("nums", 1231, -1),
        ("mood", 16_941, -1),
        ("moods", 16_940, -1),
        ("hmood", 16_942, -1),
        ("pos", 16_943, -1),
        ("masked", 25, -1),
        ("hashed", 25, -1),
    ];
    let mut columns = vec![col("id", 20, -1, true), col("name", 25, -1, true)];
    columns.extend(
        types
            .iter()
            .map(|&(n, oid, typmod)| col(n, oid, typmod, false)),
    );
    Relation {
        oid: 9,
        namespace: "public".into(),
        name: "kinds".into(),
        replica_identity: identity,
        columns,
    }
}

/// One row of values (as pgoutput sends them) for [`kinds`].
fn values(id: &str, name: &str, other: bool) -> TupleData {
    let v: &[&str] = if other {
        &[
            "-32768",
            "2147483647",
            "4294967295",
            "f",
            "-0",
            "Infinity",
            "0.00",
            "0.00001",
            "",
            "x",
            "ab   ",
            "00000000-0000-0000-0000-000000000000",
            "[]",
            "\\x",
            "infinity",
            "00:00:00",
            "-infinity",
            "2024-02-29 23:59:59.999999+00",
            "00:00:00+00",
            "-178000000 years",
            "-$0.01",
            "0",
            "",
            "(0,0)",
            "{}",
            "{}",
            "{NaN,1.5}",
            "sad",
            "{}",
            "sad",
            "1",
            "secret",
            "other",
        ]
    } else {
        &[
            "7",
            "-42",
            "12345",
            "t",
            "1.5",
            "NaN",
            "-12.50",
            "3.14159",
            "he said \"hi\" \\ é ✓\n\t",
            "SKU-1",
            "abc  ",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            r#"{"a": [1, "x\"y"], "b": null}"#,
            "\\xdeadbeef",
            "2024-02-29",
            "12:34:56.789",
            "2024-01-01 00:00:00.123456",
            "2024-01-01 00:00:00.5+00",
            "12:00:00+02",
            "1 year 2 mons 3 days 04:05:06.7",
            "$1,234.56",
            "1",
            "10110",
            "(1.5,-2)",
            "{1,NULL,-3}",
            r#"{a,"b c",NULL,"q\"t"}"#,
            "{1.10,NULL,-2}",
            "happy",
            r#"{happy,"sad"}"#,
            "happy",
            "2147483647",
            "secret",
            "hash me",
        ]
    };
    let mut cells = vec![t(id), t(name)];
    cells.extend(v.iter().map(|s| t(s)));
    row(cells)
}

fn nulls(id: &str, name: &str) -> TupleData {
    let mut r = values(id, name, false);
    for c in r.0.iter_mut().skip(2) {
        *c = Cell::Null;
    }
    r
}

fn kinds_router(format: &str, identity: u8, txmeta: bool) -> (TableRouter, Relation) {
    let rel = kinds(identity);
    let extra = format!(
        "[kafka.schema_registry]\nurl = \"http://registry:8081\"\n[table_defaults]\n\
         format = \"{format}\"\nprovide_transaction_metadata = {txmeta}\n{KINDS}"
    );
    let mut r = TableRouter::new(&config(&extra));
    r.set_type_alias(16_941, 25, -1);
    r.set_enum_labels(16_941, vec!["happy".into(), "sad".into()]);
    // `mood[]`, a domain over `mood`, a `NOT NULL` domain over int4: as
    // the start-up tells them.
    r.set_type_alias(16_940, 1009, -1);
    r.set_enum_labels(16_940, vec!["happy".into(), "sad".into()]);
    r.set_type_alias(16_942, 25, -1);
    r.set_enum_labels(16_942, vec!["happy".into(), "sad".into()]);
    r.set_type_alias(16_943, 23, -1);
    r.on_relation(&rel, Lsn(1)).unwrap();
    (r, rel)
}

/// The `format` router, then what `drive` made in `json` and in `format`,
/// and how each ended.
type Both = (
    TableRouter,
    Vec<Record>,
    Vec<Record>,
    [Result<(), TableEventError>; 2],
);

/// What `drive` makes of the same input in `json` and in `format`.
fn both(
    format: &str,
    identity: u8,
    txmeta: bool,
    drive: impl Fn(&mut TableRouter, &Relation, &mut Vec<Record>) -> Result<(), TableEventError>,
) -> Both {
    let (mut json, rel) = kinds_router("json", identity, txmeta);
    let (mut avro, _) = kinds_router(format, identity, txmeta);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let made = [
        drive(&mut json, &rel, &mut a),
        drive(&mut avro, &rel, &mut b),
    ];
    (avro, a, b, made)
}

/// The `format` records are the transcoded json ones, record by record.
fn assert_transcoded(format: &str, avro: &TableRouter, json: &[Record], direct: &[Record]) {
    let Some(Ok(bound)) = avro.bound.get(&9) else {
        panic!("kinds is not bound");
    };
    let schemas = bound.encoding.as_ref().unwrap().event_schemas();
    assert_eq!(json.len(), direct.len());
    let mut table_records = 0;
    for (j, d) in json.iter().zip(direct) {
        if j.topic != bound.topic {
            continue;
        }
        table_records += 1;
        let transcode = |schema: &Schema, b: &Option<Bytes>| {
            b.as_ref().map(|b| transcode(format, schema, b).unwrap())
        };
        let key = schemas.key.as_ref().and_then(|k| transcode(k, &j.key));
        assert_eq!(
            d.key.as_deref(),
            key.as_deref(),
            "key of {:?}",
            text(&j.key)
        );
        let value = transcode(&schemas.envelope, &j.value);
        assert_eq!(
            d.value.as_deref(),
            value.as_deref(),
            "value of {:?}",
            text(&j.value)
        );
        assert_eq!(d.headers, j.headers);
        assert_eq!(
            d.size(),
            d.topic.len()
                + d.key.as_ref().map_or(0, Bytes::len)
                + d.value.as_ref().map_or(0, Bytes::len)
                + d.headers
                    .iter()
                    .map(|(k, v)| k.len() + v.len())
                    .sum::<usize>()
                + 64
        );
        assert!(d.schemas.is_some());
    }
    assert!(table_records > 0);
}

fn txn_change(
    op: Op,
    rel: &Relation,
    index: u64,
    old: Option<TupleData>,
    new: Option<TupleData>,
) -> Change {
    let mut c = change(op, rel, old, new);
    c.pos.index = index;
    c
}

#[test]
fn records_written_directly_are_the_transcoded_json_on_every_type() {
    for (format, identity) in FORMATS.into_iter().flat_map(|f| [(f, b'd'), (f, b'f')]) {
        for txmeta in [false, true] {
            let (avro, json, direct, made) = both(format, identity, txmeta, |r, rel, out| {
                if txmeta {
                    r.on_begin(TXN, Lsn(0x16B_3600));
                }
                let changes = [
                    txn_change(Op::Insert, rel, 0, None, Some(values("1", "a", false))),
                    txn_change(Op::Insert, rel, 1, None, Some(values("2", "b", true))),
                    txn_change(Op::Insert, rel, 2, None, Some(nulls("3", "c"))),
                    // An update with unchanged TOAST (FULL: filled from the old row).
                    txn_change(Op::Update, rel, 3, Some(values("1", "a", false)), {
                        let mut new = values("1", "a", true);
                        new.0[14] = Cell::UnchangedToast;
                        new.0[30] = Cell::UnchangedToast;
                        new.0[33] = Cell::UnchangedToast;
                        Some(new)
                    }),
                    // A key change: delete, tombstone, create.
                    txn_change(
                        Op::Update,
                        rel,
                        4,
                        Some(values("2", "b", true)),
                        Some(values("9", "b", false)),
                    ),
                    txn_change(Op::Delete, rel, 5, Some(values("3", "c", false)), None),
                ];
                for c in &changes {
                    r.on_change(c, TXN, out)?;
                }
                r.on_snapshot_row(
                    9,
                    &values("4", "d", false),
                    COMMIT,
                    7,
                    1_700_000_000_000,
                    SnapshotMarker::First,
                    out,
                )?;
                r.on_snapshot_row(
                    9,
                    &nulls("5", "e"),
                    COMMIT,
                    8,
                    1_700_000_000_000,
                    SnapshotMarker::LastInDataCollection,
                    out,
                )?;
                if txmeta {
                    r.on_commit(COMMIT, Lsn(0x16B_3790), out)?;
                }
                Ok(())
            });
            assert!(
                made[0].is_ok() && made[1].is_ok(),
                "{format} {identity} {txmeta}: {made:?}"
            );
            assert!(direct.iter().any(|r| r.value.is_none()), "a tombstone");
            assert_transcoded(format, &avro, &json, &direct);
        }
    }
}

/// An enum array holding a NULL element: its items widened to optional
/// before the first record (see `encode`), written as the transcoder
/// writes it under the wider schema — the change, an update and a delete
/// of its old row, and a row of NULLs.
#[test]
fn an_enum_array_widened_by_a_null_element_is_the_transcoded_json() {
    let with_null = |id: &str| {
        let mut r = values(id, "a", false);
        r.0[30] = t("{sad,NULL}");
        r
    };
    for (format, identity) in FORMATS.into_iter().flat_map(|f| [(f, b'd'), (f, b'f')]) {
        let (avro, json, direct, made) = both(format, identity, false, |r, rel, out| {
            let changes = [
                txn_change(Op::Insert, rel, 0, None, Some(with_null("1"))),
                txn_change(
                    Op::Update,
                    rel,
                    1,
                    Some(with_null("1")),
                    Some(values("1", "a", true)),
                ),
                txn_change(Op::Insert, rel, 2, None, Some(nulls("2", "b"))),
                txn_change(Op::Delete, rel, 3, Some(with_null("1")), None),
            ];
            for c in &changes {
                r.on_change(c, TXN, out)?;
            }
            Ok(())
        });
        assert!(made[0].is_ok() && made[1].is_ok(), "{format}: {made:?}");
        assert_transcoded(format, &avro, &json, &direct);
        let Some(Ok(bound)) = avro.bound.get(&9) else {
            panic!("kinds is not bound");
        };
        let envelope = &bound.encoding.as_ref().unwrap().event_schemas().envelope;
        let Type::Struct(fields) = &envelope.ty else {
            panic!("{envelope:?}")
        };
        let Type::Struct(columns) = &fields[0].schema.ty else {
            panic!("{envelope:?}")
        };
        let moods = columns.iter().find(|c| c.name == "moods").unwrap();
        let Type::Array(item) = &moods.schema.ty else {
            panic!("{moods:?}")
        };
        // Optional in every format now (Avro widened, the others never
        // required).
        assert!(item.optional, "{format}: {moods:?}");
        assert_eq!(item.name.as_deref(), Some("io.debezium.data.Enum"));
    }
}

/// The first error the transcoder meets in the json records: its path as
/// `encode_tail` names it, and its reason.
fn transcode_error(
    format: &str,
    avro: &TableRouter,
    json: &[Record],
) -> Option<(String, &'static str)> {
    let Some(Ok(bound)) = avro.bound.get(&9) else {
        panic!("kinds is not bound");
    };
    let schemas = bound.encoding.as_ref().unwrap().event_schemas();
    for r in json.iter().filter(|r| r.topic == bound.topic) {
        if let (Some(schema), Some(key)) = (&schemas.key, &r.key) {
            if let Err(e) = transcode(format, schema, key) {
                return Some((format!("key.{}", e.path), e.reason));
            }
        }
        if let Some(value) = &r.value {
            if let Err(e) = transcode(format, &schemas.envelope, value) {
                return Some((e.path, e.reason));
            }
        }
    }
    None
}

#[test]
fn a_value_the_direct_forms_refuse_is_the_transcoders_error() {
    // Bad values in columns with a direct form (int2, bool, text, key
    // columns) and without (date, numeric), NULLs in key columns.
    let cases: [(usize, Option<&[u8]>); 11] = [
        (3, Some(b"1.5")),
        (3, Some(b"007")),
        (3, Some(b"+5")),
        (5, Some(b"yes")),
        (2, Some(b"99999999999999999999")),
        (10, Some(b"\xff\xfe")),
        (10, Some(&[0xff, 0xfe])),
        (16, Some(b"not a date")),
        (8, Some(b"12.x")),
        (1, None),
        (0, None),
    ];
    for (format, (column, bad)) in FORMATS.into_iter().flat_map(|f| cases.map(|c| (f, c))) {
        let (avro, json, direct, made) = both(format, b'd', false, |r, rel, out| {
            let mut new = values("1", "a", false);
            new.0[column] = bad.map_or(Cell::Null, |b| Cell::Text(Bytes::copy_from_slice(b)));
            r.on_change(&change(Op::Insert, rel, None, Some(new)), TXN, out)
        });
        let case = format!("{format}: column {column}, {bad:?}");
        match (&made[0], transcode_error(format, &avro, &json)) {
            // The JSON path's own error, unchanged.
            (Err(_), _) => assert_eq!(made[1], made[0], "{case}"),
            // A value the JSON path writes but its schema cannot carry.
            (Ok(()), Some((path, reason))) => {
                let e = made[1].as_ref().unwrap_err();
                assert_eq!(e.column, path, "{case}");
                assert!(e.reason.ends_with(reason), "{case}: {e:?}");
                assert!(e.reason.contains("does not fit its"), "{case}");
            }
            (Ok(()), None) => {
                assert!(made[1].is_ok(), "{case}: {:?}", made[1]);
                assert_transcoded(format, &avro, &json, &direct);
            }
        }
    }
}
