//! Checkout through the real gateway: a pass, an Idempotency-Key, an order
//! that reaches its outcome, and books that add up.

mod common;

use std::time::Duration;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Passes here may start several checkouts (a decline, then a purchase);
/// `tests/pass_limits.rs` covers the default of one.
fn config(stock: u32) -> String {
    format!(
        "[[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\", \"/orders/*\"]\nrelease_per_second = 50\nmax_active = 10\nmax_orders_per_pass = 10\nqueue_capacity = 100\npoll_min_s = 1\npoll_max_s = 5\n\
         [[rooms]]\nname = \"other\"\nrelease_per_second = 50\nmax_active = 10\nqueue_capacity = 100\npoll_min_s = 1\npoll_max_s = 5\n\
         [[products]]\nsku = \"sneaker-42\"\nstock = {stock}\nprice_cents = 19900\nroom = \"drop\"\n\
         [[products]]\nsku = \"cap-one\"\nstock = 5\nprice_cents = 7900\nroom = \"other\"\n"
    )
}

fn gateway(stock: u32) -> Gateway {
    Gateway::start(GatewayOptions {
        rest: config(stock),
        ..Default::default()
    })
}

/// Joins `room` and waits for the pass.
async fn pass(gw: &Gateway, room: &str) -> String {
    admitted_pass(&gw.url(""), &client(), room).await
}

async fn checkout(gw: &Gateway, pass: &str, key: &str, body: Value) -> reqwest::Response {
    client()
        .post(gw.url("/checkout"))
        .bearer_auth(pass)
        .header("idempotency-key", key)
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn order(sku: &str, quantity: u32, pm: &str) -> Value {
    json!({"sku": sku, "quantity": quantity, "payment_method": pm})
}

fn inventory(gw: &Gateway, sku: &str) -> Value {
    let state = gw.admin_json("/admin/state");
    state["inventory"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["sku"] == sku)
        .unwrap()
        .clone()
}

#[tokio::test]
async fn a_paid_checkout_is_confirmed_once_and_replayed_by_its_key() {
    let gw = gateway(10);
    let pass = pass(&gw, "drop").await;
    assert_eq!(gw.admin_json("/admin/state")["rooms"][0]["active"], 1);

    let r = checkout(&gw, &pass, "key-0001-aaaa", order("sneaker-42", 2, "pm_ok")).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let first: Value = r.json().await.unwrap();
    for key in [
        "order_id",
        "sku",
        "quantity",
        "state",
        "created_at",
        "reservation_expires_at",
        "payment",
    ] {
        assert!(first.get(key).is_some(), "order lacks {key}: {first}");
    }
    assert_eq!(first["state"], "confirmed");
    assert!(first["payment"]["state"].is_string());

    // The connection dropped; the shopper sends it again.
    let r = checkout(&gw, &pass, "key-0001-aaaa", order("sneaker-42", 2, "pm_ok")).await;
    assert_eq!(r.status(), StatusCode::OK);
    let replay: Value = r.json().await.unwrap();
    assert_eq!(replay["order_id"], first["order_id"]);
    // Same key, another order: refused.
    let r = checkout(&gw, &pass, "key-0001-aaaa", order("sneaker-42", 3, "pm_ok")).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"],
        "idempotency_mismatch"
    );

    let stock = inventory(&gw, "sneaker-42");
    assert_eq!(
        (stock["available"].as_i64(), stock["committed"].as_i64()),
        (Some(8), Some(2))
    );
    let orders = gw.admin_json("/admin/state")["orders"].clone();
    assert_eq!(orders["confirmed"], 1);
    // The order reached its outcome, but the pass may start more
    // (max_orders_per_pass = 10): it keeps its active slot.
    assert_eq!(gw.admin_json("/admin/state")["rooms"][0]["active"], 1);

    // Visible to its pass, and to no one else.
    let id = first["order_id"].as_str().unwrap();
    let r = client()
        .get(gw.url(&format!("/orders/{id}")))
        .bearer_auth(&pass)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().await.unwrap()["order_id"], id);
    let stranger = self::pass(&gw, "drop").await;
    let r = client()
        .get(gw.url(&format!("/orders/{id}")))
        .bearer_auth(&stranger)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    assert_eq!(
        gw.metric("sluice_checkout_total{result=\"confirmed\",room=\"drop\"}"),
        Some(2.0),
        "first call and the replay"
    );
    assert_eq!(
        gw.metric("sluice_reservations_total{result=\"reserved\",sku=\"sneaker-42\"}"),
        Some(1.0)
    );
    assert_eq!(
        gw.metric("sluice_inventory_units{sku=\"sneaker-42\",state=\"committed\"}"),
        Some(2.0)
    );

    // The outbox relay publishes the event to the JSON-lines sink.
    let outbox = gw.dir.path().join("var").join("outbox.jsonl");
    let published = eventually_async(Duration::from_secs(3), || {
        std::fs::read_to_string(&outbox)
            .is_ok_and(|t| t.contains("order.confirmed") && t.contains(id))
    })
    .await;
    assert!(
        published.is_some(),
        "order.confirmed not published to {}",
        outbox.display()
    );
}

#[tokio::test]
async fn a_declined_card_releases_the_stock_and_cancel_refunds_a_paid_order() {
    let gw = gateway(10);
    let pass = pass(&gw, "drop").await;
    let declined: Value = checkout(
        &gw,
        &pass,
        "key-decline-1",
        order("sneaker-42", 3, "pm_decline"),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(declined["state"], "declined");
    assert_eq!(
        inventory(&gw, "sneaker-42")["available"],
        10,
        "declined stock goes back on sale"
    );

    let paid: Value = checkout(&gw, &pass, "key-paid-0001", order("sneaker-42", 1, "pm_ok"))
        .await
        .json()
        .await
        .unwrap();
    let id = paid["order_id"].as_str().unwrap();
    let r = client()
        .post(gw.url(&format!("/orders/{id}/cancel")))
        .bearer_auth(&pass)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let cancelled: Value = r.json().await.unwrap();
    assert!(
        ["refunded", "refunding"].contains(&cancelled["state"].as_str().unwrap()),
        "{cancelled}"
    );
    // Cancel is idempotent.
    let again: Value = client()
        .post(gw.url(&format!("/orders/{id}/cancel")))
        .bearer_auth(&pass)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["state"], cancelled["state"]);
    let stock = inventory(&gw, "sneaker-42");
    assert_eq!(
        stock["available"].as_i64().unwrap()
            + stock["reserved"].as_i64().unwrap()
            + stock["committed"].as_i64().unwrap(),
        10
    );

    // The books add up, checked offline by the CLI while the gateway runs.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["audit", "--data-dir"])
        .arg(gw.dir.path().join("var"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "audit: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn bad_checkouts_get_clear_errors() {
    let gw = gateway(10);
    let c = client();
    // No pass.
    let r = c
        .post(gw.url("/checkout"))
        .header("idempotency-key", "key-nopass-1")
        .json(&order("sneaker-42", 1, "pm_ok"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(r.json::<Value>().await.unwrap()["join"], "/queue/drop/join");
    let pass = pass(&gw, "drop").await;
    // No key, a short key, a key with a space.
    for key in [None, Some("short"), Some("has space inside")] {
        let mut req =
            c.post(gw.url("/checkout"))
                .bearer_auth(&pass)
                .json(&order("sneaker-42", 1, "pm_ok"));
        if let Some(k) = key {
            req = req.header("idempotency-key", k);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{key:?}");
        assert_eq!(r.json::<Value>().await.unwrap()["error"], "bad_request");
    }
    // A body that is not an order.
    let r = c
        .post(gw.url("/checkout"))
        .bearer_auth(&pass)
        .header("idempotency-key", "key-badbody-1")
        .body("{\"sku\": 5}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = checkout(
        &gw,
        &pass,
        "key-zero-qty-1",
        order("sneaker-42", 0, "pm_ok"),
    )
    .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = checkout(&gw, &pass, "key-unknown-1", order("nope", 1, "pm_ok")).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // A pass of this room does not buy the other room's product.
    let r = checkout(&gw, &pass, "key-otherroom", order("cap-one", 1, "pm_ok")).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "forbidden");
    // Wrong method.
    let r = c
        .get(gw.url("/checkout"))
        .bearer_auth(&pass)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    // A huge body.
    let r = c
        .post(gw.url("/checkout"))
        .bearer_auth(&pass)
        .header("idempotency-key", "key-huge-0001")
        .body(vec![b' '; 20_000])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let stock = inventory(&gw, "sneaker-42");
    assert_eq!(stock["available"], 10, "nothing refused touched the stock");
}

#[tokio::test]
async fn the_last_unit_sells_once_then_the_room_is_sold_out() {
    let gw = gateway(1);
    let a = pass(&gw, "drop").await;
    let b = pass(&gw, "drop").await;
    let (ra, rb) = tokio::join!(
        checkout(&gw, &a, "key-race-aaaa", order("sneaker-42", 1, "pm_ok")),
        checkout(&gw, &b, "key-race-bbbb", order("sneaker-42", 1, "pm_ok"))
    );
    let states: Vec<String> = vec![
        ra.json::<Value>().await.unwrap()["state"]
            .as_str()
            .unwrap()
            .to_string(),
        rb.json::<Value>().await.unwrap()["state"]
            .as_str()
            .unwrap()
            .to_string(),
    ];
    let mut sorted = states.clone();
    sorted.sort();
    assert_eq!(sorted, vec!["confirmed", "rejected"], "{states:?}");
    let r = client()
        .post(gw.url("/queue/drop/join"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::GONE,
        "nothing left: joins get sold_out"
    );
}

#[tokio::test]
async fn operators_adjust_stock_with_a_reason() {
    let gw = gateway(10);
    let c = client();
    let r = c
        .post(gw.admin_url("/admin/inventory/sneaker-42/adjust"))
        .json(&json!({"delta": 5, "reason": "found a box"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let level: Value = r.json().await.unwrap();
    assert_eq!(
        (level["total"].as_i64(), level["available"].as_i64()),
        (Some(15), Some(15))
    );
    let r = c
        .post(gw.admin_url("/admin/inventory/sneaker-42/adjust"))
        .json(&json!({"delta": -100, "reason": "oops"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::BAD_REQUEST,
        "cannot take more than is available"
    );
    let r = c
        .post(gw.admin_url("/admin/inventory/sneaker-42/adjust"))
        .json(&json!({"delta": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "a reason is required");
    let r = c
        .post(gw.admin_url("/admin/inventory/nope/adjust"))
        .json(&json!({"delta": 1, "reason": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(inventory(&gw, "sneaker-42")["total"], 15);

    // A reload with another stock number does not reset a known SKU: once
    // the reload has been applied, the total is still the adjusted one.
    let reloads = || gw.metric("sluice_config_reloads_total{result=\"success\"}");
    let before = reloads().unwrap_or(0.0);
    gw.edit_config(|t| t.replace("stock = 10", "stock = 99"));
    let applied =
        eventually_async(Duration::from_secs(5), || reloads().unwrap_or(0.0) > before).await;
    assert!(
        applied.is_some(),
        "the reload never ran; log:\n{}",
        gw.log()
    );
    assert_eq!(inventory(&gw, "sneaker-42")["total"], 15);
}

#[tokio::test]
async fn racing_duplicates_of_one_key_make_one_order() {
    let gw = gateway(10);
    let pass = pass(&gw, "drop").await;
    let attempts = (0..24).map(|_| {
        checkout(
            &gw,
            &pass,
            "key-race-same-1",
            order("sneaker-42", 1, "pm_ok"),
        )
    });
    let answers = futures_util::future::join_all(attempts).await;
    let mut ids = std::collections::HashSet::new();
    let mut created = 0;
    for r in answers {
        match r.status().as_u16() {
            201 => {
                created += 1;
                ids.insert(
                    r.json::<Value>().await.unwrap()["order_id"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                );
            }
            200 => {
                ids.insert(
                    r.json::<Value>().await.unwrap()["order_id"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                );
            }
            // The key in flight (409), or the pass's third call at once
            // (429: a pass has at most two calls in flight).
            409 | 429 => assert!(r.headers().contains_key("retry-after")),
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(created, 1, "exactly one request created the order");
    assert_eq!(ids.len(), 1, "every answer names the same order");
    let orders = gw.admin_json("/admin/state")["orders"].clone();
    let total: u64 = orders
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(total, 1);
    assert_eq!(inventory(&gw, "sneaker-42")["committed"], 1);
}

#[tokio::test]
async fn events_reach_the_storefront_over_http_despite_failures() {
    let origin = Origin::start();
    let gw = Gateway::start(GatewayOptions {
        rest: format!(
            "{}[outbox]\nurl = \"{}/outbox\"\ntimeout_ms = 2000\n",
            config(10),
            origin.url()
        ),
        ..Default::default()
    });
    let pass = pass(&gw, "drop").await;
    let order: Value = checkout(&gw, &pass, "key-outbox-01", order("sneaker-42", 1, "pm_ok"))
        .await
        .json()
        .await
        .unwrap();
    let id = order["order_id"].as_str().unwrap().to_string();
    // Refused twice, then delivered: the relay retried with backoff.
    let delivered = eventually_async(Duration::from_secs(8), || {
        origin
            .outbox
            .lock()
            .unwrap()
            .iter()
            .any(|b| b.contains("order.confirmed") && b.contains(&id))
    })
    .await;
    assert!(
        delivered.is_some(),
        "order.confirmed never reached the storefront; log:\n{}",
        gw.log()
    );
    let bodies = origin.outbox.lock().unwrap().clone();
    let events: Value = serde_json::from_str(&bodies[0]).unwrap();
    assert!(events["events"][0]["id"]
        .as_str()
        .unwrap()
        .starts_with("evt_"));
    assert!(
        gw.log().contains("outbox relay"),
        "the failures were logged"
    );
    let pending = eventually_async(Duration::from_secs(3), || {
        gw.metric("sluice_outbox_pending") == Some(0.0)
    })
    .await;
    assert!(pending.is_some());
}
