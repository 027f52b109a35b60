//! The operators' HTTP endpoints: `/healthz` (200 `ok: …` or 503
//! `unhealthy: …`) and `/metrics` (OpenMetrics text), on a thread of their
//! own. The connector serves its [`Metrics`]; `walrelay inbox` serves its
//! own through [`serve_routes`].
//!
//! Invariant: serving is read-only — a request reads the metrics and the
//! health verdict, never changes them.

use super::{Metrics, exposition};

/// Serves `/healthz` and `/metrics` on a dedicated thread until the process
/// exits. Returns the bound address (useful with port 0).
pub fn serve(
    listen: std::net::SocketAddr,
    metrics: std::sync::Arc<Metrics>,
) -> Result<std::net::SocketAddr, String> {
    let for_render = metrics.clone();
    serve_routes(
        listen,
        "walrelay-health",
        move || metrics.health(),
        move || exposition::render(&for_render),
    )
}

/// The HTTP endpoint of a walrelay process (the connector's, the inbox
/// consumer's): `/healthz` answers 200 `ok: …` or 503 `unhealthy: …` from
/// `health`, `/metrics` the OpenMetrics text from `render`, on a dedicated
/// thread named `thread` until the process exits. Returns the bound address.
pub fn serve_routes(
    listen: std::net::SocketAddr,
    thread: &str,
    health: impl Fn() -> Result<String, String> + Send + 'static,
    render: impl Fn() -> String + Send + 'static,
) -> Result<std::net::SocketAddr, String> {
    let server = tiny_http::Server::http(listen)
        .map_err(|e| format!("cannot listen on {listen} for /healthz and /metrics: {e}"))?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| format!("{listen} is not an IP address"))?;
    std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || {
            for request in server.incoming_requests() {
                let (code, body, content_type) = match request.url() {
                    "/healthz" => match health() {
                        Ok(r) => (200, format!("ok: {r}\n"), "text/plain; charset=utf-8"),
                        Err(r) => (
                            503,
                            format!("unhealthy: {r}\n"),
                            "text/plain; charset=utf-8",
                        ),
                    },
                    "/metrics" => (200, render(), exposition::CONTENT_TYPE),
                    _ => (
                        404,
                        "try /healthz or /metrics\n".to_owned(),
                        "text/plain; charset=utf-8",
                    ),
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
mod tests;
