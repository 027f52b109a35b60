use super::*;

#[test]
fn a_commit_begins_its_recent_duration_and_deviation_before_the_bound() {
    let bound = Duration::from_millis(100);
    let mut t = CommitTime::default();
    assert_eq!(t.lead(bound), Duration::ZERO, "no commit seen yet");
    for _ in 0..50 {
        t.observe(Duration::from_millis(10));
    }
    let steady = t.lead(bound);
    assert!(
        steady >= Duration::from_millis(10) && steady < Duration::from_millis(12),
        "{steady:?}"
    );
    // Jitter widens the lead; a slow broker is capped at half the bound.
    t.observe(Duration::from_millis(30));
    assert!(
        t.lead(bound) > steady + Duration::from_millis(10),
        "{:?}",
        t.lead(bound)
    );
    for _ in 0..50 {
        t.observe(Duration::from_secs(2));
    }
    assert_eq!(t.lead(bound), bound / 2);
}

/// The bound counts from a fresh commit (the walsender's delay spent of
/// it), from the arrival for an old one, a snapshot row, or a commit
/// time ahead of ours.
#[test]
fn a_transaction_counts_from_a_fresh_commit_else_from_its_first_record() {
    let now = Instant::now();
    let bound = Duration::from_millis(100);
    let now_ms = 1_700_000_000_000;
    assert_eq!(
        opened_at(now, now_ms, now_ms - 12, bound),
        now - Duration::from_millis(12),
        "caught up: 12 ms of the bound already spent"
    );
    for (commit_ms, why) in [
        (now_ms - 25, "a quarter of the bound old: a backlog"),
        (now_ms - 60_000, "a minute old"),
        (0, "not a streamed record"),
        (now_ms + 40, "PostgreSQL's clock ahead of ours"),
        (now_ms, "this millisecond"),
    ] {
        assert_eq!(opened_at(now, now_ms, commit_ms, bound), now, "{why}");
    }
}

fn writer() -> (
    OffsetWriter,
    Sink,
    mpsc::UnboundedReceiver<Ack>,
    Config,
    Metrics,
) {
    let config = Config::from_str(
        "[connector]\nname = \"orders\"\n[postgres]\ndatabase = \"app\"\n[kafka]\n\
         brokers = \"127.0.0.1:9\"\n[[outbox]]\ntable = \"public.outbox\"\n",
        "test.toml",
    )
    .unwrap();
    let (sink, acks) = crate::relay::sink_for_tests(&config);
    let template = StoredOffset::for_tests("orders", "1", crate::Lsn::ZERO);
    let writer = OffsetWriter::new(template, "offsets", Lsn(100));
    (writer, sink, acks, config, Metrics::new("orders"))
}

#[tokio::test]
async fn one_write_in_flight_and_acked_only_grows() {
    let (mut w, sink, _acks, _config, metrics) = writer();
    w.send(&sink, Lsn(200), "a write").await.unwrap();
    assert_eq!(w.in_flight(), Some(Lsn(200)));
    let second = w.send(&sink, Lsn(300), "a second write").await;
    assert!(
        matches!(&second, Err(RelayError::Stream { what, .. }) if what.contains("in flight")),
        "{second:?}"
    );
    assert_eq!(w.acked(), Lsn(100), "nothing acknowledged yet");
    w.delivered(Lsn(200), &metrics);
    assert_eq!((w.in_flight(), w.acked()), (None, Lsn(200)));
    // A marker written at 0/0 (a snapshot's) moves nothing back.
    w.send(&sink, Lsn::ZERO, "a marker").await.unwrap();
    w.delivered(Lsn::ZERO, &metrics);
    assert_eq!(w.acked(), Lsn(200));
    w.starting_at(Lsn(150));
    assert_eq!(w.acked(), Lsn(200));
}

#[tokio::test]
async fn a_failed_write_reports_nothing() {
    let (mut w, sink, _acks, _config, _metrics) = writer();
    w.send(&sink, Lsn(200), "a write").await.unwrap();
    w.failed(Lsn(200));
    assert_eq!((w.in_flight(), w.acked()), (None, Lsn(100)));
}

/// `store` returns only on the acknowledgement of its own write; a
/// failure of it, or a report of anything else, is an error.
#[tokio::test]
async fn store_waits_for_its_own_acknowledgement() {
    use crate::sink::error::SinkError;
    let (mut w, sink, _acks, config, metrics) = writer();
    let (tx, mut acks) = mpsc::unbounded_channel();
    tx.send(Ack::Delivered(Token::Offset { lsn: Lsn(300) }))
        .unwrap();
    w.store(&sink, &mut acks, Lsn(300), "a write", &config, &metrics)
        .await
        .unwrap();
    assert_eq!(w.acked(), Lsn(300));

    tx.send(Ack::Failed {
        token: Token::Offset { lsn: Lsn(400) },
        topic: "offsets".into(),
        error: SinkError::timed_out(Duration::from_secs(1)),
    })
    .unwrap();
    let failed = w
        .store(&sink, &mut acks, Lsn(400), "a write", &config, &metrics)
        .await;
    assert!(
        matches!(failed, Err(RelayError::Delivery { at_send: false, .. })),
        "{failed:?}"
    );
    assert_eq!((w.in_flight(), w.acked()), (None, Lsn(300)));

    tx.send(Ack::Delivered(Token::Offset { lsn: Lsn(1) }))
        .unwrap();
    let other = w
        .store(&sink, &mut acks, Lsn(500), "a write", &config, &metrics)
        .await;
    assert!(matches!(other, Err(RelayError::Stream { .. })), "{other:?}");
    assert_eq!(w.acked(), Lsn(300));
}
