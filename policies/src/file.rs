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
}

/// A ticket-signing key, as `sluice keygen` prints it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFile {
    pub kid: Spanned<String>,
    pub alg: Spanned<String>,
    pub secret: Spanned<String>,
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
    pub release_per_second: Spanned<i64>,
    pub max_active: Spanned<i64>,
    pub queue_capacity: Spanned<i64>,
    pub pass_ttl_s: Option<Spanned<i64>>,
    pub ticket_ttl_s: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProductFile {
    pub sku: Spanned<String>,
    pub stock: Spanned<i64>,
    pub price_cents: Spanned<i64>,
    pub room: Spanned<String>,
}
