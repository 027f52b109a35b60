//! The values that once stopped walrelay where Debezium writes one
//! (`infinity` dates and timestamps, the extreme timestamps and intervals,
//! arrays with other bounds or several dimensions) and the types once
//! refused or written as text (`money`, `bit`, `varbit`, the extension
//! types `hstore`, `ltree`, `citext`, `tsvector`, the geometric types,
//! ranges, a composite type, arrays of `numeric`, `time`, `interval`,
//! `inet`, `bytea`): one table, `values_t`, two rows of each value set,
//! one snapshotted and one streamed, compared with Debezium record by
//! record in every run of `debezium_compat`.

/// The types `values_t` needs, and the table (the extensions are created
/// with the other tables).
pub const TABLES: &str = "CREATE TYPE pair AS (a int4, b text);
  CREATE TABLE values_t (id int4 PRIMARY KEY,
    d_inf date, d_ninf date, ts_max timestamp, ts_inf timestamp, ts_ninf timestamp,
    ts3_inf timestamp(3), tstz_max timestamptz, tstz_inf timestamptz, tstz_ninf timestamptz,
    iv_max interval, iv_min interval,
    a_bounds int4[], a_2d int4[], a_2d_text text[], a_3d int8[], a_dates date[],
    c_money money, c_bit1 bit(1), c_bit bit(10), c_varbit varbit,
    c_hstore hstore, c_ltree ltree, c_citext citext, c_tsv tsvector,
    c_point point, c_line line, c_lseg lseg, c_box box, c_path path, c_polygon polygon,
    c_circle circle,
    r_int4 int4range, r_int8 int8range, r_num numrange, r_ts tsrange, r_tstz tstzrange,
    r_date daterange,
    c_pair pair,
    a_num numeric[], a_num2 numeric(6,2)[], a_time time[], a_timetz timetz[],
    a_interval interval[], a_inet inet[], a_bytea bytea[], a_money money[],
    c_time24 time, a_ts timestamp[], a_tstz timestamptz[], c_bits2 varbit);
  ALTER TABLE values_t OWNER TO walrelay;";

/// A row of `values_t`: value set `a` (extremes and typical values) or `b`
/// (the other extremes, empty and unbounded values, NULL elements).
/// The intervals' hours stop at 596523 (2^31 - 1 seconds): Debezium 3.6.1
/// stops on more than 2^31 - 1 hours (the JDBC driver's `PGInterval` reads
/// them as an `int`), in snapshot and stream alike, so PostgreSQL's extreme
/// intervals (2562047788 hours) are compared by unit tests only
/// (docs/compatibility.md, "intervals of 2^31 hours or more").
pub fn row(id: i32, a: bool) -> String {
    let hours = "596523:14:07.999999";
    if a {
        format!(
            "INSERT INTO values_t VALUES ({id}, 'infinity', '-infinity',
            '294276-12-31 23:59:59.999999', 'infinity', '-infinity', 'infinity',
            '294276-12-31 23:59:59.999999+00', 'infinity', '-infinity',
            '178956970 years 7 months 2147483647 days {hours}',
            '-178956970 years -8 months -2147483648 days -{hours}',
            '[0:2]={{7,8,9}}', '{{{{1,2}},{{3,4}}}}', '{{{{a,\"b c\"}},{{NULL,d}}}}', '{{{{{{1}}}}}}',
            '{{infinity,2024-01-01}}',
            1234.56, B'1', B'1010000011', B'101',
            'a=>1, \"b c\"=>NULL', 'Top.Science.Astronomy', 'MiXeD Case', 'a fat:2 cat',
            '(1.5,-2)', '{{1,2,3}}', '[(0,0),(1,1)]', '(1,1),(0,0)', '[(0,0),(1,1),(2,0)]',
            '((0,0),(1,1),(1,0))', '<(1,2),3>',
            '[1,10)', '[1,10)', '(1.5,2.5]', '[2024-01-01 00:00,2024-01-02 00:00)',
            '[2024-01-01 00:00+00,2024-01-02 00:00+00)', '[2024-01-01,2024-02-01)',
            '(1,\"x y\")',
            '{{1.5,-2,NULL,1.50,0.10,1.0000500,100.00,0.000,-3.10,0.00001000}}', '{{1.5,-2.25}}', '{{13:45:10.5,00:00:00}}', '{{10:00:00+02}}',
            '{{\"1 day\",\"-1 mons\"}}', '{{192.168.0.1/24,::1}}', '{{\"\\\\x0102\",NULL}}',
            '{{1.5,-2}}', '24:00:00', '{{infinity,-infinity}}',
            '{{infinity,\"294276-12-31 23:59:59.999999+00\"}}', B'1111111111111111')"
        )
    } else {
        // PostgreSQL 17 and later have infinite intervals.
        let infinite = |v: &str| {
            format!(
                "(CASE WHEN current_setting('server_version_num')::int >= 170000 \
                 THEN '{v}infinity' ELSE '{v}1 day' END)::interval"
            )
        };
        let (inf, ninf) = (infinite(""), infinite("-"));
        format!(
            "INSERT INTO values_t VALUES ({id}, '2000-02-29', '5874897-12-31',
            '4713-01-01 00:00:00 BC', '1970-01-01 00:00:00', NULL, '-infinity',
            '4713-01-01 00:00:00+00 BC', NULL, NULL, {inf}, {ninf},
            '[-1:0]={{1,2}}', '{{}}', '{{\"\"}}', NULL, '{{-infinity,NULL}}',
            -92233720368547758.08, B'0', B'0000000001', B'',
            'c=>1, ab=>2, ba=>\"x\\\\\\\"y\"', 'a', '', '',
            '(0,0)', '{{0,-1,0}}', '[(1,2),(3,4)]', '(0,0),(0,0)', '((0,0),(1,1))',
            '((0,0))', '<(0,0),0>',
            'empty', '(,5]', '[-1.5,)', '(,)', 'empty', '[2024-01-01,)',
            '(,)',
            '{{NaN,0}}', '{{NULL}}', '{{24:00:00}}', '{{00:00:00-03:30}}',
            '{{}}', '{{NULL}}', '{{\"\\\\x\"}}', '{{0}}', '23:59:59.999999',
            '{{\"294276-12-31 23:59:59.999999\"}}', '{{-infinity}}',
            B'1000000000000000000000000000000')"
        )
    }
}
