//! TLS at the edge (HTTP/2 and HTTP/1.1) and graceful drain on SIGTERM.

mod common;

use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;

#[tokio::test]
async fn tls_listener_speaks_h2_and_http11() {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cert_path = dir.path().join("cert.pem");
    let key_path = dir.path().join("key.pem");
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).unwrap();
    let origin = Origin::start();
    let gw = Gateway::start(GatewayOptions {
        origin: Some(origin.url()),
        extra_gateway: format!("tls_cert = {cert_path:?}\ntls_key = {key_path:?}\n"),
        ..Default::default()
    });
    let root = reqwest::Certificate::from_pem(cert.cert.pem().as_bytes()).unwrap();
    let url = format!("https://localhost:{}/", gw.listen.port());
    let echo = format!("https://localhost:{}/echo", gw.listen.port());

    let h2 = reqwest::Client::builder()
        .add_root_certificate(root.clone())
        .no_proxy()
        .build()
        .unwrap();
    let r = h2.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.version(), reqwest::Version::HTTP_2, "ALPN picks h2");
    let seen: serde_json::Value = h2.get(&echo).send().await.unwrap().json().await.unwrap();
    assert_eq!(seen["x-forwarded-proto"], "https");

    let h1 = reqwest::Client::builder()
        .add_root_certificate(root)
        .http1_only()
        .no_proxy()
        .build()
        .unwrap();
    let r = h1.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.version(), reqwest::Version::HTTP_11);
}

#[tokio::test]
async fn sigterm_drains_requests_in_flight() {
    let origin = Origin::start();
    let mut gw = Gateway::start(GatewayOptions {
        origin: Some(origin.url()),
        ..Default::default()
    });
    let c = client();
    let slow = tokio::spawn(c.get(gw.url("/slow")).send());
    // The origin has the request (and holds it 1.5 s) before the signal.
    let in_flight = eventually_async(Duration::from_secs(5), || origin.hits() == 1).await;
    assert!(
        in_flight.is_some(),
        "the slow request never reached the origin"
    );
    gw.signal(Signal::SIGTERM);
    let r = slow.await.unwrap().expect("in-flight request completes");
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "slow answer");
    let exited = eventually_async(Duration::from_secs(10), || {
        matches!(gw.child.try_wait(), Ok(Some(_)))
    })
    .await;
    assert!(exited.is_some(), "gateway exits after draining");
    assert!(gw.child.try_wait().unwrap().unwrap().success());
}
