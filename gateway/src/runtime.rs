//! What the proxy runs on: one snapshot derived from one config.
//!
//! A `Runtime` bundles the validated config with what is built from it
//! (the in-memory catalog, compiled route patterns, the origin cache). It is
//! swapped whole on reload, so a request sees one consistent set.

use std::sync::Arc;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use pingora::upstreams::peer::HttpPeer;
use sluice_policies::model::Room;
use sluice_policies::Config;

use crate::catalog::{CacheControlRule, Catalog, CatalogLimits};
use crate::origin_cache::OriginCache;
use crate::origin_dns::OriginDns;

pub struct Runtime {
    pub config: Arc<Config>,
    pub catalog: Arc<Catalog>,
    pub origin_cache: Arc<OriginCache>,
    /// One glob set per room, in `config.rooms` order.
    protect: Vec<GlobSet>,
    /// The origin as pingora's peer, with its timeouts, when its host is an
    /// IP address: each request clones it instead of parsing the address
    /// again.
    origin_peer: Option<HttpPeer>,
    /// A host name's addresses, resolved in the background
    /// ([`crate::origin_dns`]); kept across reloads.
    origin_dns: Arc<OriginDns>,
    /// `/.well-known/sluice/jwks.json` for this config's keys.
    pub jwks: bytes::Bytes,
}

/// The origin's host name has no known address yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unresolved;

impl Runtime {
    /// Builds everything that depends on `config`. The origin cache of the
    /// previous runtime is kept when its settings did not change, so a
    /// reload does not empty it.
    pub fn build(
        config: Arc<Config>,
        catalog: Arc<Catalog>,
        previous: Option<&Runtime>,
    ) -> Runtime {
        let origin_cache = match previous {
            Some(p) if p.origin_cache.config() == &config.gateway.origin_cache => {
                p.origin_cache.clone()
            }
            _ => Arc::new(OriginCache::new(&config.gateway.origin_cache)),
        };
        let origin_dns = match previous {
            Some(p) => p.origin_dns.clone(),
            None => Arc::new(OriginDns::new()),
        };
        let protect = config
            .rooms
            .iter()
            .map(|room| glob_set(&room.protect, room.protect_case_insensitive))
            .collect();
        let origin_peer = config.gateway.origin.as_ref().and_then(|origin| {
            let ip: std::net::IpAddr = origin.host.parse().ok()?;
            let address = std::net::SocketAddr::new(ip, origin.port);
            Some(origin_peer(&config.gateway, address, origin))
        });
        Runtime {
            jwks: crate::jwks::document(&config.keys),
            config,
            catalog,
            origin_cache,
            protect,
            origin_peer,
            origin_dns,
        }
    }

    /// The peer a proxied request goes to; `None` without an origin,
    /// `Some(Err(Unresolved))` while its host name has no address yet. No
    /// I/O: a host name's addresses come from [`OriginDns`].
    pub fn origin_peer(&self) -> Option<Result<HttpPeer, Unresolved>> {
        if let Some(peer) = &self.origin_peer {
            return Some(Ok(peer.clone()));
        }
        let gateway = &self.config.gateway;
        let origin = gateway.origin.as_ref()?;
        let target = self.origin_host_target()?;
        Some(
            self.origin_dns
                .address(&target)
                .map(|address| origin_peer(gateway, address, origin))
                .ok_or(Unresolved),
        )
    }

    /// `host:port` of the origin when its host is a name, not an address.
    pub fn origin_host_target(&self) -> Option<String> {
        let origin = self.config.gateway.origin.as_ref()?;
        self.origin_peer.is_none().then(|| origin.address())
    }

    /// Where the origin host's addresses are kept.
    pub fn origin_dns(&self) -> &Arc<OriginDns> {
        &self.origin_dns
    }

    /// The room whose `protect` patterns cover `path`, the decoded
    /// canonical path of the request.
    ///
    /// Origins route `/cart`, `/cart/` and often `/cart//` alike, so a
    /// pattern covers the path with its trailing slashes taken away and
    /// with one added too (`/cart/**` protects `/cart`, `/secret`
    /// protects `/secret/`): when in doubt a pattern protects more.
    pub fn protecting_room(&self, path: &str) -> Option<&Room> {
        self.protecting_room_where(path, |_| true)
    }

    /// The first room whose `protect` patterns cover `path` and for which
    /// `pick` says yes. The route asks for the first covering room whose
    /// pass the request lacks: where the patterns of several rooms overlap
    /// (`/drops/**` and `/drops/vip/**`), the path needs the pass of each,
    /// so one room's pass never opens another room's paths.
    pub fn protecting_room_where(
        &self,
        path: &str,
        mut pick: impl FnMut(&Room) -> bool,
    ) -> Option<&Room> {
        if self.protect.is_empty() {
            return None;
        }
        let trimmed = path.trim_end_matches('/');
        let trimmed = if trimmed.is_empty() { "/" } else { trimmed };
        // `trimmed` and a slash, on the stack for the usual path (no
        // allocation per request).
        let mut buf = [0u8; SLASHED_ON_STACK];
        let long;
        let slashed: &str = match buf.get_mut(..=trimmed.len()) {
            Some(room) => {
                let (text, slash) = room.split_at_mut(trimmed.len());
                text.copy_from_slice(trimmed.as_bytes());
                slash[0] = b'/';
                std::str::from_utf8(room).expect("a str and a slash")
            }
            None => {
                long = format!("{trimmed}/");
                &long
            }
        };
        // Each spelling is matched once: `path` is often `trimmed` or
        // `slashed` itself.
        let path = (path != trimmed && path != slashed).then_some(path);
        let candidates = [
            Some(globset::Candidate::new(trimmed)),
            Some(globset::Candidate::new(&slashed)),
            path.map(globset::Candidate::new),
        ];
        self.protect
            .iter()
            .zip(&self.config.rooms)
            .find(|(set, room)| {
                candidates
                    .iter()
                    .flatten()
                    .any(|c| set.is_match_candidate(c))
                    && pick(room)
            })
            .map(|(_, room)| room)
    }
}

/// Longest path (and its slash) whose slashed spelling the `protect`
/// check writes on the stack.
const SLASHED_ON_STACK: usize = 256;

/// The peer of `origin` at `address`, with the gateway's origin timeouts.
fn origin_peer(
    gateway: &sluice_policies::model::Gateway,
    address: std::net::SocketAddr,
    origin: &sluice_policies::model::Origin,
) -> HttpPeer {
    let mut peer = HttpPeer::new(address, origin.tls, origin.host.clone());
    peer.options.connection_timeout = Some(gateway.origin_connect_timeout);
    peer.options.read_timeout = Some(gateway.origin_read_timeout);
    peer.options.write_timeout = Some(gateway.origin_write_timeout);
    peer.options.idle_timeout = Some(gateway.origin_idle_timeout);
    peer
}

/// Loads the catalog a config points at.
pub fn load_catalog(config: &Config) -> Result<Catalog, String> {
    let g = &config.gateway;
    let limits = CatalogLimits {
        max_file_bytes: g.static_limits.max_file_bytes.get(),
        max_total_bytes: g.static_limits.max_total_bytes.get(),
        max_files: g.static_limits.max_files.get(),
    };
    let rules: Vec<CacheControlRule> = g
        .cache_control
        .iter()
        .map(|r| CacheControlRule {
            pattern: r.pattern.clone(),
            value: r.value.clone(),
        })
        .collect();
    Catalog::load(&g.static_dir, &limits, &rules)
        .map_err(|e| format!("static_dir {}: {e}", g.static_dir.display()))
}

/// The globs of one room. With `fold_case` they match in any case; the
/// fold is Unicode's, a superset of the ASCII fold an origin does, so it
/// protects at least every spelling such an origin serves as the same.
fn glob_set(patterns: &[String], fold_case: bool) -> GlobSet {
    let mut builder = GlobSetBuilder::new();
    for p in patterns {
        // Patterns were validated with the config. `*` also matches `/`,
        // so `/orders/*` protects `/orders/{id}/cancel` too: when in doubt
        // a pattern protects more, never less.
        if let Ok(glob) = GlobBuilder::new(p).case_insensitive(fold_case).build() {
            builder.add(glob);
        }
    }
    builder.build().unwrap_or_else(|_| GlobSet::empty())
}
