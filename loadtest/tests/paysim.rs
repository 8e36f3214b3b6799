//! `paysim` over real HTTP: each test starts the real binary on port 0 (and,
//! when it needs webhooks, a tiny receiver on port 0) and talks to it as the
//! gateway's adapter would.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

/// How long a test waits for webhooks before it gives up.
const WAIT_MS_MAX: u64 = 10_000;

/// The binary, running; killed when dropped.
struct Paysim {
    child: Child,
    base: String,
    http: reqwest::Client,
}

impl Paysim {
    fn start(args: &[&str]) -> Paysim {
        let mut child = Command::new(env!("CARGO_BIN_EXE_paysim"))
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("paysim starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("paysim prints its address");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Paysim {
            child,
            base: format!("http://{addr}"),
            http: reqwest::Client::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn authorize(&self, key: &str, order: &str, method: &str) -> (StatusCode, Value) {
        let response = self
            .http
            .post(self.url("/v1/authorizations"))
            .header("Idempotency-Key", key)
            .json(&auth_body(order, method))
            .send()
            .await
            .expect("authorize answered");
        read(response).await
    }

    async fn operate(
        &self,
        id: &str,
        op: &str,
        key: &str,
        amount_cents: u64,
    ) -> (StatusCode, Value) {
        let response = self
            .http
            .post(self.url(&format!("/v1/authorizations/{id}/{op}")))
            .header("Idempotency-Key", key)
            .json(&json!({ "amount_cents": amount_cents }))
            .send()
            .await
            .expect("operation answered");
        read(response).await
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let response = self
            .http
            .get(self.url(path))
            .send()
            .await
            .expect("GET answered");
        read(response).await
    }

    async fn put_faults(&self, faults: Value) -> (StatusCode, Value) {
        let response = self
            .http
            .put(self.url("/admin/faults"))
            .json(&faults)
            .send()
            .await
            .expect("PUT answered");
        read(response).await
    }

    async fn ledger(&self) -> Vec<Value> {
        let (status, body) = self.get("/ledger").await;
        assert_eq!(status, StatusCode::OK);
        body["payments"].as_array().expect("payments").clone()
    }
}

impl Drop for Paysim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One webhook as the receiver got it.
#[derive(Debug, Clone)]
struct Received {
    signature: String,
    body: Bytes,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("webhook body is JSON")
    }

    fn event_id(&self) -> String {
        self.json()["id"].as_str().expect("event id").to_owned()
    }
}

#[derive(Debug, Clone, Default)]
struct ReceiverState {
    received: Arc<Mutex<Vec<Received>>>,
    /// Answer 500 to this many POSTs first.
    failures_left: Arc<AtomicUsize>,
}

/// A webhook endpoint on port 0 that records what it gets.
struct Receiver {
    url: String,
    state: ReceiverState,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start(failures_first: usize) -> Receiver {
        let state = ReceiverState::default();
        state.failures_left.store(failures_first, Ordering::SeqCst);
        let app = axum::Router::new()
            .route("/webhooks/paysim", post(receive))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("receiver binds");
        let addr = listener.local_addr().expect("receiver address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            url: format!("http://{addr}/webhooks/paysim"),
            state,
            task,
        }
    }

    fn received(&self) -> Vec<Received> {
        self.state.received.lock().expect("receiver lock").clone()
    }

    /// Waits until at least `count` webhooks arrived, then returns them all.
    async fn wait_for(&self, count: usize) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
        loop {
            let received = self.received();
            if received.len() >= count {
                return received;
            }
            assert!(
                Instant::now() < deadline,
                "waited for {count} webhooks, got {}",
                received.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(
    State(state): State<ReceiverState>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let signature = headers
        .get("sluice-signature")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    state
        .received
        .lock()
        .expect("receiver lock")
        .push(Received { signature, body });
    let failing = state
        .failures_left
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
            left.checked_sub(1)
        })
        .is_ok();
    if failing {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    }
}

fn auth_body(order: &str, method: &str) -> Value {
    json!({
        "order_id": order,
        "amount_cents": 19_900,
        "currency": "EUR",
        "payment_method": method,
    })
}

async fn read(response: reqwest::Response) -> (StatusCode, Value) {
    let status = StatusCode::from_u16(response.status().as_u16()).expect("valid status");
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

fn id_of(body: &Value) -> String {
    body["id"].as_str().expect("payment id").to_owned()
}

/// Checks `Sluice-Signature` against `secret` the way the gateway will:
/// `t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`, any `v1` matching.
fn signature_verifies(received: &Received, secret: &str) -> bool {
    let mut t = None;
    let mut v1s = Vec::new();
    for part in received.signature.split(',') {
        match part.split_once('=') {
            Some(("t", value)) => t = Some(value.to_owned()),
            Some(("v1", value)) => v1s.push(value.to_owned()),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(format!("{t}.").as_bytes());
    mac.update(&received.body);
    let expected = hex::encode(mac.finalize().into_bytes());
    v1s.contains(&expected)
}

fn signature_timestamp(received: &Received) -> i64 {
    received
        .signature
        .split(',')
        .find_map(|part| part.strip_prefix("t="))
        .expect("t= present")
        .parse()
        .expect("t is an integer")
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64
}

#[tokio::test]
async fn authorization_replays_with_the_same_key_and_refuses_other_params() {
    let sim = Paysim::start(&[]);
    let (status, first) = sim.authorize("key-1", "order-1", "pm_ok").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(first["status"], "authorized");
    assert_eq!(first["order_id"], "order-1");
    assert_eq!(first["amount_cents"], 19_900);
    assert!(id_of(&first).starts_with("pay_"));

    let (status, replay) = sim.authorize("key-1", "order-1", "pm_ok").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(replay, first);

    let (status, mismatch) = sim.authorize("key-1", "order-2", "pm_ok").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(mismatch["error"], "idempotency_mismatch");
    assert!(mismatch["message"].is_string());

    assert_eq!(sim.ledger().await.len(), 1, "one payment for one key");
}

#[tokio::test]
async fn racing_requests_with_one_key_make_one_payment() {
    let sim = Arc::new(Paysim::start(&[]));
    let racers_total = 8;
    let mut racers = Vec::new();
    for _ in 0..racers_total {
        let sim = sim.clone();
        racers.push(tokio::spawn(async move {
            sim.authorize("same-key", "order-1", "pm_ok").await
        }));
    }
    let mut created = 0;
    let mut ids = Vec::new();
    for racer in racers {
        let (status, body) = racer.await.expect("racer finished");
        if status == StatusCode::CREATED {
            created += 1;
        } else {
            assert_eq!(status, StatusCode::OK);
        }
        ids.push(id_of(&body));
    }
    assert_eq!(created, 1, "exactly one request processed");
    ids.dedup();
    assert_eq!(ids.len(), 1, "every answer names the same payment");
    assert_eq!(sim.ledger().await.len(), 1);
}

#[tokio::test]
async fn a_request_without_an_idempotency_key_is_refused() {
    let sim = Paysim::start(&[]);
    let response = sim
        .http
        .post(sim.url("/v1/authorizations"))
        .json(&auth_body("order-1", "pm_ok"))
        .send()
        .await
        .expect("answered");
    let (status, body) = read(response).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "bad_request");
    let response = sim
        .http
        .post(sim.url("/v1/authorizations"))
        .header("Idempotency-Key", "key-1")
        .body("{not json")
        .send()
        .await
        .expect("answered");
    assert_eq!(read(response).await.0, StatusCode::BAD_REQUEST);
    assert!(sim.ledger().await.is_empty());
}

#[tokio::test]
async fn decline_is_answered_recorded_and_cannot_be_captured() {
    let sim = Paysim::start(&[]);
    let (status, body) = sim.authorize("key-1", "order-1", "pm_decline").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(body["status"], "declined");
    let (status, refused) = sim.operate(&id_of(&body), "capture", "cap-1", 19_900).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(refused["error"], "invalid_state");
    let ledger = sim.ledger().await;
    assert_eq!(ledger[0]["status"], "declined");
    assert_eq!(ledger[0]["authorized"], false);
    assert_eq!(ledger[0]["captures"], 0);
}

#[tokio::test]
async fn lost_response_times_out_and_the_look_up_shows_authorized() {
    let sim = Paysim::start(&[]);
    let started = Instant::now();
    let outcome = sim
        .http
        .post(sim.url("/v1/authorizations"))
        .header("Idempotency-Key", "key-lost")
        .timeout(Duration::from_millis(500))
        .json(&auth_body("order-1", "pm_lost_response"))
        .send()
        .await;
    let error = outcome.expect_err("the answer is never delivered");
    assert!(error.is_timeout(), "client timed out: {error}");
    assert!(started.elapsed() >= Duration::from_millis(500));

    let (status, lookup) = sim.get("/v1/operations/key-lost").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(lookup["key"], "key-lost");
    assert_eq!(lookup["operation"], "authorize");
    assert_eq!(lookup["status"], "authorized");
    let payment_id = lookup["payment_id"]
        .as_str()
        .expect("payment id")
        .to_owned();

    // A retry with the same key gets the answer this time.
    let (status, replay) = sim
        .authorize("key-lost", "order-1", "pm_lost_response")
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(id_of(&replay), payment_id);

    let (status, missing) = sim.get("/v1/operations/never-sent").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(missing["error"], "not_found");
}

#[tokio::test]
async fn slow_method_answers_after_slow_ms() {
    let sim = Paysim::start(&["--slow-ms", "800"]);
    let started = Instant::now();
    let (status, body) = sim.authorize("key-slow", "order-1", "pm_slow").await;
    let slow = started.elapsed();
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(body["status"], "authorized");
    assert!(slow >= Duration::from_millis(800), "took {slow:?}");

    let started = Instant::now();
    sim.authorize("key-ok", "order-2", "pm_ok").await;
    assert!(started.elapsed() < Duration::from_millis(800));
}

#[tokio::test]
async fn capture_void_refund_follow_the_state_rules() {
    let sim = Paysim::start(&[]);
    let id = id_of(&sim.authorize("auth-1", "order-1", "pm_ok").await.1);

    let (status, body) = sim.operate(&id, "refund", "ref-early", 19_900).await;
    assert_eq!(
        (status, body["error"].clone()),
        (StatusCode::CONFLICT, json!("invalid_state"))
    );

    let (status, captured) = sim.operate(&id, "capture", "cap-1", 19_900).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(captured, json!({ "id": id, "status": "captured" }));
    let (status, replay) = sim.operate(&id, "capture", "cap-1", 19_900).await;
    assert_eq!((status, replay), (StatusCode::OK, captured));
    let (status, _) = sim.operate(&id, "capture", "cap-2", 19_900).await;
    assert_eq!(status, StatusCode::CONFLICT, "second capture, other key");
    let (status, _) = sim.operate(&id, "void", "void-late", 19_900).await;
    assert_eq!(status, StatusCode::CONFLICT, "void after capture");

    let (status, refunded) = sim.operate(&id, "refund", "ref-1", 19_900).await;
    assert_eq!(
        (status, refunded["status"].clone()),
        (StatusCode::OK, json!("refunded"))
    );
    let (status, _) = sim.operate(&id, "refund", "ref-2", 19_900).await;
    assert_eq!(status, StatusCode::CONFLICT, "refund twice");
    let (status, replay) = sim.operate(&id, "refund", "ref-1", 19_900).await;
    assert_eq!(
        (status, replay["status"].clone()),
        (StatusCode::OK, json!("refunded"))
    );

    let voided_id = id_of(&sim.authorize("auth-2", "order-2", "pm_ok").await.1);
    let (status, voided) = sim.operate(&voided_id, "void", "void-1", 19_900).await;
    assert_eq!(
        (status, voided["status"].clone()),
        (StatusCode::OK, json!("voided"))
    );
    let (status, _) = sim
        .operate(&voided_id, "capture", "cap-voided", 19_900)
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "capture after void");

    let (status, _) = sim.operate("pay_nope", "capture", "cap-nope", 100).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let other_id = id_of(&sim.authorize("auth-3", "order-3", "pm_ok").await.1);
    let (status, _) = sim.operate(&other_id, "capture", "cap-big", 19_901).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "more than authorized");

    let (_, rejected) = sim.get("/v1/operations/cap-2").await;
    assert_eq!(rejected["operation"], "capture");
    assert_eq!(rejected["status"], "rejected");
    let (_, refund) = sim.get("/v1/operations/ref-1").await;
    assert_eq!(refund["status"], "refunded");
    assert_eq!(refund["payment_id"], json!(id));
}

#[tokio::test]
async fn held_capture_answers_wait_for_the_knob_to_turn_off() {
    let sim = Paysim::start(&[]);
    let id = id_of(&sim.authorize("auth-1", "order-1", "pm_ok").await.1);
    let (status, _) = sim.put_faults(json!({ "hold_captures": true })).await;
    assert_eq!(status, StatusCode::OK);
    let capture = tokio::spawn(
        reqwest::Client::new()
            .post(sim.url(&format!("/v1/authorizations/{id}/capture")))
            .header("Idempotency-Key", "cap-1")
            .json(&json!({ "amount_cents": 19_900 }))
            .send(),
    );
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        let (_, held) = sim.get("/admin/held").await;
        if held["captures"] == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "never held: {held}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Processed: the books and the look-up show it; only the answer waits.
    assert_eq!(sim.ledger().await[0]["captures"], 1);
    let (status, operation) = sim.get("/v1/operations/cap-1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(operation["operation"], "capture", "{operation}");
    assert!(!capture.is_finished(), "a held answer was sent");

    let (status, _) = sim.put_faults(json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let answer = tokio::time::timeout(Duration::from_millis(WAIT_MS_MAX), capture)
        .await
        .expect("answered once released")
        .unwrap()
        .expect("capture answered");
    assert_eq!(answer.status(), StatusCode::OK);
    let (_, held) = sim.get("/admin/held").await;
    assert_eq!(held, json!({ "captures": 0, "captures_total": 1 }));
}

#[tokio::test]
async fn ledger_counts_captures_refunds_and_voids_per_payment() {
    let sim = Paysim::start(&[]);
    let refunded = id_of(&sim.authorize("a1", "order-1", "pm_ok").await.1);
    sim.operate(&refunded, "capture", "c1", 19_900).await;
    sim.operate(&refunded, "capture", "c1-again", 19_900).await;
    sim.operate(&refunded, "refund", "r1", 19_900).await;
    let voided = id_of(&sim.authorize("a2", "order-2", "pm_ok").await.1);
    sim.operate(&voided, "void", "v2", 19_900).await;
    sim.authorize("a3", "order-3", "pm_decline").await;

    let ledger = sim.ledger().await;
    assert_eq!(ledger.len(), 3);
    assert_eq!(
        ledger[0],
        json!({
            "id": refunded, "order_id": "order-1", "amount_cents": 19_900,
            "currency": "EUR", "status": "refunded", "authorized": true, "captures": 1, "refunds": 1,
            "voided": false,
        })
    );
    assert_eq!(ledger[1]["status"], "voided");
    assert_eq!(ledger[1]["voided"], true);
    assert_eq!(ledger[1]["captures"], 0);
    assert_eq!(ledger[2]["authorized"], false);
}

#[tokio::test]
async fn events_are_listed_in_order_and_paged() {
    let sim = Paysim::start(&[]);
    let id = id_of(&sim.authorize("a1", "order-1", "pm_ok").await.1);
    sim.operate(&id, "capture", "c1", 15_000).await;
    sim.authorize("a2", "order-2", "pm_decline").await;

    let (status, page) = sim.get("/v1/events?after=0&limit=2").await;
    assert_eq!(status, StatusCode::OK);
    let events = page["events"].as_array().expect("events");
    let seqs: Vec<_> = events
        .iter()
        .map(|e| e["seq"].as_u64().expect("seq"))
        .collect();
    assert_eq!(seqs, [1, 2]);
    assert_eq!(page["next"], 2);
    assert_eq!(events[0]["type"], "payment.authorized");
    assert_eq!(events[1]["type"], "payment.captured");
    assert_eq!(
        events[1]["data"],
        json!({ "payment_id": id, "order_id": "order-1", "amount_cents": 15_000 })
    );
    assert!(events[0]["id"].as_str().expect("id").starts_with("evt_"));
    assert!(events[0]["created"].as_i64().expect("created") > now_unix() - 60);

    let (_, rest) = sim.get("/v1/events?after=2").await;
    assert_eq!(rest["events"][0]["type"], "payment.declined");
    assert_eq!(rest["events"].as_array().expect("events").len(), 1);
    assert_eq!(rest["next"], 3);
    let (_, empty) = sim.get("/v1/events?after=3").await;
    assert_eq!(empty, json!({ "events": [], "next": 3 }));
    let (status, _) = sim.get("/v1/events?after=minus-one").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn webhooks_are_signed_with_every_secret() {
    let receiver = Receiver::start(0).await;
    let sim = Paysim::start(&[
        "--webhook-url",
        &receiver.url,
        "--webhook-secret",
        "old-secret",
        "--webhook-secret",
        "new-secret",
    ]);
    let id = id_of(&sim.authorize("a1", "order-1", "pm_ok").await.1);
    let received = receiver.wait_for(1).await;
    let webhook = &received[0];
    assert!(signature_verifies(webhook, "old-secret"));
    assert!(signature_verifies(webhook, "new-secret"));
    assert!(!signature_verifies(webhook, "another-secret"));
    assert_eq!(webhook.signature.matches("v1=").count(), 2);
    assert!((signature_timestamp(webhook) - now_unix()).abs() <= 5);

    let (_, page) = sim.get("/v1/events").await;
    let mut listed = page["events"][0].clone();
    listed.as_object_mut().expect("object").remove("seq");
    assert_eq!(webhook.json(), listed, "the body is the event without seq");
    assert_eq!(webhook.json()["data"]["payment_id"], json!(id));
}

#[tokio::test]
async fn webhooks_are_duplicated_when_the_knob_is_on() {
    let receiver = Receiver::start(0).await;
    let sim = Paysim::start(&[
        "--webhook-url",
        &receiver.url,
        "--webhook-secret",
        "s",
        "--webhook-duplicate-ratio",
        "1",
    ]);
    for n in 0..3 {
        sim.authorize(&format!("a{n}"), &format!("order-{n}"), "pm_ok")
            .await;
    }
    let received = receiver.wait_for(6).await;
    let mut per_event: HashMap<String, usize> = HashMap::new();
    for webhook in &received {
        assert!(signature_verifies(webhook, "s"));
        *per_event.entry(webhook.event_id()).or_default() += 1;
    }
    assert_eq!(per_event.len(), 3);
    assert!(per_event.values().all(|&count| count == 2), "{per_event:?}");
}

#[tokio::test]
async fn webhooks_are_reordered_within_the_window() {
    let receiver = Receiver::start(0).await;
    let sim = Paysim::start(&[
        "--webhook-url",
        &receiver.url,
        "--webhook-secret",
        "s",
        "--webhook-reorder-window",
        "6",
    ]);
    for n in 0..6 {
        sim.authorize(&format!("a{n}"), &format!("order-{n}"), "pm_ok")
            .await;
    }
    let received: Vec<String> = receiver
        .wait_for(6)
        .await
        .iter()
        .map(Received::event_id)
        .collect();
    let (_, page) = sim.get("/v1/events").await;
    let listed: Vec<String> = page["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_owned())
        .collect();
    assert_ne!(received, listed, "arrival order differs from event order");
    let mut sorted_received = received.clone();
    sorted_received.sort();
    let mut sorted_listed = listed.clone();
    sorted_listed.sort();
    assert_eq!(sorted_received, sorted_listed, "same events, each once");
}

#[tokio::test]
async fn lost_webhooks_stay_in_the_event_list() {
    let receiver = Receiver::start(0).await;
    let sim = Paysim::start(&[
        "--webhook-url",
        &receiver.url,
        "--webhook-secret",
        "s",
        "--webhook-loss-ratio",
        "1",
    ]);
    for n in 0..3 {
        sim.authorize(&format!("a{n}"), &format!("order-{n}"), "pm_ok")
            .await;
    }
    // Lost ones are decided when the event happens; the stats show it at
    // once, and with nothing pending nothing can be sent later.
    let (_, stats) = sim.get("/admin/webhooks").await;
    assert_eq!(stats["lost"], 3);
    assert_eq!(stats["pending"], 0);
    assert_eq!(stats["acknowledged"], 0);
    assert_eq!(stats["retried"], 0);
    assert!(receiver.received().is_empty());
    let (_, page) = sim.get("/v1/events").await;
    assert_eq!(page["events"].as_array().expect("events").len(), 3);
}

#[tokio::test]
async fn failed_webhooks_are_retried_until_acknowledged() {
    let receiver = Receiver::start(2).await;
    let sim = Paysim::start(&["--webhook-url", &receiver.url, "--webhook-secret", "s"]);
    sim.authorize("a1", "order-1", "pm_ok").await;
    let received = receiver.wait_for(3).await;
    let first = received[0].event_id();
    assert!(received.iter().all(|webhook| webhook.event_id() == first));
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        let (_, stats) = sim.get("/admin/webhooks").await;
        if stats["acknowledged"] == 1 {
            assert_eq!(stats["retried"], 2);
            assert_eq!(stats["pending"], 0);
            break;
        }
        assert!(Instant::now() < deadline, "never acknowledged: {stats}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Acknowledged with nothing pending: the sender has nothing left to send.
    assert_eq!(receiver.received().len(), 3, "nothing sent after the 2xx");
}

#[tokio::test]
async fn stale_and_bad_signatures_when_the_knobs_say_so() {
    let receiver = Receiver::start(0).await;
    let sim = Paysim::start(&[
        "--webhook-url",
        &receiver.url,
        "--webhook-secret",
        "s",
        "--webhook-signature-skew-s",
        "-900",
    ]);
    sim.authorize("a1", "order-1", "pm_ok").await;
    let stale = receiver.wait_for(1).await.remove(0);
    assert!(signature_verifies(&stale, "s"), "valid, only old");
    assert!(now_unix() - signature_timestamp(&stale) >= 895);

    let (status, _) = sim
        .put_faults(json!({ "webhook_bad_signature_ratio": 1.0 }))
        .await;
    assert_eq!(status, StatusCode::OK);
    sim.authorize("a2", "order-2", "pm_ok").await;
    let bad = receiver.wait_for(2).await.remove(1);
    assert!(!signature_verifies(&bad, "s"));
}

#[tokio::test]
async fn faults_change_at_run_time() {
    let sim = Paysim::start(&[]);
    let (_, faults) = sim.get("/admin/faults").await;
    assert_eq!(faults["error_5xx_ratio"], 0.0);

    let (status, _) = sim.put_faults(json!({ "error_5xx_ratio": 1.0 })).await;
    assert_eq!(status, StatusCode::OK);
    let (_, faults) = sim.get("/admin/faults").await;
    assert_eq!(faults["error_5xx_ratio"], 1.0);
    let (status, body) = sim.authorize("before", "order-1", "pm_ok").await;
    assert_eq!(
        (status, body["error"].clone()),
        (StatusCode::SERVICE_UNAVAILABLE, json!("unavailable"))
    );
    assert!(sim.ledger().await.is_empty(), "503 before processing");

    sim.put_faults(json!({ "error_5xx_after_processing_ratio": 1.0 }))
        .await;
    let (status, _) = sim.authorize("after", "order-2", "pm_ok").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(sim.ledger().await.len(), 1, "503 after processing");

    let (status, refused) = sim.put_faults(json!({ "reset_ratio": 2.0 })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(refused["message"]
        .as_str()
        .expect("message")
        .contains("reset_ratio"));
    let (_, faults) = sim.get("/admin/faults").await;
    assert_eq!(faults["error_5xx_after_processing_ratio"], 1.0, "kept");

    sim.put_faults(json!({})).await;
    let (status, replay) = sim.authorize("after", "order-2", "pm_ok").await;
    assert_eq!(
        (status, replay["status"].clone()),
        (StatusCode::OK, json!("authorized"))
    );
    let (status, _) = sim.get("/v1/operations/before").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn timeouts_and_resets_leave_the_outcome_to_look_up() {
    let sim = Paysim::start(&["--timeout-ratio", "1"]);
    let outcome = sim
        .http
        .post(sim.url("/v1/authorizations"))
        .header("Idempotency-Key", "held")
        .timeout(Duration::from_millis(300))
        .json(&auth_body("order-1", "pm_ok"))
        .send()
        .await;
    assert!(outcome.expect_err("never answered").is_timeout());
    assert_eq!(sim.ledger().await.len(), 1, "processed before the timeout");

    sim.put_faults(json!({ "reset_ratio": 1.0 })).await;
    for n in 0..6 {
        let outcome = sim
            .http
            .post(sim.url("/v1/authorizations"))
            .header("Idempotency-Key", format!("reset-{n}"))
            .timeout(Duration::from_millis(2_000))
            .json(&auth_body(&format!("order-r{n}"), "pm_ok"))
            .send()
            .await;
        let error = outcome.expect_err("connection reset");
        assert!(!error.is_timeout(), "reset, not timeout: {error}");
    }
    let processed = sim.ledger().await.len() - 1;
    assert!(
        (1..6).contains(&processed),
        "resets happen both before and after processing: {processed} of 6 processed"
    );

    sim.put_faults(json!({})).await;
    let (status, lookup) = sim.get("/v1/operations/held").await;
    assert_eq!(
        (status, lookup["status"].clone()),
        (StatusCode::OK, json!("authorized"))
    );
}

#[tokio::test]
async fn knobs_come_from_a_toml_file_and_flags_override_it() {
    let path = std::env::temp_dir().join(format!("paysim-faults-{}.toml", std::process::id()));
    std::fs::write(&path, "error_5xx_ratio = 0.5\nwebhook_reorder_window = 4\n").expect("write");
    let sim = Paysim::start(&[
        "--faults",
        path.to_str().expect("utf-8 path"),
        "--webhook-reorder-window",
        "9",
    ]);
    let (_, faults) = sim.get("/admin/faults").await;
    let _ = std::fs::remove_file(&path);
    assert_eq!(faults["error_5xx_ratio"], 0.5);
    assert_eq!(faults["webhook_reorder_window"], 9);
}

#[test]
fn invalid_knobs_stop_the_binary() {
    let output = Command::new(env!("CARGO_BIN_EXE_paysim"))
        .args(["--listen", "127.0.0.1:0", "--timeout-ratio", "1.5"])
        .output()
        .expect("paysim runs");
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "never listened");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("timeout_ratio"), "{stderr}");
}

#[tokio::test]
async fn latency_is_added_to_api_answers_only() {
    let sim = Paysim::start(&["--latency-ms", "800"]);
    let started = Instant::now();
    let (status, _) = sim.get("/v1/events").await;
    assert_eq!(status, StatusCode::OK);
    assert!(started.elapsed() >= Duration::from_millis(800));
    let started = Instant::now();
    let (status, health) = sim.get("/healthz").await;
    assert_eq!(
        (status, health),
        (StatusCode::OK, json!({ "status": "ok" }))
    );
    assert!(started.elapsed() < Duration::from_millis(800));
}

#[tokio::test]
async fn a_full_ledger_answers_503() {
    let sim = Paysim::start(&["--payments-max", "2"]);
    assert_eq!(
        sim.authorize("a1", "o1", "pm_ok").await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        sim.authorize("a2", "o2", "pm_ok").await.0,
        StatusCode::CREATED
    );
    let (status, body) = sim.authorize("a3", "o3", "pm_ok").await;
    assert_eq!(
        (status, body["error"].clone()),
        (StatusCode::SERVICE_UNAVAILABLE, json!("ledger_full"))
    );
    assert_eq!(
        sim.authorize("a1", "o1", "pm_ok").await.0,
        StatusCode::OK,
        "replays still work"
    );
    assert_eq!(sim.ledger().await.len(), 2);
}
