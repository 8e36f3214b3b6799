//! The public connection cap through the real gateway: idle connections
//! beyond `max_connections` are closed at once, and the admin listener,
//! the store and later shoppers keep being served; a request head dripped
//! byte by byte (slowloris) is cut off at `header_timeout_s`, a body the
//! gateway reads itself answered `408` at it; one client
//! address holds at most `max_connections_per_client`.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

const MAX_CONNECTIONS: usize = 50;
const IDLE: usize = MAX_CONNECTIONS + 200;

/// Whether the gateway has closed `s` (EOF), without waiting long.
fn closed_by_peer(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
    let mut byte = [0u8];
    match s.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == ErrorKind::ConnectionReset => true,
        Err(_) => false,
    }
}

/// `GET path` on a fresh connection; the status and how long it took.
fn timed_get(addr: std::net::SocketAddr, path: &str) -> (u16, Duration) {
    let started = Instant::now();
    let response = raw_request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n"),
    );
    (raw_status(&response), started.elapsed())
}

#[test]
fn idle_connections_beyond_the_cap_cannot_starve_the_gateway() {
    // 256 descriptors: without the cap, 250 idle connections plus the
    // stores and listeners would run the process out of them.
    let gw = Gateway::start(GatewayOptions {
        extra_gateway: format!("max_connections = {MAX_CONNECTIONS}\n"),
        nofile_limit: Some((256, 256)),
        ..Default::default()
    });
    let mut idle: Vec<TcpStream> = (0..IDLE)
        .map(|_| TcpStream::connect(gw.listen).unwrap())
        .collect();

    // Everything past the cap is closed by the gateway, at once.
    let mut closed = vec![false; IDLE];
    let all_past_the_cap_closed = eventually(Duration::from_secs(5), || {
        for (s, c) in idle.iter_mut().zip(closed.iter_mut()) {
            *c = *c || closed_by_peer(s);
        }
        closed.iter().filter(|&&c| c).count() >= IDLE - MAX_CONNECTIONS
    });
    assert!(
        all_past_the_cap_closed.is_some(),
        "{} of {IDLE} idle connections closed; at least {} expected",
        closed.iter().filter(|&&c| c).count(),
        IDLE - MAX_CONNECTIONS
    );

    // The admin listener and the store answer while the cap is full.
    let (status, took) = timed_get(gw.admin, "/healthz");
    assert_eq!(status, 200);
    assert!(took < Duration::from_secs(1), "/healthz took {took:?}");
    let (status, took) = timed_get(gw.admin, "/admin/state");
    assert_eq!(status, 200, "the store is read for /admin/state");
    assert!(took < Duration::from_secs(1), "/admin/state took {took:?}");
    assert_eq!(
        gw.metric("sluice_connections_open"),
        Some(MAX_CONNECTIONS as f64)
    );
    assert_eq!(
        gw.metric("sluice_connections_max"),
        Some(MAX_CONNECTIONS as f64)
    );
    assert!(
        gw.metric("sluice_connections_refused_total").unwrap() >= (IDLE - MAX_CONNECTIONS) as f64
    );

    // Once the idle shoppers leave, a new one is served within a second.
    drop(idle);
    let closed_at = Instant::now();
    let served = eventually(Duration::from_secs(1), || {
        let mut s = TcpStream::connect(gw.listen).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        std::io::Write::write_all(
            &mut s,
            b"GET /catalog/products.json HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n",
        )
        .is_ok()
            && {
                let mut out = Vec::new();
                let _ = s.read_to_end(&mut out);
                raw_status(&String::from_utf8_lossy(&out)) == 200
            }
    });
    assert!(
        served.is_some(),
        "no catalog answer within 1 s of the idle connections closing ({:?})",
        closed_at.elapsed()
    );

    let log = gw.log();
    assert!(
        !log.contains("Too many open files"),
        "the process ran out of descriptors:\n{log}"
    );
    assert!(
        log.contains("max_connections open"),
        "the refusals are logged:\n{log}"
    );
}

#[test]
fn the_default_cap_comes_from_the_raised_fd_limit() {
    let gw = Gateway::start(GatewayOptions {
        nofile_limit: Some((1024, 4096)),
        ..Default::default()
    });
    // (4096 - 512) / 2: the soft limit was raised to the hard one first
    // (from 1024 it would be 256).
    assert_eq!(gw.metric("sluice_connections_max"), Some(1792.0));
}

/// Reads one response with a `Content-Length` body from a kept-alive
/// connection; its status.
fn read_response(s: &mut TcpStream) -> u16 {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(head_end) = text.find("\r\n\r\n") {
            let length: usize = text[..head_end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if got.len() >= head_end + 4 + length {
                return raw_status(&text);
            }
        }
        match s.read(&mut byte) {
            Ok(0) | Err(_) => return raw_status(&String::from_utf8_lossy(&got)),
            Ok(n) => got.extend_from_slice(&byte[..n]),
        }
    }
}

#[test]
fn a_request_head_dripped_byte_by_byte_is_cut_off_at_the_header_timeout() {
    let gw = Gateway::start(GatewayOptions {
        extra_gateway: "header_timeout_s = 2\n".into(),
        ..Default::default()
    });
    let mut s = TcpStream::connect(gw.listen).unwrap();
    let started = Instant::now();
    s.write_all(b"GET /catalog/products.json HTTP/1.1\r\nHost: shop\r\nX-Drip: ")
        .unwrap();
    // One byte every 200 ms: each read is far inside pingora's per-read
    // timeout, so only a deadline on the whole head ends this.
    let mut cut_after = None;
    while started.elapsed() < Duration::from_secs(8) {
        std::thread::sleep(Duration::from_millis(200));
        if s.write_all(b"a").is_err() || closed_by_peer(&mut s) {
            cut_after = Some(started.elapsed());
            break;
        }
    }
    let cut_after = cut_after.expect("the dripping connection was still open after 8 s");
    assert!(
        cut_after >= Duration::from_millis(1800),
        "cut after {cut_after:?}, before the 2 s header timeout"
    );
    assert!(
        cut_after < Duration::from_secs(4),
        "cut after {cut_after:?}; header timeout 2 s"
    );
    assert!(gw.metric("sluice_connections_head_timeouts_total").unwrap() >= 1.0);
    // Its slot of the connection cap is given back.
    assert!(
        eventually(Duration::from_secs(2), || gw
            .metric("sluice_connections_open")
            == Some(0.0))
        .is_some(),
        "the cut connection still holds its slot"
    );
}

/// A body the gateway reads itself (here a provider webhook's), dripped
/// byte by byte, is answered `408 request_timeout` at the header timeout,
/// and the connection is closed after the answer.
#[test]
fn a_body_dripped_byte_by_byte_is_answered_408_at_the_header_timeout() {
    let gw = Gateway::start(GatewayOptions {
        extra_gateway: "header_timeout_s = 2\n".into(),
        ..Default::default()
    });
    let mut s = TcpStream::connect(gw.listen).unwrap();
    let started = Instant::now();
    s.write_all(
        b"POST /webhooks/simulated HTTP/1.1\r\nHost: shop\r\n\
          Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
    )
    .unwrap();
    // One byte every 200 ms: each read is far inside pingora's per-read
    // timeout, so only a deadline on the whole body ends this.
    let mut answer = Vec::new();
    while started.elapsed() < Duration::from_secs(8) && answer.is_empty() {
        std::thread::sleep(Duration::from_millis(200));
        let _ = s.write_all(b" ");
        s.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
        let mut buf = [0u8; 4096];
        if let Ok(n) = s.read(&mut buf) {
            answer.extend_from_slice(&buf[..n]);
        }
    }
    let answered_after = started.elapsed();
    // The rest of the answer, then the end of the connection.
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let closed = s.read_to_end(&mut answer).is_ok();
    let answer = String::from_utf8_lossy(&answer).to_string();
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "after {answered_after:?}: {answer:?}"
    );
    assert!(answer.contains("request_timeout"), "{answer}");
    assert!(
        answered_after >= Duration::from_millis(1800),
        "answered after {answered_after:?}, before the 2 s timeout"
    );
    assert!(
        answered_after < Duration::from_secs(4),
        "answered after {answered_after:?}; timeout 2 s"
    );
    assert!(closed, "the connection stays open after the 408");
}

#[test]
fn a_slow_but_whole_head_and_an_idle_kept_alive_connection_are_served() {
    let gw = Gateway::start(GatewayOptions {
        extra_gateway: "header_timeout_s = 2\n".into(),
        ..Default::default()
    });
    let mut s = TcpStream::connect(gw.listen).unwrap();
    for part in [
        &b"GET /catalog/products.json HTTP/1.1\r\n"[..],
        b"Host: shop\r\n",
        b"\r\n",
    ] {
        s.write_all(part).unwrap();
        std::thread::sleep(Duration::from_millis(400));
    }
    assert_eq!(
        read_response(&mut s),
        200,
        "a head whole within 2 s is served"
    );
    // Idle between requests for longer than the header timeout: the next
    // head's deadline starts with its first byte.
    std::thread::sleep(Duration::from_millis(2500));
    s.write_all(b"GET /catalog/products.json HTTP/1.1\r\nHost: shop\r\n\r\n")
        .unwrap();
    assert_eq!(
        read_response(&mut s),
        200,
        "the kept-alive connection still serves"
    );
    assert_eq!(
        gw.metric("sluice_connections_head_timeouts_total"),
        Some(0.0)
    );
}

#[test]
fn one_client_address_holds_at_most_max_connections_per_client() {
    let gw = Gateway::start(GatewayOptions {
        extra_gateway: "max_connections_per_client = 2\n".into(),
        ..Default::default()
    });
    let first = TcpStream::connect(gw.listen).unwrap();
    let _second = TcpStream::connect(gw.listen).unwrap();
    assert!(
        eventually(Duration::from_secs(5), || gw
            .metric("sluice_connections_open")
            == Some(2.0))
        .is_some(),
        "two idle connections are open"
    );
    let request = "GET /catalog/products.json HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n";
    assert_eq!(
        raw_status(&raw_request(gw.listen, request)),
        0,
        "a third connection from the same address is closed unanswered"
    );
    assert!(
        gw.metric("sluice_connections_per_client_refused_total")
            .unwrap()
            >= 1.0
    );
    drop(first);
    assert!(
        eventually(Duration::from_secs(5), || raw_status(&raw_request(
            gw.listen, request
        )) == 200)
        .is_some(),
        "a connection given back makes room for the client"
    );
}

#[test]
fn a_trusted_proxy_is_not_held_to_the_per_client_limit() {
    let gw = Gateway::start(GatewayOptions {
        extra_gateway: "max_connections_per_client = 1\ntrusted_proxies = [\"127.0.0.1/32\"]\n"
            .into(),
        ..Default::default()
    });
    let _held: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(gw.listen).unwrap())
        .collect();
    assert!(
        eventually(Duration::from_secs(5), || gw
            .metric("sluice_connections_open")
            == Some(3.0))
        .is_some(),
        "three idle connections from the load balancer are open"
    );
    let request = "GET /catalog/products.json HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n";
    assert_eq!(raw_status(&raw_request(gw.listen, request)), 200);
}

#[test]
fn connections_still_in_their_tls_handshake_count_against_the_cap() {
    // Before, a TLS connection took its slot only after its handshake, and
    // pingora waits up to 60 s for one: silent TCP connections to a TLS
    // listener were never counted.
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).unwrap();
    let gw = Gateway::start(GatewayOptions {
        extra_gateway: format!(
            "tls_cert = {cert_path:?}\ntls_key = {key_path:?}\nmax_connections = 5\n"
        ),
        ..Default::default()
    });
    let mut silent: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(gw.listen).unwrap())
        .collect();
    let mut closed = vec![false; silent.len()];
    let counted = eventually(Duration::from_secs(5), || {
        for (s, c) in silent.iter_mut().zip(closed.iter_mut()) {
            *c = *c || closed_by_peer(s);
        }
        gw.metric("sluice_connections_open") == Some(5.0)
            && closed.iter().filter(|&&c| c).count() >= 15
    });
    assert!(
        counted.is_some(),
        "open {:?}, closed {} of 20 silent TLS connections",
        gw.metric("sluice_connections_open"),
        closed.iter().filter(|&&c| c).count()
    );
    drop(silent);
    assert!(
        eventually(Duration::from_secs(5), || gw
            .metric("sluice_connections_open")
            == Some(0.0))
        .is_some(),
        "slots are given back when the sockets close mid-handshake"
    );
    // A real TLS client is served afterwards.
    let root = reqwest::Certificate::from_pem(cert.cert.pem().as_bytes()).unwrap();
    let url = format!(
        "https://localhost:{}/catalog/products.json",
        gw.listen.port()
    );
    let status = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let client = reqwest::Client::builder()
            .add_root_certificate(root)
            .no_proxy()
            .build()
            .unwrap();
        client.get(url).send().await.unwrap().status()
    });
    assert_eq!(status, 200);
}
