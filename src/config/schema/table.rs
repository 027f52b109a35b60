//! `[[table]]` and `[table_defaults]`: tables published as Debezium change
//! events — column lists and masks, key columns, skipped operations and the
//! Debezium value modes (`*_handling_mode`, `unmapped_types`,
//! `special_values`).
//!
//! Field documentation here is the source for `docs/configuration.md`;
//! keep the two in step.

use std::fmt;

use secrecy::SecretString;
use serde::Deserialize;

use super::defaults;
use crate::config::error::quoted;
use crate::config::template::{TableRef, TopicTemplate};
use crate::config::units;

/// `table_defaults.decimal_handling_mode`: how `numeric`/`decimal` values
/// are written (Debezium's `decimal.handling.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecimalHandlingMode {
    /// Exactly: Kafka Connect's `Decimal` (base64 of the unscaled value's
    /// big-endian two's-complement bytes) for `numeric(p,s)`, and Debezium's
    /// `VariableScaleDecimal` (`{"scale":…,"value":…}`) for plain `numeric`.
    #[default]
    Precise,
    /// As the decimal text (`"12.50"`).
    String,
    /// As a JSON number (a 64-bit float: may lose digits).
    Double,
}

/// `table_defaults.time_precision_mode` (Debezium's `time.precision.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimePrecisionMode {
    /// `time(0..3)`/`timestamp(0..3)` in milliseconds, finer ones in
    /// microseconds.
    #[default]
    Adaptive,
    /// Always milliseconds (Kafka Connect's `Time`/`Timestamp`).
    Connect,
}

/// `table_defaults.binary_handling_mode` (Debezium's `binary.handling.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BinaryHandlingMode {
    /// Base64 text: what Debezium's default `bytes` writes through the JSON
    /// converter (an unchanged TOASTed value: the placeholder's bytes).
    #[default]
    Bytes,
    /// Base64 text, as Debezium's `base64` mode writes it (an unchanged
    /// TOASTed value: `null`).
    Base64,
    /// Lower-case hexadecimal.
    Hex,
}

/// `table_defaults.interval_handling_mode` (Debezium's `interval.handling.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IntervalHandlingMode {
    /// Microseconds, months counted as 365.25/12 days.
    #[default]
    Numeric,
    /// ISO-8601 text, `P1Y2M3DT4H5M6.5S`.
    String,
}

/// `table_defaults.unmapped_types`: what becomes of a column whose type the
/// table events do not map to a Debezium representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnmappedTypes {
    /// Refuse the table at `check` and at start (mid-stream: stop), naming
    /// table, column and type.
    #[default]
    Fail,
    /// Write the value's PostgreSQL text form as a JSON string.
    Text,
}

/// `table_defaults.format`: how a change event's key and value are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableFormat {
    /// Debezium's JSON (Connect's `JsonConverter`, `schemas.enable=false`).
    #[default]
    Json,
    /// Avro in the Confluent wire format, schemas from
    /// `[kafka.schema_registry]` (Debezium's under Confluent's
    /// `AvroConverter`).
    Avro,
    /// JSON under a JSON Schema in the Confluent wire format (Debezium's
    /// under Confluent's `JsonSchemaConverter`).
    JsonSchema,
    /// Protobuf (proto3) in the Confluent wire format (Debezium's schemas
    /// as Confluent's `ProtobufConverter` maps Connect schemas).
    Protobuf,
}

impl TableFormat {
    /// The name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            TableFormat::Json => "json",
            TableFormat::Avro => "avro",
            TableFormat::JsonSchema => "json_schema",
            TableFormat::Protobuf => "protobuf",
        }
    }

    /// Whether records take schema ids from a registry.
    pub fn uses_registry(self) -> bool {
        self != TableFormat::Json
    }
}

/// `table_defaults.special_values`: what becomes of a valid value that has
/// no exact Debezium form — an `infinity` date or timestamp, a timestamp or
/// interval past what Debezium's numbers hold, an array with bounds other
/// than 1 or of several dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpecialValues {
    /// Write what Debezium 3.6.1 writes for it, or walrelay's documented
    /// form where Debezium's loses it (docs/compatibility.md).
    #[default]
    Write,
    /// Stop the connector, naming table, column and LSN.
    Fail,
}

/// `[table_defaults]`: settings shared by every `[[table]]` entry, named after
/// the Debezium connector options they mirror (`topic.prefix` →
/// `topic_prefix`, `decimal.handling.mode` → `decimal_handling_mode`, …).
/// Each `[[table]]` entry may override all but `topic_prefix`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableDefaults {
    /// Debezium's `topic.prefix`: the first part of the default topic
    /// (`{prefix}.{schema}.{table}`) and `source.name` in every value.
    /// Unset: the `[connector]` name.
    #[serde(default)]
    pub topic_prefix: Option<String>,
    /// Debezium's `tombstones.on.delete`: follow each delete by a record
    /// with the same key and a null value.
    #[serde(default = "defaults::yes")]
    pub tombstones_on_delete: bool,
    /// Debezium's `decimal.handling.mode`.
    #[serde(default)]
    pub decimal_handling_mode: DecimalHandlingMode,
    /// Debezium's `time.precision.mode` (`adaptive` or `connect`).
    #[serde(default)]
    pub time_precision_mode: TimePrecisionMode,
    /// Debezium's `binary.handling.mode` (`base64` or `hex`).
    #[serde(default)]
    pub binary_handling_mode: BinaryHandlingMode,
    /// Debezium's `interval.handling.mode` (`numeric` or `string`).
    #[serde(default)]
    pub interval_handling_mode: IntervalHandlingMode,
    /// Debezium's `unavailable.value.placeholder`: the value written for a
    /// TOASTed column an update left unchanged (PostgreSQL does not send it).
    #[serde(default = "defaults::unavailable_value_placeholder")]
    pub unavailable_value_placeholder: String,
    /// Debezium's `skipped.operations`: the streamed operations that make
    /// no record (`"t"` truncates by default; `"none"` skips nothing).
    #[serde(default)]
    pub skipped_operations: SkippedOperations,
    /// Debezium's `column.include.list`, for every `[[table]]` without
    /// column lists of its own: regular expressions matched against each
    /// column's `schema.table.column`, whole and ignoring case; only
    /// matching columns are in `before`/`after`. Not with
    /// `column_exclude_list`.
    #[serde(default)]
    pub column_include_list: Vec<String>,
    /// Debezium's `column.exclude.list`, likewise: matching columns are left
    /// out of `before`/`after`.
    #[serde(default)]
    pub column_exclude_list: Vec<String>,
    /// A column of a type not mapped to a Debezium representation: refused
    /// (`fail`, the default) or written as its text form (`text`).
    #[serde(default)]
    pub unmapped_types: UnmappedTypes,
    /// A valid value without an exact Debezium form: written as Debezium
    /// writes it (`write`, the default) or stopping the connector (`fail`).
    #[serde(default)]
    pub special_values: SpecialValues,
    /// Debezium's `provide.transaction.metadata`: BEGIN and END records on
    /// `<topic_prefix>.transaction` for every transaction with a table
    /// event, and the `transaction` block of streamed events filled in.
    /// The records are written in `format` (Debezium's transaction metadata
    /// schemas for `avro`/`json_schema`); every `[[table]]` must then have
    /// that format.
    #[serde(default)]
    pub provide_transaction_metadata: bool,
    /// How keys and values are written: `json` (Debezium's JSON, the
    /// default), `avro` or `json_schema` (Confluent's wire format with
    /// schema ids from `[kafka.schema_registry]`).
    #[serde(default)]
    pub format: TableFormat,
}

impl TableDefaults {
    /// The default column lists, compiled (`None` when neither is set);
    /// `Err((key, reason))` names the first expression that does not
    /// compile.
    pub fn column_filter(&self) -> Result<Option<ColumnFilter>, (String, String)> {
        let (list, include) = match (
            self.column_include_list.is_empty(),
            self.column_exclude_list.is_empty(),
        ) {
            (true, true) => return Ok(None),
            (false, _) => ("column_include_list", true),
            (true, false) => ("column_exclude_list", false),
        };
        let patterns = if include {
            &self.column_include_list
        } else {
            &self.column_exclude_list
        };
        // Anchored, as Java's Matcher.matches(): the whole name.
        let anchored = |p: &String| format!("^(?:{p})$");
        for (j, p) in patterns.iter().enumerate() {
            if let Err(e) = regex::RegexBuilder::new(&anchored(p))
                .case_insensitive(true)
                .build()
            {
                // The parser's last line says what is wrong ("error: …").
                let text = e.to_string();
                let reason = text.lines().last().unwrap_or_default();
                let reason = reason.strip_prefix("error: ").unwrap_or(reason);
                return Err((format!("table_defaults.{list}[{j}]"), reason.to_owned()));
            }
        }
        regex::RegexSetBuilder::new(patterns.iter().map(anchored))
            .case_insensitive(true)
            .build()
            .map(|set| Some(ColumnFilter { include, set }))
            .map_err(|e| (format!("table_defaults.{list}"), e.to_string()))
    }
}

/// `table_defaults.column_include_list` or `column_exclude_list`, compiled.
#[derive(Debug, Clone)]
pub struct ColumnFilter {
    include: bool,
    set: regex::RegexSet,
}

impl ColumnFilter {
    /// Whether column `column` of `schema.table` is in `before`/`after`.
    pub fn includes(&self, schema: &str, table: &str, column: &str) -> bool {
        self.set.is_match(&format!("{schema}.{table}.{column}")) == self.include
    }
}

impl Default for TableDefaults {
    fn default() -> Self {
        TableDefaults {
            topic_prefix: None,
            tombstones_on_delete: true,
            decimal_handling_mode: DecimalHandlingMode::default(),
            time_precision_mode: TimePrecisionMode::default(),
            binary_handling_mode: BinaryHandlingMode::default(),
            interval_handling_mode: IntervalHandlingMode::default(),
            unavailable_value_placeholder: defaults::unavailable_value_placeholder(),
            skipped_operations: SkippedOperations::default(),
            column_include_list: Vec::new(),
            column_exclude_list: Vec::new(),
            unmapped_types: UnmappedTypes::default(),
            special_values: SpecialValues::default(),
            provide_transaction_metadata: false,
            format: TableFormat::default(),
        }
    }
}

/// `skipped_operations`: Debezium's `skipped.operations`, written as Debezium
/// writes it: a comma-separated list of `c` (inserts), `u` (updates), `d`
/// (deletes, with their tombstones) and `t` (truncates), or `none`. Only
/// streamed changes are skipped, never snapshot rows (`r`).
#[derive(Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct SkippedOperations {
    /// One bit per operation letter, in the order `c`, `u`, `d`, `t`.
    bits: u8,
}

impl SkippedOperations {
    /// The operation letters, in bit order.
    const LETTERS: [u8; 4] = [b'c', b'u', b'd', b't'];

    /// Nothing skipped (Debezium's `none`).
    pub const NONE: SkippedOperations = SkippedOperations { bits: 0 };

    /// Whether records of operation `op` (`b'c'`, `b'u'`, `b'd'`, `b't'`)
    /// are skipped.
    pub fn skips(self, op: u8) -> bool {
        Self::LETTERS
            .iter()
            .position(|&l| l == op)
            .is_some_and(|i| self.bits & (1 << i) != 0)
    }
}

/// Debezium's default, `t`: truncates are skipped.
impl Default for SkippedOperations {
    fn default() -> Self {
        SkippedOperations { bits: 1 << 3 }
    }
}

impl TryFrom<String> for SkippedOperations {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        if text.trim().eq_ignore_ascii_case("none") {
            return Ok(SkippedOperations::NONE);
        }
        let mut bits = 0;
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let i = match part.as_bytes() {
                [letter] => Self::LETTERS.iter().position(|l| l == letter),
                _ => None,
            };
            let Some(i) = i else {
                return Err(format!(
                    "{} is not an operation: skipped_operations lists c (inserts), u \
                     (updates), d (deletes), t (truncates), separated by commas, or is \"none\"",
                    quoted(part)
                ));
            };
            bits |= 1 << i;
        }
        Ok(SkippedOperations { bits })
    }
}

impl fmt::Debug for SkippedOperations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.bits == 0 {
            return f.write_str("none");
        }
        let letters: Vec<String> = Self::LETTERS
            .iter()
            .enumerate()
            .filter(|(i, _)| self.bits & (1 << i) != 0)
            .map(|(_, &l)| char::from(l).to_string())
            .collect();
        f.write_str(&letters.join(","))
    }
}

/// `[[table.column_mask]]`: one of Debezium's column mappers for some
/// columns of a `[[table]]`: hashing (`column.mask.hash.<algorithm>.with.salt.<salt>`,
/// `column.mask.hash.v2.…`), a fixed mask (`column.mask.with.<N>.chars`) or
/// truncation (`column.truncate.to.<N>.chars`). Exactly one of `hash`,
/// `with_chars` and `truncate_to_chars`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnMask {
    /// The columns (names as in the table). Required.
    pub columns: Vec<String>,
    /// A hash algorithm as Java names it (`SHA-256`, `SHA-512`, `MD5`, …):
    /// the value becomes the hex digest of salt + value.
    #[serde(default)]
    pub hash: Option<String>,
    /// The salt of `hash` (a secret: `${ENV}` or `${file:...}`).
    #[serde(default, deserialize_with = "units::secret")]
    pub salt: Option<SecretString>,
    /// How the value is turned into bytes before hashing: 1 (Debezium's
    /// `column.mask.hash.…`, the Java serialization of the string) or 2
    /// (`column.mask.hash.v2.…`, the string's UTF-8 bytes). Default 1.
    #[serde(default)]
    pub hash_version: Option<u8>,
    /// Replace every value (NULL too, as Debezium does) by this many `*`.
    #[serde(default)]
    pub with_chars: Option<u32>,
    /// Cut values longer than this many characters.
    #[serde(default)]
    pub truncate_to_chars: Option<u32>,
}

/// The `column_mask.hash` algorithms, as Java's `MessageDigest` names them
/// (matched without regard to case, as Java does).
pub const HASH_ALGORITHMS: [&str; 10] = [
    "MD5", "SHA-1", "SHA-224", "SHA-256", "SHA-384", "SHA-512", "SHA3-224", "SHA3-256", "SHA3-384",
    "SHA3-512",
];

impl fmt::Debug for ColumnMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ColumnMask")
            .field("columns", &self.columns)
            .field("hash", &self.hash)
            .field("salt", &self.salt.as_ref().map(|_| "[REDACTED]"))
            .field("hash_version", &self.hash_version)
            .field("with_chars", &self.with_chars)
            .field("truncate_to_chars", &self.truncate_to_chars)
            .finish()
    }
}

/// `[[table]]`: an ordinary table (or, with `*` in the table part, every
/// table of a schema matching the pattern) whose changes become Debezium
/// change events.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    /// `schema.table`, `table` (schema `public`), or a pattern such as
    /// `public.*` or `sales.order_*` (`*` matches any run of characters in
    /// the table name). Required.
    pub name: TableRef,
    /// Destination topic, with placeholders `{prefix}`, `{schema}` and
    /// `{table}`. Default `{prefix}.{schema}.{table}` (Debezium's naming).
    #[serde(default = "defaults::table_topic")]
    pub topic: TopicTemplate,
    /// Debezium's `message.key.columns` for this table: the record key's
    /// columns, for tables without a primary key (or to key by others).
    /// Empty: the primary key; no primary key → a null key.
    #[serde(default)]
    pub key_columns: Vec<String>,
    /// Overrides `table_defaults.tombstones_on_delete`.
    #[serde(default)]
    pub tombstones_on_delete: Option<bool>,
    /// Overrides `table_defaults.decimal_handling_mode`.
    #[serde(default)]
    pub decimal_handling_mode: Option<DecimalHandlingMode>,
    /// Overrides `table_defaults.time_precision_mode`.
    #[serde(default)]
    pub time_precision_mode: Option<TimePrecisionMode>,
    /// Overrides `table_defaults.binary_handling_mode`.
    #[serde(default)]
    pub binary_handling_mode: Option<BinaryHandlingMode>,
    /// Overrides `table_defaults.interval_handling_mode`.
    #[serde(default)]
    pub interval_handling_mode: Option<IntervalHandlingMode>,
    /// Overrides `table_defaults.unavailable_value_placeholder`.
    #[serde(default)]
    pub unavailable_value_placeholder: Option<String>,
    /// Overrides `table_defaults.unmapped_types`.
    #[serde(default)]
    pub unmapped_types: Option<UnmappedTypes>,
    /// Overrides `table_defaults.special_values`.
    #[serde(default)]
    pub special_values: Option<SpecialValues>,
    /// Overrides `table_defaults.skipped_operations`.
    #[serde(default)]
    pub skipped_operations: Option<SkippedOperations>,
    /// Debezium's `column.include.list` for this table: only these columns
    /// are in `before`/`after` (key columns stay in the key). Not with
    /// `column_exclude_list`.
    #[serde(default)]
    pub column_include_list: Vec<String>,
    /// Debezium's `column.exclude.list` for this table: these columns are
    /// left out of `before`/`after` (key columns stay in the key).
    #[serde(default)]
    pub column_exclude_list: Vec<String>,
    /// Debezium's column masks and truncation (`[[table.column_mask]]`).
    #[serde(default)]
    pub column_mask: Vec<ColumnMask>,
    /// Overrides `table_defaults.format` (not to another format when
    /// `provide_transaction_metadata` is on).
    #[serde(default)]
    pub format: Option<TableFormat>,
}

impl TableConfig {
    /// Whether column `name` is in `before`/`after` by this entry's own
    /// include and exclude lists.
    pub fn includes_column(&self, name: &str) -> bool {
        if !self.column_include_list.is_empty() {
            return self.column_include_list.iter().any(|c| c == name);
        }
        !self.column_exclude_list.iter().any(|c| c == name)
    }

    /// Whether column `column` of `schema.table` is in `before`/`after`:
    /// by this entry's own lists when it has any, else by the default lists
    /// (`defaults`, [`TableDefaults::column_filter`]).
    pub fn includes(
        &self,
        defaults: Option<&ColumnFilter>,
        schema: &str,
        table: &str,
        column: &str,
    ) -> bool {
        match defaults {
            Some(f)
                if self.column_include_list.is_empty() && self.column_exclude_list.is_empty() =>
            {
                f.includes(schema, table, column)
            }
            _ => self.includes_column(column),
        }
    }

    /// The record key's columns: `key_columns`, else the table's
    /// `primary_key`.
    pub fn key_or<'a>(&'a self, primary_key: &'a [String]) -> &'a [String] {
        if self.key_columns.is_empty() {
            primary_key
        } else {
            &self.key_columns
        }
    }

    /// The mask of column `name`, if any.
    pub fn mask_of(&self, name: &str) -> Option<&ColumnMask> {
        self.column_mask
            .iter()
            .find(|m| m.columns.iter().any(|c| c == name))
    }

    /// Every column named by the column lists and masks, with the key path
    /// that names it.
    pub fn named_columns(&self, entry: usize) -> Vec<(String, &str)> {
        let mut out = Vec::new();
        for (list, items) in [
            ("column_include_list", &self.column_include_list),
            ("column_exclude_list", &self.column_exclude_list),
        ] {
            for (j, c) in items.iter().enumerate() {
                out.push((format!("table[{entry}].{list}[{j}]"), c.as_str()));
            }
        }
        for (m, mask) in self.column_mask.iter().enumerate() {
            for (j, c) in mask.columns.iter().enumerate() {
                out.push((
                    format!("table[{entry}].column_mask[{m}].columns[{j}]"),
                    c.as_str(),
                ));
            }
        }
        out
    }

    /// Whether `name` is a pattern (has `*` in its table part).
    pub fn is_pattern(&self) -> bool {
        self.name.name.contains('*')
    }

    /// Whether this entry captures table `schema.name`.
    pub fn matches(&self, schema: &str, name: &str) -> bool {
        self.name.schema == schema && glob_match(&self.name.name, name)
    }
}

/// `pattern` with `*` matching any run of characters (including none);
/// every other character matches itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}
