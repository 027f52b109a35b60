use super::*;

const S: Duration = Duration::from_secs(1);

/// A query that fails at once on every connection (a server in
/// recovery, a revoked view) waits 1, 2, 4 … 30 s between attempts and
/// is said once; another error is said again; a read that succeeds is
/// said once and starts the waits over.
#[test]
fn failures_back_off_and_are_said_once_per_error() {
    let t0 = Instant::now();
    let mut f = Failures::new(S, 30 * S);
    let denied = "permission denied for view pg_stat_replication_slots";
    let mut waits = Vec::new();
    let mut said = Vec::new();
    let mut now = t0;
    for _ in 0..8 {
        let (s, wait) = f.failed(denied, now);
        said.push(s);
        waits.push(wait.as_secs());
        now += wait;
    }
    assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
    assert_eq!(said[0], Said::New);
    assert!(said[1..].iter().all(|s| *s == Said::Again), "{said:?}");
    // The error changes: said again, the backoff goes on.
    assert_eq!(f.failed("connection refused", now), (Said::New, 30 * S));
    assert_eq!(f.failed("connection refused", now), (Said::Again, 30 * S));
    // Recovered: said once, with how long it failed.
    assert_eq!(f.succeeded(t0 + 200 * S), Some(200 * S));
    assert_eq!(f.succeeded(t0 + 205 * S), None);
    // A new failure is news again, and waits from the start.
    assert_eq!(f.failed(denied, t0 + 210 * S), (Said::New, S));
    assert_eq!(f.failed(denied, t0 + 211 * S), (Said::Again, 2 * S));
}

#[test]
fn a_clock_that_goes_backwards_does_not_panic() {
    let t0 = Instant::now() + 10 * S;
    let mut f = Failures::new(S, 30 * S);
    f.failed("x", t0);
    assert_eq!(f.succeeded(t0 - 5 * S), Some(Duration::ZERO));
}
