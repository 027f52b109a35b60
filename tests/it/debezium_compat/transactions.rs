//! Debezium's `provide.transaction.metadata=true` against walrelay's
//! `provide_transaction_metadata = true`, in the run that sets them: the
//! `<prefix>.transaction` topics compared record by record (per partition,
//! in offset order: partition, key, value), after leaving out Debezium's
//! BEGIN/END pairs of transactions without an event
//! ([`EMPTY_TRANSACTIONS`]). The `transaction` blocks of the change events
//! are compared with the rest of their values by the main comparison; here
//! walrelay's are also checked to be there (streamed events) or null
//! (snapshot rows), and its END counts against its events, so that an
//! option both sides ignored could not pass.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

/// The row of docs/compatibility.md's "Where walrelay differs, and why"
/// that says why Debezium's BEGIN/END pairs with `event_count` 0 have no
/// counterpart in walrelay's records.
pub const EMPTY_TRANSACTIONS: &str = "transactions without a table event";

/// Whether a run's Debezium options ask for transaction metadata.
pub fn enabled(debezium_options: &str) -> bool {
    debezium_options
        .lines()
        .any(|l| l.trim() == "provide.transaction.metadata=true")
}

/// The xid part of a transaction id (`"<xid>:<lsn>"`).
fn xid(id: &Value) -> String {
    let id = id
        .as_str()
        .unwrap_or_else(|| panic!("id {id} is not a string"));
    id.split_once(':')
        .unwrap_or_else(|| panic!("id {id} is not <xid>:<lsn>"))
        .0
        .to_owned()
}

/// The change events of every compared table: `(table, value)`.
fn events(prefix: &str, debezium: bool) -> Vec<(String, Value)> {
    EXPECTED
        .iter()
        .flat_map(|(table, ..)| {
            read_as(&format!("{prefix}.{table}"), debezium)
                .into_iter()
                .filter_map(|r| r.value)
                .map(|v| (table.to_string(), v))
        })
        .collect()
}

/// The xids of the streamed events that carry a transaction block.
fn event_xids(events: &[(String, Value)]) -> BTreeSet<String> {
    events
        .iter()
        .filter(|(_, v)| !v["transaction"].is_null())
        .map(|(_, v)| xid(&v["transaction"]["id"]))
        .collect()
}

/// END records by xid: their values.
fn ends(recs: &[Rec]) -> BTreeMap<String, Value> {
    recs.iter()
        .filter_map(|r| r.value.clone())
        .filter(|v| v["status"] == "END")
        .map(|v| (xid(&v["id"]), v))
        .collect()
}

/// Waits until both transaction topics hold the END of every transaction
/// their change events name (END follows a transaction's last event), and
/// Debezium's an empty transaction too (this run's skipped TRUNCATE, sent
/// before later transactions' records); then compares them. Returns the
/// differences.
pub async fn compare(w_prefix: &str, d_prefix: &str, connect: &mut Connect) -> Vec<String> {
    for (who, prefix, debezium) in [("walrelay", w_prefix, false), ("Debezium", d_prefix, true)] {
        let topic = format!("{prefix}{}", ".transaction");
        wait_for(&format!("{who}'s END records in {topic}"), CATCH_UP, || {
            if debezium {
                connect.assert_alive();
            }
            let topic = topic.clone();
            async move {
                let wanted = event_xids(&events(prefix, debezium));
                let ends = ends(&read_as(&topic, debezium));
                let empty = ends.values().any(|v| v["event_count"] == 0);
                let complete = !wanted.is_empty()
                    && wanted.iter().all(|x| ends.contains_key(x))
                    && (!debezium || empty);
                complete.then_some(())
            }
        })
        .await;
    }
    let w = read(&format!("{w_prefix}.transaction"));
    let mut d = read_debezium(&format!("{d_prefix}.transaction"));
    let mut out = Vec::new();
    check_walrelays_own(w_prefix, &w, &mut out);

    // EMPTY_TRANSACTIONS: Debezium's pairs of transactions without an
    // event; walrelay must have written nothing for them.
    let empty: BTreeSet<String> = ends(&d)
        .into_iter()
        .filter(|(_, v)| v["event_count"] == 0 && v["data_collections"] == serde_json::json!([]))
        .map(|(x, _)| x)
        .collect();
    let before = d.len();
    d.retain(|r| {
        !r.value
            .as_ref()
            .is_some_and(|v| empty.contains(&xid(&v["id"])))
    });
    eprintln!(
        "transaction metadata: {} walrelay records; Debezium's {} records less {} of {} \
         transactions without an event ({EMPTY_TRANSACTIONS})",
        w.len(),
        before,
        before - d.len(),
        empty.len()
    );
    for r in &w {
        if let Some(v) = &r.value
            && empty.contains(&xid(&v["id"]))
        {
            out.push(format!(
                "transaction: walrelay wrote {v} for a transaction without an event"
            ));
        }
    }

    // The rest record by record: keys (so partitions) and values equal.
    if w.len() != d.len() {
        out.push(format!(
            "transaction: walrelay wrote {} records, Debezium {} (without its empty transactions)",
            w.len(),
            d.len()
        ));
    }
    for (p, i, a, b) in pairs(&w, &d, |r| r.partition) {
        let at = format!("transaction partition {p} record {i}");
        match (a, b) {
            (Some(a), Some(b)) => {
                if a.key != b.key {
                    out.push(format!(
                        "{at}: key: walrelay {:?}, Debezium {:?}",
                        a.key, b.key
                    ));
                }
                let (av, bv) = (
                    a.value.clone().unwrap_or(Value::Null),
                    b.value.clone().unwrap_or(Value::Null),
                );
                let mut d = Vec::new();
                diff("value", &av, &bv, &mut d);
                out.extend(d.into_iter().map(|d| format!("{at}: {d}")));
            }
            (a, b) => out.push(format!(
                "{at}: only {} wrote {:?}",
                if a.is_some() { "walrelay" } else { "Debezium" },
                a.or(b).map(|r| (&r.key, &r.value))
            )),
        }
    }
    out
}

/// walrelay's own records agree with themselves: each streamed event has a
/// `transaction` block and each snapshot row none; one BEGIN and one END
/// per transaction with events, END's counts those of its events.
fn check_walrelays_own(prefix: &str, recs: &[Rec], out: &mut Vec<String>) {
    let events = events(prefix, false);
    let mut counted: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (table, v) in &events {
        match (v["op"].as_str(), v["transaction"].is_null()) {
            (Some("r"), true) | (Some(_), false) => {}
            _ => out.push(format!(
                "{table}: walrelay's transaction block {} in {v}",
                if v["op"] == "r" {
                    "is set"
                } else {
                    "is missing"
                }
            )),
        }
        if !v["transaction"].is_null() {
            *counted
                .entry(xid(&v["transaction"]["id"]))
                .or_default()
                .entry(table.clone())
                .or_default() += 1;
        }
    }
    let statuses: Vec<(String, String)> = recs
        .iter()
        .filter_map(|r| r.value.as_ref())
        .map(|v| (xid(&v["id"]), v["status"].as_str().unwrap_or("").to_owned()))
        .collect();
    for (x, per_table) in &counted {
        let n = |s: &str| statuses.iter().filter(|(y, t)| y == x && t == s).count();
        if (n("BEGIN"), n("END")) != (1, 1) {
            out.push(format!(
                "walrelay wrote {} BEGIN and {} END records for transaction {x}, not one each",
                n("BEGIN"),
                n("END")
            ));
        }
        let Some(end) = ends(recs).remove(x) else {
            continue;
        };
        let listed: BTreeMap<String, u64> = end["data_collections"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["data_collection"].as_str().unwrap_or("").to_owned(),
                    c["event_count"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        if &listed != per_table || end["event_count"] != per_table.values().sum::<u64>() {
            out.push(format!(
                "walrelay's END of transaction {x} counts {end}, its events {per_table:?}"
            ));
        }
    }
    if counted.is_empty() {
        out.push("walrelay's change events carry no transaction block".into());
    }
}
