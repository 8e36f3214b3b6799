//! The store boundary: everything the gateway and the shared test suite ask
//! of an order back end (the checkout hot path, webhooks, adjustments, the
//! reconcilers' passes, the outbox relay, the books), whichever database
//! holds the stock and the orders.
//!
//! Two back ends implement [`OrderBackend`]:
//! - [`sqlite::SqliteBackend`]: the embedded store of one gateway (the
//!   default), the existing [`crate::Store`] and [`crate::CheckoutService`];
//! - [`postgres::PgBackend`]: one PostgreSQL database shared by a fleet
//!   (`[cluster] postgres_url`), its SQL in `backend/postgres/`.
//!
//! The trait is synchronous but for the checkout and the cancel (which
//! may send a refund, [`OrderBackend::cancel_on`]): both stores are
//! synchronous (SQLite, the `postgres` driver), and the gateway runs their
//! calls on its bounded blocking pool (`gateway/src/orders/pool.rs`). The
//! checkout ([`OrderBackend::checkout_on`]) is async: its store steps go
//! to the gateway's blocking threads one by one ([`crate::blocking`]) and
//! its provider calls ([`crate::PaymentProvider`]) are awaited in between,
//! so a slow provider holds no thread; the synchronous
//! [`OrderBackend::checkout_within`] waits for the same future. A
//! checkout is the same three durable waits on both (see
//! `docs/orders.md`); no transaction is open across a provider call.

pub mod pass;
pub mod postgres;
pub mod sqlite;

use async_trait::async_trait;

use crate::backend::pass::PaymentsReconcileOutcome;
use crate::backend::pass::PruneOutcome;
use crate::backend::pass::ReconcileOutcome;
use crate::blocking::Blocking;
use crate::books::{Books, Gauges};
use crate::clock::UnixMs;
use crate::core::event::{WebhookEvent, WebhookOutcome};
use crate::core::idempotency::IdempotencyKey;
use crate::core::order::Order;
use crate::core::partition::Partition;
use crate::core::request::{CheckoutRequest, Created, OrderLimits, SubjectOrders};
use crate::core::state::OrderState;
use crate::core::stock::ProductSeed;
use crate::core::stock::StockLevel;
use crate::error::{CheckoutError, StoreError};
use crate::metrics::Metrics;
use crate::outbox::{RelayError, RelayOutcome, Sink};

pub use postgres::{PgBackend, PgConfig, SessionTimeouts};
pub use sqlite::SqliteBackend;

/// One stock and order authority, as the checkout hot path sees it.
#[async_trait]
pub trait OrderBackend: Send + Sync {
    /// `"sqlite"` or `"postgres"` (logs, `/admin/state`, test names).
    fn kind(&self) -> &'static str;

    /// Seeds SKUs not seen before (their stock split over `partitions`
    /// rows) and makes every SKU follow its seed's price, TTL and
    /// partition count; returns how many were new.
    fn seed_products_at(
        &self,
        products: &[ProductSeed],
        now_ms: UnixMs,
    ) -> Result<usize, StoreError>;

    /// `POST /checkout`: claim the key, reserve and create the order, then
    /// the payment, in three durable waits for a confirmed order.
    fn checkout_within(
        &self,
        subject: &str,
        key: &IdempotencyKey,
        request: &CheckoutRequest,
        limits: OrderLimits,
        now_ms: UnixMs,
    ) -> Result<(Order, Created), CheckoutError>;

    /// [`OrderBackend::checkout_within`] as the gateway runs it: each
    /// store step on `steps` (its blocking threads), the provider calls
    /// and the pauses between retries awaited between them, so no thread
    /// waits for the provider. The same durable waits, in the same order.
    async fn checkout_on(
        &self,
        steps: &dyn Blocking,
        subject: &str,
        key: &IdempotencyKey,
        request: &CheckoutRequest,
        limits: OrderLimits,
        now_ms: UnixMs,
    ) -> Result<(Order, Created), CheckoutError>;

    /// The first durable wait alone: the order `reserved` with its hold
    /// (or `rejected`), no payment started.
    fn begin_within(
        &self,
        subject: &str,
        key: &IdempotencyKey,
        request: &CheckoutRequest,
        limits: OrderLimits,
        now_ms: UnixMs,
    ) -> Result<(Order, Created), CheckoutError>;

    /// `GET /orders/{id}`: `NotFound` for anyone but its subject.
    fn get_order(&self, subject: &str, order_id: &str) -> Result<Order, CheckoutError>;

    /// `POST /orders/{id}/cancel`, idempotent: a `reserved` order is
    /// cancelled and its stock released; a `confirmed` one refunded and its
    /// units put back on sale; an `authorizing` one has the cancel
    /// recorded; an ended one is returned as it is. `NotFound` for anyone
    /// but its subject.
    fn cancel(&self, subject: &str, order_id: &str, now_ms: UnixMs)
        -> Result<Order, CheckoutError>;

    /// [`OrderBackend::cancel`] as the gateway runs it: each store step on
    /// `steps`, a refund's provider calls awaited between them.
    async fn cancel_on(
        &self,
        steps: &dyn Blocking,
        subject: &str,
        order_id: &str,
        now_ms: UnixMs,
    ) -> Result<Order, CheckoutError>;

    /// The orders `subject` has created, and how many are still open
    /// (`reserved` or `authorizing`): whether a pass is spent.
    fn subject_orders(&self, subject: &str) -> Result<SubjectOrders, CheckoutError>;

    /// One SKU's counts (the sum of its partitions).
    fn stock(&self, sku: &str) -> Result<StockLevel, StoreError>;

    /// Every partition of `sku`, live and retired, by number.
    fn partitions(&self, sku: &str) -> Result<Vec<Partition>, StoreError>;

    /// Evens out `sku`'s free units over its live partitions, each move
    /// logged; returns the units moved.
    fn rebalance(&self, sku: &str, now_ms: UnixMs) -> Result<i64, StoreError>;

    /// The reservation reconciler's expiry: `reserved` orders whose hold is
    /// past its TTL become `expired` and their units go back, at most
    /// `limit` per pass. Returns how many expired.
    fn expire_holds(&self, now_ms: UnixMs, limit: usize) -> Result<usize, StoreError>;

    /// One bounded retention pass: per kind (idempotency keys, published
    /// outbox events, provider webhook ids, ended holds), at most `limit`
    /// of the oldest rows past their retention (see [`crate::backend::sqlite::retention`]).
    fn prune_once(&self, now_ms: UnixMs, limit: usize) -> Result<PruneOutcome, StoreError>;

    /// One bounded outbox relay pass: publishes up to `limit` pending
    /// events, oldest first, at least once, and marks them published after
    /// the sink acknowledged them.
    fn relay_outbox_once(
        &self,
        sink: &mut dyn Sink,
        limit: usize,
        now_ms: UnixMs,
    ) -> Result<RelayOutcome, RelayError>;

    /// Orders per state, every state listed.
    fn order_counts(&self) -> Result<Vec<(OrderState, u64)>, StoreError>;

    /// The books' checks: each SKU conserved, its partitions summing to
    /// it, and its reserved and committed units equal to its holds.
    /// Returns what does not add up (empty when the books balance).
    fn check_books(&self, now_ms: UnixMs) -> Result<Vec<String>, StoreError>;

    /// Durable waits (committed transactions) since the back end opened.
    fn durable_writes(&self) -> u64;

    /// Applies one verified provider event (`POST /webhooks/{provider}`):
    /// its id, the payment and order change and their outbox rows in one
    /// transaction; a duplicate id changes nothing. Counted in
    /// [`Metrics::webhook_events`].
    fn apply_webhook(
        &self,
        event: &WebhookEvent,
        now_ms: UnixMs,
    ) -> Result<WebhookOutcome, StoreError>;

    /// `POST /admin/inventory/{sku}/adjust`: `delta` free units added or
    /// taken (never held or sold ones), logged with `reason`.
    fn adjust(
        &self,
        sku: &str,
        delta: i64,
        reason: &str,
        now_ms: UnixMs,
    ) -> Result<StockLevel, StoreError>;

    /// The reservation reconciler's pass: expiry, orders resting past
    /// `stuck_after_ms`, retention, the checks each back end runs per pass.
    fn reconcile_once(
        &self,
        now_ms: UnixMs,
        stuck_after_ms: i64,
        limit: usize,
    ) -> Result<ReconcileOutcome, StoreError>;

    /// The payments reconciler's pass: the provider's event list, and
    /// attempts left without an answer resolved with the provider's
    /// look-up, then the same request again (see
    /// [`crate::backend::sqlite::payment_reconciler`]).
    fn reconcile_payments_once(
        &self,
        now_ms: UnixMs,
        limit: usize,
    ) -> Result<PaymentsReconcileOutcome, StoreError>;

    /// Every SKU's counts (SQLite: from memory; PostgreSQL: one query over
    /// the partition rows): the sold-out refresh.
    fn stock_levels(&self) -> Result<Vec<StockLevel>, StoreError>;

    /// Whether [`OrderBackend::stock_levels`] and [`OrderBackend::books`]
    /// are read from memory (free to call after every write) rather than
    /// from the database.
    fn books_in_memory(&self) -> bool;

    /// Every SKU's counts and the orders per state (SQLite: from memory as
    /// of the last commit; PostgreSQL: two short queries).
    fn books(&self) -> Result<Books, StoreError>;

    /// The outbox backlog and the oldest hold's age.
    fn gauges(&self, now_ms: UnixMs) -> Result<Gauges, StoreError>;

    /// One real durable write (`/readyz`).
    fn probe_write(&self, now_ms: UnixMs) -> Result<(), StoreError>;

    /// The counters the gateway exports.
    fn metrics(&self) -> &Metrics;
}
