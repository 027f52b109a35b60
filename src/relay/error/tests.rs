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

const BOTH: ObjectsPresent = ObjectsPresent {
    publication: true,
    slot: true,
};

#[test]
fn undefined_object_with_the_publication_and_slot_present_is_the_slots_history() {
    let e = explain_stream_error(
        server_error("publication \"walrelay\" does not exist"),
        BOTH,
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

/// The decision reads the catalog, not the message: the same code while
/// the publication or the slot is really gone is the server's own error,
/// and so is any other code, whatever its words.
#[test]
fn a_missing_object_or_another_code_passes_through() {
    for present in [
        ObjectsPresent {
            publication: false,
            slot: true,
        },
        ObjectsPresent {
            publication: true,
            slot: false,
        },
    ] {
        let e = explain_stream_error(
            server_error("publication \"walrelay\" does not exist"),
            present,
            "walrelay",
            "orders",
        );
        assert!(matches!(e, RelayError::Wire(_)), "{present:?}: {e}");
    }
    let mut e = server_error("publication \"walrelay\" does not exist");
    if let RelayError::Wire(WireError::Server { error, .. }) = &mut e {
        error.code = "XX000".into();
    }
    assert!(!is_undefined_object(&e));
    let e = explain_stream_error(e, BOTH, "walrelay", "orders");
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

/// The slot's errors are wrapped, not re-worded: the text is what the
/// refusals they used to be flattened into said, and so are the class and
/// the cause.
#[test]
fn slot_errors_keep_their_words_and_classes() {
    let lost = RelayError::from(SourceError::SlotLost { slot: "s".into() });
    let was = RelayError::Refused {
        reason: "replication slot \"s\" became lost".into(),
        hint: "see docs/operations.md, \"Lost slot\"".into(),
    };
    assert_eq!(lost.to_string(), was.to_string());
    assert_eq!((lost.class(), lost.cause()), (ErrorClass::Resync, "slot"));
    assert!(matches!(
        lost,
        RelayError::Slot(SourceError::SlotLost { .. })
    ));

    let moved = SourceError::SlotMoved {
        slot: "s".into(),
        expected: Lsn(16),
        found: None,
    };
    let was = RelayError::Refused {
        reason: format!(
            "{moved}: another actor advanced, or dropped and recreated, the slot (an operator, \
             or a process that does not take walrelay's lease); streaming from it would \
             skip what was committed in between"
        ),
        hint: "make sure only walrelay consumes this slot (docs/operations.md, \"Running \
               several instances\"), then restart: the stored offset and the slot's \
               position decide the next start"
            .into(),
    };
    let moved = RelayError::from(moved);
    assert_eq!(moved.to_string(), was.to_string());
    assert_eq!((moved.class(), moved.cause()), (ErrorClass::Resync, "slot"));

    let vanished = SourceError::SlotVanished { slot: "s".into() };
    let was = RelayError::Setup {
        what: vanished.to_string(),
        fix: "make sure nothing else drops walrelay's slot".into(),
    };
    let vanished = RelayError::from(vanished);
    assert_eq!(vanished.to_string(), was.to_string());
    assert_eq!(
        (vanished.class(), vanished.cause()),
        (ErrorClass::Definite, "setup")
    );
    assert!(!vanished.is_transient());
}

/// A start-up check's refusal is wrapped with its own words and class.
#[test]
fn check_errors_keep_their_words_and_classes() {
    let refused = RelayError::from(CheckError::Refused {
        reason: "r".into(),
        hint: "h".into(),
    });
    assert_eq!(refused.to_string(), "refusing to start: r. What to do: h");
    assert_eq!(
        (refused.class(), refused.cause()),
        (ErrorClass::Resync, "slot")
    );
    let setup = RelayError::from(CheckError::Setup {
        what: "w".into(),
        fix: "f".into(),
    });
    assert_eq!(setup.to_string(), "w. What to do: f");
    assert_eq!(
        (setup.class(), setup.cause()),
        (ErrorClass::Definite, "setup")
    );
    assert_eq!(ErrorClass::Transient.to_string(), "transient");
    assert_eq!(ErrorClass::Resync.as_str(), "resync");
}
