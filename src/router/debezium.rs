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

mod array;
mod hstore;
mod numeric;
mod scalars;
mod temporal;

pub(crate) use array::text_elements;
use array::write_array;
use hstore::jackson_str;
pub(super) use hstore::java_hash;
use scalars::write_scalar;

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

/// `v` in decimal, without `core::fmt` (a per-value cost on the event path).
pub(crate) fn push_int<I: itoa::Integer>(out: &mut Vec<u8>, v: I) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

#[cfg(test)]
mod tests;
