use super::*;

#[test]
fn a_chunk_key_must_be_unique_not_null_and_in_the_replica_identity() {
    let mut r = Relation::for_tests(&["id", "customer_id", "note"]);
    r.columns[0].flags = Column::FLAG_KEY; // REPLICA IDENTITY DEFAULT: the primary key
    let s = |v: &[&str]| v.iter().map(|c| (*c).to_owned()).collect::<Vec<String>>();
    let pk = vec![s(&["id"])];
    let not_null = s(&["id", "customer_id"]);
    assert_eq!(
        chunk_key_problem(&r, &s(&["id"]), false, &pk, &not_null),
        None
    );
    // Not unique (issue 38: 100 rows per customer_id, 7,199 never sent).
    let why = chunk_key_problem(&r, &s(&["customer_id"]), true, &pk, &not_null).unwrap();
    assert!(
        why.contains("no unique index makes (customer_id) unique"),
        "{why}"
    );
    // A unique index on a subset makes a wider key unique.
    assert_eq!(
        chunk_key_problem(&r, &s(&["id", "customer_id"]), true, &pk, &not_null),
        None
    );
    // NULL ends the table; not in the identity, deletes do not carry it.
    let unique_note = vec![s(&["note"])];
    let why = chunk_key_problem(&r, &s(&["note"]), true, &unique_note, &not_null).unwrap();
    assert!(why.contains("allows NULL"), "{why}");
    let unique_customer = vec![s(&["customer_id"])];
    let why =
        chunk_key_problem(&r, &s(&["customer_id"]), false, &unique_customer, &not_null).unwrap();
    assert!(why.contains("not in the replica identity"), "{why}");
    // …which only matters when rows change: an outbox's inserts carry all.
    assert_eq!(
        chunk_key_problem(&r, &s(&["customer_id"]), true, &unique_customer, &not_null),
        None
    );
    // A renamed key column is not a column.
    let why = chunk_key_problem(&r, &s(&["order_id"]), false, &pk, &not_null).unwrap();
    assert!(
        why.contains("\"order_id\" is not a published column"),
        "{why}"
    );
}
