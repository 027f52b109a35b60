//! Proves both services are real: a logical slot on PostgreSQL decodes an
//! inserted row, and a record produced to Kafka with acks=all comes back.
//! CI runs this file against every supported PostgreSQL major (14–18).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use support::*;

#[tokio::test]
async fn postgres_decodes_a_committed_insert_with_pgoutput() {
    let db = TestDb::new("svc").await;
    let slot = unique("svc_slot");
    let version: i32 = db
        .client
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .expect("version")
        .get(0);
    assert_eq!(
        (version / 10000).to_string(),
        pg_major(),
        "the server's major version is not the one WALRELAY_PG_MAJOR names"
    );
    // Separate statements: a multi-statement string is one transaction, and
    // a slot cannot be created in a transaction that has written.
    for sql in [
        "CREATE TABLE t (id int PRIMARY KEY, note text)".to_owned(),
        "CREATE PUBLICATION svc_pub FOR TABLE t".to_owned(),
        format!("SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"),
        "INSERT INTO t VALUES (1, 'hello walrelay')".to_owned(),
    ] {
        db.client
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let rows = db
        .client
        .query(
            "SELECT data FROM pg_logical_slot_get_binary_changes($1, NULL, NULL, \
             'proto_version', '1', 'publication_names', 'svc_pub')",
            &[&slot],
        )
        .await
        .expect("read changes");
    let tags: Vec<u8> = rows.iter().map(|r| r.get::<_, Vec<u8>>(0)[0]).collect();
    assert_eq!(tags, b"BRIC", "Begin, Relation, Insert, Commit");
    let insert: Vec<u8> = rows[2].get(0);
    assert!(
        insert
            .windows(b"hello walrelay".len())
            .any(|w| w == b"hello walrelay"),
        "the Insert message carries the row's text"
    );
    db.client
        .batch_execute(&format!("SELECT pg_drop_replication_slot('{slot}')"))
        .await
        .expect("drop");
}

#[tokio::test]
async fn kafka_round_trips_a_record_with_acks_all() {
    require_kafka();
    let topic = unique("svc_topic");
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "30000")
        .create()
        .expect("producer");
    let delivered = producer
        .send(
            FutureRecord::to(&topic)
                .key("agg-1")
                .payload("{\"hello\":1}"),
            Duration::from_secs(30),
        )
        .await;
    let (partition, offset) = match delivered {
        Ok(d) => (d.partition, d.offset),
        Err((e, _)) => panic!(
            "Kafka at {} did not acknowledge a record: {e}. Start it with `deploy/dev/kafka.sh up`.",
            kafka_brokers()
        ),
    };
    let got = consume(
        &[&topic],
        1,
        Duration::from_secs(30),
        Duration::from_millis(200),
    );
    assert_eq!(got.len(), 1, "exactly the one record comes back: {got:?}");
    assert_eq!((got[0].partition, got[0].offset), (partition, offset));
    assert_eq!(got[0].key.as_deref(), Some(&b"agg-1"[..]));
    assert_eq!(got[0].value.as_deref(), Some(&b"{\"hello\":1}"[..]));
}

/// The dev scripts reserve the services' ports from the range the kernel
/// gives outgoing connections (deploy/dev/lib.sh `reserve_ports`): a port in
/// that range can be the local end of any client's connection when its
/// service starts, and the bind fails although nothing listens (CI lost a run
/// to it: PostgreSQL 16 on 54316).
#[test]
fn service_ports_cannot_be_taken_by_outgoing_connections() {
    // One read() with a large buffer: these files answer only the first
    // read of an open file (read_to_string's 32-byte probe read would get a
    // list cut after 32 bytes, and EOF after it).
    let read = |f: &str| {
        use std::io::Read;
        let path = format!("/proc/sys/net/ipv4/{f}");
        let mut buf = vec![0u8; 64 * 1024];
        let n = std::fs::File::open(&path)
            .and_then(|mut file| file.read(&mut buf))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let range: Vec<u32> = read("ip_local_port_range")
        .split_whitespace()
        .map(|p| p.parse().expect("ip_local_port_range"))
        .collect();
    let reserved = read("ip_local_reserved_ports");
    let is_reserved = |port: u32| {
        reserved
            .trim()
            .split(',')
            .filter(|r| !r.is_empty())
            .any(|r| {
                let (a, b) = r.split_once('-').unwrap_or((r, r));
                (a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()).contains(&port)
            })
    };
    let kafka_port: u32 = kafka_brokers()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port in WALRELAY_KAFKA_BROKERS");
    for (what, port) in [("PostgreSQL", u32::from(pg_port())), ("Kafka", kafka_port)] {
        assert!(
            port < range[0] || port > range[1] || is_reserved(port),
            "{what}'s port {port} lies in the outgoing-connection range {}-{} and is not \
             in net.ipv4.ip_local_reserved_ports ({}); the dev scripts reserve it as root",
            range[0],
            range[1],
            reserved.trim()
        );
    }
}
