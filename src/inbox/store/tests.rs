use super::*;

#[test]
fn backoff_doubles_up_to_the_cap() {
    let p = Policy {
        max_attempts: 5,
        backoff_initial: Duration::from_millis(100),
        backoff_max: Duration::from_millis(700),
        on_quarantine: OnQuarantine::Continue,
        quarantine_to: QuarantineSink::Table,
    };
    let waits: Vec<u128> = (1..=5).map(|a| p.backoff(a).as_millis()).collect();
    assert_eq!(waits, [100, 200, 400, 700, 700]);
    assert_eq!(p.backoff(u32::MAX).as_millis(), 700);
}
