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
mod tests;
