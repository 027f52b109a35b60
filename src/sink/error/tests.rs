use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::*;

#[test]
fn definite_and_transient_errors() {
    let e = |c| SinkError::from_kafka(&KafkaError::MessageProduction(c));
    assert_eq!(
        e(RDKafkaErrorCode::MessageSizeTooLarge).kind,
        SinkErrorKind::Definite
    );
    assert!(
        e(RDKafkaErrorCode::MessageSizeTooLarge)
            .message
            .contains("message.max.bytes")
    );
    assert_eq!(
        e(RDKafkaErrorCode::TopicAuthorizationFailed).kind,
        SinkErrorKind::Definite
    );
    assert_eq!(
        e(RDKafkaErrorCode::BrokerTransportFailure).kind,
        SinkErrorKind::Transient
    );
    assert_eq!(
        e(RDKafkaErrorCode::MessageTimedOut).kind,
        SinkErrorKind::Transient
    );
    // A fatal producer error ends this producer, not the connector: the
    // next session's fresh producer is librdkafka's documented recovery.
    assert_eq!(e(RDKafkaErrorCode::Fatal).kind, SinkErrorKind::Transient);
}

/// Issue 38, item 6a: a batch the broker refuses to validate (a record
/// without a key on a compacted topic) is refused again on every retry:
/// definite, naming the topic, the keyless kinds of record and the fix.
#[test]
fn an_invalid_record_is_definite_and_names_compaction() {
    let e = SinkError::for_topic(
        &KafkaError::MessageProduction(RDKafkaErrorCode::InvalidRecord),
        Some("app.public.ledger"),
    );
    assert_eq!(e.kind, SinkErrorKind::Definite);
    for needle in [
        "app.public.ledger",
        "cleanup.policy=compact",
        "without a key",
        "TRUNCATE",
        "cleanup.policy=delete",
    ] {
        assert!(e.message.contains(needle), "{needle:?} in {e}");
    }
}

/// librdkafka's reports of refused credentials and certificates (texts
/// as librdkafka 2.12 with OpenSSL 3 writes them) are definite; a
/// refused TCP connection or a broker going away is not.
#[test]
fn refused_credentials_and_certificates_are_definite() {
    use RDKafkaErrorCode::*;
    for (code, reason, says) in [
        (
            Authentication,
            "sasl_ssl://b:9094/bootstrap: SASL authentication error: Authentication failed \
             during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
            "kafka.sasl_password",
        ),
        (
            SSL,
            "ssl://b:9094/bootstrap: SSL handshake failed: error:0A000086:SSL \
             routines::certificate verify failed: broker certificate could not be verified",
            "kafka.ssl_ca",
        ),
        (
            BrokerTransportFailure,
            "ssl://b:9095/bootstrap: Receive failed: error:0A000412:SSL routines::sslv3 \
             alert bad certificate: SSL alert number 42",
            "kafka.ssl_certificate",
        ),
        (
            BrokerTransportFailure,
            "ssl://b:9095/bootstrap: Receive failed: error:0A000416:SSL routines::sslv3 \
             alert certificate unknown: SSL alert number 46",
            "kafka.ssl_certificate",
        ),
    ] {
        let e = security_failure(Some(code), reason).expect(reason);
        assert_eq!(e.kind, SinkErrorKind::Definite, "{e}");
        assert!(e.message.contains(says), "{e}");
    }
    for (code, reason) in [
        (
            BrokerTransportFailure,
            "b:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused",
        ),
        (
            BrokerTransportFailure,
            "ssl://b:9094/1: Disconnected (after 1200ms in state UP)",
        ),
        (AllBrokersDown, "1/1 brokers are down"),
    ] {
        assert!(security_failure(Some(code), reason).is_none(), "{reason}");
    }
}
