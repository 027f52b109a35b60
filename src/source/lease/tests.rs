use super::*;

/// Every instance, of every version, must compute the same key: these
/// values are part of the contract (changing them lets an old and a new
/// version run side by side during an upgrade).
fn fence(confirmed_ms: u64) -> Fence {
    Fence {
        term: 7,
        epoch: Instant::now(),
        confirmed_ms: Arc::new(AtomicU64::new(confirmed_ms)),
        confirm: Arc::new(Notify::new()),
        lost: CancellationToken::new(),
    }
}

#[tokio::test]
async fn a_fresh_lease_passes_a_stale_one_waits_for_a_ping_a_lost_one_stops() {
    // Confirmed just now: passes at once.
    let f = fence(0);
    assert!(f.fresh());
    assert_eq!(f.check().await, Ok(()));
    // Not confirmed for longer than DETECT (a pause): asks for a ping and
    // passes only once one sent after the check is answered.
    let f = fence(0);
    let stale = Fence {
        epoch: Instant::now() - DETECT - Duration::from_millis(100),
        ..f.clone()
    };
    assert!(!stale.fresh());
    let pinger = {
        let stale = stale.clone();
        tokio::spawn(async move {
            stale.confirm.notified().await;
            stale.confirmed_ms.store(stale.now_ms(), Ordering::Release);
        })
    };
    assert_eq!(stale.check().await, Ok(()));
    pinger.await.unwrap();
    // The ping fails instead: the lease is lost, nothing passes.
    let stale = Fence {
        epoch: Instant::now() - DETECT - Duration::from_millis(100),
        ..fence(0)
    };
    let lost = stale.lost.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        lost.cancel();
    });
    assert_eq!(stale.check().await, Err(LeaseGone));
    assert_eq!(stale.term(), 7);
}

#[test]
fn the_key_is_stable() {
    assert_eq!(key("walrelay"), key("walrelay"));
    assert_ne!(key("walrelay"), key("walrelay2"));
    assert_eq!(key("walrelay"), 5_366_716_621_419_395_899);
    assert_eq!(key(""), -7_692_393_820_432_827_878);
}

#[test]
fn detection_fits_in_the_grace() {
    assert!(PING_EVERY + PING_TIMEOUT <= DETECT);
    assert!(DETECT < GRACE);
    assert!(GRACE < SERVER_NOTICES_DEAD_PEER);
}

#[test]
fn the_application_name_fits_postgres_and_names_host_and_pid() {
    let i = Instance {
        host: "pod-7f9c".into(),
        pid: 42,
    };
    assert_eq!(
        i.application_name("walrelay-orders"),
        "walrelay-orders pod-7f9c:42"
    );
    let long = Instance {
        host: "h".repeat(100),
        pid: 1,
    };
    assert_eq!(long.application_name("walrelay-é").len(), 63);
    assert!(
        long.application_name("walrelay-é")
            .starts_with("walrelay-? hhh")
    );
}
