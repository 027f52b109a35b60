//! Messages captured from a real PostgreSQL 18 walsender (see
//! `tests/data/pgoutput/capture.sh` for the SQL): every line must decode,
//! re-encode to the same bytes, and carry what the SQL wrote.

use bytes::Bytes;

use super::super::*;

const MIXED: &str = include_str!("../../../tests/data/pgoutput/pg18_mixed.hex");
const BINARY: &str = include_str!("../../../tests/data/pgoutput/pg18_binary.hex");

/// One fixture line: the slot's `lsn` and `xid` columns and the decoded message.
struct Line {
    lsn: Lsn,
    xid: u32,
    msg: LogicalMessage,
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Decodes every line, checking that `encode` gives back the captured bytes.
fn load(file: &str) -> Vec<Line> {
    file.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut parts = l.split('\t');
            let (lsn, xid, hex) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            let bytes = Bytes::from(unhex(hex));
            let msg = decode(bytes.clone()).unwrap_or_else(|e| panic!("{e}\nline: {l}"));
            assert_eq!(encode(&msg).unwrap(), bytes, "round trip of {l}");
            Line {
                lsn: lsn.parse().unwrap(),
                xid: xid.parse().unwrap(),
                msg,
            }
        })
        .collect()
}

fn tags(lines: &[Line]) -> String {
    lines.iter().map(|l| char::from(l.msg.tag())).collect()
}

fn s(cell: &Cell) -> &str {
    match cell {
        Cell::Text(b) => std::str::from_utf8(b).unwrap(),
        other => panic!("expected a text cell, got {other:?}"),
    }
}

/// Checks what holds for both captures: transaction framing, relation cache,
/// the shape of every message in SQL order.
fn check_common(lines: &[Line]) {
    assert_eq!(tags(lines), "BYRIICBUCBUCBDCBRIMUDCMBYRRTCBORIC");

    // Begin/Commit pairs: final_lsn == commit_lsn < end_lsn == the slot's lsn
    // for the commit row; same xid on every row in between, same commit time.
    let mut open: Option<(Begin, u32)> = None;
    let mut last_end = Lsn::ZERO;
    let mut transactions = 0;
    for line in lines {
        match (&line.msg, open) {
            (LogicalMessage::Begin(b), None) => {
                assert_eq!(b.xid, line.xid);
                assert!(b.final_lsn > last_end, "transactions in commit order");
                open = Some((*b, line.xid));
            }
            (LogicalMessage::Commit(c), Some((b, xid))) => {
                assert_eq!(line.xid, xid);
                assert_eq!(c.flags, 0);
                assert_eq!(c.commit_lsn, b.final_lsn);
                assert!(c.end_lsn > c.commit_lsn);
                assert_eq!(c.end_lsn, line.lsn);
                assert_eq!(c.commit_time, b.commit_time);
                last_end = c.end_lsn;
                open = None;
                transactions += 1;
            }
            (LogicalMessage::Begin(_) | LogicalMessage::Commit(_), _) => {
                panic!("unbalanced Begin/Commit")
            }
            (_, Some((_, xid))) => assert_eq!(line.xid, xid, "{:?}", line.msg),
            // The non-transactional message arrives outside any transaction, with xid 0.
            (LogicalMessage::Message(m), None) => {
                assert!(!m.transactional);
                assert_eq!(line.xid, 0);
            }
            (other, None) => panic!("{other:?} outside a transaction"),
        }
    }
    assert!(open.is_none());
    assert_eq!(transactions, 7);

    // Every change refers to a relation sent before it, with matching widths.
    let mut cache = RelationCache::new();
    for line in lines {
        cache.observe(&line.msg).unwrap();
    }
    assert_eq!(cache.len(), 2);

    let m = |i: usize| &lines[i].msg;
    let LogicalMessage::Type(mood) = m(1) else {
        panic!()
    };
    assert_eq!(
        (mood.namespace.as_str(), mood.name.as_str()),
        ("public", "mood")
    );

    let LogicalMessage::Relation(items) = m(2) else {
        panic!()
    };
    assert_eq!(
        (items.namespace.as_str(), items.name.as_str()),
        ("public", "items")
    );
    assert_eq!(items.replica_identity(), Some(ReplicaIdentity::Default));
    let cols: Vec<(&str, Oid, i32, bool)> = items
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.type_oid, c.type_modifier, c.is_key()))
        .collect();
    assert_eq!(
        cols,
        vec![
            ("id", 23, -1, true),
            ("name", 25, -1, false),
            ("doc", 3802, -1, false),
            ("blob", 17, -1, false),
            ("uid", 2950, -1, false),
            ("at", 1184, -1, false),
            ("price", 1700, (10 << 16 | 2) + 4, false),
            ("tag", 1043, 16 + 4, false),
            ("feel", mood.oid, -1, false),
            ("big", 25, -1, false),
        ]
    );

    let LogicalMessage::Insert(ins) = m(3) else {
        panic!()
    };
    assert_eq!(ins.relation, items.oid);
    assert_eq!(ins.new.len(), 10);
    let LogicalMessage::Insert(nulls) = m(4) else {
        panic!()
    };
    assert_eq!(&nulls.new.cells()[1..], &[const { Cell::Null }; 9]);

    // UPDATE that leaves the TOASTed `big` alone: sent as 'u', no old tuple.
    let LogicalMessage::Update(upd) = m(7) else {
        panic!()
    };
    assert_eq!(upd.old, None);
    assert_eq!(upd.new.get(9), Some(&Cell::UnchangedToast));
    assert_eq!(upd.new.len(), 10);

    // Key change: old key 'K' with only the key column set.
    let LogicalMessage::Update(upd) = m(10) else {
        panic!()
    };
    let Some(OldTuple::Key(key)) = &upd.old else {
        panic!("{upd:?}")
    };
    assert_eq!(&key.cells()[1..], &[const { Cell::Null }; 9]);
    let LogicalMessage::Delete(del) = m(13) else {
        panic!()
    };
    assert!(matches!(&del.old, OldTuple::Key(k) if k.cells()[1..] == [const { Cell::Null }; 9]));

    // REPLICA IDENTITY FULL: every column flagged as key, old rows as 'O'.
    let LogicalMessage::Relation(events) = m(16) else {
        panic!()
    };
    assert_eq!(events.name, "events");
    assert_eq!(events.replica_identity(), Some(ReplicaIdentity::Full));
    assert!(events.columns.iter().all(Column::is_key));
    assert_eq!(events.columns[0].type_oid, 20);
    assert!(matches!(
        m(19),
        LogicalMessage::Update(Update {
            old: Some(OldTuple::Old(_)),
            ..
        })
    ));
    assert!(matches!(
        m(20),
        LogicalMessage::Delete(Delete {
            old: OldTuple::Old(_),
            ..
        })
    ));

    let LogicalMessage::Message(hello) = m(18) else {
        panic!()
    };
    assert!(hello.transactional);
    assert_eq!(
        (hello.prefix.as_str(), &hello.content[..]),
        ("walrelay", &b"hello"[..])
    );
    assert_eq!(hello.lsn, lines[18].lsn);
    let LogicalMessage::Message(bye) = m(22) else {
        panic!()
    };
    assert_eq!(&bye.content[..], b"bye");

    // TRUNCATE items, events RESTART IDENTITY CASCADE, after fresh Relation messages.
    let LogicalMessage::Truncate(t) = m(27) else {
        panic!()
    };
    assert!(t.cascade() && t.restart_identity());
    assert_eq!(t.relations, vec![items.oid, events.oid]);

    // The transaction replayed under a replication origin.
    let LogicalMessage::Origin(origin) = m(30) else {
        panic!()
    };
    assert_eq!(origin.name, "walrelay_origin");
    assert_eq!(origin.commit_lsn, "0/12345678".parse().unwrap());
    let LogicalMessage::Begin(b) = m(29) else {
        panic!()
    };
    assert_eq!(
        b.commit_time, 757_479_845_000_000,
        "2024-01-02 03:04:05 UTC in µs since 2000"
    );
}

#[test]
fn pg18_text_capture_decodes_with_expected_contents() {
    let lines = load(MIXED);
    check_common(&lines);
    let m = |i: usize| &lines[i].msg;

    let LogicalMessage::Insert(ins) = m(3) else {
        panic!()
    };
    let c = ins.new.cells();
    assert_eq!(s(&c[0]), "1");
    assert_eq!(s(&c[1]), "widget");
    assert_eq!(s(&c[2]), r#"{"a": 1, "b": [true, null]}"#);
    assert_eq!(s(&c[3]), r"\xdeadbeef");
    assert_eq!(s(&c[4]), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
    assert_eq!(s(&c[5]), "2024-01-02 03:04:05.678901+00");
    assert_eq!(s(&c[6]), "12.50");
    assert_eq!(s(&c[7]), "red");
    assert_eq!(s(&c[8]), "happy");
    assert_eq!(s(&c[9]), "walrelay-".repeat(400));

    let LogicalMessage::Update(upd) = m(7) else {
        panic!()
    };
    assert_eq!(s(&upd.new.cells()[1]), "widget v2");

    let LogicalMessage::Update(upd) = m(10) else {
        panic!()
    };
    assert_eq!(s(&upd.old.as_ref().unwrap().tuple().cells()[0]), "2");
    assert_eq!(s(&upd.new.cells()[0]), "3");

    let LogicalMessage::Update(upd) = m(19) else {
        panic!()
    };
    assert_eq!(
        s(&upd.old.as_ref().unwrap().tuple().cells()[1]),
        r#"{"kind": "created"}"#
    );
    assert_eq!(s(&upd.new.cells()[1]), r#"{"kind": "updated"}"#);
}

#[test]
fn pg18_binary_capture_decodes_with_expected_contents() {
    let lines = load(BINARY);
    check_common(&lines);

    // With binary=true every sent value is 'b'; NULL and unchanged TOAST stay 'n'/'u'.
    for line in &lines {
        let tuples: Vec<&TupleData> = match &line.msg {
            LogicalMessage::Insert(i) => vec![&i.new],
            LogicalMessage::Update(u) => {
                u.old.iter().map(OldTuple::tuple).chain([&u.new]).collect()
            }
            LogicalMessage::Delete(d) => vec![d.old.tuple()],
            _ => continue,
        };
        for cell in tuples.into_iter().flat_map(TupleData::cells) {
            assert!(
                !matches!(cell, Cell::Text(_)),
                "text cell in binary capture: {:?}",
                line.msg
            );
        }
    }

    let LogicalMessage::Insert(ins) = &lines[3].msg else {
        panic!()
    };
    let c = ins.new.cells();
    assert_eq!(
        c[0],
        Cell::Binary(Bytes::from_static(&[0, 0, 0, 1])),
        "int4 send format"
    );
    assert_eq!(c[1], Cell::Binary(Bytes::from_static(b"widget")));
    assert_eq!(
        c[3],
        Cell::Binary(Bytes::from_static(&[0xde, 0xad, 0xbe, 0xef]))
    );
    assert_eq!(c[4].bytes().unwrap().len(), 16, "uuid is 16 raw bytes");
    let jsonb = c[2].bytes().unwrap();
    assert_eq!(jsonb[0], 1, "jsonb send format version");
}
