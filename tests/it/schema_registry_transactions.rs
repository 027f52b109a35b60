//! `provide_transaction_metadata = true` with `[table_defaults] format =
//! "avro" | "json_schema"` against the real services (PostgreSQL, Kafka,
//! Apicurio Registry 3.3.3): a snapshot row (no transaction), then
//! transactions over two tables — inserts, an update, a delete with its
//! tombstone — every record of the table topics and of
//! `<prefix>.transaction` decoded by Confluent's own Python client (not
//! ours, `tests/support/sr_decode.py`): one BEGIN and one END per streamed
//! transaction under Debezium's `TransactionMetadataKey` /
//! `TransactionMetadataValue` schemas, each END counting the events whose
//! `transaction` blocks name its transaction, per table.
//!
//! Needs `WALRELAY_REGISTRY_URL`, `WALRELAY_REGISTRY_LOG` and
//! `WALRELAY_REGISTRY_PYTHON` (`deploy/dev/registry.sh up` prints them).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::schema_registry::{decode, registry_section, registry_url};
use crate::support::*;

/// A record's commit LSN (`walrelay.lsn`) as a number.
fn commit_lsn(r: &Value) -> u64 {
    let lsn = r["headers"]["walrelay.lsn"].as_str().unwrap_or("0/0");
    let (hi, lo) = lsn.split_once('/').unwrap();
    u64::from_str_radix(hi, 16).unwrap() << 32 | u64::from_str_radix(lo, 16).unwrap()
}

/// The name a schema gives itself: Avro `connect.name`, JSON Schema `title`.
fn name_of(text: &Value) -> String {
    let s: Value = serde_json::from_str(text.as_str().unwrap()).unwrap();
    s.get("connect.name")
        .or_else(|| s.get("title"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

async fn transaction_records_decode_with_confluents_client(format: &str) {
    require_kafka();
    let url = registry_url();
    let db = TestDb::new("sr_txm").await;
    db.client
        .batch_execute(
            "CREATE TABLE txa (id int4 PRIMARY KEY, note text); ALTER TABLE txa OWNER TO walrelay;
             CREATE TABLE txb (id int4 PRIMARY KEY); ALTER TABLE txb OWNER TO walrelay;
             INSERT INTO txa VALUES (1, 'before the start');",
        )
        .await
        .unwrap();
    let names = Names::new("sr_txm");
    let prefix = names.connector.clone();
    let config = connector_config(
        &db,
        &names,
        &format!(
            "[table_defaults]\ntopic_prefix = \"{prefix}\"\nformat = \"{format}\"\n\
             provide_transaction_metadata = true\n\n\
             [[table]]\nname = \"public.txa\"\n\n[[table]]\nname = \"public.txb\"\n\n{}",
            registry_section(&url)
        ),
    );
    let mut relay = RelayProcess::start(&config, &[]);
    relay.wait_log("streaming", Duration::from_secs(60)).await;
    // Three transactions (one simple query would be one implicit
    // transaction: one statement string each).
    for sql in [
        "BEGIN; INSERT INTO txa VALUES (2, 'two'); INSERT INTO txb VALUES (1);
                UPDATE txa SET note = 'changed' WHERE id = 2; COMMIT;",
        "INSERT INTO txb VALUES (2)",
        "DELETE FROM txa WHERE id = 2",
    ] {
        db.client.batch_execute(sql).await.unwrap();
    }
    let (ta, tb, tt) = (
        format!("{prefix}.public.txa"),
        format!("{prefix}.public.txb"),
        format!("{prefix}.transaction"),
    );
    // Table records: the snapshot row, 3 + 1 + 1 events, the tombstone;
    // transaction records: BEGIN and END of 3 transactions.
    let (events, txns) = wait_for(
        "the table and transaction records decoded",
        Duration::from_secs(120),
        || {
            let (format, url) = (format.to_owned(), url.clone());
            let (ta, tb, tt) = (ta.clone(), tb.clone(), tt.clone());
            async move {
                let events = decode(&format!("{format}:schemas"), &url, &[ta, tb]);
                let txns = decode(&format!("{format}:schemas"), &url, &[tt]);
                (events.len() >= 7 && txns.len() >= 6).then_some((events, txns))
            }
        },
    )
    .await;
    relay.stop();
    assert_eq!((events.len(), txns.len()), (7, 6), "{events:#?}\n{txns:#?}");

    // The events' transaction blocks, in stream order (commit LSN, then
    // the change's index in `walrelay.event_id`): per xid, events per table.
    let mut events = events;
    events.sort_by_key(|r| {
        let id = r["headers"]["walrelay.event_id"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let mut parts = id.split(':').skip(1);
        let index: u64 = parts.next().and_then(|i| i.parse().ok()).unwrap_or(0);
        (commit_lsn(r), index, parts.next().is_some())
    });
    let mut counted: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for r in &events {
        let v = &r["value"];
        if v.is_null() {
            continue; // the tombstone: not an event
        }
        let block = &v["transaction"];
        if v["op"] == "r" {
            assert_eq!(
                *block,
                Value::Null,
                "a snapshot row has no transaction: {r}"
            );
            continue;
        }
        let id = block["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no block: {r}"));
        let (xid, lsn) = id.split_once(':').unwrap();
        assert_eq!(xid, v["source"]["txId"].to_string(), "{r}");
        assert_eq!(lsn, v["source"]["lsn"].to_string(), "{r}");
        let table = format!("public.{}", v["source"]["table"].as_str().unwrap());
        let per_table = counted.entry(xid.to_owned()).or_default();
        *per_table.entry(table).or_default() += 1;
        let (total, in_table) = (
            per_table.values().sum::<u64>(),
            per_table[&format!("public.{}", v["source"]["table"].as_str().unwrap())],
        );
        assert_eq!(
            (
                block["total_order"].as_u64(),
                block["data_collection_order"].as_u64()
            ),
            (Some(total), Some(in_table)),
            "{r}"
        );
    }
    assert_eq!(counted.len(), 3, "three streamed transactions: {counted:?}");

    // BEGIN then END of each, in commit order, under Debezium's schemas.
    let mut txns = txns;
    txns.sort_by_key(|r| (commit_lsn(r), r["value"]["status"] != "BEGIN"));
    for pair in txns.chunks(2) {
        let (begin, end) = (&pair[0], &pair[1]);
        for r in [begin, end] {
            assert_eq!(r["key"], json!({"id": r["value"]["id"]}), "{r}");
            assert_eq!(
                name_of(&r["key_schema"]),
                "io.debezium.connector.common.TransactionMetadataKey"
            );
            assert_eq!(
                name_of(&r["value_schema"]),
                "io.debezium.connector.common.TransactionMetadataValue"
            );
            assert!(
                r["value"]["ts_ms"].as_i64().unwrap() > 1_700_000_000_000,
                "{r}"
            );
        }
        let xid = |r: &Value| {
            r["value"]["id"]
                .as_str()
                .unwrap()
                .split(':')
                .next()
                .unwrap()
                .to_owned()
        };
        assert_eq!(xid(begin), xid(end));
        assert_eq!(begin["value"]["status"], "BEGIN");
        assert_eq!(
            (
                &begin["value"]["event_count"],
                &begin["value"]["data_collections"]
            ),
            (&Value::Null, &Value::Null)
        );
        assert_eq!(end["value"]["status"], "END");
        let per_table = &counted[&xid(end)];
        let listed: BTreeMap<String, u64> = end["value"]["data_collections"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["data_collection"].as_str().unwrap().to_owned(),
                    c["event_count"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(&listed, per_table, "{end}");
        assert_eq!(
            end["value"]["event_count"].as_u64(),
            Some(per_table.values().sum::<u64>())
        );
        assert_eq!(
            begin["value"]["ts_ms"], end["value"]["ts_ms"],
            "the commit time"
        );
    }
    let ids: std::collections::HashSet<_> = txns
        .iter()
        .map(|r| (r["key_schema_id"].clone(), r["value_schema_id"].clone()))
        .collect();
    assert_eq!(ids.len(), 1, "one key and one value schema: {ids:?}");
    eprintln!(
        "{format}: {} transaction records and {} table records decoded by Confluent's client; \
         {} transactions, each END counting its events",
        txns.len(),
        events.len(),
        counted.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn avro_transaction_records_decode_with_confluents_client() {
    transaction_records_decode_with_confluents_client("avro").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn json_schema_transaction_records_decode_with_confluents_client() {
    transaction_records_decode_with_confluents_client("json_schema").await;
}
