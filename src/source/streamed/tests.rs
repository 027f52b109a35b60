use proptest::prelude::*;

use super::*;

const TOP: u32 = 1000;

fn dir() -> PathBuf {
    std::env::temp_dir()
}

fn msg(n: u32) -> Bytes {
    Bytes::from(format!("message {n}").into_bytes())
}

fn replay_all(mut r: Replay) -> Vec<(Lsn, Bytes)> {
    let mut out = Vec::new();
    while let Some(m) = r.next().expect("replay") {
        out.push(m);
    }
    assert_eq!(r.left(), 0);
    out
}

#[test]
fn a_transaction_comes_out_whole_at_its_commit_in_the_order_received() {
    let mut s = Streamed::new(1 << 20, dir());
    s.start(TOP, true, Lsn(0)).unwrap();
    s.hold(Some(TOP), Lsn(1), msg(1)).unwrap();
    s.hold(None, Lsn(2), msg(2)).unwrap();
    s.stop().unwrap();
    // Another transaction's block between two of this one's.
    s.start(TOP + 1, true, Lsn(0)).unwrap();
    s.hold(Some(TOP + 1), Lsn(3), msg(99)).unwrap();
    s.stop().unwrap();
    s.start(TOP, false, Lsn(0)).unwrap();
    s.hold(Some(TOP), Lsn(4), msg(3)).unwrap();
    s.stop().unwrap();
    let got = replay_all(s.commit(TOP).unwrap());
    assert_eq!(
        got,
        vec![(Lsn(1), msg(1)), (Lsn(2), msg(2)), (Lsn(4), msg(3))]
    );
    assert_eq!(s.open_count(), 1);
    s.abort(TOP + 1, TOP + 1).unwrap();
    assert_eq!(s.open_count(), 0);
    assert_eq!(s.in_memory, 0, "an abort frees what it held");
}

#[test]
fn frames_out_of_order_are_errors() {
    let mut s = Streamed::new(1 << 20, dir());
    let err = |r: Result<(), StreamedError>| match r {
        Err(StreamedError::OutOfOrder(what)) => what,
        other => panic!("{other:?}"),
    };
    assert!(err(s.hold(Some(TOP), Lsn(1), msg(1))).contains("outside"));
    assert!(err(s.stop()).contains("outside a block"));
    assert!(err(s.start(TOP, false, Lsn(0))).contains("first block was not received"));
    s.start(TOP, true, Lsn(0)).unwrap();
    assert!(err(s.start(TOP + 1, true, Lsn(0))).contains("inside the block"));
    assert!(matches!(s.commit(TOP), Err(StreamedError::OutOfOrder(_))));
    s.stop().unwrap();
    assert!(err(s.start(TOP, true, Lsn(0))).contains("open already"));
    assert!(matches!(
        s.commit(TOP + 7),
        Err(StreamedError::OutOfOrder(_))
    ));
    // Aborting what never streamed is nothing to do.
    s.abort(TOP + 7, TOP + 7).unwrap();
    s.abort(TOP, TOP + 8).unwrap();
}

#[test]
fn past_the_memory_bound_messages_move_to_a_file_and_come_back_in_order() {
    let limit = 300;
    let mut s = Streamed::new(limit, dir());
    s.start(TOP, true, Lsn(0)).unwrap();
    let mut sent = Vec::new();
    for n in 0..100 {
        s.hold(Some(TOP), Lsn(u64::from(n)), msg(n)).unwrap();
        sent.push((Lsn(u64::from(n)), msg(n)));
        assert!(s.in_memory <= limit, "{} held in memory", s.in_memory);
    }
    s.stop().unwrap();
    let (spilled, committed) = s.take_counts();
    assert!(spilled > 0);
    assert_eq!(committed, 0);
    assert_eq!(replay_all(s.commit(TOP).unwrap()), sent);
    assert_eq!(s.take_counts(), (0, 1));
}

/// A savepoint's life in a transaction, as the model below plays it.
#[derive(Debug, Clone)]
enum Step {
    /// A change by the innermost open (sub)transaction.
    Change,
    /// `SAVEPOINT`: a new subtransaction inside the innermost.
    Savepoint,
    /// `RELEASE`: the innermost subtransaction ends into its parent.
    Release,
    /// `ROLLBACK TO`: the innermost subtransaction aborts, with the
    /// subtransactions that ended into it.
    Rollback,
    /// `Stream Stop`, then `Stream Start` (the walsender's blocks).
    NewBlock,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => Just(Step::Change),
        2 => Just(Step::Savepoint),
        1 => Just(Step::Release),
        1 => Just(Step::Rollback),
        1 => Just(Step::NewBlock),
    ]
}

proptest! {
    /// Against a model that knows who made each change: what comes out at
    /// the commit is exactly the changes of the top transaction and of
    /// subtransactions that did not abort (nor did an ancestor), in order,
    /// whatever the memory bound.
    #[test]
    fn only_changes_of_subtransactions_that_did_not_abort_come_out(
        steps in prop::collection::vec(step(), 0..200),
        limit in prop_oneof![Just(0u64), 1u64..400, Just(1u64 << 20)],
    ) {
        let mut s = Streamed::new(limit, dir());
        s.start(TOP, true, Lsn(0)).unwrap();
        // The open subtransactions, innermost last; each subxid's parent.
        let mut stack: Vec<u32> = vec![TOP];
        let mut parent: HashMap<u32, u32> = HashMap::new();
        let mut next_xid = TOP + 1;
        let mut made: Vec<(u32, u32)> = Vec::new(); // (maker, message number)
        let mut aborted: Vec<u32> = Vec::new();
        for (n, step) in steps.iter().enumerate() {
            let n = n as u32;
            match step {
                Step::Change => {
                    let me = *stack.last().unwrap();
                    s.hold(Some(me), Lsn(u64::from(n)), msg(n)).unwrap();
                    made.push((me, n));
                }
                Step::Savepoint => {
                    parent.insert(next_xid, *stack.last().unwrap());
                    stack.push(next_xid);
                    next_xid += 1;
                }
                Step::Release if stack.len() > 1 => {
                    stack.pop();
                }
                Step::Rollback if stack.len() > 1 => {
                    // As PostgreSQL decodes the abort record: a Stream Abort
                    // for each subtransaction that ended into this one and
                    // sent a change, then for this one.
                    let sub = stack.pop().unwrap();
                    let under = |mut x: u32| loop {
                        match parent.get(&x) {
                            Some(&p) if p == sub => return true,
                            Some(&p) => x = p,
                            None => return false,
                        }
                    };
                    let mut children: Vec<u32> = made
                        .iter()
                        .map(|&(maker, _)| maker)
                        .filter(|&m| under(m))
                        .collect();
                    children.sort_unstable();
                    children.dedup();
                    for child in children {
                        s.abort(TOP, child).unwrap();
                    }
                    s.abort(TOP, sub).unwrap();
                    aborted.push(sub);
                }
                Step::Release | Step::Rollback => {}
                Step::NewBlock => {
                    s.stop().unwrap();
                    s.start(TOP, false, Lsn(0)).unwrap();
                }
            }
            prop_assert!(s.in_memory <= limit);
        }
        s.stop().unwrap();
        let dead = |mut x: u32| loop {
            if aborted.contains(&x) {
                return true;
            }
            match parent.get(&x) {
                Some(&p) => x = p,
                None => return false,
            }
        };
        let expected: Vec<(Lsn, Bytes)> = made
            .iter()
            .filter(|(maker, _)| !dead(*maker))
            .map(|&(_, n)| (Lsn(u64::from(n)), msg(n)))
            .collect();
        prop_assert_eq!(replay_all(s.commit(TOP).unwrap()), expected);
        prop_assert_eq!(s.in_memory, 0);
    }
}

/// Messages larger than a read chunk, and many around chunk edges, come
/// back whole from the file.
#[test]
fn messages_across_and_beyond_read_chunks_come_back_whole() {
    let mut s = Streamed::new(0, dir());
    s.start(TOP, true, Lsn(0)).unwrap();
    let mut sent = Vec::new();
    let big = Bytes::from(vec![7u8; 3 * READ_CHUNK + 5]);
    for n in 0..3000u32 {
        let data = if n % 1000 == 500 {
            big.clone()
        } else {
            Bytes::from(vec![(n % 251) as u8; 300 + (n as usize % 977)])
        };
        s.hold(Some(TOP), Lsn(u64::from(n)), data.clone()).unwrap();
        sent.push((Lsn(u64::from(n)), data));
    }
    s.stop().unwrap();
    assert_eq!(replay_all(s.commit(TOP).unwrap()), sent);
}
