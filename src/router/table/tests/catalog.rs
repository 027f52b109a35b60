//! What the catalog adds to the registry schemas (`NOT NULL`, enum labels)
//! and how the stream overrules it: a NULL in a `NOT NULL` column or a
//! label the catalog did not list widens the schema, never fails the row.

use super::*;

/// An enum type's oid (user types are 16384 and up).
const MOOD: Oid = 16_500;
const MOOD_ARRAY: Oid = 16_499;

fn registry_config(format: &str, table: &str) -> Config {
    config(&format!(
        "[kafka.schema_registry]\nurl = \"http://registry:8081\"\n\
         [table_defaults]\nformat = \"{format}\"\n{table}"
    ))
}

/// `customers` plus `mood` (enum) and `moods` (enum array).
fn with_moods(identity: u8) -> Relation {
    let mut rel = customers(identity);
    rel.columns.push(col("mood", MOOD, -1, false));
    rel.columns.push(col("moods", MOOD_ARRAY, -1, false));
    rel
}

/// A router for `rel` told by the catalog: `name` and `mood` NOT NULL,
/// `mood` of enum `MOOD` with labels happy, sad, and `moods` of its array
/// type (the element's labels, as the start-up reads them).
fn catalog_router(format: &str, table: &str, rel: &Relation) -> TableRouter {
    let mut r = TableRouter::new(&registry_config(format, table));
    r.set_primary_key("public", "customers", vec!["id".into()]);
    r.set_not_null(
        "public",
        "customers",
        vec!["id".into(), "name".into(), "mood".into()],
    );
    r.set_type_alias(MOOD, 25, -1);
    r.set_type_alias(MOOD_ARRAY, 1009, -1);
    r.set_enum_labels(MOOD, vec!["happy".into(), "sad".into()]);
    r.set_enum_labels(MOOD_ARRAY, vec!["happy".into(), "sad".into()]);
    r.on_relation(rel, Lsn(1)).unwrap();
    r
}

fn insert_row(r: &mut TableRouter, rel: &Relation, cells: Vec<Cell>) -> Vec<Record> {
    let mut out = Vec::new();
    r.on_change(
        &change(Op::Insert, rel, None, Some(row(cells))),
        TXN,
        &mut out,
    )
    .unwrap();
    out
}

fn ann(name: Cell, mood: Cell) -> Vec<Cell> {
    ann_moods(name, mood, t("{happy,sad}"))
}

fn ann_moods(name: Cell, mood: Cell, moods: Cell) -> Vec<Cell> {
    vec![t("1"), name, t("1.00"), Cell::Null, mood, moods]
}

/// Debezium's `io.debezium.data.Enum` of labels happy, sad (Avro).
fn happy_sad() -> serde_json::Value {
    serde_json::json!({
        "type": "string",
        "connect.version": 1,
        "connect.parameters": {"allowed": "happy,sad"},
        "connect.name": "io.debezium.data.Enum"
    })
}

/// The Avro value schema's `Value` record.
fn value_record(rec: &Record) -> serde_json::Value {
    let text = &rec.schemas.as_ref().unwrap().value.text;
    let envelope: serde_json::Value = serde_json::from_str(text).unwrap();
    envelope["fields"][0]["type"][1].clone()
}

/// Field `name`'s type in an Avro record.
fn avro_field(record: &serde_json::Value, name: &str) -> serde_json::Value {
    record["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {record}"))["type"]
        .clone()
}

fn is_optional(t: &serde_json::Value) -> bool {
    t.as_array().is_some_and(|u| u[0] == "null")
}

#[test]
fn not_null_columns_are_required_where_every_event_holds_their_value() {
    // FULL: every old row holds every column.
    let rel = with_moods(b'f');
    let mut r = catalog_router("avro", TABLE, &rel);
    let out = insert_row(&mut r, &rel, ann(t("Ann"), t("happy")));
    let value = value_record(&out[0]);
    assert_eq!(avro_field(&value, "id"), "int");
    assert!(!is_optional(&avro_field(&value, "name")), "{value}");
    assert!(is_optional(&avro_field(&value, "note")), "{value}");
    assert!(is_optional(&avro_field(&value, "balance")), "{value}");
    assert_eq!(r.take_notices(), Vec::<String>::new());
    // A registry's refusal will name what the catalog made required.
    let change = out[0].schemas.as_ref().unwrap().change.clone();
    assert!(
        change
            .as_deref()
            .is_some_and(|c| c.contains("NOT NULL: name, mood (")),
        "{change:?}"
    );

    // DEFAULT with deletes: a delete's `before` holds only the key, so a
    // NOT NULL column outside it stays optional (no value is invented).
    let rel = with_moods(b'd');
    let mut r = catalog_router("avro", TABLE, &rel);
    let value = value_record(&insert_row(&mut r, &rel, ann(t("Ann"), t("happy")))[0]);
    assert_eq!(avro_field(&value, "id"), "int");
    assert!(is_optional(&avro_field(&value, "name")), "{value}");

    // DEFAULT with deletes skipped: every event's rows are whole.
    let skipping = format!("{TABLE}\nskipped_operations = \"d,t\"");
    let mut r = catalog_router("avro", &skipping, &rel);
    let value = value_record(&insert_row(&mut r, &rel, ann(t("Ann"), t("happy")))[0]);
    assert!(!is_optional(&avro_field(&value, "name")), "{value}");
}

#[test]
fn a_null_in_a_not_null_column_widens_it_once_and_keeps_the_row() {
    let rel = with_moods(b'f');
    let mut r = catalog_router("avro", TABLE, &rel);
    let first = insert_row(&mut r, &rel, ann(t("Ann"), t("happy")));
    let required = first[0].schemas.clone().unwrap();
    // The constraint is newer than this row: it holds NULL.
    let out = insert_row(&mut r, &rel, ann(Cell::Null, t("sad")));
    assert_eq!(out.len(), 1);
    let widened = out[0].schemas.clone().unwrap();
    assert_ne!(widened.value.text, required.value.text);
    assert!(is_optional(&avro_field(&value_record(&out[0]), "name")));
    assert!(
        widened
            .change
            .as_deref()
            .is_some_and(|c| c.contains("column name") && c.contains("NULL")),
        "{:?}",
        widened.change
    );
    // The body: after's `name` is the null branch.
    let body = out[0].value.as_deref().unwrap();
    #[rustfmt::skip]
    let rows: &[u8] = &[
        0x00,        // before: null
        0x02,        // after: the Value branch
        0x02,        // id 1
        0x00,        // name: null
    ];
    assert_eq!(&body[..rows.len()], rows);
    let notices = r.take_notices();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].contains("public.customers") && notices[0].contains("name"),
        "{notices:?}"
    );
    // Said once; the next NULL and the next non-NULL keep the wider schema.
    let again = insert_row(&mut r, &rel, ann(Cell::Null, t("sad")));
    let after = insert_row(&mut r, &rel, ann(t("Bo"), t("sad")));
    assert_eq!(again[0].schemas.as_ref().unwrap().value, widened.value);
    assert_eq!(after[0].schemas.as_ref().unwrap().value, widened.value);
    assert_eq!(r.take_notices(), Vec::<String>::new());
    // A new Relation message (any DDL) keeps what the stream proved.
    r.on_relation(&rel, Lsn(9)).unwrap();
    let rebound = insert_row(&mut r, &rel, ann(t("Cy"), t("sad")));
    assert_eq!(rebound[0].schemas.as_ref().unwrap().value, widened.value);
}

#[test]
fn a_null_in_an_old_row_under_full_identity_and_in_a_snapshot_row_widens_too() {
    let rel = with_moods(b'f');
    let mut r = catalog_router("avro", TABLE, &rel);
    let mut out = Vec::new();
    let old = row(ann(Cell::Null, t("sad")));
    let new = row(ann(t("Ann"), t("sad")));
    r.on_change(
        &change(Op::Update, &rel, Some(old), Some(new)),
        TXN,
        &mut out,
    )
    .unwrap();
    assert!(is_optional(&avro_field(&value_record(&out[0]), "name")));
    assert_eq!(r.take_notices().len(), 1);

    let rel = with_moods(b'f');
    let mut r = catalog_router("avro", TABLE, &rel);
    let mut out = Vec::new();
    r.on_snapshot_row(
        rel.oid,
        &row(ann(Cell::Null, t("sad"))),
        COMMIT,
        0,
        0,
        SnapshotMarker::First,
        &mut out,
    )
    .unwrap();
    assert!(is_optional(&avro_field(&value_record(&out[0]), "name")));
    assert_eq!(r.take_notices().len(), 1);
}

#[test]
fn the_absent_columns_of_a_key_only_old_row_do_not_widen() {
    // DEFAULT, deletes skipped: a key change's old row holds only the key
    // (its delete is skipped): `name` stays required.
    let rel = with_moods(b'd');
    let skipping = format!("{TABLE}\nskipped_operations = \"d,t\"");
    let mut r = catalog_router("avro", &skipping, &rel);
    let mut out = Vec::new();
    let old = row(vec![
        t("1"),
        Cell::Null,
        Cell::Null,
        Cell::Null,
        Cell::Null,
        Cell::Null,
    ]);
    let mut new = ann(t("Ann"), t("sad"));
    new[0] = t("2");
    r.on_change(
        &change(Op::Update, &rel, Some(old), Some(row(new))),
        TXN,
        &mut out,
    )
    .unwrap();
    assert!(!out.is_empty());
    let last = out.last().unwrap();
    assert!(!is_optional(&avro_field(&value_record(last), "name")));
    assert_eq!(r.take_notices(), Vec::<String>::new());
}

#[test]
fn enum_columns_are_debeziums_enum_with_their_labels() {
    let rel = with_moods(b'f');
    let mut r = catalog_router("avro", TABLE, &rel);
    let out = insert_row(&mut r, &rel, ann(t("Ann"), t("happy")));
    let value = value_record(&out[0]);
    let mood = avro_field(&value, "mood");
    assert_eq!(
        mood,
        serde_json::json!({
            "type": "string",
            "connect.version": 1,
            "connect.parameters": {"allowed": "happy,sad"},
            "connect.name": "io.debezium.data.Enum"
        }),
        "{value}"
    );
    // Arrays of enums: of required Enums, as Debezium 3.6.1 writes them
    // (tests/it/debezium_compat/avro.rs compares).
    let moods = avro_field(&value, "moods");
    assert_eq!(
        moods,
        serde_json::json!(["null", {"type": "array", "items": happy_sad()}])
    );
    // JSON Schema: the same name and parameter; NOT NULL columns outside
    // the key stay optional there (a registry checking BACKWARD refuses
    // making a required property `oneOf` null later, so the stream could
    // not widen it).
    let rel = with_moods(b'f');
    let mut r = catalog_router("json_schema", TABLE, &rel);
    let out = insert_row(&mut r, &rel, ann(t("Ann"), t("happy")));
    let text = &out[0].schemas.as_ref().unwrap().value.text;
    assert!(
        text.contains(
            r#""mood":{"connect.index":4,"oneOf":[{"type":"null"},{"connect.parameters":{"allowed":"happy,sad"},"connect.version":1,"title":"io.debezium.data.Enum","type":"string"}]}"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#""name":{"connect.index":1,"oneOf":[{"type":"null"},{"type":"string"}]}"#),
        "{text}"
    );
    // An enum array's items: Enums, optional (a required item made
    // optional would not register there).
    assert!(
        text.contains(
            r#""items":{"oneOf":[{"type":"null"},{"connect.parameters":{"allowed":"happy,sad"},"connect.version":1,"title":"io.debezium.data.Enum","type":"string"}]}"#
        ),
        "{text}"
    );
    assert_eq!(r.take_notices(), Vec::<String>::new());
}

#[test]
fn a_null_element_in_an_enum_array_widens_its_items_once_and_keeps_the_row() {
    let rel = with_moods(b'f');
    let mut r = catalog_router("avro", TABLE, &rel);
    let before = insert_row(&mut r, &rel, ann(t("Ann"), t("sad")));
    // A NULL array is no NULL element; an empty one neither.
    for moods in [Cell::Null, t("{}")] {
        let out = insert_row(&mut r, &rel, ann_moods(t("Ann"), t("sad"), moods));
        assert_eq!(out[0].schemas, before[0].schemas);
    }
    assert_eq!(r.take_notices(), Vec::<String>::new());
    let out = insert_row(
        &mut r,
        &rel,
        ann_moods(t("Bo"), t("sad"), t("{happy,NULL}")),
    );
    assert_eq!(out.len(), 1);
    let schemas = out[0].schemas.clone().unwrap();
    assert_ne!(schemas.value, before[0].schemas.as_ref().unwrap().value);
    let moods = avro_field(&value_record(&out[0]), "moods");
    assert_eq!(
        moods,
        serde_json::json!(["null", {"type": "array", "items": ["null", happy_sad()]}])
    );
    assert!(
        schemas
            .change
            .as_deref()
            .is_some_and(|c| c.contains("column moods holds an array with a NULL element")),
        "{:?}",
        schemas.change
    );
    // The row is written under the wider schema (the direct writer's
    // bytes are the transcoder's: tests/direct.rs).
    assert!(out[0].value.is_some());
    let notices = r.take_notices();
    assert_eq!(notices.len(), 1, "{notices:?}");
    // Said once: the next NULL element changes nothing.
    let again = insert_row(&mut r, &rel, ann_moods(t("Cy"), t("sad"), t("{NULL}")));
    assert_eq!(again[0].schemas.as_ref().unwrap().value, schemas.value);
    assert_eq!(r.take_notices(), Vec::<String>::new());
    // A label the catalog did not list, in an array: appended, as for an
    // enum column.
    let out = insert_row(&mut r, &rel, ann_moods(t("Di"), t("sad"), t("{ecstatic}")));
    let moods = avro_field(&value_record(&out[0]), "moods");
    assert_eq!(
        moods[1]["items"][1]["connect.parameters"]["allowed"], "happy,sad,ecstatic",
        "{moods}"
    );
    let notices = r.take_notices();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(notices[0].contains("ecstatic"), "{notices:?}");
}

#[test]
fn a_label_added_since_the_start_extends_the_list_and_keeps_the_row() {
    let rel = with_moods(b'f');
    let mut r = catalog_router("avro", TABLE, &rel);
    let before = insert_row(&mut r, &rel, ann(t("Ann"), t("sad")));
    let out = insert_row(&mut r, &rel, ann(t("Bo"), t("ecstatic")));
    assert_eq!(out.len(), 1);
    let schemas = out[0].schemas.clone().unwrap();
    assert_ne!(schemas.value, before[0].schemas.as_ref().unwrap().value);
    let mood = avro_field(&value_record(&out[0]), "mood");
    assert_eq!(mood["connect.parameters"]["allowed"], "happy,sad,ecstatic");
    assert!(
        schemas
            .change
            .as_deref()
            .is_some_and(|c| c.contains("ecstatic")),
        "{:?}",
        schemas.change
    );
    let notices = r.take_notices();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(notices[0].contains("ecstatic"), "{notices:?}");
    // Known from then on: the same schema, nothing more said.
    let again = insert_row(&mut r, &rel, ann(t("Cy"), t("ecstatic")));
    assert_eq!(again[0].schemas.as_ref().unwrap().value, schemas.value);
    assert_eq!(r.take_notices(), Vec::<String>::new());
    // NULL in a nullable enum column is no label.
    let mut rel2 = with_moods(b'f');
    rel2.oid = 8;
    rel2.name = "others".into();
    let table2 = "[[table]]\nname = \"public.others\"";
    let mut r = catalog_router("avro", table2, &rel2);
    let out = insert_row(&mut r, &rel2, ann(t("Ann"), Cell::Null));
    let mood = avro_field(&value_record(&out[0]), "mood");
    assert!(is_optional(&mood), "{mood}");
    assert_eq!(r.take_notices(), Vec::<String>::new());
}

#[test]
fn a_column_left_out_of_the_schemas_is_not_checked_against_them() {
    let rel = with_moods(b'f');
    let excluding = format!("{TABLE}\ncolumn_exclude_list = [\"name\", \"mood\"]");
    let mut r = catalog_router("avro", &excluding, &rel);
    let first = insert_row(&mut r, &rel, ann(t("Ann"), t("happy")));
    let out = insert_row(&mut r, &rel, ann(Cell::Null, t("ecstatic")));
    assert_eq!(out[0].schemas, first[0].schemas);
    assert_eq!(r.take_notices(), Vec::<String>::new());
}
