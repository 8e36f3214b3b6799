//! The cap on open public connections, and the file-descriptor limit
//! under it.
//!
//! At start the process raises its `RLIMIT_NOFILE` soft limit to the hard
//! limit ([`raise_fd_limit`]). `gateway.max_connections` defaults to
//! [`default_max_connections`] of that limit: half of what is left after
//! [`FD_RESERVE`] descriptors for the stores, the listeners, the admin
//! listener, logs and the outbox, since a proxied connection may hold a
//! second descriptor to the origin.
//!
//! Design: pingora's accept loop hands every accepted connection (after
//! its TLS handshake, if any) to the service's application. The public
//! service's application is [`Public`], which wraps the HTTP proxy: it
//! takes a slot of the [`ConnectionCap`] before anything else and holds it
//! while it drives the proxy over every request of the connection (the
//! keep-alive loop pingora would otherwise run), so the slot is given back
//! exactly when the connection closes. Beyond the cap a new connection is
//! closed at once: its descriptor lives for microseconds, so idle
//! connections can never use up the descriptors that SQLite and the admin
//! listener need. pingora's `connection_filter` sees the accept but not
//! the close, so it cannot count open connections; it is used as well, as
//! [`CapFilter`]: while the cap is full it drops a new connection inside
//! the accept loop itself, before a task is spawned for it, so a burst of
//! thousands of connections past the cap never holds thousands of
//! descriptors at once while their tasks wait to run.
//!
//! On a TLS listener the slot is taken before the handshake instead
//! ([`BeforeTls`], pingora's pre-TLS callback), so connections that never
//! finish a handshake (pingora waits up to 60 s) count too: a flood of
//! silent TLS connections hits the cap, not the descriptor limit. The slot
//! rides on the socket itself, as its pingora `Tracer`, which is dropped
//! with the socket whether the handshake succeeds or not.
//!
//! With `gateway.proxy_protocol` on a plain TCP listener, [`Public`] also
//! reads the PROXY header first ([`crate::proxy_protocol`], within 3 s).
//!
//! Two more bounds keep a few clients from holding the slots:
//! - every request head must arrive within `gateway.header_timeout_s`
//!   ([`crate::head_deadline`]), so dripping a header byte by byte
//!   (slowloris) holds a slot for seconds, not forever;
//! - with `gateway.max_connections_per_client`, one client address may hold
//!   at most that many connections at once ([`PerClient`]); the client is
//!   the TCP peer, or the PROXY header's source. Peers in
//!   `gateway.trusted_proxies` (a CDN or load balancer whose connections
//!   carry many shoppers) are not counted. Off by default: shoppers behind
//!   one carrier-grade NAT share an address.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::listeners::PreTlsProcess;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::{GetSocketDigest, Stream};
use pingora::server::ShutdownWatch;
use pingora::upstreams::peer::{Tracer, Tracing};
use pingora::{Error, ErrorType};
use prometheus::{IntCounter, IntGauge, Registry};

use crate::head_deadline::HeadDeadline;

/// Descriptors kept back from the public connections: SQLite's database,
/// WAL and shared-memory files for the writer and readers, the listening
/// sockets, the admin listener's connections, the outbox and logs.
pub const FD_RESERVE: u64 = 512;
/// The least default cap, whatever the descriptor limit says.
pub const MAX_CONNECTIONS_DEFAULT_MIN: u64 = 64;

/// The default `max_connections` for a soft `RLIMIT_NOFILE` of
/// `nofile_soft`: `(nofile_soft - FD_RESERVE) / 2`, at least
/// [`MAX_CONNECTIONS_DEFAULT_MIN`].
pub fn default_max_connections(nofile_soft: u64) -> u64 {
    (nofile_soft.saturating_sub(FD_RESERVE) / 2).max(MAX_CONNECTIONS_DEFAULT_MIN)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft
/// limit in force afterwards.
pub fn raise_fd_limit() -> std::io::Result<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    Ok(getrlimit(Resource::RLIMIT_NOFILE)?.0)
}

/// Open public connections, at most `max`.
#[derive(Debug)]
pub struct ConnectionCap {
    max: usize,
    open: AtomicUsize,
    refused: AtomicU64,
    metrics: CapMetrics,
}

/// `sluice_connections_{open,max}` and `sluice_connections_refused_total`.
#[derive(Debug, Clone)]
struct CapMetrics {
    open: IntGauge,
    max: IntGauge,
    refused: IntCounter,
}

/// One open connection's slot; given back on drop.
#[derive(Debug)]
pub struct Slot(Arc<ConnectionCap>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.metrics.open.dec();
    }
}

impl ConnectionCap {
    pub fn new(max: usize) -> Arc<Self> {
        let metrics = CapMetrics {
            open: IntGauge::new("sluice_connections_open", "Public connections open now.")
                .expect("valid metric"),
            max: IntGauge::new(
                "sluice_connections_max",
                "gateway.max_connections in force.",
            )
            .expect("valid metric"),
            refused: IntCounter::new(
                "sluice_connections_refused_total",
                "Public connections closed at once because max_connections were open.",
            )
            .expect("valid metric"),
        };
        metrics.max.set(i64::try_from(max).unwrap_or(i64::MAX));
        Arc::new(Self {
            max,
            open: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            metrics,
        })
    }

    /// Adds the cap's metrics to `registry`.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        let m = &self.metrics;
        registry.register(Box::new(m.open.clone()))?;
        registry.register(Box::new(m.max.clone()))?;
        registry.register(Box::new(m.refused.clone()))
    }

    /// A slot, or `None` when `max` connections are open.
    pub fn try_acquire(self: &Arc<Self>) -> Option<Slot> {
        let taken = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < self.max).then_some(open + 1)
            });
        match taken {
            Ok(_) => {
                self.metrics.open.inc();
                Some(Slot(self.clone()))
            }
            Err(_) => {
                self.refuse();
                None
            }
        }
    }

    /// Counts a connection closed at once because the cap was reached, and
    /// logs the 1st, 2nd, 4th, 8th… of them.
    fn refuse(&self) {
        let refused = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        self.metrics.refused.inc();
        if refused.is_power_of_two() {
            tracing::warn!(
                max_connections = self.max,
                refused_total = refused,
                "public connection closed at once: max_connections open"
            );
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Connections closed at once because the cap was reached.
    #[cfg(test)]
    pub fn refused_total(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// Shards of [`PerClient`]'s counts, so connections from many addresses
/// do not meet on one lock.
const CLIENT_SHARDS: usize = 16;

/// Connections open per client address, at most `max` each.
#[derive(Debug)]
pub struct PerClient {
    max: u32,
    exempt: Vec<ipnet::IpNet>,
    hasher: std::hash::RandomState,
    shards: [Mutex<HashMap<IpAddr, u32>>; CLIENT_SHARDS],
    refused: IntCounter,
}

/// A client address already holds `max_connections_per_client`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientFull;

/// One counted connection of a client; given back on drop.
#[derive(Debug)]
pub struct ClientSlot {
    owner: Arc<PerClient>,
    ip: IpAddr,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut shard = self.owner.shard(self.ip).lock().expect("client counts");
        if let Some(open) = shard.get_mut(&self.ip) {
            *open -= 1;
            if *open == 0 {
                shard.remove(&self.ip);
            }
        }
    }
}

impl PerClient {
    pub fn new(max: u32, exempt: Vec<ipnet::IpNet>) -> Arc<Self> {
        Arc::new(Self {
            max,
            exempt,
            hasher: std::hash::RandomState::new(),
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
            refused: IntCounter::new(
                "sluice_connections_per_client_refused_total",
                "Public connections closed at once because their client address already held max_connections_per_client.",
            )
            .expect("valid metric"),
        })
    }

    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.refused.clone()))
    }

    fn shard(&self, ip: IpAddr) -> &Mutex<HashMap<IpAddr, u32>> {
        &self.shards[self.hasher.hash_one(ip) as usize % CLIENT_SHARDS]
    }

    /// `Ok(Some(slot))`: counted; `Ok(None)`: a trusted proxy, not counted;
    /// `Err(ClientFull)`: the client already holds `max` connections.
    pub fn try_acquire(self: &Arc<Self>, ip: IpAddr) -> Result<Option<ClientSlot>, ClientFull> {
        if self.exempt.iter().any(|net| net.contains(&ip)) {
            return Ok(None);
        }
        let ip = canonical_ip(ip);
        let mut shard = self.shard(ip).lock().expect("client counts");
        let open = shard.entry(ip).or_insert(0);
        if *open >= self.max {
            drop(shard);
            self.refused.inc();
            return Err(ClientFull);
        }
        *open += 1;
        Ok(Some(ClientSlot {
            owner: self.clone(),
            ip,
        }))
    }

    /// Connections counted for `ip` now.
    #[cfg(test)]
    pub fn open(&self, ip: IpAddr) -> u32 {
        let ip = canonical_ip(ip);
        let shard = self.shard(ip).lock().expect("client counts");
        shard.get(&ip).copied().unwrap_or(0)
    }
}

/// The address a connection is counted under: an IPv4-mapped IPv6
/// address as its IPv4 address (a dual-stack listener sees one client
/// once), any other IPv6 address as its /64 (one subscriber is given a
/// whole /64, as the join limiter counts too).
fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from_bits(
                v6.to_bits() & !((1u128 << 64) - 1),
            )),
        },
        v4 => v4,
    }
}

/// The accept loop's check: refuse at once while `max` connections are
/// open. [`Public`] still takes the slot (two accepts may pass this check
/// for the last free slot; the second is closed there).
#[derive(Debug)]
pub struct CapFilter(pub Arc<ConnectionCap>);

#[async_trait]
impl pingora::listeners::ConnectionFilter for CapFilter {
    async fn should_accept(&self, _addr: Option<&std::net::SocketAddr>) -> bool {
        let cap = &self.0;
        if cap.open() < cap.max {
            return true;
        }
        cap.refuse();
        false
    }
}

/// The public listener's application: the cap, the PROXY header on plain
/// TCP, then the HTTP proxy `A` for every request of the connection.
pub struct Public<A> {
    inner: Arc<A>,
    cap: Arc<ConnectionCap>,
    /// Read a PROXY protocol header first (plain TCP only: on TLS it is
    /// read before the handshake).
    proxy_protocol: bool,
    /// `gateway.header_timeout_s`.
    header_timeout: Duration,
    head_timeouts: IntCounter,
    /// `gateway.max_connections_per_client`, when set.
    per_client: Option<Arc<PerClient>>,
    /// TLS: [`BeforeTls`] already counted the connection.
    counted_before_tls: bool,
}

/// What [`Public`] needs besides the proxy and the cap.
#[derive(Debug, Clone)]
pub struct PublicLimits {
    /// Read a PROXY header first (plain TCP; on TLS [`BeforeTls`] does).
    pub proxy_protocol: bool,
    pub header_timeout: Duration,
    pub per_client: Option<Arc<PerClient>>,
    /// The listener is TLS: [`BeforeTls`] counts each connection before
    /// its handshake, so [`Public`] does not count it again.
    pub counted_before_tls: bool,
}

impl<A> Public<A> {
    pub fn new(inner: A, cap: Arc<ConnectionCap>, limits: PublicLimits) -> Self {
        Self {
            inner: Arc::new(inner),
            cap,
            proxy_protocol: limits.proxy_protocol,
            header_timeout: limits.header_timeout,
            head_timeouts: IntCounter::new(
                "sluice_connections_head_timeouts_total",
                "Public connections dropped because a request head did not arrive within header_timeout_s.",
            )
            .expect("valid metric"),
            per_client: limits.per_client,
            counted_before_tls: limits.counted_before_tls,
        }
    }

    /// Adds the head-timeout counter to `registry`.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.head_timeouts.clone()))
    }
}

/// The client address of a connection: the PROXY header's source when one
/// was read, else the TCP peer.
fn client_ip<S: GetSocketDigest + ?Sized>(stream: &S) -> Option<IpAddr> {
    let digest = stream.get_socket_digest()?;
    match digest.peer_addr()? {
        pingora::protocols::l4::socket::SocketAddr::Inet(addr) => Some(addr.ip()),
        pingora::protocols::l4::socket::SocketAddr::Unix(_) => None,
    }
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> ServerApp for Public<A> {
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        // Beyond the cap the connection is closed at once (counted and
        // logged by the cap).
        let _slot = match self.counted_before_tls {
            true => None,
            false => Some(self.cap.try_acquire()?),
        };
        if self.proxy_protocol {
            if let Err(e) = crate::proxy_protocol::accept(&mut *stream).await {
                tracing::debug!("dropping a connection: {e}");
                return None;
            }
        }
        let _client_slot = match (&self.per_client, client_ip(&*stream)) {
            (Some(per_client), Some(ip)) if !self.counted_before_tls => {
                per_client.try_acquire(ip).ok()?
            }
            _ => None,
        };
        let stream: Stream = Box::new(HeadDeadline::new(
            stream,
            self.header_timeout,
            self.head_timeouts.clone(),
        ));
        let mut next = self.inner.process_new(stream, shutdown).await;
        while let Some(stream) = next {
            let stream = HeadDeadline::rearm(stream).unwrap_or_else(|other| other);
            next = self.inner.process_new(stream, shutdown).await;
        }
        None
    }

    async fn cleanup(&self) {
        self.inner.cleanup().await;
    }
}

/// What a TLS connection holds from before its handshake until its
/// socket closes.
#[derive(Debug)]
struct Held {
    _slot: Slot,
    _client: Option<ClientSlot>,
}

/// [`Held`] kept on the socket as its pingora `Tracer`: the socket drops
/// it when it closes (and tells it first, `on_disconnected`).
#[derive(Debug)]
struct HeldBySocket(Mutex<Option<Held>>);

impl Tracing for HeldBySocket {
    fn on_connected(&self) {}

    fn on_disconnected(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// A copy holds nothing: the slot is the one socket's.
    fn boxed_clone(&self) -> Box<dyn Tracing> {
        Box::new(HeldBySocket(Mutex::new(None)))
    }
}

/// The public TLS listener's step before each handshake: a slot of the
/// cap, the PROXY header when `proxy_protocol` is on, and the client's
/// count when `max_connections_per_client` is set; any of them refused
/// drops the connection before a byte of TLS is spent on it.
pub struct BeforeTls {
    pub cap: Arc<ConnectionCap>,
    pub per_client: Option<Arc<PerClient>>,
    pub proxy_protocol: bool,
}

#[async_trait]
impl PreTlsProcess for BeforeTls {
    async fn process(&self, stream: &mut L4Stream) -> pingora::Result<()> {
        let slot = self
            .cap
            .try_acquire()
            .ok_or_else(|| Error::explain(ErrorType::AcceptError, "max_connections open"))?;
        if self.proxy_protocol {
            crate::proxy_protocol::accept(stream).await.map_err(|e| {
                tracing::debug!("dropping a connection: {e}");
                Error::explain(ErrorType::AcceptError, e.to_string())
            })?;
        }
        let client = match (&self.per_client, client_ip(stream)) {
            (Some(per_client), Some(ip)) => per_client.try_acquire(ip).map_err(|_| {
                Error::explain(ErrorType::AcceptError, "max_connections_per_client open")
            })?,
            _ => None,
        };
        stream.tracer = Some(Tracer(Box::new(HeldBySocket(Mutex::new(Some(Held {
            _slot: slot,
            _client: client,
        }))))));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_follows_the_fd_limit() {
        assert_eq!(default_max_connections(1_048_576), 524_032);
        assert_eq!(default_max_connections(65_536), 32_512);
        assert_eq!(default_max_connections(4_096), 1_792);
        assert_eq!(default_max_connections(1_024), 256);
        assert_eq!(default_max_connections(600), MAX_CONNECTIONS_DEFAULT_MIN);
        assert_eq!(default_max_connections(0), MAX_CONNECTIONS_DEFAULT_MIN);
    }

    #[test]
    fn slots_are_bounded_and_given_back_on_drop() {
        let cap = ConnectionCap::new(2);
        let a = cap.try_acquire().unwrap();
        let b = cap.try_acquire().unwrap();
        assert!(cap.try_acquire().is_none());
        assert_eq!((cap.open(), cap.refused_total()), (2, 1));
        drop(a);
        let c = cap
            .try_acquire()
            .expect("a closed connection frees its slot");
        assert!(cap.try_acquire().is_none());
        drop((b, c));
        assert_eq!(cap.open(), 0);
        let registry = Registry::new();
        cap.register(&registry).unwrap();
        let mut text = Vec::new();
        prometheus::Encoder::encode(
            &prometheus::TextEncoder::new(),
            &registry.gather(),
            &mut text,
        )
        .unwrap();
        let text = String::from_utf8(text).unwrap();
        for line in [
            "sluice_connections_open 0",
            "sluice_connections_max 2",
            "sluice_connections_refused_total 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
    }

    #[test]
    fn a_client_address_holds_at_most_its_share() {
        let trusted: ipnet::IpNet = "10.0.0.0/8".parse().unwrap();
        let per_client = PerClient::new(2, vec![trusted]);
        let a: IpAddr = "203.0.113.7".parse().unwrap();
        let a_mapped: IpAddr = "::ffff:203.0.113.7".parse().unwrap();
        let one = per_client.try_acquire(a).unwrap().expect("counted");
        let two = per_client.try_acquire(a_mapped).unwrap().expect("counted");
        assert!(
            per_client.try_acquire(a).is_err(),
            "the mapped form is the same client"
        );
        assert_eq!(per_client.open(a), 2);
        // One /64 is one client; the next /64 is another.
        let v6 = |s: &str| -> IpAddr { s.parse().unwrap() };
        let _x = per_client
            .try_acquire(v6("2001:db8:0:1::1"))
            .unwrap()
            .unwrap();
        let _y = per_client
            .try_acquire(v6("2001:db8:0:1:ffff::2"))
            .unwrap()
            .unwrap();
        assert!(per_client.try_acquire(v6("2001:db8:0:1::3")).is_err());
        assert!(per_client
            .try_acquire(v6("2001:db8:0:2::1"))
            .unwrap()
            .is_some());
        // A trusted proxy is not counted at all.
        let lb: IpAddr = "10.1.2.3".parse().unwrap();
        for _ in 0..5 {
            assert!(per_client.try_acquire(lb).unwrap().is_none());
        }
        drop(one);
        assert_eq!(per_client.open(a), 1);
        let _three = per_client
            .try_acquire(a)
            .unwrap()
            .expect("a slot was given back");
        drop(two);
        assert_eq!(per_client.refused.get(), 2);
    }

    #[test]
    fn raising_the_fd_limit_reaches_the_hard_limit() {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        setrlimit(Resource::RLIMIT_NOFILE, hard / 2, hard).unwrap();
        let soft = raise_fd_limit().unwrap();
        let (now_soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!((soft, now_soft), (hard, hard));
    }
}
