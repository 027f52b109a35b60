//! The `walrelay` binary: parses the command line and hands over to the library.
//!
//! Invariants:
//! - Nothing on the path of `run` can panic on a broken stderr or stdout: logs
//!   go through [`Lossy`] (write errors dropped, tracing's own error report
//!   off) and the binary's own messages through [`say`]/[`shout`], never
//!   `println!`/`eprintln!`. Rust ignores SIGPIPE, so a closed pipe is an
//!   `EPIPE` error, which is dropped.
//! - The signal task cancels the shutdown token before it does anything else,
//!   so SIGINT/SIGTERM always stop `run`.
//! - Exit codes: 0 stopped on request (or `check` passed), 1 stopped on an
//!   error (or a `check` failed), 2 bad configuration, `WALRELAY_LOG` or
//!   usage (clap's own code for usage errors).
//! - Once the configuration is loaded, every line names the connector: the
//!   command runs inside its span (`telemetry::RootSpan`), and the binary's
//!   own text lines start `walrelay: connector=<name>: `.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

use walrelay::commands::status::{HealthProbe, HealthUrl};
use walrelay::config::{self, Config};
use walrelay::relay::{self, RunOptions};
use walrelay::telemetry::{Lossy, RootSpan, log_filter, use_ansi};

/// Shown after every `--help`.
const AFTER_HELP: &str = "\
Environment:
  WALRELAY_LOG         Log filter: a level (error, warn, info, debug, trace) or
                       directives such as \"info,walrelay=debug\"; default \"info\".
                       A filter that does not parse, or a bare word that is not a
                       level (a typo would hide every line), is refused: exit 2.
  WALRELAY_LOG_FORMAT  text or json (as --log-format); both win over [log] format.
  WALRELAY_ACCEPT_SLOT_POSITION
                       run: true is --accept-slot-position, for a fixed command
                       line (Kubernetes, systemd); unset it after that start.
  NO_COLOR             No colour codes. Colours are only used when stderr is a
                       terminal, never in files or pipes.

Exit codes:
  0  stopped on request (SIGINT/SIGTERM); check: every check passed;
     status: no problem found
  1  stopped on an error that retrying cannot fix (the last log line says what
     to do); check: a check failed; status: a problem is listed
  2  invalid configuration, WALRELAY_LOG or command line

See docs/operations.md.";

/// `run --accept-slot-position` for deployments whose command line is fixed.
const ACCEPT_SLOT_POSITION_ENV: &str = "WALRELAY_ACCEPT_SLOT_POSITION";

/// PostgreSQL → Kafka change-data-capture with a transactional outbox router.
#[derive(Debug, Parser)]
#[command(name = "walrelay", version, about, after_help = AFTER_HELP)]
struct Cli {
    /// Log format [default: the config's [log] format, else text].
    #[arg(long, global = true, value_enum, env = "WALRELAY_LOG_FORMAT")]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

impl From<LogFormat> for config::LogFormat {
    fn from(f: LogFormat) -> config::LogFormat {
        match f {
            LogFormat::Text => config::LogFormat::Text,
            LogFormat::Json => config::LogFormat::Json,
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Stream the slot to Kafka until SIGINT/SIGTERM.
    #[command(after_help = AFTER_HELP)]
    Run {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Start once although the stored offset does not fit the slot (the slot
        /// is ahead of it, or the offset names another system, slot or
        /// timeline): the slot's position becomes the stored offset. A lost
        /// slot is not accepted: drop it first.
        ///
        /// Follow the steps of the refusal (docs/operations.md): for a slot
        /// ahead of the stored offset, start with this first, then re-publish
        /// the range it names (walrelay republish); reconciling first would
        /// miss what commits in between.
        ///
        /// Or set WALRELAY_ACCEPT_SLOT_POSITION=true (true/false, yes/no, 1/0,
        /// on/off) where the command line is fixed (Kubernetes, systemd), and
        /// unset it once this start has stored the slot's position.
        #[arg(
            long,
            env = ACCEPT_SLOT_POSITION_ENV,
            value_parser = clap::builder::BoolishValueParser::new()
        )]
        accept_slot_position: bool,
    },
    /// Check the configuration, PostgreSQL and Kafka without streaming.
    #[command(after_help = AFTER_HELP)]
    Check {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Check the configuration only, without connecting to PostgreSQL
        /// or Kafka (for a CI pipeline); exit codes as without it.
        #[arg(long)]
        offline: bool,
        /// One JSON object on stdout instead of the lines: ok, offline, the
        /// counts and each check (docs/operations.md, "walrelay check");
        /// also for a file that does not load (exit 2).
        #[arg(long)]
        json: bool,
    },
    /// Publish outbox rows still in their table exactly as a streamed insert
    /// of them (reconciling after a lost slot, or a skipped transaction's
    /// good rows); see docs/operations.md.
    #[command(after_help = AFTER_HELP)]
    Republish {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// The [[outbox]] table (needed when the configuration has several).
        #[arg(long)]
        table: Option<String>,
        /// SQL condition selecting the rows, e.g. "id IN ('…')".
        #[arg(long = "where", value_name = "SQL")]
        filter: String,
        /// Print the records (topic, key, id) instead of publishing them.
        #[arg(long)]
        dry_run: bool,
        /// Cancel the read when one statement runs longer than this (e.g.
        /// "30m", "2h"): the COPY of the rows streams as fast as Kafka
        /// acknowledges them, so raise it for a large range.
        #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = parse_duration)]
        statement_timeout: std::time::Duration,
    },
    /// Delete outbox rows older than their [outbox.retention] whose events
    /// the stored offset covers (never one not yet in Kafka), and report
    /// what was deleted and what was kept and why; see docs/operations.md.
    #[command(after_help = AFTER_HELP)]
    Prune {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// One [[outbox]] table (default: every one with a retention).
        #[arg(long)]
        table: Option<String>,
        /// Count what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// The rows of the accepted gap (`walrelay status`) were republished:
        /// prune them like any other (by default they are kept).
        #[arg(long)]
        gap_republished: bool,
        /// How long to wait for Kafka and PostgreSQL (retrying with backoff)
        /// before giving up with exit 1.
        #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
        wait: std::time::Duration,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Ask the running connector for an incremental snapshot of one table
    /// (a backfill, or re-reading a table): read in chunks while streaming
    /// continues, resumable; see docs/operations.md.
    #[command(after_help = AFTER_HELP)]
    Snapshot {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// The table (`schema.table`), one this connector captures.
        #[arg(long, required_unless_present = "cancel")]
        table: Option<String>,
        /// Only the rows satisfying this SQL condition.
        #[arg(long = "where", value_name = "SQL", conflicts_with = "cancel")]
        filter: Option<String>,
        /// Give up the running (or stored) incremental snapshot of --table,
        /// or of every table without --table: its remaining rows are not
        /// read.
        #[arg(long)]
        cancel: bool,
    },
    /// Show the slot, the stored offset and the running instance's health,
    /// without a running instance (exit 1 when something needs a person).
    #[command(after_help = AFTER_HELP)]
    Status {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// One JSON object on stdout instead of the table.
        #[arg(long)]
        json: bool,
        /// Ask the instance at this URL for its health
        /// (http://HOST:PORT[/PATH], PATH /healthz by default) instead of
        /// the configuration's [health] listen address on this host: for
        /// running status from another host.
        #[arg(long, value_name = "URL", conflicts_with = "no_health")]
        health_url: Option<HealthUrl>,
        /// Ask no instance for its health (e.g. from a host that cannot
        /// reach one); the slot, offset and instances are still shown.
        #[arg(long)]
        no_health: bool,
    },
    /// Run the reference inbox consumer: apply each event of the topics
    /// once to the consuming service's PostgreSQL database (its own
    /// configuration file, [inbox]; see docs/consumers.md).
    #[command(after_help = AFTER_HELP)]
    Inbox {
        /// The inbox consumer's TOML file (not the connector's).
        #[arg(long, short)]
        config: PathBuf,
    },
}

impl Command {
    fn config_path(&self) -> &Path {
        match self {
            Command::Run { config, .. }
            | Command::Check { config, .. }
            | Command::Status { config, .. }
            | Command::Republish { config, .. }
            | Command::Prune { config, .. }
            | Command::Snapshot { config, .. }
            | Command::Inbox { config } => config,
        }
    }
}

/// Writes a line to stderr; a closed stderr loses it instead of panicking.
/// A command-line duration such as `30m` or `2h` (nonzero).
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    match humantime_serde::re::humantime::parse_duration(text.trim()) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err("must be more than 0, e.g. 30m".into()),
        Err(e) => Err(format!("{e}; write e.g. 30m or 2h")),
    }
}

fn shout(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// Writes to stdout; a closed stdout (`walrelay check | head -1`) loses the
/// text instead of panicking.
fn say(text: &str) {
    let mut out = std::io::stdout();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Sets up logging on stderr, every line inside the span of `connector`
/// (when the configuration loaded). Returns that span, for the caller to
/// enter, and a refused `WALRELAY_LOG` as the one-line reason, with logging
/// set up at the default level so that the reason is written in the chosen
/// format.
fn init_tracing(
    format: config::LogFormat,
    connector: Option<&str>,
) -> (tracing::Span, Result<(), String>) {
    use std::io::IsTerminal;
    let value = match std::env::var("WALRELAY_LOG") {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err("WALRELAY_LOG is not valid UTF-8; set a level such as \"info\"".to_owned())
        }
    };
    let (filter, refused) = match value.and_then(|v| log_filter(v.as_deref())) {
        Ok(filter) => (filter, None),
        Err(problem) => match log_filter(None) {
            Ok(filter) => (filter, Some(problem)),
            Err(e) => return (tracing::Span::none(), Err(e)),
        },
    };
    let ansi = use_ansi(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let root = RootSpan::default();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .log_internal_errors(false)
        .with_writer(|| Lossy(std::io::stderr()));
    match format {
        config::LogFormat::Text => builder.map_event_format(|f| root.format(f)).init(),
        config::LogFormat::Json => builder.json().map_event_format(|f| root.format(f)).init(),
    }
    let span = connector.map_or_else(tracing::Span::none, |name| root.open(name));
    (span, refused.map_or(Ok(()), Err))
}

/// How the binary's own messages are written: in the log's format, naming
/// the connector once the configuration is known.
struct Messages {
    format: config::LogFormat,
    /// `connector.name`, when the configuration loaded.
    connector: Option<String>,
}

impl Messages {
    /// `walrelay: ` or, with a connector, `walrelay: connector=<name>: `: the
    /// start of a text line, naming the connector as the log lines do.
    fn prefix(&self) -> String {
        match &self.connector {
            Some(name) => format!("walrelay: connector={name}: "),
            None => "walrelay: ".to_owned(),
        }
    }

    /// The current-thread runtime a command runs on; when it cannot start,
    /// says so and gives the exit code.
    fn runtime(&self) -> Result<tokio::runtime::Runtime, ExitCode> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| {
                self.fatal("", &format!("cannot start the async runtime: {e}"));
                ExitCode::FAILURE
            })
    }

    /// Says why walrelay cannot go on, once: a `walrelay: …` line in text
    /// mode (the last line of the log), an `ERROR` event in JSON mode, so
    /// that every line of a JSON log parses.
    fn fatal(&self, what: &str, error: &str) {
        let prefix = self.prefix();
        match self.format {
            config::LogFormat::Text if what.is_empty() => shout(&format!("{prefix}{error}")),
            config::LogFormat::Text => shout(&format!("{prefix}{what}\n{error}")),
            config::LogFormat::Json if what.is_empty() => {
                tracing::error!(error, "walrelay stopped")
            }
            config::LogFormat::Json => tracing::error!(error, "walrelay: {what}"),
        }
    }

    /// The connector stopped on `e`: one line, with what it is about as
    /// fields in JSON mode.
    fn stopped(&self, e: &relay::RelayError) {
        let about = e.about();
        match self.format {
            config::LogFormat::Text => shout(&format!("{}{e}", self.prefix())),
            config::LogFormat::Json => tracing::error!(
                error = %e,
                table = about.table,
                column = about.column,
                lsn = about.lsn.map(tracing::field::display),
                end_lsn = about.end_lsn.map(tracing::field::display),
                event_id = about.event,
                topic = about.topic,
                "walrelay stopped"
            ),
        }
    }
}

/// Loads the file and checks the producer settings as librdkafka reads them
/// and the PostgreSQL TLS files as OpenSSL reads them (no I/O beyond the
/// files), so both commands refuse a bad property at once.
fn load(path: &Path) -> Result<Config, config::ConfigError> {
    Config::from_file(path)
        .and_then(|c| walrelay::sink::properties::check_producer_config(&c).map(|()| c))
        .and_then(|c| walrelay::pg::params::check_tls_config(&c).map(|()| c))
}

/// `walrelay --version`: the version, the git commit it was built from
/// (build.rs; "unknown" when built without git) and the librdkafka it
/// links, which decides much of the producer's behaviour.
fn version_text() -> String {
    format!(
        "{} (commit {}, librdkafka {})",
        env!("CARGO_PKG_VERSION"),
        option_env!("WALRELAY_GIT_COMMIT").unwrap_or("unknown"),
        rdkafka::util::get_rdkafka_version().1
    )
}

/// The command line, with [`version_text`] as the version.
fn parse_cli() -> Cli {
    let version: &'static str = version_text().leak();
    let matches = Cli::command().version(version).get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn main() -> ExitCode {
    let cli = parse_cli();
    if let Command::Inbox { config } = &cli.command {
        return inbox(config, cli.log_format.map(config::LogFormat::from));
    }
    // The configuration comes first: its [log] format applies to every line,
    // its own errors included (then read from the file on its own).
    let path = cli.command.config_path();
    let loaded = load(path);
    let format = cli
        .log_format
        .map(config::LogFormat::from)
        .or_else(|| loaded.as_ref().ok().map(|c| c.log.format))
        .or_else(|| config::log_format_in(path))
        .unwrap_or_default();
    let messages = Messages {
        format,
        connector: loaded.as_ref().ok().map(|c| c.connector.name.clone()),
    };
    let (root, refused) = init_tracing(format, messages.connector.as_deref());
    // Every line from here on is in the connector's span: this thread runs
    // the whole command, tokio's tasks included (a current-thread runtime),
    // and lines from other threads are formatted inside the same span
    // (telemetry::RootSpan).
    let _in_root = root.enter();
    if let Err(problem) = refused {
        messages.fatal("", &problem);
        return ExitCode::from(2);
    }
    let config = match loaded {
        Ok(c) => c,
        Err(e) => {
            if let Command::Check {
                json: true,
                offline,
                ..
            } = cli.command
            {
                let report = walrelay::commands::check::invalid_config_json(&e, offline);
                say(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                ));
            }
            messages.fatal("invalid configuration", &e.to_string());
            return ExitCode::from(2);
        }
    };
    // `check` lists them in its report instead.
    if !matches!(cli.command, Command::Check { .. }) {
        for warning in config.warnings() {
            tracing::warn!("{warning}");
        }
    }
    let runtime = match messages.runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        match cli.command {
            Command::Run {
                accept_slot_position,
                ..
            } => {
                if accept_slot_position && std::env::var_os(ACCEPT_SLOT_POSITION_ENV).is_some() {
                    tracing::warn!(
                        "{ACCEPT_SLOT_POSITION_ENV} is set: this start accepts a slot position \
                         that does not fit the stored offset; unset it once walrelay streams, or \
                         a later restart accepts the next one without asking (docs/operations.md)"
                    );
                }
                let shutdown = CancellationToken::new();
                tokio::spawn(watch_signals(shutdown.clone()));
                match relay::run(
                    config,
                    RunOptions {
                        accept_slot_position,
                    },
                    shutdown,
                )
                .await
                {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        messages.stopped(&e);
                        ExitCode::FAILURE
                    }
                }
            }
            Command::Republish {
                table,
                filter,
                dry_run,
                statement_timeout,
                ..
            } => {
                let request = walrelay::commands::republish::Request {
                    table,
                    filter,
                    dry_run,
                    statement_timeout,
                };
                let printed =
                    walrelay::commands::republish::republish(&config, &request, |record| {
                        let text = |b: &Option<bytes::Bytes>| {
                            b.as_deref()
                                .map_or("-".into(), |b| String::from_utf8_lossy(b).into_owned())
                        };
                        let id = match record.event_id() {
                            Some(walrelay::router::EventId::OutboxRow(id)) => {
                                String::from_utf8_lossy(id).into_owned()
                            }
                            _ => "-".into(),
                        };
                        say(&format!("{}\t{}\t{id}\n", record.topic, text(&record.key)));
                    })
                    .await;
                match printed {
                    Ok(summary) => {
                        let topics: Vec<String> = summary
                            .topics
                            .iter()
                            .map(|(t, n)| format!("{t}: {n}"))
                            .collect();
                        say(&format!(
                            "{} {} record(s) of {}{}{}\n",
                            if dry_run {
                                "would republish"
                            } else {
                                "republished"
                            },
                            summary.records,
                            summary.table,
                            if topics.is_empty() { "" } else { " — " },
                            topics.join(", ")
                        ));
                        ExitCode::SUCCESS
                    }
                    Err(e @ walrelay::commands::republish::RepublishError::Usage(_)) => {
                        messages.fatal("", &e.to_string());
                        ExitCode::from(2)
                    }
                    Err(e) => {
                        messages.fatal("", &e.to_string());
                        ExitCode::FAILURE
                    }
                }
            }
            Command::Prune {
                table,
                dry_run,
                gap_republished,
                wait,
                json,
                ..
            } => {
                use walrelay::commands::prune::{PruneCommandError, Request, prune};
                let stop = CancellationToken::new();
                tokio::spawn(watch_signals(stop.clone()));
                let request = Request {
                    table,
                    dry_run,
                    gap_republished,
                    wait,
                };
                match prune(&config, &request, &stop).await {
                    Ok(summary) => {
                        if json {
                            say(&format!(
                                "{}\n",
                                serde_json::to_string_pretty(&summary).unwrap_or_default()
                            ));
                        } else {
                            say(&format!(
                                "{} under the stored offset {}\n",
                                if dry_run { "would prune" } else { "pruned" },
                                summary.offset_lsn.as_deref().unwrap_or("(none stored)")
                            ));
                            for table in &summary.tables {
                                say(&format!("{table}\n"));
                            }
                            if summary.stopped {
                                say("stopped before the end; the next run goes on\n");
                            }
                        }
                        ExitCode::SUCCESS
                    }
                    Err(e @ PruneCommandError::Usage(_)) => {
                        messages.fatal("", &e.to_string());
                        ExitCode::from(2)
                    }
                    Err(e) => {
                        messages.fatal("", &e.to_string());
                        ExitCode::FAILURE
                    }
                }
            }
            Command::Snapshot {
                table,
                cancel: true,
                ..
            } => match walrelay::commands::snapshot::cancel_snapshot(&config, table.as_deref())
                .await
            {
                Ok((id, lsn)) => {
                    say(&format!(
                        "asked for the incremental snapshot of {} to be given up (signal {id} at \
                         {lsn}); the running connector acts on it where the stream carries it, or \
                         the next one to stream — `walrelay status` shows it given up\n",
                        table.as_deref().unwrap_or("every table")
                    ));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    messages.fatal("", &e);
                    ExitCode::FAILURE
                }
            },
            Command::Snapshot { table, filter, .. } => {
                let table = table.unwrap_or_default();
                match walrelay::commands::snapshot::request_snapshot(
                    &config,
                    &table,
                    filter.as_deref(),
                )
                .await
                {
                    Ok((id, lsn)) => {
                        say(&format!(
                            "requested incremental snapshot {id} of {table} (signal at {lsn}); the \
                             running connector reads it beside the stream — watch `walrelay \
                             status` (incremental) and walrelay_incremental_snapshot_*\n"
                        ));
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        messages.fatal("", &e);
                        ExitCode::FAILURE
                    }
                }
            }
            Command::Status {
                json,
                health_url,
                no_health,
                ..
            } => {
                let health = match (health_url, no_health) {
                    (Some(url), _) => HealthProbe::Url(url),
                    (None, true) => HealthProbe::Off,
                    (None, false) => HealthProbe::Configured,
                };
                let status = walrelay::commands::status::status(&config, &health).await;
                if json {
                    match serde_json::to_string_pretty(&status) {
                        Ok(text) => say(&format!("{text}\n")),
                        Err(e) => {
                            messages.fatal("", &format!("cannot write the status as JSON: {e}"))
                        }
                    }
                } else {
                    say(&status.to_string());
                }
                if status.problems.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            // Handled by `inbox` before the connector's configuration is read.
            Command::Inbox { .. } => ExitCode::from(2),
            Command::Check { offline, json, .. } => {
                let report = if offline {
                    walrelay::commands::check::check_offline(&config)
                } else {
                    walrelay::commands::check::check(&config).await
                };
                if json {
                    say(&format!(
                        "{}\n",
                        serde_json::to_string_pretty(&report.to_json()).unwrap_or_default()
                    ));
                } else {
                    say(&report.to_string());
                }
                if report.ok() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
        }
    })
}

/// `walrelay inbox`: its own configuration file, the same logging, signals
/// and exit codes as `run`.
fn inbox(path: &Path, format: Option<config::LogFormat>) -> ExitCode {
    let format = format.unwrap_or_default();
    let messages = Messages {
        format,
        connector: None,
    };
    let (root, refused) = init_tracing(format, None);
    let _in_root = root.enter();
    if let Err(problem) = refused {
        messages.fatal("", &problem);
        return ExitCode::from(2);
    }
    let loaded = match walrelay::inbox::config::load(path) {
        Ok(l) => l,
        Err(e) => {
            messages.fatal("invalid configuration", &e);
            return ExitCode::from(2);
        }
    };
    let runtime = match messages.runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        tokio::spawn(watch_signals(shutdown.clone()));
        match walrelay::inbox::run(loaded, shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                messages.fatal("", &e.to_string());
                ExitCode::FAILURE
            }
        }
    })
}

/// Cancels `token` on the first SIGINT or SIGTERM — before logging it, so
/// nothing that happens to the log can keep the process from stopping.
async fn watch_signals(token: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!(
            "cannot install signal handlers; stop walrelay with SIGKILL only as a last resort"
        );
        return;
    };
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    token.cancel();
    tracing::info!(signal = name, "{name}: stopping");
}
