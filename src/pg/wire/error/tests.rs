use super::*;

#[test]
fn error_context_cuts_long_statements_by_characters() {
    let sql = format!("SELECT {} FROM t", "é".repeat(100));
    let words = first_words(&sql);
    assert_eq!(words.chars().count(), 60);
    assert!(words.starts_with("SELECT éé"));
}

#[test]
fn transient_classification() {
    let server = |code: &str| WireError::Server {
        context: "x".into(),
        error: Box::new(ServerError {
            severity: "ERROR".into(),
            code: code.into(),
            message: "m".into(),
            detail: None,
            hint: None,
        }),
    };
    assert!(
        server("55006").is_transient(),
        "slot in use by a dying walsender"
    );
    assert!(server("57P01").is_transient(), "admin shutdown");
    assert!(!server("28P01").is_transient(), "bad password");
    assert!(!server("42704").is_transient(), "slot does not exist");
    assert!(WireError::Closed { context: "x" }.is_transient());
}
