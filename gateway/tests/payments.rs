//! Payments over real HTTP against `paysim`, a provider that misbehaves on
//! purpose: lost responses, duplicated and reordered webhooks, bad and stale
//! signatures, secret rotation, a crash during capture.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use sluice_loadtest::paysim::{self, Faults, WebhookTarget};

const SECRET: &str = "whsec_current_0123456789";
const OLD_SECRET: &str = "whsec_previous_0123456789";

/// paysim on its own thread and runtime, on a port it bound itself; stops
/// when dropped.
struct Paysim {
    server: paysim::Background,
}

fn paysim_config(webhook_url: Option<String>, secrets: &[&str], faults: Faults) -> paysim::Config {
    paysim::Config {
        seed: 11,
        faults,
        limits: Default::default(),
        webhook: webhook_url.map(|url| WebhookTarget {
            url,
            secrets: secrets.iter().map(|s| s.to_string()).collect(),
        }),
    }
}

impl Paysim {
    fn start(faults: Faults) -> Paysim {
        let config = paysim_config(None, &[], faults);
        Paysim {
            server: paysim::Background::start(config).unwrap(),
        }
    }

    fn url(&self) -> String {
        self.server.url()
    }

    async fn get(&self, path: &str) -> Value {
        client()
            .get(format!("{}{path}", self.url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn ledger(&self) -> Vec<Value> {
        self.get("/ledger").await["payments"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// Capture answers held by `hold_captures` right now.
    async fn captures_held(&self) -> u64 {
        self.get("/admin/held").await["captures"].as_u64().unwrap()
    }

    async fn set_faults(&self, faults: &Faults) {
        let r = client()
            .put(format!("{}/admin/faults", self.url()))
            .json(faults)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
}

/// A gateway whose payments go to `paysim_url` over HTTP, each call given
/// `timeout_ms`.
fn gateway(paysim_url: &str, secrets: &[&str], timeout_ms: u32) -> Gateway {
    let secrets: Vec<String> = secrets.iter().map(|s| format!("\"{s}\"")).collect();
    let key = String::from_utf8(
        std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("keygen")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    Gateway::start(GatewayOptions {
        rest: format!(
            "{key}[payments]\nprovider = \"http\"\nurl = \"{paysim_url}\"\ntimeout_ms = {timeout_ms}\nwebhook_secrets = [{}]\n\
             [[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\", \"/orders/*\"]\nrelease_per_second = 50\nmax_active = 50\nmax_orders_per_pass = 20\nqueue_capacity = 100\npoll_min_s = 1\npoll_max_s = 5\n\
             [[products]]\nsku = \"hot\"\nstock = 20\nprice_cents = 1000\nroom = \"drop\"\n",
            secrets.join(", ")
        ),
        ..Default::default()
    })
}

async fn checkout(gw: &Gateway, pass: &str, key: &str, pm: &str) -> Value {
    client()
        .post(gw.url("/checkout"))
        .bearer_auth(pass)
        .header("idempotency-key", key)
        .json(&json!({"sku": "hot", "quantity": 1, "payment_method": pm}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn order_state(gw: &Gateway, pass: &str, id: &str) -> String {
    let v: Value = client()
        .get(gw.url(&format!("/orders/{id}")))
        .bearer_auth(pass)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["state"].as_str().unwrap().to_string()
}

async fn wait_for_state(
    gw: &Gateway,
    pass: &str,
    id: &str,
    want: &str,
    within: Duration,
) -> String {
    let deadline = std::time::Instant::now() + within;
    let mut state = String::new();
    while std::time::Instant::now() < deadline {
        state = order_state(gw, pass, id).await;
        if state == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    state
}

fn sign(secret: &str, t: i64, body: &str) -> String {
    sluice_checkout::webhook::sign(secret.as_bytes(), t, body.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_authorization_answer_is_looked_up_not_declined_nor_charged_twice() {
    let paysim = Paysim::start(Faults {
        timeout_hold_ms: 3_000,
        ..Faults::default()
    });
    let gw = gateway(&paysim.url(), &[SECRET], 800);
    let pass = admitted_pass(&gw.url(""), &client(), "drop").await;
    let order = checkout(&gw, &pass, "key-lost-0001", "pm_lost_response").await;
    let id = order["order_id"]
        .as_str()
        .expect("an order, whatever the provider did")
        .to_string();
    assert_ne!(
        order["state"], "declined",
        "a timeout is never an assumed decline"
    );
    let state = wait_for_state(&gw, &pass, &id, "confirmed", Duration::from_secs(15)).await;
    assert_eq!(state, "confirmed");
    let ledger = paysim.ledger().await;
    let mine: Vec<&Value> = ledger
        .iter()
        .filter(|p| p["order_id"] == id.as_str())
        .collect();
    assert_eq!(mine.len(), 1, "one payment for the order: {ledger:?}");
    assert_eq!(mine[0]["captures"], 1);
    assert!(gw.metric("sluice_payment_ambiguous_total").unwrap() >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicated_and_reordered_webhooks_change_nothing_twice() {
    let faults = Faults {
        webhook_duplicate_ratio: 1.0,
        webhook_reorder_window: 4,
        ..Faults::default()
    };
    // The simulator's port first, then the gateway that calls it, then the
    // simulator that calls the gateway back.
    let bound = paysim::Bound::new().unwrap();
    let gw = gateway(&bound.url(), &[SECRET], 800);
    let config = paysim_config(Some(gw.url("/webhooks/paysim")), &[SECRET], faults);
    let paysim = Paysim {
        server: bound.serve(config).unwrap(),
    };
    let pass = admitted_pass(&gw.url(""), &client(), "drop").await;
    let mut ids = Vec::new();
    for i in 0..4 {
        let method = if i == 3 { "pm_decline" } else { "pm_ok" };
        let order = checkout(&gw, &pass, &format!("key-webhooks-{i:04}"), method).await;
        ids.push((
            order["order_id"].as_str().unwrap().to_string(),
            order["state"].as_str().unwrap().to_string(),
        ));
    }
    let dupes = eventually_async(Duration::from_secs(10), || {
        gw.metric("sluice_webhook_events_total{result=\"duplicate\"}")
            .unwrap_or(0.0)
            >= 4.0
    })
    .await;
    assert!(
        dupes.is_some(),
        "duplicates arrived and were recognised; log:\n{}",
        gw.log()
    );
    for (id, said) in &ids {
        assert_eq!(
            &order_state(&gw, &pass, id).await,
            said,
            "a webhook changed order {id}"
        );
    }
    for p in paysim.ledger().await {
        assert!(p["captures"].as_u64().unwrap() <= 1, "captured twice: {p}");
    }
    let stock = &gw.admin_json("/admin/state")["inventory"][0];
    assert_eq!(stock["committed"], 3);
    assert_eq!(stock["available"], 17);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_and_stale_signatures_are_refused_and_rotation_accepts_both_secrets() {
    let paysim = Paysim::start(Faults::default());
    let gw = gateway(&paysim.url(), &[SECRET, OLD_SECRET], 800);
    let body = r#"{"id":"evt_test_1","type":"payment.authorized","created":1,"data":{"payment_id":"pay_unknown","order_id":"ord_unknown","amount_cents":1000}}"#;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let post = |sig: String| {
        client()
            .post(gw.url("/webhooks/paysim"))
            .header("sluice-signature", sig)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let r = post(sign("whsec_someone_else_0000000", now, body))
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "a signature from another secret");
    let r = post(sign(SECRET, now - 3600, body)).await.unwrap();
    assert_eq!(r.status(), 401, "a signature from an hour ago");
    let r = post(String::new()).await.unwrap();
    assert_eq!(r.status(), 401, "no signature");
    let r = post(sign(OLD_SECRET, now, body)).await.unwrap();
    assert_eq!(
        r.status(),
        200,
        "the previous secret still verifies during rotation"
    );
    let r = post(sign(SECRET, now, body)).await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["result"], "duplicate",
        "the same event id changes nothing the second time"
    );
    assert!(
        gw.metric("sluice_webhook_events_total{result=\"invalid_signature\"}")
            .unwrap()
            >= 1.0
    );
    assert!(
        gw.metric("sluice_webhook_events_total{result=\"stale\"}")
            .unwrap_or(0.0)
            + gw.metric("sluice_webhook_events_total{result=\"invalid_signature\"}")
                .unwrap()
            >= 2.0
    );
    let r = client()
        .get(gw.url("/webhooks/paysim"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_capture_ends_confirmed_once_after_restart() {
    // paysim processes the capture and holds its answer: the gateway is
    // killed once the capture has reached the provider and before the
    // gateway heard back, whatever the machine's speed. The call timeout
    // is long so the gateway is still waiting on that answer when it dies.
    let paysim = Paysim::start(Faults {
        hold_captures: true,
        ..Faults::default()
    });
    let mut gw = gateway(&paysim.url(), &[SECRET], 20_000);
    let pass = admitted_pass(&gw.url(""), &client(), "drop").await;
    let c = client();
    let url = gw.url("/checkout");
    let inflight = tokio::spawn({
        let pass = pass.clone();
        async move {
            c.post(url)
                .bearer_auth(pass)
                .header("idempotency-key", "key-crash-capture")
                .json(&json!({"sku": "hot", "quantity": 1, "payment_method": "pm_ok"}))
                .send()
                .await
        }
    });
    let sim = &paysim;
    let held = eventually_await(Duration::from_secs(20), || async move {
        sim.captures_held().await == 1
    })
    .await;
    assert!(
        held.is_some(),
        "the capture never reached paysim; log:\n{}",
        gw.log()
    );
    tokio::task::block_in_place(|| gw.kill9());
    let ledger = paysim.ledger().await;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(
        ledger[0]["captures"], 1,
        "the provider captured; the gateway never heard: {ledger:?}"
    );
    // Captures are answered at once from here on; the answer held for the
    // dead connection goes nowhere.
    paysim.set_faults(&Faults::default()).await;
    let released = eventually_await(Duration::from_secs(5), || async move {
        sim.captures_held().await == 0
    })
    .await;
    assert!(released.is_some());
    tokio::task::block_in_place(|| gw.restart());
    assert!(
        inflight.await.unwrap().is_err(),
        "the shopper's connection died with the gateway"
    );

    // The shopper retries with the same key, as told: the key of a request
    // that died is `409` until it is taken over (30 s); meanwhile the
    // reconciler finishes the payment.
    let deadline = std::time::Instant::now() + Duration::from_secs(45);
    let order = loop {
        let order = checkout(&gw, &pass, "key-crash-capture", "pm_ok").await;
        if order["error"] != "idempotency_conflict" {
            break order;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the key stayed locked: {order}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let id = order["order_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no order: {order}"))
        .to_string();
    let state = wait_for_state(&gw, &pass, &id, "confirmed", Duration::from_secs(30)).await;
    assert_eq!(state, "confirmed");
    let ledger = paysim.ledger().await;
    let mine: Vec<&Value> = ledger
        .iter()
        .filter(|p| p["order_id"] == id.as_str())
        .collect();
    assert_eq!(mine.len(), 1);
    assert_eq!(
        mine[0]["captures"], 1,
        "captured exactly once across the crash"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["audit", "--data-dir"])
        .arg(gw.dir.path().join("var"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "audit: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}
