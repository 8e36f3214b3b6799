//! A bounded in-memory cache of catalog responses from the origin.
//!
//! Only paths the operator lists in `gateway.origin_cache.paths` are
//! candidates, and a response is stored only when the origin says it may be
//! shared (`s-maxage`/`max-age`/`Expires`), is not `private`, `no-store` or
//! `no-cache`, sets no cookie, varies on nothing but `Accept-Encoding`, and
//! answered a request that carried no credentials. Nothing is cached on a
//! guess: a response without a freshness lifetime is not stored. The cache
//! holds at most `max_bytes`, evicting the least recently used entries; a
//! hit takes a shared read lock only, never an exclusive one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use globset::{Glob, GlobSet, GlobSetBuilder};
use http::{header, HeaderMap, HeaderName, HeaderValue, Method};
use sluice_policies::model;

/// A stored response.
#[derive(Debug)]
pub struct CachedResponse {
    pub status: u16,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
    stored_at: Instant,
    /// Age the response already had when it arrived (its `Age` header).
    initial_age: Duration,
    ttl: Duration,
}

impl CachedResponse {
    /// Current age, for the `Age` header.
    pub fn age(&self, now: Instant) -> Duration {
        self.initial_age + now.saturating_duration_since(self.stored_at)
    }

    fn is_fresh(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.stored_at) < self.ttl
    }

    fn size(&self) -> usize {
        self.body.len()
            + self
                .headers
                .iter()
                .map(|(k, v)| k.as_str().len() + v.len())
                .sum::<usize>()
    }

    /// The strong or weak validator, for `If-None-Match`.
    pub fn etag(&self) -> Option<&HeaderValue> {
        self.headers
            .iter()
            .find(|(k, _)| k == header::ETAG)
            .map(|(_, v)| v)
    }
}

/// Why a response was not stored (the metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uncacheable {
    Status,
    NoFreshness,
    Private,
    SetCookie,
    Vary,
    TooLarge,
}

pub struct OriginCache {
    config: model::OriginCache,
    paths: GlobSet,
    store: RwLock<Lru>,
    /// The use clock of the entries: higher is more recent.
    tick: AtomicU64,
}

impl OriginCache {
    pub fn new(config: &model::OriginCache) -> Self {
        let mut builder = GlobSetBuilder::new();
        for p in &config.paths {
            // Patterns were validated with the config.
            if let Ok(glob) = Glob::new(p) {
                builder.add(glob);
            }
        }
        Self {
            config: config.clone(),
            paths: builder.build().unwrap_or_else(|_| GlobSet::empty()),
            store: RwLock::new(Lru::default()),
            tick: AtomicU64::new(0),
        }
    }

    pub fn config(&self) -> &model::OriginCache {
        &self.config
    }

    pub fn enabled(&self) -> bool {
        !self.config.paths.is_empty()
    }

    /// The cache key of a request if the request may be answered from the
    /// cache (`lookup`) and, without credentials, fill it (`fill`).
    pub fn request_key(
        &self,
        method: &Method,
        host: &str,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> Option<RequestKey> {
        if !self.enabled()
            || !(method == Method::GET || method == Method::HEAD)
            || !self.paths.is_match(path)
        {
            return None;
        }
        if headers.contains_key(header::AUTHORIZATION) || headers.contains_key(header::RANGE) {
            return None;
        }
        let encoding = encoding_class(headers);
        let key = match query {
            Some(q) => format!("{host}\u{0}{path}?{q}\u{0}{encoding}"),
            None => format!("{host}\u{0}{path}\u{0}{encoding}"),
        };
        let credentials = headers.contains_key(header::COOKIE);
        Some(RequestKey {
            key,
            fill: method == Method::GET && !credentials,
        })
    }

    /// A fresh response for `key`. A hit takes the store's read lock only
    /// (and marks the entry used with an atomic), so hits on several
    /// worker threads do not wait for each other; a stale entry is removed
    /// under the write lock.
    pub fn get(&self, key: &str, now: Instant) -> Option<Arc<CachedResponse>> {
        {
            let store = self.store.read().unwrap_or_else(|p| p.into_inner());
            let slot = store.entries.get(key)?;
            if slot.response.is_fresh(now) {
                slot.used.store(self.next_tick(), Ordering::Relaxed);
                return Some(slot.response.clone());
            }
        }
        let mut store = self.store.write().unwrap_or_else(|p| p.into_inner());
        if store
            .entries
            .get(key)
            .is_some_and(|slot| !slot.response.is_fresh(now))
        {
            store.remove(key);
        }
        None
    }

    fn next_tick(&self) -> u64 {
        self.tick.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Decides whether an origin response may be stored, and for how long.
    pub fn freshness(
        &self,
        status: u16,
        headers: &HeaderMap,
        now: SystemTime,
    ) -> Result<(Duration, Duration), Uncacheable> {
        if status != 200 {
            return Err(Uncacheable::Status);
        }
        if headers.contains_key(header::SET_COOKIE) {
            return Err(Uncacheable::SetCookie);
        }
        for vary in headers.get_all(header::VARY) {
            let ok = vary
                .to_str()
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .all(|f| f.is_empty() || f.eq_ignore_ascii_case("accept-encoding"))
                })
                .unwrap_or(false);
            if !ok {
                return Err(Uncacheable::Vary);
            }
        }
        if let Some(len) = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        {
            if len > self.config.max_object_bytes.get() {
                return Err(Uncacheable::TooLarge);
            }
        }
        let directives = CacheDirectives::parse(headers);
        if directives.no_store || directives.private || directives.no_cache {
            return Err(Uncacheable::Private);
        }
        let lifetime = match directives.s_maxage.or(directives.max_age) {
            Some(seconds) => Duration::from_secs(seconds),
            None => expires_lifetime(headers, now).ok_or(Uncacheable::NoFreshness)?,
        };
        let age = headers
            .get(header::AGE)
            .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
            .map(Duration::from_secs)
            .unwrap_or_default();
        let ttl = lifetime.min(self.config.max_ttl).saturating_sub(age);
        if ttl.is_zero() {
            return Err(Uncacheable::NoFreshness);
        }
        Ok((ttl, age))
    }

    pub fn max_object_bytes(&self) -> usize {
        self.config.max_object_bytes.get()
    }

    /// Stores a response whose `freshness` was accepted. Returns false when
    /// it is too large to hold.
    #[allow(clippy::too_many_arguments)]
    pub fn insert(
        &self,
        key: String,
        status: u16,
        headers: Vec<(HeaderName, HeaderValue)>,
        body: Bytes,
        ttl: Duration,
        initial_age: Duration,
        now: Instant,
    ) -> bool {
        let entry = CachedResponse {
            status,
            headers,
            body,
            stored_at: now,
            initial_age,
            ttl,
        };
        if entry.size() > self.config.max_object_bytes.get() {
            return false;
        }
        let tick = self.next_tick();
        let mut store = self.store.write().unwrap_or_else(|p| p.into_inner());
        store.insert(key, Arc::new(entry), self.config.max_bytes.get(), tick);
        true
    }

    /// (bytes, entries) held now.
    pub fn usage(&self) -> (usize, usize) {
        let store = self.store.read().unwrap_or_else(|p| p.into_inner());
        (store.bytes, store.entries.len())
    }
}

/// A cacheable request: its key, and whether its response may fill the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestKey {
    pub key: String,
    pub fill: bool,
}

/// Least-recently-used map bounded by bytes. Each entry carries the tick
/// of its last use, set by readers without the write lock; a fill that
/// must make room scans the entries for the least recently used (fills are
/// rare next to hits, and the entries are bounded by `max_bytes`).
#[derive(Default)]
struct Lru {
    entries: HashMap<String, Slot>,
    bytes: usize,
}

struct Slot {
    response: Arc<CachedResponse>,
    used: AtomicU64,
}

impl Lru {
    fn remove(&mut self, key: &str) {
        if let Some(slot) = self.entries.remove(key) {
            self.bytes -= slot.response.size();
        }
    }

    fn insert(&mut self, key: String, entry: Arc<CachedResponse>, max_bytes: usize, tick: u64) {
        self.remove(&key);
        let size = entry.size();
        while self.bytes + size > max_bytes {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, slot)| slot.used.load(Ordering::Relaxed))
                .map(|(key, _)| key.clone());
            let Some(oldest) = oldest else {
                break;
            };
            self.remove(&oldest);
        }
        self.entries.insert(
            key,
            Slot {
                response: entry,
                used: AtomicU64::new(tick),
            },
        );
        self.bytes += size;
    }
}

#[derive(Debug, Default)]
struct CacheDirectives {
    no_store: bool,
    no_cache: bool,
    private: bool,
    max_age: Option<u64>,
    s_maxage: Option<u64>,
}

impl CacheDirectives {
    fn parse(headers: &HeaderMap) -> Self {
        let mut d = Self::default();
        for value in headers.get_all(header::CACHE_CONTROL) {
            let Ok(value) = value.to_str() else {
                // Unreadable directives: be safe, do not store.
                d.no_store = true;
                continue;
            };
            for directive in value.split(',') {
                let (name, arg) = match directive.split_once('=') {
                    Some((n, a)) => (n.trim(), Some(a.trim().trim_matches('"'))),
                    None => (directive.trim(), None),
                };
                let seconds = || arg.and_then(|a| a.parse::<u64>().ok());
                match name.to_ascii_lowercase().as_str() {
                    "no-store" => d.no_store = true,
                    "no-cache" => d.no_cache = true,
                    "private" => d.private = true,
                    "max-age" => d.max_age = Some(seconds().unwrap_or(0)),
                    "s-maxage" => d.s_maxage = Some(seconds().unwrap_or(0)),
                    _ => {}
                }
            }
        }
        d
    }
}

fn expires_lifetime(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let expires = httpdate::parse_http_date(headers.get(header::EXPIRES)?.to_str().ok()?).ok()?;
    let date = headers
        .get(header::DATE)
        .and_then(|v| httpdate::parse_http_date(v.to_str().ok()?).ok())
        .unwrap_or(now);
    expires.duration_since(date).ok()
}

/// The coarse encoding a client accepts, so that a compressed response is
/// never served to a client that cannot decode it.
fn encoding_class(headers: &HeaderMap) -> &'static str {
    let accepts = |name: &str| {
        headers.get_all(header::ACCEPT_ENCODING).iter().any(|v| {
            v.to_str().unwrap_or("").split(',').any(|item| {
                let mut parts = item.split(';');
                let coding = parts.next().unwrap_or("").trim();
                let q_zero = parts.any(|p| {
                    let p = p.trim();
                    p.starts_with("q=")
                        && p[2..]
                            .trim()
                            .parse::<f32>()
                            .map(|q| q == 0.0)
                            .unwrap_or(false)
                });
                coding.eq_ignore_ascii_case(name) && !q_zero
            })
        })
    };
    if accepts("br") {
        "br"
    } else if accepts("gzip") {
        "gzip"
    } else {
        "identity"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroUsize;

    fn cache(max_bytes: usize) -> OriginCache {
        OriginCache::new(&model::OriginCache {
            paths: vec!["/api/catalog/**".into()],
            max_bytes: NonZeroUsize::new(max_bytes).unwrap(),
            max_object_bytes: NonZeroUsize::new(max_bytes).unwrap(),
            max_ttl: Duration::from_secs(300),
        })
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn only_listed_paths_and_safe_methods_are_candidates() {
        let c = cache(1 << 20);
        let h = HeaderMap::new();
        assert!(c
            .request_key(&Method::GET, "h", "/api/catalog/items", None, &h)
            .is_some());
        assert!(c
            .request_key(&Method::GET, "h", "/api/cart", None, &h)
            .is_none());
        assert!(c
            .request_key(&Method::POST, "h", "/api/catalog/items", None, &h)
            .is_none());
        let auth = headers(&[("authorization", "Bearer x")]);
        assert!(c
            .request_key(&Method::GET, "h", "/api/catalog/items", None, &auth)
            .is_none());
        let cookie = headers(&[("cookie", "session=1")]);
        let k = c
            .request_key(&Method::GET, "h", "/api/catalog/items", None, &cookie)
            .unwrap();
        assert!(!k.fill, "a request with credentials never fills the cache");
        let head = c
            .request_key(&Method::HEAD, "h", "/api/catalog/items", None, &h)
            .unwrap();
        assert!(!head.fill);
    }

    #[test]
    fn key_separates_query_host_and_encoding() {
        let c = cache(1 << 20);
        let plain = HeaderMap::new();
        let br = headers(&[("accept-encoding", "gzip, br")]);
        let no_br = headers(&[("accept-encoding", "br;q=0, gzip")]);
        let k = |host, q, h: &HeaderMap| {
            c.request_key(&Method::GET, host, "/api/catalog/x", q, h)
                .unwrap()
                .key
        };
        let keys = [
            k("a", None, &plain),
            k("a", Some("page=2"), &plain),
            k("b", None, &plain),
            k("a", None, &br),
            k("a", None, &no_br),
        ];
        for i in 0..keys.len() {
            for j in i + 1..keys.len() {
                assert_ne!(keys[i], keys[j]);
            }
        }
    }

    #[test]
    fn freshness_follows_the_origin_and_refuses_what_must_not_be_shared() {
        let c = cache(1 << 20);
        let now = SystemTime::now();
        let f = |pairs: &[(&str, &str)]| c.freshness(200, &headers(pairs), now);
        assert_eq!(
            f(&[("cache-control", "public, max-age=60")]).unwrap().0,
            Duration::from_secs(60)
        );
        assert_eq!(
            f(&[("cache-control", "max-age=60, s-maxage=30")])
                .unwrap()
                .0,
            Duration::from_secs(30)
        );
        assert_eq!(
            f(&[("cache-control", "max-age=99999")]).unwrap().0,
            Duration::from_secs(300),
            "capped by max_ttl"
        );
        assert_eq!(
            f(&[("cache-control", "max-age=60"), ("age", "50")])
                .unwrap()
                .0,
            Duration::from_secs(10)
        );
        assert_eq!(
            f(&[("cache-control", "max-age=60"), ("age", "60")]),
            Err(Uncacheable::NoFreshness)
        );
        assert_eq!(f(&[]), Err(Uncacheable::NoFreshness));
        assert_eq!(
            f(&[("cache-control", "private, max-age=60")]),
            Err(Uncacheable::Private)
        );
        assert_eq!(
            f(&[("cache-control", "no-store")]),
            Err(Uncacheable::Private)
        );
        assert_eq!(
            f(&[("cache-control", "no-cache, max-age=60")]),
            Err(Uncacheable::Private)
        );
        assert_eq!(
            f(&[("cache-control", "max-age=60"), ("set-cookie", "a=b")]),
            Err(Uncacheable::SetCookie)
        );
        assert_eq!(
            f(&[("cache-control", "max-age=60"), ("vary", "Cookie")]),
            Err(Uncacheable::Vary)
        );
        assert_eq!(
            f(&[("cache-control", "max-age=60"), ("vary", "*")]),
            Err(Uncacheable::Vary)
        );
        assert!(f(&[("cache-control", "max-age=60"), ("vary", "Accept-Encoding")]).is_ok());
        assert_eq!(
            c.freshness(404, &headers(&[("cache-control", "max-age=60")]), now),
            Err(Uncacheable::Status)
        );
        let date = httpdate::fmt_http_date(now);
        let expires = httpdate::fmt_http_date(now + Duration::from_secs(120));
        assert_eq!(
            f(&[("date", &date), ("expires", &expires)]).unwrap().0,
            Duration::from_secs(120)
        );
    }

    #[test]
    fn entries_expire_and_the_store_stays_within_its_byte_budget() {
        let c = cache(1000);
        let t0 = Instant::now();
        let put = |key: &str, len: usize, now| {
            c.insert(
                key.into(),
                200,
                vec![],
                Bytes::from(vec![b'x'; len]),
                Duration::from_secs(10),
                Duration::ZERO,
                now,
            )
        };
        assert!(put("a", 400, t0));
        assert!(put("b", 400, t0));
        assert!(c.get("a", t0).is_some()); // a is now more recent than b
        assert!(put("c", 400, t0));
        assert!(c.get("b", t0).is_none(), "least recently used is evicted");
        assert!(c.get("a", t0).is_some() && c.get("c", t0).is_some());
        assert!(c.usage().0 <= 1000);
        assert!(
            !put("huge", 2000, t0),
            "an object over the limit is not stored"
        );
        assert!(
            c.get("a", t0 + Duration::from_secs(11)).is_none(),
            "stale entries are not served"
        );
        assert_eq!(c.usage().1, 1);
    }
}
