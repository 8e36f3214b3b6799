//! A pass is a bounded right, through the real gateway: `max_orders_per_pass`
//! holds under a race of fresh keys, `max_active` bounds the passes able to
//! buy at once whatever earlier passes did, and `max_per_order` bounds units.

mod common;

use std::time::Duration;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

fn gateway(max_active: u32, orders_per_pass: u32, product_extra: &str) -> Gateway {
    Gateway::start(GatewayOptions {
        rest: format!(
            "[[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\", \"/orders/*\"]\nrelease_per_second = 50\nmax_active = {max_active}\nmax_orders_per_pass = {orders_per_pass}\nqueue_capacity = 100\npoll_min_s = 1\npoll_max_s = 5\n\
             [[products]]\nsku = \"hot\"\nstock = 100\nprice_cents = 100\nroom = \"drop\"\n{product_extra}"
        ),
        ..Default::default()
    })
}

async fn checkout(gw: &Gateway, pass: &str, key: &str, quantity: u32) -> (StatusCode, Value) {
    let r = client()
        .post(gw.url("/checkout"))
        .bearer_auth(pass)
        .header("idempotency-key", key)
        .json(&json!({"sku": "hot", "quantity": quantity, "payment_method": "pm_ok"}))
        .send()
        .await
        .unwrap();
    let status = r.status();
    (status, r.json().await.unwrap())
}

async fn join(gw: &Gateway) -> String {
    let joined: Value = client()
        .post(gw.url("/queue/drop/join"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    joined["ticket"].as_str().unwrap().to_string()
}

/// The status of `ticket`, asking again after `Retry-After` while it is
/// told it came too early (at most `poll_max_s` of the room, 5 s).
async fn status_as_told(gw: &Gateway, ticket: &str) -> Value {
    for _ in 0..5 {
        let st = status(gw, ticket).await;
        if st["error"] != "rate_limited" {
            return st;
        }
        let after = st["retry_after_s"].as_u64().unwrap_or(1);
        tokio::time::sleep(Duration::from_secs(after)).await;
    }
    panic!("still too early after five answers");
}

async fn status(gw: &Gateway, ticket: &str) -> Value {
    client()
        .get(gw.url("/queue/drop/status"))
        .bearer_auth(ticket)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn active(gw: &Gateway) -> u64 {
    gw.admin_json("/admin/state")["rooms"][0]["active"]
        .as_u64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_racing_keys_on_one_pass_create_exactly_max_orders_per_pass() {
    let gw = gateway(5, 3, "");
    let pass = admitted_pass(&gw.url(""), &client(), "drop").await;
    let tries = (0..20).map(|i| {
        let (url, pass) = (gw.url("/checkout"), pass.clone());
        tokio::spawn(async move {
            // A pass has at most two calls in flight on a gateway: the
            // others are told `429` and try again, as a client would.
            loop {
                let r = client()
                    .post(&url)
                    .bearer_auth(&pass)
                    .header("idempotency-key", format!("race-key-{i:03}"))
                    .json(&json!({"sku": "hot", "quantity": 1, "payment_method": "pm_ok"}))
                    .send()
                    .await
                    .unwrap();
                let status = r.status();
                if status != StatusCode::TOO_MANY_REQUESTS {
                    return (i, status, r.json::<Value>().await.unwrap());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    });
    let answers: Vec<(usize, StatusCode, Value)> = futures_util::future::join_all(tries)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let created: Vec<&(usize, StatusCode, Value)> = answers
        .iter()
        .filter(|(_, s, _)| *s == StatusCode::CREATED)
        .collect();
    assert_eq!(created.len(), 3, "{answers:?}");
    for (_, status, body) in answers.iter().filter(|(_, s, _)| *s != StatusCode::CREATED) {
        assert_eq!(*status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["error"], "purchase_limit", "{body}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    let state = gw.admin_json("/admin/state");
    assert_eq!(state["inventory"][0]["committed"], 3, "{state}");
    // Spent, the pass still reads and cancels its own orders.
    for (_, _, order) in &created {
        let id = order["order_id"].as_str().unwrap();
        let r = client()
            .get(gw.url(&format!("/orders/{id}")))
            .bearer_auth(&pass)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    let id = created[0].2["order_id"].as_str().unwrap();
    let r = client()
        .post(gw.url(&format!("/orders/{id}/cancel")))
        .bearer_auth(&pass)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let cancelled: Value = r.json().await.unwrap();
    assert_eq!(cancelled["state"], "refunded", "{cancelled}");
    // Its keys still replay; a new key is refused.
    let used = format!("race-key-{:03}", created[1].0);
    let (status, replay) = checkout(&gw, &pass, &used, 1).await;
    assert_eq!(status, StatusCode::OK, "{replay}");
    assert_eq!(replay["order_id"], created[1].2["order_id"]);
    let (status, body) = checkout(&gw, &pass, "race-key-new", 1).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("purchase_limit"))
    );
    assert_eq!(
        gw.metric("sluice_checkout_total{result=\"purchase_limit\",room=\"drop\"}"),
        Some(18.0),
        "every refusal is counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spent_pass_gives_its_slot_back_and_cannot_buy_again() {
    // The review's reproduction: max_active 2, two passes buy, a third
    // shopper is let in; the first two must not be able to buy any more.
    let gw = gateway(2, 1, "");
    let (base, http) = (gw.url(""), client());
    let (a, b) = tokio::join!(
        admitted_pass(&base, &http, "drop"),
        admitted_pass(&base, &http, "drop")
    );
    let c = join(&gw).await;
    assert_eq!(active(&gw), 2);
    // With both slots held, c's estimate counts the passes' lifetimes, so
    // it is told to come back later than `poll_min_s`: it asks as told.
    assert_eq!(
        status_as_told(&gw, &c).await["state"],
        "waiting",
        "the room is full"
    );

    let (s, order) = checkout(&gw, &a, "a-first-key", 5).await;
    assert_eq!(
        (s, order["state"].as_str()),
        (StatusCode::CREATED, Some("confirmed"))
    );
    // a's right is spent: its slot goes back, c gets in.
    let mut c_pass = None;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let st = status(&gw, &c).await;
        if st["state"] == "admitted" {
            c_pass = st["pass"].as_str().map(str::to_string);
            break;
        }
    }
    let c_pass = c_pass.expect("c is let in once a's right is spent");
    assert!(active(&gw) <= 2);
    // Three signed passes exist; only two may start a checkout.
    let (s, body) = checkout(&gw, &a, "a-second-key", 5).await;
    assert_eq!(
        (s, body["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("purchase_limit")),
        "{body}"
    );
    let (s, _) = checkout(&gw, &b, "b-first-key", 5).await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, _) = checkout(&gw, &c_pass, "c-first-key", 5).await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, body) = checkout(&gw, &b, "b-second-key", 5).await;
    assert_eq!(
        (s, body["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("purchase_limit"))
    );
    let state = gw.admin_json("/admin/state");
    assert_eq!(state["inventory"][0]["committed"], 15, "{state}");
}

#[tokio::test]
async fn units_per_order_are_bounded_per_product() {
    let gw = gateway(5, 5, "max_per_order = 2\n");
    let pass = admitted_pass(&gw.url(""), &client(), "drop").await;
    let (s, body) = checkout(&gw, &pass, "units-key-1", 3).await;
    assert_eq!(
        (s, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request"))
    );
    assert!(body["message"].as_str().unwrap().contains('2'), "{body}");
    let (s, _) = checkout(&gw, &pass, "units-key-2", 2).await;
    assert_eq!(s, StatusCode::CREATED);
    // The default is 10.
    let gw = gateway(5, 5, "");
    let pass = admitted_pass(&gw.url(""), &client(), "drop").await;
    let (s, _) = checkout(&gw, &pass, "units-key-3", 11).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = checkout(&gw, &pass, "units-key-4", 10).await;
    assert_eq!(s, StatusCode::CREATED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checkouts_beyond_the_in_flight_bound_are_refused_at_once() {
    let gw = Gateway::start(GatewayOptions {
        extra_gateway: "checkouts_in_flight_max = 3\n".into(),
        rest: "[payments]\nsimulated_slow_ms = 3000\n\
               [[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\", \"/orders/*\"]\nrelease_per_second = 50\nmax_active = 5\nmax_orders_per_pass = 10\nqueue_capacity = 100\npoll_min_s = 1\npoll_max_s = 5\n\
               [[products]]\nsku = \"hot\"\nstock = 100\nprice_cents = 100\nroom = \"drop\"\n"
            .into(),
        ..Default::default()
    });
    let pass = admitted_pass(&gw.url(""), &client(), "drop").await;
    let other = admitted_pass(&gw.url(""), &client(), "drop").await;
    let slow = |i: usize, pass: &str| {
        let (url, pass) = (gw.url("/checkout"), pass.to_string());
        tokio::spawn(async move {
            client()
                .post(url)
                .bearer_auth(&pass)
                .header("idempotency-key", format!("slow-key-{i}"))
                .json(&json!({"sku": "hot", "quantity": 1, "payment_method": "pm_slow"}))
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    // Two of one pass (as many as a pass may have in flight) and one of
    // another fill the pool.
    let running = [slow(0, &pass), slow(1, &pass), slow(2, &other)];
    // The slow checkouts hold their permits once their orders exist.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while gw.admin_json("/admin/state")["orders"]["authorizing"] != 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the slow checkouts never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The first pass's third call is refused by the pass's own bound,
    // before any pool: even a read of its orders.
    for (path, key) in [("/checkout", Some("gate-key-1")), ("/orders/x", None)] {
        let mut request = if key.is_some() {
            client().post(gw.url(path))
        } else {
            client().get(gw.url(path))
        };
        request = request.bearer_auth(&pass);
        if let Some(key) = key {
            request = request
                .header("idempotency-key", key)
                .json(&json!({"sku": "hot", "quantity": 1, "payment_method": "pm_ok"}));
        }
        let r = request.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS, "{path}");
        assert_eq!(r.headers()["retry-after"], "1");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "rate_limited", "{body}");
    }
    // A body the core would refuse is refused before the pool: `400`,
    // not `503`, while every permit is taken.
    for body in [
        json!({"sku": "hot", "quantity": 0, "payment_method": "pm_ok"}),
        json!({"sku": "hot", "quantity": 1, "payment_method": ""}),
    ] {
        let r = client()
            .post(gw.url("/checkout"))
            .bearer_auth(&other)
            .header("idempotency-key", "bad-body-key")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{body}");
    }
    // The other pass's second call finds the pool full.
    let started = std::time::Instant::now();
    let r = client()
        .post(gw.url("/checkout"))
        .bearer_auth(&other)
        .header("idempotency-key", "third-key-1")
        .json(&json!({"sku": "hot", "quantity": 1, "payment_method": "pm_ok"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused at once, not queued"
    );
    assert_eq!(r.headers()["retry-after"], "1");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "overloaded", "{body}");
    for t in running {
        assert_eq!(t.await.unwrap(), StatusCode::CREATED);
    }
    // The permits are back: the same key now goes through.
    let (s, _) = checkout(&gw, &other, "third-key-1", 1).await;
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(
        gw.metric("sluice_checkout_total{result=\"rate_limited\",room=\"drop\"}"),
        Some(1.0),
        "the refused checkout is counted"
    );
}
