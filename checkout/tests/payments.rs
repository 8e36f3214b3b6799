//! Durable payment attempts, ambiguous answers and compensation, through
//! the public API with the simulated provider and an injected clock.

mod common;

use async_trait::async_trait;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use common::{key, request, seeds, test_payments, Harness, PM_LOST, T0_MS};
use sluice_checkout::{
    AttemptOutcome, AuthorizeOutcome, CheckoutService, Clock, EventPage, Faults, ManualClock,
    Metrics, Operation, OperationOutcome, OrderState, PaymentError, PaymentProvider, PaymentState,
    PaymentsConfig, RetryPolicy, SimConfig, SimulatedProvider, Store, Transport,
};

/// A store, a fault-injecting simulator and a service sharing one manual
/// clock.
struct Sim {
    _dir: tempfile::TempDir,
    store: Arc<Store>,
    clock: Arc<ManualClock>,
    provider: Arc<SimulatedProvider>,
    service: CheckoutService,
}

fn sim(seed: u64) -> Sim {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    store.seed_products(&seeds(&[("sku-a", 10)])).unwrap();
    let clock = Arc::new(ManualClock::new(T0_MS));
    let provider = Arc::new(SimulatedProvider::with(
        SimConfig {
            seed,
            slow_ms: 2_000,
            faults: Faults::default(),
        },
        clock.clone(),
        clock.clone(),
    ));
    let service = CheckoutService::with_payments(
        Arc::clone(&store),
        provider.clone(),
        PaymentsConfig {
            retry: RetryPolicy::default(),
            clock: clock.clone(),
            sleeper: clock.clone(),
            jitter_seed: seed,
        },
    );
    Sim {
        _dir: dir,
        store,
        clock,
        provider,
        service,
    }
}

fn attempt(store: &Store, order_id: &str, op: Operation) -> sluice_checkout::Attempt {
    store
        .payment_attempts(order_id)
        .unwrap()
        .into_iter()
        .find(|a| a.operation == op)
        .unwrap_or_else(|| panic!("no {op:?} attempt"))
}

/// Records what the provider was sent, and can check the store from
/// inside the call (is the attempt already committed?).
struct Probe {
    inner: Arc<SimulatedProvider>,
    db: std::path::PathBuf,
    sent: Mutex<Vec<(String, String)>>,
    stored_before_send: Mutex<Vec<bool>>,
}

impl Probe {
    fn saw(&self, what: &str, key: &str) {
        let conn = rusqlite::Connection::open(&self.db).unwrap();
        let stored: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM payment_attempts WHERE idempotency_key = ?1",
                [key],
                |r| r.get(0),
            )
            .unwrap();
        self.stored_before_send.lock().unwrap().push(stored == 1);
        self.sent
            .lock()
            .unwrap()
            .push((what.to_owned(), key.to_owned()));
    }
}

#[async_trait]
impl PaymentProvider for Probe {
    fn name(&self) -> &str {
        "probe"
    }
    async fn authorize(
        &self,
        key: &str,
        order_id: &str,
        amount: u64,
        method: &str,
    ) -> Result<AuthorizeOutcome, PaymentError> {
        self.saw(&format!("authorize {order_id} {amount} {method}"), key);
        self.inner.authorize(key, order_id, amount, method).await
    }
    async fn capture(&self, key: &str, payment_id: &str, amount: u64) -> Result<(), PaymentError> {
        self.saw(&format!("capture {payment_id} {amount}"), key);
        self.inner.capture(key, payment_id, amount).await
    }
    async fn void(&self, key: &str, payment_id: &str, amount: u64) -> Result<(), PaymentError> {
        self.saw(&format!("void {payment_id} {amount}"), key);
        self.inner.void(key, payment_id, amount).await
    }
    async fn refund(&self, key: &str, payment_id: &str, amount: u64) -> Result<(), PaymentError> {
        self.saw(&format!("refund {payment_id} {amount}"), key);
        self.inner.refund(key, payment_id, amount).await
    }
    async fn lookup(&self, key: &str) -> Result<Option<OperationOutcome>, PaymentError> {
        self.inner.lookup(key).await
    }
    async fn events_since(&self, cursor: u64, limit: usize) -> Result<EventPage, PaymentError> {
        self.inner.events_since(cursor, limit).await
    }
}

#[test]
fn every_operation_is_stored_before_it_is_sent() {
    let s = sim(1);
    let probe = Arc::new(Probe {
        inner: s.provider.clone(),
        db: s.store.db_path(),
        sent: Mutex::new(Vec::new()),
        stored_before_send: Mutex::new(Vec::new()),
    });
    let service =
        CheckoutService::with_payments(Arc::clone(&s.store), probe.clone(), test_payments());
    let (order, _) = service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Confirmed);
    service.cancel("sub-1", &order.order_id, T0_MS + 1).unwrap();
    let sent = probe.sent.lock().unwrap().clone();
    let keys: Vec<&str> = sent.iter().map(|(_, k)| k.as_str()).collect();
    let id = &order.order_id;
    assert_eq!(
        keys,
        [
            format!("{id}:authorize"),
            format!("{id}:capture"),
            format!("{id}:refund")
        ]
    );
    assert!(probe.stored_before_send.lock().unwrap().iter().all(|s| *s));
    for a in s.store.payment_attempts(id).unwrap() {
        assert_eq!(
            (a.transport, a.outcome),
            (Transport::Answered, AttemptOutcome::Succeeded)
        );
        assert_eq!(a.tries, 1);
        assert_eq!(a.params_hash, a.expected_hash());
    }
}

#[test]
fn a_lost_response_is_looked_up_never_declined_and_never_charged_twice() {
    let s = sim(2);
    let (order, _) = s
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_lost_response"),
            T0_MS,
        )
        .unwrap();
    // The look-up found the authorization: captured once, confirmed.
    assert_eq!(order.state, OrderState::Confirmed);
    let payments = s.provider.payments_for_order(&order.order_id);
    assert_eq!(payments.len(), 1);
    assert_eq!(payments[0].captures, 1);
    let auth = attempt(&s.store, &order.order_id, Operation::Authorize);
    assert_eq!(auth.outcome, AttemptOutcome::Succeeded);
    assert_eq!(auth.tries, 2, "one send, one look-up");
    assert_eq!(Metrics::get(&s.store.metrics().payment_ambiguous), 1);
}

#[test]
fn a_provider_that_stays_down_leaves_the_order_authorizing_for_the_reconciler() {
    let s = sim(3);
    s.provider.set_faults(Faults {
        timeout_per_mille: 1_000,
        ..Faults::default()
    });
    let (order, _) = s
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Authorizing);
    assert_eq!(order.payment_state, PaymentState::Pending);
    assert_eq!(s.store.stock("sku-a").unwrap().reserved, 1);
    let auth = attempt(&s.store, &order.order_id, Operation::Authorize);
    assert_eq!(
        (auth.transport, auth.outcome, auth.tries),
        (Transport::TimedOut, AttemptOutcome::Unknown, 3)
    );
    // However many sends reached it, the same key made one payment at most.
    assert!(s.provider.payments_for_order(&order.order_id).len() <= 1);
    // The provider recovers; the reconciler resolves the attempt.
    s.provider.set_faults(Faults::default());
    s.clock.advance_ms(120_000);
    let pass = s
        .service
        .reconcile_payments_once(s.clock.now_ms(), 100)
        .unwrap();
    assert!(pass.attempts_resolved >= 1, "{pass:?}");
    let order = s.service.get_order("sub-1", &order.order_id).unwrap();
    assert_eq!(order.state, OrderState::Confirmed);
    let payments = s.provider.payments_for_order(&order.order_id);
    assert_eq!(payments.len(), 1);
    assert_eq!(payments[0].captures, 1);
}

#[test]
fn a_refused_capture_is_voided_and_the_stock_released() {
    let s = sim(4);
    s.provider.set_faults(Faults {
        refuse_capture_per_mille: 1_000,
        ..Faults::default()
    });
    let (order, _) = s
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Voided);
    assert_eq!(order.payment_state, PaymentState::Voided);
    assert_eq!(s.store.stock("sku-a").unwrap().available, 10);
    let void = attempt(&s.store, &order.order_id, Operation::Void);
    assert_eq!(void.idempotency_key, format!("{}:void", order.order_id));
    assert_eq!(void.outcome, AttemptOutcome::Succeeded);
    assert_eq!(s.store.metrics().compensations.get(&["void", "ok"]), 1);
    assert_eq!(s.provider.total_captures(), 0);
}

#[test]
fn a_compensation_past_its_budget_is_counted_stuck_and_retried_by_the_reconciler() {
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
    h.provider.fail_refund.store(true, Ordering::SeqCst);
    let order = h
        .service
        .cancel("sub-1", &order.order_id, T0_MS + 1)
        .unwrap();
    assert_eq!(order.state, OrderState::Refunding);
    let metrics = h.store.metrics();
    assert_eq!(Metrics::get(&metrics.compensation_failures), 1);
    assert_eq!(metrics.compensations.get(&["refund", "failed"]), 1);
    let stuck = h.store.stuck_compensations(10).unwrap();
    assert_eq!(stuck.len(), 1);
    assert_eq!(stuck[0].operation, Operation::Refund);
    let violations = sluice_checkout::audit(h.dir.path(), T0_MS + 2).unwrap();
    assert!(
        matches!(
            violations.as_slice(),
            [sluice_checkout::Violation::StuckCompensation { .. }]
        ),
        "{violations:?}"
    );
    // Still broken: the reconciler tries again, counts nothing twice.
    let pass = h
        .service
        .reconcile_payments_once(T0_MS + 600_000, 100)
        .unwrap();
    assert_eq!((pass.attempts_driven, pass.attempts_resolved), (1, 0));
    assert_eq!(Metrics::get(&metrics.compensation_failures), 1);
    h.provider.fail_refund.store(false, Ordering::SeqCst);
    let pass = h
        .service
        .reconcile_payments_once(T0_MS + 1_200_000, 100)
        .unwrap();
    assert_eq!(pass.attempts_resolved, 1);
    assert_eq!(pass.stuck_compensations, 0);
    let order = h.service.get_order("sub-1", &order.order_id).unwrap();
    assert_eq!(order.state, OrderState::Refunded);
    assert_eq!(h.store.stock("sku-a").unwrap().available, 10);
    assert_eq!(metrics.compensations.get(&["refund", "ok"]), 1);
    assert!(sluice_checkout::audit(h.dir.path(), T0_MS + 1_200_001)
        .unwrap()
        .is_empty());
}

#[test]
fn missed_answers_are_recovered_from_the_provider_event_list() {
    // Scripted: the answer and every look-up of the authorization are lost.
    let h = Harness::new(&[("sku-a", 10)]);
    let (order, _) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, PM_LOST),
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Authorizing);
    let pass = h
        .service
        .reconcile_payments_once(T0_MS + 1_000, 100)
        .unwrap();
    assert!(pass.events_read >= 1, "{pass:?}");
    let order = h.service.get_order("sub-1", &order.order_id).unwrap();
    assert_eq!(order.state, OrderState::Confirmed);
    assert_eq!(h.provider.sim.total_captures(), 1);
    // The cursor moved: the next pass reads only what is new.
    let again = h
        .service
        .reconcile_payments_once(T0_MS + 2_000, 100)
        .unwrap();
    assert_eq!(again.events_read, 1, "only the capture's own event is new");
    let third = h
        .service
        .reconcile_payments_once(T0_MS + 3_000, 100)
        .unwrap();
    assert_eq!(third.events_read, 0);
}

#[test]
fn pm_slow_answers_after_its_delay_and_latency_is_recorded() {
    let s = sim(5);
    let (order, _) = s
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_slow"),
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Confirmed);
    assert!(s.clock.now_ms() >= T0_MS + 2_000);
    let series = s.store.metrics().auth_latency.snapshot();
    let ((provider, result), histogram) = &series[0];
    assert_eq!((provider.as_str(), *result), ("simulated", "authorized"));
    assert_eq!(histogram.count, 1);
    assert_eq!(histogram.sum_ms, 2_000);
}

#[test]
fn a_cancel_while_the_answer_is_lost_voids_once_the_provider_is_heard() {
    let h = Harness::new(&[("sku-a", 10)]);
    let (order, _) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, PM_LOST),
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Authorizing);
    let cancelled = h
        .service
        .cancel("sub-1", &order.order_id, T0_MS + 1)
        .unwrap();
    assert_eq!(
        cancelled.state,
        OrderState::Authorizing,
        "money may be held"
    );
    assert_eq!(h.store.stock("sku-a").unwrap().reserved, 1);
    // Idempotent.
    h.service
        .cancel("sub-1", &order.order_id, T0_MS + 2)
        .unwrap();
    // The event list says it was authorized: it is voided, never captured.
    h.service.reconcile_payments_once(T0_MS + 3, 100).unwrap();
    let order = h.service.get_order("sub-1", &order.order_id).unwrap();
    assert_eq!(
        (order.state, order.payment_state),
        (OrderState::Voided, PaymentState::Voided)
    );
    assert_eq!(h.store.stock("sku-a").unwrap().available, 10);
    assert_eq!(h.provider.sim.total_captures(), 0);
    assert_eq!(h.store.metrics().compensations.get(&["void", "ok"]), 1);
}

#[test]
fn the_audit_flags_a_hold_released_while_paid_and_changed_attempt_parameters() {
    let h = Harness::new(&[("sku-a", 10)]);
    let (order, _) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, PM_LOST),
            T0_MS,
        )
        .unwrap();
    assert!(sluice_checkout::audit(h.dir.path(), T0_MS)
        .unwrap()
        .is_empty());
    let conn = rusqlite::Connection::open(h.store.db_path()).unwrap();
    // A broken release: the units go back while money may be held.
    conn.execute_batch(&format!(
        "UPDATE reservations SET state = 'released' WHERE order_id = '{id}';
         UPDATE stock_partitions SET reserved = reserved - 1, available = available + 1;
         UPDATE payment_attempts SET amount_cents = 1 WHERE order_id = '{id}';",
        id = order.order_id
    ))
    .unwrap();
    let violations = sluice_checkout::audit(h.dir.path(), T0_MS).unwrap();
    assert_eq!(
        violations,
        vec![
            sluice_checkout::Violation::HoldReleasedWhilePaid {
                order_id: order.order_id.clone(),
                payment_state: "pending".into(),
            },
            sluice_checkout::Violation::AttemptParamsChanged {
                idempotency_key: format!("{}:authorize", order.order_id),
            },
        ]
    );
    // The provider's event list says it was authorized; with no hold left
    // it is money with no live order: never captured, and its void (sent
    // with the tampered amount, refused) is escalated as stuck.
    h.service
        .reconcile_payments_once(T0_MS + 600_000, 100)
        .unwrap();
    assert_eq!(h.provider.sim.total_captures(), 0);
    let stuck = h.store.stuck_compensations(10).unwrap();
    assert_eq!(stuck.len(), 1);
    assert_eq!(stuck[0].operation, Operation::Void);
}

#[test]
fn a_cancel_while_the_capture_is_in_doubt_refunds_once_it_is_known() {
    let h = Harness::new(&[("sku-a", 10)]);
    h.provider.lose_captures.store(true, Ordering::SeqCst);
    let (order, _) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    assert_eq!(
        (order.state, order.payment_state),
        (OrderState::Authorizing, PaymentState::Authorized)
    );
    let order = h
        .service
        .cancel("sub-1", &order.order_id, T0_MS + 1)
        .unwrap();
    assert_eq!(order.state, OrderState::Authorizing);
    // The provider is heard again: it had captured, so the money goes back.
    h.provider.lose_captures.store(false, Ordering::SeqCst);
    h.service
        .reconcile_payments_once(T0_MS + 120_000, 100)
        .unwrap();
    let order = h.service.get_order("sub-1", &order.order_id).unwrap();
    assert_eq!(
        (order.state, order.payment_state),
        (OrderState::Refunded, PaymentState::Refunded)
    );
    let payment = &h.provider.sim.payments_for_order(&order.order_id)[0];
    assert_eq!((payment.captures, payment.refunds), (1, 1));
    let stock = h.store.stock("sku-a").unwrap();
    assert_eq!(
        (stock.available, stock.reserved, stock.committed),
        (10, 0, 0)
    );
    assert!(sluice_checkout::audit(h.dir.path(), T0_MS + 120_001)
        .unwrap()
        .is_empty());
}
