use super::*;

fn stored(lsn: &str) -> StoredOffset {
    StoredOffset::for_tests("c", "7", lsn.parse().unwrap())
}

const SERVER: Server<'static> = Server {
    system_id: "7",
    timeline: 1,
    history: None,
};

fn slot(lsn: u64, status: &str) -> SlotPosition {
    SlotPosition {
        confirmed_flush: Lsn(lsn),
        wal_status: Some(status.into()),
    }
}

#[test]
fn no_stored_offset_resumes_from_slot() {
    assert_eq!(
        compare(None, &slot(5, "reserved"), &SERVER, "s"),
        StartDecision::Resume { from: Lsn(5) }
    );
}

/// A slot behind the stored offset (PostgreSQL forgot its progress)
/// resumes at the stored offset: nothing below it is sent again.
#[test]
fn slot_behind_or_equal_resumes_at_the_stored_offset() {
    let s = stored("0/A");
    assert_eq!(
        compare(Some(&s), &slot(5, "reserved"), &SERVER, "s"),
        StartDecision::Resume { from: Lsn(10) }
    );
    assert_eq!(
        compare(Some(&s), &slot(10, "reserved"), &SERVER, "s"),
        StartDecision::Resume { from: Lsn(10) }
    );
}

#[test]
fn slot_ahead_refuses_with_hint() {
    match compare(Some(&stored("0/A")), &slot(11, "reserved"), &SERVER, "s") {
        StartDecision::Refuse { reason, hint } => {
            assert!(
                reason.contains("0/0000000B") && reason.contains("0/0000000A"),
                "{reason}"
            );
            assert!(hint.contains("--accept-slot-position"), "{hint}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn lost_slot_refuses_even_without_offset() {
    assert!(matches!(
        compare(None, &slot(1, "lost"), &SERVER, "s"),
        StartDecision::Refuse { .. }
    ));
}

#[test]
fn other_cluster_refuses() {
    assert!(matches!(
        compare(
            Some(&stored("0/1")),
            &slot(1, "reserved"),
            &Server {
                system_id: "8",
                ..SERVER
            },
            "s"
        ),
        StartDecision::Refuse { .. }
    ));
}

fn refused(d: StartDecision) -> (String, String) {
    match d {
        StartDecision::Refuse { reason, hint } => (reason, hint),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn offset_of_another_slot_refuses_with_hint() {
    let (reason, hint) = refused(compare(
        Some(&stored("0/A")),
        &slot(5, "reserved"),
        &SERVER,
        "other_slot",
    ));
    assert!(
        reason.contains("\"s\"") && reason.contains("\"other_slot\""),
        "{reason}"
    );
    assert!(
        hint.contains("postgres.slot") && hint.contains("--accept-slot-position"),
        "{hint}"
    );
}

/// A point-in-time restore: same system, new timeline, the slot (from the
/// backup) behind the stored offset — which the old rule resumed from.
#[test]
fn other_timeline_refuses_when_the_switch_point_is_unknown() {
    let on_tl2 = Server {
        timeline: 2,
        ..SERVER
    };
    let (reason, hint) = refused(compare(
        Some(&stored("0/A")),
        &slot(5, "reserved"),
        &on_tl2,
        "s",
    ));
    assert!(
        reason.contains("timeline 1") && reason.contains("timeline 2"),
        "{reason}"
    );
    assert!(
        hint.contains("00000002.history") && hint.contains("--accept-slot-position"),
        "{hint}"
    );
}

#[test]
fn stored_offset_after_the_switch_point_refuses() {
    // Restored (or failed over) to 0/8, the stored offset is 0/A: LSNs
    // 0/8..0/A name different changes on the two timelines.
    let server = Server {
        timeline: 2,
        history: Some("1\t0/8\tno recovery target specified\n"),
        ..SERVER
    };
    refused(compare(
        Some(&stored("0/A")),
        &slot(5, "reserved"),
        &server,
        "s",
    ));
}

#[test]
fn stored_offset_from_a_later_timeline_refuses() {
    let mut s = stored("0/A");
    s.timeline = 3;
    let server = Server {
        timeline: 2,
        history: Some("1\t0/100\tno recovery target specified\n"),
        ..SERVER
    };
    refused(compare(Some(&s), &slot(5, "reserved"), &server, "s"));
}

#[test]
fn the_switch_point_of_each_ancestor_timeline_is_read_from_the_history() {
    // PostgreSQL's format: blank lines between entries, a tab after each
    // field, the reason free text.
    let history = "1\t0/3000158\tno recovery target specified\n\n\
                   2\t0/5000108\tbefore 2026-11-30 12:00:00+00\n";
    assert_eq!(switch_point(history, 1), Some("0/3000158".parse().unwrap()));
    assert_eq!(switch_point(history, 2), Some("0/5000108".parse().unwrap()));
    assert_eq!(switch_point(history, 3), None, "not an ancestor");
    assert_eq!(switch_point("", 1), None);
    assert_eq!(switch_point("# comment\nnonsense\n1 zz\n", 1), None);
    // A stored offset on timeline 1 after the switch to 2 is refused on
    // timeline 3 too; at the switch point it resumes.
    let server = Server {
        timeline: 3,
        history: Some(history),
        ..SERVER
    };
    refused(compare(
        Some(&stored("0/3000160")),
        &slot(5, "reserved"),
        &server,
        "s",
    ));
    assert_eq!(
        compare(
            Some(&stored("0/3000158")),
            &slot(5, "reserved"),
            &server,
            "s"
        ),
        StartDecision::Resume {
            from: "0/3000158".parse().unwrap()
        }
    );
}

/// A failover to a standby with a synced slot: the history is continuous
/// up to the switch point, which is at or after the stored offset.
#[test]
fn failover_with_continuous_history_resumes_and_still_checks_the_slot() {
    let server = Server {
        timeline: 2,
        history: Some("1\t0/A\tno recovery target specified\n"),
        ..SERVER
    };
    let s = stored("0/A");
    assert_eq!(
        compare(Some(&s), &slot(5, "reserved"), &server, "s"),
        StartDecision::Resume { from: Lsn(10) }
    );
    assert_eq!(
        compare(Some(&s), &slot(10, "reserved"), &server, "s"),
        StartDecision::Resume { from: Lsn(10) }
    );
    refused(compare(Some(&s), &slot(11, "reserved"), &server, "s"));
}
