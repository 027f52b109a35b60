//! A bounds-checked cursor over one pgoutput message.
//!
//! Every read checks the remaining length first and returns a [`DecodeError`]
//! naming the message, the field and the offset instead of panicking. Byte
//! strings are handed out as [`Bytes`] slices of the input (no copy).

use bytes::Bytes;

use super::{DecodeError, Field};

/// Cursor over one message; `message` is the human name used in errors.
#[derive(Debug)]
pub(super) struct Reader {
    buf: Bytes,
    pos: usize,
    message: &'static str,
}

impl Reader {
    /// Starts reading `buf` at `pos` (just after the tag byte).
    pub(super) fn new(buf: Bytes, pos: usize, message: &'static str) -> Self {
        Reader { buf, pos, message }
    }

    pub(super) fn message(&self) -> &'static str {
        self.message
    }

    pub(super) fn offset(&self) -> usize {
        self.pos
    }

    pub(super) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Takes `n` bytes as a slice of the input, or fails naming `field`.
    pub(super) fn take(&mut self, n: usize, field: Field) -> Result<&[u8], DecodeError> {
        let have = self.remaining();
        if n > have {
            return Err(DecodeError::Truncated {
                message: self.message,
                field,
                offset: self.pos,
                need: n,
                have,
            });
        }
        let start = self.pos;
        self.pos += n;
        self.buf.get(start..self.pos).ok_or(DecodeError::Truncated {
            message: self.message,
            field,
            offset: start,
            need: n,
            have,
        })
    }

    /// Takes `n` bytes as a zero-copy [`Bytes`] slice of the input.
    pub(super) fn take_bytes(&mut self, n: usize, field: Field) -> Result<Bytes, DecodeError> {
        let start = self.pos;
        self.take(n, field)?;
        Ok(self.buf.slice(start..self.pos))
    }

    fn array<const N: usize>(&mut self, field: Field) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    pub(super) fn u8(&mut self, field: Field) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(field)?[0])
    }

    pub(super) fn u16(&mut self, field: Field) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    pub(super) fn u32(&mut self, field: Field) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array(field)?))
    }

    pub(super) fn i32(&mut self, field: Field) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    pub(super) fn u64(&mut self, field: Field) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array(field)?))
    }

    pub(super) fn i64(&mut self, field: Field) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    /// Reads a NUL-terminated string and decodes it as strict UTF-8.
    ///
    /// The terminator is consumed and not part of the result.
    pub(super) fn string(&mut self, field: Field) -> Result<String, DecodeError> {
        let start = self.pos;
        let rest = self.buf.get(start..).unwrap_or_default();
        let Some(len) = rest.iter().position(|&b| b == 0) else {
            return Err(DecodeError::UnterminatedString {
                message: self.message,
                field,
                offset: start,
            });
        };
        let message = self.message;
        let raw = self.take(len, field)?;
        let text = std::str::from_utf8(raw)
            .map_err(|source| DecodeError::InvalidUtf8 {
                message,
                field,
                offset: start,
                source,
            })?
            .to_owned();
        self.pos += 1; // the NUL found above
        Ok(text)
    }

    /// Fails unless `count` items of at least `min_each` bytes can still fit.
    ///
    /// Called before allocating for a count read from the wire, so a hostile
    /// count can never make us reserve more than the message could hold.
    pub(super) fn check_count(
        &self,
        count: usize,
        min_each: usize,
        what: &'static str,
        offset: usize,
    ) -> Result<(), DecodeError> {
        let remaining = self.remaining();
        if count.saturating_mul(min_each) > remaining {
            return Err(DecodeError::CountExceedsRemaining {
                message: self.message,
                what,
                count,
                offset,
                remaining,
                min_each,
            });
        }
        Ok(())
    }

    /// Fails with [`DecodeError::TrailingBytes`] unless the whole input was read.
    pub(super) fn finish(self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(DecodeError::TrailingBytes {
                message: self.message,
                count,
                offset: self.pos,
            }),
        }
    }
}
