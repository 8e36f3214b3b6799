//! The validated configuration the gateway runs on.
//!
//! Everything here has already been checked: units are in the types
//! (`Duration`, `NonZero*`), cross references resolve, and a value that
//! exists is a value that may be used. A `Config` is immutable; reload
//! replaces it whole.

use std::fmt;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

mod people;

pub use people::{
    Challenge, Difficulty, Enqueue, EnqueueKey, EnqueueKeyMaterial, Lane, OnVerifierError,
    PowChallenge, RoomMode, SecretBytes, SiteVerify, Widget, DEFAULT_LANE,
};

#[derive(Debug, Clone)]
pub struct Config {
    /// The file this snapshot was read from.
    pub source: PathBuf,
    pub gateway: Gateway,
    pub rooms: Vec<Room>,
    pub products: Vec<Product>,
    /// Ticket-signing keys; the first signs, all verify (rotation).
    pub keys: Vec<SigningKey>,
    pub backends: Vec<Backend>,
    pub outbox: Outbox,
    pub payments: Payments,
    /// `[cluster]`: shared stores; each absent one is embedded in `data_dir`.
    pub cluster: Cluster,
}

/// Where a fleet of gateways keeps what they share. Every field absent (no
/// `[cluster]`): one gateway, everything embedded in `data_dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// Waiting rooms (`redis://` or `rediss://`), from `redis_url` or the
    /// variable `redis_url_env` names.
    pub redis_url: Option<Secret>,
    /// Stock, orders, attempts and the outbox (`postgres://` or
    /// `postgresql://`), from `postgres_url` or `postgres_url_env`.
    pub postgres_url: Option<Secret>,
    /// `postgres_prepared_statements` (default true): each PostgreSQL
    /// connection prepares a statement once and keeps it. False: every
    /// statement is prepared for its one use and closed after, inside
    /// one transaction, which any transaction pooler (PgBouncer before
    /// 1.21, or without `max_prepared_statements`) can carry.
    pub postgres_prepared_statements: bool,
    /// The key of the account hash (the keyed hash that stands for an
    /// enqueue token's `sub`), read from `account_hash_key_env`; `None`:
    /// the gateway keeps one in `data_dir` (one gateway).
    pub account_hash_key: Option<Secret>,
}

impl Default for Cluster {
    /// Nothing shared; statements kept (the default when PostgreSQL is
    /// named).
    fn default() -> Self {
        Self {
            redis_url: None,
            postgres_url: None,
            postgres_prepared_statements: true,
            account_hash_key: None,
        }
    }
}

/// Which payment provider checkouts use, and how to reach it.
#[derive(Debug, Clone, PartialEq)]
pub struct Payments {
    pub provider: PaymentProviderKind,
    /// `pm_slow` answers after this long (simulated provider).
    pub simulated_slow: Duration,
    /// Share of simulated calls that time out (after being processed).
    pub simulated_timeout_ratio: f64,
    /// Share of simulated calls answered with a 5xx-like error.
    pub simulated_error_ratio: f64,
    /// Added to every simulated call.
    pub simulated_latency: Duration,
    /// The provider's API (`provider = "http"`).
    pub url: Option<String>,
    /// Per provider call; past it the answer is ambiguous.
    pub timeout: Duration,
    /// Webhook signing secrets; several during rotation. Empty: webhooks
    /// are refused.
    pub webhook_secrets: Vec<Secret>,
    /// ISO 4217 code sent with every provider call.
    pub currency: String,
    /// The provider's API key, read from `api_key_env` at load.
    pub api_key: Option<Secret>,
    /// `[payments.webhooks.<provider>]`, sorted by provider name.
    pub webhooks: Vec<WebhookProvider>,
}

/// A provider name in `/webhooks/{name}`: 1 to 32 of `a-z`, `0-9`, `-`, `_`.
pub fn is_webhook_provider_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// The secrets `/webhooks/{name}` verifies with.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookProvider {
    pub name: String,
    pub secrets: Vec<Secret>,
}

impl Payments {
    /// The secrets that verify `/webhooks/{provider}`: the provider's own
    /// section, else the shared `webhook_secrets`; `None` when neither
    /// exists (the route answers 404).
    pub fn webhook_secrets_for(&self, provider: &str) -> Option<&[Secret]> {
        if !is_webhook_provider_name(provider) {
            return None;
        }
        match self.webhooks.iter().find(|w| w.name == provider) {
            Some(w) => Some(&w.secrets),
            None if !self.webhook_secrets.is_empty() => Some(&self.webhook_secrets),
            None => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentProviderKind {
    /// The in-process simulator with test cards (`pm_ok`, …).
    Simulated,
    /// A card-provider-shaped HTTP API (`paysim`, or a real provider).
    Http,
}

/// Where the outbox relay publishes order events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbox {
    /// `POST` batches here; `None`: a JSON-lines file in the data dir.
    pub url: Option<String>,
    pub timeout: Duration,
}

impl Config {
    pub fn room(&self, name: &str) -> Option<&Room> {
        self.rooms.iter().find(|r| r.name == name)
    }
}

/// The kill switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admissions {
    Open,
    Paused,
}

impl Admissions {
    pub fn as_str(self) -> &'static str {
        match self {
            Admissions::Open => "open",
            Admissions::Paused => "paused",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Gateway {
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub data_dir: PathBuf,
    pub static_dir: PathBuf,
    pub origin: Option<Origin>,
    pub admissions: Admissions,
    /// Bearer token for the admin listener, read from the environment
    /// variable named by `admin_token_env` when the config was loaded.
    pub admin_token: Option<Secret>,
    pub threads: NonZeroUsize,
    pub max_body_bytes: NonZeroU64,
    /// Checkouts running at once (each holds a blocking thread through its
    /// store and provider calls); beyond it `503 overloaded`.
    pub checkouts_in_flight_max: NonZeroUsize,
    pub origin_connect_timeout: Duration,
    pub origin_read_timeout: Duration,
    pub origin_write_timeout: Duration,
    pub origin_idle_timeout: Duration,
    pub shutdown_grace: Duration,
    pub tls: Option<Tls>,
    pub static_limits: StaticLimits,
    /// First match wins; no match means the default `public, max-age=60`.
    pub cache_control: Vec<CacheControlRule>,
    pub origin_cache: OriginCache,
    /// Test-only: slows every store commit down (load harness
    /// `slow-commit`). Refused unless test knobs are allowed.
    pub test_store_commit_delay: Duration,
    /// The `region` label on every metric family (restart to change).
    pub region: String,
    /// This gateway's id in `/admin/state` `node.id`; `None`: hostname and
    /// public port.
    pub node_id: Option<String>,
    /// Peers whose `X-Forwarded-For` names the client (a CDN or load
    /// balancer in front). Empty: the TCP peer is the client.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The public listener expects a PROXY protocol (v1 or v2) header
    /// first on every connection; its source address is the peer.
    pub proxy_protocol: bool,
    /// Open public connections allowed at once; `None`: derived from the
    /// file-descriptor limit when the gateway starts.
    pub max_connections: Option<NonZeroU32>,
    /// Public connections one client address may hold at once; `None`:
    /// not limited (shoppers behind one NAT share an address). Peers in
    /// `trusted_proxies` are never counted.
    pub max_connections_per_client: Option<NonZeroU32>,
    /// The longest a request head (request line and headers) may take to
    /// arrive, counted from the accept for a connection's first request
    /// and from the first byte for later ones (slowloris).
    pub header_timeout: Duration,
    /// `deny_cidrs_file`: joins and pass collections from these networks
    /// are refused; `None`: nothing is denied.
    pub deny_cidrs: Option<DenyCidrs>,
}

/// The deny list as loaded with this config; the gateway reloads the file
/// itself (with [`crate::deny_list::load`]) when it changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenyCidrs {
    pub path: PathBuf,
    pub list: crate::deny_list::DenyList,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub tls: bool,
    pub host: String,
    pub port: u16,
}

impl Origin {
    /// `host:port`, as pingora's `HttpPeer` wants it.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticLimits {
    pub max_file_bytes: NonZeroU64,
    pub max_total_bytes: NonZeroU64,
    pub max_files: NonZeroUsize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheControlRule {
    pub pattern: String,
    pub value: String,
}

/// Bounded cache of origin responses under `paths`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginCache {
    /// Glob patterns of URL paths whose origin responses may be cached.
    /// Empty: nothing from the origin is cached.
    pub paths: Vec<String>,
    pub max_bytes: NonZeroUsize,
    pub max_object_bytes: NonZeroUsize,
    /// Upper bound on any freshness lifetime the origin asks for.
    pub max_ttl: Duration,
}

#[derive(Debug, Clone)]
pub struct Room {
    pub name: String,
    pub protect: Vec<String>,
    /// `protect` matches with ASCII case folded (`/Cart/x` is `/cart/x`),
    /// for origins that fold case.
    pub protect_case_insensitive: bool,
    /// The rate in force: configured, or derived from the backends; with
    /// adaptive release, the rate it starts at.
    pub release_per_second: NonZeroU32,
    /// Where the rate comes from.
    pub release_source: ReleaseSource,
    /// Admissions allowed at once above the rate.
    pub burst: NonZeroU32,
    pub max_active: NonZeroU32,
    pub queue_capacity: NonZeroU32,
    pub pass_ttl: Duration,
    pub ticket_ttl: Duration,
    /// A waiting ticket not polled for this long has left the line.
    pub idle_timeout: Duration,
    /// How often the queue page calls `/status` while it follows the line
    /// on the public watermark: the sign of life that keeps its place
    /// (`idle_timeout` is more than twice it).
    pub heartbeat: Duration,
    /// `poll_after_s` at the front of the line and far back.
    pub poll_min: Duration,
    pub poll_max: Duration,
    /// Joins allowed per client address per minute.
    pub joins_per_minute_per_client: NonZeroU32,
    /// Fair start: joins before this (unix seconds) are drawn at random.
    pub opens_at_unix: Option<u64>,
    /// How long a checkout's reservation holds stock.
    pub reservation_ttl: Duration,
    /// Checkouts one pass may start; its active slot is held until they
    /// have all been started and have ended (or the pass expires).
    pub max_orders_per_pass: NonZeroU32,
    /// A pass with no request and no checkout in flight for this long
    /// gives its slot back; `None`: never (default).
    pub pass_idle: Option<Duration>,
    /// Joins open (unix seconds); before it they are `503 not_open`.
    /// `None`: open whenever the room is.
    pub prequeue_at_unix: Option<u64>,
    /// No new joins from this time on (unix seconds): `410 event_closed`.
    pub closes_at_unix: Option<u64>,
    /// Shown on the page and in the status JSON; at most 280 characters.
    pub message: Option<String>,
    pub mode: RoomMode,
    /// Whether the status JSON carries `units_left`.
    pub show_units_left: bool,
    pub challenge: Challenge,
    pub enqueue: Enqueue,
    /// Configured lanes, in file order; shoppers in none are in the
    /// [`DEFAULT_LANE`], whose share is what these leave.
    pub lanes: Vec<Lane>,
}

impl Room {
    /// The share of each release the default lane gets: what the
    /// configured (non-bypass) lanes leave, at least 0.
    pub fn default_lane_share(&self) -> f64 {
        let taken: f64 = self
            .lanes
            .iter()
            .filter(|l| !l.bypass)
            .map(|l| l.share)
            .sum();
        (1.0 - taken).max(0.0)
    }

    /// A configured lane by name.
    pub fn lane(&self, name: &str) -> Option<&Lane> {
        self.lanes.iter().find(|l| l.name == name)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ReleaseSource {
    Fixed,
    /// `"auto"`: the tightest backend sets the pace.
    Auto {
        backend: String,
        /// `max_rps × headroom / calls_per_checkout` of that backend.
        exact_per_second: f64,
    },
    /// `"adaptive"`: the gateway moves the rate between the bounds from the
    /// admitted shoppers' checkouts; `release_per_second` is where it starts.
    Adaptive(Adaptive),
}

/// `[rooms.adaptive]`: what the adaptive release holds and its bounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adaptive {
    /// Admitted checkouts' p99 latency to hold.
    pub target_p99_ms: u32,
    /// Share of admitted checkouts allowed to fail for the backend's sake.
    pub max_error_ratio: f64,
    pub min_per_second: NonZeroU32,
    pub max_per_second: NonZeroU32,
}

/// A declared dependency of the purchase flow.
#[derive(Debug, Clone, PartialEq)]
pub struct Backend {
    pub name: String,
    pub max_rps: f64,
    pub calls_per_checkout: f64,
}

#[derive(Debug, Clone)]
pub struct Product {
    pub sku: String,
    pub stock: u32,
    pub price_cents: u64,
    pub room: String,
    /// Units of this product in one order, at most.
    pub max_per_order: NonZeroU32,
    /// Rows its stock is split into, so concurrent writers do not all
    /// wait on one row (`docs/orders.md`, partitions).
    pub partitions: NonZeroU32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAlg {
    /// HMAC-SHA256; `secret` is the shared key.
    Hs256,
    /// Ed25519; `secret` is the PKCS#8 private key (DER), base64url.
    EdDsa,
}

#[derive(Debug, Clone)]
pub struct SigningKey {
    pub kid: String,
    pub alg: KeyAlg,
    pub secret: Secret,
}

/// A value that must never reach a log line.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Self(value)
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}
