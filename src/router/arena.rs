//! Record bytes without an allocation per record.
//!
//! The routers build every key, value and header of a record in a reusable
//! buffer and hand it out as [`Bytes`]. Copying each into its own `Bytes`
//! costs a `malloc` and a `free` per piece, and a clone of such a `Bytes`
//! (the relay keeps the event id until the delivery report) one more
//! allocation to make it shareable. An [`Arena`] instead copies the pieces
//! one after another into a shared chunk and hands out slices of it: a
//! slice and its clones are reference counts on the chunk, and a new chunk
//! is allocated only when the current one is full.
//!
//! Invariants:
//! - **No aliasing.** Every [`Bytes`] handed out covers bytes no other
//!   handed-out `Bytes` covers, and never changes after it is handed out.
//! - **Memory follows the slices.** A chunk is freed (or, when nothing
//!   else refers to it any more, reused in place) only once every slice of
//!   it is dropped. So one arena should hold pieces with the same lifetime:
//!   a long-lived slice (an event id kept until Kafka acknowledges it)
//!   keeps its whole chunk alive, with the short-lived values beside it.
//! - **Bounded**: the arena never keeps more than one chunk of its chunk
//!   size. A piece larger than that is copied into an allocation of its own,
//!   freed with its last slice (a 10 MB value must not stay allocated after
//!   it was sent).

use std::fmt::Write as _;

use bytes::{Bytes, BytesMut};

/// Hands out [`Bytes`] copied into shared chunks (see the module doc).
#[derive(Debug)]
pub struct Arena {
    buf: BytesMut,
    chunk: usize,
}

impl Arena {
    /// An arena that allocates chunks of `chunk` bytes (at least the size
    /// of the piece being copied), the first one when it is first used.
    pub fn new(chunk: usize) -> Arena {
        Arena {
            buf: BytesMut::new(),
            chunk: chunk.max(64),
        }
    }

    /// `bytes`, copied into the arena.
    pub fn copy(&mut self, bytes: &[u8]) -> Bytes {
        if bytes.len() > self.chunk {
            return Bytes::copy_from_slice(bytes);
        }
        self.room(bytes.len());
        self.buf.extend_from_slice(bytes);
        self.buf.split().freeze()
    }

    /// `head` then `tail`, copied into the arena as one piece (a record
    /// body behind its wire-format prefix).
    pub fn copy2(&mut self, head: &[u8], tail: &[u8]) -> Bytes {
        let n = head.len() + tail.len();
        if n > self.chunk {
            let mut own = BytesMut::with_capacity(n);
            own.extend_from_slice(head);
            own.extend_from_slice(tail);
            return own.freeze();
        }
        self.room(n);
        self.buf.extend_from_slice(head);
        self.buf.extend_from_slice(tail);
        self.buf.split().freeze()
    }

    /// The text of `args` (e.g. `format_args!("{lsn}:{index}")`), written
    /// into the arena: for short texts (an id, an LSN), which always fit in a
    /// chunk.
    pub fn format(&mut self, args: std::fmt::Arguments<'_>) -> Bytes {
        // Short texts fit in what is reserved here; a longer one grows the
        // chunk as `write_fmt` goes, which is still correct.
        self.room(64);
        let _ = self.buf.write_fmt(args);
        self.buf.split().freeze()
    }

    fn room(&mut self, n: usize) {
        if self.buf.capacity() < n {
            // `reserve` reuses the chunk when every slice of it is gone,
            // and otherwise allocates a new one of the chunk size.
            self.buf.reserve(self.chunk);
        }
    }
}

#[cfg(test)]
mod tests;
