//! Table change events against the real services: `[[table]]` tables'
//! existing rows (snapshot, `op: "r"`) and their inserts, updates and
//! deletes (+ tombstones) arrive in Debezium's JSON envelope with the
//! expected topic, key and value — every mapped type and NULLs, a table
//! without a primary key keyed by `key_columns`, a REPLICA IDENTITY FULL
//! table, an unchanged TOASTed value, and a column added mid-stream; column
//! lists and masks; snapshot markers; unmapped types refused or written as
//! text; partitioned tables; and catalog names that are not topic names.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};

use support::row_load::{VersionWriters, holds_versions, verify_versions};
use support::*;

const CATCH_UP: Duration = Duration::from_secs(120);

/// Every mapped type, one column each (and a TOASTable `c_big`).
const TYPES_TABLE: &str = "CREATE TYPE mood AS ENUM ('happy', 'sad');
  CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
  CREATE TABLE types_t (
    id int4 PRIMARY KEY,
    c_int2 int2, c_int8 int8, c_bool bool, c_f4 real, c_f8 float8,
    c_num numeric(10,2), c_numv numeric, c_text text, c_varchar varchar(10),
    c_uuid uuid, c_json json, c_jsonb jsonb, c_bytea bytea, c_date date,
    c_time time, c_time3 time(3), c_ts timestamp, c_ts3 timestamp(3),
    c_tstz timestamptz, c_timetz timetz, c_interval interval, c_inet inet,
    c_cidr cidr, c_mac macaddr, c_int_arr int4[], c_text_arr text[], c_mood mood,
    c_moods mood[], c_pos posint, c_big text);
  ALTER TABLE types_t OWNER TO walrelay;
  CREATE TABLE nopk_t (code text NOT NULL, qty int4);
  ALTER TABLE nopk_t REPLICA IDENTITY FULL;
  ALTER TABLE nopk_t OWNER TO walrelay;
  CREATE TABLE full_t (id int4 PRIMARY KEY, v text);
  ALTER TABLE full_t REPLICA IDENTITY FULL;
  ALTER TABLE full_t OWNER TO walrelay;";

const ALL_TYPES_ROW: &str = "INSERT INTO types_t VALUES (2, -5, 9007199254740993, true, 1.5,
    -2.25, 12.50, 3.14159, 'héllo \"q\"', 'v', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
    '{\"a\": 1}', '{\"b\": [1, 2]}', '\\x0102ff', '2024-01-01', '13:45:10.5', '13:45:10.5',
    '2024-01-01 00:00:00.123456', '2024-01-01 00:00:00.123', '2024-01-01 05:30:00.5+05:30',
    '10:00:00+02', '1 year 2 mons 3 days 04:05:06.5', '192.168.0.1/24', '10.0.0.0/8',
    '08:00:2b:01:02:03', '{1,2,NULL}', '{a,\"b c\"}', 'happy', '{happy,sad}', 7, 'small')";

/// The `after` of [`ALL_TYPES_ROW`], as Debezium writes it (see
/// src/router/debezium/tests.rs for where each form comes from).
fn all_types_after() -> Value {
    json!({
        "id": 2, "c_int2": -5, "c_int8": 9007199254740993_i64, "c_bool": true,
        "c_f4": 1.5, "c_f8": -2.25, "c_num": "BOI=",
        "c_numv": {"scale": 5, "value": "BMsv"},
        "c_text": "héllo \"q\"", "c_varchar": "v",
        "c_uuid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "c_json": "{\"a\": 1}", "c_jsonb": "{\"b\": [1, 2]}", "c_bytea": "AQL/",
        "c_date": 19723, "c_time": 49_510_500_000_i64, "c_time3": 49_510_500,
        "c_ts": 1_704_067_200_123_456_i64, "c_ts3": 1_704_067_200_123_i64,
        "c_tstz": "2024-01-01T00:00:00.500000Z", "c_timetz": "08:00:00Z",
        "c_interval": 37_091_106_500_000_i64, "c_inet": "192.168.0.1/24",
        "c_cidr": "10.0.0.0/8", "c_mac": "08:00:2b:01:02:03",
        "c_int_arr": [1, 2, null], "c_text_arr": ["a", "b c"],
        // Enums as strings, domains as their base type.
        "c_mood": "happy", "c_moods": ["happy", "sad"], "c_pos": 7, "c_big": "small"
    })
}

/// A row of `types_t` with only `id` set (and `extra` columns added later).
fn nulls_row(id: i64, extra: &[(&str, Value)]) -> Value {
    let mut row = all_types_after();
    for (_, v) in row.as_object_mut().unwrap().iter_mut() {
        *v = Value::Null;
    }
    row["id"] = json!(id);
    for (k, v) in extra {
        row[*k] = v.clone();
    }
    row
}

/// One consumed record: key and value parsed, headers as text.
#[derive(Debug, Clone)]
struct Event {
    key: Option<Value>,
    value: Option<Value>,
    /// The value as sent, to check the order of its fields.
    raw: String,
    event_id: String,
    lsn: String,
}

fn read(topic: &str) -> Vec<Event> {
    let mut got = consume_to_end(&[topic]);
    got.sort_by_key(|r| (r.partition, r.offset));
    got.iter()
        .map(|r| Event {
            key: r.key.as_ref().map(|k| serde_json::from_slice(k).unwrap()),
            value: r.value.as_ref().map(|v| serde_json::from_slice(v).unwrap()),
            raw: String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned(),
            event_id: r.header_str("walrelay.event_id").unwrap_or_default(),
            lsn: r.header_str("walrelay.lsn").unwrap_or_default(),
        })
        .collect()
}

/// Waits until `topic` holds `n` records; returns them in partition order.
async fn wait_records(topic: &str, n: usize) -> Vec<Event> {
    wait_for(&format!("{n} records in {topic}"), CATCH_UP, || {
        let topic = topic.to_owned();
        async move {
            let got = read(&topic);
            (got.len() >= n).then_some(got)
        }
    })
    .await
}

/// `source.snapshot` of snapshot rows, as Debezium 3.6 writes it.
const SNAPSHOT_MARKERS: [&str; 5] = [
    "first",
    "first_in_data_collection",
    "true",
    "last_in_data_collection",
    "last",
];

/// A connector config for `db` ([`connector_config`]) with topics
/// `<prefix>.<schema>.<table>` when `prefix` is given, then `rest` (the
/// `[[table]]` sections, and any other).
fn table_config(db: &TestDb, names: &Names, prefix: Option<&str>, rest: &str) -> String {
    let defaults = prefix.map_or(String::new(), |p| {
        format!("[table_defaults]\ntopic_prefix = \"{p}\"\n")
    });
    connector_config(db, names, &format!("{defaults}{rest}"))
}

/// Checks the envelope around `before`/`after` and returns the value.
fn check_envelope(
    e: &Event,
    prefix: &str,
    db: &str,
    table: &str,
    op: &str,
    before: &Value,
    after: &Value,
) {
    let v = e
        .value
        .as_ref()
        .unwrap_or_else(|| panic!("{e:?} is a tombstone"));
    assert_eq!(v["op"], json!(op), "{v}");
    assert_eq!(&v["before"], before, "before of {op} in {table}");
    assert_eq!(&v["after"], after, "after of {op} in {table}");
    assert_eq!(v["transaction"], Value::Null);
    let s = &v["source"];
    assert_eq!(s["connector"], json!("postgresql"));
    assert_eq!(s["name"], json!(prefix));
    assert_eq!(s["db"], json!(db));
    assert_eq!(s["schema"], json!("public"));
    assert_eq!(s["table"], json!(table));
    assert_eq!(s["xmin"], Value::Null);
    assert!(s["ts_ms"].as_i64().unwrap() > 1_700_000_000_000, "{s}");
    assert_eq!(v["ts_ms"], s["ts_ms"]);
    assert!(s["lsn"].as_u64().unwrap() > 0);
    // Debezium's field order (the JSON converter writes struct fields in
    // schema order): the envelope's, then source's.
    let order = [
        "{\"before\":",
        ",\"after\":",
        ",\"source\":{\"version\":",
        ",\"connector\":",
        ",\"name\":",
        ",\"ts_ms\":",
        ",\"snapshot\":",
        ",\"db\":",
        ",\"sequence\":",
        ",\"schema\":",
        ",\"table\":",
        ",\"txId\":",
        ",\"lsn\":",
        ",\"xmin\":null},\"op\":",
        ",\"ts_ms\":",
        ",\"transaction\":null}",
    ];
    let mut at = 0;
    for field in order {
        let found = e.raw[at..]
            .find(field)
            .unwrap_or_else(|| panic!("{field} not after position {at} in {}", e.raw));
        at += found + field.len();
    }
    if op == "r" {
        // Which marker depends on the row's place (see
        // snapshot_rows_carry_debeziums_markers).
        assert!(
            SNAPSHOT_MARKERS.contains(&s["snapshot"].as_str().unwrap_or("")),
            "{s}"
        );
        assert_eq!(s["txId"], Value::Null);
        assert!(e.event_id.contains(":snapshot:"), "{}", e.event_id);
    } else {
        assert_eq!(s["snapshot"], json!("false"));
        assert!(s["txId"].as_u64().unwrap() > 0);
        // walrelay.event_id = <commit LSN>:<index>; walrelay.lsn = commit LSN.
        assert!(
            e.event_id.starts_with(&format!("{}:", e.lsn)),
            "{} vs {}",
            e.event_id,
            e.lsn
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_changes_arrive_as_debezium_change_events() {
    require_kafka();
    let db = TestDb::new("wr_table_events").await;
    let names = Names::new("wr_te");
    db.client.batch_execute(TYPES_TABLE).await.expect("tables");
    // Existing rows: the snapshot reads them.
    db.client
        .batch_execute(
            "INSERT INTO types_t (id) VALUES (1);
             INSERT INTO nopk_t VALUES ('pre', 0);
             INSERT INTO full_t VALUES (1, 'x');",
        )
        .await
        .expect("prefill");
    let prefix = format!("{}_cdc", names.connector);
    let config = table_config(
        &db,
        &names,
        Some(&prefix),
        r#"[[table]]
name = "public.nopk_t"
key_columns = ["code"]
[[table]]
name = "public.*"
"#,
    );
    let mut relay = RelayProcess::start(&config, &[]);
    let types_topic = format!("{prefix}.public.types_t");
    let nopk_topic = format!("{prefix}.public.nopk_t");
    let full_topic = format!("{prefix}.public.full_t");

    // 1. The snapshot: one read event per existing row.
    let snap = wait_records(&types_topic, 1).await;
    check_envelope(
        &snap[0],
        &prefix,
        &db.name,
        "types_t",
        "r",
        &Value::Null,
        &nulls_row(1, &[]),
    );
    assert_eq!(snap[0].key, Some(json!({"id": 1})));
    let snap = wait_records(&nopk_topic, 1).await;
    check_envelope(
        &snap[0],
        &prefix,
        &db.name,
        "nopk_t",
        "r",
        &Value::Null,
        &json!({"code": "pre", "qty": 0}),
    );
    assert_eq!(snap[0].key, Some(json!({"code": "pre"})));
    let snap = wait_records(&full_topic, 1).await;
    check_envelope(
        &snap[0],
        &prefix,
        &db.name,
        "full_t",
        "r",
        &Value::Null,
        &json!({"id": 1, "v": "x"}),
    );
    relay.wait_log("snapshot completed", CATCH_UP).await;

    // 2. Streamed changes.
    db.client
        .batch_execute(&format!(
            "{ALL_TYPES_ROW};
             INSERT INTO types_t (id) VALUES (3);
             INSERT INTO types_t (id, c_big) VALUES
               (5, (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 400) g));
             UPDATE types_t SET c_text = 'changed' WHERE id = 2;
             UPDATE types_t SET c_text = 'toast stays' WHERE id = 5;
             DELETE FROM types_t WHERE id = 3;
             INSERT INTO nopk_t VALUES ('a', 1);
             UPDATE nopk_t SET qty = 2 WHERE code = 'a';
             DELETE FROM nopk_t WHERE code = 'a';
             UPDATE full_t SET v = 'y' WHERE id = 1;
             ALTER TABLE types_t ADD COLUMN extra int4 DEFAULT 7;
             INSERT INTO types_t (id) VALUES (4);"
        ))
        .await
        .expect("changes");

    // types_t: r(1), c(2), c(3), c(5), u(2), u(5), d(3), tombstone(3), c(4).
    let got = wait_records(&types_topic, 9).await;
    assert_eq!(got.len(), 9, "{got:#?}");
    let of = |id: i64| -> Vec<&Event> {
        got.iter()
            .filter(|e| e.key == Some(json!({"id": id})))
            .collect()
    };
    let (db_name, p) = (db.name.as_str(), prefix.as_str());
    let two = of(2);
    assert_eq!(two.len(), 2);
    check_envelope(
        two[0],
        p,
        db_name,
        "types_t",
        "c",
        &Value::Null,
        &all_types_after(),
    );
    let mut changed = all_types_after();
    changed["c_text"] = json!("changed");
    // REPLICA IDENTITY DEFAULT: an update carries no old row.
    check_envelope(two[1], p, db_name, "types_t", "u", &Value::Null, &changed);

    let three = of(3);
    assert_eq!(three.len(), 3, "{three:#?}");
    check_envelope(
        three[0],
        p,
        db_name,
        "types_t",
        "c",
        &Value::Null,
        &nulls_row(3, &[]),
    );
    // A delete's before holds the key columns (DEFAULT identity), then a
    // tombstone with the same key follows.
    check_envelope(
        three[1],
        p,
        db_name,
        "types_t",
        "d",
        &nulls_row(3, &[]),
        &Value::Null,
    );
    assert_eq!(three[2].value, None, "tombstone");
    assert_eq!(
        three[2].event_id,
        format!("{}:tombstone", three[1].event_id)
    );

    let five = of(5);
    assert_eq!(five.len(), 2);
    let big = five[0].value.as_ref().unwrap()["after"]["c_big"]
        .as_str()
        .unwrap()
        .len();
    assert_eq!(big, 400 * 32);
    // The TOASTed c_big was not changed, so PostgreSQL did not send it.
    let after = &five[1].value.as_ref().unwrap()["after"];
    assert_eq!(after["c_big"], json!("__debezium_unavailable_value"));
    assert_eq!(after["c_text"], json!("toast stays"));

    // The column added mid-stream is in the records from then on.
    let four = of(4);
    assert_eq!(four.len(), 1);
    check_envelope(
        four[0],
        p,
        db_name,
        "types_t",
        "c",
        &Value::Null,
        &nulls_row(4, &[("extra", json!(7))]),
    );

    // nopk_t (no primary key, key_columns, REPLICA IDENTITY FULL):
    // r(pre), c, u, d, tombstone.
    let got = wait_records(&nopk_topic, 5).await;
    assert_eq!(got.len(), 5, "{got:#?}");
    let a: Vec<&Event> = got
        .iter()
        .filter(|e| e.key == Some(json!({"code": "a"})))
        .collect();
    assert_eq!(a.len(), 4, "{a:#?}");
    check_envelope(
        a[0],
        p,
        db_name,
        "nopk_t",
        "c",
        &Value::Null,
        &json!({"code": "a", "qty": 1}),
    );
    check_envelope(
        a[1],
        p,
        db_name,
        "nopk_t",
        "u",
        &json!({"code": "a", "qty": 1}),
        &json!({"code": "a", "qty": 2}),
    );
    check_envelope(
        a[2],
        p,
        db_name,
        "nopk_t",
        "d",
        &json!({"code": "a", "qty": 2}),
        &Value::Null,
    );
    assert_eq!(a[3].value, None);

    // full_t (REPLICA IDENTITY FULL with a primary key): before is the
    // whole old row, the key the primary key.
    let got = wait_records(&full_topic, 2).await;
    assert_eq!(got.len(), 2, "{got:#?}");
    assert_eq!(got[1].key, Some(json!({"id": 1})));
    check_envelope(
        &got[1],
        p,
        db_name,
        "full_t",
        "u",
        &json!({"id": 1, "v": "x"}),
        &json!({"id": 1, "v": "y"}),
    );

    assert_eq!(relay.stop().code(), Some(0), "{}", relay.log());
}

/// `walrelay check`: exit code and stdout.
fn check(path: &std::path::Path) -> (Option<i32>, String) {
    let out = std::process::Command::new(walrelay_bin())
        .args(["check", "--config"])
        .arg(path)
        .output()
        .expect("run walrelay check");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmapped_column_type_is_refused_by_check_and_run_naming_it() {
    require_kafka();
    let db = TestDb::new("wr_table_unmapped").await;
    let names = Names::new("wr_tu");
    db.client
        .batch_execute(
            "CREATE TABLE priced (id int4 PRIMARY KEY, price circle, qty int4, tags box);
             ALTER TABLE priced OWNER TO walrelay;
             CREATE TABLE keyless (a text);
             ALTER TABLE keyless OWNER TO walrelay;
             CREATE TABLE shapes (id int4 PRIMARY KEY, spot lseg);
             ALTER TABLE shapes OWNER TO walrelay;",
        )
        .await
        .expect("tables");
    let config = table_config(
        &db,
        &names,
        None,
        r#"[[table]]
name = "public.keyless"
[[table]]
name = "public.priced"
[[table]]
name = "public.shapes"
"#,
    );
    // Every such column of every table is named, with its type, and the
    // way out (issue 27: not only the first table's).
    let needle = "columns public.priced.price (circle), public.priced.tags (box), \
                  public.shapes.spot (lseg) have types that table events do not map to a \
                  Debezium representation";
    let fix = "set unmapped_types = \"text\"";
    let dir = std::env::temp_dir().join(unique("walrelay_test"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("walrelay.toml");
    std::fs::write(&path, &config).unwrap();
    let (code, report) = check(&path);
    assert_eq!(code, Some(1), "{report}");
    assert!(report.contains(needle), "{report}");
    assert!(report.contains(fix), "{report}");
    let mut run = RelayProcess::start_with(&path, &[]);
    let log = run.expect_exit(1, Duration::from_secs(60));
    assert!(log.contains(needle), "{log}");

    // Without the unmapped table, check lists each captured table and its key.
    std::fs::write(
        &path,
        config
            .replace("[[table]]\nname = \"public.priced\"\n", "")
            .replace("[[table]]\nname = \"public.shapes\"\n", ""),
    )
    .unwrap();
    let (code, report) = check(&path);
    assert!(
        report.contains("table public.keyless") && report.contains("no primary key: null keys"),
        "{report}"
    );
    // ... and its replica identity, which decides what `before` holds.
    assert!(
        report.contains("no primary key: null keys (set key_columns), REPLICA IDENTITY DEFAULT"),
        "{report}"
    );
    // A new connector snapshots, and a table without any key has no order
    // to be read in: check and run refuse it alike, before the slot exists.
    let needle = "table public.keyless has no primary key and no key_columns";
    assert_eq!(code, Some(1), "{report}");
    assert!(report.contains(needle), "{report}");
    let mut run = RelayProcess::start_with(&path, &[]);
    let log = run.expect_exit(1, Duration::from_secs(60));
    assert!(log.contains(needle), "{log}");
    assert_eq!(
        db.confirmed_flush(&names.slot).await,
        None,
        "no slot was created"
    );

    // Left out of before/after, a column of an unmapped type is never
    // written: the table is captured without it ...
    let priced = config
        .replace("[[table]]\nname = \"public.keyless\"\n", "")
        .replace("[[table]]\nname = \"public.shapes\"\n", "")
        .replace(
            "name = \"public.priced\"\n",
            "name = \"public.priced\"\ncolumn_exclude_list = [\"price\", \"tags\"]\n",
        );
    std::fs::write(&path, &priced).unwrap();
    let (code, report) = check(&path);
    assert_eq!(code, Some(0), "{report}");
    // ... unless it is a key column, which the key always writes (deletes
    // skipped: a key outside the replica identity is refused otherwise).
    std::fs::write(
        &path,
        priced.replace(
            "column_exclude_list",
            "key_columns = [\"price\"]\nskipped_operations = \"d\"\ncolumn_exclude_list",
        ),
    )
    .unwrap();
    let (code, report) = check(&path);
    assert_eq!(code, Some(1), "{report}");
    assert!(
        report.contains("column public.priced.price (circle) has a type"),
        "{report}"
    );
    db.client
        .batch_execute("INSERT INTO priced VALUES (1, '<(0,0),2.5>', 3, '(1,1),(0,0)')")
        .await
        .unwrap();
    let mut relay = RelayProcess::start(&priced, &[]);
    relay.wait_log("snapshot completed", CATCH_UP).await;
    db.client
        .batch_execute("INSERT INTO priced VALUES (2, '<(0,0),4>', 5, '(2,2),(0,0)')")
        .await
        .unwrap();
    let got = wait_records(&format!("{}.public.priced", names.connector), 2).await;
    let mut after: Vec<&Value> = got
        .iter()
        .map(|e| &e.value.as_ref().unwrap()["after"])
        .collect();
    after.sort_by_key(|a| a["id"].as_i64());
    assert_eq!(
        after,
        [&json!({"id": 1, "qty": 3}), &json!({"id": 2, "qty": 5})]
    );
    assert_eq!(relay.stop().code(), Some(0), "{}", relay.log());
}

/// Debezium's column options and `skipped.operations` against the real
/// services: an excluded column is absent and masked columns carry
/// Debezium's exact output (hashes computed with Java 17 running
/// Debezium's `HashValueConverter` steps; v2 ones with `sha256sum`) in the
/// snapshot and in streamed inserts, updates (both rows under REPLICA
/// IDENTITY FULL) and deletes, the key unmasked; one TRUNCATE of three
/// tables makes one keyless `op: "t"` record for each table whose
/// `skipped_operations` is `"none"` and none for the default (`"t"`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn columns_are_filtered_and_masked_and_truncates_published_when_not_skipped() {
    require_kafka();
    let db = TestDb::new("wr_table_masks").await;
    let names = Names::new("wr_tm");
    db.client
        .batch_execute(
            "CREATE TABLE people (id int4 PRIMARY KEY, email text, phone varchar(20),
               ssn text, bio text, code varchar(10), age int4);
             ALTER TABLE people REPLICA IDENTITY FULL;
             ALTER TABLE people OWNER TO walrelay;
             CREATE TABLE trunc_a (id int4 PRIMARY KEY);
             ALTER TABLE trunc_a OWNER TO walrelay;
             CREATE TABLE trunc_b (id int4 PRIMARY KEY);
             ALTER TABLE trunc_b OWNER TO walrelay;
             CREATE TABLE trunc_keep (id int4 PRIMARY KEY);
             ALTER TABLE trunc_keep OWNER TO walrelay;
             INSERT INTO people VALUES
               (1, 'ann@example.com', '555-0100', '123-45-6789', 'Loves hiking', 'A1', 30);",
        )
        .await
        .expect("tables");
    let dir = std::env::temp_dir().join(unique("walrelay_test"));
    std::fs::create_dir_all(&dir).unwrap();
    let salt_file = dir.join("mask_salt");
    std::fs::write(&salt_file, "pepper\n").unwrap();
    let prefix = format!("{}_cdc", names.connector);
    let config = table_config(
        &db,
        &names,
        Some(&prefix),
        &format!(
            r#"[[table]]
name = "public.people"
column_exclude_list = ["ssn"]
[[table.column_mask]]
columns = ["email"]
hash = "SHA-256"
salt = "${{file:{salt}}}"
[[table.column_mask]]
columns = ["code"]
hash = "SHA-256"
salt = "${{file:{salt}}}"
hash_version = 2
[[table.column_mask]]
columns = ["phone"]
with_chars = 5
[[table.column_mask]]
columns = ["bio"]
truncate_to_chars = 4
[[table]]
name = "public.trunc_a"
skipped_operations = "none"
[[table]]
name = "public.trunc_b"
skipped_operations = "none"
[[table]]
name = "public.trunc_keep"
"#,
            salt = salt_file.display()
        ),
    );
    let path = dir.join("walrelay.toml");
    std::fs::write(&path, &config).unwrap();
    let mut relay = RelayProcess::start_with(&path, &[]);
    let people = format!("{prefix}.public.people");
    let (db_name, p) = (db.name.as_str(), prefix.as_str());

    // SHA-256 of "pepper" + the Java serialization of the e-mail (v1), of
    // "pepper" + the code's UTF-8 bytes cut to varchar(10)'s 10 (v2).
    let ann = json!({"id": 1,
        "email": "74099eb3686f2b3fe76fc316b773817fb57a7f62b6920e47c3fe2d213b357221",
        "phone": "*****", "bio": "Love", "code": "44da615553", "age": 30});
    let snap = wait_records(&people, 1).await;
    check_envelope(&snap[0], p, db_name, "people", "r", &Value::Null, &ann);
    assert_eq!(snap[0].key, Some(json!({"id": 1})));
    relay.wait_log("snapshot completed", CATCH_UP).await;

    db.client
        .batch_execute(
            "INSERT INTO people VALUES (2, 'bob@example.com', NULL, '987', 'Hi', 'B2', NULL);
             UPDATE people SET email = 'carol@example.com', code = 'C3' WHERE id = 2;
             DELETE FROM people WHERE id = 1;",
        )
        .await
        .expect("changes");
    // r(1), c(2), u(2), d(1), tombstone(1).
    let got = wait_records(&people, 5).await;
    assert_eq!(got.len(), 5, "{got:#?}");
    let bob = json!({"id": 2,
        "email": "be79fb1134b9719532146e4f821005050edeb5c8d866166334cb47883b829ee6",
        "phone": "*****", "bio": "Hi", "code": "9b870f867a", "age": null});
    let carol = json!({"id": 2,
        "email": "30f8f719098bbe41d73a76e293ccd4bd6e35c204b2dd980acb4045a31c571b42",
        "phone": "*****", "bio": "Hi", "code": "4b7c624933", "age": null});
    let two: Vec<&Event> = got
        .iter()
        .filter(|e| e.key == Some(json!({"id": 2})))
        .collect();
    assert_eq!(two.len(), 2, "{two:#?}");
    check_envelope(two[0], p, db_name, "people", "c", &Value::Null, &bob);
    check_envelope(two[1], p, db_name, "people", "u", &bob, &carol);
    let one: Vec<&Event> = got
        .iter()
        .filter(|e| e.key == Some(json!({"id": 1})))
        .collect();
    assert_eq!(one.len(), 3, "{one:#?}");
    check_envelope(one[1], p, db_name, "people", "d", &ann, &Value::Null);
    assert_eq!(one[2].value, None, "tombstone");
    for e in &got {
        assert!(!e.raw.contains("ssn"), "{}", e.raw);
        assert!(!e.raw.contains("example.com"), "{}", e.raw);
    }

    // One TRUNCATE of three tables, between two inserts of one transaction.
    db.client
        .batch_execute("INSERT INTO trunc_a VALUES (1); INSERT INTO trunc_keep VALUES (1);")
        .await
        .expect("inserts");
    db.client
        .batch_execute(
            "BEGIN;
             INSERT INTO trunc_keep VALUES (5);
             TRUNCATE trunc_a, trunc_b, trunc_keep;
             INSERT INTO trunc_b VALUES (2);
             COMMIT;",
        )
        .await
        .expect("truncate");
    let a = wait_records(&format!("{prefix}.public.trunc_a"), 2).await;
    let b = wait_records(&format!("{prefix}.public.trunc_b"), 2).await;
    wait_records(&format!("{prefix}.public.trunc_keep"), 2).await;
    // Stopping waits for every record's acknowledgement: nothing else
    // (no truncate of trunc_keep) can arrive after this.
    assert_eq!(relay.stop().code(), Some(0), "{}", relay.log());
    assert_eq!(a.len(), 2, "{a:#?}");
    assert_eq!(b.len(), 2, "{b:#?}");
    // A truncate has a null key, so it may land on any partition (as with
    // Debezium): pick the records by op, not by position.
    let op = |e: &Event| e.value.as_ref().unwrap()["op"].as_str().unwrap().to_owned();
    let find = |events: &[Event], wanted: &str| -> Event {
        let found: Vec<&Event> = events.iter().filter(|e| op(e) == wanted).collect();
        assert_eq!(found.len(), 1, "one {wanted} in {events:#?}");
        found[0].clone()
    };
    let (ta, tb) = (&find(&a, "t"), &find(&b, "t"));
    for (t, table) in [(ta, "trunc_a"), (tb, "trunc_b")] {
        check_envelope(t, p, db_name, table, "t", &Value::Null, &Value::Null);
        assert_eq!(t.key, None, "a truncate has a null key");
    }
    let b_insert = find(&b, "c");
    check_envelope(
        &b_insert,
        p,
        db_name,
        "trunc_b",
        "c",
        &Value::Null,
        &json!({"id": 2}),
    );
    // Each truncated table is a change of its own in the transaction:
    // insert #0, the three truncated tables #1..#3, insert #4.
    assert_eq!(ta.lsn, tb.lsn);
    let index = |e: &Event| {
        e.event_id
            .rsplit(':')
            .next()
            .unwrap()
            .parse::<u32>()
            .unwrap()
    };
    let (ia, ib) = (index(ta), index(tb));
    assert!(
        ia != ib && (1..=3).contains(&ia) && (1..=3).contains(&ib),
        "{ia} {ib}"
    );
    assert_eq!(b_insert.event_id, format!("{}:4", tb.lsn));
    let keep = read(&format!("{prefix}.public.trunc_keep"));
    assert_eq!(
        keep.len(),
        2,
        "skipped_operations = \"t\" (the default): {keep:#?}"
    );
    for e in &keep {
        assert_eq!(op(e), "c");
    }
    assert!(
        keep.iter().any(|e| e.event_id == format!("{}:0", tb.lsn)),
        "{keep:#?}"
    );
    let log = relay.log();
    assert!(!log.contains("pepper"), "the salt reached the log");
}

/// A column list naming a column the table lacks, and a mask on a column
/// that is not text-like, are refused by `check` and `run` alike, naming
/// the key, table, column (and type), before the slot is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn column_lists_and_masks_are_checked_against_the_table_at_start() {
    require_kafka();
    let db = TestDb::new("wr_table_colcheck").await;
    let names = Names::new("wr_tc");
    db.client
        .batch_execute(
            "CREATE TABLE accounts (id int4 PRIMARY KEY, email text, balance int4);
             ALTER TABLE accounts OWNER TO walrelay;",
        )
        .await
        .expect("tables");
    let config = |columns: &str| {
        table_config(
            &db,
            &names,
            None,
            &format!(
                r#"[[table]]
name = "public.accounts"
{columns}
"#
            ),
        )
    };
    let dir = std::env::temp_dir().join(unique("walrelay_test"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("walrelay.toml");
    for (columns, needles) in [
        (
            "column_exclude_list = [\"email\", \"ssn\"]",
            vec![
                "table[0].column_exclude_list[1]",
                "\"ssn\"",
                "public.accounts",
            ],
        ),
        (
            "[[table.column_mask]]\ncolumns = [\"balance\"]\nwith_chars = 4",
            vec![
                "column balance of table public.accounts",
                "int4",
                "not text-like",
            ],
        ),
    ] {
        std::fs::write(&path, config(columns)).unwrap();
        let (code, report) = check(&path);
        assert_eq!(code, Some(1), "{report}");
        for needle in &needles {
            assert!(report.contains(needle), "{needle} in {report}");
        }
        let mut run = RelayProcess::start_with(&path, &[]);
        let log = run.expect_exit(1, Duration::from_secs(60));
        for needle in &needles {
            assert!(log.contains(needle), "{needle} in {log}");
        }
    }
    assert_eq!(
        db.confirmed_flush(&names.slot).await,
        None,
        "no slot was created"
    );
    // Fixed, check passes the column rules.
    std::fs::write(
        &path,
        config("column_exclude_list = [\"balance\"]\n[[table.column_mask]]\ncolumns = [\"email\"]\nwith_chars = 4"),
    )
    .unwrap();
    let (code, report) = check(&path);
    assert!(!report.contains("column_"), "{report}");
    assert!(
        report.contains(
            "key id, REPLICA IDENTITY DEFAULT (before: the key columns of a delete, none for an \
             update); leaves out balance; masks email (4 *)"
        ),
        "{report}"
    );
    assert_eq!(code, Some(0), "{report}");
    // A masked key column is said to stay in the clear in the key (deletes
    // skipped: a key outside the replica identity is refused otherwise).
    std::fs::write(
        &path,
        config("key_columns = [\"email\"]\nskipped_operations = \"d\"\n[[table.column_mask]]\ncolumns = [\"email\"]\nwith_chars = 4"),
    )
    .unwrap();
    let (_, report) = check(&path);
    assert!(
        report.contains("key column(s) email are masked or left out"),
        "{report}"
    );
}

/// `source.snapshot` of snapshot rows as Debezium 3.6 writes it: `"first"`
/// on the snapshot's first row, `"first_in_data_collection"` and
/// `"last_in_data_collection"` on each table's first and last rows (a
/// table's only row is its last), `"last"` on the snapshot's last row,
/// `"true"` between them — with one snapshot reader and with three, whose
/// tables' rows interleave. An empty table changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_rows_carry_debeziums_markers() {
    require_kafka();
    let db = TestDb::new("wr_table_marks").await;
    let rows = [("many_t", 40), ("one_t", 1), ("none_t", 0), ("two_t", 2)];
    for (table, n) in rows {
        db.client
            .batch_execute(&format!(
                "CREATE TABLE {table} (id int4 PRIMARY KEY);
                 ALTER TABLE {table} OWNER TO walrelay;
                 INSERT INTO {table} SELECT generate_series(1, {n});"
            ))
            .await
            .expect("tables");
    }
    for parallelism in [1, 3] {
        let names = Names::new("wr_mk");
        let prefix = format!("{}_cdc", names.connector);
        let config = table_config(
            &db,
            &names,
            Some(&prefix),
            &format!(
                r#"[snapshot]
parallelism = {parallelism}
fetch_rows = 7
[[table]]
name = "public.*"
"#
            ),
        );
        let mut relay = RelayProcess::start(&config, &[]);
        relay.wait_log("snapshot completed", CATCH_UP).await;
        // (row number in the snapshot, table, marker) of every record.
        let mut all = Vec::new();
        for (table, n) in rows {
            let got = read(&format!("{prefix}.public.{table}"));
            assert_eq!(got.len(), n, "{table} with parallelism {parallelism}");
            for e in got {
                let v = e.value.as_ref().expect("no tombstones in a snapshot");
                let index: u64 = e
                    .event_id
                    .rsplit(':')
                    .next()
                    .and_then(|i| i.parse().ok())
                    .unwrap_or_else(|| panic!("event id {}", e.event_id));
                let marker = v["source"]["snapshot"].as_str().unwrap().to_owned();
                all.push((index, table, marker));
            }
        }
        all.sort();
        let with = |m: &str| all.iter().filter(|r| r.2 == m).collect::<Vec<_>>();
        let (first, last) = (with("first"), with("last"));
        assert_eq!(first.len(), 1, "one first row: {all:?}");
        assert_eq!(last.len(), 1, "one last row: {all:?}");
        // The first row read is the snapshot's first.
        assert_eq!(first[0], &all[0], "{all:?}");
        for (table, n) in rows.iter().filter(|r| r.1 > 0) {
            let marks: Vec<&str> = all
                .iter()
                .filter(|r| r.1 == *table)
                .map(|r| r.2.as_str())
                .collect();
            let is_first = first[0].1 == *table;
            let is_last = last[0].1 == *table;
            // Debezium's precedence: the snapshot's last, its first, the
            // table's last, the table's first.
            let mut want = vec!["true"; *n];
            want[0] = "first_in_data_collection";
            want[n - 1] = "last_in_data_collection";
            if is_first {
                want[0] = "first";
            }
            if is_last {
                want[n - 1] = "last";
            }
            assert_eq!(
                marks, want,
                "{table} with parallelism {parallelism}: {all:?}"
            );
        }
        if parallelism == 1 {
            // One reader reads the tables one after another: the last row
            // read is the snapshot's last.
            assert_eq!(last[0], all.last().unwrap(), "{all:?}");
        }
        assert_eq!(relay.stop().code(), Some(0), "{}", relay.log());
    }
}

/// Types the table events do not map (Debezium 3.6.1 leaves them out),
/// one column each: `money[]`, geometry other than `point`, a multirange,
/// a composite, `interval[]`, `tsquery`, and a domain over one of them;
/// `c_doc` (`tsvector`, mapped: its text) is TOASTed.
const ODD_TABLE: &str = "CREATE TYPE pair AS (a int4, b text);
  CREATE DOMAIN cash AS circle;
  CREATE TABLE odd_t (id int4 PRIMARY KEY, c_money money[], c_bit line, c_varbit lseg,
    c_point polygon, c_box box, c_range int4multirange, c_tsv circle, c_pair pair,
    c_nums interval[], c_grid tsquery, c_cash cash, c_int int4, c_doc tsvector);
  ALTER TABLE odd_t ALTER COLUMN c_doc SET STORAGE EXTERNAL;
  ALTER TABLE odd_t OWNER TO walrelay;";

/// The columns of [`ODD_TABLE`] written as their text form.
const ODD_COLUMNS: [&str; 12] = [
    "c_money", "c_bit", "c_varbit", "c_point", "c_box", "c_range", "c_tsv", "c_pair", "c_nums",
    "c_grid", "c_cash", "c_doc",
];

/// Row `id` of [`ODD_TABLE`] as `after` should hold it: every unmapped
/// column as PostgreSQL's text form of its value (`::text`), read from the
/// database now.
async fn odd_after(db: &TestDb, id: i32) -> Value {
    let fields: Vec<String> = ODD_COLUMNS
        .iter()
        .map(|c| format!("'{c}', {c}::text"))
        .collect();
    let row = db
        .client
        .query_one(
            &format!(
                "SELECT json_build_object('id', id, 'c_int', c_int, {})::text FROM odd_t \
                 WHERE id = $1",
                fields.join(", ")
            ),
            &[&id],
        )
        .await
        .expect("row");
    serde_json::from_str(row.get::<_, &str>(0)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmapped_types_text_writes_each_value_as_its_text_form() {
    require_kafka();
    let db = TestDb::new("wr_table_astext").await;
    db.client.batch_execute(ODD_TABLE).await.expect("table");
    let row = |id: i32, doc: &str| {
        format!(
            "INSERT INTO odd_t VALUES ({id}, '{{1234.5}}', '{{1,-1,0}}', '[(0,0),(1,1)]',
               '((1.5,-2),(0,0),(1,1))', '((0,0),(1,1))', '{{[3,7)}}', '<(1,2),3>',
               ROW({id}, 'x \"y\"'), '{{\"1 day\",NULL}}', 'a & b', '<(0,0),12>', {id}, {doc})"
        )
    };
    // A document big enough to be stored out of line.
    let doc = "(SELECT string_agg(md5(g::text), ' ') FROM generate_series(1, 300) g)::tsvector";
    db.client
        .batch_execute(&format!(
            "{}; {}; INSERT INTO odd_t (id) VALUES (3);",
            row(1, doc),
            row(2, "'small doc'")
        ))
        .await
        .expect("rows");
    let names = Names::new("wr_tx");
    let prefix = format!("{}_cdc", names.connector);
    let config = table_config(
        &db,
        &names,
        Some(&prefix),
        r#"[[table]]
name = "public.odd_t"
unmapped_types = "text"
"#,
    );
    let dir = std::env::temp_dir().join(unique("walrelay_test"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("walrelay.toml");
    std::fs::write(&path, &config).unwrap();
    // check lists the columns written as text, with their types.
    let (_, report) = check(&path);
    assert!(
        report.contains(
            "written as their text form (unmapped_types = \"text\"): c_money (money[]), c_bit \
             (line), c_varbit (lseg), c_point (polygon), c_box (box), c_range (int4multirange), \
             c_tsv (circle), c_pair (pair), c_nums (interval[]), c_grid (tsquery), c_cash (cash)"
        ),
        "{report}"
    );

    let topic = format!("{prefix}.public.odd_t");
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("snapshot completed", CATCH_UP).await;
    let mut want = Vec::new();
    for id in 1..=3 {
        want.push(("r", Value::Null, odd_after(&db, id).await));
    }
    // Streamed: an insert, an update that leaves the TOASTed c_doc
    // unchanged, a delete (REPLICA IDENTITY DEFAULT: the key in before).
    db.client
        .batch_execute(&row(4, "'four'"))
        .await
        .expect("insert");
    want.push(("c", Value::Null, odd_after(&db, 4).await));
    db.client
        .batch_execute(
            "UPDATE odd_t SET c_money = '{-0.01}', c_range = '{}', c_int = 9 WHERE id = 1",
        )
        .await
        .expect("update");
    let mut updated = odd_after(&db, 1).await;
    updated["c_doc"] = json!("__debezium_unavailable_value");
    want.push(("u", Value::Null, updated));
    db.client
        .batch_execute("DELETE FROM odd_t WHERE id = 2")
        .await
        .expect("delete");
    let mut key_only = json!({"id": 2});
    for c in ODD_COLUMNS.iter().chain(&["c_int"]) {
        key_only[c] = Value::Null;
    }
    want.push(("d", key_only, Value::Null));
    // A column of an unmapped type added mid-stream is written as text too.
    db.client
        .batch_execute(&format!(
            "ALTER TABLE odd_t ADD COLUMN c_line line; {}; UPDATE odd_t SET c_line = '{{1,2,3}}' \
             WHERE id = 5",
            row(5, "NULL")
        ))
        .await
        .expect("add column");
    for op in ["c", "u"] {
        let mut after = odd_after(&db, 5).await;
        after["c_line"] = if op == "c" {
            Value::Null
        } else {
            json!("{1,2,3}")
        };
        want.push((op, Value::Null, after));
    }

    let got = wait_records(&topic, want.len() + 1).await;
    let by_id: Vec<&Event> = got.iter().filter(|e| e.value.is_some()).collect();
    // Each row has at most one record of each op: match on both.
    assert_eq!(by_id.len(), want.len(), "{got:?}");
    let mut used = vec![false; by_id.len()];
    for (op, before, after) in &want {
        let id = if after.is_null() {
            &before["id"]
        } else {
            &after["id"]
        };
        let i = (0..by_id.len())
            .find(|&i| {
                let v = by_id[i].value.as_ref().unwrap();
                !used[i]
                    && v["op"] == json!(op)
                    && (v["after"]["id"] == *id || v["before"]["id"] == *id)
            })
            .unwrap_or_else(|| panic!("no {op} record of id {id}: {got:?}"));
        used[i] = true;
        let v = by_id[i].value.as_ref().unwrap();
        assert_eq!(&v["before"], before, "before of {op} {id}");
        assert_eq!(&v["after"], after, "after of {op} {id}");
    }
    assert!(
        got.iter().any(|e| e.value.is_none()),
        "the delete's tombstone"
    );
    assert_eq!(relay.stop().code(), Some(0), "{}", relay.log());
}

/// A partitioned table is captured through its root: its snapshot rows and
/// the changes of every partition (a row moved across partitions included)
/// arrive on the root's topic, named as the root; the partitions, which a
/// pattern does not list, get no topic of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_table_is_captured_through_its_root() {
    require_kafka();
    let db = TestDb::new("wr_table_parts").await;
    db.client
        .batch_execute(
            "CREATE TABLE measures (id int4 PRIMARY KEY, v text) PARTITION BY RANGE (id);
             CREATE TABLE measures_low PARTITION OF measures FOR VALUES FROM (0) TO (100);
             CREATE TABLE measures_high PARTITION OF measures FOR VALUES FROM (100) TO (200);
             ALTER TABLE measures OWNER TO walrelay;
             ALTER TABLE measures_low OWNER TO walrelay;
             ALTER TABLE measures_high OWNER TO walrelay;
             INSERT INTO measures VALUES (1, 'a'), (150, 'b');",
        )
        .await
        .expect("tables");
    let names = Names::new("wr_tp");
    let prefix = format!("{}_cdc", names.connector);
    let config = table_config(
        &db,
        &names,
        Some(&prefix),
        "[[table]]\nname = \"public.*\"\n",
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("snapshot completed", CATCH_UP).await;
    db.client
        .batch_execute(
            "INSERT INTO measures VALUES (2, 'c'), (160, 'd');
             UPDATE measures SET v = 'e' WHERE id = 150;
             UPDATE measures SET id = 120 WHERE id = 2;
             DELETE FROM measures WHERE id = 1;",
        )
        .await
        .expect("changes");
    let topic = format!("{prefix}.public.measures");
    // 2 snapshot rows, 2 inserts, 1 update, the move (delete + tombstone +
    // insert), a delete + tombstone.
    let got = wait_records(&topic, 10).await;
    let mut ops: Vec<(i64, String)> = got
        .iter()
        .filter_map(|e| e.value.as_ref())
        .map(|v| {
            assert_eq!(v["source"]["table"], json!("measures"), "{v}");
            let row = if v["after"].is_null() {
                &v["before"]
            } else {
                &v["after"]
            };
            (
                row["id"].as_i64().unwrap(),
                v["op"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    ops.sort();
    let want: Vec<(i64, String)> = [
        (1, "d"),
        (1, "r"),
        (2, "c"),
        (2, "d"),
        (120, "c"),
        (150, "r"),
        (150, "u"),
        (160, "c"),
    ]
    .iter()
    .map(|(i, o)| (*i, (*o).to_owned()))
    .collect();
    assert_eq!(ops, want, "{got:?}");
    for partition in ["measures_low", "measures_high"] {
        assert!(
            read(&format!("{prefix}.public.{partition}")).is_empty(),
            "{partition} has no records"
        );
    }
    assert_eq!(relay.stop().code(), Some(0), "{}", relay.log());
}

/// Names as the catalog spells them — upper case, spaces, a reserved word,
/// non-ASCII — are captured as they are (`source.schema`, `source.table`,
/// the fields), and the topic replaces what Kafka does not allow in a topic
/// name with `_`, as Debezium does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_names_are_kept_and_topic_names_sanitized_as_debezium_does() {
    require_kafka();
    let db = TestDb::new("wr_table_names").await;
    db.client
        .batch_execute(
            "CREATE SCHEMA \"Sales\" AUTHORIZATION walrelay;
             CREATE TABLE \"Sales\".\"Order Items\" (\"Id\" int4 PRIMARY KEY, \"select\" text,
               \"größe\" int4);
             ALTER TABLE \"Sales\".\"Order Items\" OWNER TO walrelay;
             INSERT INTO \"Sales\".\"Order Items\" VALUES (1, 'a', 10);
             CREATE TABLE \"Sales\".\"Straße\" (id int4 PRIMARY KEY);
             ALTER TABLE \"Sales\".\"Straße\" OWNER TO walrelay;",
        )
        .await
        .expect("tables");
    let names = Names::new("wr_tn");
    let prefix = format!("{}_cdc", names.connector);
    let config = table_config(
        &db,
        &names,
        Some(&prefix),
        "[[table]]\nname = \"Sales.Order Items\"\n[[table]]\nname = \"Sales.Straße\"\n",
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("snapshot completed", CATCH_UP).await;
    db.client
        .batch_execute(
            "UPDATE \"Sales\".\"Order Items\" SET \"select\" = 'b' WHERE \"Id\" = 1;
             INSERT INTO \"Sales\".\"Straße\" VALUES (7);",
        )
        .await
        .expect("changes");
    let got = wait_records(&format!("{prefix}.Sales.Order_Items"), 2).await;
    let values: Vec<&Value> = got.iter().filter_map(|e| e.value.as_ref()).collect();
    for v in &values {
        assert_eq!(v["source"]["schema"], json!("Sales"), "{v}");
        assert_eq!(v["source"]["table"], json!("Order Items"), "{v}");
    }
    let after: Vec<&Value> = values.iter().map(|v| &v["after"]).collect();
    assert_eq!(
        after,
        [
            &json!({"Id": 1, "select": "a", "größe": 10}),
            &json!({"Id": 1, "select": "b", "größe": 10})
        ]
    );
    assert_eq!(got[0].key, Some(json!({"Id": 1})));
    // "ß" is one UTF-16 unit: one "_".
    let got = wait_records(&format!("{prefix}.Sales.Stra_e"), 1).await;
    assert_eq!(
        got[0].value.as_ref().unwrap()["source"]["table"],
        json!("Straße")
    );
    assert!(
        relay
            .log()
            .contains("is not a valid Kafka topic name; its records go to"),
        "{}",
        relay.log()
    );
    assert_eq!(relay.stop().code(), Some(0), "{}", relay.log());
}

/// REPLICA IDENTITY USING INDEX on a column that is not the primary key
/// (issue 27 item 2): a delete's old row holds the index columns only, so
/// walrelay keys the table's events by them — the delete and its tombstone
/// carry the row's key, on the row's partition, and a change of the indexed
/// column is delete + tombstone + create. Keying such a table by a column
/// outside the identity would key deletes by null: `check` and `run`
/// refuse it, naming the column and the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_identity_using_index_keys_events_by_the_index_columns() {
    require_kafka();
    let db = TestDb::new("wr_table_ident").await;
    db.client
        .batch_execute(
            "CREATE TABLE accounts (id int4 PRIMARY KEY, email text NOT NULL, v int4);
             CREATE UNIQUE INDEX accounts_email ON accounts (email);
             ALTER TABLE accounts REPLICA IDENTITY USING INDEX accounts_email;
             ALTER TABLE accounts OWNER TO walrelay;
             INSERT INTO accounts VALUES (1, 'a@x', 1);",
        )
        .await
        .expect("table");

    // Keyed by the primary key, outside the identity: refused before any row.
    let names = Names::new("wr_ti_bad");
    let bad = table_config(
        &db,
        &names,
        Some(&format!("{}_cdc", names.connector)),
        "[[table]]\nname = \"public.accounts\"\nkey_columns = [\"id\"]\n",
    );
    let dir = std::env::temp_dir().join(unique("wr_ti_bad"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("walrelay.toml");
    std::fs::write(&path, &bad).unwrap();
    let needle = "key column id is not in the table's replica identity (email), so PostgreSQL \
                  leaves it out of a delete's old row: deletes would be keyed by null";
    let (code, report) = check(&path);
    assert_eq!(code, Some(1), "{report}");
    assert!(
        report.contains(needle) && report.contains("REPLICA IDENTITY FULL"),
        "{report}"
    );
    let mut run = RelayProcess::start_with(&path, &[]);
    let log = run.expect_exit(1, Duration::from_secs(60));
    assert!(log.contains(needle), "{log}");

    let names = Names::new("wr_ti");
    let prefix = format!("{}_cdc", names.connector);
    let config = table_config(
        &db,
        &names,
        Some(&prefix),
        "[[table]]\nname = \"public.accounts\"\n",
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("snapshot completed", CATCH_UP).await;
    db.client
        .batch_execute(
            "UPDATE accounts SET v = 2 WHERE id = 1;
             UPDATE accounts SET email = 'b@x' WHERE id = 1;
             DELETE FROM accounts WHERE id = 1;",
        )
        .await
        .expect("changes");
    let topic = format!("{prefix}.public.accounts");
    // r, u, then the email change (d + tombstone + c), then d + tombstone.
    let got = wait_records(&topic, 7).await;
    let shape: Vec<(Value, Option<String>)> = got
        .iter()
        .map(|e| {
            (
                e.key.clone().unwrap_or(Value::Null),
                e.value
                    .as_ref()
                    .map(|v| v["op"].as_str().unwrap().to_owned()),
            )
        })
        .collect();
    let k = |e: &str| json!({ "email": e });
    let d = |op: &str| Some(op.to_owned());
    // One partition per key: per key, records are in order.
    let for_key = |key: &Value| -> Vec<Option<String>> {
        shape
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, op)| op.clone())
            .collect()
    };
    assert_eq!(
        for_key(&k("a@x")),
        vec![d("r"), d("u"), d("d"), None],
        "{got:?}"
    );
    assert_eq!(for_key(&k("b@x")), vec![d("c"), d("d"), None], "{got:?}");
    assert_eq!(shape.len(), 7, "no record keyed otherwise: {got:?}");
    assert_eq!(relay.stop().code(), Some(0), "{}", relay.log());
}

/// DDL on a REPLICA IDENTITY USING INDEX table while writers run. Without
/// `key_columns` the key follows the identity from the change that carries
/// the new shape on (index → other index → primary key under DEFAULT and
/// FULL → index, and the primary key once the identity index is dropped),
/// each move said in one warning naming table and LSN; columns added and
/// dropped move nothing. No change is lost, and per key a row's events stay
/// in order. With `key_columns` outside the new identity the connector
/// stops at the first change decoded with it, naming table, column and
/// LSN, and confirms nothing past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_identity_changes_mid_stream_move_the_key_with_a_warning_or_stop() {
    require_kafka();
    let db = TestDb::new("wr_ident_ddl").await;
    db.client
        .batch_execute(
            "CREATE TABLE accounts (id int4 PRIMARY KEY, email text NOT NULL, code text NOT NULL,
               v int4 NOT NULL);
             CREATE UNIQUE INDEX accounts_email ON accounts (email);
             CREATE UNIQUE INDEX accounts_code ON accounts (code);
             ALTER TABLE accounts REPLICA IDENTITY USING INDEX accounts_email;
             ALTER TABLE accounts OWNER TO walrelay;
             INSERT INTO accounts SELECT i, 'e' || i || '@x', 'c' || i, 0
               FROM generate_series(1, 10) i;",
        )
        .await
        .expect("table");
    let start = |tag: &str, section: &str| {
        let names = Names::new(tag);
        let prefix = format!("{}_cdc", names.connector);
        let config = table_config(&db, &names, Some(&prefix), section);
        (
            RelayProcess::start(&config, &[]),
            format!("{prefix}.public.accounts"),
            names,
        )
    };
    let (mut relay, topic, _) = start("wr_idd", "[[table]]\nname = \"public.accounts\"\n");
    let (mut keyed, keyed_topic, keyed_names) = start(
        "wr_idd_k",
        "[[table]]\nname = \"public.accounts\"\nkey_columns = [\"email\"]\n",
    );
    relay.wait_log("snapshot completed", CATCH_UP).await;
    keyed.wait_log("snapshot completed", CATCH_UP).await;

    let writers = VersionWriters::start(
        &db.name,
        "accounts",
        "INSERT INTO accounts (id, email, code, v) \
         VALUES ($1::int4, 'e' || $1::int4 || '@x', 'c' || $1::int4, 0)",
        11,
    );
    // Each step: (LSN before, LSN after, the key column from then on).
    let mut steps: Vec<(u64, u64, &str)> = Vec::new();
    let mut seen = wait_records(&topic, 40).await.len();
    for (sql, key) in [
        ("REPLICA IDENTITY USING INDEX accounts_code", "code"),
        ("ADD COLUMN note text", "code"),
        ("REPLICA IDENTITY DEFAULT", "id"),
        ("DROP COLUMN note", "id"),
        ("REPLICA IDENTITY FULL", "id"),
        ("REPLICA IDENTITY USING INDEX accounts_email", "email"),
    ] {
        let before = db.current_wal_lsn().await;
        db.client
            .batch_execute(&format!("ALTER TABLE accounts {sql}"))
            .await
            .unwrap();
        steps.push((before, db.current_wal_lsn().await, key));
        seen = wait_records(&topic, seen + 40).await.len();
    }
    let mut committed = writers.stop().await;
    // The identity index dropped: PostgreSQL now refuses updates (no
    // identity); an insert is keyed by the primary key.
    let before = db.current_wal_lsn().await;
    db.client
        .batch_execute(
            "DROP INDEX accounts_email;
             INSERT INTO accounts VALUES (100000, 'last@x', 'last', 0);",
        )
        .await
        .unwrap();
    steps.push((before, before, "id"));
    committed.push((100000, 0));

    wait_for("every change in Kafka", CATCH_UP, || async {
        let got = consume_to_end(&[&topic]);
        holds_versions(&committed, &got).then_some(())
    })
    .await;
    assert_eq!(verify_versions(&committed, &consume_to_end(&[&topic])), 0);
    let all = read(&topic);
    let mut checked = [0usize; 2];
    for e in all.iter().filter(|e| e.value.is_some()) {
        let value = e.value.as_ref().unwrap();
        let after = &value["after"];
        let key = e.key.clone().expect("a key");
        if value["op"] == "r" {
            continue;
        }
        // The key of the identity in force at the change's commit.
        let lsn = parse_lsn(&e.lsn);
        if steps.iter().any(|&(b, a, _)| b <= lsn && lsn <= a) {
            checked[1] += 1;
            continue;
        }
        let field = steps
            .iter()
            .rev()
            .find(|&&(_, a, _)| a < lsn)
            .map_or("email", |s| s.2);
        assert_eq!(
            key,
            json!({ field: after[field].clone() }),
            "at {}: {value}",
            e.lsn
        );
        checked[0] += 1;
    }
    eprintln!(
        "{} changes committed, {} records; keys checked {}, {} left out (during an ALTER)",
        committed.len(),
        all.len(),
        checked[0],
        checked[1]
    );
    // One warning per move of the key (code, id, email, id), none for the
    // columns or DEFAULT → FULL; each names the table, the LSN and both keys.
    let log = relay.log();
    let moves: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("the key of public.accounts's events changes at"))
        .collect();
    assert_eq!(moves.len(), 4, "{moves:#?}");
    for (line, (from, to)) in moves.iter().zip([
        ("(email)", "(code)"),
        ("(code)", "(id)"),
        ("(id)", "(email)"),
        ("(email)", "(id)"),
    ]) {
        assert!(
            line.contains(&format!("from {from} to {to}")) && line.contains("lsn="),
            "{line}"
        );
    }
    assert!(
        moves[3].contains("USING INDEX of a dropped index"),
        "{}",
        moves[3]
    );
    assert_eq!(relay.stop().code(), Some(0), "{log}");

    // key_columns = ["email"] outside the new identity (code): stopped at
    // the first change decoded with it, before publishing it.
    let log = keyed.expect_exit(1, CATCH_UP);
    for needle in [
        "cannot make a change event for table public.accounts (column email, at ",
        "key column email is not in the table's replica identity (code)",
        "altering the table back does not help them",
    ] {
        assert!(log.contains(needle), "{needle:?} not in:\n{log}");
    }
    let keyed_records = read(&keyed_topic);
    assert!(
        keyed_records
            .iter()
            .all(|e| e.key.as_ref().is_some_and(|k| k.get("email").is_some())),
        "{keyed_records:?}"
    );
    let first_code = all
        .iter()
        .filter(|e| e.key.as_ref().is_some_and(|k| k.get("code").is_some()))
        .map(|e| parse_lsn(&e.lsn))
        .min()
        .expect("events keyed by code");
    let confirmed = db.confirmed_flush(&keyed_names.slot).await.expect("slot");
    assert!(
        confirmed < first_code,
        "the slot passed the first change under the new identity: {confirmed:x} >= {first_code:x}"
    );
}

/// Issue 38, item 6a: a record without a key (here a TRUNCATE event,
/// published with `skipped_operations = "none"`) sent to a topic with
/// `cleanup.policy=compact`: the broker refuses it for good
/// (INVALID_RECORD, "compacted topic cannot accept message without key").
/// Before, that was transient and the session restarted forever; now
/// walrelay stops with an error that names the topic, says the record had
/// no key and what kinds of record have none, and gives the fix — and the
/// keyed insert before it is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_record_to_a_compacted_topic_stops_naming_topic_and_fix() {
    require_kafka();
    let db = TestDb::new("wr_table_compact").await;
    let names = Names::new("wr_tc");
    db.client
        .batch_execute(
            "CREATE TABLE ledger (id int4 PRIMARY KEY, amount int4);
             ALTER TABLE ledger OWNER TO walrelay;",
        )
        .await
        .expect("table");
    let prefix = format!("{}_cdc", names.connector);
    let topic = format!("{prefix}.public.ledger");
    create_topic_with_config(&topic, &[("cleanup.policy", "compact")]).await;
    let config = table_config(
        &db,
        &names,
        Some(&prefix),
        "[[table]]\nname = \"public.ledger\"\nskipped_operations = \"none\"\n",
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", START).await;
    db.client
        .batch_execute("INSERT INTO ledger VALUES (1, 10)")
        .await
        .unwrap();
    // In Kafka before the TRUNCATE (else both share a refused batch).
    wait_for("the insert in Kafka", START, || {
        let topic = topic.clone();
        async move { (!consume_to_end(&[topic.as_str()]).is_empty()).then_some(()) }
    })
    .await;
    db.client.batch_execute("TRUNCATE ledger").await.unwrap();
    let log = relay.expect_exit(1, Duration::from_secs(120));
    let restarts = log.matches("will retry with backoff").count();
    assert_eq!(restarts, 0, "the session was retried:\n{log}");
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("cleanup.policy"))
        .unwrap_or_else(|| panic!("no error naming cleanup.policy:\n{log}"))
        .to_owned();
    for needle in [topic.as_str(), "without a key", "TRUNCATE", "compact"] {
        assert!(line.contains(needle), "{needle:?} in {line}");
    }
    // The fix it names: the topic no longer compacted, the next start
    // sends the TRUNCATE event.
    set_topic_config(&topic, "cleanup.policy", "delete").await;
    let mut relay = RelayProcess::start_with(&relay.config_path.clone(), &[]);
    wait_for("the TRUNCATE event in Kafka", START, || {
        let topic = topic.clone();
        async move {
            let got = consume_to_end(&[topic.as_str()]);
            got.iter().any(|r| r.key.is_none()).then_some(())
        }
    })
    .await;
    assert!(relay.stop().success());
}
