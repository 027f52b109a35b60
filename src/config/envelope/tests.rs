use crate::config::Config;

const BASE: &str = "[connector]\nname = \"t\"\n[postgres]\nhost = \"h\"\nuser = \"u\"\n\
                    database = \"d\"\nslot = \"s\"\npublication = \"p\"\n[kafka]\n\
                    brokers = \"b:9092\"\n[[outbox]]\ntable = \"public.outbox\"\n";

fn load(extra: &str) -> Result<Config, String> {
    Config::from_str(&format!("{BASE}{extra}"), "test.toml").map_err(|e| e.to_string())
}

fn load_err(extra: &str) -> String {
    match load(extra) {
        Ok(_) => panic!("accepted: {extra}"),
        Err(e) => e,
    }
}

#[test]
fn aliases_and_envelopes_are_accepted_and_split() {
    let config = load(
        "header_columns = [\"type:eventType\", \"tenant\"]\n\
         envelope_columns = [\"type:eventType\", \"aggregatetype\", \"created_at:at\"]\n\
         expand_json_payload = false\ntopic = \"ev.{tenant}.{created_at}\"",
    )
    .unwrap();
    let o = &config.outbox[0];
    assert_eq!(
        o.header_placements().collect::<Vec<_>>(),
        [("type", "eventType"), ("tenant", "tenant")]
    );
    assert_eq!(
        o.envelope_placements().collect::<Vec<_>>(),
        [
            ("type", "eventType"),
            ("aggregatetype", "aggregatetype"),
            ("created_at", "at")
        ]
    );
    assert!(!o.expands_json_payload());
    // The same column as a header and in the envelope, and a column
    // placed twice under two names: allowed, as in Debezium.
    load("header_columns = [\"type\", \"type:eventType\"]").unwrap();
    let defaults = load("").unwrap();
    assert!(defaults.outbox[0].envelope_columns.is_empty());
    assert!(defaults.outbox[0].expands_json_payload());
}

#[test]
fn bad_aliases_are_refused_naming_the_entry() {
    let err = load_err("header_columns = [\"type:\"]");
    assert!(
        err.contains("outbox[0].header_columns[0]: \"type:\" has an empty header name"),
        "{err}"
    );
    let err = load_err("envelope_columns = [\":x\"]");
    assert!(
        err.contains("outbox[0].envelope_columns[0]: is empty"),
        "{err}"
    );
    let err = load_err("header_columns = [\"type:header:eventType\"]");
    assert!(
        err.contains("more than one ':'") && err.contains("is \"type:eventType\" here"),
        "{err}"
    );
    let err = load_err("envelope_columns = [\"a:b:c:d\"]");
    assert!(
        err.contains("envelope_columns[0]: \"a:b:c:d\" has more than one ':'"),
        "{err}"
    );
    let err = load_err("header_columns = [\"type:a\\nb\"]");
    assert!(err.contains("control character"), "{err}");
    let err = load_err("header_columns = [\"type:id\"]");
    assert!(
        err.contains("header_columns[0]: the \"id\" header is reserved"),
        "{err}"
    );
}

#[test]
fn duplicate_names_are_refused() {
    let err = load_err("header_columns = [\"type\", \"kind:type\"]");
    assert!(
        err.contains("header_columns[1]: \"kind:type\" places a second header named \"type\""),
        "{err}"
    );
    let err = load_err("envelope_columns = [\"tenant\", \"tenant\"]");
    assert!(
        err.contains("envelope_columns[1]: \"tenant\" is listed twice"),
        "{err}"
    );
    let err = load_err("envelope_columns = [\"a:x\", \"b:x\"]");
    assert!(err.contains("second envelope member named \"x\""), "{err}");
}

#[test]
fn the_payload_member_is_reserved() {
    let err = load_err("envelope_columns = [\"payload\"]");
    assert!(
        err.contains(
            "envelope_columns[0]: \"payload\" would be placed as the envelope's \"payload\" member"
        ),
        "{err}"
    );
    let err = load_err("envelope_columns = [\"body:payload\"]");
    assert!(err.contains("e.g. \"body:body_column\""), "{err}");
    // Another name for the payload column itself is fine.
    load("envelope_columns = [\"payload:raw\"]").unwrap();
}

#[test]
fn envelope_and_cloudevents_are_refused_together() {
    let err = load_err(
        "format = \"cloudevents\"\nenvelope_columns = [\"type\"]\n\
         [outbox.cloudevents]\nsource = \"/s\"",
    );
    assert!(
        err.contains(
            "outbox[0].envelope_columns: cannot be combined with format = \"cloudevents\""
        ) && err.contains("extensions"),
        "{err}"
    );
}

#[test]
fn expand_json_payload_needs_an_envelope_or_a_json_value() {
    let err = load_err("expand_json_payload = true");
    assert!(
        err.contains("outbox[0].expand_json_payload: is set, but the value is the payload's bytes"),
        "{err}"
    );
    assert!(err.contains("set value_converter = \"json\""), "{err}");
    for ok in [
        "expand_json_payload = true\nconverter = \"json_with_schema\"",
        "expand_json_payload = true\nvalue_converter = \"json\"",
        "expand_json_payload = false\nconverter = \"json\"",
        "expand_json_payload = true\nenvelope_columns = [\"type\"]",
    ] {
        load(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
}

#[test]
fn converters_are_read_and_combined() {
    use crate::config::Converter;
    let c = load("").unwrap();
    let o = &c.outbox[0];
    assert_eq!(
        (o.key_form(), o.value_form()),
        (Converter::String, Converter::String)
    );
    let c = load("converter = \"json_with_schema\"").unwrap();
    let o = &c.outbox[0];
    assert_eq!(
        (o.key_form(), o.value_form()),
        (Converter::JsonWithSchema, Converter::JsonWithSchema)
    );
    let c = load("key_converter = \"json\"").unwrap();
    let o = &c.outbox[0];
    assert_eq!(
        (o.key_form(), o.value_form()),
        (Converter::Json, Converter::String)
    );
    // An envelope is JSON: unset means "json".
    let c = load("envelope_columns = [\"type\"]").unwrap();
    assert_eq!(c.outbox[0].value_form(), Converter::Json);
    load("envelope_columns = [\"type\"]\nconverter = \"json\"").unwrap();

    let err = load_err("converter = \"json\"\nkey_converter = \"string\"");
    assert!(
        err.contains("outbox[0].key_converter: is set beside converter = \"json\""),
        "{err}"
    );
    let err = load_err("envelope_columns = [\"type\"]\nvalue_converter = \"string\"");
    assert!(
        err.contains("outbox[0].value_converter: is \"string\", but envelope_columns"),
        "{err}"
    );
    let err = load_err("envelope_columns = [\"type\"]\nconverter = \"json_with_schema\"");
    assert!(
        err.contains("outbox[0].converter: is \"json_with_schema\", but an envelope"),
        "{err}"
    );
    let err = load_err(
        "format = \"cloudevents\"\nkey_converter = \"json\"\n\
         [outbox.cloudevents]\nsource = \"/x\"",
    );
    assert!(
        err.contains("outbox[0].key_converter: is \"json\", but format = \"cloudevents\""),
        "{err}"
    );
    // A registry format writes Confluent's wire format: no converter form.
    let err = load_err("format = \"avro\"\nvalue_converter = \"json\"");
    assert!(
        err.contains("outbox[0].value_converter: is \"json\", but format = \"avro\""),
        "{err}"
    );
    let err = load_err("value_converter = \"jsom\"");
    assert!(err.contains("json_with_schema"), "{err}");
}

#[test]
fn placed_columns_may_name_topics() {
    load("envelope_columns = [\"tenant:t\"]\ntopic = \"ev.{tenant}\"").unwrap();
    load("header_columns = [\"tenant:t\"]\ntopic = \"ev.{tenant}\"").unwrap();
    let err = load_err("header_columns = [\"tenant:t\"]\ntopic = \"ev.{t}\"");
    assert!(err.contains("template references {t}"), "{err}");
}
