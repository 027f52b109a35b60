//! The `walrelay` binary: parses the command line and hands over to the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

use walrelay::config::Config;
use walrelay::relay::{self, RunOptions};

/// PostgreSQL → Kafka change-data-capture with a transactional outbox router.
#[derive(Debug, Parser)]
#[command(name = "walrelay", version, about)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "WALRELAY_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Stream the slot to Kafka until SIGINT/SIGTERM.
    Run {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Start even though the slot is ahead of the stored offset (only after
        /// reconciling the gap; see docs/operations.md).
        #[arg(long)]
        accept_slot_position: bool,
    },
    /// Check the configuration, PostgreSQL and Kafka without streaming.
    Check {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WALRELAY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Loads the file and checks the producer settings as librdkafka reads them
/// (no I/O beyond the file), so both commands refuse a bad property at once.
fn load(path: &PathBuf) -> Result<Config, ExitCode> {
    Config::from_file(path)
        .and_then(|c| relay::check_producer_config(&c).map(|()| c))
        .map_err(|e| {
            eprintln!("walrelay: invalid configuration\n{e}");
            ExitCode::from(2)
        })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("walrelay: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        match cli.command {
            Command::Run {
                config,
                accept_slot_position,
            } => {
                let config = match load(&config) {
                    Ok(c) => c,
                    Err(code) => return code,
                };
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
                        tracing::error!(error = %e, "walrelay stopped");
                        eprintln!("walrelay: {e}");
                        ExitCode::FAILURE
                    }
                }
            }
            Command::Check { config } => {
                let config = match load(&config) {
                    Ok(c) => c,
                    Err(code) => return code,
                };
                let report = walrelay::preflight::check(&config).await;
                print!("{report}");
                if report.ok() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
        }
    })
}

/// Cancels `token` on the first SIGINT or SIGTERM.
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
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
    }
    token.cancel();
}
