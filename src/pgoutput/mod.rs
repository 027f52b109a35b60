//! Decoder for the `pgoutput` logical replication protocol, version 1.
//!
//! # What it owns
//!
//! Turning the payload of one XLogData (`'w'`) message — which is exactly one
//! pgoutput message — into a typed [`LogicalMessage`], via [`decode`]. It also
//! owns the [`RelationCache`] that maps a change's relation OID to the last
//! [`Relation`] message seen for it, and an [`encode`] function (the exact
//! inverse of `decode`) used to build messages in tests and tools.
//!
//! It does not own the replication connection, XLogData framing, transaction
//! assembly or type conversion of column values: those live in `pg::replication`
//! and `source`.
//!
//! # Invariants
//!
//! - **Pure and synchronous.** No I/O, no clocks, no global state.
//! - **Never panics** on any input. Every read is bounds-checked; every count
//!   read from the wire is checked against the bytes that remain *before*
//!   anything is allocated for it, so a hostile count cannot reserve memory.
//!   `proptest` (in the unit tests) and a cargo-fuzz target (`tests/fuzz`)
//!   guard this.
//! - **Errors name the message, the field and the byte offset**, e.g.
//!   `truncated Relation message while reading column 0 type oid (need 4 bytes
//!   at offset 37, have 2)`. Offsets count from the tag byte (offset 0).
//! - **Whole messages only.** Bytes left after a complete message are an error
//!   ([`DecodeError::TrailingBytes`]), never silently ignored.
//! - **Zero-copy values.** Column values ([`Cell::Text`], [`Cell::Binary`]) and
//!   logical decoding message content are [`Bytes`] slices of the input buffer.
//!   Names (schemas, tables, columns, prefixes) are copied into `String`s.
//! - **Strict UTF-8.** Names are decoded as UTF-8 and a name that is not valid
//!   UTF-8 is an error naming the field ([`DecodeError::InvalidUtf8`]), not a
//!   lossy replacement: a table name that decodes differently than it is
//!   spelled would route rows to the wrong place. The walsender converts names
//!   and text values to the connection's `client_encoding`, so the replication
//!   connection must set `client_encoding=UTF8` in its startup packet. Column
//!   values are *not* UTF-8 checked here; that is the consumer's business.
//! - **Protocol v1 only.** walrelay negotiates `proto_version '1'` without
//!   `streaming` or `two_phase`, so the tags of later versions (stream
//!   start/stop/commit/abort, two-phase prepare/commit/rollback, stream
//!   prepare) are recognised and rejected with [`DecodeError::NotNegotiated`];
//!   with v1 no message carries a leading xid field.
//!
//! # Protocol reference
//!
//! PostgreSQL documentation, "Logical Replication Message Formats"
//! (<https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html>),
//! and `src/backend/replication/logical/proto.c` in the PostgreSQL sources.
//! All integers are big-endian; strings are NUL-terminated. In short:
//!
//! | tag | message | body (v1) |
//! |-----|---------|-----------|
//! | `B` | Begin | final LSN i64, commit time i64, xid i32 |
//! | `C` | Commit | flags i8, commit LSN i64, end LSN i64, commit time i64 |
//! | `O` | Origin | commit LSN i64, name string |
//! | `R` | Relation | oid i32, namespace string, name string, replica identity i8, ncols i16, ncols × (flags i8, name string, type oid i32, typmod i32) |
//! | `Y` | Type | oid i32, namespace string, name string |
//! | `I` | Insert | oid i32, `N`, TupleData |
//! | `U` | Update | oid i32, [`K`\|`O` TupleData], `N`, TupleData |
//! | `D` | Delete | oid i32, `K`\|`O`, TupleData |
//! | `T` | Truncate | nrels i32, options i8, nrels × oid i32 |
//! | `M` | Message | flags i8, LSN i64, prefix string, length i32, content |
//!
//! TupleData is ncols i16 followed by, per column, a kind byte: `n` (NULL),
//! `u` (unchanged TOASTed value, not sent), `t` (text: length i32 + bytes) or
//! `b` (binary: length i32 + bytes).
//!
//! Timestamps are microseconds since 2000-01-01 00:00:00 UTC (PostgreSQL's
//! epoch), kept as the raw `i64`.

mod encode;
mod reader;
mod relation;
pub mod stream;

use std::fmt;

use bytes::Bytes;

use crate::Lsn;
use reader::Reader;

pub use encode::{EncodeError, encode};
pub use relation::{RelationCache, RelationError};

/// A PostgreSQL object identifier (relation or type OID).
pub type Oid = u32;

/// One decoded pgoutput message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogicalMessage {
    /// Start of a transaction (`B`).
    Begin(Begin),
    /// End of a transaction (`C`).
    Commit(Commit),
    /// Replication origin of the current transaction (`O`).
    Origin(Origin),
    /// Description of a table; precedes the first change of that table in a
    /// session and is re-sent when its definition changes (`R`).
    Relation(Relation),
    /// Description of a non-built-in data type used by a relation (`Y`).
    Type(TypeMessage),
    /// A new row (`I`).
    Insert(Insert),
    /// A changed row (`U`).
    Update(Update),
    /// A removed row (`D`).
    Delete(Delete),
    /// One or more tables truncated (`T`).
    Truncate(Truncate),
    /// A `pg_logical_emit_message()` message (`M`).
    Message(LogicalDecodingMessage),
}

impl LogicalMessage {
    /// The message's tag byte on the wire.
    pub fn tag(&self) -> u8 {
        match self {
            LogicalMessage::Begin(_) => b'B',
            LogicalMessage::Commit(_) => b'C',
            LogicalMessage::Origin(_) => b'O',
            LogicalMessage::Relation(_) => b'R',
            LogicalMessage::Type(_) => b'Y',
            LogicalMessage::Insert(_) => b'I',
            LogicalMessage::Update(_) => b'U',
            LogicalMessage::Delete(_) => b'D',
            LogicalMessage::Truncate(_) => b'T',
            LogicalMessage::Message(_) => b'M',
        }
    }

    /// The message's name as used in the PostgreSQL docs and our errors.
    pub fn name(&self) -> &'static str {
        match self {
            LogicalMessage::Begin(_) => "Begin",
            LogicalMessage::Commit(_) => "Commit",
            LogicalMessage::Origin(_) => "Origin",
            LogicalMessage::Relation(_) => "Relation",
            LogicalMessage::Type(_) => "Type",
            LogicalMessage::Insert(_) => "Insert",
            LogicalMessage::Update(_) => "Update",
            LogicalMessage::Delete(_) => "Delete",
            LogicalMessage::Truncate(_) => "Truncate",
            LogicalMessage::Message(_) => "Message",
        }
    }
}

/// `B`: a transaction begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Begin {
    /// LSN of the transaction's commit record; equals [`Commit::commit_lsn`].
    pub final_lsn: Lsn,
    /// Commit time, µs since 2000-01-01 00:00:00 UTC.
    pub commit_time: i64,
    /// Transaction id.
    pub xid: u32,
}

/// `C`: a transaction commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// Flags; currently unused by PostgreSQL (always 0).
    pub flags: u8,
    /// LSN of the commit record; equals [`Begin::final_lsn`].
    pub commit_lsn: Lsn,
    /// LSN just past the commit record: the position to confirm as flushed
    /// once everything in this transaction is safely delivered.
    pub end_lsn: Lsn,
    /// Commit time, µs since 2000-01-01 00:00:00 UTC.
    pub commit_time: i64,
}

/// `O`: the transaction came from another node via a replication origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// Commit LSN on the origin server.
    pub commit_lsn: Lsn,
    /// Origin name.
    pub name: String,
}

/// `R`: a table's shape as published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    /// The table's OID; changes refer to it.
    pub oid: Oid,
    /// Schema name; the empty string means `pg_catalog`.
    pub namespace: String,
    /// Table name.
    pub name: String,
    /// `REPLICA IDENTITY` setting as sent: `d` default (primary key),
    /// `n` nothing, `f` full, `i` index. See [`ReplicaIdentity`].
    pub replica_identity: u8,
    /// Published columns in order; tuples of this relation have one cell per column.
    pub columns: Vec<Column>,
}

impl Relation {
    /// The replica identity as an enum, `None` for a byte PostgreSQL does not define.
    pub fn replica_identity(&self) -> Option<ReplicaIdentity> {
        ReplicaIdentity::from_byte(self.replica_identity)
    }

    /// Columns that are part of the replica identity key, with their positions.
    pub fn key_columns(&self) -> impl Iterator<Item = (usize, &Column)> {
        self.columns.iter().enumerate().filter(|(_, c)| c.is_key())
    }

    /// Position of the column called `name`, if published.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// `app."out""box"` (a name that needs quoting), replica identity
    /// default, with `text` columns named `columns` and no key flags.
    #[cfg(test)]
    pub(crate) fn for_tests(columns: &[&str]) -> Relation {
        Relation {
            oid: 1,
            namespace: "app".into(),
            name: "out\"box".into(),
            replica_identity: b'd',
            columns: columns
                .iter()
                .map(|c| Column {
                    flags: 0,
                    name: (*c).to_owned(),
                    type_oid: 25,
                    type_modifier: -1,
                })
                .collect(),
        }
    }
}

/// A table's `REPLICA IDENTITY`, which decides what old-row data updates and
/// deletes carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaIdentity {
    /// `d`: the primary key (old key sent as `K` when it changes, and on delete).
    Default,
    /// `n`: nothing; deletes carry no usable old data.
    Nothing,
    /// `f`: the full old row is sent as `O`.
    Full,
    /// `i`: the columns of a chosen unique index.
    Index,
}

impl ReplicaIdentity {
    /// Maps the wire byte (`d`, `n`, `f`, `i`) to the enum.
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            b'd' => Some(ReplicaIdentity::Default),
            b'n' => Some(ReplicaIdentity::Nothing),
            b'f' => Some(ReplicaIdentity::Full),
            b'i' => Some(ReplicaIdentity::Index),
            _ => None,
        }
    }
}

/// One column of a [`Relation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Bit 1: the column is part of the replica identity key.
    pub flags: u8,
    /// Column name.
    pub name: String,
    /// OID of the column's data type (e.g. 23 `int4`, 25 `text`, 3802 `jsonb`).
    pub type_oid: Oid,
    /// Type modifier (`atttypmod`), -1 when none.
    pub type_modifier: i32,
}

impl Column {
    /// Flag bit marking a replica identity key column.
    pub const FLAG_KEY: u8 = 1;

    /// Whether the column is part of the replica identity key.
    pub fn is_key(&self) -> bool {
        self.flags & Self::FLAG_KEY != 0
    }
}

/// `Y`: a data type's name, sent before a relation that uses a non-built-in type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeMessage {
    /// Type OID.
    pub oid: Oid,
    /// Schema name; the empty string means `pg_catalog`.
    pub namespace: String,
    /// Type name.
    pub name: String,
}

/// `I`: a new row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insert {
    /// OID of the table; look it up in the [`RelationCache`].
    pub relation: Oid,
    /// The inserted row.
    pub new: TupleData,
}

/// `U`: a changed row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// OID of the table.
    pub relation: Oid,
    /// Old key (`K`, when the key changed under `REPLICA IDENTITY DEFAULT`/`INDEX`)
    /// or full old row (`O`, under `REPLICA IDENTITY FULL`); `None` otherwise.
    pub old: Option<OldTuple>,
    /// The row after the update; may contain [`Cell::UnchangedToast`].
    pub new: TupleData,
}

/// `D`: a removed row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete {
    /// OID of the table.
    pub relation: Oid,
    /// The removed row's key (`K`) or whole old row (`O`).
    pub old: OldTuple,
}

/// Old-row data in an update or delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldTuple {
    /// `K`: only the replica identity key columns are meaningful; the other
    /// cells are [`Cell::Null`].
    Key(TupleData),
    /// `O`: the whole old row (`REPLICA IDENTITY FULL`).
    Old(TupleData),
}

impl OldTuple {
    /// The tuple, whichever kind it is.
    pub fn tuple(&self) -> &TupleData {
        match self {
            OldTuple::Key(t) | OldTuple::Old(t) => t,
        }
    }
}

/// `T`: tables truncated together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncate {
    /// Bit 1: `CASCADE`; bit 2: `RESTART IDENTITY`.
    pub options: u8,
    /// OIDs of the truncated tables.
    pub relations: Vec<Oid>,
}

impl Truncate {
    /// Option bit for `TRUNCATE ... CASCADE`.
    pub const CASCADE: u8 = 1;
    /// Option bit for `TRUNCATE ... RESTART IDENTITY`.
    pub const RESTART_IDENTITY: u8 = 2;

    /// Whether the truncate cascaded.
    pub fn cascade(&self) -> bool {
        self.options & Self::CASCADE != 0
    }

    /// Whether the truncate restarted identity sequences.
    pub fn restart_identity(&self) -> bool {
        self.options & Self::RESTART_IDENTITY != 0
    }
}

/// `M`: a message written with `pg_logical_emit_message()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogicalDecodingMessage {
    /// Emitted inside a transaction (delivered between its Begin and Commit)
    /// rather than immediately. Flag bit 1 on the wire; other bits are ignored.
    pub transactional: bool,
    /// LSN of the message.
    pub lsn: Lsn,
    /// Prefix given by the emitter (e.g. `walrelay`).
    pub prefix: String,
    /// Content, a zero-copy slice of the input.
    pub content: Bytes,
}

/// The cells of one row, one per column of the relation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TupleData(pub Vec<Cell>);

impl TupleData {
    /// The cells in column order.
    pub fn cells(&self) -> &[Cell] {
        &self.0
    }

    /// Number of cells.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the tuple has no cells.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The cell at column position `i`.
    pub fn get(&self, i: usize) -> Option<&Cell> {
        self.0.get(i)
    }
}

/// One column value in a tuple.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    /// `n`: SQL NULL.
    Null,
    /// `u`: a TOASTed value that did not change and was not sent; the consumer
    /// must keep the previous value (or report it as unavailable).
    UnchangedToast,
    /// `t`: the value in the type's text output format.
    Text(Bytes),
    /// `b`: the value in the type's binary send format (only if `binary` was negotiated).
    Binary(Bytes),
}

impl Cell {
    /// The value's bytes for `Text`/`Binary`, `None` for `Null`/`UnchangedToast`.
    pub fn bytes(&self) -> Option<&Bytes> {
        match self {
            Cell::Text(b) | Cell::Binary(b) => Some(b),
            Cell::Null | Cell::UnchangedToast => None,
        }
    }
}

/// The field being read when a decode error happened, for error messages.
///
/// Displays as e.g. `prefix`, `column 3 type oid` or `new tuple column 0 value length`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Which tuple or list the column belongs to (`new tuple`, `old tuple`, ...), if any.
    pub context: Option<&'static str>,
    /// Column position within the relation or tuple, if the field is per column.
    pub column: Option<usize>,
    /// The field itself (`type oid`, `value length`, ...).
    pub name: &'static str,
}

impl Field {
    /// A top-level field of the message.
    pub const fn named(name: &'static str) -> Self {
        Field {
            context: None,
            column: None,
            name,
        }
    }

    /// A field of one column, optionally inside a named tuple.
    pub const fn column(context: Option<&'static str>, column: usize, name: &'static str) -> Self {
        Field {
            context,
            column: Some(column),
            name,
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(ctx) = self.context {
            write!(f, "{ctx} ")?;
        }
        if let Some(col) = self.column {
            write!(f, "column {col} ")?;
        }
        f.write_str(self.name)
    }
}

/// Why a pgoutput message could not be decoded. These are definite errors:
/// the same bytes will fail the same way, so retrying does not help; they mean
/// the server and walrelay disagree about the protocol, or bytes were damaged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The payload had no bytes at all, not even a tag.
    #[error("empty pgoutput message: expected at least a 1-byte message tag")]
    Empty,

    /// The message ended in the middle of a field.
    #[error(
        "truncated {message} message while reading {field} (need {need} bytes at offset {offset}, have {have})"
    )]
    Truncated {
        message: &'static str,
        field: Field,
        offset: usize,
        need: usize,
        have: usize,
    },

    /// A string field had no NUL terminator before the end of the message.
    #[error(
        "truncated {message} message while reading {field}: string starting at offset {offset} has no NUL terminator"
    )]
    UnterminatedString {
        message: &'static str,
        field: Field,
        offset: usize,
    },

    /// A string field was not valid UTF-8.
    #[error(
        "invalid UTF-8 in {message} message field {field} at offset {offset} ({source}); \
         set client_encoding=UTF8 on the replication connection"
    )]
    InvalidUtf8 {
        message: &'static str,
        field: Field,
        offset: usize,
        #[source]
        source: std::str::Utf8Error,
    },

    /// A count read from the wire cannot fit in the bytes that remain.
    #[error(
        "{message} message declares {count} {what} at offset {offset}, but only {remaining} bytes remain \
         (each needs at least {min_each})"
    )]
    CountExceedsRemaining {
        message: &'static str,
        what: &'static str,
        count: usize,
        offset: usize,
        remaining: usize,
        min_each: usize,
    },

    /// A length field was negative.
    #[error("negative length {length} in {message} message for {field} at offset {offset}")]
    NegativeLength {
        message: &'static str,
        field: Field,
        offset: usize,
        length: i32,
    },

    /// A marker byte (tuple kind, `K`/`O`/`N` tuple marker) had a value the protocol does not allow.
    #[error(
        "unexpected byte {} in {message} message for {field} at offset {offset}: expected {expected}",
        show_byte(*.byte)
    )]
    UnexpectedByte {
        message: &'static str,
        field: Field,
        offset: usize,
        byte: u8,
        expected: &'static str,
    },

    /// The message decoded completely but more bytes followed it.
    #[error(
        "{count} trailing bytes after {message} message (complete message ends at offset {offset})"
    )]
    TrailingBytes {
        message: &'static str,
        count: usize,
        offset: usize,
    },

    /// A known message of a protocol feature walrelay does not negotiate.
    #[error(
        "pgoutput sent a {name} message (tag {}), which walrelay never negotiates: it uses proto_version 1 \
         without streaming or two_phase, so the server or slot options are not what walrelay asked for",
        show_byte(*.tag)
    )]
    NotNegotiated { tag: u8, name: &'static str },

    /// A tag byte that is no pgoutput message at all.
    #[error("unknown pgoutput message tag {}", show_byte(*.tag))]
    UnknownTag { tag: u8 },
}

/// Shows a byte as `'X' (0x58)` when printable, else `0x58`.
fn show_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}' (0x{b:02x})", char::from(b))
    } else {
        format!("0x{b:02x}")
    }
}

/// Tags of protocol v2+ streaming and two-phase messages, which v1 never sends.
const NOT_NEGOTIATED: &[(u8, &str)] = &[
    (b'S', "Stream Start"),
    (b'E', "Stream Stop"),
    (b'c', "Stream Commit"),
    (b'A', "Stream Abort"),
    (b'b', "Begin Prepare"),
    (b'P', "Prepare"),
    (b'K', "Commit Prepared"),
    (b'r', "Rollback Prepared"),
    (b'p', "Stream Prepare"),
];

/// Decodes one pgoutput (protocol v1) message: the payload of one XLogData message.
///
/// Column values and message content in the result are slices of `buf`, so
/// the buffer stays alive as long as any of them does.
pub fn decode(buf: Bytes) -> Result<LogicalMessage, DecodeError> {
    decode_at(buf, 1)
}

/// Decodes a message whose body starts at `body` (1: just after the tag;
/// 5: after the xid a change inside a streamed transaction carries, see
/// [`stream::decode_streamed`]).
fn decode_at(buf: Bytes, body: usize) -> Result<LogicalMessage, DecodeError> {
    let Some(&tag) = buf.first() else {
        return Err(DecodeError::Empty);
    };
    let name = match tag {
        b'B' => "Begin",
        b'C' => "Commit",
        b'O' => "Origin",
        b'R' => "Relation",
        b'Y' => "Type",
        b'I' => "Insert",
        b'U' => "Update",
        b'D' => "Delete",
        b'T' => "Truncate",
        b'M' => "Message",
        _ => {
            return Err(match NOT_NEGOTIATED.iter().find(|(t, _)| *t == tag) {
                Some(&(tag, name)) => DecodeError::NotNegotiated { tag, name },
                None => DecodeError::UnknownTag { tag },
            });
        }
    };
    let mut r = Reader::new(buf, body, name);
    let msg = match tag {
        b'B' => LogicalMessage::Begin(Begin {
            final_lsn: Lsn(r.u64(Field::named("final LSN"))?),
            commit_time: r.i64(Field::named("commit timestamp"))?,
            xid: r.u32(Field::named("xid"))?,
        }),
        b'C' => LogicalMessage::Commit(Commit {
            flags: r.u8(Field::named("flags"))?,
            commit_lsn: Lsn(r.u64(Field::named("commit LSN"))?),
            end_lsn: Lsn(r.u64(Field::named("end LSN"))?),
            commit_time: r.i64(Field::named("commit timestamp"))?,
        }),
        b'O' => LogicalMessage::Origin(Origin {
            commit_lsn: Lsn(r.u64(Field::named("commit LSN"))?),
            name: r.string(Field::named("origin name"))?,
        }),
        b'R' => LogicalMessage::Relation(read_relation(&mut r)?),
        b'Y' => LogicalMessage::Type(TypeMessage {
            oid: r.u32(Field::named("type oid"))?,
            namespace: r.string(Field::named("namespace"))?,
            name: r.string(Field::named("type name"))?,
        }),
        b'I' => {
            let relation = r.u32(Field::named("relation oid"))?;
            expect_marker(&mut r, b"N", "'N' (new tuple)")?;
            let new = read_tuple(&mut r, "new tuple")?;
            LogicalMessage::Insert(Insert { relation, new })
        }
        b'U' => {
            let relation = r.u32(Field::named("relation oid"))?;
            let marker = expect_marker(
                &mut r,
                b"KON",
                "'K' (old key), 'O' (old row) or 'N' (new tuple)",
            )?;
            let old = match marker {
                b'K' => Some(OldTuple::Key(read_tuple(&mut r, "old key tuple")?)),
                b'O' => Some(OldTuple::Old(read_tuple(&mut r, "old tuple")?)),
                _ => None,
            };
            if old.is_some() {
                expect_marker(&mut r, b"N", "'N' (new tuple)")?;
            }
            let new = read_tuple(&mut r, "new tuple")?;
            LogicalMessage::Update(Update { relation, old, new })
        }
        b'D' => {
            let relation = r.u32(Field::named("relation oid"))?;
            let old = match expect_marker(&mut r, b"KO", "'K' (old key) or 'O' (old row)")? {
                b'K' => OldTuple::Key(read_tuple(&mut r, "old key tuple")?),
                _ => OldTuple::Old(read_tuple(&mut r, "old tuple")?),
            };
            LogicalMessage::Delete(Delete { relation, old })
        }
        b'T' => {
            let at = r.offset();
            let count = r.u32(Field::named("relation count"))?;
            let options = r.u8(Field::named("options"))?;
            let count = usize::try_from(count).unwrap_or(usize::MAX);
            r.check_count(count, 4, "relations", at)?;
            let mut relations = Vec::with_capacity(count);
            for _ in 0..count {
                relations.push(r.u32(Field::named("relation oid"))?);
            }
            LogicalMessage::Truncate(Truncate { options, relations })
        }
        _ => {
            // b'M'; every other tag returned above.
            let flags = r.u8(Field::named("flags"))?;
            let lsn = Lsn(r.u64(Field::named("message LSN"))?);
            let prefix = r.string(Field::named("prefix"))?;
            let len = read_length(&mut r, Field::named("content length"))?;
            let content = r.take_bytes(len, Field::named("content"))?;
            LogicalMessage::Message(LogicalDecodingMessage {
                transactional: flags & 1 != 0,
                lsn,
                prefix,
                content,
            })
        }
    };
    r.finish()?;
    Ok(msg)
}

/// Relation body: oid, namespace, name, replica identity, columns.
fn read_relation(r: &mut Reader) -> Result<Relation, DecodeError> {
    let oid = r.u32(Field::named("relation oid"))?;
    let namespace = r.string(Field::named("namespace"))?;
    let name = r.string(Field::named("relation name"))?;
    let replica_identity = r.u8(Field::named("replica identity"))?;
    let at = r.offset();
    let count = usize::from(r.u16(Field::named("column count"))?);
    // flags (1) + empty name (1) + type oid (4) + typmod (4)
    r.check_count(count, 10, "columns", at)?;
    let mut columns = Vec::with_capacity(count);
    for i in 0..count {
        columns.push(Column {
            flags: r.u8(Field::column(None, i, "flags"))?,
            name: r.string(Field::column(None, i, "name"))?,
            type_oid: r.u32(Field::column(None, i, "type oid"))?,
            type_modifier: r.i32(Field::column(None, i, "type modifier"))?,
        });
    }
    Ok(Relation {
        oid,
        namespace,
        name,
        replica_identity,
        columns,
    })
}

/// Reads one marker byte that must be one of `allowed`.
fn expect_marker(
    r: &mut Reader,
    allowed: &[u8],
    expected: &'static str,
) -> Result<u8, DecodeError> {
    let offset = r.offset();
    let field = Field::named("tuple marker");
    let byte = r.u8(field)?;
    if allowed.contains(&byte) {
        Ok(byte)
    } else {
        Err(DecodeError::UnexpectedByte {
            message: r.message(),
            field,
            offset,
            byte,
            expected,
        })
    }
}

/// Reads an Int32 length that must not be negative.
fn read_length(r: &mut Reader, field: Field) -> Result<usize, DecodeError> {
    let offset = r.offset();
    let length = r.i32(field)?;
    usize::try_from(length).map_err(|_| DecodeError::NegativeLength {
        message: r.message(),
        field,
        offset,
        length,
    })
}

/// TupleData: ncols i16, then per column a kind byte and, for `t`/`b`, a value.
fn read_tuple(r: &mut Reader, context: &'static str) -> Result<TupleData, DecodeError> {
    let at = r.offset();
    let count = usize::from(r.u16(Field {
        context: Some(context),
        column: None,
        name: "column count",
    })?);
    r.check_count(count, 1, "tuple columns", at)?;
    let mut cells = Vec::with_capacity(count);
    for i in 0..count {
        let kind_field = Field::column(Some(context), i, "kind");
        let offset = r.offset();
        let cell = match r.u8(kind_field)? {
            b'n' => Cell::Null,
            b'u' => Cell::UnchangedToast,
            kind @ (b't' | b'b') => {
                let len = read_length(r, Field::column(Some(context), i, "value length"))?;
                let value = r.take_bytes(len, Field::column(Some(context), i, "value"))?;
                if kind == b't' {
                    Cell::Text(value)
                } else {
                    Cell::Binary(value)
                }
            }
            byte => {
                return Err(DecodeError::UnexpectedByte {
                    message: r.message(),
                    field: kind_field,
                    offset,
                    byte,
                    expected: "'n' (null), 'u' (unchanged TOAST), 't' (text) or 'b' (binary)",
                });
            }
        };
        cells.push(cell);
    }
    Ok(TupleData(cells))
}

#[cfg(test)]
mod tests;
