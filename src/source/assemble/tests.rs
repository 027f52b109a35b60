//! Transaction assembly and the relation cache, fed byte-exact pgoutput
//! messages (built with the encoder) the way the walsender sends them.

use bytes::Bytes;

use super::*;
use crate::pgoutput::stream::StreamControl;
use crate::pgoutput::{Begin, Column, Commit, Delete, Insert, OldTuple, Relation, Update, encode};

const COMMIT: Lsn = Lsn(0x1_0000_0100);
const END: Lsn = Lsn(0x1_0000_0180);

fn relation(oid: u32, columns: &[&str]) -> LogicalMessage {
    LogicalMessage::Relation(Relation {
        oid,
        namespace: "public".into(),
        name: format!("t{oid}"),
        replica_identity: b'd',
        columns: columns
            .iter()
            .map(|c| Column {
                flags: 0,
                name: (*c).into(),
                type_oid: 25,
                type_modifier: -1,
            })
            .collect(),
    })
}

fn row(cells: &[&str]) -> TupleData {
    TupleData(
        cells
            .iter()
            .map(|c| Cell::Text(Bytes::copy_from_slice(c.as_bytes())))
            .collect(),
    )
}

use crate::pgoutput::Cell;

fn begin() -> LogicalMessage {
    LogicalMessage::Begin(Begin {
        final_lsn: COMMIT,
        commit_time: 0,
        xid: 7,
    })
}

fn commit() -> LogicalMessage {
    LogicalMessage::Commit(Commit {
        flags: 0,
        commit_lsn: COMMIT,
        end_lsn: END,
        commit_time: 0,
    })
}

fn insert(oid: u32, cells: &[&str]) -> LogicalMessage {
    LogicalMessage::Insert(Insert {
        relation: oid,
        new: row(cells),
    })
}

/// The walsender's send time of every fed message.
const SENT_TIME: i64 = 812_345_678_901;

/// Feeds one message as XLogData. `wal_start` 0/0 is what PostgreSQL sends
/// for every message but the last of a write.
fn feed(
    a: &mut Assembler,
    msg: &LogicalMessage,
    wal_start: Lsn,
) -> Result<Option<SourceEvent>, SourceError> {
    a.on_xlogdata(wal_start, wal_start, SENT_TIME, encode(msg).unwrap())
}

fn feed_all(a: &mut Assembler, msgs: &[LogicalMessage]) -> Vec<SourceEvent> {
    msgs.iter()
        .filter_map(|m| feed(a, m, COMMIT).unwrap())
        .collect()
}

#[test]
fn a_transaction_comes_out_in_order_with_one_position_per_change() {
    let mut a = Assembler::new(Lsn(1), None);
    let events = feed_all(
        &mut a,
        &[
            begin(),
            relation(1, &["id", "v"]),
            insert(1, &["1", "a"]),
            LogicalMessage::Update(Update {
                relation: 1,
                old: Some(OldTuple::Key(row(&["1", "a"]))),
                new: row(&["1", "b"]),
            }),
            LogicalMessage::Delete(Delete {
                relation: 1,
                old: OldTuple::Key(row(&["1", "b"])),
            }),
            insert(1, &["2", "c"]),
            commit(),
        ],
    );
    let shape: Vec<String> = events
        .iter()
        .map(|e| match e {
            SourceEvent::Begin {
                commit_lsn,
                xid,
                sent_time,
                ..
            } => {
                assert_eq!(*sent_time, SENT_TIME, "the Begin's XLogData send time");
                format!("B {commit_lsn} {xid}")
            }
            SourceEvent::Relation(r) => format!("R {}", r.name),
            SourceEvent::Change(c) => format!(
                "{:?} {} #{} old={} new={}",
                c.op,
                c.pos.commit_lsn,
                c.pos.index,
                c.old.is_some(),
                c.new.is_some()
            ),
            SourceEvent::Commit {
                commit_lsn,
                end_lsn,
                ..
            } => format!("C {commit_lsn} {end_lsn}"),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        shape,
        [
            "B 1/00000100 7",
            "R t1",
            "Insert 1/00000100 #0 old=false new=true",
            "Update 1/00000100 #1 old=true new=true",
            "Delete 1/00000100 #2 old=true new=false",
            "Insert 1/00000100 #3 old=false new=true",
            "C 1/00000100 1/00000180",
        ]
    );
}

#[test]
fn positions_restart_at_zero_in_the_next_transaction() {
    let mut a = Assembler::new(Lsn(1), None);
    let first = feed_all(
        &mut a,
        &[relation(1, &["id"]), begin(), insert(1, &["1"]), commit()],
    );
    let second = feed_all(&mut a, &[begin(), insert(1, &["2"]), commit()]);
    for events in [first, second] {
        let indexes: Vec<u64> = events
            .iter()
            .filter_map(|e| match e {
                SourceEvent::Change(c) => Some(c.pos.index),
                _ => None,
            })
            .collect();
        assert_eq!(indexes, [0]);
    }
}

#[test]
fn a_change_of_an_undescribed_relation_is_an_error_at_its_lsn() {
    let mut a = Assembler::new(Lsn(1), None);
    feed(&mut a, &begin(), COMMIT).unwrap();
    let e = feed(&mut a, &insert(9, &["1"]), Lsn(0x1_0000_0120)).unwrap_err();
    assert!(
        matches!(&e, SourceError::Stream { lsn, what } if *lsn == Lsn(0x1_0000_0120) && what.contains('9')),
        "{e}"
    );
}

#[test]
fn a_row_of_the_wrong_width_is_an_error() {
    let mut a = Assembler::new(Lsn(1), None);
    feed_all(&mut a, &[relation(1, &["id", "v"]), begin()]);
    let e = feed(&mut a, &insert(1, &["1"]), COMMIT).unwrap_err();
    assert!(matches!(e, SourceError::Stream { .. }), "{e}");
}

#[test]
fn changes_and_commits_outside_a_transaction_are_errors() {
    let mut a = Assembler::new(Lsn(1), None);
    feed(&mut a, &relation(1, &["id"]), COMMIT).unwrap();
    let e = feed(&mut a, &insert(1, &["1"]), COMMIT).unwrap_err();
    assert!(
        matches!(&e, SourceError::Stream { what, .. } if what.contains("outside")),
        "{e}"
    );
    let e = feed(&mut a, &commit(), COMMIT).unwrap_err();
    assert!(
        matches!(&e, SourceError::Stream { what, .. } if what.contains("without Begin")),
        "{e}"
    );
    feed(&mut a, &begin(), COMMIT).unwrap();
    let e = feed(&mut a, &begin(), COMMIT).unwrap_err();
    assert!(
        matches!(&e, SourceError::Stream { what, .. } if what.contains("inside")),
        "{e}"
    );
}

#[test]
fn zero_wal_start_never_lowers_the_received_position_or_names_0_0() {
    let mut a = Assembler::new(Lsn(0x5_0000_0000), None);
    feed(&mut a, &relation(1, &["id"]), Lsn::ZERO).unwrap();
    assert_eq!(a.received, Lsn(0x5_0000_0000));
    let e = a
        .on_xlogdata(Lsn::ZERO, Lsn::ZERO, 0, Bytes::from_static(b"Z"))
        .unwrap_err();
    assert!(
        matches!(e, SourceError::Decode { lsn, .. } if lsn == Lsn(0x5_0000_0000)),
        "{e}"
    );
}

#[test]
fn a_new_relation_message_changes_the_shape_of_later_rows() {
    let mut a = Assembler::new(Lsn(1), None);
    feed_all(&mut a, &[relation(1, &["id"]), begin()]);
    feed(&mut a, &insert(1, &["1"]), COMMIT).unwrap();
    feed(&mut a, &relation(1, &["id", "added"]), COMMIT).unwrap();
    let Some(SourceEvent::Change(c)) = feed(&mut a, &insert(1, &["2", "x"]), COMMIT).unwrap()
    else {
        panic!("expected a change");
    };
    assert_eq!(c.relation.columns.len(), 2);
    assert_eq!(c.pos.index, 1);
}

fn message(transactional: bool, lsn: Lsn) -> LogicalMessage {
    LogicalMessage::Message(crate::pgoutput::LogicalDecodingMessage {
        transactional,
        lsn,
        prefix: "walrelay.heartbeat".into(),
        content: Bytes::from_static(b"{}"),
    })
}

#[test]
fn non_transactional_message_is_an_event_with_its_lsn() {
    let mut a = Assembler::new(Lsn::ZERO, None);
    let at = Lsn(0x2_0000_0040);
    match feed(&mut a, &message(false, at), at).unwrap() {
        Some(SourceEvent::Message {
            lsn,
            prefix,
            content,
        }) => {
            assert_eq!(lsn, at);
            assert_eq!(prefix, "walrelay.heartbeat");
            assert_eq!(&content[..], b"{}");
        }
        other => panic!("expected a Message event, got {other:?}"),
    }
}

#[test]
fn transactional_message_is_a_change_with_its_own_index() {
    let mut a = Assembler::new(Lsn::ZERO, None);
    let at = Lsn(0x2_0000_0010);
    let events = feed_all(
        &mut a,
        &[
            begin(),
            relation(1, &["id", "v"]),
            insert(1, &["1", "a"]),
            message(true, at),
            insert(1, &["2", "b"]),
            commit(),
        ],
    );
    assert_eq!(events.len(), 6, "{events:?}");
    match &events[3] {
        SourceEvent::TxnMessage {
            pos,
            lsn,
            prefix,
            content,
            ..
        } => {
            assert_eq!(
                *pos,
                Position {
                    commit_lsn: COMMIT,
                    index: 1
                }
            );
            assert_eq!(*lsn, at);
            assert_eq!(prefix, "walrelay.heartbeat");
            assert_eq!(&content[..], b"{}");
        }
        other => panic!("expected a TxnMessage, got {other:?}"),
    }
    // The row after the message comes after it: index 2, not 1.
    match &events[4] {
        SourceEvent::Change(c) => assert_eq!(c.pos.index, 2),
        other => panic!("expected a Change, got {other:?}"),
    }
}

#[test]
fn transactional_message_outside_a_transaction_is_an_error() {
    let mut a = Assembler::new(Lsn::ZERO, None);
    let e = feed(&mut a, &message(true, COMMIT), COMMIT).unwrap_err();
    assert!(
        e.to_string().contains("transactional Message outside"),
        "{e}"
    );
}

#[test]
fn non_transactional_message_inside_a_transaction_is_an_error() {
    let mut a = Assembler::new(Lsn::ZERO, None);
    feed(&mut a, &begin(), COMMIT).unwrap();
    let e = feed(&mut a, &message(false, COMMIT), COMMIT).unwrap_err();
    assert!(e.to_string().contains("non-transactional Message"), "{e}");
}

#[test]
fn a_truncate_takes_one_position_per_table_and_later_changes_follow_it() {
    let mut a = Assembler::new(Lsn(1), None);
    let events = feed_all(
        &mut a,
        &[
            begin(),
            relation(1, &["id"]),
            relation(2, &["id"]),
            insert(1, &["1"]),
            LogicalMessage::Truncate(crate::pgoutput::Truncate {
                options: 0,
                relations: vec![2, 1],
            }),
            insert(2, &["9"]),
            commit(),
        ],
    );
    let shape: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            SourceEvent::Change(c) => {
                Some(format!("{:?} t{} #{}", c.op, c.relation.oid, c.pos.index))
            }
            SourceEvent::Truncate { pos, relations, .. } => Some(format!(
                "T {:?} #{} {}",
                relations.iter().map(|r| r.oid).collect::<Vec<_>>(),
                pos.index,
                pos.commit_lsn
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        shape,
        [
            "Insert t1 #0".to_owned(),
            format!("T [2, 1] #1 {COMMIT}"),
            "Insert t2 #3".to_owned(),
        ]
    );
}

#[test]
fn a_truncate_of_an_unknown_relation_or_outside_a_transaction_is_an_error() {
    let mut a = Assembler::new(Lsn(1), None);
    let truncate = LogicalMessage::Truncate(crate::pgoutput::Truncate {
        options: 0,
        relations: vec![5],
    });
    assert!(feed(&mut a, &truncate, COMMIT).is_err());
    feed(&mut a, &begin(), COMMIT).unwrap();
    let e = feed(&mut a, &truncate, COMMIT).unwrap_err();
    assert!(e.to_string().contains('5'), "{e}");
}

/// Debezium's BEGIN record names the transaction by the Begin message's
/// position: the source passes it on (and, for a 0/0 placeholder, the
/// newest position it knows, as for every other message).
#[test]
fn begin_carries_its_message_position() {
    let mut a = Assembler::new(Lsn(0x1_0000_0000), None);
    let first_change = Lsn(0x1_0000_0040);
    match feed(&mut a, &begin(), first_change).unwrap() {
        Some(SourceEvent::Begin { lsn, xid, .. }) => {
            assert_eq!((lsn, xid), (first_change, 7));
        }
        other => panic!("expected Begin, got {other:?}"),
    }
    feed(&mut a, &commit(), END).unwrap();
    match feed(&mut a, &begin(), Lsn::ZERO).unwrap() {
        Some(SourceEvent::Begin { lsn, .. }) => assert_eq!(lsn, END),
        other => panic!("expected Begin, got {other:?}"),
    }
}

/// Where the big transaction's first change of any table was (its first
/// Stream Start), its aborted subtransaction's change, and its first and
/// second published changes that survived.
const FIRST: Lsn = Lsn(0x1_0000_0010);
const ABORTED: Lsn = Lsn(0x1_0000_0020);
const X2: Lsn = Lsn(0x1_0000_0030);
const X3: Lsn = Lsn(0x1_0000_0040);

/// Feeds raw XLogData payloads, each at its position (0/0: a message that
/// is not the last of its write), collecting what comes out, replays
/// included.
fn feed_raw(a: &mut Assembler, payloads: &[(Lsn, Bytes)]) -> Vec<SourceEvent> {
    let mut out = Vec::new();
    for (at, p) in payloads {
        if let Some(e) = a.on_xlogdata(*at, *at, SENT_TIME, p.clone()).unwrap() {
            out.push(e);
        }
        while let Some(e) = a.next_replayed().unwrap() {
            out.push(e);
        }
    }
    out
}

fn enc(msg: &LogicalMessage) -> Bytes {
    encode(msg).unwrap()
}

fn inside(xid: u32, msg: &LogicalMessage) -> Bytes {
    crate::pgoutput::stream::streamed(xid, &enc(msg))
}

fn control(c: StreamControl) -> Bytes {
    crate::pgoutput::stream::encode_stream_control(&c)
}

const OTHER_COMMIT: Lsn = Lsn(0x1_0000_0080);

/// A small transaction sent whole, each message at its position.
fn other_txn() -> Vec<(Lsn, Bytes)> {
    let first = Lsn(0x1_0000_0070);
    vec![
        (
            first,
            enc(&LogicalMessage::Begin(Begin {
                final_lsn: OTHER_COMMIT,
                commit_time: 0,
                xid: 9,
            })),
        ),
        (Lsn::ZERO, enc(&relation(1, &["id", "v"]))),
        (first, enc(&insert(1, &["9", "z"]))),
        (
            OTHER_COMMIT,
            enc(&LogicalMessage::Commit(Commit {
                flags: 0,
                commit_lsn: OTHER_COMMIT,
                end_lsn: Lsn(0x1_0000_0090),
                commit_time: 0,
            })),
        ),
    ]
}

fn stream_commit() -> Bytes {
    control(StreamControl::Commit(
        crate::pgoutput::stream::StreamCommit {
            xid: 7,
            flags: 0,
            commit_lsn: COMMIT,
            end_lsn: END,
            commit_time: 0,
        },
    ))
}

fn start(first_segment: bool) -> Bytes {
    control(StreamControl::Start {
        xid: 7,
        first_segment,
    })
}

/// A transaction streamed while it ran — in two blocks, another
/// transaction committed between them, a subtransaction aborted that held
/// its first published change — comes out at its commit exactly as
/// PostgreSQL 15+ sends it whole after the commit: the same events,
/// positions and order, held in memory or in a file. Its `Begin` is at the
/// first published change that survived, where pgoutput sends a whole
/// transaction's (transaction metadata names it).
#[test]
fn a_streamed_transaction_comes_out_as_if_sent_whole() {
    let mut whole = Assembler::new(Lsn(1), None);
    let mut payloads = other_txn();
    payloads.extend([
        (X2, enc(&begin())),
        (Lsn::ZERO, enc(&relation(1, &["id", "v"]))),
        (X2, enc(&insert(1, &["1", "a"]))),
        (X3, enc(&insert(1, &["3", "c"]))),
        (COMMIT, enc(&commit())),
    ]);
    let expected = feed_raw(&mut whole, &payloads);
    assert_eq!(expected.len(), 9);
    assert!(
        matches!(expected[4], SourceEvent::Begin { lsn: X2, .. }),
        "{:?}",
        expected[4]
    );

    for memory_limit in [0, 1 << 20] {
        let in_progress = InProgress {
            memory_limit,
            spill_dir: std::env::temp_dir(),
        };
        let mut a = Assembler::new(Lsn(1), Some(&in_progress));
        // The subtransaction's change comes first, with the relation
        // (pgoutput names the subtransaction in both); after its abort,
        // pgoutput sends the relation again.
        let mut payloads = vec![
            (FIRST, start(true)),
            (Lsn::ZERO, inside(8, &relation(1, &["id", "v"]))),
            (ABORTED, inside(8, &insert(1, &["2", "b"]))),
            (ABORTED, control(StreamControl::Stop)),
        ];
        payloads.extend(other_txn());
        payloads.extend([
            (ABORTED, control(StreamControl::Abort { xid: 7, subxid: 8 })),
            (X2, start(false)),
            (Lsn::ZERO, inside(7, &relation(1, &["id", "v"]))),
            (X2, inside(7, &insert(1, &["1", "a"]))),
            (X3, inside(7, &insert(1, &["3", "c"]))),
            (X3, control(StreamControl::Stop)),
            (COMMIT, stream_commit()),
        ]);
        let got = feed_raw(&mut a, &payloads);
        assert_eq!(
            format!("{got:?}"),
            format!("{expected:?}"),
            "memory_limit {memory_limit}"
        );
        let (spilled, committed) = a.take_stream_counts();
        assert_eq!(committed, 1);
        assert_eq!(
            spilled > 0,
            memory_limit == 0,
            "memory_limit {memory_limit}"
        );
    }
}

/// The replayed `Begin` is at the first published change of any kind (a
/// transactional message or a truncate count as pgoutput counts them),
/// after relations read ahead; a transaction that published nothing has
/// it at its first block.
#[test]
fn the_replayed_begin_is_at_the_first_published_change_of_any_kind() {
    let truncate = LogicalMessage::Truncate(crate::pgoutput::Truncate {
        options: 0,
        relations: vec![1],
    });
    type Case = (&'static str, Vec<(Lsn, Bytes)>, Lsn);
    let cases: [Case; 3] = [
        ("message", vec![(X2, inside(7, &message(true, X2)))], X2),
        (
            "truncate",
            vec![
                (Lsn::ZERO, inside(7, &relation(1, &["id"]))),
                (X3, inside(7, &truncate)),
            ],
            X3,
        ),
        ("nothing", vec![], FIRST),
    ];
    for (what, changes, begin_at) in cases {
        let in_progress = InProgress {
            memory_limit: 1 << 20,
            spill_dir: std::env::temp_dir(),
        };
        let mut a = Assembler::new(Lsn(1), Some(&in_progress));
        let mut payloads = vec![(FIRST, start(true))];
        payloads.extend(changes);
        payloads.extend([
            (X3, control(StreamControl::Stop)),
            (COMMIT, stream_commit()),
        ]);
        let got = feed_raw(&mut a, &payloads);
        assert!(
            matches!(got.first(), Some(SourceEvent::Begin { lsn, .. }) if *lsn == begin_at),
            "{what}: {got:?}"
        );
        assert!(
            matches!(
                got.last(),
                Some(SourceEvent::Commit {
                    commit_lsn: COMMIT,
                    ..
                })
            ),
            "{what}: {got:?}"
        );
    }
}

/// A stream frame out of order names the LSN; under protocol 1 a frame
/// message is one that was never negotiated.
#[test]
fn stream_frames_out_of_order_are_errors_naming_the_lsn() {
    let in_progress = InProgress {
        memory_limit: 1 << 20,
        spill_dir: std::env::temp_dir(),
    };
    let mut a = Assembler::new(Lsn(1), Some(&in_progress));
    let commit = control(StreamControl::Commit(
        crate::pgoutput::stream::StreamCommit {
            xid: 7,
            flags: 0,
            commit_lsn: COMMIT,
            end_lsn: END,
            commit_time: 0,
        },
    ));
    match a.on_xlogdata(COMMIT, COMMIT, SENT_TIME, commit.clone()) {
        Err(SourceError::Stream { lsn, what }) => {
            assert_eq!(lsn, COMMIT);
            assert!(what.contains("never sent a block"), "{what}");
        }
        other => panic!("{other:?}"),
    }
    let mut v1 = Assembler::new(Lsn(1), None);
    assert!(matches!(
        v1.on_xlogdata(COMMIT, COMMIT, SENT_TIME, commit),
        Err(SourceError::Decode { .. })
    ));
}
