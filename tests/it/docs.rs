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

/// The GitHub anchor of a Markdown heading's text.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// `(## heading, lines of its section)` of a Markdown text, fenced code
/// blocks skipped.
fn sections(text: &str) -> Vec<(String, Vec<&str>)> {
    let mut out: Vec<(String, Vec<&str>)> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && let Some(h) = line.strip_prefix("## ") {
            out.push((h.to_owned(), Vec::new()));
        } else if let Some((_, lines)) = out.last_mut() {
            lines.push(line);
        }
    }
    out
}

/// Issue 40: operations.md opens with a contents list naming every section
/// in order, and every `(#anchor)` on the page leads to a heading.
#[test]
fn operations_md_lists_its_sections_and_its_links_resolve() {
    let text = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let headings: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("## ") || l.starts_with("### "))
        .map(|l| anchor(l.trim_start_matches('#').trim()))
        .collect();
    let first = text.find("\n## ").unwrap();
    let contents = &text[..first];
    let listed: Vec<String> = contents
        .lines()
        .filter(|l| l.starts_with("- ["))
        .filter_map(|l| l.split("](#").nth(1)?.split(')').next().map(str::to_owned))
        .collect();
    let sections: Vec<String> = sections(&text).iter().map(|(h, _)| anchor(h)).collect();
    assert_eq!(listed, sections, "the contents list, in order");
    for link in text.split("](#").skip(1) {
        let target = link.split(')').next().unwrap();
        assert!(
            headings.iter().any(|h| h == target),
            "#{target} names no heading of operations.md"
        );
    }
}

/// Issue 40: operations.md's "error message → section" index quotes
/// messages walrelay writes: each quoted part is in the source (string
/// continuations joined), so a reworded message cannot leave the index
/// pointing nowhere.
#[test]
fn operations_md_error_index_quotes_real_messages() {
    let text = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let start = text.find("**Error message → section.**").unwrap();
    let index = &text[start..text[start..].find("\n## ").unwrap() + start];
    let joined: Vec<String> = sources()
        .into_iter()
        .map(|(_, t)| {
            // `\` at a line's end in a string literal joins the next line
            // without its leading blanks.
            let mut out = String::with_capacity(t.len());
            let mut rest = t.as_str();
            while let Some(at) = rest.find("\\\n") {
                out.push_str(&rest[..at]);
                rest = rest[at + 2..].trim_start();
            }
            out.push_str(rest);
            out
        })
        .collect();
    let mut rows = 0;
    for row in index.lines().filter(|l| l.starts_with("| `")) {
        let cell = row.split(" | ").next().unwrap();
        let message = quoted(cell)[0];
        assert!(
            joined.iter().any(|t| t.contains(message)),
            "operations.md's index quotes {message:?}, which no message in src/ holds"
        );
        rows += 1;
    }
    assert!(rows >= 30, "{rows} rows");
}

/// Issue 40: every long section of operations.md (over 60 lines) opens
/// with an *In short* of at most five lines.
#[test]
fn long_operations_sections_open_with_a_short_summary() {
    let text = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    for (heading, lines) in sections(&text) {
        if lines.len() <= 60 {
            continue;
        }
        let body: Vec<&str> = lines
            .iter()
            .copied()
            .skip_while(|l| l.trim().is_empty())
            .take_while(|l| !l.trim().is_empty())
            .collect();
        assert!(
            body.first().is_some_and(|l| l.starts_with("*In short:*")) && body.len() <= 5,
            "{heading}: {} lines, opens with {body:?}",
            lines.len()
        );
    }
}
