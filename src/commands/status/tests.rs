use super::*;

fn slot(wal_status: &str) -> SlotStatus {
    SlotStatus {
        active_pid: None,
        confirmed_flush_lsn: Some("0/3000000".into()),
        restart_lsn: Some("0/2000000".into()),
        current_wal_lsn: Some("0/4000000".into()),
        lag_bytes: Some(16 << 20),
        retained_wal_bytes: Some(32 << 20),
        wal_status: Some(wal_status.into()),
        safe_wal_size_bytes: None,
        invalidation_reason: None,
        plugin: Some("pgoutput".into()),
    }
}

/// PostgreSQL refusing the connection.
fn refused() -> Unreadable {
    Unreadable::Postgres(Arc::new(CatalogError::Invalid("refused".into())))
}

fn status(slot: Part<Option<SlotStatus>>) -> Status {
    let mut s = Status {
        connector: "c".into(),
        slot_name: "s".into(),
        slot,
        stored_offset: Ok(None),
        comparison: None,
        publication: Ok(None),
        instances: Ok(InstancesStatus {
            active: None,
            standbys: Vec::new(),
        }),
        instance: None,
        problems: Vec::new(),
    };
    s.problems = problems(&s);
    s
}

#[test]
fn a_healthy_slot_is_no_problem_and_sizes_read_as_sizes() {
    let s = status(Ok(Some(slot("reserved"))));
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    let text = s.to_string();
    assert!(text.contains("lag                16.0 MiB"), "{text}");
    assert!(text.contains("retained WAL       32.0 MiB"), "{text}");
    assert!(text.contains("unlimited"), "{text}");
    assert!(text.ends_with("no problems\n"), "{text}");
}

#[test]
fn lost_unreserved_and_missing_slots_are_problems() {
    for (part, needle) in [
        (Ok(Some(slot("lost"))), "is lost"),
        (Ok(Some(slot("unreserved"))), "is unreserved"),
        (Err(refused()), "unreadable"),
    ] {
        let s = status(part);
        assert!(
            s.problems.iter().any(|p| p.contains(needle)),
            "{needle}: {:?}",
            s.problems
        );
        assert!(s.to_string().contains("PROBLEM"));
    }
}

#[test]
fn a_missing_slot_is_a_problem_only_once_an_offset_is_stored() {
    let s = status(Ok(None));
    assert!(
        s.problems.is_empty(),
        "before the first start: {:?}",
        s.problems
    );
    let mut s = status(Ok(None));
    s.stored_offset = Ok(Some(StoredStatus {
        lsn: "0/3000000".into(),
        slot: "s".into(),
        system_id: "1".into(),
        timeline: 1,
        written_at_ms: 0,
        age_seconds: 1.0,
        committed_at_ms: None,
        snapshot: None,
        accepted_gap: None,
        incremental: None,
    }));
    assert!(
        problems(&s).iter().any(|p| p.contains("does not exist")),
        "{:?}",
        problems(&s)
    );
}

#[test]
fn the_stored_commit_time_and_the_gap_to_reconcile_are_shown_in_utc() {
    let mut s = status(Ok(Some(slot("reserved"))));
    s.stored_offset = Ok(Some(StoredStatus {
        lsn: "0/3000000".into(),
        slot: "s".into(),
        system_id: "1".into(),
        timeline: 1,
        written_at_ms: 1_764_547_260_000,
        age_seconds: 1.0,
        committed_at_ms: Some(1_764_547_200_123),
        snapshot: None,
        accepted_gap: Some(offsets::AcceptedGap {
            from: "0/2000000".into(),
            to: "0/3000000".into(),
            accepted_at_ms: 0,
            from_committed_at_ms: Some(1_764_540_000_000),
        }),
        incremental: None,
    }));
    let text = s.to_string();
    assert!(
        text.contains("  committed at       2025-12-01T00:00:00.123Z: every later transaction"),
        "{text}"
    );
    assert!(
        text.contains("reconcile them (the outbox rows committed since 2025-11-30T22:00:00.000Z, less your longest transaction)"),
        "{text}"
    );
    let json = serde_json::to_value(&s).unwrap_or_default();
    assert_eq!(
        json["stored_offset"]["committed_at_ms"],
        1_764_547_200_123_i64
    );
    assert_eq!(
        json["stored_offset"]["accepted_gap"]["from_committed_at_ms"],
        1_764_540_000_000_i64
    );
}

#[test]
fn health_urls_name_an_instance_anywhere() {
    let url = |s: &str| s.parse::<HealthUrl>();
    let ok = |s: &str, address: &str, path: &str| {
        assert_eq!(
            url(s),
            Ok(HealthUrl {
                address: address.into(),
                path: path.into()
            }),
            "{s}"
        );
    };
    ok("http://10.0.3.17:9187", "10.0.3.17:9187", "/healthz");
    ok("http://orders-7d9f:9187/", "orders-7d9f:9187", "/healthz");
    ok("http://[::1]:9187/healthz", "[::1]:9187", "/healthz");
    ok(
        "http://127.0.0.1:8001/api/v1/namespaces/shop/pods/orders-x:9187/proxy/healthz",
        "127.0.0.1:8001",
        "/api/v1/namespaces/shop/pods/orders-x:9187/proxy/healthz",
    );
    assert_eq!(
        url("http://10.0.3.17:9187").unwrap().to_string(),
        "http://10.0.3.17:9187/healthz"
    );
    for bad in [
        "10.0.3.17:9187",
        "https://10.0.3.17:9187",
        "http://10.0.3.17",
        "http://10.0.3.17:port",
        "http://:9187",
        "http://::1:9187",
        "http://user@host:9187",
        "http://host:9187?x",
        "http://host:99999",
    ] {
        let e = url(bad).unwrap_err();
        assert!(e.contains(bad) && e.contains("http://"), "{bad}: {e}");
    }
}

/// `[health] listen` on all interfaces is asked on loopback.
#[test]
fn the_configured_listen_address_is_asked_on_this_host() {
    let local = |listen: &str| HealthUrl::local(listen.parse().unwrap()).to_string();
    assert_eq!(local("0.0.0.0:9187"), "http://127.0.0.1:9187/healthz");
    assert_eq!(local("[::]:9187"), "http://[::1]:9187/healthz");
    assert_eq!(local("10.0.3.17:9187"), "http://10.0.3.17:9187/healthz");
}

#[test]
fn an_instance_not_asked_is_no_problem() {
    let s = status(Ok(Some(slot("reserved"))));
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    assert!(
        s.to_string()
            .contains("instance             not asked (no [health] section, or --no-health)"),
        "{s}"
    );
}

#[test]
fn json_has_every_part() {
    let s = status(Ok(Some(slot("extended"))));
    let json = serde_json::to_value(&s).unwrap_or_default();
    assert_eq!(json["slot"]["wal_status"], "extended", "{json}");
    assert_eq!(json["slot"]["lag_bytes"], 16 << 20, "{json}");
    assert!(json["problems"].as_array().is_some_and(Vec::is_empty));
    let s = status(Err(refused()));
    let json = serde_json::to_value(&s).unwrap_or_default();
    assert_eq!(json["slot"]["error"], "PostgreSQL: refused", "{json}");
    assert!(json["instance"].is_null(), "{json}");
}

/// Each unreadable part says the service it concerns and keeps the
/// failing layer's error as its source.
#[test]
fn an_unreadable_part_names_its_service_and_keeps_its_cause() {
    use std::error::Error as _;
    let kafka = Unreadable::Kafka(KafkaFailure {
        problem: "all brokers refused".into(),
        fix: "start Kafka".into(),
    });
    assert_eq!(kafka.to_string(), "Kafka: all brokers refused");
    let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    let local = Unreadable::from(HealthError::NoAnswer {
        url: "http://127.0.0.1:9/healthz".into(),
        source: io,
        local: true,
    });
    let text = local.to_string();
    assert!(
        text.starts_with("no instance answers on http://127.0.0.1:9/healthz: "),
        "{text}"
    );
    assert!(
        text.contains("--health-url"),
        "the fix for the local address: {text}"
    );
    let cause = local.source();
    assert!(
        cause.is_some_and(|e| e.downcast_ref::<std::io::Error>().is_some()),
        "{local:?}"
    );
    let elsewhere = Unreadable::from(HealthError::Timeout {
        url: "http://10.0.0.1:8080/healthz".into(),
        after: Duration::from_secs(3),
        local: false,
    });
    assert_eq!(
        elsewhere.to_string(),
        "no answer from http://10.0.0.1:8080/healthz within 3 s"
    );
}
