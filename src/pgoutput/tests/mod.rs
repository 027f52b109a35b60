//! Unit tests: hand-made bytes for every message, round trips through
//! [`encode`], truncation/trailing/bad-tag errors, and property tests that
//! `decode` never panics.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use proptest::prelude::*;

use super::*;

mod fixtures;

/// Builds message bytes by hand, independent of [`encode`].
#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn new(tag: u8) -> Self {
        Msg(vec![tag])
    }
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn str(mut self, s: &str) -> Self {
        self.0.extend_from_slice(s.as_bytes());
        self.0.push(0);
        self
    }
    fn raw(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    fn text(self, v: &str) -> Self {
        self.u8(b't').i32(v.len() as i32).raw(v.as_bytes())
    }
    fn bytes(self) -> Bytes {
        Bytes::from(self.0)
    }
}

fn text(s: &str) -> Cell {
    Cell::Text(Bytes::copy_from_slice(s.as_bytes()))
}

/// Decodes hand-made bytes, checks the result, and checks that [`encode`]
/// gives back exactly the same bytes.
fn check(bytes: Bytes, expected: LogicalMessage) {
    let got = decode(bytes.clone()).unwrap_or_else(|e| panic!("decode failed: {e}"));
    assert_eq!(got, expected);
    assert_eq!(
        encode(&expected).unwrap(),
        bytes,
        "encode differs from hand-made bytes"
    );
}

/// One valid sample of every message kind (and of each Update/Delete shape).
pub(super) fn samples() -> Vec<(&'static str, Bytes, LogicalMessage)> {
    vec![
        (
            "begin",
            Msg::new(b'B')
                .u64(0x16_B374_D848)
                .i64(757_382_400_000_000)
                .u32(742)
                .bytes(),
            LogicalMessage::Begin(Begin {
                final_lsn: Lsn(0x16_B374_D848),
                commit_time: 757_382_400_000_000,
                xid: 742,
            }),
        ),
        (
            "commit",
            Msg::new(b'C')
                .u8(0)
                .u64(0x16_B374_D848)
                .u64(0x16_B374_D878)
                .i64(-5)
                .bytes(),
            LogicalMessage::Commit(Commit {
                flags: 0,
                commit_lsn: Lsn(0x16_B374_D848),
                end_lsn: Lsn(0x16_B374_D878),
                commit_time: -5,
            }),
        ),
        (
            "origin",
            Msg::new(b'O').u64(0x1234_5678).str("upstream").bytes(),
            LogicalMessage::Origin(Origin {
                commit_lsn: Lsn(0x1234_5678),
                name: "upstream".into(),
            }),
        ),
        (
            "relation",
            Msg::new(b'R')
                .u32(16_384)
                .str("public")
                .str("outbox")
                .u8(b'd')
                .u16(3)
                .u8(1)
                .str("id")
                .u32(2950)
                .i32(-1)
                .u8(0)
                .str("payload")
                .u32(3802)
                .i32(-1)
                .u8(0)
                .str("tag")
                .u32(1043)
                .i32(20)
                .bytes(),
            LogicalMessage::Relation(Relation {
                oid: 16_384,
                namespace: "public".into(),
                name: "outbox".into(),
                replica_identity: b'd',
                columns: vec![
                    Column {
                        flags: 1,
                        name: "id".into(),
                        type_oid: 2950,
                        type_modifier: -1,
                    },
                    Column {
                        flags: 0,
                        name: "payload".into(),
                        type_oid: 3802,
                        type_modifier: -1,
                    },
                    Column {
                        flags: 0,
                        name: "tag".into(),
                        type_oid: 1043,
                        type_modifier: 20,
                    },
                ],
            }),
        ),
        (
            "relation without columns, pg_catalog namespace",
            Msg::new(b'R')
                .u32(7)
                .str("")
                .str("t")
                .u8(b'n')
                .u16(0)
                .bytes(),
            LogicalMessage::Relation(Relation {
                oid: 7,
                namespace: String::new(),
                name: "t".into(),
                replica_identity: b'n',
                columns: vec![],
            }),
        ),
        (
            "type",
            Msg::new(b'Y').u32(16_390).str("public").str("mood").bytes(),
            LogicalMessage::Type(TypeMessage {
                oid: 16_390,
                namespace: "public".into(),
                name: "mood".into(),
            }),
        ),
        (
            "insert",
            Msg::new(b'I')
                .u32(16_384)
                .u8(b'N')
                .u16(4)
                .text("42")
                .u8(b'n')
                .u8(b'b')
                .i32(2)
                .raw(&[0xde, 0xad])
                .text("")
                .bytes(),
            LogicalMessage::Insert(Insert {
                relation: 16_384,
                new: TupleData(vec![
                    text("42"),
                    Cell::Null,
                    Cell::Binary(Bytes::from_static(&[0xde, 0xad])),
                    text(""),
                ]),
            }),
        ),
        (
            "update without old tuple, unchanged TOAST",
            Msg::new(b'U')
                .u32(16_384)
                .u8(b'N')
                .u16(2)
                .text("1")
                .u8(b'u')
                .bytes(),
            LogicalMessage::Update(Update {
                relation: 16_384,
                old: None,
                new: TupleData(vec![text("1"), Cell::UnchangedToast]),
            }),
        ),
        (
            "update with old key",
            Msg::new(b'U')
                .u32(16_384)
                .u8(b'K')
                .u16(2)
                .text("1")
                .u8(b'n')
                .u8(b'N')
                .u16(2)
                .text("2")
                .text("x")
                .bytes(),
            LogicalMessage::Update(Update {
                relation: 16_384,
                old: Some(OldTuple::Key(TupleData(vec![text("1"), Cell::Null]))),
                new: TupleData(vec![text("2"), text("x")]),
            }),
        ),
        (
            "update with old row",
            Msg::new(b'U')
                .u32(16_384)
                .u8(b'O')
                .u16(1)
                .text("a")
                .u8(b'N')
                .u16(1)
                .text("b")
                .bytes(),
            LogicalMessage::Update(Update {
                relation: 16_384,
                old: Some(OldTuple::Old(TupleData(vec![text("a")]))),
                new: TupleData(vec![text("b")]),
            }),
        ),
        (
            "delete with old key",
            Msg::new(b'D')
                .u32(16_384)
                .u8(b'K')
                .u16(2)
                .text("7")
                .u8(b'n')
                .bytes(),
            LogicalMessage::Delete(Delete {
                relation: 16_384,
                old: OldTuple::Key(TupleData(vec![text("7"), Cell::Null])),
            }),
        ),
        (
            "delete with old row",
            Msg::new(b'D').u32(16_384).u8(b'O').u16(1).text("7").bytes(),
            LogicalMessage::Delete(Delete {
                relation: 16_384,
                old: OldTuple::Old(TupleData(vec![text("7")])),
            }),
        ),
        (
            "truncate",
            Msg::new(b'T').u32(2).u8(3).u32(16_384).u32(16_400).bytes(),
            LogicalMessage::Truncate(Truncate {
                options: 3,
                relations: vec![16_384, 16_400],
            }),
        ),
        (
            "transactional message",
            Msg::new(b'M')
                .u8(1)
                .u64(0x20)
                .str("walrelay")
                .i32(5)
                .raw(b"hello")
                .bytes(),
            LogicalMessage::Message(LogicalDecodingMessage {
                transactional: true,
                lsn: Lsn(0x20),
                prefix: "walrelay".into(),
                content: Bytes::from_static(b"hello"),
            }),
        ),
        (
            "non-transactional empty message",
            Msg::new(b'M').u8(0).u64(0x21).str("p").i32(0).bytes(),
            LogicalMessage::Message(LogicalDecodingMessage {
                transactional: false,
                lsn: Lsn(0x21),
                prefix: "p".into(),
                content: Bytes::new(),
            }),
        ),
    ]
}

#[test]
fn decodes_every_message_kind_from_hand_made_bytes() {
    let samples = samples();
    let mut tags: Vec<u8> = samples.iter().map(|(_, _, m)| m.tag()).collect();
    tags.sort_unstable();
    tags.dedup();
    assert_eq!(tags, b"BCDIMORTUY".to_vec(), "a message kind has no sample");
    for (name, bytes, expected) in samples {
        eprintln!("{name}");
        check(bytes, expected);
    }
}

#[test]
fn begin_fields_in_order() {
    let m = decode(Msg::new(b'B').u64(1).i64(2).u32(3).bytes()).unwrap();
    let LogicalMessage::Begin(b) = m else {
        panic!("{m:?}")
    };
    assert_eq!((b.final_lsn, b.commit_time, b.xid), (Lsn(1), 2, 3));
}

#[test]
fn relation_helpers() {
    let (_, bytes, _) = samples().into_iter().find(|s| s.0 == "relation").unwrap();
    let LogicalMessage::Relation(rel) = decode(bytes).unwrap() else {
        panic!()
    };
    assert_eq!(rel.replica_identity(), Some(ReplicaIdentity::Default));
    let keys: Vec<_> = rel
        .key_columns()
        .map(|(i, c)| (i, c.name.as_str()))
        .collect();
    assert_eq!(keys, vec![(0, "id")]);
    assert_eq!(rel.column_index("tag"), Some(2));
    assert_eq!(rel.column_index("nope"), None);
}

#[test]
fn values_are_zero_copy_slices_of_the_input() {
    let bytes = Msg::new(b'I')
        .u32(1)
        .u8(b'N')
        .u16(1)
        .text("payload")
        .bytes();
    let range = bytes.as_ptr_range();
    let LogicalMessage::Insert(ins) = decode(bytes.clone()).unwrap() else {
        panic!()
    };
    let Some(Cell::Text(v)) = ins.new.get(0) else {
        panic!()
    };
    assert!(range.contains(&v.as_ptr()), "value was copied");
    assert_eq!(&v[..], b"payload");

    let bytes = Msg::new(b'M')
        .u8(1)
        .u64(1)
        .str("p")
        .i32(3)
        .raw(b"abc")
        .bytes();
    let range = bytes.as_ptr_range();
    let LogicalMessage::Message(m) = decode(bytes.clone()).unwrap() else {
        panic!()
    };
    assert!(range.contains(&m.content.as_ptr()), "content was copied");
}

#[test]
fn every_truncation_of_every_sample_is_an_error() {
    for (name, bytes, _) in samples() {
        for len in 0..bytes.len() {
            let err =
                decode(bytes.slice(..len)).expect_err(&format!("{name} cut to {len} decoded"));
            match err {
                DecodeError::Empty => assert_eq!(len, 0),
                DecodeError::Truncated { .. }
                | DecodeError::UnterminatedString { .. }
                | DecodeError::CountExceedsRemaining { .. } => {}
                other => panic!("{name} cut to {len}: unexpected error {other}"),
            }
        }
    }
}

#[test]
fn trailing_bytes_are_an_error() {
    for (name, bytes, expected) in samples() {
        let mut longer = bytes.to_vec();
        longer.extend_from_slice(b"xyz");
        let err = decode(Bytes::from(longer)).expect_err(name);
        assert_eq!(
            err,
            DecodeError::TrailingBytes {
                message: expected.name(),
                count: 3,
                offset: bytes.len()
            },
            "{name}"
        );
    }
    let err = decode(Msg::new(b'B').u64(1).i64(2).u32(3).u8(0).bytes()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "1 trailing bytes after Begin message (complete message ends at offset 21)"
    );
}

#[test]
fn error_names_message_field_and_offset() {
    // Relation with one column whose type oid is cut after 2 of its 4 bytes.
    let bytes = Msg::new(b'R')
        .u32(1)
        .str("public")
        .str("t")
        .u8(b'd')
        .u16(1)
        .u8(1)
        .str("identifier")
        .raw(&[0, 0])
        .bytes();
    let err = decode(bytes).unwrap_err();
    assert_eq!(
        err.to_string(),
        "truncated Relation message while reading column 0 type oid (need 4 bytes at offset 29, have 2)"
    );

    let err = decode(
        Msg::new(b'I')
            .u32(1)
            .u8(b'N')
            .u16(1)
            .u8(b't')
            .i32(5)
            .raw(b"ab")
            .bytes(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "truncated Insert message while reading new tuple column 0 value (need 5 bytes at offset 13, have 2)"
    );

    let err = decode(Msg::new(b'O').u64(1).raw(b"no-nul").bytes()).unwrap_err();
    assert!(
        matches!(err, DecodeError::UnterminatedString { offset: 9, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("origin name"), "{err}");
}

#[test]
fn hostile_counts_are_rejected_before_allocating() {
    // 65535 columns declared, 3 bytes left.
    let err = decode(
        Msg::new(b'R')
            .u32(1)
            .str("s")
            .str("t")
            .u8(b'd')
            .u16(u16::MAX)
            .raw(&[1, 0, 0])
            .bytes(),
    )
    .unwrap_err();
    assert_eq!(
        err,
        DecodeError::CountExceedsRemaining {
            message: "Relation",
            what: "columns",
            count: 65_535,
            offset: 10,
            remaining: 3,
            min_each: 10,
        }
    );
    assert!(err.to_string().contains("declares 65535 columns"), "{err}");

    let err = decode(
        Msg::new(b'I')
            .u32(1)
            .u8(b'N')
            .u16(u16::MAX)
            .u8(b'n')
            .bytes(),
    )
    .unwrap_err();
    assert!(matches!(
        err,
        DecodeError::CountExceedsRemaining {
            count: 65_535,
            remaining: 1,
            ..
        }
    ));

    let err = decode(Msg::new(b'T').u32(u32::MAX).u8(0).u32(1).bytes()).unwrap_err();
    assert!(matches!(
        err,
        DecodeError::CountExceedsRemaining {
            what: "relations",
            remaining: 4,
            ..
        }
    ));

    // A huge value length is a plain truncation, not an allocation.
    let err = decode(
        Msg::new(b'I')
            .u32(1)
            .u8(b'N')
            .u16(1)
            .u8(b'b')
            .i32(i32::MAX)
            .bytes(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::Truncated {
                need: 2_147_483_647,
                have: 0,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn negative_lengths_are_rejected() {
    let err = decode(
        Msg::new(b'I')
            .u32(1)
            .u8(b'N')
            .u16(1)
            .u8(b't')
            .i32(-1)
            .bytes(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "negative length -1 in Insert message for new tuple column 0 value length at offset 9"
    );
    let err = decode(Msg::new(b'M').u8(1).u64(1).str("p").i32(i32::MIN).bytes()).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::NegativeLength {
                length: i32::MIN,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn bad_markers_and_tuple_kinds_are_rejected() {
    let err = decode(Msg::new(b'I').u32(1).u8(b'K').u16(0).bytes()).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::UnexpectedByte {
                byte: b'K',
                offset: 5,
                ..
            }
        ),
        "{err}"
    );
    let err = decode(Msg::new(b'U').u32(1).u8(b'X').bytes()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unexpected byte 'X' (0x58) in Update message for tuple marker at offset 5: \
         expected 'K' (old key), 'O' (old row) or 'N' (new tuple)"
    );
    // Old tuple present but the 'N' marker before the new tuple is missing.
    let err = decode(
        Msg::new(b'U')
            .u32(1)
            .u8(b'O')
            .u16(0)
            .u8(b'K')
            .u16(0)
            .bytes(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::UnexpectedByte {
                byte: b'K',
                offset: 8,
                ..
            }
        ),
        "{err}"
    );
    let err = decode(Msg::new(b'D').u32(1).u8(b'N').u16(0).bytes()).unwrap_err();
    assert!(
        matches!(err, DecodeError::UnexpectedByte { byte: b'N', .. }),
        "{err}"
    );
    let err = decode(Msg::new(b'I').u32(1).u8(b'N').u16(2).u8(b'n').u8(0).bytes()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unexpected byte 0x00 in Insert message for new tuple column 1 kind at offset 9: \
         expected 'n' (null), 'u' (unchanged TOAST), 't' (text) or 'b' (binary)"
    );
}

#[test]
fn invalid_utf8_names_the_field() {
    let err = decode(
        Msg::new(b'Y')
            .u32(1)
            .str("ok")
            .raw(&[0xff, 0xfe, 0])
            .bytes(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::InvalidUtf8 {
                message: "Type",
                offset: 8,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("field type name"), "{err}");
    assert!(
        std::error::Error::source(&err).is_some(),
        "utf8 error kept as source"
    );
}

#[test]
fn empty_and_unknown_tags() {
    assert_eq!(decode(Bytes::new()), Err(DecodeError::Empty));
    assert_eq!(
        decode(Bytes::from_static(b"Z")),
        Err(DecodeError::UnknownTag { tag: b'Z' })
    );
    assert_eq!(
        decode(Bytes::from_static(b"Zabc")).unwrap_err().to_string(),
        "unknown pgoutput message tag 'Z' (0x5a)"
    );
    assert_eq!(
        decode(Bytes::from_static(&[0])).unwrap_err().to_string(),
        "unknown pgoutput message tag 0x00"
    );
    // Tags of other protocol layers (XLogData 'w', keepalive 'k') are not pgoutput.
    for tag in [b'w', b'k', 0xff] {
        assert_eq!(
            decode(Bytes::from(vec![tag, 0, 0])),
            Err(DecodeError::UnknownTag { tag })
        );
    }
}

#[test]
fn streaming_and_two_phase_tags_are_not_negotiated() {
    let expected = [
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
    for (tag, name) in expected {
        // With and without a body: the tag alone decides.
        for bytes in [vec![tag], vec![tag, 0, 0, 0, 1, 0]] {
            assert_eq!(
                decode(Bytes::from(bytes)),
                Err(DecodeError::NotNegotiated { tag, name })
            );
        }
    }
    let msg = decode(Bytes::from_static(b"S")).unwrap_err().to_string();
    assert!(
        msg.contains("Stream Start message (tag 'S' (0x53))"),
        "{msg}"
    );
    assert!(
        msg.contains("proto_version 1 without streaming or two_phase"),
        "{msg}"
    );
}

#[test]
fn message_flag_bits_other_than_transactional_are_ignored() {
    let m = decode(Msg::new(b'M').u8(0xfe).u64(1).str("p").i32(0).bytes()).unwrap();
    assert!(matches!(
        m,
        LogicalMessage::Message(LogicalDecodingMessage {
            transactional: false,
            ..
        })
    ));
    let m = decode(Msg::new(b'M').u8(0xff).u64(1).str("p").i32(0).bytes()).unwrap();
    assert!(matches!(
        m,
        LogicalMessage::Message(LogicalDecodingMessage {
            transactional: true,
            ..
        })
    ));
}

#[test]
fn truncate_option_helpers() {
    let t = Truncate {
        options: Truncate::CASCADE,
        relations: vec![],
    };
    assert!(t.cascade() && !t.restart_identity());
    let t = Truncate {
        options: Truncate::RESTART_IDENTITY,
        relations: vec![],
    };
    assert!(!t.cascade() && t.restart_identity());
}

#[test]
fn encode_rejects_unrepresentable_values() {
    let m = LogicalMessage::Origin(Origin {
        commit_lsn: Lsn(1),
        name: "a\0b".into(),
    });
    assert_eq!(
        encode(&m),
        Err(EncodeError::NulInString {
            field: "origin name"
        })
    );
    let m = LogicalMessage::Insert(Insert {
        relation: 1,
        new: TupleData(vec![Cell::Null; 65_536]),
    });
    assert!(matches!(
        encode(&m),
        Err(EncodeError::TooMany { len: 65_536, .. })
    ));
}

// ---- relation cache ----------------------------------------------------

fn relation(oid: Oid, ncols: usize) -> Relation {
    Relation {
        oid,
        namespace: "public".into(),
        name: format!("t{oid}"),
        replica_identity: b'd',
        columns: (0..ncols)
            .map(|i| Column {
                flags: u8::from(i == 0),
                name: format!("c{i}"),
                type_oid: 23,
                type_modifier: -1,
            })
            .collect(),
    }
}

fn insert(oid: Oid, ncols: usize) -> LogicalMessage {
    LogicalMessage::Insert(Insert {
        relation: oid,
        new: TupleData(vec![Cell::Null; ncols]),
    })
}

#[test]
fn cache_rejects_changes_before_their_relation() {
    let mut cache = RelationCache::new();
    let err = cache.observe(&insert(42, 1)).unwrap_err();
    assert_eq!(err, RelationError::Unknown { oid: 42 });
    assert!(
        err.to_string()
            .starts_with("change for relation oid 42 arrived before its Relation message"),
        "{err}"
    );
    assert!(cache.get(42).is_none());
    assert!(cache.require(42).is_err());

    cache
        .observe(&LogicalMessage::Relation(relation(42, 1)))
        .unwrap();
    cache.observe(&insert(42, 1)).unwrap();
    assert_eq!(cache.get(42).unwrap().name, "t42");
    assert_eq!(cache.len(), 1);

    let truncate = LogicalMessage::Truncate(Truncate {
        options: 0,
        relations: vec![42, 43],
    });
    assert_eq!(
        cache.observe(&truncate),
        Err(RelationError::Unknown { oid: 43 })
    );
}

#[test]
fn cache_checks_tuple_width_and_replaces_on_new_relation() {
    let mut cache = RelationCache::new();
    let first = cache.insert(relation(7, 2));
    let err = cache.observe(&insert(7, 3)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "new tuple of relation public.t7 (oid 7) has 3 columns but its Relation message declared 2; \
         the stream is inconsistent: restart replication from the last confirmed position"
    );
    let delete = LogicalMessage::Delete(Delete {
        relation: 7,
        old: OldTuple::Key(TupleData(vec![Cell::Null])),
    });
    assert!(matches!(
        cache.observe(&delete),
        Err(RelationError::ColumnCountMismatch {
            tuple: "old key tuple",
            expected: 2,
            actual: 1,
            ..
        })
    ));

    // ALTER TABLE ... ADD COLUMN: a new Relation message replaces the old one;
    // holders of the old Arc keep the shape they decoded with.
    cache
        .observe(&LogicalMessage::Relation(relation(7, 3)))
        .unwrap();
    cache.observe(&insert(7, 3)).unwrap();
    assert_eq!(first.columns.len(), 2);
    assert_eq!(cache.get(7).unwrap().columns.len(), 3);

    let update = LogicalMessage::Update(Update {
        relation: 7,
        old: Some(OldTuple::Old(TupleData(vec![Cell::Null; 3]))),
        new: TupleData(vec![Cell::UnchangedToast; 3]),
    });
    cache.observe(&update).unwrap();

    assert!(cache.remove(7).is_some());
    cache.insert(relation(8, 0));
    cache.clear();
    assert!(cache.is_empty());
}

// ---- property tests -----------------------------------------------------

fn name() -> impl Strategy<Value = String> {
    "[^\u{0}]{0,12}"
}

fn cell() -> impl Strategy<Value = Cell> {
    prop_oneof![
        Just(Cell::Null),
        Just(Cell::UnchangedToast),
        proptest::collection::vec(any::<u8>(), 0..20).prop_map(|v| Cell::Text(Bytes::from(v))),
        proptest::collection::vec(any::<u8>(), 0..20).prop_map(|v| Cell::Binary(Bytes::from(v))),
    ]
}

fn tuple() -> impl Strategy<Value = TupleData> {
    proptest::collection::vec(cell(), 0..8).prop_map(TupleData)
}

fn old_tuple() -> impl Strategy<Value = OldTuple> {
    prop_oneof![
        tuple().prop_map(OldTuple::Key),
        tuple().prop_map(OldTuple::Old)
    ]
}

fn column() -> impl Strategy<Value = Column> {
    (any::<u8>(), name(), any::<u32>(), any::<i32>()).prop_map(
        |(flags, name, type_oid, type_modifier)| Column {
            flags,
            name,
            type_oid,
            type_modifier,
        },
    )
}

fn message() -> impl Strategy<Value = LogicalMessage> {
    prop_oneof![
        (any::<u64>(), any::<i64>(), any::<u32>()).prop_map(|(l, t, x)| LogicalMessage::Begin(
            Begin {
                final_lsn: Lsn(l),
                commit_time: t,
                xid: x
            }
        )),
        (any::<u8>(), any::<u64>(), any::<u64>(), any::<i64>()).prop_map(|(f, c, e, t)| {
            LogicalMessage::Commit(Commit {
                flags: f,
                commit_lsn: Lsn(c),
                end_lsn: Lsn(e),
                commit_time: t,
            })
        }),
        (any::<u64>(), name()).prop_map(|(l, n)| LogicalMessage::Origin(Origin {
            commit_lsn: Lsn(l),
            name: n
        })),
        (
            any::<u32>(),
            name(),
            name(),
            any::<u8>(),
            proptest::collection::vec(column(), 0..6)
        )
            .prop_map(|(oid, namespace, name, replica_identity, columns)| {
                LogicalMessage::Relation(Relation {
                    oid,
                    namespace,
                    name,
                    replica_identity,
                    columns,
                })
            }),
        (any::<u32>(), name(), name()).prop_map(|(oid, namespace, name)| {
            LogicalMessage::Type(TypeMessage {
                oid,
                namespace,
                name,
            })
        }),
        (any::<u32>(), tuple())
            .prop_map(|(relation, new)| LogicalMessage::Insert(Insert { relation, new })),
        (any::<u32>(), proptest::option::of(old_tuple()), tuple())
            .prop_map(|(relation, old, new)| LogicalMessage::Update(Update { relation, old, new })),
        (any::<u32>(), old_tuple())
            .prop_map(|(relation, old)| LogicalMessage::Delete(Delete { relation, old })),
        (any::<u8>(), proptest::collection::vec(any::<u32>(), 0..6)).prop_map(
            |(options, relations)| LogicalMessage::Truncate(Truncate { options, relations })
        ),
        (
            any::<bool>(),
            any::<u64>(),
            name(),
            proptest::collection::vec(any::<u8>(), 0..32)
        )
            .prop_map(|(transactional, l, prefix, content)| {
                LogicalMessage::Message(LogicalDecodingMessage {
                    transactional,
                    lsn: Lsn(l),
                    prefix,
                    content: Bytes::from(content),
                })
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn decode_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode(Bytes::from(bytes));
    }

    #[test]
    fn decode_never_panics_on_bytes_with_a_valid_tag(
        tag in proptest::sample::select(b"BCORYIUDTM".to_vec()),
        body in proptest::collection::vec(any::<u8>(), 0..128),
    ) {
        let mut bytes = vec![tag];
        bytes.extend(body);
        let _ = decode(Bytes::from(bytes));
    }

    #[test]
    fn encode_decode_round_trip(msg in message()) {
        let bytes = encode(&msg).unwrap();
        prop_assert_eq!(decode(bytes.clone()).unwrap(), msg);
        // and decode → encode gives the same bytes back
        prop_assert_eq!(encode(&decode(bytes.clone()).unwrap()).unwrap(), bytes);
    }

    #[test]
    fn truncated_valid_messages_are_errors(msg in message(), cut in any::<prop::sample::Index>()) {
        let bytes = encode(&msg).unwrap();
        let len = cut.index(bytes.len());
        prop_assert!(decode(bytes.slice(..len)).is_err());
    }

    #[test]
    fn extended_valid_messages_are_errors(msg in message(), extra in proptest::collection::vec(any::<u8>(), 1..8)) {
        let mut bytes = encode(&msg).unwrap().to_vec();
        bytes.extend(extra);
        let is_trailing = matches!(decode(Bytes::from(bytes)), Err(DecodeError::TrailingBytes { .. }));
        prop_assert!(is_trailing);
    }

    #[test]
    fn mutated_valid_messages_never_panic(
        msg in message(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = encode(&msg).unwrap().to_vec();
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        if let Ok(m) = decode(Bytes::from(bytes)) {
            // whatever decodes must encode again
            prop_assert!(encode(&m).is_ok());
        }
    }
}
