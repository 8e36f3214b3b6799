//! `/readyz` means ready: `503` with its reasons when the order store
//! cannot be written or the HTTP payment provider cannot be reached, and
//! `200` again once they can.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

async fn readyz(gw: &Gateway) -> (u16, Value) {
    let r = client().get(gw.admin_url("/readyz")).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// Polls `/readyz` until `want(status, body)` or 8 s pass.
async fn until(gw: &Gateway, want: impl Fn(u16, &Value) -> bool) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        let (status, body) = readyz(gw).await;
        if want(status, &body) || Instant::now() > deadline {
            return (status, body);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn mentions(body: &Value, what: &str) -> bool {
    body["reasons"].as_array().is_some_and(|r| {
        r.iter()
            .any(|r| r.as_str().is_some_and(|r| r.contains(what)))
    })
}

#[tokio::test]
async fn a_store_that_cannot_be_written_is_not_ready() {
    let gw = Gateway::start(GatewayOptions::default());
    let (status, body) = until(&gw, |s, _| s == 200).await;
    assert_eq!(
        (status, &body["ready"]),
        (200, &Value::Bool(true)),
        "{body}"
    );
    assert_eq!(body["reasons"], serde_json::json!([]));

    // Another connection holds the database's write lock (as a stuck
    // process would): the gateway's writes cannot commit.
    let db = gw.dir.path().join("var").join("checkout.db");
    let lock = rusqlite::Connection::open(db).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE; INSERT INTO write_probe (id, at_ms) VALUES (1, 0) ON CONFLICT (id) DO UPDATE SET at_ms = 0;")
        .unwrap();
    let (status, body) = until(&gw, |s, _| s == 503).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["ready"], false);
    assert!(mentions(&body, "order store"), "{body}");

    lock.execute_batch("ROLLBACK;").unwrap();
    let (status, body) = until(&gw, |s, _| s == 200).await;
    assert_eq!(status, 200, "ready again once the lock is gone: {body}");
}

#[tokio::test]
async fn an_unreachable_payment_provider_is_not_ready() {
    let provider = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", provider.local_addr().unwrap());
    let gw = Gateway::start(GatewayOptions {
        rest: format!(
            "[payments]\nprovider = \"http\"\nurl = \"{url}\"\n\
             [[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\"]\nrelease_per_second = 10\nmax_active = 10\nqueue_capacity = 100\n"
        ),
        ..Default::default()
    });
    let (status, body) = until(&gw, |s, _| s == 200).await;
    assert_eq!(status, 200, "the provider listens: {body}");

    // Nobody listens there any more.
    drop(provider);
    let (status, body) = until(&gw, |s, _| s == 503).await;
    assert_eq!(status, 503, "{body}");
    assert!(mentions(&body, "payment provider"), "{body}");
    assert!(!mentions(&body, "order store"), "{body}");
}
