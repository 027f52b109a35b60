use super::*;

fn stored(lsn: &str) -> StoredOffset {
    StoredOffset::for_tests("c", "7", lsn.parse().unwrap())
}

#[test]
fn record_round_trip() {
    let s = stored("1/2");
    let r = s.to_record("t");
    let back: StoredOffset = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
    assert_eq!(back, s);
    assert_eq!(r.key.as_deref(), Some(&b"c"[..]));
}

/// Records as walrelay wrote them while the LSN was a `String` in memory
/// (every field, and the fewest): they read with the same LSN and write
/// back byte for byte, so old and new walrelay read each other's offsets.
#[test]
fn a_record_of_the_string_lsn_schema_reads_the_same_and_writes_back_identical() {
    let full = concat!(
        r#"{"connector":"orders","system_id":"7301234567890123456","timeline":2,"#,
        r#""slot":"walrelay_orders","lsn":"16/B374D848","written_at_ms":1764950000000,"#,
        r#""committed_at_ms":1764949999000,"#,
        r#""snapshot":{"state":"completed","tables_done":["public.outbox"],"rows":42,"#,
        r#""consistent_point":"16/B3000000"},"#,
        r#""accepted_gap":{"from":"15/00000010","to":"16/00000000","#,
        r#""accepted_at_ms":1764940000000,"from_committed_at_ms":1764930000000},"#,
        r#""incremental":{"id":"inc-1","tables":[{"table":"public.orders","key":["id","region"],"#,
        r#""filter":"id > 5","inserts_only":true,"after":["7",null],"done":false},"#,
        r#"{"table":"public.items","key":["id"],"inserts_only":false,"done":true,"#,
        r#""abandoned":"no primary key"}],"rows":9},"#,
        r#""known_tables":["public.items","public.orders"],"term":3}"#
    );
    let minimal = concat!(
        r#"{"connector":"c","system_id":"7","timeline":1,"slot":"s","#,
        r#""lsn":"0/00000000","written_at_ms":0}"#
    );
    for (text, lsn) in [(full, Lsn(0x16_B374_D848)), (minimal, Lsn::ZERO)] {
        let read: StoredOffset = serde_json::from_str(text).unwrap();
        assert_eq!(read.lsn, lsn, "{text}");
        let written = read.to_record("t").value.unwrap();
        assert_eq!(std::str::from_utf8(&written).unwrap(), text);
    }
    // What the new schema writes, the old one (a `String`) reads as the
    // same text.
    #[derive(serde::Deserialize)]
    struct Old {
        lsn: String,
    }
    let read: StoredOffset = serde_json::from_str(full).unwrap();
    let old: Old = serde_json::from_slice(&serde_json::to_vec(&read).unwrap()).unwrap();
    assert_eq!(old.lsn, "16/B374D848");
}

#[test]
fn a_record_whose_lsn_is_not_one_does_not_read() {
    let text =
        r#"{"connector":"c","system_id":"7","timeline":1,"slot":"s","lsn":"zz","written_at_ms":0}"#;
    let e = serde_json::from_str::<StoredOffset>(text).unwrap_err();
    assert!(e.to_string().contains("invalid LSN \"zz\""), "{e}");
}
