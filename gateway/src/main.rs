//! `sluice`: the command line. It only parses and dispatches; the work is
//! in the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc: the proxy allocates and frees small buffers per request;
/// glibc's malloc showed as ~8% of a proxy benchmark's profile.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use sluice_gateway::logging::{self, LogFormat};
use sluice_gateway::server::Overrides;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Edge waiting-room gateway for flash sales"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Run {
        /// The policy file (TOML).
        #[arg(long)]
        config: PathBuf,
        /// Public listener address, overriding gateway.listen.
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// Admin listener address, overriding gateway.admin_listen.
        #[arg(long)]
        admin_listen: Option<SocketAddr>,
        /// Data directory, overriding gateway.data_dir.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Log format.
        #[arg(long, value_enum, default_value = "human")]
        log_format: LogFormat,
    },
    /// Validate policy files: exit 0, or 2 with FILE:LINE:COL: message per problem.
    Check {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Check the stored state offline: exit 0 clean, 1 with a line per violation.
    Audit {
        /// The embedded store's data directory.
        #[arg(long, required_unless_present = "config", conflicts_with = "config")]
        data_dir: Option<PathBuf>,
        /// A config: its `[cluster] postgres_url` (the fleet's shared
        /// store), else its `gateway.data_dir`.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Print a fresh ticket-signing key in the config's format.
    Keygen {
        /// Key type.
        #[arg(long, value_enum, default_value = "hs256")]
        alg: sluice_gateway::keygen::Alg,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run {
            config,
            listen,
            admin_listen,
            data_dir,
            log_format,
        } => {
            logging::init(log_format);
            let overrides = Overrides {
                listen,
                admin_listen,
                data_dir,
            };
            match sluice_gateway::server::run(&config, overrides) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("sluice: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Check { files } => {
            if sluice_gateway::server::check(&files) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            }
        }
        Command::Audit { data_dir, config } => {
            match sluice_gateway::server::audit(data_dir.as_deref(), config.as_deref()) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => {
                    eprintln!("sluice audit: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Keygen { alg } => match sluice_gateway::keygen::entry(alg) {
            Ok(entry) => {
                print!("{entry}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("sluice keygen: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
