//! Writers of a `[[table]]` table's row versions, and the check that its
//! change events hold every one of them. The table has `id int4` (the
//! primary key) and `v int4`: a writer inserts rows with `v = 0` and
//! updates random rows with `v = v + 1`, in transactions of 1..=3
//! statements; what its COMMITs returned is the ground truth `(id, v)`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::{RngExt, SeedableRng};

use super::{Consumed, pg_connect};

/// A writer of row versions until stopped.
pub struct VersionWriters {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<(i32, i32)>>,
}

impl VersionWriters {
    /// Writes `table`, whose rows `1..first_new_id` exist already; `insert`
    /// inserts row `$1` (an `int4`) with `v = 0`.
    pub fn start(db_name: &str, table: &str, insert: &str, first_new_id: i32) -> VersionWriters {
        let stop = Arc::new(AtomicBool::new(false));
        let update = format!("UPDATE {table} SET v = v + 1 WHERE id = $1 RETURNING v");
        let task = tokio::spawn({
            let (db_name, insert, stop) = (db_name.to_owned(), insert.to_owned(), stop.clone());
            async move {
                let client = pg_connect(&db_name).await;
                let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(std::process::id()));
                let (mut next, mut done) = (first_new_id, Vec::new());
                while !stop.load(Ordering::SeqCst) {
                    client.batch_execute("BEGIN").await.expect("begin");
                    let mut txn = Vec::new();
                    for _ in 0..rng.random_range(1..=3) {
                        if rng.random_range(0..4) == 0 {
                            client.execute(&insert, &[&next]).await.expect("insert");
                            txn.push((next, 0));
                            next += 1;
                        } else {
                            let id = rng.random_range(1..next);
                            let row = client.query_one(&update, &[&id]).await.expect("update");
                            txn.push((id, row.get(0)));
                        }
                    }
                    client.batch_execute("COMMIT").await.expect("commit");
                    done.extend(txn);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                done
            }
        });
        VersionWriters { stop, task }
    }

    /// Stops the writer; every `(id, v)` it committed.
    pub async fn stop(self) -> Vec<(i32, i32)> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("version writer")
    }
}

/// `(id, v)` of a change event's `after`, if it has one.
pub fn version_of(c: &Consumed) -> Option<(i64, i64)> {
    let value: serde_json::Value = serde_json::from_slice(c.value.as_deref()?).ok()?;
    let after = &value["after"];
    Some((after["id"].as_i64()?, after["v"].as_i64()?))
}

/// Whether `consumed` holds every version of `committed`.
pub fn holds_versions(committed: &[(i32, i32)], consumed: &[Consumed]) -> bool {
    let have: HashSet<(i64, i64)> = consumed.iter().filter_map(version_of).collect();
    committed
        .iter()
        .all(|&(id, v)| have.contains(&(i64::from(id), i64::from(v))))
}

/// Checks a table's change events (`consumed`) against `committed`: every
/// version arrived; copies of one `walrelay.event_id` are identical; per
/// key, the first copies of a row's versions come in commit order.
/// Returns the number of duplicates.
pub fn verify_versions(committed: &[(i32, i32)], consumed: &[Consumed]) -> usize {
    assert!(
        holds_versions(committed, consumed),
        "some row versions never arrived"
    );
    let (first, duplicates) = super::first_copies(consumed);
    let mut last_v: HashMap<(Option<Vec<u8>>, i64), i64> = HashMap::new();
    for c in first {
        if let Some((row, v)) = version_of(c) {
            let prev = last_v.insert((c.key.clone(), row), v);
            assert!(
                prev.is_none_or(|p| p < v),
                "row {row}: version {v} first arrived after version {prev:?} on its key"
            );
        }
    }
    duplicates
}
