//! Redis restarted empty (no persistence) under three real gateways: the
//! gateways re-seed the room from the highest numbers they saw, with
//! Functions that only ever raise them. Each point is asserted:
//!
//! 1. the seq counter: no place already given is given again;
//! 2. the release watermark: no gateway's `serving` goes back, and a place
//!    released before the loss, whose holder had not come for it yet, is
//!    still collected (not `expired`);
//! 3. the `max_active` slots: passes issued before the loss, by different
//!    gateways, hold their slots again, so nobody else is let in;
//! 4. the fleet rate's GCRA: the release goes on at its pace, not with a
//!    whole new `burst`;
//! 5. only places whose claim window was still open at the loss are taken
//!    back: an older no-show gets no pass.

mod common;

use std::time::{Duration, Instant};

use base64::Engine;
use common::redis::Redis;
use common::*;
use reqwest::StatusCode;
use serde_json::Value;

/// Every gateway of the fleet lists the same key.
const KEYS: &str = "[[keys]]\nkid = \"fleet\"\nalg = \"HS256\"\nsecret = \"c2x1aWNlLWZsZWV0LXRlc3Qta2V5LTMyLWJ5dGVzLW9r\"\n";
/// `slots`: three slots, places released at once; a released place waits
/// 7 s for its holder (two polls of 1 s plus 5 s of slack).
const SLOTS: u64 = 3;
/// `pace`: one place a second, a burst of ten: the burst is spent before
/// the loss, so a GCRA started afresh would let ten out at once.
const PACE_RATE: u64 = 1;
const PACE_BURST: u64 = 10;

fn rooms() -> String {
    format!(
        "[[rooms]]\nname = \"slots\"\nrelease_per_second = 50\nburst = 50\nmax_active = {SLOTS}\nqueue_capacity = 1000\njoins_per_minute_per_client = 100000\npoll_min_s = 1\npoll_max_s = 1\nidle_timeout_s = 30\npass_ttl_s = 600\n\n\
         [[rooms]]\nname = \"pace\"\nrelease_per_second = {PACE_RATE}\nburst = {PACE_BURST}\nmax_active = 1000\nqueue_capacity = 1000\njoins_per_minute_per_client = 100000\npoll_min_s = 1\npoll_max_s = 1\npass_ttl_s = 600\n\n\
         [[rooms]]\nname = \"stale\"\nrelease_per_second = 50\nburst = 50\nmax_active = 100\nqueue_capacity = 1000\njoins_per_minute_per_client = 100000\npoll_min_s = 1\npoll_max_s = 1\nidle_timeout_s = 30\npass_ttl_s = 600\n"
    )
}

fn start_fleet(redis: &Redis, n: usize) -> Vec<Gateway> {
    (0..n)
        .map(|_| {
            Gateway::start(GatewayOptions {
                rest: format!(
                    "[cluster]\nredis_url = \"{}\"\n\n{KEYS}\n{}",
                    redis.url(),
                    rooms()
                ),
                // The line alone is under test: no shared stock needed.
                env: vec![("SLUICE_ALLOW_TEST_KNOBS".into(), "1".into())],
                ..GatewayOptions::default()
            })
        })
        .collect()
}

/// The `seq` claim of a token (read only; the gateway verifies).
fn seq_of(token: &str) -> u64 {
    let payload = token.split('.').nth(1).unwrap();
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice::<Value>(&json).unwrap()["seq"]
        .as_u64()
        .unwrap()
}

/// A new ticket; a room warming up (new, or Redis back empty) answers
/// `503 store_unavailable` at once, and is asked again.
async fn ticket(c: &reqwest::Client, gw: &Gateway, room: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = c
            .post(gw.url(&format!("/queue/{room}/join")))
            .send()
            .await
            .unwrap();
        let body: Value = r.json().await.unwrap();
        if let Some(t) = body["ticket"].as_str() {
            return t.to_string();
        }
        assert!(
            body["error"] == "store_unavailable" && Instant::now() < deadline,
            "{body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn status(
    c: &reqwest::Client,
    gw: &Gateway,
    room: &str,
    ticket: &str,
) -> (StatusCode, Value) {
    let r = c
        .get(gw.url(&format!("/queue/{room}/status")))
        .bearer_auth(ticket)
        .send()
        .await
        .unwrap();
    (r.status(), r.json().await.unwrap())
}

/// Polls `ticket` at `gw` when told to (as a browser does) until
/// admitted: its pass. The place is never `expired`.
async fn collect(c: &reqwest::Client, gw: &Gateway, room: &str, ticket: &str) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let (code, body) = status(c, gw, room, ticket).await;
        assert_eq!(code, StatusCode::OK, "{body}");
        assert_ne!(body["state"], "expired", "the place was lost: {body}");
        if body["state"] == "admitted" {
            return body["pass"].as_str().map(str::to_string);
        }
        let told = body["poll_after_s"].as_u64().unwrap_or(1);
        tokio::time::sleep(Duration::from_secs(told)).await;
    }
    None
}

async fn serving(c: &reqwest::Client, gw: &Gateway, room: &str) -> u64 {
    let mark: Value = c
        .get(gw.url(&format!("/queue/{room}/watermark")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    mark["serving"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_empty_keeps_every_place_slot_and_the_pace() {
    let mut redis = Redis::start();
    let fleet = start_fleet(&redis, 3);
    let c = client();

    // slots: five in line, three released at once; two collect their
    // passes (on two gateways), the third has not come for it yet.
    let mut line = Vec::new();
    for i in 0..5 {
        line.push(ticket(&c, &fleet[i % 3], "slots").await);
    }
    let seqs: Vec<u64> = line.iter().map(|t| seq_of(t)).collect();
    assert_eq!(seqs, (seqs[0]..seqs[0] + 5).collect::<Vec<_>>());
    for (i, t) in line.iter().take(2).enumerate() {
        assert!(
            collect(&c, &fleet[i], "slots", t).await.is_some(),
            "a place of the first three collects its pass"
        );
    }
    // pace: thirty in line; the burst of ten goes at once, then one a
    // second: once past the burst the GCRA has none left.
    let mut paced = Vec::new();
    for i in 0..30 {
        paced.push(seq_of(&ticket(&c, &fleet[i % 3], "pace").await));
    }
    let spent = eventually_await(Duration::from_secs(10), || async {
        serving(&c, &fleet[0], "pace").await > PACE_BURST
    })
    .await;
    assert!(spent.is_some(), "the burst is spent and the pace goes on");

    let mut slots_before = Vec::new();
    let mut pace_seen = Vec::new();
    for gw in &fleet {
        slots_before.push(serving(&c, gw, "slots").await);
        pace_seen.push(serving(&c, gw, "pace").await);
    }
    let pace_before = *pace_seen.iter().max().unwrap();
    assert!(slots_before.iter().all(|&s| s == SLOTS), "{slots_before:?}");
    let lost_at = Instant::now();
    redis.restart_empty();

    // 1. The next places come after every place given, on each gateway.
    let mut after = Vec::new();
    for gw in &fleet {
        after.push(seq_of(&ticket(&c, gw, "slots").await));
    }
    let highest = *seqs.last().unwrap();
    assert!(
        after.iter().all(|&s| s > highest),
        "{after:?} after {highest}"
    );
    after.sort_unstable();
    after.dedup();
    assert_eq!(after.len(), fleet.len(), "no place given twice");
    let pace_next = seq_of(&ticket(&c, &fleet[1], "pace").await);
    assert!(pace_next > *paced.last().unwrap(), "{pace_next}");

    // 4. The pace: what the release let out since the loss is what the
    // rate allows (doubled: the most the no-show make-up may run it at),
    // plus the one place a tick may have released as Redis went down; not
    // a fresh burst of ten on top. 2. No gateway's watermark goes back.
    // Watched on every gateway until the warm-up is well over.
    let watch_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < watch_until {
        for (gw, seen) in fleet.iter().zip(&pace_seen) {
            let now_serving = serving(&c, gw, "pace").await;
            assert!(
                now_serving >= *seen,
                "{now_serving} < {seen}: the watermark went back"
            );
            let out = now_serving.saturating_sub(pace_before);
            let allowed =
                (lost_at.elapsed().as_secs_f64() * 2.0 * PACE_RATE as f64).ceil() as u64 + 1;
            assert!(
                out <= allowed,
                "{out} released in {:?} since the loss at {PACE_RATE}/s",
                lost_at.elapsed()
            );
            assert!(out < PACE_BURST, "a fresh burst: {out}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let moved = eventually_await(Duration::from_secs(5), || async {
        serving(&c, &fleet[2], "pace").await > pace_before
    })
    .await;
    assert!(moved.is_some(), "the release goes on after the loss");

    // 2. The watermark never went back on any gateway, and the released
    // place whose holder had not come yet is collected (on the third
    // gateway, which handed out no pass).
    for (gw, before) in fleet.iter().zip(&slots_before) {
        assert!(serving(&c, gw, "slots").await >= *before);
    }
    assert!(
        collect(&c, &fleet[2], "slots", &line[2]).await.is_some(),
        "the released place keeps its claim"
    );

    // 3. The slots: the two passes from before and the one just collected
    // fill the three; nobody else is let in while they live.
    let watch_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < watch_until {
        for gw in &fleet {
            assert_eq!(
                serving(&c, gw, "slots").await,
                SLOTS,
                "a slot of a pass from before the loss was given away"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (i, t) in line.iter().enumerate().skip(SLOTS as usize) {
        let (code, body) = status(&c, &fleet[i % 3], "slots", t).await;
        assert_eq!(code, StatusCode::OK, "{body}");
        assert_eq!(body["state"], "waiting", "{body}");
    }
    // The passes from before are still the ones that hold the slots.
    let held = redis
        .command(&["ZCARD", "sluice2:{slots}:slots"])
        .unwrap_or_default();
    assert!(held.trim() == format!(":{SLOTS}"), "{held:?}");
}

/// 5. A place released, never collected and counted a no-show before the
/// loss gets no pass after it; a place released just before the loss does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_show_from_before_the_loss_gets_no_pass_after_it() {
    let mut redis = Redis::start();
    let fleet = start_fleet(&redis, 2);
    let c = client();
    let no_shows = |redis: &Redis| {
        redis
            .command(&["HINCRBY", "sluice2:{stale}", "no_shows", "0"])
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    // Released at once; its claim window (7 s) ends with nobody coming.
    let old = ticket(&c, &fleet[0], "stale").await;
    let gone = eventually_await(Duration::from_secs(20), || async {
        no_shows(&redis) == ":1"
    })
    .await;
    assert!(
        gone.is_some(),
        "the place is counted a no-show: {}",
        no_shows(&redis)
    );
    // Released now, not collected yet, when Redis loses the room.
    let fresh = ticket(&c, &fleet[1], "stale").await;
    assert_eq!(seq_of(&fresh), seq_of(&old) + 1);
    let released = eventually_await(Duration::from_secs(5), || async {
        serving(&c, &fleet[0], "stale").await > seq_of(&fresh)
            && serving(&c, &fleet[1], "stale").await > seq_of(&fresh)
    })
    .await;
    assert!(
        released.is_some(),
        "both gateways saw the fresh place released"
    );
    redis.restart_empty();

    assert!(
        collect(&c, &fleet[1], "stale", &fresh).await.is_some(),
        "the place released just before the loss keeps its claim"
    );
    for gw in &fleet {
        let (code, body) = status(&c, gw, "stale", &old).await;
        assert_eq!(code, StatusCode::OK, "{body}");
        assert_eq!(body["state"], "expired", "a no-show handed a pass: {body}");
    }
}
