//! Proxying through the real gateway to a real origin: forwarding headers,
//! hop-by-hop removal, body limits, and what a down or slow origin gets.

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
