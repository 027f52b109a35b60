//! Dates, times and intervals written the way Debezium writes them: Java's
//! ISO-8601 forms (`ZonedTimestamp`, `ZonedTime`, `Interval` strings) and
//! `MicroDuration`. Parsing the text is `router::time`'s.
//!
//! Invariants: years as Java writes them (four digits at least, `+` after
//! 9999, `-` before year 1); fractions exactly as Debezium 3.x pads or
//! trims them; no `core::fmt` on the common path.

use std::io::Write as _;

use super::push_int;
use crate::router::time::{IntervalParts, civil_from_days};

/// Debezium's `ZonedTimestamp`: ISO-8601 in UTC. With `fraction` 1-6 the
/// fraction has exactly that many digits, zeros included
/// (`2024-01-01T10:00:00.120Z` for `timestamptz(3)`), as Debezium 3.x's
/// `appendFraction(NANO_OF_SECOND, w, w, true)`; with 0, Java's
/// `ISO_OFFSET_DATE_TIME`: no trailing zeros, no fraction for whole seconds.
///
/// Years as Java writes them: four digits at least, `+` before years after
/// 9999, `-` before years before 1 (1 BC is year 0).
pub(super) fn write_iso_timestamp(out: &mut Vec<u8>, secs: i64, frac: i64, fraction: u8) {
    let days = secs.div_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    if y > 9999 {
        out.push(b'+');
        push_int(out, y);
    } else if y < 0 {
        out.push(b'-');
        push_padded(out, y.unsigned_abs(), 4);
    } else {
        push_padded(out, y.unsigned_abs(), 4);
    }
    out.push(b'-');
    push_padded(out, m.unsigned_abs(), 2);
    out.push(b'-');
    push_padded(out, d.unsigned_abs(), 2);
    out.push(b'T');
    let of_day = secs.rem_euclid(86_400) * 1_000_000 + frac;
    if fraction == 0 {
        write_iso_time(out, of_day);
    } else {
        write_hms(out, of_day / 1_000_000);
        let digits = fraction_digits(of_day % 1_000_000);
        out.push(b'.');
        out.extend_from_slice(&digits[..usize::from(fraction.min(6))]);
    }
    out.push(b'Z');
}

fn write_hms(out: &mut Vec<u8>, secs: i64) {
    if secs < 0 {
        let _ = write!(
            out,
            "{:02}:{:02}:{:02}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        );
        return;
    }
    let secs = secs.unsigned_abs();
    push_padded(out, secs / 3600, 2);
    out.push(b':');
    push_padded(out, secs / 60 % 60, 2);
    out.push(b':');
    push_padded(out, secs % 60, 2);
}

/// `v` with at least `width` digits (zeros in front), as `{v:0width$}`.
fn push_padded(out: &mut Vec<u8>, v: u64, width: usize) {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(v);
    out.extend(std::iter::repeat_n(
        b'0',
        width.saturating_sub(digits.len()),
    ));
    out.extend_from_slice(digits.as_bytes());
}

/// The six digits of a fraction of a second given in microseconds.
fn fraction_digits(mut micros: i64) -> [u8; 6] {
    let mut digits = [0u8; 6];
    for slot in digits.iter_mut().rev() {
        *slot = b'0' + (micros % 10) as u8;
        micros /= 10;
    }
    digits
}

/// Java's `ISO_LOCAL_TIME`: `HH:MM:SS`, then the fraction without trailing
/// zeros if there is one.
pub(super) fn write_iso_time(out: &mut Vec<u8>, micros: i64) {
    write_hms(out, micros / 1_000_000);
    let frac = micros % 1_000_000;
    if frac != 0 {
        let digits = fraction_digits(frac);
        let len = 6 - digits.iter().rev().take_while(|&&d| d == b'0').count();
        out.push(b'.');
        out.extend_from_slice(&digits[..len]);
    }
}

/// Debezium's `MicroDuration`: months count 365.25/12 days (PostgreSQL
/// connector docs, "Temporal types", `interval.handling.mode` `numeric`).
/// Beyond 64 bits the result saturates, as Debezium's double-to-long
/// conversion does (`true`: it did).
pub(super) fn interval_micros(p: IntervalParts) -> (i64, bool) {
    const DAYS_PER_MONTH: f64 = 365.25 / 12.0;
    let total_days = p.months as f64 * DAYS_PER_MONTH + p.days as f64;
    let day_micros = total_days * 86_400_000_000.0;
    // `as` saturates out-of-range floats, as Java's `(long)` does.
    let fits = day_micros.abs() < 9.223_372_036_854_775e18;
    match (day_micros as i64).checked_add(p.micros) {
        Some(v) => (v, !fits),
        None if p.micros > 0 => (i64::MAX, true),
        None => (i64::MIN, true),
    }
}

/// Debezium's `Interval` string (`interval.handling.mode` `string`):
/// `P<years>Y<months>M<days>DT<hours>H<minutes>M<seconds>S`, each part
/// carrying its own sign, seconds without trailing zeros.
pub(super) fn write_iso_interval(out: &mut Vec<u8>, p: IntervalParts) {
    let (years, months) = (p.months / 12, p.months % 12);
    let hours = p.micros / 3_600_000_000;
    let minutes = p.micros / 60_000_000 % 60;
    let second_micros = p.micros % 60_000_000;
    let _ = write!(out, "P{years}Y{months}M{}DT{hours}H{minutes}M", p.days);
    if second_micros < 0 {
        out.push(b'-');
    }
    let abs = second_micros.unsigned_abs();
    let _ = write!(out, "{}", abs / 1_000_000);
    let frac = abs % 1_000_000;
    if frac != 0 {
        let mut digits = [0u8; 6];
        let mut f = frac;
        for slot in digits.iter_mut().rev() {
            *slot = b'0' + (f % 10) as u8;
            f /= 10;
        }
        let len = 6 - digits.iter().rev().take_while(|&&d| d == b'0').count();
        out.push(b'.');
        out.extend_from_slice(&digits[..len]);
    }
    out.push(b'S');
}
