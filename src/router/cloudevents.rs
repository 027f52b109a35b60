//! CloudEvents 1.0.2 in the Kafka protocol binding for outbox routes
//! (`outbox.format = "cloudevents"`).
//!
//! Mapping (fixed per route, resolved once per relation):
//! - `id` ← the id column, `type` ← the type column (both non-empty
//!   UTF-8, or the row stops the connector as any unroutable row does);
//! - `source` ← `outbox.cloudevents.source`; `specversion` is always
//!   `1.0` (the CloudEvents version, never the payload's);
//! - `subject` ← the aggregate id (left out when empty);
//! - `time` ← the transaction's commit time (RFC 3339, microseconds, UTC).
//!   Rows read by a snapshot or by `republish` have no commit time: `time`
//!   is left out (it is OPTIONAL), because a time made up when the row is
//!   read would differ each time the row is re-sent, and a re-sent event
//!   must be the same event;
//! - `datacontenttype` ← `outbox.cloudevents.datacontenttype`, else from the
//!   payload column's type (json/jsonb `application/json`, bytea
//!   `application/octet-stream`, text `text/plain; charset=utf-8`);
//! - `dataschema` ← a fixed URI or a column; extensions ← columns;
//!   `traceparent`/`tracestate` (the Distributed Tracing extension) ← the
//!   trace context column.
//!
//! Binary mode: every attribute but `datacontenttype` is a `ce_<name>`
//! header, `datacontenttype` is the `content-type` header, the value is the
//! payload unchanged. Structured mode: the value is the JSON event format
//! (`application/cloudevents+json`): a JSON payload is the `data` member as
//! JSON, other text a JSON string, bytes `data_base64`. A payload that
//! would be a tombstone (NULL, or empty with `tombstone_on_empty_payload`)
//! stays a tombstone in both modes — with the binary mode's `ce_` headers,
//! which is the binding's binary form of an event without data — so log
//! compaction still works.
//!
//! walrelay's own headers (`id`, `walrelay.lsn`, `header_columns`) stay on
//! every record in both modes.

use std::cell::RefCell;
use std::sync::Arc;

use bytes::Bytes;

use super::trace::TraceContext;
use super::{BYTEA_OID, Bound, Record};
use crate::Lsn;
use crate::config::{CloudEventsConfig, CloudEventsMode, absolute_uri_problem};
use crate::pgoutput::{Cell, Oid, Relation};

/// `application/cloudevents+json; charset=UTF-8`, the structured mode's
/// `content-type` (Kafka protocol binding 3.3.1).
pub const STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json; charset=UTF-8";

const JSON_OID: Oid = 114;
const JSONB_OID: Oid = 3802;

/// Microseconds between the Unix epoch and PostgreSQL's (2000-01-01).
const PG_EPOCH_US: i64 = 946_684_800_000_000;

/// How the payload goes into a structured event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Data {
    /// JSON text: embedded as JSON; checked unless the column is json/jsonb.
    Json { check: bool },
    /// Text: a JSON string (bytes that are not UTF-8: `data_base64`).
    Text,
    /// Bytes: `data_base64`.
    Base64,
}

#[derive(Debug)]
enum Dataschema {
    Fixed(Bytes),
    Column(usize, String),
}

/// A route's CloudEvents mapping bound to a relation.
#[derive(Debug)]
pub(super) struct CloudEvents {
    mode: CloudEventsMode,
    source: Bytes,
    type_column: (usize, String),
    dataschema: Option<Dataschema>,
    content_type: Bytes,
    data: Data,
    /// Attribute name, `ce_` header name, column index, column name.
    extensions: Vec<(Arc<str>, Arc<str>, usize, String)>,
    names: Names,
}

/// Header names, shared by every record.
#[derive(Debug)]
struct Names {
    specversion: Arc<str>,
    id: Arc<str>,
    source: Arc<str>,
    ty: Arc<str>,
    subject: Arc<str>,
    time: Arc<str>,
    dataschema: Arc<str>,
    traceparent: Arc<str>,
    tracestate: Arc<str>,
    content_type: Arc<str>,
}

impl Names {
    fn new() -> Names {
        Names {
            specversion: Arc::from("ce_specversion"),
            id: Arc::from("ce_id"),
            source: Arc::from("ce_source"),
            ty: Arc::from("ce_type"),
            subject: Arc::from("ce_subject"),
            time: Arc::from("ce_time"),
            dataschema: Arc::from("ce_dataschema"),
            traceparent: Arc::from("ce_traceparent"),
            tracestate: Arc::from("ce_tracestate"),
            content_type: Arc::from("content-type"),
        }
    }
}

/// The `time` attribute of the transaction being routed, formatted once per
/// transaction: `(commit time in PostgreSQL microseconds, text)`.
pub(super) type TimeCache = RefCell<(i64, Bytes)>;

/// Resolves a column name to its index, or fails with `(table, column)`.
pub(super) type FindColumn<'a> = dyn Fn(&str) -> Result<usize, (String, String)> + 'a;

/// Whether `media` (a `datacontenttype`) declares JSON: `application/json`,
/// `text/json` or any `+json` suffix (JSON event format, section 3.1).
fn is_json_media(media: &str) -> bool {
    let essence = media
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence == "text/json" || essence.ends_with("+json")
}

impl CloudEvents {
    /// Binds `config` to `rel`; `find` resolves a column name or fails
    /// naming it.
    pub(super) fn bind(
        config: &CloudEventsConfig,
        type_column: &str,
        payload: usize,
        rel: &Relation,
        find: &FindColumn<'_>,
    ) -> Result<CloudEvents, (String, String)> {
        let payload_oid = rel.columns.get(payload).map_or(0, |c| c.type_oid);
        let content_type = match config.datacontenttype.as_deref() {
            Some(media) => media.to_owned(),
            None => match payload_oid {
                JSON_OID | JSONB_OID => "application/json".to_owned(),
                BYTEA_OID => "application/octet-stream".to_owned(),
                _ => "text/plain; charset=utf-8".to_owned(),
            },
        };
        let data = if is_json_media(&content_type) {
            Data::Json {
                check: !matches!(payload_oid, JSON_OID | JSONB_OID),
            }
        } else if payload_oid == BYTEA_OID {
            Data::Base64
        } else {
            Data::Text
        };
        let dataschema = match (&config.dataschema, &config.dataschema_column) {
            (Some(uri), _) => Some(Dataschema::Fixed(Bytes::from(uri.clone()))),
            (None, Some(column)) => Some(Dataschema::Column(find(column)?, column.clone())),
            (None, None) => None,
        };
        let mut extensions = Vec::with_capacity(config.extensions.len());
        for (name, column) in &config.extensions {
            extensions.push((
                Arc::from(name.as_str()),
                Arc::from(format!("ce_{name}")),
                find(column)?,
                column.clone(),
            ));
        }
        Ok(CloudEvents {
            mode: config.mode,
            // Validated by the configuration: present and a URI-reference.
            source: Bytes::from(config.source.clone().unwrap_or_default()),
            type_column: (find(type_column)?, type_column.to_owned()),
            dataschema,
            content_type: Bytes::from(content_type),
            data,
            extensions,
            names: Names::new(),
        })
    }

    /// The most headers [`CloudEvents::apply`] adds to a record.
    pub(super) fn max_headers(&self) -> usize {
        // specversion, id, source, type, subject, time, dataschema,
        // traceparent, tracestate, content-type.
        10 + self.extensions.len()
    }

    /// Turns the raw-format `record` of `row` into its CloudEvent: adds the
    /// attributes, and in structured mode replaces the value.
    pub(super) fn apply(
        &self,
        bound: &Bound,
        row: &crate::pgoutput::TupleData,
        lsn: Lsn,
        time: Option<Bytes>,
        trace: Option<&TraceContext>,
        record: &mut Record,
    ) -> Result<(), super::RouteError> {
        let c = &bound.route.config;
        // The `id` header (always first) holds the id column's bytes.
        let id_bytes = record
            .headers
            .first()
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let id = non_empty_text(bound, &id_bytes, &c.id_column, lsn, "id")?;
        let ty_bytes = bound.required(row, self.type_column.0, &self.type_column.1, lsn)?;
        let ty = non_empty_text(bound, &ty_bytes, &self.type_column.1, lsn, "type")?;
        let key = record.key.clone().unwrap_or_default();
        let subject = utf8(bound, &key, &c.aggregate_id_column, lsn, "subject")?;
        let dataschema = match &self.dataschema {
            None => None,
            Some(Dataschema::Fixed(uri)) => Some(uri.clone()),
            Some(Dataschema::Column(idx, column)) => match row.get(*idx) {
                Some(Cell::Text(b) | Cell::Binary(b)) => {
                    let text = utf8(bound, b, column, lsn, "dataschema")?;
                    if let Some(problem) = absolute_uri_problem(text) {
                        return Err(bound.err(
                            column,
                            lsn,
                            &format!("the CloudEvents dataschema value {problem}"),
                            "write an absolute URI (or NULL) in the column, or unset \
                             outbox.cloudevents.dataschema_column",
                        ));
                    }
                    Some(b.clone())
                }
                _ => None,
            },
        };
        let mut extensions = Vec::with_capacity(self.extensions.len());
        for (name, header, idx, column) in &self.extensions {
            if let Some(Cell::Text(b) | Cell::Binary(b)) = row.get(*idx) {
                utf8(bound, b, column, lsn, name)?;
                extensions.push((name, header, b.clone()));
            }
        }

        let n = &self.names;
        let structured = self.mode == CloudEventsMode::Structured && record.value.is_some();
        if !structured {
            let h = &mut record.headers;
            h.reserve(8 + extensions.len());
            h.push((n.specversion.clone(), Bytes::from_static(b"1.0")));
            h.push((n.id.clone(), id_bytes.clone()));
            h.push((n.source.clone(), self.source.clone()));
            h.push((n.ty.clone(), ty_bytes.clone()));
            if !subject.is_empty() {
                h.push((n.subject.clone(), key.clone()));
            }
            if let Some(time) = &time {
                h.push((n.time.clone(), time.clone()));
            }
            if let Some(schema) = &dataschema {
                h.push((n.dataschema.clone(), schema.clone()));
            }
            for (_, header, value) in &extensions {
                h.push(((*header).clone(), value.clone()));
            }
            if let Some(trace) = trace {
                h.push((n.traceparent.clone(), trace.traceparent.clone()));
                if let Some(state) = &trace.tracestate {
                    h.push((n.tracestate.clone(), state.clone()));
                }
            }
            // An event without data has no datacontenttype to declare.
            if record.value.is_some() {
                h.push((n.content_type.clone(), self.content_type.clone()));
            }
            return Ok(());
        }

        let payload = record.value.take().unwrap_or_default();
        let mut out = Vec::with_capacity(payload.len() * 4 / 3 + 256);
        out.extend_from_slice(b"{\"specversion\":\"1.0\",\"id\":");
        json_string(&mut out, id);
        out.extend_from_slice(b",\"source\":");
        json_string(
            &mut out,
            std::str::from_utf8(&self.source).unwrap_or_default(),
        );
        out.extend_from_slice(b",\"type\":");
        json_string(&mut out, ty);
        if !subject.is_empty() {
            out.extend_from_slice(b",\"subject\":");
            json_string(&mut out, subject);
        }
        if let Some(time) = &time {
            out.extend_from_slice(b",\"time\":\"");
            out.extend_from_slice(time);
            out.push(b'"');
        }
        out.extend_from_slice(b",\"datacontenttype\":");
        json_string(
            &mut out,
            std::str::from_utf8(&self.content_type).unwrap_or_default(),
        );
        if let Some(schema) = &dataschema {
            out.extend_from_slice(b",\"dataschema\":");
            json_string(&mut out, std::str::from_utf8(schema).unwrap_or_default());
        }
        for (name, _, value) in &extensions {
            out.push(b',');
            json_string(&mut out, name);
            out.push(b':');
            json_string(&mut out, std::str::from_utf8(value).unwrap_or_default());
        }
        if let Some(trace) = trace {
            out.extend_from_slice(b",\"traceparent\":");
            json_string(
                &mut out,
                std::str::from_utf8(&trace.traceparent).unwrap_or_default(),
            );
            if let Some(state) = &trace.tracestate {
                out.extend_from_slice(b",\"tracestate\":");
                json_string(&mut out, std::str::from_utf8(state).unwrap_or_default());
            }
        }
        match self.data {
            Data::Json { check } => {
                if check && !is_json(&payload) {
                    return Err(bound.err(
                        &c.payload_column,
                        lsn,
                        &format!(
                            "the payload is not JSON, but the CloudEvents datacontenttype {:?} \
                             declares JSON, so structured mode must embed it as JSON",
                            String::from_utf8_lossy(&self.content_type)
                        ),
                        "write JSON in the payload column, or set \
                         outbox.cloudevents.datacontenttype to a non-JSON media type (then the \
                         payload is embedded as a string)",
                    ));
                }
                out.extend_from_slice(b",\"data\":");
                out.extend_from_slice(&payload);
            }
            Data::Text => match std::str::from_utf8(&payload) {
                Ok(text) => {
                    out.extend_from_slice(b",\"data\":");
                    json_string(&mut out, text);
                }
                Err(_) => {
                    out.extend_from_slice(b",\"data_base64\":\"");
                    super::debezium::base64(&mut out, &payload);
                    out.push(b'"');
                }
            },
            Data::Base64 => {
                out.extend_from_slice(b",\"data_base64\":\"");
                super::debezium::base64(&mut out, &payload);
                out.push(b'"');
            }
        }
        out.push(b'}');
        record.value = Some(Bytes::from(out));
        record.headers.push((
            n.content_type.clone(),
            Bytes::from_static(STRUCTURED_CONTENT_TYPE.as_bytes()),
        ));
        Ok(())
    }
}

/// `value` as UTF-8 text, or an error naming the attribute.
fn utf8<'a>(
    bound: &Bound,
    value: &'a [u8],
    column: &str,
    lsn: Lsn,
    attribute: &str,
) -> Result<&'a str, super::RouteError> {
    std::str::from_utf8(value).map_err(|_| {
        bound.err(
            column,
            lsn,
            &format!(
                "the value is not UTF-8, so it cannot be the CloudEvents {attribute} attribute"
            ),
            "CloudEvents attributes are strings: store text in the column",
        )
    })
}

/// A required attribute (`id`, `type`): UTF-8 and not empty.
fn non_empty_text<'a>(
    bound: &Bound,
    value: &'a [u8],
    column: &str,
    lsn: Lsn,
    attribute: &str,
) -> Result<&'a str, super::RouteError> {
    let text = utf8(bound, value, column, lsn, attribute)?;
    if text.is_empty() {
        return Err(bound.err(
            column,
            lsn,
            &format!("the value is empty, and the CloudEvents {attribute} attribute must not be"),
            "the slot does not advance past this row: skip its transaction (docs/operations.md, \
             \"A row cannot be routed\"); then add CHECK (column <> '') and fix the writer",
        ));
    }
    Ok(text)
}

fn is_json(payload: &[u8]) -> bool {
    std::str::from_utf8(payload)
        .is_ok_and(|text| serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok())
}

/// Appends `s` as a JSON string (RFC 8259 escapes).
fn json_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for b in s.bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..=0x1f => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
            }
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

/// The commit time (PostgreSQL microseconds since 2000-01-01) as RFC 3339
/// UTC with microseconds, from the cache when it holds this transaction's.
/// `None` when the time is outside years 0000..=9999, which RFC 3339
/// cannot write (no real commit time is).
pub(super) fn time_text(cache: &TimeCache, pg_us: i64) -> Option<Bytes> {
    let mut cached = cache.borrow_mut();
    if cached.0 == pg_us && !cached.1.is_empty() {
        return Some(cached.1.clone());
    }
    let text = Bytes::from(rfc3339(pg_us)?);
    *cached = (pg_us, text.clone());
    Some(text)
}

/// See `time_text`.
pub fn rfc3339(pg_us: i64) -> Option<String> {
    let unix_us = pg_us.checked_add(PG_EPOCH_US)?;
    let secs = unix_us.div_euclid(1_000_000);
    let micros = unix_us.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = super::time::civil_from_days(days);
    if !(0..=9999).contains(&y) {
        return None;
    }
    Some(format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    ))
}

#[cfg(test)]
mod tests;
