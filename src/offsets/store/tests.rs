use super::*;

#[test]
fn stall_deadline_moves_with_progress() {
    let t0 = Instant::now();
    let stall = Duration::from_secs(10);
    let mut d = StallDeadline::new(stall, t0);
    // 30 s of reading with progress every 6 s never expires.
    for i in 1..=5 {
        let now = t0 + Duration::from_secs(6 * i);
        assert!(!d.expired(now), "expired at {i}");
        d.progressed(now);
    }
    let last = t0 + Duration::from_secs(30);
    assert!(!d.expired(last + stall));
    assert!(d.expired(last + stall + Duration::from_millis(1)));
}

/// A refused ACL is definite (no retry loop) and names the operation
/// and the kafka-acls command.
#[test]
fn a_refused_acl_is_definite_and_names_the_grant() {
    assert_eq!(
        denied(RDKafkaErrorCode::TopicAuthorizationFailed),
        Some("TOPIC_AUTHORIZATION_FAILED")
    );
    assert_eq!(denied(RDKafkaErrorCode::BrokerTransportFailure), None);
    let e = OffsetStoreError::Denied {
        topic: "walrelay.offsets".into(),
        operation: "Create",
        code: "TOPIC_AUTHORIZATION_FAILED",
    };
    assert!(!e.is_transient());
    let text = e.to_string();
    assert!(
        text.contains("refuse walrelay Create on offset topic \"walrelay.offsets\""),
        "{text}"
    );
    assert!(
        text.contains("--operation Create --operation DescribeConfigs"),
        "{text}"
    );
    assert!(text.contains("--topic walrelay.offsets"), "{text}");
}

#[test]
fn only_a_purely_compacted_topic_is_accepted() {
    assert_eq!(not_compacted_because("compact"), None);
    assert!(not_compacted_because("delete").is_some());
    assert!(not_compacted_because("compact,delete").is_some());
    assert!(not_compacted_because("delete, compact").is_some());
    assert!(not_compacted_because("").is_some());
}

#[test]
fn the_fix_gives_the_topic_our_settings() {
    let store = OffsetStore::new(
        &[("bootstrap.servers".into(), "k1:9092".into())],
        "walrelay.offsets",
        "c",
    );
    let fix = store.fix_command();
    assert!(
        fix.starts_with(
            "kafka-configs.sh --bootstrap-server k1:9092 --alter --entity-type topics --entity-name walrelay.offsets --add-config cleanup.policy=compact,segment.ms=3600000,"
        ),
        "{fix}"
    );
    assert!(
        !OffsetStoreError::NotCompacted {
            topic: "t".into(),
            policy: "delete".into(),
            why: "",
            fix,
        }
        .is_transient()
    );
}
