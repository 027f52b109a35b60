//! Naming the key of a TOML "duplicate key" error.
//!
//! The TOML parser reports a key or section given twice as "duplicate key"
//! at the second one, without its name or where the first one is (it knows,
//! but its public error keeps neither). Both are found again here from the
//! text: the key path in walrelay's spelling (`postgres.port`,
//! `outbox[1].table`, `kafka.librdkafka."linger.ms"`) and the line of the
//! first definition. Only the error message depends on this reading of the
//! text; when it cannot tell (a dotted key that clashes with a table, a
//! header inside a multi-line string), the message says less, never
//! something false about the value: no value is ever repeated.

use super::error::{Location, Problem};

/// One meaningful line of a TOML file, as far as this module cares.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Line<'t> {
    /// `[name]` or `[[name]]` (`array`), `name` trimmed.
    Header { name: &'t str, array: bool },
    /// `key = …`, `key` as written (quotes and dots kept), trimmed.
    Key(&'t str),
    /// Anything else: blank, a comment, a continued value.
    Other,
}

fn classify(line: &str) -> Line<'_> {
    let line = line.trim();
    if let Some(rest) = line.strip_prefix("[[") {
        if let Some(end) = rest.find("]]") {
            return Line::Header {
                name: rest[..end].trim(),
                array: true,
            };
        }
    } else if let Some(rest) = line.strip_prefix('[') {
        if let Some(end) = rest.find(']') {
            return Line::Header {
                name: rest[..end].trim(),
                array: false,
            };
        }
    } else if !line.starts_with('#')
        && let Some((key, _)) = line.split_once('=')
    {
        let key = key.trim();
        if !key.is_empty() {
            return Line::Key(key);
        }
    }
    Line::Other
}

/// The problem for a "duplicate key" error at byte `at` of `text`.
pub(crate) fn duplicate_key(text: &str, at: usize) -> Problem {
    let location = Location::at(text, at);
    let lines: Vec<Line<'_>> = text.lines().map(classify).collect();
    let here = location.line - 1;
    let (key, message) = match lines.get(here) {
        Some(header @ Line::Header { name, array }) => {
            let written = |array: bool| {
                if array {
                    format!("[[{name}]]")
                } else {
                    format!("[{name}]")
                }
            };
            let first = lines[..here]
                .iter()
                .position(|l| matches!(l, Line::Header { name: n, .. } if n == name));
            let message = match first {
                Some(i) if &lines[i] == header => format!(
                    "{} appears twice (first on line {}); write its keys in one section",
                    written(*array),
                    i + 1
                ),
                Some(i) => format!(
                    "{} here and {} on line {} define {name} twice, as a section and as an array \
                     of sections; use one of the two",
                    written(*array),
                    written(!array),
                    i + 1
                ),
                None => format!(
                    "{} defines {name} again (a dotted key or a section before defines it); \
                     define it once",
                    written(*array)
                ),
            };
            (name.to_string(), message)
        }
        Some(Line::Key(written)) => {
            let header = lines[..here]
                .iter()
                .rposition(|l| matches!(l, Line::Header { .. }));
            let section = header.map_or_else(String::new, |h| section_path(&lines, h));
            let path = if section.is_empty() {
                written.to_string()
            } else {
                format!("{section}.{written}")
            };
            let from = header.map_or(0, |h| h + 1);
            let first = lines[from..here]
                .iter()
                .position(|l| l == &Line::Key(written))
                .map(|i| from + i + 1);
            let message = match first {
                Some(line) => format!("is set twice (first on line {line}); keep one of the two"),
                None => "is set twice, or clashes with a section of the same name; set it once"
                    .to_owned(),
            };
            (path, message)
        }
        _ => (
            String::new(),
            "a key or section is given twice; give it once".to_owned(),
        ),
    };
    Problem {
        key: (!key.is_empty()).then_some(key),
        location: Some(location),
        message,
    }
}

/// The key path of the section opened by the header at `lines[at]`:
/// `postgres`, `outbox[1]`, `table[0].column_mask[2]`.
fn section_path(lines: &[Line<'_>], at: usize) -> String {
    let Line::Header { name, array } = lines[at] else {
        return String::new();
    };
    let (parent, last) = name.rsplit_once('.').unwrap_or(("", name));
    let (parent, last) = (parent.trim(), last.trim());
    // The element of the parent the section belongs to: the last header of
    // the parent before it.
    let parent_at = lines[..at]
        .iter()
        .rposition(|l| matches!(l, Line::Header { name: n, .. } if *n == parent));
    let mut path = match parent_at {
        Some(p) => section_path(lines, p),
        None => parent.to_owned(),
    };
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(last);
    if array {
        let from = parent_at.map_or(0, |p| p + 1);
        let index = lines[from..at]
            .iter()
            .filter(|l| **l == Line::Header { name, array: true })
            .count();
        path.push_str(&format!("[{index}]"));
    }
    path
}
