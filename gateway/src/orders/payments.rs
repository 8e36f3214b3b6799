//! The payment provider the config names.

use std::sync::Arc;

use sluice_checkout::{
    Faults, HttpProvider, HttpProviderConfig, PaymentProvider, SimConfig, SimulatedProvider,
    SystemClock, ThreadSleeper,
};
use sluice_policies::model::{PaymentProviderKind, Payments};

/// Connecting to an HTTP provider takes at most this long (the call
/// timeout bounds the rest).
const CONNECT_TIMEOUT_MS_MAX: u64 = 1_000;

pub fn provider(config: &Payments) -> Arc<dyn PaymentProvider> {
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
            Arc::new(SimulatedProvider::with(
                sim,
                Arc::new(SystemClock),
                Arc::new(ThreadSleeper),
            ))
        }
        PaymentProviderKind::Http => {
            let timeout_ms = config.timeout.as_millis() as u64;
            Arc::new(HttpProvider::new(HttpProviderConfig {
                base_url: config.url.clone().unwrap_or_default(),
                connect_timeout_ms: timeout_ms.min(CONNECT_TIMEOUT_MS_MAX),
                call_timeout_ms: timeout_ms,
                api_key: None,
                name: "http".into(),
            }))
        }
    }
}
