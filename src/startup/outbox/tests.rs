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
