//! Health and metrics for operators: `/healthz` and `/metrics` (Prometheus
//! text format) on the `[health] listen` address.
//!
//! The relay updates a shared [`Metrics`] of atomics; nothing here feeds back
//! into the data path (metrics are observations, not control). All metric
//! names are in [`Metrics::render`], in one place, Prometheus-style.
//!
//! The slot gauges come from `pg_replication_slots`, polled by the relay:
//! - `walrelay_slot_lag_bytes`: WAL written since the slot's
//!   `confirmed_flush_lsn` — how far the connector is behind.
//! - `walrelay_slot_retained_wal_bytes`: WAL the slot holds back from
//!   recycling (`pg_current_wal_lsn() - restart_lsn`) — what fills the disk.
//! - `walrelay_slot_safe_wal_bytes`: how much more WAL may be written before
//!   the slot is lost (`safe_wal_size`; absent without `max_slot_wal_keep_size`).
//! - `walrelay_slot_wal_status`: 1 for the current `wal_status`.
//! - `walrelay_slot_poll_age_seconds`: how old those readings are. The slot is
//!   read every 5 s for the life of the connector, also while no session
//!   runs (Kafka down); a growing age means PostgreSQL is not answering.
//!
//! Health: 200 while a session is streaming and Kafka acknowledged something
//! (or had nothing to acknowledge) within the stall window; 503 with the
//! reason otherwise.
//!
//! Logs (the binary's `tracing` setup, see [`log_filter`], [`use_ansi`],
//! [`Lossy`]):
//! - Writing a log line never fails and never panics: when stderr's reader is
//!   gone (a closed pipe, a restarting log shipper) the line is dropped. A
//!   sidecar must still stop cleanly when signalled, whatever happened to its
//!   log reader.
//! - ANSI colours only on a terminal, never with `NO_COLOR` set.
//! - A `WALRELAY_LOG` that would hide the logs by mistake is refused, naming
//!   the variable and the problem (the binary exits 2, like a bad config).

use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub mod outage;

/// Counters and gauges shared by the relay and the HTTP endpoint.
#[derive(Debug)]
pub struct Metrics {
    started: Instant,
    /// `connector="<name>"`, on every sample.
    labels: String,
    pub streaming: AtomicBool,
    /// An initial snapshot is being read and published.
    pub snapshot_running: AtomicBool,
    /// Snapshot rows read (this process).
    pub snapshot_rows: AtomicU64,
    /// Snapshot tables not yet completely in Kafka.
    pub snapshot_tables_remaining: AtomicU64,
    /// How long the last completed snapshot took, in milliseconds.
    pub snapshot_duration_ms: AtomicU64,
    pub records_published: AtomicU64,
    pub records_acked: AtomicU64,
    pub transactions: AtomicU64,
    pub updates_ignored: AtomicU64,
    pub rows_unclaimed: AtomicU64,
    pub sessions_started: AtomicU64,
    pub session_errors: AtomicU64,
    pub confirmed_lsn: AtomicU64,
    pub received_lsn: AtomicU64,
    pub in_flight_records: AtomicU64,
    pub in_flight_bytes: AtomicU64,
    pub slot_lag_bytes: AtomicI64,
    pub slot_retained_bytes: AtomicI64,
    pub slot_safe_wal_bytes: AtomicI64,
    /// Milliseconds since `started` of the last Kafka acknowledgement, or of
    /// the last moment nothing was waiting for one.
    pub kafka_progress_ms: AtomicU64,
    /// Milliseconds since `started` of the last successful slot read, plus
    /// one (0: never read).
    slot_polled_ms: AtomicU64,
    slot_wal_status: Mutex<String>,
    last_error: Mutex<String>,
}

impl Metrics {
    /// Metrics labelled with the connector's name (validated by the config
    /// to `[A-Za-z0-9._-]`, so it needs no escaping).
    pub fn new(connector: &str) -> Self {
        Metrics {
            started: Instant::now(),
            labels: format!("connector=\"{connector}\""),
            streaming: AtomicBool::new(false),
            snapshot_running: AtomicBool::new(false),
            snapshot_rows: AtomicU64::new(0),
            snapshot_tables_remaining: AtomicU64::new(0),
            snapshot_duration_ms: AtomicU64::new(0),
            records_published: AtomicU64::new(0),
            records_acked: AtomicU64::new(0),
            transactions: AtomicU64::new(0),
            updates_ignored: AtomicU64::new(0),
            rows_unclaimed: AtomicU64::new(0),
            sessions_started: AtomicU64::new(0),
            session_errors: AtomicU64::new(0),
            confirmed_lsn: AtomicU64::new(0),
            received_lsn: AtomicU64::new(0),
            in_flight_records: AtomicU64::new(0),
            in_flight_bytes: AtomicU64::new(0),
            slot_lag_bytes: AtomicI64::new(-1),
            slot_retained_bytes: AtomicI64::new(-1),
            slot_safe_wal_bytes: AtomicI64::new(-1),
            kafka_progress_ms: AtomicU64::new(0),
            slot_polled_ms: AtomicU64::new(0),
            slot_wal_status: Mutex::new(String::new()),
            last_error: Mutex::new(String::new()),
        }
    }
}

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
pub fn log_filter(value: Option<&str>) -> Result<tracing_subscriber::EnvFilter, String> {
    use tracing_subscriber::filter::LevelFilter;
    let text = value.map(str::trim).filter(|v| !v.is_empty());
    let Some(text) = text else {
        return Ok(tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER));
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
        .map_err(|e| refuse(e.to_string()))
}

/// Whether to colour log lines: only on a terminal, and never when
/// `NO_COLOR` is set to a non-empty value (<https://no-color.org>).
pub fn use_ansi(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// How long Kafka may leave records unacknowledged before health says so.
pub const STALL: Duration = Duration::from_secs(10);

impl Metrics {
    /// Kafka made progress (or nothing waits for it) now.
    pub fn kafka_progress(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.kafka_progress_ms.store(ms, Ordering::Relaxed);
    }

    /// The slot's gauges were just read from PostgreSQL.
    pub fn slot_polled(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.slot_polled_ms
            .store(ms.saturating_add(1), Ordering::Relaxed);
    }

    /// Seconds since the slot's gauges were last read, if ever.
    pub fn slot_poll_age(&self) -> Option<Duration> {
        let polled = self.slot_polled_ms.load(Ordering::Relaxed);
        (polled > 0).then(|| {
            self.started
                .elapsed()
                .saturating_sub(Duration::from_millis(polled - 1))
        })
    }

    pub fn set_wal_status(&self, status: &str) {
        if let Ok(mut s) = self.slot_wal_status.lock() {
            status.clone_into(&mut s);
        }
    }

    pub fn set_error(&self, error: &str) {
        if let Ok(mut s) = self.last_error.lock() {
            error.clone_into(&mut s);
        }
    }

    /// `Ok(reason)` when healthy, `Err(reason)` when not.
    pub fn health(&self) -> Result<String, String> {
        if !self.streaming.load(Ordering::Relaxed) {
            let err = self
                .last_error
                .lock()
                .map(|e| e.clone())
                .unwrap_or_default();
            return Err(if err.is_empty() {
                "not streaming yet".to_owned()
            } else {
                format!("not streaming: {err}")
            });
        }
        let since = self.started.elapsed().as_millis() as u64;
        let last = self.kafka_progress_ms.load(Ordering::Relaxed);
        let stalled = Duration::from_millis(since.saturating_sub(last));
        if stalled > STALL {
            return Err(format!(
                "Kafka has not acknowledged records for {}s",
                stalled.as_secs()
            ));
        }
        if self
            .slot_wal_status
            .lock()
            .map(|s| s.as_str() == "lost")
            .unwrap_or(false)
        {
            return Err("replication slot is lost".to_owned());
        }
        Ok(if self.snapshot_running.load(Ordering::Relaxed) {
            "snapshotting".to_owned()
        } else {
            "streaming".to_owned()
        })
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut out = String::with_capacity(2048);
        let labels = self.labels.clone();
        let mut metric = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{labels}}} {value}"
            );
        };
        let u = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
        let i = |a: &AtomicI64| a.load(Ordering::Relaxed).to_string();
        metric(
            "walrelay_up",
            "gauge",
            "1 while a replication session is streaming (or taking the initial snapshot).",
            u8::from(self.streaming.load(Ordering::Relaxed)).to_string(),
        );
        metric(
            "walrelay_snapshot_running",
            "gauge",
            "1 while the initial snapshot is read and published.",
            u8::from(self.snapshot_running.load(Ordering::Relaxed)).to_string(),
        );
        metric(
            "walrelay_snapshot_rows_total",
            "counter",
            "Rows read by the initial snapshot (each one published as a record).",
            u(&self.snapshot_rows),
        );
        metric(
            "walrelay_snapshot_tables_remaining",
            "gauge",
            "Snapshot tables not yet completely acknowledged by Kafka.",
            u(&self.snapshot_tables_remaining),
        );
        metric(
            "walrelay_snapshot_duration_seconds",
            "gauge",
            "How long the last completed initial snapshot took (0: none completed in this process).",
            format!(
                "{:.3}",
                self.snapshot_duration_ms.load(Ordering::Relaxed) as f64 / 1000.0
            ),
        );
        metric(
            "walrelay_records_published_total",
            "counter",
            "Records handed to the Kafka producer.",
            u(&self.records_published),
        );
        metric(
            "walrelay_records_acked_total",
            "counter",
            "Records Kafka acknowledged (acks=all).",
            u(&self.records_acked),
        );
        metric(
            "walrelay_transactions_total",
            "counter",
            "Committed transactions received from PostgreSQL.",
            u(&self.transactions),
        );
        metric(
            "walrelay_updates_ignored_total",
            "counter",
            "Updates of outbox rows, not published (on_update = warn or skip).",
            u(&self.updates_ignored),
        );
        metric(
            "walrelay_rows_unclaimed_total",
            "counter",
            "Rows inserted into published tables that no [[outbox]] section claims, not published.",
            u(&self.rows_unclaimed),
        );
        metric(
            "walrelay_sessions_started_total",
            "counter",
            "Replication sessions that reached streaming.",
            u(&self.sessions_started),
        );
        metric(
            "walrelay_session_errors_total",
            "counter",
            "Sessions ended by an error (retried or not).",
            u(&self.session_errors),
        );
        metric(
            "walrelay_confirmed_lsn",
            "gauge",
            "Position stored and reported to PostgreSQL, as a 64-bit LSN.",
            u(&self.confirmed_lsn),
        );
        metric(
            "walrelay_received_lsn",
            "gauge",
            "Newest WAL position received from PostgreSQL.",
            u(&self.received_lsn),
        );
        metric(
            "walrelay_in_flight_records",
            "gauge",
            "Records sent to Kafka and not yet acknowledged.",
            u(&self.in_flight_records),
        );
        metric(
            "walrelay_in_flight_bytes",
            "gauge",
            "Bytes sent to Kafka and not yet acknowledged.",
            u(&self.in_flight_bytes),
        );
        metric(
            "walrelay_slot_lag_bytes",
            "gauge",
            "WAL written since the slot's confirmed_flush_lsn (-1 unknown).",
            i(&self.slot_lag_bytes),
        );
        metric(
            "walrelay_slot_retained_wal_bytes",
            "gauge",
            "WAL the slot keeps from being recycled (-1 unknown).",
            i(&self.slot_retained_bytes),
        );
        metric(
            "walrelay_slot_safe_wal_bytes",
            "gauge",
            "WAL that may still be written before the slot is lost (-1 unlimited or unknown).",
            i(&self.slot_safe_wal_bytes),
        );
        if let Some(age) = self.slot_poll_age() {
            metric(
                "walrelay_slot_poll_age_seconds",
                "gauge",
                "Seconds since the slot gauges were last read from PostgreSQL (absent until the first read).",
                format!("{:.3}", age.as_secs_f64()),
            );
        }
        let status = self
            .slot_wal_status
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "# HELP walrelay_slot_wal_status 1 for the slot's current wal_status.\n# TYPE walrelay_slot_wal_status gauge"
        );
        for s in ["reserved", "extended", "unreserved", "lost"] {
            let _ = writeln!(
                out,
                "walrelay_slot_wal_status{{{},status=\"{s}\"}} {}",
                self.labels,
                u8::from(status == s)
            );
        }
        let ok = u8::from(self.health().is_ok());
        let _ = writeln!(
            out,
            "# HELP walrelay_healthy 1 when /healthz answers 200.\n# TYPE walrelay_healthy gauge\nwalrelay_healthy{{{}}} {ok}",
            self.labels
        );
        out
    }
}

/// Serves `/healthz` and `/metrics` on a dedicated thread until the process
/// exits. Returns the bound address (useful with port 0).
pub fn serve(
    listen: std::net::SocketAddr,
    metrics: std::sync::Arc<Metrics>,
) -> Result<std::net::SocketAddr, String> {
    let server = tiny_http::Server::http(listen)
        .map_err(|e| format!("cannot listen on {listen} for /healthz and /metrics: {e}"))?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| format!("{listen} is not an IP address"))?;
    std::thread::Builder::new()
        .name("walrelay-health".into())
        .spawn(move || {
            for request in server.incoming_requests() {
                let (code, body, content_type) = match request.url() {
                    "/healthz" => match metrics.health() {
                        Ok(r) => (200, format!("ok: {r}\n"), "text/plain"),
                        Err(r) => (503, format!("unhealthy: {r}\n"), "text/plain"),
                    },
                    "/metrics" => (200, metrics.render(), "text/plain; version=0.0.4"),
                    _ => (404, "try /healthz or /metrics\n".to_owned(), "text/plain"),
                };
                let mut response = tiny_http::Response::from_string(body).with_status_code(code);
                if let Ok(h) =
                    tiny_http::Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes())
                {
                    response = response.with_header(h);
                }
                let _ = request.respond(response);
            }
        })
        .map_err(|e| format!("cannot start the health thread: {e}"))?;
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_follows_streaming_and_kafka_progress() {
        let m = Metrics::new("c1");
        assert!(m.health().is_err());
        m.set_error("waiting for PostgreSQL");
        assert!(m.health().unwrap_err().contains("waiting for PostgreSQL"));
        m.streaming.store(true, Ordering::Relaxed);
        m.kafka_progress();
        assert_eq!(m.health(), Ok("streaming".into()));
        m.set_wal_status("lost");
        assert!(m.health().is_err());
    }

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::new("c1");
        m.records_published.store(7, Ordering::Relaxed);
        m.slot_lag_bytes.store(4096, Ordering::Relaxed);
        m.set_wal_status("extended");
        let text = m.render();
        assert!(text.contains(
            "# TYPE walrelay_records_published_total counter\nwalrelay_records_published_total{connector=\"c1\"} 7\n"
        ));
        assert!(text.contains("walrelay_slot_lag_bytes{connector=\"c1\"} 4096\n"));
        assert!(
            text.contains("walrelay_slot_wal_status{connector=\"c1\",status=\"extended\"} 1\n")
        );
        assert!(text.contains("walrelay_slot_wal_status{connector=\"c1\",status=\"lost\"} 0\n"));
        assert!(
            !text.contains("walrelay_slot_poll_age_seconds"),
            "no age before the first read"
        );
        m.slot_polled();
        assert!(
            m.render()
                .contains("walrelay_slot_poll_age_seconds{connector=\"c1\"} 0.")
        );
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').unwrap();
            assert!(
                series.starts_with("walrelay_") && series.contains("{connector=\"c1\""),
                "{line}"
            );
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn serves_over_http() {
        let m = std::sync::Arc::new(Metrics::new("c1"));
        let addr = serve("127.0.0.1:0".parse().unwrap(), m.clone()).unwrap();
        let get = |path: &str| {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        assert!(get("/healthz").starts_with("HTTP/1.0 503"));
        m.streaming.store(true, Ordering::Relaxed);
        m.kafka_progress();
        assert!(get("/healthz").starts_with("HTTP/1.0 200"));
        assert!(get("/metrics").contains("walrelay_up{connector=\"c1\"} 1"));
        assert!(get("/nope").starts_with("HTTP/1.0 404"));
    }
    #[test]
    fn lossy_writer_swallows_a_broken_pipe() {
        use std::io::Write;
        struct Broken;
        impl io::Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::from(io::ErrorKind::BrokenPipe))
            }
            fn flush(&mut self) -> io::Result<()> {
                Err(io::Error::from(io::ErrorKind::BrokenPipe))
            }
        }
        let mut w = Lossy(Broken);
        assert_eq!(w.write(b"a log line\n").unwrap(), 11);
        assert!(w.flush().is_ok());
        let mut ok = Lossy(Vec::new());
        write!(ok, "kept").unwrap();
        assert_eq!(ok.0, b"kept");
    }

    #[test]
    fn log_filter_refuses_what_would_hide_the_logs() {
        for good in [
            None,
            Some(""),
            Some("  "),
            Some("debug"),
            Some("INFO"),
            Some("info,walrelay=debug"),
            Some("warn,walrelay::sink=trace"),
            Some("walrelay"),
            Some("off"),
        ] {
            assert!(log_filter(good).is_ok(), "{good:?}");
        }
        for bad in ["debg", "info,walrelay=verbose", "inof,walrelay=debug", "[{"] {
            let err = log_filter(Some(bad)).unwrap_err();
            assert!(err.starts_with("WALRELAY_LOG="), "{err}");
            assert!(err.contains(&format!("{bad:?}")), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(use_ansi(true, None));
        assert!(use_ansi(true, Some(OsStr::new(""))));
        assert!(!use_ansi(true, Some(OsStr::new("1"))));
        assert!(!use_ansi(false, None));
    }
}
