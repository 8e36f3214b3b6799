//! Forwarding headers: request ids, `X-Forwarded-*` names, hop-by-hop
//! removal, the headers a client may not send on to the origin. The `X-Forwarded-For` chain itself is [`crate::client`]'s.

use http::{header, HeaderMap, HeaderName, HeaderValue};

use crate::pass_headers;

pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Headers that name the client, the host or the scheme the way a proxy in
/// front would. From a peer that is not a trusted proxy they are the
/// client's own claims: an origin that builds links from `X-Forwarded-Host`
/// would put them in pages the origin cache then serves to everyone, and
/// one that reads `Forwarded` or `X-Real-IP` would take a spoofed address.
/// They are dropped before the request is forwarded.
pub static CLIENT_CLAIMS: [HeaderName; 12] = [
    HeaderName::from_static("forwarded"),
    HeaderName::from_static("x-forwarded-host"),
    HeaderName::from_static("x-forwarded-port"),
    HeaderName::from_static("x-forwarded-prefix"),
    HeaderName::from_static("x-forwarded-server"),
    HeaderName::from_static("x-forwarded-ssl"),
    HeaderName::from_static("x-real-ip"),
    HeaderName::from_static("true-client-ip"),
    HeaderName::from_static("cf-connecting-ip"),
    HeaderName::from_static("fastly-client-ip"),
    HeaderName::from_static("x-client-ip"),
    HeaderName::from_static("x-cluster-client-ip"),
];

/// Headers some frameworks (IIS URL Rewrite, Symfony, Zend) read as the
/// path to serve instead of the request target: the origin would serve
/// another path than the one `protect` checked. Never forwarded, whoever
/// sends them.
pub static PATH_OVERRIDES: [HeaderName; 2] = [
    HeaderName::from_static("x-original-url"),
    HeaderName::from_static("x-rewrite-url"),
];

/// Headers some frameworks (Rails' and Express's method-override
/// middleware, Symfony, Laravel, ASP.NET) read as the method to serve
/// instead of the request's: a `GET` the gateway checked and caches as a
/// read would reach the origin as a `POST`, `PUT` or `DELETE`, and its
/// answer could fill the origin cache for the `GET`. Never forwarded,
/// whoever sends them.
pub static METHOD_OVERRIDES: [HeaderName; 3] = [
    HeaderName::from_static("x-http-method-override"),
    HeaderName::from_static("x-http-method"),
    HeaderName::from_static("x-method-override"),
];

/// The headers to drop from a request before it goes to the origin:
/// [`PATH_OVERRIDES`] and [`METHOD_OVERRIDES`] always, [`CLIENT_CLAIMS`]
/// unless the peer is a trusted proxy.
pub fn not_forwarded(trusted_peer: bool) -> impl Iterator<Item = &'static HeaderName> {
    let claims: &'static [HeaderName] = if trusted_peer { &[] } else { &CLIENT_CLAIMS };
    PATH_OVERRIDES.iter().chain(&METHOD_OVERRIDES).chain(claims)
}

/// Those of [`not_forwarded`] that `headers` holds, and the gateway's own
/// pass headers in any spelling ([`pass_headers::is_reserved`]), whoever
/// sends them: one pass over the request's names (usually a handful)
/// instead of a removal per name.
pub fn not_forwarded_in(headers: &HeaderMap, trusted_peer: bool) -> Vec<HeaderName> {
    headers
        .keys()
        .filter(|name| {
            not_forwarded(trusted_peer).any(|n| n == *name) || pass_headers::is_reserved(name)
        })
        .cloned()
        .collect()
}

/// Longest client-supplied request id that is kept.
const REQUEST_ID_LEN_MAX: usize = 128;

/// The client's request id when it is sane (visible ASCII, bounded), else a
/// fresh UUID (v4). Ids end up in logs, so nothing else is trusted. A kept
/// id shares the request's bytes; a fresh one comes from the thread's
/// CSPRNG (`rand::rng()`, seeded from the OS and reseeded as it goes), not
/// from a `getrandom` call per request.
pub fn request_id(incoming: Option<&HeaderValue>) -> HeaderValue {
    match incoming {
        Some(id)
            if !id.is_empty()
                && id.len() <= REQUEST_ID_LEN_MAX
                && id.as_bytes().iter().all(|b| (0x21..0x7f).contains(b)) =>
        {
            id.clone()
        }
        _ => {
            let mut random = [0u8; 16];
            rand::RngCore::fill_bytes(&mut rand::rng(), &mut random);
            let id = uuid::Builder::from_random_bytes(random).into_uuid();
            let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
            let text = id.hyphenated().encode_lower(&mut text);
            HeaderValue::from_str(text).expect("a UUID is header-safe")
        }
    }
}

/// The headers that are always hop-by-hop.
static HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
];

/// The headers that describe one connection, not the message
/// (RFC 9110 §7.6.1), including any named by `Connection`, present in
/// `headers`. Framing (`Transfer-Encoding`, `Content-Length`) is left to
/// pingora.
pub fn hop_by_hop(headers: &HeaderMap) -> Vec<HeaderName> {
    // One pass over the message's names finds the fixed ones; without any
    // (so without `Connection`) that is all.
    let mut present = [false; HOP_BY_HOP.len()];
    for name in headers.keys() {
        if let Some(i) = HOP_BY_HOP.iter().position(|h| h == name) {
            present[i] = true;
        }
    }
    if !present.contains(&true) {
        return Vec::new();
    }
    // The names `Connection` lists, in its order, then the fixed ones, in
    // theirs (removal order decides the order of the headers left). A
    // listed name counts when the message carries it, so it is matched
    // against the message's own names (case-insensitively, as a parsed name
    // would be) instead of parsed and allocated for tokens such as
    // `keep-alive` or `close`.
    let mut names = Vec::new();
    let listed = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim);
    for token in listed {
        let named = headers.keys().find(|name| {
            name.as_str().eq_ignore_ascii_case(token)
                && **name != header::TRANSFER_ENCODING
                && **name != header::CONTENT_LENGTH
        });
        names.extend(named.cloned());
    }
    names.extend(
        HOP_BY_HOP
            .iter()
            .zip(present)
            .filter(|(_, present)| *present)
            .map(|(name, _)| name.clone()),
    );
    names
}

#[cfg(test)]
mod tests {

    #[test]
    fn client_claims_are_dropped_unless_a_trusted_proxy_sent_them() {
        let untrusted: Vec<&str> = super::not_forwarded(false).map(|h| h.as_str()).collect();
        for name in [
            "forwarded",
            "x-forwarded-host",
            "x-real-ip",
            "x-original-url",
            "x-http-method-override",
        ] {
            assert!(untrusted.contains(&name), "{name}");
        }
        let trusted: Vec<&str> = super::not_forwarded(true).map(|h| h.as_str()).collect();
        assert_eq!(
            trusted,
            [
                "x-original-url",
                "x-rewrite-url",
                "x-http-method-override",
                "x-http-method",
                "x-method-override"
            ]
        );
    }

    use super::*;

    #[test]
    fn not_forwarded_in_names_the_ones_present() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("x-real-ip", "1.2.3.4"),
            ("accept", "*/*"),
            ("x-original-url", "/admin"),
            ("x-real-ip", "5.6.7.8"),
        ] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        let names = |h: &HeaderMap, trusted| -> Vec<String> {
            not_forwarded_in(h, trusted)
                .iter()
                .map(|n| n.to_string())
                .collect()
        };
        assert_eq!(names(&h, false), ["x-real-ip", "x-original-url"]);
        assert_eq!(names(&h, true), ["x-original-url"]);
        for (k, v) in [("sluice_room", "vip"), ("sluice-pass-subject", "x")] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        assert_eq!(
            names(&h, true),
            ["x-original-url", "sluice_room", "sluice-pass-subject"],
            "the pass headers, even from a trusted proxy"
        );
        assert!(not_forwarded_in(&HeaderMap::new(), false).is_empty());
        let mut plain = HeaderMap::new();
        plain.insert(header::HOST, HeaderValue::from_static("shop"));
        assert!(hop_by_hop(&plain).is_empty());
    }

    /// The removal as it was first written: parse every listed name.
    fn hop_by_hop_parsed(headers: &HeaderMap) -> Vec<String> {
        let mut names: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .filter(|name| *name != header::TRANSFER_ENCODING && *name != header::CONTENT_LENGTH)
            .collect();
        names.extend(HOP_BY_HOP.iter().cloned());
        names.retain(|name| headers.contains_key(name));
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn hop_by_hop_removes_what_parsing_every_listed_name_would() {
        let cases: &[&[(&str, &str)]] = &[
            &[("host", "shop")],
            &[("connection", "keep-alive"), ("keep-alive", "timeout=5")],
            &[("connection", "close"), ("close", "x")],
            &[
                ("connection", "X-Hop, , Content-Length, transfer-encoding"),
                ("x-hop", "1"),
                ("content-length", "3"),
            ],
            &[
                ("connection", "te"),
                ("connection", "Upgrade"),
                ("upgrade", "h2c"),
                ("te", "trailers"),
            ],
            &[("proxy-authorization", "Basic x"), ("accept", "*/*")],
            &[("connection", "bad name, x-a"), ("x-a", "1"), ("x-b", "2")],
        ];
        for case in cases {
            let mut h = HeaderMap::new();
            for (k, v) in *case {
                h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
            }
            let found: Vec<String> = hop_by_hop(&h).iter().map(|n| n.to_string()).collect();
            assert_eq!(found, hop_by_hop_parsed(&h), "{case:?}");
        }
    }

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
