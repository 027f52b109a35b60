use super::*;
use crate::pgoutput::tests::samples;

/// Hand-made bytes of each frame message, as PostgreSQL 14's
/// `logicalrep_write_stream_*` write them.
#[test]
fn frame_messages_from_hand_made_bytes() {
    let cases: [(&[u8], StreamControl); 4] = [
        (
            b"S\x00\x00\x02\x9a\x01",
            StreamControl::Start {
                xid: 666,
                first_segment: true,
            },
        ),
        (b"E", StreamControl::Stop),
        (
            b"c\x00\x00\x02\x9a\x00\x00\x00\x00\x01\x00\x00\x01\x00\x00\x00\x00\x01\x00\x00\x01\x80\x00\x00\x00\x00\x00\x00\x00\x2a",
            StreamControl::Commit(StreamCommit {
                xid: 666,
                flags: 0,
                commit_lsn: Lsn(0x1_0000_0100),
                end_lsn: Lsn(0x1_0000_0180),
                commit_time: 42,
            }),
        ),
        (
            b"A\x00\x00\x02\x9a\x00\x00\x02\x9b",
            StreamControl::Abort {
                xid: 666,
                subxid: 667,
            },
        ),
    ];
    for (bytes, expected) in cases {
        let bytes = Bytes::from_static(bytes);
        assert_eq!(decode_stream_control(&bytes), Ok(Some(expected)));
        assert_eq!(encode_stream_control(&expected), bytes);
        for len in 1..bytes.len() {
            assert!(
                decode_stream_control(&bytes.slice(..len)).is_err(),
                "{expected:?} cut to {len}"
            );
        }
        let mut longer = bytes.to_vec();
        longer.push(0);
        assert!(decode_stream_control(&Bytes::from(longer)).is_err());
    }
    assert_eq!(decode_stream_control(&Bytes::from_static(b"B")), Ok(None));
    assert_eq!(
        decode_stream_control(&Bytes::new()),
        Err(DecodeError::Empty)
    );
}

/// Every message kind, sent inside a block: the xid is read, and the rest
/// decodes to what protocol 1 sends; cut anywhere, it is an error.
#[test]
fn a_streamed_change_is_protocol_one_after_its_xid() {
    for (name, bytes, expected) in samples() {
        let inside = streamed(0xdead_beef, &bytes);
        if matches!(expected.tag(), b'B' | b'C') {
            // Never inside a block.
            assert!(streamed_xid(&inside).is_err(), "{name}");
            continue;
        }
        let xid = streamed_xid(&inside).unwrap_or_else(|e| panic!("{name}: {e}"));
        let carries = expected.tag() != b'O';
        assert_eq!(xid, carries.then_some(0xdead_beef), "{name}");
        assert_eq!(
            decode_streamed(inside.clone()).unwrap_or_else(|e| panic!("{name}: {e}")),
            expected,
            "{name}"
        );
        for len in 0..inside.len() {
            assert!(
                decode_streamed(inside.slice(..len)).is_err(),
                "{name} cut to {len} decoded"
            );
        }
    }
}
