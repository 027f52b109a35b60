//! `inbox.postgres.url`: a libpq connection URL
//! (`postgres://user:password@host:port/db?sslmode=…`) or key/value string,
//! turned into tokio-postgres's parameters and the TLS settings.
//!
//! Invariants:
//! - `sslmode` means what it means to libpq (and to the connector's
//!   `postgres.sslmode`): `prefer` (the default: TLS when the server offers
//!   it, no certificate check), `disable`, `require` (TLS, no check),
//!   `verify-ca`, `verify-full`. tokio-postgres knows only the first three,
//!   and checks certificates whenever it uses TLS; so the TLS parameters
//!   (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`) are taken out of the URL
//!   here and the TLS itself comes from [`crate::pg::tls`], the code the
//!   connector's own connections use.
//! - A URL that cannot connect whatever the server does (it does not parse,
//!   names no host or no user, an unknown `sslmode`, an unreadable CA file)
//!   is a configuration error when the file is loaded, never a connection
//!   retried forever.
//! - A server certificate refused (or TLS refused under a mode that needs
//!   it) is definite: the consumer stops at start, as the connector does
//!   (`crate::pg::tls::is_tls_refusal`); a server that cannot be reached is
//!   waited for.
//! - Errors never repeat the URL (it holds a password): they name the
//!   parameter.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::config::SslMode;
use crate::pg::tls::{TlsKeys, TlsSettings};

/// What the TLS messages call the URL's parameters.
const KEYS: TlsKeys = TlsKeys {
    root_cert: "inbox.postgres.url sslrootcert",
    client_cert: "inbox.postgres.url sslcert",
    client_key: "inbox.postgres.url sslkey",
    key_password: "inbox.postgres.url sslpassword",
};

/// A connection attempt that takes longer than this fails (and is
/// retried), unless the URL sets `connect_timeout`: a host that drops
/// packets would otherwise hold the consumer for the kernel's TCP timeout
/// (minutes) without a word.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The parsed URL: tokio-postgres's parameters (the password inside is
/// redacted from `Debug`) and the TLS settings.
#[derive(Debug, Clone)]
pub struct Target {
    pub config: tokio_postgres::Config,
    pub tls: TlsSettings,
}

impl Target {
    /// `host:port` of the first server, for messages.
    pub fn address(&self) -> String {
        use tokio_postgres::config::Host;
        let host = match self.config.get_hosts().first() {
            Some(Host::Tcp(h)) => h.clone(),
            Some(Host::Unix(p)) => p.display().to_string(),
            None => String::new(),
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        format!("{host}:{port}")
    }

    /// Whether the (first) server is reached over a Unix socket, which
    /// never uses TLS (as in libpq).
    pub fn is_unix(&self) -> bool {
        matches!(
            self.config.get_hosts().first(),
            Some(tokio_postgres::config::Host::Unix(_))
        )
    }
}

/// Parses `url`; the error names the parameter and the fix, never the URL.
pub fn parse(url: &str) -> Result<Target, String> {
    let (rest, tls) = take_tls_params(url)?;
    let mut config = tokio_postgres::Config::from_str(&rest).map_err(|e| {
        format!(
            "is not a PostgreSQL connection URL ({e}); write \
             postgres://user:password@host:port/database, optionally with \
             ?sslmode=prefer|disable|require|verify-ca|verify-full&sslrootcert=/path/ca.pem"
        )
    })?;
    if config.get_hosts().is_empty() {
        return Err("names no host; write postgres://user:password@host:port/database".to_owned());
    }
    if config.get_user().is_none() {
        return Err("names no user; write postgres://user:password@host:port/database".to_owned());
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
    }
    let target = Target { config, tls };
    if tls_ca_required(&target.tls) {
        return Err(
            "sslmode=verify-ca needs sslrootcert=<CA file> in the URL (as in libpq: without a \
             host name check, only a CA you name is safe); or use sslmode=verify-full"
                .to_owned(),
        );
    }
    if !target.is_unix() {
        // An unreadable CA or client certificate is found now, not at
        // every connection attempt.
        crate::pg::tls::connector(&target.tls).map_err(|e| e.message)?;
    }
    Ok(target)
}

fn tls_ca_required(tls: &TlsSettings) -> bool {
    tls.mode == SslMode::VerifyCa && tls.root_cert.is_none()
}

/// `url` without its TLS parameters, and the TLS settings they give.
fn take_tls_params(url: &str) -> Result<(String, TlsSettings), String> {
    let mut tls = TlsSettings {
        keys: KEYS,
        ..TlsSettings::default()
    };
    let mut take = |key: &str, value: &str| -> Result<bool, String> {
        match key {
            "sslmode" => {
                tls.mode = match value {
                    "disable" => SslMode::Disable,
                    "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    "verify-ca" => SslMode::VerifyCa,
                    "verify-full" => SslMode::VerifyFull,
                    _ => {
                        return Err(format!(
                            "sslmode={} is not a mode; use disable, prefer (the default), \
                             require, verify-ca or verify-full",
                            crate::config::quoted(value)
                        ));
                    }
                }
            }
            "sslrootcert" => tls.root_cert = Some(PathBuf::from(value)),
            "sslcert" => tls.client_cert = Some(PathBuf::from(value)),
            "sslkey" => tls.client_key = Some(PathBuf::from(value)),
            "sslpassword" => tls.key_password = Some(secrecy::SecretString::from(value)),
            _ => return Ok(false),
        }
        Ok(true)
    };
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let rest = if is_url {
        match url.split_once('?') {
            None => url.to_owned(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    let value = percent_decode(value).ok_or_else(|| {
                        format!("the value of {key} is not valid percent-encoded UTF-8")
                    })?;
                    if !take(key, &value)? {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        // key=value pairs separated by spaces (values without spaces or
        // quotes here; tokio-postgres parses the rest).
        let mut kept = Vec::new();
        for pair in url.split_whitespace() {
            match pair.split_once('=') {
                Some((key, value)) if take(key.trim(), value.trim_matches('\''))? => {}
                _ => kept.push(pair),
            }
        }
        kept.join(" ")
    };
    Ok((rest, tls))
}

/// `%XX` decoded (and `+` kept, as libpq keeps it); `None` when not UTF-8
/// or a `%` is not followed by two hex digits.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_sslmode_it_is_prefer_without_a_certificate_check() {
        let t = parse("postgresql://user:pw@127.0.0.1:5432/db").unwrap();
        assert_eq!(t.tls.mode, SslMode::Prefer);
        assert!(!t.tls.mode.verifies_certificate());
        assert_eq!(t.address(), "127.0.0.1:5432");
        assert_eq!(
            t.config.get_connect_timeout(),
            Some(&DEFAULT_CONNECT_TIMEOUT)
        );
    }

    #[test]
    fn every_libpq_mode_is_taken_out_of_the_url() {
        for (text, mode) in [
            ("disable", SslMode::Disable),
            ("prefer", SslMode::Prefer),
            ("require", SslMode::Require),
            ("verify-full", SslMode::VerifyFull),
        ] {
            let t = parse(&format!(
                "postgres://u:p@h/db?application_name=x&sslmode={text}&connect_timeout=3"
            ))
            .unwrap();
            assert_eq!(t.tls.mode, mode, "{text}");
            assert_eq!(t.config.get_application_name(), Some("x"));
            assert_eq!(
                t.config.get_connect_timeout(),
                Some(&Duration::from_secs(3))
            );
        }
        let t = parse("host=h user=u dbname=d sslmode=require").unwrap();
        assert_eq!(t.tls.mode, SslMode::Require);
        assert_eq!(t.config.get_dbname(), Some("d"));
    }

    #[test]
    fn a_url_that_cannot_connect_is_refused_without_repeating_it() {
        for (url, needle) in [
            (
                "postgres://u:hunter2@h:notaport/db",
                "is not a PostgreSQL connection URL",
            ),
            ("not a url hunter2", "is not a PostgreSQL connection URL"),
            ("postgres://u:hunter2@/db", "names no host"),
            ("postgres://h/db?password=hunter2", "names no user"),
            ("postgres://u:hunter2@h/db?sslmode=verify", "is not a mode"),
            (
                "postgres://u:hunter2@h/db?sslmode=verify-ca",
                "needs sslrootcert",
            ),
            (
                "postgres://u:hunter2@h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
                "cannot read inbox.postgres.url sslrootcert /nonexistent/ca.pem",
            ),
            (
                "postgres://u:hunter2@h/db?sslmode=%zz",
                "not valid percent-encoded",
            ),
        ] {
            let e = parse(url).unwrap_err();
            assert!(e.contains(needle), "{url}: {e}");
            assert!(!e.contains("hunter2"), "{url}: {e}");
        }
    }

    #[test]
    fn percent_encoded_paths_are_decoded() {
        assert_eq!(
            percent_decode("%2Fetc%2Fca.pem").as_deref(),
            Some("/etc/ca.pem")
        );
        assert_eq!(percent_decode("a%2"), None);
    }
}
