//! The waiting room through the real gateway: every route and error of the
//! contract, passes on protected paths, kill switch and sold out.

mod common;

use std::time::Duration;

use common::*;
use reqwest::StatusCode;
use serde_json::Value;

fn room(extra: &str) -> String {
    let poll_min = if extra.contains("poll_min_s") {
        ""
    } else {
        "poll_min_s = 1\n"
    };
    format!(
        "[[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\", \"/orders/*\"]\nrelease_per_second = 50\nmax_active = 1\nqueue_capacity = 3\n{poll_min}poll_max_s = 5\n{extra}\n\
         [[rooms]]\nname = \"other\"\nprotect = [\"/other/*\"]\nrelease_per_second = 50\nmax_active = 5\nqueue_capacity = 10\npoll_min_s = 1\npoll_max_s = 5\n"
    )
}

fn gateway_with(origin: Option<&Origin>, rest: String) -> Gateway {
    Gateway::start(GatewayOptions {
        origin: origin.map(Origin::url),
        rest,
        ..Default::default()
    })
}

async fn join(gw: &Gateway, room: &str) -> reqwest::Response {
    client()
        .post(gw.url(&format!("/queue/{room}/join")))
        .send()
        .await
        .unwrap()
}

async fn status(gw: &Gateway, room: &str, ticket: &str) -> reqwest::Response {
    client()
        .get(gw.url(&format!("/queue/{room}/status")))
        .bearer_auth(ticket)
        .send()
        .await
        .unwrap()
}

/// Polls as told until the state is not `waiting`.
async fn wait_until_decided(gw: &Gateway, room: &str, ticket: &str) -> Value {
    for _ in 0..30 {
        let r = status(gw, room, ticket).await;
        assert_eq!(r.status(), StatusCode::OK);
        let v: Value = r.json().await.unwrap();
        if v["state"] != "waiting" {
            return v;
        }
        let after = v["poll_after_s"].as_u64().unwrap();
        tokio::time::sleep(Duration::from_secs(after)).await;
    }
    panic!("never left the line");
}

#[tokio::test]
async fn join_gives_a_ticket_in_the_contract_shape_with_its_cookie() {
    let gw = gateway_with(None, room(""));
    let r = join(&gw, "drop").await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.starts_with("sluice_ticket="), "{cookie}");
    for attr in ["HttpOnly", "SameSite=Lax", "Path=/queue/drop"] {
        assert!(cookie.contains(attr), "{cookie} lacks {attr}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP: no Secure");
    let v: Value = r.json().await.unwrap();
    for key in [
        "room",
        "state",
        "ticket",
        "position",
        "ahead",
        "estimated_wait_s",
        "expires_at",
        "poll_after_s",
    ] {
        assert!(v.get(key).is_some(), "join lacks {key}: {v}");
    }
    assert_eq!(v["room"], "drop");
    assert_eq!(v["state"], "waiting");
    assert_eq!(v["position"], 1);
    assert_eq!(v["ahead"], 0);

    // The same browser joining again keeps its ticket.
    let token = cookie.split(';').next().unwrap();
    tokio::time::sleep(Duration::from_secs(v["poll_after_s"].as_u64().unwrap())).await;
    let again = client()
        .post(gw.url("/queue/drop/join"))
        .header("cookie", token)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::ACCEPTED);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["ticket"], v["ticket"], "one browser keeps one ticket");
}

#[tokio::test]
async fn released_ticket_gets_one_pass_that_opens_only_its_room() {
    let origin = Origin::start();
    let gw = gateway_with(Some(&origin), room(""));
    let v: Value = join(&gw, "drop").await.json().await.unwrap();
    let ticket = v["ticket"].as_str().unwrap().to_string();
    let admitted = wait_until_decided(&gw, "drop", &ticket).await;
    assert_eq!(admitted["state"], "admitted", "{admitted}");
    let pass = admitted["pass"].as_str().unwrap().to_string();
    assert!(
        admitted["pass_expires_at"].as_u64().unwrap()
            > admitted["expires_at"].as_u64().unwrap_or(0) / 2
    );

    // Polling again, when told to, returns the very same pass.
    tokio::time::sleep(Duration::from_secs(
        admitted["poll_after_s"].as_u64().unwrap_or(1),
    ))
    .await;
    let r = status(&gw, "drop", &ticket).await;
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.starts_with("sluice_pass=") && cookie.contains("Path=/;"),
        "{cookie}"
    );
    let again: Value = r.json().await.unwrap();
    assert_eq!(again["pass"], admitted["pass"]);

    // The pass opens the room's protected paths, by header or cookie: the
    // answers come from the order routes behind the pass check, which the
    // origin never sees.
    let c = client();
    let with_bearer = c
        .get(gw.url("/orders/echo"))
        .bearer_auth(&pass)
        .send()
        .await
        .unwrap();
    assert_eq!(
        with_bearer.status(),
        StatusCode::NOT_FOUND,
        "the store has no order `echo`"
    );
    let v: Value = with_bearer.json().await.unwrap();
    assert_eq!(v["error"], "not_found", "{v}");
    let via_cookie = c
        .get(gw.url("/checkout"))
        .header("cookie", format!("sluice_pass={pass}"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        via_cookie.status(),
        StatusCode::METHOD_NOT_ALLOWED,
        "past the pass check, checkout wants POST"
    );
    assert_eq!(via_cookie.headers()["allow"], "POST");
    let v: Value = via_cookie.json().await.unwrap();
    assert_eq!(v["error"], "method_not_allowed", "{v}");
    assert_eq!(origin.hits(), 0, "order routes are answered by the gateway");
    // Not the other room's, and not with the ticket instead of the pass.
    let other = c
        .get(gw.url("/other/x"))
        .bearer_auth(&pass)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::UNAUTHORIZED);
    let ticket_as_pass = c
        .get(gw.url("/checkout"))
        .bearer_auth(&ticket)
        .send()
        .await
        .unwrap();
    assert_eq!(ticket_as_pass.status(), StatusCode::UNAUTHORIZED);
    let state = gw.admin_json("/admin/state");
    assert_eq!(state["rooms"][0]["active"], 1);
    let rejections =
        gw.metric("sluice_ticket_rejections_total{reason=\"wrong_audience\",room=\"other\"}");
    assert_eq!(rejections, Some(1.0));
    let rejections =
        gw.metric("sluice_ticket_rejections_total{reason=\"wrong_type\",room=\"drop\"}");
    assert_eq!(rejections, Some(1.0));
}

#[tokio::test]
async fn protected_paths_without_a_pass_point_to_the_queue() {
    let gw = gateway_with(None, room(""));
    let c = client();
    let r = c.post(gw.url("/checkout")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["error"].as_str(), v["join"].as_str()),
        (Some("invalid_pass"), Some("/queue/drop/join"))
    );
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = browser
        .get(gw.url("/checkout"))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/queue/drop?next=%2Fcheckout");
}

#[tokio::test]
async fn tampered_missing_and_early_tickets_are_refused() {
    // Told to wait 3 s, a poll at once is early even with the 1 s slack.
    let gw = gateway_with(None, room("poll_min_s = 3"));
    let v: Value = join(&gw, "drop").await.json().await.unwrap();
    let ticket = v["ticket"].as_str().unwrap();
    let mut bytes = ticket.as_bytes().to_vec();
    let i = bytes.len() - 3;
    bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(bytes).unwrap();
    let r = status(&gw, "drop", &tampered).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "invalid_ticket");
    let r = client()
        .get(gw.url("/queue/drop/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // A ticket of one room is no ticket for another.
    let r = status(&gw, "other", ticket).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // Asking at once, when told to wait, is held back.
    let second: Value = join(&gw, "drop").await.json().await.unwrap();
    let second_ticket = second["ticket"].as_str().unwrap();
    assert!(second["poll_after_s"].as_u64().unwrap() >= 1);
    let mut early = None;
    for _ in 0..3 {
        let r = status(&gw, "drop", second_ticket).await;
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            early = Some(r);
            break;
        }
    }
    let early = early.expect("an impatient poll gets 429");
    assert!(early.headers().contains_key("retry-after"));
    let body: Value = early.json().await.unwrap();
    assert_eq!(body["error"], "rate_limited");
}

#[tokio::test]
async fn a_full_queue_says_so_with_retry_after() {
    // max_active 1 and capacity 3: the first is admitted, three wait, the
    // next is refused.
    let gw = gateway_with(None, room(""));
    let first = join(&gw, "drop").await;
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let first: Value = first.json().await.unwrap();
    let ticket = first["ticket"].as_str().unwrap();
    // Released at once; its pass takes the slot when it is collected.
    let collected = eventually_await(Duration::from_secs(5), || async {
        let v: Value = status(&gw, "drop", ticket).await.json().await.unwrap();
        v["state"] == "admitted"
    })
    .await;
    assert!(collected.is_some(), "the first one is let in");
    assert_eq!(gw.admin_json("/admin/state")["rooms"][0]["active"], 1);
    for _ in 0..3 {
        assert_eq!(join(&gw, "drop").await.status(), StatusCode::ACCEPTED);
    }
    let r = join(&gw, "drop").await;
    assert_eq!(
        r.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "queue_capacity is enforced"
    );
    assert!(r.headers().contains_key("retry-after"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"], "queue_full");
    assert!(v["retry_after_s"].as_u64().unwrap() >= 1);
}

#[tokio::test]
async fn kill_switch_stops_joins_and_keeps_passes() {
    let origin = Origin::start();
    let gw = gateway_with(Some(&origin), room(""));
    let first: Value = join(&gw, "drop").await.json().await.unwrap();
    let ticket = first["ticket"].as_str().unwrap().to_string();
    let admitted = wait_until_decided(&gw, "drop", &ticket).await;
    let pass = admitted["pass"].as_str().unwrap().to_string();
    let second: Value = join(&gw, "drop").await.json().await.unwrap();
    let mark = watermark(&gw).await;
    assert_eq!(
        (&mark["serving"], &mark["waiting"], &mark["state"]),
        (&1.into(), &1.into(), &"open".into()),
        "{mark}"
    );
    // The room's heartbeat: 30 s by default.
    assert_eq!(mark["heartbeat_s"], 30, "{mark}");

    gw.edit_config(|t| t.replace("[gateway]\n", "[gateway]\nadmissions = \"paused\"\n"));
    assert!(
        eventually_async(Duration::from_secs(1), || gw.admin_json("/admin/state")
            ["admissions"]
            == "paused")
        .await
        .is_some()
    );
    let r = join(&gw, "drop").await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.headers().contains_key("retry-after"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"], "admissions_paused");
    // The pass already given still opens the door.
    let r = client()
        .get(gw.url("/orders/echo"))
        .bearer_auth(&pass)
        .send()
        .await
        .unwrap();
    assert_ne!(r.status(), StatusCode::UNAUTHORIZED);
    // The one waiting is told so and keeps the place.
    tokio::time::sleep(Duration::from_secs(
        second["poll_after_s"].as_u64().unwrap(),
    ))
    .await;
    let v: Value = status(&gw, "drop", second["ticket"].as_str().unwrap())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["state"], "paused");
    assert_eq!(v["position"], 1);
    assert_eq!(watermark(&gw).await["state"], "paused");
}

/// The public watermark, checked for its caching headers.
async fn watermark(gw: &Gateway) -> Value {
    let r = client()
        .get(gw.url("/queue/drop/watermark"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["cache-control"], "public, max-age=1");
    assert!(r.headers().get("set-cookie").is_none());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["room"], "drop");
    assert_eq!(v["release_per_second"], 50);
    assert!(v["poll_after_s"].as_u64().unwrap() >= 1);
    let post = client()
        .post(gw.url("/queue/drop/watermark"))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
    v
}

#[tokio::test]
async fn sold_out_rooms_refuse_joins_with_410() {
    let rest = format!(
        "{}[[products]]\nsku = \"gone\"\nstock = 0\nprice_cents = 1\nroom = \"drop\"\n",
        room("")
    );
    let gw = gateway_with(None, rest);
    let r = join(&gw, "drop").await;
    assert_eq!(r.status(), StatusCode::GONE);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"], "sold_out");
    assert_eq!(
        join(&gw, "other").await.status(),
        StatusCode::ACCEPTED,
        "a room without products sells on"
    );
}

#[tokio::test]
async fn unknown_rooms_methods_and_join_floods() {
    let gw = gateway_with(None, room("joins_per_minute_per_client = 2"));
    let r = join(&gw, "nope").await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "unknown_room");
    let r = client()
        .get(gw.url("/queue/drop/join"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.headers()["allow"], "POST");
    // A browser joining for another site's page is refused, and takes
    // neither a place nor the client's allowance; its own page joins.
    let r = client()
        .post(gw.url("/queue/drop/join"))
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "forbidden");
    let r = client()
        .post(gw.url("/queue/drop/join"))
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    assert_eq!(join(&gw, "drop").await.status(), StatusCode::ACCEPTED);
    let r = join(&gw, "drop").await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().contains_key("retry-after"));
    assert_eq!(
        gw.metric("sluice_queue_joins_total{result=\"rate_limited\",room=\"drop\"}"),
        Some(1.0)
    );
}

#[tokio::test]
async fn the_page_speaks_the_visitors_language() {
    let gw = gateway_with(None, room(""));
    let r = client()
        .get(gw.url("/queue/drop"))
        .header("accept-language", "pt-BR,pt;q=0.9")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(r.text().await.unwrap().contains("<html lang=\"pt-BR\">"));
    let r = client().get(gw.url("/queue/drop")).send().await.unwrap();
    assert!(r.text().await.unwrap().contains("<html lang=\"en\">"));
}

#[tokio::test]
async fn metrics_show_the_rooms() {
    let gw = gateway_with(None, room(""));
    let v: Value = join(&gw, "drop").await.json().await.unwrap();
    wait_until_decided(&gw, "drop", v["ticket"].as_str().unwrap()).await;
    let text = without_region(&gw.metrics_text().await);
    assert!(
        text.contains("sluice_admissions_total{room=\"drop\"} 1"),
        "{text}"
    );
    assert_eq!(
        gw.metric("sluice_admissions_total{room=\"drop\"}"),
        Some(1.0)
    );
    assert_eq!(gw.metric("sluice_active_passes{room=\"drop\"}"), Some(1.0));
    assert_eq!(
        gw.metric("sluice_queue_joins_total{result=\"queued\",room=\"drop\"}"),
        Some(1.0)
    );
    assert_eq!(
        gw.metric("sluice_release_rate_limit{reason=\"fixed\",room=\"drop\"}"),
        Some(50.0)
    );
    assert_eq!(
        gw.metric("sluice_wait_seconds_count{room=\"drop\"}"),
        Some(1.0)
    );
}
