//! The embedded waiting room survives `kill -9`: every ticket keeps its
//! place in the same order, every pass stays the same pass, and the line
//! goes on from where it was.

mod common;

use std::time::Duration;

use base64::Engine;
use common::*;
use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::Value;

const WAITING: usize = 10_000;
const MAX_ACTIVE: usize = 3;
/// Requests in flight at once.
const CONCURRENCY: usize = 32;

fn room() -> String {
    format!(
        "[[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\", \"/orders/*\"]\nrelease_per_second = 2\nmax_active = {MAX_ACTIVE}\nqueue_capacity = 20000\njoins_per_minute_per_client = 100000\npoll_min_s = 1\npoll_max_s = 60\npass_ttl_s = 600\n"
    )
}

/// The `seq` claim of a token (read only; the gateway verifies).
fn seq_of(token: &str) -> u64 {
    let payload = token.split('.').nth(1).unwrap();
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice::<Value>(&json).unwrap()["seq"]
        .as_u64()
        .unwrap()
}

async fn status(client: &reqwest::Client, gw: &Gateway, ticket: &str) -> (StatusCode, Value) {
    let r = client
        .get(gw.url("/queue/drop/status"))
        .bearer_auth(ticket)
        .send()
        .await
        .unwrap();
    let code = r.status();
    (code, r.json().await.unwrap_or(Value::Null))
}

/// The pass of `ticket`, once it is admitted (polling as told).
async fn pass_of(client: &reqwest::Client, gw: &Gateway, ticket: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        let (code, v) = status(client, gw, ticket).await;
        if code == StatusCode::OK && v["state"] == "admitted" {
            return v["pass"].as_str().unwrap().to_owned();
        }
        // Polled sooner than told (429) or still waiting: ask again soon.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("ticket {} never admitted", seq_of(ticket));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_with_ten_thousand_waiting_keeps_every_ticket_in_order() {
    let mut gw = Gateway::start(GatewayOptions {
        rest: room(),
        ..Default::default()
    });
    let client = client();
    let mut tickets: Vec<String> = futures_util::stream::iter(0..WAITING)
        .map(|_| {
            let (client, url) = (client.clone(), gw.url("/queue/drop/join"));
            async move {
                let r = client.post(url).send().await.unwrap();
                assert_eq!(r.status(), StatusCode::ACCEPTED);
                let v: Value = r.json().await.unwrap();
                v["ticket"].as_str().unwrap().to_owned()
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    tickets.sort_by_key(|t| seq_of(t));
    let seqs: Vec<u64> = tickets.iter().map(|t| seq_of(t)).collect();
    assert_eq!(seqs, (0..WAITING as u64).collect::<Vec<_>>());

    let mut passes = Vec::new();
    for ticket in &tickets[..MAX_ACTIVE] {
        passes.push(pass_of(&client, &gw, ticket).await);
    }
    let state = gw.admin_json("/admin/state");
    assert_eq!(state["rooms"][0]["active"], MAX_ACTIVE);
    assert_eq!(state["rooms"][0]["waiting"], WAITING - MAX_ACTIVE);

    gw.kill9();
    gw.restart();

    let state = gw.admin_json("/admin/state");
    assert_eq!(state["rooms"][0]["active"], MAX_ACTIVE, "{state}");
    assert_eq!(
        state["rooms"][0]["waiting"],
        WAITING - MAX_ACTIVE,
        "{state}"
    );
    let answers: Vec<(usize, StatusCode, Value)> =
        futures_util::stream::iter(tickets.iter().enumerate())
            .map(|(i, ticket)| {
                let (client, gw) = (client.clone(), &gw);
                async move {
                    let (code, v) = status(&client, gw, ticket).await;
                    (i, code, v)
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
    let mut invalid = 0;
    for (i, code, v) in &answers {
        if *code == StatusCode::UNAUTHORIZED {
            invalid += 1;
            continue;
        }
        assert_eq!(*code, StatusCode::OK, "ticket {i}: {v}");
        if *i < MAX_ACTIVE {
            assert_eq!(v["state"], "admitted", "ticket {i}: {v}");
            assert_eq!(v["pass"], passes[*i].as_str(), "ticket {i}: the same pass");
        } else {
            // Nobody left: exactly the tickets after the passes are ahead.
            assert_eq!(v["state"], "waiting", "ticket {i}: {v}");
            assert_eq!(v["ahead"], i - MAX_ACTIVE, "ticket {i}: {v}");
        }
    }
    assert_eq!(invalid, 0, "no ticket is invalid after the restart");

    // The passes still open what they opened (an unknown order is theirs
    // to ask about: 404, not 401).
    let r = client
        .get(gw.url("/orders/ord_unknown"))
        .bearer_auth(&passes[0])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // The line goes on after its last place.
    let r = client
        .post(gw.url("/queue/drop/join"))
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(seq_of(v["ticket"].as_str().unwrap()), WAITING as u64);
    assert_eq!(v["ahead"], WAITING - MAX_ACTIVE);
    // The keys were made once, private to their owner.
    for name in ["ticket-signing.key", "ticket-id.key"] {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(gw.dir.path().join("var").join(name)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{name}");
    }
}
