//! Arrays as Debezium writes them: PostgreSQL's array text (`{1,2,NULL}`,
//! quoted elements, nested dimensions) → a JSON array, each element
//! written by the scalar writer of the element type.
//!
//! Invariants: at most [`MAX_DIMENSIONS`] dimensions (PostgreSQL's limit);
//! arrays with other bounds or dimensions than Debezium can write go
//! through the `special_values` rule; malformed text is a [`ValueError`].

use super::scalars::write_scalar;
use super::{Kind, Special, ValueError, allow, bad};

/// Arrays as JSON arrays of the element encodings (PostgreSQL connector
/// docs: `ARRAY` columns map to Kafka Connect arrays of the element's
/// type). As Debezium 3.6.1 writes them: an array with other bounds
/// (`[0:2]={7,8,9}`) as its elements (`[7,8,9]`); a `numeric` array holding
/// `NaN` or `±Infinity` as `null` (the whole column); the special values
/// its JDBC-driver path gives elements (see [`write_element`]). An array of
/// several dimensions is written as nested JSON arrays, where Debezium
/// writes no value (docs/compatibility.md).
pub(super) fn write_array(
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

/// The elements of a text-like array (an enum array's labels) as the JSON
/// path reads them, every dimension flattened, NULL as `None`; `None` when
/// the text is no array the JSON path would write.
pub(crate) fn text_elements(text: &[u8]) -> Option<Vec<Option<String>>> {
    let (mut json, mut scratch) = (Vec::new(), Vec::new());
    write_array(&mut json, Kind::Text, text, &mut scratch, false).ok()?;
    fn flatten(v: serde_json::Value, out: &mut Vec<Option<String>>) {
        match v {
            serde_json::Value::Array(items) => items.into_iter().for_each(|i| flatten(i, out)),
            serde_json::Value::String(s) => out.push(Some(s)),
            _ => out.push(None),
        }
    }
    let mut out = Vec::new();
    flatten(serde_json::from_slice(&json).ok()?, &mut out);
    Some(out)
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
