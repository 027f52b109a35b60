use super::*;

#[test]
fn session_options_escape_spaces_for_the_server() {
    let options = session_options();
    assert!(
        options.starts_with(r"-c DateStyle=ISO,\ MDY -c TimeZone=UTC -c bytea_output=hex"),
        "{options}"
    );
    assert_eq!(options.matches("-c ").count(), SESSION_PARAMETERS.len());
}

#[test]
fn debug_does_not_show_password() {
    let p = ConnectParams {
        host: "h".into(),
        port: 1,
        user: "u".into(),
        password: Some(SecretString::from("hunter2-secret")),
        database: "d".into(),
        application_name: "a".into(),
        connect_timeout: Duration::from_secs(1),
        max_message_size: 1,
        tls: TlsSettings::default(),
        target: Default::default(),
    };
    assert!(!format!("{p:?}").contains("hunter2"));
}
