//! Names in an `[[outbox]]` section: the qualified table name and the topic
//! template (`outbox.event.{aggregatetype}`).
//!
//! Both are parsed when the file is read, so a malformed value is reported
//! with its line and column; which columns a template may use is checked by
//! validation, which knows the section's column settings.

use std::fmt;

use serde::{Deserialize, Deserializer};

use super::error::{Problem, quoted};

/// The longest identifier PostgreSQL keeps (NAMEDATALEN - 1 bytes); longer
/// names are silently truncated by the server, so we refuse them.
pub const MAX_IDENTIFIER_BYTES: usize = 63;

/// The longest Kafka topic name.
pub const MAX_TOPIC_LEN: usize = 249;

/// A table as `schema.name`, written the way the catalog stores it
/// (case-sensitive, no quotes).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableRef {
    /// Schema name; `public` when the configuration gives only a table name.
    pub schema: String,
    /// Table name.
    pub name: String,
}

impl TableRef {
    /// Parses `schema.table` or `table` (schema `public`).
    pub fn parse(text: &str) -> Result<TableRef, String> {
        let fail = |why: String| {
            format!(
                "invalid table {}: {why}; write schema.table or table (schema public), \
                 unquoted and exactly as stored in the catalog, e.g. \"public.outbox\"",
                quoted(text)
            )
        };
        let (schema, name) = match text.split_once('.') {
            Some((schema, name)) => (schema, name),
            None => ("public", text),
        };
        for part in [schema, name] {
            if part.is_empty() {
                return Err(fail("a name part is empty".to_owned()));
            }
            if part.contains('.') {
                return Err(fail("it has more than one '.'".to_owned()));
            }
            if part.contains('"') {
                return Err(fail(
                    "quotes are not needed (names are matched exactly)".to_owned(),
                ));
            }
            if part.len() > MAX_IDENTIFIER_BYTES {
                return Err(fail(format!(
                    "{} is longer than {MAX_IDENTIFIER_BYTES} bytes",
                    quoted(part)
                )));
            }
        }
        Ok(TableRef {
            schema: schema.to_owned(),
            name: name.to_owned(),
        })
    }
}

impl fmt::Display for TableRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}

impl<'de> Deserialize<'de> for TableRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        TableRef::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// One piece of a [`TopicTemplate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// Text copied into the topic name as is.
    Literal(String),
    /// `{column}`: replaced by the row's value of that column.
    Column(String),
}

/// A Kafka topic name with `{column}` placeholders, e.g. `outbox.event.{aggregatetype}`.
///
/// Literal text may only use the characters Kafka allows in topic names
/// (ASCII letters, digits, `.`, `_`, `-`); there is no escape for braces
/// because topic names cannot contain them.
#[derive(Clone, PartialEq, Eq)]
pub struct TopicTemplate {
    text: String,
    segments: Vec<Segment>,
}

impl TopicTemplate {
    /// The default topic template for outbox tables.
    pub const DEFAULT: &'static str = "outbox.event.{aggregatetype}";

    pub(crate) fn default_template() -> TopicTemplate {
        TopicTemplate {
            text: Self::DEFAULT.to_owned(),
            segments: vec![
                Segment::Literal("outbox.event.".to_owned()),
                Segment::Column("aggregatetype".to_owned()),
            ],
        }
    }

    /// The default topic template for `[[table]]` entries (Debezium's naming).
    pub const TABLE_DEFAULT: &'static str = "{prefix}.{schema}.{table}";

    pub(crate) fn table_default() -> TopicTemplate {
        TopicTemplate {
            text: Self::TABLE_DEFAULT.to_owned(),
            segments: vec![
                Segment::Column("prefix".to_owned()),
                Segment::Literal(".".to_owned()),
                Segment::Column("schema".to_owned()),
                Segment::Literal(".".to_owned()),
                Segment::Column("table".to_owned()),
            ],
        }
    }

    /// Parses a template; the error says where and what is wrong.
    pub fn parse(text: &str) -> Result<TopicTemplate, String> {
        let fail = |why: String| format!("invalid topic template {}: {why}", quoted(text));
        if text.is_empty() {
            return Err(fail(format!(
                "it is empty; set a topic such as \"{}\"",
                Self::DEFAULT
            )));
        }
        let mut segments = Vec::new();
        let mut literal = String::new();
        let mut open: Option<(usize, String)> = None;
        for (i, c) in text.chars().enumerate() {
            let pos = i + 1;
            match (&mut open, c) {
                (None, '{') => {
                    if !literal.is_empty() {
                        segments.push(Segment::Literal(std::mem::take(&mut literal)));
                    }
                    open = Some((pos, String::new()));
                }
                (None, '}') => {
                    return Err(fail(format!(
                        "unbalanced braces: '}}' at character {pos} has no matching '{{'; \
                         write placeholders as {{column}}"
                    )));
                }
                (None, c) if is_topic_char(c) => literal.push(c),
                (None, c) => {
                    return Err(fail(format!(
                        "{c:?} (character {pos}) is not allowed in a Kafka topic name; \
                         use ASCII letters, digits, '.', '_' and '-'"
                    )));
                }
                (Some(_), '{') => {
                    return Err(fail(format!(
                        "unbalanced braces: '{{' at character {pos} is inside another placeholder; \
                         placeholders cannot nest"
                    )));
                }
                (Some((start, name)), '}') => {
                    if name.is_empty() {
                        return Err(fail(format!(
                            "empty placeholder {{}} at character {start}; put a column name \
                             inside the braces"
                        )));
                    }
                    segments.push(Segment::Column(std::mem::take(name)));
                    open = None;
                }
                (Some((_, name)), c) => name.push(c),
            }
        }
        if let Some((start, _)) = open {
            return Err(fail(format!(
                "unbalanced braces: '{{' at character {start} is never closed; write \
                 placeholders as {{column}}"
            )));
        }
        if !literal.is_empty() {
            segments.push(Segment::Literal(literal));
        }
        Ok(TopicTemplate {
            text: text.to_owned(),
            segments,
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Literal and placeholder pieces in order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The column names the template refers to, in order (with repeats).
    pub fn columns(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Column(c) => Some(c.as_str()),
            Segment::Literal(_) => None,
        })
    }

    /// Builds a topic name, asking `value_of` for each placeholder's value.
    /// Returns the name of the first column `value_of` has no value for.
    /// The caller checks that the result is a valid topic name.
    pub fn render<S: AsRef<str>>(
        &self,
        mut value_of: impl FnMut(&str) -> Option<S>,
    ) -> Result<String, &str> {
        let mut out = String::with_capacity(self.text.len() + 16);
        for segment in &self.segments {
            match segment {
                Segment::Literal(text) => out.push_str(text),
                Segment::Column(column) => {
                    out.push_str(value_of(column).ok_or(column.as_str())?.as_ref());
                }
            }
        }
        Ok(out)
    }
}

impl fmt::Display for TopicTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for TopicTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicTemplate({:?})", self.text)
    }
}

impl<'de> Deserialize<'de> for TopicTemplate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        TopicTemplate::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Characters Kafka accepts in topic names.
pub fn is_topic_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// Debezium's topic name sanitizing (`AbstractTopicNamingStrategy
/// .sanitizedTopicName`), for names made of catalog names: each character
/// Kafka does not allow becomes `_` — one per UTF-16 unit, as Java walks
/// the string, so a character outside the BMP becomes `__` — and a name
/// longer than 249 characters is cut to 249; `.` and `..` become `_` and
/// `__`. `None` when `name` is valid as it is.
pub fn sanitized_topic_name(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if is_topic_char(c) {
            out.push(c);
        } else {
            for _ in 0..c.len_utf16() {
                out.push('_');
            }
        }
    }
    // Only ASCII is left: bytes are characters.
    out.truncate(MAX_TOPIC_LEN);
    match out.as_str() {
        "." => out = "_".to_owned(),
        ".." => out = "__".to_owned(),
        _ => {}
    }
    (out != name).then_some(out)
}

/// Why `name` is not a valid Kafka topic name, if it is not.
pub fn topic_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("a topic name cannot be empty".to_owned());
    }
    if name == "." || name == ".." {
        return Some(format!("{} is not allowed as a topic name", quoted(name)));
    }
    if name.len() > MAX_TOPIC_LEN {
        return Some(format!(
            "a topic name is at most {MAX_TOPIC_LEN} characters (this one has {})",
            name.len()
        ));
    }
    name.chars().find(|c| !is_topic_char(*c)).map(|c| {
        format!(
            "character {c:?} is not allowed in a Kafka topic name; use ASCII letters, digits, \
             '.', '_' and '-'"
        )
    })
}

/// Checks a PostgreSQL name given at `key`: not empty, at most
/// [`MAX_IDENTIFIER_BYTES`] bytes, no NUL.
pub(super) fn identifier(key: &str, value: &str, out: &mut Vec<Problem>) {
    if value.is_empty() {
        out.push(Problem::new(key, "is empty; set a name"));
    } else if value.len() > MAX_IDENTIFIER_BYTES {
        out.push(Problem::new(
            key,
            format!(
                "{} is longer than {MAX_IDENTIFIER_BYTES} bytes, the most PostgreSQL keeps \
                 of a name; shorten it",
                quoted(value)
            ),
        ));
    } else if value.contains('\0') {
        out.push(Problem::new(key, "contains a NUL character; remove it"));
    }
}
