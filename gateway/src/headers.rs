//! Forwarding headers: request ids, `X-Forwarded-*`, hop-by-hop removal.

use http::{header, HeaderMap, HeaderName, HeaderValue};

pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Longest client-supplied request id that is kept.
const REQUEST_ID_LEN_MAX: usize = 128;
/// Longest `X-Forwarded-For` chain passed on; a longer one is replaced.
const FORWARDED_FOR_LEN_MAX: usize = 1024;

/// The client's request id when it is sane (visible ASCII, bounded), else a
/// fresh UUID. Ids end up in logs, so nothing else is trusted.
pub fn request_id(incoming: Option<&HeaderValue>) -> String {
    match incoming.map(HeaderValue::as_bytes) {
        Some(id)
            if !id.is_empty()
                && id.len() <= REQUEST_ID_LEN_MAX
                && id.iter().all(|b| (0x21..0x7f).contains(b)) =>
        {
            String::from_utf8_lossy(id).into_owned()
        }
        _ => uuid::Uuid::new_v4().to_string(),
    }
}

/// Appends the client address to an existing chain.
pub fn forwarded_for(existing: Option<&HeaderValue>, client_ip: Option<&str>) -> Option<String> {
    let existing = existing
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.len() <= FORWARDED_FOR_LEN_MAX);
    match (existing, client_ip) {
        (Some(chain), Some(ip)) => Some(format!("{chain}, {ip}")),
        (None, Some(ip)) => Some(ip.to_string()),
        (Some(chain), None) => Some(chain.to_string()),
        (None, None) => None,
    }
}

/// The headers that describe one connection, not the message
/// (RFC 9110 §7.6.1), including any named by `Connection`, present in
/// `headers`. Framing (`Transfer-Encoding`, `Content-Length`) is left to
/// pingora.
pub fn hop_by_hop(headers: &HeaderMap) -> Vec<HeaderName> {
    let mut names: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .filter(|name| *name != header::TRANSFER_ENCODING && *name != header::CONTENT_LENGTH)
        .collect();
    names.extend([
        header::CONNECTION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
        header::TE,
        header::TRAILER,
        header::UPGRADE,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
    ]);
    names.retain(|name| headers.contains_key(name));
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_id_is_kept_when_sane_and_made_otherwise() {
        let given = HeaderValue::from_static("abc-123");
        assert_eq!(request_id(Some(&given)), "abc-123");
        let made = request_id(None);
        assert_eq!(made.len(), 36);
        assert_ne!(made, request_id(None));
        let spaced = HeaderValue::from_static("a b");
        assert_ne!(request_id(Some(&spaced)), "a b");
        let long = HeaderValue::from_str(&"x".repeat(129)).unwrap();
        assert_eq!(request_id(Some(&long)).len(), 36);
    }

    #[test]
    fn forwarded_for_appends_the_client() {
        let chain = HeaderValue::from_static("203.0.113.7");
        assert_eq!(
            forwarded_for(Some(&chain), Some("10.0.0.1")).unwrap(),
            "203.0.113.7, 10.0.0.1"
        );
        assert_eq!(forwarded_for(None, Some("10.0.0.1")).unwrap(), "10.0.0.1");
        let huge = HeaderValue::from_str(&"1.1.1.1, ".repeat(200)).unwrap();
        assert_eq!(
            forwarded_for(Some(&huge), Some("10.0.0.1")).unwrap(),
            "10.0.0.1"
        );
    }

    #[test]
    fn hop_by_hop_headers_and_the_ones_connection_names_are_dropped() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, x-secret-hop"),
            ("keep-alive", "timeout=5"),
            ("x-secret-hop", "1"),
            ("upgrade", "websocket"),
            ("te", "trailers"),
            ("proxy-authorization", "Basic xyz"),
            ("accept", "text/html"),
            ("transfer-encoding", "chunked"),
        ] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        for name in hop_by_hop(&h) {
            h.remove(name);
        }
        let left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, vec!["accept", "transfer-encoding"]);
    }
}
