use super::*;

#[test]
fn copy_sql_quotes_names_and_adds_the_split() {
    let r = Relation::for_tests(&["id", "Aggregate Id", "payload"]);
    let split = HashSplit::new("Aggregate Id", 3, 2).unwrap();
    assert_eq!(
        copy_sql(
            &r,
            false,
            &["id".to_owned()],
            Some(&split),
            None,
            None,
            None
        )
        .unwrap(),
        "COPY (SELECT \"id\", \"Aggregate Id\", \"payload\" FROM \"app\".\"out\"\"box\" \
         WHERE (coalesce(hashtext(\"Aggregate Id\"::text), 0) & 2147483647) % 3 = 2 \
         ORDER BY \"id\") TO STDOUT"
    );
    assert_eq!(
        copy_sql(
            &r,
            false,
            &["payload".to_owned(), "id".to_owned()],
            None,
            None,
            None,
            None
        )
        .unwrap(),
        "COPY (SELECT \"id\", \"Aggregate Id\", \"payload\" FROM \"app\".\"out\"\"box\" \
         ORDER BY \"payload\", \"id\") TO STDOUT"
    );
    // An operator's condition (walrelay republish) is parenthesised, so
    // an OR in it cannot escape the split.
    assert_eq!(
        copy_sql(
            &r,
            false,
            &["id".to_owned()],
            Some(&split),
            Some("id = 'a' OR true"),
            None,
            None
        )
        .unwrap(),
        "COPY (SELECT \"id\", \"Aggregate Id\", \"payload\" FROM \"app\".\"out\"\"box\" \
         WHERE (id = 'a' OR true) AND (coalesce(hashtext(\"Aggregate Id\"::text), 0) & 2147483647) % 3 = 2 \
         ORDER BY \"id\") TO STDOUT"
    );
}

#[test]
fn copy_sql_refuses_unknown_columns_and_no_order() {
    let r = Relation::for_tests(&["id", "aggregateid"]);
    let e = copy_sql(&r, false, &["created".to_owned()], None, None, None, None).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("snapshot_order_by column \"created\""),
        "{text}"
    );
    assert!(text.contains("app.out\"box"), "{text}");
    assert!(text.contains("id, aggregateid"), "{text}");
    let split = HashSplit::new("tenant", 2, 0).unwrap();
    let text = copy_sql(
        &r,
        false,
        &["id".to_owned()],
        Some(&split),
        None,
        None,
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(text.contains("hash split column \"tenant\""), "{text}");
    let text = copy_sql(&r, false, &[], None, None, None, None)
        .unwrap_err()
        .to_string();
    assert!(text.contains("no primary key"), "{text}");
    assert!(text.contains("snapshot_order_by"), "{text}");
}

#[test]
fn a_resumed_read_selects_only_rows_its_snapshot_saw() {
    let r = Relation::for_tests(&["id", "agg"]);
    let split = HashSplit::new("agg", 2, 1).unwrap();
    assert_eq!(
        copy_sql(
            &r,
            true,
            &["id".to_owned()],
            None,
            None,
            Some("10:12:10"),
            None
        )
        .unwrap(),
        "COPY (SELECT \"id\", \"agg\" FROM ONLY \"app\".\"out\"\"box\" \
         WHERE pg_visible_in_snapshot(xmin::text::xid8, '10:12:10'::pg_snapshot) \
         ORDER BY \"id\") TO STDOUT"
    );
    // After the split; the snapshot and a resumed part's key quoted as
    // literals.
    assert_eq!(
        copy_sql(
            &r,
            false,
            &["id".to_owned()],
            Some(&split),
            None,
            Some("7:9:'"),
            Some(After {
                key: &[Some("k'1".to_owned())],
                inclusive: false
            })
        )
        .unwrap(),
        "COPY (SELECT \"id\", \"agg\" FROM \"app\".\"out\"\"box\" \
         WHERE (coalesce(hashtext(\"agg\"::text), 0) & 2147483647) % 2 = 1 \
         AND pg_visible_in_snapshot(xmin::text::xid8, '7:9:'''::pg_snapshot) \
         AND (\"id\") > ('k''1') ORDER BY \"id\") TO STDOUT"
    );
    // A key that is not unique goes on at its last value: the rows sharing
    // it are read again, none is skipped.
    assert_eq!(
        copy_sql(
            &r,
            false,
            &["agg".to_owned(), "id".to_owned()],
            None,
            None,
            None,
            Some(After {
                key: &[Some("a".to_owned()), Some("7".to_owned())],
                inclusive: true
            })
        )
        .unwrap(),
        "COPY (SELECT \"id\", \"agg\" FROM \"app\".\"out\"\"box\" \
         WHERE (\"agg\", \"id\") >= ('a', '7') ORDER BY \"agg\", \"id\") TO STDOUT"
    );
}
