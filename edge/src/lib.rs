//! What the gateway reads from a client before it decides anything, as
//! pure functions with no server around them (so fuzz targets and unit tests
//! call them directly, without building the proxy).
//!
//! - [`path`]: the one canonical form of a request path. Every check
//!   (`protect` globs, the catalog, the origin cache key, the local routes)
//!   runs on [`path::CanonicalPath::decoded`], and the origin is sent
//!   [`path::CanonicalPath::encoded`], so what was checked is what the
//!   origin serves. Anything that cannot be read one way only is refused.
//! - [`auth`]: the bearer token and cookies a request carries; two
//!   `Authorization` headers are refused rather than one picked.
//! - [`host`]: an HTTP/1.1 request without `Host`, or any with two, is
//!   refused (RFC 9112 §3.2).

pub mod auth;
pub mod host;
pub mod path;
