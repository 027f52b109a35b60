//! Writers of transactional logical decoding messages
//! (`pg_logical_emit_message(true, prefix, …)`) and the check that Kafka
//! holds every one of them. A message lives in no table: what a writer's
//! COMMIT returned is the ground truth (killing walrelay does not touch
//! PostgreSQL, so a writer always knows what committed).
//!
//! Each payload is `{"type": "Load", "key": "k<n>", "w": writer, "s": seq}`,
//! `s` increasing per writer; a `[[message]]` route with
//! `key_field = "key"` keys the records by `key`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::{RngExt, SeedableRng};

use super::{Consumed, pg_connect};

/// One committed message: its writer, sequence and key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Emitted {
    pub w: u64,
    pub s: u64,
    pub key: String,
}

/// Tasks emitting transactions of 1..=4 messages with `prefix` over `keys`
/// keys until stopped.
pub struct MessageWriters {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Emitted>>>,
}

impl MessageWriters {
    pub fn start(db_name: &str, prefix: &str, writers: u64, keys: u64) -> MessageWriters {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..writers)
            .map(|w| {
                let (db_name, prefix, stop) = (db_name.to_owned(), prefix.to_owned(), stop.clone());
                tokio::spawn(async move {
                    let client = pg_connect(&db_name).await;
                    let mut rng =
                        rand::rngs::StdRng::seed_from_u64(w + u64::from(std::process::id()));
                    let mut done = Vec::new();
                    let mut s = 0;
                    while !stop.load(Ordering::SeqCst) {
                        let mut sql = String::from("BEGIN;");
                        let mut txn = Vec::new();
                        for _ in 0..rng.random_range(1..=4) {
                            let key = format!("k{}", rng.random_range(0..keys));
                            sql.push_str(&format!(
                                "SELECT pg_logical_emit_message(true, '{prefix}', \
                                 '{{\"type\":\"Load\",\"key\":\"{key}\",\"w\":{w},\"s\":{s}}}');"
                            ));
                            txn.push(Emitted { w, s, key });
                            s += 1;
                        }
                        sql.push_str("COMMIT");
                        client.batch_execute(&sql).await.expect("emit messages");
                        done.extend(txn);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    done
                })
            })
            .collect();
        MessageWriters { stop, tasks }
    }

    /// Stops the writers; every message they committed.
    pub async fn stop(self) -> Vec<Emitted> {
        self.stop.store(true, Ordering::SeqCst);
        let mut all = Vec::new();
        for t in self.tasks {
            all.extend(t.await.expect("message writer"));
        }
        all
    }
}

/// The message a record carries, if its value is a load payload.
pub fn emitted_of(c: &Consumed) -> Option<Emitted> {
    let v: serde_json::Value = serde_json::from_slice(c.value.as_deref()?).ok()?;
    Some(Emitted {
        w: v["w"].as_u64()?,
        s: v["s"].as_u64()?,
        key: v["key"].as_str()?.to_owned(),
    })
}

/// Whether `consumed` holds every message of `emitted`.
pub fn holds_all(emitted: &[Emitted], consumed: &[Consumed]) -> bool {
    let got: std::collections::HashSet<Emitted> = consumed.iter().filter_map(emitted_of).collect();
    emitted.iter().all(|e| got.contains(e))
}

/// Checks `consumed` (the records of the messages' topic) against
/// `emitted`: every message arrived, keyed by its key; each message has one
/// event id and its copies are identical; per key, the first copies come in
/// commit order (a writer's messages in sequence). Returns the number of
/// duplicates.
pub fn verify_message_delivery(emitted: &[Emitted], consumed: &[Consumed]) -> usize {
    assert!(holds_all(emitted, consumed), "some messages never arrived");
    let mut sorted: Vec<&Consumed> = consumed.iter().collect();
    sorted.sort_by_key(|c| (c.partition, c.offset));
    let mut first: HashMap<Emitted, &Consumed> = HashMap::new();
    let mut last_seq: HashMap<(String, u64), u64> = HashMap::new();
    let mut duplicates = 0;
    for c in sorted {
        let e = emitted_of(c).unwrap_or_else(|| panic!("not a load message: {c:?}"));
        assert_eq!(c.key.as_deref(), Some(e.key.as_bytes()), "{c:?}");
        if let Some(f) = first.get(&e) {
            duplicates += 1;
            assert_eq!(
                (&f.key, &f.value, &f.headers, f.partition),
                (&c.key, &c.value, &c.headers, c.partition),
                "message {e:?} was re-sent different"
            );
            continue;
        }
        let prev = last_seq.insert((e.key.clone(), e.w), e.s);
        assert!(
            prev.is_none_or(|p| p < e.s),
            "key {}: writer {}'s message {} first arrived after its message {prev:?}",
            e.key,
            e.w,
            e.s
        );
        first.insert(e, c);
    }
    duplicates
}
