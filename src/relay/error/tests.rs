use super::*;
use crate::pg::wire::ServerError;

fn server_error(message: &str) -> RelayError {
    RelayError::Wire(WireError::Server {
        context: "streaming".into(),
        error: Box::new(ServerError {
            severity: "ERROR".into(),
            code: "42704".into(),
            message: message.into(),
            detail: None,
            hint: None,
        }),
    })
}

#[test]
fn a_missing_publication_during_streaming_is_explained() {
    let e = explain_stream_error(
        server_error("publication \"walrelay\" does not exist"),
        "walrelay",
        "orders",
    );
    assert!(!e.is_transient());
    let text = e.to_string();
    assert!(
        text.contains("created before the publication")
            && text.contains("SELECT pg_drop_replication_slot('orders');")
            && text.contains("docs/operations.md"),
        "{text}"
    );
}

#[test]
fn other_errors_pass_through() {
    let e = explain_stream_error(
        server_error("publication \"other\" does not exist"),
        "w",
        "s",
    );
    assert!(matches!(e, RelayError::Wire(_)), "{e}");
    let e = explain_stream_error(server_error("out of memory"), "w", "s");
    assert!(matches!(e, RelayError::Wire(_)), "{e}");
}

/// A record Kafka only inferred was written (see `sink::kafka`) is not
/// confirmed: the session restarts and re-sends it, the connector runs on.
#[test]
fn an_unverified_delivery_restarts_the_session() {
    let e = RelayError::Delivery {
        topic: "t".into(),
        lsn: Lsn(1),
        event: "record #0 of the transaction".into(),
        error: SinkError::unverified(0),
        at_send: false,
    };
    assert!(e.is_transient(), "{e}");
    assert_eq!(e.waiting_for(), "Kafka");
}
