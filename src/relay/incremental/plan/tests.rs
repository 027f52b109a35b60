use super::*;

#[test]
fn stored_progress_round_trips() {
    let plan = IncrementalPlan {
        id: "x".into(),
        chunk_rows: 10,
        tables: vec![ChunkTable {
            schema: "public".into(),
            name: "outbox".into(),
            key: vec!["id".into()],
            filter: Some("a = 1".into()),
            inserts_only: true,
            after: Some(vec![Some("k".into()), None]),
            done: false,
            abandoned: None,
        }],
    };
    assert_eq!(from_stored(&to_stored(&plan, 3), 10), plan);
    assert_eq!(to_stored(&plan, 3).rows, 3);
}
