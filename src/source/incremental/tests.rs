use super::*;
use crate::source::Position;

#[test]
fn watermarks_name_connector_run_and_chunk() {
    let w = watermark("orders", 7, 3, "high");
    assert_eq!(parse_watermark(w.as_bytes(), "orders", 7), Some((3, true)));
    let w = watermark("orders", 7, 4, "low");
    assert_eq!(parse_watermark(w.as_bytes(), "orders", 7), Some((4, false)));
    // Another connector's, or an earlier run's (replayed after a
    // restart), is not ours.
    assert_eq!(parse_watermark(w.as_bytes(), "billing", 7), None);
    assert_eq!(parse_watermark(w.as_bytes(), "orders", 8), None);
    assert_eq!(parse_watermark(b"not json", "orders", 7), None);
}

// Read-only watermarks: the source's side, with the chunk task replaced by
// the test (it answers requests through the channels).

/// A read-only incremental snapshot of `app."out""box"` by `id`, its first
/// chunk asked for; the requests it sends and the channel rows go back by.
fn read_only(
    yielded: Lsn,
) -> (
    Incremental,
    mpsc::Receiver<Request>,
    mpsc::Sender<ChunkRead>,
) {
    let (requests, request_rx) = mpsc::channel(1);
    let (chunk_tx, chunks) = mpsc::channel(1);
    let (_fail_tx, failed) = oneshot::channel();
    let plan = IncrementalPlan {
        id: "s1".into(),
        tables: vec![ChunkTable {
            schema: "app".into(),
            name: "out\"box".into(),
            key: vec!["id".into()],
            filter: None,
            inserts_only: false,
            after: None,
            done: false,
            abandoned: None,
        }],
        chunk_rows: 10,
    };
    let mut incremental = Incremental {
        plan,
        connector: "c".into(),
        run: 1,
        next_chunk: 0,
        phase: Phase::Idle,
        xid: None,
        restarted: false,
        read_only: true,
        yielded,
        held: None,
        requests,
        chunks,
        failed: Some(failed),
        task: tokio::spawn(async {}),
    };
    incremental.request_next();
    (incremental, request_rx, chunk_tx)
}

fn relation() -> Arc<Relation> {
    Arc::new(Relation::for_tests(&["id", "v"]))
}

fn row(id: &str, v: &str) -> TupleData {
    TupleData(vec![
        Cell::Text(Bytes::from(id.to_owned())),
        Cell::Text(Bytes::from(v.to_owned())),
    ])
}

/// The chunk task's answer: rows `ids`, read with a snapshot that did not
/// see `xip` nor anything from `xmax` on, at `horizon`.
fn rows(ids: &[&str], xip: &[u32], xmax: u32, horizon: u64) -> ChunkRead {
    ChunkRead {
        chunk: 0,
        outcome: Ok(Chunk {
            relation: Relation::for_tests(&["id", "v"]),
            rows: ids.iter().map(|id| row(id, "old")).collect(),
            invisible: xip.to_vec(),
            xmax,
            horizon: Lsn(horizon),
            key: vec!["id".into()],
            key_note: None,
        }),
    }
}

fn begin(xid: u32, commit_lsn: u64) -> SourceEvent {
    SourceEvent::Begin {
        commit_lsn: Lsn(commit_lsn),
        xid,
        commit_time: 0,
        lsn: Lsn(commit_lsn),
        sent_time: 0,
    }
}

fn update(xid: u32, commit_lsn: u64, id: &str) -> SourceEvent {
    SourceEvent::Change(crate::source::Change {
        pos: Position {
            commit_lsn: Lsn(commit_lsn),
            index: 0,
        },
        txn: crate::source::Txn {
            xid,
            commit_time: 0,
        },
        lsn: Lsn(commit_lsn),
        op: Op::Update,
        relation: relation(),
        old: None,
        new: Some(row(id, "new")),
    })
}

fn commit(commit_lsn: u64) -> SourceEvent {
    SourceEvent::Commit {
        commit_lsn: Lsn(commit_lsn),
        end_lsn: Lsn(commit_lsn + 8),
        commit_time: 0,
    }
}

fn idle(wal_end: u64) -> SourceEvent {
    SourceEvent::Idle {
        wal_end: Lsn(wal_end),
        reply: false,
    }
}

/// Feeds `events`; returns what came out, held events included, as
/// `Ok(chunk ids at lsn)` for chunks and `Err(kind)` for the rest.
fn feed(i: &mut Incremental, events: Vec<SourceEvent>) -> Vec<Result<(u64, Vec<String>), String>> {
    let mut out = Vec::new();
    for e in events {
        let e = i.observe(e).expect("observe");
        out.push(e);
        if let Some(held) = i.held.take() {
            out.push(held);
        }
    }
    out.into_iter()
        .map(|e| match e {
            SourceEvent::SnapshotChunk { lsn, rows, .. } => Ok((
                lsn.0,
                rows.iter()
                    .map(|r| match &r.0[0] {
                        Cell::Text(b) => String::from_utf8_lossy(b).into_owned(),
                        _ => String::new(),
                    })
                    .collect(),
            )),
            SourceEvent::Begin { .. } => Err("begin".into()),
            SourceEvent::Commit { .. } => Err("commit".into()),
            SourceEvent::Change(_) => Err("change".into()),
            SourceEvent::Idle { .. } => Err("idle".into()),
            other => Err(format!("{other:?}")),
        })
        .collect()
}

#[tokio::test]
async fn a_read_only_chunk_drops_rows_its_snapshot_did_not_see_changed_and_goes_past_its_horizon() {
    let (mut i, mut requests, rows_tx) = read_only(Lsn(100));
    assert!(matches!(
        requests.try_recv(),
        Ok(Request::Chunk { chunk: 0, .. })
    ));
    // Before the rows arrive: transaction 50 (seen by the snapshot) and
    // 51 (running when it was taken) change rows a and b.
    let out = feed(
        &mut i,
        vec![
            begin(50, 200),
            update(50, 200, "a"),
            commit(200),
            begin(51, 300),
            update(51, 300, "b"),
            commit(300),
        ],
    );
    assert!(
        out.iter().all(Result::is_err),
        "no chunk before its rows: {out:?}"
    );
    rows_tx
        .try_send(rows(&["a", "b", "c", "d"], &[51], 60, 1000))
        .expect("send rows");
    // Below the horizon, nothing; inside a transaction, nothing; a change by
    // a transaction from xmax on (70) drops d, whatever its order.
    let out = feed(
        &mut i,
        vec![
            begin(52, 900),
            commit(900),
            idle(950),
            begin(70, 990),
            update(70, 990, "d"),
            idle(980),
            commit(990),
        ],
    );
    assert!(
        out.iter().all(Result::is_err),
        "nothing placed below the horizon or inside a transaction: {out:?}"
    );
    // The next Begin at or past the horizon (and past every position
    // yielded: 998 is the last commit's end) takes the chunk in front of it.
    let out = feed(&mut i, vec![begin(71, 1000), commit(1000)]);
    assert_eq!(
        out,
        vec![
            Ok((1000, vec!["a".to_owned(), "c".to_owned()])),
            Err("begin".into()),
            Err("commit".into()),
        ]
    );
}

#[tokio::test]
async fn a_read_only_chunk_never_takes_a_position_already_yielded() {
    let (mut i, _requests, rows_tx) = read_only(Lsn(100));
    // The stream already said 2000 (a keepalive) before the rows came; the
    // caller may have stored it, so the chunk must go past it.
    assert_eq!(feed(&mut i, vec![idle(2000)]), vec![Err("idle".into())]);
    rows_tx
        .try_send(rows(&["a"], &[], 60, 1500))
        .expect("send rows");
    assert_eq!(feed(&mut i, vec![idle(2000)]), vec![Err("idle".into())]);
    assert_eq!(
        feed(&mut i, vec![idle(2008)]),
        vec![Ok((2008, vec!["a".to_owned()])), Err("idle".into())]
    );
}

#[tokio::test]
async fn a_truncate_the_snapshot_did_not_see_empties_a_read_only_chunk() {
    let (mut i, _requests, rows_tx) = read_only(Lsn(100));
    let truncate = |xid| SourceEvent::Truncate {
        pos: Position {
            commit_lsn: Lsn(300),
            index: 0,
        },
        txn: crate::source::Txn {
            xid,
            commit_time: 0,
        },
        lsn: Lsn(300),
        relations: vec![relation()],
    };
    // A truncate the snapshot saw leaves its rows (they were inserted
    // after it); one it did not see empties the chunk.
    feed(&mut i, vec![begin(40, 300), truncate(40), commit(300)]);
    rows_tx
        .try_send(rows(&["a"], &[61], 70, 400))
        .expect("send rows");
    feed(&mut i, vec![begin(61, 350), truncate(61), commit(350)]);
    assert_eq!(
        feed(&mut i, vec![idle(600)]),
        vec![Ok((600, vec![])), Err("idle".into())]
    );
}

#[tokio::test]
async fn a_read_only_chunk_waiting_nudges_the_primary_once() {
    let (mut i, mut requests, rows_tx) = read_only(Lsn(100));
    let _ = requests.try_recv();
    assert_eq!(i.waiting().expect("waiting"), Waiting::No);
    rows_tx
        .try_send(rows(&["a"], &[], 60, 400))
        .expect("send rows");
    assert!(matches!(i.waiting().expect("waiting"), Waiting::Until(_)));
    i.on_wait();
    i.on_wait();
    assert!(matches!(requests.try_recv(), Ok(Request::Nudge)));
    assert!(requests.try_recv().is_err(), "one nudge per chunk");
}

#[test]
fn snapshots_leave_out_running_transactions_and_those_from_xmax_on_modulo_2_32() {
    let xip: HashSet<u32> = [7].into_iter().collect();
    assert!(unseen(&xip, 10, 7));
    assert!(!unseen(&xip, 10, 8));
    assert!(unseen(&xip, 10, 10));
    assert!(unseen(&xip, 10, 11));
    // Across the wrap: xmax just past 2^32 - 1.
    assert!(!unseen(&HashSet::new(), 5, u32::MAX - 1));
    assert!(unseen(&HashSet::new(), u32::MAX - 1, 3));
}

#[test]
fn a_horizon_just_past_a_page_header_is_the_page_start() {
    assert_eq!(horizon(Lsn(8192 * 3 + 24)), Lsn(8192 * 3));
    assert_eq!(horizon(Lsn(8192 * 2048 + 40)), Lsn(8192 * 2048));
    assert_eq!(horizon(Lsn(8192 * 3 + 48)), Lsn(8192 * 3 + 48));
    assert_eq!(horizon(Lsn(8192 * 3)), Lsn(8192 * 3));
}

#[tokio::test]
async fn a_read_only_chunk_wakes_the_source_when_its_rows_arrive() {
    // The stream may be idle: the rows themselves must wake the source, or
    // the chunk would wait for the next stream event.
    let (mut i, _requests, rows_tx) = read_only(Lsn(100));
    // No chunk task to watch (its failure channel would wake it too).
    i.failed = None;
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        rows_tx
            .send(rows(&["a"], &[], 60, 400))
            .await
            .expect("send rows");
        // Keep the channel open: a closed one is not an arrival.
        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
    });
    let woke = tokio::time::timeout(std::time::Duration::from_secs(5), i.wake(Waiting::No))
        .await
        .expect("woken by the rows");
    assert!(matches!(woke, Wake::Again), "{woke:?}");
    assert!(matches!(i.waiting().expect("waiting"), Waiting::Until(_)));
}
