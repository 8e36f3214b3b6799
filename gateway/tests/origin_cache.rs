//! Origin responses under configured paths are cached, honouring the
//! origin's Cache-Control and never storing what is private.

mod common;

use common::*;

fn gateway(origin: &Origin) -> Gateway {
    Gateway::start(GatewayOptions {
        origin: Some(origin.url()),
        extra_gateway: "[gateway.origin_cache]\npaths = [\"/api/catalog/**\"]\n".into(),
        ..Default::default()
    })
}

async fn get(
    gw: &Gateway,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String, reqwest::header::HeaderMap) {
    let mut req = client().get(gw.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let h = r.headers().clone();
    (status, r.text().await.unwrap(), h)
}

#[tokio::test]
async fn public_responses_are_served_from_cache() {
    let origin = Origin::start();
    let gw = gateway(&origin);
    let (s1, b1, h1) = get(&gw, "/api/catalog/public", &[]).await;
    let (s2, b2, h2) = get(&gw, "/api/catalog/public", &[]).await;
    assert_eq!((s1, s2), (200, 200));
    assert_eq!(b1, b2, "second answer is the stored one");
    assert_eq!(origin.hits(), 1, "origin asked once");
    assert_eq!(h1["x-cache"], "MISS");
    assert_eq!(h2["x-cache"], "HIT");
    assert!(h2.contains_key("age"));
    assert_ne!(
        h1["x-request-id"], h2["x-request-id"],
        "hits get their own request id"
    );

    let etag = h2["etag"].to_str().unwrap().to_string();
    let (s3, _, _) = get(&gw, "/api/catalog/public", &[("if-none-match", &etag)]).await;
    assert_eq!(s3, 304);
    assert_eq!(origin.hits(), 1);
    assert!(
        gw.metric("sluice_origin_cache_total{result=\"hit\"}")
            .unwrap()
            >= 2.0
    );
}

#[tokio::test]
async fn private_no_store_and_cookie_responses_are_never_stored() {
    let origin = Origin::start();
    let gw = gateway(&origin);
    for name in ["private", "nostore", "cookie", "plain"] {
        let before = origin.hits();
        get(&gw, &format!("/api/catalog/{name}"), &[]).await;
        let (_, body, _) = get(&gw, &format!("/api/catalog/{name}"), &[]).await;
        assert_eq!(origin.hits(), before + 2, "{name} was served from cache");
        assert!(
            body.ends_with(&format!("number {}", before + 2)),
            "{name}: {body}"
        );
    }
}

#[tokio::test]
async fn requests_with_credentials_do_not_fill_the_cache() {
    let origin = Origin::start();
    let gw = gateway(&origin);
    get(&gw, "/api/catalog/public", &[("cookie", "session=alice")]).await;
    get(
        &gw,
        "/api/catalog/public",
        &[("authorization", "Bearer alice")],
    )
    .await;
    assert_eq!(origin.hits(), 2);
    get(&gw, "/api/catalog/public", &[]).await;
    get(&gw, "/api/catalog/public", &[]).await;
    assert_eq!(
        origin.hits(),
        3,
        "the anonymous request filled it, the next one hit"
    );
    // An Authorization request is never answered from the shared cache.
    get(
        &gw,
        "/api/catalog/public",
        &[("authorization", "Bearer bob")],
    )
    .await;
    assert_eq!(origin.hits(), 4);
}

#[tokio::test]
async fn paths_outside_the_list_and_expired_entries_go_to_the_origin() {
    let origin = Origin::start();
    let gw = gateway(&origin);
    get(&gw, "/echo", &[]).await;
    get(&gw, "/echo", &[]).await;
    assert_eq!(origin.hits(), 2);
    get(&gw, "/api/catalog/short", &[]).await;
    get(&gw, "/api/catalog/short", &[]).await;
    assert_eq!(origin.hits(), 3);
    // Served from the cache until max-age=1 runs out, then fetched again,
    // once.
    let filled = std::time::Instant::now();
    let (gw, origin) = (&gw, &origin);
    let refetched = eventually_await(std::time::Duration::from_secs(5), || async move {
        get(gw, "/api/catalog/short", &[]).await;
        origin.hits() > 3
    })
    .await;
    assert!(refetched.is_some(), "max-age=1 never expired");
    assert_eq!(origin.hits(), 4, "one fetch after expiry");
    assert!(
        filled.elapsed() >= std::time::Duration::from_millis(900),
        "expired after {:?}, before its max-age",
        filled.elapsed()
    );
}
