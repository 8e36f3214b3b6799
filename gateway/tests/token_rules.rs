//! Token lifetime rules over HTTP: a pass or ticket signed with the
//! gateway's own key is still refused when its `iat` is ahead of the clock
//! or its lifetime is longer than the room's TTL for its type, and the
//! refusal is counted with its reason.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::{client, Gateway, GatewayOptions, Origin};
use sluice_admission::tokens::{Claims, KeyMaterial, KeySpec, Keyring, TokenType, IAT_LEEWAY_S};

const SECRET: &[u8] = b"token-rules-test-secret-0123456789abcdef";
const PASS_TTL_S: u64 = 300;
const TICKET_TTL_S: u64 = 900;
const TICKET_ID: &str = "00112233445566778899aabbccddeeff";

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The key the gateway is configured with, to mint tokens as a holder of a
/// leaked key would.
fn keyring() -> Keyring {
    Keyring::new(vec![KeySpec {
        kid: "k1".into(),
        material: KeyMaterial::Hs256(SECRET.to_vec()),
    }])
    .unwrap()
}

fn mint(typ: TokenType, iat: u64, exp: u64) -> String {
    keyring()
        .sign(&Claims::new(typ, "drop", TICKET_ID, 0, iat, exp))
        .unwrap()
}

fn start(origin: &Origin) -> Gateway {
    Gateway::start(GatewayOptions {
        origin: Some(origin.url()),
        rest: format!(
            "[[keys]]\nkid = \"k1\"\nalg = \"HS256\"\nsecret = \"{}\"\n\n[[rooms]]\nname = \"drop\"\nprotect = [\"/echo/**\"]\nrelease_per_second = 10\nmax_active = 10\nqueue_capacity = 100\npass_ttl_s = {PASS_TTL_S}\nticket_ttl_s = {TICKET_TTL_S}\n",
            URL_SAFE_NO_PAD.encode(SECRET)
        ),
        ..Default::default()
    })
}

/// `sluice_ticket_rejections_total` for room `drop` and `reason`, whatever
/// other labels the family carries.
async fn rejections(gw: &Gateway, reason: &str) -> f64 {
    let text = gw.metrics_text().await;
    text.lines()
        .filter(|l| l.starts_with("sluice_ticket_rejections_total{"))
        .filter(|l| l.contains(&format!("reason=\"{reason}\"")) && l.contains("room=\"drop\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn status_with_pass(gw: &Gateway, pass: &str) -> (u16, serde_json::Value) {
    let r = client()
        .get(gw.url("/echo/x"))
        .bearer_auth(pass)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}

#[tokio::test]
async fn a_pass_lives_no_longer_than_pass_ttl_and_is_not_issued_ahead() {
    let origin = Origin::start();
    let gw = start(&origin);
    let now = now_s();

    // What the room itself would mint: opens the path.
    let good = mint(TokenType::Pass, now - 10, now - 10 + PASS_TTL_S);
    assert_eq!(status_with_pass(&gw, &good).await.0, 200);

    let forever = mint(TokenType::Pass, now - 10, now + 10 * 365 * 86_400);
    let longer = mint(TokenType::Pass, now - 10, now - 9 + PASS_TTL_S);
    for pass in [&forever, &longer] {
        let (status, body) = status_with_pass(&gw, pass).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (401, Some("invalid_pass"))
        );
    }
    assert_eq!(rejections(&gw, "bad_lifetime").await, 2.0);

    let ahead = mint(TokenType::Pass, now + IAT_LEEWAY_S + 120, now + 200);
    let (status, body) = status_with_pass(&gw, &ahead).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("invalid_pass"))
    );
    assert_eq!(rejections(&gw, "issued_in_future").await, 1.0);

    // A ticket's TTL is not a pass's: a pass as long as a ticket is refused.
    let ticket_long = mint(TokenType::Pass, now - 10, now - 10 + TICKET_TTL_S);
    assert_eq!(status_with_pass(&gw, &ticket_long).await.0, 401);
    assert_eq!(rejections(&gw, "bad_lifetime").await, 3.0);
}

#[tokio::test]
async fn a_ticket_lives_no_longer_than_ticket_ttl() {
    let origin = Origin::start();
    let gw = start(&origin);
    let now = now_s();
    let status = |ticket: String| {
        let gw = &gw;
        async move {
            let r = client()
                .get(gw.url("/queue/drop/status"))
                .bearer_auth(ticket)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let body: serde_json::Value = r.json().await.unwrap();
            (status, body["error"].as_str().map(str::to_owned))
        }
    };
    let longer = mint(TokenType::Ticket, now - 10, now - 9 + TICKET_TTL_S);
    assert_eq!(status(longer).await, (401, Some("invalid_ticket".into())));
    assert_eq!(rejections(&gw, "bad_lifetime").await, 1.0);
    let ahead = mint(TokenType::Ticket, now + IAT_LEEWAY_S + 60, now + 120);
    assert_eq!(status(ahead).await, (401, Some("invalid_ticket".into())));
    assert_eq!(rejections(&gw, "issued_in_future").await, 1.0);
    // Within the rules it verifies (the room does not know the place, so
    // the refusal is for another reason).
    let fine = mint(TokenType::Ticket, now - 10, now - 10 + TICKET_TTL_S);
    assert_eq!(status(fine).await, (401, Some("invalid_ticket".into())));
    assert_eq!(rejections(&gw, "unknown_place").await, 1.0);
    assert_eq!(rejections(&gw, "bad_lifetime").await, 1.0);
}

/// The claims inside a token, read without verifying (the test's own).
fn claims_of(token: &str) -> Claims {
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

#[tokio::test]
async fn an_early_poll_is_answered_early_only_for_the_very_ticket_the_room_told_to_wait() {
    let origin = Origin::start();
    let room = |name: &str| {
        format!("[[rooms]]\nname = \"{name}\"\nprotect = [\"/{name}/**\"]\nrelease_per_second = 1\nmax_active = 1\nqueue_capacity = 100\npoll_min_s = 5\npoll_max_s = 10\nticket_ttl_s = {TICKET_TTL_S}\n")
    };
    let gw = Gateway::start(GatewayOptions {
        origin: Some(origin.url()),
        rest: format!(
            "[[keys]]\nkid = \"k1\"\nalg = \"HS256\"\nsecret = \"{}\"\n\n{}\n{}",
            URL_SAFE_NO_PAD.encode(SECRET),
            room("drop"),
            room("other")
        ),
        ..Default::default()
    });
    let join = |room: &'static str| {
        let gw = &gw;
        async move {
            let r = client()
                .post(gw.url(&format!("/queue/{room}/join")))
                .send()
                .await
                .unwrap();
            let v: serde_json::Value = r.json().await.unwrap();
            v["ticket"].as_str().unwrap().to_owned()
        }
    };
    let poll = |room: &'static str, ticket: String| {
        let gw = &gw;
        async move {
            let r = client()
                .get(gw.url(&format!("/queue/{room}/status")))
                .bearer_auth(ticket)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let retry = r
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned());
            let body: serde_json::Value = r.json().await.unwrap();
            (status, body["error"].as_str().map(str::to_owned), retry)
        }
    };
    // The first of each room is let in at once; the second waits, told
    // to ask again in 5 s or more.
    let _ = join("drop").await;
    let _ = join("other").await;
    let ticket = join("drop").await;
    let _ = join("other").await;
    let genuine = claims_of(&ticket);
    assert_eq!(genuine.seq, 1);
    let (status, error, retry) = poll("drop", ticket.clone()).await;
    assert_eq!((status, error.as_deref()), (429, Some("rate_limited")));
    assert!(retry.unwrap().parse::<u64>().unwrap() >= 4);

    let refused = |_reason: &'static str| (401, Some("invalid_ticket".to_owned()), None);
    // A byte of the signature changed.
    let mut bytes = ticket.clone().into_bytes();
    let i = bytes.len() - 2;
    bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(bytes).unwrap();
    assert_eq!(poll("drop", tampered).await, refused("bad_signature"));
    // The same ticket expired, signed with the gateway's own key.
    let resign = |change: &dyn Fn(&mut Claims)| {
        let mut claims = genuine.clone();
        change(&mut claims);
        keyring().sign(&claims).unwrap()
    };
    let now = now_s();
    let expired = resign(&|c| {
        c.iat = now - 100;
        c.exp = now - 1;
    });
    assert_eq!(poll("drop", expired).await, refused("expired"));
    // Another room's ticket for the same place and id: not this room's,
    // and that room never told this id anything.
    let elsewhere = resign(&|c| c.aud = "other".into());
    assert_eq!(
        poll("drop", elsewhere.clone()).await,
        refused("wrong_audience")
    );
    assert_eq!(poll("other", elsewhere).await, refused("unknown_place"));
    // A properly signed ticket for the waiting place with another id: the
    // room knows that id is not the place's, so the view never says early.
    let other_id = resign(&|c| c.sub = TICKET_ID.into());
    assert_eq!(poll("drop", other_id).await, refused("unknown_place"));
    for (reason, count) in [
        ("bad_signature", 1.0),
        ("expired", 1.0),
        ("wrong_audience", 1.0),
        // (The other room's refusal is counted under its name.)
        ("unknown_place", 1.0),
    ] {
        assert_eq!(rejections(&gw, reason).await, count, "{reason}");
    }
    // The genuine ticket is still early.
    assert_eq!(poll("drop", ticket).await.0, 429);
}
