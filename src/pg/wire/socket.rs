//! The socket under the connection: TCP (with dead-peer detection:
//! keepalives and a TCP user timeout) or Unix, and TLS negotiated on it as
//! `sslmode` asks, a failed handshake said in words.

use std::time::Duration;

use bytes::BytesMut;
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::pg::tls::{self, TlsSettings};

use super::ConnectParams;
use super::error::WireError;

pub(super) trait Socket: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Socket for T {}

/// Asks the server for TLS (SSLRequest) when `sslmode` wants it, and
/// returns the socket to speak the protocol on: encrypted, or plaintext when
/// the mode allows it (see [`super::tls`]).
pub(super) async fn negotiate_tls(
    mut tcp: TcpStream,
    params: &ConnectParams,
) -> Result<Box<dyn Socket>, WireError> {
    let settings = &params.tls;
    let tls_error = |reason: String| WireError::Tls {
        address: params.address(),
        mode: settings.mode.as_str(),
        reason,
    };
    let Some(context) = tls::replication_context(settings).map_err(|e| tls_error(e.message))?
    else {
        return Ok(Box::new(tcp));
    };
    let io = |context| move |source| WireError::Io { context, source };
    let mut request = BytesMut::with_capacity(8);
    frontend::ssl_request(&mut request);
    tcp.write_all(&request)
        .await
        .map_err(io("asking for TLS"))?;
    let answer = tcp.read_u8().await.map_err(io("asking for TLS"))?;
    match answer {
        b'S' => {}
        b'N' if settings.mode.allows_plaintext() => return Ok(Box::new(tcp)),
        b'N' => {
            return Err(tls_error(
                "the server does not accept TLS connections; enable ssl on the server, or set \
                 postgres.sslmode = \"prefer\" to allow plaintext"
                    .into(),
            ));
        }
        other => {
            return Err(WireError::Protocol(format!(
                "unexpected answer {:?} to SSLRequest",
                other as char
            )));
        }
    }
    let ssl =
        tls::replication_ssl(&context, settings, &params.host).map_err(|e| tls_error(e.message))?;
    let mut stream = tokio_openssl::SslStream::new(ssl, tcp)
        .map_err(|e| tls_error(format!("cannot start the handshake: {e}")))?;
    match std::pin::Pin::new(&mut stream).connect().await {
        Ok(()) => Ok(Box::new(stream)),
        Err(e) => {
            let verify = stream.ssl().verify_result();
            match e.into_io_error() {
                // The connection broke mid-handshake: worth retrying.
                Ok(source) => Err(WireError::Io {
                    context: "the TLS handshake",
                    source,
                }),
                Err(e) => Err(tls_error(describe_handshake_error(&e, verify, settings))),
            }
        }
    }
}

/// Why a handshake failed, with what to do about a refused certificate.
pub(super) fn describe_handshake_error(
    e: &openssl::ssl::Error,
    verify: openssl::x509::X509VerifyResult,
    settings: &TlsSettings,
) -> String {
    match (verify.as_raw() != 0).then_some(verify) {
        Some(result) => format!(
            "the server's certificate was refused: {} — {}",
            result.error_string(),
            if settings.mode.verifies_host_name() {
                "check that postgres.sslrootcert holds the CA that signed it and that the \
                 certificate names postgres.host"
            } else {
                "check that postgres.sslrootcert holds the CA that signed it"
            }
        ),
        None => format!("the TLS handshake failed: {e}"),
    }
}

/// TCP keepalives (probe after 30 s idle, every 10 s, 3 tries) and a 60 s
/// TCP user timeout (unacknowledged data): the kernel's own ways to notice a
/// peer that vanished without closing the connection, beside the relay's
/// receive timeout. Best effort: a platform without them keeps the defaults.
pub(super) fn set_dead_peer_detection(s: &TcpStream) {
    let socket = socket2::SockRef::from(s);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(30))
        .with_interval(Duration::from_secs(10))
        .with_retries(3);
    if let Err(e) = socket.set_tcp_keepalive(&keepalive) {
        tracing::debug!(error = %e, "cannot enable TCP keepalives");
    }
    if let Err(e) = socket.set_tcp_user_timeout(Some(Duration::from_secs(60))) {
        tracing::debug!(error = %e, "cannot set the TCP user timeout");
    }
}
