//! `/readyz`: is this instance fit to take traffic?
//!
//! Ready means the config is loaded, the instance is not draining, the
//! order store takes a real durable write, and, with
//! `payments.provider = "http"`, the provider accepts a TCP connection.
//! The probes run off the admin listener's thread (the store write on the
//! blocking pool, the connect as async I/O), each within
//! [`PROBE_TIMEOUT_MS`], and their outcome is kept for [`CACHE_MS`], so a
//! probe storm costs at most one store write per period. A store probe that
//! has not come back is never doubled: the next check reports it pending.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_checkout::OrderBackend;
use sluice_policies::model::{PaymentProviderKind, Payments};

/// How long one probe may take before it counts as failed.
pub const PROBE_TIMEOUT_MS: u64 = 1_000;
/// How long a probe's outcome is reused.
pub const CACHE_MS: u64 = 1_000;

/// What one probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    Ok,
    Failed(String),
}

/// The reasons not to be ready, from the probes' outcomes; empty is ready.
pub fn reasons(shutting_down: bool, store: &Probe, provider: Option<&Probe>) -> Vec<String> {
    let mut out = Vec::new();
    if shutting_down {
        out.push("shutting down".to_string());
    }
    if let Probe::Failed(why) = store {
        out.push(format!("order store cannot be written: {why}"));
    }
    if let Some(Probe::Failed(why)) = provider {
        out.push(format!("payment provider unreachable: {why}"));
    }
    out
}

/// What is wrong but does not make the instance unready: with
/// `[cluster] redis_url`, a room store this gateway cannot reach. Redis is
/// shared by the fleet, so when it is down every gateway would fail
/// readiness at once and a balancer (or a Kubernetes Service) would take
/// them all out, stopping the passes already issued, the catalog and the
/// checkouts that still work; `/readyz` says it instead, and
/// `sluice_fleet_store_up` with the alert `SluiceRoomStoreUnreachable`
/// tells the operator, who takes a gateway cut off alone out by hand.
pub fn degraded(store: Option<&crate::queue::fleet::StoreHealth>) -> Vec<String> {
    use crate::queue::fleet::StoreHealth;
    match store {
        Some(StoreHealth::Unreachable { for_ms, error }) => {
            let why = error.as_deref().unwrap_or("no answer yet");
            vec![format!(
                "room store (Redis) unreachable for {} s: {why}; joins answer 503 \
                 store_unavailable and waiting shoppers see paused, passes keep working",
                for_ms / 1000
            )]
        }
        _ => Vec::new(),
    }
}

/// The probes, with their last outcome.
#[derive(Default)]
pub struct Readiness {
    last: tokio::sync::Mutex<Option<(Instant, Probe, Option<Probe>)>>,
    store_probe_running: Arc<AtomicBool>,
}

impl Readiness {
    /// The store's and the provider's probe outcomes, fresh or from the
    /// last [`CACHE_MS`].
    pub async fn probe(
        &self,
        store: Arc<dyn OrderBackend>,
        payments: &Payments,
    ) -> (Probe, Option<Probe>) {
        let mut last = self.last.lock().await;
        if let Some((at, store, provider)) = last.as_ref() {
            if at.elapsed() < Duration::from_millis(CACHE_MS) {
                return (store.clone(), provider.clone());
            }
        }
        let provider_url = (payments.provider == PaymentProviderKind::Http)
            .then(|| payments.url.clone().unwrap_or_default());
        let (store, provider) = tokio::join!(self.probe_store(store), async {
            match provider_url {
                Some(url) => Some(probe_provider(&url).await),
                None => None,
            }
        });
        *last = Some((Instant::now(), store.clone(), provider.clone()));
        (store, provider)
    }

    async fn probe_store(&self, store: Arc<dyn OrderBackend>) -> Probe {
        if self.store_probe_running.swap(true, Ordering::AcqRel) {
            return Probe::Failed("the last write probe has not finished".into());
        }
        let running = self.store_probe_running.clone();
        let write = tokio::task::spawn_blocking(move || {
            let result = store.probe_write(crate::clock::now_ms() as i64);
            running.store(false, Ordering::Release);
            result
        });
        match tokio::time::timeout(Duration::from_millis(PROBE_TIMEOUT_MS), write).await {
            Ok(Ok(Ok(()))) => Probe::Ok,
            Ok(Ok(Err(e))) => Probe::Failed(e.to_string()),
            Ok(Err(e)) => Probe::Failed(format!("probe task failed: {e}")),
            Err(_) => Probe::Failed(format!("no durable write within {PROBE_TIMEOUT_MS} ms")),
        }
    }
}

/// A TCP connect to the provider's host and port.
async fn probe_provider(url: &str) -> Probe {
    let Some(authority) = authority(url) else {
        return Probe::Failed(format!("{url:?} names no host"));
    };
    let timeout = Duration::from_millis(PROBE_TIMEOUT_MS);
    let connect = async {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(&authority).await?.collect();
        let mut last = std::io::Error::other("no address");
        for addr in addrs {
            match tokio::net::TcpStream::connect(addr).await {
                Ok(_) => return Ok(()),
                Err(e) => last = e,
            }
        }
        Err(last)
    };
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(())) => Probe::Ok,
        Ok(Err(e)) => Probe::Failed(format!("{authority}: {e}")),
        Err(_) => Probe::Failed(format!(
            "{authority}: no connection within {PROBE_TIMEOUT_MS} ms"
        )),
    }
}

/// `host:port` of an `http(s)://` URL, the port defaulted by scheme.
fn authority(url: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    let host = uri.host()?;
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some(if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failed_probe_is_a_reason() {
        assert!(reasons(false, &Probe::Ok, None).is_empty());
        assert!(reasons(false, &Probe::Ok, Some(&Probe::Ok)).is_empty());
        let r = reasons(
            true,
            &Probe::Failed("disk full".into()),
            Some(&Probe::Failed("refused".into())),
        );
        assert_eq!(r.len(), 3, "{r:?}");
        assert!(
            r[1].contains("disk full") && r[2].contains("refused"),
            "{r:?}"
        );
    }

    #[test]
    fn authority_defaults_the_port_by_scheme() {
        assert_eq!(
            authority("http://pay.example/v1").as_deref(),
            Some("pay.example:80")
        );
        assert_eq!(
            authority("https://pay.example").as_deref(),
            Some("pay.example:443")
        );
        assert_eq!(
            authority("http://127.0.0.1:9/x").as_deref(),
            Some("127.0.0.1:9")
        );
        assert_eq!(
            authority("http://[::1]:8443/").as_deref(),
            Some("[::1]:8443")
        );
        assert_eq!(authority("not a url"), None);
    }

    #[tokio::test]
    async fn a_port_nobody_listens_on_fails_the_provider_probe() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let probe = probe_provider(&format!("http://127.0.0.1:{port}")).await;
        assert!(matches!(probe, Probe::Failed(_)), "{probe:?}");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        assert_eq!(probe_provider(&url).await, Probe::Ok);
    }
}
