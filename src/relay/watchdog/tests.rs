use super::*;

/// Issue 38, item 6: after a freeze the stall clock does not count
/// the time the process was not running, so Kafka is not blamed; a
/// real stall after the thaw is still reported.
#[tokio::test(start_paused = true)]
async fn time_the_process_was_frozen_is_not_a_kafka_stall() {
    let freezes = Arc::new(Freezes::default());
    let mut watch = KafkaWatch::with_freezes("records", freezes.clone());
    // Frozen for 20 s: every clock moved on while nothing ran.
    tokio::time::advance(Duration::from_secs(20)).await;
    freezes.woke(FREEZE_STEP, Duration::from_secs(20) + FREEZE_STEP);
    watch.warn_if_stalled(10, false);
    assert!(!watch.stall_reported, "the freeze is not Kafka's");
    assert!(!watch.discount_freezes(10), "said once per freeze");
    // Kafka then really silent for longer than the warning: reported.
    tokio::time::advance(STALL_WARNING + Duration::from_secs(1)).await;
    watch.warn_if_stalled(10, false);
    assert!(watch.stall_reported);
}

/// Thawed, before the freeze clock's thread has counted the freeze: no
/// verdict yet (it comes within a step).
#[tokio::test(start_paused = true)]
async fn no_stall_is_reported_while_the_freeze_clock_is_overdue() {
    let freezes = Arc::new(Freezes::default());
    let base = std::time::Instant::now()
        .checked_sub(Duration::from_secs(60))
        .unwrap();
    freezes.base.set(base).unwrap();
    let mut watch = KafkaWatch::with_freezes("records", freezes.clone());
    tokio::time::advance(STALL_WARNING + Duration::from_secs(1)).await;
    // The thread last woke FREEZE_STEP + FREEZE_SLACK + 1 s ago.
    let late = FREEZE_STEP + FREEZE_SLACK + Duration::from_secs(1);
    let at = u64::try_from((base.elapsed() - late).as_millis()).unwrap();
    freezes.woke_at.store(at + 1, Ordering::Relaxed);
    assert!(freezes.overdue());
    watch.warn_if_stalled(10, false);
    assert!(!watch.stall_reported, "no verdict while overdue");
    // It wakes on time: nothing was frozen, the stall is Kafka's.
    freezes.woke(FREEZE_STEP, FREEZE_STEP);
    assert!(!freezes.overdue());
    watch.warn_if_stalled(10, false);
    assert!(watch.stall_reported);
}

/// Only a wake-up later than the slack counts; a busy host's small
/// delays do not add up to a freeze.
#[test]
fn only_a_late_wake_up_counts_as_frozen() {
    let f = Freezes::default();
    for _ in 0..100 {
        f.woke(FREEZE_STEP, FREEZE_STEP + Duration::from_millis(300));
    }
    assert_eq!(f.total(), Duration::ZERO);
    f.woke(FREEZE_STEP, FREEZE_STEP + Duration::from_secs(15));
    assert_eq!(f.total(), Duration::from_secs(15));
}

/// The process's clock really runs: a thread of its own, started once.
#[test]
fn the_process_clock_is_one() {
    assert!(Arc::ptr_eq(&Freezes::process(), &Freezes::process()));
}

fn stuck(result: Result<(), RelayError>) -> bool {
    matches!(result, Err(RelayError::Sink(e)) if e.to_string().contains("fresh producer"))
}

/// Stuck only once the cluster has answered for STUCK_AFTER while
/// nothing was acknowledged; a cluster that stops answering (an
/// outage) or an acknowledgement starts the count again.
#[tokio::test(start_paused = true)]
async fn stuck_means_the_cluster_answers_and_the_producer_does_not() {
    let metrics = Metrics::new("test");
    let mut watch = KafkaWatch::new("records");
    tokio::time::advance(STALL_WARNING + Duration::from_secs(1)).await;
    watch.warn_if_stalled(10, true);
    assert!(watch.stall_reported);
    assert!(watch.cluster_answered(true).is_ok());
    tokio::time::advance(STUCK_AFTER - Duration::from_secs(1)).await;
    assert!(watch.cluster_answered(true).is_ok(), "not yet");
    // An outage resets the count: the broker is away, not the producer stuck.
    assert!(watch.cluster_answered(false).is_ok());
    assert!(watch.cluster_answered(true).is_ok());
    tokio::time::advance(STUCK_AFTER - Duration::from_secs(1)).await;
    assert!(watch.cluster_answered(true).is_ok());
    // An acknowledgement ends the stall.
    watch.acknowledged(&metrics);
    assert!(!watch.stall_reported);
    assert!(watch.cluster_answered(true).is_ok());
    tokio::time::advance(STUCK_AFTER).await;
    assert!(stuck(watch.cluster_answered(true)));
}
