use super::*;

#[test]
fn a_standby_is_healthy_and_names_the_active_instance() {
    let m = std::sync::Arc::new(Metrics::new("c1"));
    assert!(m.health().is_err(), "not streaming, role unknown");
    m.set_role(Role::Standby, "walrelay-c1 pod-a:7 (backend pid 42)");
    assert_eq!(
        m.health(),
        Ok("standby: the active instance is walrelay-c1 pod-a:7 (backend pid 42)".into())
    );
    let text = exposition::render(&m);
    assert!(
        text.contains("walrelay_role{connector=\"c1\",role=\"standby\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("walrelay_role{connector=\"c1\",role=\"active\"} 0"),
        "{text}"
    );
    m.set_role(Role::Active, "");
    assert!(
        m.health().is_err(),
        "an active instance is healthy only while streaming"
    );
}

#[test]
fn health_follows_streaming_and_kafka_progress() {
    let m = Metrics::new("c1");
    assert!(m.health().is_err());
    m.set_error("waiting for PostgreSQL");
    assert!(m.health().unwrap_err().contains("waiting for PostgreSQL"));
    m.streaming.store(true, Ordering::Relaxed);
    m.kafka_progress();
    assert_eq!(m.health(), Ok("streaming".into()));
    m.set_wal_status("lost");
    assert!(m.health().is_err());
}

#[test]
fn renders_openmetrics_text_without_sentinels() {
    let m = std::sync::Arc::new(Metrics::new("c1"));
    let render = || exposition::render(&m);
    m.records_published.store(7, Ordering::Relaxed);
    let text = render();
    // Unknown readings are left out, never -1.
    for absent in [
        "walrelay_slot_lag_bytes",
        "walrelay_slot_safe_wal_bytes",
        "walrelay_slot_wal_status{",
        "walrelay_slot_poll_age_seconds",
        "walrelay_heartbeat_age_seconds",
        "walrelay_heartbeat_round_trip_seconds",
        "walrelay_kafka_last_ack_age_seconds",
        "walrelay_snapshot_duration_seconds{",
        "walrelay_slot_spill_bytes",
    ] {
        assert!(
            !text.contains(absent),
            "{absent} before it is known:\n{text}"
        );
    }
    assert!(!text.contains(" -1\n"), "{text}");
    assert!(text.contains(
        "# HELP walrelay_records_published Records handed to the Kafka producer.\n# TYPE walrelay_records_published counter\nwalrelay_records_published_total{connector=\"c1\"} 7\n"
    ), "{text}");
    assert!(
        text.contains("walrelay_streaming{connector=\"c1\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("walrelay_build_info{connector=\"c1\",version=\""),
        "{text}"
    );
    assert!(
        text.contains("process_resident_memory_bytes{connector=\"c1\"} "),
        "{text}"
    );
    assert!(
        text.contains("process_open_fds{connector=\"c1\"} "),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");

    m.slot_lag_bytes.set(Some(4096));
    m.slot_safe_wal_bytes.set(None);
    m.set_wal_status("extended");
    m.set_slot_stats(Some([1, 2, 3, 0, 0, 0, 9, 10]));
    m.set_invalidation_reason("wal_removed");
    m.slot_polled();
    m.record_acked();
    m.commit_to_ack.observe(0.02);
    m.session_error("transient", "kafka");
    m.heartbeat_received(Duration::from_micros(2_500));
    let text = render();
    for present in [
        "walrelay_slot_lag_bytes{connector=\"c1\"} 4096\n",
        "walrelay_slot_wal_status{connector=\"c1\",status=\"extended\"} 1\n",
        "walrelay_slot_wal_status{connector=\"c1\",status=\"lost\"} 0\n",
        "walrelay_slot_spill_bytes_total{connector=\"c1\"} 3\n",
        "walrelay_slot_total_bytes_total{connector=\"c1\"} 10\n",
        "walrelay_slot_invalidation_reason{connector=\"c1\",reason=\"wal_removed\"} 1\n",
        "walrelay_slot_poll_age_seconds{connector=\"c1\"} 0.",
        "walrelay_kafka_last_ack_age_seconds{connector=\"c1\"} 0.",
        "walrelay_commit_to_ack_seconds_bucket{connector=\"c1\",le=\"0.025\"} 1\n",
        "walrelay_commit_to_ack_seconds_count{connector=\"c1\"} 1\n",
        "walrelay_session_errors_total{connector=\"c1\"} 1\n",
        // A failed attempt is not a streaming session that ended.
        "walrelay_streaming_session_errors_total{connector=\"c1\"} 0\n",
        "walrelay_session_errors_by_cause_total{connector=\"c1\",class=\"transient\",cause=\"kafka\"} 1\n",
        "walrelay_heartbeat_round_trip_seconds{connector=\"c1\"} 0.0025\n",
        "walrelay_heartbeats_received_total{connector=\"c1\"} 1\n",
    ] {
        assert!(text.contains(present), "{present:?} missing:\n{text}");
    }
    assert!(
        !text.contains("walrelay_slot_safe_wal_bytes"),
        "unlimited: absent"
    );
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap();
        assert!(
            (series.starts_with("walrelay_") || series.starts_with("process_"))
                && series.contains("connector=\"c1\""),
            "{line}"
        );
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }
}
