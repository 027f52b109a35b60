//! W3C Trace Context from an outbox column (`outbox.trace_context_column`).
//!
//! The column holds either a bare `traceparent` value
//! (`00-<trace-id>-<parent-id>-<flags>`) or what Debezium's outbox
//! extensions write into their `tracingspancontext` column: a
//! `java.util.Properties` text (`#comment` lines, then
//! `traceparent=00-…` and maybe `tracestate=…`). Either becomes the
//! record's `traceparent` (and `tracestate`) header, so a trace continues
//! across the relay.
//!
//! A value that is not a valid trace context is never a reason to stop: the
//! caller leaves the trace headers out and counts it
//! ([`Router::take_invalid_trace_contexts`](super::Router::take_invalid_trace_contexts)).
//! A NULL or empty value is no trace at all, not an invalid one.

use bytes::Bytes;

/// The longest `tracestate` W3C Trace Context allows (512 characters).
const MAX_TRACESTATE: usize = 512;

/// A validated trace context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub traceparent: Bytes,
    pub tracestate: Option<Bytes>,
}

/// What a trace-context column value turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Empty (or only a Properties comment): no trace.
    Absent,
    Valid(TraceContext),
    /// Not a valid trace context: publish without one, count it. A valid
    /// `traceparent` with an invalid `tracestate` is `Valid` without the
    /// tracestate, and `tracestate_dropped`.
    Invalid,
}

/// Parses a column value (see the module doc).
pub fn parse(value: &[u8]) -> (Parsed, bool) {
    let Ok(text) = std::str::from_utf8(value) else {
        return (Parsed::Invalid, false);
    };
    let text = text.trim();
    if text.is_empty() {
        return (Parsed::Absent, false);
    }
    let (parent, state) = if looks_like_traceparent(text) {
        (Some(text.to_owned()), None)
    } else {
        properties(text)
    };
    let Some(parent) = parent else {
        // Only comments: Debezium's writer with no active span.
        return if text
            .lines()
            .all(|l| is_comment(l.trim_start()) || l.trim().is_empty())
        {
            (Parsed::Absent, false)
        } else {
            (Parsed::Invalid, false)
        };
    };
    if !valid_traceparent(&parent) {
        return (Parsed::Invalid, false);
    }
    let (tracestate, dropped) = match state {
        None => (None, false),
        Some(s) if valid_tracestate(&s) => (Some(Bytes::from(s)), false),
        Some(s) if s.trim().is_empty() => (None, false),
        Some(_) => (None, true),
    };
    (
        Parsed::Valid(TraceContext {
            traceparent: Bytes::from(parent),
            tracestate,
        }),
        dropped,
    )
}

fn looks_like_traceparent(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() >= 3 && b[0].is_ascii_hexdigit() && b[1].is_ascii_hexdigit() && b[2] == b'-'
}

fn is_comment(line: &str) -> bool {
    line.starts_with('#') || line.starts_with('!')
}

/// `traceparent` and `tracestate` of a `java.util.Properties` text (the
/// subset `Properties.store` writes: one `key=value` per line, `#`
/// comments, backslash escapes).
fn properties(text: &str) -> (Option<String>, Option<String>) {
    let (mut parent, mut state) = (None, None);
    for line in text.lines() {
        let line = line.trim_start();
        if line.is_empty() || is_comment(line) {
            continue;
        }
        let (key, value) = split_property(line);
        match key.as_str() {
            "traceparent" => parent = Some(value.trim().to_owned()),
            "tracestate" => state = Some(value.trim().to_owned()),
            _ => {}
        }
    }
    (parent, state)
}

/// A Properties line's key and value, unescaped: the key ends at the first
/// unescaped `=`, `:` or whitespace.
fn split_property(line: &str) -> (String, String) {
    let mut key = String::new();
    let mut chars = line.chars();
    let mut escaped = false;
    for c in chars.by_ref() {
        if escaped {
            key.push(unescape(c));
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '=' || c == ':' || c.is_whitespace() {
            break;
        } else {
            key.push(c);
        }
    }
    let rest = chars.as_str().trim_start();
    let rest = rest.strip_prefix(['=', ':']).map_or(rest, str::trim_start);
    let mut value = String::new();
    let mut escaped = false;
    for c in rest.chars() {
        if escaped {
            value.push(unescape(c));
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else {
            value.push(c);
        }
    }
    (key, value)
}

fn unescape(c: char) -> char {
    match c {
        't' => '\t',
        'n' => '\n',
        'r' => '\r',
        'f' => '\u{c}',
        other => other,
    }
}

/// W3C Trace Context `traceparent` (section 3.2): `version-traceid-
/// parentid-flags`, lower-case hex; version `ff` is invalid; version `00`
/// is exactly 55 characters; a later version may append `-…`; the trace id
/// and parent id are not all zeros.
pub fn valid_traceparent(text: &str) -> bool {
    let b = text.as_bytes();
    let hex = |s: &[u8]| {
        s.iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
    };
    if b.len() < 55 || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
        return false;
    }
    let (version, trace_id, parent_id, flags) = (&b[0..2], &b[3..35], &b[36..52], &b[53..55]);
    if !(hex(version) && hex(trace_id) && hex(parent_id) && hex(flags)) {
        return false;
    }
    if version == b"ff" {
        return false;
    }
    if version == b"00" && b.len() != 55 {
        return false;
    }
    if b.len() > 55 && b[55] != b'-' {
        return false;
    }
    trace_id.iter().any(|&c| c != b'0') && parent_id.iter().any(|&c| c != b'0')
}

/// W3C `tracestate`: at most 512 characters of printable ASCII, not empty.
/// (Its list-member grammar is the tracing system's to check: walrelay
/// passes it on as written.)
fn valid_tracestate(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_TRACESTATE
        && text.bytes().all(|b| (0x20..0x7f).contains(&b))
}

#[cfg(test)]
mod tests;
