#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

fn config(extra: &str) -> Config {
    Config::from_str(
        &format!(
            "[connector]\nname = \"c\"\n[postgres]\ndatabase = \"app\"\n[kafka]\n\
             brokers = \"127.0.0.1:9092\"\n[[outbox]]\ntable = \"public.outbox\"\n\
             [outbox.retention]\nkeep = \"7d\"\n[[outbox]]\ntable = \"audit.outbox\"\n{extra}"
        ),
        "test.toml",
    )
    .unwrap()
}

fn usage(r: Result<Vec<usize>, PruneCommandError>) -> String {
    match r {
        Err(PruneCommandError::Usage(text)) => text,
        other => panic!("expected a usage error, got {other:?}"),
    }
}

#[test]
fn every_table_with_a_retention_or_the_one_named() {
    let c = config("");
    assert_eq!(pick(&c, None).unwrap(), vec![0]);
    assert_eq!(pick(&c, Some("public.outbox")).unwrap(), vec![0]);
    assert_eq!(pick(&c, Some("outbox")).unwrap(), vec![0]);
    let e = usage(pick(&c, Some("audit.outbox")));
    assert!(
        e.starts_with("outbox[1].retention: audit.outbox has no retention"),
        "{e}"
    );
    let e = usage(pick(&c, Some("public.nope")));
    assert!(e.contains("not an [[outbox]] table"), "{e}");
    let mut c = config("[[table]]\nname = \"public.orders\"\n");
    let e = usage(pick(&c, Some("public.orders")));
    assert!(
        e.contains("table[0] captures it") && e.contains("deletes would be published"),
        "{e}"
    );
    c.outbox[0].retention = None;
    let e = usage(pick(&c, None));
    assert!(e.starts_with("outbox[*].retention:"), "{e}");
}

#[test]
fn backoff_doubles_to_thirty_seconds() {
    assert_eq!(backoff(0), Duration::from_secs(1));
    assert_eq!(backoff(1), Duration::from_secs(2));
    assert_eq!(backoff(4), Duration::from_secs(16));
    assert_eq!(backoff(5), Duration::from_secs(30));
    assert_eq!(backoff(100), Duration::from_secs(30));
}
