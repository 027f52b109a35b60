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
//! it is not set. As in libpq, Unix-socket connections never use TLS.
//!
//! Invariants:
//! - A mode that asks for encryption never falls back to plaintext: a server
//!   that declines TLS is an error naming the mode, not a silent downgrade.
//! - Certificate and configuration problems are definite errors (retrying
//!   cannot fix them); only I/O during the handshake is transient.
//! - Both connections (replication on [`super::wire`], catalog on
//!   tokio-postgres) are built from the same [`connector`], so they verify
//!   alike.

use std::path::{Path, PathBuf};

use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};

use crate::config::SslMode;

/// The TLS settings of a connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    /// PEM file of trusted CA certificates; `None` = the system trust store.
    pub root_cert: Option<PathBuf>,
}

/// A TLS set-up problem (bad CA file, OpenSSL failure).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(pub String);

/// The OpenSSL connector for `settings`, or `None` for `sslmode = disable`.
pub fn connector(settings: &TlsSettings) -> Result<Option<SslConnector>, TlsError> {
    if settings.mode == SslMode::Disable {
        return Ok(None);
    }
    let openssl = |what: &str, e: openssl::error::ErrorStack| {
        TlsError(format!("cannot set up TLS for PostgreSQL ({what}): {e}"))
    };
    let mut builder =
        SslConnector::builder(SslMethod::tls_client()).map_err(|e| openssl("client context", e))?;
    if settings.mode.verifies_certificate() {
        if let Some(path) = &settings.root_cert {
            load_root_cert(&mut builder, path)?;
        }
        builder.set_verify(SslVerifyMode::PEER);
    } else {
        builder.set_verify(SslVerifyMode::NONE);
    }
    // Read ahead: fill OpenSSL's record buffer with whatever the socket holds
    // instead of reading each TLS record in two exact-size `recv`s (header,
    // then body). A walsender streaming small transactions flushes one small
    // record per message; without this, `recv` was half of walrelay's CPU.
    builder.set_read_ahead(true);
    Ok(Some(builder.build()))
}

fn load_root_cert(
    builder: &mut openssl::ssl::SslConnectorBuilder,
    path: &Path,
) -> Result<(), TlsError> {
    let pem = std::fs::read(path).map_err(|e| {
        TlsError(format!(
            "cannot read postgres.sslrootcert {}: {e}",
            path.display()
        ))
    })?;
    let certs = openssl::x509::X509::stack_from_pem(&pem).map_err(|e| {
        TlsError(format!(
            "postgres.sslrootcert {} is not a PEM certificate file: {e}",
            path.display()
        ))
    })?;
    if certs.is_empty() {
        return Err(TlsError(format!(
            "postgres.sslrootcert {} holds no certificate",
            path.display()
        )));
    }
    let store = builder.cert_store_mut();
    for cert in certs {
        store.add_cert(cert).map_err(|e| {
            TlsError(format!(
                "cannot use a certificate from postgres.sslrootcert {}: {e}",
                path.display()
            ))
        })?;
    }
    Ok(())
}

/// The OpenSSL handshake configuration for one connection to `host`.
pub fn configure(
    connector: &SslConnector,
    settings: &TlsSettings,
    host: &str,
) -> Result<openssl::ssl::Ssl, TlsError> {
    connector
        .configure()
        .and_then(|c| {
            c.verify_hostname(settings.mode.verifies_host_name())
                .into_ssl(host)
        })
        .map_err(|e| TlsError(format!("cannot set up TLS for PostgreSQL at {host}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_mean_what_libpq_means() {
        use SslMode::*;
        let table = [
            (Disable, true, false, false),
            (Prefer, true, false, false),
            (Require, false, false, false),
            (VerifyCa, false, true, false),
            (VerifyFull, false, true, true),
        ];
        for (mode, plaintext, cert, host) in table {
            assert_eq!(mode.allows_plaintext(), plaintext, "{mode:?}");
            assert_eq!(mode.verifies_certificate(), cert, "{mode:?}");
            assert_eq!(mode.verifies_host_name(), host, "{mode:?}");
        }
        assert_eq!(SslMode::default(), Prefer);
    }

    #[test]
    fn a_bad_root_cert_file_is_named() {
        let settings = |path: &str| TlsSettings {
            mode: SslMode::VerifyFull,
            root_cert: Some(PathBuf::from(path)),
        };
        let missing = connector(&settings("/nonexistent/ca.pem")).unwrap_err();
        assert!(missing.0.contains("/nonexistent/ca.pem"), "{missing}");
        let dir = std::env::temp_dir().join(format!("walrelay-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let e = connector(&settings(junk.to_str().unwrap())).unwrap_err();
        assert!(e.0.contains("junk.pem"), "{e}");
        assert!(connector(&TlsSettings::default()).unwrap().is_some());
        assert!(
            connector(&TlsSettings {
                mode: SslMode::Disable,
                root_cert: None
            })
            .unwrap()
            .is_none()
        );
    }
}
