//! Encoder for pgoutput v1 messages: the exact inverse of [`decode`](super::decode).
//!
//! walrelay never sends these messages to PostgreSQL; the encoder exists so
//! tests (here and in `source`) and tools can build byte-exact messages from
//! values, and so round trips `decode(encode(m)) == m` can be property-tested.
//!
//! Invariant: for every message `decode` returns, `encode` succeeds and
//! `decode(encode(m)) == m`; the bytes are the input bytes except that a
//! Message's flag byte is normalised to 0 or 1 (`decode` keeps only bit 1,
//! the only one PostgreSQL defines). Values `decode` can never produce (a string
//! with a NUL byte, more than 65535 columns, a value over `i32::MAX` bytes)
//! are [`EncodeError`]s, not panics.

use bytes::{BufMut, Bytes, BytesMut};

use super::{Cell, LogicalMessage, OldTuple, TupleData};

/// A value that cannot be represented in pgoutput v1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// A string field contains a NUL byte, which would end it early on the wire.
    #[error("cannot encode {field}: it contains a NUL byte")]
    NulInString { field: &'static str },
    /// A list is longer than its wire count field allows.
    #[error("cannot encode {field}: {len} entries exceed the wire limit of {max}")]
    TooMany {
        field: &'static str,
        len: usize,
        max: u64,
    },
}

/// Encodes `msg` as pgoutput v1 bytes (tag first), as a walsender would send it.
pub fn encode(msg: &LogicalMessage) -> Result<Bytes, EncodeError> {
    let mut out = BytesMut::new();
    out.put_u8(msg.tag());
    match msg {
        LogicalMessage::Begin(b) => {
            out.put_u64(b.final_lsn.0);
            out.put_i64(b.commit_time);
            out.put_u32(b.xid);
        }
        LogicalMessage::Commit(c) => {
            out.put_u8(c.flags);
            out.put_u64(c.commit_lsn.0);
            out.put_u64(c.end_lsn.0);
            out.put_i64(c.commit_time);
        }
        LogicalMessage::Origin(o) => {
            out.put_u64(o.commit_lsn.0);
            put_string(&mut out, &o.name, "origin name")?;
        }
        LogicalMessage::Relation(r) => {
            out.put_u32(r.oid);
            put_string(&mut out, &r.namespace, "namespace")?;
            put_string(&mut out, &r.name, "relation name")?;
            out.put_u8(r.replica_identity);
            out.put_u16(count_u16(r.columns.len(), "relation columns")?);
            for c in &r.columns {
                out.put_u8(c.flags);
                put_string(&mut out, &c.name, "column name")?;
                out.put_u32(c.type_oid);
                out.put_i32(c.type_modifier);
            }
        }
        LogicalMessage::Type(t) => {
            out.put_u32(t.oid);
            put_string(&mut out, &t.namespace, "namespace")?;
            put_string(&mut out, &t.name, "type name")?;
        }
        LogicalMessage::Insert(i) => {
            out.put_u32(i.relation);
            out.put_u8(b'N');
            put_tuple(&mut out, &i.new)?;
        }
        LogicalMessage::Update(u) => {
            out.put_u32(u.relation);
            if let Some(old) = &u.old {
                put_old(&mut out, old)?;
            }
            out.put_u8(b'N');
            put_tuple(&mut out, &u.new)?;
        }
        LogicalMessage::Delete(d) => {
            out.put_u32(d.relation);
            put_old(&mut out, &d.old)?;
        }
        LogicalMessage::Truncate(t) => {
            let n = u32::try_from(t.relations.len()).map_err(|_| EncodeError::TooMany {
                field: "truncated relations",
                len: t.relations.len(),
                max: u64::from(u32::MAX),
            })?;
            out.put_u32(n);
            out.put_u8(t.options);
            for &oid in &t.relations {
                out.put_u32(oid);
            }
        }
        LogicalMessage::Message(m) => {
            out.put_u8(u8::from(m.transactional));
            out.put_u64(m.lsn.0);
            put_string(&mut out, &m.prefix, "prefix")?;
            put_len(&mut out, m.content.len(), "message content")?;
            out.put_slice(&m.content);
        }
    }
    Ok(out.freeze())
}

fn put_string(out: &mut BytesMut, s: &str, field: &'static str) -> Result<(), EncodeError> {
    if s.as_bytes().contains(&0) {
        return Err(EncodeError::NulInString { field });
    }
    out.put_slice(s.as_bytes());
    out.put_u8(0);
    Ok(())
}

fn count_u16(len: usize, field: &'static str) -> Result<u16, EncodeError> {
    u16::try_from(len).map_err(|_| EncodeError::TooMany {
        field,
        len,
        max: u64::from(u16::MAX),
    })
}

fn put_len(out: &mut BytesMut, len: usize, field: &'static str) -> Result<(), EncodeError> {
    let n = i32::try_from(len).map_err(|_| EncodeError::TooMany {
        field,
        len,
        max: i32::MAX.unsigned_abs().into(),
    })?;
    out.put_i32(n);
    Ok(())
}

fn put_old(out: &mut BytesMut, old: &OldTuple) -> Result<(), EncodeError> {
    match old {
        OldTuple::Key(t) => {
            out.put_u8(b'K');
            put_tuple(out, t)
        }
        OldTuple::Old(t) => {
            out.put_u8(b'O');
            put_tuple(out, t)
        }
    }
}

fn put_tuple(out: &mut BytesMut, tuple: &TupleData) -> Result<(), EncodeError> {
    out.put_u16(count_u16(tuple.len(), "tuple columns")?);
    for cell in tuple.cells() {
        match cell {
            Cell::Null => out.put_u8(b'n'),
            Cell::UnchangedToast => out.put_u8(b'u'),
            Cell::Text(v) | Cell::Binary(v) => {
                out.put_u8(if matches!(cell, Cell::Text(_)) {
                    b't'
                } else {
                    b'b'
                });
                put_len(out, v.len(), "column value")?;
                out.put_slice(v);
            }
        }
    }
    Ok(())
}
