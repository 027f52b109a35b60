//! Issue 10's acceptance test: Debezium's PostgreSQL connector (Kafka
//! Connect standalone, JSON converter with `schemas.enable=false` for key and
//! value) and walrelay capture the **same** changes of the same tables, and
//! their records are compared one by one.
//!
//! Invariants checked:
//! - Both write the same topics (compared by the part after the prefix: the
//!   two connectors use different `topic.prefix` values so they can share
//!   one broker), the same number of records per topic, and record by record
//!   (per partition, in offset order) the same partition, key and value.
//! - The only value fields left out of the comparison are listed in
//!   [`DELIBERATE`], each with the row of `docs/compatibility.md` ("Where
//!   walrelay differs") that explains it. Anything else that differs fails
//!   the test, listing every difference (path, walrelay's value, Debezium's).
//!   Keys that differ on purpose are listed the same way ([`KeyDifference`]).
//! - A TRUNCATE produces nothing on either side (Debezium's default
//!   `skipped.operations=t`), shown by a row inserted after it arriving on
//!   both sides with nothing in between; with `skipped.operations=none` one
//!   `op: "t"` record per truncated table on each side. Records without a
//!   key (only truncates) are compared without their partition, in LSN
//!   order: Kafka's Java producer (sticky partitioner) and librdkafka
//!   (murmur2_random: a random partition for a null key) place them
//!   differently, on purpose of neither; topics have the broker's 3
//!   partitions, as in production.
//!
//! The changes cover issue 10's list: a table with every mapped type plus
//! NULLs and edge values (numeric/float specials, negative intervals, times
//! before 1970, escapes), updates that leave TOASTed columns of every
//! representation unchanged (text, jsonb, bytea, fourteen kinds of arrays,
//! `hstore`, `tsvector`, `varbit`, `citext`),
//! deletes (with tombstones), a primary-key change, a truncate of two tables, a table
//! without a primary key (`key_columns` / `message.key.columns`, REPLICA
//! IDENTITY FULL), a REPLICA IDENTITY FULL table with a key (an update leaving its
//! TOASTed column unchanged: after takes it from the old row), columns added,
//! dropped and retyped mid-stream, and a snapshot of pre-existing rows (including the all-types,
//! edge and TOASTed rows); and issue 27's special values and types
//! (`values_t`, [`values`]), whose columns Debezium leaves out are left out
//! by walrelay's `column_exclude_list`, so their absence is compared too;
//! and issue 27's documented differences ([`differences`]: `diff_t`'s
//! fields in `DELIBERATE`, REPLICA IDENTITY USING INDEX's keys stated for
//! each side).
//!
//! Three comparisons, one at a time (each runs a JVM): Debezium's default
//! options; `decimal.handling.mode=string`, `time.precision.mode=connect`,
//! `binary.handling.mode=hex`, `interval.handling.mode=string`,
//! `column.include.list` (four columns of toast_t, TOASTed ones among
//! them; walrelay given the same regular expressions in `[table_defaults]`);
//! and
//! `decimal.handling.mode=double`, `binary.handling.mode=base64` (an
//! unchanged TOASTed bytea is null), `tombstones.on.delete=false`, another
//! `unavailable.value.placeholder`, `skipped.operations=none`,
//! `column.exclude.list` (a key column among them), the hash masks v1 and
//! v2 (three algorithms; non-ASCII and non-BMP text; `varchar(10)`,
//! `char(5)` and `"char"`, whose hashes are cut; a masked column dropped
//! mid-stream), `column.mask.with.N.chars` (a key
//! column too) and `column.truncate.to.N.chars` (an unchanged TOASTed
//! placeholder cut, a cut through a non-BMP character: [`HALF_CHARACTER`]) — walrelay set alike through `[table_defaults]` and
//! `[[table]]`. About 7-10 s each. The last also checks that the options
//! took effect in walrelay's records, so that options both sides ignored
//! could not pass.
//!
//! Outbox records are compared with Debezium's Outbox Event Router in
//! [`outbox`] (one more Connect run, ~7 s); [`migration`] switches from a
//! Debezium to walrelay on its slot under writers.
//!
//! Needs the Connect + Debezium classpath from `deploy/dev/connect.sh up`
//! (`WALRELAY_CONNECT_LIBS`, or the default directory that script resolves
//! into); without it the test fails naming the command — never a skip.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

#[path = "debezium_compat/messages.rs"]
mod messages;
#[path = "debezium_compat/migration.rs"]
mod migration;
#[path = "debezium_compat/outbox.rs"]
mod outbox;
#[path = "debezium_compat/transactions.rs"]
mod transactions;
#[path = "debezium_compat/values.rs"]
mod values;

#[path = "debezium_compat/differences.rs"]
mod differences;

#[path = "debezium_compat/avro.rs"]
mod avro;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use support::*;

/// Connect's start (JVM, worker, connector, snapshot) takes ~15-30 s on a
/// busy 2-core machine; the bound leaves room without hiding a hang.
const DEBEZIUM_READY: Duration = Duration::from_secs(150);
const CATCH_UP: Duration = Duration::from_secs(120);

/// The value fields that differ on purpose, in ONE place. Each entry: the
/// path (`source.x`, `before.x` or a top-level field), the `op`s of the
/// records it applies to (`"r"`: snapshot rows only, `"*"`: every record), and
/// the first column of the row of docs/compatibility.md's "Where walrelay
/// differs, and why" table that says why (a unit test below checks that
/// the row exists).
/// Such fields are removed from both values before they are compared; a
/// field not listed here must be equal.
const DELIBERATE: &[(&str, &str, &str)] = &[
    // Processing time on Debezium's side (commit time on ours).
    ("ts_ms", "*", "top-level `ts_ms`"),
    ("ts_us", "*", "`ts_us`, `ts_ns` (top level and `source`)"),
    ("ts_ns", "*", "`ts_us`, `ts_ns` (top level and `source`)"),
    (
        "source.ts_us",
        "*",
        "`ts_us`, `ts_ns` (top level and `source`)",
    ),
    (
        "source.ts_ns",
        "*",
        "`ts_us`, `ts_ns` (top level and `source`)",
    ),
    ("source.version", "*", "`source.version`"),
    // This test gives the two connectors different topic prefixes.
    ("source.name", "*", "`source.name`"),
    // Compared separately: only its second element (the change's LSN) must
    // be equal, and not even that for snapshot rows (next entries).
    ("source.sequence", "*", "`source.sequence`"),
    (
        "source.sequence[1]",
        "r",
        "`source.txId`, `source.lsn` of snapshot rows",
    ),
    // Written (null) by Debezium 3.x only.
    ("source.origin", "*", "`source.origin`, `source.origin_lsn`"),
    (
        "source.origin_lsn",
        "*",
        "`source.origin`, `source.origin_lsn`",
    ),
    // Snapshot rows: when and in which transaction the snapshot was read.
    ("source.ts_ms", "r", "`source.ts_ms` of snapshot rows"),
    (
        "source.txId",
        "r",
        "`source.txId`, `source.lsn` of snapshot rows",
    ),
    (
        "source.lsn",
        "r",
        "`source.txId`, `source.lsn` of snapshot rows",
    ),
    // trunc_t.note is NOT NULL, outside the key, and the table REPLICA
    // IDENTITY DEFAULT: PostgreSQL does not send it with a delete; walrelay
    // writes null, Debezium the column's default ('n').
    (
        "before.note",
        "d",
        "`before` of a delete, NOT NULL columns outside the key",
    ),
    // Debezium 3.6.1 streams `name` columns as null (its snapshot has the
    // value); walrelay writes the value in both.
    ("after.c_name", "cu", "`name` columns in streamed changes"),
    // values_t: Debezium's snapshot reads an infinity date through the JDBC
    // driver (a day number cut to 32 bits), its stream from PostgreSQL's.
    ("after.d_inf", "r", "`infinity` dates in snapshot rows"),
    ("after.d_ninf", "r", "`infinity` dates in snapshot rows"),
    // Nested arrays; Debezium: a null per row, or Java object names.
    ("after.a_2d", "*", "arrays of several dimensions"),
    ("after.a_2d_text", "*", "arrays of several dimensions"),
    ("after.a_3d", "*", "arrays of several dimensions"),
    // diff_t (tests/it/debezium_compat/differences.rs): issue 27's items.
    ("after.gen_c", "r", "STORED generated columns"),
    ("after.moods_null", "*", "enum arrays with a NULL element"),
    (
        "after.d_old",
        "r",
        "dates before the Gregorian reform (1582-10-15) in snapshot rows",
    ),
    (
        "after.d_bc",
        "r",
        "dates before the Gregorian reform (1582-10-15) in snapshot rows",
    ),
    ("after.f4_denorm", "*", "`real` denormals"),
    // Differs in decimal.handling.mode=string only (equal in the others).
    (
        "after.n_negscale",
        "*",
        "negative-scale `numeric(p,-s)` in `decimal_handling_mode = \"string\"`",
    ),
    (
        "after.iv_big",
        "*",
        "`interval` above 2^53 µs in `interval_handling_mode = \"numeric\"`",
    ),
];

const TABLES: &str = "CREATE EXTENSION hstore; CREATE EXTENSION citext; CREATE EXTENSION ltree;
  CREATE TYPE mood AS ENUM ('happy', 'sad');
  CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
  CREATE TABLE types_t (
    id int4 PRIMARY KEY,
    c_int2 int2, c_int8 int8, c_bool bool, c_f4 real, c_f8 float8,
    c_num numeric(10,2), c_numv numeric, c_text text, c_varchar varchar(10),
    c_uuid uuid, c_json json, c_jsonb jsonb, c_bytea bytea, c_date date,
    c_time time, c_time3 time(3), c_ts timestamp, c_ts3 timestamp(3),
    c_tstz timestamptz, c_timetz timetz, c_interval interval, c_inet inet,
    c_cidr cidr, c_mac macaddr, c_int_arr int4[], c_text_arr text[], c_mood mood,
    c_moods mood[], c_pos posint, c_big text,
    -- ZonedTimestamp's fraction: per the column's precision.
    c_tstz3 timestamptz(3), c_tstz0 timestamptz(0), c_tstz_whole timestamptz,
    c_timetz_frac timetz, c_tstz_arr timestamptz[],
    -- The rest of compatibility.md's types table.
    c_oid oid, c_char char(3), c_name name, c_xml xml, c_mac8 macaddr8,
    c_int2_arr int2[], c_int8_arr int8[], c_bool_arr bool[], c_f4_arr real[],
    c_f8_arr float8[], c_varchar_arr varchar(5)[], c_uuid_arr uuid[],
    c_date_arr date[], c_ts_arr timestamp[], c_json_arr json[], c_jsonb_arr jsonb[],
    -- Text outside ASCII and the BMP (for the hash masks).
    c_label text, c_cut text,
    -- Hashes cut to the column's length: 1 for \"char\", n for char(n).
    c_qchar \"char\", c_char5 char(5));
  -- Out of line and uncompressed from 2 kB on: an update that does not touch
  -- c_big sends it as 'unchanged TOAST'.
  ALTER TABLE types_t ALTER COLUMN c_big SET STORAGE EXTERNAL;
  -- Unchanged TOASTed values of every representation: each column out of
  -- line (>2 kB, EXTERNAL), and updates that change only v.
  CREATE TABLE toast_t (id int4 PRIMARY KEY, v int4, t text, j jsonb, b bytea,
    a_text text[], a_varchar varchar[], a_jsonb jsonb[], a_int2 int2[], a_int4 int4[],
    a_int8 int8[], a_bool bool[], a_f8 float8[], a_date date[], a_tstz timestamptz[],
    a_uuid uuid[], a_mood mood[],
    -- Issue 27's types that can be TOASTed.
    a_num numeric[], a_bytea bytea[], a_inet inet[], a_time time[], a_timetz timetz[],
    h hstore, tsv tsvector, vb varbit, ct citext);
  ALTER TABLE toast_t ALTER COLUMN t SET STORAGE EXTERNAL,
    ALTER COLUMN j SET STORAGE EXTERNAL,
    ALTER COLUMN b SET STORAGE EXTERNAL,
    ALTER COLUMN a_text SET STORAGE EXTERNAL,
    ALTER COLUMN a_varchar SET STORAGE EXTERNAL,
    ALTER COLUMN a_jsonb SET STORAGE EXTERNAL,
    ALTER COLUMN a_int2 SET STORAGE EXTERNAL,
    ALTER COLUMN a_int4 SET STORAGE EXTERNAL,
    ALTER COLUMN a_int8 SET STORAGE EXTERNAL,
    ALTER COLUMN a_bool SET STORAGE EXTERNAL,
    ALTER COLUMN a_f8 SET STORAGE EXTERNAL,
    ALTER COLUMN a_date SET STORAGE EXTERNAL,
    ALTER COLUMN a_tstz SET STORAGE EXTERNAL,
    ALTER COLUMN a_uuid SET STORAGE EXTERNAL,
    ALTER COLUMN a_mood SET STORAGE EXTERNAL,
    ALTER COLUMN a_num SET STORAGE EXTERNAL,
    ALTER COLUMN a_bytea SET STORAGE EXTERNAL,
    ALTER COLUMN a_inet SET STORAGE EXTERNAL,
    ALTER COLUMN a_time SET STORAGE EXTERNAL,
    ALTER COLUMN a_timetz SET STORAGE EXTERNAL,
    ALTER COLUMN h SET STORAGE EXTERNAL,
    ALTER COLUMN tsv SET STORAGE EXTERNAL,
    ALTER COLUMN vb SET STORAGE EXTERNAL,
    ALTER COLUMN ct SET STORAGE EXTERNAL;
  ALTER TABLE toast_t OWNER TO walrelay;
  CREATE TABLE nopk_t (code text NOT NULL, qty int4);
  ALTER TABLE nopk_t REPLICA IDENTITY FULL;
  CREATE TABLE full_t (id int4 PRIMARY KEY, v text, big text);
  ALTER TABLE full_t REPLICA IDENTITY FULL;
  ALTER TABLE full_t ALTER COLUMN big SET STORAGE EXTERNAL;
  -- REPLICA IDENTITY DEFAULT with a NOT NULL column outside the key: what
  -- a delete's before holds for it.
  CREATE TABLE trunc_t (id int4 PRIMARY KEY, note text NOT NULL DEFAULT 'n');
  ALTER TABLE types_t OWNER TO walrelay;
  ALTER TABLE nopk_t OWNER TO walrelay;
  ALTER TABLE full_t OWNER TO walrelay;
  ALTER TABLE trunc_t OWNER TO walrelay;";

/// Every mapped type set, for row `id`.
fn all_types_row(id: i32) -> String {
    format!(
        "INSERT INTO types_t VALUES ({id}, -5, 9007199254740993, true, 1.5,
    -2.25, 12.50, 3.14159, 'héllo \"q\"', 'v', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
    '{{\"a\": 1}}', '{{\"b\": [1, 2]}}', '\\x0102ff', '2024-01-01', '13:45:10.5', '13:45:10.5',
    '2024-01-01 00:00:00.123456', '2024-01-01 00:00:00.123', '2024-01-01 05:30:00.5+05:30',
    '10:00:00+02', '1 year 2 mons 3 days 04:05:06.5', '192.168.0.1/24', '10.0.0.0/8',
    '08:00:2b:01:02:03', '{{1,2,NULL}}', '{{a,\"b c\"}}', 'happy', '{{happy,sad}}', 7, 'small',
    '2024-01-01 00:00:00.12+00', '2024-01-01 00:00:01+00', '2024-01-01 00:00:00+00',
    '10:00:00.25+02', '{{\"2024-01-01 00:00:00.5+00\",NULL}}',
    42, 'ab', 'a_name', '<a b=\"1\">x &amp; y</a>', '08:00:2b:01:02:03:04:05',
    '{{-1,2}}', '{{9007199254740993,NULL}}', '{{t,f,NULL}}', '{{1.5,NaN,-Infinity}}',
    '{{-0,1e20,0.1}}', '{{\"a b\",\"\",NULL}}', '{{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}}',
    '{{1969-12-31,2024-02-29}}', '{{\"2024-01-01 00:00:00.123456\",\"1969-12-31 23:59:59.5\"}}',
    '{{\"{{\\\"a\\\": [1, 2]}}\",NULL}}', '{{\"{{\\\"b\\\": null}}\",\"[]\"}}',
    'Ünï ½ \u{1F600} ok', 'ab\u{1F600}cd', 'q', 'ü')"
    )
}

/// Edge values for row `id`: minimum integers, non-finite floats, negative
/// and tiny decimals, escapes and non-BMP text, empty strings, bytea and
/// arrays, times before 1970 and at the ends of the day, negative offsets,
/// an interval with negative parts, a zero interval.
fn edge_row(id: i32) -> String {
    format!(
        "INSERT INTO types_t (id, c_int2, c_int8, c_bool, c_f4, c_f8, c_num, c_numv, c_text,
    c_varchar, c_uuid, c_json, c_jsonb, c_bytea, c_date, c_time, c_time3, c_ts, c_ts3, c_tstz,
    c_timetz, c_interval, c_int_arr, c_text_arr, c_moods, c_tstz3, c_tstz0, c_timetz_frac)
    VALUES ({id}, -32768, -9223372036854775808, false, 'NaN', '-Infinity', -12.50, -0.000123,
    E'tab\\there\\nnew \\\\ back \\u00e9 \\U0001F600 ctl\\x01 \"q\"', '',
    '00000000-0000-0000-0000-000000000000', '[]', '{{\"k\": \"\\u00e9\", \"n\": null}}', '\\x',
    '1969-12-31', '00:00:00', '23:59:59.999', '1969-12-31 23:59:59.999999', '1900-01-01 00:00:00',
    '1969-12-31 23:59:59.5-01', '00:30:00-03:30', '-1 year -2 mons +3 days -04:05:06.5', '{{}}',
    '{{NULL,\"\\\"q\\\"\",\"\"}}', '{{}}', '0001-01-01 00:00:00+00', '1970-01-01 00:00:00+00',
    '00:00:00-00:30')"
    )
}

/// A >2 kB text that compression cannot shrink much (md5 hex of a series).
const BIG: &str = "(SELECT string_agg(md5(g::text), '') FROM generate_series(1, 200) g)";

/// A row of `toast_t`: every column >2 kB.
fn toast_row(id: i32) -> String {
    let md5s = "(SELECT array_agg(md5(g::text)) FROM generate_series(1, 200) g)";
    let series = |n: u32, expr: &str, ty: &str| {
        format!("(SELECT array_agg(({expr})::{ty}) FROM generate_series(1, {n}) g)")
    };
    format!(
        "INSERT INTO toast_t VALUES ({id}, 0, {BIG},
         (SELECT jsonb_agg(md5(g::text)) FROM generate_series(1, 200) g), {BIG}::bytea,
         {md5s}, {md5s}::varchar[], {}, {}, {}, {}, {}, {}, {}, {}, {}, {},
         {}, {}, {}, {}, {},
         (SELECT hstore(array_agg(md5(g::text)), array_agg(g::text)) FROM generate_series(1, 200) g),
         (SELECT string_agg(md5(g::text), ' ') FROM generate_series(1, 200) g)::tsvector,
         (SELECT string_agg((g % 3 / 2)::text, '') FROM generate_series(1, 20000) g)::varbit,
         {BIG}::citext)",
        series(200, "jsonb_build_object('k', md5(g::text))", "jsonb"),
        series(2000, "g % 30000", "int2"),
        series(2000, "g", "int4"),
        series(1000, "g", "int8"),
        series(3000, "g % 2 = 0", "bool"),
        series(1000, "g / 7.0", "float8"),
        series(1000, "date '2024-01-01' + g", "date"),
        series(
            1000,
            "timestamptz '2024-01-01 00:00:00+00' + g * interval '1 s'",
            "timestamptz"
        ),
        series(200, "md5(g::text)", "uuid"),
        series(
            1000,
            "CASE WHEN g % 2 = 0 THEN 'happy' ELSE 'sad' END",
            "mood"
        ),
        series(1000, "g / 7.0", "numeric"),
        series(300, "md5(g::text)::bytea", "bytea"),
        series(500, "'10.0.0.0'::inet + g", "inet"),
        series(1000, "time '00:00' + g * interval '1 s'", "time"),
        series(1000, "timetz '00:00+02' + g * interval '1 s'", "timetz"),
    )
}

/// Rows that exist before either connector starts: both snapshot them.
/// Inserted in key order so that the heap order Debezium reads them in is
/// the key order walrelay reads them in.
fn prefill() -> String {
    format!(
        "INSERT INTO types_t (id) VALUES (1);
         INSERT INTO types_t (id, c_big) VALUES (6, {BIG});
         {};
         {};
         INSERT INTO nopk_t VALUES ('pre', 0);
         INSERT INTO full_t VALUES (1, 'x', {BIG});
         INSERT INTO trunc_t VALUES (1);
         {};
         {}; {};
         {}; {};",
        all_types_row(10),
        edge_row(11),
        toast_row(1),
        values::row(1, true),
        values::row(2, false),
        differences::row(1),
        differences::PREFILL,
    )
}

/// The streamed changes, one transaction per entry.
fn changes() -> Vec<String> {
    vec![
        format!(
            "{}; INSERT INTO types_t (id) VALUES (3);
             INSERT INTO types_t (id, c_big) VALUES (5, {BIG}); {};",
            all_types_row(2),
            edge_row(12)
        ),
        // c_big of 5 (streamed) and 6 (snapshotted) stays TOASTed.
        // numeric's special values, a zero interval.
        "UPDATE types_t SET c_text = 'changed', c_numv = 'Infinity' WHERE id = 2;
         UPDATE types_t SET c_text = 'toast stays', c_f4 = 3, c_f8 = 1e20 WHERE id = 5;
         UPDATE types_t SET c_int2 = 1, c_num = 'NaN', c_numv = 'NaN', c_interval = '0'
           WHERE id = 6;
         UPDATE types_t SET c_int2 = 2, c_numv = '-Infinity' WHERE id = 10;"
            .into(),
        "DELETE FROM types_t WHERE id = 3;".into(),
        toast_row(2),
        "UPDATE toast_t SET v = v + 1;".into(),
        // A primary-key change: delete + tombstone + create.
        "UPDATE types_t SET id = 20 WHERE id = 10;".into(),
        "INSERT INTO nopk_t VALUES ('a', 1);
         UPDATE nopk_t SET qty = 2 WHERE code = 'a';
         DELETE FROM nopk_t WHERE code = 'a';
         UPDATE full_t SET v = 'y' WHERE id = 1;
         DELETE FROM full_t WHERE id = 1;"
            .into(),
        // Two tables in one TRUNCATE (one pgoutput message): one `t` record
        // each when truncates are not skipped. full_t is empty by now.
        "TRUNCATE trunc_t, full_t;".into(),
        "INSERT INTO trunc_t VALUES (2);".into(),
        "DELETE FROM trunc_t WHERE id = 2;".into(),
        // A column added mid-stream, in its own transaction and together
        // with a change in the next one.
        "ALTER TABLE types_t ADD COLUMN extra int4 DEFAULT 7;".into(),
        "INSERT INTO types_t (id) VALUES (4);
         UPDATE types_t SET extra = 8 WHERE id = 2;"
            .into(),
        // A column dropped and one retyped mid-stream.
        "ALTER TABLE types_t DROP COLUMN c_varchar, ALTER COLUMN c_int2 TYPE int8;".into(),
        "UPDATE types_t SET extra = 9, c_int2 = 9007199254740993 WHERE id = 2;".into(),
        format!("{}; {};", values::row(3, true), values::row(4, false)),
        differences::row(2),
        differences::CHANGES.into(),
    ]
}

/// Records per table (without tombstones, and tombstones), the same on
/// both sides if they agree.
/// types_t: r 1, 6, 10, 11; c 2, 3, 5, 12; u 2, 5, 6, 10; d 3 + tombstone;
/// d 10 + tombstone + c 20; c 4; u 2; u 2.  nopk_t: r pre; c, u, d + tombstone.
/// full_t: r 1; u 1; d 1 + tombstone; t (only with `skipped.operations`
/// not skipping `t`).  trunc_t: r 1; t (idem); c 2; d 2 + tombstone.
/// toast_t: r 1; c 2; u 1, 2.
/// Per table: records (tombstones and truncates not counted), tombstones,
/// truncates.
const EXPECTED: &[(&str, usize, usize, usize)] = &[
    ("public.types_t", 18, 2, 0),
    ("public.nopk_t", 4, 1, 0),
    ("public.full_t", 3, 1, 1),
    ("public.trunc_t", 3, 1, 1),
    ("public.toast_t", 4, 0, 0),
    ("public.values_t", 4, 0, 0),
    ("public.diff_t", 2, 0, 0),
];
const SNAPSHOT_ROWS: usize = 11;

/// Records expected in a table's topic, from its [`EXPECTED`] counts.
fn expected(counts: (usize, usize, usize), run: &Run) -> usize {
    let (records, tombstones, truncates) = counts;
    records
        + if run.tombstones { tombstones } else { 0 }
        + if run.truncates { truncates } else { 0 }
}

#[test]
fn every_deliberate_difference_is_a_row_of_compatibility_md() {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/compatibility.md"),
    )
    .unwrap();
    let table = doc
        .split("## Where walrelay differs, and why")
        .nth(1)
        .expect("the section \"Where walrelay differs, and why\"");
    let keys = EXCLUDED_KEY_COLUMN.iter().map(|(t, _, row)| (t, row));
    let half = std::iter::once((&"drop_lone_high_surrogates", &HALF_CHARACTER));
    let empty = std::iter::once((
        &"transactions::EMPTY_TRANSACTIONS",
        &transactions::EMPTY_TRANSACTIONS,
    ));
    for (path, row) in DELIBERATE
        .iter()
        .map(|(p, _, row)| (p, row))
        .chain(keys)
        .chain(half)
        .chain(empty)
    {
        assert!(
            table.contains(&format!("\n| {row} |")),
            "DELIBERATE entry {path} names the row {row:?}, which is not in \
             docs/compatibility.md's \"Where walrelay differs, and why\""
        );
    }
}

/// Where `deploy/dev/connect.sh` put the Connect + Debezium jars.
fn connect_libs() -> (PathBuf, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (mut libs, mut version) = (
        std::env::var("WALRELAY_CONNECT_LIBS").unwrap_or_default(),
        std::env::var("WALRELAY_DEBEZIUM_VERSION").unwrap_or_default(),
    );
    if libs.is_empty() {
        let out = std::process::Command::new(root.join("deploy/dev/connect.sh"))
            .arg("env")
            .output()
            .expect("run deploy/dev/connect.sh env");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some(v) = line.strip_prefix("export WALRELAY_CONNECT_LIBS=") {
                libs = v.to_owned();
            }
            if let Some(v) = line.strip_prefix("export WALRELAY_DEBEZIUM_VERSION=") {
                version = v.to_owned();
            }
        }
    }
    let libs = PathBuf::from(libs);
    let has_jars = std::fs::read_dir(&libs)
        .map(|d| {
            d.flatten()
                .any(|e| e.path().extension() == Some("jar".as_ref()))
        })
        .unwrap_or(false);
    assert!(
        has_jars,
        "no Kafka Connect + Debezium jars in {}: run `eval \"$(deploy/dev/connect.sh up)\"` \
         (resolves them from Maven; deploy/test.sh does it), then the test again",
        libs.display()
    );
    (libs, version)
}

/// The JSON converter without schemas, for keys and values: the worker
/// converters of the comparisons of table events and messages.
const JSON_WITHOUT_SCHEMAS: &str = "key.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=false
value.converter=org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable=false
";

/// One Debezium PostgreSQL connector reading the test database as
/// walrelay does, through the publication it is given
/// (`publication.autocreate.mode=disabled`), with Debezium's defaults for
/// everything not named here.
struct Debezium<'a> {
    name: &'a str,
    topic_prefix: &'a str,
    slot: &'a str,
    /// `initial` or `no_data`.
    snapshot_mode: &'a str,
    /// `table.include.list`, as the properties file spells it.
    tables: &'a str,
    /// Further properties lines.
    more: &'a str,
}

impl Debezium<'_> {
    /// The connector's properties file for database `db` and publication
    /// `publication`.
    fn properties(&self, db: &TestDb, publication: &str) -> String {
        format!(
            "name={name}
connector.class=io.debezium.connector.postgresql.PostgresConnector
tasks.max=1
database.hostname=127.0.0.1
database.port={port}
database.user=walrelay
database.password=walrelay
database.dbname={db}
topic.prefix={topic_prefix}
plugin.name=pgoutput
slot.name={slot}
publication.name={publication}
publication.autocreate.mode=disabled
snapshot.mode={snapshot_mode}
table.include.list={tables}
poll.interval.ms=100
{more}",
            name = self.name,
            port = pg_port(),
            db = db.name,
            topic_prefix = self.topic_prefix,
            slot = self.slot,
            snapshot_mode = self.snapshot_mode,
            tables = self.tables,
            more = self.more,
        )
    }
}

/// A Kafka Connect standalone worker running one or more Debezium
/// PostgreSQL connectors (one properties text each); killed when dropped.
struct Connect {
    child: std::process::Child,
    log: PathBuf,
}

impl Connect {
    /// Starts a worker in a new directory under the temporary one (`name`
    /// in its name) that talks to the test broker and converts with
    /// `converters` (worker properties lines), running `connectors`.
    fn start(name: &str, libs: &Path, converters: &str, connectors: &[String]) -> Connect {
        Connect::start_with_classpath(
            name,
            &format!("{}/*", libs.display()),
            converters,
            connectors,
        )
    }

    /// [`Connect::start`] with the JVM's class path given whole (Connect's
    /// jars and a converter's).
    fn start_with_classpath(
        name: &str,
        classpath: &str,
        converters: &str,
        connectors: &[String],
    ) -> Connect {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = std::env::temp_dir().join(unique(name));
        std::fs::create_dir_all(&dir).unwrap();
        let worker = format!(
            "bootstrap.servers={brokers}
{converters}offset.storage.file.filename={offsets}
offset.flush.interval.ms=1000
listeners=http://{rest}
rest.advertised.host.name=127.0.0.1
plugin.discovery=service_load
",
            brokers = kafka_brokers(),
            offsets = dir.join("offsets.dat").display(),
            rest = free_local_addr(),
        );
        std::fs::write(dir.join("worker.properties"), worker).unwrap();
        let connectors: Vec<PathBuf> = connectors
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let path = dir.join(format!("connector{i}.properties"));
                std::fs::write(&path, c).unwrap();
                path
            })
            .collect();
        let log = dir.join("connect.log");
        let out = std::fs::File::create(dir.join("jvm.out")).unwrap();
        eprintln!("Kafka Connect log: {}", log.display());
        let child = std::process::Command::new("java")
            // A small heap and the C1 compiler only: a test's few dozen
            // records, and a faster start on a small machine.
            .args([
                "-Xms64m",
                "-Xmx512m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                // `column.mask.hash.v2` hashes `String.getBytes()`: in the
                // default charset, which is the locale's on Java 17. UTF-8,
                // as on Java 18+, whatever the machine's locale.
                "-Dfile.encoding=UTF-8",
            ])
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                root.join("deploy/bench/connect/log4j2.properties")
                    .display()
            ))
            .arg(format!("-Dbench.log.file={}", log.display()))
            .arg("-cp")
            .arg(classpath)
            .arg("org.apache.kafka.connect.cli.ConnectStandalone")
            .arg(dir.join("worker.properties"))
            .args(&connectors)
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start java (Kafka Connect): is a JDK 17 installed?");
        Connect { child, log }
    }

    fn log(&self) -> String {
        let mut s = std::fs::read_to_string(&self.log).unwrap_or_default();
        if let Ok(out) = std::fs::read_to_string(self.log.with_file_name("jvm.out")) {
            s.push_str(&out);
        }
        s
    }

    /// Panics with the log tail when the worker died or logged a task failure.
    fn assert_alive(&mut self) {
        let dead = !matches!(self.child.try_wait(), Ok(None));
        let log = self.log();
        let failed = log.contains("is being killed and will not recover")
            || log.contains("Task threw an uncaught and unrecoverable exception");
        if dead || failed {
            let tail: String = log
                .lines()
                .rev()
                .take(60)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            panic!(
                "Kafka Connect {} ({}):\n{tail}",
                if dead { "exited" } else { "task failed" },
                self.log.display()
            );
        }
    }
}

impl Drop for Connect {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One record: where it is and what it holds, parsed.
#[derive(Debug, Clone)]
struct Rec {
    partition: i32,
    offset: i64,
    key: Option<Value>,
    value: Option<Value>,
}

/// walrelay's records of `topic`, parsed as they are.
fn read(topic: &str) -> Vec<Rec> {
    read_as(topic, false)
}

/// Debezium's records of `topic`: the half characters it writes are
/// dropped first ([`drop_lone_high_surrogates`]).
fn read_debezium(topic: &str) -> Vec<Rec> {
    read_as(topic, true)
}

fn read_as(topic: &str, debezium: bool) -> Vec<Rec> {
    let parse = |bytes: &[u8]| -> Value {
        let fixed;
        let bytes = if debezium {
            fixed = drop_lone_high_surrogates(bytes);
            &fixed[..]
        } else {
            bytes
        };
        serde_json::from_slice(bytes).unwrap_or_else(|e| {
            panic!(
                "{topic}: not JSON ({e}): {}",
                String::from_utf8_lossy(bytes)
            )
        })
    };
    let mut got: Vec<Rec> = consume_to_end(&[topic])
        .into_iter()
        .map(|r| Rec {
            partition: r.partition,
            offset: r.offset,
            key: r.key.as_deref().map(parse),
            value: r.value.as_deref().map(parse),
        })
        .collect();
    got.sort_by_key(|r| (r.partition, r.offset));
    got
}

/// The row of docs/compatibility.md's "Where walrelay differs, and why"
/// that says why [`drop_lone_high_surrogates`] is applied to Debezium's
/// records.
const HALF_CHARACTER: &str = "a cut through a character outside the BMP";

/// JSON text with every `\uD800`-`\uDBFF` escape that is not followed by a
/// low-surrogate escape removed. `column.truncate.to.N.chars` cuts with
/// Java's `substring`, which can end between the two UTF-16 halves of a
/// character outside the BMP; Debezium then writes the lone half as
/// `"ab\uD83D"`, which strict JSON parsers (serde_json among them) refuse.
/// walrelay drops the whole character (`"ab"`): with the half removed, the
/// two must be equal ([`HALF_CHARACTER`]).
fn drop_lone_high_surrogates(json: &[u8]) -> Vec<u8> {
    let escape = |at: usize| -> Option<u16> {
        let hex = json.get(at..at + 6)?;
        if hex[0] != b'\\' || hex[1] != b'u' {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(&hex[2..]).ok()?, 16).ok()
    };
    let mut out = Vec::with_capacity(json.len());
    let mut i = 0;
    while i < json.len() {
        if json[i] != b'\\' {
            out.push(json[i]);
            i += 1;
            continue;
        }
        let len = if json.get(i + 1) == Some(&b'u') { 6 } else { 2 };
        let high = escape(i).is_some_and(|u| (0xD800..0xDC00).contains(&u));
        let low_next = escape(i + 6).is_some_and(|u| (0xDC00..0xE000).contains(&u));
        if !high || low_next {
            out.extend_from_slice(&json[i..(i + len).min(json.len())]);
        }
        i += len;
    }
    out
}

#[test]
fn lone_high_surrogates_are_dropped_and_nothing_else() {
    let fix = |s: &str| String::from_utf8(drop_lone_high_surrogates(s.as_bytes())).unwrap();
    assert_eq!(fix(r#"{"a":"ab\uD83D"}"#), r#"{"a":"ab"}"#);
    assert_eq!(
        fix(r#"["\uD83D\uDE00","\uD83Dx"]"#),
        r#"["\uD83D\uDE00","x"]"#
    );
    // An escaped backslash followed by the letters uD83D is text.
    assert_eq!(fix(r#""\\uD83D""#), r#""\\uD83D""#);
    assert_eq!(fix(r#""\n\"é""#), r#""\n\"é""#);
}

/// Removes the [`DELIBERATE`] fields from a value (each from the records
/// of its `op`s only); returns the second element of
/// `source.sequence`, which must be equal.
fn normalize(value: &mut Value) -> Option<Value> {
    let op = value["op"].as_str().map(str::to_owned);
    let mut sequence_lsn = value["source"]["sequence"]
        .as_str()
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .and_then(|s| s.get(1).cloned());
    for (path, ops, _doc_row) in DELIBERATE {
        let applies = *ops == "*" || op.as_deref().is_some_and(|op| ops.contains(op));
        if !applies {
            continue;
        }
        if *path == "source.sequence[1]" {
            sequence_lsn = None;
            continue;
        }
        let (parent, field) = match path.split_once('.') {
            Some((p, f)) => (value.get_mut(p), f),
            None => (Some(&mut *value), *path),
        };
        if let Some(Value::Object(m)) = parent {
            m.remove(field);
        }
    }
    sequence_lsn
}

/// `source.snapshot` of a table's snapshot rows: `"first"` and `"last"`
/// mark the snapshot's first and last rows, so which table has them depends
/// on the order the tables are read in, which differs between the two
/// connectors (docs/compatibility.md, "`source.snapshot` of snapshot
/// rows"). Rewrites them to the marker the row has within its table (a
/// table's only row is its last; its first row otherwise) so the rest is
/// compared; returns how many `"first"` and `"last"` there were.
fn table_markers(recs: &mut [Rec]) -> (usize, usize) {
    let snapshot = |r: &Rec| r.value.as_ref().is_some_and(|v| v["op"] == "r");
    let rows = recs.iter().filter(|r| snapshot(r)).count();
    let (mut first, mut last) = (0, 0);
    for r in recs.iter_mut().filter(|r| snapshot(r)) {
        let Some(marker) = r.value.as_mut().map(|v| &mut v["source"]["snapshot"]) else {
            continue;
        };
        let within_table = match marker.as_str() {
            Some("first") if rows == 1 => {
                first += 1;
                "last_in_data_collection"
            }
            Some("first") => {
                first += 1;
                "first_in_data_collection"
            }
            Some("last") => {
                last += 1;
                "last_in_data_collection"
            }
            _ => continue,
        };
        *marker = Value::from(within_table);
    }
    (first, last)
}

/// Every path where `w` (walrelay) and `d` (Debezium) differ.
fn diff(path: &str, w: &Value, d: &Value, out: &mut Vec<String>) {
    match (w, d) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let p = format!("{path}.{k}");
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => diff(&p, x, y, out),
                    (x, y) => out.push(format!(
                        "{p}: walrelay {}, Debezium {}",
                        x.map_or("(absent)".into(), |v| v.to_string()),
                        y.map_or("(absent)".into(), |v| v.to_string())
                    )),
                }
            }
        }
        // Numbers compare as parsed: `-2.5E-5` (Java) equals `-0.000025`
        // (walrelay), as compatibility.md's "float text" row says; an
        // integer never equals a float (`3` vs `3.0`).
        _ if w != d => out.push(format!("{path}: walrelay {w}, Debezium {d}")),
        _ => {}
    }
}

/// walrelay's records `w` and Debezium's `d`, paired: partition by partition
/// (the one `place` puts a record in), the `i`th record of each side in
/// offset order (`None` when that side has fewer); the records placed in
/// partition -1 ("any") in LSN order instead.
fn pairs<'a>(
    w: &'a [Rec],
    d: &'a [Rec],
    place: impl Fn(&Rec) -> i32,
) -> Vec<(i32, usize, Option<&'a Rec>, Option<&'a Rec>)> {
    let by_partition = |recs: &'a [Rec]| {
        let mut m: BTreeMap<i32, Vec<&'a Rec>> = BTreeMap::new();
        for r in recs {
            m.entry(place(r)).or_default().push(r);
        }
        if let Some(keyless) = m.get_mut(&-1) {
            keyless.sort_by_key(|r| {
                r.value
                    .as_ref()
                    .and_then(|v| v["source"]["lsn"].as_u64())
                    .unwrap_or(0)
            });
        }
        m
    };
    let (wp, dp) = (by_partition(w), by_partition(d));
    let partitions: std::collections::BTreeSet<i32> = wp.keys().chain(dp.keys()).copied().collect();
    let mut out = Vec::new();
    for p in partitions {
        let (ws, ds) = (
            wp.get(&p).map(Vec::as_slice).unwrap_or_default(),
            dp.get(&p).map(Vec::as_slice).unwrap_or_default(),
        );
        for i in 0..ws.len().max(ds.len()) {
            out.push((p, i, ws.get(i).copied(), ds.get(i).copied()));
        }
    }
    out
}

#[test]
fn pairs_match_records_by_partition_and_keyless_ones_by_lsn() {
    let rec = |partition: i32, offset: i64, lsn: u64| Rec {
        partition,
        offset,
        key: (partition >= 0).then(|| serde_json::json!({"id": offset})),
        value: Some(serde_json::json!({"source": {"lsn": lsn}})),
    };
    let w = [rec(1, 0, 10), rec(-1, 1, 30), rec(0, 2, 20), rec(-1, 3, 20)];
    let d = [rec(0, 5, 20), rec(-1, 6, 20), rec(-1, 7, 30)];
    let got: Vec<(i32, usize, Option<i64>, Option<i64>)> = pairs(&w, &d, |r| r.partition)
        .into_iter()
        .map(|(p, i, a, b)| (p, i, a.map(|r| r.offset), b.map(|r| r.offset)))
        .collect();
    assert_eq!(
        got,
        [
            (-1, 0, Some(3), Some(6)),
            (-1, 1, Some(1), Some(7)),
            (0, 0, Some(2), Some(5)),
            (1, 0, Some(0), None),
        ]
    );
}

/// Compares one topic's records; returns the differences.
fn compare(table: &str, w: &[Rec], d: &[Rec], keys_differ: &[KeyDifference]) -> Vec<String> {
    let op = |r: &Rec| {
        r.value
            .as_ref()
            .and_then(|v| v["op"].as_str())
            .unwrap_or("")
            .to_owned()
    };
    let key_differs = |r: &Rec| {
        keys_differ
            .iter()
            .any(|(t, ops, _)| *t == table && ops.contains(op(r).as_str()))
    };
    let mut out = Vec::new();
    if w.len() != d.len() {
        out.push(format!(
            "{table}: walrelay wrote {} records, Debezium {}",
            w.len(),
            d.len()
        ));
    }
    // Records without a key (truncates) go to partition -1, "any": the two
    // producers place them differently (Java's sticky partitioner,
    // librdkafka's murmur2_random picks a random partition); among
    // themselves they are compared in LSN order. So do records whose key
    // differs on purpose (`keys_differ`): the key picks the partition.
    let place = |r: &Rec| {
        if r.key.is_none() || key_differs(r) {
            -1
        } else {
            r.partition
        }
    };
    for (p, i, a, b) in pairs(w, d, place) {
        let at = format!("{table} partition {p} record {i}");
        let (Some(a), Some(b)) = (a, b) else {
            let (who, r) = match a {
                Some(r) => ("only walrelay", r),
                None => ("only Debezium", b.expect("a record on one side")),
            };
            out.push(format!(
                "{at}: {who} wrote offset {} key {:?} value {:?}",
                r.offset, r.key, r.value
            ));
            continue;
        };
        let at = format!("{at} (key {})", a.key.clone().unwrap_or(Value::Null));
        if a.key != b.key && !(key_differs(a) && key_differs(b)) {
            out.push(format!(
                "{at}: key: walrelay {:?}, Debezium {:?}",
                a.key, b.key
            ));
        }
        match (&a.value, &b.value) {
            (Some(av), Some(bv)) => {
                let (mut av, mut bv) = (av.clone(), bv.clone());
                let (sa, sb) = (normalize(&mut av), normalize(&mut bv));
                if sa != sb {
                    out.push(format!(
                        "{at}: source.sequence[1]: walrelay {sa:?}, Debezium {sb:?}"
                    ));
                }
                let mut d = Vec::new();
                diff("value", &av, &bv, &mut d);
                out.extend(d.into_iter().map(|d| format!("{at}: {d}")));
            }
            (None, None) => {}
            (av, bv) => out.push(format!(
                "{at}: value: walrelay {av:?}, Debezium {bv:?} (one is a tombstone)"
            )),
        }
    }
    out
}

async fn wait_counts(who: &str, prefix: &str, run: &Run, connect: &mut Option<&mut Connect>) {
    for (table, records, tombstones, truncates) in EXPECTED {
        let n = &expected((*records, *tombstones, *truncates), run);
        let topic = format!("{prefix}.{table}");
        let debezium = connect.is_some();
        wait_for(&format!("{n} {who} records in {topic}"), CATCH_UP, || {
            if let Some(c) = connect.as_mut() {
                c.assert_alive();
            }
            let topic = topic.clone();
            async move { (read_as(&topic, debezium).len() >= *n).then_some(()) }
        })
        .await;
    }
}

/// One comparison at a time: each runs a JVM, and the machines that run
/// CI have two cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What one comparison sets on each side.
struct Run {
    /// Added to Debezium's connector config.
    debezium: &'static str,
    /// Added to walrelay's `[table_defaults]`.
    walrelay_defaults: &'static str,
    /// walrelay's `[[table]]` entries (the same settings as `debezium`'s
    /// `column.*` and `message.key.columns`).
    walrelay_tables: &'static str,
    /// Whether deletes are followed by tombstones.
    tombstones: bool,
    /// Whether a TRUNCATE writes `op: "t"` records (`skipped.operations`
    /// does not skip `t`).
    truncates: bool,
    /// Records whose keys differ on purpose.
    keys_differ: &'static [KeyDifference],
    /// Checks walrelay's records (topic prefix given) for what the options
    /// must do, so that options ignored by both sides cannot pass.
    check: Option<fn(&str)>,
}

/// Records whose key differs on purpose: the table, the `op`s of the
/// records, and the row of docs/compatibility.md's "Where walrelay
/// differs, and why" that says why. Their keys are not compared, and
/// neither are their partitions (the key picks the partition); their
/// values are, in LSN order.
type KeyDifference = (&'static str, &'static str, &'static str);

/// trunc_t's key column `id` is left out by the column exclude list:
/// Debezium 3.6.1's snapshot does not read it, and keys its snapshot rows
/// `{"id":0}`; walrelay keys them with the real value (streamed changes:
/// the real value on both sides).
const EXCLUDED_KEY_COLUMN: &[KeyDifference] = &[(
    "public.trunc_t",
    "r",
    "the key of snapshot rows when a key column is left out",
)];

/// Debezium's defaults (besides `message.key.columns`, also in every
/// Debezium config below).
const DEFAULT_TABLES: &str = r#"
[[table]]
name = "public.nopk_t"
key_columns = ["code"]
[[table]]
name = "public.values_t"
# Debezium leaves these out (types it does not map): so does the list.
column_exclude_list = ["c_line", "c_lseg", "c_box", "c_path", "c_polygon", "c_circle", "c_pair", "a_interval", "a_money"]
[[table]]
name = "public.*"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_and_debezium_write_the_same_records_with_default_options() {
    compare_with_debezium(Run {
        // And transaction metadata ([`transactions`]).
        debezium: "provide.transaction.metadata=true\n",
        walrelay_defaults: "provide_transaction_metadata = true\n",
        walrelay_tables: DEFAULT_TABLES,
        tombstones: true,
        truncates: false,
        keys_differ: &[],
        check: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_and_debezium_agree_under_string_decimals_connect_times_hex_bytes_string_intervals()
 {
    compare_with_debezium(Run {
        debezium: "decimal.handling.mode=string
time.precision.mode=connect
binary.handling.mode=hex
interval.handling.mode=string
column.include.list=public\\.(types_t|nopk_t|full_t|trunc_t|values_t|diff_t|ident_t)\\..*,public\\.toast_t\\.(id|v|j|a_int4|a_bytea)
",
        walrelay_defaults: r#"decimal_handling_mode = "string"
time_precision_mode = "connect"
binary_handling_mode = "hex"
interval_handling_mode = "string"
column_include_list = ['public\.(types_t|nopk_t|full_t|trunc_t|values_t|diff_t|ident_t)\..*', 'public\.toast_t\.(id|v|j|a_int4|a_bytea)']
"#,
        walrelay_tables: r#"
[[table]]
name = "public.nopk_t"
key_columns = ["code"]
[[table]]
name = "public.values_t"
# Debezium leaves these out (types it does not map): so does the list.
column_exclude_list = ["c_line", "c_lseg", "c_box", "c_path", "c_polygon", "c_circle", "c_pair", "a_interval", "a_money"]
[[table]]
name = "public.*"
"#,
        tombstones: true,
        truncates: false,
        keys_differ: &[],
        check: Some(toast_t_columns_included),
    })
    .await;
}

/// The run above's column include list took effect in walrelay's records.
fn toast_t_columns_included(prefix: &str) {
    let values: Vec<Value> = read(&format!("{prefix}.public.toast_t"))
        .into_iter()
        .filter_map(|r| r.value)
        .collect();
    assert!(!values.is_empty());
    for v in values {
        let mut columns: Vec<&String> = v["after"].as_object().expect("after").keys().collect();
        columns.sort();
        assert_eq!(columns, ["a_bytea", "a_int4", "id", "j", "v"], "{v}");
    }
}

/// Also: column exclude lists (a key column among them), every kind of
/// column mask (a key column masked too, an unchanged TOASTed value
/// masked, a masked column dropped mid-stream), and truncates published
/// (`skipped.operations=none`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_and_debezium_agree_under_double_decimals_no_tombstones_column_lists_masks_truncates()
 {
    compare_with_debezium(Run {
        debezium: r"decimal.handling.mode=double
binary.handling.mode=base64
tombstones.on.delete=false
unavailable.value.placeholder=__gone
skipped.operations=none
column.exclude.list=public\\.types_t\\.c_json,public\\.types_t\\.c_bytea,public\\.trunc_t\\.id
column.mask.hash.SHA-256.with.salt.s4lt=public\\.types_t\\.c_text
column.mask.hash.v2.SHA-256.with.salt.s4lt=public\\.types_t\\.c_varchar,public\\.types_t\\.c_label
column.mask.with.4.chars=public\\.types_t\\.c_char,public\\.nopk_t\\.code
column.truncate.to.5.chars=public\\.types_t\\.c_big,public\\.toast_t\\.t
column.truncate.to.3.chars=public\\.types_t\\.c_cut
column.mask.hash.SHA-1.with.salt.s4lt=public\\.types_t\\.c_qchar
column.mask.hash.v2.SHA3-512.with.salt.other=public\\.types_t\\.c_char5
",
        walrelay_defaults: r#"decimal_handling_mode = "double"
binary_handling_mode = "base64"
tombstones_on_delete = false
unavailable_value_placeholder = "__gone"
skipped_operations = "none"
"#,
        walrelay_tables: r#"
[[table]]
name = "public.types_t"
column_exclude_list = ["c_json", "c_bytea"]
[[table.column_mask]]
columns = ["c_text"]
hash = "SHA-256"
salt = "s4lt"
[[table.column_mask]]
columns = ["c_varchar", "c_label"]
hash = "SHA-256"
salt = "s4lt"
hash_version = 2
[[table.column_mask]]
columns = ["c_char"]
with_chars = 4
[[table.column_mask]]
columns = ["c_big"]
truncate_to_chars = 5
[[table.column_mask]]
columns = ["c_cut"]
truncate_to_chars = 3
[[table.column_mask]]
columns = ["c_qchar"]
hash = "SHA-1"
salt = "s4lt"
[[table.column_mask]]
columns = ["c_char5"]
hash = "sha3-512"
salt = "other"
hash_version = 2
[[table]]
name = "public.toast_t"
[[table.column_mask]]
columns = ["t"]
truncate_to_chars = 5
[[table]]
name = "public.trunc_t"
column_exclude_list = ["id"]
[[table]]
name = "public.nopk_t"
key_columns = ["code"]
[[table.column_mask]]
columns = ["code"]
with_chars = 4
[[table]]
name = "public.values_t"
# Debezium leaves these out (types it does not map): so does the list.
column_exclude_list = ["c_line", "c_lseg", "c_box", "c_path", "c_polygon", "c_circle", "c_pair", "a_interval", "a_money"]
[[table]]
name = "public.*"
"#,
        tombstones: false,
        truncates: true,
        keys_differ: EXCLUDED_KEY_COLUMN,
        check: Some(columns_masked_and_truncates_written),
    })
    .await;
}

/// The column options and `skipped_operations` of the run above took
/// effect in walrelay's records (the comparison shows Debezium's agree).
fn columns_masked_and_truncates_written(prefix: &str) {
    let values = |table: &str| -> Vec<Value> {
        read(&format!("{prefix}.public.{table}"))
            .into_iter()
            .filter_map(|r| r.value)
            .collect()
    };
    let is_hex = |v: &Value, len: usize| {
        v.as_str().is_some_and(|s| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
    };
    let types = values("types_t");
    let created = |id: i64| {
        types
            .iter()
            .find(|v| v["op"] == "c" && v["after"]["id"] == id)
            .unwrap_or_else(|| panic!("no create of types_t {id} in {types:?}"))
    };
    let row2 = &created(2)["after"];
    assert!(is_hex(&row2["c_text"], 64), "c_text hashed: {row2}");
    assert!(is_hex(&row2["c_label"], 64), "c_label hashed: {row2}");
    assert!(
        is_hex(&row2["c_varchar"], 10),
        "c_varchar hashed, cut: {row2}"
    );
    assert_eq!(row2["c_char"], "****", "{row2}");
    assert_eq!(row2["c_big"], "small", "{row2}");
    assert_eq!(
        row2["c_cut"], "ab",
        "cut through a non-BMP character: {row2}"
    );
    assert!(is_hex(&row2["c_qchar"], 1), "\"char\" hashed, cut: {row2}");
    assert!(is_hex(&row2["c_char5"], 5), "char(5) hashed, cut: {row2}");
    assert!(
        row2.get("c_json").is_none() && row2.get("c_bytea").is_none(),
        "c_json, c_bytea left out: {row2}"
    );
    assert_eq!(created(5)["after"]["c_big"], "c4ca4", "c_big cut to 5");
    let toast_update = values("toast_t")
        .into_iter()
        .find(|v| v["op"] == "u")
        .expect("an update of toast_t");
    assert_eq!(
        toast_update["after"]["t"], "__gon",
        "an unchanged TOASTed value's placeholder cut to 5: {toast_update}"
    );
    let nopk: Vec<Rec> = read(&format!("{prefix}.public.nopk_t"));
    let a = nopk
        .iter()
        .find(|r| r.value.as_ref().is_some_and(|v| v["op"] == "c"))
        .expect("a create in nopk_t");
    assert_eq!(
        a.key,
        Some(serde_json::json!({"code": "a"})),
        "the key is not masked"
    );
    assert_eq!(a.value.as_ref().unwrap()["after"]["code"], "****");
    for table in ["trunc_t", "full_t"] {
        let t: Vec<Rec> = read(&format!("{prefix}.public.{table}"))
            .into_iter()
            .filter(|r| r.value.as_ref().is_some_and(|v| v["op"] == "t"))
            .collect();
        assert_eq!(t.len(), 1, "one truncate record in {table}: {t:?}");
        assert_eq!(t[0].key, None, "{t:?}");
    }
}

/// Runs Debezium with `run.debezium` added to its connector config and
/// walrelay with `run.walrelay_defaults` in `[table_defaults]` and
/// `run.walrelay_tables` (the same settings under their two names) on the
/// same changes, and compares every record.
async fn compare_with_debezium(run: Run) {
    let _one = ONE_AT_A_TIME.lock().await;
    require_kafka();
    let started = Instant::now();
    let (libs, debezium_version) = connect_libs();
    let db = TestDb::new("wr_dbz_compat").await;
    let names = Names::new("wr_dc");
    db.client.batch_execute(TABLES).await.expect("tables");
    db.client
        .batch_execute(values::TABLES)
        .await
        .expect("values_t");
    db.client
        .batch_execute(differences::TABLES)
        .await
        .expect("diff_t, ident_t");
    db.client.batch_execute(&prefill()).await.expect("prefill");
    // One publication for both: walrelay finds it complete, Debezium uses it
    // as it is (publication.autocreate.mode=disabled).
    db.client
        .batch_execute(&format!(
            "CREATE PUBLICATION {pub} FOR TABLE types_t, nopk_t, full_t, trunc_t, toast_t, values_t,
               diff_t, ident_t;
             ALTER PUBLICATION {pub} OWNER TO walrelay;",
            pub = names.publication
        ))
        .await
        .expect("publication");
    let (w_prefix, d_prefix) = (
        format!("{}_w", names.connector),
        format!("{}_d", names.connector),
    );
    let d_slot = format!("{}_dbz", names.slot);

    // Debezium's defaults for everything that shapes a record; only what
    // names things (prefix, slot, publication, tables) and the key of the
    // table without a primary key is set.
    let connector = Debezium {
        name: &d_prefix,
        topic_prefix: &d_prefix,
        slot: &d_slot,
        snapshot_mode: "initial",
        tables: "public\\\\.types_t,public\\\\.nopk_t,public\\\\.full_t,public\\\\.trunc_t,public\\\\.toast_t,public\\\\.values_t,public\\\\.diff_t,public\\\\.ident_t",
        more: &format!("message.key.columns=public.nopk_t:code\n{}", run.debezium),
    };
    let mut connect = Connect::start(
        "walrelay_dbz_compat",
        &libs,
        JSON_WITHOUT_SCHEMAS,
        &[connector.properties(&db, &names.publication)],
    );

    let config = connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{w_prefix}\"\n{}\n{}\n",
            run.walrelay_defaults, run.walrelay_tables
        ),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("snapshot completed", CATCH_UP).await;

    // Debezium: its slot exists (so every later change is in it) and its
    // snapshot is in Kafka.
    let d_topics: Vec<String> = EXPECTED
        .iter()
        .map(|(t, _, _, _)| format!("{d_prefix}.{t}"))
        .collect();
    wait_for("Debezium's snapshot", DEBEZIUM_READY, || {
        connect.assert_alive();
        let topics = d_topics.clone();
        let slot = d_slot.clone();
        let db = &db;
        async move {
            let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
            let snapshotted = consume_to_end(&refs).len() >= SNAPSHOT_ROWS;
            (snapshotted && db.confirmed_flush(&slot).await.is_some()).then_some(())
        }
    })
    .await;
    eprintln!("both snapshots done after {:?}", started.elapsed());

    for tx in changes() {
        db.client.batch_execute(&tx).await.expect(&tx);
    }
    wait_counts("walrelay", &w_prefix, &run, &mut None).await;
    wait_counts("Debezium", &d_prefix, &run, &mut Some(&mut connect)).await;
    eprintln!("both caught up after {:?}", started.elapsed());

    let mut differences = Vec::new();
    let (mut w_ends, mut d_ends) = ((0, 0), (0, 0));
    for (table, records, tombstones, truncates) in EXPECTED {
        let n = &expected((*records, *tombstones, *truncates), &run);
        let mut w = read(&format!("{w_prefix}.{table}"));
        let mut d = read_debezium(&format!("{d_prefix}.{table}"));
        for (recs, ends) in [(&mut w, &mut w_ends), (&mut d, &mut d_ends)] {
            let (first, last) = table_markers(recs);
            ends.0 += first;
            ends.1 += last;
        }
        // Exactly the expected records: in particular nothing for the
        // TRUNCATE, on either side.
        if w.len() != *n {
            differences.push(format!(
                "{table}: walrelay wrote {} records, not {n}",
                w.len()
            ));
        }
        differences.extend(compare(table, &w, &d, run.keys_differ));
    }
    // ident_t: keyed and shaped differently on purpose, as documented.
    let ident = "public.ident_t";
    let (w_n, d_n) = differences::IDENT_T_RECORDS;
    let (w_n, d_n) = if run.tombstones {
        (w_n, d_n)
    } else {
        (w_n - 2, d_n - 2)
    };
    let (mut w, mut d) = wait_for("ident_t's records on both sides", CATCH_UP, || {
        let (wt, dt) = (format!("{w_prefix}.{ident}"), format!("{d_prefix}.{ident}"));
        async move {
            let (w, d) = (read(&wt), read_debezium(&dt));
            (w.len() >= w_n && d.len() >= d_n).then_some((w, d))
        }
    })
    .await;
    for (recs, ends) in [(&mut w, &mut w_ends), (&mut d, &mut d_ends)] {
        let (first, last) = table_markers(recs);
        ends.0 += first;
        ends.1 += last;
    }
    differences.extend(differences::check_ident_t(&w, &d, run.tombstones));
    // Each snapshot has one first and one last row (every table here has
    // rows, so Debezium's first table does too).
    for (who, ends) in [("walrelay", w_ends), ("Debezium", d_ends)] {
        if ends != (1, 1) {
            differences.push(format!(
                "{who} marked {} snapshot rows \"first\" and {} \"last\", not one each",
                ends.0, ends.1
            ));
        }
    }
    if transactions::enabled(run.debezium) {
        differences.extend(transactions::compare(&w_prefix, &d_prefix, &mut connect).await);
    }
    if let Some(check) = run.check {
        check(&w_prefix);
    }
    assert!(
        differences.is_empty(),
        "walrelay and Debezium {debezium_version} differ in {} places \
         (fix walrelay, or document the difference in docs/compatibility.md \
         and list it in DELIBERATE):\n{}",
        differences.len(),
        differences.join("\n")
    );
    assert_eq!(relay.stop().code(), Some(0), "{}", relay.log());
    eprintln!("compared in {:?}", started.elapsed());
}
