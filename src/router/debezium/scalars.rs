//! One scalar value (not an array) → its Debezium JSON, by [`Kind`]: the
//! dispatch over every mapped type, with the temporal, numeric and hstore
//! writers it calls living in sibling modules.
//!
//! Invariants: appends to the caller's buffer only; text that is not what
//! the type's output function writes is a [`ValueError`] naming the type;
//! values without an exact Debezium form go through [`allow`] (the
//! `special_values` rule).

use super::hstore::write_hstore;
use super::numeric::{parse_float, write_decimal, write_f32, write_f64};
use super::temporal::{interval_micros, write_iso_interval, write_iso_time, write_iso_timestamp};
use super::{Kind, Special, ValueError, allow, bad, base64, json_str, push_int, utf8};
use crate::config::DecimalHandlingMode;
use crate::router::time::{parse_date, parse_interval, parse_time, parse_timestamp, parse_timetz};

/// Debezium 3.6.1's `MicroTimestamp` of `infinity`/`-infinity`: the JDBC
/// driver's `DATE_POSITIVE_INFINITY`/`DATE_NEGATIVE_INFINITY`
/// milliseconds, read as microseconds (`Timestamp`, milliseconds: a
/// thousandth of them), in snapshot and stream alike.
const TIMESTAMP_INFINITY_MICROS: (i64, i64) =
    (9_223_372_036_825_200_000, -9_223_372_036_832_400_000);

pub(super) fn write_scalar(
    out: &mut Vec<u8>,
    kind: Kind,
    text: &[u8],
    scratch: &mut Vec<u8>,
    strict: bool,
) -> Result<(), ValueError> {
    match kind {
        Kind::Int => {
            let digits = text.strip_prefix(b"-").unwrap_or(text);
            if digits.is_empty()
                || digits.len() > 20
                || !digits.iter().all(u8::is_ascii_digit)
                || (digits.len() > 1 && digits[0] == b'0')
            {
                return Err(bad("integer", text));
            }
            out.extend_from_slice(text);
        }
        Kind::Bool => match text {
            b"t" => out.extend_from_slice(b"true"),
            b"f" => out.extend_from_slice(b"false"),
            _ => return Err(bad("boolean", text)),
        },
        Kind::Float32 => {
            let s = utf8("real", text)?;
            let v: f32 = parse_float(s).ok_or_else(|| bad("real", text))?;
            write_f32(out, v);
        }
        Kind::Float64 | Kind::DecimalDouble => {
            let s = utf8("double", text)?;
            let v: f64 = parse_float(s).ok_or_else(|| bad("double", text))?;
            write_f64(out, v);
        }
        // Debezium writes numeric's special values by the names of its
        // SpecialValueDecimal constants, not PostgreSQL's text.
        Kind::DecimalString => match text {
            b"NaN" => out.extend_from_slice(b"\"NAN\""),
            b"Infinity" => out.extend_from_slice(b"\"POSITIVE_INFINITY\""),
            b"-Infinity" => out.extend_from_slice(b"\"NEGATIVE_INFINITY\""),
            _ => json_str(out, utf8("numeric", text)?),
        },
        Kind::Text => json_str(out, utf8("text", text)?),
        Kind::Decimal { scale } => write_decimal(out, scale, text, scratch)?,
        Kind::BytesBase64 | Kind::BytesHex => {
            let hex_text = text
                .strip_prefix(b"\\x")
                .filter(|h| h.len() % 2 == 0 && h.iter().all(u8::is_ascii_hexdigit))
                .ok_or_else(|| bad("bytea (hex format)", text))?;
            out.push(b'"');
            if kind == Kind::BytesHex {
                out.extend(hex_text.iter().map(u8::to_ascii_lowercase));
            } else {
                scratch.clear();
                for pair in hex_text.chunks_exact(2) {
                    scratch.push(nibble(pair[0]) << 4 | nibble(pair[1]));
                }
                base64(out, scratch);
            }
            out.push(b'"');
        }
        Kind::Date => {
            let days = match text {
                // Debezium 3.6.1's stream: PostgreSQL's day number of
                // ±infinity (i32::MAX, i32::MIN, counted from 2000) moved
                // to 1970 in 32-bit arithmetic, which wraps: -2147472692,
                // -2147472691. (Its snapshot writes other numbers:
                // docs/compatibility.md.)
                b"infinity" | b"-infinity" => {
                    allow(strict, Special::Infinity, "date")?;
                    let pg = if text[0] == b'-' { i32::MIN } else { i32::MAX };
                    i64::from(pg.wrapping_add(10_957))
                }
                _ => parse_date(text).ok_or_else(|| bad("date", text))?,
            };
            push_int(out, days);
        }
        Kind::TimeMillis | Kind::TimeMicros => {
            let micros = parse_time(text).ok_or_else(|| bad("time", text))?;
            let v = if kind == Kind::TimeMillis {
                micros / 1000
            } else {
                micros
            };
            push_int(out, v);
        }
        Kind::TimestampMillis | Kind::TimestampMicros => {
            let millis = kind == Kind::TimestampMillis;
            let v = match text {
                b"infinity" | b"-infinity" => {
                    allow(strict, Special::Infinity, "timestamp")?;
                    let (pos, neg) = TIMESTAMP_INFINITY_MICROS;
                    let v = if text[0] == b'-' { neg } else { pos };
                    if millis { v / 1000 } else { v }
                }
                _ => {
                    let (secs, frac) =
                        parse_timestamp(text, false).ok_or_else(|| bad("timestamp", text))?;
                    if millis {
                        secs.checked_mul(1000)
                            .and_then(|v| v.checked_add(frac / 1000))
                            .ok_or_else(|| bad("timestamp", text))?
                    } else {
                        // Debezium's MicroTimestamp: `TimeUnit.SECONDS.toMicros`
                        // (saturating) plus the microseconds (wrapping), so
                        // 294276-12-31 23:59:59.999999 is -9223372036853775810.
                        let (v, overflow) = match secs.checked_mul(1_000_000) {
                            Some(v) => (v.wrapping_add(frac), v.checked_add(frac).is_none()),
                            None => {
                                let sat = if secs > 0 { i64::MAX } else { i64::MIN };
                                (sat.wrapping_add(frac), true)
                            }
                        };
                        if overflow {
                            allow(strict, Special::Overflow, "timestamp")?;
                        }
                        v
                    }
                }
            };
            push_int(out, v);
        }
        Kind::TimestampTz { fraction } => match text {
            // Debezium 3.6.1 writes them as these strings.
            b"infinity" | b"-infinity" => {
                allow(strict, Special::Infinity, "timestamp with time zone")?;
                out.push(b'"');
                out.extend_from_slice(text);
                out.push(b'"');
            }
            _ => {
                let (secs, frac) = parse_timestamp(text, true)
                    .ok_or_else(|| bad("timestamp with time zone", text))?;
                out.push(b'"');
                write_iso_timestamp(out, secs, frac, fraction);
                out.push(b'"');
            }
        },
        Kind::TimeTz => {
            let micros = parse_timetz(text).ok_or_else(|| bad("time with time zone", text))?;
            out.push(b'"');
            write_iso_time(out, micros);
            out.extend_from_slice(b"Z\"");
        }
        // PostgreSQL 17's infinite intervals: Debezium 3.6.1 writes a zero
        // duration.
        Kind::Interval | Kind::IntervalString if matches!(text, b"infinity" | b"-infinity") => {
            allow(strict, Special::Infinity, "interval")?;
            out.extend_from_slice(if kind == Kind::Interval {
                b"0" as &[u8]
            } else {
                b"\"P0Y0M0DT0H0M0S\""
            });
        }
        Kind::Interval => {
            let parts = parse_interval(text).ok_or_else(|| bad("interval", text))?;
            let (micros, overflow) = interval_micros(parts);
            if overflow {
                allow(strict, Special::Overflow, "interval")?;
            }
            push_int(out, micros);
        }
        Kind::IntervalString => {
            let parts = parse_interval(text).ok_or_else(|| bad("interval", text))?;
            out.push(b'"');
            write_iso_interval(out, parts);
            out.push(b'"');
        }
        Kind::Money(mode) => {
            // `$1,234.56`, `-$1,234.56` (lc_monetary=C): the number without
            // `$` and the group separators, at most 20 digits and a sign.
            let (negative, body) = match text.strip_prefix(b"-") {
                Some(rest) => (true, rest),
                None => (false, text),
            };
            let body = body.strip_prefix(b"$").ok_or_else(|| bad("money", text))?;
            let mut digits = [0u8; 32];
            let mut n = 0;
            if negative {
                digits[0] = b'-';
                n = 1;
            }
            for &c in body.iter().filter(|&&c| c != b',') {
                if !(c.is_ascii_digit() || c == b'.') || n == digits.len() {
                    return Err(bad("money", text));
                }
                digits[n] = c;
                n += 1;
            }
            let number = &digits[..n];
            match mode {
                DecimalHandlingMode::Precise => write_decimal(out, Some(2), number, scratch)?,
                DecimalHandlingMode::String => json_str(out, utf8("money", number)?),
                DecimalHandlingMode::Double => {
                    let v: f64 =
                        parse_float(utf8("money", number)?).ok_or_else(|| bad("money", text))?;
                    write_f64(out, v);
                }
            }
        }
        Kind::Bit => match text {
            b"1" => out.extend_from_slice(b"true"),
            b"0" => out.extend_from_slice(b"false"),
            _ => return Err(bad("bit", text)),
        },
        Kind::Bits => {
            if !text.iter().all(|&c| c == b'0' || c == b'1') {
                return Err(bad("bit string", text));
            }
            scratch.clear();
            scratch.resize(text.len().div_ceil(8), 0);
            for (k, &c) in text.iter().rev().enumerate() {
                if c == b'1' {
                    scratch[k / 8] |= 1 << (k % 8);
                }
            }
            while scratch.last() == Some(&0) {
                scratch.pop();
            }
            out.push(b'"');
            base64(out, scratch);
            out.push(b'"');
        }
        Kind::Hstore => write_hstore(out, text, scratch)?,
        Kind::Point => {
            let (x, y) = parse_point(text).ok_or_else(|| bad("point", text))?;
            out.extend_from_slice(b"{\"x\":");
            write_f64(out, x);
            out.extend_from_slice(b",\"y\":");
            write_f64(out, y);
            // Well-known binary, little-endian: byte order 1, type 1 (point).
            scratch.clear();
            scratch.extend_from_slice(&[1, 1, 0, 0, 0]);
            scratch.extend_from_slice(&x.to_le_bytes());
            scratch.extend_from_slice(&y.to_le_bytes());
            out.extend_from_slice(b",\"wkb\":\"");
            base64(out, scratch);
            out.extend_from_slice(b"\",\"srid\":null}");
        }
    }
    Ok(())
}

/// `(x,y)` → the two numbers.
fn parse_point(text: &[u8]) -> Option<(f64, f64)> {
    let inner = std::str::from_utf8(text.strip_prefix(b"(")?.strip_suffix(b")")?).ok()?;
    let (x, y) = inner.split_once(',')?;
    Some((parse_float(x)?, parse_float(y)?))
}

fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c.wrapping_sub(b'A').wrapping_add(10) & 0x0f,
    }
}
