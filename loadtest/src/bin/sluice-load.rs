//! `sluice-load`: plays a flash-sale scenario against the real gateway and
//! checks the books (`run`), or finds the release rate to set (`capacity`).
//! Exit 0: verdict passed; 1: the books found violations; 2: the run could
//! not be made (bad scenario, gateway did not start, ...).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use sluice_loadtest::load::books::Check;
use sluice_loadtest::load::capacity::{self, CapacityOptions};
use sluice_loadtest::load::{self, Remote, RunOptions, Scenario};

#[derive(Parser)]
#[command(
    name = "sluice-load",
    version,
    about = "Rehearse a flash sale against Sluice"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Play a scenario and check the books.
    Run {
        /// The scenario file (TOML), e.g. loadtest/scenarios/flash-crowd.toml.
        scenario: PathBuf,
        /// The `sluice` binary to start (default: next to sluice-load, then PATH).
        #[arg(long)]
        sluice: Option<PathBuf>,
        /// Report folder (default target/sluice-load/<scenario>-<time>/).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Run this many shoppers instead of the file's number (rates scale).
        #[arg(long)]
        shoppers: Option<u32>,
        /// Release at the file's fixed `release_per_second` even where the
        /// file asks for adaptive release (the baseline to compare with).
        #[arg(long)]
        fixed_rate: bool,
        /// Public URL of a running gateway (loopback only); needs --admin.
        #[arg(long, requires = "admin")]
        target: Option<String>,
        /// Admin URL of the running gateway.
        #[arg(long, requires = "target")]
        admin: Option<String>,
        /// Admin bearer token of the running gateway.
        #[arg(long, env = "SLUICE_ADMIN_TOKEN")]
        admin_token: Option<String>,
        /// The running gateway's config file (for the kill switch faults).
        #[arg(long)]
        config: Option<PathBuf>,
        /// The running gateway's data dir (for `sluice audit`).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// The `paysim` binary for scenarios with [paysim] (default: next to sluice-load).
        #[arg(long)]
        paysim: Option<PathBuf>,
        /// URL of the paysim the running gateway pays through (for its /ledger).
        #[arg(long, requires = "target")]
        paysim_url: Option<String>,
    },
    /// Raise the offered checkout rate step by step; print the release rate to set.
    Capacity {
        #[arg(long)]
        sluice: Option<PathBuf>,
        /// Offered checkouts per second at the first step.
        #[arg(long, default_value_t = 25.0)]
        start_per_s: f64,
        /// Each step offers this many times the previous one.
        #[arg(long, default_value_t = 1.5)]
        step_factor: f64,
        #[arg(long, default_value_t = 12)]
        steps_max: u32,
        /// Seconds per step.
        #[arg(long, default_value_t = 5)]
        step_s: u64,
        /// A step fails over this p99 checkout latency (ms).
        #[arg(long, default_value_t = 250.0)]
        p99_ms_max: f64,
        /// A step fails over this share of failed checkouts.
        #[arg(long, default_value_t = 0.01)]
        error_rate_max: f64,
        /// Share of the measured capacity to configure.
        #[arg(long, default_value_t = 0.8)]
        headroom: f64,
        /// Slow every store commit by this much (gateway test knob).
        #[arg(long)]
        commit_delay_ms: Option<u32>,
        /// Gateways sharing a throwaway Redis (and, with --postgres, a
        /// throwaway PostgreSQL); checkouts spread over them in turn.
        #[arg(long, default_value_t = 1)]
        gateways: u32,
        /// Stock and orders on a throwaway PostgreSQL (`[cluster] postgres_url`).
        #[arg(long)]
        postgres: bool,
        /// Pay through `paysim` over HTTP, each call answered after this
        /// many milliseconds, instead of the in-process simulator.
        #[arg(long)]
        paysim_latency_ms: Option<u32>,
        /// Stock rows of the SKU (`partitions`).
        #[arg(long, default_value_t = 1)]
        partitions: u32,
        /// Passes used in turn (each allows 1,000 checkouts).
        #[arg(long, default_value_t = 64)]
        passes: usize,
        /// Print the gateways' (and PostgreSQL's) CPU time per confirmed
        /// checkout of each step, over exactly its span; check the books
        /// at the end (exit 1 if they do not balance); no half step.
        #[arg(long)]
        cpu: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sluice-load: {e}");
            return ExitCode::from(2);
        }
    };
    let played = runtime.block_on(async {
        tokio::select! {
            r = dispatch(cli.command) => r,
            signal = interrupted() => {
                eprintln!("sluice-load: {signal}: stopping the gateways and stores it started");
                Ok(ExitCode::from(130))
            }
        }
    });
    // Dropping the runtime drops every task, and with them the processes
    // the harness started (each is killed when dropped).
    drop(runtime);
    match played {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sluice-load: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Resolves at SIGINT or SIGTERM, naming it.
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "interrupted",
        _ = term.recv() => "terminated",
    }
}

async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run {
            scenario,
            sluice,
            out,
            shoppers,
            fixed_rate,
            target,
            admin,
            admin_token,
            config,
            data_dir,
            paysim,
            paysim_url,
        } => {
            let mut sc = Scenario::load(&scenario)?;
            if let Some(n) = shoppers {
                sc = sc.with_shoppers(n);
            }
            if fixed_rate {
                sc = sc.with_fixed_rate();
            }
            let remote = match (target, admin) {
                (Some(public), Some(admin)) => Some(Remote {
                    public,
                    admin,
                    admin_token,
                    config_path: config,
                    data_dir,
                    paysim_url,
                }),
                _ => None,
            };
            let opts = RunOptions {
                sluice,
                paysim,
                out,
                remote,
                progress: true,
            };
            let result = load::run(&sc, &opts).await?;
            let s = &result.summary;
            println!(
                "{}: {} · {} shoppers · admitted {} at {:.1}/s (configured {}) · conversion {:.1} % · wait p95 {:.1} s · checkout p99 {:.0} ms",
                s.scenario,
                s.verdict.to_uppercase(),
                s.shoppers.started,
                s.admitted.gateway_total,
                s.admitted.rate_per_s,
                s.configured.release_per_second,
                s.conversion * 100.0,
                s.wait_s.p95,
                s.checkout_ms.p99
            );
            for v in &s.violations {
                println!("  violation: {v}");
            }
            println!("report: {}", result.out.join("report.html").display());
            Ok(if s.verdict == "pass" {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Capacity {
            sluice,
            start_per_s,
            step_factor,
            steps_max,
            step_s,
            p99_ms_max,
            error_rate_max,
            headroom,
            commit_delay_ms,
            gateways,
            postgres,
            partitions,
            passes,
            paysim_latency_ms,
            cpu,
        } => {
            let o = CapacityOptions {
                sluice,
                start_per_s,
                step_factor,
                steps_max,
                step: Duration::from_secs(step_s.max(1)),
                p99_ms_max,
                error_rate_max,
                headroom,
                commit_delay_ms,
                gateways,
                postgres,
                partitions,
                passes,
                paysim_latency_ms,
                cpu,
                ..CapacityOptions::default()
            };
            let c = capacity::run(&o).await?;
            print!("{}", c.table());
            if c.books.iter().any(Check::failed) {
                eprintln!("sluice-load: the books do not balance");
                return Ok(ExitCode::from(1));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
