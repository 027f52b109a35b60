use super::*;

fn chunk(id: u32, part: u32, key: &str) -> SnapshotChunk {
    SnapshotChunk {
        id,
        part,
        last_key: Some(vec![Some(key.to_owned())]),
    }
}

fn key(k: &str) -> Vec<Option<String>> {
    vec![Some(k.to_owned())]
}

/// A part moves only over closed, fully acknowledged batches, in order:
/// an acknowledged later batch waits for an earlier one.
#[test]
fn a_part_moves_only_over_a_prefix_of_complete_batches() {
    let mut p = Parts::new(BTreeMap::new());
    let (a, b) = (chunk(0, 0, "a"), chunk(1, 0, "b"));
    p.sent(0, &a);
    p.sent(0, &a);
    p.sent(0, &b); // closes a
    p.close_current(); // closes b
    // b acknowledged first: a is not, so nothing is held.
    assert_eq!(p.acked(1), Some(0));
    assert!(p.held().is_empty());
    assert!(!p.take_moved());
    assert_eq!(p.acked(0), Some(0));
    assert!(p.held().is_empty(), "a has two rows");
    p.acked(0);
    // a and then b retire: b's key is where the part resumes.
    assert_eq!(p.held().get(&(0, 0)), Some(&key("b")));
    assert!(p.take_moved());
    assert!(!p.take_moved());
}

/// A batch still being handed out is not complete, however acknowledged.
#[test]
fn an_open_batch_does_not_count() {
    let mut p = Parts::new(BTreeMap::new());
    let a = chunk(0, 0, "a");
    p.sent(0, &a);
    p.acked(0);
    assert!(p.held().is_empty());
    p.close_current();
    assert_eq!(p.held().get(&(0, 0)), Some(&key("a")));
}

/// Parts (readers) and tables move apart; a resumed position stays until
/// a batch moves it; a batch without a key moves nothing.
#[test]
fn parts_are_apart_and_resumed_positions_stay() {
    let mut p = Parts::new(BTreeMap::from([((1, 1), key("r"))]));
    p.sent(0, &chunk(0, 0, "x"));
    p.sent(1, &chunk(1, 1, "s"));
    p.sent(
        0,
        &SnapshotChunk {
            id: 2,
            part: 1,
            last_key: None,
        },
    );
    p.close_current();
    p.acked(2);
    assert_eq!(p.held().get(&(0, 1)), None, "no key, no position");
    p.acked(0);
    assert_eq!(p.held().get(&(0, 0)), Some(&key("x")));
    assert_eq!(p.held().get(&(1, 1)), Some(&key("r")), "not yet moved");
    p.acked(1);
    assert_eq!(p.held().get(&(1, 1)), Some(&key("s")));
    assert_eq!(p.acked(99), None, "an unknown batch");
}
