//! HTTP routes: the provider API under `/v1`, and the harness's own routes.
//!
//! Handlers parse, call the [`Ledger`](super::ledger::Ledger) under its lock,
//! hand new events to the webhook sender, and answer. Network faults, held
//! capture answers (`hold_captures`) and the test cards' delivery
//! (`pm_lost_response`, `pm_slow`) are applied around `/v1` by
//! `network_faults` only, so handlers never sleep or cut
//! connections themselves.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::json;

use super::conn::ConnectionKill;
use super::faults::{Faults, NetworkFault};
use super::ledger::{Answer, AuthorizeRequest, Delivery, LedgerError, OperationRequest, Processed};
use super::payment::PaymentOp;
use super::Sim;

/// Largest request body, in bytes.
pub const REQUEST_BODY_BYTES_MAX: usize = 16 * 1024;
/// Longest `Idempotency-Key`, in bytes.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 255;
/// `GET /v1/events` page size when `limit` is not given.
pub const EVENTS_PAGE_DEFAULT: usize = 100;
/// Largest `GET /v1/events` page.
pub const EVENTS_PAGE_MAX: usize = 1_000;

/// All routes.
pub fn router(sim: Arc<Sim>) -> Router {
    let provider = Router::new()
        .route("/v1/authorizations", post(authorize))
        .route("/v1/authorizations/{id}/capture", post(capture))
        .route("/v1/authorizations/{id}/void", post(void))
        .route("/v1/authorizations/{id}/refund", post(refund))
        .route("/v1/operations/{key}", get(operation))
        .route("/v1/events", get(events))
        .route_layer(middleware::from_fn_with_state(sim.clone(), network_faults));
    Router::new()
        .merge(provider)
        .route("/ledger", get(ledger))
        .route("/admin/faults", get(get_faults).put(put_faults))
        .route("/admin/webhooks", get(webhook_stats))
        .route("/admin/held", get(held_stats))
        .route(
            "/healthz",
            get(|| async { Json(json!({ "status": "ok" })) }),
        )
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .layer(DefaultBodyLimit::max(REQUEST_BODY_BYTES_MAX))
        .with_state(sim)
}

/// Applies the drawn network fault and the test card's delivery to one
/// `/v1` request. The order matters: a fault that happens "before
/// processing" returns before the handler runs.
async fn network_faults(State(sim): State<Arc<Sim>>, request: Request, next: Next) -> Response {
    let kill = request.extensions().get::<ConnectionKill>().cloned();
    let is_capture = request.uri().path().ends_with("/capture");
    let faults = sim.faults();
    // The request waits for a worker first: a busy provider is slow for
    // every request, faulty or not.
    let Some(worker) = sim.worker().await else {
        return unavailable(&faults).await;
    };
    let fault = sim.draw_network_fault(&faults);
    match fault {
        NetworkFault::Unavailable => return unavailable(&faults).await,
        NetworkFault::Reset {
            after_processing: false,
        } => return cut(kill, true, &faults).await,
        _ => {}
    }
    let response = next.run(request).await;
    if is_capture {
        sim.hold_capture().await;
    }
    match fault {
        NetworkFault::Timeout => {
            // Processed: the worker is free while the answer is lost.
            drop(worker);
            return hold_then_close(kill, &faults).await;
        }
        NetworkFault::Reset { .. } => return cut(kill, true, &faults).await,
        NetworkFault::UnavailableAfterProcessing => return unavailable(&faults).await,
        NetworkFault::Unavailable | NetworkFault::None => {}
    }
    match response.extensions().get::<Delivery>() {
        Some(Delivery::Lost) => {
            drop(worker);
            return hold_then_close(kill, &faults).await;
        }
        Some(Delivery::Slow) => tokio::time::sleep(Duration::from_millis(faults.slow_ms)).await,
        Some(Delivery::Normal) | None => {}
    }
    tokio::time::sleep(Duration::from_millis(faults.latency_ms)).await;
    drop(worker);
    response
}

async fn unavailable(faults: &Faults) -> Response {
    tokio::time::sleep(Duration::from_millis(faults.latency_ms)).await;
    let mut response = error(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "the provider is temporarily unavailable",
    );
    response.headers_mut().insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    response
}

/// Holds the request past any sane client timeout, then closes unanswered.
async fn hold_then_close(kill: Option<ConnectionKill>, faults: &Faults) -> Response {
    tokio::time::sleep(Duration::from_millis(faults.timeout_hold_ms)).await;
    cut(kill, false, faults).await
}

/// Ends the connection; the returned response is never written because the
/// connection task drops this request as soon as the kill fires.
async fn cut(kill: Option<ConnectionKill>, reset: bool, faults: &Faults) -> Response {
    match kill {
        Some(kill) if reset => kill.reset(),
        Some(kill) => kill.close(),
        // Served without the accept loop (no kill handle): say so plainly.
        None => return unavailable(faults).await,
    }
    std::future::pending::<Response>().await
}

async fn authorize(State(sim): State<Arc<Sim>>, headers: HeaderMap, body: Bytes) -> Response {
    let result = idempotency_key(&headers).and_then(|key| {
        let request: AuthorizeRequest = parse_body(&body)?;
        sim.with_ledger(|ledger| ledger.authorize(&key, request, now_unix()))
    });
    answer(&sim, result)
}

async fn capture(
    state: State<Arc<Sim>>,
    id: Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    operate(state, id, headers, body, PaymentOp::Capture)
}

async fn void(
    state: State<Arc<Sim>>,
    id: Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    operate(state, id, headers, body, PaymentOp::Void)
}

async fn refund(
    state: State<Arc<Sim>>,
    id: Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    operate(state, id, headers, body, PaymentOp::Refund)
}

fn operate(
    State(sim): State<Arc<Sim>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
    op: PaymentOp,
) -> Response {
    let result = idempotency_key(&headers).and_then(|key| {
        let request: OperationRequest = if body.is_empty() {
            OperationRequest {
                amount_cents: None,
                currency: None,
            }
        } else {
            parse_body(&body)?
        };
        sim.with_ledger(|ledger| ledger.operate(&key, op, &id, request, now_unix()))
    });
    answer(&sim, result)
}

async fn operation(State(sim): State<Arc<Sim>>, Path(key): Path<String>) -> Response {
    match sim.with_ledger(|ledger| ledger.operation(&key)) {
        Some(view) => Json(view).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "not_found",
            "no operation was received with this Idempotency-Key",
        ),
    }
}

#[derive(Debug, Deserialize)]
struct EventsQuery {
    after: Option<u64>,
    limit: Option<usize>,
}

async fn events(
    State(sim): State<Arc<Sim>>,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "after and limit must be non-negative integers",
        );
    };
    let after = query.after.unwrap_or(0);
    let limit = query
        .limit
        .unwrap_or(EVENTS_PAGE_DEFAULT)
        .clamp(1, EVENTS_PAGE_MAX);
    let page = sim.with_ledger(|ledger| {
        let page = ledger.events_after(after, limit).to_vec();
        let next = page.last().map_or(after, |event| event.seq);
        json!({ "events": page, "next": next })
    });
    Json(page).into_response()
}

async fn ledger(State(sim): State<Arc<Sim>>) -> Response {
    let payments = sim.with_ledger(|ledger| ledger.payments().to_vec());
    Json(json!({ "payments": payments })).into_response()
}

async fn get_faults(State(sim): State<Arc<Sim>>) -> Json<Faults> {
    Json(sim.faults())
}

async fn put_faults(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let faults: Faults = match serde_json::from_slice(&body) {
        Ok(faults) => faults,
        Err(e) => return error(StatusCode::BAD_REQUEST, "bad_request", &e.to_string()),
    };
    match sim.set_faults(faults.clone()) {
        Ok(()) => Json(faults).into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, "bad_request", &e.to_string()),
    }
}

async fn held_stats(State(sim): State<Arc<Sim>>) -> Json<super::HeldStats> {
    Json(sim.held_stats())
}

async fn webhook_stats(State(sim): State<Arc<Sim>>) -> Response {
    match sim.webhook_stats() {
        Some(stats) => Json(stats).into_response(),
        None => Json(json!({ "disabled": true })).into_response(),
    }
}

/// Turns a ledger result into the HTTP answer, after queueing its webhooks.
fn answer(sim: &Sim, result: Result<Processed, LedgerError>) -> Response {
    match result {
        Ok(processed) => {
            sim.enqueue_webhooks(&processed.events);
            let Answer { status, body } = processed.answer;
            let mut response = (status, Json(body)).into_response();
            response.extensions_mut().insert(processed.delivery);
            response
        }
        Err(e) => {
            let (status, code) = match &e {
                LedgerError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
                LedgerError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
                LedgerError::IdempotencyMismatch => {
                    (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_mismatch")
                }
                LedgerError::LedgerFull(_) => (StatusCode::SERVICE_UNAVAILABLE, "ledger_full"),
            };
            error(status, code, &e.to_string())
        }
    }
}

fn idempotency_key(headers: &HeaderMap) -> Result<String, LedgerError> {
    let key = headers
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    let visible_ascii = key.bytes().all(|b| b.is_ascii_graphic());
    if key.is_empty() || key.len() > IDEMPOTENCY_KEY_BYTES_MAX || !visible_ascii {
        return Err(LedgerError::BadRequest(format!(
            "Idempotency-Key must be 1 to {IDEMPOTENCY_KEY_BYTES_MAX} visible ASCII characters"
        )));
    }
    Ok(key.to_owned())
}

fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, LedgerError> {
    serde_json::from_slice(body)
        .map_err(|e| LedgerError::BadRequest(format!("invalid JSON body: {e}")))
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(json!({ "error": code, "message": message }))).into_response()
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}
