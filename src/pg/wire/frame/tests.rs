use super::*;

fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

#[test]
fn parses_copy_both_and_waits_for_partial_frames() {
    let bytes = frame(b'W', &[0, 0, 0]);
    let mut buf = BytesMut::new();
    for (i, b) in bytes.iter().enumerate() {
        buf.extend_from_slice(&[*b]);
        let r = parse_frame(&mut buf, 1024).expect("no error");
        assert_eq!(r.is_some(), i == bytes.len() - 1, "at byte {i}");
    }
    assert!(buf.is_empty());
}

#[test]
fn copy_data_is_handed_to_postgres_protocol() {
    let mut buf = BytesMut::from(&frame(b'd', b"wxyz")[..]);
    match parse_frame(&mut buf, 1024) {
        Ok(Some(Backend::Message(Message::CopyData(body)))) => {
            assert_eq!(body.data(), b"wxyz")
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn rejects_oversized_message_before_buffering() {
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&[b'd', 0x7f, 0xff, 0xff, 0xff]);
    match parse_frame(&mut buf, 1 << 20) {
        Err(WireError::MessageTooLarge { tag: 'd', max, .. }) => assert_eq!(max, 1 << 20),
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        buf.capacity() < 1 << 20,
        "buffer grew to {}",
        buf.capacity()
    );
}

#[test]
fn rejects_impossible_length() {
    let mut buf = BytesMut::from(&[b'd', 0, 0, 0, 2][..]);
    assert!(matches!(
        parse_frame(&mut buf, 1024),
        Err(WireError::Protocol(_))
    ));
}

#[test]
fn unknown_tag_is_an_error_not_a_panic() {
    let mut buf = BytesMut::from(&frame(b'?', b"")[..]);
    assert!(matches!(
        parse_frame(&mut buf, 1024),
        Err(WireError::Protocol(_))
    ));
}
