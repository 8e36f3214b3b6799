//! One place per account (`[rooms.enqueue]`), through the real binary, on
//! one embedded gateway and on three gateways sharing a throwaway Redis:
//! a join needs the store's enqueue token (`401 enqueue_token_required`),
//! a bad one is `401 invalid_enqueue_token` whatever is wrong with it, the
//! same account gets the same place (same `seq`, a ticket with the same
//! `sub`) on any gateway, its pass names the account's hash to the origin
//! (`Sluice-Pass-Account`), and a place that expired unused lets the
//! account join again, at the back.

mod common;

use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::redis::Redis;
use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

const KEYS: &str = "[[keys]]\nkid = \"parity\"\nalg = \"HS256\"\nsecret = \"c2x1aWNlLXBhcml0eS10ZXN0LWtleS0zMi1ieXRlcy1vaw==\"\n";
/// The store's HS256 secret (base64url of 32 bytes).
const STORE_SECRET: &str = "c3RvcmUtZW5xdWV1ZS1zZWNyZXQtMzItYnl0ZXMtb2s";
const ACCOUNT_KEY: &str = "fleet-account-hash-key-of-32-characters-at-least";

fn room(ticket_ttl_s: u64) -> String {
    format!(
        "[[rooms]]\nname = \"drop\"\nprotect = [\"/echo/vip/*\"]\nrelease_per_second = 2\nburst = 1\nmax_active = 1\nqueue_capacity = 1000\njoins_per_minute_per_client = 100000\npoll_min_s = 1\npoll_max_s = 2\npass_ttl_s = 600\nticket_ttl_s = {ticket_ttl_s}\n[rooms.enqueue]\nrequired = true\n[[rooms.enqueue.keys]]\nkid = \"store1\"\nalg = \"HS256\"\nsecret = \"{STORE_SECRET}\"\n"
    )
}

struct Setup {
    name: &'static str,
    gateways: Vec<Gateway>,
    _redis: Option<Redis>,
    _origin: Origin,
}

impl Setup {
    fn embedded(rooms: &str) -> Setup {
        let origin = Origin::start();
        let gw = Gateway::start(GatewayOptions {
            origin: Some(origin.url()),
            rest: format!("{KEYS}\n{rooms}"),
            ..GatewayOptions::default()
        });
        Setup {
            name: "embedded",
            gateways: vec![gw],
            _redis: None,
            _origin: origin,
        }
    }

    fn fleet(rooms: &str) -> Setup {
        let origin = Origin::start();
        let redis = Redis::start();
        let gateways = (0..3)
            .map(|_| {
                Gateway::start(GatewayOptions {
                    origin: Some(origin.url()),
                    rest: format!(
                        "[cluster]\nredis_url = \"{}\"\naccount_hash_key_env = \"SLUICE_ACCOUNT_KEY\"\n\n{KEYS}\n{rooms}",
                        redis.url()
                    ),
                    env: vec![
                        ("SLUICE_ALLOW_TEST_KNOBS".into(), "1".into()),
                        ("SLUICE_ACCOUNT_KEY".into(), ACCOUNT_KEY.into()),
                    ],
                    ..GatewayOptions::default()
                })
            })
            .collect();
        Setup {
            name: "fleet",
            gateways,
            _redis: Some(redis),
            _origin: origin,
        }
    }

    fn gw(&self, i: usize) -> &Gateway {
        &self.gateways[i % self.gateways.len()]
    }
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A store's enqueue token with `claims`, signed by `kid` with `secret`.
fn signed(kid: &str, secret: &str, claims: &Value) -> String {
    let key = URL_SAFE_NO_PAD.decode(secret).unwrap();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(
        &header,
        claims,
        &jsonwebtoken::EncodingKey::from_secret(&key),
    )
    .unwrap()
}

/// A good enqueue token for account `sub` of room `drop`.
fn token_for(sub: &str) -> String {
    let now = now_s();
    signed(
        "store1",
        STORE_SECRET,
        &json!({"sub": sub, "aud": "drop", "iat": now, "exp": now + 600}),
    )
}

async fn join_with(
    client: &reqwest::Client,
    gw: &Gateway,
    body: Option<Value>,
    cookie: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = client.post(gw.url("/queue/drop/join"));
    if let Some(body) = body {
        req = req.json(&body);
    }
    if let Some(token) = cookie {
        req = req.header("cookie", format!("sluice_enqueue={token}"));
    }
    let r = req.send().await.unwrap();
    (r.status(), r.json().await.unwrap())
}

/// A join of account `sub`; a fleet room warming up (`503
/// store_unavailable` for about 2 s) is asked again, and so is a join of an
/// account that holds a place and came back sooner than told (an early
/// poll of that place: `429` with `retry_after_s`).
async fn join_as(client: &reqwest::Client, gw: &Gateway, sub: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body = json!({ "enqueue_token": token_for(sub) });
        let (status, answer) = join_with(client, gw, Some(body), None).await;
        if status == StatusCode::ACCEPTED {
            return answer;
        }
        let wait = match answer["error"].as_str() {
            Some("store_unavailable") => Duration::from_millis(100),
            Some("rate_limited") => Duration::from_secs(answer["retry_after_s"].as_u64().unwrap()),
            _ => panic!("{status} {answer}"),
        };
        assert!(Instant::now() < deadline, "{status} {answer}");
        tokio::time::sleep(wait).await;
    }
}

fn claims_of(token: &str) -> Value {
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

async fn status(client: &reqwest::Client, gw: &Gateway, ticket: &str) -> Value {
    let r = client
        .get(gw.url("/queue/drop/status"))
        .bearer_auth(ticket)
        .send()
        .await
        .unwrap();
    r.json().await.unwrap()
}

/// Polls `ticket` over the setup's gateways until its pass comes.
async fn pass_of(client: &reqwest::Client, setup: &Setup, ticket: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut i = 0;
    loop {
        let body = status(client, setup.gw(i), ticket).await;
        i += 1;
        if let Some(pass) = body["pass"].as_str() {
            return pass.to_owned();
        }
        assert!(Instant::now() < deadline, "{}: no pass; {body}", setup.name);
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
}

async fn refusals(setup: &Setup) {
    let client = client();
    // Wait out a fleet's warm-up with a good join first.
    join_as(&client, setup.gw(0), "warm-up").await;
    let gw = setup.gw(1);
    let now = now_s();
    let claims = |extra: Value| {
        let mut c = json!({"sub": "alice", "aud": "drop", "iat": now, "exp": now + 600});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c
    };
    let (code, body) = join_with(&client, gw, None, None).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "{}: {body}", setup.name);
    assert_eq!(body["error"], "enqueue_token_required");
    let bad = [
        ("garbage", "not.a.jwt".to_owned()),
        (
            "expired",
            signed(
                "store1",
                STORE_SECRET,
                &claims(json!({"iat": now - 700, "exp": now - 100})),
            ),
        ),
        (
            "wrong aud",
            signed("store1", STORE_SECRET, &claims(json!({"aud": "other"}))),
        ),
        (
            "a ticket's typ",
            signed("store1", STORE_SECRET, &claims(json!({"typ": "ticket"}))),
        ),
        (
            "unknown kid",
            signed("store2", STORE_SECRET, &claims(json!({}))),
        ),
        (
            "Sluice's own kid",
            signed(
                "parity",
                "c2x1aWNlLXBhcml0eS10ZXN0LWtleS0zMi1ieXRlcy1vaw",
                &claims(json!({})),
            ),
        ),
        (
            "bad signature",
            signed(
                "store1",
                "b3RoZXItc3RvcmUtc2VjcmV0LW9mLTMyLWJ5dGVzLW9r",
                &claims(json!({})),
            ),
        ),
        (
            "unknown lane",
            signed("store1", STORE_SECRET, &claims(json!({"lane": "vip"}))),
        ),
        (
            "a lifetime over a day",
            signed(
                "store1",
                STORE_SECRET,
                &claims(json!({"exp": now + 86_401})),
            ),
        ),
        (
            "no sub",
            signed(
                "store1",
                STORE_SECRET,
                &json!({"aud": "drop", "iat": now, "exp": now + 60}),
            ),
        ),
    ];
    for (what, token) in bad {
        let (code, body) =
            join_with(&client, gw, Some(json!({ "enqueue_token": token })), None).await;
        assert_eq!(
            code,
            StatusCode::UNAUTHORIZED,
            "{}: {what}: {body}",
            setup.name
        );
        assert_eq!(body["error"], "invalid_enqueue_token", "{what}");
        // In the cookie, the same.
        let (code, body) = join_with(&client, gw, None, Some(&token)).await;
        assert_eq!(
            code,
            StatusCode::UNAUTHORIZED,
            "{}: {what}: {body}",
            setup.name
        );
        assert_eq!(body["error"], "invalid_enqueue_token", "{what}");
    }
    // A body that is not a JSON object is a bad request.
    let r = client
        .post(gw.url("/queue/drop/join"))
        .body("enqueue_token=x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // The store's cookie alone joins; so does a token naming the default
    // lane, or carrying `typ = "enqueue"`.
    let (code, body) = join_with(&client, gw, None, Some(&token_for("carol"))).await;
    assert_eq!(code, StatusCode::ACCEPTED, "{}: {body}", setup.name);
    for (sub, extra) in [
        ("dave", json!({"lane": "default"})),
        ("erin", json!({"typ": "enqueue"})),
    ] {
        let mut c = claims(extra);
        c["sub"] = json!(sub);
        let token = signed("store1", STORE_SECRET, &c);
        let (code, body) =
            join_with(&client, gw, Some(json!({ "enqueue_token": token })), None).await;
        assert_eq!(code, StatusCode::ACCEPTED, "{}: {sub}: {body}", setup.name);
    }
    // Counted by result.
    let metrics = gw.metrics_text().await;
    let joins = |result: &str| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("sluice_queue_joins_total")
                    && l.contains(&format!("result=\"{result}\""))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    assert_eq!(joins("enqueue_token_required"), Some(1.0), "{metrics}");
    assert_eq!(joins("invalid_enqueue_token"), Some(20.0), "{metrics}");
    assert!(!metrics.contains("alice"), "no account id in the metrics");
}

#[tokio::test]
async fn a_join_needs_a_good_enqueue_token_embedded() {
    refusals(&Setup::embedded(&room(600))).await;
}

#[tokio::test]
async fn a_join_needs_a_good_enqueue_token_on_a_fleet() {
    refusals(&Setup::fleet(&room(600))).await;
}

/// Same account, every gateway: one place, one ticket `sub`; the pass
/// names the account's hash to the origin, and only on protected paths.
async fn one_place_per_account(setup: &Setup) {
    let client = client();
    let first = join_as(&client, setup.gw(0), "alice").await;
    let ticket = first["ticket"].as_str().unwrap().to_owned();
    let (seq, sub) = {
        let c = claims_of(&ticket);
        (
            c["seq"].as_u64().unwrap(),
            c["sub"].as_str().unwrap().to_owned(),
        )
    };
    let hash = claims_of(&ticket)["acct"].as_str().unwrap().to_owned();
    assert_eq!(hash.len(), 32);
    assert!(!ticket.contains("alice"));
    let bob = join_as(&client, setup.gw(1), "bob").await;
    assert_ne!(claims_of(bob["ticket"].as_str().unwrap())["seq"], seq);
    for i in 0..setup.gateways.len() * 2 {
        let again = join_as(&client, setup.gw(i), "alice").await;
        let c = claims_of(again["ticket"].as_str().unwrap());
        assert_eq!(c["seq"].as_u64(), Some(seq), "{}: {again}", setup.name);
        assert_eq!(c["sub"].as_str(), Some(sub.as_str()), "{}", setup.name);
        assert_eq!(c["acct"].as_str(), Some(hash.as_str()));
    }
    // Let in, then joining again answers the pass of that same place.
    let pass = pass_of(&client, setup, &ticket).await;
    assert_eq!(claims_of(&pass)["sub"].as_str(), Some(sub.as_str()));
    for i in 0..setup.gateways.len() {
        // A fleet gateway answers from the line's numbers as its last tick
        // (every 100 ms) read them: it may say "at the front" once more.
        let deadline = Instant::now() + Duration::from_secs(5);
        let again = loop {
            let again = join_as(&client, setup.gw(i), "alice").await;
            if again["state"] == "admitted" {
                break again;
            }
            assert_eq!(again["position"], 1, "{}: {again}", setup.name);
            assert!(Instant::now() < deadline, "{}: {again}", setup.name);
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let p = claims_of(again["pass"].as_str().unwrap());
        assert_eq!(p["sub"].as_str(), Some(sub.as_str()));
        assert_eq!(p["seq"].as_u64(), Some(seq));
    }
    // The origin hears the account's hash on a protected path, whatever a
    // client says.
    for gw in &setup.gateways {
        let resp = raw_request(
            gw.listen,
            &format!(
                "GET /echo/vip/x HTTP/1.1\r\nHost: shop\r\nConnection: close\r\nAuthorization: Bearer {pass}\r\nSluice-Pass-Account: forged\r\nsluice_pass_account: forged\r\n\r\n"
            ),
        );
        assert_eq!(raw_status(&resp), 200, "{resp}");
        let seen: Value = serde_json::from_str(resp.split_once("\r\n\r\n").unwrap().1).unwrap();
        assert_eq!(seen["sluice-pass-account"], hash.as_str(), "{seen}");
        assert!(seen.get("sluice_pass_account").is_none(), "{seen}");
        let resp = raw_request(
            gw.listen,
            &format!(
                "GET /echo/public HTTP/1.1\r\nHost: shop\r\nConnection: close\r\nAuthorization: Bearer {pass}\r\nSluice-Pass-Account: forged\r\n\r\n"
            ),
        );
        let seen: Value = serde_json::from_str(resp.split_once("\r\n\r\n").unwrap().1).unwrap();
        assert!(seen.get("sluice-pass-account").is_none(), "{seen}");
    }
    // Nothing of the account id in the logs, nor in Redis: only its hash.
    for gw in &setup.gateways {
        assert!(!gw.log().contains("alice"), "{}", setup.name);
    }
    if let Some(redis) = &setup._redis {
        let keys = redis.command(&["KEYS", "*"]).unwrap();
        assert!(keys.contains(&format!("acct:{hash}")), "{keys}");
        let dump = redis
            .command(&["GET", &format!("sluice2:{{drop}}:acct:{hash}")])
            .unwrap();
        assert!(dump.contains(&format!("\n{seq} {sub} ")), "{dump}");
        assert!(!keys.contains("alice") && !dump.contains("alice"));
    }
    // An enqueue token is never a ticket.
    let r = client
        .get(setup.gw(0).url("/queue/drop/status"))
        .bearer_auth(token_for("alice"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "invalid_ticket");
}

#[tokio::test]
async fn one_account_one_place_embedded() {
    one_place_per_account(&Setup::embedded(&room(600))).await;
}

#[tokio::test]
async fn one_account_one_place_on_three_gateways() {
    one_place_per_account(&Setup::fleet(&room(600))).await;
}

/// A place whose ticket expired unused lets the account join again, at
/// the back (behind those who joined meanwhile).
async fn expired_place_joins_again(setup: &Setup) {
    let client = client();
    // The one slot is taken and held.
    let holder = join_as(&client, setup.gw(0), "holder").await;
    pass_of(&client, setup, holder["ticket"].as_str().unwrap()).await;
    let first = join_as(&client, setup.gw(1), "alice").await;
    let first_seq = claims_of(first["ticket"].as_str().unwrap())["seq"]
        .as_u64()
        .unwrap();
    let exp = claims_of(first["ticket"].as_str().unwrap())["exp"]
        .as_u64()
        .unwrap();
    let bob = join_as(&client, setup.gw(2), "bob").await;
    let bob_seq = claims_of(bob["ticket"].as_str().unwrap())["seq"]
        .as_u64()
        .unwrap();
    // Still live: the same place.
    let again = join_as(&client, setup.gw(0), "alice").await;
    assert_eq!(
        claims_of(again["ticket"].as_str().unwrap())["seq"].as_u64(),
        Some(first_seq)
    );
    // Past the ticket's expiry (polling for it, not sleeping blind).
    let deadline = Instant::now() + Duration::from_secs(15);
    let later = loop {
        let answer = join_as(&client, setup.gw(1), "alice").await;
        let seq = claims_of(answer["ticket"].as_str().unwrap())["seq"]
            .as_u64()
            .unwrap();
        if seq != first_seq {
            assert!(now_s() >= exp, "{}: a new place before expiry", setup.name);
            break seq;
        }
        assert!(
            Instant::now() < deadline,
            "{}: never joined again",
            setup.name
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(later > bob_seq, "{}: {later} behind {bob_seq}", setup.name);
}

#[tokio::test]
async fn an_expired_unused_place_lets_the_account_join_again_embedded() {
    expired_place_joins_again(&Setup::embedded(&room(3))).await;
}

#[tokio::test]
async fn an_expired_unused_place_lets_the_account_join_again_on_three_gateways() {
    expired_place_joins_again(&Setup::fleet(&room(3))).await;
}

/// The embedded room keeps each account's place in its journal: after a
/// `kill -9` and a restart the account still has the one place.
#[tokio::test]
async fn an_account_keeps_its_place_across_a_crash_embedded() {
    let mut setup = Setup::embedded(&room(600));
    let client = client();
    let first = join_as(&client, setup.gw(0), "holder").await;
    pass_of(&client, &setup, first["ticket"].as_str().unwrap()).await;
    let alice = join_as(&client, setup.gw(0), "alice").await;
    let seq = claims_of(alice["ticket"].as_str().unwrap())["seq"].as_u64();
    setup.gateways[0].kill9_and_restart();
    // A new client: the old one's pooled connection died with the process.
    let client = common::client();
    let again = join_as(&client, setup.gw(0), "alice").await;
    let c = claims_of(again["ticket"].as_str().unwrap());
    assert_eq!(c["seq"].as_u64(), seq, "{again}");
    let fresh = join_as(&client, setup.gw(0), "bob").await;
    assert!(claims_of(fresh["ticket"].as_str().unwrap())["seq"].as_u64() > seq);
    // The journal holds the account's hash, never its id.
    let rooms = setup.gateways[0].dir.path().join("var");
    let mut found = false;
    for entry in walk(&rooms) {
        found = true;
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !bytes.windows(5).any(|w| w == b"alice"),
            "{}",
            entry.display()
        );
    }
    assert!(found, "no journal under {}", rooms.display());
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// The store rotates its enqueue key (a reload with a new `kid` and
/// secret, the old one gone): an account keeps its place, since the
/// account hash's key is not an enqueue key; the old key's tokens are
/// refused from then on.
async fn a_key_rotation_keeps_the_places(setup: &Setup) {
    let client = client();
    let holder = join_as(&client, setup.gw(0), "holder").await;
    pass_of(&client, setup, holder["ticket"].as_str().unwrap()).await;
    let alice = join_as(&client, setup.gw(1), "alice").await;
    let seq = claims_of(alice["ticket"].as_str().unwrap())["seq"].as_u64();
    const NEW_SECRET: &str = "bmV3LXN0b3JlLWVucXVldWUtc2VjcmV0LTMyLWJ5dGVz";
    for gw in &setup.gateways {
        gw.edit_config(|t| {
            t.replace("kid = \"store1\"", "kid = \"store2\"")
                .replace(STORE_SECRET, NEW_SECRET)
        });
    }
    let now = now_s();
    let new_token = |sub: &str| {
        signed(
            "store2",
            NEW_SECRET,
            &json!({"sub": sub, "aud": "drop", "iat": now, "exp": now + 600}),
        )
    };
    for gw in &setup.gateways {
        // The reload is in force once the new key's token is taken.
        let took = eventually_await(Duration::from_secs(15), || async {
            let body = json!({ "enqueue_token": new_token("probe") });
            let (code, _) = join_with(&client, gw, Some(body), None).await;
            code == StatusCode::ACCEPTED
        })
        .await;
        assert!(took.is_some(), "{}: the new key never took", setup.name);
        let (code, body) = join_with(
            &client,
            gw,
            Some(json!({ "enqueue_token": token_for("alice") })),
            None,
        )
        .await;
        assert_eq!(code, StatusCode::UNAUTHORIZED, "{}: {body}", setup.name);
        assert_eq!(body["error"], "invalid_enqueue_token");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let again = loop {
        let body = json!({ "enqueue_token": new_token("alice") });
        let (code, answer) = join_with(&client, setup.gw(2), Some(body), None).await;
        if code == StatusCode::ACCEPTED {
            break answer;
        }
        assert!(Instant::now() < deadline, "{code} {answer}");
        let wait_s = answer["retry_after_s"].as_u64().unwrap_or(1);
        tokio::time::sleep(Duration::from_secs(wait_s)).await;
    };
    assert_eq!(
        claims_of(again["ticket"].as_str().unwrap())["seq"].as_u64(),
        seq,
        "{}: {again}",
        setup.name
    );
}

#[tokio::test]
async fn a_key_rotation_keeps_the_places_embedded() {
    a_key_rotation_keeps_the_places(&Setup::embedded(&room(600))).await;
}

#[tokio::test]
async fn a_key_rotation_keeps_the_places_on_three_gateways() {
    a_key_rotation_keeps_the_places(&Setup::fleet(&room(600))).await;
}

/// The store's keys as an operator gives them: an EdDSA key by its
/// `public_key` (the store keeps the private one), HS256 secrets in a file
/// (`secret_file`) and in the environment (`secret_env`): a token of each
/// joins.
#[tokio::test]
async fn enqueue_keys_from_a_public_key_a_file_and_the_environment() {
    let pkcs8 = sluice_admission::tokens::generate_ed25519_pkcs8_der().unwrap();
    // ring's PKCS#8 v2 document ends with the public key.
    let public = URL_SAFE_NO_PAD.encode(&pkcs8[pkcs8.len() - 32..]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("store.key");
    const FILE_SECRET: &str = "ZmlsZS1zdG9yZS1lbnF1ZXVlLXNlY3JldC0zMi1ieXRlcw";
    const ENV_SECRET: &str = "ZW52LXN0b3JlLWVucXVldWUtc2VjcmV0LTMyLWJ5dGVzIQ";
    std::fs::write(&file, format!("{FILE_SECRET}\n")).unwrap();
    let rooms = format!(
        "[[rooms]]\nname = \"drop\"\nrelease_per_second = 2\nmax_active = 10\nqueue_capacity = 100\n[rooms.enqueue]\nrequired = true\n[[rooms.enqueue.keys]]\nkid = \"ed\"\nalg = \"EdDSA\"\npublic_key = \"{public}\"\n[[rooms.enqueue.keys]]\nkid = \"file\"\nalg = \"HS256\"\nsecret_file = {:?}\n[[rooms.enqueue.keys]]\nkid = \"env\"\nalg = \"HS256\"\nsecret_env = \"STORE_ENQUEUE_SECRET\"\n",
        file.display().to_string()
    );
    let gw = Gateway::start(GatewayOptions {
        rest: format!("{KEYS}\n{rooms}"),
        env: vec![("STORE_ENQUEUE_SECRET".into(), ENV_SECRET.into())],
        ..GatewayOptions::default()
    });
    let client = client();
    let now = now_s();
    let claims = |sub: &str| json!({"sub": sub, "aud": "drop", "iat": now, "exp": now + 60});
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some("ed".into());
    let ed = jsonwebtoken::encode(
        &header,
        &claims("ed-account"),
        &jsonwebtoken::EncodingKey::from_ed_der(&pkcs8),
    )
    .unwrap();
    let tokens = [
        ("EdDSA", ed),
        (
            "secret_file",
            signed("file", FILE_SECRET, &claims("file-account")),
        ),
        (
            "secret_env",
            signed("env", ENV_SECRET, &claims("env-account")),
        ),
    ];
    let mut seqs = Vec::new();
    for (what, token) in tokens {
        let (code, body) =
            join_with(&client, &gw, Some(json!({ "enqueue_token": token })), None).await;
        assert_eq!(code, StatusCode::ACCEPTED, "{what}: {body}");
        seqs.push(claims_of(body["ticket"].as_str().unwrap())["seq"].clone());
    }
    assert_eq!(seqs, [json!(0), json!(1), json!(2)]);
    // An EdDSA token under an HS256 kid (or the other way) is refused.
    let (code, body) = join_with(
        &client,
        &gw,
        Some(json!({ "enqueue_token": signed("ed", FILE_SECRET, &claims("x")) })),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "{body}");
}

/// A room with both a proof of work and enqueue tokens: the challenge is
/// answered first (a join without one is `401 challenge_required` even
/// without a token); a solved challenge with a good token gets a place; a
/// second solved challenge of the same account gets that same place and
/// spends its challenge; the first challenge's solution sent again with
/// another account's token is a replay (`403 challenge_failed`), never the
/// first account's place, and a fresh solution gives that account its own.
async fn challenge_and_account(setup: &Setup) {
    let client = client();
    let ask = |gw: &Gateway| {
        let client = client.clone();
        let url = gw.url("/queue/drop/challenge");
        async move {
            let c: Value = client.get(url).send().await.unwrap().json().await.unwrap();
            let text = c["challenge"].as_str().unwrap().to_string();
            let bits = c["difficulty_bits"].as_u64().unwrap() as u8;
            let solution = sluice_admission::challenge::solve(&text, bits, 0, 1 << 24).unwrap();
            (text, solution)
        }
    };
    let name = setup.name;
    // No challenge, no token: the challenge is asked for first.
    let (status, answer) = join_with(&client, setup.gw(0), None, None).await;
    if answer["error"] != "store_unavailable" {
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{name}: {answer}");
        assert_eq!(answer["error"], "challenge_required", "{name}: {answer}");
    }
    let join = |gw_i: usize, challenge: (String, String), sub: &'static str| {
        let client = client.clone();
        let gw = setup.gw(gw_i);
        async move {
            let body = json!({
                "challenge": challenge.0,
                "solution": challenge.1,
                "enqueue_token": token_for(sub),
            });
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let (status, answer) = join_with(&client, gw, Some(body.clone()), None).await;
                if answer["error"] != "store_unavailable" || Instant::now() > deadline {
                    return (status, answer);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let first = ask(setup.gw(0)).await;
    let (status, a1) = join(0, first.clone(), "alice").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{name}: {a1}");
    let seq = claims_of(a1["ticket"].as_str().unwrap())["seq"].clone();
    // Alice again, a fresh solution, another gateway: her place.
    let second = ask(setup.gw(1)).await;
    let (status, a2) = loop {
        let (status, answer) = join(1, second.clone(), "alice").await;
        if answer["error"] == "rate_limited" {
            let wait = answer["retry_after_s"].as_u64().unwrap();
            tokio::time::sleep(Duration::from_secs(wait)).await;
            continue;
        }
        break (status, answer);
    };
    assert_eq!(status, StatusCode::ACCEPTED, "{name}: {a2}");
    assert_eq!(
        claims_of(a2["ticket"].as_str().unwrap())["seq"],
        seq,
        "{name}"
    );
    // Alice's first solution with Bob's token: a replay, not her place.
    let (status, b1) = join(2, first, "bob").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{name}: {b1}");
    assert_eq!(b1["error"], "challenge_failed", "{name}: {b1}");
    // The second one too (spent by Alice's second join).
    let (status, b2) = join(2, second, "bob").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{name}: {b2}");
    // Bob's own solution: his own place.
    let (status, b3) = join(2, ask(setup.gw(2)).await, "bob").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{name}: {b3}");
    assert_ne!(
        claims_of(b3["ticket"].as_str().unwrap())["seq"],
        seq,
        "{name}"
    );
}

fn challenge_room() -> String {
    room(600) + "[rooms.challenge]\nkind = \"pow\"\ndifficulty_bits = 8\nchallenge_ttl_s = 60\n"
}

#[tokio::test]
async fn a_challenge_and_an_account_together_embedded() {
    challenge_and_account(&Setup::embedded(&challenge_room())).await;
}

#[tokio::test]
async fn a_challenge_and_an_account_together_on_three_gateways() {
    challenge_and_account(&Setup::fleet(&challenge_room())).await;
}

/// A join with the account that holds a pass is answered with that place,
/// but it is not the pass's use (`pass_idle_s`): it carries neither the
/// pass nor the ticket. Alice's account joins again every second and never
/// uses its pass; the pass idles out and Bob, next in line, gets the one
/// slot. (Before: each such join counted as the page's status call, so a
/// farm holding an account kept its unused pass alive for one solved
/// challenge a join — seen in the bot-farm rehearsal.)
async fn an_accounts_join_is_not_its_pass_use(setup: &Setup) {
    let client = client();
    let alice = join_as(&client, setup.gw(0), "alice").await;
    let ticket = alice["ticket"].as_str().unwrap().to_owned();
    pass_of(&client, setup, &ticket).await;
    let bob = join_as(&client, setup.gw(1), "bob").await;
    let bob_ticket = bob["ticket"].as_str().unwrap().to_owned();
    // Idle after 10 s; the release tick ends it within a second more.
    let deadline = Instant::now() + Duration::from_secs(25);
    let mut rejoins = 0;
    loop {
        join_as(&client, setup.gw(2), "alice").await;
        rejoins += 1;
        let b = status(&client, setup.gw(1), &bob_ticket).await;
        if b["pass"].is_string() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}: {rejoins} joins of Alice's account kept her unused pass alive; Bob: {b}",
            setup.name
        );
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
}

fn idle_room() -> String {
    room(600).replacen("[rooms.enqueue]", "pass_idle_s = 10\n[rooms.enqueue]", 1)
}

#[tokio::test]
async fn an_accounts_join_is_not_its_pass_use_embedded() {
    an_accounts_join_is_not_its_pass_use(&Setup::embedded(&idle_room())).await;
}

#[tokio::test]
async fn an_accounts_join_is_not_its_pass_use_on_three_gateways() {
    an_accounts_join_is_not_its_pass_use(&Setup::fleet(&idle_room())).await;
}
