//! Proxying through the real gateway to a real origin: forwarding headers,
//! hop-by-hop removal, body limits, what a down or slow origin gets, and
//! an origin named by a host name (resolved off the proxy threads).

mod common;

use common::*;

fn gateway_with_origin(origin: &Origin, extra: &str) -> Gateway {
    Gateway::start(GatewayOptions {
        origin: Some(origin.url()),
        extra_gateway: extra.to_string(),
        ..Default::default()
    })
}

#[tokio::test]
async fn forwards_with_request_id_and_forwarding_headers() {
    let origin = Origin::start();
    let gw = gateway_with_origin(&origin, "");
    let c = client();

    let r = c
        .get(gw.url("/echo"))
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let id = r.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(id.len(), 36, "a request id is made when missing");
    let seen: serde_json::Value = r.json().await.unwrap();
    assert_eq!(seen["x-request-id"], id, "the origin sees the same id");
    assert_eq!(
        seen["x-forwarded-for"], "127.0.0.1",
        "an untrusted client's chain is replaced (tests/client_identity.rs)"
    );
    assert_eq!(seen["x-forwarded-proto"], "http");

    let r = c
        .get(gw.url("/echo"))
        .header("x-request-id", "trace-42")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-request-id"], "trace-42");
    let seen: serde_json::Value = r.json().await.unwrap();
    assert_eq!(seen["x-request-id"], "trace-42");
    assert_eq!(seen["x-forwarded-for"], "127.0.0.1");
}

#[tokio::test]
async fn hop_by_hop_headers_do_not_cross_the_proxy() {
    let origin = Origin::start();
    let gw = gateway_with_origin(&origin, "");
    // Raw request: a client library would not let us send these.
    let resp = raw_request(
        gw.listen,
        "GET /echo HTTP/1.1\r\nHost: shop\r\nConnection: close, x-private-hop\r\nx-private-hop: 1\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\nTE: trailers\r\nUpgrade: websocket\r\nx-end-to-end: 1\r\n\r\n",
    );
    assert_eq!(raw_status(&resp), 200, "{resp}");
    let body = resp.split_once("\r\n\r\n").unwrap().1;
    for dropped in ["x-private-hop", "proxy-authorization", "upgrade", "\"te\""] {
        assert!(
            !body.contains(dropped),
            "{dropped} reached the origin: {body}"
        );
    }
    assert!(
        body.contains("x-end-to-end"),
        "end-to-end headers pass: {body}"
    );

    let r = client().get(gw.url("/hop")).send().await.unwrap();
    assert_eq!(r.headers()["x-end-to-end"], "kept");
    assert!(
        r.headers().get("x-hop-header").is_none(),
        "header named by Connection is dropped"
    );
    assert!(r.headers().get("keep-alive").is_none());
}

#[tokio::test]
async fn bodies_over_the_limit_get_413_in_the_contract_shape() {
    let origin = Origin::start();
    let gw = gateway_with_origin(&origin, "max_body_bytes = 1000");
    let c = client();
    let ok = c
        .post(gw.url("/upload"))
        .body(vec![b'a'; 1000])
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.text().await.unwrap(), "got 1000 bytes");

    let big = c
        .post(gw.url("/upload"))
        .body(vec![b'a'; 1001])
        .send()
        .await
        .unwrap();
    assert_eq!(big.status(), 413);
    let v: serde_json::Value = big.json().await.unwrap();
    assert_eq!(v["error"], "payload_too_large");

    // Chunked, no declared length: caught while streaming.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        vec![Ok(vec![b'b'; 600]), Ok(vec![b'b'; 600])];
    let stream = futures_util::stream::iter(chunks);
    let r = c
        .post(gw.url("/upload"))
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert!(gw.metric("sluice_request_body_too_large_total").unwrap() >= 1.0);
}

#[tokio::test]
async fn origin_down_is_502_and_slow_is_504() {
    let dead = dead_port();
    let gw = Gateway::start(GatewayOptions {
        origin: Some(format!("http://127.0.0.1:{}", dead.port)),
        ..Default::default()
    });
    let r = client().get(gw.url("/anything")).send().await.unwrap();
    assert_eq!(r.status(), 502);
    assert!(r.headers().contains_key("x-request-id"));
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"], "bad_gateway");
    assert!(v["message"].as_str().unwrap().len() > 5);

    let origin = Origin::start();
    let gw = gateway_with_origin(&origin, "origin_read_timeout_ms = 300");
    let r = client().get(gw.url("/slow")).send().await.unwrap();
    assert_eq!(r.status(), 504);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"], "gateway_timeout");
    assert!(
        gw.metric("sluice_origin_errors_total{result=\"timeout\"}")
            .unwrap()
            >= 1.0
    );
}

#[tokio::test]
async fn no_origin_means_404_in_json() {
    let gw = Gateway::start(GatewayOptions::default());
    let r = client()
        .get(gw.url("/not/in/catalog"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"], "not_found");
}

#[tokio::test]
async fn keep_alive_connections_to_the_origin_are_reused() {
    let origin = Origin::start();
    let gw = gateway_with_origin(&origin, "");
    let c = client();
    for _ in 0..10 {
        let r = c.get(gw.url("/echo")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let _ = r.text().await.unwrap();
    }
    let used = origin.peer_ports();
    assert!(
        !used.is_empty() && used.len() <= 2,
        "ten sequential requests used {} origin connections",
        used.len()
    );
}

/// An origin answering `200 hello-by-name` on `localhost:port`, whichever
/// loopback address `localhost` resolves to first here (127.0.0.1, or ::1
/// on hosts that list it).
fn origin_on_localhost() -> u16 {
    use std::io::{Read, Write};
    let v4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = v4.local_addr().unwrap().port();
    let mut listeners = vec![v4];
    if let Ok(v6) = std::net::TcpListener::bind(("::1", port)) {
        listeners.push(v6);
    }
    for listener in listeners {
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let mut head = Vec::new();
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = conn.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\nhello-by-name",
                    );
                });
            }
        });
    }
    port
}

#[tokio::test]
async fn an_origin_named_by_host_name_is_resolved_and_served() {
    let port = origin_on_localhost();
    let gw = Gateway::start(GatewayOptions {
        origin: Some(format!("http://localhost:{port}")),
        ..Default::default()
    });
    for _ in 0..3 {
        let r = client().get(gw.url("/by-name")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), "hello-by-name");
    }
    assert_eq!(gw.metric("sluice_origin_dns_failures_total"), Some(0.0));
}

#[tokio::test]
async fn an_origin_whose_name_does_not_resolve_is_502_and_the_gateway_goes_on() {
    // `.invalid` never resolves (RFC 6761). Before, the per-request lookup
    // ran on the proxy thread and pingora's `HttpPeer::new` panicked on
    // its failure, dropping the connection unanswered.
    let gw = Gateway::start(GatewayOptions {
        origin: Some("http://sluice-no-such-origin.invalid:8080".into()),
        ..Default::default()
    });
    for _ in 0..3 {
        let r = client().get(gw.url("/anything")).send().await.unwrap();
        assert_eq!(r.status(), 502);
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["error"], "bad_gateway");
    }
    assert!(gw.metric("sluice_origin_dns_failures_total").unwrap() >= 1.0);
    let r = client()
        .get(gw.url("/catalog/products.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        200,
        "the catalog is served while the origin is unknown"
    );
    assert!(!gw.log().contains("panicked"), "{}", gw.log());
}
