//! An answer the gateway writes itself (catalog files, the rooms' and the
//! orders' JSON, the contract's errors), as the proxy phases carry it out.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};

use crate::error::ApiError;

/// An answer the gateway writes itself.
#[derive(Debug)]
pub struct LocalResponse {
    pub status: StatusCode,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
    /// Where it came from, for metrics: `catalog` or `local`.
    pub source: &'static str,
}

impl LocalResponse {
    pub fn error(e: &ApiError) -> Self {
        Self {
            status: e.status(),
            headers: e.header_values(),
            body: e.body(),
            source: "local",
        }
    }
}
