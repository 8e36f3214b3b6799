//! The public connection cap through the real gateway: idle connections
//! beyond `max_connections` are closed at once, and the admin listener,
//! the store and later shoppers keep being served.

mod common;

use std::io::{ErrorKind, Read};
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
