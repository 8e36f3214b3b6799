//! The catalog served from memory through the real gateway: caching
//! headers, validators, compression, HEAD, and traversal in every spelling.

mod common;

use std::io::Read;

use common::*;

fn gateway() -> Gateway {
    Gateway::start(GatewayOptions {
        extra_gateway: "[[gateway.cache_control]]\npattern = \"/catalog/**\"\nvalue = \"public, max-age=300\"\n".into(),
        ..Default::default()
    })
}

#[tokio::test]
async fn catalog_files_carry_cache_headers_and_answer_304() {
    let gw = gateway();
    let c = client();
    let r = c
        .get(gw.url("/catalog/products.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert!(h["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    assert_eq!(h["cache-control"], "public, max-age=300");
    let etag = h["etag"].to_str().unwrap().to_string();
    assert!(
        etag.starts_with('"') && !etag.starts_with("W/"),
        "strong etag: {etag}"
    );
    let last_modified = h["last-modified"].to_str().unwrap().to_string();
    let body = r.bytes().await.unwrap();
    assert!(body.starts_with(br#"{"products""#));

    let r = c
        .get(gw.url("/catalog/products.json"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);
    assert_eq!(r.headers()["etag"], etag.as_str());
    assert!(r.bytes().await.unwrap().is_empty());

    let r = c
        .get(gw.url("/catalog/products.json"))
        .header("if-modified-since", &last_modified)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);
    let r = c
        .get(gw.url("/catalog/products.json"))
        .header("if-none-match", "\"other\"")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let r = c.get(gw.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert_eq!(
        r.headers()["cache-control"],
        "public, max-age=60",
        "default rule"
    );
}

#[tokio::test]
async fn head_has_the_headers_and_no_body() {
    let gw = gateway();
    let resp = raw_request(
        gw.listen,
        "HEAD /catalog/products.json HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(raw_status(&resp), 200, "{resp}");
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    assert!(head.to_ascii_lowercase().contains("etag:"));
    assert!(body.is_empty(), "HEAD has no body: {body:?}");
}

#[tokio::test]
async fn compressed_once_served_by_accept_encoding() {
    let gw = gateway();
    let c = client();
    let plain = c
        .get(gw.url("/catalog/products.json"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();

    let r = c
        .get(gw.url("/catalog/products.json"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-encoding"], "gzip");
    assert!(r.headers()["vary"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase()
        .contains("accept-encoding"));
    let gz = r.bytes().await.unwrap();
    assert!(gz.len() < plain.len());
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut out)
        .unwrap();
    assert_eq!(out, plain);

    let r = c
        .get(gw.url("/catalog/products.json"))
        .header("accept-encoding", "gzip, br")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-encoding"], "br");
    let br = r.bytes().await.unwrap();
    let mut out = Vec::new();
    brotli::Decompressor::new(&br[..], 4096)
        .read_to_end(&mut out)
        .unwrap();
    assert_eq!(out, plain);

    let r = c
        .get(gw.url("/catalog/products.json"))
        .header("accept-encoding", "br;q=0, gzip;q=0")
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("content-encoding").is_none());
}

#[tokio::test]
async fn traversal_never_reaches_the_file_system_or_the_origin() {
    let origin = Origin::start();
    let gw = Gateway::start(GatewayOptions {
        origin: Some(origin.url()),
        ..Default::default()
    });
    // A secret next to the static folder.
    std::fs::write(gw.dir.path().join("secret.txt"), "top secret").unwrap();
    let spellings = [
        "/../secret.txt",
        "/catalog/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E/secret.txt",
        "/.%2e/secret.txt",
        "/catalog/..%2fsecret.txt",
        "/catalog%2f..%2f..%2fsecret.txt",
        "/..%5csecret.txt",
        "/..\\secret.txt",
        "/%252e%252e/secret.txt",
        "/catalog/%00../secret.txt",
        "//etc/passwd",
        "/C:/Windows/win.ini",
        "/./catalog/products.json",
    ];
    for path in spellings {
        let resp = raw_request(
            gw.listen,
            &format!("GET {path} HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n"),
        );
        let status = raw_status(&resp);
        assert!(
            status == 400 || status == 404,
            "{path} answered {status}: {resp}"
        );
        assert!(!resp.contains("top secret"), "{path} leaked the file");
        if status == 400 {
            assert!(resp.contains("\"error\":\"bad_request\""), "{path}: {resp}");
        }
    }
    assert_eq!(
        origin.hits(),
        0,
        "no traversal attempt was proxied to the origin"
    );
}

#[tokio::test]
async fn catalog_reloads_with_the_config() {
    let gw = Gateway::start(GatewayOptions::default());
    let c = client();
    assert_eq!(
        c.get(gw.url("/new.html")).send().await.unwrap().status(),
        404
    );
    std::fs::write(gw.static_dir().join("new.html"), "<p>new</p>").unwrap();
    gw.signal(nix::sys::signal::Signal::SIGHUP);
    let url = gw.url("/new.html");
    let took = eventually_async(std::time::Duration::from_secs(3), || {
        raw_status(&raw_request(
            gw.listen,
            "GET /new.html HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n",
        )) == 200
    })
    .await;
    assert!(took.is_some(), "catalog not reloaded on SIGHUP: {url}");
}
