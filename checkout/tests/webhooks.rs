//! Provider events applied to the store: duplicates change nothing, the
//! most advanced state wins whatever the order of arrival, contradictions
//! are refused and counted, money with no live order is compensated.

mod common;

use async_trait::async_trait;
use std::sync::{Arc, OnceLock};

use common::{key, request, seeds, test_payments, Harness, PM_LOST, PRICE_CENTS, T0_MS};
use sluice_checkout::{
    apply_webhook, parse_event, sign, verify_signature, AuthorizeOutcome, CheckoutService,
    EventData, EventPage, EventType, OperationOutcome, Order, OrderState, PaymentError,
    PaymentProvider, PaymentState, SimPaymentState, SimulatedProvider, Store, WebhookEvent,
    WebhookOutcome,
};

/// An order left `authorizing` (answer and look-ups lost) with a real
/// authorization at the simulator.
fn authorizing(h: &Harness, k: &str) -> (Order, String) {
    let (order, _) = h
        .service
        .checkout("sub-1", &key(k), &request("sku-a", 1, PM_LOST), T0_MS)
        .unwrap();
    assert_eq!(order.state, OrderState::Authorizing);
    let payment_id = h.provider.sim.payments_for_order(&order.order_id)[0]
        .payment_id
        .clone();
    (order, payment_id)
}

fn event(id: &str, t: EventType, order: &Order, payment_id: &str) -> WebhookEvent {
    WebhookEvent {
        id: id.into(),
        event_type: t,
        created: T0_MS / 1000,
        data: EventData {
            payment_id: payment_id.into(),
            order_id: order.order_id.clone(),
            amount_cents: order.amount_cents,
        },
    }
}

fn state(h: &Harness, order: &Order) -> (OrderState, PaymentState) {
    let o = h.service.get_order("sub-1", &order.order_id).unwrap();
    (o.state, o.payment_state)
}

fn outbox_rows(h: &Harness) -> i64 {
    rusqlite::Connection::open(h.store.db_path())
        .unwrap()
        .query_row("SELECT COUNT(*) FROM outbox", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn authorized_confirms_after_capture_and_a_duplicate_changes_nothing() {
    let h = Harness::new(&[("sku-a", 10)]);
    let (order, pid) = authorizing(&h, "key-00001");
    let authorized = event("evt_1", EventType::Authorized, &order, &pid);
    assert_eq!(
        apply_webhook(&h.store, &authorized, T0_MS + 1).unwrap(),
        WebhookOutcome::Processed
    );
    assert_eq!(
        state(&h, &order),
        (OrderState::Authorizing, PaymentState::Authorized)
    );
    let rows = outbox_rows(&h);
    assert_eq!(
        apply_webhook(&h.store, &authorized, T0_MS + 2).unwrap(),
        WebhookOutcome::Duplicate
    );
    assert_eq!(outbox_rows(&h), rows);
    // The capture the event scheduled is due for the reconciler now.
    h.service.reconcile_payments_once(T0_MS + 3, 100).unwrap();
    assert_eq!(
        state(&h, &order),
        (OrderState::Confirmed, PaymentState::Captured)
    );
    assert_eq!(h.provider.sim.total_captures(), 1);
    let m = h.store.metrics();
    assert_eq!(m.webhook_events.get(&["processed"]), 1);
    assert_eq!(m.webhook_events.get(&["duplicate"]), 1);
}

#[test]
fn captured_before_authorized_ends_the_same_as_in_order() {
    let h = Harness::new(&[("sku-a", 10)]);
    let (order, pid) = authorizing(&h, "key-00001");
    let captured = event("evt_2", EventType::Captured, &order, &pid);
    let authorized = event("evt_1", EventType::Authorized, &order, &pid);
    assert_eq!(
        apply_webhook(&h.store, &captured, T0_MS + 1).unwrap(),
        WebhookOutcome::Processed
    );
    assert_eq!(
        state(&h, &order),
        (OrderState::Confirmed, PaymentState::Captured)
    );
    let stock = h.store.stock("sku-a").unwrap();
    assert_eq!((stock.reserved, stock.committed), (0, 1));
    assert_eq!(
        apply_webhook(&h.store, &authorized, T0_MS + 2).unwrap(),
        WebhookOutcome::Stale
    );
    assert_eq!(
        state(&h, &order),
        (OrderState::Confirmed, PaymentState::Captured)
    );
    // Nothing left to drive: no second capture is ever sent.
    let pass = h
        .service
        .reconcile_payments_once(T0_MS + 120_000, 100)
        .unwrap();
    assert_eq!(pass.attempts_resolved, pass.attempts_driven);
    assert_eq!(
        state(&h, &order),
        (OrderState::Confirmed, PaymentState::Captured)
    );
}

#[test]
fn refunded_before_captured_walks_the_whole_path_once() {
    let h = Harness::new(&[("sku-a", 10)]);
    let (order, pid) = authorizing(&h, "key-00001");
    let refunded = event("evt_3", EventType::Refunded, &order, &pid);
    assert_eq!(
        apply_webhook(&h.store, &refunded, T0_MS + 1).unwrap(),
        WebhookOutcome::Processed
    );
    assert_eq!(
        state(&h, &order),
        (OrderState::Refunded, PaymentState::Refunded)
    );
    assert_eq!(h.store.stock("sku-a").unwrap().available, 10);
    for (id, t) in [
        ("evt_2", EventType::Captured),
        ("evt_1", EventType::Authorized),
    ] {
        let late = event(id, t, &order, &pid);
        assert_eq!(
            apply_webhook(&h.store, &late, T0_MS + 2).unwrap(),
            WebhookOutcome::Stale
        );
    }
}

#[test]
fn contradictions_are_refused_counted_and_change_nothing() {
    let h = Harness::new(&[("sku-a", 10)]);
    let (order, _) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    let pid = order.payment_id.clone().unwrap();
    let before = h
        .store
        .metrics()
        .illegal_transitions
        .load(std::sync::atomic::Ordering::Relaxed);
    let rows = outbox_rows(&h);
    let voided = event("evt_v", EventType::Voided, &order, &pid);
    assert_eq!(
        apply_webhook(&h.store, &voided, T0_MS + 1).unwrap(),
        WebhookOutcome::RejectedTransition
    );
    let declined = event("evt_d", EventType::Declined, &order, &pid);
    assert_eq!(
        apply_webhook(&h.store, &declined, T0_MS + 1).unwrap(),
        WebhookOutcome::RejectedTransition
    );
    let mut other_amount = event("evt_a", EventType::Refunded, &order, &pid);
    other_amount.data.amount_cents = PRICE_CENTS + 1;
    assert_eq!(
        apply_webhook(&h.store, &other_amount, T0_MS + 1).unwrap(),
        WebhookOutcome::RejectedTransition
    );
    assert_eq!(
        state(&h, &order),
        (OrderState::Confirmed, PaymentState::Captured)
    );
    assert_eq!(outbox_rows(&h), rows);
    let after = h
        .store
        .metrics()
        .illegal_transitions
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(after, before + 3);
    assert_eq!(
        h.store
            .metrics()
            .webhook_events
            .get(&["rejected_transition"]),
        3
    );
}

#[test]
fn money_for_an_order_we_do_not_know_is_voided_as_an_orphan() {
    let h = Harness::new(&[("sku-a", 10)]);
    // A charge made at the provider for an order this store never wrote.
    let auth = sluice_checkout::http_client::wait(sluice_checkout::PaymentProvider::authorize(
        &h.provider.sim,
        "ord_ghost:authorize",
        "ord_ghost",
        500,
        "pm_ok",
    ))
    .unwrap();
    let sluice_checkout::AuthorizeOutcome::Authorized { payment_id } = auth else {
        panic!("authorized");
    };
    let ghost = WebhookEvent {
        id: "evt_ghost".into(),
        event_type: EventType::Authorized,
        created: T0_MS / 1000,
        data: EventData {
            payment_id: payment_id.clone(),
            order_id: "ord_ghost".into(),
            amount_cents: 500,
        },
    };
    assert_eq!(
        apply_webhook(&h.store, &ghost, T0_MS).unwrap(),
        WebhookOutcome::Processed
    );
    assert_eq!(
        sluice_checkout::Metrics::get(&h.store.metrics().orphan_charges),
        1
    );
    h.service.reconcile_payments_once(T0_MS + 1, 100).unwrap();
    let payment = &h.provider.sim.payments_for_order("ord_ghost")[0];
    assert_eq!(payment.state, SimPaymentState::Voided);
}

#[test]
fn a_signed_body_round_trips_through_verify_and_parse() {
    let h = Harness::new(&[("sku-a", 10)]);
    let (order, pid) = authorizing(&h, "key-00001");
    let body = serde_json::to_vec(&event("evt_9", EventType::Captured, &order, &pid)).unwrap();
    let header = sign(b"whsec_new", T0_MS / 1000, &body);
    let secrets: [&[u8]; 2] = [b"whsec_new", b"whsec_old"];
    verify_signature(&header, &body, &secrets, T0_MS / 1000 + 10, 300).unwrap();
    let forged = sign(b"whsec_guess", T0_MS / 1000, &body);
    let refused = verify_signature(&forged, &body, &secrets, T0_MS / 1000, 300).unwrap_err();
    sluice_checkout::webhook::count_refused(h.store.metrics(), &refused);
    let stale = verify_signature(&header, &body, &secrets, T0_MS / 1000 + 301, 300).unwrap_err();
    sluice_checkout::webhook::count_refused(h.store.metrics(), &stale);
    let m = h.store.metrics();
    assert_eq!(m.webhook_events.get(&["invalid_signature"]), 1);
    assert_eq!(m.webhook_events.get(&["stale"]), 1);
    let parsed = parse_event(&body).unwrap();
    assert_eq!(
        apply_webhook(&h.store, &parsed, T0_MS + 1).unwrap(),
        WebhookOutcome::Processed
    );
    assert_eq!(
        state(&h, &order),
        (OrderState::Confirmed, PaymentState::Captured)
    );
}

/// A provider whose `payment.authorized` webhook reaches the store before
/// the authorize call's own answer reaches the caller (paysim, like a
/// card provider, sends the event as soon as it has processed the call).
struct WebhookBeforeAnswer {
    sim: SimulatedProvider,
    store: OnceLock<Arc<Store>>,
    /// After the webhook, a reconciler pass has marked the capture it
    /// stored as sent (and is sending it), before the answer arrives.
    reconciler_took_capture: bool,
}

#[async_trait]
impl PaymentProvider for WebhookBeforeAnswer {
    fn name(&self) -> &str {
        "webhook-first"
    }
    async fn authorize(
        &self,
        key: &str,
        order_id: &str,
        amount_cents: u64,
        method: &str,
    ) -> Result<AuthorizeOutcome, PaymentError> {
        let answer = self
            .sim
            .authorize(key, order_id, amount_cents, method)
            .await?;
        if let AuthorizeOutcome::Authorized { payment_id } = &answer {
            let authorized = WebhookEvent {
                id: format!("evt_{order_id}"),
                event_type: EventType::Authorized,
                created: T0_MS / 1000,
                data: EventData {
                    payment_id: payment_id.clone(),
                    order_id: order_id.to_owned(),
                    amount_cents,
                },
            };
            let store = self.store.get().expect("the store is set");
            assert_eq!(
                apply_webhook(store, &authorized, T0_MS).unwrap(),
                WebhookOutcome::Processed
            );
            if self.reconciler_took_capture {
                let conn = rusqlite::Connection::open(store.db_path()).unwrap();
                conn.busy_timeout(std::time::Duration::from_secs(5))
                    .unwrap();
                let marked = conn
                    .execute(
                        "UPDATE payment_attempts SET transport = 'sent', next_try_at_ms = ?2
                         WHERE idempotency_key = ?1 AND transport = 'pending'",
                        rusqlite::params![format!("{order_id}:capture"), T0_MS + 60_000],
                    )
                    .unwrap();
                assert_eq!(marked, 1, "the webhook stored the capture");
            }
        }
        Ok(answer)
    }
    async fn capture(
        &self,
        key: &str,
        payment_id: &str,
        amount_cents: u64,
    ) -> Result<(), PaymentError> {
        self.sim.capture(key, payment_id, amount_cents).await
    }
    async fn void(
        &self,
        key: &str,
        payment_id: &str,
        amount_cents: u64,
    ) -> Result<(), PaymentError> {
        self.sim.void(key, payment_id, amount_cents).await
    }
    async fn refund(
        &self,
        key: &str,
        payment_id: &str,
        amount_cents: u64,
    ) -> Result<(), PaymentError> {
        self.sim.refund(key, payment_id, amount_cents).await
    }
    async fn lookup(&self, key: &str) -> Result<Option<OperationOutcome>, PaymentError> {
        self.sim.lookup(key).await
    }
    async fn events_since(&self, cursor: u64, limit: usize) -> Result<EventPage, PaymentError> {
        self.sim.events_since(cursor, limit).await
    }
}

fn webhook_first(
    reconciler_took_capture: bool,
) -> (tempfile::TempDir, Arc<WebhookBeforeAnswer>, CheckoutService) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    store.seed_products(&seeds(&[("sku-a", 10)])).unwrap();
    let provider = Arc::new(WebhookBeforeAnswer {
        sim: SimulatedProvider::default(),
        store: OnceLock::new(),
        reconciler_took_capture,
    });
    provider.store.set(store.clone()).ok().unwrap();
    let service = CheckoutService::with_payments(store, provider.clone(), test_payments());
    (dir, provider, service)
}

#[test]
fn a_webhook_ahead_of_the_answer_does_not_leave_the_checkout_authorizing() {
    let (_dir, provider, service) = webhook_first(false);
    let (order, _) = service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    // The webhook settled the authorization first; the checkout still
    // captures in the same call instead of leaving the capture to the
    // reconciler's next pass.
    assert_eq!(
        (order.state, order.payment_state),
        (OrderState::Confirmed, PaymentState::Captured)
    );
    assert_eq!(provider.sim.total_captures(), 1);
    // Nothing is left for the reconciler: the capture is not sent twice.
    let pass = service.reconcile_payments_once(T0_MS + 1, 100).unwrap();
    assert_eq!(pass.attempts_driven, 0);
    assert_eq!(provider.sim.total_captures(), 1);
}

#[test]
fn a_capture_the_reconciler_is_sending_is_left_to_it() {
    let (_dir, provider, service) = webhook_first(true);
    let (order, _) = service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    // Not sent twice at once: the checkout answers with what it knows.
    assert_eq!(
        (order.state, order.payment_state),
        (OrderState::Authorizing, PaymentState::Authorized)
    );
    assert_eq!(provider.sim.total_captures(), 0);
    // The reconciler's retry (due once its in-flight bound is over) ends it.
    service
        .reconcile_payments_once(T0_MS + 60_000, 100)
        .unwrap();
    let order = service.get_order("sub-1", &order.order_id).unwrap();
    assert_eq!(order.state, OrderState::Confirmed);
    assert_eq!(provider.sim.total_captures(), 1);
}
