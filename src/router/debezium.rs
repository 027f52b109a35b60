//! Column values as Debezium writes them: PostgreSQL's text output of one
//! value (what pgoutput sends) → the JSON that Debezium's PostgreSQL
//! connector produces for it through Kafka Connect's JSON converter with
//! `schemas.enable=false`.
//!
//! The mapping follows the "Data type mappings" section of Debezium's
//! PostgreSQL connector documentation (cited per type below) under the
//! connector options `decimal.handling.mode`, `time.precision.mode` and
//! `binary.handling.mode`; what we do differently is listed in
//! `docs/compatibility.md`.
//!
//! Invariants:
//! - **Pure, and allocation-free per value** except for `hstore` values and
//!   arrays of `numeric`/`bytea` (a buffer of their own). [`write_value`]
//!   appends to the caller's buffer and uses the caller's scratch buffer; it
//!   reads no clock and does no I/O. The same text always yields the same
//!   JSON.
//! - **Known types only.** [`Mapping::of`] answers `None` for a type it does
//!   not map (those Debezium 3.6.1 leaves out of its records); the caller
//!   refuses such a column with an error naming it rather than guessing —
//!   unless the user chose `unmapped_types = "text"`, which writes such a
//!   value as the string PostgreSQL's output function made of it (what
//!   pgoutput and `COPY` send), unchanged.
//! - **Valid values never stop it by default.** An `infinity`, a value past
//!   64-bit microseconds or an array of other bounds or dimensions is
//!   written as Debezium 3.6.1 writes it, or as docs/compatibility.md
//!   ("Special values") says; only `special_values = "fail"` makes it an
//!   error ([`Special`]).
//! - **Never panics on input.** Text that is not what the type's output
//!   function writes is a [`ValueError`], never a panic or a wrong number.
//! - Expects the session settings walrelay sets on every connection
//!   (`DateStyle=ISO`, `TimeZone=UTC`, `bytea_output=hex`, `IntervalStyle`
//!   left at `postgres`, `lc_monetary=C`).

use std::io::Write as _;

use crate::config::{
    BinaryHandlingMode, DecimalHandlingMode, IntervalHandlingMode, SpecialValues,
    TimePrecisionMode, UnmappedTypes,
};
use crate::pgoutput::Oid;

use super::time::{
    IntervalParts, civil_from_days, parse_date, parse_interval, parse_time, parse_timestamp,
    parse_timetz,
};

/// The Debezium modes that change how values are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Modes {
    pub decimal: DecimalHandlingMode,
    pub time: TimePrecisionMode,
    pub binary: BinaryHandlingMode,
    pub interval: IntervalHandlingMode,
    /// `unmapped_types`: with `Text`, a type not mapped otherwise is
    /// written as its text form.
    pub unmapped: UnmappedTypes,
    /// `special_values`: with `Fail`, a value without an exact Debezium
    /// form ([`Special`]) is an error instead of Debezium's form.
    pub special: SpecialValues,
}

/// `hstore` has no fixed type oid (it is an extension's type): the catalog
/// tells its oid as an alias of this one, InvalidOid, which no real type
/// has.
pub const HSTORE: Oid = 0;

/// How one scalar value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// int2/int4/int8/oid: the number as is.
    Int,
    Bool,
    Float32,
    Float64,
    /// `numeric(p,s)` (`Some(s)`) or plain `numeric` (`None`), precise mode.
    Decimal {
        scale: Option<u16>,
    },
    /// numeric, `decimal.handling.mode=string`.
    DecimalString,
    /// numeric, `decimal.handling.mode=double`.
    DecimalDouble,
    /// Written as a JSON string of the text (text, varchar, uuid, json, …).
    Text,
    /// bytea, base64.
    BytesBase64,
    /// bytea, hex.
    BytesHex,
    /// Days since 1970-01-01.
    Date,
    /// Time of day in milliseconds.
    TimeMillis,
    /// Time of day in microseconds.
    TimeMicros,
    /// Milliseconds since 1970 (no time zone).
    TimestampMillis,
    /// Microseconds since 1970 (no time zone).
    TimestampMicros,
    /// ISO-8601 string in UTC with `fraction` digits after the second
    /// (the column's precision; 0: Java's `ISO_OFFSET_DATE_TIME`, no
    /// trailing zeros).
    TimestampTz {
        fraction: u8,
    },
    /// ISO-8601 time string in UTC.
    TimeTz,
    /// Microseconds, months counted as 365.25/12 days.
    Interval,
    /// ISO-8601 duration text (`interval.handling.mode=string`).
    IntervalString,
    /// `money` as a decimal of scale 2 in the decimal mode's form
    /// (Debezium's `money.fraction.digits` default); the text is read
    /// in `lc_monetary=C`, which walrelay sets (`$1,234.56`).
    Money(DecimalHandlingMode),
    /// `bit(1)`: a boolean.
    Bit,
    /// `bit(n)`, `varbit`: the bits as one binary number, its bytes
    /// little-endian without trailing zero bytes (Java's
    /// `BitSet.toByteArray`), base64 whatever `binary.handling.mode` says.
    Bits,
    /// `hstore`: a JSON string holding a JSON object (Debezium's
    /// `hstore.handling.mode=json`), keys in Java `HashMap` order.
    Hstore,
    /// `point`: Debezium's `Point` struct, `{"x":…,"y":…,"wkb":"…","srid":null}`.
    Point,
}

/// How a column's values are written: a scalar kind, or a one-dimensional
/// array of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    pub kind: Kind,
    pub array: bool,
    /// `unmapped_types = "text"`: a value this mapping cannot write (with
    /// `special_values = "fail"`: a [`Special`] value) is written as its
    /// text form instead of stopping the connector.
    pub text_fallback: bool,
    /// `special_values = "fail"`: a [`Special`] value is an error.
    pub strict: bool,
}

/// The values without an exact Debezium form, which `special_values =
/// "fail"` refuses (docs/compatibility.md, "Special values").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// `infinity`/`-infinity` date, timestamp, timestamptz or interval.
    Infinity,
    /// A timestamp or interval whose microseconds leave 64 bits: Debezium
    /// wraps or saturates them.
    Overflow,
    /// An array whose lower bound is not 1 (Debezium drops the bounds).
    Bounds,
    /// An array of several dimensions (walrelay writes nested arrays).
    Dimensions,
}

impl Special {
    fn error(self, what: &str) -> ValueError {
        let why = match self {
            Special::Infinity => "an infinity value",
            Special::Overflow => "a value whose microseconds do not fit in 64 bits",
            Special::Bounds => "an array whose lower bound is not 1",
            Special::Dimensions => "an array of several dimensions",
        };
        ValueError(format!(
            "{what}: {why}, which special_values = \"fail\" refuses (row values are not logged)"
        ))
    }
}

/// Why a value could not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValueError(pub String);

/// Names the type and the value's length, never the value: errors reach
/// logs, `/healthz` and `status`, where row data does not belong.
fn bad(what: &str, text: &[u8]) -> ValueError {
    ValueError(format!(
        "{what}: a value of {} bytes is not valid (row values are not logged)",
        text.len()
    ))
}

/// PostgreSQL's name of a built-in type, for error messages.
pub fn type_name(oid: Oid) -> String {
    let known = match oid {
        16 => "bool",
        17 => "bytea",
        20 => "int8",
        21 => "int2",
        23 => "int4",
        25 => "text",
        114 => "json",
        700 => "float4",
        701 => "float8",
        790 => "money",
        1082 => "date",
        1083 => "time",
        1114 => "timestamp",
        1184 => "timestamptz",
        1186 => "interval",
        1266 => "timetz",
        1560 => "bit",
        1562 => "varbit",
        1700 => "numeric",
        2950 => "uuid",
        3802 => "jsonb",
        600 => "point",
        601 => "lseg",
        602 => "path",
        603 => "box",
        604 => "polygon",
        628 => "line",
        718 => "circle",
        791 => "money[]",
        1187 => "interval[]",
        3904 => "int4range",
        _ => return format!("type oid {oid}"),
    };
    known.to_owned()
}

impl Mapping {
    /// The text form, as a string.
    pub const TEXT: Mapping = Mapping {
        kind: Kind::Text,
        array: false,
        text_fallback: false,
        strict: false,
    };

    /// The mapping of a column of type `oid` with type modifier `typmod`
    /// under `modes`; `None` when the type is not mapped (with
    /// `unmapped_types = "text"`: the text form, a string, instead).
    pub fn of(oid: Oid, typmod: i32, modes: Modes) -> Option<Mapping> {
        let text = modes.unmapped == UnmappedTypes::Text;
        match Mapping::mapped(oid, typmod, modes) {
            Some(m) => Some(Mapping {
                text_fallback: text,
                strict: modes.special == SpecialValues::Fail,
                ..m
            }),
            None => text.then_some(Mapping::TEXT),
        }
    }

    /// Whether the type has a mapping of its own (not just the text form).
    pub fn is_mapped(oid: Oid, typmod: i32) -> bool {
        Mapping::mapped(oid, typmod, Modes::default()).is_some()
    }

    fn mapped(oid: Oid, typmod: i32, modes: Modes) -> Option<Mapping> {
        let (elem, array) = match oid {
            1000 => (16, true),
            1005 => (21, true),
            1007 => (23, true),
            1016 => (20, true),
            1009 => (25, true),
            1015 => (1043, true),
            1014 => (1042, true),
            1021 => (700, true),
            1022 => (701, true),
            2951 => (2950, true),
            1182 => (1082, true),
            1115 => (1114, true),
            1185 => (1184, true),
            199 => (114, true),
            3807 => (3802, true),
            1231 => (1700, true),
            1183 => (1083, true),
            1270 => (1266, true),
            1041 => (869, true),
            651 => (650, true),
            1001 => (17, true),
            _ => (oid, false),
        };
        // Array columns carry the element's type modifier.
        let kind = scalar(elem, typmod, modes)?;
        Some(Mapping {
            kind,
            array,
            text_fallback: false,
            strict: false,
        })
    }
}

fn scalar(oid: Oid, typmod: i32, modes: Modes) -> Option<Kind> {
    // Precision of time/timestamp types: the typmod, 6 when unset.
    let precision = if typmod < 0 { 6 } else { typmod };
    let adaptive = modes.time == TimePrecisionMode::Adaptive;
    Some(match oid {
        20 | 21 | 23 | 26 => Kind::Int,
        16 => Kind::Bool,
        700 => Kind::Float32,
        701 => Kind::Float64,
        1700 => match modes.decimal {
            DecimalHandlingMode::Precise => Kind::Decimal {
                scale: (typmod >= 4).then(|| ((typmod - 4) & 0xffff) as u16),
            },
            DecimalHandlingMode::String => Kind::DecimalString,
            DecimalHandlingMode::Double => Kind::DecimalDouble,
        },
        // char, name, text, xml, cidr, inet, macaddr, macaddr8, bpchar,
        // varchar, uuid, json, jsonb, tsvector, and the ranges (int4range,
        // numrange, tsrange, tstzrange, daterange, int8range): strings, the
        // ranges' and tsvector's in PostgreSQL's text form, as Debezium
        // writes them. (`citext` and `ltree` are aliases of `text`.)
        18 | 19 | 25 | 142 | 650 | 869 | 829 | 774 | 1042 | 1043 | 2950 | 114 | 3802 | 3614
        | 3904 | 3906 | 3908 | 3910 | 3912 | 3926 => Kind::Text,
        790 => Kind::Money(modes.decimal),
        // `bit` is `bit(1)`.
        1560 if typmod <= 1 => Kind::Bit,
        1560 | 1562 => Kind::Bits,
        HSTORE => Kind::Hstore,
        600 => Kind::Point,
        17 => match modes.binary {
            BinaryHandlingMode::Bytes | BinaryHandlingMode::Base64 => Kind::BytesBase64,
            BinaryHandlingMode::Hex => Kind::BytesHex,
        },
        1082 => Kind::Date,
        1083 if adaptive && precision > 3 => Kind::TimeMicros,
        1083 => Kind::TimeMillis,
        1114 if adaptive && precision > 3 => Kind::TimestampMicros,
        1114 => Kind::TimestampMillis,
        // Debezium's ZonedTimestamp.toIsoString(…, fractionalWidth): a
        // fixed-width fraction of the column's precision (1-6), Java's ISO
        // formatter for precision 0.
        1184 => Kind::TimestampTz {
            fraction: precision.clamp(0, 6) as u8,
        },
        1266 => Kind::TimeTz,
        1186 => match modes.interval {
            IntervalHandlingMode::Numeric => Kind::Interval,
            IntervalHandlingMode::String => Kind::IntervalString,
        },
        _ => return None,
    })
}

/// Appends the JSON for one value of `mapping` whose text output is `text`.
/// `scratch` is reused between calls (never shrunk).
pub fn write_value(
    out: &mut Vec<u8>,
    mapping: Mapping,
    text: &[u8],
    scratch: &mut Vec<u8>,
) -> Result<(), ValueError> {
    let start = out.len();
    let written = if mapping.array {
        write_array(out, mapping.kind, text, scratch, mapping.strict)
    } else {
        write_scalar(out, mapping.kind, text, scratch, mapping.strict)
    };
    match written {
        Err(_) if mapping.text_fallback => {
            out.truncate(start);
            write_scalar(out, Kind::Text, text, scratch, false)
        }
        written => written,
    }
}

/// What Debezium writes for an unchanged TOASTed value of a column
/// (PostgreSQL does not send such values): the `unavailable.value.placeholder`
/// in a form that depends on the column's type, as Debezium 3.6.1's
/// `UnchangedToastedPlaceholder` makes it (compared by
/// tests/it/debezium_compat.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unchanged {
    /// The placeholder as a string (scalars; `bytea` in `hex` mode).
    String,
    /// The placeholder's bytes, base64 (`bytea` in `bytes` mode).
    Bytes,
    /// A one-element array of the placeholder (`text[]`, `varchar[]`,
    /// `bpchar[]`, `json[]`, `jsonb[]`).
    TextList,
    /// An array of the placeholder's bytes as numbers (`int4[]`, `int8[]`;
    /// `date[]` in `adaptive` time mode).
    ByteNumbers,
    /// A one-element array of `UUID.nameUUIDFromBytes(placeholder)`, the
    /// name-based (version 3, MD5) UUID of its bytes (`uuid[]`).
    UuidList,
    /// A one-element array of the placeholder's bytes, base64 (`bytea[]`).
    BytesList,
    /// A string holding the JSON object `{"<placeholder>":"<placeholder>"}`
    /// (`hstore`).
    HstoreJson,
    /// `null`: the value is lost (`bytea` in `base64` mode; `bit(n)`,
    /// `varbit`; every other array: `bool[]`, `int2[]`,
    /// `float4[]`, `float8[]`, `timestamp[]`, `timestamptz[]`, enum arrays;
    /// `date[]` in `connect` time mode).
    Null,
}

impl Unchanged {
    /// The form for a column of type `oid` (its own type, before enums and
    /// domains are resolved to what they are written as) written as
    /// `mapping` under `modes`.
    pub fn of(oid: Oid, mapping: Mapping, modes: Modes) -> Unchanged {
        if !mapping.array {
            return match mapping.kind {
                // Debezium's `base64` mode loses the value; `bytes` writes
                // the placeholder's bytes.
                Kind::BytesBase64 if modes.binary == BinaryHandlingMode::Base64 => Unchanged::Null,
                Kind::BytesBase64 => Unchanged::Bytes,
                Kind::Bits => Unchanged::Null,
                Kind::Hstore => Unchanged::HstoreJson,
                _ => Unchanged::String,
            };
        }
        match oid {
            // `base64` mode loses it, as for a `bytea`.
            1001 if mapping.kind == Kind::BytesBase64
                && modes.binary != BinaryHandlingMode::Base64 =>
            {
                Unchanged::BytesList
            }
            1009 | 1015 | 1014 | 199 | 3807 => Unchanged::TextList,
            1007 | 1016 => Unchanged::ByteNumbers,
            1182 if modes.time == TimePrecisionMode::Adaptive => Unchanged::ByteNumbers,
            2951 => Unchanged::UuidList,
            _ => Unchanged::Null,
        }
    }
}

/// Appends the value written for an unchanged TOASTed column, in the form
/// [`Unchanged::of`] chose for it.
pub fn write_placeholder(out: &mut Vec<u8>, unchanged: Unchanged, placeholder: &str) {
    match unchanged {
        Unchanged::String => json_str(out, placeholder),
        Unchanged::Bytes => {
            out.push(b'"');
            base64(out, placeholder.as_bytes());
            out.push(b'"');
        }
        Unchanged::TextList => {
            out.push(b'[');
            json_str(out, placeholder);
            out.push(b']');
        }
        Unchanged::BytesList => {
            out.extend_from_slice(b"[\"");
            base64(out, placeholder.as_bytes());
            out.extend_from_slice(b"\"]");
        }
        Unchanged::HstoreJson => {
            let mut object = Vec::with_capacity(2 * placeholder.len() + 8);
            object.push(b'{');
            jackson_str(&mut object, placeholder);
            object.push(b':');
            jackson_str(&mut object, placeholder);
            object.push(b'}');
            json_str(out, &String::from_utf8_lossy(&object));
        }
        Unchanged::ByteNumbers => {
            out.push(b'[');
            for (i, b) in placeholder.bytes().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                // Java's bytes are signed: a UTF-8 byte >= 0x80 is negative.
                let _ = write!(out, "{}", b as i8);
            }
            out.push(b']');
        }
        Unchanged::UuidList => {
            use md5::Digest as _;
            let mut d: [u8; 16] = md5::Md5::digest(placeholder.as_bytes()).into();
            d[6] = (d[6] & 0x0f) | 0x30;
            d[8] = (d[8] & 0x3f) | 0x80;
            out.extend_from_slice(b"[\"");
            for (i, b) in d.iter().enumerate() {
                if matches!(i, 4 | 6 | 8 | 10) {
                    out.push(b'-');
                }
                let _ = write!(out, "{b:02x}");
            }
            out.extend_from_slice(b"\"]");
        }
        Unchanged::Null => out.extend_from_slice(b"null"),
    }
}

/// Appends `s` as a JSON string (escaped by serde_json, without allocating).
pub fn json_str(out: &mut Vec<u8>, s: &str) {
    // Writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn utf8<'a>(what: &str, text: &'a [u8]) -> Result<&'a str, ValueError> {
    std::str::from_utf8(text).map_err(|_| bad(what, text))
}

/// `Ok` unless `strict` (`special_values = "fail"`) refuses `special`.
fn allow(strict: bool, special: Special, what: &str) -> Result<(), ValueError> {
    if strict {
        Err(special.error(what))
    } else {
        Ok(())
    }
}

/// Debezium 3.6.1's `MicroTimestamp` of `infinity`/`-infinity`: the JDBC
/// driver's `DATE_POSITIVE_INFINITY`/`DATE_NEGATIVE_INFINITY`
/// milliseconds, read as microseconds (`Timestamp`, milliseconds: a
/// thousandth of them), in snapshot and stream alike.
const TIMESTAMP_INFINITY_MICROS: (i64, i64) =
    (9_223_372_036_825_200_000, -9_223_372_036_832_400_000);

fn write_scalar(
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

/// Java's `String.hashCode` (over UTF-16 code units).
pub(super) fn java_hash(s: &str) -> i32 {
    let mut h: i32 = 0;
    for unit in s.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    h
}

/// The bucket order of a Java `HashMap` with `n` entries put one by one
/// (default capacity 16, load factor 0.75): the capacity it grew to and
/// the bucket of each key; iteration is by bucket, then insertion order.
fn java_hashmap_capacity(n: usize) -> u32 {
    let mut capacity: u32 = 16;
    while n > (capacity as usize) * 3 / 4 && capacity < 1 << 30 {
        capacity *= 2;
    }
    capacity
}

/// Jackson's string escapes: `"`, `\`, the short forms of \b \f \n \r
/// \t, other control characters as `\u00XX` (upper-case hex).
fn jackson_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for &b in s.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            c if c < 0x20 => {
                let _ = write!(out, "\\u{:04X}", c);
            }
            c => out.push(c),
        }
    }
    out.push(b'"');
}

/// One hstore string (`"k"` with `\"` and `\\` escaped) from `text[*at..]`.
fn hstore_string(text: &[u8], at: &mut usize) -> Option<String> {
    if text.get(*at) != Some(&b'"') {
        return None;
    }
    *at += 1;
    let mut bytes = Vec::new();
    loop {
        match *text.get(*at)? {
            b'\\' => {
                bytes.push(*text.get(*at + 1)?);
                *at += 2;
            }
            b'"' => {
                *at += 1;
                return String::from_utf8(bytes).ok();
            }
            c => {
                bytes.push(c);
                *at += 1;
            }
        }
    }
}

/// hstore text (`"a"=>"1", "b c"=>NULL`) → Debezium's
/// `hstore.handling.mode=json`: a JSON string holding the object
/// `{"a":"1","b c":null}`, written by Jackson from the JDBC driver's
/// `HashMap` — so its keys come in that map's bucket order. (Allocates: one
/// string per key and value.)
fn write_hstore(out: &mut Vec<u8>, text: &[u8], scratch: &mut Vec<u8>) -> Result<(), ValueError> {
    let mut pairs: Vec<(String, Option<String>)> = Vec::new();
    let mut at = 0;
    while at < text.len() {
        if !pairs.is_empty() {
            if text.get(at..at + 2) != Some(b", ") {
                return Err(bad("hstore", text));
            }
            at += 2;
        }
        let key = hstore_string(text, &mut at).ok_or_else(|| bad("hstore", text))?;
        if text.get(at..at + 2) != Some(b"=>") {
            return Err(bad("hstore", text));
        }
        at += 2;
        let value = if text.get(at..at + 4) == Some(b"NULL") {
            at += 4;
            None
        } else {
            Some(hstore_string(text, &mut at).ok_or_else(|| bad("hstore", text))?)
        };
        pairs.push((key, value));
    }
    let capacity = java_hashmap_capacity(pairs.len());
    let bucket = |k: &str| {
        let h = java_hash(k) as u32;
        (h ^ (h >> 16)) & (capacity - 1)
    };
    // Stable: within a bucket, insertion order.
    pairs.sort_by_key(|(k, _)| bucket(k));
    scratch.clear();
    scratch.push(b'{');
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            scratch.push(b',');
        }
        jackson_str(scratch, k);
        scratch.push(b':');
        match v {
            Some(v) => jackson_str(scratch, v),
            None => scratch.extend_from_slice(b"null"),
        }
    }
    scratch.push(b'}');
    json_str(out, utf8("hstore", scratch)?);
    Ok(())
}

/// PostgreSQL's float text (`1.5`, `-1e+30`, `NaN`, `Infinity`, `-Infinity`).
fn parse_float<F: std::str::FromStr>(s: &str) -> Option<F> {
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
fn write_f64(out: &mut Vec<u8>, v: f64) {
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

fn write_f32(out: &mut Vec<u8>, v: f32) {
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
fn write_decimal(
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

/// Arrays as JSON arrays of the element encodings (PostgreSQL connector
/// docs: `ARRAY` columns map to Kafka Connect arrays of the element's
/// type). As Debezium 3.6.1 writes them: an array with other bounds
/// (`[0:2]={7,8,9}`) as its elements (`[7,8,9]`); a `numeric` array holding
/// `NaN` or `±Infinity` as `null` (the whole column); the special values
/// its JDBC-driver path gives elements (see [`write_element`]). An array of
/// several dimensions is written as nested JSON arrays, where Debezium
/// writes no value (docs/compatibility.md).
fn write_array(
    out: &mut Vec<u8>,
    kind: Kind,
    text: &[u8],
    scratch: &mut Vec<u8>,
    strict: bool,
) -> Result<(), ValueError> {
    let start = out.len();
    let body = match text.first() {
        Some(b'[') => {
            allow(strict, Special::Bounds, "array")?;
            let eq = text
                .iter()
                .position(|&b| b == b'=')
                .filter(|&eq| {
                    text[..eq]
                        .iter()
                        .all(|&b| b.is_ascii_digit() || b"[]:-".contains(&b))
                })
                .ok_or_else(|| bad("array (bounds)", text))?;
            &text[eq + 1..]
        }
        _ => text,
    };
    // Element kinds that need a scratch buffer (numeric, bytea) get this
    // one; it allocates only for them.
    let mut unused = Vec::new();
    let mut array = ArrayText {
        text: body,
        at: 0,
        whole: text,
        strict,
        lost: false,
    };
    array.dimension(out, kind, scratch, &mut unused, 1)?;
    if array.at != body.len() {
        return Err(bad("array", text));
    }
    if array.lost {
        out.truncate(start);
        out.extend_from_slice(b"null");
    }
    Ok(())
}

/// A `numeric` array element as Debezium 3.6.1 writes it in a
/// `VariableScaleDecimal`: without the fraction's trailing zeros (`1.50`
/// has scale 1, `100.00` scale 0; never a negative scale). Its `string`
/// mode keeps the text.
fn jdbc_numeric(text: &[u8]) -> &[u8] {
    let Some(point) = text.iter().position(|&b| b == b'.') else {
        return text;
    };
    let frac = &text[point + 1..];
    let kept = frac.len() - frac.iter().rev().take_while(|&&b| b == b'0').count();
    if kept == 0 {
        &text[..point]
    } else {
        &text[..point + 1 + kept]
    }
}

/// PostgreSQL's arrays have at most 6 dimensions (MAXDIM).
const MAX_DIMENSIONS: usize = 6;

/// An array's text being read.
struct ArrayText<'a> {
    text: &'a [u8],
    at: usize,
    whole: &'a [u8],
    strict: bool,
    /// A `numeric` element Debezium cannot convert: the column is `null`.
    lost: bool,
}

impl ArrayText<'_> {
    fn bad(&self) -> ValueError {
        bad("array", self.whole)
    }

    /// `{e,e,…}` at `self.at` (elements or nested dimensions).
    fn dimension(
        &mut self,
        out: &mut Vec<u8>,
        kind: Kind,
        elem: &mut Vec<u8>,
        unused: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), ValueError> {
        if self.text.get(self.at) != Some(&b'{') {
            return Err(self.bad());
        }
        self.at += 1;
        out.push(b'[');
        if self.text.get(self.at) == Some(&b'}') {
            self.at += 1;
            out.push(b']');
            return Ok(());
        }
        let mut first = true;
        loop {
            if !first {
                out.push(b',');
            }
            first = false;
            if self.text.get(self.at) == Some(&b'{') {
                allow(self.strict, Special::Dimensions, "array")?;
                if depth >= MAX_DIMENSIONS {
                    return Err(self.bad());
                }
                self.dimension(out, kind, elem, unused, depth + 1)?;
            } else {
                let quoted = self.element(elem)?;
                if !quoted && elem.as_slice() == b"NULL" {
                    out.extend_from_slice(b"null");
                } else {
                    write_element(out, kind, elem, unused, self.strict, &mut self.lost)?;
                }
            }
            match self.text.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    break;
                }
                _ => return Err(self.bad()),
            }
        }
        out.push(b']');
        Ok(())
    }

    /// One element's text, unescaped into `elem`; whether it was quoted.
    fn element(&mut self, elem: &mut Vec<u8>) -> Result<bool, ValueError> {
        elem.clear();
        if self.text.get(self.at) == Some(&b'"') {
            self.at += 1;
            loop {
                match self.text.get(self.at) {
                    Some(b'\\') => {
                        let c = *self.text.get(self.at + 1).ok_or_else(|| self.bad())?;
                        elem.push(c);
                        self.at += 2;
                    }
                    Some(b'"') => {
                        self.at += 1;
                        return Ok(true);
                    }
                    Some(&c) => {
                        elem.push(c);
                        self.at += 1;
                    }
                    None => return Err(bad("array (unterminated quote)", self.whole)),
                }
            }
        }
        while let Some(&c) = self.text.get(self.at) {
            match c {
                b',' | b'}' => break,
                b'{' | b'"' => return Err(self.bad()),
                _ => elem.push(c),
            }
            self.at += 1;
        }
        Ok(false)
    }
}

/// One array element. Debezium 3.6.1 reads array elements with the JDBC
/// driver, in snapshot and stream, so a few special values differ from the
/// same value in a scalar column: an `infinity` date is -622191234
/// (`-infinity` -625821272: the driver's infinite `java.sql.Date` as a day
/// number cut to 32 bits, with the JVM in UTC), a `-infinity` timestamptz
/// the year 292269055, a time of `24:00:00` is 0, and a `numeric`
/// `NaN`/`±Infinity` makes the whole column `null`.
fn write_element(
    out: &mut Vec<u8>,
    kind: Kind,
    elem: &[u8],
    scratch: &mut Vec<u8>,
    strict: bool,
    lost: &mut bool,
) -> Result<(), ValueError> {
    match (kind, elem) {
        (Kind::Date, b"infinity" | b"-infinity") => {
            allow(strict, Special::Infinity, "date")?;
            out.extend_from_slice(if elem[0] == b'-' {
                b"-625821272" as &[u8]
            } else {
                b"-622191234"
            });
        }
        (Kind::TimeMicros | Kind::TimeMillis, b"24:00:00") => out.push(b'0'),
        (Kind::TimestampTz { fraction }, b"-infinity") => {
            allow(strict, Special::Infinity, "timestamp with time zone")?;
            out.extend_from_slice(b"\"+292269055-12-02T23:00:00");
            if fraction > 0 {
                out.push(b'.');
                out.extend(std::iter::repeat_n(b'0', usize::from(fraction.min(6))));
            }
            out.extend_from_slice(b"Z\"");
        }
        (
            Kind::Decimal { .. } | Kind::DecimalString | Kind::DecimalDouble,
            b"NaN" | b"Infinity" | b"-Infinity",
        ) => {
            *lost = true;
            out.extend_from_slice(b"null");
        }
        (Kind::Decimal { scale: None }, _) => {
            write_scalar(out, kind, jdbc_numeric(elem), scratch, strict)?
        }
        _ => write_scalar(out, kind, elem, scratch, strict)?,
    }
    Ok(())
}

fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c.wrapping_sub(b'A').wrapping_add(10) & 0x0f,
    }
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (Java's `Base64.getEncoder()`, which the
/// JSON converter uses for bytes).
pub fn base64(out: &mut Vec<u8>, bytes: &[u8]) {
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        let sextet = |shift: u32| BASE64[((n >> shift) & 0x3f) as usize];
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { b'=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { b'=' });
    }
}

/// Debezium's `ZonedTimestamp`: ISO-8601 in UTC. With `fraction` 1-6 the
/// fraction has exactly that many digits, zeros included
/// (`2024-01-01T10:00:00.120Z` for `timestamptz(3)`), as Debezium 3.x's
/// `appendFraction(NANO_OF_SECOND, w, w, true)`; with 0, Java's
/// `ISO_OFFSET_DATE_TIME`: no trailing zeros, no fraction for whole seconds.
///
/// Years as Java writes them: four digits at least, `+` before years after
/// 9999, `-` before years before 1 (1 BC is year 0).
fn write_iso_timestamp(out: &mut Vec<u8>, secs: i64, frac: i64, fraction: u8) {
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

/// `v` in decimal, without `core::fmt` (a per-value cost on the event path).
pub(crate) fn push_int<I: itoa::Integer>(out: &mut Vec<u8>, v: I) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
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
fn write_iso_time(out: &mut Vec<u8>, micros: i64) {
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
fn interval_micros(p: IntervalParts) -> (i64, bool) {
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
fn write_iso_interval(out: &mut Vec<u8>, p: IntervalParts) {
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

#[cfg(test)]
#[path = "debezium_tests.rs"]
mod tests;
