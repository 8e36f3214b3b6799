//! `HttpProvider` against a tiny in-test provider speaking the paysim API
//! over real HTTP on port 0: keyed replays, mismatches, a lost response
//! (the effect happens, the answer arrives after the client gave up),
//! 5xx, refused connections, look-ups and the event list.

mod common;

use sluice_checkout::http_client::wait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use common::{key, request, seeds, test_payments, T0_MS};
use serde_json::{json, Value};
use sluice_checkout::{
    AuthorizeOutcome, CheckoutService, HttpProvider, HttpProviderConfig, OperationOutcome,
    OrderState, PaymentError, PaymentProvider, Store,
};

#[derive(Default)]
struct Fake {
    /// key → (params, status code, answer, operation status, payment id)
    operations: HashMap<String, (Value, u16, Value, String, String)>,
    /// payment id → status
    payments: HashMap<String, String>,
    events: Vec<Value>,
    /// The next mutating call takes effect, but answers too late.
    lose_next: bool,
    /// Every call answers 503 without effect.
    down: bool,
    captures: u32,
    /// Every money-moving call's `Authorization` header and `currency`.
    calls: Vec<(String, Value)>,
}

type Shared = Arc<Mutex<Fake>>;

/// Notes what a money-moving call carried.
fn record(fake: &Shared, headers: &HeaderMap, body: &Value) {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    fake.lock()
        .unwrap()
        .calls
        .push((auth, body["currency"].clone()));
}

fn idem(headers: &HeaderMap) -> String {
    headers
        .get("Idempotency-Key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// Runs a keyed operation: replay, mismatch, or `effect` once.
async fn keyed(
    fake: Shared,
    key: String,
    params: Value,
    effect: impl FnOnce(&mut Fake) -> (u16, Value, String, String),
) -> (StatusCode, Json<Value>) {
    let lose = {
        let mut f = fake.lock().unwrap();
        if f.down {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"error": "down"})),
            );
        }
        if let Some((stored, code, answer, _, _)) = f.operations.get(&key) {
            if *stored != params {
                return (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    Json(json!({"error": "idempotency_mismatch"})),
                );
            }
            let code = if *code == 201 { 200 } else { *code };
            return (StatusCode::from_u16(code).unwrap(), Json(answer.clone()));
        }
        let (code, answer, status, payment_id) = effect(&mut f);
        f.operations
            .insert(key, (params, code, answer.clone(), status, payment_id));
        let lose = f.lose_next;
        f.lose_next = false;
        if !lose {
            return (StatusCode::from_u16(code).unwrap(), Json(answer));
        }
        answer
    };
    // The effect is done; the answer comes after the client's timeout.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    (StatusCode::OK, Json(lose))
}

async fn authorize(
    State(fake): State<Shared>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    record(&fake, &headers, &body);
    let key = idem(&headers);
    let params = body.clone();
    keyed(fake, key, params, move |f| {
        let id = format!("pay_{}", f.payments.len() + 1);
        let declined = body["payment_method"] == "pm_decline";
        let status = if declined { "declined" } else { "authorized" };
        f.payments.insert(id.clone(), status.into());
        f.events.push(json!({
            "seq": f.events.len() + 1,
            "id": format!("evt_{}", f.events.len() + 1),
            "type": format!("payment.{status}"),
            "created": 1,
            "data": {"payment_id": id, "order_id": body["order_id"], "amount_cents": body["amount_cents"]},
        }));
        let answer = json!({"id": id, "status": status, "order_id": body["order_id"], "amount_cents": body["amount_cents"]});
        (201, answer, status.into(), id)
    })
    .await
}

async fn movement(
    State(fake): State<Shared>,
    Path((id, action)): Path<(String, String)>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    record(&fake, &headers, &body);
    let key = idem(&headers);
    let params = json!({"id": id, "action": action, "body": body});
    keyed(fake, key, params, move |f| {
        let (from, to) = match action.as_str() {
            "capture" => ("authorized", "captured"),
            "void" => ("authorized", "voided"),
            _ => ("captured", "refunded"),
        };
        match f.payments.get(&id) {
            Some(status) if status == from => {
                f.payments.insert(id.clone(), to.into());
                if to == "captured" {
                    f.captures += 1;
                }
                (200, json!({"id": id, "status": to}), to.into(), id)
            }
            _ => (
                409,
                json!({"error": "invalid_state"}),
                "rejected".into(),
                id,
            ),
        }
    })
    .await
}

async fn lookup(State(fake): State<Shared>, Path(key): Path<String>) -> (StatusCode, Json<Value>) {
    let f = fake.lock().unwrap();
    match f.operations.get(&key) {
        Some((_, _, _, status, payment_id)) => (
            StatusCode::OK,
            Json(json!({"key": key, "operation": "x", "status": status, "payment_id": payment_id})),
        ),
        None => (StatusCode::NOT_FOUND, Json(json!({"error": "not_found"}))),
    }
}

async fn events(State(fake): State<Shared>, Query(q): Query<HashMap<String, u64>>) -> Json<Value> {
    let f = fake.lock().unwrap();
    let after = q.get("after").copied().unwrap_or(0) as usize;
    let limit = q.get("limit").copied().unwrap_or(100) as usize;
    let page: Vec<Value> = f.events.iter().skip(after).take(limit).cloned().collect();
    Json(json!({"events": page, "next": after + page.len()}))
}

/// Starts the fake on port 0 in its own runtime thread.
fn start() -> (Shared, String) {
    let fake: Shared = Arc::default();
    let app = Router::new()
        .route("/v1/authorizations", post(authorize))
        .route("/v1/authorizations/{id}/{action}", post(movement))
        .route("/v1/operations/{key}", get(lookup))
        .route("/v1/events", get(events))
        .with_state(fake.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    let addr = rx.recv().unwrap();
    (fake, format!("http://{addr}"))
}

fn client(base_url: &str) -> HttpProvider {
    HttpProvider::new(HttpProviderConfig {
        base_url: base_url.into(),
        connect_timeout_ms: 300,
        call_timeout_ms: 500,
        api_key: Some("sk_test".into()),
        currency: "EUR".into(),
        name: "paysim".into(),
    })
    .unwrap()
}

#[test]
fn every_call_carries_the_api_key_and_the_configured_currency() {
    let (fake, url) = start();
    let p = client(&url);
    let AuthorizeOutcome::Authorized { payment_id } =
        wait(p.authorize("ord_1:authorize", "ord_1", 500, "pm_ok")).unwrap()
    else {
        panic!("not authorized");
    };
    wait(p.capture("ord_1:capture", &payment_id, 500)).unwrap();
    wait(p.refund("ord_1:refund", &payment_id, 500)).unwrap();
    let calls = fake.lock().unwrap().calls.clone();
    assert_eq!(calls.len(), 3, "{calls:?}");
    for (auth, currency) in calls {
        assert_eq!(auth, "Bearer sk_test");
        assert_eq!(currency, json!("EUR"));
    }
}

#[test]
fn keyed_calls_replay_refuse_mismatches_and_can_be_looked_up() {
    let (fake, url) = start();
    let p = client(&url);
    let first = wait(p.authorize("ord_1:authorize", "ord_1", 500, "pm_ok")).unwrap();
    let AuthorizeOutcome::Authorized { payment_id } = first.clone() else {
        panic!("{first:?}");
    };
    assert_eq!(
        wait(p.authorize("ord_1:authorize", "ord_1", 500, "pm_ok")).unwrap(),
        first
    );
    assert_eq!(
        wait(p.authorize("ord_1:authorize", "ord_1", 501, "pm_ok")),
        Err(PaymentError::Refused("idempotency_mismatch".into()))
    );
    assert!(matches!(
        wait(p.authorize("ord_2:authorize", "ord_2", 500, "pm_decline")),
        Ok(AuthorizeOutcome::Declined { .. })
    ));
    wait(p.capture("ord_1:capture", &payment_id, 500)).unwrap();
    wait(p.capture("ord_1:capture", &payment_id, 500)).unwrap();
    assert_eq!(fake.lock().unwrap().captures, 1);
    assert!(matches!(
        wait(p.void("ord_1:void", &payment_id, 500)),
        Err(PaymentError::Refused(_))
    ));
    assert_eq!(
        wait(p.lookup("ord_1:capture")).unwrap(),
        Some(OperationOutcome::Succeeded {
            payment_id: payment_id.clone()
        })
    );
    assert_eq!(wait(p.lookup("ord_9:authorize")).unwrap(), None);
    // A kind this version does not know is skipped, the cursor moves on.
    fake.lock().unwrap().events.push(json!({
        "seq": 3, "id": "evt_3", "type": "payment.disputed", "created": 1,
        "data": {"payment_id": payment_id, "order_id": "ord_1", "amount_cents": 500},
    }));
    let page = wait(p.events_since(0, 10)).unwrap();
    assert_eq!(page.events.len(), 2);
    assert_eq!(page.next, 3);
    assert_eq!(wait(p.events_since(3, 10)).unwrap().events.len(), 0);
}

#[test]
fn a_lost_response_5xx_and_a_dead_port_are_ambiguous() {
    let (fake, url) = start();
    let p = client(&url);
    fake.lock().unwrap().lose_next = true;
    assert_eq!(
        wait(p.authorize("ord_1:authorize", "ord_1", 500, "pm_ok")),
        Err(PaymentError::Ambiguous)
    );
    assert!(matches!(
        wait(p.lookup("ord_1:authorize")).unwrap(),
        Some(OperationOutcome::Succeeded { .. })
    ));
    fake.lock().unwrap().down = true;
    assert_eq!(
        wait(p.authorize("ord_2:authorize", "ord_2", 500, "pm_ok")),
        Err(PaymentError::Ambiguous)
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    assert_eq!(
        wait(client(&dead).authorize("ord_3:authorize", "ord_3", 500, "pm_ok")),
        Err(PaymentError::Ambiguous)
    );
}

#[test]
fn checkout_over_http_survives_a_lost_authorization_answer() {
    let (fake, url) = start();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    store.seed_products(&seeds(&[("sku-a", 5)])).unwrap();
    let service =
        CheckoutService::with_payments(Arc::clone(&store), Arc::new(client(&url)), test_payments());
    fake.lock().unwrap().lose_next = true;
    let (order, _) = service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Confirmed);
    let f = fake.lock().unwrap();
    assert_eq!(f.payments.len(), 1, "one authorization");
    assert_eq!(f.captures, 1, "one capture");
}
