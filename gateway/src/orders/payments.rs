//! The payment provider the config names.

use std::sync::Arc;

use prometheus::IntCounter;
use sluice_checkout::webhook::WebhookEvent;
use sluice_checkout::{
    Faults, HttpProvider, HttpProviderConfig, PaymentProvider, SimConfig, SimulatedProvider,
    SystemClock, ThreadSleeper,
};
use sluice_policies::model::{PaymentProviderKind, Payments};
use sluice_policies::Config;
use tokio::sync::mpsc;

/// Connecting to an HTTP provider takes at most this long (the call
/// timeout bounds the rest).
const CONNECT_TIMEOUT_MS_MAX: u64 = 1_000;
/// Simulator events waiting to be sent as webhooks, at most; past it an
/// event is dropped (counted): the payments reconciler still reads it from
/// the simulator's event list.
pub const SIM_WEBHOOK_QUEUE_EVENTS_MAX: usize = 1024;

/// The provider the config names, and for the simulator the queue of
/// events its webhooks carry (see `crate::sim_webhooks`).
pub type Provider = (
    Arc<dyn PaymentProvider>,
    Option<mpsc::Receiver<WebhookEvent>>,
);

/// The [`Provider`] the config names; an error when the HTTP provider's
/// client cannot be built.
pub fn provider(config: &Payments, dropped: IntCounter) -> Result<Provider, String> {
    match config.provider {
        PaymentProviderKind::Simulated => {
            let per_mille = |ratio: f64| (ratio * 1000.0).round() as u32;
            let sim = SimConfig {
                seed: rand::random(),
                slow_ms: config.simulated_slow.as_millis() as u64,
                faults: Faults {
                    timeout_per_mille: per_mille(config.simulated_timeout_ratio),
                    error_5xx_per_mille: per_mille(config.simulated_error_ratio),
                    refuse_capture_per_mille: 0,
                    latency_ms: config.simulated_latency.as_millis() as u64,
                },
            };
            let provider =
                SimulatedProvider::with(sim, Arc::new(SystemClock), Arc::new(ThreadSleeper));
            let (tx, rx) = mpsc::channel(SIM_WEBHOOK_QUEUE_EVENTS_MAX);
            provider.set_event_hook(Arc::new(move |event: &WebhookEvent| {
                if tx.try_send(event.clone()).is_err() {
                    dropped.inc();
                }
            }));
            Ok((Arc::new(provider), Some(rx)))
        }
        PaymentProviderKind::Http => {
            let timeout_ms = config.timeout.as_millis() as u64;
            let provider = HttpProvider::new(HttpProviderConfig {
                base_url: config.url.clone().unwrap_or_default(),
                connect_timeout_ms: timeout_ms.min(CONNECT_TIMEOUT_MS_MAX),
                call_timeout_ms: timeout_ms,
                api_key: config.api_key.as_ref().map(|k| k.expose().to_string()),
                currency: config.currency.clone(),
                name: "http".into(),
            })
            .map_err(|e| format!("[payments] provider = \"http\": {e}"))?;
            Ok((Arc::new(provider), None))
        }
    }
}

/// Why `config` looks like more than the demo while the simulator takes
/// the payments (it confirms orders and charges nothing); empty when it
/// does not, or when a real provider is configured.
pub fn simulator_outside_demo(config: &Config) -> Vec<&'static str> {
    if config.payments.provider != PaymentProviderKind::Simulated {
        return Vec::new();
    }
    let g = &config.gateway;
    let mut why = Vec::new();
    if !g.listen.ip().is_loopback() {
        why.push("the public listener is not on loopback");
    }
    if g.origin.is_some() {
        why.push("a storefront origin is set");
    }
    if g.tls.is_some() {
        why.push("the public listener terminates TLS");
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        sluice_policies::parse_str(text, std::path::Path::new("t.toml")).unwrap()
    }

    #[test]
    fn the_simulator_outside_the_demo_is_named() {
        let demo = config("[gateway]\nlisten = \"127.0.0.1:8080\"\n");
        assert!(simulator_outside_demo(&demo).is_empty());
        let public =
            config("[gateway]\nlisten = \"0.0.0.0:8080\"\norigin = \"http://127.0.0.1:3000\"\n");
        assert_eq!(
            simulator_outside_demo(&public),
            [
                "the public listener is not on loopback",
                "a storefront origin is set"
            ]
        );
        let real = config(
            "[gateway]\nlisten = \"0.0.0.0:8080\"\n[payments]\nprovider = \"http\"\nurl = \"http://127.0.0.1:7070\"\n",
        );
        assert!(simulator_outside_demo(&real).is_empty());
    }
}
