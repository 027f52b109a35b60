use super::*;

#[test]
fn signals_have_debeziums_shape() {
    let text = signal_json("orders", "s1", "public.outbox", Some("id > 5"));
    let signal = parse_signal(text.as_bytes(), "orders", Lsn(1))
        .unwrap()
        .unwrap();
    assert_eq!(signal.id, "s1");
    assert_eq!(
        signal.tables,
        [("public.outbox".to_owned(), Some("id > 5".to_owned()))]
    );
    // Another connector's signal is not ours.
    assert_eq!(
        parse_signal(text.as_bytes(), "billing", Lsn(1)).unwrap(),
        None
    );
    // Debezium's own shape, without a connector: for every connector.
    let debezium = br#"{"id":"d-1","type":"execute-snapshot","data":{"data-collections":["public.customers"],"type":"INCREMENTAL"}}"#;
    let signal = parse_signal(debezium, "orders", Lsn(1)).unwrap().unwrap();
    assert_eq!(signal.tables, [("public.customers".to_owned(), None)]);
    // What walrelay cannot do is said, not ignored.
    let blocking = br#"{"type":"execute-snapshot","data":{"data-collections":["public.t"],"type":"blocking"}}"#;
    assert!(
        parse_signal(blocking, "orders", Lsn(1))
            .unwrap_err()
            .contains("blocking")
    );
    assert!(parse_signal(br#"{"type":"pause-snapshot"}"#, "orders", Lsn(1)).is_err());
    // A stop names its tables, or none (all).
    let stop = parse_signal(br#"{"type":"stop-snapshot"}"#, "orders", Lsn(1))
        .unwrap()
        .unwrap();
    assert!(stop.stop && stop.tables.is_empty());
    let text = stop_signal_json("orders", "c1", Some("public.items"));
    let stop = parse_signal(text.as_bytes(), "orders", Lsn(1))
        .unwrap()
        .unwrap();
    assert_eq!((stop.id.as_str(), stop.stop), ("c1", true));
    assert_eq!(stop.tables, [("public.items".to_owned(), None)]);
    assert_eq!(
        parse_signal(text.as_bytes(), "billing", Lsn(1)).unwrap(),
        None
    );
    assert!(parse_signal(b"{", "orders", Lsn(1)).is_err());
}
