//! Protocol version 2's streamed transactions (PostgreSQL 14+, requested
//! with `streaming 'on'`): a transaction larger than the server's
//! `logical_decoding_work_mem` is sent while it runs, in blocks, before
//! PostgreSQL knows whether it commits.
//!
//! The frame: `Stream Start` (`S`: the top-level xid, whether this is the
//! transaction's first block) … changes … `Stream Stop` (`E`); blocks of
//! several transactions and whole ordinary transactions (`B … C`)
//! interleave between blocks, never inside one. The end: `Stream Commit`
//! (`c`: xid, commit and end LSN, commit time) or `Stream Abort` (`A`: the
//! xid and the subtransaction it ends — the whole transaction when the
//! two are equal).
//!
//! Inside a block, `Relation`, `Type`, `Insert`, `Update`, `Delete`,
//! `Truncate` and `Message` carry the xid of the (sub)transaction that made
//! them between the tag and the body ([`streamed_xid`]); otherwise they are
//! protocol 1's messages ([`decode_streamed`] decodes them as [`decode`]
//! would). `Origin` carries none.
//!
//! Invariant (as for [`decode`]): malformed bytes are a [`DecodeError`]
//! naming the message, field and offset, never a panic.

use bytes::{BufMut, Bytes, BytesMut};

use super::reader::Reader;
use super::{DecodeError, Field, LogicalMessage, decode, decode_at};
use crate::Lsn;

/// A message of the frame around streamed transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamControl {
    /// `S`: the changes up to the next [`StreamControl::Stop`] belong to
    /// top-level transaction `xid`.
    Start { xid: u32, first_segment: bool },
    /// `E`: the end of a block.
    Stop,
    /// `c`: transaction `xid` committed.
    Commit(StreamCommit),
    /// `A`: subtransaction `subxid` of `xid` (all of `xid` when equal)
    /// aborted: its changes are void.
    Abort { xid: u32, subxid: u32 },
}

/// `Stream Commit`'s fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamCommit {
    pub xid: u32,
    pub flags: u8,
    /// The commit record's LSN: what an ordinary transaction's `Begin`
    /// names as its final LSN.
    pub commit_lsn: Lsn,
    /// The end of the commit record.
    pub end_lsn: Lsn,
    /// Microseconds since 2000-01-01.
    pub commit_time: i64,
}

/// `buf` decoded when it is a frame message (`S`, `E`, `c`, `A`); `None`
/// for any other tag.
pub fn decode_stream_control(buf: &Bytes) -> Result<Option<StreamControl>, DecodeError> {
    let Some(&tag) = buf.first() else {
        return Err(DecodeError::Empty);
    };
    let name = match tag {
        b'S' => "Stream Start",
        b'E' => "Stream Stop",
        b'c' => "Stream Commit",
        b'A' => "Stream Abort",
        _ => return Ok(None),
    };
    let mut r = Reader::new(buf.clone(), 1, name);
    let control = match tag {
        b'S' => StreamControl::Start {
            xid: r.u32(Field::named("xid"))?,
            first_segment: r.u8(Field::named("first segment flag"))? == 1,
        },
        b'E' => StreamControl::Stop,
        b'c' => StreamControl::Commit(StreamCommit {
            xid: r.u32(Field::named("xid"))?,
            flags: r.u8(Field::named("flags"))?,
            commit_lsn: Lsn(r.u64(Field::named("commit LSN"))?),
            end_lsn: Lsn(r.u64(Field::named("end LSN"))?),
            commit_time: r.i64(Field::named("commit timestamp"))?,
        }),
        _ => StreamControl::Abort {
            xid: r.u32(Field::named("xid"))?,
            subxid: r.u32(Field::named("subtransaction xid"))?,
        },
    };
    r.finish()?;
    Ok(Some(control))
}

/// The (sub)transaction xid a message inside a stream block carries:
/// `Some` for the tags that carry one, `None` for `Origin`; any other tag
/// does not belong inside a block and is an error.
pub fn streamed_xid(buf: &Bytes) -> Result<Option<u32>, DecodeError> {
    let Some(&tag) = buf.first() else {
        return Err(DecodeError::Empty);
    };
    match tag {
        b'R' | b'Y' | b'I' | b'U' | b'D' | b'T' | b'M' => {
            let mut r = Reader::new(buf.clone(), 1, "streamed change");
            Ok(Some(r.u32(Field::named("xid"))?))
        }
        b'O' => Ok(None),
        tag => Err(DecodeError::UnknownTag { tag }),
    }
}

/// Decodes a message received inside a stream block: the xid after the
/// tag is skipped (read it with [`streamed_xid`]), the rest is decoded as
/// protocol 1's message with the same tag.
pub fn decode_streamed(buf: Bytes) -> Result<LogicalMessage, DecodeError> {
    match buf.first() {
        Some(b'O') => decode(buf),
        Some(_) => {
            streamed_xid(&buf)?;
            decode_at(buf, 5)
        }
        None => Err(DecodeError::Empty),
    }
}

/// Encodes a frame message as a walsender sends it (for tests and tools).
pub fn encode_stream_control(control: &StreamControl) -> Bytes {
    let mut out = BytesMut::new();
    match *control {
        StreamControl::Start { xid, first_segment } => {
            out.put_u8(b'S');
            out.put_u32(xid);
            out.put_u8(u8::from(first_segment));
        }
        StreamControl::Stop => out.put_u8(b'E'),
        StreamControl::Commit(c) => {
            out.put_u8(b'c');
            out.put_u32(c.xid);
            out.put_u8(c.flags);
            out.put_u64(c.commit_lsn.0);
            out.put_u64(c.end_lsn.0);
            out.put_i64(c.commit_time);
        }
        StreamControl::Abort { xid, subxid } => {
            out.put_u8(b'A');
            out.put_u32(xid);
            out.put_u32(subxid);
        }
    }
    out.freeze()
}

/// `encoded` (a protocol 1 message from [`super::encode`]) as sent inside
/// a stream block by (sub)transaction `xid`: the xid after the tag
/// (`Origin` carries none).
pub fn streamed(xid: u32, encoded: &Bytes) -> Bytes {
    let Some((&tag, body)) = encoded.split_first() else {
        return encoded.clone();
    };
    if tag == b'O' {
        return encoded.clone();
    }
    let mut out = BytesMut::with_capacity(encoded.len() + 4);
    out.put_u8(tag);
    out.put_u32(xid);
    out.put_slice(body);
    out.freeze()
}

#[cfg(test)]
mod tests;
