//! PostgreSQL log sequence numbers.
//!
//! An [`Lsn`] is a byte position in the write-ahead log. It is printed the way
//! PostgreSQL prints it (`X/YYYYYYYY`: high 32 bits, slash, low 32 bits, both
//! upper-case hex, the low half zero-padded to 8 digits) and parsed from that
//! form, so values can be copied between our logs and `pg_replication_slots`.
//!
//! Invariant: `Display` and `FromStr` round-trip every `u64`.

use std::fmt;
use std::str::FromStr;

/// A position in PostgreSQL's write-ahead log.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    /// The invalid/zero position (`0/0`), which PostgreSQL uses for "none".
    pub const ZERO: Lsn = Lsn(0);
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:08X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

impl fmt::Debug for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lsn({self})")
    }
}

impl From<u64> for Lsn {
    fn from(v: u64) -> Self {
        Lsn(v)
    }
}

/// Error returned when a string is not of the form `X/Y` with hex halves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid LSN {input:?}: expected two hexadecimal numbers separated by '/', like 16/B374D848"
)]
pub struct ParseLsnError {
    input: String,
}

impl FromStr for Lsn {
    type Err = ParseLsnError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseLsnError {
            input: s.to_owned(),
        };
        let (hi, lo) = s.trim().split_once('/').ok_or_else(err)?;
        if hi.is_empty() || lo.is_empty() || hi.len() > 8 || lo.len() > 8 {
            return Err(err());
        }
        let hi = u32::from_str_radix(hi, 16).map_err(|_| err())?;
        let lo = u32::from_str_radix(lo, 16).map_err(|_| err())?;
        Ok(Lsn((u64::from(hi) << 32) | u64::from(lo)))
    }
}

#[cfg(test)]
mod tests;
