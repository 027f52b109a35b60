use proptest::strategy::Strategy;

use super::{Expanded, expand, java_double};

fn expanded(text: &str) -> Result<(Expanded, String), String> {
    let mut out = b"prefix".to_vec();
    let how = expand(&mut out, text, None)?;
    Ok((how, String::from_utf8(out[6..].to_vec()).unwrap()))
}

fn object(text: &str) -> String {
    match expanded(text) {
        Ok((Expanded::Object, s)) => s,
        other => panic!("{text}: {other:?}"),
    }
}

fn as_string(text: &str) {
    let mut want = Vec::new();
    super::jackson_str(&mut want, text);
    match expanded(text) {
        Ok((Expanded::AsString, s)) => assert_eq!(s.as_bytes(), want, "{text}"),
        other => panic!("{text}: {other:?}"),
    }
}

#[test]
fn doubles_are_javas() {
    for (d, want) in [
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1.0, "1.0"),
        (3.0, "3.0"),
        (0.1, "0.1"),
        (1.5, "1.5"),
        (-2.25, "-2.25"),
        (0.001, "0.001"),
        (0.000_99, "9.9E-4"),
        (1e-5, "1.0E-5"),
        (1_234_567.5, "1234567.5"),
        (9_999_999.0, "9999999.0"),
        (1e7, "1.0E7"),
        (12_345_678.9, "1.23456789E7"),
        (1e20, "1.0E20"),
        (1.797_693_134_862_315_7e308, "1.7976931348623157E308"),
        (5e-324, "4.9E-324"),
        (f64::INFINITY, "\"Infinity\""),
    ] {
        let mut out = Vec::new();
        java_double(&mut out, d);
        assert_eq!(String::from_utf8(out).unwrap(), want, "{d:e}");
    }
}

#[test]
fn numbers_take_jacksons_types() {
    assert_eq!(
        object(
            r#"{"i": 2147483647, "l": 2147483648, "n": -9223372036854775808, "f": 2.50, "e": 1e20, "s": 0.00001, "z": -0}"#
        ),
        r#"{"i":2147483647,"l":2147483648,"n":-9223372036854775808,"f":2.5,"e":1.0E20,"s":1.0E-5,"z":0}"#
    );
    // Beyond long: FLOAT64 schema, a BigDecimal value: Connect refuses it.
    let err = expanded(r#"{"n": 9223372036854775808}"#).unwrap_err();
    assert!(err.contains("beyond the range of a Java long"), "{err}");
    let err = expanded(r#"{"a": [1], "n": [9223372036854775808]}"#).unwrap_err();
    assert!(err.contains("Java long"), "{err}");
}

#[test]
fn nulls_and_empty_arrays_have_no_schema() {
    assert_eq!(
        object(r#"{"a": null, "b": [], "c": {"d": null, "e": [], "f": {}}, "g": [null, 1]}"#),
        r#"{"c":{"f":{}},"g":[null,1]}"#
    );
    assert_eq!(object("{}"), "{}");
}

#[test]
fn object_arrays_merge_members_in_element_order() {
    assert_eq!(
        object(r#"{"c": [{"x": 1, "y": 2}, {"x": 3}, {"x": 4, "y": null}, {"x": 5, "z": "q"}]}"#),
        r#"{"c":[{"x":1,"y":2,"z":null},{"x":3,"y":null,"z":null},{"x":4,"y":null,"z":null},{"x":5,"y":null,"z":"q"}]}"#
    );
    // One schema: optional, a null element is null. Merged: required.
    assert_eq!(
        object(r#"{"c": [{"x": 1}, null, {"x": 2}]}"#),
        r#"{"c":[{"x":1},null,{"x":2}]}"#
    );
    let err = expanded(r#"{"c": [{"x": 1}, null, {"y": 2}]}"#).unwrap_err();
    assert!(err.contains("null element"), "{err}");
    // `[]` where the merged schema has an int: Connect refuses the value.
    assert!(expanded(r#"{"c": [{"x": 1, "y": 2}, {"x": 5, "y": []}]}"#).is_err());
    // An element's empty array under a merged member's array schema stays.
    assert_eq!(
        object(r#"{"c": [{"x": [1]}, {"x": []}]}"#),
        r#"{"c":[{"x":[1]},{"x":[]}]}"#
    );
    // The same member as two types: Connect refuses the value.
    assert!(expanded(r#"{"c": [{"x": 1}, {"x": "s"}]}"#).is_err());
}

#[test]
fn uninferable_payloads_are_written_as_strings() {
    for text in [
        r#" {"a": 1}"#,
        r#""s""#,
        "42",
        "true",
        "[]",
        "[1, 2.5]",
        r#"{"a": [1, "x"]}"#,
        r#"{"a": [1, 2147483648]}"#,
        r#"{"a": [null, null]}"#,
        r#"{"a": [[], [1]]}"#,
        r#"{"a": 01}"#,
        r#"{"a": 1,}"#,
        "{not json",
        r#"{"a": "\ud83d"}"#,
    ] {
        as_string(text);
    }
    // Jackson's nesting limit: 1000 levels parse, 1001 do not.
    let nest = |n: usize| format!("{}1{}", r#"{"a":"#.repeat(n), "}".repeat(n));
    assert!(object(&nest(1000)) == nest(1000));
    let text = nest(1001);
    let got = expanded(&text);
    assert!(matches!(got, Ok((Expanded::AsString, _))), "{:.60?}", got);
}

#[test]
fn a_top_level_array_with_a_schema_fails_as_in_debezium() {
    assert!(expanded("[1, 2]").is_err());
    assert!(expanded(r#"[{"a": 1}]"#).is_err());
}

#[test]
fn strings_members_and_trailing_text_are_jacksons() {
    assert_eq!(
        object(
            "{\"k\\u00e9\": \"\\ud83d\\ude00 \\\"q\\\" \\/ \\u0001\", \"k\": 1, \"k\": true} trailing"
        ),
        r#"{"ké":"\uD83D\uDE00 \"q\" / \u0001","k":true}"#
    );
}

#[test]
fn the_deepest_payload_fits_a_small_stack() {
    // walrelay routes on the main thread (8 MiB); even a debug build fits
    // Tokio's worker threads' 2 MiB.
    let nest = |n: usize| format!("{}1{}", r#"{"a":[{"b":"#.repeat(n / 2), "}]}".repeat(n / 2));
    let text = nest(1000);
    let out = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || expanded(&text).map(|(_, s)| s.len()))
        .unwrap()
        .join()
        .expect("no stack overflow");
    assert!(out.unwrap() > 4000);
}

fn with_schema(text: &str) -> Result<String, String> {
    let mut out = Vec::new();
    let column_schema =
        r#"{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}"#;
    expand(
        &mut out,
        text,
        Some(super::WithSchema {
            column_schema,
            column: "body",
        }),
    )?;
    Ok(String::from_utf8(out).unwrap())
}

#[test]
fn schemas_are_connects_for_the_inferred_struct() {
    assert_eq!(
        with_schema(r#"{"s": "x", "n": null, "i": 1, "l": 2147483648, "d": 0.5, "b": true, "a": [1], "e": {}, "o": {"p": [{"q": 1}, {"r": "z"}]}, "m": [[{"t": 1}]]}"#).unwrap(),
        concat!(
            r#"{"schema":{"type":"struct","fields":["#,
            r#"{"type":"string","optional":true,"field":"s"},"#,
            r#"{"type":"int32","optional":true,"field":"i"},"#,
            r#"{"type":"int64","optional":true,"field":"l"},"#,
            r#"{"type":"double","optional":true,"field":"d"},"#,
            r#"{"type":"boolean","optional":true,"field":"b"},"#,
            r#"{"type":"array","items":{"type":"int32","optional":true},"optional":true,"field":"a"},"#,
            r#"{"type":"struct","fields":[],"optional":true,"name":"body.e","field":"e"},"#,
            r#"{"type":"struct","fields":[{"type":"array","items":{"type":"struct","fields":["#,
            r#"{"type":"int32","optional":true,"field":"q"},{"type":"string","optional":true,"field":"r"}"#,
            r#"],"optional":false,"name":"body.o.p"},"optional":true,"field":"p"}],"optional":true,"name":"body.o","field":"o"},"#,
            r#"{"type":"array","items":{"type":"array","items":{"type":"struct","fields":["#,
            r#"{"type":"int32","optional":true,"field":"t"}],"optional":true},"optional":true},"optional":true,"field":"m"}"#,
            r#"],"optional":true,"name":"body"},"#,
            r#""payload":{"s":"x","i":1,"l":2147483648,"d":0.5,"b":true,"a":[1],"e":{},"o":{"p":[{"q":1,"r":null},{"q":null,"r":"z"}]},"m":[[{"t":1}]]}}"#
        )
    );
    // Not expanded: the column's schema, the text.
    assert_eq!(
        with_schema("42").unwrap(),
        r#"{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":"42"}"#
    );
    // `[]`: the schema inferred is none.
    assert_eq!(
        with_schema("[]").unwrap(),
        r#"{"schema":null,"payload":"[]"}"#
    );
    assert!(with_schema(r#"{"n": 9223372036854775808}"#).is_err());
}

proptest::proptest! {
    /// Any text of JSON's alphabet: written (as a string, or expanded) or
    /// refused, never a panic; whatever is written parses as JSON, under
    /// schemas too.
    #[test]
    fn json_like_text_never_panics_and_output_is_json(
        text in r#"[{}\[\]",:0-9.eE+\- a-z\\]{0,48}"#,
    ) {
        for schema in [false, true] {
            let got = if schema { with_schema(&text) } else { expanded(&text).map(|(_, s)| s) };
            if let Ok(out) = got {
                let parsed: Result<serde_json::Value, _> = serde_json::from_str(&out);
                proptest::prop_assert!(parsed.is_ok(), "{:?} → {:?}", text, out);
            }
        }
    }

    /// An object of scalars (no nulls, integers within long, finite
    /// doubles) expands to the same JSON once parsed.
    #[test]
    fn objects_of_scalars_expand_to_the_same_json(
        members in proptest::collection::vec(
            ("[a-z]{1,3}", proptest::prop_oneof![
                proptest::prelude::any::<i64>().prop_map(serde_json::Value::from),
                proptest::prelude::any::<bool>().prop_map(serde_json::Value::from),
                "[ -~]{0,8}".prop_map(serde_json::Value::from),
                (-1e30f64..1e30).prop_map(serde_json::Value::from),
            ]),
            0..6,
        ),
    ) {
        let object: serde_json::Map<String, serde_json::Value> = members.into_iter().collect();
        let text = serde_json::Value::Object(object.clone()).to_string();
        let out = object_of(&text);
        let parsed: serde_json::Value = serde_json::from_str(&out).unwrap();
        proptest::prop_assert!(
            same(&parsed, &serde_json::Value::Object(object)),
            "{} → {}", text, out
        );
    }
}

fn object_of(text: &str) -> String {
    object(text)
}

/// Equal JSON, doubles within serde_json's own parsing error (its default
/// parser is not correctly rounded for long mantissas; Rust's and Java's
/// are).
fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            x == y || ((x - y) / x).abs() < 1e-15
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|((k, v), (l, w))| k == l && same(v, w))
        }
        _ => a == b,
    }
}
