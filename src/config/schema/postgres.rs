//! `[postgres]`: where and how to connect (hosts, TLS, client certificate,
//! timeouts and backoff), and the slot and publication names.
//!
//! Field documentation here is the source for `docs/configuration.md`;
//! keep the two in step.

use std::path::PathBuf;
use std::time::Duration;

use secrecy::SecretString;
use serde::Deserialize;

use super::defaults;
use crate::config::units;

/// `[postgres]`: the source database and its replication slot.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    /// Host name, IP address, or a Unix socket directory (starts with `/`);
    /// or several, comma-separated (`db-a,db-b:5433`): the first that is a
    /// writable primary. Everything that writes (the publication, the
    /// lease, heartbeats, watermarks, outbox retention) goes here, and with
    /// `capture_from = "primary"` the slot too.
    #[serde(default = "defaults::host")]
    pub host: String,
    /// TCP port (also names the socket file `.s.PGSQL.<port>` in a socket directory).
    #[serde(default = "defaults::pg_port")]
    pub port: u16,
    /// Role to connect as; needs the REPLICATION attribute.
    #[serde(default = "defaults::user")]
    pub user: String,
    /// Password, if the server asks for one. Never printed.
    #[serde(default, deserialize_with = "units::secret")]
    pub password: Option<SecretString>,
    /// Database holding the outbox tables. Required.
    pub database: String,
    /// Logical replication slot name.
    #[serde(default = "defaults::slot")]
    pub slot: String,
    /// Publication name.
    #[serde(default = "defaults::publication")]
    pub publication: String,
    /// Where the slot lives and the changes are decoded: `"primary"` (the
    /// server of `host`); `"standby"`, a hot standby of it (PostgreSQL
    /// 16+: `standby_host`), which keeps the decoding and the snapshot's
    /// reads off the primary, and goes on with the same slot once that
    /// standby is promoted; `"standby_only"`, the same but never a server
    /// out of recovery (walrelay waits, saying so, until `standby_host`
    /// names a standby again).
    #[serde(default)]
    pub capture_from: CaptureFrom,
    /// With `capture_from = "standby"` or `"standby_only"`: the standby's
    /// host name, IP address or socket directory, or several
    /// (`replica-a,replica-b:5433`): the first in recovery. The same user,
    /// password, database and TLS settings as `host`.
    #[serde(default)]
    pub standby_host: Option<String>,
    /// The port of `standby_host` (entries without `:port`); `port` when unset.
    #[serde(default)]
    pub standby_port: Option<u16>,
    /// Create the slot at start if it does not exist.
    #[serde(default = "defaults::yes")]
    pub create_slot: bool,
    /// PostgreSQL 17+: create the slot as a failover slot (and make an
    /// existing one so), which standbys with `sync_replication_slots` keep a
    /// copy of, so that walrelay resumes on a promoted standby. Ignored
    /// before 17.
    #[serde(default = "defaults::yes")]
    pub failover_slot: bool,
    /// Create the publication (for the outbox tables) at start if it does not exist.
    #[serde(default = "defaults::yes")]
    pub create_publication: bool,
    /// Time allowed to establish a connection, including authentication.
    #[serde(
        default = "defaults::connect_timeout",
        deserialize_with = "units::duration"
    )]
    pub connect_timeout: Duration,
    /// How often to send standby status updates; the effective interval is
    /// `min(status_interval, wal_sender_timeout / 2)`.
    #[serde(
        default = "defaults::status_interval",
        deserialize_with = "units::duration"
    )]
    pub status_interval: Duration,
    /// Largest single replication message accepted, in bytes.
    #[serde(
        default = "defaults::max_message_size",
        deserialize_with = "units::byte_size"
    )]
    pub max_message_size: u64,
    /// Ask PostgreSQL to send a transaction larger than its
    /// `logical_decoding_work_mem` while it runs (protocol 2, `streaming
    /// 'on'`) instead of spilling it to the server's disk and decoding it
    /// again after the commit; walrelay holds it until the commit
    /// (`source::streamed`) and publishes nothing of it before.
    #[serde(default = "defaults::yes")]
    pub stream_in_progress: bool,
    /// Memory for streamed transactions not yet committed, over all of
    /// them; beyond it they are held in files in `stream_spill_dir`.
    #[serde(
        default = "defaults::stream_memory_limit",
        deserialize_with = "units::byte_size"
    )]
    pub stream_memory_limit: u64,
    /// Where streamed transactions beyond `stream_memory_limit` are held:
    /// unnamed files (gone with the process, even after a kill -9). The
    /// system's temporary directory when unset.
    #[serde(default)]
    pub stream_spill_dir: Option<PathBuf>,
    /// First delay before reconnecting after a transient error; doubles per attempt.
    #[serde(
        default = "defaults::reconnect_backoff_initial",
        deserialize_with = "units::duration"
    )]
    pub reconnect_backoff_initial: Duration,
    /// Upper bound for the reconnect delay.
    #[serde(
        default = "defaults::reconnect_backoff_max",
        deserialize_with = "units::duration"
    )]
    pub reconnect_backoff_max: Duration,
    /// TLS, with libpq's `sslmode` meanings (see `pg::tls`).
    #[serde(default)]
    pub sslmode: SslMode,
    /// PEM file of CA certificates for `verify-ca` / `verify-full`; the
    /// system trust store when unset.
    #[serde(default)]
    pub sslrootcert: Option<PathBuf>,
    /// PEM file with the client certificate (and any intermediates) to
    /// present, for `cert` authentication or `clientcert=verify-*` in
    /// `pg_hba.conf`. Requires `sslkey`.
    #[serde(default)]
    pub sslcert: Option<PathBuf>,
    /// PEM file with the private key of `sslcert`; requires `sslcert`.
    #[serde(default)]
    pub sslkey: Option<PathBuf>,
    /// Password of an encrypted `sslkey`. Never printed.
    #[serde(default, deserialize_with = "units::secret")]
    pub sslpassword: Option<SecretString>,
}

/// `postgres.capture_from`: which server holds the slot (see
/// [`PostgresConfig::capture_from`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaptureFrom {
    #[default]
    Primary,
    Standby,
    StandbyOnly,
}

impl CaptureFrom {
    /// The name as written in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            CaptureFrom::Primary => "primary",
            CaptureFrom::Standby => "standby",
            CaptureFrom::StandbyOnly => "standby_only",
        }
    }

    /// Whether the slot lives on a standby (`standby_host`).
    pub fn from_standby(self) -> bool {
        self != CaptureFrom::Primary
    }
}

/// `postgres.sslmode`: libpq's `sslmode` names and meanings (the table in
/// `pg::tls`, which acts on them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    Disable,
    #[default]
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    /// The name as written in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a server that declines TLS is acceptable.
    pub fn allows_plaintext(self) -> bool {
        matches!(self, SslMode::Disable | SslMode::Prefer)
    }

    /// Whether the server's certificate chain is verified.
    pub fn verifies_certificate(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }

    /// Whether the certificate must name the host we connect to.
    pub fn verifies_host_name(self) -> bool {
        self == SslMode::VerifyFull
    }
}
