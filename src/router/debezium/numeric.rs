//! Numbers as Debezium writes them: `float4`/`float8` as Java prints them,
//! and `numeric` as Kafka Connect's `Decimal` / `VariableScaleDecimal`
//! (base64 of the unscaled two's-complement bytes) or per
//! `decimal.handling.mode`.
//!
//! Invariants: pure; `NaN` and `±Infinity` of `numeric` are null, as
//! Debezium writes them.

use std::io::Write as _;

use super::{ValueError, bad, base64};

/// PostgreSQL's float text (`1.5`, `-1e+30`, `NaN`, `Infinity`, `-Infinity`).
pub(super) fn parse_float<F: std::str::FromStr>(s: &str) -> Option<F> {
    match s {
        "NaN" => "NaN".parse().ok(),
        "Infinity" => "inf".parse().ok(),
        "-Infinity" => "-inf".parse().ok(),
        _ if s
            .bytes()
            .all(|b| b.is_ascii_digit() || b"+-.e".contains(&b)) =>
        {
            s.parse().ok()
        }
        _ => None,
    }
}

// Jackson (the JSON converter's writer) writes non-finite floats as the
// strings "NaN", "Infinity", "-Infinity".
pub(super) fn write_f64(out: &mut Vec<u8>, v: f64) {
    if v.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 {
            b"\"Infinity\"" as &[u8]
        } else {
            b"\"-Infinity\""
        });
    } else {
        let _ = serde_json::to_writer(&mut *out, &v);
    }
}

pub(super) fn write_f32(out: &mut Vec<u8>, v: f32) {
    if v.is_finite() {
        let _ = serde_json::to_writer(&mut *out, &v);
    } else {
        write_f64(out, f64::from(v));
    }
}

/// Debezium's precise decimals (PostgreSQL connector docs, "Decimal
/// types"): `numeric(p,s)` is Kafka Connect's `Decimal` — through the JSON
/// converter, base64 of the unscaled value's big-endian two's-complement
/// bytes (Java's `BigInteger.toByteArray`); plain `numeric` is
/// `VariableScaleDecimal`, `{"scale":s,"value":"<base64>"}`. `NaN` and
/// `±Infinity` have no such form: null.
pub(super) fn write_decimal(
    out: &mut Vec<u8>,
    scale: Option<u16>,
    text: &[u8],
    scratch: &mut Vec<u8>,
) -> Result<(), ValueError> {
    if matches!(text, b"NaN" | b"Infinity" | b"-Infinity") {
        out.extend_from_slice(b"null");
        return Ok(());
    }
    let (negative, body) = match text.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int_part, frac) = match body.iter().position(|&b| b == b'.') {
        Some(i) => (&body[..i], &body[i + 1..]),
        None => (body, &b""[..]),
    };
    if int_part.is_empty()
        || !int_part.iter().all(u8::is_ascii_digit)
        || !frac.iter().all(u8::is_ascii_digit)
    {
        return Err(bad("numeric", text));
    }
    let value_scale = frac.len();
    let target = scale.map_or(value_scale, usize::from);
    if value_scale > target {
        return Err(bad("numeric (more fractional digits than its scale)", text));
    }
    // Big-endian magnitude, built digit by digit.
    scratch.clear();
    let zeros = std::iter::repeat_n(&b'0', target - value_scale);
    for &d in int_part.iter().chain(frac).chain(zeros) {
        let mut carry = u32::from(d - b'0');
        for byte in scratch.iter_mut().rev() {
            let v = u32::from(*byte) * 10 + carry;
            *byte = (v & 0xff) as u8;
            carry = v >> 8;
        }
        while carry > 0 {
            scratch.insert(0, (carry & 0xff) as u8);
            carry >>= 8;
        }
    }
    let lead = scratch.iter().take_while(|&&b| b == 0).count();
    scratch.drain(..lead);
    if scratch.is_empty() {
        scratch.push(0);
    } else if negative {
        // Two's complement: invert and add one.
        let mut carry = true;
        for byte in scratch.iter_mut().rev() {
            *byte = !*byte;
            if carry {
                let (v, c) = byte.overflowing_add(1);
                *byte = v;
                carry = c;
            }
        }
        if scratch[0] & 0x80 == 0 {
            scratch.insert(0, 0xff);
        }
        while scratch.len() > 1 && scratch[0] == 0xff && scratch[1] & 0x80 != 0 {
            scratch.remove(0);
        }
    } else if scratch[0] & 0x80 != 0 {
        scratch.insert(0, 0);
    }
    if scale.is_none() {
        let _ = write!(out, "{{\"scale\":{value_scale},\"value\":\"");
    } else {
        out.push(b'"');
    }
    base64(out, scratch);
    out.extend_from_slice(if scale.is_none() { b"\"}" } else { b"\"" });
    Ok(())
}
