use super::*;

const ROOMY: Limits = Limits {
    max_in_flight_records: u64::MAX,
    max_in_flight_bytes: u64::MAX,
};

type TestResult = Result<(), CheckpointError>;

fn at(start: u64) -> Checkpoint {
    Checkpoint::new(Lsn(start), ROOMY)
}

/// Begins a transaction and sends `records` records of 10 bytes each.
fn txn_with(cp: &mut Checkpoint, records: usize) -> Result<TxnId, CheckpointError> {
    let txn = cp.begin()?;
    for _ in 0..records {
        cp.record_sent(txn, 10)?;
    }
    Ok(txn)
}

// Invariant 1: confirm only the contiguous fully-acked prefix.

// Invariant 7: the commit time goes with the position.

#[test]
fn commit_time_follows_the_frontier_through_folds_not_keepalives() -> TestResult {
    let mut cp = at(100);
    let a = txn_with(&mut cp, 1)?;
    cp.commit_at(a, Lsn(200), Some(1_000))?;
    // Complete at once, behind `a`: folded into it.
    let b = cp.begin()?;
    cp.commit_at(b, Lsn(300), Some(2_000))?;
    assert_eq!(cp.confirmed_commit_ms(), None);
    assert_eq!(cp.committed_commit_ms(), Some(2_000));
    cp.ack(a, 10)?;
    assert_eq!(cp.confirmed(), Lsn(300));
    assert_eq!(cp.confirmed_commit_ms(), Some(2_000));
    // An idle keepalive moves the position, never the time.
    cp.keepalive(Lsn(900));
    assert_eq!(cp.confirmed(), Lsn(900));
    assert_eq!(cp.confirmed_commit_ms(), Some(2_000));
    // A heartbeat (no commit time) keeps the newest one.
    let h = cp.begin()?;
    cp.commit(h, Lsn(950))?;
    assert_eq!(cp.confirmed_commit_ms(), Some(2_000));
    Ok(())
}

#[test]
fn out_of_order_acks_across_three_txns() -> TestResult {
    let mut cp = at(100);
    let a = txn_with(&mut cp, 2)?;
    cp.commit(a, Lsn(200))?;
    let b = txn_with(&mut cp, 1)?;
    cp.commit(b, Lsn(300))?;
    let c = txn_with(&mut cp, 2)?;
    cp.commit(c, Lsn(400))?;
    assert_eq!(cp.pending_txns(), 3);

    // The newest completes first: nothing moves.
    cp.ack(c, 10)?;
    cp.ack(c, 10)?;
    assert_eq!(cp.confirmed(), Lsn(100));
    // The middle completes: still blocked by the oldest.
    cp.ack(b, 10)?;
    assert_eq!(cp.confirmed(), Lsn(100));
    // Half of the oldest: still blocked.
    cp.ack(a, 10)?;
    assert_eq!(cp.confirmed(), Lsn(100));
    // The oldest completes: the whole prefix is confirmed at once.
    cp.ack(a, 10)?;
    assert_eq!(cp.confirmed(), Lsn(400));
    assert_eq!(cp.pending_txns(), 0);
    assert_eq!(cp.in_flight_records(), 0);
    assert_eq!(cp.in_flight_bytes(), 0);
    Ok(())
}

/// `committed` is the newest commit (everything up to it sent),
/// acknowledged or not, and never inside an open transaction.
#[test]
fn committed_is_the_newest_commit_sent_not_yet_acked() -> TestResult {
    let mut cp = at(100);
    assert_eq!(cp.committed(), Lsn(100));
    let a = txn_with(&mut cp, 2)?;
    assert_eq!(
        cp.committed(),
        Lsn(100),
        "an open transaction is not committed"
    );
    cp.commit(a, Lsn(200))?;
    assert_eq!((cp.committed(), cp.confirmed()), (Lsn(200), Lsn(100)));
    let b = txn_with(&mut cp, 1)?;
    cp.keepalive(Lsn(900));
    assert_eq!(
        cp.committed(),
        Lsn(200),
        "a keepalive with records pending moves nothing"
    );
    cp.commit(b, Lsn(300))?;
    cp.ack(a, 10)?;
    cp.ack(a, 10)?;
    cp.ack(b, 10)?;
    assert_eq!((cp.committed(), cp.confirmed()), (Lsn(300), Lsn(300)));
    cp.keepalive(Lsn(400));
    assert_eq!(cp.committed(), Lsn(400));
    Ok(())
}

#[test]
fn frontier_stops_at_the_first_incomplete_txn() -> TestResult {
    let mut cp = at(0);
    let a = txn_with(&mut cp, 1)?;
    cp.commit(a, Lsn(10))?;
    let b = txn_with(&mut cp, 1)?;
    cp.commit(b, Lsn(20))?;
    let c = txn_with(&mut cp, 1)?;
    cp.commit(c, Lsn(30))?;
    cp.ack(a, 10)?;
    assert_eq!(cp.confirmed(), Lsn(10));
    cp.ack(c, 10)?;
    assert_eq!(cp.confirmed(), Lsn(10));
    cp.ack(b, 10)?;
    assert_eq!(cp.confirmed(), Lsn(30));
    Ok(())
}

#[test]
fn fully_acked_open_txn_is_not_complete_until_commit() -> TestResult {
    let mut cp = at(0);
    let a = txn_with(&mut cp, 2)?;
    cp.ack(a, 10)?;
    cp.ack(a, 10)?;
    assert_eq!(cp.in_flight_records(), 0);
    assert_eq!(cp.confirmed(), Lsn(0));
    // More records may still come: the open transaction is not done.
    cp.record_sent(a, 10)?;
    cp.commit(a, Lsn(50))?;
    assert_eq!(cp.confirmed(), Lsn(0));
    cp.ack(a, 10)?;
    assert_eq!(cp.confirmed(), Lsn(50));
    Ok(())
}

#[test]
fn empty_txn_completes_at_commit() -> TestResult {
    let mut cp = at(0);
    let a = cp.begin()?;
    assert_eq!(cp.pending_txns(), 1);
    cp.commit(a, Lsn(10))?;
    assert_eq!(cp.confirmed(), Lsn(10));
    assert_eq!(cp.pending_txns(), 0);
    Ok(())
}

#[test]
fn empty_txns_wait_behind_an_unacked_one() -> TestResult {
    let mut cp = at(0);
    let a = txn_with(&mut cp, 1)?;
    cp.commit(a, Lsn(10))?;
    for end in [20, 30, 40] {
        let e = cp.begin()?;
        cp.commit(e, Lsn(end))?;
        assert_eq!(
            cp.confirmed(),
            Lsn(0),
            "empty txn ending at {end} jumped the queue"
        );
    }
    cp.ack(a, 10)?;
    assert_eq!(cp.confirmed(), Lsn(40));
    assert_eq!(cp.pending_txns(), 0);
    Ok(())
}

#[test]
fn empty_txns_behind_a_stuck_one_do_not_grow_the_queue() -> TestResult {
    let mut cp = at(0);
    let stuck = txn_with(&mut cp, 1)?;
    cp.commit(stuck, Lsn(10))?;
    for i in 0..10_000u64 {
        let e = cp.begin()?;
        cp.commit(e, Lsn(20 + i))?;
    }
    assert_eq!(cp.pending_txns(), 1);
    assert_eq!(cp.confirmed(), Lsn(0));
    cp.ack(stuck, 10)?;
    assert_eq!(cp.confirmed(), Lsn(20 + 9_999));
    Ok(())
}

#[test]
fn completed_txns_fold_only_from_the_back() -> TestResult {
    let mut cp = at(0);
    let a = txn_with(&mut cp, 1)?;
    cp.commit(a, Lsn(10))?;
    let b = txn_with(&mut cp, 1)?;
    cp.commit(b, Lsn(20))?;
    let c = txn_with(&mut cp, 1)?;
    cp.commit(c, Lsn(30))?;
    // b completes in the middle: stays (no scan, no removal from the middle).
    cp.ack(b, 10)?;
    assert_eq!(cp.pending_txns(), 3);
    // c completes at the back: folds into b, and b (complete) into a.
    cp.ack(c, 10)?;
    assert_eq!(cp.pending_txns(), 1);
    assert_eq!(cp.confirmed(), Lsn(0));
    // An ack for a folded transaction is an error, not a double count.
    assert_eq!(cp.ack(c, 10), Err(CheckpointError::TooManyAcks { txn: c }));
    // A new transaction reuses c's slot; acks for it must not hit c.
    let d = txn_with(&mut cp, 1)?;
    assert_eq!(cp.ack(b, 10), Err(CheckpointError::TooManyAcks { txn: b }));
    cp.commit(d, Lsn(40))?;
    cp.ack(a, 10)?;
    assert_eq!(cp.confirmed(), Lsn(30));
    cp.ack(d, 10)?;
    assert_eq!(cp.confirmed(), Lsn(40));
    Ok(())
}

// Invariant 2: monotonic.

#[test]
fn resent_txn_below_start_does_not_move_backwards() -> TestResult {
    let mut cp = at(1_000);
    let old = txn_with(&mut cp, 1)?;
    cp.commit(old, Lsn(500))?;
    cp.ack(old, 10)?;
    assert_eq!(cp.confirmed(), Lsn(1_000));
    let empty = cp.begin()?;
    cp.commit(empty, Lsn(600))?;
    assert_eq!(cp.confirmed(), Lsn(1_000));
    let new = txn_with(&mut cp, 1)?;
    cp.commit(new, Lsn(1_100))?;
    cp.ack(new, 10)?;
    assert_eq!(cp.confirmed(), Lsn(1_100));
    Ok(())
}

#[test]
fn lower_end_lsn_after_a_higher_one_does_not_move_backwards() -> TestResult {
    let mut cp = at(0);
    let a = txn_with(&mut cp, 1)?;
    cp.commit(a, Lsn(500))?;
    let b = txn_with(&mut cp, 1)?;
    cp.commit(b, Lsn(300))?;
    cp.ack(b, 10)?; // folds into a
    cp.ack(a, 10)?;
    assert_eq!(cp.confirmed(), Lsn(500));
    Ok(())
}

#[test]
fn older_keepalive_does_not_move_backwards() {
    let mut cp = at(1_000);
    cp.keepalive(Lsn(999));
    assert_eq!(cp.confirmed(), Lsn(1_000));
    cp.keepalive(Lsn(2_000));
    cp.keepalive(Lsn(1_500));
    assert_eq!(cp.confirmed(), Lsn(2_000));
}

// Invariant 3: idle advance only when idle.

#[test]
fn keepalive_advances_when_idle() -> TestResult {
    let mut cp = at(100);
    cp.keepalive(Lsn(150));
    assert_eq!(cp.confirmed(), Lsn(150));
    let a = txn_with(&mut cp, 1)?;
    cp.commit(a, Lsn(200))?;
    cp.ack(a, 10)?;
    cp.keepalive(Lsn(250));
    assert_eq!(cp.confirmed(), Lsn(250));
    Ok(())
}

#[test]
fn keepalive_refused_while_a_txn_is_open() -> TestResult {
    let mut cp = at(100);
    let a = cp.begin()?;
    cp.keepalive(Lsn(150));
    assert_eq!(cp.confirmed(), Lsn(100));
    cp.commit(a, Lsn(120))?;
    assert_eq!(cp.confirmed(), Lsn(120));
    Ok(())
}

#[test]
fn keepalive_refused_while_records_in_flight() -> TestResult {
    let mut cp = at(100);
    let a = txn_with(&mut cp, 1)?;
    cp.commit(a, Lsn(200))?;
    cp.keepalive(Lsn(300));
    assert_eq!(cp.confirmed(), Lsn(100));
    Ok(())
}

#[test]
fn keepalive_refused_while_a_committed_txn_waits_behind_an_unacked_one() -> TestResult {
    let mut cp = at(100);
    let a = txn_with(&mut cp, 1)?;
    cp.commit(a, Lsn(200))?;
    let b = txn_with(&mut cp, 1)?;
    cp.commit(b, Lsn(300))?;
    cp.ack(b, 10)?;
    cp.keepalive(Lsn(400));
    assert_eq!(cp.confirmed(), Lsn(100));
    Ok(())
}

#[test]
fn refused_keepalive_is_not_remembered() -> TestResult {
    let mut cp = at(100);
    let a = txn_with(&mut cp, 1)?;
    cp.commit(a, Lsn(200))?;
    cp.keepalive(Lsn(900));
    cp.ack(a, 10)?;
    assert_eq!(cp.confirmed(), Lsn(200));
    Ok(())
}

// Limits.

#[test]
fn full_on_records() -> TestResult {
    let limits = Limits {
        max_in_flight_records: 3,
        max_in_flight_bytes: u64::MAX,
    };
    let mut cp = Checkpoint::new(Lsn(0), limits);
    assert_eq!(cp.limits(), limits);
    let a = cp.begin()?;
    cp.record_sent(a, 1)?;
    cp.record_sent(a, 1)?;
    assert!(!cp.is_full());
    cp.record_sent(a, 1)?;
    assert!(cp.is_full());
    cp.ack(a, 1)?;
    assert!(!cp.is_full());
    Ok(())
}

#[test]
fn full_on_bytes() -> TestResult {
    let mut cp = Checkpoint::new(
        Lsn(0),
        Limits {
            max_in_flight_records: u64::MAX,
            max_in_flight_bytes: 100,
        },
    );
    let a = cp.begin()?;
    cp.record_sent(a, 60)?;
    assert!(!cp.is_full());
    cp.record_sent(a, 40)?;
    assert!(cp.is_full());
    assert_eq!(cp.in_flight_bytes(), 100);
    cp.ack(a, 40)?;
    assert!(!cp.is_full());
    Ok(())
}

#[test]
fn record_over_the_byte_limit_is_accepted_and_reports_full() -> TestResult {
    let mut cp = Checkpoint::new(
        Lsn(0),
        Limits {
            max_in_flight_records: 10,
            max_in_flight_bytes: 100,
        },
    );
    let a = cp.begin()?;
    cp.record_sent(a, 1_000)?;
    assert!(cp.is_full());
    cp.commit(a, Lsn(5))?;
    cp.ack(a, 1_000)?;
    assert!(!cp.is_full());
    assert_eq!(cp.confirmed(), Lsn(5));
    Ok(())
}

#[test]
fn in_flight_counts_span_transactions() -> TestResult {
    let mut cp = at(0);
    let a = cp.begin()?;
    cp.record_sent(a, 5)?;
    cp.record_sent(a, 7)?;
    cp.commit(a, Lsn(10))?;
    let b = cp.begin()?;
    cp.record_sent(b, 11)?;
    assert_eq!(cp.in_flight_records(), 3);
    assert_eq!(cp.in_flight_bytes(), 23);
    cp.ack(b, 11)?;
    cp.ack(a, 7)?;
    assert_eq!(cp.in_flight_records(), 1);
    assert_eq!(cp.in_flight_bytes(), 5);
    Ok(())
}

// Invariant 4: misuse is an error and changes nothing.

/// Everything observable, to check that a failed call changed nothing.
fn observe(cp: &Checkpoint) -> (Lsn, u64, u64, usize, Option<TxnId>, bool) {
    (
        cp.confirmed(),
        cp.in_flight_records(),
        cp.in_flight_bytes(),
        cp.pending_txns(),
        cp.open_txn(),
        cp.is_full(),
    )
}

#[test]
fn begin_while_open_is_an_error() -> TestResult {
    let mut cp = at(0);
    let a = cp.begin()?;
    let before = observe(&cp);
    assert_eq!(cp.begin(), Err(CheckpointError::AlreadyOpen { open: a }));
    assert_eq!(observe(&cp), before);
    Ok(())
}

#[test]
fn record_or_commit_without_begin_is_an_error() {
    let mut cp = at(0);
    let ghost = TxnId { slot: 0, seq: 0 };
    assert!(matches!(
        cp.record_sent(ghost, 1),
        Err(CheckpointError::NotOpen { open: None, .. })
    ));
    assert!(matches!(
        cp.commit(ghost, Lsn(10)),
        Err(CheckpointError::NotOpen { open: None, .. })
    ));
    assert_eq!(cp.confirmed(), Lsn(0));
    assert_eq!(cp.in_flight_records(), 0);
}

#[test]
fn record_or_commit_after_commit_is_an_error() -> TestResult {
    let mut cp = at(0);
    let a = txn_with(&mut cp, 1)?;
    cp.commit(a, Lsn(10))?;
    let before = observe(&cp);
    assert!(matches!(
        cp.record_sent(a, 1),
        Err(CheckpointError::NotOpen {
            operation: "record_sent",
            ..
        })
    ));
    assert!(matches!(
        cp.commit(a, Lsn(20)),
        Err(CheckpointError::NotOpen {
            operation: "commit",
            ..
        })
    ));
    assert_eq!(observe(&cp), before);
    Ok(())
}

#[test]
fn record_for_an_older_txn_while_another_is_open_is_an_error() -> TestResult {
    let mut cp = at(0);
    let a = txn_with(&mut cp, 1)?;
    cp.commit(a, Lsn(10))?;
    let b = cp.begin()?;
    let before = observe(&cp);
    assert_eq!(
        cp.record_sent(a, 1),
        Err(CheckpointError::NotOpen {
            operation: "record_sent",
            txn: a,
            open: Some(b),
        })
    );
    assert_eq!(observe(&cp), before);
    Ok(())
}

#[test]
fn ack_for_an_unknown_txn_is_an_error() -> TestResult {
    let mut cp = at(0);
    let _ = txn_with(&mut cp, 1)?;
    let ghost = TxnId { slot: 0, seq: 7 };
    let before = observe(&cp);
    assert_eq!(
        cp.ack(ghost, 10),
        Err(CheckpointError::UnknownTxn { txn: ghost })
    );
    assert_eq!(observe(&cp), before);
    Ok(())
}

#[test]
fn more_acks_than_records_is_an_error() -> TestResult {
    let mut cp = at(0);
    let a = txn_with(&mut cp, 1)?;
    cp.ack(a, 10)?;
    // Open, nothing outstanding.
    assert_eq!(cp.ack(a, 10), Err(CheckpointError::TooManyAcks { txn: a }));
    cp.commit(a, Lsn(10))?;
    // Complete and popped.
    let before = observe(&cp);
    assert_eq!(cp.ack(a, 10), Err(CheckpointError::TooManyAcks { txn: a }));
    assert_eq!(observe(&cp), before);
    assert_eq!(cp.confirmed(), Lsn(10));
    Ok(())
}

#[test]
fn ack_for_an_empty_txn_is_an_error() -> TestResult {
    let mut cp = at(0);
    let a = txn_with(&mut cp, 1)?;
    cp.commit(a, Lsn(10))?;
    let e = cp.begin()?;
    assert_eq!(cp.ack(e, 0), Err(CheckpointError::TooManyAcks { txn: e }));
    cp.commit(e, Lsn(20))?;
    assert_eq!(cp.ack(e, 0), Err(CheckpointError::TooManyAcks { txn: e }));
    assert_eq!(cp.confirmed(), Lsn(0));
    Ok(())
}

#[test]
fn acked_bytes_must_fit_what_was_sent() -> TestResult {
    let mut cp = at(0);
    let a = cp.begin()?;
    cp.record_sent(a, 10)?;
    cp.record_sent(a, 20)?;
    cp.commit(a, Lsn(10))?;
    let before = observe(&cp);
    // More than the whole transaction has outstanding.
    assert!(matches!(
        cp.ack(a, 31),
        Err(CheckpointError::AckBytesMismatch {
            bytes: 31,
            outstanding_records: 2,
            outstanding_bytes: 30,
            ..
        })
    ));
    assert_eq!(observe(&cp), before);
    cp.ack(a, 20)?;
    // The last record must account for exactly the bytes left.
    assert!(matches!(
        cp.ack(a, 9),
        Err(CheckpointError::AckBytesMismatch { .. })
    ));
    assert_eq!(cp.confirmed(), Lsn(0));
    cp.ack(a, 10)?;
    assert_eq!(cp.confirmed(), Lsn(10));
    Ok(())
}

#[test]
fn errors_name_the_transaction_and_the_fix() -> TestResult {
    let mut cp = at(0);
    let a = cp.begin()?;
    let message = cp.begin().err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains(&a.to_string()), "{message}");
    assert!(message.contains("restart"), "{message}");
    Ok(())
}

// Reconnect in the middle of a transaction.

#[test]
fn abandoned_txn_holds_back_newer_ones_until_its_records_are_acked() -> TestResult {
    let mut cp = at(100);
    let a = txn_with(&mut cp, 2)?;
    assert_eq!(cp.abandon_open(), Some(a));
    assert_eq!(cp.open_txn(), None);
    assert_eq!(cp.in_flight_records(), 2);
    assert!(matches!(
        cp.record_sent(a, 10),
        Err(CheckpointError::NotOpen { .. })
    ));
    cp.keepalive(Lsn(500));
    assert_eq!(cp.confirmed(), Lsn(100));

    // PostgreSQL re-sends the transaction in full.
    let again = txn_with(&mut cp, 2)?;
    cp.commit(again, Lsn(200))?;
    cp.ack(again, 10)?;
    cp.ack(again, 10)?;
    assert_eq!(cp.confirmed(), Lsn(100));
    cp.ack(a, 10)?;
    assert_eq!(cp.confirmed(), Lsn(100));
    cp.ack(a, 10)?;
    assert_eq!(cp.confirmed(), Lsn(200));
    assert_eq!(cp.pending_txns(), 0);
    Ok(())
}

#[test]
fn abandoned_txn_confirms_nothing_by_itself() -> TestResult {
    let mut cp = at(100);
    let a = txn_with(&mut cp, 1)?;
    cp.abandon_open();
    cp.ack(a, 10)?;
    assert_eq!(cp.confirmed(), Lsn(100));
    assert_eq!(cp.pending_txns(), 0);
    assert_eq!(cp.abandon_open(), None);
    // Empty and abandoned: gone at once.
    let _ = cp.begin()?;
    cp.abandon_open();
    assert_eq!(cp.pending_txns(), 0);
    assert_eq!(cp.confirmed(), Lsn(100));
    Ok(())
}

#[test]
fn debug_is_a_summary() -> TestResult {
    let mut cp = at(0);
    let _ = txn_with(&mut cp, 3)?;
    let debug = format!("{cp:?}");
    assert!(debug.contains("pending_txns: 1"), "{debug}");
    assert!(debug.contains("in_flight_records: 3"), "{debug}");
    Ok(())
}

mod proptests;
