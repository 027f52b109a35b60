//! Streamed transactions held until they end (protocol 2, see
//! [`crate::pgoutput::stream`]). PostgreSQL sends a transaction larger than
//! its `logical_decoding_work_mem` while it runs, instead of spilling it to
//! its own disk and decoding it again after the commit; what it sends may
//! still abort, so nothing of it goes downstream before its `Stream Commit`.
//!
//! Each open transaction's messages are kept as received (bytes and the
//! position they arrived at), in memory up to a bound shared by all open
//! transactions and in a file of the transaction's own beyond it, and are
//! replayed at the commit, in the order received, through the same
//! assembly as a transaction sent whole — so records, event ids and
//! positions are those of protocol 1. This is what PostgreSQL's own apply
//! worker does with streamed transactions.
//!
//! Invariants:
//! - **Only committed changes come out, in the order they were made.** A
//!   transaction's messages come out at its commit only, in the order they
//!   arrived; an aborted transaction's never. An aborted subtransaction
//!   loses its first message and every message after it: subtransactions
//!   nest, so what follows the first change of one is its own or its
//!   children's until it ends, and one that committed into its parent is
//!   never aborted alone (the rule of PostgreSQL's apply worker).
//! - **Bounded memory.** After every append, what the open transactions
//!   hold in memory (their messages and each one's slot in its queue) is
//!   at most `memory_limit` bytes: beyond it, the transaction holding most
//!   is moved to its file. Files are
//!   unnamed (`O_TMPFILE`, [`tempfile::tempfile_in`]): a kill -9 leaves
//!   none behind, and none outlives its transaction.
//! - **Nothing assumed across sessions.** A new session starts empty; the
//!   walsender sends every transaction still open again from its first
//!   block (the slot has not passed its commit).
//! - **A frame out of order is an error, never a guess**: a change outside
//!   a block, a block inside a block, a later block of a transaction whose
//!   first block was not seen, a first block of one already open, a
//!   commit of an unknown transaction.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use bytes::{Bytes, BytesMut};

use crate::Lsn;
use crate::config::Config;
use crate::pg::replication::InProgress;

/// Bytes an entry takes in a file besides its message: the position it
/// arrived at and the message's length.
const ENTRY_HEADER: u64 = 8 + 4;

/// Bytes an entry held in memory takes besides its message's (its slot in
/// the queue), counted against the memory bound.
const ENTRY_IN_MEMORY: u64 = std::mem::size_of::<Entry>() as u64;

/// Why a streamed transaction cannot be held or replayed.
#[derive(Debug, thiserror::Error)]
pub enum StreamedError {
    /// The walsender's frame broke a rule of protocol 2.
    #[error("{0}")]
    OutOfOrder(String),
    /// The spill file could not be written or read.
    #[error(
        "cannot {what} a streamed transaction's spill file in {}: {source}",
        dir.display()
    )]
    Io {
        what: &'static str,
        dir: PathBuf,
        source: io::Error,
    },
}

/// One message of a streamed transaction.
#[derive(Debug, Clone)]
struct Entry {
    /// Where it arrived (what errors name).
    at: Lsn,
    data: Bytes,
}

impl Entry {
    fn size(&self) -> u64 {
        ENTRY_HEADER + self.data.len() as u64
    }
}

/// An open streamed transaction. Its messages are a sequence of entries:
/// the first `spilled` bytes of it in `file`, the rest in `memory`.
#[derive(Debug, Default)]
struct Open {
    /// Where its first `Stream Start` arrived (the first change of any
    /// table): a transaction that published nothing has its `Begin` there.
    first_at: Lsn,
    file: Option<File>,
    /// Bytes of entries in the file (the file's length).
    spilled: u64,
    memory: VecDeque<Entry>,
    /// Bytes of entries in `memory`.
    in_memory: u64,
    /// Each subtransaction (by xid) that sent a message, and where in the
    /// sequence its first message starts; in order of appearance.
    subxacts: Vec<(u32, u64)>,
    /// Messages held, over file and memory.
    messages: u64,
}

impl Open {
    fn len(&self) -> u64 {
        self.spilled + self.in_memory
    }

    /// Memory its entries in memory take, against the bound.
    fn held(&self) -> u64 {
        self.in_memory + self.memory.len() as u64 * ENTRY_IN_MEMORY
    }
}

/// Every streamed transaction open on this session.
#[derive(Debug)]
pub(super) struct Streamed {
    open: HashMap<u32, Open>,
    /// The transaction whose block is being received.
    block: Option<u32>,
    /// Memory held over all open transactions ([`Open::held`]).
    in_memory: u64,
    memory_limit: u64,
    dir: PathBuf,
    /// Bytes moved to files, and transactions committed, since
    /// [`Streamed::take_counts`] last took them (metrics).
    spilled: u64,
    committed: u64,
}

/// A committed transaction's messages, oldest first.
#[derive(Debug)]
pub(super) struct Replay {
    /// Where the transaction's first block began (see `Open::first_at`).
    pub(super) first_at: Lsn,
    file: Option<Chunks>,
    memory: VecDeque<Entry>,
    dir: PathBuf,
    /// Messages left.
    left: u64,
}

/// A spill file read back in chunks of [`READ_CHUNK`] bytes, each message
/// handed out as a slice of its chunk (one allocation per chunk, not per
/// message).
#[derive(Debug)]
struct Chunks {
    file: File,
    /// Bytes of the file not yet read into `buf`.
    unread: u64,
    buf: BytesMut,
}

/// How much of a spill file is read at a time.
const READ_CHUNK: usize = 1 << 20;

impl Chunks {
    /// The next entry; `None` after the last.
    fn next(&mut self) -> io::Result<Option<Entry>> {
        if self.buf.is_empty() && self.unread == 0 {
            return Ok(None);
        }
        self.fill(ENTRY_HEADER as usize)?;
        let header = self.buf.split_to(ENTRY_HEADER as usize);
        let (at, len) = header.split_at(8);
        let at = Lsn(u64::from_be_bytes(at.try_into().unwrap_or_default()));
        let len = u32::from_be_bytes(len.try_into().unwrap_or_default()) as usize;
        self.fill(len)?;
        Ok(Some(Entry {
            at,
            data: self.buf.split_to(len).freeze(),
        }))
    }

    /// Reads until `buf` holds at least `n` bytes.
    fn fill(&mut self, n: usize) -> io::Result<()> {
        while self.buf.len() < n {
            let want = (n - self.buf.len()).max(READ_CHUNK);
            let take = usize::try_from(self.unread).map_or(want, |u| want.min(u));
            if take == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let start = self.buf.len();
            self.buf.resize(start + take, 0);
            self.file.read_exact(&mut self.buf[start..])?;
            self.unread -= take as u64;
        }
        Ok(())
    }
}

impl Streamed {
    /// Empty, holding at most `memory_limit` bytes of messages in memory and
    /// the rest in unnamed files in `dir`.
    pub(super) fn new(memory_limit: u64, dir: PathBuf) -> Streamed {
        Streamed {
            open: HashMap::new(),
            block: None,
            in_memory: 0,
            memory_limit,
            dir,
            spilled: 0,
            committed: 0,
        }
    }

    /// Whether a block is being received (its messages are held, not
    /// decoded).
    pub(super) fn in_block(&self) -> bool {
        self.block.is_some()
    }

    /// Bytes moved to spill files and transactions committed since the
    /// last call.
    pub(super) fn take_counts(&mut self) -> (u64, u64) {
        (
            std::mem::take(&mut self.spilled),
            std::mem::take(&mut self.committed),
        )
    }

    /// Streamed transactions open now.
    #[cfg(test)]
    pub(super) fn open_count(&self) -> usize {
        self.open.len()
    }

    /// `Stream Start` of `xid`, arrived at `at`.
    pub(super) fn start(
        &mut self,
        xid: u32,
        first_segment: bool,
        at: Lsn,
    ) -> Result<(), StreamedError> {
        if let Some(open) = self.block {
            return Err(out_of_order(format!(
                "Stream Start of transaction {xid} inside the block of transaction {open}"
            )));
        }
        match (first_segment, self.open.contains_key(&xid)) {
            (true, true) => {
                return Err(out_of_order(format!(
                    "a first Stream Start of transaction {xid}, which is open already"
                )));
            }
            (false, false) => {
                return Err(out_of_order(format!(
                    "a later Stream Start of transaction {xid}, whose first block was not received"
                )));
            }
            (true, false) => {
                self.open.insert(
                    xid,
                    Open {
                        first_at: at,
                        ..Open::default()
                    },
                );
            }
            (false, true) => {}
        }
        self.block = Some(xid);
        Ok(())
    }

    /// `Stream Stop`.
    pub(super) fn stop(&mut self) -> Result<(), StreamedError> {
        match self.block.take() {
            Some(_) => Ok(()),
            None => Err(out_of_order("Stream Stop outside a block".into())),
        }
    }

    /// Holds `data`, sent inside the block by (sub)transaction `subxid`
    /// (`None`: a message that names none, kept with the one before it).
    pub(super) fn hold(
        &mut self,
        subxid: Option<u32>,
        at: Lsn,
        data: Bytes,
    ) -> Result<(), StreamedError> {
        let Some(xid) = self.block else {
            return Err(out_of_order(
                "a streamed change outside Stream Start … Stop".into(),
            ));
        };
        let open = self.open.get_mut(&xid).ok_or_else(|| {
            out_of_order(format!("a change of transaction {xid}, which is not open"))
        })?;
        if let Some(subxid) = subxid
            && subxid != xid
            && open.subxacts.last().is_none_or(|&(last, _)| last != subxid)
            && !open.subxacts.iter().any(|&(s, _)| s == subxid)
        {
            open.subxacts.push((subxid, open.len()));
        }
        let entry = Entry { at, data };
        let size = entry.size();
        open.memory.push_back(entry);
        open.in_memory += size;
        open.messages += 1;
        self.in_memory += size + ENTRY_IN_MEMORY;
        while self.in_memory > self.memory_limit && self.spill_largest()? {}
        Ok(())
    }

    /// Moves the messages of the transaction holding most memory to its
    /// file; `false` when no transaction holds any.
    fn spill_largest(&mut self) -> Result<bool, StreamedError> {
        let Some((_, open)) = self
            .open
            .iter_mut()
            .filter(|(_, o)| o.in_memory > 0)
            .max_by_key(|(_, o)| o.in_memory)
        else {
            return Ok(false);
        };
        let io = |what| {
            let dir = self.dir.clone();
            move |source| StreamedError::Io { what, dir, source }
        };
        let file = match &mut open.file {
            Some(file) => file,
            None => open
                .file
                .insert(tempfile::tempfile_in(&self.dir).map_err(io("create"))?),
        };
        file.seek(SeekFrom::Start(open.spilled))
            .map_err(io("write"))?;
        let mut out = BufWriter::with_capacity(256 << 10, &mut *file);
        for entry in &open.memory {
            out.write_all(&entry.at.0.to_be_bytes())
                .and_then(|()| out.write_all(&(entry.data.len() as u32).to_be_bytes()))
                .and_then(|()| out.write_all(&entry.data))
                .map_err(io("write"))?;
        }
        out.flush().map_err(io("write"))?;
        drop(out);
        let (moved, held) = (open.in_memory, open.held());
        open.spilled += moved;
        open.memory.clear();
        open.in_memory = 0;
        self.in_memory -= held;
        self.spilled += moved;
        Ok(true)
    }

    /// `Stream Abort` of `subxid` of `xid`: the whole transaction when the
    /// two are equal. A subtransaction that sent nothing leaves nothing to
    /// drop; an unknown transaction is one that never sent a block.
    pub(super) fn abort(&mut self, xid: u32, subxid: u32) -> Result<(), StreamedError> {
        if xid == subxid {
            if let Some(open) = self.open.remove(&xid) {
                self.in_memory -= open.held();
            }
            return Ok(());
        }
        let Some(open) = self.open.get_mut(&xid) else {
            return Ok(());
        };
        let Some(i) = open.subxacts.iter().position(|&(s, _)| s == subxid) else {
            return Ok(());
        };
        let cut = open.subxacts[i].1;
        open.subxacts.truncate(i);
        // Drop entries from the end of memory down to `cut`.
        while open.len() > cut {
            let Some(entry) = open.memory.pop_back() else {
                break;
            };
            open.in_memory -= entry.size();
            open.messages -= 1;
            self.in_memory -= entry.size() + ENTRY_IN_MEMORY;
        }
        if open.len() > cut {
            // The cut is inside the file: everything in memory is gone
            // already; shorten the file and recount its messages.
            let file = open.file.as_mut().ok_or_else(|| {
                out_of_order(format!("transaction {xid}: a cut past its held messages"))
            })?;
            let cut_file = |file: &mut File| {
                let messages = count_entries(file, cut)?;
                file.set_len(cut)?;
                Ok(messages)
            };
            open.messages = cut_file(file).map_err(|source| StreamedError::Io {
                what: "cut",
                dir: self.dir.clone(),
                source,
            })?;
            open.spilled = cut;
        }
        Ok(())
    }

    /// `Stream Commit` of `xid`: its messages, to replay.
    pub(super) fn commit(&mut self, xid: u32) -> Result<Replay, StreamedError> {
        if self.block.is_some() {
            return Err(out_of_order(format!(
                "Stream Commit of transaction {xid} inside a block"
            )));
        }
        let open = self.open.remove(&xid).ok_or_else(|| {
            out_of_order(format!(
                "Stream Commit of transaction {xid}, which never sent a block"
            ))
        })?;
        self.in_memory -= open.held();
        self.committed += 1;
        let file = match open.file {
            Some(mut file) if open.spilled > 0 => {
                file.seek(SeekFrom::Start(0))
                    .map_err(|source| StreamedError::Io {
                        what: "read",
                        dir: self.dir.clone(),
                        source,
                    })?;
                Some(Chunks {
                    file,
                    unread: open.spilled,
                    buf: BytesMut::new(),
                })
            }
            _ => None,
        };
        Ok(Replay {
            first_at: open.first_at,
            file,
            memory: open.memory,
            dir: self.dir.clone(),
            left: open.messages,
        })
    }
}

impl Replay {
    /// The next message and where it arrived; `None` after the last.
    pub(super) fn next(&mut self) -> Result<Option<(Lsn, Bytes)>, StreamedError> {
        if let Some(chunks) = &mut self.file {
            let entry = chunks.next().map_err(|source| StreamedError::Io {
                what: "read",
                dir: self.dir.clone(),
                source,
            })?;
            if let Some(entry) = entry {
                self.left = self.left.saturating_sub(1);
                return Ok(Some((entry.at, entry.data)));
            }
            self.file = None;
        }
        Ok(self.memory.pop_front().map(|e| {
            self.left = self.left.saturating_sub(1);
            (e.at, e.data)
        }))
    }

    /// Messages not yet replayed.
    #[cfg(test)]
    pub(super) fn left(&self) -> u64 {
        self.left
    }
}

/// The entries in the first `up_to` bytes of `file`, counted by their
/// headers.
fn count_entries(file: &mut File, up_to: u64) -> io::Result<u64> {
    file.seek(SeekFrom::Start(0))?;
    let mut reader = BufReader::new(&mut *file);
    let (mut at, mut n) = (0u64, 0u64);
    let mut header = [0u8; ENTRY_HEADER as usize];
    while at < up_to {
        reader.read_exact(&mut header)?;
        let len = u32::from_be_bytes(header[8..].try_into().unwrap_or_default());
        reader.seek_relative(i64::from(len))?;
        at += ENTRY_HEADER + u64::from(len);
        n += 1;
    }
    Ok(n)
}

fn out_of_order(what: String) -> StreamedError {
    StreamedError::OutOfOrder(what)
}

/// `postgres.stream_spill_dir` cannot take an unnamed file.
#[derive(Debug, thiserror::Error)]
#[error("postgres.stream_spill_dir: cannot make a spill file in {}: {source}", dir.display())]
pub struct SpillDirError {
    pub dir: PathBuf,
    pub source: io::Error,
}

impl SpillDirError {
    /// What to do about it.
    pub fn fix(&self) -> &'static str {
        "point postgres.stream_spill_dir at a writable directory on a local file system (spill \
         files are unnamed, O_TMPFILE), or set postgres.stream_in_progress = false"
    }
}

/// Why transactions are taken whole after their commit (protocol 1), in
/// the configuration's words; `None` when they are streamed while they run.
/// `server_version_num`: the server's, when known (`None`: any server).
pub fn taken_whole(config: &Config, server_version_num: Option<u32>) -> Option<&'static str> {
    if !config.postgres.stream_in_progress {
        return Some("postgres.stream_in_progress = false");
    }
    if config.table_defaults.provide_transaction_metadata
        && !config.tables.is_empty()
        && server_version_num.is_none_or(|v| v < 150_000)
    {
        // Debezium's BEGIN/END ids are `<xid>:<the Begin's LSN>`. From 15
        // on, that is the first published change's, which a streamed
        // transaction carries too (see `super::assemble`); on 14 it is the
        // transaction's first WAL record, which protocol 2 does not send.
        return Some(
            "table_defaults.provide_transaction_metadata on PostgreSQL 14: its BEGIN/END \
             ids carry the transaction's first LSN, which protocol 2 does not send for a \
             transaction streamed while it runs (PostgreSQL 15 and later stream it)",
        );
    }
    None
}

/// What START_REPLICATION asks for transactions still running on a server
/// of `server_version_num` ([`taken_whole`] says when not), once the spill
/// directory is known to take unnamed files; `None`: protocol 1.
pub fn requested(
    config: &Config,
    server_version_num: Option<u32>,
) -> Result<Option<InProgress>, SpillDirError> {
    if taken_whole(config, server_version_num).is_some() {
        return Ok(None);
    }
    let pg = &config.postgres;
    let dir = pg
        .stream_spill_dir
        .clone()
        .unwrap_or_else(std::env::temp_dir);
    match tempfile::tempfile_in(&dir) {
        Ok(_) => Ok(Some(InProgress {
            memory_limit: pg.stream_memory_limit,
            spill_dir: dir,
        })),
        Err(source) => Err(SpillDirError { dir, source }),
    }
}

#[cfg(test)]
mod tests;
