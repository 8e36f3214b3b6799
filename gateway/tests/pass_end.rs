//! `Sluice-Pass: end` from the origin, through the real binary: the pass
//! that made the request ends at once (its slot goes to the next shopper,
//! its cookie is cleared, it is refused with `401 invalid_pass`), the
//! header never reaches the client, and it is counted in
//! `sluice_passes_ended_total{reason="origin"}`.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use common::*;
use reqwest::StatusCode;
use serde_json::Value;

/// An origin whose `/account/done` ends the pass, and whose other pages
/// answer plainly.
fn origin() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let app = Router::new()
                .route(
                    "/account/done",
                    get(|| async { ([("sluice-pass", "end")], "thanks") }),
                )
                .route("/account/page", get(|| async { "your account" }))
                .route(
                    "/open/done",
                    get(|| async { ([("Sluice-Pass", "END")], "bye") }),
                );
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    format!("http://{addr}")
}

const ROOM: &str = "[[rooms]]\nname = \"drop\"\nprotect = [\"/account/*\"]\nrelease_per_second = 50\nmax_active = 1\nqueue_capacity = 100\npass_ttl_s = 600\npoll_min_s = 1\npoll_max_s = 1\n";

async fn get_with(
    client: &reqwest::Client,
    gw: &Gateway,
    path: &str,
    pass: &str,
) -> reqwest::Response {
    client
        .get(gw.url(path))
        .bearer_auth(pass)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_origin_ends_a_pass_and_the_next_shopper_gets_its_slot() {
    let gw = Gateway::start(GatewayOptions {
        origin: Some(origin()),
        rest: ROOM.into(),
        ..GatewayOptions::default()
    });
    let client = client();
    let pass = admitted_pass(&gw.url(""), &client, "drop").await;
    let r = get_with(&client, &gw, "/account/page", &pass).await;
    assert_eq!(r.status(), StatusCode::OK);

    // A second shopper waits: the one slot is taken.
    let joined: Value = client
        .post(gw.url("/queue/drop/join"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ticket = joined["ticket"].as_str().unwrap().to_string();
    assert_eq!(
        pass_within(&client, &gw, &ticket, Duration::from_secs(2)).await,
        None,
        "no slot is free yet"
    );

    // The origin ends the pass: the header stays with the gateway, the
    // cookie is cleared.
    let r = get_with(&client, &gw, "/account/done", &pass).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.headers().get("sluice-pass").is_none(),
        "{:?}",
        r.headers()
    );
    let cleared = r.headers().get_all("set-cookie").iter().any(|c| {
        c.to_str().unwrap().starts_with("sluice_pass=;")
            && c.to_str().unwrap().contains("Max-Age=0")
    });
    assert!(cleared, "{:?}", r.headers());
    assert_eq!(r.text().await.unwrap(), "thanks");

    // The pass is refused from now on.
    let r = get_with(&client, &gw, "/account/page", &pass).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "invalid_pass", "{body}");

    // The next shopper is let in.
    let next = pass_within(&client, &gw, &ticket, Duration::from_secs(10)).await;
    assert!(
        next.is_some(),
        "the ended pass's slot went to the next shopper"
    );
    let text = without_region(&gw.metrics_text().await);
    assert!(
        text.contains("sluice_passes_ended_total{reason=\"origin\",room=\"drop\"} 1"),
        "{}",
        text.lines()
            .filter(|l| l.contains("passes_ended"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unprotected_answer_ends_the_pass_the_request_carried_and_never_shows_the_header() {
    let gw = Gateway::start(GatewayOptions {
        origin: Some(origin()),
        rest: ROOM.into(),
        ..GatewayOptions::default()
    });
    let client = client();
    // Without a pass the header is only removed.
    let r = client.get(gw.url("/open/done")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers().get("sluice-pass").is_none());
    // With a pass (as a cookie, the browser's way) on a path no room
    // protects, the pass the request carried ends.
    let pass = admitted_pass(&gw.url(""), &client, "drop").await;
    let r = client
        .get(gw.url("/open/done"))
        .header("cookie", format!("sluice_pass={pass}"))
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("sluice-pass").is_none());
    let r = get_with(&client, &gw, "/account/page", &pass).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

/// `pass_idle_s`: a pass with no request and no checkout for that long
/// gives its slot to the next shopper and is refused from then on, while a
/// pass in use keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_pass_lets_the_next_shopper_in() {
    let gw = Gateway::start(GatewayOptions {
        origin: Some(origin()),
        rest: format!("{ROOM}pass_idle_s = 10\n"),
        ..GatewayOptions::default()
    });
    let client = client();
    let pass = admitted_pass(&gw.url(""), &client, "drop").await;
    let joined: Value = client
        .post(gw.url("/queue/drop/join"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ticket = joined["ticket"].as_str().unwrap().to_string();
    // In use every 2 s for 14 s: the slot stays with the first shopper.
    let used_until = Instant::now() + Duration::from_secs(14);
    while Instant::now() < used_until {
        let r = get_with(&client, &gw, "/account/page", &pass).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            pass_within(&client, &gw, &ticket, Duration::from_secs(2)).await,
            None,
            "a pass in use keeps its slot"
        );
    }
    // Left alone, it idles out within about 10 s.
    let next = pass_within(&client, &gw, &ticket, Duration::from_secs(20)).await;
    assert!(
        next.is_some(),
        "the idle pass's slot went to the next shopper"
    );
    let r = get_with(&client, &gw, "/account/page", &pass).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let text = without_region(&gw.metrics_text().await);
    assert!(
        text.contains("sluice_passes_ended_total{reason=\"idle\",room=\"drop\"} 1"),
        "{text}"
    );
}

/// On a fleet (three gateways, their own Redis): the pass the origin ends
/// through one gateway frees its slot for the fleet, so the next shopper,
/// polling another gateway, is let in; every gateway refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_fleet_the_ended_pass_frees_its_slot_for_every_gateway() {
    let redis = common::redis::Redis::start();
    let origin = origin();
    let fleet = fleet_of_three(&redis, &origin, "");
    let client = client();
    let pass = admitted_pass(&fleet[0].url(""), &client, "drop").await;
    let joined: Value = client
        .post(fleet[1].url("/queue/drop/join"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ticket = joined["ticket"]
        .as_str()
        .unwrap_or_else(|| panic!("{joined}"))
        .to_string();
    assert_eq!(
        pass_within(&client, &fleet[2], &ticket, Duration::from_secs(2)).await,
        None,
        "the fleet's one slot is held"
    );
    let r = get_with(&client, &fleet[0], "/account/done", &pass).await;
    assert!(r.headers().get("sluice-pass").is_none());
    let r = get_with(&client, &fleet[0], "/account/page", &pass).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // Every other gateway refuses it too, from its next tick.
    for gw in &fleet[1..] {
        refused_within(&client, gw, &pass, Duration::from_secs(5)).await;
    }
    let next = pass_within(&client, &fleet[2], &ticket, Duration::from_secs(10)).await;
    assert!(next.is_some(), "the slot came back for the whole fleet");
    let text = without_region(&fleet[0].metrics_text().await);
    assert!(
        text.contains("sluice_passes_ended_total{reason=\"origin\",room=\"drop\"} 1"),
        "counted by the gateway that saw the end"
    );
}

/// Polls `gw` with `pass` on a protected path until it is refused with
/// `401 invalid_pass`, within `within` (panics if it is not).
async fn refused_within(client: &reqwest::Client, gw: &Gateway, pass: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let r = get_with(client, gw, "/account/page", pass).await;
        if r.status() == StatusCode::UNAUTHORIZED {
            let body: Value = r.json().await.unwrap();
            assert_eq!(body["error"], "invalid_pass", "{body}");
            return;
        }
        assert_eq!(r.status(), StatusCode::OK);
        assert!(
            Instant::now() < deadline,
            "the ended pass still opens {} after {within:?}",
            gw.url("")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn fleet_of_three(redis: &common::redis::Redis, origin: &str, extra: &str) -> Vec<Gateway> {
    let keys = "[[keys]]\nkid = \"end\"\nalg = \"HS256\"\nsecret = \"c2x1aWNlLXBhc3MtZW5kLXRlc3Qta2V5LTMyLWJ5dGVzLW9r\"\n";
    (0..3)
        .map(|_| {
            Gateway::start(GatewayOptions {
                origin: Some(origin.to_string()),
                rest: format!(
                    "[cluster]\nredis_url = \"{}\"\n\n{keys}\n{ROOM}joins_per_minute_per_client = 100000\n{extra}",
                    redis.url()
                ),
                env: vec![("SLUICE_ALLOW_TEST_KNOBS".into(), "1".into())],
                ..GatewayOptions::default()
            })
        })
        .collect()
}

/// `pass_idle_s` on a fleet (three gateways, their own Redis): a pass used
/// on one gateway after another keeps the fleet's one slot; left alone, it
/// idles out, the next shopper (polling a third gateway) is let in, and
/// every gateway refuses the idle pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_fleet_an_idle_pass_lets_the_next_shopper_in_and_is_refused_everywhere() {
    let redis = common::redis::Redis::start();
    let origin = origin();
    let fleet = fleet_of_three(&redis, &origin, "pass_idle_s = 10\n");
    let client = client();
    let pass = admitted_pass(&fleet[0].url(""), &client, "drop").await;
    let joined: Value = client
        .post(fleet[1].url("/queue/drop/join"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ticket = joined["ticket"]
        .as_str()
        .unwrap_or_else(|| panic!("{joined}"))
        .to_string();
    // In use for 14 s (past the idle window), each request on the next
    // gateway: the activity is the fleet's, the slot stays.
    let used_until = Instant::now() + Duration::from_secs(14);
    let mut i = 0;
    while Instant::now() < used_until {
        let r = get_with(&client, &fleet[i % 2], "/account/page", &pass).await;
        assert_eq!(r.status(), StatusCode::OK, "a pass in use keeps working");
        assert_eq!(
            pass_within(&client, &fleet[2], &ticket, Duration::from_secs(1)).await,
            None,
            "a pass in use on any gateway keeps the fleet's slot"
        );
        i += 1;
    }
    // Left alone, it idles out within about 10 s.
    let next = pass_within(&client, &fleet[2], &ticket, Duration::from_secs(20)).await;
    assert!(
        next.is_some(),
        "the idle pass's slot went to the next shopper"
    );
    for gw in &fleet {
        refused_within(&client, gw, &pass, Duration::from_secs(5)).await;
    }
    let mut idle_counted = 0;
    for gw in &fleet {
        let text = without_region(&gw.metrics_text().await);
        idle_counted += text
            .lines()
            .find_map(|l| {
                l.strip_prefix("sluice_passes_ended_total{reason=\"idle\",room=\"drop\"} ")
            })
            .map_or(0, |v| v.trim().parse::<u64>().unwrap());
    }
    assert_eq!(
        idle_counted, 1,
        "counted once, by the gateway whose tick ended it"
    );
}
