//! Column masks of table events, as Debezium's column mappers write them
//! (`MaskStrings`, `TruncateColumn` in Debezium's `relational.mapping`):
//!
//! - **hash** (`column.mask.hash.<algorithm>.with.salt.<salt>`): the
//!   lower-case hex digest of `salt ‖ bytes(value)`, where `bytes` is the
//!   Java serialization of the string (`ObjectOutputStream.writeObject`,
//!   hashing version 1, Debezium's default) or its UTF-8 bytes (version 2,
//!   `column.mask.hash.v2.…`); cut to the column's length when it has one
//!   (`varchar(n)`, `char(n)`: n characters; `"char"`: 1). NULL stays NULL.
//! - **with_chars** (`column.mask.with.<N>.chars`): N `*` for every value,
//!   NULL included (Debezium's mask ignores the value it replaces).
//! - **truncate_to_chars** (`column.truncate.to.<N>.chars`): values longer
//!   than N characters are cut to N, counting as Java does (UTF-16 code
//!   units); a cut through a character outside the Basic Multilingual
//!   Plane drops that whole character (Java would keep half of it, which
//!   its JSON writer cannot write). NULL stays NULL.
//!
//! Invariants:
//! - Masks apply to text-like columns only (`text`, `varchar`, `char(n)`,
//!   `"char"`, `name`: the types PostgreSQL's JDBC driver reports as
//!   `CHAR`/`VARCHAR`, which are the only ones Debezium masks); anything
//!   else is refused when the table is bound ([`maskable`]), never silently
//!   passed through as Debezium does.
//! - The salt is a secret: it is kept in a `SecretString`, never in `Debug`
//!   output or an error.
//! - Pure: the same value always yields the same output; no I/O, no clock.
//!
//! `tests/it/debezium_compat.rs` compares every kind of mask with Debezium
//! 3.6.1 itself (hash v1 and v2 on non-ASCII and non-BMP text, a cut
//! `varchar(n)` hash, NULLs, an unchanged TOAST placeholder); the unit
//! tests below pin golden values computed with Java 17.

use secrecy::{ExposeSecret, SecretString};

use super::debezium;
use crate::config::{ColumnMask, HASH_ALGORITHMS};
use crate::pgoutput::Oid;

/// The declared column types a mask may apply to: `"char"`, `name`,
/// `text`, `bpchar` (`char(n)`), `varchar`.
const MASKABLE: [Oid; 5] = [18, 19, 25, 1042, 1043];

/// Whether a column declared with type `oid` can be masked.
pub fn maskable(oid: Oid) -> bool {
    MASKABLE.contains(&oid)
}

/// A mask bound to one column.
#[derive(Debug, Clone)]
pub enum Mask {
    Hash {
        /// Index into [`HASH_ALGORITHMS`].
        algorithm: usize,
        salt: SecretString,
        /// Hashing version 1 (Java serialization) or 2 (UTF-8 bytes).
        java_serialized: bool,
        /// The column's length, when it has one: the hex is cut to it.
        max_chars: Option<usize>,
    },
    Chars(usize),
    Truncate(usize),
}

impl Mask {
    /// The mask `config` makes for a column of declared type `oid` with
    /// type modifier `typmod`. `None` when `config` names no kind
    /// (validation refuses that).
    pub fn new(config: &ColumnMask, oid: Oid, typmod: i32) -> Option<Mask> {
        if let Some(name) = &config.hash {
            let algorithm = HASH_ALGORITHMS
                .iter()
                .position(|a| a.eq_ignore_ascii_case(name))?;
            let max_chars = match oid {
                18 => Some(1),
                1042 | 1043 if typmod >= 4 => usize::try_from(typmod - 4).ok(),
                _ => None,
            };
            return Some(Mask::Hash {
                algorithm,
                salt: config
                    .salt
                    .clone()
                    .unwrap_or_else(|| SecretString::from("")),
                java_serialized: config.hash_version.unwrap_or(1) == 1,
                max_chars,
            });
        }
        if let Some(n) = config.with_chars {
            return Some(Mask::Chars(n as usize));
        }
        config.truncate_to_chars.map(|n| Mask::Truncate(n as usize))
    }

    /// Appends the JSON of the masked `value` (`None`: NULL) to `out`;
    /// `scratch` is reused between calls.
    pub fn write(
        &self,
        out: &mut Vec<u8>,
        value: Option<&str>,
        scratch: &mut Vec<u8>,
    ) -> Result<(), String> {
        match (self, value) {
            (Mask::Chars(n), _) => {
                out.push(b'"');
                out.extend(std::iter::repeat_n(b'*', *n));
                out.push(b'"');
            }
            (_, None) => out.extend_from_slice(b"null"),
            (Mask::Truncate(n), Some(v)) => debezium::json_str(out, truncate_utf16(v, *n)),
            (
                Mask::Hash {
                    algorithm,
                    salt,
                    java_serialized,
                    max_chars,
                },
                Some(v),
            ) => {
                scratch.clear();
                if *java_serialized {
                    java_serialize_string(scratch, v);
                } else {
                    scratch.extend_from_slice(v.as_bytes());
                }
                let digest = digest(*algorithm, salt.expose_secret().as_bytes(), scratch)?;
                let hex_len = max_chars.map_or(digest.len() * 2, |m| m.min(digest.len() * 2));
                out.push(b'"');
                const DIGITS: &[u8; 16] = b"0123456789abcdef";
                for (i, b) in digest.iter().flat_map(|b| [b >> 4, b & 0x0f]).enumerate() {
                    if i == hex_len {
                        break;
                    }
                    out.push(DIGITS[usize::from(b)]);
                }
                out.push(b'"');
            }
        }
        Ok(())
    }
}

/// The digest of `salt ‖ data` with algorithm `HASH_ALGORITHMS[algorithm]`.
fn digest(algorithm: usize, salt: &[u8], data: &[u8]) -> Result<Vec<u8>, String> {
    use openssl::hash::{Hasher, MessageDigest};
    let md = match HASH_ALGORITHMS.get(algorithm).copied() {
        Some("MD5") => MessageDigest::md5(),
        Some("SHA-1") => MessageDigest::sha1(),
        Some("SHA-224") => MessageDigest::sha224(),
        Some("SHA-256") => MessageDigest::sha256(),
        Some("SHA-384") => MessageDigest::sha384(),
        Some("SHA-512") => MessageDigest::sha512(),
        Some("SHA3-224") => MessageDigest::sha3_224(),
        Some("SHA3-256") => MessageDigest::sha3_256(),
        Some("SHA3-384") => MessageDigest::sha3_384(),
        Some("SHA3-512") => MessageDigest::sha3_512(),
        _ => return Err("unknown hash algorithm".into()),
    };
    let hashed = Hasher::new(md).and_then(|mut h| {
        h.update(salt)?;
        h.update(data)?;
        h.finish()
    });
    hashed
        .map(|d| d.to_vec())
        .map_err(|e| format!("OpenSSL could not hash the value: {e}"))
}

/// Appends Java's `ObjectOutputStream.writeObject(s)` of a `String`: the
/// stream header, then `TC_STRING` + u16 length (or `TC_LONGSTRING` + i64
/// length above 65535 bytes) and the string in Java's modified UTF-8
/// (NUL as two bytes, characters outside the BMP as two three-byte
/// surrogates).
pub fn java_serialize_string(out: &mut Vec<u8>, s: &str) {
    let len: usize = s
        .encode_utf16()
        .map(|u| match u {
            0x0001..=0x007f => 1,
            0x0000 | 0x0080..=0x07ff => 2,
            _ => 3,
        })
        .sum();
    out.extend_from_slice(&[0xac, 0xed, 0x00, 0x05]);
    if let Ok(short) = u16::try_from(len) {
        out.push(0x74);
        out.extend_from_slice(&short.to_be_bytes());
    } else {
        out.push(0x7c);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    for u in s.encode_utf16() {
        match u {
            0x0001..=0x007f => out.push(u as u8),
            0x0000 | 0x0080..=0x07ff => {
                out.push(0xc0 | (u >> 6) as u8);
                out.push(0x80 | (u & 0x3f) as u8);
            }
            _ => {
                out.push(0xe0 | (u >> 12) as u8);
                out.push(0x80 | ((u >> 6) & 0x3f) as u8);
                out.push(0x80 | (u & 0x3f) as u8);
            }
        }
    }
}

/// The longest prefix of `s` of at most `max` UTF-16 code units that ends
/// on a character boundary.
pub fn truncate_utf16(s: &str, max: usize) -> &str {
    let mut units = 0;
    for (at, c) in s.char_indices() {
        units += c.len_utf16();
        if units > max {
            return &s[..at];
        }
    }
    s
}

#[cfg(test)]
mod tests;
