use super::*;

#[test]
fn parses_xlogdata() {
    let mut b = BytesMut::new();
    b.put_u8(b'w');
    b.put_u64(0x1_0000_0010);
    b.put_u64(0x1_0000_0020);
    b.put_i64(42);
    b.put_slice(b"Bpayload");
    match parse_replication_message(b.freeze()) {
        Ok(ReplicationMessage::XLogData {
            wal_start,
            wal_end,
            send_time,
            data,
        }) => {
            assert_eq!(wal_start, Lsn(0x1_0000_0010));
            assert_eq!(wal_end, Lsn(0x1_0000_0020));
            assert_eq!(send_time, 42);
            assert_eq!(&data[..], b"Bpayload");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn parses_keepalive() {
    let mut b = BytesMut::new();
    b.put_u8(b'k');
    b.put_u64(77);
    b.put_i64(5);
    b.put_u8(1);
    assert_eq!(
        parse_replication_message(b.freeze()).ok(),
        Some(ReplicationMessage::Keepalive {
            wal_end: Lsn(77),
            send_time: 5,
            reply: true
        })
    );
}

#[test]
fn truncated_and_unknown_are_errors() {
    for bad in [&b""[..], b"w", b"wshort", b"k12345678", b"x"] {
        assert!(
            parse_replication_message(Bytes::copy_from_slice(bad)).is_err(),
            "{bad:?} parsed"
        );
    }
}

#[test]
fn status_update_layout() {
    let b = encode_status_update(Lsn(1), Lsn(2), Lsn(3), 4, true);
    assert_eq!(b.len(), 34);
    assert_eq!(b[0], b'r');
    assert_eq!(&b[1..9], &1u64.to_be_bytes());
    assert_eq!(&b[9..17], &2u64.to_be_bytes());
    assert_eq!(&b[17..25], &3u64.to_be_bytes());
    assert_eq!(&b[25..33], &4i64.to_be_bytes());
    assert_eq!(b[33], 1);
}

#[test]
fn commands_quote_names() {
    assert_eq!(
        start_replication_sql("my slot", Lsn(0x1_0000_0002), "pub\"x", false),
        "START_REPLICATION SLOT \"my slot\" LOGICAL 1/00000002 (\"proto_version\" '1', \
         \"publication_names\" '\"pub\"\"x\"', \"messages\" 'true')"
    );
    // Transactions while they run: protocol 2 with streaming.
    assert_eq!(
        start_replication_sql("s", Lsn(0x1_0000_0002), "p", true),
        "START_REPLICATION SLOT \"s\" LOGICAL 1/00000002 (\"proto_version\" '2', \
         \"streaming\" 'on', \"publication_names\" '\"p\"', \"messages\" 'true')"
    );
    // FAILOVER only where the server has it (17+), and only when asked.
    assert_eq!(
        create_slot_sql("s", 140010, true),
        "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput NOEXPORT_SNAPSHOT"
    );
    assert_eq!(
        create_slot_sql("s", 160004, true),
        "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput (SNAPSHOT 'nothing')"
    );
    assert_eq!(
        create_slot_sql("s", 180004, true),
        "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput (SNAPSHOT 'nothing', FAILOVER)"
    );
    assert_eq!(
        create_slot_sql("s", 180004, false),
        "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput (SNAPSHOT 'nothing')"
    );
    assert_eq!(
        create_slot_exporting_sql("a\"b", 140010, true),
        "CREATE_REPLICATION_SLOT \"a\"\"b\" LOGICAL pgoutput EXPORT_SNAPSHOT"
    );
    assert_eq!(
        create_slot_exporting_sql("s", 150000, true),
        "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput (SNAPSHOT 'export')"
    );
    assert_eq!(
        create_slot_exporting_sql("s", 170000, true),
        "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER)"
    );
    assert_eq!(
        drop_slot_sql("my slot"),
        "DROP_REPLICATION_SLOT \"my slot\" WAIT"
    );
}

#[test]
fn pg_time_round_trip() {
    let now = pg_now_us();
    let unix_ms = pg_us_to_unix_ms(now);
    let real = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    assert!((real - unix_ms).abs() < 5_000);
}
