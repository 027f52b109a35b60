#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};

use super::*;
use crate::Lsn;
use crate::router::avro_read::read;
use crate::router::txmeta::TxnMetadata;

/// BEGIN and END of a transaction of three events over two tables, in
/// `kind`: (BEGIN, END).
fn records(kind: Option<SchemaKind>) -> (crate::router::Record, crate::router::Record) {
    let (id_h, lsn_h): (Arc<str>, Arc<str>) = ("walrelay.event_id".into(), "walrelay.lsn".into());
    let hdrs = || (&id_h, &lsn_h, Bytes::from_static(b"0/6E73CE00"));
    let (mut buf, mut values, mut ids) = (Vec::new(), Arena::new(1024), Arena::new(1024));
    let mut meta = TxnMetadata::new("dz", kind);
    let commit = Lsn(0x6E73CE00);
    meta.begin(348865, Lsn(1853051688), commit, 1796294894176);
    let begin = meta
        .begin_record(&mut buf, &mut values, &mut ids, hdrs())
        .unwrap()
        .unwrap();
    let (a, b): (Arc<str>, Arc<str>) = ("public.a".into(), "public.b".into());
    for t in [&a, &b, &b] {
        meta.count(commit, t).unwrap();
    }
    let end = meta
        .end_record(
            commit,
            Lsn(1853092736),
            &mut buf,
            &mut values,
            &mut ids,
            hdrs(),
        )
        .unwrap()
        .unwrap();
    (begin, end)
}

#[test]
fn avro_bodies_decode_to_the_json_records() {
    let (json_begin, json_end) = records(None);
    assert!(json_begin.schemas.is_none() && json_end.schemas.is_none());
    let (begin, end) = records(Some(SchemaKind::Avro));
    for (avro, json) in [(&begin, &json_begin), (&end, &json_end)] {
        let schemas = avro.schemas.as_ref().expect("schemas on a registry format");
        assert_eq!(
            schemas.key.as_ref().unwrap().name.as_deref(),
            Some(KEY_NAME)
        );
        assert_eq!(schemas.value.name.as_deref(), Some(VALUE_NAME));
        let mut k = &avro.key.as_ref().unwrap()[..];
        assert_eq!(
            read(&key_schema(), &mut k),
            serde_json::from_slice::<Value>(json.key.as_ref().unwrap()).unwrap()
        );
        assert!(k.is_empty());
        let mut v = &avro.value.as_ref().unwrap()[..];
        assert_eq!(
            read(&value_schema(), &mut v),
            serde_json::from_slice::<Value>(json.value.as_ref().unwrap()).unwrap()
        );
        assert!(v.is_empty());
        // Topic and headers as in JSON.
        assert_eq!((&avro.topic, &avro.headers), (&json.topic, &json.headers));
    }
    // The END's collections, decoded: Debezium's order, as in JSON.
    let mut v = &end.value.as_ref().unwrap()[..];
    assert_eq!(
        read(&value_schema(), &mut v)["data_collections"],
        json!([{"data_collection": "public.a", "event_count": 1},
               {"data_collection": "public.b", "event_count": 2}])
    );
    // Stable identity: the same transaction, the same bytes.
    assert_eq!(records(Some(SchemaKind::Avro)), (begin, end));
}

#[test]
fn json_schema_bodies_are_the_json_records() {
    let (json_begin, json_end) = records(None);
    let (begin, end) = records(Some(SchemaKind::Json));
    assert_eq!(
        (&begin.key, &begin.value),
        (&json_begin.key, &json_begin.value)
    );
    assert_eq!((&end.key, &end.value), (&json_end.key, &json_end.value));
    assert!(begin.schemas.is_some() && end.schemas.is_some());
}

#[test]
fn schemas_are_debeziums_transaction_metadata_schemas() {
    let e = Encoding::new(SchemaKind::Avro);
    let key: Value = serde_json::from_str(&e.schemas().key.as_ref().unwrap().text).unwrap();
    assert_eq!(
        key,
        json!({"type": "record", "name": "TransactionMetadataKey",
               "namespace": "io.debezium.connector.common",
               "fields": [{"name": "id", "type": "string"}],
               "connect.version": 1,
               "connect.name": "io.debezium.connector.common.TransactionMetadataKey"})
    );
    let value: Value = serde_json::from_str(&e.schemas().value.text).unwrap();
    assert_eq!(
        value,
        json!({"type": "record", "name": "TransactionMetadataValue",
               "namespace": "io.debezium.connector.common",
               "fields": [
                   {"name": "status", "type": "string"},
                   {"name": "id", "type": "string"},
                   {"name": "event_count", "type": ["null", "long"], "default": null},
                   {"name": "data_collections", "type": ["null", {"type": "array", "items": [
                       "null",
                       {"type": "record", "name": "collection", "namespace": "event",
                        "fields": [{"name": "data_collection", "type": "string"},
                                   {"name": "event_count", "type": "long"}],
                        "connect.version": 1, "connect.name": "event.collection"}]}],
                    "default": null},
                   {"name": "ts_ms", "type": "long"}],
               "connect.version": 1,
               "connect.name": "io.debezium.connector.common.TransactionMetadataValue"})
    );
    let json = Encoding::new(SchemaKind::Json);
    let value: Value = serde_json::from_str(&json.schemas().value.text).unwrap();
    assert_eq!(value["title"], VALUE_NAME);
    assert_eq!(value["$schema"], "http://json-schema.org/draft-07/schema#");
}
