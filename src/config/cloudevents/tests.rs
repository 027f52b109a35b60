use super::*;

#[test]
fn attribute_names_are_lower_case_letters_and_digits() {
    assert_eq!(attribute_name_problem("schemaversion"), None);
    assert_eq!(attribute_name_problem("v2"), None);
    for bad in [
        "",
        "schema_version",
        "SchemaVersion",
        "schéma",
        "a-b",
        "a b",
    ] {
        assert!(attribute_name_problem(bad).is_some(), "{bad:?}");
    }
}

#[test]
fn uri_references_and_absolute_uris() {
    for good in [
        "/shop/orders",
        "https://shop.example.com/orders?x=1#f",
        "urn:uuid:1",
        "a%20b",
    ] {
        assert_eq!(uri_reference_problem(good), None, "{good}");
    }
    for bad in ["", "a b", "/ü", "100%", "%zz", "\"x\"", "<x>"] {
        assert!(uri_reference_problem(bad).is_some(), "{bad:?}");
    }
    assert_eq!(
        absolute_uri_problem("https://schemas.example.com/order/v1"),
        None
    );
    assert_eq!(absolute_uri_problem("urn:schema:order:1"), None);
    for bad in ["/relative", "1http://x", ":x", "schemas.example.com/v1"] {
        assert!(absolute_uri_problem(bad).is_some(), "{bad:?}");
    }
}

fn load_err(outbox: &str) -> String {
    let text = format!(
        "[connector]\nname = \"t\"\n[postgres]\ndatabase = \"d\"\n[kafka]\n\
         brokers = \"k:9092\"\n[[outbox]]\ntable = \"public.outbox\"\n{outbox}\n"
    );
    match super::super::Config::from_str(&text, "test.toml") {
        Ok(_) => panic!("expected a problem with {outbox}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn cloudevents_settings_are_checked_naming_the_key() {
    let err = load_err("format = \"cloudevents\"");
    assert!(
        err.contains("outbox[0].cloudevents.source: is required"),
        "{err}"
    );
    let err = load_err("format = \"cloudevents\"\n[outbox.cloudevents]\nsource = \"a b\"");
    assert!(err.contains("outbox[0].cloudevents.source:"), "{err}");
    let err = load_err(
        "format = \"cloudevents\"\n[outbox.cloudevents]\nsource = \"/o\"\n\
         dataschema = \"/relative\"",
    );
    assert!(err.contains("outbox[0].cloudevents.dataschema:"), "{err}");
    let err = load_err(
        "format = \"cloudevents\"\n[outbox.cloudevents]\nsource = \"/o\"\n\
         dataschema = \"urn:x\"\ndataschema_column = \"s\"",
    );
    assert!(err.contains("both set"), "{err}");
    let err = load_err(
        "format = \"cloudevents\"\n[outbox.cloudevents]\nsource = \"/o\"\n\
         datacontenttype = \"json\"",
    );
    assert!(
        err.contains("outbox[0].cloudevents.datacontenttype:"),
        "{err}"
    );
    let err = load_err(
        "format = \"cloudevents\"\n[outbox.cloudevents]\nsource = \"/o\"\n\
         extensions = { schema_version = \"v\", time = \"t\" }",
    );
    assert!(
        err.contains("cloudevents.extensions.schema_version:"),
        "{err}"
    );
    assert!(err.contains("core attribute"), "{err}");
    let err = load_err(
        "format = \"cloudevents\"\ntrace_context_column = \"t\"\n[outbox.cloudevents]\n\
         source = \"/o\"\nextensions = { traceparent = \"t\" }",
    );
    assert!(err.contains("filled from trace_context_column"), "{err}");
    let err = load_err(
        "format = \"cloudevents\"\nheader_columns = [\"type\", \"ce_id\"]\n\
         [outbox.cloudevents]\nsource = \"/o\"",
    );
    assert!(err.contains("outbox[0].header_columns[1]:"), "{err}");
    // An alias is the header's name: the one checked.
    let err = load_err(
        "format = \"cloudevents\"\nheader_columns = [\"type:ce_type\"]\n\
         [outbox.cloudevents]\nsource = \"/s\"",
    );
    assert!(err.contains("outbox[0].header_columns[0]:"), "{err}");
    // A column named like one is fine under another header name.
    let text = "[connector]\nname = \"t\"\n[postgres]\ndatabase = \"d\"\n[kafka]\n\
                brokers = \"k:9092\"\n[[outbox]]\ntable = \"public.outbox\"\n\
                format = \"cloudevents\"\nheader_columns = [\"ce_type:kind\"]\n\
                [outbox.cloudevents]\nsource = \"/s\"\n";
    super::super::Config::from_str(text, "test.toml").unwrap();
    let err = load_err("trace_context_column = \"t\"\nheader_columns = [\"traceparent\"]");
    assert!(err.contains("outbox[0].header_columns[0]:"), "{err}");
    let err = load_err("[outbox.cloudevents]\nsource = \"/o\"");
    assert!(err.contains("format is \"raw\""), "{err}");
    let err = load_err("format = \"json\"");
    assert!(err.contains("format"), "{err}");
}

#[test]
fn media_types() {
    assert_eq!(media_type_problem("application/json"), None);
    assert_eq!(media_type_problem("text/plain; charset=utf-8"), None);
    assert_eq!(media_type_problem("application/vnd.shop+json"), None);
    for bad in ["json", "", "/json", "text/", "text/plain\n"] {
        assert!(media_type_problem(bad).is_some(), "{bad:?}");
    }
}
