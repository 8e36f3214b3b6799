//! `kind = "siteverify"`: the widget's token checked with the vendor's
//! verifier (the Turnstile / hCaptcha / reCAPTCHA shape): `POST`
//! form-encoded `secret`, `response`, `remoteip` to `verify_url`, JSON
//! `{"success": bool, "hostname": "…"}` back.
//!
//! The call runs on the workspace's HTTP client's own runtime
//! (`sluice_checkout::http_client::HttpClient`), awaited by the join
//! without blocking its worker, within the room's `timeout_ms`; at most
//! `in_flight_max` calls per room are in flight (a semaphore), and a join
//! over that bound is answered `503` with `Retry-After` whatever
//! `on_verifier_error` says ([`Verdict::Busy`]).

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use sluice_checkout::http_client::HttpClient;
use sluice_policies::model::SiteVerify;
use tokio::sync::Semaphore;

/// What the verifier's answer means for the join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// `success: true`, from one of the room's `hostnames`.
    Yes,
    /// `success: false`, or a token solved on another site.
    No(&'static str),
    /// Slow, down, an error status or an answer that is not the shape:
    /// `on_verifier_error` decides.
    Error(String),
    /// Too many calls in flight: `503`.
    Busy,
    /// The token itself is not something to send (control characters).
    Malformed,
}

#[derive(Debug, Deserialize)]
struct Answer {
    success: bool,
    #[serde(default)]
    hostname: Option<String>,
}

/// One room's verifier.
pub struct Verifier {
    config: SiteVerify,
    in_flight: Arc<Semaphore>,
}

/// The gateway's one client for verifier calls (made on first use).
fn http() -> Option<&'static HttpClient> {
    static CLIENT: OnceLock<Option<HttpClient>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            HttpClient::new(
                reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .pool_max_idle_per_host(64),
                "sluice-verify",
            )
            .map_err(|e| tracing::error!("the challenge verifier's client: {e}"))
            .ok()
        })
        .as_ref()
}

impl Verifier {
    pub fn new(config: SiteVerify) -> Self {
        let permits = config.in_flight_max.get() as usize;
        Self {
            config,
            in_flight: Arc::new(Semaphore::new(permits)),
        }
    }

    pub fn config(&self) -> &SiteVerify {
        &self.config
    }

    /// Asks the verifier about `response`, sent by `client`.
    pub async fn verify(&self, response: &str, client: Option<IpAddr>) -> Verdict {
        if !response.bytes().all(|b| b.is_ascii_graphic()) {
            return Verdict::Malformed;
        }
        let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
            return Verdict::Busy;
        };
        let Some(http) = http() else {
            return Verdict::Error("no HTTP client".into());
        };
        let mut form = vec![
            ("secret", self.config.secret.expose().to_owned()),
            ("response", response.to_owned()),
        ];
        if let Some(ip) = client {
            form.push(("remoteip", ip.to_string()));
        }
        let request = http
            .client()
            .post(&self.config.verify_url)
            .timeout(self.config.timeout)
            .form(&form);
        let call = http.spawn(async move {
            let resp = request.send().await.map_err(|e| {
                if e.is_timeout() {
                    "timed out".to_string()
                } else {
                    format!("unreachable: {e}")
                }
            })?;
            let status = resp.status();
            if !status.is_success() {
                return Err(format!("answered {status}"));
            }
            let body = resp.bytes().await.map_err(|e| format!("body: {e}"))?;
            serde_json::from_slice::<Answer>(&body)
                .map_err(|_| "answered something that is not its JSON".to_string())
        });
        // The call's own timeout bounds it; this one only guards against a
        // runtime that stopped answering.
        let deadline = self.config.timeout + std::time::Duration::from_millis(250);
        let answer = match tokio::time::timeout(deadline, call).await {
            Ok(Some(answer)) => answer,
            Ok(None) => Err("the verifier's runtime stopped".into()),
            Err(_) => Err("timed out".into()),
        };
        drop(permit);
        match answer {
            Err(why) => Verdict::Error(why),
            Ok(a) => judge(&a, &self.config.hostnames),
        }
    }
}

/// A verifier's answer against the room's `hostnames` (empty: any).
fn judge(answer: &Answer, hostnames: &[String]) -> Verdict {
    if !answer.success {
        return Verdict::No("the verifier said no");
    }
    if hostnames.is_empty() {
        return Verdict::Yes;
    }
    match &answer.hostname {
        Some(h) if hostnames.iter().any(|want| want.eq_ignore_ascii_case(h)) => Verdict::Yes,
        _ => Verdict::No("solved for another hostname"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yes_counts_only_from_a_listed_hostname() {
        let yes = |h: Option<&str>| Answer {
            success: true,
            hostname: h.map(str::to_owned),
        };
        let hosts = vec!["shop.example".to_string()];
        assert_eq!(judge(&yes(Some("shop.example")), &hosts), Verdict::Yes);
        assert_eq!(judge(&yes(Some("SHOP.example")), &hosts), Verdict::Yes);
        assert!(matches!(
            judge(&yes(Some("evil.example")), &hosts),
            Verdict::No(_)
        ));
        assert!(matches!(judge(&yes(None), &hosts), Verdict::No(_)));
        assert_eq!(judge(&yes(None), &[]), Verdict::Yes);
        let no = Answer {
            success: false,
            hostname: Some("shop.example".into()),
        };
        assert!(matches!(judge(&no, &hosts), Verdict::No(_)));
    }
}
