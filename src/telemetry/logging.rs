//! The binary's log set-up: the `WALRELAY_LOG` filter, colours, and the
//! stderr writer.
//!
//! Invariants:
//! - Writing a log line never fails and never panics ([`Lossy`]): when
//!   stderr's reader is gone the line is dropped.
//! - ANSI colours only on a terminal, never with `NO_COLOR` set
//!   ([`use_ansi`]).
//! - A `WALRELAY_LOG` that would hide the logs by mistake is refused, naming
//!   the variable and the problem ([`log_filter`]); whatever it says, the
//!   connector's root span stays enabled, so every line names the connector.

use std::io;

use super::root_span::ROOT_SPAN_TARGET;

/// A log writer that drops write errors: `Lossy(std::io::stderr())` keeps a
/// broken pipe on stderr from failing — and, through tracing-subscriber's
/// error report on stderr, from panicking — the code that logs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lossy<W>(pub W);

impl<W: io::Write> io::Write for Lossy<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // All or nothing, as far as the caller can tell: a line that cannot
        // be written is lost, never reported.
        let _ = self.0.write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = self.0.flush();
        Ok(())
    }
}

/// The default log filter when `WALRELAY_LOG` is unset or empty.
pub const DEFAULT_LOG_FILTER: &str = "info";

/// Parses the value of `WALRELAY_LOG` (`None`: unset). Refuses directives
/// that do not parse, and bare words that are neither a level nor a walrelay
/// target (`debg`, `inof`): tracing would read those as a target name and
/// silently show no log at all. The error is one line naming the variable.
/// Whatever it says, the filter enables the connector's [`RootSpan`](super::RootSpan).
pub fn log_filter(value: Option<&str>) -> Result<tracing_subscriber::EnvFilter, String> {
    use tracing_subscriber::filter::{Directive, LevelFilter};
    let root: Directive = format!("{ROOT_SPAN_TARGET}=error")
        .parse()
        .map_err(|e| format!("the root span's log directive: {e}"))?;
    let text = value.map(str::trim).filter(|v| !v.is_empty());
    let Some(text) = text else {
        return Ok(tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER).add_directive(root));
    };
    let refuse = |problem: String| {
        format!(
            "WALRELAY_LOG={text:?} is not a usable log filter: {problem}; use a level (off, error, \
             warn, info, debug, trace) or directives such as \"info,walrelay=debug\", or unset it \
             for \"{DEFAULT_LOG_FILTER}\""
        )
    };
    for directive in text.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let bare = !directive.contains(['=', '[', ':']);
        if bare && directive.parse::<LevelFilter>().is_err() && !directive.starts_with("walrelay") {
            return Err(refuse(format!(
                "{directive:?} is neither a level nor a walrelay target, so it would hide every \
                 log line"
            )));
        }
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(text)
        .map(|filter| filter.add_directive(root))
        .map_err(|e| refuse(e.to_string()))
}

/// Whether to colour log lines: only on a terminal, and never when
/// `NO_COLOR` is set to a non-empty value (<https://no-color.org>).
pub fn use_ansi(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests;
