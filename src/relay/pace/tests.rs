use super::*;

const MS: i64 = 1000;

#[test]
fn behind_from_one_second_caught_up_below_100_ms_unchanged_between() {
    let t = 800_000_000 * 1_000_000;
    let mut pace = Pace::default();
    for (lag, behind, why) in [
        (999, false, "below BEHIND: caught up"),
        (1000, true, "behind"),
        (500, true, "between the thresholds: unchanged"),
        (100, true, "CAUGHT_UP itself is not below it"),
        (99, false, "caught up"),
        (500, false, "between the thresholds: unchanged"),
    ] {
        // Read as it is sent: the lag is the walsender's.
        pace.on_begin(t - lag * MS, t, t);
        assert_eq!(pace.behind(), behind, "{lag} ms: {why}");
    }
    pace.on_snapshot_row();
    assert!(pace.behind());
}

/// A backlog the walsender sent promptly but walrelay reads late (it sat
/// in socket buffers while walrelay was paused) is behind; the clocks'
/// difference alone never is.
#[test]
fn the_lag_is_measured_when_read_whatever_the_clocks_say() {
    let t = 800_000_000 * 1_000_000;
    for skew in [-3_600_000 * MS, -2000 * MS, 0, 2000 * MS, 3_600_000 * MS] {
        let mut pace = Pace::default();
        // Caught up: each Begin read 1 ms after its send, sent 2 ms after
        // its commit (server clock = ours + skew).
        for i in 0..100 {
            let now = t + i * 10 * MS;
            let sent = now + skew - MS;
            pace.on_begin(sent - 2 * MS, sent, now);
            assert!(!pace.behind(), "skew {skew}: caught up");
        }
        // Paused 1.5 s: what was sent promptly is read late.
        let now = t + 1000 * 10 * MS + 1500 * MS;
        let sent = t + 1000 * 10 * MS + skew;
        pace.on_begin(sent - 2 * MS, sent, now);
        assert!(pace.behind(), "skew {skew}: read 1.5 s after the commit");
    }
}

/// The clocks' difference is re-estimated every half window: a server
/// clock stepped back (which raises `now - sent_time`) counts as lag only
/// until the window has passed.
#[test]
fn a_clock_step_is_forgotten_after_the_window() {
    let t = 800_000_000 * 1_000_000;
    let mut pace = Pace::default();
    let step = -10_000 * MS; // the server's clock steps 10 s back
    let mut now = t;
    let read = |pace: &mut Pace, now: i64, skew: i64| {
        let sent = now + skew - MS;
        pace.on_begin(sent - 2 * MS, sent, now);
    };
    read(&mut pace, now, 0);
    now += MS;
    read(&mut pace, now, step);
    // Right after the step the old minimum makes the commit 10 s old.
    assert!(pace.behind());
    let window = i64::try_from(SKEW_WINDOW.as_micros()).unwrap();
    while now < t + window + 2 * MS {
        now += 100 * MS;
        read(&mut pace, now, step);
    }
    assert!(!pace.behind(), "a window later only the new clock counts");
}
