//! The connector's name on every log line.
//!
//! Several sidecars often share one log pipeline; their lines must say which
//! connector wrote them. Every command runs inside one span,
//! `walrelay{connector=<name>}` ([`RootSpan::open`]): text lines show it
//! before the target, JSON lines as `"span"`/`"spans"` objects with a
//! `connector` field.
//!
//! Invariants:
//! - The span is entered on the thread that runs the command, where every
//!   tokio task runs too (the runtime is current-thread). Lines logged on
//!   any other thread — tokio's blocking pool, the health server, the
//!   callbacks librdkafka makes from its own threads (its log lines and
//!   errors, of every client, the offset store's included) — have no span
//!   of their own; [`InConnectorSpan`] formats them inside the root span, so
//!   no thread, present or future, can forget to carry the name.
//! - The span is enabled whatever `WALRELAY_LOG` says: the filter always
//!   enables its target ([`ROOT_SPAN_TARGET`], see `telemetry::log_filter`),
//!   so `WALRELAY_LOG=warn` or `walrelay::sink=trace` cannot drop the name.

use std::fmt;
use std::sync::{Arc, OnceLock};

use tracing::{Event, Span, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The target of the root span. `log_filter` always enables it; no event
/// is logged with it.
pub(crate) const ROOT_SPAN_TARGET: &str = "walrelay::connector";

/// The connector's span, shared between the log formatter (set up first)
/// and the command (which opens the span once logging works).
#[derive(Debug, Clone, Default)]
pub struct RootSpan(Arc<OnceLock<Span>>);

impl RootSpan {
    /// Wraps the event formatter `inner` so that a line logged outside any
    /// span is formatted inside the root span, once [`RootSpan::open`] has
    /// been called.
    pub fn format<F>(&self, inner: F) -> InConnectorSpan<F> {
        InConnectorSpan {
            inner,
            root: self.clone(),
        }
    }

    /// Creates the span `walrelay{connector=<connector>}` and makes it the
    /// root of every line; returns it for the caller to enter. Call it after
    /// the subscriber is installed (a span created before is disabled). A
    /// second call returns the first span.
    pub fn open(&self, connector: &str) -> Span {
        self.0
            .get_or_init(|| {
                tracing::error_span!(target: ROOT_SPAN_TARGET, "walrelay", connector = %connector)
            })
            .clone()
    }
}

/// An event formatter that formats events logged outside any span inside
/// the [`RootSpan`] (see the module documentation).
#[derive(Debug)]
pub struct InConnectorSpan<F> {
    inner: F,
    root: RootSpan,
}

impl<S, N, F> FormatEvent<S, N> for InConnectorSpan<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        match self.root.0.get() {
            Some(root) if event.is_contextual() && ctx.lookup_current().is_none() => {
                // Entering only pushes the span on this thread's stack of
                // current spans (the formatter reads it live); nothing is
                // logged, and the guard pops it after the line is formatted.
                let _in_root = root.enter();
                self.inner.format_event(ctx, writer, event)
            }
            _ => self.inner.format_event(ctx, writer, event),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::Mutex;

    /// Collects what the subscriber writes.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Logs one line on this thread inside the root span, one on another
    /// thread (no span there) and one before the span exists; returns the
    /// output's lines.
    fn log_three_lines(json: bool) -> Vec<String> {
        let buffer = Buffer::default();
        let root = RootSpan::default();
        // Only this module's events: the root span has a target of its own.
        let filter = crate::telemetry::log_filter(Some("walrelay::telemetry=warn")).unwrap();
        let writer = {
            let buffer = buffer.clone();
            move || buffer.clone()
        };
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(writer);
        let dispatch = if json {
            tracing::Dispatch::new(builder.json().map_event_format(|f| root.format(f)).finish())
        } else {
            tracing::Dispatch::new(builder.map_event_format(|f| root.format(f)).finish())
        };
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::warn!("before the span");
            let span = root.open("orders-eu");
            let _in = span.enter();
            tracing::warn!("on the command's thread");
            let dispatch = dispatch.clone();
            std::thread::spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || tracing::warn!("on a thread"))
            })
            .join()
            .unwrap();
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn every_line_after_open_carries_the_connector_on_every_thread() {
        let lines = log_three_lines(false);
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(!lines[0].contains("connector"), "{lines:#?}");
        for line in &lines[1..] {
            assert_eq!(
                line.matches("walrelay{connector=orders-eu}:").count(),
                1,
                "{lines:#?}"
            );
        }

        let lines = log_three_lines(true);
        assert_eq!(lines.len(), 3, "{lines:#?}");
        for (i, line) in lines.iter().enumerate() {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            let spans = value["spans"].as_array().cloned().unwrap_or_default();
            if i == 0 {
                assert!(spans.is_empty(), "{line}");
            } else {
                assert_eq!(spans.len(), 1, "{line}");
                assert_eq!(spans[0]["connector"], "orders-eu", "{line}");
                assert_eq!(value["span"]["connector"], "orders-eu", "{line}");
            }
        }
    }
}
