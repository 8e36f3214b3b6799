//! A fleet of real `sluice` processes selling from one throwaway
//! PostgreSQL (`[cluster] postgres_url`): three gateways share one stock
//! authority, a gateway killed mid-checkout loses nothing it acknowledged,
//! and a PostgreSQL that goes away for 5 s is answered with
//! `503 store_unavailable` and then served again without anyone's help,
//! as is one whose link to it is blackholed.
//!
//! Each gateway keeps its own embedded waiting room (admission is not the
//! point here; stock sharing is), and its own simulated payment provider.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::pg::Pg;
use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// One signing key for the fleet, so a pass from one gateway reads its
/// order on another.
const KEYS: &str = "[[keys]]\nkid = \"fleet\"\nalg = \"HS256\"\nsecret = \"c2x1aWNlLWZsZWV0LXRlc3Qta2V5LTMyLWJ5dGVzLW9r\"\n";

/// How long one buyer keeps trying (joins, polls, retries told by
/// `Retry-After`), at most.
const BUYER_DEADLINE: Duration = Duration::from_secs(60);

fn config(pg_url: &str, stock: u32, extra: &str) -> String {
    format!(
        "{KEYS}[cluster]\npostgres_url = \"{pg_url}\"\n\
         [[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\", \"/orders/*\"]\nrelease_per_second = 100\nmax_active = 2000\nqueue_capacity = 5000\npoll_min_s = 1\npoll_max_s = 2\njoins_per_minute_per_client = 100000\n\
         [[products]]\nsku = \"hot\"\nstock = {stock}\nprice_cents = 1000\nroom = \"drop\"\n{extra}"
    )
}

/// Three gateways on `pg`, started one after the other (the first applies
/// the migrations; the others find them applied).
fn fleet(pg: &Pg, stock: u32, extra: &str) -> Vec<Gateway> {
    (0..3)
        .map(|_| {
            Gateway::start(GatewayOptions {
                rest: config(&pg.url(), stock, extra),
                ..Default::default()
            })
        })
        .collect()
}

/// `Retry-After` in seconds (1 when absent).
fn retry_after(r: &reqwest::Response) -> u64 {
    r.headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// Sends the request `make` builds, and again, as a browser retries, when
/// the connection failed before any answer came (a kept-alive connection
/// the gateway had just closed, a reset under load), until the deadline.
async fn send(make: impl Fn() -> reqwest::RequestBuilder) -> reqwest::Response {
    let deadline = Instant::now() + BUYER_DEADLINE;
    loop {
        match make().send().await {
            Ok(r) => return r,
            Err(e) if Instant::now() < deadline && (e.is_connect() || e.is_request()) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no answer: {e}"),
        }
    }
}

/// Joins `drop` on `base` and polls as told until admitted: the pass, or
/// `None` when the room says it is sold out.
async fn pass(client: &reqwest::Client, base: &str) -> Option<String> {
    let deadline = Instant::now() + BUYER_DEADLINE;
    let joined = loop {
        let r = send(|| client.post(format!("{base}/queue/drop/join"))).await;
        match r.status() {
            StatusCode::ACCEPTED => break r.json::<Value>().await.unwrap(),
            StatusCode::GONE => return None,
            s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS => {
                assert!(Instant::now() < deadline, "join kept failing: {s}");
                tokio::time::sleep(Duration::from_secs(retry_after(&r))).await;
            }
            s => panic!("join: {s} {}", r.text().await.unwrap()),
        }
    };
    let ticket = joined["ticket"].as_str().unwrap().to_string();
    let mut wait_s = joined["poll_after_s"].as_u64().unwrap_or(1);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(wait_s)).await;
        let status: Value = send(|| {
            client
                .get(format!("{base}/queue/drop/status"))
                .bearer_auth(&ticket)
        })
        .await
        .json()
        .await
        .unwrap();
        match status["state"].as_str() {
            Some("admitted") => return Some(status["pass"].as_str().unwrap().to_string()),
            Some("sold_out") => return None,
            _ => wait_s = status["poll_after_s"].as_u64().unwrap_or(1),
        }
    }
    panic!("not admitted within {BUYER_DEADLINE:?}");
}

/// One pass from each of `bases`, got at once.
async fn passes(client: &reqwest::Client, bases: &[String]) -> Vec<String> {
    let joins: Vec<_> = bases
        .iter()
        .map(|base| {
            let (client, base) = (client.clone(), base.clone());
            tokio::spawn(async move { pass(&client, &base).await.expect("stock left") })
        })
        .collect();
    let mut out = Vec::new();
    for join in joins {
        out.push(join.await.unwrap());
    }
    out
}

/// Buyers at once, each admitted on its first gateway and buying through
/// its second (keys `<prefix>-NNN-key`): how many orders were confirmed;
/// every other answer is sold out.
async fn confirmed_sales(
    client: &reqwest::Client,
    buyers: Vec<(String, String)>,
    prefix: &'static str,
) -> usize {
    let mut running = Vec::new();
    for (i, (line, till)) in buyers.into_iter().enumerate() {
        let client = client.clone();
        running.push(tokio::spawn(async move {
            let pass = pass(&client, &line).await?;
            let key = format!("{prefix}-{i:03}-key");
            let (status, body) = checkout(&client, &till, &pass, &key, "pm_ok").await;
            assert!(
                status.is_success() || status == StatusCode::GONE,
                "{status} {body}"
            );
            Some(body["state"].as_str().unwrap_or("sold_out").to_string())
        }));
    }
    let mut confirmed = 0;
    for buyer in running {
        if buyer.await.unwrap().as_deref() == Some("confirmed") {
            confirmed += 1;
        }
    }
    confirmed
}

/// One checkout attempt: the status, the body and `Retry-After`.
async fn checkout_once(
    client: &reqwest::Client,
    base: &str,
    pass: &str,
    key: &str,
    pm: &str,
) -> (StatusCode, Value, u64) {
    // Sent again after a lost connection with the same key, as the contract
    // allows: at most one order per key whatever happened.
    let r = send(|| {
        client
            .post(format!("{base}/checkout"))
            .bearer_auth(pass)
            .header("idempotency-key", key)
            .json(&json!({"sku": "hot", "quantity": 1, "payment_method": pm}))
    })
    .await;
    let (status, retry) = (r.status(), retry_after(&r));
    (status, r.json().await.unwrap_or(Value::Null), retry)
}

/// A checkout sent again with its key while the answer says to retry
/// (`503` with `Retry-After`, `409` in flight), until an order comes back.
async fn checkout(
    client: &reqwest::Client,
    base: &str,
    pass: &str,
    key: &str,
    pm: &str,
) -> (StatusCode, Value) {
    let deadline = Instant::now() + BUYER_DEADLINE;
    loop {
        let (status, body, retry) = checkout_once(client, base, pass, key, pm).await;
        let again = status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::CONFLICT;
        if !again || Instant::now() > deadline {
            return (status, body);
        }
        tokio::time::sleep(Duration::from_secs(retry)).await;
    }
}

fn inventory(gw: &Gateway) -> Value {
    let state = gw.admin_json("/admin/state");
    state["inventory"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["sku"] == "hot")
        .unwrap_or_else(|| panic!("no hot in {state}"))
        .clone()
}

/// `sluice audit --config` of `gw`'s config: exit code and output.
fn audit(gw: &Gateway) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["audit", "--config"])
        .arg(&gw.config_path)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Every partition's (share, available, reserved, committed) summed.
fn pg_stock(pg: &Pg) -> String {
    pg.sql(
        "SELECT SUM(share) || ',' || SUM(available) || ',' || SUM(reserved) || ',' || SUM(committed)
         FROM stock_partitions WHERE sku = 'hot'",
    )
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Bought {
    /// The room said sold out before a pass was given.
    SoldOutInLine,
    /// An order came back in this state.
    Order { id: String, state: String },
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_gateways_sell_ten_units_to_a_thousand_buyers_exactly_once() {
    let pg = Pg::start();
    // Each gateway's simulator also sends its events as signed webhooks to
    // its own gateway, racing the checkouts' own answers.
    let webhooks = "[payments]\nwebhook_secrets = [\"whsec_fleet_test_0123456789\"]\n";
    let fleet = fleet(&pg, 10, webhooks);
    let client = client();
    let mut buyers = Vec::new();
    for i in 0..1000 {
        let base = fleet[i % 3].url("");
        let client = client.clone();
        buyers.push(tokio::spawn(async move {
            let Some(pass) = pass(&client, &base).await else {
                return (i % 3, Bought::SoldOutInLine);
            };
            let key = format!("buyer-{i:04}-key");
            let (status, body) = checkout(&client, &base, &pass, &key, "pm_ok").await;
            assert!(
                status.is_success() || status == StatusCode::GONE,
                "buyer {i}: {status} {body}"
            );
            let state = if status == StatusCode::GONE {
                "sold_out".to_string()
            } else {
                body["state"].as_str().unwrap_or("none").to_string()
            };
            let id = body["order_id"].as_str().unwrap_or("").to_string();
            (i % 3, Bought::Order { id, state })
        }));
    }
    let mut confirmed_by: HashMap<usize, usize> = HashMap::new();
    let mut confirmed = HashSet::new();
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    for buyer in buyers {
        let (gateway, bought) = buyer.await.unwrap();
        let name = match &bought {
            Bought::SoldOutInLine => "sold_out_in_line".to_string(),
            Bought::Order { id, state } => {
                if state == "confirmed" {
                    assert!(confirmed.insert(id.clone()), "order {id} sold twice");
                    *confirmed_by.entry(gateway).or_default() += 1;
                }
                state.clone()
            }
        };
        *outcomes.entry(name).or_default() += 1;
    }
    assert_eq!(
        confirmed.len(),
        10,
        "exactly the stock is sold: {outcomes:?}\n{}\n{}",
        pg.sql(
            "SELECT o.order_id, o.state, o.payment_state, a.operation, a.outcome, a.updated_at_ms
             FROM orders o JOIN payment_attempts a USING (order_id)
             WHERE o.state <> 'rejected' ORDER BY 1, a.created_at_ms"
        ),
        fleet
            .iter()
            .flat_map(|g| g
                .log()
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                .map(str::to_owned)
                .collect::<Vec<_>>())
            .take(60)
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Sold where the shoppers were, from one stock.
    assert!(
        confirmed_by.len() >= 2,
        "sales came from one gateway only: {confirmed_by:?}"
    );
    // Everyone else was told it is sold out, none left hanging.
    let others: usize = outcomes
        .iter()
        .filter(|(state, _)| *state != "confirmed")
        .map(|(state, n)| {
            assert!(
                ["rejected", "sold_out", "sold_out_in_line"].contains(&state.as_str()),
                "unexpected outcome {state}: {outcomes:?}"
            );
            n
        })
        .sum();
    assert_eq!(others, 990, "{outcomes:?}");

    // The rows: ten confirmed orders, each with its capture, the units
    // committed and none left available or held.
    assert_eq!(
        pg.count("SELECT COUNT(*) FROM orders WHERE state = 'confirmed'"),
        10
    );
    assert_eq!(
        pg.count(
            "SELECT COUNT(*) FROM payment_attempts WHERE operation = 'capture' AND outcome = 'succeeded'"
        ),
        10
    );
    assert_eq!(pg_stock(&pg), "10,0,0,10");
    // Every gateway's books say the same.
    for gw in &fleet {
        let level = inventory(gw);
        assert_eq!(
            (
                level["total"].as_i64(),
                level["available"].as_i64(),
                level["reserved"].as_i64(),
                level["committed"].as_i64()
            ),
            (Some(10), Some(0), Some(0), Some(10)),
            "{level}"
        );
        assert_eq!(gw.admin_json("/admin/state")["orders"]["confirmed"], 10);
    }
    // Every sale's two provider events (authorized, captured) came in as
    // webhooks, were stored once and changed nothing more.
    let delivered = eventually(Duration::from_secs(20), || {
        pg.count("SELECT COUNT(*) FROM webhook_events") == 20
    });
    assert!(
        delivered.is_some(),
        "{}",
        pg.sql("SELECT result, COUNT(*) FROM webhook_events GROUP BY result")
    );
    assert_eq!(
        pg.count("SELECT COUNT(*) FROM webhook_events WHERE result NOT IN ('stale', 'processed')"),
        0,
        "{}",
        pg.sql("SELECT result, COUNT(*) FROM webhook_events GROUP BY result")
    );
    let (code, out) = audit(&fleet[0]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("clean"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_killed_mid_checkout_loses_nothing_it_acknowledged() {
    let pg = Pg::start();
    // pm_slow: every payment takes 400 ms, so checkouts are in flight when
    // the kill lands.
    let mut fleet = fleet(&pg, 1000, "[payments]\nsimulated_slow_ms = 400\n");
    let client = client();
    let victim = fleet[0].url("");
    let passes = passes(&client, &vec![victim.clone(); 40]).await;
    let (acks_tx, mut acks_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut shoppers = Vec::new();
    for (i, pass) in passes.into_iter().enumerate() {
        let (client, base, acks) = (client.clone(), victim.clone(), acks_tx.clone());
        shoppers.push(tokio::spawn(async move {
            // Shoppers arrive over 2 s, so some are always mid-payment.
            tokio::time::sleep(Duration::from_millis(50 * i as u64)).await;
            let key = format!("victim-{i:03}-key");
            let Ok(r) = client
                .post(format!("{base}/checkout"))
                .bearer_auth(&pass)
                .header("idempotency-key", &key)
                .json(&json!({"sku": "hot", "quantity": 1, "payment_method": "pm_slow"}))
                .send()
                .await
            else {
                return;
            };
            let status = r.status();
            if let Ok(body) = r.json::<Value>().await {
                if status.is_success() {
                    let _ = acks.send((pass, body));
                }
            }
        }));
    }
    drop(acks_tx);
    // Kill once some orders were acknowledged and others are still paying.
    let mut acked = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked.len() < 3 {
        assert!(Instant::now() < deadline, "no checkout acknowledged");
        if let Ok(Some(ack)) = tokio::time::timeout(Duration::from_secs(1), acks_rx.recv()).await {
            acked.push(ack);
        }
    }
    fleet[0].kill9();
    for shopper in shoppers {
        let _ = shopper.await;
    }
    while let Some(ack) = acks_rx.recv().await {
        acked.push(ack);
    }
    let in_flight = 40 - acked.len();
    assert!(in_flight > 0, "the kill should land mid-checkout");

    // Every acknowledged order is stored, in the state it was answered
    // with, and that state is final; the other gateways read it.
    let survivor = &fleet[1];
    for (pass, body) in &acked {
        let id = body["order_id"].as_str().unwrap();
        assert_eq!(body["state"], "confirmed", "{body}");
        assert_eq!(
            pg.sql(&format!("SELECT state FROM orders WHERE order_id = '{id}'")),
            "confirmed"
        );
        let read: Value = client
            .get(survivor.url(&format!("/orders/{id}")))
            .bearer_auth(pass)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(read["state"], "confirmed", "{read}");
    }
    // What the dead gateway was doing is either absent or holds its units
    // (authorizing, for the payments reconciler): none lost, none doubled.
    let stored = pg.count("SELECT COUNT(*) FROM orders");
    assert!(stored as usize >= acked.len() && stored <= 40, "{stored}");
    assert_eq!(
        pg.count("SELECT COUNT(*) FROM orders WHERE state NOT IN ('confirmed', 'authorizing')"),
        0
    );
    let held = pg.count("SELECT COUNT(*) FROM orders WHERE state = 'authorizing'");
    let sold = pg.count("SELECT COUNT(*) FROM orders WHERE state = 'confirmed'");
    assert_eq!(
        pg_stock(&pg),
        format!("1000,{},{held},{sold}", 1000 - held - sold)
    );
    let (code, out) = audit(survivor);
    assert_eq!(code, 0, "{out}");

    // The rest of the fleet keeps selling.
    let base = survivor.url("");
    let pass = pass(&client, &base).await.unwrap();
    let (status, body) = checkout(&client, &base, &pass, "after-kill-key", "pm_ok").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["state"], "confirmed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_stopped_for_five_seconds_is_503_then_served_again_by_itself() {
    let pg = Pg::start();
    let fleet = fleet(&pg, 1000, "");
    let client = client();
    // Passes first (the rooms are each gateway's own), then orders before.
    let bases: Vec<String> = (0..30).map(|i| fleet[i % 3].url("")).collect();
    let shoppers: Vec<(String, String)> = bases
        .iter()
        .cloned()
        .zip(passes(&client, &bases).await)
        .collect();
    for (i, (base, pass)) in shoppers.iter().enumerate().take(6) {
        let (status, body) =
            checkout(&client, base, pass, &format!("before-{i:02}-key"), "pm_ok").await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }

    pg.stop();
    let stopped = Instant::now();
    // While it is away: every checkout is refused in the contract's shape
    // (each waits up to the pool's 2 s for a connection), and readiness
    // says why.
    let mut during = Vec::new();
    for (i, (base, pass)) in shoppers.iter().enumerate().skip(6) {
        let key = format!("during-{i:02}-key");
        let (client, base, pass) = (client.clone(), base.clone(), pass.clone());
        during.push(tokio::spawn(async move {
            let answer = checkout_once(&client, &base, &pass, &key, "pm_ok").await;
            (answer, (base, pass, key))
        }));
    }
    let mut refused = Vec::new();
    for call in during {
        let ((status, body, retry), shopper) = call.await.unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["error"], "store_unavailable", "{body}");
        assert!(retry >= 1);
        refused.push(shopper);
    }
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "the refusals came after the outage: {:?}",
        stopped.elapsed()
    );
    let ready = reqwest::get(fleet[0].admin_url("/readyz")).await.unwrap();
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    while stopped.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pg.start_again();

    // Back: the same keys are served (each gateway's pool reconnects by
    // itself), each exactly once.
    for (base, pass, key) in &refused {
        let (status, body) = checkout(&client, base, pass, key, "pm_ok").await;
        assert_eq!(status, StatusCode::CREATED, "{key}: {body}");
        assert_eq!(body["state"], "confirmed", "{body}");
    }
    let orders = 6 + refused.len() as i64;
    assert_eq!(pg.count("SELECT COUNT(*) FROM orders"), orders);
    assert_eq!(pg.count("SELECT COUNT(*) FROM idempotency"), orders);
    assert_eq!(
        pg.count("SELECT COUNT(*) FROM orders WHERE state = 'confirmed'"),
        orders
    );
    assert_eq!(pg_stock(&pg), format!("1000,{},0,{orders}", 1000 - orders));
    for gw in &fleet {
        let ready = eventually_await(Duration::from_secs(10), || async {
            reqwest::get(gw.admin_url("/readyz"))
                .await
                .is_ok_and(|r| r.status() == StatusCode::OK)
        })
        .await;
        assert!(ready.is_some(), "readiness came back: {}", gw.log());
    }
    let (code, out) = audit(&fleet[2]);
    assert_eq!(code, 0, "{out}");
}

/// A gateway cut off from PostgreSQL by a partition that answers nothing
/// (the relay holds the connections open and forwards nothing, so no
/// socket error ever comes): its checkouts are refused `503
/// store_unavailable` with `Retry-After` within seconds, not left hanging
/// on pooled connections whose server went quiet, and once the link is up
/// the same keys are served by itself, each exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_blackholed_postgres_link_is_503_within_seconds_then_served_again() {
    use sluice_loadtest::relay::{Link, Relay};
    let pg = Pg::start();
    let url = pg.url();
    let port: u16 = url
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .expect("a loopback URL with a port");
    let relay = Relay::start(([127, 0, 0, 1], port).into()).unwrap();
    let relayed = url.replacen(&format!("127.0.0.1:{port}"), &relay.addr().to_string(), 1);
    let gw = Gateway::start(GatewayOptions {
        rest: config(&relayed, 1000, ""),
        ..Default::default()
    });
    let client = client();
    let bases: Vec<String> = (0..12).map(|_| gw.url("")).collect();
    let passes = passes(&client, &bases).await;
    for (i, pass) in passes.iter().enumerate().take(4) {
        let (status, body) = checkout(
            &client,
            &bases[i],
            pass,
            &format!("before-{i:02}-key"),
            "pm_ok",
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }

    relay.set(Link::Blackholed);
    let mut during = Vec::new();
    for (i, pass) in passes.iter().enumerate().skip(4) {
        let key = format!("during-{i:02}-key");
        let (client, base, pass) = (client.clone(), bases[i].clone(), pass.clone());
        during.push(tokio::spawn(async move {
            let sent = Instant::now();
            let answer = tokio::time::timeout(
                Duration::from_secs(20),
                checkout_once(&client, &base, &pass, &key, "pm_ok"),
            )
            .await;
            (answer, sent.elapsed(), (base, pass, key))
        }));
    }
    let mut refused = Vec::new();
    for call in during {
        let (answer, took, shopper) = call.await.unwrap();
        let (status, body, retry) = answer.expect("answered while the link is blackholed");
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["error"], "store_unavailable", "{body}");
        assert!(retry >= 1);
        assert!(took < Duration::from_secs(5), "answered after {took:?}");
        refused.push(shopper);
    }

    relay.set(Link::Up);
    for (base, pass, key) in &refused {
        let (status, body) = checkout(&client, base, pass, key, "pm_ok").await;
        assert_eq!(status, StatusCode::CREATED, "{key}: {body}");
        assert_eq!(body["state"], "confirmed", "{body}");
    }
    let orders = 4 + refused.len() as i64;
    assert_eq!(pg.count("SELECT COUNT(*) FROM orders"), orders);
    assert_eq!(
        pg.count("SELECT COUNT(*) FROM orders WHERE state = 'confirmed'"),
        orders
    );
    assert_eq!(pg_stock(&pg), format!("1000,{},0,{orders}", 1000 - orders));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_on_redis_and_postgres_sells_one_stock_without_any_test_knob() {
    let redis = common::redis::Redis::start();
    let pg = Pg::start();
    // One line on Redis, one stock on PostgreSQL: the config a sale runs
    // with, accepted as it is (no SLUICE_ALLOW_TEST_KNOBS).
    let rest = config(&pg.url(), 5, "").replace(
        "[cluster]\n",
        &format!("[cluster]\nredis_url = \"{}\"\n", redis.url()),
    );
    let fleet: Vec<Gateway> = (0..2)
        .map(|_| {
            Gateway::start(GatewayOptions {
                rest: rest.clone(),
                ..Default::default()
            })
        })
        .collect();
    let client = client();
    // Admitted by one gateway, buying through the other.
    let buyers = (0..60)
        .map(|i| (fleet[i % 2].url(""), fleet[(i + 1) % 2].url("")))
        .collect();
    assert_eq!(confirmed_sales(&client, buyers, "fleet").await, 5);
    assert_eq!(pg_stock(&pg), "5,0,0,5");
    assert_eq!(
        pg.count("SELECT COUNT(*) FROM orders WHERE state = 'confirmed'"),
        5
    );
    let (code, out) = audit(&fleet[1]);
    assert_eq!(code, 0, "{out}");
}

/// `[cluster] postgres_prepared_statements = false` (behind a
/// transaction-mode pooler that cannot carry prepared statements): two
/// gateways sell one stock exactly, with every statement prepared for its
/// one use, and `sluice audit` of that config finds the books balanced.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_with_statements_not_kept_sells_one_stock_exactly() {
    let pg = Pg::start();
    let rest = config(&pg.url(), 8, "").replace(
        "[cluster]\n",
        "[cluster]\npostgres_prepared_statements = false\n",
    );
    let fleet: Vec<Gateway> = (0..2)
        .map(|_| {
            Gateway::start(GatewayOptions {
                rest: rest.clone(),
                ..Default::default()
            })
        })
        .collect();
    for gw in &fleet {
        assert!(
            gw.log().contains("prepared_statements=false"),
            "the gateway runs with statements not kept: {}",
            gw.log()
        );
    }
    let client = client();
    let buyers = (0..12)
        .map(|i| (fleet[i % 2].url(""), fleet[i % 2].url("")))
        .collect();
    assert_eq!(confirmed_sales(&client, buyers, "unkept").await, 8);
    assert_eq!(pg_stock(&pg), "8,0,0,8");
    assert_eq!(
        pg.count("SELECT COUNT(*) FROM orders WHERE state = 'confirmed'"),
        8
    );
    let (code, out) = audit(&fleet[0]);
    assert_eq!(code, 0, "{out}");
}
