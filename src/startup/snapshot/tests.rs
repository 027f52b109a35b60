use super::*;

#[test]
fn thousands_are_grouped() {
    assert_eq!(thousands(0), "0");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(1_000), "1,000");
    assert_eq!(thousands(123_456), "123,456");
    assert_eq!(thousands(1_234_567), "1,234,567");
    assert_eq!(thousands(u64::MAX), "18,446,744,073,709,551,615");
}

#[test]
fn row_estimates_say_when_they_are_unknown_or_partial() {
    let e = |rows, unknown, relations| {
        describe_estimate(&RowEstimate {
            rows,
            unknown,
            relations,
        })
    };
    assert_eq!(e(123_456, 0, 1), "~123,456");
    assert_eq!(e(0, 1, 1), "unknown (never vacuumed or analyzed)");
    assert_eq!(
        e(500, 1, 3),
        "~500+ (1 of 3 partitions never vacuumed or analyzed)"
    );
    assert_eq!(e(0, 0, 0), "~0");
}
