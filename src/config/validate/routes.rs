//! Routing rules: `[[outbox]]` sections (columns, placement, CloudEvents,
//! topic templates and which columns they may use) and `[[table]]`
//! sections (one section per table, column lists and masks, topic names,
//! the `[table_defaults]` they inherit).
//!
//! Each rule pushes a [`Problem`] naming the key, what is wrong and the
//! fix; nothing stops at the first problem.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashSet};

use crate::config::Config;
use crate::config::error::{MAX_VALUE_CHARS, Problem, quoted, shorten};
use crate::config::schema::{OutboxConfig, TableDefaults};
use crate::config::template::{Segment, identifier, topic_name_problem};

/// `others`: a `[[table]]` or `[[message]]` section is configured (either
/// is something to capture without an outbox).
pub(super) fn outboxes(outboxes: &[OutboxConfig], others: bool, out: &mut Vec<Problem>) {
    if outboxes.is_empty() && !others {
        out.push(Problem::new(
            "outbox",
            "nothing to capture: no outbox table, no table and no message prefix is \
             configured; add an [[outbox]] section with table = \"public.outbox\", a [[table]] \
             section with name = \"public.orders\", or a [[message]] section with \
             prefix = \"orders\"",
        ));
    }
    let mut seen = BTreeMap::new();
    for (i, outbox) in outboxes.iter().enumerate() {
        let at = |key: &str| format!("outbox[{i}].{key}");
        match seen.entry(&outbox.table) {
            Entry::Vacant(slot) => {
                slot.insert(i);
            }
            Entry::Occupied(first) => out.push(Problem::new(
                at("table"),
                format!(
                    "table {} is already configured in outbox[{}]; each table may appear \
                     once (route by aggregate type with the topic template instead)",
                    outbox.table,
                    first.get()
                ),
            )),
        }
        for (key, column) in [
            ("id_column", &outbox.id_column),
            ("aggregate_type_column", &outbox.aggregate_type_column),
            ("aggregate_id_column", &outbox.aggregate_id_column),
            ("type_column", &outbox.type_column),
            ("payload_column", &outbox.payload_column),
        ] {
            identifier(&at(key), column, out);
        }
        if let Some(column) = &outbox.timestamp_column {
            identifier(&at("timestamp_column"), column, out);
        }
        if let Some(column) = &outbox.trace_context_column {
            identifier(&at("trace_context_column"), column, out);
        }
        if let Some(column) = &outbox.cloudevents.dataschema_column {
            identifier(&at("cloudevents.dataschema_column"), column, out);
        }
        for (name, column) in &outbox.cloudevents.extensions {
            if !column.is_empty() {
                identifier(&at(&format!("cloudevents.extensions.{name}")), column, out);
            }
        }
        crate::config::cloudevents::check(outbox, &at, out);
        crate::config::envelope::check(outbox, &at, out);
        if let Some(retention) = &outbox.retention {
            self::retention(retention, &at, out);
        }
        topic(outbox, &at("topic"), out);
        let mut ordered = HashSet::new();
        for (j, column) in outbox.snapshot_order_by.iter().enumerate() {
            let key = at(&format!("snapshot_order_by[{j}]"));
            identifier(&key, column, out);
            if !ordered.insert(column) {
                out.push(Problem::new(
                    key,
                    format!("{} is listed twice; remove the duplicate", quoted(column)),
                ));
            }
        }
    }
}

/// `[outbox.retention]`: values a prune can run with.
fn retention(
    r: &crate::config::RetentionConfig,
    at: &dyn Fn(&str) -> String,
    out: &mut Vec<Problem>,
) {
    use std::time::Duration;
    if let Some(column) = &r.column {
        identifier(&at("retention.column"), column, out);
        if r.margin.is_none() {
            out.push(Problem::new(
                at("retention.margin"),
                format!(
                    "is required with retention.column = {}: a row's column value may be long \
                     before its transaction commits, so set a margin longer than the longest \
                     transaction that writes the outbox (e.g. margin = \"1h\"), or remove \
                     retention.column to judge rows by their commit timestamp",
                    quoted(column)
                ),
            ));
        }
    }
    if r.margin.is_some_and(|m| m < Duration::from_secs(1)) {
        out.push(Problem::new(
            at("retention.margin"),
            "must be at least 1s: commit timestamps are not in commit order to the \
             microsecond, and the margin is what absorbs it (default 5m)",
        ));
    }
    if r.batch_rows == 0 || r.batch_rows > 100_000 {
        out.push(Problem::new(
            at("retention.batch_rows"),
            format!(
                "is {}; give 1..=100000 rows per transaction (default 1000): small batches keep \
                 each transaction short",
                r.batch_rows
            ),
        ));
    }
    for (key, d) in [
        ("retention.lock_timeout", r.lock_timeout),
        ("retention.statement_timeout", r.statement_timeout),
    ] {
        if d < Duration::from_millis(1) {
            out.push(Problem::new(
                at(key),
                "must be at least 1ms (0 would mean no timeout in PostgreSQL); e.g. \"1s\"",
            ));
        }
    }
    if r.interval.is_some_and(|i| i < Duration::from_secs(1)) {
        out.push(Problem::new(
            at("retention.interval"),
            "must be at least 1s (e.g. \"1h\"), or left out to prune only with `walrelay prune`",
        ));
    }
}

/// Placeholders a `[[table]]` topic template may use.
const TABLE_PLACEHOLDERS: [&str; 3] = ["prefix", "schema", "table"];

pub(super) fn tables(config: &Config, out: &mut Vec<Problem>) {
    table_defaults(&config.table_defaults, out);
    // The prefix of table events' topics and of the default heartbeat topic.
    // Unset, it is connector.name, whose own rule (connector_name) keeps it
    // to characters topic names allow.
    if let Some(prefix) = &config.table_defaults.topic_prefix
        && let Some(why) = topic_name_problem(prefix)
    {
        out.push(Problem::new(
            "table_defaults.topic_prefix",
            format!(
                "is the prefix of the table events' topics and of the default heartbeat topic, \
                 and {why}"
            ),
        ));
    }
    // The transaction topic, `<prefix>.transaction`: only its length can
    // be wrong once the prefix is right (a prefix problem is reported as
    // itself, above or under connector.name).
    let prefix = config.topic_prefix();
    if config.table_defaults.provide_transaction_metadata
        && topic_name_problem(prefix).is_none()
        && let Some(why) = topic_name_problem(&format!("{prefix}.transaction"))
    {
        out.push(Problem::new(
            "table_defaults.provide_transaction_metadata",
            format!(
                "writes the transaction records to \"{prefix}.transaction\", which {why}; \
                 shorten table_defaults.topic_prefix (or connector.name)"
            ),
        ));
    }
    let mut seen: BTreeMap<&crate::config::TableRef, usize> = BTreeMap::new();
    for (i, table) in config.tables.iter().enumerate() {
        let at = |key: &str| format!("table[{i}].{key}");
        if let Some(first) = seen.insert(&table.name, i) {
            out.push(Problem::new(
                at("name"),
                format!(
                    "{} is already configured in table[{first}]; list each table once",
                    table.name
                ),
            ));
        }
        if table.name.schema.contains('*') {
            out.push(Problem::new(
                at("name"),
                format!(
                    "{}: '*' may only be used in the table part (e.g. \"public.*\"); name \
                     each schema in its own [[table]] section",
                    table.name
                ),
            ));
        }
        for (j, outbox) in config.outbox.iter().enumerate() {
            if table.matches(&outbox.table.schema, &outbox.table.name) {
                out.push(Problem::new(
                    at("name"),
                    format!(
                        "{} captures {}, which is the outbox table of outbox[{j}]; a table is \
                         either an outbox or a captured table, not both: remove it from one \
                         section (narrow the pattern if it is one)",
                        table.name, outbox.table
                    ),
                ));
            }
        }
        let mut listed = HashSet::new();
        for (j, column) in table.key_columns.iter().enumerate() {
            let key = at(&format!("key_columns[{j}]"));
            identifier(&key, column, out);
            if !listed.insert(column) {
                out.push(Problem::new(
                    key,
                    format!("{} is listed twice; remove the duplicate", quoted(column)),
                ));
            }
        }
        if let Some(p) = &table.unavailable_value_placeholder {
            placeholder(&at("unavailable_value_placeholder"), p, out);
        }
        column_rules(i, table, out);
        let mut has_placeholder = false;
        for segment in table.topic.segments() {
            if let Segment::Column(name) = segment {
                has_placeholder = true;
                if !TABLE_PLACEHOLDERS.contains(&name.as_str()) {
                    out.push(Problem::new(
                        at("topic"),
                        format!(
                            "template references {{{}}}; a table's topic may use only \
                             {{prefix}}, {{schema}} and {{table}} (default \"{}\")",
                            shorten(name, MAX_VALUE_CHARS),
                            crate::config::TopicTemplate::TABLE_DEFAULT
                        ),
                    ));
                }
            }
        }
        if !has_placeholder && table.is_pattern() {
            out.push(Problem::new(
                at("topic"),
                format!(
                    "is a fixed topic, but {} is a pattern: every matching table would share \
                     it; use {{table}} in the template (default \"{}\")",
                    table.name,
                    crate::config::TopicTemplate::TABLE_DEFAULT
                ),
            ));
        } else if !has_placeholder && let Some(why) = topic_name_problem(table.topic.as_str()) {
            out.push(Problem::new(at("topic"), why));
        }
    }
}

/// The column lists and masks of `table[i]`: names well formed, each
/// column masked at most once and never masked while left out, exactly one
/// mask kind per `[[table.column_mask]]`, salts only with hashes.
fn column_rules(i: usize, table: &crate::config::TableConfig, out: &mut Vec<Problem>) {
    let at = |key: &str| format!("table[{i}].{key}");
    if !table.column_include_list.is_empty() && !table.column_exclude_list.is_empty() {
        out.push(Problem::new(
            at("column_exclude_list"),
            "is set together with column_include_list; Debezium takes one or the other: keep \
             only the one that is shorter to write",
        ));
    }
    // Per list (the include list, the exclude list, all masks together):
    // where each column was first named.
    let mut listed: BTreeMap<(&str, &str), String> = BTreeMap::new();
    for (key, column) in table.named_columns(i) {
        identifier(&key, column, out);
        let list: &'static str = if key.contains(".column_mask[") {
            "column_mask"
        } else if key.contains(".column_include_list[") {
            "include"
        } else {
            "exclude"
        };
        if let Some(first) = listed.get(&(list, column)) {
            out.push(Problem::new(
                key,
                format!(
                    "{} is already named in {first}; name a column once per list, and give it \
                     at most one mask",
                    quoted(column)
                ),
            ));
            continue;
        }
        listed.insert((list, column), key.clone());
        if list == "column_mask" && !table.includes_column(column) {
            out.push(Problem::new(
                key,
                format!(
                    "{} is masked but left out of the events by the column lists; remove the \
                     mask or the exclusion",
                    quoted(column)
                ),
            ));
        }
    }
    for (j, mask) in table.column_mask.iter().enumerate() {
        let key = |k: &str| at(&format!("column_mask[{j}].{k}"));
        if mask.columns.is_empty() {
            out.push(Problem::new(
                key("columns"),
                "is empty; name the columns to mask",
            ));
        }
        let kinds = [
            mask.hash.is_some(),
            mask.with_chars.is_some(),
            mask.truncate_to_chars.is_some(),
        ];
        if kinds.iter().filter(|&&k| k).count() != 1 {
            out.push(Problem::new(
                at(&format!("column_mask[{j}]")),
                "needs exactly one of hash (with salt), with_chars and truncate_to_chars; \
                 use one [[table.column_mask]] per kind",
            ));
        }
        match &mask.hash {
            Some(name) => {
                if !crate::config::HASH_ALGORITHMS
                    .iter()
                    .any(|a| a.eq_ignore_ascii_case(name))
                {
                    out.push(Problem::new(
                        key("hash"),
                        format!(
                            "{} is not a supported hash algorithm; use one of {}",
                            quoted(name),
                            crate::config::HASH_ALGORITHMS.join(", ")
                        ),
                    ));
                }
                if mask
                    .salt
                    .as_ref()
                    .is_some_and(|salt| secrecy::ExposeSecret::expose_secret(salt).is_empty())
                {
                    out.push(Problem::new(
                        key("salt"),
                        "is empty; Debezium's salt cannot be empty, and an unsalted hash of a \
                         short value (an e-mail, a phone number) is easily reversed: set a long \
                         random salt",
                    ));
                }
                if mask.salt.is_none() {
                    out.push(Problem::new(
                        key("salt"),
                        "is missing; a hash mask needs a salt (Debezium's \
                         column.mask.hash.<algorithm>.with.salt.<salt>), e.g. salt = \
                         \"${WALRELAY_MASK_SALT}\"",
                    ));
                }
                if let Some(v) = mask.hash_version
                    && !matches!(v, 1 | 2)
                {
                    out.push(Problem::new(
                        key("hash_version"),
                        format!(
                            "is {v}; use 1 (Debezium's column.mask.hash.…) or 2 \
                             (column.mask.hash.v2.…)"
                        ),
                    ));
                }
            }
            None => {
                for (k, set) in [
                    ("salt", mask.salt.is_some()),
                    ("hash_version", mask.hash_version.is_some()),
                ] {
                    if set {
                        out.push(Problem::new(
                            key(k),
                            "is set without hash; remove it or set hash = \"SHA-256\"",
                        ));
                    }
                }
            }
        }
        if mask.truncate_to_chars == Some(0) {
            out.push(Problem::new(
                key("truncate_to_chars"),
                "is 0; it must be positive (Debezium refuses 0 too)",
            ));
        }
    }
}

fn table_defaults(defaults: &TableDefaults, out: &mut Vec<Problem>) {
    placeholder(
        "table_defaults.unavailable_value_placeholder",
        &defaults.unavailable_value_placeholder,
        out,
    );
    if !defaults.column_include_list.is_empty() && !defaults.column_exclude_list.is_empty() {
        out.push(Problem::new(
            "table_defaults.column_exclude_list",
            "is set together with column_include_list; Debezium takes one or the other: keep \
             only the one that is shorter to write",
        ));
    }
    if let Err((key, reason)) = defaults.column_filter() {
        out.push(Problem::new(
            key,
            format!(
                "is not a regular expression walrelay can use: {reason}. Write it as Debezium \
                 does, matched against the whole schema.table.column (e.g. \
                 \"public\\.customers\\.(ssn|email)\"); look-around and back-references are \
                 not supported"
            ),
        ));
    }
}

fn placeholder(key: &str, value: &str, out: &mut Vec<Problem>) {
    if value.is_empty() {
        out.push(Problem::new(
            key,
            "is empty; consumers could not tell an unchanged TOASTed value from an empty one: \
             use Debezium's \"__debezium_unavailable_value\"",
        ));
    }
}

fn topic(outbox: &OutboxConfig, key: &str, out: &mut Vec<Problem>) {
    let allowed = outbox.template_columns();
    let allowed_set: HashSet<&str> = allowed.iter().copied().collect();
    let mut has_placeholder = false;
    for segment in outbox.topic.segments() {
        if let Segment::Column(column) = segment {
            has_placeholder = true;
            if !allowed_set.contains(column.as_str()) {
                let mut choices = allowed
                    .iter()
                    .take(10)
                    .map(|c| format!("{{{}}}", shorten(c, MAX_VALUE_CHARS)))
                    .collect::<Vec<_>>()
                    .join(", ");
                if allowed.len() > 10 {
                    choices.push_str(", …");
                }
                out.push(Problem::new(
                    key,
                    format!(
                        "template references {{{}}}, which is not a configured column; \
                         use one of {choices} or add the column to header_columns (or envelope_columns)",
                        shorten(column, MAX_VALUE_CHARS)
                    ),
                ));
            }
        }
    }
    if !has_placeholder {
        if let Some(why) = topic_name_problem(outbox.topic.as_str()) {
            out.push(Problem::new(key, why));
        }
    }
}
