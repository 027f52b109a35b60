//! TLS for both PostgreSQL connections, with libpq's `sslmode` meanings.
//!
//! | mode | encrypted | server certificate checked | host name checked | no TLS on the server |
//! |---|---|---|---|---|
//! | `disable` | no | — | — | plaintext |
//! | `prefer` (default) | if the server offers it | no | no | plaintext |
//! | `require` | yes | no | no | error |
//! | `verify-ca` | yes | against the CA | no | error |
//! | `verify-full` | yes | against the CA | yes (DNS name or IP) | error |
//!
//! The CA is `postgres.sslrootcert` (PEM), or the system's trust store when
//! it is not set (`verify-full` only: configuration validation refuses
//! `verify-ca` without it, as libpq does, since no host name is checked).
//! As in libpq, Unix-socket connections never use TLS.
//!
//! A client certificate (`postgres.sslcert` + `postgres.sslkey`, the key
//! optionally encrypted with `postgres.sslpassword`) is presented when the
//! server asks for one (`cert` authentication, `clientcert=verify-ca|full`).
//! Unlike libpq there is no default file (`~/.postgresql/postgresql.crt`):
//! only configured files are sent.
//!
//! Invariants:
//! - A mode that asks for encryption never falls back to plaintext: a server
//!   that declines TLS is an error naming the mode, not a silent downgrade.
//! - Certificate and configuration problems are definite errors (retrying
//!   cannot fix them); only I/O during the handshake is transient.
//! - Both connections (replication on [`super::wire`], catalog on
//!   tokio-postgres) verify alike and present the same client certificate:
//!   one function (`apply`) sets verification and certificates on both
//!   contexts. The replication connection's ([`replication_context`]) is
//!   rust-openssl's [`SslConnector`] context minus
//!   `SSL_MODE_RELEASE_BUFFERS`: the walsender sends one TLS record per
//!   message, and releasing the 16 KiB read buffer after each record made
//!   every message a large `malloc`/`free` (and a consolidation of the
//!   allocator's free lists). Handshakes and host-name checks are the same
//!   (`replication_ssl` does what `SslConnector::configure` does).
//! - A client certificate problem (unreadable file, key not matching the
//!   certificate, encrypted key without or with a wrong password) is found
//!   when the connector is built, before any connection, and names the key
//!   to fix ([`TlsError::key`]); the key password is never printed.

use std::path::{Path, PathBuf};

use std::cell::Cell;

use openssl::pkey::{PKey, Private};
use openssl::ssl::{
    Ssl, SslConnector, SslContext, SslContextBuilder, SslMethod, SslMode as OpensslMode,
    SslOptions, SslVerifyMode,
};
use openssl::x509::X509;
use openssl::x509::verify::X509CheckFlags;
use secrecy::{ExposeSecret, SecretString};

use crate::config::SslMode;

/// The TLS settings of a connection.
#[derive(Debug, Clone, Default)]
pub struct TlsSettings {
    pub mode: SslMode,
    /// PEM file of trusted CA certificates; `None` = the system trust store.
    pub root_cert: Option<PathBuf>,
    /// PEM file of the client certificate (chain) to present; with `client_key`.
    pub client_cert: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    pub client_key: Option<PathBuf>,
    /// Password of an encrypted `client_key`. Never printed.
    pub key_password: Option<SecretString>,
    /// What the messages call these settings: the keys to fix.
    pub keys: TlsKeys,
}

/// The names of the TLS settings in messages (and [`TlsError::key`]): the
/// connector's `[postgres]` keys, or where another configuration holds
/// them (the inbox's `sslrootcert` in its URL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsKeys {
    pub root_cert: &'static str,
    pub client_cert: &'static str,
    pub client_key: &'static str,
    pub key_password: &'static str,
}

impl TlsKeys {
    /// The connector's `[postgres]` keys.
    pub const POSTGRES: TlsKeys = TlsKeys {
        root_cert: "postgres.sslrootcert",
        client_cert: "postgres.sslcert",
        client_key: "postgres.sslkey",
        key_password: "postgres.sslpassword",
    };
}

impl Default for TlsKeys {
    fn default() -> TlsKeys {
        TlsKeys::POSTGRES
    }
}

/// A TLS set-up problem (bad CA or client certificate file, OpenSSL failure).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct TlsError {
    /// The configuration key to fix (`postgres.sslkey`), when one is to blame.
    pub key: Option<&'static str>,
    pub message: String,
}

impl TlsError {
    fn new(message: String) -> TlsError {
        TlsError { key: None, message }
    }

    fn of(key: &'static str, message: String) -> TlsError {
        TlsError {
            key: Some(key),
            message,
        }
    }
}

/// The OpenSSL connector for `settings` (the catalog connection through
/// tokio-postgres), or `None` for `sslmode = disable`.
pub fn connector(settings: &TlsSettings) -> Result<Option<SslConnector>, TlsError> {
    if settings.mode == SslMode::Disable {
        return Ok(None);
    }
    let mut builder =
        SslConnector::builder(SslMethod::tls_client()).map_err(|e| openssl("client context", e))?;
    apply(&mut builder, settings)?;
    Ok(Some(builder.build()))
}

/// Sets `cfg`'s `sslmode` as tokio-postgres knows it (`prefer` for the
/// modes that allow plaintext, else `require`) and returns the TLS
/// connector to connect with: [`connector`]'s verification, and with
/// `verify-full` the host name checked. `None` for `sslmode = disable`
/// (connect with `NoTls`; `cfg` says `disable`). Every tokio-postgres
/// session takes its TLS from here: the connector's catalog connection and
/// the inbox's.
pub fn tokio_postgres_tls(
    cfg: &mut tokio_postgres::Config,
    settings: &TlsSettings,
) -> Result<Option<postgres_openssl::MakeTlsConnector>, TlsError> {
    use tokio_postgres::config::SslMode as TokioMode;
    let Some(connector) = connector(settings)? else {
        cfg.ssl_mode(TokioMode::Disable);
        return Ok(None);
    };
    cfg.ssl_mode(if settings.mode.allows_plaintext() {
        TokioMode::Prefer
    } else {
        TokioMode::Require
    });
    let mut tls = postgres_openssl::MakeTlsConnector::new(connector);
    let verify_host_name = settings.mode.verifies_host_name();
    tls.set_callback(move |config, _domain| {
        config.set_verify_hostname(verify_host_name);
        Ok(())
    });
    Ok(Some(tls))
}

/// Whether tokio-postgres failed the TLS negotiation itself (its message for
/// that error kind: a certificate refused, a server without TLS under a mode
/// that needs it), as opposed to the network failing underneath it — a
/// definite error, which retrying cannot fix.
pub fn is_tls_refusal(e: &tokio_postgres::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut io_failure = false;
    while let Some(c) = cause {
        io_failure |= c.downcast_ref::<std::io::Error>().is_some_and(|io| {
            io.get_ref().is_none() // a plain OS error, not a wrapped TLS error
        });
        cause = c.source();
    }
    e.to_string().starts_with("error performing TLS handshake") && !io_failure
}

/// The OpenSSL context of the replication connection, or `None` for
/// `sslmode = disable`: what [`SslConnector::builder`] sets (options, modes,
/// cipher list, the system's trust store) except `SSL_MODE_RELEASE_BUFFERS`,
/// then `apply` as for [`connector`].
pub fn replication_context(settings: &TlsSettings) -> Result<Option<SslContext>, TlsError> {
    if settings.mode == SslMode::Disable {
        return Ok(None);
    }
    let mut builder = replication_base().map_err(|e| openssl("client context", e))?;
    apply(&mut builder, settings)?;
    Ok(Some(builder.build()))
}

/// [`SslConnector::builder`]'s context without `SSL_MODE_RELEASE_BUFFERS`.
fn replication_base() -> Result<SslContextBuilder, openssl::error::ErrorStack> {
    let mut builder = SslContextBuilder::new(SslMethod::tls_client())?;
    builder.set_options(
        (SslOptions::ALL
            | SslOptions::NO_COMPRESSION
            | SslOptions::NO_SSLV2
            | SslOptions::NO_SSLV3
            | SslOptions::SINGLE_DH_USE
            | SslOptions::SINGLE_ECDH_USE)
            & !SslOptions::DONT_INSERT_EMPTY_FRAGMENTS,
    );
    builder.set_mode(
        OpensslMode::AUTO_RETRY
            | OpensslMode::ACCEPT_MOVING_WRITE_BUFFER
            | OpensslMode::ENABLE_PARTIAL_WRITE,
    );
    builder.set_cipher_list(
        "DEFAULT:!aNULL:!eNULL:!MD5:!3DES:!DES:!RC4:!IDEA:!SEED:!aDSS:!SRP:!PSK",
    )?;
    builder.set_default_verify_paths()?;
    Ok(builder)
}

fn openssl(what: &str, e: openssl::error::ErrorStack) -> TlsError {
    TlsError::new(format!("cannot set up TLS for PostgreSQL ({what}): {e}"))
}

/// Verification and the client certificate, the same on both connections.
fn apply(builder: &mut SslContextBuilder, settings: &TlsSettings) -> Result<(), TlsError> {
    if settings.mode.verifies_certificate() {
        if let Some(path) = &settings.root_cert {
            load_root_cert(builder, path, settings.keys.root_cert)?;
        }
        builder.set_verify(SslVerifyMode::PEER);
    } else {
        builder.set_verify(SslVerifyMode::NONE);
    }
    load_client_certificate(builder, settings)
}

/// Loads the client certificate and its key, checking that they belong
/// together and that an encrypted key opens with the password.
fn load_client_certificate(
    builder: &mut SslContextBuilder,
    settings: &TlsSettings,
) -> Result<(), TlsError> {
    let TlsKeys {
        client_cert: cert_name,
        client_key: key_name,
        ..
    } = settings.keys;
    let (cert_path, key_path) = match (&settings.client_cert, &settings.client_key) {
        (None, None) => return Ok(()),
        (Some(_), None) => {
            return Err(TlsError::of(
                key_name,
                format!("{key_name} is required with {cert_name}"),
            ));
        }
        (None, Some(_)) => {
            return Err(TlsError::of(
                cert_name,
                format!("{cert_name} is required with {key_name}"),
            ));
        }
        (Some(cert), Some(key)) => (cert, key),
    };
    let shown = cert_path.display();
    let pem = std::fs::read(cert_path)
        .map_err(|e| TlsError::of(cert_name, format!("cannot read {cert_name} {shown}: {e}")))?;
    let chain = X509::stack_from_pem(&pem).map_err(|e| {
        TlsError::of(
            cert_name,
            format!("{cert_name} {shown} is not a PEM certificate file: {e}"),
        )
    })?;
    let mut chain = chain.into_iter();
    let Some(leaf) = chain.next() else {
        return Err(TlsError::of(
            cert_name,
            format!("{cert_name} {shown} holds no certificate"),
        ));
    };
    let use_error = |e: openssl::error::ErrorStack| {
        TlsError::of(
            cert_name,
            format!("cannot use the certificate in {cert_name} {shown}: {e}"),
        )
    };
    builder.set_certificate(&leaf).map_err(use_error)?;
    for intermediate in chain {
        builder
            .add_extra_chain_cert(intermediate)
            .map_err(use_error)?;
    }
    let key = load_private_key(key_path, settings.key_password.as_ref(), settings.keys)?;
    // OpenSSL refuses a key of another certificate in either call.
    let mismatch = |e: openssl::error::ErrorStack| {
        TlsError::of(
            key_name,
            format!(
                "the private key in {key_name} {} does not belong to the certificate in \
                 {cert_name} {shown}; give the key the certificate was issued for \
                 (OpenSSL: {e})",
                key_path.display()
            ),
        )
    };
    builder.set_private_key(&key).map_err(mismatch)?;
    builder.check_private_key().map_err(mismatch)
}

/// Reads a PEM private key, decrypting it with `password` when it is
/// encrypted. OpenSSL asks for a password through a callback only when the
/// key needs one, which tells "encrypted, no password" and "wrong password"
/// apart from "not a key" (and keeps OpenSSL from prompting on a terminal).
fn load_private_key(
    path: &Path,
    password: Option<&SecretString>,
    keys: TlsKeys,
) -> Result<PKey<Private>, TlsError> {
    let TlsKeys {
        client_key: key_name,
        key_password: password_name,
        ..
    } = keys;
    let shown = path.display();
    let pem = std::fs::read(path)
        .map_err(|e| TlsError::of(key_name, format!("cannot read {key_name} {shown}: {e}")))?;
    let asked = Cell::new(false);
    let parsed = PKey::private_key_from_pem_callback(&pem, |buf| {
        asked.set(true);
        let Some(password) = password else {
            return Ok(0);
        };
        let bytes = password.expose_secret().as_bytes();
        let Some(dest) = buf.get_mut(..bytes.len()) else {
            return Ok(0); // longer than OpenSSL's buffer: cannot be right
        };
        dest.copy_from_slice(bytes);
        Ok(bytes.len())
    });
    match parsed {
        Ok(key) => Ok(key),
        Err(_) if asked.get() && password.is_none() => Err(TlsError::of(
            password_name,
            format!(
                "{key_name} {shown} is encrypted; set {password_name} to its password \
                 (e.g. \"${{file:/run/secrets/pg_key_password}}\")"
            ),
        )),
        Err(_) if asked.get() => Err(TlsError::of(
            password_name,
            format!(
                "{password_name} does not decrypt {key_name} {shown}; check the \
                 password (it is not shown)"
            ),
        )),
        Err(e) => Err(TlsError::of(
            key_name,
            format!("{key_name} {shown} is not a PEM private key file: {e}"),
        )),
    }
}

fn load_root_cert(
    builder: &mut SslContextBuilder,
    path: &Path,
    root_name: &'static str,
) -> Result<(), TlsError> {
    let pem = std::fs::read(path).map_err(|e| {
        TlsError::of(
            root_name,
            format!("cannot read {root_name} {}: {e}", path.display()),
        )
    })?;
    let certs = openssl::x509::X509::stack_from_pem(&pem).map_err(|e| {
        TlsError::of(
            root_name,
            format!(
                "{root_name} {} is not a PEM certificate file: {e}",
                path.display()
            ),
        )
    })?;
    if certs.is_empty() {
        return Err(TlsError::of(
            root_name,
            format!("{root_name} {} holds no certificate", path.display()),
        ));
    }
    let store = builder.cert_store_mut();
    for cert in certs {
        store.add_cert(cert).map_err(|e| {
            TlsError::of(
                root_name,
                format!(
                    "cannot use a certificate from {root_name} {}: {e}",
                    path.display()
                ),
            )
        })?;
    }
    Ok(())
}

/// The OpenSSL handshake of the replication connection to `host`, as
/// `SslConnector::configure().into_ssl(host)` makes it: SNI when `host` is
/// a name, and with `verify-full` the certificate checked against `host`
/// (a DNS name, or an IP address).
pub fn replication_ssl(
    context: &SslContext,
    settings: &TlsSettings,
    host: &str,
) -> Result<Ssl, TlsError> {
    let failed = |e: openssl::error::ErrorStack| {
        TlsError::new(format!("cannot set up TLS for PostgreSQL at {host}: {e}"))
    };
    let mut ssl = Ssl::new(context).map_err(failed)?;
    let ip = host.parse::<std::net::IpAddr>();
    if ip.is_err() {
        ssl.set_hostname(host).map_err(failed)?;
    }
    if settings.mode.verifies_host_name() {
        let param = ssl.param_mut();
        param.set_hostflags(X509CheckFlags::NO_PARTIAL_WILDCARDS);
        match ip {
            Ok(ip) => param.set_ip(ip),
            Err(_) => param.set_host(host),
        }
        .map_err(failed)?;
    }
    Ok(ssl)
}

#[cfg(test)]
mod tests;

/// `e` and its causes, `: `-joined, each cause once: tokio-postgres prints
/// only the first (`error performing TLS handshake`), and why — a refused
/// certificate, a server without TLS — is in its causes. For both
/// connections' errors, the connector's and the inbox's.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}
