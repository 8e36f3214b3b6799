//! The origin's address when `gateway.origin` names a host, resolved off
//! the proxy threads.
//!
//! pingora's `HttpPeer::new` resolves a host name with the blocking
//! `getaddrinfo` on the calling thread, and panics when it fails. Called
//! per request, as before, that put a DNS round trip (or a resolver's
//! multi-second timeout) on a proxy worker thread and turned a DNS outage
//! into dropped connections. Instead:
//!
//! - [`OriginDns`] holds the last good addresses of the origin's host;
//!   a request takes the first (the resolver's preferred order, as pingora
//!   did) without any I/O, and gets
//!   `502 bad_gateway` in the contract's shape while none is known yet;
//! - the `sluice origin dns` background service ([`OriginDnsService`])
//!   resolves with tokio's `lookup_host` (its bounded blocking pool):
//!   at once when the origin changes (start, reload), then every
//!   [`REFRESH`]; a failed lookup keeps the last good addresses, so a DNS
//!   blip does not take the store down, and is logged and counted
//!   (`sluice_origin_dns_failures_total`).
//!
//! An origin given as an IP address never gets here (the runtime builds
//! its peer once).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use prometheus::IntCounter;

/// How often a resolved host is looked up again (as nginx's `resolver
/// valid=30s`): address changes reach the gateway within this.
pub const REFRESH: Duration = Duration::from_secs(30);
/// How often the service looks for an origin that changed or is not
/// resolved yet.
const CHECK_EVERY: Duration = Duration::from_millis(250);
/// How soon a host that has no address yet is looked up again.
const RETRY: Duration = Duration::from_secs(1);
/// The longest one lookup may take before it counts as failed.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The addresses of one `host:port`.
#[derive(Debug)]
struct Resolved {
    target: String,
    addrs: Vec<SocketAddr>,
}

/// The last good addresses of the origin's host, shared by every runtime.
#[derive(Debug)]
pub struct OriginDns {
    current: ArcSwapOption<Resolved>,
    failures: IntCounter,
}

impl Default for OriginDns {
    fn default() -> Self {
        Self::new()
    }
}

impl OriginDns {
    pub fn new() -> Self {
        Self {
            current: ArcSwapOption::empty(),
            failures: IntCounter::new(
                "sluice_origin_dns_failures_total",
                "Lookups of gateway.origin's host name that failed or timed out (the last good addresses stay in use).",
            )
            .expect("valid metric"),
        }
    }

    pub fn failures(&self) -> &IntCounter {
        &self.failures
    }

    /// The preferred address of `target` (`host:port`); `None` until
    /// `target` has been resolved.
    pub fn address(&self, target: &str) -> Option<SocketAddr> {
        let current = self.current.load();
        let resolved = current.as_ref().filter(|r| r.target == target)?;
        resolved.addrs.first().copied()
    }

    /// Whether `target` has addresses.
    fn knows(&self, target: &str) -> bool {
        self.current
            .load()
            .as_ref()
            .is_some_and(|r| r.target == target)
    }

    /// Looks `target` up once and keeps the answer; on failure keeps what
    /// it had.
    pub async fn resolve(&self, target: &str) {
        let looked_up = tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host(target)).await;
        match looked_up {
            Ok(Ok(addrs)) => {
                let addrs: Vec<SocketAddr> = addrs.collect();
                if addrs.is_empty() {
                    self.failed(target, "no addresses");
                    return;
                }
                self.store(target, addrs);
            }
            Ok(Err(e)) => self.failed(target, &e.to_string()),
            Err(_) => self.failed(target, "timed out"),
        }
    }

    /// The first lookup, on the thread that starts the gateway (never a
    /// proxy thread), so the first requests find the origin.
    pub fn resolve_at_start(&self, target: &str) {
        use std::net::ToSocketAddrs;
        match target.to_socket_addrs() {
            Ok(addrs) => {
                let addrs: Vec<SocketAddr> = addrs.collect();
                if addrs.is_empty() {
                    self.failed(target, "no addresses");
                } else {
                    self.store(target, addrs);
                }
            }
            Err(e) => self.failed(target, &e.to_string()),
        }
    }

    fn store(&self, target: &str, addrs: Vec<SocketAddr>) {
        self.current.store(Some(Arc::new(Resolved {
            target: target.to_string(),
            addrs,
        })));
    }

    fn failed(&self, target: &str, why: &str) {
        self.failures.inc();
        let keeping = self.knows(target);
        tracing::warn!(
            origin = target,
            keeping_last_addresses = keeping,
            "looking up the origin's host failed: {why}"
        );
    }
}

/// What the service should keep resolved now: the current config's origin
/// `host:port` and where its addresses go (`None` while the origin is an
/// IP address or absent). Read at every check, so a reload is followed.
pub type CurrentOrigin = Box<dyn Fn() -> Option<(String, Arc<OriginDns>)> + Send + Sync>;

/// The background service that keeps [`OriginDns`] fresh for the current
/// config's origin.
pub struct OriginDnsService {
    current: CurrentOrigin,
}

impl OriginDnsService {
    pub fn new(current: CurrentOrigin) -> Self {
        Self { current }
    }
}

#[async_trait]
impl BackgroundService for OriginDnsService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut tick = tokio::time::interval(CHECK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_lookup: Option<(String, tokio::time::Instant)> = None;
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tick.tick() => {}
            }
            let Some((target, dns)) = (self.current)() else {
                continue;
            };
            let due = match &last_lookup {
                None => true,
                Some((last, at)) => {
                    last != &target
                        || at.elapsed() >= REFRESH
                        || (!dns.knows(&target) && at.elapsed() >= RETRY)
                }
            };
            if due {
                dns.resolve(&target).await;
                last_lookup = Some((target, tokio::time::Instant::now()));
            }
        }
    }
}
