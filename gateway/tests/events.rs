//! A room as an event, through the real binary, on one embedded gateway
//! and on three gateways sharing a throwaway Redis: joins before
//! `prequeue_at` are `503 not_open` with `Retry-After`; the `message` and
//! `closes_at` are in the status JSON and a reload changes the message
//! live; after `closes_at` new joins are `410 event_closed`, shoppers still
//! in line are told `closed` and nobody more is let in, while a pass out
//! before the close keeps working; a client from a network in
//! `gateway.deny_cidrs_file` is refused with `403 forbidden`, and an edit
//! of that file alone takes effect live.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::redis::Redis;
use common::*;
use reqwest::StatusCode;
use serde_json::Value;

const KEYS: &str = "[[keys]]\nkid = \"ev\"\nalg = \"HS256\"\nsecret = \"c2x1aWNlLWV2ZW50cy10ZXN0LWtleS0zMi1ieXRlcy1vaw==\"\n";

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A TOML datetime (RFC 3339, UTC) for a unix second: the load
/// harness's, tested there.
use sluice_loadtest::load::datetime::toml_datetime as datetime;

fn room(extra: &str) -> String {
    format!(
        "[[rooms]]\nname = \"drop\"\nrelease_per_second = 20\nburst = 1\nmax_active = 1\nqueue_capacity = 100\njoins_per_minute_per_client = 100000\npoll_min_s = 1\npoll_max_s = 1\npass_ttl_s = 600\n{extra}"
    )
}

struct Setup {
    gateways: Vec<Gateway>,
    _redis: Option<Redis>,
}

fn embedded(rooms: &str, gateway: &str) -> Setup {
    Setup {
        gateways: vec![Gateway::start(GatewayOptions {
            extra_gateway: gateway.into(),
            rest: format!("{KEYS}\n{rooms}"),
            ..GatewayOptions::default()
        })],
        _redis: None,
    }
}

fn fleet(rooms: &str, gateway: &str) -> Setup {
    let redis = Redis::start();
    let gateways = (0..3)
        .map(|_| {
            Gateway::start(GatewayOptions {
                extra_gateway: gateway.into(),
                rest: format!(
                    "[cluster]\nredis_url = \"{}\"\n\n{KEYS}\n{rooms}",
                    redis.url()
                ),
                env: vec![("SLUICE_ALLOW_TEST_KNOBS".into(), "1".into())],
                ..GatewayOptions::default()
            })
        })
        .collect();
    Setup {
        gateways,
        _redis: Some(redis),
    }
}

impl Setup {
    fn edit(&self, f: impl Fn(String) -> String) {
        for gw in &self.gateways {
            gw.edit_config(&f);
        }
    }
}

async fn join(client: &reqwest::Client, gw: &Gateway) -> (StatusCode, Option<String>, Value) {
    let r = client
        .post(gw.url("/queue/drop/join"))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (status, retry, r.json().await.unwrap())
}

/// A join that takes a place, past a fleet room's warm-up.
async fn place(client: &reqwest::Client, gw: &Gateway) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _, body) = join(client, gw).await;
        if status == StatusCode::ACCEPTED {
            return body;
        }
        assert!(
            body["error"] == "store_unavailable" && Instant::now() < deadline,
            "{status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn status(client: &reqwest::Client, gw: &Gateway, ticket: &str) -> (StatusCode, Value) {
    let r = client
        .get(gw.url("/queue/drop/status"))
        .bearer_auth(ticket)
        .send()
        .await
        .unwrap();
    (r.status(), r.json().await.unwrap())
}

/// Polls (honouring early-poll refusals) until `done` holds.
async fn until(
    client: &reqwest::Client,
    setup: &Setup,
    ticket: &str,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    let mut i = 0;
    loop {
        let gw = &setup.gateways[i % setup.gateways.len()];
        i += 1;
        let (_, body) = status(client, gw, ticket).await;
        if done(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "last answer {body}");
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
}

async fn the_schedule_and_message(setup: Setup) {
    let client = client();
    // Before prequeue_at: not open, on every gateway, with Retry-After.
    for gw in &setup.gateways {
        let (status, retry, body) = join(&client, gw).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["error"], "not_open", "{body}");
        let retry: u64 = retry.expect("Retry-After").parse().unwrap();
        assert!((1..=3600).contains(&retry), "{retry}");
    }
    // Open, with a message, closing in a few seconds.
    let closes_at = now_s() + 12;
    setup.edit(|t| {
        let start = t.find("prequeue_at").unwrap();
        let end = start + t[start..].find('\n').unwrap() + 1;
        format!(
            "{}message = \"Restock at 14:00\"\ncloses_at = {}\n{}",
            &t[..start],
            datetime(closes_at),
            &t[end..]
        )
    });
    let gw0 = &setup.gateways[0];
    let deadline = Instant::now() + Duration::from_secs(10);
    let first = loop {
        let (status, _, body) = join(&client, gw0).await;
        if status == StatusCode::ACCEPTED {
            break body;
        }
        assert!(Instant::now() < deadline, "never opened: {status} {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let first = first["ticket"].as_str().unwrap().to_string();
    let admitted = until(&client, &setup, &first, Duration::from_secs(10), |b| {
        b["state"] == "admitted"
    })
    .await;
    let pass = admitted["pass"].as_str().unwrap().to_string();
    assert_eq!(admitted["message"], "Restock at 14:00");
    assert_eq!(admitted["closes_at"], closes_at);
    // The one slot is held: the next shopper waits, told the message.
    let second = place(&client, &setup.gateways[1 % setup.gateways.len()]).await;
    assert_eq!(second["state"], "waiting", "{second}");
    assert_eq!(second["message"], "Restock at 14:00");
    let second = second["ticket"].as_str().unwrap().to_string();
    // A reload changes the message live.
    setup.edit(|t| t.replace("Restock at 14:00", "Size 42 restocked"));
    until(&client, &setup, &second, Duration::from_secs(5), |b| {
        b["message"] == "Size 42 restocked"
    })
    .await;
    // The close: the one in line is told closed, new joins are refused.
    let closed = until(&client, &setup, &second, Duration::from_secs(20), |b| {
        b["state"] == "closed"
    })
    .await;
    assert_eq!(closed["message"], "Size 42 restocked", "{closed}");
    for gw in &setup.gateways {
        let (status, _, body) = join(&client, gw).await;
        assert_eq!(status, StatusCode::GONE, "{body}");
        assert_eq!(body["error"], "event_closed", "{body}");
    }
    // The pass out before the close still shows.
    let (_, shown) = status(&client, gw0, &first).await;
    assert_eq!(shown["state"], "admitted", "{shown}");
    assert_eq!(shown["pass"], pass.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_opens_shows_its_message_and_closes_on_one_gateway() {
    let extra = format!("prequeue_at = {}\n", datetime(now_s() + 3600));
    the_schedule_and_message(embedded(&room(&extra), "")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_opens_shows_its_message_and_closes_on_a_fleet() {
    let extra = format!("prequeue_at = {}\n", datetime(now_s() + 3600));
    the_schedule_and_message(fleet(&room(&extra), "")).await;
}

async fn a_denied_network(setup: Setup, deny_file: &std::path::Path) {
    let client = client();
    for gw in &setup.gateways {
        let (status, _, body) = join(&client, gw).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["error"], "forbidden", "{body}");
        let (status, body) = status_of(&client, gw, "x.y.z").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    }
    // The file alone changes: loopback is no longer denied.
    std::fs::write(deny_file, "# the office\n10.0.0.0/8\n").unwrap();
    for gw in &setup.gateways {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (status, _, body) = join(&client, gw).await;
            if status == StatusCode::ACCEPTED {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "still refused after the edit: {status} {body}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // A bad line keeps the last good list (loopback still allowed).
    std::fs::write(deny_file, "127.0.0.0/8\nnot a network\n").unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (status, _, body) = join(&client, &setup.gateways[0]).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}

async fn status_of(client: &reqwest::Client, gw: &Gateway, ticket: &str) -> (StatusCode, Value) {
    status(client, gw, ticket).await
}

fn deny_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deny.txt");
    std::fs::write(&path, "# everyone local\n127.0.0.0/8\n::1/128\n").unwrap();
    (dir, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_network_is_refused_and_the_list_reloads_live_on_one_gateway() {
    let (_dir, path) = deny_file();
    let gateway = format!("deny_cidrs_file = \"{}\"\n", path.display());
    a_denied_network(embedded(&room(""), &gateway), &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_network_is_refused_and_the_list_reloads_live_on_a_fleet() {
    let (_dir, path) = deny_file();
    let gateway = format!("deny_cidrs_file = \"{}\"\n", path.display());
    a_denied_network(fleet(&room(""), &gateway), &path).await;
}
