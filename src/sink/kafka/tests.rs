use super::*;
use crate::sink::properties::{PropertyError, check_producer_properties};

fn test_outage() -> Arc<OutageLog> {
    Arc::new(OutageLog::new("Kafka", Duration::ZERO))
}

use crate::sink::properties_for_tests as props;

/// Every codec the config accepts is compiled into librdkafka.
#[test]
fn every_configurable_codec_is_built_in() {
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let created = KafkaSink::<()>::new(&props(&[("compression.type", codec)]), test_outage());
        assert!(created.is_ok(), "{codec}: {:?}", created.err());
    }
}

/// TLS and SASL/SCRAM to the brokers need librdkafka built with OpenSSL.
#[test]
fn tls_and_sasl_scram_are_built_in() {
    let created = KafkaSink::<()>::new(
        &props(&[
            ("security.protocol", "sasl_ssl"),
            ("sasl.mechanisms", "SCRAM-SHA-512"),
            ("sasl.username", "u"),
            ("sasl.password", "p"),
        ]),
        test_outage(),
    );
    assert!(created.is_ok(), "{:?}", created.err());
}

/// librdkafka's errors repeat the value of a property it refuses; a
/// misspelt secret property is not known to be secret, so the sink's
/// error names the property only.
#[test]
fn a_refused_property_is_named_without_its_value() {
    for (key, value) in [
        ("sasl.pasword", "hunter2-Zq9"),
        ("SASL.Password", "hunter2-Zq9"),
        ("sasl.password ", "hunter2-Zq9"),
        ("security.protocol", "hunter2-Zq9"),
        ("linger.ms", "hunter2-Zq9"),
    ] {
        let Err(error) = KafkaSink::<()>::new(&props(&[(key, value)]), test_outage()) else {
            panic!("{key:?} accepted")
        };
        assert_eq!(error.kind, SinkErrorKind::Definite);
        assert!(!error.message.contains(value), "{key}: {error}");
        assert!(
            error.message.contains(&format!("{key:?}")),
            "{key}: {error}"
        );
        let checked = check_producer_properties(&props(&[(key, value)])).unwrap_err();
        assert_eq!(checked.property.as_deref(), Some(key));
        assert!(!checked.message.contains(value), "{key}: {checked}");
    }
}

/// A secret that appears in a message about several properties is redacted.
#[test]
fn secrets_are_redacted_from_messages_about_several_properties() {
    let e = KafkaError::ClientCreation("ssl.key.password hunter2-Zq9 is wrong".into());
    let error = PropertyError::from_kafka(&e, &props(&[("ssl.key.password", "hunter2-Zq9")]));
    assert!(!error.message.contains("hunter2"), "{error}");
    assert!(error.message.contains("[REDACTED]"), "{error}");
}

fn record(i: u64) -> Record {
    Record::new(
        "t".into(),
        Some(bytes::Bytes::from(format!("k{i}"))),
        Some(bytes::Bytes::from(format!("v{i}"))),
        Vec::new(),
        None,
    )
}

/// Sends records 0..n (one request each, up to `in_flight` at once) to a
/// mock broker whose first produce request fails with "not leader", and
/// returns the acks by record number plus the values in the log.
async fn produce_through_a_failed_first_request(
    in_flight: &str,
    n: u64,
) -> (Vec<(u64, Result<(), SinkError>)>, Vec<String>) {
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("t", 1, 1).unwrap();
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION],
    );
    let mut properties = props(&[
        ("batch.num.messages", "1"),
        ("linger.ms", "0"),
        ("max.in.flight", in_flight),
    ]);
    properties[0].1 = mock.bootstrap_servers();
    let (sink, mut acks) = KafkaSink::new(&properties, test_outage()).unwrap();
    for i in 0..n {
        sink.send(&record(i), i).await.unwrap();
    }
    let mut got = Vec::new();
    while got.len() < n as usize {
        let ack = tokio::time::timeout(Duration::from_secs(30), acks.recv())
            .await
            .expect("every record is acknowledged")
            .expect("channel open");
        got.push(match ack {
            Ack::Delivered(i) => (i, Ok(())),
            Ack::Failed { token, error, .. } => (token, Err(error)),
            other => panic!("unexpected {other:?}"),
        });
    }
    got.sort_by_key(|(i, _)| *i);

    (got, read_back(&mock))
}

/// Every value in partition 0 of the mock cluster's topic `t`, in order.
fn read_back<C: rdkafka::ClientContext>(
    mock: &rdkafka::mocking::MockCluster<'_, C>,
) -> Vec<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", mock.bootstrap_servers())
        .set("group.id", "read-back")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset("t", 0, rdkafka::Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let (_, high) = consumer
        .fetch_watermarks("t", 0, Duration::from_secs(10))
        .unwrap();
    let mut log = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while (log.len() as i64) < high && std::time::Instant::now() < deadline {
        use rdkafka::Message;
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            log.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
        }
    }
    log
}

/// librdkafka's implicit ack: request 1 fails "not leader", requests 2..
/// (already in flight) succeed, and record 0 is reported delivered
/// although it was never written. The sink must not call it delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_report_without_an_offset_is_not_a_delivery() {
    let (acks, log) = produce_through_a_failed_first_request("5", 20).await;
    assert!(
        !log.contains(&"v0".to_owned()),
        "the fault was injected as intended: record 0 is not in the log {log:?}"
    );
    let (_, first) = &acks[0];
    let error = first
        .as_ref()
        .expect_err("record 0 must not count as delivered");
    assert_eq!(error.kind, SinkErrorKind::Transient, "{error}");
    assert!(error.message.contains("without an offset"), "{error}");
    for (i, ack) in &acks[1..] {
        assert!(ack.is_ok(), "record {i}: {ack:?}");
        assert!(
            log.contains(&format!("v{i}")),
            "record {i} acked but not in {log:?}"
        );
    }
}

/// With one request in flight (walrelay's default) the failed request is
/// retried before anything after it is sent: every record is written,
/// in order, and acknowledged with its offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_in_flight_leaves_no_gap_to_infer() {
    let (acks, log) = produce_through_a_failed_first_request("1", 20).await;
    for (i, ack) in &acks {
        assert!(ack.is_ok(), "record {i}: {ack:?}");
    }
    let expected: Vec<String> = (0..20).map(|i| format!("v{i}")).collect();
    assert_eq!(log, expected);
}

/// librdkafka's fatal error (e.g. the idempotent producer cannot keep its
/// guarantees) is reported as transient: the session restarts with a
/// fresh producer instead of the connector exiting.
#[test]
fn a_fatal_producer_error_asks_for_a_fresh_producer() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let context = AckContext::<()> {
        acks: tx,
        outage: test_outage(),
    };
    context.error(
        KafkaError::Global(RDKafkaErrorCode::Fatal),
        "unable to satisfy gap-less guarantee",
    );
    match rx.try_recv() {
        Ok(Ack::Fatal(e)) => {
            assert_eq!(e.kind, SinkErrorKind::Transient, "{e}");
            assert!(e.message.contains("gap-less"), "{e}");
        }
        other => panic!("expected a fatal report, got {other:?}"),
    }
}

/// The producer itself turns such a report into a definite fatal ack,
/// so `run` stops instead of letting librdkafka retry forever.
#[test]
fn the_producer_reports_a_refused_certificate_as_definite() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let context = AckContext::<()> {
        acks: tx,
        outage: test_outage(),
    };
    context.error(
        KafkaError::Global(RDKafkaErrorCode::SSL),
        "ssl://b:9094/bootstrap: SSL handshake failed: certificate verify failed",
    );
    match rx.try_recv() {
        Ok(Ack::Fatal(e)) => assert_eq!(e.kind, SinkErrorKind::Definite, "{e}"),
        other => panic!("expected a definite fatal report, got {other:?}"),
    }
}

/// Records still queued when the caller purges (here: the only broker is
/// down, so nothing leaves the queue) each come back once, as a failure,
/// and none of them is ever written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purged_records_each_get_one_failure_report() {
    use rdkafka::mocking::MockCluster;
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("t", 1, 1).unwrap();
    mock.broker_down(1).unwrap();
    let mut properties = props(&[("linger.ms", "0")]);
    properties[0].1 = mock.bootstrap_servers();
    let (sink, mut acks) = KafkaSink::new(&properties, test_outage()).unwrap();
    for i in 0..5 {
        sink.send(&record(i), i).await.unwrap();
    }
    sink.purge_queued();
    let mut failed = Vec::new();
    while failed.len() < 5 {
        let ack = tokio::time::timeout(Duration::from_secs(10), acks.recv())
            .await
            .expect("a report for every purged record")
            .expect("channel open");
        match ack {
            Ack::Failed { token, .. } => failed.push(token),
            other => panic!("a purged record must not be delivered: {other:?}"),
        }
    }
    failed.sort_unstable();
    assert_eq!(failed, vec![0, 1, 2, 3, 4]);
}
/// Records sent through both producers, switching between them every
/// 30 records, are written in the order they were sent: a switch waits
/// until the producer in use holds nothing unacknowledged. (Without that
/// wait the second producer's 300 ms linger lets the first producer's
/// later records overtake.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_producers_keeps_the_order_of_a_partition() {
    use rdkafka::mocking::MockCluster;
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("t", 1, 1).unwrap();
    let mut properties = props(&[("linger.ms", "0")]);
    properties[0].1 = mock.bootstrap_servers();
    let (sink, mut acks) = KafkaSink::with_bulk(&properties, "300", test_outage()).unwrap();
    assert!(sink.has_bulk() && !sink.bulk_active());
    let n = 240;
    for i in 0..n {
        sink.send(&record(i), i).await.unwrap();
        if i % 30 == 29 {
            let bulk = !sink.bulk_active();
            assert!(
                sink.use_bulk(bulk, Duration::from_secs(20)).await,
                "switch after {i}"
            );
            assert_eq!(sink.bulk_active(), bulk);
        }
    }
    for _ in 0..n {
        let ack = tokio::time::timeout(Duration::from_secs(30), acks.recv())
            .await
            .expect("every record is acknowledged")
            .expect("channel open");
        assert!(matches!(ack, Ack::Delivered(_)), "{ack:?}");
    }
    let log = read_back(&mock);
    let sent: Vec<String> = (0..n).map(|i| format!("v{i}")).collect();
    assert_eq!(log, sent);
}

/// A switch cannot drain while the broker is down: it gives up after its
/// wait, and records keep going to the producer in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_that_cannot_drain_gives_up_after_its_wait() {
    use rdkafka::mocking::MockCluster;
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("t", 1, 1).unwrap();
    mock.broker_down(1).unwrap();
    let mut properties = props(&[("linger.ms", "0")]);
    properties[0].1 = mock.bootstrap_servers();
    let (sink, _acks) = KafkaSink::with_bulk(&properties, "50", test_outage()).unwrap();
    sink.send(&record(0), 0).await.unwrap();
    let began = std::time::Instant::now();
    assert!(!sink.use_bulk(true, Duration::from_millis(300)).await);
    assert!(began.elapsed() >= Duration::from_millis(300));
    assert!(!sink.bulk_active());
    // Without a second producer, only the first can be asked for.
    let (single, _acks) = KafkaSink::<u64>::new(&properties, test_outage()).unwrap();
    assert!(!single.use_bulk(true, Duration::ZERO).await);
    assert!(single.use_bulk(false, Duration::ZERO).await);
}
