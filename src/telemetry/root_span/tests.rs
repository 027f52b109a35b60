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
