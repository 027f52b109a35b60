//! `format = "avro" | "json_schema"`: the bodies and schemas the router
//! gives table events (the wire format's prefix is the sink's).

use super::*;

fn registry_router(format: &str, rel: &Relation) -> TableRouter {
    router(
        &format!(
            "[kafka.schema_registry]\nurl = \"http://registry:8081\"\n\
             [table_defaults]\nformat = \"{format}\"\n{TABLE}"
        ),
        rel,
    )
}

fn insert(r: &mut TableRouter, rel: &Relation) -> Vec<Record> {
    let mut out = Vec::new();
    let new = row(vec![t("1"), t("Ann"), t("-12.50"), Cell::Null]);
    r.on_change(&change(Op::Insert, rel, None, Some(new)), TXN, &mut out)
        .unwrap();
    out
}

#[test]
fn avro_bodies_follow_the_schemas_field_by_field() {
    let rel = customers(b'd');
    let mut r = registry_router("avro", &rel);
    let out = insert(&mut r, &rel);
    assert_eq!(out.len(), 1);
    let rec = &out[0];
    // Key record {id: int} = 1: zigzag 2.
    assert_eq!(rec.key.as_deref(), Some(&[0x02][..]));
    let value = rec.value.as_deref().unwrap();
    #[rustfmt::skip]
    let rows: &[u8] = &[
        0x00,                         // before: null
        0x02,                         // after: the Value branch
        0x02,                         // id 1 (required)
        0x02, 0x06, b'A', b'n', b'n', // name "Ann"
        0x02, 0x04, 0xFB, 0x1E,       // balance: -1250 unscaled, 2 bytes
        0x00,                         // note: null
    ];
    assert_eq!(&value[..rows.len()], rows);
    // source.version: a string right after the rows.
    let version = env!("CARGO_PKG_VERSION").as_bytes();
    assert_eq!(value[rows.len()] as usize, version.len() * 2);
    assert_eq!(&value[rows.len() + 1..][..version.len()], version);
    let schemas = rec.schemas.as_ref().unwrap();
    assert_eq!(
        schemas.key.as_ref().unwrap().name.as_deref(),
        Some("shop.public.customers.Key")
    );
    assert_eq!(
        schemas.value.name.as_deref(),
        Some("shop.public.customers.Envelope")
    );
    assert_eq!(schemas.change, None);
    assert!(schemas.value.text.contains(r#""logicalType":"decimal""#));
    // The headers are the JSON path's.
    assert_eq!(header(rec, EVENT_ID_HEADER), format!("{COMMIT}:3"));
}

#[test]
fn json_schema_bodies_are_the_json_with_decimals_as_numbers() {
    let rel = customers(b'd');
    let mut json = router(TABLE, &rel);
    let mut r = registry_router("json_schema", &rel);
    let (plain, framed) = (insert(&mut json, &rel), insert(&mut r, &rel));
    let want = text(&plain[0].value)
        .unwrap()
        .replace(r#""balance":"+x4=""#, r#""balance":-12.50"#);
    assert_eq!(text(&framed[0].value).unwrap(), want);
    assert!(want.contains(r#""balance":-12.50"#), "{want}");
    assert_eq!(text(&framed[0].key), text(&plain[0].key));
    let schemas = framed[0].schemas.as_ref().unwrap();
    assert!(
        schemas
            .value
            .text
            .starts_with(r#"{"$schema":"http://json-schema.org/draft-07/schema#""#),
        "{}",
        schemas.value.text
    );
}

#[test]
fn a_delete_keeps_its_tombstone() {
    let rel = customers(b'd');
    let mut r = registry_router("avro", &rel);
    let mut out = Vec::new();
    let old = row(vec![t("1"), Cell::Null, Cell::Null, Cell::Null]);
    r.on_change(&change(Op::Delete, &rel, Some(old), None), TXN, &mut out)
        .unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[1].key.as_deref(), Some(&[0x02][..]));
    assert_eq!(out[1].value, None);
    assert!(out.iter().all(|r| r.schemas.is_some()));
    // before: the Value branch with id 1 and three nulls; after: null.
    assert_eq!(&out[0].value.as_deref().unwrap()[..6], [2, 2, 0, 0, 0, 0]);
}

#[test]
fn a_new_shape_says_what_changed_and_the_same_shape_keeps_its_schemas() {
    let rel = customers(b'd');
    let mut r = registry_router("avro", &rel);
    let first = insert(&mut r, &rel)[0].schemas.clone().unwrap();
    r.on_relation(&rel, Lsn(2)).unwrap();
    let same = insert(&mut r, &rel)[0].schemas.clone().unwrap();
    assert_eq!(same, first);
    let mut altered = rel.clone();
    altered.columns[2] = col("balance", 25, -1, false);
    altered.columns.push(col("tier", 21, -1, false));
    r.on_relation(&altered, Lsn(0x30)).unwrap();
    let mut out = Vec::new();
    let new = row(vec![t("1"), t("Ann"), t("lots"), Cell::Null, t("2")]);
    r.on_change(
        &change(Op::Insert, &altered, None, Some(new)),
        TXN,
        &mut out,
    )
    .unwrap();
    let changed = out[0].schemas.clone().unwrap();
    assert_ne!(changed.value.text, first.value.text);
    assert_eq!(changed.key, first.key);
    assert_eq!(
        changed.change.as_deref(),
        Some(
            "the table changed at 0/00000030: column balance: numeric(10,2) → text, column tier \
             added (int2)"
        )
    );
}
