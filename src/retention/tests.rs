#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

use crate::offsets::{
    AcceptedGap, IncrementalProgress, IncrementalTableProgress, SnapshotProgress,
};

const MIN: Duration = Duration::from_secs(60);

fn offset() -> StoredOffset {
    StoredOffset {
        connector: "c".into(),
        system_id: "7".into(),
        timeline: 1,
        slot: "s".into(),
        lsn: "1/2".parse().unwrap(),
        written_at_ms: 9_000_000,
        committed_at_ms: Some(1_000_000),
        snapshot: None,
        accepted_gap: None,
        incremental: None,
        known_tables: vec!["public.outbox".into()],
        term: None,
    }
}

#[test]
fn the_stored_commit_time_minus_the_margin_is_the_bound() {
    let g = guard(Some(&offset()), "s", "public.outbox", MIN, false).unwrap();
    assert_eq!(
        g,
        Guard {
            published_before_ms: 1_000_000 - 60_000,
            gap: None
        }
    );
    // Never the offset's write time: a lagging connector writes offsets
    // of transactions committed long before.
    assert_ne!(g.published_before_ms, 9_000_000 - 60_000);
}

#[test]
fn no_offset_or_one_that_says_nothing_about_the_table_keeps_everything() {
    assert_eq!(
        guard(None, "s", "public.outbox", MIN, false),
        Err(KeepAll::NoOffset)
    );
    let mut o = offset();
    o.committed_at_ms = None;
    assert_eq!(
        guard(Some(&o), "s", "public.outbox", MIN, false),
        Err(KeepAll::NoCommitTime)
    );
    assert!(matches!(
        guard(Some(&offset()), "other", "public.outbox", MIN, false),
        Err(KeepAll::OtherSlot { .. })
    ));
    let mut o = offset();
    o.snapshot = Some(SnapshotProgress {
        state: SnapshotState::Running,
        tables_done: Vec::new(),
        rows: 0,
        consistent_point: None,
        taken: None,
        shapes: Vec::new(),
        attempt: 0,
        parts: Vec::new(),
    });
    assert_eq!(
        guard(Some(&o), "s", "public.outbox", MIN, false),
        Err(KeepAll::SnapshotRunning)
    );
    o.snapshot.as_mut().unwrap().state = SnapshotState::Completed;
    assert!(guard(Some(&o), "s", "public.outbox", MIN, false).is_ok());
    assert_eq!(
        guard(Some(&offset()), "s", "public.later", MIN, false),
        Err(KeepAll::TableNotKnown)
    );
    // Offsets written before walrelay kept known_tables know nothing of it.
    let mut o = offset();
    o.known_tables.clear();
    assert!(guard(Some(&o), "s", "public.later", MIN, false).is_ok());
    let mut o = offset();
    let mut table = IncrementalTableProgress {
        table: "public.outbox".into(),
        key: vec!["id".into()],
        filter: None,
        inserts_only: false,
        after: None,
        done: false,
        abandoned: None,
    };
    o.incremental = Some(IncrementalProgress {
        id: "inc-1".into(),
        tables: vec![table.clone()],
        rows: 0,
    });
    assert_eq!(
        guard(Some(&o), "s", "public.outbox", MIN, false),
        Err(KeepAll::IncrementalRunning("inc-1".into()))
    );
    table.done = true;
    o.incremental.as_mut().unwrap().tables = vec![table];
    assert!(guard(Some(&o), "s", "public.outbox", MIN, false).is_ok());
}

#[test]
fn an_accepted_gap_is_kept_with_the_margin_on_both_sides_until_said_republished() {
    let mut o = offset();
    o.accepted_gap = Some(AcceptedGap {
        from: "0/10".into(),
        to: "1/0".into(),
        accepted_at_ms: 800_000,
        from_committed_at_ms: Some(500_000),
    });
    let g = guard(Some(&o), "s", "public.outbox", MIN, false).unwrap();
    assert_eq!(g.gap, Some((440_000, 860_000)));
    let g = guard(Some(&o), "s", "public.outbox", MIN, true).unwrap();
    assert_eq!(g.gap, None);
    // Without the gap's start, everything up to the acceptance is kept.
    o.accepted_gap.as_mut().unwrap().from_committed_at_ms = None;
    let g = guard(Some(&o), "s", "public.outbox", MIN, false).unwrap();
    assert_eq!(g.gap, Some((i64::MIN, 860_000)));
}

#[test]
fn batches_grow_towards_the_row_target_and_stay_bounded() {
    assert_eq!(next_blocks(8, 0, 1000), 16);
    assert_eq!(next_blocks(8, 100, 1000), 16, "at most doubling");
    assert_eq!(next_blocks(8, 4000, 1000), 2);
    assert_eq!(next_blocks(1, 1_000_000, 1000), 1);
    assert_eq!(next_blocks(MAX_BLOCKS, 0, 1000), MAX_BLOCKS);
}

fn config(text: &str) -> Config {
    Config::from_str(
        &format!(
            "[connector]\nname = \"c\"\n[postgres]\ndatabase = \"app\"\n[kafka]\n\
             brokers = \"127.0.0.1:9092\"\n[[outbox]]\ntable = \"public.outbox\"\n\
             [outbox.retention]\nkeep = \"7d\"\n{text}"
        ),
        "test.toml",
    )
    .unwrap()
}

#[test]
fn a_table_whose_deletes_become_change_events_is_named_with_the_fix() {
    // The configuration already refuses a table that is both; the rule
    // holds where the deletes are made all the same.
    let mut c = config("[[table]]\nname = \"public.orders\"\n");
    assert_eq!(deletes_published(&c, &c.outbox[0]), None);
    c.tables[0].name = c.outbox[0].table.clone();
    let (key, message) = deletes_published(&c, &c.outbox[0]).unwrap();
    assert_eq!(key, "table[0].skipped_operations");
    assert!(message.contains("publishes its deletes"), "{message}");
    assert!(message.contains("add \"d\""), "{message}");
    c.tables[0].skipped_operations = Some("d".to_owned().try_into().unwrap());
    assert_eq!(deletes_published(&c, &c.outbox[0]), None);
}

#[test]
fn retention_keys_are_checked_naming_the_key_and_the_fix() {
    let c = config("");
    let r = c.outbox[0].retention.as_ref().unwrap();
    assert_eq!(r.keep, Duration::from_secs(7 * 86_400));
    assert_eq!(r.margin(), Duration::from_secs(300));
    assert_eq!(r.batch_rows, 1000);
    assert_eq!(r.interval, None);
    let err = |extra: &str| {
        Config::from_str(
            &format!(
                "[connector]\nname = \"c\"\n[postgres]\ndatabase = \"app\"\n[kafka]\n\
                 brokers = \"127.0.0.1:9092\"\n[[outbox]]\ntable = \"public.outbox\"\n\
                 [outbox.retention]\n{extra}"
            ),
            "test.toml",
        )
        .unwrap_err()
        .to_string()
    };
    let e = err("keep = \"7d\"\ncolumn = \"created_at\"\n");
    assert!(
        e.contains("outbox[0].retention.margin") && e.contains("longest transaction"),
        "{e}"
    );
    let e = err("keep = \"7d\"\nbatch_rows = 0\n");
    assert!(e.contains("outbox[0].retention.batch_rows"), "{e}");
    let e = err("keep = \"7d\"\nmargin = \"0s\"\n");
    assert!(e.contains("outbox[0].retention.margin"), "{e}");
    let e = err("keep = \"7d\"\nlock_timeout = \"0s\"\n");
    assert!(e.contains("outbox[0].retention.lock_timeout"), "{e}");
    let e = err("keep = \"seven days\"\n");
    assert!(e.contains("keep") && e.contains("invalid duration"), "{e}");
    let e = err("margin = \"5m\"\n");
    assert!(e.contains("keep"), "{e}");
    let e = err("keep = \"7d\"\nkeep_for = \"1d\"\n");
    assert!(e.contains("keep_for"), "{e}");
}

#[test]
fn the_report_says_what_was_kept_and_why() {
    let mut r = TableReport::new("public.outbox".into());
    r.deleted = 5;
    r.kept_unpublished = 3;
    r.kept_younger = 2;
    r.kept_locked = 1;
    r.skipped_batches = 1;
    let text = r.to_string();
    assert!(
        text.starts_with("public.outbox: deleted 5, kept 6 (3 not yet published, 2 younger"),
        "{text}"
    );
    assert!(text.contains("1 locked"), "{text}");
    r.kept_all = Some(KeepAll::NoOffset.to_string());
    r.kept_all_rows = 9;
    assert!(r.to_string().contains("no offset is stored"));
}
