use super::OpenTransaction;

#[test]
fn a_hidden_session_says_which_privilege_shows_it() {
    let mut t = OpenTransaction {
        pid: 42,
        database: Some("app".into()),
        user: Some("writer".into()),
        application_name: None,
        state: None,
        open_seconds: None,
        query: Some("<insufficient privilege>".into()),
    };
    let text = t.to_string();
    assert!(text.starts_with("pid 42 (writer@app;"), "{text}");
    assert!(text.contains("pg_read_all_stats"), "{text}");
    assert!(!text.contains("insufficient"), "{text}");
    t.state = Some("idle in transaction".into());
    t.open_seconds = Some(7);
    t.query = Some("INSERT INTO outbox".into());
    assert_eq!(
        t.to_string(),
        "pid 42 (writer@app, application \"\", idle in transaction, open 7 s): INSERT INTO outbox"
    );
}
