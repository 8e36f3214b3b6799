//! Who the client is, decided once per request.
//!
//! The peer is the TCP peer, or the source a PROXY protocol header named
//! (see [`crate::proxy_protocol`]). A peer outside `gateway.trusted_proxies`
//! is the client, and whatever `X-Forwarded-For` it sent is replaced by its
//! own address before the request goes to the origin. From a trusted peer
//! (a CDN or load balancer), the client is the right-most address of the
//! `X-Forwarded-For` chain (every such header, in order, comma lists) that
//! is not itself a trusted proxy, and the chain from that address on is
//! forwarded with the peer appended. What lies left of the client was
//! written by the client and is dropped.
//!
//! The walk from the right stops at the first entry that is not an address
//! (`unknown`, garbage) or past [`CHAIN_ENTRIES_MAX`] entries: nothing
//! beyond can be trusted, so the left-most trusted hop reached is the
//! client. The join limiter, the access log and the forwarded headers all
//! use the one [`Client`] computed here.

use std::net::{IpAddr, SocketAddr};

use http::HeaderMap;
use ipnet::IpNet;

use crate::headers::X_FORWARDED_FOR;

/// Most `X-Forwarded-For` entries looked at, from the right.
pub const CHAIN_ENTRIES_MAX: usize = 32;

/// The client of one request, and the chain to forward.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Client {
    /// The client address; `None` when the peer has none (never on TCP).
    pub ip: Option<IpAddr>,
    /// The `X-Forwarded-For` chain to send to the origin
    /// ([`Self::forwarded_for`]), written out only for a request that goes
    /// there.
    chain: Chain,
    /// The peer is one of `trusted_proxies`: the other forwarding headers
    /// it sends ([`crate::headers::CLIENT_CLAIMS`]) are its word, not the
    /// client's, and go on to the origin.
    pub trusted_peer: bool,
}

/// The addresses of the `X-Forwarded-For` to send on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
enum Chain {
    /// Send none.
    #[default]
    None,
    /// The peer alone (an untrusted peer, the usual case).
    Peer(IpAddr),
    /// The peer first, then the hops before it, right to left.
    Hops(Vec<IpAddr>),
}

impl Client {
    /// The `X-Forwarded-For` value to send to the origin, ending with the
    /// peer; `None`: send none.
    pub fn forwarded_for(&self) -> Option<String> {
        match &self.chain {
            Chain::None => None,
            Chain::Peer(peer) => Some(peer.to_string()),
            Chain::Hops(chain) => Some(
                chain
                    .iter()
                    .rev()
                    .map(IpAddr::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        }
    }
}

/// The client of a request from `peer` carrying `headers`.
pub fn identify(peer: Option<IpAddr>, headers: &HeaderMap, trusted: &[IpNet]) -> Client {
    let Some(peer) = peer.map(|ip| ip.to_canonical()) else {
        return Client::default();
    };
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return Client {
            ip: Some(peer),
            chain: Chain::Peer(peer),
            trusted_peer: false,
        };
    }
    let entries: Vec<&str> = headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(|e| std::str::from_utf8(e).map_or("", str::trim))
        .collect();
    // From the right: trusted hops are skipped; the first other address is
    // the client; anything unreadable ends the walk.
    let mut chain = vec![peer];
    let mut client = peer;
    for entry in entries.iter().rev().take(CHAIN_ENTRIES_MAX) {
        let Some(ip) = parse_entry(entry) else { break };
        chain.push(ip);
        client = ip;
        if !is_trusted(&ip) {
            break;
        }
    }
    Client {
        ip: Some(client),
        chain: Chain::Hops(chain),
        trusted_peer: true,
    }
}

/// One `X-Forwarded-For` entry: `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`,
/// `[2001:db8::1]` or `[2001:db8::1]:443`; anything else is `None`.
pub fn parse_entry(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    let ip = entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| {
            entry
                .strip_prefix('[')?
                .strip_suffix(']')?
                .parse::<std::net::Ipv6Addr>()
                .ok()
                .map(IpAddr::V6)
        })?;
    Some(ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|n| n.parse().unwrap()).collect()
    }

    fn xff(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(X_FORWARDED_FOR, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    fn id(peer: &str, values: &[&str], trusted: &[&str]) -> (String, String) {
        let c = identify(ip(peer), &xff(values), &nets(trusted));
        (c.ip.unwrap().to_string(), c.forwarded_for().unwrap())
    }

    #[test]
    fn an_untrusted_peer_is_the_client_and_its_chain_is_replaced() {
        assert_eq!(
            id("198.51.100.9", &["203.0.113.7, 10.0.0.1"], &[]),
            ("198.51.100.9".into(), "198.51.100.9".into())
        );
        assert_eq!(
            id("198.51.100.9", &["203.0.113.7"], &["10.0.0.0/8"]),
            ("198.51.100.9".into(), "198.51.100.9".into())
        );
        assert_eq!(
            id("198.51.100.9", &[], &[]),
            ("198.51.100.9".into(), "198.51.100.9".into())
        );
    }

    #[test]
    fn a_trusted_peer_names_the_right_most_untrusted_address() {
        let t = ["10.0.0.0/8", "2001:db8:ffff::/48"];
        assert_eq!(
            id("10.0.0.2", &["6.6.6.6, 203.0.113.7"], &t),
            ("203.0.113.7".into(), "203.0.113.7, 10.0.0.2".into()),
            "what the client wrote left of itself is dropped"
        );
        assert_eq!(
            id("10.0.0.2", &["6.6.6.6", "203.0.113.7 ,10.1.1.1"], &t),
            (
                "203.0.113.7".into(),
                "203.0.113.7, 10.1.1.1, 10.0.0.2".into()
            ),
            "several headers are one chain; trusted hops are skipped"
        );
        assert_eq!(
            id("10.0.0.2", &["[2001:db8::5]:443, 203.0.113.7:8080"], &t),
            ("203.0.113.7".into(), "203.0.113.7, 10.0.0.2".into()),
            "ports are dropped"
        );
        assert_eq!(
            id("2001:db8:ffff::1", &["2001:db8:1::7"], &t),
            (
                "2001:db8:1::7".into(),
                "2001:db8:1::7, 2001:db8:ffff::1".into()
            )
        );
        assert_eq!(
            id("::ffff:10.0.0.2", &["[2001:db8:1::7]"], &t),
            ("2001:db8:1::7".into(), "2001:db8:1::7, 10.0.0.2".into()),
            "a v4-mapped peer is its IPv4 address"
        );
    }

    #[test]
    fn a_trusted_peer_without_a_usable_chain_is_the_client() {
        let t = ["10.0.0.0/8"];
        assert_eq!(
            id("10.0.0.2", &[], &t),
            ("10.0.0.2".into(), "10.0.0.2".into())
        );
        assert_eq!(
            id("10.0.0.2", &["10.9.9.9, 10.0.0.3"], &t),
            ("10.9.9.9".into(), "10.9.9.9, 10.0.0.3, 10.0.0.2".into()),
            "all trusted: the left-most hop"
        );
    }

    #[test]
    fn malformed_entries_end_the_walk_safely() {
        let t = ["10.0.0.0/8"];
        for bad in [
            "unknown",
            "",
            "1.2.3",
            "300.1.1.1",
            "_hidden",
            "1.2.3.4:x",
            "[::1",
        ] {
            assert_eq!(
                id("10.0.0.2", &[&format!("6.6.6.6, {bad}")], &t),
                ("10.0.0.2".into(), "10.0.0.2".into()),
                "{bad:?} right of the client"
            );
            assert_eq!(
                id("10.0.0.2", &[&format!("{bad}, 203.0.113.7")], &t),
                ("203.0.113.7".into(), "203.0.113.7, 10.0.0.2".into()),
                "{bad:?} left of the client is never read"
            );
        }
        assert_eq!(
            id("10.0.0.2", &["6.6.6.6, 10.1.1.1, garbage, 10.3.3.3"], &t),
            ("10.3.3.3".into(), "10.3.3.3, 10.0.0.2".into()),
            "garbage behind trusted hops: the last hop reached"
        );
        let mut h = HeaderMap::new();
        h.append(
            X_FORWARDED_FOR,
            HeaderValue::from_bytes(b"6.6.6.6, \xff\xfe").unwrap(),
        );
        let c = identify(ip("10.0.0.2"), &h, &nets(&t));
        assert_eq!(c.ip, ip("10.0.0.2"), "non-UTF-8 bytes are not an address");
    }

    #[test]
    fn a_long_chain_is_read_only_so_far() {
        let t = ["10.0.0.0/8"];
        let hops = vec!["10.0.0.9"; CHAIN_ENTRIES_MAX + 5].join(", ");
        let (client, chain) = id("10.0.0.2", &[&format!("6.6.6.6, {hops}")], &t);
        assert_eq!(client, "10.0.0.9");
        assert_eq!(chain.split(", ").count(), CHAIN_ENTRIES_MAX + 1);
    }

    #[test]
    fn no_peer_no_client() {
        assert_eq!(
            identify(None, &xff(&["6.6.6.6"]), &nets(&["0.0.0.0/0"])),
            Client::default()
        );
    }
}
