//! `paysim`: the payment-provider simulator (see `sluice_loadtest::paysim`).
//!
//! Prints `listening on ADDR` as its first line on stdout, so a test or a
//! harness can start it on port 0 and read where it is.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use sluice_loadtest::paysim::{self, Config, Faults, Limits, WebhookTarget};

#[derive(Debug, Parser)]
#[command(
    name = "paysim",
    about = "A payment provider simulator that misbehaves on purpose"
)]
struct Cli {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where webhooks are POSTed; none are sent without it.
    #[arg(long, requires = "webhook_secret")]
    webhook_url: Option<String>,
    /// Webhook signing secret; repeat it to sign with several (one `v1` each).
    #[arg(long, env = "PAYSIM_WEBHOOK_SECRET")]
    webhook_secret: Vec<String>,
    /// Seeds every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// TOML file of fault knobs (the JSON of `GET /admin/faults`); flags override it.
    #[arg(long)]
    faults: Option<PathBuf>,
    #[arg(long)]
    timeout_ratio: Option<f64>,
    #[arg(long = "error-5xx-ratio")]
    error_5xx_ratio: Option<f64>,
    #[arg(long = "error-5xx-after-processing-ratio")]
    error_5xx_after_processing_ratio: Option<f64>,
    #[arg(long)]
    reset_ratio: Option<f64>,
    #[arg(long)]
    latency_ms: Option<u64>,
    /// Requests served at once (0: no limit); the rest wait in line.
    #[arg(long)]
    workers: Option<u32>,
    #[arg(long)]
    slow_ms: Option<u64>,
    #[arg(long)]
    timeout_hold_ms: Option<u64>,
    #[arg(long)]
    webhook_duplicate_ratio: Option<f64>,
    #[arg(long)]
    webhook_reorder_window: Option<u32>,
    #[arg(long)]
    webhook_delay_ms: Option<u64>,
    #[arg(long)]
    webhook_loss_ratio: Option<f64>,
    #[arg(long)]
    webhook_bad_signature_ratio: Option<f64>,
    #[arg(long, allow_hyphen_values = true)]
    webhook_signature_skew_s: Option<i64>,
    /// Payments kept, at most; past it authorizations get `503 ledger_full`.
    #[arg(long, default_value_t = Limits::default().payments_max)]
    payments_max: usize,
    /// Events kept, at most.
    #[arg(long, default_value_t = Limits::default().events_max)]
    events_max: usize,
    /// Idempotency records kept, at most.
    #[arg(long, default_value_t = Limits::default().idempotency_records_max)]
    idempotency_records_max: usize,
}

impl Cli {
    fn faults(&self) -> anyhow::Result<Faults> {
        let mut faults = match &self.faults {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
            }
            None => Faults::default(),
        };
        let set_f64 = |field: &mut f64, flag: Option<f64>| {
            if let Some(value) = flag {
                *field = value;
            }
        };
        set_f64(&mut faults.timeout_ratio, self.timeout_ratio);
        set_f64(&mut faults.error_5xx_ratio, self.error_5xx_ratio);
        set_f64(
            &mut faults.error_5xx_after_processing_ratio,
            self.error_5xx_after_processing_ratio,
        );
        set_f64(&mut faults.reset_ratio, self.reset_ratio);
        set_f64(
            &mut faults.webhook_duplicate_ratio,
            self.webhook_duplicate_ratio,
        );
        set_f64(&mut faults.webhook_loss_ratio, self.webhook_loss_ratio);
        set_f64(
            &mut faults.webhook_bad_signature_ratio,
            self.webhook_bad_signature_ratio,
        );
        let set_ms = |field: &mut u64, flag: Option<u64>| {
            if let Some(value) = flag {
                *field = value;
            }
        };
        set_ms(&mut faults.latency_ms, self.latency_ms);
        if let Some(workers) = self.workers {
            faults.workers = workers;
        }
        set_ms(&mut faults.slow_ms, self.slow_ms);
        set_ms(&mut faults.timeout_hold_ms, self.timeout_hold_ms);
        set_ms(&mut faults.webhook_delay_ms, self.webhook_delay_ms);
        if let Some(window) = self.webhook_reorder_window {
            faults.webhook_reorder_window = window;
        }
        if let Some(skew_s) = self.webhook_signature_skew_s {
            faults.webhook_signature_skew_s = skew_s;
        }
        faults.validate().context("invalid fault knobs")?;
        Ok(faults)
    }

    fn config(&self) -> anyhow::Result<Config> {
        let webhook = self.webhook_url.as_ref().map(|url| WebhookTarget {
            url: url.clone(),
            secrets: self.webhook_secret.clone(),
        });
        Ok(Config {
            seed: self.seed,
            faults: self.faults()?,
            limits: Limits {
                payments_max: self.payments_max,
                events_max: self.events_max,
                idempotency_records_max: self.idempotency_records_max,
            },
            webhook,
        })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let config = cli.config()?;
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .with_context(|| format!("binding {}", cli.listen))?;
    let addr = listener.local_addr()?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening on {addr}")?;
    stdout.flush()?;
    paysim::serve(listener, config, shutdown_signal()).await
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(_) => return interrupt.await.unwrap_or(()),
        };
    tokio::select! {
        _ = interrupt => {}
        _ = terminate.recv() => {}
    }
}
