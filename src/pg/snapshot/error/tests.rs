use super::*;

#[test]
fn configuration_and_data_errors_are_definite_and_name_the_table() {
    let errors = [
        SnapshotError::NoSuchTable {
            table: "app.t".into(),
        },
        SnapshotError::NotATable {
            table: "app.t".into(),
            kind: "a view",
        },
        SnapshotError::NoColumns {
            table: "app.t".into(),
        },
        SnapshotError::NoOrder {
            table: "app.t".into(),
        },
        SnapshotError::Malformed {
            table: "app.t".into(),
            row: 7,
            reason: "x".into(),
        },
    ];
    for e in errors {
        assert!(!e.is_transient(), "{e}");
        assert!(e.to_string().contains("app.t"), "{e}");
    }
    assert!(!SnapshotError::InvalidSplit { parts: 0, index: 0 }.is_transient());
}
