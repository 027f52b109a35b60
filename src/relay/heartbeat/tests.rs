use bytes::Bytes;

use super::*;

#[test]
fn beat_round_trips_through_json() {
    let beat = Beat {
        connector: "orders".into(),
        seq: 7,
        ts_ms: 1_733_000_000_123,
    };
    let json = beat.to_json();
    assert_eq!(
        json,
        r#"{"connector":"orders","seq":7,"ts_ms":1733000000123}"#
    );
    assert_eq!(Beat::parse(json.as_bytes()), Some(beat));
    assert_eq!(Beat::parse(b"not json"), None);
    assert_eq!(Beat::parse(br#"{"connector":"x"}"#), None);
}

#[test]
fn round_trip_is_never_negative() {
    let beat = Beat {
        connector: "c".into(),
        seq: 1,
        ts_ms: 10_000,
    };
    assert_eq!(beat.round_trip(10_250), Duration::from_millis(250));
    assert_eq!(beat.round_trip(9_000), Duration::ZERO, "clock stepped back");
}

// The streaming loop's handling, with a producer whose broker does not
// exist: records stay in flight for as long as the test needs.

use crate::Lsn;
use crate::config::Config;
use crate::relay::publish::Publisher;
use crate::relay::{Ack, Token};
use crate::source::Position;
use tokio::sync::mpsc::UnboundedReceiver;

const START: Lsn = Lsn(0x1000);

fn publisher(publish: bool) -> (Publisher, UnboundedReceiver<Ack>) {
    let text = format!(
        "[connector]\nname = \"orders\"\n[postgres]\ndatabase = \"app\"\n[kafka]\n\
         brokers = \"127.0.0.1:9\"\n[[outbox]]\ntable = \"public.outbox\"\n\
         [heartbeat]\ninterval = \"10s\"\npublish = {publish}\n"
    );
    let config = Arc::new(Config::from_str(&text, "test.toml").unwrap());
    let (sink, acks) = crate::relay::sink_for_tests(&config);
    let router = crate::router::Router::new(&config.outbox);
    let template = crate::offsets::StoredOffset::for_tests("orders", "1", crate::Lsn::ZERO);
    let metrics = Arc::new(Metrics::new("orders"));
    let offsets = super::super::offset_writer::OffsetWriter::new(template, "offsets", START);
    let s = Publisher::new(config, metrics, sink, router, START, offsets);
    (s, acks)
}

fn beat(connector: &str) -> Vec<u8> {
    Beat {
        connector: connector.into(),
        seq: 1,
        ts_ms: now_ms(),
    }
    .to_json()
    .into_bytes()
}

/// One outbox-like record in flight in a transaction ending at `end`;
/// returns the token that acknowledges it.
async fn record_in_flight(s: &mut Publisher, end: Lsn) -> Token {
    let txn = s.checkpoint_mut().begin().unwrap();
    let record = Record::new(
        "t".into(),
        None,
        Some(Bytes::from_static(b"v")),
        Vec::new(),
        None,
    );
    let pos = Position {
        commit_lsn: end,
        index: 0,
    };
    s.publish(txn, pos, &record, crate::relay::publish::Counted::Other)
        .await
        .unwrap();
    s.checkpoint_mut().commit(txn, end).unwrap();
    Token::Record {
        txn,
        bytes: record.size(),
        commit_lsn: end,
        index: 0,
        event_id: None,
        snapshot_chunk: None,
        commit_ms: 0,
    }
}

#[tokio::test]
async fn a_heartbeat_advances_an_idle_frontier() {
    let (mut s, _acks) = publisher(false);
    on_message(&mut s, Lsn(0x2000), PREFIX, &beat("orders"))
        .await
        .unwrap();
    assert_eq!(s.checkpoint().confirmed(), Lsn(0x2000));
    assert_eq!(s.metrics().heartbeats_received.load(Ordering::Relaxed), 1);
    assert!(s.metrics().heartbeat_age().is_some());
    // Another connector's heartbeat is a safe point too, but not ours to count.
    on_message(&mut s, Lsn(0x3000), PREFIX, &beat("billing"))
        .await
        .unwrap();
    assert_eq!(s.checkpoint().confirmed(), Lsn(0x3000));
    assert_eq!(s.metrics().heartbeats_received.load(Ordering::Relaxed), 1);
    // Another prefix is not a heartbeat at all.
    on_message(&mut s, Lsn(0x4000), "dblog.watermark", b"x")
        .await
        .unwrap();
    assert_eq!(s.checkpoint().confirmed(), Lsn(0x3000));
}

#[tokio::test]
async fn a_heartbeat_never_passes_an_unacknowledged_record() {
    let (mut s, _acks) = publisher(false);
    let token = record_in_flight(&mut s, Lsn(0x1800)).await;
    on_message(&mut s, Lsn(0x2000), PREFIX, &beat("orders"))
        .await
        .unwrap();
    s.checkpoint_mut().keepalive(Lsn(0x2100));
    assert_eq!(
        s.checkpoint().confirmed(),
        START,
        "heartbeat jumped the queue"
    );
    s.on_ack(Ack::Delivered(token)).unwrap();
    assert_eq!(s.checkpoint().confirmed(), Lsn(0x2000));
}

#[tokio::test]
async fn a_published_heartbeat_waits_for_its_own_record() {
    let (mut s, _acks) = publisher(true);
    let token = record_in_flight(&mut s, Lsn(0x1800)).await;
    on_message(&mut s, Lsn(0x2000), PREFIX, &beat("orders"))
        .await
        .unwrap();
    assert_eq!(
        s.checkpoint().in_flight_records(),
        2,
        "the heartbeat record"
    );
    s.on_ack(Ack::Delivered(token)).unwrap();
    assert_eq!(
        s.checkpoint().confirmed(),
        Lsn(0x1800),
        "confirmed past the unacknowledged heartbeat record"
    );
    // Another connector's heartbeat publishes nothing of ours.
    on_message(&mut s, Lsn(0x3000), PREFIX, &beat("billing"))
        .await
        .unwrap();
    assert_eq!(s.checkpoint().in_flight_records(), 1);
    assert_eq!(s.checkpoint().confirmed(), Lsn(0x1800));
}

#[test]
fn record_has_debeziums_shape() {
    let beat = Beat {
        connector: "orders".into(),
        seq: 1,
        ts_ms: 1_733_000_000_123,
    };
    let record = beat
        .record("orders", "__debezium-heartbeat.orders", TableFormat::Json)
        .unwrap();
    assert_eq!(&*record.topic, "__debezium-heartbeat.orders");
    assert_eq!(
        record.key.as_deref(),
        Some(&br#"{"serverName":"orders"}"#[..])
    );
    assert_eq!(
        record.value.as_deref(),
        Some(&br#"{"ts_ms":1733000000123}"#[..])
    );
    assert_eq!(record.timestamp_ms, Some(1_733_000_000_123));
    assert!(record.headers.is_empty());
    assert!(record.schemas.is_none());
}
