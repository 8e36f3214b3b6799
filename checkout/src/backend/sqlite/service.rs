//! The idempotent checkout: create the order and hold its stock, then drive
//! the payment, with `Idempotency-Key` semantics like the best payment APIs.
//!
//! Durable waits of one checkout (each one transaction, committed before
//! anything depends on it):
//! 1. claim the key, count the subject's orders against its limit, create
//!    the order holding its stock, move it to `authorizing` (payment
//!    `pending`) and store the authorize attempt — all before anything is
//!    sent. The `(subject, key)` primary key makes exactly one request the
//!    owner, however many race, and the single writer makes the count
//!    exact, however many keys race. Out of stock, the order is `rejected`
//!    and the key completed here: one write in all;
//! 2. the authorization's answer and what it decides: a capture attempt
//!    (stored before it is sent), or `declined` with the stock released and
//!    the key completed;
//! 3. the capture's answer: stock committed, `confirmed`, key completed.
//!
//! So an authorised and captured order costs 3 durable waits and 2
//! provider calls. A crash between any two leaves a state the reconciler or
//! a retry with the same key picks up: the stored attempt is looked up
//! before it is sent again.

use std::sync::Arc;

use rusqlite::{params, OptionalExtension, Transaction};

use crate::backend::sqlite::attempt::{self, Attempt, NewAttempt, Operation};
use crate::backend::sqlite::driver::{Driven, Driver, First, PaymentsConfig};
use crate::backend::sqlite::idempotency::ClaimedKey;
use crate::backend::sqlite::order::{self, Order};
use crate::backend::sqlite::stock::{self, ReserveOutcome};
use crate::backend::sqlite::store::Store;
use crate::blocking::{step, Blocking, Inline};
use crate::clock::UnixMs;
use crate::core::claim::{decide_claim, ClaimDecision};
use crate::core::idempotency::IdempotencyKey;
use crate::core::order::new_order;
use crate::core::request::validate_subject;
pub use crate::core::request::{CheckoutRequest, Created, OrderLimits, SubjectOrders};
use crate::core::state::{OrderState, PaymentState};
use crate::error::{CheckoutError, StoreError};
use crate::http_client::wait;
use crate::metrics::Metrics;
use crate::payment::PaymentProvider;

/// What a cancel's store side left to do.
enum CancelNext {
    /// Answer with this order.
    Show(Order),
    /// Send the order's refund.
    Refund,
}

/// What step 1 did.
enum Begun {
    /// The key already named an order: it, as it is now.
    Replay(Order),
    /// This request created `order`; `attempt` is its authorize attempt
    /// when the payment was started in the same transaction.
    Created {
        order: Order,
        attempt: Option<Attempt>,
    },
}

/// What claiming a key decided.
enum Claim {
    /// This request owns the key and must create the order.
    Start,
    /// The key already names an order: show it.
    Replay(String),
}

/// Cheap to clone: the store and the driver are shared.
#[derive(Clone)]
pub struct CheckoutService {
    store: Arc<Store>,
    pub(crate) driver: Arc<Driver>,
}

impl CheckoutService {
    /// The service with default payment retries, the wall clock and real
    /// sleeps.
    pub fn new(store: Arc<Store>, provider: Arc<dyn PaymentProvider>) -> Self {
        Self::with_payments(store, provider, PaymentsConfig::default())
    }

    /// The service with explicit payment retries, clock and sleeper.
    pub fn with_payments(
        store: Arc<Store>,
        provider: Arc<dyn PaymentProvider>,
        payments: PaymentsConfig,
    ) -> Self {
        let driver = Arc::new(Driver::new(Arc::clone(&store), provider, payments));
        Self { store, driver }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// `POST /checkout`: the whole flow, payment included, with no bound on
    /// orders per subject.
    pub fn checkout(
        &self,
        subject: &str,
        key: &IdempotencyKey,
        request: &CheckoutRequest,
        now_ms: UnixMs,
    ) -> Result<(Order, Created), CheckoutError> {
        self.checkout_within(subject, key, request, OrderLimits::UNLIMITED, now_ms)
    }

    /// `POST /checkout` within `limits`: a subject that has created
    /// `orders_per_subject_max` orders gets [`CheckoutError::PurchaseLimit`]
    /// for a new key; its old keys still replay.
    pub fn checkout_within(
        &self,
        subject: &str,
        key: &IdempotencyKey,
        request: &CheckoutRequest,
        limits: OrderLimits,
        now_ms: UnixMs,
    ) -> Result<(Order, Created), CheckoutError> {
        wait(self.checkout_on(&Inline, subject, key, request, limits, now_ms))
    }

    /// [`CheckoutService::checkout_within`] with each store step on
    /// `steps` and the provider calls awaited between them.
    pub async fn checkout_on(
        &self,
        steps: &dyn Blocking,
        subject: &str,
        key: &IdempotencyKey,
        request: &CheckoutRequest,
        limits: OrderLimits,
        now_ms: UnixMs,
    ) -> Result<(Order, Created), CheckoutError> {
        let job = claim_and_create(subject, key, request, limits, true, now_ms)?;
        let begun = self.store.write_on(steps, job).await?;
        let (order, attempt) = match begun {
            Begun::Replay(order) => return Ok((order, Created::Replay)),
            Begun::Created { order, attempt } => (order, attempt),
        };
        let Some(attempt) = attempt else {
            // Rejected: the key was completed in the same write.
            return Ok((order, Created::Created));
        };
        let claimed = ClaimedKey {
            subject: subject.to_owned(),
            key: key.clone(),
        };
        let first = First::Loaded(attempt);
        let id = order.order_id;
        let driven = self
            .driver
            .drive_on(steps, first, now_ms, true, Some(&claimed), Some(&id))
            .await?;
        let order = match driven {
            Driven {
                finished: true,
                order: Some(order),
            } => order,
            _ => {
                // Someone else settled the attempt first (a webhook): the
                // key still has to be completed.
                self.store
                    .write_on(steps, move |tx, _| {
                        claimed.complete(tx, now_ms)?;
                        order::load_existing(tx, &id)
                    })
                    .await?
            }
        };
        Ok((order, Created::Created))
    }

    /// Step 1 without the payment, with no bound on orders per subject.
    pub fn begin(
        &self,
        subject: &str,
        key: &IdempotencyKey,
        request: &CheckoutRequest,
        now_ms: UnixMs,
    ) -> Result<(Order, Created), CheckoutError> {
        self.begin_within(subject, key, request, OrderLimits::UNLIMITED, now_ms)
    }

    /// Claims the key, checks the subject's order count against `limits`,
    /// and creates the order with its hold (`reserved`) or without
    /// (`rejected`, out of stock), in one transaction; the payment is left
    /// for [`CheckoutService::pay`]. A replay returns the current order and
    /// touches nothing. Refused at the limit, the key is not kept (the
    /// savepoint undoes the claim), so it is not burnt.
    pub fn begin_within(
        &self,
        subject: &str,
        key: &IdempotencyKey,
        request: &CheckoutRequest,
        limits: OrderLimits,
        now_ms: UnixMs,
    ) -> Result<(Order, Created), CheckoutError> {
        let job = claim_and_create(subject, key, request, limits, false, now_ms)?;
        match self.store.write(job)? {
            Begun::Replay(order) => Ok((order, Created::Replay)),
            Begun::Created { order, .. } => Ok((order, Created::Created)),
        }
    }

    /// The orders `subject` has created, and how many are still open.
    pub fn subject_orders(&self, subject: &str) -> Result<SubjectOrders, CheckoutError> {
        Ok(self.store.read(|conn| subject_orders(conn, subject))?)
    }

    /// The payment of an order made by [`CheckoutService::begin`] (a
    /// separate write; `checkout` folds it into step 1). Any other state
    /// is returned as it is (someone else moved it: cancel, expiry, a
    /// concurrent pay), so calling it twice is harmless.
    ///
    /// `reserved → authorizing` (payment `pending`) commits together with
    /// the authorize attempt, before anything is sent; then the attempt is
    /// driven (see [`crate::backend::sqlite::driver`]). An answer that stays ambiguous past
    /// the retry bound leaves the order `authorizing` for the reconciler.
    pub fn pay(&self, order_id: &str, now_ms: UnixMs) -> Result<Order, CheckoutError> {
        let id = order_id.to_owned();
        let started = self.store.write(move |tx, metrics| {
            let current = order::load_existing(tx, &id)?;
            if current.state != OrderState::Reserved {
                return Ok::<_, StoreError>(None);
            }
            start_authorize(tx, metrics, &id, now_ms).map(|(_, a)| Some(a.idempotency_key))
        })?;
        if let Some(key) = started {
            self.driver.drive(key, now_ms, true, None)?;
        }
        self.load(order_id)
    }

    /// `GET /orders/{id}`: only the subject that created it sees it; anyone
    /// else gets `NotFound`, as if it did not exist.
    pub fn get_order(&self, subject: &str, order_id: &str) -> Result<Order, CheckoutError> {
        let found = self.store.read(|conn| order::load(conn, order_id))?;
        match found {
            Some(order) if order.subject == subject => Ok(order),
            _ => Err(CheckoutError::NotFound),
        }
    }

    /// `POST /orders/{id}/cancel`, idempotent: a `reserved` order is
    /// cancelled and its stock released; a `confirmed` one is refunded and
    /// its units go back on sale; an `authorizing` one keeps its state until
    /// the provider answers, then is voided (or refunded, if it was
    /// captured); an order already ended is returned as it is.
    pub fn cancel(
        &self,
        subject: &str,
        order_id: &str,
        now_ms: UnixMs,
    ) -> Result<Order, CheckoutError> {
        wait(self.cancel_on(&Inline, subject, order_id, now_ms))
    }

    /// [`CheckoutService::cancel`] with each store step on `steps` and the
    /// refund's provider calls awaited between them.
    pub async fn cancel_on(
        &self,
        steps: &dyn Blocking,
        subject: &str,
        order_id: &str,
        now_ms: UnixMs,
    ) -> Result<Order, CheckoutError> {
        let (this, s, id) = (self.clone(), subject.to_owned(), order_id.to_owned());
        let decided = step(steps, move || this.decide_cancel(&s, &id, now_ms)).await??;
        match decided {
            CancelNext::Show(order) => Ok(order),
            CancelNext::Refund => self.refund_on(steps, order_id, now_ms).await,
        }
    }

    /// The cancel's store side: what it changed, and whether a refund is
    /// left to send.
    fn decide_cancel(
        &self,
        subject: &str,
        order_id: &str,
        now_ms: UnixMs,
    ) -> Result<CancelNext, CheckoutError> {
        let order = self.get_order(subject, order_id)?;
        let id = order_id.to_owned();
        match order.state {
            OrderState::Reserved => {
                let cancelled = self.store.write(move |tx, metrics| {
                    let to = OrderState::Cancelled;
                    match order::transition(tx, metrics, &id, OrderState::Reserved, to, now_ms) {
                        Ok(order) => {
                            stock::release_hold(tx, metrics, &id, now_ms)?;
                            Ok(Some(order))
                        }
                        // Lost a race (paid or expired meanwhile): show that.
                        Err(StoreError::IllegalTransition { .. }) => Ok(None),
                        Err(e) => Err(e),
                    }
                })?;
                match cancelled {
                    Some(order) => Ok(CancelNext::Show(order)),
                    None => self.load(order_id).map(CancelNext::Show),
                }
            }
            OrderState::Confirmed => {
                // The move to `refunding` and the refund attempt commit
                // together, so a crash here leaves a refund to retry.
                let started = self.store.write(move |tx, metrics| {
                    let to = OrderState::Refunding;
                    let order =
                        order::transition(tx, metrics, &id, OrderState::Confirmed, to, now_ms)?;
                    let new = NewAttempt {
                        order_id: &id,
                        operation: Operation::Refund,
                        amount_cents: order.amount_cents,
                        payment_method: None,
                        payment_id: order.payment_id.as_deref(),
                    };
                    attempt::insert(tx, &new, now_ms)
                });
                match started {
                    // A concurrent cancel got there first; the refund
                    // looks at where the order really is.
                    Ok(_) | Err(StoreError::IllegalTransition { .. }) => Ok(CancelNext::Refund),
                    Err(e) => Err(e.into()),
                }
            }
            OrderState::Refunding => Ok(CancelNext::Refund),
            OrderState::Authorizing => {
                // The payment is in flight (or its answer was lost): the
                // cancel is recorded, and whatever the provider answers is
                // undone — void if authorized, refund if captured.
                self.store.write(move |tx, _| {
                    tx.prepare_cached(
                        "INSERT INTO cancel_requests (order_id, requested_at_ms) VALUES (?1, ?2)
                         ON CONFLICT DO NOTHING",
                    )?
                    .execute(params![id, now_ms])?;
                    Ok::<_, StoreError>(())
                })?;
                self.load(order_id).map(CancelNext::Show)
            }
            _ => Ok(CancelNext::Show(order)),
        }
    }

    /// Refunds a `refunding` order through its one refund attempt (stored
    /// now if the move to `refunding` did not store it); any other state is
    /// returned as it is.
    async fn refund_on(
        &self,
        steps: &dyn Blocking,
        order_id: &str,
        now_ms: UnixMs,
    ) -> Result<Order, CheckoutError> {
        let (this, id) = (self.clone(), order_id.to_owned());
        let key = step(steps, move || {
            this.store.write(move |tx, _| {
                let order = order::load_existing(tx, &id)?;
                if order.state != OrderState::Refunding {
                    return Ok::<_, StoreError>(None);
                }
                let Some(payment_id) = order.payment_id.as_deref() else {
                    return Err(StoreError::Corrupt {
                        table: "orders",
                        detail: format!("order {id} is {} without a payment id", order.state),
                    });
                };
                let new = NewAttempt {
                    order_id: &id,
                    operation: Operation::Refund,
                    amount_cents: order.amount_cents,
                    payment_method: None,
                    payment_id: Some(payment_id),
                };
                attempt::insert(tx, &new, now_ms).map(|a| Some(a.idempotency_key))
            })
        })
        .await??;
        if let Some(key) = key {
            let first = First::Key(key);
            self.driver
                .drive_on(steps, first, now_ms, true, None, None)
                .await?;
        }
        let (this, id) = (self.clone(), order_id.to_owned());
        step(steps, move || this.load(&id)).await?
    }

    fn load(&self, order_id: &str) -> Result<Order, CheckoutError> {
        Ok(self
            .store
            .read(|conn| order::load_existing(conn, order_id))?)
    }
}

/// Step 1 as one writer job. With `start_payment`, a `reserved` order
/// moves on to `authorizing` with its authorize attempt stored, and a
/// `rejected` one completes the key, in the same transaction. The SKU is
/// looked up first inside it: an unknown one is refused before the key is
/// claimed (the job's savepoint keeps nothing), so the key is not burnt by
/// a request that could never succeed. A replay reads its order inside it
/// too, and a started payment's attempt comes back as stored, so the
/// checkout needs no read of its own.
#[allow(clippy::type_complexity)]
fn claim_and_create(
    subject: &str,
    key: &IdempotencyKey,
    request: &CheckoutRequest,
    limits: OrderLimits,
    start_payment: bool,
    now_ms: UnixMs,
) -> Result<
    impl FnOnce(&Transaction<'_>, &Metrics) -> Result<Begun, CheckoutError> + Send + 'static,
    CheckoutError,
> {
    validate_subject(subject)?;
    request.validate()?;
    let claimed = ClaimedKey {
        subject: subject.to_owned(),
        key: key.clone(),
    };
    let request = request.clone();
    Ok(move |tx: &Transaction<'_>, metrics: &Metrics| {
        Store::product_terms(tx, &request.sku)?;
        let (subject, key) = (&claimed.subject, &claimed.key);
        let hash = request.hash();
        if let Claim::Replay(order_id) = claim_key(tx, subject, key, &hash, now_ms)? {
            return Ok(Begun::Replay(order::load_existing(tx, &order_id)?));
        }
        let started = subject_orders(tx, subject)?.started;
        if started >= limits.orders_per_subject_max {
            return Err(CheckoutError::PurchaseLimit);
        }
        let order = create_order(tx, metrics, subject, &request, now_ms)?;
        tx.prepare_cached("UPDATE idempotency SET order_id = ?3 WHERE subject = ?1 AND key = ?2")?
            .execute(params![subject, key.as_str(), order.order_id])?;
        if !start_payment {
            return Ok(Begun::Created {
                order,
                attempt: None,
            });
        }
        if order.state != OrderState::Reserved {
            claimed.complete(tx, now_ms)?;
            return Ok(Begun::Created {
                order,
                attempt: None,
            });
        }
        let (order, attempt) = start_authorize(tx, metrics, &order.order_id, now_ms)?;
        Ok(Begun::Created {
            order,
            attempt: Some(attempt),
        })
    })
}

/// The orders of `subject` (index `orders_by_subject`).
fn subject_orders(conn: &rusqlite::Connection, subject: &str) -> Result<SubjectOrders, StoreError> {
    let (started, open): (i64, i64) = conn
        .prepare_cached(
            "SELECT COUNT(*), COALESCE(SUM(state IN ('reserved', 'authorizing')), 0)
             FROM orders WHERE subject = ?1",
        )?
        .query_row(params![subject], |row| Ok((row.get(0)?, row.get(1)?)))?;
    let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
    Ok(SubjectOrders {
        started: count(started),
        open: count(open),
    })
}

/// Step 1's claim. The row is inserted first, so exactly one request owns a
/// key; everything else is decided from the stored row.
fn claim_key(
    tx: &Transaction<'_>,
    subject: &str,
    key: &IdempotencyKey,
    hash: &str,
    now_ms: UnixMs,
) -> Result<Claim, CheckoutError> {
    let inserted = tx
        .prepare_cached(
            "INSERT INTO idempotency (subject, key, request_hash, created_at_ms, locked_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT (subject, key) DO NOTHING",
        )?
        .execute(params![subject, key.as_str(), hash, now_ms])?;
    if inserted == 1 {
        return Ok(Claim::Start);
    }
    let stored: Option<(String, Option<String>, i64, Option<i64>)> = tx
        .prepare_cached(
            "SELECT request_hash, order_id, locked_at_ms, completed_at_ms FROM idempotency
             WHERE subject = ?1 AND key = ?2",
        )?
        .query_row(params![subject, key.as_str()], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .optional()?;
    let Some((stored_hash, order_id, locked_at_ms, completed_at_ms)) = stored else {
        return Err(StoreError::Corrupt {
            table: "idempotency",
            detail: "key conflicted but is not stored".into(),
        }
        .into());
    };
    match decide_claim(
        &stored_hash,
        hash,
        order_id,
        locked_at_ms,
        completed_at_ms.is_some(),
        now_ms,
    )? {
        ClaimDecision::Replay(order_id) => Ok(Claim::Replay(order_id)),
        ClaimDecision::TakeOver => {
            // The owner died before creating the order: take the key over.
            tx.prepare_cached(
                "UPDATE idempotency SET locked_at_ms = ?3 WHERE subject = ?1 AND key = ?2",
            )?
            .execute(params![subject, key.as_str(), now_ms])?;
            Ok(Claim::Start)
        }
    }
}

/// `reserved → authorizing` (payment `pending`) together with the
/// authorize attempt, before anything is sent. Returns the order and the
/// attempt.
fn start_authorize(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    order_id: &str,
    now_ms: UnixMs,
) -> Result<(Order, Attempt), StoreError> {
    order::set_payment(tx, order_id, PaymentState::Pending, None, now_ms)?;
    let (from, to) = (OrderState::Reserved, OrderState::Authorizing);
    let order = order::transition(tx, metrics, order_id, from, to, now_ms)?;
    let new = NewAttempt {
        order_id,
        operation: Operation::Authorize,
        amount_cents: order.amount_cents,
        payment_method: Some(&order.payment_method),
        payment_id: None,
    };
    let attempt = attempt::insert(tx, &new, now_ms)?;
    Ok((order, attempt))
}

/// Step 1's order row, its hold (if stock allows) and its birth event.
fn create_order(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    subject: &str,
    request: &CheckoutRequest,
    now_ms: UnixMs,
) -> Result<Order, CheckoutError> {
    let (price_cents, ttl_ms) = Store::product_terms(tx, &request.sku)?;
    let order_id = format!("ord_{}", uuid::Uuid::new_v4().simple());
    let expires_at_ms = now_ms.saturating_add(ttl_ms);
    let hold = stock::Hold {
        order_id: &order_id,
        sku: &request.sku,
        quantity: request.quantity,
        now_ms,
        expires_at_ms,
    };
    let outcome = stock::reserve(tx, metrics, &hold)?;
    let held_until = match outcome {
        ReserveOutcome::Reserved { expires_at_ms } => Some(expires_at_ms),
        ReserveOutcome::SoldOut => None,
    };
    let order = new_order(order_id, subject, request, price_cents, held_until, now_ms);
    order::insert(tx, &order)?;
    Ok(order)
}
