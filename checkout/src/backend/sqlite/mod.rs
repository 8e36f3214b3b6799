//! The embedded SQLite back end: one gateway, its stock in its `data_dir`.
//! [`SqliteBackend`] puts it behind [`OrderBackend`]; the files below hold
//! its SQL, each applying [`crate::core`]'s decisions:
//!
//! - [`store`]: the stock authority (WAL, `synchronous=FULL`); opening,
//!   seeding products, inventory adjustments, the write path.
//! - [`group_commit`]: the single writer thread: every write (hot-path
//!   holds and service transactions) is committed in batches, one fsync
//!   each.
//! - `schema`: the tables and their CHECK constraints, as numbered
//!   migrations stamped in `PRAGMA user_version`.
//! - [`stock`]: the atomic conditional reservation and the hold moves
//!   (commit once, release once, return on refund), conservation checks.
//! - [`partition`]: a SKU's stock split over K rows: which one a hold takes
//!   from, gathering, logged rebalances, retiring partitions.
//! - [`order`]: the order row and its transitions, each writing its outbox
//!   event in the same transaction.
//! - [`service`]: the idempotent checkout, order lookup and cancel.
//! - `idempotency`: a claimed key's request marked over.
//! - `settle`: reads an answered attempt's facts, asks
//!   [`crate::core::settle::decide`] and applies the settlement.
//! - `events`: provider events applied as [`crate::core::event::fit`] says.
//! - [`mod@audit`]: read-only offline checks of a data directory.
//! - `books`: the order counts and stock rows read after each commit.
//! - [`outbox`]: an order change's event, and the relay's pass.
//! - [`attempt`]: durable payment attempts (key, parameters, transport
//!   state, outcome), stored before they are sent.
//! - [`driver`]: drives an attempt to an outcome: look-up first, the same
//!   key and parameters again, bounded backoff with jitter.
//! - [`reconciler`]: `reconcile_once`: expiry, stuck orders, conservation.
//! - [`payment_reconciler`]: `reconcile_payments_once`: ambiguous
//!   attempts, missed events, orphan charges, stuck compensations.
//! - [`retention`]: `prune_once`: what the store forgets and when, in
//!   bounded passes.

pub mod attempt;
pub mod audit;
pub(crate) mod books;
pub mod driver;
pub(crate) mod events;
pub mod group_commit;
pub(crate) mod idempotency;
pub mod order;
pub mod outbox;
pub mod partition;
pub mod payment_reconciler;
pub mod reconciler;
pub mod retention;
pub(crate) mod schema;
pub mod service;
pub(crate) mod settle;
pub mod stock;
pub mod store;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;

use self::audit::audit;
use self::order::Order;
use self::outbox::relay_once;
use self::partition::Partition;
use self::service::{CheckoutRequest, CheckoutService, Created, OrderLimits, SubjectOrders};
use self::stock::StockLevel;
use self::store::{ProductSeed, Store};
use crate::backend::sqlite::payment_reconciler::PaymentsReconcileOutcome;
use crate::backend::sqlite::reconciler::{reconcile_once, ReconcileOutcome};
use crate::backend::sqlite::retention::{prune_once, PruneOutcome};
use crate::backend::OrderBackend;
use crate::blocking::Blocking;
use crate::books::{Books, Gauges};
use crate::clock::UnixMs;
use crate::core::idempotency::IdempotencyKey;
use crate::core::state::OrderState;
use crate::error::{CheckoutError, StoreError};
use crate::metrics::Metrics;
use crate::outbox::{RelayError, RelayOutcome, Sink};
use crate::webhook::{apply_webhook, WebhookEvent, WebhookOutcome};

/// The SQLite store of one gateway and the service over it.
pub struct SqliteBackend {
    service: Arc<CheckoutService>,
}

impl SqliteBackend {
    pub fn new(service: Arc<CheckoutService>) -> Self {
        Self { service }
    }

    pub fn service(&self) -> &Arc<CheckoutService> {
        &self.service
    }

    fn store(&self) -> &Arc<Store> {
        self.service.store()
    }
}

#[async_trait]
impl OrderBackend for SqliteBackend {
    fn kind(&self) -> &'static str {
        "sqlite"
    }

    fn seed_products_at(
        &self,
        products: &[ProductSeed],
        now_ms: UnixMs,
    ) -> Result<usize, StoreError> {
        self.store().seed_products_at(products, now_ms)
    }

    fn checkout_within(
        &self,
        subject: &str,
        key: &IdempotencyKey,
        request: &CheckoutRequest,
        limits: OrderLimits,
        now_ms: UnixMs,
    ) -> Result<(Order, Created), CheckoutError> {
        self.service
            .checkout_within(subject, key, request, limits, now_ms)
    }

    async fn checkout_on(
        &self,
        steps: &dyn Blocking,
        subject: &str,
        key: &IdempotencyKey,
        request: &CheckoutRequest,
        limits: OrderLimits,
        now_ms: UnixMs,
    ) -> Result<(Order, Created), CheckoutError> {
        self.service
            .checkout_on(steps, subject, key, request, limits, now_ms)
            .await
    }

    fn begin_within(
        &self,
        subject: &str,
        key: &IdempotencyKey,
        request: &CheckoutRequest,
        limits: OrderLimits,
        now_ms: UnixMs,
    ) -> Result<(Order, Created), CheckoutError> {
        self.service
            .begin_within(subject, key, request, limits, now_ms)
    }

    fn get_order(&self, subject: &str, order_id: &str) -> Result<Order, CheckoutError> {
        self.service.get_order(subject, order_id)
    }

    fn cancel(
        &self,
        subject: &str,
        order_id: &str,
        now_ms: UnixMs,
    ) -> Result<Order, CheckoutError> {
        self.service.cancel(subject, order_id, now_ms)
    }

    async fn cancel_on(
        &self,
        steps: &dyn Blocking,
        subject: &str,
        order_id: &str,
        now_ms: UnixMs,
    ) -> Result<Order, CheckoutError> {
        self.service
            .cancel_on(steps, subject, order_id, now_ms)
            .await
    }

    fn subject_orders(&self, subject: &str) -> Result<SubjectOrders, CheckoutError> {
        self.service.subject_orders(subject)
    }

    fn stock(&self, sku: &str) -> Result<StockLevel, StoreError> {
        self.store().stock(sku)
    }

    fn partitions(&self, sku: &str) -> Result<Vec<Partition>, StoreError> {
        self.store().partitions(sku)
    }

    fn rebalance(&self, sku: &str, now_ms: UnixMs) -> Result<i64, StoreError> {
        self.store().rebalance(sku, now_ms)
    }

    fn expire_holds(&self, now_ms: UnixMs, limit: usize) -> Result<usize, StoreError> {
        // Nothing is reported stuck: only the expiry is asked for here.
        let never_stuck_ms = i64::MAX / 2;
        Ok(reconcile_once(self.store(), now_ms, never_stuck_ms, limit)?.expired)
    }

    fn prune_once(&self, now_ms: UnixMs, limit: usize) -> Result<PruneOutcome, StoreError> {
        prune_once(self.store(), now_ms, limit)
    }

    fn relay_outbox_once(
        &self,
        sink: &mut dyn Sink,
        limit: usize,
        now_ms: UnixMs,
    ) -> Result<RelayOutcome, RelayError> {
        relay_once(self.store(), sink, limit, now_ms)
    }

    fn order_counts(&self) -> Result<Vec<(OrderState, u64)>, StoreError> {
        self.store().order_counts()
    }

    fn check_books(&self, now_ms: UnixMs) -> Result<Vec<String>, StoreError> {
        Ok(audit(self.store().data_dir(), now_ms)?
            .into_iter()
            .map(|violation| format!("{violation:?}"))
            .collect())
    }

    fn durable_writes(&self) -> u64 {
        self.store()
            .metrics()
            .durable_writes
            .load(Ordering::Relaxed)
    }

    fn apply_webhook(
        &self,
        event: &WebhookEvent,
        now_ms: UnixMs,
    ) -> Result<WebhookOutcome, StoreError> {
        apply_webhook(self.store(), event, now_ms)
    }

    fn adjust(
        &self,
        sku: &str,
        delta: i64,
        reason: &str,
        now_ms: UnixMs,
    ) -> Result<StockLevel, StoreError> {
        self.store().adjust(sku, delta, reason, now_ms)
    }

    fn reconcile_once(
        &self,
        now_ms: UnixMs,
        stuck_after_ms: i64,
        limit: usize,
    ) -> Result<ReconcileOutcome, StoreError> {
        reconcile_once(self.store(), now_ms, stuck_after_ms, limit)
    }

    fn reconcile_payments_once(
        &self,
        now_ms: UnixMs,
        limit: usize,
    ) -> Result<PaymentsReconcileOutcome, StoreError> {
        self.service.reconcile_payments_once(now_ms, limit)
    }

    fn stock_levels(&self) -> Result<Vec<StockLevel>, StoreError> {
        Ok(self.store().books().inventory.clone())
    }

    fn books_in_memory(&self) -> bool {
        true
    }

    fn books(&self) -> Result<Books, StoreError> {
        Ok(self.store().books().as_ref().clone())
    }

    fn gauges(&self, now_ms: UnixMs) -> Result<Gauges, StoreError> {
        let store = self.store();
        Ok(Gauges {
            outbox_pending: store.outbox_pending()?,
            outbox_lag_ms: store.outbox_lag_ms(now_ms)?,
            oldest_hold_age_ms: store.oldest_hold_age_ms(now_ms)?,
        })
    }

    fn probe_write(&self, now_ms: UnixMs) -> Result<(), StoreError> {
        self.store().probe_write(now_ms)
    }

    fn metrics(&self) -> &Metrics {
        self.store().metrics()
    }
}
