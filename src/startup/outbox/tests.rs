use super::*;

#[test]
fn route_columns_are_what_the_router_reads_once_each() {
    let outbox: OutboxConfig = toml::from_str(
        "table = \"outbox\"\ntopic = \"ev.{aggregatetype}.{type}\"\n\
         header_columns = [\"type\", \"tenant\"]\ntimestamp_column = \"created_at\"",
    )
    .unwrap();
    assert_eq!(
        route_columns(&outbox),
        [
            "id",
            "aggregateid",
            "payload",
            "aggregatetype",
            "type",
            "tenant",
            "created_at"
        ]
    );
    // Placements name columns before the ':' (the rest is an alias).
    let placed: OutboxConfig = toml::from_str(
        "table = \"outbox\"\nheader_columns = [\"type:eventType\", \"tenant:t\"]\n\
         envelope_columns = [\"type:eventType\", \"region:r\", \"aggregatetype\"]",
    )
    .unwrap();
    assert_eq!(
        route_columns(&placed),
        [
            "id",
            "aggregateid",
            "payload",
            "aggregatetype",
            "type",
            "tenant",
            "region"
        ]
    );
}

#[test]
fn converter_forms_need_key_types_and_nullability_debezium_writes_alike() {
    let outbox = |extra: &str| -> OutboxConfig {
        toml::from_str(&format!("table = \"outbox\"\n{extra}")).unwrap()
    };
    let columns = |key: &str| {
        vec![
            ("aggregateid".to_owned(), key.to_owned()),
            ("payload".to_owned(), "jsonb".to_owned()),
        ]
    };
    let key_not_null = ["aggregateid".to_owned()];
    // The string forms need nothing.
    assert_eq!(
        converter_problem(&outbox(""), &columns("numeric"), &[]),
        None
    );
    for ok in [
        "text",
        "character varying(255)",
        "character(8)",
        "uuid",
        "bigint",
    ] {
        assert_eq!(
            converter_problem(
                &outbox("converter = \"json_with_schema\""),
                &columns(ok),
                &key_not_null
            ),
            None,
            "{ok}"
        );
    }
    let (problem, _) = converter_problem(
        &outbox("key_converter = \"json\""),
        &columns("numeric(10,2)"),
        &[],
    )
    .unwrap();
    assert!(problem.contains("has type numeric(10,2)"), "{problem}");
    let (problem, fix) = converter_problem(
        &outbox("key_converter = \"json_with_schema\""),
        &columns("text"),
        &[],
    )
    .unwrap();
    assert!(
        problem.contains("aggregate id column aggregateid is nullable"),
        "{problem}"
    );
    assert!(fix.contains("SET NOT NULL"), "{fix}");
    let both = ["aggregateid".to_owned(), "payload".to_owned()];
    let (problem, _) = converter_problem(
        &outbox("value_converter = \"json_with_schema\""),
        &columns("text"),
        &both,
    )
    .unwrap();
    assert!(
        problem.contains("payload column payload is NOT NULL"),
        "{problem}"
    );
    // Schemas-off JSON needs no nullability.
    assert_eq!(
        converter_problem(&outbox("converter = \"json\""), &columns("text"), &both),
        None
    );
}
