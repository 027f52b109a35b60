use super::*;

#[test]
fn subjects_follow_confluents_strategies() {
    use SubjectNameStrategy::*;
    assert_eq!(
        subject(Topic, "orders", true, None).as_deref(),
        Some("orders-key")
    );
    assert_eq!(
        subject(Topic, "orders", false, Some("a.B")).as_deref(),
        Some("orders-value")
    );
    assert_eq!(
        subject(Record, "orders", false, Some("a.B")).as_deref(),
        Some("a.B")
    );
    assert_eq!(
        subject(TopicRecord, "orders", true, Some("a.B")).as_deref(),
        Some("orders-a.B")
    );
    assert_eq!(subject(Record, "orders", false, None), None);
}

#[test]
fn the_wire_format_is_magic_zero_then_the_id_big_endian() {
    assert_eq!(
        &framed(0x0102_0304, SchemaKind::Avro, b"xy")[..],
        [0, 1, 2, 3, 4, b'x', b'y']
    );
    assert_eq!(&framed(7, SchemaKind::Json, b"")[..], [0, 0, 0, 0, 7]);
}

#[test]
fn protobuf_frames_carry_the_message_index_after_the_id() {
    // The first message: `[0]` as the single byte 0.
    assert_eq!(
        &framed(0x0102_0304, SchemaKind::Protobuf, b"\x08\x01")[..],
        [0, 1, 2, 3, 4, 0, 8, 1]
    );
    let mut arena = Arena::new(1024);
    assert_eq!(
        &framed_in(&mut arena, 9, SchemaKind::Protobuf, b"xy")[..],
        &framed(9, SchemaKind::Protobuf, b"xy")[..]
    );
    assert_eq!(
        &framed_in(&mut arena, 9, SchemaKind::Avro, b"xy")[..],
        &framed(9, SchemaKind::Avro, b"xy")[..]
    );
}

#[test]
fn message_indexes_are_a_zigzag_count_then_zigzag_indexes() {
    let idx = |path: &[i32]| {
        let mut out = Vec::new();
        message_indexes(path, &mut out);
        out
    };
    assert_eq!(idx(&[0]), [0]);
    // Count 1 (zigzag 2), index 1 (zigzag 2).
    assert_eq!(idx(&[1]), [2, 2]);
    // The second message's third nested one: count 2, then 1 and 2.
    assert_eq!(idx(&[1, 2]), [4, 2, 4]);
    // Index 64: zigzag 128, two varint bytes.
    assert_eq!(idx(&[64]), [2, 0x80, 0x01]);
    assert_eq!(idx(&[]), [0]);
}

#[test]
fn endpoints_keep_the_base_path() {
    let ep = Endpoint::parse("http://127.0.0.1:18081/apis/ccompat/v7/").unwrap();
    assert_eq!(ep.host, "127.0.0.1");
    assert_eq!(ep.port, 18081);
    assert_eq!(ep.base, "/apis/ccompat/v7");
    let ep = Endpoint::parse("http://registry").unwrap();
    assert_eq!(
        (ep.host.as_str(), ep.port, ep.base.as_str()),
        ("registry", 80, "")
    );
    let ep = Endpoint::parse("http://[::1]:8081").unwrap();
    assert_eq!((ep.host.as_str(), ep.port), ("::1", 8081));
    let ep = Endpoint::parse("https://registry/x").unwrap();
    assert_eq!((ep.tls, ep.port, ep.base.as_str()), (true, 443, "/x"));
    assert!(!Endpoint::parse("http://registry").unwrap().tls);
    assert!(Endpoint::parse("ftp://registry").is_err());
    assert!(Endpoint::parse("http://registry:port").is_err());
}

#[test]
fn only_outages_and_overload_are_transient() {
    let refused = |status| RegistryError::Refused {
        subject: "s".into(),
        status,
        code: None,
        message: String::new(),
    };
    assert!(refused(503).is_transient());
    assert!(refused(429).is_transient());
    assert!(!refused(409).is_transient());
    assert!(!refused(422).is_transient());
    assert!(!refused(401).is_transient());
    assert!(
        RegistryError::Unreachable {
            url: "u".into(),
            cause: "c".into()
        }
        .is_transient()
    );
}

#[test]
fn subjects_are_one_path_segment() {
    assert_eq!(
        encode_path("outbox.event.Order-value"),
        "outbox.event.Order-value"
    );
    assert_eq!(encode_path("a/b c"), "a%2Fb%20c");
}

#[test]
fn schemas_compare_as_json() {
    assert!(same_json(r#"["null", "string"]"#, r#"["null","string"]"#));
    assert!(!same_json(r#""string""#, r#""long""#));
}

#[test]
fn the_password_shows_nowhere_but_in_the_authorization_header() {
    let config: crate::config::SchemaRegistryConfig = toml::from_str(
        "url = \"http://registry:8081\"\nusername = \"walrelay\"\npassword = \"hunter2-secret\"\n",
    )
    .unwrap();
    assert!(!format!("{config:?}").contains("hunter2"), "{config:?}");
    let registry = Registry::new(&config, Arc::new(Metrics::new("t"))).unwrap();
    assert!(!format!("{registry:?}").contains("hunter2"), "{registry:?}");
    // base64("walrelay:hunter2-secret")
    assert_eq!(
        registry.authorization.as_deref(),
        Some("Basic d2FscmVsYXk6aHVudGVyMi1zZWNyZXQ=")
    );
    let unreachable = RegistryError::Unreachable {
        url: config.url.clone(),
        cause: "refused".into(),
    };
    assert!(!unreachable.to_string().contains("hunter2"));
}
