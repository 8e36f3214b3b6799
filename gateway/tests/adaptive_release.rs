//! Adaptive release through the real binary: checkouts slowed down by the
//! store's commit delay make the room's rate fall, with reason `latency`,
//! inside its bounds; a reload to a number pins it. Checkouts refused
//! `503 overloaded` by a full checkout pool make it fall with reason
//! `errors`.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// Passes that check out at once, so the controller's window has enough.
const SHOPPERS: usize = 30;
/// How long the controller may take to react, at most.
const REACT_WITHIN: Duration = Duration::from_secs(20);

fn config(release: &str) -> String {
    format!(
        "[[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\", \"/orders/*\"]\nmax_active = 100\nqueue_capacity = 1000\npoll_min_s = 1\npoll_max_s = 5\nrelease_per_second = {release}\n\
         [[products]]\nsku = \"sneaker-42\"\nstock = 1000\nprice_cents = 19900\nroom = \"drop\"\n"
    )
}

const ADAPTIVE: &str = "\"adaptive\"\n[rooms.adaptive]\ntarget_p99_ms = 100\nmax_error_ratio = 0.05\nmin_per_second = 20\nmax_per_second = 500";

/// `sluice_release_rate_limit` of room `drop` with `reason`.
fn release_limit(metrics: &str, reason: &str) -> Option<f64> {
    without_region(metrics)
        .lines()
        .find(|l| {
            l.starts_with("sluice_release_rate_limit{")
                && l.contains("room=\"drop\"")
                && l.contains(&format!("reason=\"{reason}\""))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

async fn room_state(gw: &Gateway) -> Value {
    gw.admin_json("/admin/state")["rooms"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_checkouts_lower_the_rate_and_a_number_pins_it() {
    let gw = Gateway::start(GatewayOptions {
        extra_gateway: "test_store_commit_delay_ms = 150\n".into(),
        rest: config(ADAPTIVE),
        ..Default::default()
    });
    let room = room_state(&gw).await;
    assert_eq!(room["release_source"]["kind"], "adaptive", "{room}");
    // sqrt(20 × 500) = 100
    assert_eq!(room["release_per_second"], 100, "{room}");
    assert_eq!(room["release_source"]["min_per_second"], 20);
    assert_eq!(room["release_source"]["max_per_second"], 500);
    assert_eq!(room["release_source"]["target_p99_ms"], 100);

    let base = gw.url("");
    let passes = futures_util::future::join_all((0..SHOPPERS).map(|_| {
        let base = base.clone();
        async move { admitted_pass(&base, &client(), "drop").await }
    }))
    .await;
    let checkouts = passes.iter().enumerate().map(|(i, pass)| {
        let url = gw.url("/checkout");
        async move {
            client()
                .post(url)
                .bearer_auth(pass)
                .header("idempotency-key", format!("adaptive-key-{i:04}"))
                .json(&json!({"sku": "sneaker-42", "quantity": 1, "payment_method": "pm_ok"}))
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    for status in futures_util::future::join_all(checkouts).await {
        assert!(status.is_success(), "{status}");
    }
    // The checkouts took several 150 ms commits each, far above the 100 ms
    // target: the controller cuts the rate.
    let deadline = std::time::Instant::now() + REACT_WITHIN;
    let seen = loop {
        let room = room_state(&gw).await;
        if room["release_source"]["reason"] == "latency"
            && room["release_per_second"].as_u64().unwrap() < 100
        {
            break room;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the rate did not fall: {room}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let rate = seen["release_per_second"].as_u64().unwrap();
    assert!((20..=500).contains(&rate), "{seen}");
    let exact = seen["release_source"]["exact_per_second"].as_f64().unwrap();
    assert!((20.0..=500.0).contains(&exact), "{seen}");
    let metrics = gw.metrics_text().await;
    let limit = release_limit(&metrics, "latency");
    assert!(limit.is_some_and(|l| l < 100.0), "metric: {limit:?}");

    // An operator pins the rate by reload.
    gw.edit_config(|c| c.replace(ADAPTIVE, "7"));
    let pinned = eventually_await(REACT_WITHIN, || async {
        let room = room_state(&gw).await;
        room["release_source"]["kind"] == "fixed" && room["release_per_second"] == 7
    })
    .await;
    assert!(pinned.is_some(), "{}", room_state(&gw).await);
    let metrics = gw.metrics_text().await;
    assert_eq!(release_limit(&metrics, "fixed"), Some(7.0), "{metrics}");
}

/// Checkouts refused with `503 overloaded` because the checkout pool is
/// full count as backend failures: the rate falls with reason `errors`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_checkout_pool_is_a_backend_failure() {
    let gw = Gateway::start(GatewayOptions {
        extra_gateway: "checkouts_in_flight_max = 1\n".into(),
        rest: format!("[payments]\nsimulated_slow_ms = 3000\n{}", config(ADAPTIVE)),
        ..Default::default()
    });
    let base = gw.url("");
    let (holder, refused) = (
        admitted_pass(&base, &client(), "drop").await,
        admitted_pass(&base, &client(), "drop").await,
    );
    let checkout = |pass: String, key: String, method: &'static str| {
        let url = gw.url("/checkout");
        async move {
            client()
                .post(url)
                .bearer_auth(pass)
                .header("idempotency-key", key)
                .json(&json!({"sku": "sneaker-42", "quantity": 1, "payment_method": method}))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    let slow = tokio::spawn(checkout(holder, "holder-key-1".into(), "pm_slow"));
    let started = eventually_await(REACT_WITHIN, || async {
        gw.admin_json("/admin/state")["orders"]["authorizing"] == 1
    })
    .await;
    assert!(started.is_some(), "the slow checkout never started");
    for i in 0..8 {
        let status = checkout(refused.clone(), format!("refused-key-{i}"), "pm_ok").await;
        assert_eq!(status.as_u16(), 503, "refused at once");
    }
    let fell = eventually_await(REACT_WITHIN, || async {
        let room = room_state(&gw).await;
        room["release_source"]["reason"] == "errors"
            && room["release_per_second"].as_u64() < Some(100)
    })
    .await;
    assert!(fell.is_some(), "{}", room_state(&gw).await);
    assert!(slow.await.unwrap().is_success());
}
