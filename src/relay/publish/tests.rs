/// A record that cannot be delivered is named by its outbox row id or
/// its table change event id, never by its payload.
#[test]
fn undeliverable_records_are_named_by_their_ids() {
    let record = |headers: &[(&str, &str)]| {
        crate::router::Record::new(
            "t".into(),
            None,
            Some(bytes::Bytes::from_static(b"{\"secret\":1}")),
            headers
                .iter()
                .map(|(k, v)| (std::sync::Arc::from(*k), bytes::Bytes::from(v.to_string())))
                .collect(),
            None,
        )
    };
    let outbox = record(&[("id", "7b0c"), ("walrelay.lsn", "0/1")]);
    assert_eq!(super::describe_record(&outbox), "outbox row id=7b0c");
    let change = record(&[
        ("walrelay.lsn", "0/16B3748"),
        (crate::router::table::EVENT_ID_HEADER, "0/16B3748:3"),
    ]);
    assert_eq!(
        super::describe_record(&change),
        "table change event_id=0/16B3748:3"
    );
    assert!(!super::describe_record(&record(&[])).contains("secret"));
}
