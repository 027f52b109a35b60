//! The logical replication sub-protocol over a [`WireConnection`].
//!
//! Owns the replication commands (`IDENTIFY_SYSTEM`, `CREATE_REPLICATION_SLOT`,
//! `START_REPLICATION … LOGICAL`), the CopyBoth payloads the walsender sends
//! (XLogData `'w'`, primary keepalive `'k'`) and the standby status update
//! `'r'` we send back. It knows nothing about Kafka: the flush position it
//! reports is whatever the caller (the checkpoint) says Kafka holds.
//!
//! Invariants:
//! - Positions reported in status updates never go backwards: the stream
//!   remembers the highest flush LSN it sent and clamps to it, so a caller bug
//!   cannot make PostgreSQL see a regression (it would ignore it anyway, but a
//!   regression in our own metrics would mislead operators).
//! - Identifiers and literals in commands are quoted with
//!   `postgres_protocol::escape`, never pasted.
//! - Every payload is bounds-checked; a short or unknown CopyData payload is a
//!   [`WireError::Protocol`], never a panic.
//! - A snapshot exported by [`ReplicationClient::create_slot_exporting_snapshot`]
//!   lives only until the next command on that connection (or its close):
//!   the caller keeps the client idle until every reader imported it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use postgres_protocol::escape::{escape_identifier, escape_literal};
use postgres_protocol::message::backend::Message;

use crate::Lsn;
use crate::pg::wire::{Backend, ConnectParams, WireConnection, WireError};

/// Microseconds between the Unix epoch and PostgreSQL's epoch (2000-01-01).
const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;

/// Current time in PostgreSQL's representation (µs since 2000-01-01).
pub fn pg_now_us() -> i64 {
    let since_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    i64::try_from(since_unix.as_micros()).unwrap_or(i64::MAX) - PG_EPOCH_OFFSET_US
}

/// Converts PostgreSQL's µs-since-2000 to milliseconds since the Unix epoch.
pub fn pg_us_to_unix_ms(pg_us: i64) -> i64 {
    (pg_us + PG_EPOCH_OFFSET_US) / 1000
}

/// Result of `IDENTIFY_SYSTEM`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemInfo {
    /// The cluster's unique system identifier (a u64 printed in decimal).
    pub system_id: String,
    pub timeline: u32,
    /// Current WAL flush location.
    pub xlogpos: Lsn,
    pub database: Option<String>,
}

/// A slot made by [`ReplicationClient::create_slot_exporting_snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedSlot {
    /// Where streaming starts: every transaction committed before this
    /// point is in the exported snapshot, every one after it in the stream.
    pub consistent_point: Lsn,
    /// The exported snapshot's name, for `SET TRANSACTION SNAPSHOT`.
    pub snapshot_name: String,
}

/// One CopyData payload from the walsender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicationMessage {
    /// `'w'`: a pgoutput message starting at `wal_start`.
    XLogData {
        wal_start: Lsn,
        wal_end: Lsn,
        send_time: i64,
        data: Bytes,
    },
    /// `'k'`: the walsender's position; `reply` asks for a status update now.
    Keepalive {
        wal_end: Lsn,
        send_time: i64,
        reply: bool,
    },
}

/// Parses a CopyData payload received in COPY BOTH mode.
pub fn parse_replication_message(mut data: Bytes) -> Result<ReplicationMessage, WireError> {
    let short = |what: &str, need: usize, have: usize| {
        WireError::Protocol(format!(
            "truncated {what} message: need {need} bytes of header, have {have}"
        ))
    };
    if data.is_empty() {
        return Err(WireError::Protocol(
            "empty CopyData payload in replication stream".into(),
        ));
    }
    let tag = data.get_u8();
    match tag {
        b'w' => {
            if data.len() < 24 {
                return Err(short("XLogData", 24, data.len()));
            }
            let wal_start = Lsn(data.get_u64());
            let wal_end = Lsn(data.get_u64());
            let send_time = data.get_i64();
            Ok(ReplicationMessage::XLogData {
                wal_start,
                wal_end,
                send_time,
                data,
            })
        }
        b'k' => {
            if data.len() < 17 {
                return Err(short("primary keepalive", 17, data.len()));
            }
            let wal_end = Lsn(data.get_u64());
            let send_time = data.get_i64();
            let reply = data.get_u8() != 0;
            Ok(ReplicationMessage::Keepalive {
                wal_end,
                send_time,
                reply,
            })
        }
        other => Err(WireError::Protocol(format!(
            "unknown replication message tag {:?} (0x{other:02x})",
            other as char
        ))),
    }
}

/// Encodes a standby status update (`'r'`).
pub fn encode_status_update(
    write: Lsn,
    flush: Lsn,
    apply: Lsn,
    now_pg_us: i64,
    reply: bool,
) -> Bytes {
    let mut b = BytesMut::with_capacity(34);
    b.put_u8(b'r');
    b.put_u64(write.0);
    b.put_u64(flush.0);
    b.put_u64(apply.0);
    b.put_i64(now_pg_us);
    b.put_u8(u8::from(reply));
    b.freeze()
}

/// A replication-mode connection before START_REPLICATION.
#[derive(Debug)]
pub struct ReplicationClient {
    conn: WireConnection,
    in_progress: Option<InProgress>,
}

/// Asks PostgreSQL to send transactions larger than its
/// `logical_decoding_work_mem` while they run (protocol 2, `streaming
/// 'on'`; PostgreSQL 14+), and says how the receiver holds them until they
/// end: at most `memory_limit` bytes in memory, the rest in unnamed files
/// in `spill_dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InProgress {
    pub memory_limit: u64,
    pub spill_dir: std::path::PathBuf,
}

impl ReplicationClient {
    /// Connects with `replication=database`.
    pub async fn connect(params: &ConnectParams) -> Result<Self, WireError> {
        Ok(ReplicationClient {
            in_progress: None,
            conn: WireConnection::connect(params, true).await?,
        })
    }

    /// The server's `server_version_num`.
    pub fn server_version_num(&self) -> u32 {
        self.conn.server_version_num()
    }

    /// `IDENTIFY_SYSTEM`.
    pub async fn identify_system(&mut self) -> Result<SystemInfo, WireError> {
        let rows = self.conn.simple_query("IDENTIFY_SYSTEM").await?;
        let row = rows
            .first()
            .ok_or_else(|| WireError::Protocol("IDENTIFY_SYSTEM returned no row".into()))?;
        let col = |i: usize| row.get(i).cloned().flatten();
        let system_id = col(0)
            .ok_or_else(|| WireError::Protocol("IDENTIFY_SYSTEM returned no systemid".into()))?;
        let timeline = col(1)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| WireError::Protocol("IDENTIFY_SYSTEM returned a bad timeline".into()))?;
        let xlogpos = col(2)
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| WireError::Protocol("IDENTIFY_SYSTEM returned a bad xlogpos".into()))?;
        Ok(SystemInfo {
            system_id,
            timeline,
            xlogpos,
            database: col(3),
        })
    }

    /// PostgreSQL 17+: makes `slot` a failover slot
    /// (`ALTER_REPLICATION_SLOT … (FAILOVER)`), for a slot created before
    /// walrelay did so or with `postgres.failover_slot = false`.
    pub async fn make_failover_slot(&mut self, slot: &str) -> Result<(), WireError> {
        self.conn
            .simple_query(&format!(
                "ALTER_REPLICATION_SLOT {} (FAILOVER)",
                escape_identifier(slot)
            ))
            .await
            .map(drop)
    }

    /// The history file of `timeline` (`TIMELINE_HISTORY`): one line per
    /// ancestor timeline, `parent_tli<TAB>switch_point<TAB>reason`. `None`
    /// for timeline 1, which has none.
    pub async fn timeline_history(&mut self, timeline: u32) -> Result<Option<String>, WireError> {
        if timeline <= 1 {
            return Ok(None);
        }
        let rows = self
            .conn
            .simple_query(&format!("TIMELINE_HISTORY {timeline}"))
            .await?;
        rows.first()
            .and_then(|r| r.get(1).cloned().flatten())
            .map(Some)
            .ok_or_else(|| {
                WireError::Protocol(format!("TIMELINE_HISTORY {timeline} returned no content"))
            })
    }

    /// Creates a permanent logical slot using `pgoutput`, without exporting a
    /// snapshot. Returns the slot's consistent point. The syntax differs
    /// between PostgreSQL 14 (`NOEXPORT_SNAPSHOT`) and 15+ (`(SNAPSHOT 'nothing')`).
    pub async fn create_slot(&mut self, slot: &str, failover: bool) -> Result<Lsn, WireError> {
        let sql = create_slot_sql(slot, self.server_version_num(), failover);
        let rows = self.conn.simple_query(&sql).await?;
        rows.first()
            .and_then(|r| r.get(1).cloned().flatten())
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| {
                WireError::Protocol("CREATE_REPLICATION_SLOT returned no consistent_point".into())
            })
    }

    /// Creates a permanent logical slot using `pgoutput` and exports the
    /// snapshot it was built at (PostgreSQL 14: `EXPORT_SNAPSHOT`; 15+:
    /// `(SNAPSHOT 'export')`).
    ///
    /// The snapshot is valid only while this connection stays idle: the next
    /// command on it (including [`ReplicationClient::start_replication`] and
    /// [`ReplicationClient::drop_slot`]) or closing it ends the export. Keep the
    /// client, import the snapshot on every reader
    /// (`crate::pg::snapshot::SnapshotReader::open`), and only then use this
    /// connection again. A reader that imports after that fails with
    /// "invalid snapshot identifier" (SQLSTATE 22023).
    pub async fn create_slot_exporting_snapshot(
        &mut self,
        slot: &str,
        failover: bool,
    ) -> Result<CreatedSlot, WireError> {
        let sql = create_slot_exporting_sql(slot, self.server_version_num(), failover);
        let rows = self.conn.simple_query(&sql).await?;
        let row = rows.first().ok_or_else(|| {
            WireError::Protocol(format!(
                "CREATE_REPLICATION_SLOT {slot:?} returned no row; expected slot_name, \
                 consistent_point, snapshot_name, output_plugin"
            ))
        })?;
        let col = |i: usize| row.get(i).cloned().flatten();
        let consistent_point = col(1).and_then(|l| l.parse().ok()).ok_or_else(|| {
            WireError::Protocol(format!(
                "CREATE_REPLICATION_SLOT {slot:?} returned no valid consistent_point"
            ))
        })?;
        let snapshot_name = col(2).filter(|n| !n.is_empty()).ok_or_else(|| {
            WireError::Protocol(format!(
                "CREATE_REPLICATION_SLOT {slot:?} returned no snapshot_name although a snapshot \
                 export was asked for"
            ))
        })?;
        Ok(CreatedSlot {
            consistent_point,
            snapshot_name,
        })
    }

    /// Drops a replication slot (`DROP_REPLICATION_SLOT "slot" WAIT`): waits
    /// while another connection has the slot active instead of failing. Ends
    /// a snapshot exported on this connection. A slot that does not exist is
    /// an error (SQLSTATE 42704).
    pub async fn drop_slot(&mut self, slot: &str) -> Result<(), WireError> {
        self.conn.simple_query(&drop_slot_sql(slot)).await?;
        Ok(())
    }

    /// `START_REPLICATION SLOT … LOGICAL start (proto_version '1', …)`.
    pub async fn start_replication(
        mut self,
        slot: &str,
        start: Lsn,
        publication: &str,
    ) -> Result<ReplicationStream, WireError> {
        let sql = start_replication_sql(slot, start, publication, self.in_progress.is_some());
        self.conn.start_copy_both(&sql).await?;
        Ok(ReplicationStream {
            conn: self.conn,
            last_flush: start,
            ended: false,
            in_progress: self.in_progress,
        })
    }

    /// Whether [`Self::start_replication`] asks for transactions while
    /// they run ([`InProgress`]); `None`: protocol 1, each transaction
    /// whole after its commit.
    pub fn stream_in_progress(&mut self, in_progress: Option<InProgress>) {
        self.in_progress = in_progress;
    }
}

/// `, FAILOVER` when asked for and the server has failover slots (17+).
fn failover_option(server_version_num: u32, failover: bool) -> &'static str {
    if failover && server_version_num >= 170000 {
        ", FAILOVER"
    } else {
        ""
    }
}

fn create_slot_sql(slot: &str, server_version_num: u32, failover: bool) -> String {
    if server_version_num >= 150000 {
        format!(
            "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT 'nothing'{})",
            escape_identifier(slot),
            failover_option(server_version_num, failover)
        )
    } else {
        format!(
            "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput NOEXPORT_SNAPSHOT",
            escape_identifier(slot)
        )
    }
}

fn create_slot_exporting_sql(slot: &str, server_version_num: u32, failover: bool) -> String {
    if server_version_num >= 150000 {
        format!(
            "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT 'export'{})",
            escape_identifier(slot),
            failover_option(server_version_num, failover)
        )
    } else {
        format!(
            "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput EXPORT_SNAPSHOT",
            escape_identifier(slot)
        )
    }
}

fn drop_slot_sql(slot: &str) -> String {
    format!("DROP_REPLICATION_SLOT {} WAIT", escape_identifier(slot))
}

fn start_replication_sql(slot: &str, start: Lsn, publication: &str, in_progress: bool) -> String {
    // publication_names is a comma-separated list of identifiers inside a
    // literal: quote the identifier, then the literal around it.
    let protocol = if in_progress {
        "\"proto_version\" '2', \"streaming\" 'on'"
    } else {
        "\"proto_version\" '1'"
    };
    format!(
        "START_REPLICATION SLOT {} LOGICAL {} ({protocol}, \"publication_names\" {}, \"messages\" 'true')",
        escape_identifier(slot),
        start,
        escape_literal(&escape_identifier(publication)),
    )
}

/// What [`ReplicationStream::recv`] yields.
#[derive(Debug)]
pub enum StreamEvent {
    Message(ReplicationMessage),
    /// The server ended the COPY (e.g. the slot was dropped or the server is
    /// shutting down); reconnect.
    End,
}

/// The COPY BOTH stream after START_REPLICATION.
#[derive(Debug)]
pub struct ReplicationStream {
    conn: WireConnection,
    last_flush: Lsn,
    ended: bool,
    in_progress: Option<InProgress>,
}

impl ReplicationStream {
    /// What START_REPLICATION asked for in-progress transactions.
    pub fn in_progress(&self) -> Option<&InProgress> {
        self.in_progress.as_ref()
    }

    /// Receives the next replication message. Cancel-safe.
    pub async fn recv(&mut self) -> Result<StreamEvent, WireError> {
        loop {
            let msg = self.conn.read_message("streaming changes").await?;
            if let Some(event) = self.on_backend(msg)? {
                return Ok(event);
            }
        }
    }

    /// The next replication message if it is already buffered, without
    /// waiting for the socket: lets a caller drain a burst in one go.
    pub fn try_recv(&mut self) -> Result<Option<StreamEvent>, WireError> {
        while let Some(msg) = self.conn.try_read_message()? {
            if let Some(event) = self.on_backend(msg)? {
                return Ok(Some(event));
            }
        }
        Ok(None)
    }

    /// Interprets one backend message inside COPY BOTH; `None` for messages
    /// to skip (notices).
    fn on_backend(&mut self, msg: Backend) -> Result<Option<StreamEvent>, WireError> {
        match msg {
            Backend::Message(Message::CopyData(body)) => {
                parse_replication_message(body.into_bytes()).map(|m| Some(StreamEvent::Message(m)))
            }
            Backend::Message(Message::NoticeResponse(_) | Message::ParameterStatus(_)) => Ok(None),
            Backend::Message(
                Message::CopyDone | Message::CommandComplete(_) | Message::ReadyForQuery(_),
            ) => {
                self.ended = true;
                Ok(Some(StreamEvent::End))
            }
            Backend::Message(Message::ErrorResponse(body)) => Err(WireError::Server {
                context: "streaming changes".into(),
                error: Box::new(crate::pg::wire::ServerError::from_body(&body)),
            }),
            Backend::CopyBothResponse => Err(WireError::Protocol(
                "second CopyBothResponse in a stream".into(),
            )),
            Backend::Message(_) => Err(WireError::Protocol(
                "unexpected backend message inside COPY BOTH".into(),
            )),
        }
    }

    /// Sends a standby status update with write = flush = apply = `flush`
    /// (clamped so it never goes backwards). Returns the position sent.
    pub async fn send_status(&mut self, flush: Lsn, reply: bool) -> Result<Lsn, WireError> {
        let pos = flush.max(self.last_flush);
        self.last_flush = pos;
        let msg = encode_status_update(pos, pos, pos, pg_now_us(), reply);
        self.conn.queue_copy_data(&msg)?;
        self.conn.flush("sending a standby status update").await?;
        Ok(pos)
    }

    /// The highest flush position reported so far.
    pub fn last_reported(&self) -> Lsn {
        self.last_flush
    }

    /// Ends the stream politely: a final status update, CopyDone, then
    /// Terminate. Errors are returned but the connection is consumed either way.
    pub async fn shutdown(mut self, flush: Lsn) -> Result<Lsn, WireError> {
        let pos = self.send_status(flush, false).await?;
        if !self.ended {
            self.conn.queue_copy_done();
        }
        self.conn.queue_terminate();
        self.conn.flush("ending replication").await?;
        Ok(pos)
    }
}

#[cfg(test)]
mod tests;
