//! The real `sluice` process under concurrent checkouts, killed with SIGKILL
//! at random moments and started again: nothing acknowledged is lost, no
//! unit stays held past its expiry, and the books add up.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

const SHOPPERS: usize = 12;
const KILLS: usize = 3;
const STOCK: i64 = 400;

/// What the gateway acknowledged: order id → (pass, state it said).
type Acked = Arc<Mutex<HashMap<String, (String, String)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_checkouts_loses_nothing_acknowledged() {
    let key = String::from_utf8(
        std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("keygen")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let mut gw = Gateway::start(GatewayOptions {
        rest: format!(
            "{key}[[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\", \"/orders/*\"]\nrelease_per_second = 100\nmax_active = 100\nmax_orders_per_pass = 1000\nqueue_capacity = 100\npoll_min_s = 1\npoll_max_s = 5\nreservation_ttl_s = 2\n\
             [[products]]\nsku = \"hot\"\nstock = {STOCK}\nprice_cents = 100\nroom = \"drop\"\n"
        ),
        ..Default::default()
    });
    let url = format!("http://{}", gw.listen);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let acked: Acked = Arc::default();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);

    for round in 0..KILLS {
        // Each round shops with fresh passes (the old ones keep their
        // slots across the restart too: `durable.rs`), and the old ones
        // keep reading their orders below.
        let mut passes = Vec::new();
        for _ in 0..SHOPPERS {
            passes.push(admitted_pass(&url, &client, "drop"));
        }
        let passes: Vec<String> = futures_util::future::join_all(passes).await;
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for (i, pass) in passes.iter().enumerate() {
            let (client, url, pass, acked, stop) = (
                client.clone(),
                url.clone(),
                pass.clone(),
                acked.clone(),
                stop.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) && n < 200 {
                    n += 1;
                    let method = if n % 4 == 0 { "pm_decline" } else { "pm_ok" };
                    let r = client
                        .post(format!("{url}/checkout"))
                        .bearer_auth(&pass)
                        .header("idempotency-key", format!("crash-{round}-{i}-{n}"))
                        .json(&json!({"sku": "hot", "quantity": 1, "payment_method": method}))
                        .send()
                        .await;
                    let Ok(r) = r else { continue };
                    if r.status().as_u16() == 201 || r.status().as_u16() == 200 {
                        if let Ok(order) = r.json::<Value>().await {
                            let id = order["order_id"].as_str().unwrap().to_string();
                            let state = order["state"].as_str().unwrap().to_string();
                            acked.lock().unwrap().insert(id, (pass.clone(), state));
                        }
                    }
                }
            }));
        }
        // Once this round's traffic is flowing (orders are being answered),
        // at a random moment within it.
        let answered_before = acked.lock().unwrap().len();
        let flowing = eventually_async(Duration::from_secs(30), || {
            acked.lock().unwrap().len() >= answered_before + 5
        })
        .await;
        assert!(flowing.is_some(), "no orders answered; log:\n{}", gw.log());
        let at = Duration::from_millis(rng.random_range(0..800));
        tokio::time::sleep(at).await;
        // kill -9 in the middle of the traffic, then start again.
        tokio::task::block_in_place(|| gw.kill9_and_restart());
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 50,
        "the load produced too few orders ({}) to mean anything",
        acked.len()
    );

    // Until the reconciler has expired every reservation left behind.
    let settled = eventually_async(Duration::from_secs(30), || {
        gw.admin_json("/admin/state")["orders"]["reserved"] == 0
    })
    .await;
    assert!(
        settled.is_some(),
        "orders still reserved; log:\n{}",
        gw.log()
    );

    // Every acknowledged order is there, in its state or further on.
    let mut confirmed = 0;
    for (id, (pass, said)) in &acked {
        let r = client
            .get(format!("{url}/orders/{id}"))
            .bearer_auth(pass)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "acknowledged order {id} ({said}) is gone");
        let now: Value = r.json().await.unwrap();
        let now = now["state"].as_str().unwrap();
        match said.as_str() {
            "confirmed" | "declined" | "rejected" => {
                assert_eq!(now, said, "order {id} changed after its outcome")
            }
            _ => assert_ne!(
                now, "reserved",
                "order {id} still holds stock past its expiry"
            ),
        }
        if now == "confirmed" {
            confirmed += 1;
        }
    }

    // The books add up, offline and online.
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
    let state = gw.admin_json("/admin/state");
    let stock = &state["inventory"][0];
    let (available, reserved, committed) = (
        stock["available"].as_i64().unwrap(),
        stock["reserved"].as_i64().unwrap(),
        stock["committed"].as_i64().unwrap(),
    );
    assert_eq!(available + reserved + committed, STOCK);
    assert!(
        committed >= confirmed,
        "{committed} committed units for {confirmed} acknowledged confirmed orders"
    );
    assert_eq!(
        state["orders"]["reserved"], 0,
        "no order still holds stock past its expiry"
    );
    // A crash between `authorizing` and the answer leaves the order for
    // the payments reconciler; whatever it holds is still counted.
    let authorizing = state["orders"]["authorizing"].as_i64().unwrap();
    assert!(
        reserved <= authorizing,
        "{reserved} units held by {authorizing} orders in payment"
    );
}
