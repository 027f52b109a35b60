//! Logical decoding message routing (`[[message]]`): a transactional
//! message (`pg_logical_emit_message(true, prefix, payload)`) whose prefix a
//! section matches becomes one Kafka record.
//!
//! A record: topic from the section's template (`{prefix}`, or a top-level
//! field of the JSON payload), key = the `key_field`'s value (its text: a
//! string without quotes, anything else as compact JSON) or else the
//! prefix, value = the payload bytes unchanged, headers
//! `walrelay.event_id` = `<commit LSN>:<index>` (the message's position in
//! its transaction, as table events have), `walrelay.prefix`, the
//! `header_fields` present (not null) in the payload, and `walrelay.lsn` =
//! the commit LSN. `format = "debezium"`: key `{"prefix": …}` and value
//! Debezium's `op: "m"` event as JSON; `format = "avro" | "json_schema"`:
//! the same key and value as bodies under Debezium's message schemas
//! (`encode.rs`), the record carrying the schemas whose ids
//! `sink::registry` adds.
//!
//! Invariants:
//! - **Stable identity.** A record depends only on the message, its commit
//!   LSN and its index: a re-sent message has the same topic, key, value
//!   and headers.
//! - **Never skip silently.** A payload that is not a JSON object when a
//!   field is needed, a missing or null key or topic field, or a topic
//!   name Kafka refuses is a [`RouteError`] naming the prefix, the field,
//!   the commit LSN and the fix (never the payload). A missing header field
//!   only leaves its header out, as a NULL outbox header column does.
//! - Pure: no I/O, no clock.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::schema::SchemaKind;
use super::{EventId, Record, RouteError, Unroutable};
use crate::Lsn;
use crate::config::{
    Config, MessageConfig, MessageFormat, PREFIX_PLACEHOLDER, Segment, topic_name_problem,
};

mod encode;

/// Header carrying the message's prefix.
pub const PREFIX_HEADER: &str = "walrelay.prefix";

/// Topics remembered per section before the cache starts over.
const KNOWN_TOPICS: usize = 1024;

/// One configured section.
#[derive(Debug)]
struct Route {
    config: MessageConfig,
    reads_payload: bool,
    header_names: Vec<Arc<str>>,
    /// `format = "avro" | "json_schema"`: the schemas, shared by the
    /// sections of one format.
    encoding: Option<Arc<encode::Encoding>>,
    /// Rendered topic name → shared name.
    topics: RefCell<HashMap<String, Arc<str>>>,
}

/// Where a message sits, and what its transaction's Begin said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageAt {
    /// The transaction's commit LSN.
    pub commit_lsn: Lsn,
    /// The message's index among the transaction's changes.
    pub index: u64,
    pub xid: u32,
    /// Commit time, milliseconds since 1970.
    pub commit_ms: i64,
    /// The message's own position in the WAL (Debezium's `source.lsn`).
    pub lsn: Lsn,
}

/// The `[[message]]` routes.
#[derive(Debug)]
pub struct MessageRouter {
    routes: Vec<Route>,
    /// `source.name` and `source.db` of `format = "debezium"`, as JSON.
    name_json: String,
    db_json: String,
    event_id_header: Arc<str>,
    lsn_header: Arc<str>,
    prefix_header: Arc<str>,
}

impl MessageRouter {
    pub fn new(config: &Config) -> MessageRouter {
        let json = |s: &str| {
            let mut out = Vec::new();
            super::debezium::json_str(&mut out, s);
            String::from_utf8_lossy(&out).into_owned()
        };
        let mut encodings: Vec<(MessageFormat, Arc<encode::Encoding>)> = Vec::new();
        let mut encoding = |format: MessageFormat| {
            let kind = match format {
                MessageFormat::Avro => SchemaKind::Avro,
                MessageFormat::JsonSchema => SchemaKind::Json,
                MessageFormat::Protobuf => SchemaKind::Protobuf,
                MessageFormat::Raw | MessageFormat::Debezium => return None,
            };
            if let Some((_, e)) = encodings.iter().find(|(f, _)| *f == format) {
                return Some(e.clone());
            }
            let e = Arc::new(encode::Encoding::new(kind));
            encodings.push((format, e.clone()));
            Some(e)
        };
        MessageRouter {
            name_json: json(config.topic_prefix()),
            db_json: json(&config.postgres.database),
            routes: config
                .messages
                .iter()
                .map(|c| Route {
                    reads_payload: c.reads_payload(),
                    header_names: c.header_fields.iter().map(|f| Arc::from(&**f)).collect(),
                    encoding: encoding(c.format),
                    config: c.clone(),
                    topics: RefCell::default(),
                })
                .collect(),
            event_id_header: Arc::from(super::table::EVENT_ID_HEADER),
            lsn_header: Arc::from(super::table::LSN_HEADER),
            prefix_header: Arc::from(PREFIX_HEADER),
        }
    }

    /// Whether a section routes `prefix`.
    pub fn routes(&self, prefix: &str) -> bool {
        self.route(prefix).is_some()
    }

    /// The topic template of the section that routes `prefix`.
    pub fn topic_template(&self, prefix: &str) -> Option<String> {
        self.route(prefix)
            .map(|r| r.config.topic.as_str().to_owned())
    }

    fn route(&self, prefix: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.config.matches(prefix))
    }

    /// The record of the transactional message `index` of the transaction
    /// committed at `commit_lsn`; `Ok(None)` when no section routes its
    /// prefix.
    pub fn on_message(
        &self,
        at: MessageAt,
        prefix: &str,
        content: &Bytes,
    ) -> Result<Option<Record>, RouteError> {
        let Some(route) = self.route(prefix) else {
            return Ok(None);
        };
        let (commit_lsn, index) = (at.commit_lsn, at.index);
        let err = |field: &str, reason: String, fix: &str| RouteError {
            table: format!("logical message prefix {}", crate::config::quoted(prefix)),
            column: format!("payload field {field}"),
            lsn: commit_lsn,
            kind: if field == "*" {
                Unroutable::InvalidValue
            } else if reason.contains("invalid topic name") {
                Unroutable::InvalidTopic
            } else {
                Unroutable::NullValue
            },
            reason: format!("message {commit_lsn}:{index}: {reason}"),
            fix: fix.to_owned(),
        };
        const SKIP: &str = "the slot does not advance past this message: skip its transaction \
            (docs/operations.md, \"A row cannot be routed\") or change the [[message]] section; \
            then fix the writer";
        let payload: Option<Map<String, Value>> = if route.reads_payload {
            match serde_json::from_slice::<Value>(content) {
                Ok(Value::Object(map)) => Some(map),
                Ok(_) => {
                    return Err(err(
                        "*",
                        "the payload is JSON but not an object, and the [[message]] section \
                         reads fields of it"
                            .into(),
                        SKIP,
                    ));
                }
                Err(e) => {
                    return Err(err(
                        "*",
                        format!(
                            "the payload is not JSON (at line {}, column {}), and the \
                             [[message]] section reads fields of it",
                            e.line(),
                            e.column()
                        ),
                        SKIP,
                    ));
                }
            }
        } else {
            None
        };
        let field = |name: &str| payload.as_ref().and_then(|p| p.get(name)).and_then(text);
        let required = |name: &str, what: &str| {
            field(name).ok_or_else(|| {
                err(
                    name,
                    format!("the payload has no such field (or it is null), needed for the {what}"),
                    SKIP,
                )
            })
        };

        // Topic.
        let mut name = String::new();
        for segment in route.config.topic.segments() {
            match segment {
                Segment::Literal(s) => name.push_str(s),
                Segment::Column(c) if c == PREFIX_PLACEHOLDER => name.push_str(prefix),
                Segment::Column(c) => name.push_str(&required(c, "topic")?),
            }
        }
        let topic = {
            let mut topics = route.topics.borrow_mut();
            match topics.get(&name) {
                Some(t) => t.clone(),
                None => {
                    if let Some(problem) = topic_name_problem(&name) {
                        return Err(err(
                            &route.config.topic.columns().collect::<Vec<_>>().join(", "),
                            format!(
                                "the topic template {} makes an invalid topic name from this \
                                 message (not shown: payloads stay out of logs): {problem}",
                                crate::config::quoted(route.config.topic.as_str())
                            ),
                            SKIP,
                        ));
                    }
                    if topics.len() >= KNOWN_TOPICS {
                        topics.clear();
                    }
                    let t: Arc<str> = Arc::from(name.as_str());
                    topics.insert(name, t.clone());
                    t
                }
            }
        };

        let (key, value) = if route.config.format.is_debezium_event() {
            let mut key = b"{\"prefix\":".to_vec();
            super::debezium::json_str(&mut key, prefix);
            key.push(b'}');
            let value = self.debezium_value(at, prefix, content);
            match &route.encoding {
                None => (Bytes::from(key), Bytes::from(value)),
                Some(encoding) => encoding.bodies(key, value).map_err(|e| {
                    err(
                        "*",
                        format!(
                            "the {} event does not fit Debezium's message schema at {}: {}",
                            route.config.format.as_str(),
                            e.path,
                            e.reason
                        ),
                        "report it as a bug; format = \"debezium\" writes the same event as JSON",
                    )
                })?,
            }
        } else {
            let key = match &route.config.key_field {
                Some(k) => Bytes::from(required(k, "key")?.into_owned()),
                None => Bytes::copy_from_slice(prefix.as_bytes()),
            };
            (key, content.clone())
        };

        let lsn_text = Bytes::from(commit_lsn.to_string());
        let mut headers = Vec::with_capacity(3 + route.header_names.len());
        let event_id = Bytes::from(format!("{commit_lsn}:{index}"));
        headers.push((self.event_id_header.clone(), event_id.clone()));
        headers.push((
            self.prefix_header.clone(),
            Bytes::copy_from_slice(prefix.as_bytes()),
        ));
        for h in &route.header_names {
            if let Some(v) = field(h) {
                headers.push((h.clone(), Bytes::from(v.into_owned())));
            }
        }
        headers.push((self.lsn_header.clone(), lsn_text));
        let mut record = Record::with_event_id(
            topic,
            Some(key),
            Some(value),
            headers,
            None,
            Some(EventId::Change(event_id)),
        );
        if let Some(encoding) = &route.encoding {
            record.schemas = Some(encoding.schemas().clone());
        }
        Ok(Some(record))
    }
}

impl MessageRouter {
    /// Debezium's `op: "m"` event for a transactional message, as its JSON
    /// converter writes it (`schemas.enable=false`): the fields Debezium
    /// 3.6.1 writes, in its order, but for `ts_us`/`ts_ns` and
    /// `source.origin*` (not written, as on table events); `ts_ms` and
    /// `source.ts_ms` are the commit time.
    fn debezium_value(&self, at: MessageAt, prefix: &str, content: &[u8]) -> Vec<u8> {
        use std::io::Write as _;
        let mut buf = Vec::with_capacity(320 + prefix.len() + content.len() * 4 / 3);
        let ms = at.commit_ms;
        let _ = write!(
            buf,
            "{{\"op\":\"m\",\"ts_ms\":{ms},\"source\":{{\"version\":\"{}\",\
             \"connector\":\"postgresql\",\"name\":{},\"ts_ms\":{ms},\"snapshot\":\"false\",\
             \"db\":{},\"sequence\":\"[null,\\\"{lsn}\\\"]\",\"schema\":\"\",\"table\":\"\",\
             \"txId\":{},\"lsn\":{lsn},\"xmin\":null}},\"transaction\":null,\
             \"message\":{{\"prefix\":",
            env!("CARGO_PKG_VERSION"),
            self.name_json,
            self.db_json,
            at.xid,
            lsn = at.lsn.0,
        );
        super::debezium::json_str(&mut buf, prefix);
        buf.extend_from_slice(b",\"content\":\"");
        super::debezium::base64(&mut buf, content);
        buf.extend_from_slice(b"\"}}");
        buf
    }
}

/// A field's value as text: a string as is, null as nothing, anything else
/// as compact JSON.
fn text(v: &Value) -> Option<Cow<'_, str>> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(Cow::Borrowed(s)),
        other => Some(Cow::Owned(other.to_string())),
    }
}

#[cfg(test)]
mod tests;
