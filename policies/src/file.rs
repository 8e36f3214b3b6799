//! The config file as the operator writes it.
//!
//! These types mirror the TOML one to one, reject unknown keys, and keep the
//! source span of every value that validation may complain about. They are
//! never used at run time: [`crate::validate`] turns them into the model.

use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub gateway: Spanned<GatewayFile>,
    #[serde(default)]
    pub rooms: Vec<Spanned<RoomFile>>,
    #[serde(default)]
    pub products: Vec<Spanned<ProductFile>>,
    #[serde(default)]
    pub keys: Vec<Spanned<KeyFile>>,
    #[serde(default)]
    pub backends: Vec<Spanned<BackendFile>>,
    pub outbox: Option<Spanned<OutboxFile>>,
    pub payments: Option<Spanned<PaymentsFile>>,
    pub cluster: Option<Spanned<ClusterFile>>,
}

/// `[cluster]`: the shared stores of a fleet of gateways.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    pub redis_url: Option<Spanned<String>>,
    pub redis_url_env: Option<Spanned<String>>,
    pub postgres_url: Option<Spanned<String>>,
    pub postgres_url_env: Option<Spanned<String>>,
    /// Whether each PostgreSQL connection keeps its prepared statements
    /// (default true); false behind a transaction pooler that cannot.
    pub postgres_prepared_statements: Option<Spanned<bool>>,
    /// Names the environment variable holding the account hash's key.
    pub account_hash_key_env: Option<Spanned<String>>,
}

/// The payment provider.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentsFile {
    pub provider: Option<Spanned<String>>,
    pub simulated_slow_ms: Option<Spanned<i64>>,
    pub simulated_timeout_ratio: Option<Spanned<f64>>,
    pub simulated_error_ratio: Option<Spanned<f64>>,
    pub simulated_latency_ms: Option<Spanned<i64>>,
    pub url: Option<Spanned<String>>,
    pub timeout_ms: Option<Spanned<i64>>,
    #[serde(default)]
    pub webhook_secrets: Vec<Spanned<String>>,
    pub currency: Option<Spanned<String>>,
    /// Names the environment variable holding the provider's API key.
    pub api_key_env: Option<Spanned<String>>,
    /// `[payments.webhooks.<provider>]`: secrets for `/webhooks/<provider>`.
    #[serde(default)]
    pub webhooks: std::collections::BTreeMap<String, WebhookProviderFile>,
}

/// One provider's webhook endpoint.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookProviderFile {
    pub secrets: Vec<Spanned<String>>,
}

/// Where order events are published.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxFile {
    pub url: Option<Spanned<String>>,
    pub timeout_ms: Option<Spanned<i64>>,
}

/// A dependency of the purchase flow and what it can take, for
/// `release_per_second = "auto"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendFile {
    pub name: Spanned<String>,
    pub max_rps: Spanned<f64>,
    pub calls_per_checkout: Spanned<f64>,
}

/// `release_per_second`: a number, `"auto"` from the backends, or
/// `"adaptive"` from the checkouts.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RateFile {
    Fixed(i64),
    Word(String),
}

/// A ticket-signing key, as `sluice keygen` prints it, or a store's
/// enqueue key (`[[rooms.enqueue.keys]]`, the same shape). The secret is
/// given inline, or by the environment variable or file holding it; an
/// EdDSA enqueue key gives the store's `public_key` instead.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFile {
    pub kid: Spanned<String>,
    pub alg: Spanned<String>,
    pub secret: Option<Spanned<String>>,
    pub secret_env: Option<Spanned<String>>,
    pub secret_file: Option<Spanned<String>>,
    pub public_key: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayFile {
    pub listen: Option<Spanned<String>>,
    pub admin_listen: Option<Spanned<String>>,
    pub data_dir: Option<Spanned<String>>,
    pub static_dir: Option<Spanned<String>>,
    pub origin: Option<Spanned<String>>,
    pub admissions: Option<Spanned<String>>,
    pub admin_token_env: Option<Spanned<String>>,
    pub threads: Option<Spanned<i64>>,
    pub max_body_bytes: Option<Spanned<i64>>,
    pub checkouts_in_flight_max: Option<Spanned<i64>>,
    pub origin_connect_timeout_ms: Option<Spanned<i64>>,
    pub origin_read_timeout_ms: Option<Spanned<i64>>,
    pub origin_write_timeout_ms: Option<Spanned<i64>>,
    pub origin_idle_timeout_s: Option<Spanned<i64>>,
    pub shutdown_grace_s: Option<Spanned<i64>>,
    pub tls_cert: Option<Spanned<String>>,
    pub tls_key: Option<Spanned<String>>,
    pub static_max_file_bytes: Option<Spanned<i64>>,
    pub static_max_total_bytes: Option<Spanned<i64>>,
    pub static_max_files: Option<Spanned<i64>>,
    #[serde(default)]
    pub cache_control: Vec<Spanned<CacheControlFile>>,
    pub origin_cache: Option<Spanned<OriginCacheFile>>,
    pub test_store_commit_delay_ms: Option<Spanned<i64>>,
    pub region: Option<Spanned<String>>,
    pub node_id: Option<Spanned<String>>,
    #[serde(default)]
    pub trusted_proxies: Vec<Spanned<String>>,
    pub proxy_protocol: Option<Spanned<bool>>,
    pub max_connections: Option<Spanned<i64>>,
    pub max_connections_per_client: Option<Spanned<i64>>,
    pub header_timeout_s: Option<Spanned<i64>>,
    pub deny_cidrs_file: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheControlFile {
    pub pattern: Spanned<String>,
    pub value: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OriginCacheFile {
    #[serde(default)]
    pub paths: Vec<Spanned<String>>,
    pub max_bytes: Option<Spanned<i64>>,
    pub max_object_bytes: Option<Spanned<i64>>,
    pub max_ttl_s: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoomFile {
    pub name: Spanned<String>,
    #[serde(default)]
    pub protect: Vec<Spanned<String>>,
    #[serde(default)]
    pub protect_case_insensitive: bool,
    pub release_per_second: Spanned<RateFile>,
    pub max_active: Spanned<i64>,
    pub queue_capacity: Spanned<i64>,
    pub pass_ttl_s: Option<Spanned<i64>>,
    pub ticket_ttl_s: Option<Spanned<i64>>,
    pub burst: Option<Spanned<i64>>,
    pub headroom: Option<Spanned<f64>>,
    pub idle_timeout_s: Option<Spanned<i64>>,
    pub heartbeat_s: Option<Spanned<i64>>,
    pub poll_min_s: Option<Spanned<i64>>,
    pub poll_max_s: Option<Spanned<i64>>,
    pub joins_per_minute_per_client: Option<Spanned<i64>>,
    pub opens_at: Option<Spanned<toml::value::Datetime>>,
    pub reservation_ttl_s: Option<Spanned<i64>>,
    pub max_orders_per_pass: Option<Spanned<i64>>,
    pub adaptive: Option<Spanned<AdaptiveFile>>,
    pub pass_idle_s: Option<Spanned<i64>>,
    pub prequeue_at: Option<Spanned<toml::value::Datetime>>,
    pub closes_at: Option<Spanned<toml::value::Datetime>>,
    pub message: Option<Spanned<String>>,
    pub mode: Option<Spanned<String>>,
    pub standby_above_per_second: Option<Spanned<i64>>,
    pub show_units_left: Option<Spanned<bool>>,
    pub challenge: Option<Spanned<ChallengeFile>>,
    pub enqueue: Option<Spanned<EnqueueFile>>,
    #[serde(default)]
    pub lanes: Vec<Spanned<LaneFile>>,
}

/// `[rooms.challenge]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChallengeFile {
    pub kind: Option<Spanned<String>>,
    pub difficulty_bits: Option<Spanned<RateFile>>,
    pub min_bits: Option<Spanned<i64>>,
    pub max_bits: Option<Spanned<i64>>,
    pub target_joins_per_second: Option<Spanned<i64>>,
    pub challenge_ttl_s: Option<Spanned<i64>>,
    pub widget: Option<Spanned<String>>,
    pub verify_url: Option<Spanned<String>>,
    pub secret_env: Option<Spanned<String>>,
    pub site_key: Option<Spanned<String>>,
    pub script_url: Option<Spanned<String>>,
    pub hostnames: Option<Spanned<Vec<Spanned<String>>>>,
    pub on_verifier_error: Option<Spanned<String>>,
    pub timeout_ms: Option<Spanned<i64>>,
    pub in_flight_max: Option<Spanned<i64>>,
}

/// `[rooms.enqueue]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnqueueFile {
    pub required: Option<Spanned<bool>>,
    #[serde(default)]
    pub keys: Vec<Spanned<KeyFile>>,
}

/// `[[rooms.lanes]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaneFile {
    pub name: Spanned<String>,
    pub share: Option<Spanned<f64>>,
    pub bypass: Option<Spanned<bool>>,
}

/// `[rooms.adaptive]`, for `release_per_second = "adaptive"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveFile {
    pub target_p99_ms: Option<Spanned<i64>>,
    pub max_error_ratio: Option<Spanned<f64>>,
    pub min_per_second: Option<Spanned<i64>>,
    pub max_per_second: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProductFile {
    pub sku: Spanned<String>,
    pub stock: Spanned<i64>,
    pub price_cents: Spanned<i64>,
    pub room: Spanned<String>,
    pub max_per_order: Option<Spanned<i64>>,
    pub partitions: Option<Spanned<i64>>,
}
