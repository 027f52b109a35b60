//! Unit tests of the calendar and the date/time text parsers (moved here
//! from `router/tests.rs` with the parsers; the Debezium value tests in
//! `router/debezium/tests.rs` still go through them end to end).

use super::*;

#[test]
fn timestamps_with_offsets() {
    assert_eq!(parse_timestamptz_ms(b"1970-01-01 00:00:00+00"), Ok(0));
    assert_eq!(parse_timestamptz_ms(b"1970-01-01 05:30:00+05:30"), Ok(0));
    assert_eq!(parse_timestamptz_ms(b"1969-12-31 23:00:00.5-01"), Ok(500));
    assert_eq!(
        parse_timestamptz_ms(b"2000-02-29 12:00:00+00"),
        Ok(951_825_600_000)
    );
    assert_eq!(
        parse_timestamptz_ms(b"2026-11-30 01:02:03.123456+00"),
        Ok(1_796_000_523_123)
    );
    // Historic zones print seconds in the offset.
    assert_eq!(parse_timestamptz_ms(b"1970-01-01 00:00:01+00:00:01"), Ok(0));
    // PostgreSQL's largest timestamptz.
    assert_eq!(
        parse_timestamptz_ms(b"294276-12-31 23:59:59.999999+00"),
        Ok(9_224_318_015_999_999)
    );
    assert_eq!(
        parse_timestamptz_ms(b"not a time"),
        Err(TimestampError::NotIso)
    );
    assert_eq!(
        parse_timestamptz_ms(b"2020-13-01 00:00:00+00"),
        Err(TimestampError::NotIso)
    );
}

#[test]
fn hostile_timestamps_are_named_errors() {
    use TimestampError::*;
    let cases: &[(&[u8], TimestampError)] = &[
        (b"infinity", Infinite),
        (b"-infinity", Infinite),
        (b"0044-03-15 12:00:00+00 BC", BeforeEpoch),
        (b"1969-12-31 23:59:59.999+00", BeforeEpoch),
        (b"0001-01-01 00:00:00+00", BeforeEpoch),
        // Overflowed i64 (a panic in debug builds) before checked arithmetic.
        (b"999999999999-01-01 00:00:00+00", OutOfRange),
        (b"9999999999999999999-01-01 00:00:00+00", NotIso),
        (b"2020-01-01 00:00:00+99999999999999999", NotIso),
        (b"2020-01-01 00:00:00+16", NotIso),
        (b"2020-01-01 00:00:00-99:99", NotIso),
        (b"2020-02-30 00:00:00+00", NotIso),
        (b"2021-02-29 00:00:00+00", NotIso),
        (b"2020-01-01 24:00:00+00", NotIso),
        (b"2020-01-01 00:00:00.+00", NotIso),
        (b"2020-01-01 00:00:00.+5+00", NotIso),
        (b"2020-01-01 +1:00:00+00", NotIso),
        (b"2020-01-01 00:00:00+", NotIso),
        (b"2020-01-01 00:00:00", NotIso),
        // DateStyle SQL, DMY — what a database default used to produce.
        (b"30/11/2026 01:02:03.123 UTC", NotIso),
        (b"\xff\xfe", NotIso),
        (b"", NotIso),
    ];
    for (text, want) in cases {
        assert_eq!(
            parse_timestamptz_ms(text),
            Err(*want),
            "{}",
            String::from_utf8_lossy(text)
        );
    }
    for e in [NotIso, Infinite, BeforeEpoch, OutOfRange] {
        assert!(!e.reason().is_empty() && !e.fix().is_empty());
    }
    assert!(Infinite.reason().contains("infinity"));
    assert!(BeforeEpoch.reason().contains("before the Unix epoch"));
    assert!(
        OutOfRange
            .reason()
            .contains("out of Kafka's timestamp range")
    );
}

proptest::proptest! {
    #[test]
    fn timestamp_parsing_never_panics_on_any_string(s in ".*") {
        let _ = parse_timestamptz_ms(s.as_bytes());
    }

    #[test]
    fn timestamp_parsing_never_panics_on_timestamp_like_text(
        s in "-?[0-9]{1,22}-[0-9]{1,3}-[0-9]{1,3} [0-9]{1,3}:[0-9]{1,3}:[0-9]{1,22}(\\.[0-9]{0,9})?[+-][0-9]{1,22}(:[0-9]{1,3}){0,3}( BC)?"
    ) {
        if let Ok(ms) = parse_timestamptz_ms(s.as_bytes()) {
            proptest::prop_assert!(ms >= 0, "{s} -> {ms}");
        }
    }

    #[test]
    fn whole_seconds_round_trip_through_the_civil_calendar(secs in 0i64..9_224_318_016) {
        // Format with a trusted calendar walk (days_in_month), then parse.
        let (mut days, rem) = (secs / 86_400, secs % 86_400);
        let mut year = 1970;
        loop {
            let len = if days_in_month(year, 2) == 29 { 366 } else { 365 };
            if days < len { break; }
            days -= len;
            year += 1;
        }
        let mut month = 1;
        while days >= days_in_month(year, month) {
            days -= days_in_month(year, month);
            month += 1;
        }
        let text = format!(
            "{year:04}-{month:02}-{:02} {:02}:{:02}:{:02}+00",
            days + 1, rem / 3600, rem / 60 % 60, rem % 60
        );
        proptest::prop_assert_eq!(parse_timestamptz_ms(text.as_bytes()), Ok(secs * 1000), "{}", text);
    }
}

#[test]
fn the_calendar_runs_both_ways() {
    // The cases the Debezium date mapping and the outbox timestamp parser
    // each relied on: the epoch, leap days, century rules, BC years.
    let cases: &[((i64, i64, i64), i64)] = &[
        ((1970, 1, 1), 0),
        ((1969, 12, 31), -1),
        ((2000, 2, 29), 11_016),
        ((2000, 3, 1), 11_017),
        ((1900, 3, 1), -25_508),
        ((2026, 11, 30), 20_787),
        ((0, 1, 1), -719_528),
        ((-43, 3, 15), -735_160),
        ((294_276, 12, 31), 106_762_939),
    ];
    for &((y, m, d), days) in cases {
        assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        assert_eq!(civil_from_days(days), (y, m, d), "{days}");
    }
}

#[test]
fn debezium_date_and_time_text() {
    assert_eq!(parse_date(b"1970-01-01"), Some(0));
    assert_eq!(parse_date(b"2000-02-29"), Some(11_016));
    // 1 BC is year 0.
    assert_eq!(parse_date(b"0001-01-01 BC"), Some(-719_528));
    assert_eq!(parse_date(b"infinity"), None);
    assert_eq!(parse_time(b"00:00:00"), Some(0));
    assert_eq!(parse_time(b"01:02:03.5"), Some(3_723_500_000));
    assert_eq!(parse_time(b"24:00:00"), Some(86_400_000_000));
    assert_eq!(parse_time(b"25:00:00"), None);
    assert_eq!(parse_offset(b"+05:30"), Some(19_800));
    assert_eq!(parse_offset(b"-01"), Some(-3600));
    assert_eq!(parse_offset(b"01"), None);
    assert_eq!(
        parse_timestamp(b"1970-01-01 00:00:01.25", false),
        Some((1, 250_000))
    );
    assert_eq!(
        parse_timestamp(b"1970-01-01 05:30:00+05:30", true),
        Some((0, 0))
    );
    assert_eq!(parse_timestamp(b"infinity", false), None);
    assert_eq!(parse_timetz(b"00:30:00+01"), Some(84_600_000_000));
    assert_eq!(
        parse_interval(b"1 year 2 mons -3 days 04:05:06.5"),
        Some(IntervalParts {
            months: 14,
            days: -3,
            micros: 14_706_500_000
        })
    );
    assert_eq!(parse_interval(b"1 fortnight"), None);
}
