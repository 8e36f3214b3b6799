//! The shopper's way back and what the origin can rely on, through the
//! real binary: the `303` to the queue carries the path asked for
//! (`?next=`), the page renders only a checked `next`; a request on a
//! protected path reaches the origin with `Sluice-Room` and
//! `Sluice-Pass-Subject`, which no client can send; and
//! `/.well-known/sluice/jwks.json` publishes the EdDSA keys a pass
//! verifies with; the same on every gateway of a fleet.

mod common;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::*;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use reqwest::StatusCode;
use serde_json::Value;

/// A room `drop` protecting the orders and the origin's `/echo/vip/...`.
const ROOM: &str = "[[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\", \"/orders/*\", \"/echo/vip/**\"]\nrelease_per_second = 10\nmax_active = 10\nqueue_capacity = 100\n";

fn gateway(origin: Option<String>, keys: &str) -> Gateway {
    Gateway::start(GatewayOptions {
        origin,
        rest: format!("{keys}\n{ROOM}"),
        ..Default::default()
    })
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The `data-next` the queue page at `path_and_query` was rendered with.
async fn rendered_next(gw: &Gateway, path_and_query: &str) -> String {
    let r = client()
        .get(gw.url(path_and_query))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{path_and_query}");
    let page = r.text().await.unwrap();
    let start = page.find("data-next=\"").expect("data-next") + "data-next=\"".len();
    let len = page[start..].find('"').unwrap();
    page[start..start + len].to_owned()
}

#[tokio::test]
async fn a_browser_is_sent_to_the_queue_with_the_path_it_asked_for_and_back() {
    let gw = gateway(None, "");
    let r = no_redirects()
        .get(gw.url("/orders/abc?x=1"))
        .header("accept", "text/html,application/xhtml+xml")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    assert_eq!(location, "/queue/drop?next=%2Forders%2Fabc%3Fx%3D1");
    assert_eq!(rendered_next(&gw, &location).await, "/orders/abc?x=1");

    // Asked in another spelling: the way back is the canonical one.
    let r = no_redirects()
        .get(gw.url("/%6Frders/abc"))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["location"], "/queue/drop?next=%2Forders%2Fabc");

    // Too long to carry: the shopper still gets to the queue, without it.
    let long = format!("/orders/{}", "a".repeat(2100));
    let r = no_redirects()
        .get(gw.url(&long))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/queue/drop");
}

#[tokio::test]
async fn a_next_off_the_site_or_spelled_oddly_is_dropped() {
    let gw = gateway(None, "");
    let too_long = format!("%2F{}", "a".repeat(2048));
    for next in [
        "%2F%2Fevil.example%2Fx",
        "//evil.example/x",
        "%2F%5Cevil",
        "/%5Cevil",
        "https%3A%2F%2Fevil%2F",
        "javascript%3Aalert(1)",
        too_long.as_str(),
        // Not canonical: a dot segment, a needless escape, an empty segment.
        "%2Forders%2F..%2Fadmin",
        "%2F%2563art",
        "%2Fa%2F%2Fb",
        // Markup in the query: not a query a browser sends.
        "%2Fx%3F%22%3E%3Cscript%3Ealert(1)%3C%2Fscript%3E",
    ] {
        assert_eq!(
            rendered_next(&gw, &format!("/queue/drop?next={next}")).await,
            "/",
            "{next}"
        );
    }
    // Just at the limit, and a plain path written unencoded: kept.
    let longest = format!("/{}", "a".repeat(2047));
    assert_eq!(
        rendered_next(&gw, &format!("/queue/drop?next={longest}")).await,
        longest
    );
    assert_eq!(
        rendered_next(&gw, "/queue/drop?next=/index.html").await,
        "/index.html"
    );
    assert_eq!(rendered_next(&gw, "/queue/drop").await, "/");
}

/// The claims of a token, read without checking it.
fn claims_of(token: &str) -> Value {
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

/// Headers a client may try to pass off as the gateway's, in the case and
/// spelling (`_` for `-`) an origin may read as the same.
const FORGED: &str = "Sluice-Room: vip\r\nsluice_room: vip\r\nSLUICE-PASS-SUBJECT: ffffffffffffffffffffffffffffffff\r\nSluice-Pass-Account: acct\r\nsluice_pass_account: acct\r\n";

/// A raw GET of `path` with `extra` header lines; the origin's echo of
/// the headers it received.
fn echoed(gw: &Gateway, path: &str, extra: &str) -> Value {
    let resp = raw_request(
        gw.listen,
        &format!("GET {path} HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n{extra}\r\n"),
    );
    assert_eq!(raw_status(&resp), 200, "{resp}");
    serde_json::from_str(resp.split_once("\r\n\r\n").unwrap().1).unwrap()
}

/// The header names the echo shows that a client tried to forge.
fn sluice_headers(seen: &Value) -> Vec<(String, String)> {
    seen.as_object()
        .unwrap()
        .iter()
        .filter(|(name, _)| name.starts_with("sluice"))
        .map(|(name, value)| (name.clone(), value.as_str().unwrap().to_owned()))
        .collect()
}

#[tokio::test]
async fn the_origin_is_told_the_room_and_subject_of_the_pass_and_nobody_else_can_say_it() {
    let origin = Origin::start();
    let gw = gateway(Some(origin.url()), "");
    let pass = admitted_pass(&gw.url(""), &client(), "drop").await;
    let sub = claims_of(&pass)["sub"].as_str().unwrap().to_owned();
    let bearer = format!("Authorization: Bearer {pass}\r\n");

    // A protected path with its pass: the gateway's word only.
    for extra in [bearer.clone(), format!("{bearer}{FORGED}")] {
        let seen = echoed(&gw, "/echo/vip/x?y=1", &extra);
        assert_eq!(
            sluice_headers(&seen),
            [
                ("sluice-pass-subject".to_owned(), sub.clone()),
                ("sluice-room".to_owned(), "drop".to_owned()),
            ],
            "{extra}"
        );
    }
    // The pass cookie opens it the same way.
    let seen = echoed(
        &gw,
        "/echo/vip/x",
        &format!("Cookie: sluice_pass={pass}\r\n{FORGED}"),
    );
    assert_eq!(seen["sluice-room"], "drop");
    assert_eq!(seen["sluice-pass-subject"], sub.as_str());

    // Elsewhere nothing of the kind reaches the origin: not what a client
    // sent, and not the pass's subject either (set on protected paths only).
    for extra in [FORGED.to_owned(), format!("{bearer}{FORGED}")] {
        let seen = echoed(&gw, "/echo/public", &extra);
        assert_eq!(sluice_headers(&seen), [], "{extra}");
        assert_eq!(seen["x-forwarded-for"], "127.0.0.1", "still proxied");
    }
    // Without a pass the protected path is refused, never proxied.
    let hits = origin.hits();
    let resp = raw_request(
        gw.listen,
        &format!("GET /echo/vip/x HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n{FORGED}\r\n"),
    );
    assert_eq!(raw_status(&resp), 401, "{resp}");
    assert_eq!(origin.hits(), hits);
}

/// `[[keys]]` entries: an EdDSA key `kid` from a fresh private key.
fn eddsa_key(kid: &str) -> String {
    let der = sluice_admission::tokens::generate_ed25519_pkcs8_der().unwrap();
    format!(
        "[[keys]]\nkid = \"{kid}\"\nalg = \"EdDSA\"\nsecret = \"{}\"\n",
        URL_SAFE_NO_PAD.encode(der)
    )
}

const HS256_KEY: &str = "[[keys]]\nkid = \"hs1\"\nalg = \"HS256\"\nsecret = \"crk73kV4fY9LZUm7L5elAyVdQw1NWD9gCIi6VQoY8t4\"\n";

async fn jwks(gw: &Gateway) -> Value {
    let r = client()
        .get(gw.url("/.well-known/sluice/jwks.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["cache-control"], "public, max-age=300");
    assert_eq!(r.headers()["content-type"], "application/jwk-set+json");
    r.json().await.unwrap()
}

#[tokio::test]
async fn an_origin_verifies_a_pass_with_the_published_key() {
    // The EdDSA key signs; the HS256 one (verify only) has nothing public.
    let gw = gateway(None, &format!("{}{HS256_KEY}", eddsa_key("ed1")));
    let doc = jwks(&gw).await;
    let keys = doc["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1, "{doc}");
    let jwk = keys[0].as_object().unwrap();
    let mut members: Vec<&str> = jwk.keys().map(|k| k.as_str()).collect();
    members.sort_unstable();
    assert_eq!(members, ["alg", "crv", "kid", "kty", "use", "x"]);
    assert_eq!(
        (
            &jwk["kty"],
            &jwk["crv"],
            &jwk["kid"],
            &jwk["use"],
            &jwk["alg"]
        ),
        (
            &"OKP".into(),
            &"Ed25519".into(),
            &"ed1".into(),
            &"sig".into(),
            &"EdDSA".into()
        )
    );
    let x = URL_SAFE_NO_PAD.decode(jwk["x"].as_str().unwrap()).unwrap();
    assert_eq!(x.len(), 32);

    // What the docs tell an origin to do: the key by `kid`, then `iss`,
    // `aud` and `typ`.
    let pass = admitted_pass(&gw.url(""), &client(), "drop").await;
    let header = jsonwebtoken::decode_header(&pass).unwrap();
    let set: JwkSet = serde_json::from_value(doc).unwrap();
    let key = DecodingKey::from_jwk(set.find(header.kid.as_deref().unwrap()).unwrap()).unwrap();
    let mut validation = Validation::new(Algorithm::EdDSA);
    validation.set_issuer(&["sluice"]);
    validation.set_audience(&["drop"]);
    let claims = jsonwebtoken::decode::<Value>(&pass, &key, &validation)
        .unwrap()
        .claims;
    assert_eq!(claims["typ"], "pass");
    // A pass changed by a byte does not verify with it.
    let mut forged = claims_of(&pass);
    forged["sub"] = "f".repeat(32).into();
    let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
    let parts: Vec<&str> = pass.split('.').collect();
    let tampered = format!("{}.{body}.{}", parts[0], parts[2]);
    assert!(jsonwebtoken::decode::<Value>(&tampered, &key, &validation).is_err());
}

#[tokio::test]
async fn hs256_keys_publish_an_empty_set() {
    let gw = gateway(None, HS256_KEY);
    assert_eq!(jwks(&gw).await, serde_json::json!({"keys": []}));
    // The key made in data_dir when no [[keys]] are configured is HS256 too.
    let gw = gateway(None, "");
    assert_eq!(jwks(&gw).await, serde_json::json!({"keys": []}));
    // Read only.
    let r = client()
        .post(gw.url("/.well-known/sluice/jwks.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn on_a_fleet_every_gateway_tells_the_origin_the_same_and_publishes_the_same_keys() {
    let redis = common::redis::Redis::start();
    let origin = Origin::start();
    // Every gateway of a fleet lists the same keys.
    let keys = format!(
        "[cluster]\nredis_url = \"{}\"\n\n{}",
        redis.url(),
        eddsa_key("fleet1")
    );
    // The test's one address may join as often as it needs (as in
    // fleet_line.rs): a fleet room's per-client limit is the fleet's.
    let fleet: Vec<Gateway> = (0..2)
        .map(|_| {
            Gateway::start(GatewayOptions {
                origin: Some(origin.url()),
                rest: format!("{keys}\n{ROOM}joins_per_minute_per_client = 100000\n"),
                ..Default::default()
            })
        })
        .collect();
    let pass = admitted_pass(&fleet[0].url(""), &client(), "drop").await;
    let sub = claims_of(&pass)["sub"].as_str().unwrap().to_owned();
    let published = jwks(&fleet[0]).await;
    for gw in &fleet {
        let seen = echoed(
            gw,
            "/echo/vip/x",
            &format!("Authorization: Bearer {pass}\r\n{FORGED}"),
        );
        assert_eq!(
            sluice_headers(&seen),
            [
                ("sluice-pass-subject".to_owned(), sub.clone()),
                ("sluice-room".to_owned(), "drop".to_owned()),
            ]
        );
        assert_eq!(jwks(gw).await, published);
    }
}
