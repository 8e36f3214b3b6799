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
