use super::*;

const TIMEOUT: Duration = Duration::from_secs(2);
const MAX_TIME: Duration = Duration::from_millis(100);
const TXN: Unit = Unit::Pg {
    xid: 7,
    commit_lsn: Lsn(0x16B_3748),
};

fn at(t0: Instant, ms: u64) -> Instant {
    t0 + Duration::from_millis(ms)
}

/// One PostgreSQL transaction still being sent when the Kafka
/// transaction reaches the timeout, Kafka answering: an overrun naming
/// it, its size so far and the setting.
#[test]
fn a_transaction_partly_in_past_the_timeout_is_an_overrun() {
    let t0 = Instant::now();
    let mut c = TransactionClock::new(TIMEOUT, MAX_TIME);
    c.unit_begins(TXN);
    c.kafka_began(t0, 3);
    for ms in 0..2000 {
        c.sent(100, at(t0, ms));
    }
    assert_eq!(c.overrun(at(t0, 1999), 3), None, "not yet");
    let o = c.overrun(at(t0, 2000), 3).expect("an overrun");
    assert_eq!((o.records, o.bytes, o.whole), (2000, 200_000, false));
    assert_eq!(o.open_for, TIMEOUT);
    let text = o.to_string();
    for needle in [
        "xid 7",
        "commit LSN 0/016B3748",
        "2000 records",
        "so far",
        "kafka.transaction_timeout (2s)",
        "transaction.max.timeout.ms",
        "open for 2.0 s",
    ] {
        assert!(text.contains(needle), "{needle:?} in {text}");
    }
    // A failure reported by Kafka meanwhile says the same.
    assert_eq!(c.explain(at(t0, 2500), 3).map(|o| o.records), Some(2000));
}

/// A broker reported unreachable since the Kafka transaction began: an
/// outage, not a transaction too big (transient, as before).
#[test]
fn a_broker_outage_is_never_an_overrun() {
    let t0 = Instant::now();
    let mut c = TransactionClock::new(TIMEOUT, MAX_TIME);
    c.unit_begins(TXN);
    c.kafka_began(t0, 3);
    c.sent(100, t0);
    assert_eq!(c.overrun(at(t0, 5000), 4), None);
    assert_eq!(c.explain(at(t0, 5000), 4), None);
}

/// Between PostgreSQL transactions, or with the newest one short (the
/// commit itself was slow), a failure stays what it was; a newest one
/// that alone kept the transaction open (timeout − max_time) is named.
#[test]
fn a_failed_commit_is_an_overrun_only_if_one_transaction_kept_it_open() {
    let t0 = Instant::now();
    let mut c = TransactionClock::new(TIMEOUT, MAX_TIME);
    c.kafka_began(t0, 0);
    c.unit_begins(TXN);
    c.sent(100, at(t0, 10));
    c.unit_ends(at(t0, 20));
    assert_eq!(c.overrun(at(t0, 3000), 0), None, "nothing partly in it");
    assert_eq!(c.explain(at(t0, 3000), 0), None, "a slow commit");

    let mut c = TransactionClock::new(TIMEOUT, MAX_TIME);
    c.kafka_began(t0, 0);
    c.unit_begins(TXN);
    c.sent(100, at(t0, 50));
    c.sent(100, at(t0, 1960));
    c.unit_ends(at(t0, 1960));
    assert_eq!(
        c.overrun(at(t0, 2100), 0),
        None,
        "whole: its commit may still make it"
    );
    let o = c
        .explain(at(t0, 2100), 0)
        .expect("kept open by one transaction");
    assert_eq!((o.records, o.whole), (2, true));
    assert!(!o.to_string().contains("so far"), "{o}");
    // Committed: nothing is held any more.
    c.kafka_ended();
    c.kafka_began(at(t0, 2200), 0);
    assert_eq!(c.explain(at(t0, 9000), 0), None);
}

/// A unit that sent nothing is no overrun; the snapshot is named as
/// such, with the incremental snapshot as a way out.
#[test]
fn the_snapshot_is_a_unit_and_an_empty_one_is_none() {
    let t0 = Instant::now();
    let mut c = TransactionClock::new(TIMEOUT, MAX_TIME);
    c.kafka_began(t0, 0);
    c.unit_begins(TXN);
    assert_eq!(c.overrun(at(t0, 3000), 0), None);
    c.unit_ends(at(t0, 3000));
    c.unit_begins(Unit::Snapshot);
    c.sent(10, at(t0, 3000));
    let text = c.overrun(at(t0, 3000), 0).unwrap().to_string();
    assert!(
        text.contains("initial snapshot") && text.contains("no_data"),
        "{text}"
    );
}
