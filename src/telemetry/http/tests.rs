use std::sync::atomic::Ordering;

use super::*;

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
    let metrics = get("/metrics");
    assert!(
        metrics.contains("walrelay_streaming{connector=\"c1\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{metrics}"
    );
    assert!(get("/nope").starts_with("HTTP/1.0 404"));
}
