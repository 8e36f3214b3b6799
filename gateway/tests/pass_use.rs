//! What counts as a pass's use (`pass_idle_s`), through the real binary:
//! any request carrying the pass, on a protected path or not, keeps it
//! from going idle; a forged pass keeps nothing alive and is passed
//! through to an unprotected path untouched.

mod common;

use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::Value;

const ROOM: &str = "[[rooms]]\nname = \"drop\"\nprotect = [\"/account/*\"]\nrelease_per_second = 50\nmax_active = 1\nqueue_capacity = 100\npass_ttl_s = 600\npoll_min_s = 1\npoll_max_s = 1\npass_idle_s = 10\n";

async fn ticket(client: &reqwest::Client, gw: &Gateway) -> String {
    let joined: Value = client
        .post(gw.url("/queue/drop/join"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    joined["ticket"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_used_off_the_protected_paths_is_not_idle() {
    let gw = Gateway::start(GatewayOptions {
        rest: ROOM.into(),
        ..GatewayOptions::default()
    });
    let client = client();
    let pass = admitted_pass(&gw.url(""), &client, "drop").await;
    let next = ticket(&client, &gw).await;
    // The pass is sent as a browser sends it, as a cookie, on the store's
    // unprotected pages only, for more than twice pass_idle_s.
    let cookie = format!("sluice_pass={pass}");
    let used_until = Instant::now() + Duration::from_secs(22);
    while Instant::now() < used_until {
        let r = client
            .get(gw.url("/index.html"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            pass_within(&client, &gw, &next, Duration::from_secs(2)).await,
            None,
            "a pass in use keeps its slot"
        );
    }
    // A forged pass (the real one's signature changed) keeps nothing
    // alive: the real one idles out and the next shopper gets the slot.
    let mut forged = pass.clone().into_bytes();
    let at = forged.len() - 10;
    forged[at] = if forged[at] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut admitted = None;
    while admitted.is_none() && Instant::now() < deadline {
        let r = client
            .get(gw.url("/index.html"))
            .header("cookie", format!("sluice_pass={forged}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "an unprotected page is served");
        admitted = pass_within(&client, &gw, &next, Duration::from_secs(2)).await;
    }
    assert!(
        admitted.is_some(),
        "the idle pass's slot went to the next shopper"
    );
}
