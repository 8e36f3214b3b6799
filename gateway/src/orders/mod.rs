//! The reservation core over HTTP: `POST /checkout`, `GET /orders/{id}`,
//! `POST /orders/{id}/cancel`, the admin inventory adjustment, the orders
//! worker and the sold-out hook.
//!
//! The core (`sluice-checkout`) is durable: each call returns once its
//! transaction is committed. Every call goes through its
//! store boundary (`OrderBackend`): the embedded SQLite back end in
//! `gateway.data_dir` by default, or one PostgreSQL database shared by a
//! fleet with `[cluster] postgres_url` (stock, orders, webhooks,
//! adjustments, the worker's passes and the books alike). An unreachable
//! PostgreSQL answers `503 store_unavailable` with `Retry-After`. Every
//! call, and the sold-out
//! refresh after it, runs on a bounded blocking pool (`pool`): checkouts
//! and cancels on their own budget (`gateway.checkouts_in_flight_max`),
//! each a task holding a permit whose store steps go to blocking threads
//! one by one and whose provider calls (a refund's, for a cancel) are
//! awaited in between (no thread waits for the provider); the short store
//! calls on another; nothing of it runs on a
//! proxy worker thread, and a full pool answers `503 overloaded` at once.
//!
//! A pass is a bounded right: it may start a checkout only while its room
//! says it holds its active slot, and at most the room's
//! `max_orders_per_pass` of them (counted by the store, in the transaction
//! that creates the order). Once it has started them all and they have
//! ended, its slot goes back to the line.

mod backend_outcome;
mod collector;
mod payments;
pub mod pool;
mod sink;
mod stock;
mod subject_gate;
mod worker;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use serde_json::json;
use sluice_admission::tokens::Claims;
use sluice_admission::PassOrders;
use sluice_checkout::webhook::WebhookEvent;
use sluice_checkout::{
    CheckoutError, CheckoutRequest, CheckoutService, GroupCommitConfig, IdempotencyKey, Order,
    OrderBackend, OrderLimits, OrderState, PgBackend, PgConfig, ProductSeed, SqliteBackend, Store,
};
use sluice_policies::Config;
use tokio::sync::mpsc;

use crate::clock::now_ms;
use crate::error::{ApiError, ErrorCode};
use crate::metrics::Metrics;
use crate::queue::Rooms;
use crate::response::LocalResponse;
pub use collector::OrdersCollector;
pub use payments::simulator_outside_demo;
use pool::{BlockingPool, BlockingThreads, Overloaded};
pub use sink::Backoff;
pub use stock::StoreStock;
use subject_gate::SubjectGate;
pub use worker::OrdersWorker;

/// Largest `/checkout` body read; the order is three short fields.
pub const CHECKOUT_BODY_BYTES_MAX: usize = 16 * 1024;
/// Largest webhook body read; a provider event is a few hundred bytes.
pub const WEBHOOK_BODY_BYTES_MAX: usize = 64 * 1024;
/// Short store calls (order reads, webhooks, adjustments) in
/// flight at once, at most; checkouts have their own budget.
pub const STORE_CALLS_IN_FLIGHT_MAX: usize = 64;
/// PostgreSQL connections one gateway keeps for new checkouts, reads and
/// the background passes (`[cluster] postgres_url`); payments under way
/// have `sluice_checkout::backend::postgres::ANSWER_POOL_MAX` more of their
/// own. A connection is held for one transaction, never across a provider
/// call; a call that finds none free within 2 s answers
/// `503 store_unavailable`. Size the server's `max_connections` to both
/// times the fleet's gateways, plus room for operators.
pub const PG_POOL_MAX: u32 = 16;

pub struct Orders {
    /// The stock and order authority: SQLite in `data_dir`, or the fleet's
    /// PostgreSQL.
    backend: Arc<dyn OrderBackend>,
    /// `gateway.data_dir` (the outbox's JSON-lines file lives there).
    data_dir: PathBuf,
    /// Checkouts in flight (store and provider calls, retry waits).
    checkouts: BlockingPool,
    /// Every other call into the core.
    calls: BlockingPool,
    /// Order calls in flight per pass, so one pass cannot hold the pools.
    gate: SubjectGate,
    /// Where events go; read when the worker starts (restart to change).
    outbox: sluice_policies::model::Outbox,
    stock: Arc<StoreStock>,
    stuck: Mutex<Vec<(OrderState, usize)>>,
    /// The simulator's events, until the webhook sender takes them.
    sim_events: Mutex<Option<mpsc::Receiver<WebhookEvent>>>,
    gauges: Mutex<StoreGauges>,
}

/// What the order routes need from the rest of the gateway.
pub struct Env<'a> {
    pub rooms: &'a Rooms,
    pub config: &'a Config,
    pub metrics: &'a Metrics,
}

/// What a request under `/checkout` or `/orders/` asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum OrderRoute<'a> {
    Checkout,
    Get(&'a str),
    Cancel(&'a str),
}

impl OrderRoute<'_> {
    /// The order route of `path`, if it is one.
    pub fn of(path: &str) -> Option<OrderRoute<'_>> {
        if path == "/checkout" {
            return Some(OrderRoute::Checkout);
        }
        let rest = path.strip_prefix("/orders/")?;
        match rest.split_once('/') {
            None if !rest.is_empty() => Some(OrderRoute::Get(rest)),
            Some((id, "cancel")) if !id.is_empty() => Some(OrderRoute::Cancel(id)),
            _ => None,
        }
    }

    fn method(&self) -> Method {
        match self {
            OrderRoute::Get(_) => Method::GET,
            _ => Method::POST,
        }
    }
}

impl Orders {
    /// Opens the store (PostgreSQL with `[cluster] postgres_url`, else
    /// SQLite in `gateway.data_dir`) and seeds the configured products
    /// (first time only).
    pub fn open(config: &Config, metrics: &Metrics) -> Result<Self, String> {
        let dropped = metrics.webhook_deliveries.with_label_values(&["dropped"]);
        let (provider, sim_events) = payments::provider(&config.payments, dropped)?;
        let backend: Arc<dyn OrderBackend> = match &config.cluster.postgres_url {
            Some(url) => {
                // Still this gateway's own: the outbox file, the signing key.
                std::fs::create_dir_all(&config.gateway.data_dir)
                    .map_err(|e| format!("creating {}: {e}", config.gateway.data_dir.display()))?;
                let pg = PgConfig {
                    pool_max: PG_POOL_MAX,
                    prepared_statements: config.cluster.postgres_prepared_statements,
                    ..PgConfig::new(url.expose())
                };
                let backend = PgBackend::open(&pg, provider).map_err(|e| {
                    format!("[cluster] postgres_url: opening the shared order store: {e}")
                })?;
                tracing::info!(
                    pool_max = PG_POOL_MAX,
                    prepared_statements = pg.prepared_statements,
                    "orders on the fleet's PostgreSQL"
                );
                Arc::new(backend)
            }
            None => {
                let group_commit = GroupCommitConfig {
                    commit_delay: config.gateway.test_store_commit_delay,
                    ..GroupCommitConfig::default()
                };
                if !group_commit.commit_delay.is_zero() {
                    tracing::warn!(delay = ?group_commit.commit_delay, "test knob: every store commit is slowed down");
                }
                let store =
                    Store::open_with(&config.gateway.data_dir, group_commit).map_err(|e| {
                        format!(
                            "opening the order store in {}: {e}",
                            config.gateway.data_dir.display()
                        )
                    })?;
                let service = Arc::new(CheckoutService::with_payments(
                    Arc::new(store),
                    provider,
                    sluice_checkout::PaymentsConfig::default(),
                ));
                Arc::new(SqliteBackend::new(service))
            }
        };
        let orders = Self {
            backend,
            data_dir: config.gateway.data_dir.clone(),
            checkouts: BlockingPool::new(config.gateway.checkouts_in_flight_max.get()),
            calls: BlockingPool::new(STORE_CALLS_IN_FLIGHT_MAX),
            gate: SubjectGate::default(),
            outbox: config.outbox.clone(),
            stock: Arc::new(StoreStock::default()),
            stuck: Mutex::new(Vec::new()),
            sim_events: Mutex::new(sim_events),
            gauges: Mutex::new(StoreGauges::default()),
        };
        orders.apply(config)?;
        orders.refresh_books();
        orders.refresh_gauges();
        Ok(orders)
    }

    /// Seeds products new to the store and takes the config's prices,
    /// TTLs and rooms. Stock of known SKUs is never reset by config.
    pub fn apply(&self, config: &Config) -> Result<(), String> {
        let seeds = Self::plan(config)?;
        self.commit(config, &seeds)
    }

    /// The store rows `config` asks for, checked but not written.
    pub fn plan(config: &Config) -> Result<Vec<ProductSeed>, String> {
        let seeds: Vec<ProductSeed> = config
            .products
            .iter()
            .map(|p| ProductSeed {
                sku: p.sku.clone(),
                total: p.stock,
                price_cents: p.price_cents,
                reservation_ttl_ms: config
                    .room(&p.room)
                    .map_or(600_000, |r| r.reservation_ttl.as_millis() as i64),
                partitions: p.partitions.get(),
            })
            .collect();
        Store::check_seeds(&seeds).map_err(|e| format!("products: {e}"))?;
        Ok(seeds)
    }

    /// Writes `seeds` (prices, TTLs, new SKUs) in one transaction, then
    /// takes the config's sku → room map. A failed write changes nothing.
    pub fn commit(&self, config: &Config, seeds: &[ProductSeed]) -> Result<(), String> {
        self.backend
            .seed_products_at(seeds, now_ms() as i64)
            .map_err(|e| format!("seeding products: {e}"))?;
        self.stock.apply(config);
        self.refresh_stock();
        Ok(())
    }

    /// The simulator's event queue (once; `None` for other providers).
    pub fn take_sim_events(&self) -> Option<mpsc::Receiver<WebhookEvent>> {
        self.sim_events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    pub fn outbox_config(&self) -> &sluice_policies::model::Outbox {
        &self.outbox
    }

    /// The store boundary (SQLite or PostgreSQL).
    pub fn backend(&self) -> &Arc<dyn OrderBackend> {
        &self.backend
    }

    pub fn data_dir(&self) -> &std::path::Path {
        &self.data_dir
    }

    /// `POST /webhooks/{provider}`: the provider's secrets (its own
    /// `[payments.webhooks.<provider>]`, else the shared list; neither:
    /// `404`), then the signature before anything else; `2xx` only once the
    /// event is durably applied (or was already), so the provider retries
    /// on anything else.
    pub async fn webhook(
        &self,
        provider: &str,
        headers: &HeaderMap,
        body: Bytes,
        payments: &sluice_policies::model::Payments,
    ) -> LocalResponse {
        use sluice_checkout::webhook::{count_refused, parse_event, verify_signature};
        let Some(secrets) = payments.webhook_secrets_for(provider) else {
            return LocalResponse::error(&ApiError::new(
                ErrorCode::NotFound,
                "No webhook endpoint is configured for this provider.",
            ));
        };
        let metrics = self.backend.metrics();
        let header = headers
            .get("sluice-signature")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let secrets: Vec<&[u8]> = secrets.iter().map(|s| s.expose().as_bytes()).collect();
        let now_ms = now_ms() as i64;
        if let Err(e) = verify_signature(
            header,
            &body,
            &secrets,
            now_ms / 1000,
            sluice_checkout::limits::WEBHOOK_TOLERANCE_S,
        ) {
            count_refused(metrics, &e);
            return LocalResponse::error(&ApiError::new(
                ErrorCode::Unauthorized,
                "The webhook signature does not verify.",
            ));
        }
        let event = match parse_event(&body) {
            Ok(event) => event,
            Err(e) => {
                count_refused(metrics, &e);
                return LocalResponse::error(&ApiError::new(
                    ErrorCode::BadRequest,
                    "The webhook body is not a provider event.",
                ));
            }
        };
        let (backend, stock) = (self.backend.clone(), self.stock.clone());
        let applied = self.calls.run(move || {
            let applied = backend.apply_webhook(&event, now_ms);
            if applied.is_ok() {
                refresh(&stock, backend.as_ref());
            }
            applied
        });
        let Ok(applied) = applied.await else {
            return overloaded();
        };
        match applied {
            Ok(outcome) => {
                let mut body =
                    serde_json::to_vec(&json!({"result": outcome.result()})).expect("serializes");
                body.push(b'\n');
                LocalResponse {
                    status: StatusCode::OK,
                    headers: vec![(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    )],
                    body: Bytes::from(body),
                    source: "webhook",
                }
            }
            Err(sluice_checkout::StoreError::Unavailable(e)) => {
                tracing::warn!("webhook not applied, order store unavailable: {e}");
                LocalResponse::error(
                    &ApiError::new(
                        ErrorCode::StoreUnavailable,
                        "The order store cannot be reached; send the event again.",
                    )
                    .retry_after(1),
                )
            }
            Err(e) => {
                tracing::error!("webhook not applied: {e}");
                LocalResponse::error(&ApiError::new(
                    ErrorCode::Internal,
                    "The event could not be stored; send it again.",
                ))
            }
        }
    }

    pub fn stock_authority(&self) -> Arc<StoreStock> {
        self.stock.clone()
    }

    /// Re-reads the sold-out snapshot. Blocking: for the orders worker and
    /// start-up, never a proxy thread (handlers refresh inside their pool
    /// call).
    pub fn refresh_stock(&self) {
        refresh(&self.stock, self.backend.as_ref());
    }

    /// Re-reads the whole books (stock and orders per state). Blocking:
    /// for the orders worker and start-up.
    pub fn refresh_books(&self) {
        if let Err(e) = self.stock.refresh_books(self.backend.as_ref()) {
            tracing::warn!("books not refreshed: {e}");
        }
    }

    fn set_stuck(&self, stuck: Vec<(OrderState, usize)>) {
        *self.stuck.lock().unwrap_or_else(|p| p.into_inner()) = stuck;
    }

    pub fn stuck(&self) -> Vec<(OrderState, usize)> {
        self.stuck.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Answers an order route. `body` is the request body, already read
    /// (bounded by [`CHECKOUT_BODY_BYTES_MAX`]); `pass` is the pass the
    /// proxy already verified for this request, if it did (a pass is
    /// verified once per request).
    pub async fn handle(
        &self,
        route: OrderRoute<'_>,
        method: &Method,
        headers: &HeaderMap,
        body: Bytes,
        pass: Option<(String, Claims)>,
        env: &Env<'_>,
    ) -> LocalResponse {
        let (rooms, config, metrics) = (env.rooms, env.config, env.metrics);
        if *method != route.method() {
            let mut r = LocalResponse::error(&ApiError::new(
                ErrorCode::MethodNotAllowed,
                "This method is not allowed here.",
            ));
            let allow = if route.method() == Method::GET {
                "GET"
            } else {
                "POST"
            };
            r.headers
                .push((header::ALLOW, HeaderValue::from_static(allow)));
            return r;
        }
        let Some((room, pass)) = pass.or_else(|| rooms.pass_of(headers, metrics)) else {
            return invalid_pass(config);
        };
        let subject = format!("{room}/{}", pass.sub);
        let Some(_call) = self.gate.enter(&subject) else {
            if route == OrderRoute::Checkout {
                metrics
                    .checkout
                    .with_label_values(&[&room, "rate_limited"])
                    .inc();
            }
            return pass_busy();
        };
        let backend = self.backend.clone();
        match route {
            OrderRoute::Checkout => {
                let started = std::time::Instant::now();
                let answer = self
                    .checkout(&room, &pass, subject, headers, body, env)
                    .await;
                metrics
                    .checkout_seconds
                    .with_label_values(&[&room])
                    .observe(started.elapsed().as_secs_f64());
                answer
            }
            OrderRoute::Get(id) => {
                let id = id.to_string();
                match self
                    .calls
                    .run(move || backend.get_order(&subject, &id))
                    .await
                {
                    Ok(result) => order_answer(result, StatusCode::OK),
                    Err(Overloaded) => overloaded(),
                }
            }
            OrderRoute::Cancel(id) => {
                let id = id.to_string();
                let stock = self.stock.clone();
                // Async, like a checkout: a refund's provider calls hold no
                // thread, and the cancel runs on if the client hangs up.
                let cancelled = self.checkouts.spawn_held(async move {
                    let now = now_ms() as i64;
                    let result = backend
                        .cancel_on(&BlockingThreads, &subject, &id, now)
                        .await;
                    if unreachable(&result) {
                        return (result, None);
                    }
                    let ok = result.is_ok();
                    let after = tokio::task::spawn_blocking(move || {
                        refresh(&stock, backend.as_ref());
                        ok.then(|| backend.subject_orders(&subject))
                    })
                    .await;
                    (result, after_step(after).flatten())
                });
                let Ok((result, orders)) = cancelled.await else {
                    return overloaded();
                };
                give_back_if_spent(rooms, &room, &pass, orders);
                order_answer(result, StatusCode::OK)
            }
        }
    }

    async fn checkout(
        &self,
        room: &str,
        pass: &Claims,
        subject: String,
        headers: &HeaderMap,
        body: Bytes,
        env: &Env<'_>,
    ) -> LocalResponse {
        let (rooms, config, metrics) = (env.rooms, env.config, env.metrics);
        let count = |result: &str| metrics.checkout.with_label_values(&[room, result]).inc();
        let key = match headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(IdempotencyKey::parse)
        {
            Some(Ok(key)) => key,
            _ => {
                count("bad_request");
                return LocalResponse::error(&ApiError::new(
                    ErrorCode::BadRequest,
                    "An Idempotency-Key header of 8 to 255 visible ASCII characters is required.",
                ));
            }
        };
        let request: CheckoutRequest = match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => {
                count("bad_request");
                return LocalResponse::error(&ApiError::new(
                    ErrorCode::BadRequest,
                    format!("The body must be {{\"sku\", \"quantity\", \"payment_method\"}}: {e}"),
                ));
            }
        };
        // Refused here, before the pool: a request the core would refuse
        // at once takes no permit and says nothing of the backend's health
        // (see `backend_outcome`).
        if let Err(e) = request.validate() {
            count("bad_request");
            return LocalResponse::error(&ApiError::new(ErrorCode::BadRequest, e.to_string()));
        }
        match config.products.iter().find(|p| p.sku == request.sku) {
            None => {
                count("not_found");
                return LocalResponse::error(&ApiError::new(
                    ErrorCode::NotFound,
                    "There is no product with this sku.",
                ));
            }
            Some(p) if p.room != room => {
                count("forbidden");
                return LocalResponse::error(&ApiError::new(
                    ErrorCode::Forbidden,
                    "Your pass is for another waiting room than this product's.",
                ));
            }
            Some(p) if request.quantity > p.max_per_order.get() => {
                count("bad_request");
                return LocalResponse::error(&ApiError::new(
                    ErrorCode::BadRequest,
                    format!(
                        "At most {} units of this product fit in one order.",
                        p.max_per_order
                    ),
                ));
            }
            Some(_) => {}
        }
        // A pass whose slot went back (spent, expired, or from before a
        // restart) may create nothing, but its keys still replay.
        let limits = OrderLimits {
            orders_per_subject_max: if rooms.may_start(room, pass) {
                rooms.orders_per_pass_max(room)
            } else {
                0
            },
        };
        let (backend, stock) = (self.backend.clone(), self.stock.clone());
        let sku = request.sku.clone();
        let started = std::time::Instant::now();
        let _in_flight = rooms.checkout_started(room, pass);
        let ran = self
            .checkouts
            .spawn_held(async move {
                let now = now_ms() as i64;
                let result = backend
                    .checkout_on(&BlockingThreads, &subject, &key, &request, limits, now)
                    .await;
                if unreachable(&result) {
                    // Nothing changed, and the store would not answer more now.
                    return (result, None);
                }
                // A shared store is re-read only when this checkout found
                // the stock gone (the room should stop admitting now);
                // otherwise by the worker's pass each second, sparing the
                // pool a read per checkout.
                let sold_out = matches!(&result, Ok((o, _)) if o.state == OrderState::Rejected);
                let after = tokio::task::spawn_blocking(move || {
                    if backend.books_in_memory() || sold_out {
                        refresh(&stock, backend.as_ref());
                    }
                    // Counted after refusals too: a pass over a limit
                    // lowered by a reload gives its slot back here.
                    backend.subject_orders(&subject)
                })
                .await;
                (result, after_step(after))
            })
            .await;
        let latency_ms = started.elapsed().as_millis().min(u128::from(u32::MAX)) as u32;
        let Ok((result, orders)) = ran else {
            count("overloaded");
            rooms.record_checkout(room, latency_ms, backend_outcome::OVERLOADED);
            return overloaded();
        };
        if let Some(outcome) = backend_outcome::of(&result) {
            rooms.record_checkout(room, latency_ms, outcome);
        }
        match &result {
            Ok((order, created)) => {
                if *created == sluice_checkout::Created::Created {
                    let reserved = if order.state == OrderState::Rejected {
                        "sold_out"
                    } else {
                        "reserved"
                    };
                    metrics
                        .reservations
                        .with_label_values(&[&sku, reserved])
                        .inc();
                }
                count(order.state.as_str());
            }
            Err(e) => count(e.code()),
        }
        give_back_if_spent(rooms, room, pass, orders);
        match result {
            Ok((order, created)) => {
                let status = StatusCode::from_u16(created.status()).unwrap_or(StatusCode::OK);
                order_answer(Ok(order), status)
            }
            Err(e) => order_answer(Err(e), StatusCode::OK),
        }
    }

    /// `POST /admin/inventory/{sku}/adjust` with `{"delta", "reason"}`.
    pub async fn adjust(&self, sku: &str, body: &[u8]) -> (StatusCode, serde_json::Value) {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Adjust {
            delta: i64,
            reason: String,
        }
        let adjust: Adjust = match serde_json::from_slice(body) {
            Ok(a) => a,
            Err(e) => {
                return error_json(
                    ErrorCode::BadRequest,
                    &format!("The body must be {{\"delta\": integer, \"reason\": string}}: {e}"),
                )
            }
        };
        if adjust.reason.trim().is_empty() || adjust.reason.len() > 500 {
            return error_json(
                ErrorCode::BadRequest,
                "A reason of 1 to 500 characters is required.",
            );
        }
        let (backend, stock) = (self.backend.clone(), self.stock.clone());
        let sku = sku.to_string();
        let adjusted = self.calls.run(move || {
            let result = backend.adjust(&sku, adjust.delta, &adjust.reason, now_ms() as i64);
            if result.is_ok() {
                refresh(&stock, backend.as_ref());
            }
            result
        });
        let Ok(result) = adjusted.await else {
            return error_json(
                ErrorCode::Overloaded,
                "Too many store calls in flight; try again shortly.",
            );
        };
        match result {
            Ok(level) => (
                StatusCode::OK,
                json!({"sku": level.sku, "total": level.total, "available": level.available, "reserved": level.reserved, "committed": level.committed}),
            ),
            Err(sluice_checkout::StoreError::UnknownSku(_)) => {
                error_json(ErrorCode::NotFound, "There is no product with this sku.")
            }
            Err(sluice_checkout::StoreError::Unavailable(e)) => {
                tracing::warn!("adjustment not applied, order store unavailable: {e}");
                error_json(
                    ErrorCode::StoreUnavailable,
                    "The order store cannot be reached; nothing was changed, try again.",
                )
            }
            Err(e @ sluice_checkout::StoreError::InvalidArgument(_)) => {
                error_json(ErrorCode::BadRequest, &e.to_string())
            }
            Err(e) => {
                tracing::error!("adjustment not applied: {e}");
                error_json(ErrorCode::Internal, "The adjustment could not be stored.")
            }
        }
    }

    /// `/admin/state` `inventory` and `orders`: the books read now (on the
    /// short-call pool; from memory on SQLite), or, if the store cannot
    /// answer, the last books read (logged).
    pub async fn state(&self) -> (serde_json::Value, serde_json::Value) {
        let backend = self.backend.clone();
        let books = match self.calls.run(move || backend.books()).await {
            Ok(Ok(books)) => Arc::new(books),
            Ok(Err(e)) => {
                tracing::warn!("/admin/state shows the last books read: {e}");
                self.stock.books()
            }
            Err(Overloaded) => self.stock.books(),
        };
        let inventory = json!(books
            .inventory
            .iter()
            .map(|l| json!({"sku": l.sku, "total": l.total, "available": l.available, "reserved": l.reserved, "committed": l.committed}))
            .collect::<Vec<_>>());
        let orders: serde_json::Map<String, serde_json::Value> = books
            .orders
            .iter()
            .map(|(s, n)| (s.as_str().to_string(), json!(n)))
            .collect();
        (inventory, serde_json::Value::Object(orders))
    }

    /// The books as last read (no I/O: metrics scrapes).
    pub fn books(&self) -> Arc<sluice_checkout::Books> {
        self.stock.books()
    }

    /// Re-reads the outbox and hold gauges (blocking: the orders worker's
    /// pass calls it, so scrapes read memory).
    pub fn refresh_gauges(&self) {
        let gauges = match self.backend.gauges(now_ms() as i64) {
            Ok(g) => StoreGauges {
                outbox_pending: Some(g.outbox_pending),
                outbox_lag_ms: Some(g.outbox_lag_ms),
                oldest_hold_age_ms: Some(g.oldest_hold_age_ms),
            },
            Err(e) => {
                tracing::warn!("store gauges not read: {e}");
                StoreGauges::default()
            }
        };
        *self.gauges.lock().unwrap_or_else(|p| p.into_inner()) = gauges;
    }

    pub fn gauges(&self) -> StoreGauges {
        *self.gauges.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Store gauges as of the orders worker's last pass (`None`: not read).
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreGauges {
    pub outbox_pending: Option<u64>,
    pub outbox_lag_ms: Option<i64>,
    pub oldest_hold_age_ms: Option<i64>,
}

/// Re-reads the sold-out snapshot (blocking: call it inside a pool call).
fn refresh(stock: &StoreStock, backend: &dyn OrderBackend) {
    if let Err(e) = stock.refresh(backend) {
        tracing::warn!("sold-out snapshot not refreshed: {e}");
    }
}

/// Whether a call failed because the store could not be reached (then
/// nothing more is asked of it in this call).
fn unreachable<T>(result: &Result<T, CheckoutError>) -> bool {
    matches!(
        result,
        Err(CheckoutError::Store(
            sluice_checkout::StoreError::Unavailable(_)
        ))
    )
}

/// What the store read after a call found; a panic in it is resumed, and
/// nothing is found when the runtime is shutting down.
fn after_step<T>(joined: Result<T, tokio::task::JoinError>) -> Option<T> {
    match joined {
        Ok(t) => Some(t),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => None,
    }
}

/// After a checkout or cancel: the pass's slot goes back to the line once
/// it has started every checkout it may and none is still running.
fn give_back_if_spent(
    rooms: &Rooms,
    room: &str,
    pass: &Claims,
    orders: Option<Result<sluice_checkout::SubjectOrders, CheckoutError>>,
) {
    match orders {
        Some(Ok(o)) => {
            let orders = PassOrders {
                started: o.started,
                open: o.open,
            };
            rooms.give_back_if_spent(room, pass.seq, orders);
        }
        // The slot stays held; the pass's expiry frees it at the latest.
        Some(Err(e)) => tracing::warn!("pass orders not counted: {e}"),
        None => {}
    }
}

/// Every permit of the pool is taken: refused at once, not queued.
fn overloaded() -> LocalResponse {
    LocalResponse::error(
        &ApiError::new(
            ErrorCode::Overloaded,
            "Too many checkouts are in progress; try again in a moment.",
        )
        .retry_after(1),
    )
}

/// The pass already has [`subject_gate::PASS_CALLS_IN_FLIGHT_MAX`] order
/// calls in flight on this gateway.
fn pass_busy() -> LocalResponse {
    LocalResponse::error(
        &ApiError::new(
            ErrorCode::RateLimited,
            "This pass already has requests in progress; wait for their answers.",
        )
        .retry_after(1),
    )
}

fn invalid_pass(config: &Config) -> LocalResponse {
    let mut e = ApiError::new(
        ErrorCode::InvalidPass,
        "Checkout needs an admission pass from the waiting room.",
    );
    if let Some(room) = config.rooms.first() {
        e = e.with("join", format!("/queue/{}/join", room.name));
    }
    LocalResponse::error(&e)
}

fn error_json(code: ErrorCode, message: &str) -> (StatusCode, serde_json::Value) {
    (
        code.status(),
        json!({"error": code.as_str(), "message": message}),
    )
}

/// The contract's order JSON, or the error it maps to.
fn order_answer(result: Result<Order, CheckoutError>, status: StatusCode) -> LocalResponse {
    match result {
        Ok(order) => {
            let mut body = serde_json::to_vec(&order.view()).expect("order view serializes");
            body.push(b'\n');
            LocalResponse {
                status,
                headers: vec![
                    (
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    ),
                    (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
                ],
                body: Bytes::from(body),
                source: "orders",
            }
        }
        Err(e) => {
            let code = match e {
                CheckoutError::BadRequest(_) => ErrorCode::BadRequest,
                CheckoutError::NotFound => ErrorCode::NotFound,
                CheckoutError::Conflict => ErrorCode::IdempotencyConflict,
                CheckoutError::Mismatch => ErrorCode::IdempotencyMismatch,
                CheckoutError::PurchaseLimit => ErrorCode::PurchaseLimit,
                CheckoutError::Store(sluice_checkout::StoreError::UnknownSku(_)) => {
                    ErrorCode::NotFound
                }
                CheckoutError::Store(sluice_checkout::StoreError::Unavailable(ref s)) => {
                    tracing::warn!("order store unavailable: {s}");
                    ErrorCode::StoreUnavailable
                }
                CheckoutError::Store(ref s) => {
                    tracing::error!("order store: {s}");
                    ErrorCode::Internal
                }
            };
            let message = match &e {
                CheckoutError::Store(sluice_checkout::StoreError::Unavailable(_)) => {
                    "The order store cannot be reached; retry with the same Idempotency-Key."
                        .to_string()
                }
                CheckoutError::Store(_) => {
                    "The order could not be stored; retry with the same Idempotency-Key."
                        .to_string()
                }
                other => sentence(&other.to_string()),
            };
            let mut api = ApiError::new(code, message);
            if code == ErrorCode::IdempotencyConflict || code == ErrorCode::StoreUnavailable {
                // The first request is still running, or the store is
                // back soon: say when to retry.
                api = api.retry_after(1);
            }
            LocalResponse::error(&api)
        }
    }
}

/// A message for a person: capitalised, ending with a full stop.
fn sentence(s: &str) -> String {
    let mut c = s.chars();
    let mut out: String = match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    };
    if !out.ends_with('.') {
        out.push('.');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_postgres_url_fails_the_start_naming_the_key() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // Nothing listens there any more: the connection is refused.
        let src =
            format!("[gateway]\n[cluster]\npostgres_url = \"postgres://u@127.0.0.1:{port}/db\"\n");
        let config = sluice_policies::validate::parse_with_env(
            &src,
            std::path::Path::new("p.toml"),
            &|_| None,
        )
        .unwrap();
        let err = Orders::open(&config, &Metrics::new("test"))
            .err()
            .expect("refused");
        assert!(err.contains("[cluster] postgres_url"), "{err}");
        assert!(!err.contains("u@127.0.0.1"), "the URL is a secret: {err}");
    }

    #[test]
    fn an_unreachable_store_is_503_store_unavailable_with_retry_after() {
        let e = CheckoutError::Store(sluice_checkout::StoreError::Unavailable("down".into()));
        let response = order_answer(Err(e), StatusCode::OK);
        assert_eq!(response.status, StatusCode::SERVICE_UNAVAILABLE);
        let retry = response
            .headers
            .iter()
            .find(|(name, _)| name == header::RETRY_AFTER)
            .map(|(_, value)| value.to_str().unwrap().to_owned());
        assert_eq!(retry.as_deref(), Some("1"));
        let body: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
        assert_eq!(body["error"], "store_unavailable");
    }

    #[test]
    fn order_routes_are_recognised_exactly() {
        assert_eq!(OrderRoute::of("/checkout"), Some(OrderRoute::Checkout));
        assert_eq!(
            OrderRoute::of("/orders/ord_1"),
            Some(OrderRoute::Get("ord_1"))
        );
        assert_eq!(
            OrderRoute::of("/orders/ord_1/cancel"),
            Some(OrderRoute::Cancel("ord_1"))
        );
        for other in [
            "/checkout/",
            "/orders/",
            "/orders//cancel",
            "/orders/a/b",
            "/checkouts",
        ] {
            assert_eq!(OrderRoute::of(other), None, "{other}");
        }
    }
}
