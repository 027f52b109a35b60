//! The chunk task: reads the chunks the source asks for, on a connection of
//! its own, between a low and a high watermark it writes (or, under
//! read-only watermarks, writes nothing and commits an empty transaction
//! when asked to nudge the primary). See the parent module's doc.

use tokio::sync::{mpsc, oneshot};

use super::{ChunkTable, WATERMARK_PREFIX};
use crate::pg::catalog;
use crate::pg::snapshot::{Chunk, SnapshotError, SnapshotReader};
use crate::pg::wire::ConnectParams;

/// What the chunk task is asked for.
#[derive(Debug)]
pub(super) enum Request {
    /// Read chunk `chunk` of `table`.
    Chunk {
        chunk: u64,
        table: ChunkTable,
        limit: usize,
    },
    /// Read-only watermarks: commit an empty transaction on the primary so
    /// that the stream moves past the chunk's horizon.
    Nudge,
}

/// What the chunk task read.
#[derive(Debug)]
pub(super) struct ChunkRead {
    pub(super) chunk: u64,
    /// The rows, or why the table cannot be read as planned (it is given
    /// up: see [`SnapshotError::gives_up_table`]).
    pub(super) outcome: Result<Chunk, String>,
}

/// The JSON of a watermark.
pub(super) fn watermark(connector: &str, run: u64, chunk: u64, mark: &str) -> String {
    serde_json::json!({"connector": connector, "run": run.to_string(), "chunk": chunk, "mark": mark})
        .to_string()
}

/// `(chunk, is_high)` of a watermark of `connector`'s `run`.
pub(super) fn parse_watermark(content: &[u8], connector: &str, run: u64) -> Option<(u64, bool)> {
    let v: serde_json::Value = serde_json::from_slice(content).ok()?;
    if v.get("connector")?.as_str()? != connector || v.get("run")?.as_str()? != run.to_string() {
        return None;
    }
    let high = match v.get("mark")?.as_str()? {
        "low" => false,
        "high" => true,
        _ => return None,
    };
    Some((v.get("chunk")?.as_u64()?, high))
}

/// A random number for this run's watermarks.
pub(super) fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// Reads the chunks asked for, between their watermarks (module doc):
/// watermarks on `params`' server, chunks on `reads`' (a standby) or the
/// same. Under read-only watermarks, writes no watermark and waits for no
/// replay; a nudge commits an empty transaction on `params`' server.
#[allow(clippy::too_many_arguments)] // one task's whole context
pub(super) async fn chunk_task(
    params: ConnectParams,
    reads: Option<ConnectParams>,
    publication: String,
    connector: String,
    run: u64,
    read_only: bool,
    mut requests: mpsc::Receiver<Request>,
    chunks: mpsc::Sender<ChunkRead>,
    failed: oneshot::Sender<SnapshotError>,
) {
    let result = async {
        let mut reader = SnapshotReader::open_for_chunks(reads.as_ref().unwrap_or(&params)).await?;
        // Watermarks (and nudges) on the primary when the chunks are read on
        // a standby.
        let primary = match reads {
            Some(_) => Some(
                catalog::connect(&params)
                    .await
                    .map_err(SnapshotError::Connect)?,
            ),
            None => None,
        };
        while let Some(request) = requests.recv().await {
            let (chunk, t, limit) = match request {
                Request::Chunk {
                    chunk,
                    table,
                    limit,
                } => (chunk, table, limit),
                Request::Nudge => {
                    let writer = primary.as_ref().unwrap_or(reader.client());
                    if let Err(e) = catalog::commit_empty_transaction(writer).await {
                        tracing::debug!(error = %e, "could not nudge the primary for a read-only chunk");
                    }
                    continue;
                }
            };
            let mark = |m| watermark(&connector, run, chunk, m);
            if !read_only {
                let writer = primary.as_ref().unwrap_or(reader.client());
                catalog::emit_message_flushed(writer, WATERMARK_PREFIX, &mark("low"))
                    .await
                    .map_err(SnapshotError::Connect)?;
                if primary.is_some() {
                    let committed = catalog::current_wal_lsn(writer)
                        .await
                        .map_err(SnapshotError::Connect)?;
                    catalog::await_replay(
                        reader.client(),
                        committed,
                        "the incremental snapshot's chunk",
                    )
                    .await
                    .map_err(SnapshotError::Connect)?;
                }
            }
            let outcome = match reader
                .read_chunk(
                    &t.schema,
                    &t.name,
                    &publication,
                    &t.key,
                    t.inserts_only,
                    t.filter.as_deref(),
                    t.after.as_deref(),
                    limit,
                )
                .await
            {
                Ok(chunk) => Ok(chunk),
                Err(e) if e.gives_up_table() => Err(e.to_string()),
                Err(e) => return Err(e),
            };
            if chunks.send(ChunkRead { chunk, outcome }).await.is_err() {
                return Ok(()); // the source is gone
            }
            if !read_only {
                let writer = primary.as_ref().unwrap_or(reader.client());
                catalog::emit_message_flushed(writer, WATERMARK_PREFIX, &mark("high"))
                    .await
                    .map_err(SnapshotError::Connect)?;
            }
        }
        Ok::<(), SnapshotError>(())
    }
    .await;
    if let Err(e) = result {
        let _ = failed.send(e);
    }
}
