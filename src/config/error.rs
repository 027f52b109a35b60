//! Configuration errors and the map from key paths to file positions.
//!
//! Every [`Problem`] names the key path (`outbox[1].topic`) and, when the key
//! is in the file, the line and column; [`ConfigError`] adds the file name.
//! Messages never contain secret values.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// A 1-based line and column (in characters) in a configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location {
    /// Line number, starting at 1.
    pub line: usize,
    /// Column in characters, starting at 1.
    pub column: usize,
}

impl Location {
    /// The position of byte `offset` in `text`. Scans `text` once; to place
    /// many offsets in one text, build a [`LineIndex`] instead.
    pub(crate) fn at(text: &str, offset: usize) -> Location {
        LineIndex::new(text).location(offset)
    }
}

/// Bytes per block of [`LineIndex`]'s character counts.
const BLOCK: usize = 4096;

/// Line starts and character counts of a text, built in one pass, so that
/// each [`LineIndex::location`] costs a binary search plus at most one block
/// of bytes, however long the file or its lines. (Scanning from the start of
/// the file for every key made loading quadratic: 40,000 keys took 16 s.)
pub(crate) struct LineIndex<'t> {
    bytes: &'t [u8],
    /// Byte offset of the start of each line; `line_starts[0] == 0`.
    line_starts: Vec<usize>,
    /// Characters in `bytes[..k * BLOCK]`, for each `k`.
    block_chars: Vec<usize>,
}

impl<'t> LineIndex<'t> {
    pub(crate) fn new(text: &'t str) -> LineIndex<'t> {
        let bytes = text.as_bytes();
        let mut line_starts = vec![0];
        line_starts.extend(
            bytes
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        );
        let mut block_chars = Vec::with_capacity(bytes.len() / BLOCK + 1);
        let mut chars = 0;
        for block in bytes.chunks(BLOCK) {
            block_chars.push(chars);
            chars += count_chars(block);
        }
        block_chars.push(chars);
        LineIndex {
            bytes,
            line_starts,
            block_chars,
        }
    }

    /// Characters before byte `offset`.
    fn chars_before(&self, offset: usize) -> usize {
        let block = offset / BLOCK;
        let start = block * BLOCK;
        self.block_chars.get(block).copied().unwrap_or(0)
            + count_chars(self.bytes.get(start..offset).unwrap_or_default())
    }

    /// The line and column of byte `offset` (clamped to the text).
    pub(crate) fn location(&self, offset: usize) -> Location {
        let offset = offset.min(self.bytes.len());
        // `line_starts[0] == 0 <= offset`, so the count is at least 1.
        let line = self.line_starts.partition_point(|&start| start <= offset);
        let line_start = self
            .line_starts
            .get(line.wrapping_sub(1))
            .copied()
            .unwrap_or(0);
        Location {
            line,
            column: self.chars_before(offset) - self.chars_before(line_start) + 1,
        }
    }
}

/// UTF-8 characters that start in `bytes` (continuation bytes are not counted).
fn count_chars(bytes: &[u8]) -> usize {
    bytes.iter().filter(|b| (**b & 0xC0) != 0x80).count()
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// One thing wrong with a configuration: where, which key, what and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Key path such as `postgres.slot` or `outbox[1].topic`; `None` when the
    /// problem is not tied to a key (a TOML syntax error).
    pub key: Option<String>,
    /// Where in the file, when known.
    pub location: Option<Location>,
    /// What is wrong and what to do about it.
    pub message: String,
}

impl Problem {
    pub(crate) fn new(key: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem {
            key: Some(key.into()),
            location: None,
            message: message.into(),
        }
    }

    fn render(&self, origin: &str) -> String {
        let mut out = origin.to_owned();
        if let Some(location) = self.location {
            out.push_str(&format!(":{location}"));
        }
        out.push_str(": ");
        if let Some(key) = &self.key {
            out.push_str(&shorten(key, MAX_KEY_CHARS));
            out.push_str(": ");
        }
        // Messages quote values through `quoted`; this is the last line of
        // defence for text from elsewhere (TOML, serde).
        out.push_str(&shorten(&self.message, MAX_MESSAGE_CHARS));
        out
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read the configuration file: {source}", path.display())]
    Read {
        /// The file we tried to read.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than any configuration should be.
    #[error(
        "{}: the file is larger than {} MiB, so it is not read; a walrelay configuration is a \
         few kilobytes: check that --config names the right file",
        path.display(),
        limit >> 20
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },
    /// The file was read but is not a valid configuration.
    #[error("{}", render_problems(origin, problems))]
    Invalid {
        /// File name (or other origin) the text came from.
        origin: String,
        /// Everything found wrong, in file order; never empty.
        problems: Vec<Problem>,
    },
}

impl ConfigError {
    /// The individual problems (empty when the file was not read).
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Read { .. } | ConfigError::TooLarge { .. } => &[],
            ConfigError::Invalid { problems, .. } => problems,
        }
    }
}

/// At most this many problems are listed; the rest are counted.
const MAX_LISTED_PROBLEMS: usize = 50;

fn render_problems(origin: &str, problems: &[Problem]) -> String {
    match problems {
        [one] => one.render(origin),
        many => {
            let mut out = format!("{origin}: {} configuration problems:", many.len());
            for problem in many.iter().take(MAX_LISTED_PROBLEMS) {
                out.push_str("\n  ");
                out.push_str(&problem.render(origin));
            }
            if let Some(more) = many
                .len()
                .checked_sub(MAX_LISTED_PROBLEMS)
                .filter(|n| *n > 0)
            {
                out.push_str(&format!(
                    "\n  … and {more} more; fix these first, then check again"
                ));
            }
            out
        }
    }
}

/// Characters of a value quoted in a message; longer values are cut.
pub(crate) const MAX_VALUE_CHARS: usize = 64;
/// Characters of a key path in a message.
const MAX_KEY_CHARS: usize = 200;
/// Characters of one problem's message.
const MAX_MESSAGE_CHARS: usize = 2000;

/// `text` cut to its first `max` characters, marked with "… (N bytes)" when
/// cut, so that a huge value in a file does not flood the terminal or the log.
pub fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}… ({} bytes)", &text[..end], text.len()),
    }
}

/// A value quoted for a message (`"abc"`, escapes as in Rust), cut to its
/// first `MAX_VALUE_CHARS` characters with "… (N bytes)" when longer.
/// Use it for every value a message repeats (never for a secret).
pub fn quoted(value: &str) -> String {
    match value.char_indices().nth(MAX_VALUE_CHARS) {
        None => format!("{value:?}"),
        Some((end, _)) => format!("{:?}… ({} bytes)", &value[..end], value.len()),
    }
}

/// Cuts long `…`- and "…"-quoted spans in a message written by serde or
/// toml (`unknown variant `…``, `invalid type: string "…"`), keeping the
/// rest (the expected values, the hint) intact.
pub(crate) fn shorten_quoted_spans(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(4 * MAX_VALUE_CHARS));
    let mut rest = message;
    while let Some(open) = rest.find(['`', '"']) {
        let quote = rest.as_bytes()[open] as char;
        out.push_str(&rest[..=open]);
        let inner = &rest[open + 1..];
        // The closing quote; in "…" spans, skip backslash escapes.
        let mut close = None;
        let mut escaped = false;
        for (i, c) in inner.char_indices() {
            if escaped {
                escaped = false;
            } else if c == '\\' && quote == '"' {
                escaped = true;
            } else if c == quote {
                close = Some(i);
                break;
            }
        }
        let span = &inner[..close.unwrap_or(inner.len())];
        match span.char_indices().nth(MAX_VALUE_CHARS) {
            None => out.push_str(span),
            Some((end, _)) => out.push_str(&span[..end]),
        }
        let cut = span.chars().nth(MAX_VALUE_CHARS).is_some();
        match close {
            Some(i) => {
                if cut {
                    out.push('…');
                }
                out.push(quote);
                if cut {
                    out.push_str(&format!(" ({} bytes)", span.len()));
                }
                rest = &inner[i + 1..];
            }
            None => {
                if cut {
                    out.push_str(&format!("… ({} bytes)", span.len()));
                }
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Formats one key of a key path: bare when TOML allows it, quoted otherwise
/// (`kafka.librdkafka."batch.num.messages"`).
pub(crate) fn key_segment(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}

/// Joins a parent path and a key.
pub(crate) fn join_key(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key_segment(key)
    } else {
        format!("{parent}.{}", key_segment(key))
    }
}

/// Key paths of a parsed document with their spans, used to turn the byte
/// span of a deserialization error into a key path and a line:column.
/// (No `Debug`: it holds the file text, which may contain a literal password.)
pub(crate) struct SourceMap<'t> {
    text: &'t str,
    root: Range<usize>,
    entries: Vec<Entry>,
}

struct Entry {
    path: String,
    key: Option<Range<usize>>,
    value: Range<usize>,
}

impl<'t> SourceMap<'t> {
    pub(crate) fn new(text: &'t str, root: &Spanned<DeTable<'_>>) -> SourceMap<'t> {
        let mut entries = Vec::new();
        walk_table(root.get_ref(), "", &mut entries);
        SourceMap {
            text,
            root: root.span(),
            entries,
        }
    }

    /// The key path of the table spanning exactly `span` ("" for the document).
    fn table_at(&self, span: &Range<usize>) -> Option<&str> {
        if *span == self.root {
            return Some("");
        }
        self.entries
            .iter()
            .filter(|e| e.value == *span)
            .max_by_key(|e| e.path.len())
            .map(|e| e.path.as_str())
    }

    /// The innermost key path whose key or value span contains `offset`.
    fn path_at(&self, offset: usize) -> Option<&str> {
        let contains = |r: &Range<usize>| r.start <= offset && offset < r.end.max(r.start + 1);
        self.entries
            .iter()
            .filter_map(|e| {
                [e.key.as_ref(), Some(&e.value)]
                    .into_iter()
                    .flatten()
                    .filter(|r| contains(r))
                    .map(|r| r.len())
                    .min()
                    .map(|len| (len, e))
            })
            .min_by_key(|(len, e)| (*len, std::cmp::Reverse(e.path.len())))
            .map(|(_, e)| e.path.as_str())
    }

    /// Turns a deserialization error into a problem with key path and position.
    pub(crate) fn problem(&self, error: &toml::de::Error) -> Problem {
        let offset = error.span().map(|s| s.start);
        let location = offset.map(|o| Location::at(self.text, o));
        let key = offset.and_then(|o| self.path_at(o)).map(str::to_owned);
        let message = error.message().trim_end();
        if let Some(field) = missing_field(message) {
            // The span is that of the table missing the field.
            let parent = error
                .span()
                .and_then(|span| self.table_at(&span))
                .map(str::to_owned)
                .or(key)
                .unwrap_or_default();
            return Problem {
                key: Some(join_key(&parent, field)),
                location,
                message: "this required key is missing; add it".to_owned(),
            };
        }
        if let Some(unknown) = unknown_key(message, key.as_deref()) {
            return Problem {
                key,
                location,
                message: unknown,
            };
        }
        let message = shorten_quoted_spans(message);
        let message = if message.starts_with("unknown field") {
            format!("{message}; remove the key or correct its spelling")
        } else if message.starts_with("invalid type: map, expected a sequence") {
            let section = key.as_deref().unwrap_or("outbox");
            format!(
                "{message}; write the section header with double brackets, [[{section}]], \
                 one such section per entry (for outbox tables: one [[outbox]] per table)"
            )
        } else {
            plain_types(&message)
        };
        Problem {
            key,
            location,
            message,
        }
    }

    /// Line and column of every key path's value, kept for later validation messages.
    pub(crate) fn locations(&self) -> BTreeMap<String, Location> {
        let index = LineIndex::new(self.text);
        self.entries
            .iter()
            .map(|e| (e.path.clone(), index.location(e.value.start)))
            .collect()
    }
}

/// serde's "unknown field `tabel`, expected one of `table`, …" for the key
/// at `path`, said as an operator reads it: "unknown key `tabel` in
/// [[outbox]]; did you mean `table`?" — the nearest known key when one is
/// close ([`nearest`]), else the list of the keys that section takes.
fn unknown_key(message: &str, path: Option<&str>) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (name, expected) = rest.split_once('`')?;
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let section = match path.and_then(|p| p.rfind('.').map(|cut| &p[..cut])) {
        None => "at the top level of the file".to_owned(),
        Some(parent) => {
            // `outbox[0]` → [[outbox]]; `table[0].column_mask[1]` →
            // [[table.column_mask]]; `kafka` → [kafka].
            let mut bare = String::with_capacity(parent.len());
            let mut depth = 0usize;
            for c in parent.chars() {
                match c {
                    '[' => depth += 1,
                    ']' => depth = depth.saturating_sub(1),
                    _ if depth == 0 => bare.push(c),
                    _ => {}
                }
            }
            if parent.ends_with(']') {
                format!("in [[{bare}]]")
            } else {
                format!("in [{bare}]")
            }
        }
    };
    let name_shown = shorten(name, MAX_VALUE_CHARS);
    Some(match nearest(name, &known) {
        Some(close) => format!("unknown key `{name_shown}` {section}; did you mean `{close}`?"),
        None if known.is_empty() => {
            format!("unknown key `{name_shown}` {section}, which takes no keys; remove it")
        }
        None => format!(
            "unknown key `{name_shown}` {section}; remove it or correct its spelling (the keys \
             there: {})",
            known
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// The known key nearest to `name`, when it is close enough to be the one
/// meant: at most a third of `name`'s characters apart (at least one), by
/// edit distance with swapped neighbours as one edit (`tabel` → `table`);
/// case ignored. The first of equally near keys.
pub(crate) fn nearest<'k>(name: &str, known: &[&'k str]) -> Option<&'k str> {
    let name = name.to_lowercase();
    let limit = (name.chars().count() / 3).max(1);
    known
        .iter()
        .map(|k| (edit_distance(&name, &k.to_lowercase()), *k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Optimal-string-alignment distance: insertions, deletions, substitutions
/// and swaps of two neighbouring characters, one edit each.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // rows[i][j]: distance between a[..i] and b[..j].
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = d;
        }
    }
    rows[a.len()][b.len()]
}

/// Replaces Rust type names in serde messages with what an operator writes.
fn plain_types(message: &str) -> String {
    [
        // postgres.port is the only u16 (0 is refused by validation).
        ("expected u16", "expected a port number from 1 to 65535"),
        ("expected usize", "expected a whole number, 0 or more"),
        ("expected u64", "expected a whole number, 0 or more"),
    ]
    .iter()
    .fold(message.to_owned(), |m, (rust, plain)| {
        m.replace(rust, plain)
    })
}

fn missing_field(message: &str) -> Option<&str> {
    message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'))
}

fn walk_table(table: &DeTable<'_>, parent: &str, out: &mut Vec<Entry>) {
    for (key, value) in table.iter() {
        let path = join_key(parent, key.get_ref());
        out.push(Entry {
            path: path.clone(),
            key: Some(key.span()),
            value: value.span(),
        });
        walk_value(value, &path, out);
    }
}

fn walk_value(value: &Spanned<DeValue<'_>>, path: &str, out: &mut Vec<Entry>) {
    match value.get_ref() {
        DeValue::Table(table) => walk_table(table, path, out),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let path = format!("{path}[{i}]");
                out.push(Entry {
                    path: path.clone(),
                    key: None,
                    value: item.span(),
                });
                walk_value(item, &path, out);
            }
        }
        _ => {}
    }
}

/// Where a loaded [`Config`](super::Config) came from, for validation messages.
#[derive(Debug, Clone, Default)]
pub(crate) struct Origin {
    pub(crate) name: String,
    pub(crate) locations: BTreeMap<String, Location>,
}

impl Origin {
    /// Location of `path`, or of its nearest enclosing key that is in the file.
    pub(crate) fn location_of(&self, path: &str) -> Option<Location> {
        let mut path = path;
        loop {
            if let Some(location) = self.locations.get(path) {
                return Some(*location);
            }
            let cut = path.rfind(['.', '['])?;
            path = &path[..cut];
        }
    }

    /// `problems` placed at the line and column of their keys, in file order.
    fn place(&self, mut problems: Vec<Problem>) -> Vec<Problem> {
        for problem in &mut problems {
            if problem.location.is_none() {
                problem.location = problem.key.as_deref().and_then(|k| self.location_of(k));
            }
        }
        problems.sort_by_key(|p| p.location);
        problems
    }

    /// `problems` placed and rendered one per line, as in an error: for
    /// warnings.
    pub(crate) fn render(&self, problems: Vec<Problem>) -> Vec<String> {
        self.place(problems)
            .iter()
            .map(|p| p.render(&self.name))
            .collect()
    }

    pub(crate) fn error(&self, problems: Vec<Problem>) -> ConfigError {
        ConfigError::Invalid {
            origin: self.name.clone(),
            problems: self.place(problems),
        }
    }
}
