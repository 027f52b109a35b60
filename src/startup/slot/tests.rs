use super::*;

fn pg(create_slot: bool) -> PostgresConfig {
    toml::from_str(&format!(
        "database = \"d\"\nslot = \"s\"\ncreate_slot = {create_slot}"
    ))
    .unwrap()
}

fn slot(wal_status: &str) -> SlotState {
    SlotState {
        plugin: Some("pgoutput".into()),
        slot_type: "logical".into(),
        database: Some("d".into()),
        active_pid: None,
        restart_lsn: Some(Lsn(0x100)),
        confirmed_flush_lsn: Some(Lsn(0x200)),
        wal_status: Some(wal_status.into()),
        failover: None,
        invalidation_reason: None,
    }
}

/// Refused only for the slot of a snapshot never streamed from, lost to
/// the idle timeout, with the timeout still on.
#[test]
fn a_snapshot_lost_to_the_idle_timeout_is_not_taken_again_blindly() {
    use crate::offsets::{SnapshotProgress, SnapshotState};
    let mut lost = slot("lost");
    lost.invalidation_reason = Some("idle_timeout".into());
    let mut just_snapshotted = stored(Some(SnapshotState::Completed));
    just_snapshotted.lsn = "0/200".parse().unwrap();
    just_snapshotted.snapshot = Some(SnapshotProgress {
        state: SnapshotState::Completed,
        tables_done: Vec::new(),
        rows: 10,
        consistent_point: Some("0/200".into()),
        taken: None,
        shapes: Vec::new(),
        attempt: 0,
        parts: Vec::new(),
    });
    let refused = snapshot_outlived_idle_timeout(Some(&just_snapshotted), Some(&lost), "s", "1min")
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("idle_replication_slot_timeout (1min)"),
        "{refused}"
    );
    assert!(refused.contains("pg_reload_conf"), "{refused}");
    // The timeout turned off since: taken again.
    assert!(snapshot_outlived_idle_timeout(Some(&just_snapshotted), Some(&lost), "s", "0").is_ok());
    // Streamed past the consistent point (then down for long): taken again.
    let mut streamed = just_snapshotted.clone();
    streamed.lsn = "0/300".parse().unwrap();
    assert!(snapshot_outlived_idle_timeout(Some(&streamed), Some(&lost), "s", "1min").is_ok());
    // Lost for another reason: taken again.
    let mut removed = lost.clone();
    removed.invalidation_reason = Some("wal_removed".into());
    assert!(
        snapshot_outlived_idle_timeout(Some(&just_snapshotted), Some(&removed), "s", "1min")
            .is_ok()
    );
    assert!(snapshot_outlived_idle_timeout(None, Some(&lost), "s", "1min").is_ok());
}

fn stored(snapshot: Option<crate::offsets::SnapshotState>) -> StoredOffset {
    StoredOffset {
        snapshot: snapshot.map(|state| crate::offsets::SnapshotProgress {
            state,
            tables_done: Vec::new(),
            rows: 0,
            consistent_point: None,
            taken: None,
            shapes: Vec::new(),
            attempt: 0,
            parts: Vec::new(),
        }),
        ..StoredOffset::for_tests("c", "1", "0/200".parse().unwrap())
    }
}

/// Every rule of the start decision, one case each.
#[test]
fn the_slot_plan_follows_the_mode_the_offset_and_the_slot() {
    use crate::offsets::SnapshotState::{Completed, Running};
    use SnapshotMode::*;
    let snap = |drop_first| move |p: &SlotPlan| matches!(p, SlotPlan::Snapshot { drop_first: d, .. } if *d == drop_first);
    let plan = |mode, st: Option<StoredOffset>, sl: Option<SlotState>| {
        slot_plan(mode, st.as_ref(), sl.as_ref(), &pg(true), false)
    };
    // A new connector snapshots unless told not to.
    for mode in [None, Some(Initial), Some(InitialOnly), Some(WhenNeeded)] {
        assert!(snap(false)(&plan(mode, None, None).unwrap()), "{mode:?}");
    }
    assert_eq!(
        plan(Some(NoData), None, None).unwrap(),
        SlotPlan::CreateAndStream
    );
    // An existing slot without an offset: streamed from when the mode is
    // unset or no_data, refused when a snapshot is asked for.
    assert_eq!(
        plan(None, None, Some(slot("reserved"))).unwrap(),
        SlotPlan::Resume
    );
    assert_eq!(
        plan(Some(NoData), None, Some(slot("reserved"))).unwrap(),
        SlotPlan::Resume
    );
    for mode in [Initial, InitialOnly, WhenNeeded] {
        let e = plan(Some(mode), None, Some(slot("reserved"))).unwrap_err();
        assert!(
            e.problem().contains("exists already") && e.fix().contains("no_data"),
            "{}",
            e.problem()
        );
    }
    // An interrupted snapshot is taken again, dropping our slot first.
    assert!(snap(true)(
        &plan(None, Some(stored(Some(Running))), Some(slot("reserved"))).unwrap()
    ));
    assert!(snap(false)(
        &plan(Some(Initial), Some(stored(Some(Running))), None).unwrap()
    ));
    // ... except under no_data, which streams from the slot.
    assert_eq!(
        plan(
            Some(NoData),
            Some(stored(Some(Running))),
            Some(slot("reserved"))
        )
        .unwrap(),
        SlotPlan::Resume
    );
    // A stored offset and its slot: stream on; initial_only has nothing to do.
    for st in [None, Some(Completed)] {
        assert_eq!(
            plan(None, Some(stored(st)), Some(slot("reserved"))).unwrap(),
            SlotPlan::Resume
        );
        assert!(matches!(
            plan(Some(InitialOnly), Some(stored(st)), Some(slot("reserved"))).unwrap(),
            SlotPlan::NothingToDo { .. }
        ));
    }
    // The slot is missing: refused, but when_needed snapshots again.
    assert!(plan(None, Some(stored(Some(Completed))), None).is_err());
    assert!(snap(false)(
        &plan(Some(WhenNeeded), Some(stored(Some(Completed))), None).unwrap()
    ));
    // A lost slot under when_needed is dropped and snapshotted again.
    assert!(snap(true)(
        &plan(Some(WhenNeeded), Some(stored(None)), Some(slot("lost"))).unwrap()
    ));
    assert_eq!(
        plan(None, Some(stored(None)), Some(slot("lost"))).unwrap(),
        SlotPlan::Resume
    );
    // A snapshot needs the slot walrelay creates.
    let e = slot_plan(None, None, None, &pg(false), false).unwrap_err();
    assert!(
        e.problem().contains("create_slot = false"),
        "{}",
        e.problem()
    );
}

#[test]
fn a_test_decoding_slot_is_named_with_its_plugin() {
    let slot = SlotState {
        plugin: Some("test_decoding".into()),
        slot_type: "logical".into(),
        database: Some("d".into()),
        active_pid: None,
        restart_lsn: None,
        confirmed_flush_lsn: None,
        wal_status: None,
        failover: None,
        invalidation_reason: None,
    };
    let e = slot_shape(&slot, "s", "d").unwrap_err();
    assert!(e.problem().contains("using plugin test_decoding"), "{e}");
}

/// An interrupted snapshot is resumed on its slot only when the slot is
/// still at the stored consistent point and the readers' snapshot and the
/// tables' shapes are stored; otherwise it is taken again, saying why.
#[test]
fn an_interrupted_snapshot_is_resumed_only_on_its_untouched_slot() {
    use crate::offsets::SnapshotState::Running;
    let resumable = || {
        let mut s = stored(Some(Running));
        let p = s.snapshot.as_mut().unwrap();
        p.consistent_point = Some("0/200".into());
        p.taken = Some("750:752:750".into());
        p.shapes = vec![(
            16384,
            "public.outbox (kind r, filenode 16384, columns: …)".into(),
        )];
        s
    };
    let plan = |st: StoredOffset, sl: Option<SlotState>| {
        slot_plan(None, Some(&st), sl.as_ref(), &pg(true), false).unwrap()
    };
    match plan(resumable(), Some(slot("reserved"))) {
        SlotPlan::Snapshot {
            drop_first: false,
            resume: Some(point),
            why,
            ..
        } => {
            assert_eq!(point, Lsn(0x200));
            assert!(why.contains("resumed"), "{why}");
        }
        other => panic!("not resumed: {other:?}"),
    }
    // Each missing condition: taken again from the start, saying why.
    let mut moved = slot("reserved");
    moved.confirmed_flush_lsn = Some(Lsn(0x300));
    let mut invalidated = slot("lost");
    invalidated.invalidation_reason = Some("wal_removed".into());
    let mut no_taken = resumable();
    no_taken.snapshot.as_mut().unwrap().taken = None;
    let mut no_shapes = resumable();
    no_shapes.snapshot.as_mut().unwrap().shapes.clear();
    let mut no_point = resumable();
    no_point.snapshot.as_mut().unwrap().consistent_point = None;
    for (st, sl, said, drop_first) in [
        (resumable(), Some(moved), "is at 0/00000300, not at", true),
        (
            resumable(),
            Some(invalidated),
            "was invalidated (wal_removed)",
            true,
        ),
        (resumable(), None, "is gone", false),
        (no_taken, Some(slot("reserved")), "never stored", true),
        (no_shapes, Some(slot("reserved")), "never stored", true),
        (
            no_point,
            Some(slot("reserved")),
            "consistent point was never stored",
            true,
        ),
    ] {
        match plan(st, sl) {
            SlotPlan::Snapshot {
                drop_first: d,
                resume: None,
                why,
                ..
            } => {
                assert_eq!(d, drop_first, "{why}");
                assert!(
                    why.contains(said) && why.contains("taken again from the start"),
                    "{said}: {why}"
                );
            }
            other => panic!("{said}: {other:?}"),
        }
    }
}
