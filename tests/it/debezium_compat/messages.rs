//! Issue 25 item 2: walrelay's `[[message]]` records with
//! `format = "debezium"` against what Debezium's PostgreSQL connector writes
//! for the same logical decoding messages (`pg_logical_emit_message`), under
//! the JSON converter with `schemas.enable=false`.
//!
//! Debezium 3.6.1 turns every message, transactional or not, into an
//! `op: "m"` event on `<topic.prefix>.message`: key `{"prefix": …}`, value
//! `op`, `ts_ms`, `source` (`schema`/`table` empty, `txId` null and
//! `sequence` `[lsn, lsn]` for a non-transactional one), `transaction: null`,
//! `message: {prefix, content}` with the content base64; no headers.
//! walrelay writes the transactional ones only; for those, key and value
//! are equal once the fields [`DELIBERATE`] lists are left out (the same
//! ones as for table events), and `source.sequence`'s LSN is equal.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_and_walrelay_on_the_same_logical_messages() {
    let _one = ONE_AT_A_TIME.lock().await;
    require_kafka();
    let (libs, debezium_version) = connect_libs();
    let db = TestDb::new("wr_dbz_msg").await;
    let names = Names::new("wr_dm");
    let tag = &names.connector;
    db.client
        .batch_execute(&format!(
            "CREATE TABLE t (id int PRIMARY KEY); ALTER TABLE t OWNER TO walrelay;
             CREATE PUBLICATION {pub} FOR TABLE t;
             ALTER PUBLICATION {pub} OWNER TO walrelay;",
            pub = names.publication
        ))
        .await
        .expect("table and publication");
    let dbz_slot = format!("{}_dbz", names.slot);
    let connector = Debezium {
        name: &format!("{tag}_dbz"),
        topic_prefix: tag,
        slot: &dbz_slot,
        snapshot_mode: "no_data",
        tables: "public\\\\.t",
        more: "",
    };
    let mut connect = Connect::start(
        "walrelay_dbz_messages",
        &libs,
        JSON_WITHOUT_SCHEMAS,
        &[connector.properties(&db, &names.publication)],
    );
    let w_topic = format!("{tag}_w.message");
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[[table]]\nname = \"public.t\"\n\n[[message]]\nprefix = \"orders\"\ntopic = \"{w_topic}\"\nformat = \"debezium\"\n"
        ),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", CATCH_UP).await;
    wait_for("Debezium's slot", DEBEZIUM_READY, || {
        connect.assert_alive();
        let db = &db;
        let slot = &dbz_slot;
        async move { db.confirmed_flush(slot).await.map(|_| ()) }
    })
    .await;
    // Debezium's streaming starts after its slot exists; give it its first
    // change to be sure it reads.
    db.client
        .batch_execute(
            r#"INSERT INTO t VALUES (1);
               BEGIN;
               INSERT INTO t VALUES (2);
               SELECT pg_logical_emit_message(true, 'orders', '{"order_id":"42","type":"Paid"}');
               SELECT pg_logical_emit_message(true, 'orders', '\x00ff'::bytea);
               COMMIT;
               SELECT pg_logical_emit_message(false, 'orders', 'non-transactional');"#,
        )
        .await
        .expect("messages");
    let d_topic = format!("{tag}.message");
    let d = wait_for("Debezium's message events", CATCH_UP, || {
        connect.assert_alive();
        let recs = consume_to_end(&[&d_topic]);
        async move { (recs.len() >= 3).then_some(recs) }
    })
    .await;
    for r in &d {
        eprintln!(
            "debezium {debezium_version}: topic {} key {} value {} headers {:?}",
            r.topic,
            String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()),
            String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()),
            r.headers
                .iter()
                .map(|(k, v)| format!("{k}={}", String::from_utf8_lossy(v)))
                .collect::<Vec<_>>()
        );
    }
    let w = wait_for("walrelay's message record", CATCH_UP, || {
        let recs = consume_to_end(&[&w_topic]);
        async move { (!recs.is_empty()).then_some(recs) }
    })
    .await;
    assert_eq!(relay.stop().code(), Some(0), "{}", relay.log());
    drop(connect);

    // Debezium: one op "m" event per message, key {"prefix": …}, the
    // content base64 (JsonConverter's bytes), the non-transactional one too.
    assert_eq!(d.len(), 3, "{d:#?}");
    let values: Vec<Value> = d
        .iter()
        .map(|r| serde_json::from_slice(r.value.as_deref().unwrap()).unwrap())
        .collect();
    for (r, v) in d.iter().zip(&values) {
        let key: Value = serde_json::from_slice(r.key.as_deref().unwrap()).unwrap();
        assert_eq!(key, serde_json::json!({"prefix": "orders"}));
        assert_eq!(v["op"], "m", "{v}");
        assert_eq!(v["message"]["prefix"], "orders", "{v}");
    }
    let b64 = |s: &[u8]| {
        let mut out = Vec::new();
        walrelay::router::debezium::base64(&mut out, s);
        String::from_utf8(out).unwrap()
    };
    assert_eq!(
        values[0]["message"]["content"],
        b64(br#"{"order_id":"42","type":"Paid"}"#)
    );
    assert_eq!(values[1]["message"]["content"], b64(&[0, 0xff]));
    assert_eq!(values[2]["message"]["content"], b64(b"non-transactional"));
    // walrelay: the transactional messages, record by record as Debezium's.
    assert_eq!(w.len(), 2, "{w:#?}");
    assert_eq!(values[2]["source"]["txId"], Value::Null);
    for (i, (wr, dr)) in w.iter().zip(&d).enumerate() {
        assert_eq!(
            serde_json::from_slice::<Value>(wr.key.as_deref().unwrap()).unwrap(),
            serde_json::from_slice::<Value>(dr.key.as_deref().unwrap()).unwrap(),
            "message {i}: keys"
        );
        let mut wv: Value = serde_json::from_slice(wr.value.as_deref().unwrap()).unwrap();
        let mut dv = values[i].clone();
        let (wl, dl) = (normalize(&mut wv), normalize(&mut dv));
        assert_eq!(wl, dl, "message {i}: source.sequence's LSN");
        assert_eq!(wv, dv, "message {i}: values differ");
        assert!(dr.headers.is_empty(), "Debezium writes no headers: {dr:?}");
        assert_eq!(wr.header_str("walrelay.prefix").as_deref(), Some("orders"));
    }
}
