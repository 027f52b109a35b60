//! Dates and times in PostgreSQL's text output (`DateStyle=ISO`,
//! `TimeZone=UTC`, `IntervalStyle=postgres`, the settings walrelay sets on
//! every connection) → numbers: the proleptic Gregorian calendar both ways,
//! the parsers of `date`, `time`, `timetz`, `timestamp`, `timestamptz` and
//! `interval` text that the Debezium value mapping uses, and the stricter
//! `timestamptz` → Kafka record timestamp parser of `outbox.timestamp_column`.
//!
//! Invariants:
//! - **One calendar.** Every day count in the router comes from
//!   [`days_from_civil`] / [`civil_from_days`] here (Howard Hinnant's
//!   algorithms, proleptic Gregorian, day 0 = 1970-01-01).
//! - **Never panics on input.** Every number is bounded in digits before it
//!   is used, and arithmetic that could overflow is checked: text that is
//!   not what PostgreSQL writes is `None` / a [`TimestampError`].
//! - Pure: no clock, no allocation, no I/O.

/// Why a timestamp column's value cannot be a Kafka record timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TimestampError {
    /// Not `timestamptz` text in DateStyle ISO (e.g. a `timestamp` without
    /// time zone, or a foreign DateStyle).
    NotIso,
    /// `infinity` or `-infinity`.
    Infinite,
    /// Before 1970-01-01 00:00:00 UTC (BC dates included): Kafka timestamps
    /// are non-negative milliseconds since the Unix epoch.
    BeforeEpoch,
    /// Does not fit Kafka's 64-bit millisecond timestamp.
    OutOfRange,
}

impl TimestampError {
    pub(super) fn reason(self) -> &'static str {
        match self {
            TimestampError::NotIso => "the value is not a timestamp with time zone in ISO format",
            TimestampError::Infinite => "the value is infinity, which no Kafka timestamp can hold",
            TimestampError::BeforeEpoch => {
                "the value is before the Unix epoch (1970-01-01 00:00:00 UTC); Kafka timestamps \
                 cannot be negative"
            }
            TimestampError::OutOfRange => {
                "the value is out of Kafka's timestamp range (milliseconds since 1970 in a signed \
                 64-bit integer)"
            }
        }
    }

    pub(super) fn fix(self) -> &'static str {
        match self {
            TimestampError::NotIso => {
                "make the timestamp column a timestamptz (walrelay sets DateStyle=ISO and \
                 TimeZone=UTC on its connections), or unset outbox.timestamp_column"
            }
            TimestampError::Infinite | TimestampError::BeforeEpoch | TimestampError::OutOfRange => {
                "write a time between 1970 and the year 294276 in that column (a CHECK constraint \
                 keeps it so), or unset outbox.timestamp_column to let the producer stamp records"
            }
        }
    }
}

/// Parses timestamptz text output in DateStyle ISO
/// (`2026-11-30 01:02:03.123456+00`, `…+05:30`, `…+00 BC`, `infinity`) to
/// Unix milliseconds. Never panics: every number is bounded before it is
/// used and the arithmetic is checked.
pub(super) fn parse_timestamptz_ms(text: &[u8]) -> Result<i64, TimestampError> {
    use TimestampError::{BeforeEpoch, Infinite, NotIso, OutOfRange};
    /// All ASCII digits, 1..=max of them, as a number.
    fn digits(s: &str, max: usize) -> Result<i64, TimestampError> {
        number(s.as_bytes(), max).ok_or(NotIso)
    }
    let s = std::str::from_utf8(text).map_err(|_| NotIso)?;
    if s == "infinity" || s == "-infinity" {
        return Err(Infinite);
    }
    if s.ends_with(" BC") {
        return Err(BeforeEpoch);
    }
    let (date, rest) = s.split_once(' ').ok_or(NotIso)?;
    let mut d = date.split('-');
    // Years grow past four digits (PostgreSQL allows up to 294276); twelve
    // digits keep the day arithmetic far from overflow.
    let year = digits(d.next().ok_or(NotIso)?, 12)?;
    let month = digits(d.next().ok_or(NotIso)?, 2)?;
    let day = digits(d.next().ok_or(NotIso)?, 2)?;
    if d.next().is_some()
        || !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
    {
        return Err(NotIso);
    }
    let tz_at = rest.find(['+', '-']).ok_or(NotIso)?;
    let (time, tz) = rest.split_at(tz_at);
    let mut t = time.split(':');
    let hour = digits(t.next().ok_or(NotIso)?, 2)?;
    let minute = digits(t.next().ok_or(NotIso)?, 2)?;
    let sec_text = t.next().ok_or(NotIso)?;
    if t.next().is_some() {
        return Err(NotIso);
    }
    let (sec, frac) = match sec_text.split_once('.') {
        Some((s, f)) => (digits(s, 2)?, Some(f)),
        None => (digits(sec_text, 2)?, None),
    };
    if hour > 23 || minute > 59 || sec > 59 {
        return Err(NotIso);
    }
    let millis = match frac {
        None => 0,
        Some(f) => {
            // Microseconds at most; keep the first three digits.
            digits(f, 6)?;
            let first3: String = f.chars().chain(std::iter::repeat('0')).take(3).collect();
            digits(&first3, 3)?
        }
    };
    let sign = if tz.starts_with('-') { -1 } else { 1 };
    let mut tzp = tz.get(1..).ok_or(NotIso)?.split(':');
    let tzh = digits(tzp.next().ok_or(NotIso)?, 2)?;
    let tzm = tzp.next().map_or(Ok(0), |m| digits(m, 2))?;
    let tzs = tzp.next().map_or(Ok(0), |m| digits(m, 2))?;
    if tzp.next().is_some() || tzh > 15 || tzm > 59 || tzs > 59 {
        return Err(NotIso);
    }
    let offset = sign * (tzh * 3600 + tzm * 60 + tzs);
    let days = days_from_civil(year, month, day);
    let secs = days
        .checked_mul(86_400)
        .and_then(|s| s.checked_add(hour * 3600 + minute * 60 + sec - offset))
        .ok_or(OutOfRange)?;
    let ms = secs
        .checked_mul(1000)
        .and_then(|ms| ms.checked_add(millis))
        .ok_or(OutOfRange)?;
    if ms < 0 {
        return Err(BeforeEpoch);
    }
    Ok(ms)
}

/// Days in `month` (1..=12) of a proleptic Gregorian `year`.
pub(super) fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub(super) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's algorithm; the inverse of [`days_from_civil`]).
pub(super) fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// All ASCII digits, 1..=max of them.
pub(super) fn number(s: &[u8], max: usize) -> Option<i64> {
    if s.is_empty() || s.len() > max || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |n, &d| n * 10 + i64::from(d - b'0')))
}

/// `.ffffff` → microseconds (up to six digits, padded).
pub(super) fn fraction_micros(f: &[u8]) -> Option<i64> {
    let v = number(f, 6)?;
    Some(v * 10_i64.pow(6 - f.len() as u32))
}

/// `YYYY-MM-DD` (years may be longer; ` BC` allowed) → days since 1970.
/// `infinity` has no day number: `None`.
pub(super) fn parse_date(text: &[u8]) -> Option<i64> {
    match text.strip_suffix(b" BC") {
        Some(t) => date_days(t, true),
        None => date_days(text, false),
    }
}

fn date_days(text: &[u8], bc: bool) -> Option<i64> {
    let mut parts = text.split(|&b| b == b'-');
    let year = number(parts.next()?, 9)?;
    let month = number(parts.next()?, 2)?;
    let day = number(parts.next()?, 2)?;
    if parts.next().is_some() || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let year = if bc { 1 - year } else { year };
    Some(days_from_civil(year, month, day))
}

/// `HH:MM:SS[.ffffff]` → microseconds (24:00:00 allowed, as PostgreSQL does).
pub(super) fn parse_time(text: &[u8]) -> Option<i64> {
    let (hms, frac) = match text.iter().position(|&b| b == b'.') {
        Some(i) => (&text[..i], fraction_micros(&text[i + 1..])?),
        None => (text, 0),
    };
    let mut p = hms.split(|&b| b == b':');
    let h = number(p.next()?, 2)?;
    let m = number(p.next()?, 2)?;
    let s = number(p.next()?, 2)?;
    if p.next().is_some() || h > 24 || m > 59 || s > 60 {
        return None;
    }
    Some(((h * 60 + m) * 60 + s) * 1_000_000 + frac)
}

/// `+HH[:MM[:SS]]` / `-HH…` → seconds east of UTC.
pub(super) fn parse_offset(text: &[u8]) -> Option<i64> {
    let sign = match text.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let mut p = text[1..].split(|&b| b == b':');
    let h = number(p.next()?, 2)?;
    let m = p.next().map_or(Some(0), |m| number(m, 2))?;
    let s = p.next().map_or(Some(0), |s| number(s, 2))?;
    if p.next().is_some() {
        return None;
    }
    Some(sign * (h * 3600 + m * 60 + s))
}

/// `YYYY-MM-DD HH:MM:SS[.ffffff][±HH[:MM]][ BC]` → seconds since 1970
/// (UTC when `zoned`) and the microseconds of the second. `infinity` has
/// none: `None`.
pub(super) fn parse_timestamp(text: &[u8], zoned: bool) -> Option<(i64, i64)> {
    let (text, bc) = match text.strip_suffix(b" BC") {
        Some(t) => (t, true),
        None => (text, false),
    };
    let space = text.iter().position(|&b| b == b' ')?;
    let (date, rest) = (&text[..space], &text[space + 1..]);
    let (time, offset) = if zoned {
        let at = rest.iter().position(|&b| b == b'+' || b == b'-')?;
        (&rest[..at], parse_offset(&rest[at..])?)
    } else {
        (rest, 0)
    };
    let days = date_days(date, bc)?;
    let micros = parse_time(time)?;
    let secs = days
        .checked_mul(86_400)?
        .checked_add(micros / 1_000_000)?
        .checked_sub(offset)?;
    Some((secs, micros % 1_000_000))
}

/// `HH:MM:SS[.ffffff]±HH[:MM]` → microseconds of the day in UTC.
pub(super) fn parse_timetz(text: &[u8]) -> Option<i64> {
    let at = text.iter().position(|&b| b == b'+' || b == b'-')?;
    let local = parse_time(&text[..at])?;
    let offset = parse_offset(&text[at..])?;
    Some((local - offset * 1_000_000).rem_euclid(86_400_000_000))
}

/// An interval's months, days and microseconds, as PostgreSQL keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct IntervalParts {
    pub(super) months: i64,
    pub(super) days: i64,
    pub(super) micros: i64,
}

/// Interval text in IntervalStyle `postgres` (`1 year 2 mons -3 days
/// 04:05:06.5`) → its parts.
pub(super) fn parse_interval(text: &[u8]) -> Option<IntervalParts> {
    let s = std::str::from_utf8(text).ok()?;
    let (mut months, mut days, mut micros) = (0_i64, 0_i64, 0_i64);
    let mut words = s.split(' ').filter(|w| !w.is_empty());
    while let Some(word) = words.next() {
        if word.contains(':') {
            let (neg, t) = match word.strip_prefix('-') {
                Some(t) => (true, t),
                None => (false, word.strip_prefix('+').unwrap_or(word)),
            };
            // Hours may exceed 24 here.
            let (hms, frac) = match t.find('.') {
                Some(i) => (&t[..i], fraction_micros(&t.as_bytes()[i + 1..])?),
                None => (t, 0),
            };
            let mut p = hms.split(':');
            let h = number(p.next()?.as_bytes(), 12)?;
            let m = number(p.next()?.as_bytes(), 2)?;
            let sec = p.next().map_or(Some(0), |x| number(x.as_bytes(), 2))?;
            let v = h
                .checked_mul(3600)?
                .checked_add(m * 60 + sec)?
                .checked_mul(1_000_000)?
                .checked_add(frac)?;
            micros = micros.checked_add(if neg { -v } else { v })?;
            continue;
        }
        let n: i64 = word.parse().ok()?;
        match words.next()? {
            "year" | "years" => months = months.checked_add(n.checked_mul(12)?)?,
            "mon" | "mons" => months = months.checked_add(n)?,
            "day" | "days" => days = days.checked_add(n)?,
            _ => return None,
        }
    }
    Some(IntervalParts {
        months,
        days,
        micros,
    })
}

#[cfg(test)]
mod tests;
