//! `hstore` values as Debezium writes them (`hstore.handling.mode=json`): a
//! JSON string of the object, keys in the bucket order of the JDBC
//! driver's Java `HashMap`, strings escaped as Jackson escapes them.
//!
//! Invariants: the key order is Java's (`String.hashCode`, capacity growth
//! at load factor 0.75), so the same hstore text gives Debezium's bytes.

use std::io::Write as _;

use super::{ValueError, bad, json_str, utf8};

/// Java's `String.hashCode` (over UTF-16 code units).
pub(in crate::router) fn java_hash(s: &str) -> i32 {
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
pub(super) fn jackson_str(out: &mut Vec<u8>, s: &str) {
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
pub(super) fn write_hstore(
    out: &mut Vec<u8>,
    text: &[u8],
    scratch: &mut Vec<u8>,
) -> Result<(), ValueError> {
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
