//! The idempotent checkout: create the order and hold its stock, then drive
//! the payment, with `Idempotency-Key` semantics like the best payment APIs.
//!
//! Order of durable steps, each its own transaction:
//! 1. claim the key: insert `(subject, key, request hash)`; the primary key
//!    makes exactly one request the owner, however many race;
//! 2. create the order and hold stock (or create it `rejected`);
//! 3. `reserved → authorizing` (payment `pending`) before calling out;
//! 4. record the provider's answer: `confirmed` (stock committed) or
//!    `declined` / `voided` (stock released);
//! 5. mark the key complete.
//!
//! A crash between any two steps leaves a state the reconciler or a retry
//! with the same key picks up.

use std::sync::Arc;

use rusqlite::{params, OptionalExtension, Transaction};

use crate::clock::UnixMs;
use crate::error::{CheckoutError, StoreError};
use crate::idempotency::{request_hash, IdempotencyKey};
use crate::limits::{
    IDEMPOTENCY_LOCK_STALE_MS, ORDER_QUANTITY_MAX, PAYMENT_METHOD_LEN_MAX, SUBJECT_LEN_MAX,
};
use crate::metrics::Metrics;
use crate::order::{self, Order};
use crate::payment::{AuthorizeOutcome, PaymentProvider};
use crate::state::{OrderState, PaymentState};
use crate::stock::{self, ReserveOutcome};
use crate::store::{validate_sku, Store};

/// The body of `POST /checkout`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct CheckoutRequest {
    pub sku: String,
    pub quantity: u32,
    pub payment_method: String,
}

impl CheckoutRequest {
    fn validate(&self) -> Result<(), CheckoutError> {
        validate_sku(&self.sku).map_err(|e| CheckoutError::BadRequest(e.to_string()))?;
        if !(1..=ORDER_QUANTITY_MAX).contains(&self.quantity) {
            return Err(CheckoutError::BadRequest(format!(
                "quantity must be 1 to {ORDER_QUANTITY_MAX}"
            )));
        }
        let method = &self.payment_method;
        if method.is_empty()
            || method.len() > PAYMENT_METHOD_LEN_MAX
            || !method.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(CheckoutError::BadRequest(format!(
                "payment_method must be 1 to {PAYMENT_METHOD_LEN_MAX} visible ASCII characters"
            )));
        }
        Ok(())
    }

    fn hash(&self) -> String {
        request_hash(&[&self.sku, &self.quantity.to_string(), &self.payment_method])
    }
}

/// Whether this call made the order (`201`) or replayed it (`200`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    Created,
    Replay,
}

impl Created {
    pub fn status(self) -> u16 {
        match self {
            Created::Created => 201,
            Created::Replay => 200,
        }
    }
}

/// What claiming a key decided.
enum Claim {
    /// This request owns the key and must create the order.
    Start,
    /// The key already names an order: show it.
    Replay(String),
}

pub struct CheckoutService {
    store: Arc<Store>,
    provider: Arc<dyn PaymentProvider>,
}

impl CheckoutService {
    pub fn new(store: Arc<Store>, provider: Arc<dyn PaymentProvider>) -> Self {
        Self { store, provider }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// `POST /checkout`: the whole flow, payment included.
    pub fn checkout(
        &self,
        subject: &str,
        key: &IdempotencyKey,
        request: &CheckoutRequest,
        now_ms: UnixMs,
    ) -> Result<(Order, Created), CheckoutError> {
        let (order, created) = self.begin(subject, key, request, now_ms)?;
        if created == Created::Replay {
            return Ok((order, created));
        }
        let order = self.pay(&order.order_id, now_ms)?;
        self.complete_key(subject, key, now_ms)?;
        Ok((order, created))
    }

    /// Steps 1–2: claims the key and creates the order with its hold
    /// (`reserved`) or without (`rejected`, out of stock). A replay returns
    /// the current order and touches nothing.
    pub fn begin(
        &self,
        subject: &str,
        key: &IdempotencyKey,
        request: &CheckoutRequest,
        now_ms: UnixMs,
    ) -> Result<(Order, Created), CheckoutError> {
        validate_subject(subject)?;
        request.validate()?;
        // An unknown SKU is refused before the key is claimed, so the key
        // is not burnt by a request that could never succeed.
        self.store
            .read(|conn| Store::product_terms(conn, &request.sku))?;
        let (subject, key, request) = (subject.to_owned(), key.clone(), request.clone());
        let claim = {
            let (subject, key, hash) = (subject.clone(), key.clone(), request.hash());
            self.store
                .write(move |tx, _| claim_key(tx, &subject, &key, &hash, now_ms))?
        };
        if let Claim::Replay(order_id) = claim {
            let order = self.load(&order_id)?;
            return Ok((order, Created::Replay));
        }
        let created = {
            let (subject, key) = (subject.clone(), key.clone());
            self.store.write(move |tx, metrics| {
                let order = create_order(tx, metrics, &subject, &request, now_ms)?;
                tx.prepare_cached(
                    "UPDATE idempotency SET order_id = ?3 WHERE subject = ?1 AND key = ?2",
                )?
                .execute(params![subject, key.as_str(), order.order_id])?;
                Ok::<_, CheckoutError>(order)
            })
        };
        match created {
            Ok(order) => Ok((order, Created::Created)),
            Err(e) => {
                // Nothing was created: free the key so a retry starts over
                // instead of waiting out the stale-lock bound. If this fails
                // too, the stale bound frees it.
                let _ = self.store.write(move |tx, _| {
                    tx.execute(
                        "DELETE FROM idempotency WHERE subject = ?1 AND key = ?2 AND order_id IS NULL",
                        params![subject, key.as_str()],
                    )?;
                    Ok::<_, CheckoutError>(())
                });
                Err(e)
            }
        }
    }

    /// Steps 3–4: drives the payment of a `reserved` order. Any other state
    /// is returned as it is (someone else moved it: cancel, expiry, a
    /// concurrent pay), so calling it twice is harmless.
    pub fn pay(&self, order_id: &str, now_ms: UnixMs) -> Result<Order, CheckoutError> {
        let id = order_id.to_owned();
        let started = self.store.write(move |tx, metrics| {
            let current = order::load_existing(tx, &id)?;
            if current.state != OrderState::Reserved {
                return Ok::<_, StoreError>(None);
            }
            order::set_payment(tx, &id, PaymentState::Pending, None, now_ms)?;
            let to = OrderState::Authorizing;
            order::transition(tx, metrics, &id, OrderState::Reserved, to, now_ms).map(Some)
        })?;
        let Some(order) = started else {
            return self.load(order_id);
        };
        let answer = self.provider.authorize(
            &format!("{order_id}:authorize"),
            order_id,
            order.amount_cents,
            &order.payment_method,
        );
        match answer {
            Ok(AuthorizeOutcome::Authorized { payment_id }) => {
                let (recorded, pid) = (order.clone(), payment_id.clone());
                self.store.write(move |tx, _| {
                    let id = recorded.order_id.as_str();
                    order::set_payment(tx, id, PaymentState::Authorized, Some(&pid), now_ms)?;
                    order::record_payment_op(tx, &recorded, "authorize", &pid, now_ms)
                })?;
                self.capture(order, payment_id, now_ms)
            }
            Ok(AuthorizeOutcome::Declined { .. }) => {
                let id = order.order_id;
                Ok(self.store.write(move |tx, metrics| {
                    order::set_payment(tx, &id, PaymentState::Declined, None, now_ms)?;
                    stock::release_hold(tx, metrics, &id, now_ms)?;
                    let from = OrderState::Authorizing;
                    order::transition(tx, metrics, &id, from, OrderState::Declined, now_ms)
                })?)
            }
            // Ambiguous: money may be held. The order stays `authorizing`
            // with payment `pending`, its stock held; the reconciler owns it.
            Err(_) => self.load(order_id),
        }
    }

    fn capture(
        &self,
        order: Order,
        payment_id: String,
        now_ms: UnixMs,
    ) -> Result<Order, CheckoutError> {
        let order_id = order.order_id.clone();
        if self
            .provider
            .capture(&format!("{order_id}:capture"), &payment_id)
            .is_ok()
        {
            return Ok(self.store.write(move |tx, metrics| {
                let id = order.order_id.as_str();
                order::set_payment(tx, id, PaymentState::Captured, None, now_ms)?;
                order::record_payment_op(tx, &order, "capture", &payment_id, now_ms)?;
                if !stock::commit_hold(tx, metrics, id, now_ms)? {
                    // The hold was settled by someone else: expiry never
                    // releases a paid order, so this is a broken store.
                    return Err(StoreError::Corrupt {
                        table: "reservations",
                        detail: format!("order {id} was captured but holds no stock"),
                    });
                }
                let from = OrderState::Authorizing;
                order::transition(tx, metrics, id, from, OrderState::Confirmed, now_ms)
            })?);
        }
        if self
            .provider
            .void(&format!("{order_id}:void"), &payment_id)
            .is_err()
        {
            // Compensation failed: stays authorizing/authorized, visible to
            // the reconciler as stuck (the payments issue retries it).
            return self.load(&order_id);
        }
        Ok(self.store.write(move |tx, metrics| {
            let id = order.order_id.as_str();
            order::set_payment(tx, id, PaymentState::Voided, None, now_ms)?;
            order::record_payment_op(tx, &order, "void", &payment_id, now_ms)?;
            stock::release_hold(tx, metrics, id, now_ms)?;
            let from = OrderState::Authorizing;
            order::transition(tx, metrics, id, from, OrderState::Voided, now_ms)
        })?)
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
    /// its units go back on sale; an order in payment or already ended is
    /// returned as it is.
    pub fn cancel(
        &self,
        subject: &str,
        order_id: &str,
        now_ms: UnixMs,
    ) -> Result<Order, CheckoutError> {
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
                    Some(order) => Ok(order),
                    None => self.load(order_id),
                }
            }
            OrderState::Confirmed => {
                let started = self.store.write(move |tx, metrics| {
                    let to = OrderState::Refunding;
                    order::transition(tx, metrics, &id, OrderState::Confirmed, to, now_ms)
                });
                match started {
                    // A concurrent cancel got there first; refund() looks
                    // at where the order really is.
                    Ok(_) | Err(StoreError::IllegalTransition { .. }) => {
                        self.refund(order_id, now_ms)
                    }
                    Err(e) => Err(e.into()),
                }
            }
            OrderState::Refunding => self.refund(order_id, now_ms),
            _ => Ok(order),
        }
    }

    /// Refunds a `refunding` order with the order's one refund key; any
    /// other state is returned as it is.
    fn refund(&self, order_id: &str, now_ms: UnixMs) -> Result<Order, CheckoutError> {
        let order = self.load(order_id)?;
        if order.state != OrderState::Refunding {
            return Ok(order);
        }
        let Some(payment_id) = order.payment_id.clone() else {
            return Err(StoreError::Corrupt {
                table: "orders",
                detail: format!("order {order_id} is {} without a payment id", order.state),
            }
            .into());
        };
        if self
            .provider
            .refund(&format!("{order_id}:refund"), &payment_id)
            .is_err()
        {
            // Stays `refunding`; the reconciler flags it as stuck.
            return Ok(order);
        }
        let refunded = self.store.write(move |tx, metrics| {
            let id = order.order_id.as_str();
            order::set_payment(tx, id, PaymentState::Refunded, None, now_ms)?;
            order::record_payment_op(tx, &order, "refund", &payment_id, now_ms)?;
            stock::return_committed(tx, metrics, id, now_ms)?;
            // If a concurrent refund finished first this refuses, and the
            // savepoint undoes the lines above: nothing is recorded twice.
            let from = OrderState::Refunding;
            order::transition(tx, metrics, id, from, OrderState::Refunded, now_ms)
        });
        match refunded {
            Ok(order) => Ok(order),
            Err(StoreError::IllegalTransition { .. }) => self.load(order_id),
            Err(e) => Err(e.into()),
        }
    }

    /// Step 5: the request is over; a retry now replays instead of `409`.
    fn complete_key(
        &self,
        subject: &str,
        key: &IdempotencyKey,
        now_ms: UnixMs,
    ) -> Result<(), CheckoutError> {
        let (subject, key) = (subject.to_owned(), key.clone());
        self.store.write(move |tx, _| {
            tx.prepare_cached(
                "UPDATE idempotency SET completed_at_ms = ?3 WHERE subject = ?1 AND key = ?2",
            )?
            .execute(params![subject, key.as_str(), now_ms])?;
            Ok::<_, CheckoutError>(())
        })
    }

    fn load(&self, order_id: &str) -> Result<Order, CheckoutError> {
        Ok(self
            .store
            .read(|conn| order::load_existing(conn, order_id))?)
    }
}

fn validate_subject(subject: &str) -> Result<(), CheckoutError> {
    if subject.is_empty() || subject.len() > SUBJECT_LEN_MAX {
        return Err(CheckoutError::BadRequest(format!(
            "subject must be 1 to {SUBJECT_LEN_MAX} bytes"
        )));
    }
    Ok(())
}

/// Step 1. The row is inserted first, in its own transaction, so exactly one
/// request owns a key; everything else is decided from the stored row.
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
    if stored_hash != hash {
        return Err(CheckoutError::Mismatch);
    }
    let abandoned = now_ms.saturating_sub(locked_at_ms) >= IDEMPOTENCY_LOCK_STALE_MS;
    match (order_id, completed_at_ms.is_some() || abandoned) {
        (Some(order_id), true) => Ok(Claim::Replay(order_id)),
        (None, true) => {
            // The owner died before creating the order: take the key over.
            tx.prepare_cached(
                "UPDATE idempotency SET locked_at_ms = ?3 WHERE subject = ?1 AND key = ?2",
            )?
            .execute(params![subject, key.as_str(), now_ms])?;
            Ok(Claim::Start)
        }
        (_, false) => Err(CheckoutError::Conflict),
    }
}

/// Step 2: the order row, its hold (if stock allows) and its birth event.
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
    let outcome = stock::reserve(
        tx,
        metrics,
        &order_id,
        &request.sku,
        request.quantity,
        now_ms,
        expires_at_ms,
    )?;
    let (state, reservation_expires_at_ms) = match outcome {
        ReserveOutcome::Reserved { expires_at_ms } => (OrderState::Reserved, Some(expires_at_ms)),
        ReserveOutcome::SoldOut => (OrderState::Rejected, None),
    };
    let order = Order {
        order_id,
        subject: subject.to_owned(),
        sku: request.sku.clone(),
        quantity: request.quantity,
        payment_method: request.payment_method.clone(),
        amount_cents: u64::try_from(price_cents)
            .unwrap_or(0)
            .saturating_mul(u64::from(request.quantity)),
        state,
        payment_state: PaymentState::None,
        payment_id: None,
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
        reservation_expires_at_ms,
    };
    order::insert(tx, &order)?;
    Ok(order)
}
