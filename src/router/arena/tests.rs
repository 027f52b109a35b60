use super::*;

#[test]
fn pieces_keep_their_bytes_while_later_pieces_are_written() {
    let mut arena = Arena::new(64);
    let mut kept = Vec::new();
    for i in 0..1_000u32 {
        let piece = if i % 3 == 0 {
            arena.format(format_args!("0/{i:X}:{i}"))
        } else {
            arena.copy(format!("value-{i}-{}", "x".repeat(i as usize % 200)).as_bytes())
        };
        kept.push((i, piece));
    }
    for (i, piece) in &kept {
        let want = if i % 3 == 0 {
            format!("0/{i:X}:{i}")
        } else {
            format!("value-{i}-{}", "x".repeat(*i as usize % 200))
        };
        assert_eq!(piece, want.as_bytes(), "piece {i}");
    }
}

#[test]
fn a_piece_larger_than_the_chunk_is_whole_and_not_kept() {
    let mut arena = Arena::new(64);
    let small = arena.copy(b"small");
    let big = vec![7u8; 10_000];
    let copied = arena.copy(&big);
    assert_eq!(copied, big);
    assert_eq!(small, &b"small"[..]);
    // It went around the arena: the next piece follows the small one in
    // the same chunk.
    let next = arena.copy(b"next");
    assert_eq!(
        next.as_ptr() as usize,
        small.as_ptr() as usize + small.len()
    );
}

#[test]
fn a_long_format_grows_the_chunk() {
    let mut arena = Arena::new(64);
    let long = "y".repeat(5_000);
    let text = arena.format(format_args!("{long}:{}", 42));
    assert_eq!(text, format!("{long}:42").as_bytes());
}

#[test]
fn a_chunk_is_reused_once_its_pieces_are_dropped() {
    let mut arena = Arena::new(4096);
    let first = arena.copy(b"first");
    let start = first.as_ptr() as usize;
    drop(first);
    // 100 pieces of 100 bytes: more than two chunks' worth, each piece
    // dropped before the next one is copied, so every time the chunk
    // is full nothing refers to it and it is reused from its start.
    for i in 0..100 {
        let piece = arena.copy(&[1u8; 100]);
        let at = piece.as_ptr() as usize;
        assert!(
            (start..start + 4096).contains(&at),
            "piece {i} is outside the first chunk: a new allocation"
        );
    }
}

#[test]
fn a_chunk_still_referred_to_is_not_overwritten() {
    let mut arena = Arena::new(64);
    let kept = arena.copy(&[9u8; 60]);
    for _ in 0..10 {
        drop(arena.copy(&[1u8; 60]));
    }
    assert_eq!(kept, vec![9u8; 60]);
}

#[test]
fn two_parts_are_one_piece() {
    let mut a = Arena::new(64);
    let x = a.copy2(b"\0abc", b"body");
    let y = a.copy2(b"", b"z");
    assert_eq!((&x[..], &y[..]), (&b"\0abcbody"[..], &b"z"[..]));
    // Larger than a chunk: an allocation of its own, the same bytes.
    let big = vec![7u8; 100];
    assert_eq!(&a.copy2(b"\0", &big)[..], [&[0u8][..], &big[..]].concat());
}
