//! Odds, told honestly, through the real binary: with `show_units_left`
//! the status JSON carries the room's units nobody holds and, for a
//! shopper in line, `likely_beyond_stock` when those ahead would buy them
//! all at the mean order size (1 until ten orders are confirmed); without
//! it (the default, or after a reload turns it off) neither appears.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

const UNITS: u64 = 3;

fn gateway(show: bool) -> Gateway {
    Gateway::start(GatewayOptions {
        rest: format!(
            "[[rooms]]\nname = \"drop\"\nrelease_per_second = 20\nburst = 1\nmax_active = 1\nqueue_capacity = 100\njoins_per_minute_per_client = 100000\npoll_min_s = 1\npoll_max_s = 1\npass_ttl_s = 600\nshow_units_left = {show}\n\n[[products]]\nsku = \"shoe\"\nstock = {UNITS}\nprice_cents = 100\nroom = \"drop\"\n"
        ),
        ..GatewayOptions::default()
    })
}

async fn join(client: &reqwest::Client, gw: &Gateway) -> Value {
    let r = client
        .post(gw.url("/queue/drop/join"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::ACCEPTED);
    r.json().await.unwrap()
}

async fn status(client: &reqwest::Client, gw: &Gateway, ticket: &str) -> Value {
    loop {
        let r = client
            .get(gw.url("/queue/drop/status"))
            .bearer_auth(ticket)
            .send()
            .await
            .unwrap();
        if r.status() == reqwest::StatusCode::TOO_MANY_REQUESTS {
            // Asked sooner than told: ask again when told.
            let wait: u64 = r.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            tokio::time::sleep(Duration::from_secs(wait)).await;
            continue;
        }
        return r.json().await.unwrap();
    }
}

#[tokio::test]
async fn the_units_left_and_the_warning_follow_the_places_ahead() {
    let gw = gateway(true);
    let client = client();
    // The first place takes the one slot; the rest wait behind it.
    let mut tickets = Vec::new();
    for _ in 0..7 {
        let joined = join(&client, &gw).await;
        tickets.push(joined["ticket"].as_str().unwrap().to_string());
    }
    let (mut warned, mut not_warned) = (0, 0);
    for ticket in &tickets {
        let s = status(&client, &gw, ticket).await;
        assert_eq!(s["units_left"], UNITS, "{s}");
        if s["state"] != "waiting" {
            assert!(s.get("likely_beyond_stock").is_none(), "{s}");
            continue;
        }
        let ahead = s["ahead"].as_u64().unwrap();
        let beyond = s["likely_beyond_stock"]
            .as_bool()
            .expect("told when waiting");
        assert_eq!(beyond, ahead > UNITS, "ahead {ahead}: {s}");
        if beyond {
            warned += 1;
        } else {
            not_warned += 1;
        }
    }
    assert!(
        warned > 0 && not_warned > 0,
        "{warned} warned, {not_warned} not"
    );

    // Turned off by a reload: neither number is told any more.
    gw.edit_config(|t| t.replace("show_units_left = true", "show_units_left = false"));
    let last = tickets.last().unwrap();
    let off = eventually_await(Duration::from_secs(5), || async {
        status(&client, &gw, last).await.get("units_left").is_none()
    })
    .await;
    assert!(off.is_some(), "units_left still told after the reload");
    let s = status(&client, &gw, last).await;
    assert!(s.get("likely_beyond_stock").is_none(), "{s}");
}

#[tokio::test]
async fn nothing_is_told_by_default() {
    let gw = gateway(false);
    let client = client();
    let joined = join(&client, &gw).await;
    let s = status(&client, &gw, joined["ticket"].as_str().unwrap()).await;
    assert!(s.get("units_left").is_none(), "{s}");
    assert!(s.get("likely_beyond_stock").is_none(), "{s}");
}
