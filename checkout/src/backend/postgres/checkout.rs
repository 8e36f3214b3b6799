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
//! claims ([`claim_all`]), the creations ([`create_all`]) and the holds
//! ([`insert_holds`]) here being its parts, each a few statements for the
//! whole batch; a checkout run on its own ([`claim_and_create`]) is a
//! batch of one.
//! Each answer is applied by `settle` (the rules webhooks and the payments
//! reconciler apply too), so a webhook that got there first changes
//! nothing here but the follow-up this checkout adopts.
//! An answer that stays ambiguous after `SEND_TRIES_MAX` sends (each
//! preceded by a look-up with the same key) writes nothing: the order stays
//! `authorizing` with its attempt stored, the key stays locked until
//! [`IDEMPOTENCY_LOCK_STALE_MS`](crate::limits::IDEMPOTENCY_LOCK_STALE_MS), and a retry replays the order.

use std::collections::{HashMap, HashSet};

use super::conn::{Db, Tx};
use super::{order, pg_err, settle, stock, PgBackend};
use crate::blocking::{step, Blocking, Inline};
use crate::clock::UnixMs;
use crate::core::attempt::{attempt_key, Operation};
use crate::core::claim::{decide_claim, ClaimDecision};
use crate::core::idempotency::IdempotencyKey;
use crate::core::order::new_order;
use crate::core::order::Order;
use crate::core::request::{validate_sku, validate_subject, CheckoutRequest, Created, OrderLimits};
use crate::core::state::{transition_allowed, OrderState, PaymentState};
use crate::error::{CheckoutError, StoreError};
use crate::http_client::wait;

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
    wait(checkout_on(
        backend,
        &Inline,
        subject,
        key,
        request,
        limits,
        start_payment,
        now_ms,
    ))
}

/// [`checkout`] with each store step on `steps` and the provider calls
/// awaited between them.
#[allow(clippy::too_many_arguments)]
pub(super) async fn checkout_on(
    backend: &PgBackend,
    steps: &dyn Blocking,
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
    let claim = Claim {
        subject: subject.to_owned(),
        key: key.clone(),
        request: request.clone(),
        limits,
        start_payment,
        now_ms,
    };
    let b = backend.clone();
    let begun = step(steps, move || b.begin_batched(claim)).await??;
    let order = match begun {
        Begun::Replay(order_id) => {
            let b = backend.clone();
            let order = step(steps, move || {
                b.read(|client| order::load_existing(client, &order_id))
            })
            .await??;
            return Ok((order, Created::Replay));
        }
        Begun::Done(order) => return Ok((order, Created::Created)),
        Begun::Pay(order) => order,
    };
    let order = pay(backend, steps, order, now_ms).await?;
    Ok((order, Created::Created))
}

/// Step 1 alone, in the caller's transaction: claim, take, create (the
/// batch's set-based statements, for a batch of one).
pub(super) fn claim_and_create(tx: &mut Tx<'_>, c: &Claim) -> Result<Begun, CheckoutError> {
    let claimed = claim_all(tx, &[c])?.pop().expect("one answer per claim");
    let terms = match claimed? {
        Claimed::Replay(order_id) => return Ok(Begun::Replay(order_id)),
        Claimed::Ready(terms) => terms,
    };
    let units = i64::from(c.request.quantity);
    let part = stock::take(tx, &c.request.sku, units, &terms.order_id, c.now_ms)?;
    let (begun, _) = create_all(tx, vec![(c, terms, part)], true)?;
    Ok(begun.into_iter().next().expect("one order per claim"))
}

/// Step 1's claims for a whole batch, a few statements for all of them:
/// the products' terms (once per SKU) and every key of a known SKU with
/// the id of the order it is for, in one statement (an `INSERT … SELECT
/// FROM unnest … ON CONFLICT DO NOTHING RETURNING` beside the terms'
/// `SELECT`: the keys returned are the ones this batch claimed; the key
/// row's foreign key to its order is checked at the commit, by which
/// time the order exists); the per-subject advisory locks of every
/// subject still in play (one statement, subjects in ascending order, so
/// two batches never wait on each other in a cycle); then their purchase
/// limits (one count for all, read after the locks: a new snapshot sees
/// the orders of whoever held a lock before). Takes no units.
///
/// The rarer cases go one statement per key, each an index lookup by
/// primary key (a join of the batch's arrays with the keys table could
/// be planned as a scan of the whole table): a key already stored is read
/// `FOR UPDATE` and decided by [`decide_claim`]; a takeover is written
/// only for a claim that passed; a key claimed for a checkout over its
/// limit is deleted again (not burnt).
///
/// Answers per claim, in `claims`' order: `Ready`, `Replay`, or the
/// claim's own error (unknown SKU, mismatch, conflict, limit), which
/// leaves nothing behind. An `Err` of the whole is the batch's (a
/// statement failed). Needs at most one claim per subject (a batch holds
/// one), so the counts are exact.
pub(super) fn claim_all(
    tx: &mut Tx<'_>,
    claims: &[&Claim],
) -> Result<Vec<Result<Claimed, CheckoutError>>, StoreError> {
    let mut answers: Vec<Option<Result<Claimed, CheckoutError>>> =
        claims.iter().map(|_| None).collect();
    // The claims in subject order: the order the key rows and the
    // subjects' locks are taken in.
    let mut live: Vec<usize> = (0..claims.len()).collect();
    live.sort_by(|&a, &b| claims[a].subject.cmp(&claims[b].subject));
    let mut skus: Vec<&str> = claims.iter().map(|c| c.request.sku.as_str()).collect();
    skus.sort_unstable();
    skus.dedup();
    let hashes: Vec<String> = claims.iter().map(|c| c.request.hash()).collect();
    let order_ids: Vec<String> = claims
        .iter()
        .map(|_| format!("ord_{}", uuid::Uuid::new_v4().simple()))
        .collect();
    let subjects: Vec<&str> = live.iter().map(|&i| claims[i].subject.as_str()).collect();
    let keys: Vec<&str> = live.iter().map(|&i| claims[i].key.as_str()).collect();
    let live_hashes: Vec<&str> = live.iter().map(|&i| hashes[i].as_str()).collect();
    let live_ids: Vec<&str> = live.iter().map(|&i| order_ids[i].as_str()).collect();
    let times: Vec<i64> = live.iter().map(|&i| claims[i].now_ms).collect();
    let live_skus: Vec<&str> = live
        .iter()
        .map(|&i| claims[i].request.sku.as_str())
        .collect();
    // The products' terms (once per SKU) and every key of a known SKU
    // with the id of the order it is for, in ONE statement: the rows
    // tagged `true` are the terms, the others the keys this batch claimed.
    // The known SKUs are an array computed once (an init plan), so the
    // keys are inserted in the arrays' order, `ORDER BY n` says so.
    let mut terms: HashMap<String, (i64, i64)> = HashMap::new();
    let mut claimed: HashSet<(String, String)> = HashSet::new();
    let rows = tx
        .query(
            "WITH terms AS MATERIALIZED (
                 SELECT sku, price_cents, reservation_ttl_ms FROM products WHERE sku = ANY($1)),
             claimed AS (
                 INSERT INTO idempotency (subject, key, request_hash, order_id, created_at_ms,
                     locked_at_ms)
                 SELECT s, k, h, o, t, t
                   FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[],
                          $7::text[]) WITH ORDINALITY AS u(s, k, h, o, t, sku, n)
                  WHERE u.sku = ANY (ARRAY(SELECT sku FROM terms))
                  ORDER BY n
                 ON CONFLICT (subject, key) DO NOTHING
                 RETURNING subject, key)
             SELECT true, sku, NULL::text, price_cents, reservation_ttl_ms FROM terms
             UNION ALL
             SELECT false, subject, key, NULL::bigint, NULL::bigint FROM claimed",
            &[
                &skus,
                &subjects,
                &keys,
                &live_hashes,
                &live_ids,
                &times,
                &live_skus,
            ],
        )
        .map_err(pg_err)?;
    for row in &rows {
        if row.get::<_, bool>(0) {
            terms.insert(row.get(1), (row.get(3), row.get(4)));
        } else {
            claimed.insert((row.get(1), row.get(2)));
        }
    }
    // A claim of an unknown SKU is refused; nothing of it was written.
    live.retain(|&i| {
        let c = claims[i];
        let known = terms.contains_key(&c.request.sku);
        if !known {
            answers[i] = Some(Err(StoreError::UnknownSku(c.request.sku.clone()).into()));
        }
        known
    });
    let is_claimed = |i: usize| {
        let c = claims[i];
        claimed.contains(&(c.subject.clone(), c.key.as_str().to_owned()))
    };
    // Keys already stored, in subject order: read under their row locks
    // (a racing takeover of an abandoned key waits here).
    let mut take_over: HashSet<usize> = HashSet::new();
    for &i in live.iter().filter(|&&i| !is_claimed(i)) {
        let c = claims[i];
        let row = tx
            .query_opt(
                "SELECT request_hash, order_id, locked_at_ms, completed_at_ms IS NOT NULL
                 FROM idempotency WHERE subject = $1 AND key = $2 FOR UPDATE",
                &[&c.subject, &c.key.as_str()],
            )
            .map_err(pg_err)?;
        let Some(row) = row else {
            // Pruned between the INSERT and this read (retention): the
            // retry claims it afresh.
            answers[i] = Some(Err(CheckoutError::Conflict));
            continue;
        };
        let stored_hash: String = row.get(0);
        match decide_claim(
            &stored_hash,
            &hashes[i],
            row.get(1),
            row.get(2),
            row.get(3),
            c.now_ms,
        ) {
            Ok(ClaimDecision::Replay(order_id)) => {
                answers[i] = Some(Ok(Claimed::Replay(order_id)));
            }
            Ok(ClaimDecision::TakeOver) => {
                take_over.insert(i);
            }
            Err(e) => answers[i] = Some(Err(e)),
        }
    }
    // One creating transaction per subject at a time, until its commit:
    // under READ COMMITTED, racing checkouts with distinct keys would each
    // count the others' orders as not there yet and all pass the limit.
    let contenders: Vec<usize> = live
        .iter()
        .copied()
        .filter(|&i| answers[i].is_none())
        .collect();
    if contenders.is_empty() {
        return Ok(answers.into_iter().map(|a| a.expect("decided")).collect());
    }
    let subjects: Vec<&str> = contenders
        .iter()
        .map(|&i| claims[i].subject.as_str())
        .collect();
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('subject:' || s, 0))
           FROM unnest($1::text[]) AS u(s)",
        &[&subjects],
    )
    .map_err(pg_err)?;
    // A statement of its own after the locks: its snapshot sees the
    // orders every earlier holder of a lock committed.
    let started: HashMap<String, i64> = tx
        .query(
            "SELECT u.s, (SELECT COUNT(*) FROM orders o WHERE o.subject = u.s)
               FROM unnest($1::text[]) AS u(s)",
            &[&subjects],
        )
        .map_err(pg_err)?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    for &i in &contenders {
        let c = claims[i];
        let count = started.get(&c.subject).copied().unwrap_or(0);
        let over = u32::try_from(count).unwrap_or(u32::MAX) >= c.limits.orders_per_subject_max;
        if over {
            if !take_over.contains(&i) {
                // Over the limit: the key is not burnt (as if never
                // claimed).
                tx.execute(
                    "DELETE FROM idempotency WHERE subject = $1 AND key = $2",
                    &[&c.subject, &c.key.as_str()],
                )
                .map_err(pg_err)?;
            }
            answers[i] = Some(Err(CheckoutError::PurchaseLimit));
            continue;
        }
        if take_over.contains(&i) {
            tx.execute(
                "UPDATE idempotency SET locked_at_ms = $3, order_id = $4
                 WHERE subject = $1 AND key = $2",
                &[&c.subject, &c.key.as_str(), &c.now_ms, &order_ids[i]],
            )
            .map_err(pg_err)?;
        }
        let (price_cents, ttl_ms) = terms[&c.request.sku];
        answers[i] = Some(Ok(Claimed::Ready(Terms {
            order_id: order_ids[i].clone(),
            price_cents,
            ttl_ms,
        })));
    }
    Ok(answers.into_iter().map(|a| a.expect("decided")).collect())
}

/// One order step 1 creates, as [`create_all`] writes it.
struct Creation {
    /// The order as stored (for a paid checkout already `authorizing`).
    order: Order,
    /// Its outbox events, in order: its birth, then (paid) `authorizing`.
    events: Vec<Order>,
    /// The partition its units came from (`None`: sold out, no hold).
    part: Option<i32>,
    expires_at_ms: UnixMs,
    /// Whether the key is completed now (sold out on a full checkout).
    completes_key: bool,
    pays: bool,
}

/// What step 1 creates for `c` once its units are taken from `part`
/// (`None`: sold out), as a plain function: the order (`reserved`, or
/// `rejected` when sold out); for a full checkout that holds units, the
/// order moved to `authorizing` (payment `pending`) with the authorize
/// attempt to store; sold out on a full checkout, the key completed.
fn creation(c: &Claim, terms: Terms, part: Option<i32>) -> Result<Creation, StoreError> {
    let expires_at_ms = c.now_ms.saturating_add(terms.ttl_ms);
    let held_until = part.map(|_| expires_at_ms);
    let born = new_order(
        terms.order_id,
        &c.subject,
        &c.request,
        terms.price_cents,
        held_until,
        c.now_ms,
    );
    let pays = c.start_payment && born.state == OrderState::Reserved;
    let completes_key = c.start_payment && born.state != OrderState::Reserved;
    let mut events = vec![born.clone()];
    let mut order = born;
    if pays {
        let (from, to) = (OrderState::Reserved, OrderState::Authorizing);
        if !transition_allowed(from, to) {
            return Err(StoreError::IllegalTransition { from, to });
        }
        order.state = to;
        order.payment_state = PaymentState::Pending;
        order.updated_at_ms = c.now_ms;
        events.push(order.clone());
    }
    Ok(Creation {
        order,
        events,
        part,
        expires_at_ms,
        completes_key,
        pays,
    })
}

/// Step 1's creations for a whole batch in one statement for all of them
/// (an `INSERT … SELECT FROM unnest` per table, joined by `WITH`): the
/// orders (each written as [`creation`] leaves it), their outbox events,
/// the authorize attempts (and, sold out on a full checkout, the key's
/// completion, one statement each). Answers in `jobs`' order,
/// with the holds to write ([`insert_holds`], once their units are
/// taken), or, with `taken` (the units were taken before: each job's
/// partition is where they came from), with the holds written in the
/// same statement and none left to write. An `Err` is the batch's: the
/// batch then runs one job per transaction.
pub(super) fn create_all(
    tx: &mut Tx<'_>,
    jobs: Vec<(&Claim, Terms, Option<i32>)>,
    taken: bool,
) -> Result<(Vec<Begun>, Vec<Hold>), StoreError> {
    let mut made = Vec::with_capacity(jobs.len());
    for (c, terms, part) in &jobs {
        made.push(creation(c, terms.clone(), *part)?);
    }
    let orders: Vec<&Order> = made.iter().map(|m| &m.order).collect();
    let text = |f: &dyn Fn(&Order) -> String| orders.iter().map(|o| f(o)).collect::<Vec<_>>();
    let big = |f: &dyn Fn(&Order) -> i64| orders.iter().map(|o| f(o)).collect::<Vec<_>>();
    let quantities: Vec<i32> = orders
        .iter()
        .map(|o| i32::try_from(o.quantity).unwrap_or(i32::MAX))
        .collect();
    let payment_ids: Vec<Option<&str>> = orders.iter().map(|o| o.payment_id.as_deref()).collect();
    let expiries: Vec<Option<i64>> = orders.iter().map(|o| o.reservation_expires_at_ms).collect();
    // The events in order (an order's birth before its `authorizing`):
    // `seq` follows the rows of the SELECT.
    let (mut ids, mut of, mut kinds, mut payloads, mut at) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (m, (c, ..)) in made.iter().zip(&jobs) {
        for event in &m.events {
            let (id, payload) = order::event_of(event)?;
            ids.push(id);
            of.push(event.order_id.as_str());
            kinds.push(event.state.event_type());
            payloads.push(payload);
            at.push(c.now_ms);
        }
    }
    let paying: Vec<&Creation> = made.iter().filter(|m| m.pays).collect();
    let attempt_keys: Vec<String> = paying
        .iter()
        .map(|m| attempt_key(&m.order.order_id, Operation::Authorize))
        .collect();
    let attempt_orders: Vec<&str> = paying.iter().map(|m| m.order.order_id.as_str()).collect();
    let attempt_amounts: Vec<i64> = paying
        .iter()
        .map(|m| i64::try_from(m.order.amount_cents).unwrap_or(i64::MAX))
        .collect();
    let attempt_methods: Vec<&str> = paying
        .iter()
        .map(|m| m.order.payment_method.as_str())
        .collect();
    let attempt_at: Vec<i64> = paying.iter().map(|m| m.order.updated_at_ms).collect();
    let holds: Vec<Hold> = made
        .iter()
        .zip(&jobs)
        .filter_map(|(m, (c, ..))| {
            m.part.map(|part| Hold {
                order_id: m.order.order_id.clone(),
                sku: m.order.sku.clone(),
                part,
                units: i64::from(m.order.quantity),
                created_at_ms: c.now_ms,
                expires_at_ms: m.expires_at_ms,
            })
        })
        .collect();
    let now: &[Hold] = if taken { &holds } else { &[] };
    let hold_ids: Vec<&str> = now.iter().map(|h| h.order_id.as_str()).collect();
    let hold_skus: Vec<&str> = now.iter().map(|h| h.sku.as_str()).collect();
    let hold_parts: Vec<i32> = now.iter().map(|h| h.part).collect();
    let hold_units: Vec<i64> = now.iter().map(|h| h.units).collect();
    let hold_created: Vec<i64> = now.iter().map(|h| h.created_at_ms).collect();
    let hold_expires: Vec<i64> = now.iter().map(|h| h.expires_at_ms).collect();
    // Orders, events, authorize attempts (and the holds, when `taken`) in
    // ONE statement (one round trip): none of the three tables refers to another (the outbox names
    // its order by id only; attempts lost their foreign key in migration
    // 3), so the order the data-modifying parts run in does not matter.
    tx.execute(
        concat!(
            "WITH new_orders AS (INSERT INTO orders (",
            order::columns!(),
            ") SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[],
                 $6::bigint[], $7::text[], $8::text[], $9::text[], $10::bigint[], $11::bigint[],
                 $12::bigint[])),
             new_events AS (INSERT INTO outbox (event_id, order_id, event_type, payload,
                 created_at_ms)
               SELECT * FROM unnest($13::text[], $14::text[], $15::text[], $16::text[],
                 $17::bigint[])),
             new_holds AS (INSERT INTO reservations (order_id, sku, part, quantity, state,
                 created_at_ms, expires_at_ms)
               SELECT o, s, p, q, 'held', c, e
                 FROM unnest($23::text[], $24::text[], $25::int[], $26::bigint[], $27::bigint[],
                   $28::bigint[]) AS u(o, s, p, q, c, e))
             INSERT INTO payment_attempts (idempotency_key, order_id, operation, amount_cents,
                 payment_method, payment_id, outcome, created_at_ms, updated_at_ms)
             SELECT k, o, 'authorize', a, m, NULL, 'pending', t, t
               FROM unnest($18::text[], $19::text[], $20::bigint[], $21::text[], $22::bigint[])
                 AS u(k, o, a, m, t)
             ON CONFLICT (idempotency_key) DO NOTHING"
        ),
        &[
            &text(&|o| o.order_id.clone()),
            &text(&|o| o.subject.clone()),
            &text(&|o| o.sku.clone()),
            &quantities,
            &text(&|o| o.payment_method.clone()),
            &big(&|o| i64::try_from(o.amount_cents).unwrap_or(i64::MAX)),
            &text(&|o| o.state.as_str().to_owned()),
            &text(&|o| o.payment_state.as_str().to_owned()),
            &payment_ids,
            &big(&|o| o.created_at_ms),
            &big(&|o| o.updated_at_ms),
            &expiries,
            &ids,
            &of,
            &kinds,
            &payloads,
            &at,
            &attempt_keys,
            &attempt_orders,
            &attempt_amounts,
            &attempt_methods,
            &attempt_at,
            &hold_ids,
            &hold_skus,
            &hold_parts,
            &hold_units,
            &hold_created,
            &hold_expires,
        ],
    )
    .map_err(pg_err)?;
    let holds = if taken { Vec::new() } else { holds };
    // The keys already name their orders (`claim_all`); a full checkout
    // sold out completes its key (rare: one statement each).
    for (m, (c, ..)) in made.iter().zip(&jobs) {
        if m.completes_key {
            tx.execute(
                "UPDATE idempotency SET completed_at_ms = $3 WHERE subject = $1 AND key = $2",
                &[&c.subject, &c.key.as_str(), &c.now_ms],
            )
            .map_err(pg_err)?;
        }
    }
    let begun = made
        .into_iter()
        .map(|m| {
            if m.pays {
                Begun::Pay(m.order)
            } else {
                Begun::Done(m.order)
            }
        })
        .collect();
    Ok((begun, holds))
}

/// A hold step 1 writes for an order ([`insert_holds`]).
pub(super) struct Hold {
    pub order_id: String,
    pub sku: String,
    /// The partition its units came from.
    pub part: i32,
    pub units: i64,
    pub created_at_ms: UnixMs,
    pub expires_at_ms: UnixMs,
}

/// The holds, one statement for all, written once their units are taken
/// (each on the partition its units came from), so the hot row is locked
/// from the take to the commit only. No foreign key checks them at the
/// write since migration 5 (each was a lookup per hold; the partition's
/// key-share lock was already this transaction's own, the holds being
/// written after its `UPDATE`); `sluice audit` checks that each hold's
/// order and partition exist.
pub(super) fn insert_holds(tx: &mut Tx<'_>, holds: &[Hold]) -> Result<(), StoreError> {
    if holds.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = holds.iter().map(|h| h.order_id.as_str()).collect();
    let skus: Vec<&str> = holds.iter().map(|h| h.sku.as_str()).collect();
    let parts: Vec<i32> = holds.iter().map(|h| h.part).collect();
    let units: Vec<i64> = holds.iter().map(|h| h.units).collect();
    let created: Vec<i64> = holds.iter().map(|h| h.created_at_ms).collect();
    let expires: Vec<i64> = holds.iter().map(|h| h.expires_at_ms).collect();
    tx.execute(
        "INSERT INTO reservations (order_id, sku, part, quantity, state, created_at_ms,
             expires_at_ms)
         SELECT o, s, p, q, 'held', c, e
           FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[], $5::bigint[],
                $6::bigint[]) AS u(o, s, p, q, c, e)",
        &[&ids, &skus, &parts, &units, &created, &expires],
    )
    .map_err(pg_err)?;
    Ok(())
}

/// Steps 2 and 3: the authorization, then the capture (or what their
/// answers decide instead), each answer settled in one transaction. The
/// authorize attempt is the one step 1 stored with the order (not read
/// back), and the order returned is the one the last answer's
/// transaction left (read in it), unless an answer stayed ambiguous.
async fn pay(
    backend: &PgBackend,
    steps: &dyn Blocking,
    order: Order,
    now_ms: UnixMs,
) -> Result<Order, CheckoutError> {
    let id = order.order_id.clone();
    let drove = settle::drive_from(
        backend,
        steps,
        settle::Start::Known(authorize_attempt(&order)),
        false,
        now_ms,
    )
    .await?;
    if !drove.answered {
        tracing::debug!(order = %id, "payment answer ambiguous; left to the payments reconciler");
    }
    if let Some(order) = drove.order {
        return Ok(order);
    }
    let b = backend.clone();
    Ok(step(steps, move || {
        b.read_answer(|client| order::load_existing(client, &id))
    })
    .await??)
}

/// The authorize attempt [`create_all`] stored for `order` (a full
/// checkout's, moved to `authorizing`), as the drive sends it.
fn authorize_attempt(order: &Order) -> settle::StoredAttempt {
    settle::StoredAttempt {
        key: attempt_key(&order.order_id, Operation::Authorize),
        order_id: order.order_id.clone(),
        operation: Operation::Authorize,
        amount_cents: order.amount_cents,
        payment_method: Some(order.payment_method.clone()),
        payment_id: None,
        pending: true,
    }
}
