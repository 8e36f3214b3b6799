//! The in-process simulator's webhooks, sent as a real provider sends
//! them: every event the simulator emits waits in a bounded queue
//! ([`crate::orders::SIM_WEBHOOK_QUEUE_EVENTS_MAX`]), is signed
//! `Sluice-Signature: t=…,v1=…` with the first secret for provider
//! `simulated`, and is `POST`ed to this gateway's own
//! `/webhooks/simulated`, one at a time, in order.
//!
//! Without a secret an event is not sent (counted `dropped`). An answer
//! of `2xx` delivers it; `5xx` or no answer is retried with
//! backoff up to [`ATTEMPTS_MAX`] times; any other `4xx` is final. Nothing
//! depends on delivery: the checkout already wrote what the answer said,
//! and the payments reconciler reads the simulator's event list. The
//! webhook path is exercised as a provider would exercise it, duplicates
//! included.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use sluice_checkout::webhook::{sign, WebhookEvent, SIGNATURE_HEADER};

use crate::clock::now_ms;
use crate::orders::Backoff;
use crate::state::Shared;

/// Sends of one event, at most.
pub const ATTEMPTS_MAX: u32 = 5;
/// One send, at most.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(2);
/// The `{provider}` the simulator signs for.
pub const PROVIDER: &str = "simulated";

pub struct SimWebhooks {
    shared: Arc<Shared>,
}

impl SimWebhooks {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

/// Where a gateway listening on `listen` reaches itself: the same port on
/// loopback when it listens on every address.
pub fn self_url(listen: SocketAddr, tls: bool) -> String {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    let scheme = if tls { "https" } else { "http" };
    format!(
        "{scheme}://{}/webhooks/{PROVIDER}",
        SocketAddr::new(ip, listen.port())
    )
}

/// What one send came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    Delivered,
    /// Worth sending again (no answer, 5xx, 408, 429).
    Retry,
    /// Refused for good (another 4xx).
    Refused,
    /// Not sent: no secret for provider `simulated` (warned once at start).
    Unsigned,
}

/// What an answer's status means for the sender.
pub fn classify(status: u16) -> Sent {
    match status {
        200..=299 => Sent::Delivered,
        408 | 429 | 500..=599 => Sent::Retry,
        _ => Sent::Refused,
    }
}

fn client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .timeout(SEND_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        // The gateway calls its own listener: with TLS, its certificate
        // names the public host, not loopback, so it is not checked here.
        .danger_accept_invalid_certs(true)
        .build()
}

/// One signed `POST`.
async fn send(client: &reqwest::Client, url: &str, secret: &[u8], body: &[u8], now_s: i64) -> Sent {
    let signature = sign(secret, now_s, body);
    match client
        .post(url)
        .header("content-type", "application/json")
        .header(SIGNATURE_HEADER, &signature)
        .body(body.to_vec())
        .send()
        .await
    {
        Ok(answer) => classify(answer.status().as_u16()),
        Err(_) => Sent::Retry,
    }
}

impl SimWebhooks {
    /// Sends one event, retrying as [`classify`] says; the final result.
    async fn deliver(&self, client: &reqwest::Client, url: &str, event: &WebhookEvent) -> Sent {
        let metrics = &self.shared.metrics.webhook_deliveries;
        let body = serde_json::to_vec(event).expect("events serialize");
        let mut backoff = Backoff::default();
        for attempt in 1..=ATTEMPTS_MAX {
            // Read per send: the secrets reload.
            let secret = self
                .shared
                .runtime()
                .config
                .payments
                .webhook_secrets_for(PROVIDER)
                .and_then(|s| s.first())
                .map(|s| s.expose().as_bytes().to_vec());
            let Some(secret) = secret else {
                return Sent::Unsigned;
            };
            let now_s = (now_ms() / 1000) as i64;
            let sent = send(client, url, &secret, &body, now_s).await;
            if sent != Sent::Retry || attempt == ATTEMPTS_MAX {
                return sent;
            }
            metrics.with_label_values(&["retried"]).inc();
            tokio::time::sleep(backoff.failed(rand::random::<f64>())).await;
        }
        Sent::Retry
    }
}

#[async_trait]
impl BackgroundService for SimWebhooks {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Some(mut events) = self.shared.orders.take_sim_events() else {
            return;
        };
        let rt = self.shared.runtime();
        if rt.config.payments.webhook_secrets_for(PROVIDER).is_none() {
            tracing::warn!(
                "the simulated provider has no webhook secret ([payments.webhooks.simulated] or payments.webhook_secrets): its webhooks are not sent"
            );
        }
        let url = self_url(rt.config.gateway.listen, self.shared.tls);
        drop(rt);
        let client = match client() {
            Ok(client) => client,
            Err(e) => {
                tracing::error!("simulator webhooks not sent: no HTTP client: {e}");
                return;
            }
        };
        let metrics = &self.shared.metrics.webhook_deliveries;
        loop {
            let event = tokio::select! {
                _ = shutdown.changed() => return,
                event = events.recv() => match event {
                    Some(event) => event,
                    None => return,
                },
            };
            let result = tokio::select! {
                _ = shutdown.changed() => return,
                sent = self.deliver(&client, &url, &event) => sent,
            };
            let label = match result {
                Sent::Delivered => "delivered",
                Sent::Unsigned => "dropped",
                Sent::Retry | Sent::Refused => {
                    tracing::warn!(event = %event.id, "simulator webhook not delivered");
                    "failed"
                }
            };
            metrics.with_label_values(&[label]).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_reaches_itself_on_loopback() {
        assert_eq!(
            self_url("0.0.0.0:8080".parse().unwrap(), false),
            "http://127.0.0.1:8080/webhooks/simulated"
        );
        assert_eq!(
            self_url("[::]:8443".parse().unwrap(), true),
            "https://[::1]:8443/webhooks/simulated"
        );
        assert_eq!(
            self_url("10.0.0.5:80".parse().unwrap(), false),
            "http://10.0.0.5:80/webhooks/simulated"
        );
    }

    #[test]
    fn only_no_answer_and_server_trouble_are_retried() {
        assert_eq!(classify(200), Sent::Delivered);
        assert_eq!(classify(503), Sent::Retry);
        assert_eq!(classify(429), Sent::Retry);
        assert_eq!(classify(401), Sent::Refused);
        assert_eq!(classify(404), Sent::Refused);
    }
}
