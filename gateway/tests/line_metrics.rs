//! The line's own numbers in `/metrics`, on both back ends (the embedded
//! room and a room on the fleet's Redis): released places waiting for their
//! holder (`sluice_uncollected_passes`), the no-show share the release
//! makes up for (`sluice_queue_no_show_share`) and early polls held back
//! (`sluice_queue_polls_too_early_total`), each seen to move.

mod common;

use std::time::Duration;

use common::redis::Redis;
use common::*;
use reqwest::StatusCode;

/// Every gateway of the fleet lists the same key.
const KEYS: &str = "[[keys]]\nkid = \"fleet\"\nalg = \"HS256\"\nsecret = \"c2x1aWNlLWZsZWV0LXRlc3Qta2V5LTMyLWJ5dGVzLW9r\"\n";
/// Places joined in `shows` and never collected: enough outcomes for the
/// share to be measured (`no_show::OUTCOMES_MIN`).
const NO_SHOWS: usize = 20;

/// `shows`: every place released at once (50 slots), holders that never
/// come back, a claim window of 4 s (the idle timeout). `early`: one slot,
/// held by a long pass, and a line told to poll every 3 s or more.
fn rooms() -> String {
    "[[rooms]]\nname = \"shows\"\nrelease_per_second = 50\nburst = 50\nmax_active = 50\nqueue_capacity = 1000\njoins_per_minute_per_client = 100000\npoll_min_s = 1\npoll_max_s = 1\nidle_timeout_s = 4\npass_ttl_s = 60\n\n\
     [[rooms]]\nname = \"early\"\nrelease_per_second = 50\nburst = 50\nmax_active = 1\nqueue_capacity = 1000\njoins_per_minute_per_client = 100000\npoll_min_s = 3\npoll_max_s = 10\npass_ttl_s = 600\n"
        .into()
}

fn embedded() -> Gateway {
    Gateway::start(GatewayOptions {
        rest: rooms(),
        ..GatewayOptions::default()
    })
}

fn on_redis(redis: &Redis) -> Gateway {
    Gateway::start(GatewayOptions {
        rest: format!(
            "[cluster]\nredis_url = \"{}\"\n\n{KEYS}\n{}",
            redis.url(),
            rooms()
        ),
        env: vec![("SLUICE_ALLOW_TEST_KNOBS".into(), "1".into())],
        ..GatewayOptions::default()
    })
}

/// The value of `family{room="<room>"}` in the gateway's `/metrics`.
async fn value(gw: &Gateway, family: &str, room: &str) -> Option<f64> {
    let text = without_region(&gw.metrics_text().await);
    let line = format!("{family}{{room=\"{room}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line)?.parse().ok())
}

/// A ticket of `room`; a fleet room warming up (its first 2 s) answers
/// `503 store_unavailable` at once, and is asked again.
async fn join(c: &reqwest::Client, gw: &Gateway, room: &str) -> serde_json::Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let r = c
            .post(gw.url(&format!("/queue/{room}/join")))
            .send()
            .await
            .unwrap();
        let body: serde_json::Value = r.json().await.unwrap();
        if body["ticket"].is_string() {
            return body;
        }
        assert!(
            body["error"] == "store_unavailable" && std::time::Instant::now() < deadline,
            "no ticket: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Places nobody collects show as uncollected, then as the no-show share,
/// and no longer as uncollected once their claim window is over.
async fn no_shows_move_the_gauges(gw: &Gateway) {
    let c = client();
    assert_eq!(
        value(gw, "sluice_queue_no_show_share", "shows").await,
        Some(0.0)
    );
    assert_eq!(
        value(gw, "sluice_uncollected_passes", "shows").await,
        Some(0.0)
    );
    for _ in 0..NO_SHOWS {
        join(&c, gw, "shows").await;
    }
    let released = eventually_await(Duration::from_secs(5), || async {
        value(gw, "sluice_uncollected_passes", "shows").await == Some(NO_SHOWS as f64)
    })
    .await;
    assert!(
        released.is_some(),
        "{NO_SHOWS} released places wait for their holders: {:?}",
        value(gw, "sluice_uncollected_passes", "shows").await
    );
    // Nobody came back within the claim window: every one a no-show, and
    // the share made up for is the bound, one half.
    let measured = eventually_await(Duration::from_secs(20), || async {
        value(gw, "sluice_queue_no_show_share", "shows").await == Some(0.5)
    })
    .await;
    assert!(
        measured.is_some(),
        "share {:?}",
        value(gw, "sluice_queue_no_show_share", "shows").await
    );
    assert_eq!(
        value(gw, "sluice_uncollected_passes", "shows").await,
        Some(0.0),
        "no-shows no longer wait for their holder"
    );
}

/// A poll sooner than told is refused and counted; one on time is not.
async fn an_early_poll_moves_the_counter(gw: &Gateway) {
    let c = client();
    admitted_pass(&gw.url(""), &c, "early").await;
    let joined = join(&c, gw, "early").await;
    assert_eq!(joined["state"], "waiting", "{joined}");
    assert!(joined["poll_after_s"].as_u64().unwrap() >= 3, "{joined}");
    let ticket = joined["ticket"].as_str().unwrap();
    let before = value(gw, "sluice_queue_polls_too_early_total", "early").await;
    assert_eq!(before, Some(0.0));
    for n in 1..=2 {
        let r = c
            .get(gw.url("/queue/early/status"))
            .bearer_auth(ticket)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            value(gw, "sluice_queue_polls_too_early_total", "early").await,
            Some(f64::from(n))
        );
    }
    assert_eq!(
        value(gw, "sluice_queue_polls_too_early_total", "shows").await,
        Some(0.0),
        "counted for its own room only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_rooms_export_no_shows_uncollected_passes_and_early_polls() {
    let gw = embedded();
    an_early_poll_moves_the_counter(&gw).await;
    no_shows_move_the_gauges(&gw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_rooms_export_no_shows_uncollected_passes_and_early_polls() {
    let redis = Redis::start();
    let gw = on_redis(&redis);
    an_early_poll_moves_the_counter(&gw).await;
    no_shows_move_the_gauges(&gw).await;
}
