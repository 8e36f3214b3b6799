//! The idempotent checkout on PostgreSQL, in as few durable waits as it
//! needs, with no transaction open while the provider is called:
//!
//! 1. claim the key, count the subject's orders (under a per-subject
//!    advisory lock held to the commit, so racing keys cannot all pass
//!    the limit), take the units
//!    (conditional UPDATE on one partition), create the order, and — for a
//!    full checkout — move it to `authorizing` with its authorize attempt
//!    stored; sold out, the order is `rejected` and the key completed;
//! 2. the authorization's answer: a capture attempt stored (authorized),
//!    or `declined` with the hold released and the key completed;
//! 3. the capture's answer: hold committed, `confirmed`, key completed
//!    (a refused capture: voided, released, completed).
//!
//! Step 1 goes into a batch of this gateway's checkouts and each answer
//! into a batch of answers (`batch`): one transaction per batch, the
//! claim, the creation and the take here being its parts.
//! Each answer is applied by `settle` (the rules webhooks and the payments
//! reconciler apply too), so a webhook that got there first changes
//! nothing here but the follow-up this checkout adopts.
//! An answer that stays ambiguous after `SEND_TRIES_MAX` sends (each
//! preceded by a look-up with the same key) writes nothing: the order stays
//! `authorizing` with its attempt stored, the key stays locked until
//! [`IDEMPOTENCY_LOCK_STALE_MS`], and a retry replays the order.

use super::conn::{Db, Tx};
use super::{order, pg_err, settle, stock, PgBackend};
use crate::attempt::{attempt_key, Operation};
use crate::clock::UnixMs;
use crate::error::{CheckoutError, StoreError};
use crate::idempotency::IdempotencyKey;
use crate::limits::IDEMPOTENCY_LOCK_STALE_MS;
use crate::order::Order;
use crate::service::{new_order, validate_subject, CheckoutRequest, Created, OrderLimits};
use crate::state::{OrderState, PaymentState};
use crate::store::validate_sku;

/// What the stored key row says a request may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClaimDecision {
    /// Own the key (its owner died before creating the order): take it over.
    TakeOver,
    /// The key names an order that is done or abandoned: show it.
    Replay(String),
}

/// The decision on a key that is already stored, as a plain function.
pub(crate) fn decide_claim(
    stored_hash: &str,
    hash: &str,
    order_id: Option<String>,
    locked_at_ms: UnixMs,
    completed: bool,
    now_ms: UnixMs,
) -> Result<ClaimDecision, CheckoutError> {
    if stored_hash != hash {
        return Err(CheckoutError::Mismatch);
    }
    let abandoned = now_ms.saturating_sub(locked_at_ms) >= IDEMPOTENCY_LOCK_STALE_MS;
    match (order_id, completed || abandoned) {
        (Some(order_id), true) => Ok(ClaimDecision::Replay(order_id)),
        (None, true) => Ok(ClaimDecision::TakeOver),
        (_, false) => Err(CheckoutError::Conflict),
    }
}

/// What step 1 left to do.
pub(super) enum Begun {
    Replay(String),
    Done(Order),
    Pay(Order),
}

/// A checkout's step 1 as the batch queue carries it.
pub(super) struct Claim {
    pub subject: String,
    pub key: IdempotencyKey,
    pub request: CheckoutRequest,
    pub limits: OrderLimits,
    pub start_payment: bool,
    pub now_ms: UnixMs,
}

/// What the claim part of step 1 decided.
pub(super) enum Claimed {
    /// The key names an order to show.
    Replay(String),
    /// The key is this request's and the subject may buy: units to take.
    Ready(Terms),
}

/// The product's terms read by the claim, and the new order's id.
#[derive(Clone)]
pub(super) struct Terms {
    pub order_id: String,
    price_cents: i64,
    ttl_ms: i64,
}

pub(super) fn checkout(
    backend: &PgBackend,
    subject: &str,
    key: &IdempotencyKey,
    request: &CheckoutRequest,
    limits: OrderLimits,
    start_payment: bool,
    now_ms: UnixMs,
) -> Result<(Order, Created), CheckoutError> {
    validate_subject(subject)?;
    request.validate()?;
    validate_sku(&request.sku)?;
    let begun = backend.begin_batched(Claim {
        subject: subject.to_owned(),
        key: key.clone(),
        request: request.clone(),
        limits,
        start_payment,
        now_ms,
    })?;
    let order = match begun {
        Begun::Replay(order_id) => {
            let order = backend.read(|client| order::load_existing(client, &order_id))?;
            return Ok((order, Created::Replay));
        }
        Begun::Done(order) => return Ok((order, Created::Created)),
        Begun::Pay(order) => order,
    };
    let order = pay(backend, order, now_ms)?;
    Ok((order, Created::Created))
}

/// Step 1 alone, in the caller's transaction: claim, take, create.
pub(super) fn claim_and_create(tx: &mut Tx<'_>, c: &Claim) -> Result<Begun, CheckoutError> {
    let terms = match claim(tx, c)? {
        Claimed::Replay(order_id) => return Ok(Begun::Replay(order_id)),
        Claimed::Ready(terms) => terms,
    };
    let units = i64::from(c.request.quantity);
    let part = stock::take(tx, &c.request.sku, units, &terms.order_id, c.now_ms)?;
    create(tx, c, terms, part)
}

/// Step 1's claim: the product's terms, the key (claimed, taken over, or
/// a replay), and the subject's purchase limit (under a per-subject
/// advisory lock held to the commit). Takes no units; an `Err` leaves
/// nothing the caller must keep (the caller rolls back to before it).
pub(super) fn claim(tx: &mut Tx<'_>, c: &Claim) -> Result<Claimed, CheckoutError> {
    let (subject, key, request, now_ms) = (c.subject.as_str(), &c.key, &c.request, c.now_ms);
    let terms = tx
        .query_opt(
            "SELECT price_cents, reservation_ttl_ms FROM products WHERE sku = $1",
            &[&request.sku],
        )
        .map_err(pg_err)?
        .ok_or_else(|| StoreError::UnknownSku(request.sku.clone()))?;
    let (price_cents, ttl_ms): (i64, i64) = (terms.get(0), terms.get(1));
    let hash = request.hash();
    let inserted = tx
        .execute(
            "INSERT INTO idempotency (subject, key, request_hash, created_at_ms, locked_at_ms)
             VALUES ($1, $2, $3, $4, $4) ON CONFLICT (subject, key) DO NOTHING",
            &[&subject, &key.as_str(), &hash, &now_ms],
        )
        .map_err(pg_err)?;
    if inserted == 0 {
        // Locks the row: a racing takeover of an abandoned key waits here.
        let row = tx
            .query_one(
                "SELECT request_hash, order_id, locked_at_ms, completed_at_ms IS NOT NULL
                 FROM idempotency WHERE subject = $1 AND key = $2 FOR UPDATE",
                &[&subject, &key.as_str()],
            )
            .map_err(pg_err)?;
        let stored_hash: String = row.get(0);
        match decide_claim(
            &stored_hash,
            &hash,
            row.get(1),
            row.get(2),
            row.get(3),
            now_ms,
        )? {
            ClaimDecision::Replay(order_id) => return Ok(Claimed::Replay(order_id)),
            ClaimDecision::TakeOver => {
                tx.execute(
                    "UPDATE idempotency SET locked_at_ms = $3 WHERE subject = $1 AND key = $2",
                    &[&subject, &key.as_str(), &now_ms],
                )
                .map_err(pg_err)?;
            }
        }
    }
    // One creating transaction per subject at a time, until its commit:
    // under READ COMMITTED, racing checkouts with distinct keys would each
    // count the others' orders as not there yet and all pass the limit.
    // (A batch holds one checkout per subject, so its own claims never
    // count each other's orders as missing either.)
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('subject:' || $1::text, 0))",
        &[&subject],
    )
    .map_err(pg_err)?;
    let (started, _) = order::subject_orders(tx, subject)?;
    if started >= c.limits.orders_per_subject_max {
        // Rolled back by the caller: the key is not burnt.
        return Err(CheckoutError::PurchaseLimit);
    }
    Ok(Claimed::Ready(Terms {
        order_id: format!("ord_{}", uuid::Uuid::new_v4().simple()),
        price_cents,
        ttl_ms,
    }))
}

/// Step 1's creation once the units are taken from `part` (`None`: sold
/// out): the order, its hold, the key's order id and — for a full
/// checkout — the order moved to `authorizing` with its authorize attempt
/// stored; sold out, the order is `rejected` and the key completed.
pub(super) fn create(
    tx: &mut Tx<'_>,
    c: &Claim,
    terms: Terms,
    part: Option<i32>,
) -> Result<Begun, CheckoutError> {
    let (subject, key, request, now_ms) = (c.subject.as_str(), &c.key, &c.request, c.now_ms);
    let Terms {
        order_id,
        price_cents,
        ttl_ms,
    } = terms;
    let units = i64::from(request.quantity);
    let expires_at_ms = now_ms.saturating_add(ttl_ms);
    let held_until = part.map(|_| expires_at_ms);
    let mut created = new_order(
        order_id.clone(),
        subject,
        request,
        price_cents,
        held_until,
        now_ms,
    );
    order::insert(tx, &created)?;
    if let Some(part) = part {
        tx.execute(
            "INSERT INTO reservations (order_id, sku, part, quantity, state, created_at_ms, expires_at_ms)
             VALUES ($1, $2, $3, $4, 'held', $5, $6)",
            &[&order_id, &request.sku, &part, &units, &now_ms, &expires_at_ms],
        )
        .map_err(pg_err)?;
    }
    tx.execute(
        "UPDATE idempotency SET order_id = $3 WHERE subject = $1 AND key = $2",
        &[&subject, &key.as_str(), &order_id],
    )
    .map_err(pg_err)?;
    if !c.start_payment {
        return Ok(Begun::Done(created));
    }
    if created.state != OrderState::Reserved {
        complete_key(tx, subject, key, now_ms)?;
        return Ok(Begun::Done(created));
    }
    order::set_payment(tx, &order_id, PaymentState::Pending, None, now_ms)?;
    created = order::transition(
        tx,
        &order_id,
        OrderState::Reserved,
        OrderState::Authorizing,
        now_ms,
    )?;
    settle::insert_attempt(
        tx,
        &order_id,
        Operation::Authorize,
        created.amount_cents,
        Some(&created.payment_method),
        None,
        now_ms,
    )?;
    Ok(Begun::Pay(created))
}

fn complete_key(
    tx: &mut Tx<'_>,
    subject: &str,
    key: &IdempotencyKey,
    now_ms: UnixMs,
) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE idempotency SET completed_at_ms = $3 WHERE subject = $1 AND key = $2",
        &[&subject, &key.as_str(), &now_ms],
    )
    .map_err(pg_err)?;
    Ok(())
}

/// Steps 2 and 3: the authorization, then the capture (or what their
/// answers decide instead), each answer settled in one transaction.
fn pay(backend: &PgBackend, order: Order, now_ms: UnixMs) -> Result<Order, CheckoutError> {
    let id = order.order_id.clone();
    let auth_key = attempt_key(&id, Operation::Authorize);
    if !settle::drive(backend, auth_key, false, now_ms)? {
        tracing::debug!(order = %id, "payment answer ambiguous; left to the payments reconciler");
    }
    Ok(backend.read_answer(|client| order::load_existing(client, &id))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_key_replays_conflicts_or_is_taken_over() {
        let t = 1_000_000;
        let fresh = t - 1;
        let stale = t - IDEMPOTENCY_LOCK_STALE_MS;
        assert!(matches!(
            decide_claim("h", "other", None, fresh, false, t),
            Err(CheckoutError::Mismatch)
        ));
        assert!(matches!(
            decide_claim("h", "h", Some("o".into()), fresh, false, t),
            Err(CheckoutError::Conflict)
        ));
        assert_eq!(
            decide_claim("h", "h", Some("o".into()), fresh, true, t).unwrap(),
            ClaimDecision::Replay("o".into())
        );
        assert_eq!(
            decide_claim("h", "h", None, stale, false, t).unwrap(),
            ClaimDecision::TakeOver
        );
    }
}
