use super::*;

#[test]
fn an_outage_is_said_once_then_reminded_then_ended() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let mut o = Outage::new(Duration::ZERO);
    assert_eq!(o.succeeded(at(0)), Said::Nothing);
    assert_eq!(o.failed(at(1)), Said::Down);
    // Hundreds of failures in the next minute say nothing.
    for s in 1..61 {
        assert_eq!(o.failed(at(s)), Said::Nothing, "at {s} s");
    }
    assert_eq!(
        o.failed(at(61)),
        Said::StillDown {
            for_: Duration::from_secs(60)
        }
    );
    assert_eq!(o.failed(at(100)), Said::Nothing);
    assert_eq!(
        o.failed(at(121)),
        Said::StillDown {
            for_: Duration::from_secs(120)
        }
    );
    assert!(o.is_down());
    assert_eq!(
        o.succeeded(at(130)),
        Said::Back {
            after: Duration::from_secs(129)
        }
    );
    assert_eq!(o.succeeded(at(131)), Said::Nothing);
    assert!(!o.is_down());
    // The next outage is news again, however soon it comes.
    assert_eq!(o.failed(at(132)), Said::Down);
}

/// One broker of several down: failures keep coming while records are
/// delivered through the others. One outage, reminded, not a pair of
/// lines per reconnect attempt.
#[test]
fn a_partial_outage_ends_only_when_the_failures_stop() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let mut o = Outage::new(Duration::from_secs(15));
    assert_eq!(o.failed(at(0)), Said::Down);
    for s in 1..100 {
        let said = if s % 10 == 0 {
            o.failed(at(s))
        } else {
            o.succeeded(at(s))
        };
        assert!(
            matches!(said, Said::Nothing | Said::StillDown { .. }),
            "at {s} s: {said:?}"
        );
    }
    assert!(o.is_down());
    assert_eq!(o.succeeded(at(104)), Said::Nothing);
    assert_eq!(
        o.succeeded(at(105)),
        Said::Back {
            after: Duration::from_secs(91)
        }
    );
    // Recovered with nothing more to deliver: time says it.
    assert_eq!(o.failed(at(200)), Said::Down);
    assert_eq!(o.succeeded(at(201)), Said::Nothing);
    assert_eq!(o.tick(at(210)), Said::Nothing);
    assert_eq!(
        o.tick(at(215)),
        Said::Back {
            after: Duration::from_secs(1)
        }
    );
    assert_eq!(o.tick(at(216)), Said::Nothing);
}

#[test]
fn a_clock_that_goes_backwards_does_not_panic() {
    let t0 = Instant::now() + Duration::from_secs(10);
    let mut o = Outage::new(Duration::ZERO);
    assert_eq!(o.failed(t0), Said::Down);
    assert_eq!(o.failed(t0 - Duration::from_secs(5)), Said::Nothing);
    assert_eq!(
        o.succeeded(t0 - Duration::from_secs(5)),
        Said::Back {
            after: Duration::ZERO
        }
    );
}

#[test]
fn the_shared_log_writes_one_line_per_state_change() {
    let log = OutageLog::new("Kafka", Duration::ZERO);
    log.succeeded();
    assert!(!log.is_down());
    assert!(log.failed("1/1 brokers are down"));
    assert!(log.is_down());
    for _ in 0..200 {
        assert!(!log.failed("Connection refused"));
    }
    log.succeeded();
    assert!(!log.is_down());
    assert!(log.failed("Connection refused"), "a new outage is said");
}
