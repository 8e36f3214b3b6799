//! Publishing order events over HTTP to the storefront.
//!
//! A batch is `POST`ed as `{"events": [...]}`; any 2xx acknowledges every
//! event in it, anything else (or no answer within the timeout) leaves them
//! pending, and the worker tries again later with backoff. Delivery is at
//! least once: the storefront deduplicates by event `id`.
//!
//! The relay pass is synchronous (it reads and marks rows on the store),
//! so the `POST` goes out on the workspace's HTTP client
//! ([`sluice_checkout::HttpClient`]) and the pass waits for it.

use std::time::Duration;

use sluice_checkout::http_client::wait;
use sluice_checkout::{ClientError, HttpClient, OutboxEvent, Sink, SinkError};

pub struct HttpSink {
    url: String,
    http: HttpClient,
}

impl HttpSink {
    pub fn new(url: &str, timeout: Duration) -> Result<Self, ClientError> {
        let builder = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none());
        Ok(Self {
            url: url.to_string(),
            http: HttpClient::new(builder, "sluice-outbox")?,
        })
    }
}

impl Sink for HttpSink {
    fn publish(&mut self, events: &[OutboxEvent]) -> Result<(), SinkError> {
        let body = serde_json::to_vec(&serde_json::json!({ "events": events }))
            .map_err(|e| SinkError::Refused(e.to_string()))?;
        let request = self
            .http
            .client()
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body)
            .send();
        let status = wait(self.http.spawn(request))
            .ok_or_else(|| SinkError::Refused(format!("POST {}: client stopped", self.url)))?
            .map_err(|e| SinkError::Refused(format!("POST {}: {e}", self.url)))?
            .status()
            .as_u16();
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(SinkError::Refused(format!(
                "POST {} answered {status}",
                self.url
            )))
        }
    }
}

/// Exponential backoff with jitter for a failing sink.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: u32,
}

/// The first retry waits about this long.
pub const BACKOFF_BASE: Duration = Duration::from_millis(200);
/// No wait is longer than this.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

impl Backoff {
    /// Time to wait before the next attempt after another failure; `jitter`
    /// in `[0, 1)` spreads retries of many gateways apart.
    pub fn failed(&mut self, jitter: f64) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let exp = BACKOFF_BASE.saturating_mul(1u32 << self.failures.min(16)) / 2;
        let wait = exp.min(BACKOFF_MAX);
        wait.mul_f64(0.5 + jitter.clamp(0.0, 1.0) / 2.0)
    }

    pub fn succeeded(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_a_cap_and_resets() {
        let mut b = Backoff::default();
        let waits: Vec<Duration> = (0..12).map(|_| b.failed(1.0)).collect();
        assert_eq!(waits[0], BACKOFF_BASE);
        assert_eq!(waits[1], BACKOFF_BASE * 2);
        assert!(waits.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*waits.last().unwrap(), BACKOFF_MAX);
        assert!(
            b.failed(0.0) >= BACKOFF_MAX / 2,
            "jitter never cuts more than half"
        );
        b.succeeded();
        assert_eq!(b.failed(1.0), BACKOFF_BASE);
    }
}
