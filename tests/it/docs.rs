//! Statements of the documentation checked against the source (no services
//! needed). The configuration reference has its own checks in the config
//! module's tests.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The text of every non-test Rust file under src/ (test modules in files
/// of their own are left out; `#[cfg(test)]` blocks inside a file are not).
fn sources() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![root().join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "tests" {
                    dirs.push(path);
                }
            } else if name.ends_with(".rs") && !name.ends_with("tests.rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, text));
            }
        }
    }
    out
}

/// The backquoted words of `text`.
fn quoted(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Issue 24 (item 16): docs/security.md said walrelay does not read
/// `pg_stat_replication_slots`, which the slot gauges read every 5 s. What
/// the least-privilege section says walrelay does not use is not in the
/// code, and every statistics view the code reads is named there.
#[test]
fn security_md_names_the_statistics_views_walrelay_reads_and_no_other() {
    let security = std::fs::read_to_string(root().join("docs/security.md")).unwrap();
    let start = security
        .find("Everything else walrelay reads is open to every role")
        .expect("the paragraph on what walrelay reads");
    let paragraph = &security[start..];
    let paragraph = &paragraph[..paragraph.find("\n\n").unwrap_or(paragraph.len())];
    let sources = sources();

    if let Some(at) = paragraph.find("It does not call") {
        let sentence = &paragraph[at..];
        let sentence = &sentence[..sentence.find('.').unwrap_or(sentence.len())];
        for name in quoted(sentence) {
            for (path, text) in &sources {
                assert!(
                    !text.contains(name),
                    "docs/security.md says walrelay does not use {name}, but {} does",
                    path.display()
                );
            }
        }
    }

    let mut read = std::collections::BTreeSet::new();
    for (_, text) in &sources {
        let mut rest = text.as_str();
        while let Some(at) = rest.find("pg_stat_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            read.insert(name);
            rest = &rest[at + 1..];
        }
    }
    assert!(read.contains("pg_stat_replication_slots"), "{read:?}");
    let named = quoted(paragraph);
    let missing: Vec<_> = read
        .iter()
        .filter(|v| !named.iter().any(|n| n.starts_with(v.as_str())))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/security.md's paragraph on what walrelay reads lacks {missing:?}"
    );
}
