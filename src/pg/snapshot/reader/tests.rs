use super::*;

#[test]
fn import_quotes_the_snapshot_name() {
    assert_eq!(
        import_sql("00000003-00000002-1"),
        "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; \
         SET TRANSACTION SNAPSHOT '00000003-00000002-1'"
    );
    assert!(import_sql("x'; DROP TABLE t; --").ends_with("'x''; DROP TABLE t; --'"));
}
