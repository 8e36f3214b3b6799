//! Who the client is, through the real gateway: `X-Forwarded-For` from
//! untrusted and trusted peers, and PROXY protocol v1/v2 on the listener.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::Value;

const ROOM: &str = "[[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\"]\nrelease_per_second = 50\nmax_active = 5\nqueue_capacity = 100\njoins_per_minute_per_client = 2\n";

fn gateway(origin: &Origin, extra_gateway: &str) -> Gateway {
    Gateway::start(GatewayOptions {
        origin: Some(origin.url()),
        extra_gateway: extra_gateway.into(),
        rest: ROOM.into(),
        ..Default::default()
    })
}

async fn join(gw: &Gateway, xff: &str) -> StatusCode {
    client()
        .post(gw.url("/queue/drop/join"))
        .header("x-forwarded-for", xff)
        .send()
        .await
        .unwrap()
        .status()
}

/// What the origin received as `X-Forwarded-For`.
async fn forwarded_for(gw: &Gateway, xff: &[&str]) -> String {
    let mut req = client().get(gw.url("/echo"));
    for v in xff {
        req = req.header("x-forwarded-for", *v);
    }
    let echoed: Value = req.send().await.unwrap().json().await.unwrap();
    echoed["x-forwarded-for"].as_str().unwrap_or("").to_string()
}

/// The headers the origin received for `/echo` sent with `headers`.
async fn echoed(gw: &Gateway, headers: &[(&str, &str)]) -> Value {
    let mut req = client().get(gw.url("/echo"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap().json().await.unwrap()
}

/// Forwarding claims, path and method overrides a client may send.
const CLAIMS: [(&str, &str); 9] = [
    ("x-forwarded-host", "evil.example"),
    ("forwarded", "for=6.6.6.6;host=evil.example;proto=https"),
    ("x-real-ip", "6.6.6.6"),
    ("true-client-ip", "6.6.6.6"),
    ("x-original-url", "/admin/secret"),
    ("x-rewrite-url", "/admin/secret"),
    ("x-http-method-override", "DELETE"),
    ("x-http-method", "PUT"),
    ("x-method-override", "POST"),
];

#[tokio::test]
async fn an_untrusted_peers_forwarding_claims_never_reach_the_origin() {
    let origin = Origin::start();
    let gw = gateway(&origin, "");
    let seen = echoed(&gw, &CLAIMS).await;
    for (name, _) in CLAIMS {
        assert!(
            seen.get(name).is_none(),
            "{name} reached the origin: {seen}"
        );
    }
    // A trusted proxy's own forwarding headers go on; a path or method
    // override never.
    let gw = gateway(&origin, "trusted_proxies = [\"127.0.0.0/8\"]\n");
    let seen = echoed(&gw, &CLAIMS).await;
    assert_eq!(seen["x-forwarded-host"], "evil.example", "{seen}");
    assert_eq!(seen["x-real-ip"], "6.6.6.6", "{seen}");
    for name in [
        "x-original-url",
        "x-rewrite-url",
        "x-http-method-override",
        "x-http-method",
        "x-method-override",
    ] {
        assert!(seen.get(name).is_none(), "{name}: {seen}");
    }
}

#[tokio::test]
async fn an_untrusted_peers_forwarded_for_is_ignored_and_replaced() {
    let origin = Origin::start();
    let gw = gateway(&origin, "");
    // Each join claims another client; the limiter keys on the peer.
    assert_eq!(join(&gw, "203.0.113.1").await, StatusCode::ACCEPTED);
    assert_eq!(join(&gw, "203.0.113.2").await, StatusCode::ACCEPTED);
    assert_eq!(
        join(&gw, "203.0.113.3").await,
        StatusCode::TOO_MANY_REQUESTS,
        "a spoofed X-Forwarded-For must not buy a new join budget"
    );
    assert_eq!(
        forwarded_for(&gw, &["6.6.6.6, 203.0.113.9", "7.7.7.7"]).await,
        "127.0.0.1",
        "the client's chain is replaced by its address, not appended to"
    );
    assert_eq!(forwarded_for(&gw, &[]).await, "127.0.0.1");
    assert_logged(&gw, "client=127.0.0.1");
}

#[tokio::test]
async fn from_a_trusted_proxy_each_forwarded_client_has_its_own_budget() {
    let origin = Origin::start();
    let gw = gateway(&origin, "trusted_proxies = [\"127.0.0.0/8\"]\n");
    assert_eq!(join(&gw, "203.0.113.1").await, StatusCode::ACCEPTED);
    assert_eq!(
        join(&gw, "6.6.6.6, 203.0.113.1").await,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        join(&gw, "9.9.9.9, 203.0.113.1").await,
        StatusCode::TOO_MANY_REQUESTS,
        "the right-most untrusted address is the client, whatever is left of it"
    );
    assert_eq!(join(&gw, "203.0.113.2").await, StatusCode::ACCEPTED);
    assert_eq!(
        join(&gw, "203.0.113.2, 127.0.0.9").await,
        StatusCode::ACCEPTED,
        "a trusted hop is skipped"
    );
    assert_eq!(
        join(&gw, "203.0.113.2").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        forwarded_for(&gw, &["6.6.6.6, 203.0.113.9", "127.0.0.5"]).await,
        "203.0.113.9, 127.0.0.5, 127.0.0.1",
        "the verified chain, with the peer appended"
    );
    assert_logged(&gw, "client=203.0.113.9");
}

/// The access log (written just after the answer) names `client` for `/echo`.
fn assert_logged(gw: &Gateway, client: &str) {
    let logged = eventually(Duration::from_secs(5), || {
        plain(&gw.log())
            .lines()
            .any(|l| l.contains("path=/echo") && l.contains(client))
    });
    assert!(
        logged.is_some(),
        "no access line with {client}: {}",
        gw.log()
    );
}

/// `text` without ANSI colour sequences.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

/// Sends `prefix` then a request for `/echo`; the origin's view of
/// `X-Forwarded-For`, or `None` when the gateway closed without an answer.
fn through_proxy_protocol(gw: &Gateway, prefix: &[u8]) -> Option<String> {
    let mut s = TcpStream::connect(gw.listen).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut bytes = prefix.to_vec();
    bytes.extend_from_slice(b"GET /echo HTTP/1.1\r\nHost: shop\r\nX-Forwarded-For: 6.6.6.6\r\nConnection: close\r\n\r\n");
    // The gateway may close as soon as it has read the bad prefix.
    let _ = s.write_all(&bytes);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    let (_, body) = text.split_once("\r\n\r\n")?;
    let echoed: Value = serde_json::from_str(body).ok()?;
    Some(echoed["x-forwarded-for"].as_str()?.to_string())
}

#[test]
fn proxy_protocol_headers_name_the_client_and_anything_else_is_dropped() {
    let origin = Origin::start();
    let gw = gateway(&origin, "proxy_protocol = true\n");
    assert_eq!(
        through_proxy_protocol(&gw, b"PROXY TCP4 203.0.113.7 127.0.0.1 40000 8080\r\n").as_deref(),
        Some("203.0.113.7")
    );
    assert_eq!(
        through_proxy_protocol(&gw, b"PROXY TCP6 2001:db8::7 ::1 40000 8080\r\n").as_deref(),
        Some("2001:db8::7")
    );
    let v2 = ppp::v2::Builder::with_addresses(
        ppp::v2::Version::Two | ppp::v2::Command::Proxy,
        ppp::v2::Protocol::Stream,
        ppp::v2::IPv4::new([198, 51, 100, 4], [127, 0, 0, 1], 40000, 8080),
    )
    .build()
    .unwrap();
    assert_eq!(
        through_proxy_protocol(&gw, &v2).as_deref(),
        Some("198.51.100.4")
    );
    let local = ppp::v2::Builder::with_addresses(
        ppp::v2::Version::Two | ppp::v2::Command::Local,
        ppp::v2::Protocol::Unspecified,
        ppp::v2::Addresses::Unspecified,
    )
    .build()
    .unwrap();
    assert_eq!(
        through_proxy_protocol(&gw, &local).as_deref(),
        Some("127.0.0.1"),
        "a balancer's LOCAL connection keeps the TCP peer"
    );
    for garbage in [
        &b""[..],
        b"PROXY TCP4 203.0.113.7 nonsense\r\n",
        b"PROXY TCP4 999.0.0.1 127.0.0.1 1 2\r\n",
        b"\r\n\r\n\0\r\nQUIT\n\x99\x11\x00\x00",
    ] {
        assert_eq!(
            through_proxy_protocol(&gw, garbage),
            None,
            "{:?} must be dropped",
            String::from_utf8_lossy(garbage)
        );
    }
    // The join budget is the PROXY source's.
    let join = |src: &str| {
        let req = format!("PROXY TCP4 {src} 127.0.0.1 40000 8080\r\nPOST /queue/drop/join HTTP/1.1\r\nHost: shop\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        raw_status(&raw_request(gw.listen, &req))
    };
    assert_eq!((join("203.0.113.1"), join("203.0.113.1")), (202, 202));
    assert_eq!(join("203.0.113.1"), 429);
    assert_eq!(join("203.0.113.2"), 202);
}

#[test]
fn a_slow_proxy_protocol_header_is_dropped_after_the_timeout() {
    let origin = Origin::start();
    let gw = gateway(&origin, "proxy_protocol = true\n");
    let mut s = TcpStream::connect(gw.listen).unwrap();
    s.write_all(b"PROXY TCP4 203.0.113.7").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let started = Instant::now();
    let mut out = Vec::new();
    let read = s.read_to_end(&mut out);
    let waited = started.elapsed();
    assert!(
        matches!(read, Ok(0)),
        "closed by the gateway, not timed out on our side: {read:?} after {waited:?}"
    );
    assert!(out.is_empty(), "no answer is written: {out:?}");
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(6),
        "dropped after the 3 s header timeout, not before and not much after: {waited:?}"
    );
    // The listener still serves well-formed connections.
    assert_eq!(
        through_proxy_protocol(&gw, b"PROXY TCP4 203.0.113.8 127.0.0.1 1 2\r\n").as_deref(),
        Some("203.0.113.8")
    );
}

/// A local relay that opens each connection to `target` with `header`,
/// then passes the bytes through: a load balancer speaking PROXY protocol.
async fn proxy_protocol_relay(target: std::net::SocketAddr, header: &'static [u8]) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut outbound = tokio::net::TcpStream::connect(target).await.unwrap();
                tokio::io::AsyncWriteExt::write_all(&mut outbound, header)
                    .await
                    .unwrap();
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    port
}

#[tokio::test]
async fn on_a_tls_listener_the_header_comes_before_the_handshake() {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cert_path = dir.path().join("cert.pem");
    let key_path = dir.path().join("key.pem");
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).unwrap();
    let origin = Origin::start();
    let gw = gateway(
        &origin,
        &format!("tls_cert = {cert_path:?}\ntls_key = {key_path:?}\nproxy_protocol = true\n"),
    );
    let https = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cert.cert.pem().as_bytes()).unwrap())
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();

    let relay = proxy_protocol_relay(gw.listen, b"PROXY TCP4 203.0.113.44 127.0.0.1 1 2\r\n").await;
    let seen: Value = https
        .get(format!("https://localhost:{relay}/echo"))
        .header("x-forwarded-for", "6.6.6.6")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(seen["x-forwarded-for"], "203.0.113.44");
    assert_eq!(seen["x-forwarded-proto"], "https");

    let direct = https
        .get(format!("https://localhost:{}/echo", gw.listen.port()))
        .send()
        .await;
    assert!(
        direct.is_err(),
        "a TLS hello without a PROXY header first is dropped: {direct:?}"
    );
}
