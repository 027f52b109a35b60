//! Issue 27's differences (items 2-8), each a row of docs/compatibility.md's
//! "Where walrelay differs, and why", caught here so that the comparison
//! fails if either side changes:
//! - `diff_t` (compared record by record like the other tables, the fields
//!   named in `DELIBERATE`): a STORED generated column, an enum array with
//!   a NULL element, dates before the Gregorian reform (snapshot and
//!   stream), a `real` denormal, an interval above 2^53 µs, a
//!   negative-scale `numeric`;
//! - `ident_t` (REPLICA IDENTITY USING INDEX on a column that is not the
//!   primary key): its records differ in key and shape, so
//!   [`check_ident_t`] states what each side writes.

use serde_json::{Value, json};

use super::Rec;

/// The two tables (after the main test's `mood` type exists).
pub const TABLES: &str = "
  CREATE TABLE diff_t (id int4 PRIMARY KEY,
    gen_c int4 GENERATED ALWAYS AS (id * 2) STORED,
    moods_null mood[], d_old date, d_bc date, f4_denorm real, iv_big interval,
    n_negscale numeric(5,-2));
  ALTER TABLE diff_t OWNER TO walrelay;
  CREATE TABLE ident_t (id int4 PRIMARY KEY, email text NOT NULL, v int4);
  CREATE UNIQUE INDEX ident_t_email ON ident_t (email);
  ALTER TABLE ident_t REPLICA IDENTITY USING INDEX ident_t_email;
  ALTER TABLE ident_t OWNER TO walrelay;";

/// A row of `diff_t`.
pub fn row(id: i32) -> String {
    format!(
        "INSERT INTO diff_t (id, moods_null, d_old, d_bc, f4_denorm, iv_big, n_negscale)
         VALUES ({id}, '{{happy,NULL}}', '1582-10-10', '4713-01-01 BC', '1e-45',
         '300 years 00:00:00.000001', -9999900)"
    )
}

/// `ident_t`'s row before both connectors start.
pub const PREFILL: &str = "INSERT INTO ident_t VALUES (1, 'a@x', 1)";

/// `ident_t`'s changes: an update, a change of the identity column, a delete.
pub const CHANGES: &str = "UPDATE ident_t SET v = 2 WHERE id = 1;
  UPDATE ident_t SET email = 'b@x' WHERE id = 1;
  DELETE FROM ident_t WHERE id = 1;";

/// Records of `ident_t` each side writes (with tombstones): r, u, d +
/// tombstone + c for the identity change, d + tombstone — 7 on each side,
/// keyed differently.
pub const IDENT_T_RECORDS: (usize, usize) = (7, 7);

fn shape(recs: &[Rec]) -> Vec<(Value, Value)> {
    recs.iter()
        .map(|r| {
            (
                r.key.clone().unwrap_or(Value::Null),
                r.value.as_ref().map_or(Value::Null, |v| v["op"].clone()),
            )
        })
        .collect()
}

/// `ident_t` as docs/compatibility.md's row "key under REPLICA IDENTITY
/// USING INDEX" says: walrelay keys every record by the index column and
/// writes the identity change as delete + tombstone + create; Debezium keys
/// by the primary key, which a delete's old row lacks: its deletes and
/// their tombstones are keyed `{"id":0}`, the create after an identity
/// change `{"id":1}`. Returns the differences from that description.
pub fn check_ident_t(w: &[Rec], d: &[Rec], tombstones: bool) -> Vec<String> {
    let mut out = Vec::new();
    let (a, b) = (json!({"email": "a@x"}), json!({"email": "b@x"}));
    let mut want_w = vec![
        (a.clone(), json!("r")),
        (a.clone(), json!("u")),
        (a.clone(), json!("d")),
        (a.clone(), Value::Null),
        (b.clone(), json!("c")),
        (b.clone(), json!("d")),
        (b.clone(), Value::Null),
    ];
    let (id1, id0) = (json!({"id": 1}), json!({"id": 0}));
    let mut want_d = vec![
        (id1.clone(), json!("r")),
        (id1.clone(), json!("u")),
        (id0.clone(), json!("d")),
        (id0.clone(), Value::Null),
        (id1.clone(), json!("c")),
        (id0.clone(), json!("d")),
        (id0.clone(), Value::Null),
    ];
    if !tombstones {
        want_w.retain(|(_, op)| !op.is_null());
        want_d.retain(|(_, op)| !op.is_null());
    }
    // Compared as multisets: the key picks the partition, and the two
    // sides' keys differ.
    let order = |mut v: Vec<(Value, Value)>| {
        v.sort_by_key(|r| format!("{r:?}"));
        v
    };
    let (got_w, got_d) = (shape(w), shape(d));
    if order(got_w.clone()) != order(want_w.clone()) {
        out.push(format!(
            "ident_t: walrelay wrote {got_w:?}, compatibility.md says {want_w:?}"
        ));
    }
    if order(got_d.clone()) != order(want_d.clone()) {
        out.push(format!(
            "ident_t: Debezium wrote {got_d:?}, compatibility.md says {want_d:?}"
        ));
    }
    out
}
