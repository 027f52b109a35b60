//! `[[outbox]]` topics and `[[table]]` sections: templates, table names and
//! patterns, column lists and masks, Debezium modes, transaction metadata.

use super::*;

#[test]
fn topic_template_columns_are_checked_against_the_configured_ones() {
    let ok = minimal_with(
        "topic = \"{aggregatetype}.{type}.{tenant}.{id}.{aggregateid}\"\nheader_columns = [\"type\", \"tenant\"]",
    );
    load(&ok).unwrap();
    let error = load_err(&minimal_with("topic = \"events.{payload}\""));
    assert!(
        error.contains(
            "outbox[0].topic: template references {payload}, which is not a configured column; \
             use one of {id}, {aggregatetype}, {aggregateid}, {type} or add the column to header_columns (or envelope_columns)"
        ),
        "{error}"
    );
    let renamed = minimal_with("aggregate_type_column = \"kind\"\ntopic = \"ev.{kind}\"");
    load(&renamed).unwrap();
    let error = load_err(&minimal_with("aggregate_type_column = \"kind\""));
    assert!(
        error.contains("{aggregatetype}, which is not a configured column"),
        "{error}"
    );
}

#[test]
fn fixed_topic_must_be_a_valid_topic_name() {
    load(&minimal_with("topic = \"events\"")).unwrap();
    let error = load_err(&minimal_with(&format!("topic = \"{}\"", "a".repeat(250))));
    assert!(error.contains("at most 249"), "{error}");
    let error = load_err(&minimal_with("topic = \"..\""));
    assert!(error.contains("outbox[0].topic"), "{error}");
}

#[test]
fn topic_template_parsing() {
    let t = TopicTemplate::parse("outbox.{aggregatetype}-{type}").unwrap();
    assert_eq!(
        t.segments(),
        [
            Segment::Literal("outbox.".into()),
            Segment::Column("aggregatetype".into()),
            Segment::Literal("-".into()),
            Segment::Column("type".into()),
        ]
    );
    assert_eq!(t.to_string(), "outbox.{aggregatetype}-{type}");
    let values = HashMap::from([("aggregatetype", "Order"), ("type", "Created")]);
    assert_eq!(
        t.render(|c| values.get(c).copied()),
        Ok("outbox.Order-Created".to_owned())
    );
    assert_eq!(t.render(|_| None::<&str>), Err("aggregatetype"));
    for (bad, why) in [
        ("", "empty"),
        ("a{b", "never closed"),
        ("a}b", "no matching"),
        ("{a{b}}", "cannot nest"),
        ("a.{}", "empty placeholder"),
        ("a b", "not allowed"),
        ("a/{b}", "not allowed"),
    ] {
        let e = TopicTemplate::parse(bad).unwrap_err();
        assert!(e.contains(why), "{bad:?}: {e}");
    }
    assert_eq!(
        TopicTemplate::default_template(),
        TopicTemplate::parse(TopicTemplate::DEFAULT).unwrap()
    );
}

#[test]
fn table_names() {
    assert_eq!(
        TableRef::parse("outbox").unwrap(),
        TableRef {
            schema: "public".into(),
            name: "outbox".into()
        }
    );
    assert_eq!(
        TableRef::parse("App.Outbox").unwrap().to_string(),
        "App.Outbox"
    );
    for bad in [
        "",
        ".x",
        "x.",
        "a.b.c",
        "public.\"Outbox\"",
        &"x".repeat(64),
    ] {
        assert!(TableRef::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn duplicate_tables_are_found_after_schema_defaulting() {
    let error = load_err(&minimal_with("[[outbox]]\ntable = \"outbox\""));
    assert!(
        error.contains("outbox[1].table: table public.outbox is already configured in outbox[0]"),
        "{error}"
    );
    load(&minimal_with("[[outbox]]\ntable = \"other.outbox\"")).unwrap();
}

#[test]
fn tables_alone_are_enough_and_take_debezium_defaults() {
    let config = load(&format!("{TABLES_ONLY}[[table]]\nname = \"customers\"\n")).unwrap();
    assert!(config.outbox.is_empty());
    let t = &config.tables[0];
    assert_eq!(t.name.to_string(), "public.customers");
    assert_eq!(t.topic.as_str(), "{prefix}.{schema}.{table}");
    assert!(t.key_columns.is_empty());
    let d = &config.table_defaults;
    assert!(d.tombstones_on_delete);
    assert_eq!(d.decimal_handling_mode, DecimalHandlingMode::Precise);
    assert_eq!(d.time_precision_mode, TimePrecisionMode::Adaptive);
    assert_eq!(d.binary_handling_mode, BinaryHandlingMode::Bytes);
    assert_eq!(
        d.unavailable_value_placeholder,
        "__debezium_unavailable_value"
    );
    assert_eq!(d.unmapped_types, UnmappedTypes::Fail);
    // Debezium's topic.prefix defaults to the connector name here.
    assert_eq!(config.topic_prefix(), "shop");
}

#[test]
fn nothing_to_capture_is_an_error_naming_both_sections() {
    let e = load_err(TABLES_ONLY);
    assert!(e.contains("[[outbox]]") && e.contains("[[table]]"), "{e}");
}

#[test]
fn table_patterns_match_table_names_in_their_schema_only() {
    assert!(glob_match("*", "orders"));
    assert!(glob_match("order_*", "order_items"));
    assert!(glob_match("*_log", "audit_log"));
    assert!(glob_match("a*b*c", "axxbyyc"));
    assert!(!glob_match("order_*", "orders"));
    assert!(!glob_match("a*b", "a"));
    assert!(glob_match("exact", "exact"));
    let config = load(&format!("{TABLES_ONLY}[[table]]\nname = \"sales.*\"\n")).unwrap();
    assert!(config.tables[0].is_pattern());
    assert!(config.tables[0].matches("sales", "orders"));
    assert!(!config.tables[0].matches("public", "orders"));
}

#[test]
fn a_table_cannot_be_both_outbox_and_table_and_the_error_names_both() {
    let e = load_err(&minimal_with("[[table]]\nname = \"public.outbox\"\n"));
    assert!(e.contains("table[0].name"), "{e}");
    assert!(e.contains("outbox[0]"), "{e}");
    assert!(e.contains("not both"), "{e}");
}

#[test]
fn table_entries_are_unique_and_patterns_only_in_the_table_part() {
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"a.b\"\n[[table]]\nname = \"a.b\"\n[[table]]\nname = \"s*.t\"\n"
    ));
    assert!(
        e.contains("table[1].name") && e.contains("already configured in table[0]"),
        "{e}"
    );
    assert!(
        e.contains("table[2].name") && e.contains("only be used in the table part"),
        "{e}"
    );
}

#[test]
fn per_table_overrides_and_an_empty_placeholder_is_refused() {
    let config = load(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\ndecimal_handling_mode = \"double\"\n"
    ))
    .unwrap();
    assert_eq!(
        config.tables[0].decimal_handling_mode,
        Some(DecimalHandlingMode::Double)
    );
    let e = load_err(&format!(
        "{TABLES_ONLY}[table_defaults]\nunavailable_value_placeholder = \"\"\n[[table]]\nname = \"t\"\n"
    ));
    assert!(
        e.contains("table_defaults.unavailable_value_placeholder"),
        "{e}"
    );
    let e = load_err(&format!(
        "{TABLES_ONLY}[table_defaults]\ntopic_prefix = \"a b\"\n[[table]]\nname = \"t\"\n"
    ));
    assert!(e.contains("table_defaults.topic_prefix"), "{e}");
}

#[test]
fn skipped_operations_take_debezium_letters_and_refuse_others_naming_the_key() {
    let config = load(&format!("{TABLES_ONLY}[[table]]\nname = \"t\"\n")).unwrap();
    let d = config.table_defaults.skipped_operations;
    assert!(d.skips(b't') && !d.skips(b'c') && !d.skips(b'u') && !d.skips(b'd'));
    assert_eq!(format!("{d:?}"), "t");
    let config = load(&format!(
        "{TABLES_ONLY}[table_defaults]\nskipped_operations = \"none\"\n[[table]]\nname = \"t\"\n\
         skipped_operations = \" c, d \"\n"
    ))
    .unwrap();
    assert_eq!(
        config.table_defaults.skipped_operations,
        SkippedOperations::NONE
    );
    let t = config.tables[0].skipped_operations.unwrap();
    assert!(t.skips(b'c') && t.skips(b'd') && !t.skips(b't') && !t.skips(b'r'));
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\nskipped_operations = \"c,x\"\n"
    ));
    assert!(e.contains("skipped_operations"), "{e}");
    assert!(e.contains("\"x\" is not an operation"), "{e}");
    assert!(e.contains("test.toml:"), "{e}");
    let e = load_err(&format!(
        "{TABLES_ONLY}[table_defaults]\nskipped_operations = \"r\"\n[[table]]\nname = \"t\"\n"
    ));
    assert!(
        e.contains("skipped_operations") && e.contains("\"r\""),
        "{e}"
    );
}

#[test]
fn default_column_lists_are_regular_expressions_named_when_they_do_not_compile() {
    let e = load_err(&format!(
        "{TABLES_ONLY}[table_defaults]\ncolumn_include_list = ['public\\.t\\..*', 'a(?=b)', '(']\n\
         column_exclude_list = ['x']\n[[table]]\nname = \"t\"\n"
    ));
    assert!(e.contains("table_defaults.column_exclude_list:"), "{e}");
    assert!(
        e.contains("table_defaults.column_include_list[1]")
            && e.contains("look-around")
            && e.contains("schema.table.column"),
        "{e}"
    );
    let ok = format!(
        "{TABLES_ONLY}[table_defaults]\ncolumn_exclude_list = ['public\\.t\\.(ssn|email)', '.*\\.secret_.*']\n\
         [[table]]\nname = \"t\"\n"
    );
    let config = load(&ok).unwrap();
    let filter = config.table_defaults.column_filter().unwrap().unwrap();
    assert!(!filter.includes("public", "t", "ssn"));
    assert!(!filter.includes("PUBLIC", "T", "Email"));
    assert!(!filter.includes("other", "u", "secret_key"));
    assert!(filter.includes("public", "t", "ssn_hash"));
    assert!(filter.includes("public", "t", "id"));
}

#[test]
fn column_lists_are_one_or_the_other_and_masks_have_one_kind() {
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\ncolumn_include_list = [\"a\"]\n\
         column_exclude_list = [\"b\", \"b\"]\n"
    ));
    assert!(e.contains("table[0].column_exclude_list:"), "{e}");
    assert!(e.contains("column_include_list"), "{e}");
    assert!(
        e.contains("table[0].column_exclude_list[1]") && e.contains("already named"),
        "{e}"
    );
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\ncolumn_exclude_list = [\"ssn\"]\n\
         [[table.column_mask]]\ncolumns = [\"ssn\", \"\"]\nwith_chars = 3\ntruncate_to_chars = 2\n\
         [[table.column_mask]]\ncolumns = [\"ssn\"]\nhash = \"SHA-999\"\nhash_version = 3\n\
         [[table.column_mask]]\ncolumns = [\"x\"]\nsalt = \"s\"\ntruncate_to_chars = 0\n\
         [[table.column_mask]]\ncolumns = []\nwith_chars = 1\n"
    ));
    for expected in [
        "table[0].column_mask[0].columns[0]",
        "masked but left out",
        "table[0].column_mask[0].columns[1]",
        "table[0].column_mask[0]",
        "exactly one of hash",
        "table[0].column_mask[1].columns[0]",
        "already named in table[0].column_mask[0].columns[0]",
        "table[0].column_mask[1].hash",
        "SHA-256",
        "table[0].column_mask[1].salt",
        "table[0].column_mask[1].hash_version",
        "table[0].column_mask[2].salt",
        "set without hash",
        "table[0].column_mask[2].truncate_to_chars",
        "table[0].column_mask[3].columns",
    ] {
        assert!(e.contains(expected), "{expected} missing in {e}");
    }
}

#[test]
fn a_mask_salt_comes_from_the_environment_and_stays_secret() {
    let config = load(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\n[[table.column_mask]]\ncolumns = [\"email\"]\n\
         hash = \"sha-256\"\nsalt = \"${{WALRELAY_MASK_SALT}}\"\n"
    ))
    .unwrap();
    let mask = &config.tables[0].column_mask[0];
    assert_eq!(mask.salt.as_ref().unwrap().expose_secret(), MASK_SALT);
    assert!(!format!("{config:?}").contains(MASK_SALT));
    assert!(!format!("{mask:?}").contains(MASK_SALT));
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\n[[table.column_mask]]\ncolumns = [\"email\"]\n\
         hash = \"SHA-256\"\nsalt = \"${{NO_SUCH_SALT_VAR}}\"\n"
    ));
    assert!(e.contains("table[0].column_mask[0].salt"), "{e}");
    assert!(e.contains("NO_SUCH_SALT_VAR"), "{e}");
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\n[[table.column_mask]]\ncolumns = [\"email\"]\n\
         hash = \"SHA-256\"\nsalt = \"\"\n"
    ));
    assert!(e.contains("table[0].column_mask[0].salt: is empty"), "{e}");
}

/// Issue 27: `special_values` is `write` (the default) or `fail`, per
/// table too; anything else names the key and the two choices.
#[test]
fn special_values_is_write_or_fail_and_a_table_may_override_it() {
    let config = load(&format!("{TABLES_ONLY}[[table]]\nname = \"t\"\n")).unwrap();
    assert_eq!(config.table_defaults.special_values, SpecialValues::Write);
    let config = load(&format!(
        "{TABLES_ONLY}[table_defaults]\nspecial_values = \"fail\"\n[[table]]\nname = \"t\"\n\
         [[table]]\nname = \"u\"\nspecial_values = \"write\"\n"
    ))
    .unwrap();
    assert_eq!(config.table_defaults.special_values, SpecialValues::Fail);
    assert_eq!(config.tables[0].special_values, None);
    assert_eq!(config.tables[1].special_values, Some(SpecialValues::Write));
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\nspecial_values = \"stop\"\n"
    ));
    assert!(
        e.contains("special_values") && e.contains("`write`") && e.contains("`fail`"),
        "{e}"
    );
}

#[test]
fn unmapped_types_is_fail_or_text_and_a_table_may_override_it() {
    let config = load(&format!(
        "{TABLES_ONLY}[table_defaults]\nunmapped_types = \"text\"\n[[table]]\nname = \"t\"\n\
         [[table]]\nname = \"u\"\nunmapped_types = \"fail\"\n"
    ))
    .unwrap();
    assert_eq!(config.table_defaults.unmapped_types, UnmappedTypes::Text);
    assert_eq!(config.tables[0].unmapped_types, None);
    assert_eq!(config.tables[1].unmapped_types, Some(UnmappedTypes::Fail));
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"t\"\nunmapped_types = \"string\"\n"
    ));
    assert!(
        e.contains("unmapped_types") && e.contains("`fail`") && e.contains("`text`"),
        "{e}"
    );
}

#[test]
fn topic_names_are_sanitized_as_debezium_sanitizes_them() {
    use super::sanitized_topic_name as s;
    assert_eq!(s("shop.public.orders"), None);
    assert_eq!(s("a-b_c.D9"), None);
    assert_eq!(
        s("shop.Sales.Order Items").as_deref(),
        Some("shop.Sales.Order_Items")
    );
    assert_eq!(s("p.s.Straße").as_deref(), Some("p.s.Stra_e"));
    // Outside the BMP: two UTF-16 units, two underscores.
    assert_eq!(s("p.s.a😀b").as_deref(), Some("p.s.a__b"));
    assert_eq!(s("p.s.\"x\"/y").as_deref(), Some("p.s._x__y"));
    let long = format!("p.s.{}", "t".repeat(300));
    assert_eq!(s(&long).map(|n| n.len()), Some(249));
    assert_eq!(s(".").as_deref(), Some("_"));
    assert_eq!(s("..").as_deref(), Some("__"));
    for name in ["shop.Sales.Order Items", "p.s.a😀b", &long] {
        let fixed = s(name).unwrap();
        assert_eq!(super::topic_name_problem(&fixed), None, "{fixed}");
    }
}

/// `provide_transaction_metadata`: off by default; on, its topic
/// `<prefix>.transaction` must be a valid name — a prefix that is valid
/// alone but too long with the suffix is refused under this key (such a
/// prefix is valid only with a heartbeat topic of its own: the default
/// one is longer still).
#[test]
fn transaction_metadata_is_off_by_default_and_its_topic_name_checked() {
    let config = Config::from_str(&minimal_with(""), "test.toml").unwrap();
    assert!(!config.table_defaults.provide_transaction_metadata);
    let on = Config::from_str(
        &minimal_with("[table_defaults]\nprovide_transaction_metadata = true"),
        "test.toml",
    )
    .unwrap();
    assert!(on.table_defaults.provide_transaction_metadata);
    let error = load_err(&minimal_with(&format!(
        "[table_defaults]\ntopic_prefix = \"{}\"\nprovide_transaction_metadata = true\n\
         [heartbeat]\ninterval = \"10s\"\ntopic = \"hb\"",
        "p".repeat(240)
    )));
    assert!(
        error.contains(
            "table_defaults.provide_transaction_metadata: writes the transaction records to \"ppp"
        ),
        "{error}"
    );
    assert!(
        error.contains("shorten table_defaults.topic_prefix"),
        "{error}"
    );
    assert!(!error.contains("heartbeat"), "{error}");
    // Off, the same prefix is fine.
    Config::from_str(
        &minimal_with(&format!(
            "[table_defaults]\ntopic_prefix = \"{}\"\n[heartbeat]\ninterval = \"10s\"\ntopic = \"hb\"",
            "p".repeat(240)
        )),
        "test.toml",
    )
    .unwrap();
}

#[test]
fn table_registry_formats_need_a_registry_and_no_transaction_metadata() {
    let registry = "[kafka.schema_registry]\nurl = \"http://registry:8081\"\n";
    let config = load(&format!(
        "{TABLES_ONLY}{registry}[table_defaults]\nformat = \"avro\"\n[[table]]\nname = \"a\"\n\
         [[table]]\nname = \"b\"\nformat = \"json_schema\"\n[[table]]\nname = \"c\"\nformat = \"json\"\n\
         [[table]]\nname = \"d\"\nformat = \"protobuf\"\n"
    ))
    .unwrap();
    let formats: Vec<_> = config
        .tables
        .iter()
        .map(|t| t.format.unwrap_or(config.table_defaults.format))
        .collect();
    assert_eq!(
        formats,
        [
            TableFormat::Avro,
            TableFormat::JsonSchema,
            TableFormat::Json,
            TableFormat::Protobuf
        ]
    );
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"a\"\nformat = \"avro\"\n"
    ));
    assert!(
        e.contains("table[0].format: format = \"avro\" needs a schema registry"),
        "{e}"
    );
    // Every table overriding the default to json: no registry needed.
    load(&format!(
        "{TABLES_ONLY}[table_defaults]\nformat = \"avro\"\n[[table]]\nname = \"a\"\nformat = \"json\"\n"
    ))
    .unwrap();
    // Transaction metadata: BEGIN/END records in table_defaults.format, so
    // every table in it (and a registry for a registry format).
    for format in ["json_schema", "avro", "protobuf"] {
        load(&format!(
            "{TABLES_ONLY}{registry}[table_defaults]\nformat = \"{format}\"\n\
             provide_transaction_metadata = true\n[[table]]\nname = \"a\"\n\
             [[table]]\nname = \"b\"\nformat = \"{format}\"\n"
        ))
        .unwrap();
        let e = load_err(&format!(
            "{TABLES_ONLY}[table_defaults]\nformat = \"{format}\"\n\
             provide_transaction_metadata = true\n[[table]]\nname = \"a\"\n"
        ));
        assert!(
            e.contains(&format!(
                "table_defaults.format: format = \"{format}\" needs a schema registry"
            )),
            "{e}"
        );
    }
    let e = load_err(&format!(
        "{TABLES_ONLY}{registry}[table_defaults]\nformat = \"avro\"\n\
         provide_transaction_metadata = true\n[[table]]\nname = \"a\"\n\
         [[table]]\nname = \"b\"\nformat = \"json\"\n"
    ));
    assert!(
        e.contains(
            "table[1].format: format = \"json\" differs from table_defaults.format (\"avro\")"
        ) && e.contains("remove table[1].format"),
        "{e}"
    );
    let e = load_err(&format!(
        "{TABLES_ONLY}{registry}[table_defaults]\nprovide_transaction_metadata = true\n\
         [[table]]\nname = \"a\"\nformat = \"avro\"\n"
    ));
    assert!(
        e.contains("table[0].format: format = \"avro\" differs from table_defaults.format"),
        "{e}"
    );
    let e = load_err(&format!(
        "{TABLES_ONLY}[table_defaults]\nformat = \"xml\"\n[[table]]\nname = \"a\"\n"
    ));
    assert!(e.contains("format"), "{e}");
}

#[test]
fn heartbeat_registry_formats_need_a_registry() {
    let heartbeat = "[heartbeat]\ninterval = \"1s\"\npublish = true\nformat = \"avro\"\n";
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"a\"\n{heartbeat}"
    ));
    assert!(
        e.contains("heartbeat.format: format = \"avro\" needs a schema registry"),
        "{e}"
    );
    let config = load(&format!(
        "{TABLES_ONLY}[kafka.schema_registry]\nurl = \"http://registry:8081\"\n\
         [[table]]\nname = \"a\"\n{heartbeat}"
    ))
    .unwrap();
    assert_eq!(config.heartbeat.format, TableFormat::Avro);
    // A format walrelay does not know: refused naming the key.
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"a\"\n[heartbeat]\nformat = \"thrift\"\n"
    ));
    assert!(e.contains("heartbeat.format"), "{e}");
    let e = load_err(&format!(
        "{TABLES_ONLY}[[table]]\nname = \"a\"\n[heartbeat]\nformat = \"protobuf\"\n"
    ));
    assert!(
        e.contains("heartbeat.format: format = \"protobuf\" needs a schema registry"),
        "{e}"
    );
    let config = load(&format!(
        "{TABLES_ONLY}[kafka.schema_registry]\nurl = \"http://registry:8081\"\n\
         [[table]]\nname = \"a\"\n[heartbeat]\nformat = \"protobuf\"\n"
    ))
    .unwrap();
    assert_eq!(config.heartbeat.format, TableFormat::Protobuf);
}

#[test]
fn a_protobuf_outbox_needs_a_registry_and_takes_no_converter() {
    let e = load_err(&minimal_with("format = \"protobuf\""));
    assert!(
        e.contains("format = \"protobuf\" needs a schema registry"),
        "{e}"
    );
    let registry = "[kafka.schema_registry]\nurl = \"http://registry:8081\"\n";
    let c = load(&format!("{MINIMAL}format = \"protobuf\"\n{registry}")).unwrap();
    assert_eq!(c.outbox[0].format, OutboxFormat::Protobuf);
    assert!(c.outbox[0].format.uses_registry());
    let e = load_err(&format!(
        "{MINIMAL}format = \"protobuf\"\nkey_converter = \"json\"\n{registry}"
    ));
    assert!(
        e.contains("key_converter") && e.contains("format = \"protobuf\" writes the record itself"),
        "{e}"
    );
    // Not records: the record-name strategies are refused, as for avro.
    let e = load_err(&format!(
        "{MINIMAL}format = \"protobuf\"\n{registry}subject_name_strategy = \"record\"\n"
    ));
    assert!(e.contains("subject_name_strategy"), "{e}");
}
