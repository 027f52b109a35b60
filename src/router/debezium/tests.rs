//! Golden values for every type mapping. Expected JSON is derived from
//! Debezium's PostgreSQL connector documentation, section "Data type
//! mappings" (subsections "Basic types", "Temporal types", "Decimal types",
//! "Binary types"), and from how Kafka Connect's JSON converter writes the
//! Connect types named there (bytes and `Decimal` as base64, `NaN` floats as
//! strings through Jackson).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

fn modes() -> Modes {
    Modes::default()
}

/// The JSON for `text` in a column of type `oid(typmod)` under `modes`.
fn json_with(oid: Oid, typmod: i32, modes: Modes, text: &str) -> String {
    let mapping = Mapping::of(oid, typmod, modes).expect("mapped type");
    let mut out = Vec::new();
    let mut scratch = Vec::new();
    write_value(&mut out, mapping, text.as_bytes(), &mut scratch)
        .unwrap_or_else(|e| panic!("{text:?}: {e}"));
    String::from_utf8(out).unwrap()
}

fn json(oid: Oid, typmod: i32, text: &str) -> String {
    json_with(oid, typmod, modes(), text)
}

fn error(oid: Oid, typmod: i32, text: &str) -> ValueError {
    let mapping = Mapping::of(oid, typmod, modes()).expect("mapped type");
    write_value(&mut Vec::new(), mapping, text.as_bytes(), &mut Vec::new())
        .expect_err("expected an error")
}

/// Issue 24: a value that cannot be written is named by its type and
/// length, never quoted (errors reach logs, `/healthz` and `status`).
#[test]
fn a_bad_value_is_not_quoted_in_its_error() {
    for (oid, text) in [
        (23, "12SECRET"),
        (16, "SECRET"),
        (700, "SECRET.5"),
        (1082, "SECRET-01-01"),
    ] {
        let e = error(oid, -1, text);
        assert!(!e.to_string().contains("SECRET"), "{e}");
        assert!(e.to_string().contains("bytes is not valid"), "{e}");
    }
}

/// numeric(p,s) typmod: ((p << 16) | s) + 4.
fn numeric(p: i32, s: i32) -> i32 {
    ((p << 16) | s) + 4
}

#[test]
fn integers_and_booleans_are_json_numbers_and_booleans() {
    // "Basic types": INT16/INT32/INT64, BOOLEAN.
    assert_eq!(json(21, -1, "-32768"), "-32768");
    assert_eq!(json(23, -1, "42"), "42");
    assert_eq!(json(20, -1, "9223372036854775807"), "9223372036854775807");
    assert_eq!(json(16, -1, "t"), "true");
    assert_eq!(json(16, -1, "f"), "false");
    assert!(error(23, -1, "4x").0.contains("integer"));
    // Not a JSON number, so refused rather than passed through.
    assert!(error(23, -1, "007").0.contains("integer"));
    assert!(error(16, -1, "yes").0.contains("boolean"));
}

#[test]
fn floats_are_numbers_and_non_finite_ones_strings_as_jackson_writes_them() {
    // "Basic types": FLOAT32/FLOAT64; Jackson writes NaN/Infinity quoted.
    assert_eq!(json(700, -1, "1.1"), "1.1");
    assert_eq!(json(701, -1, "1"), "1.0");
    // The same number as Jackson's "-2.5E-5", spelt as Rust's shortest
    // round-trip form (docs/compatibility.md: numbers compare equal as JSON).
    assert_eq!(json(701, -1, "-2.5e-05"), "-0.000025");
    assert_eq!(json(701, -1, "NaN"), "\"NaN\"");
    assert_eq!(json(700, -1, "Infinity"), "\"Infinity\"");
    assert_eq!(json(701, -1, "-Infinity"), "\"-Infinity\"");
}

#[test]
fn precise_decimals_are_base64_of_the_unscaled_twos_complement_bytes() {
    // "Decimal types", decimal.handling.mode=precise: numeric(p,s) is
    // org.apache.kafka.connect.data.Decimal (BYTES, base64 in JSON).
    assert_eq!(json(1700, numeric(5, 2), "12.50"), "\"BOI=\""); // 1250 = 0x04E2
    assert_eq!(json(1700, numeric(5, 2), "-12.50"), "\"+x4=\""); // 0xFB1E
    assert_eq!(json(1700, numeric(5, 2), "0.00"), "\"AA==\"");
    assert_eq!(json(1700, numeric(3, 0), "128"), "\"AIA=\""); // sign byte added
    assert_eq!(json(1700, numeric(3, 0), "-128"), "\"gA==\"");
    assert_eq!(json(1700, numeric(3, 0), "-129"), "\"/38=\"");
    assert_eq!(
        json(1700, numeric(38, 0), "12345678901234567890123456789"),
        "\"J+QbMka+ybFuOYEV\""
    );
    // Fewer fractional digits than the scale are padded (never happens in
    // PostgreSQL's own output, but stays exact).
    assert_eq!(json(1700, numeric(5, 2), "12.5"), "\"BOI=\"");
    assert!(error(1700, numeric(5, 1), "12.50").0.contains("scale"));
}

#[test]
fn unconstrained_numeric_is_a_variable_scale_decimal_struct() {
    // "Decimal types": NUMERIC without scale → io.debezium.data.VariableScaleDecimal,
    // a struct of scale (INT32) and value (BYTES).
    assert_eq!(json(1700, -1, "3.14159"), r#"{"scale":5,"value":"BMsv"}"#);
    assert_eq!(json(1700, -1, "7"), r#"{"scale":0,"value":"Bw=="}"#);
    // NaN has no precise form.
    assert_eq!(json(1700, -1, "NaN"), "null");
}

#[test]
fn decimal_string_and_double_modes() {
    let string = Modes {
        decimal: DecimalHandlingMode::String,
        ..Modes::default()
    };
    let double = Modes {
        decimal: DecimalHandlingMode::Double,
        ..Modes::default()
    };
    assert_eq!(json_with(1700, numeric(5, 2), string, "12.50"), "\"12.50\"");
    // SpecialValueDecimal's names (compared with Debezium 3.6 by
    // tests/it/debezium_compat.rs).
    assert_eq!(json_with(1700, -1, string, "NaN"), "\"NAN\"");
    assert_eq!(
        json_with(1700, -1, string, "Infinity"),
        "\"POSITIVE_INFINITY\""
    );
    assert_eq!(
        json_with(1700, -1, string, "-Infinity"),
        "\"NEGATIVE_INFINITY\""
    );
    assert_eq!(json_with(1700, -1, string, "-0.000123"), "\"-0.000123\"");
    assert_eq!(json_with(1700, numeric(5, 2), double, "12.50"), "12.5");
    assert_eq!(json_with(1700, -1, double, "NaN"), "\"NaN\"");
    assert_eq!(json_with(1700, -1, double, "-Infinity"), "\"-Infinity\"");
}

#[test]
fn text_like_types_are_escaped_json_strings() {
    // "Basic types": CHAR/VARCHAR/TEXT, UUID, JSON/JSONB (io.debezium.data.Json),
    // INET/CIDR/MACADDR as STRING.
    for oid in [
        25, 1043, 1042, 2950, 114, 3802, 869, 650, 829, 774, 142, 19, 18,
    ] {
        assert_eq!(json(oid, -1, "a"), "\"a\"", "type {oid}");
    }
    assert_eq!(json(25, -1, "say \"hi\"\n\\"), r#""say \"hi\"\n\\""#);
    assert_eq!(json(3802, -1, r#"{"a": 1}"#), r#""{\"a\": 1}""#);
    assert_eq!(json(25, -1, "ünïcode"), "\"ünïcode\"");
}

#[test]
fn bytea_is_base64_or_hex() {
    // "Binary types": binary.handling.mode bytes (base64 in JSON) or hex.
    assert_eq!(json(17, -1, "\\x0102ff"), "\"AQL/\"");
    assert_eq!(json(17, -1, "\\x"), "\"\"");
    let hex = Modes {
        binary: BinaryHandlingMode::Hex,
        ..Modes::default()
    };
    assert_eq!(json_with(17, -1, hex, "\\x0102FF"), "\"0102ff\"");
    assert!(error(17, -1, "escape\\000").0.contains("bytea"));
}

#[test]
fn dates_are_days_since_the_epoch() {
    // "Temporal types": DATE → io.debezium.time.Date, days since the epoch.
    assert_eq!(json(1082, -1, "1970-01-01"), "0");
    assert_eq!(json(1082, -1, "2024-01-01"), "19723");
    assert_eq!(json(1082, -1, "1969-12-31"), "-1");
    assert!(error(1082, -1, "tomorrow").0.contains("date"));
}

#[test]
fn times_are_millis_or_micros_by_precision_in_adaptive_mode() {
    // "Temporal types", adaptive: TIME(1-3) → io.debezium.time.Time (ms),
    // TIME(4-6) and TIME → io.debezium.time.MicroTime (µs).
    assert_eq!(json(1083, -1, "13:45:10.5"), "49510500000");
    assert_eq!(json(1083, 3, "13:45:10.5"), "49510500");
    assert_eq!(json(1083, 6, "00:00:00.000001"), "1");
    assert_eq!(json(1083, -1, "24:00:00"), "86400000000");
    // connect: always milliseconds.
    let connect = Modes {
        time: TimePrecisionMode::Connect,
        ..Modes::default()
    };
    assert_eq!(json_with(1083, -1, connect, "13:45:10.5"), "49510500");
}

#[test]
fn timestamps_are_epoch_millis_or_micros_by_precision() {
    // "Temporal types", adaptive: TIMESTAMP(1-3) → io.debezium.time.Timestamp
    // (ms), TIMESTAMP(4-6)/TIMESTAMP → io.debezium.time.MicroTimestamp (µs).
    assert_eq!(
        json(1114, -1, "2024-01-01 00:00:00.123456"),
        "1704067200123456"
    );
    assert_eq!(json(1114, 3, "2024-01-01 00:00:00.123"), "1704067200123");
    assert_eq!(json(1114, -1, "1969-12-31 23:59:59.5"), "-500000");
    assert_eq!(json(1114, 0, "1969-12-31 23:59:59.5"), "-500");
    let connect = Modes {
        time: TimePrecisionMode::Connect,
        ..Modes::default()
    };
    assert_eq!(
        json_with(1114, -1, connect, "2024-01-01 00:00:00.123456"),
        "1704067200123"
    );
    assert!(error(1114, -1, "tomorrow").0.contains("timestamp"));
}

#[test]
fn zoned_timestamps_and_times_are_iso_strings_in_utc() {
    // "Temporal types": TIMESTAMPTZ → io.debezium.time.ZonedTimestamp and
    // TIMETZ → io.debezium.time.ZonedTime, ISO-8601 strings in UTC (GMT).
    // ZonedTimestamp pads the fraction to the column's precision (6 when
    // unset), as Debezium 3.6 does (tests/it/debezium_compat.rs compares it);
    // timestamptz(0) has no fraction.
    assert_eq!(
        json(1184, -1, "2024-01-01 05:30:00.5+05:30"),
        "\"2024-01-01T00:00:00.500000Z\""
    );
    assert_eq!(
        json(1184, -1, "2024-01-01 00:00:00.123456+00"),
        "\"2024-01-01T00:00:00.123456Z\""
    );
    assert_eq!(
        json(1184, -1, "2023-12-31 23:00:00-02"),
        "\"2024-01-01T01:00:00.000000Z\""
    );
    assert_eq!(
        json(1184, 3, "2024-01-01 00:00:00.12+00"),
        "\"2024-01-01T00:00:00.120Z\""
    );
    assert_eq!(
        json(1184, 0, "2024-01-01 00:00:01+00"),
        "\"2024-01-01T00:00:01Z\""
    );
    // ZonedTime: Java's ISO_OFFSET_TIME, trailing zeros dropped.
    assert_eq!(json(1266, -1, "10:00:00+02"), "\"08:00:00Z\"");
    assert_eq!(json(1266, -1, "01:00:00.25+02"), "\"23:00:00.25Z\"");
    assert_eq!(json(1266, 6, "01:00:00.25+02"), "\"23:00:00.25Z\"");
}

#[test]
fn intervals_are_micros_with_average_months() {
    // "Temporal types": INTERVAL → io.debezium.time.MicroDuration, months as
    // 365.25 / 12 days (interval.handling.mode=numeric, the default).
    assert_eq!(
        json(1186, -1, "1 year 2 mons 3 days 04:05:06.5"),
        "37091106500000"
    );
    assert_eq!(json(1186, -1, "00:00:01"), "1000000");
    assert_eq!(json(1186, -1, "-1 days -00:00:01"), "-86401000000");
    assert_eq!(json(1186, -1, "00:00:00"), "0");
}

#[test]
fn intervals_as_iso_strings_in_string_mode() {
    // "Temporal types": interval.handling.mode=string → io.debezium.time.Interval,
    // P<years>Y<months>M<days>DT<hours>H<minutes>M<seconds>S.
    let string = Modes {
        interval: IntervalHandlingMode::String,
        ..Modes::default()
    };
    assert_eq!(
        json_with(1186, -1, string, "1 year 2 mons 3 days 04:05:06.5"),
        "\"P1Y2M3DT4H5M6.5S\""
    );
    assert_eq!(
        json_with(1186, -1, string, "-1 days -00:01:02.25"),
        "\"P0Y0M-1DT0H-1M-2.25S\""
    );
    assert_eq!(
        json_with(1186, -1, string, "00:00:00"),
        "\"P0Y0M0DT0H0M0S\""
    );
}

#[test]
fn one_dimensional_arrays_are_json_arrays_of_their_elements() {
    // "Basic types": ARRAY → Kafka Connect ARRAY of the element's type.
    assert_eq!(json(1007, -1, "{1,2,NULL}"), "[1,2,null]");
    assert_eq!(json(1007, -1, "{}"), "[]");
    assert_eq!(
        json(1009, -1, r#"{a,"b c","d\"e",NULL,"NULL"}"#),
        r#"["a","b c","d\"e",null,"NULL"]"#
    );
    assert_eq!(json(1000, -1, "{t,f}"), "[true,false]");
    assert_eq!(json(1182, -1, "{1970-01-02}"), "[1]");
    assert_eq!(
        json(1185, -1, r#"{"2024-01-01 00:00:00.5+00",NULL}"#),
        r#"["2024-01-01T00:00:00.500000Z",null]"#
    );
    // Issue 27: other bounds are dropped (Debezium 3.6.1), several
    // dimensions nest (Debezium writes no value for them).
    assert_eq!(json(1007, -1, "[0:2]={7,8,9}"), "[7,8,9]");
    assert_eq!(json(1007, -1, "[-1:0]={1,2}"), "[1,2]");
    assert_eq!(json(1007, -1, "{{1,2},{3,4}}"), "[[1,2],[3,4]]");
    assert_eq!(
        json(1009, -1, r#"[0:1][1:1]={{"a,b"},{NULL}}"#),
        r#"[["a,b"],[null]]"#
    );
    assert_eq!(json(1016, -1, "{{{1}}}"), "[[[1]]]");
    for bad in [
        "[0:1]{1,2}",
        "[x]={1}",
        "{{1,2}",
        "{1,2}}",
        "{{{{{{{1}}}}}}}",
        "{1,{2}",
        "{1\"2}",
    ] {
        let _ = error(1007, -1, bad);
    }
}

/// Issue 27: the arrays once refused, as Debezium 3.6.1 wrote them in
/// tests/it/debezium_compat.rs.
#[test]
fn arrays_of_numeric_time_timetz_inet_and_bytea() {
    assert_eq!(
        json(1231, -1, "{1.5,-2,NULL}"),
        r#"[{"scale":1,"value":"Dw=="},{"scale":0,"value":"/g=="},null]"#
    );
    assert_eq!(
        json(1231, numeric(6, 2), "{1.50,-2.25}"),
        r#"["AJY=","/x8="]"#
    );
    // Variable-scale elements lose their fraction's trailing zeros (never
    // a negative scale); string mode keeps the text.
    let string = Modes {
        decimal: DecimalHandlingMode::String,
        ..modes()
    };
    assert_eq!(
        json_with(1231, -1, string, "{1.00000,1.50,0.00001000,100.00,0.000}"),
        r#"["1.00000","1.50","0.00001000","100.00","0.000"]"#
    );
    assert_eq!(
        json(
            1231,
            -1,
            "{1.00000000000000000000,1.50,0.00001000,1.0000500,100.00,0.000,-3.10}"
        ),
        r#"[{"scale":0,"value":"AQ=="},{"scale":1,"value":"Dw=="},{"scale":5,"value":"AQ=="},{"scale":5,"value":"AYal"},{"scale":0,"value":"ZA=="},{"scale":0,"value":"AA=="},{"scale":1,"value":"4Q=="}]"#
    );
    // Scalars keep their text's scale.
    assert_eq!(json_with(1700, -1, string, "1.00000"), r#""1.00000""#);
    // NaN or an infinity anywhere: the whole column is null, in every mode.
    assert_eq!(json(1231, -1, "{NaN,0}"), "null");
    assert_eq!(json(1231, numeric(6, 2), "{1,Infinity}"), "null");
    assert_eq!(json_with(1231, -1, string, "{1.50,-2}"), r#"["1.50","-2"]"#);
    assert_eq!(json_with(1231, -1, string, "{NaN}"), "null");
    assert_eq!(
        json(1183, -1, "{13:45:10.5,00:00:00,24:00:00}"),
        "[49510500000,0,0]"
    );
    assert_eq!(
        json(1270, -1, "{10:00:00+02,00:00:00-03:30}"),
        r#"["08:00:00Z","03:30:00Z"]"#
    );
    assert_eq!(
        json(1041, -1, "{192.168.0.1/24,::1,NULL}"),
        r#"["192.168.0.1/24","::1",null]"#
    );
    assert_eq!(
        json(1001, -1, r#"{"\\x0102",NULL,"\\x"}"#),
        r#"["AQI=",null,""]"#
    );
    let hex = Modes {
        binary: BinaryHandlingMode::Hex,
        ..modes()
    };
    assert_eq!(json_with(1001, -1, hex, r#"{"\\x0102"}"#), r#"["0102"]"#);
}

/// Issue 27: infinities and the extremes, as Debezium 3.6.1 wrote them.
#[test]
fn special_values_are_written_as_debezium_writes_them() {
    // Dates: the stream's numbers; in arrays, the JDBC driver's.
    assert_eq!(json(1082, -1, "infinity"), "-2147472692");
    assert_eq!(json(1082, -1, "-infinity"), "-2147472691");
    assert_eq!(
        json(1182, -1, "{infinity,-infinity,NULL}"),
        "[-622191234,-625821272,null]"
    );
    assert_eq!(json(1082, -1, "5874897-12-31"), "2145042905");
    // Timestamps: the JDBC driver's infinity milliseconds (as µs, or ms).
    assert_eq!(json(1114, -1, "infinity"), "9223372036825200000");
    assert_eq!(json(1114, -1, "-infinity"), "-9223372036832400000");
    assert_eq!(json(1114, 3, "infinity"), "9223372036825200");
    assert_eq!(json(1114, 3, "-infinity"), "-9223372036832400");
    assert_eq!(
        json(1115, -1, "{infinity,-infinity}"),
        "[9223372036825200000,-9223372036832400000]"
    );
    // Past 64-bit microseconds: saturated seconds plus wrapped micros.
    assert_eq!(
        json(1114, -1, "294276-12-31 23:59:59.999999"),
        "-9223372036853775810"
    );
    assert_eq!(
        json(1114, 3, "294276-12-31 23:59:59.999999"),
        "9224318015999999"
    );
    assert_eq!(
        json(1114, -1, "4713-01-01 00:00:00 BC"),
        "-210863520000000000"
    );
    // timestamptz: strings; Java's signed years.
    assert_eq!(json(1184, -1, "infinity"), r#""infinity""#);
    assert_eq!(json(1184, -1, "-infinity"), r#""-infinity""#);
    assert_eq!(
        json(1184, -1, "294276-12-31 23:59:59.999999+00"),
        r#""+294276-12-31T23:59:59.999999Z""#
    );
    assert_eq!(
        json(1184, -1, "0002-01-01 00:00:00+00 BC"),
        r#""-0001-01-01T00:00:00.000000Z""#
    );
    assert_eq!(
        json(1185, -1, "{infinity,-infinity}"),
        r#"["infinity","+292269055-12-02T23:00:00.000000Z"]"#
    );
    assert_eq!(
        json(1185, 0, "{-infinity}"),
        r#"["+292269055-12-02T23:00:00Z"]"#
    );
    // Intervals: infinity is zero; beyond 64 bits, saturated.
    assert_eq!(json(1186, -1, "infinity"), "0");
    assert_eq!(json(1186, -1, "-infinity"), "0");
    let max = "178956970 years 7 mons 2147483647 days 2562047788:00:54.775806";
    let min = "-178956970 years -8 mons -2147483648 days -2562047788:00:54.775807";
    assert_eq!(json(1186, -1, max), "9223372036854775807");
    assert_eq!(json(1186, -1, min), "-9223372036854775808");
    assert_eq!(
        json(
            1186,
            -1,
            "178956970 years 7 mons 2147483647 days 596523:14:07.999999"
        ),
        "9223372036854775807"
    );
    let string = Modes {
        interval: IntervalHandlingMode::String,
        ..modes()
    };
    assert_eq!(
        json_with(1186, -1, string, "infinity"),
        r#""P0Y0M0DT0H0M0S""#
    );
    assert_eq!(
        json_with(1186, -1, string, max),
        r#""P178956970Y7M2147483647DT2562047788H0M54.775806S""#
    );
}

/// `special_values = "fail"`: each of those values stops the connector,
/// naming the setting; `unmapped_types = "text"` still writes its text.
#[test]
fn special_values_fail_refuses_them() {
    let fail = Modes {
        special: SpecialValues::Fail,
        ..modes()
    };
    for (oid, typmod, value) in [
        (1082, -1, "infinity"),
        (1182, -1, "{-infinity}"),
        (1114, -1, "infinity"),
        (1114, -1, "294276-12-31 23:59:59.999999"),
        (1184, -1, "-infinity"),
        (1185, -1, "{-infinity}"),
        (1186, -1, "infinity"),
        (
            1186,
            -1,
            "178956970 years 7 mons 2147483647 days 2562047788:00:54.775806",
        ),
        (1007, -1, "[0:2]={7,8,9}"),
        (1007, -1, "{{1}}"),
    ] {
        let mapping = Mapping::of(oid, typmod, fail).unwrap();
        let e = write_value(&mut Vec::new(), mapping, value.as_bytes(), &mut Vec::new())
            .expect_err(value);
        assert!(e.0.contains("special_values"), "{value}: {e}");
        let text = Modes {
            unmapped: UnmappedTypes::Text,
            ..fail
        };
        assert_eq!(
            json_with(oid, typmod, text, value),
            serde_json::to_string(value).unwrap()
        );
    }
    // Ordinary values pass.
    assert_eq!(json_with(1082, -1, fail, "1970-01-02"), "1");
    assert_eq!(json_with(1007, -1, fail, "{1,2}"), "[1,2]");
}

/// Issue 27: the types once refused, as Debezium 3.6.1 wrote them.
#[test]
fn money_bits_hstore_point_ranges_tsvector() {
    assert_eq!(json(790, -1, "$1,234.56"), r#""AeJA""#);
    assert_eq!(
        json(790, -1, "-$92,233,720,368,547,758.08"),
        r#""gAAAAAAAAAA=""#
    );
    let string = Modes {
        decimal: DecimalHandlingMode::String,
        ..modes()
    };
    assert_eq!(json_with(790, -1, string, "-$1,234.56"), r#""-1234.56""#);
    let double = Modes {
        decimal: DecimalHandlingMode::Double,
        ..modes()
    };
    assert_eq!(json_with(790, -1, double, "$1,234.56"), "1234.56");
    for bad in [
        "1,234.56",
        "$",
        "$1e5",
        "-$-1",
        "€1",
        "$99999999999999999999999999999999999",
    ] {
        let _ = error(790, -1, bad);
    }
    // bit(1) a boolean; longer bit strings their little-endian bytes.
    assert_eq!(json(1560, 1, "1"), "true");
    assert_eq!(json(1560, 1, "0"), "false");
    assert_eq!(json(1560, 10, "1010000011"), r#""gwI=""#);
    assert_eq!(json(1560, 10, "0000000001"), r#""AQ==""#);
    assert_eq!(json(1560, 10, "0000000000"), r#""""#);
    assert_eq!(json(1562, -1, "101"), r#""BQ==""#);
    assert_eq!(json(1562, -1, ""), r#""""#);
    assert_eq!(json(1562, -1, "1111111111111111"), r#""//8=""#);
    assert_eq!(
        json(1562, -1, "1000000000000000000000000000000"),
        r#""AAAAQA==""#
    );
    let _ = error(1562, -1, "102");
    let _ = error(1560, 1, "2");
    // hstore: a JSON string of an object, keys in Java HashMap order.
    assert_eq!(
        json(HSTORE, -1, r#""a"=>"1", "b c"=>NULL"#),
        r#""{\"a\":\"1\",\"b c\":null}""#
    );
    assert_eq!(json(HSTORE, -1, ""), r#""{}""#);
    assert_eq!(
        json(HSTORE, -1, r#""c"=>"1", "ab"=>"2", "ba"=>"x\\\"y""#),
        r#""{\"ab\":\"2\",\"c\":\"1\",\"ba\":\"x\\\\\\\"y\"}""#
    );
    assert_eq!(
        json(HSTORE, -1, "\"k\"=>\"\u{1}\""),
        r#""{\"k\":\"\\u0001\"}""#
    );
    for bad in [
        r#""a"=>"#,
        r#""a""#,
        r#""a"=>"1","b"=>"2""#,
        r#"a=>1"#,
        r#""a"=>"1", "#,
    ] {
        let _ = error(HSTORE, -1, bad);
    }
    // More than 12 keys: the map grows to 32 buckets.
    let many: Vec<String> = (0..13).map(|i| format!("\"k{i}\"=>\"{i}\"")).collect();
    let v: serde_json::Value = serde_json::from_str(&json(HSTORE, -1, &many.join(", "))).unwrap();
    let inner: serde_json::Value = serde_json::from_str(v.as_str().unwrap()).unwrap();
    assert_eq!(inner.as_object().unwrap().len(), 13);
    // point: Debezium's Point struct.
    assert_eq!(
        json(600, -1, "(1.5,-2)"),
        r#"{"x":1.5,"y":-2.0,"wkb":"AQEAAAAAAAAAAAD4PwAAAAAAAADA","srid":null}"#
    );
    for bad in ["(1.5)", "1,2", "(a,b)", "(1,2"] {
        let _ = error(600, -1, bad);
    }
    // Ranges and tsvector: their text.
    for oid in [3904, 3906, 3908, 3910, 3912, 3926, 3614] {
        assert_eq!(json(oid, -1, "[1,10)"), r#""[1,10)""#);
    }
}

#[test]
fn unchanged_toast_placeholder_takes_the_column_representation() {
    // unavailable.value.placeholder in the forms of Debezium 3.6.1's
    // UnchangedToastedPlaceholder (tests/it/debezium_compat.rs compares them).
    let p = "__debezium_unavailable_value";
    let placeholder = |oid: Oid, modes: Modes| {
        let mapping = Mapping::of(oid, -1, modes).unwrap();
        let mut out = Vec::new();
        write_placeholder(&mut out, Unchanged::of(oid, mapping, modes), p);
        String::from_utf8(out).unwrap()
    };
    let hex = Modes {
        binary: BinaryHandlingMode::Hex,
        ..Modes::default()
    };
    assert_eq!(placeholder(25, modes()), format!("\"{p}\""));
    assert_eq!(placeholder(3802, modes()), format!("\"{p}\""));
    // bytea: its bytes, base64; in hex mode the string as it is.
    assert_eq!(
        placeholder(17, modes()),
        "\"X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==\""
    );
    assert_eq!(placeholder(17, hex), format!("\"{p}\""));
    // Issue 27: Debezium's `base64` mode writes null (its `bytes` mode, the
    // default, the bytes above).
    let base64 = Modes {
        binary: BinaryHandlingMode::Base64,
        ..Modes::default()
    };
    assert_eq!(placeholder(17, base64), "null");
    for text_array in [1009, 1015, 1014, 199, 3807] {
        assert_eq!(placeholder(text_array, modes()), format!("[\"{p}\"]"));
    }
    let bytes = "[95,95,100,101,98,101,122,105,117,109,95,117,110,97,118,97,105,108,97,98,108,\
                 101,95,118,97,108,117,101]";
    for int_array in [1007, 1016, 1182] {
        assert_eq!(placeholder(int_array, modes()), bytes);
    }
    // Java's UUID.nameUUIDFromBytes(placeholder bytes), as Debezium wrote it.
    assert_eq!(
        placeholder(2951, modes()),
        "[\"b68a35a7-17ad-35b3-af2a-ae46edb4545a\"]"
    );
    for lost in [1000, 1005, 1021, 1022, 1115, 1185] {
        assert_eq!(placeholder(lost, modes()), "null", "array type {lost}");
    }
    let connect = Modes {
        time: TimePrecisionMode::Connect,
        ..Modes::default()
    };
    assert_eq!(placeholder(1182, connect), "null");
    // Java bytes are signed.
    let mut out = Vec::new();
    write_placeholder(&mut out, Unchanged::ByteNumbers, "é");
    assert_eq!(out, b"[-61,-87]");
    // Issue 27's types, as Debezium 3.6.1 wrote them: bytea[] a list of the
    // bytes, hstore an object of the placeholder, bit strings null.
    assert_eq!(
        placeholder(1001, modes()),
        "[\"X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==\"]"
    );
    let mapping = Mapping::of(HSTORE, -1, modes()).unwrap();
    let mut out = Vec::new();
    write_placeholder(&mut out, Unchanged::of(16_555, mapping, modes()), p);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        format!(r#""{{\"{p}\":\"{p}\"}}""#)
    );
    let varbit = Mapping::of(1562, -1, modes()).unwrap();
    assert_eq!(Unchanged::of(1562, varbit, modes()), Unchanged::Null);
    for same in [1231, 1041, 1183, 1270] {
        assert_eq!(placeholder(same, modes()), "null", "array type {same}");
    }
}

#[test]
fn unmapped_types_are_refused() {
    // line, lseg, box, path, polygon, circle, interval[], money[], a
    // composite's oid: Debezium 3.6.1 leaves such columns out.
    for oid in [628, 601, 603, 602, 604, 718, 1187, 791, 16_400] {
        assert_eq!(Mapping::of(oid, -1, modes()), None, "type {oid}");
    }
}

#[test]
fn hostile_text_never_panics() {
    let kinds = [
        20, 16, 700, 701, 1700, 25, 17, 1082, 1083, 1114, 1184, 1266, 1186, 1007, 1009, 790, 1560,
        1562, 600, HSTORE, 1231, 1183, 1001,
    ];
    let inputs: [&[u8]; 12] = [
        b"",
        b"-",
        b".",
        b"{",
        b"}",
        b"{\"",
        b"\\x0",
        b"99999999999-99-99",
        b"1 year",
        b"::",
        b"\xff\xfe",
        b"2024-01-01 25:00:00+99:99:99:99",
    ];
    for oid in kinds {
        let mapping = Mapping::of(oid, -1, modes()).unwrap();
        for input in inputs {
            let _ = write_value(&mut Vec::new(), mapping, input, &mut Vec::new());
        }
    }
}

proptest::proptest! {
    /// Any bytes, any mapped type: an error or JSON, never a panic; and
    /// whatever is written parses as JSON.
    #[test]
    fn arbitrary_text_never_panics_and_output_is_json(
        text in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        oid in proptest::sample::select(vec![
            20_u32, 16, 700, 701, 1700, 25, 17, 1082, 1083, 1114, 1184, 1266, 1186,
            1007, 1009, 1000, 1022, 1182, 1185, 790, 1560, 1562, 600, HSTORE, 1231, 1183,
            1270, 1001,
        ]),
        typmod in proptest::sample::select(vec![-1_i32, 3, 6, (10 << 16 | 2) + 4]),
    ) {
        let mapping = Mapping::of(oid, typmod, modes()).unwrap();
        let mut out = Vec::new();
        if write_value(&mut out, mapping, &text, &mut Vec::new()).is_ok() {
            let parsed: Result<serde_json::Value, _> = serde_json::from_slice(&out);
            proptest::prop_assert!(parsed.is_ok(), "{:?} → {:?}", text, String::from_utf8_lossy(&out));
        }
    }

    /// Interval and numeric texts made of their own alphabet.
    #[test]
    fn interval_and_numeric_alphabets_never_panic(
        text in "[-0-9.: a-z]{0,40}",
    ) {
        for (oid, typmod) in [(1186_u32, -1), (1700, -1), (1700, (38 << 16 | 4) + 4), (1114, -1), (1184, -1)] {
            let mapping = Mapping::of(oid, typmod, modes()).unwrap();
            let _ = write_value(&mut Vec::new(), mapping, text.as_bytes(), &mut Vec::new());
        }
    }
}

/// `unmapped_types = "text"`: types without a mapping are written as
/// their text form; mapped types keep their mapping, and only values it
/// cannot write fall back to the text form.
#[test]
fn unmapped_types_text_writes_the_text_form() {
    let text = Modes {
        unmapped: UnmappedTypes::Text,
        ..modes()
    };
    // line, circle, interval[], money[], a composite's oid.
    for oid in [628, 718, 1187, 791, 16_500] {
        assert_eq!(Mapping::of(oid, -1, modes()), None, "oid {oid}");
        assert!(!Mapping::is_mapped(oid, -1), "oid {oid}");
        assert_eq!(
            Mapping::of(oid, -1, text).map(|m| (m.kind, m.array)),
            Some((Kind::Text, false)),
            "oid {oid}"
        );
    }
    assert_eq!(json_with(718, -1, text, "<(1,2),3>"), r#""<(1,2),3>""#);
    assert_eq!(
        json_with(2249, -1, text, r#"(1,"x ""y""")"#),
        r#""(1,\"x \"\"y\"\"\")""#
    );
    // Mapped types are unchanged.
    assert!(Mapping::is_mapped(23, -1));
    assert_eq!(json_with(23, -1, text, "42"), "42");
    assert_eq!(json_with(1007, -1, text, "{1,NULL}"), "[1,null]");
    // Values the mapping cannot write: the text form under "text", an
    // error otherwise.
    for (oid, value) in [(1007, "{1,x}"), (1114, "not a time"), (1082, "2024-13-01")] {
        let _ = error(oid, -1, value);
        assert_eq!(
            json_with(oid, -1, text, value),
            serde_json::to_string(value).unwrap(),
            "{value} in oid {oid}"
        );
    }
}
