use super::*;

#[test]
fn status_interval_is_capped_by_half_the_sender_timeout() {
    let one = Duration::from_secs(1);
    assert_eq!(effective_status_interval(one, "10s"), one);
    assert_eq!(
        effective_status_interval(one, "1s"),
        Duration::from_millis(500)
    );
    assert_eq!(
        effective_status_interval(one, "600ms"),
        Duration::from_millis(300)
    );
    assert_eq!(effective_status_interval(one, "1min"), one);
    assert_eq!(effective_status_interval(one, "0"), one);
    assert_eq!(
        effective_status_interval(one, "1000"),
        Duration::from_millis(500)
    );
    // Absurd values neither overflow nor panic.
    assert_eq!(effective_status_interval(one, "18446744073709551615h"), one);
}

#[test]
fn receive_timeout_follows_the_sender_timeout_with_a_floor() {
    assert_eq!(receive_timeout("10s"), Duration::from_secs(30));
    assert_eq!(receive_timeout("2min"), Duration::from_secs(120));
    assert_eq!(receive_timeout("0"), Duration::from_secs(60));
    assert_eq!(receive_timeout("nonsense"), Duration::from_secs(60));
}
