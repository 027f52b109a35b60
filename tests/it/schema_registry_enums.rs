//! Enum arrays and domains under `[[table]] format = "avro" | "json_schema"`
//! against the real services (PostgreSQL, Kafka, Apicurio Registry 3.3.3),
//! every record decoded by Confluent's own Python client
//! (`tests/support/sr_decode.py`): an array of an enum is an array of
//! Debezium's `io.debezium.data.Enum` with its element type's labels —
//! required items in Avro, as Debezium 3.6.1 writes them
//! (`debezium_compat::avro` compares) — a domain over an enum is the enum,
//! and a column of a domain declared `NOT NULL` is required in Avro as a
//! `NOT NULL` column is. A NULL element makes the items optional: the
//! subject's next version, registered before that record, said once.

use std::time::Duration;

use serde_json::{Value, json};

use crate::schema_registry::{registry_section, registry_url};
use crate::schema_registry_tables::{field, name_of, unwrap_optional, versions, wait_decoded};
use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn enum_arrays_and_domains_follow_the_catalog_and_a_null_element_widens_the_items() {
    enum_arrays_and_domains("avro").await;
}

/// The same in JSON Schema: the `NOT NULL` domain stays optional (as a
/// `NOT NULL` column does there) and so do the items (a required item made
/// optional would not register), so nothing widens.
#[tokio::test(flavor = "multi_thread")]
async fn json_schema_enum_arrays_and_domains_follow_the_catalog() {
    enum_arrays_and_domains("json_schema").await;
}

async fn enum_arrays_and_domains(format: &str) {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("sr_ea").await;
    db.client
        .batch_execute(
            "CREATE TYPE mood AS ENUM ('happy', 'sad');
             CREATE DOMAIN happy_mood AS mood;
             CREATE DOMAIN pos AS int4 NOT NULL CHECK (VALUE > 0);
             CREATE TABLE sr_ea (id int4 PRIMARY KEY, ms mood[], hm happy_mood, p pos);
             ALTER TABLE sr_ea REPLICA IDENTITY FULL;
             ALTER TABLE sr_ea OWNER TO walrelay;",
        )
        .await
        .unwrap();
    let names = Names::new("sr_ea");
    let prefix = names.connector.clone();
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\nformat = \"{format}\"\n\n\
             [[table]]\nname = \"public.sr_ea\"\n\n{}",
            registry_section(&url)
        ),
    );
    let topic = format!("{prefix}.public.sr_ea");
    let subject = format!("{topic}-value");
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    db.client
        .batch_execute("INSERT INTO sr_ea VALUES (1, '{happy,sad}', 'happy', 1)")
        .await
        .unwrap();
    let got = wait_decoded(format, &url, std::slice::from_ref(&topic), 1).await;
    // A column's schema in a record's value schema: (optional, the schema
    // with the optional union unwrapped).
    let column = |r: &Value, name: &str| -> (bool, Value) {
        let envelope: Value = serde_json::from_str(r["value_schema"].as_str().unwrap()).unwrap();
        let row = field(&envelope, "before");
        let s = match row.get("fields") {
            Some(Value::Array(fields)) => {
                fields.iter().find(|f| f["name"] == name).unwrap()["type"].clone()
            }
            _ => row["properties"][name].clone(),
        };
        (optional(&s), unwrap_optional(&s).clone())
    };
    let is_enum = |s: &Value| {
        name_of(s) == "io.debezium.data.Enum"
            && s["connect.version"] == 1
            && s["connect.parameters"] == json!({"allowed": "happy,sad"})
    };
    let avro = format == "avro";
    // The array: optional, of Enums, required in Avro only.
    let (optional_ms, ms) = column(&got[0], "ms");
    assert!(optional_ms, "{ms}");
    assert_eq!(ms["type"], "array", "{ms}");
    assert_eq!(optional(&ms["items"]), !avro, "{ms}");
    assert!(is_enum(unwrap_optional(&ms["items"])), "{ms}");
    // The domain over the enum: the enum.
    let (optional_hm, hm) = column(&got[0], "hm");
    assert!(optional_hm && is_enum(&hm), "{hm}");
    // The NOT NULL domain: required in Avro, as a NOT NULL column.
    let (optional_p, p) = column(&got[0], "p");
    assert_eq!(optional_p, !avro, "{p}");
    assert_eq!(
        got[0]["value"]["after"],
        json!({"id": 1, "ms": ["happy", "sad"], "hm": "happy", "p": 1})
    );
    assert_eq!(versions(&url, &subject), [1]);

    // A NULL element: Avro's items become optional (the next version,
    // before the record); then another, and a NULL array, change nothing.
    db.client
        .batch_execute(
            "INSERT INTO sr_ea VALUES (2, '{sad,NULL}', NULL, 2);
             INSERT INTO sr_ea VALUES (3, '{NULL}', 'sad', 3);
             INSERT INTO sr_ea VALUES (4, NULL, NULL, 4);",
        )
        .await
        .unwrap();
    let got = wait_decoded(format, &url, std::slice::from_ref(&topic), 4).await;
    let after: Vec<&Value> = got.iter().map(|r| &r["value"]["after"]).collect();
    assert_eq!(
        after,
        [
            &json!({"id": 1, "ms": ["happy", "sad"], "hm": "happy", "p": 1}),
            &json!({"id": 2, "ms": ["sad", null], "hm": null, "p": 2}),
            &json!({"id": 3, "ms": [null], "hm": "sad", "p": 3}),
            &json!({"id": 4, "ms": null, "hm": null, "p": 4}),
        ]
    );
    for r in &got[1..] {
        let ms = column(r, "ms").1;
        assert!(optional(&ms["items"]), "{ms}");
        assert!(is_enum(unwrap_optional(&ms["items"])), "{ms}");
        assert_eq!(column(r, "p").0, !avro);
        assert_eq!(r["value_schema_id"], got[1]["value_schema_id"]);
    }
    let want: &[u64] = if avro { &[1, 2] } else { &[1] };
    assert_eq!(versions(&url, &subject), want, "{subject}");
    relay.stop();
    let log = relay.log();
    assert_eq!(
        log.matches("holds an array with a NULL element").count(),
        usize::from(avro),
        "said once:\n{log}"
    );
}

/// Whether schema `s` is an optional union (Avro `["null", T]`, JSON
/// Schema `oneOf` with null).
fn optional(s: &Value) -> bool {
    s.is_array() || s.get("oneOf").is_some()
}
