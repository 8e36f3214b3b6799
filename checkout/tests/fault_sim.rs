//! The payments issue's "done means": a seeded fault simulation. Each seed
//! runs shoppers against a simulated provider that times out (before or
//! after the effect), answers 5xx, refuses captures, loses `pm_lost_response`
//! answers and is slow on `pm_slow`; the process "crashes" before or after
//! any provider call (the store is dropped and reopened); webhooks arrive
//! duplicated, late and out of order; time is a manual clock.
//!
//! Checked after every step: no hold is released while its payment is
//! authorized or captured at the provider. Checked once faults stop and the
//! reconciler has run: at most one capture per order; every capture belongs
//! to a confirmed order or was refunded; no money is left merely
//! authorized; every order is terminal; the offline audit is clean.

mod common;

use async_trait::async_trait;
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use common::{key, request, seeds, T0_MS, TTL_MS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_checkout::{
    apply_webhook, audit, reconcile_once, AuthorizeOutcome, CheckoutService, Clock, EventPage,
    Faults, ManualClock, OperationOutcome, OrderState, PaymentError, PaymentProvider,
    PaymentsConfig, RetryPolicy, SimConfig, SimPaymentState, SimulatedProvider, Store,
};

/// Seeds per run; `SLUICE_SIM_SEEDS=<n>` runs more (or fewer).
const SEEDS_DEFAULT: u64 = 40;
const STEPS_PER_SEED: usize = 60;
const SETTLE_ROUNDS_MAX: usize = 60;
const METHODS: [&str; 5] = [
    "pm_ok",
    "pm_ok",
    "pm_decline",
    "pm_lost_response",
    "pm_slow",
];

/// The simulator behind a process that may die around any provider call.
struct Crashing {
    inner: Arc<SimulatedProvider>,
    rng: Mutex<StdRng>,
    crash_per_mille: Mutex<u32>,
}

/// The payload of a simulated crash.
struct Crash;

impl Crashing {
    /// Dies before the call, or lets it happen and dies before the answer
    /// is used.
    async fn around<T>(&self, call: impl std::future::Future<Output = T>) -> T {
        let per_mille = *self.crash_per_mille.lock().unwrap();
        let dice: u32 = self.rng.lock().unwrap().random_range(0..2_000);
        if dice < per_mille {
            std::panic::panic_any(Crash);
        }
        let answer = call.await;
        if dice < per_mille * 2 {
            std::panic::panic_any(Crash);
        }
        answer
    }
}

#[async_trait]
impl PaymentProvider for Crashing {
    fn name(&self) -> &str {
        "simulated"
    }
    async fn authorize(
        &self,
        k: &str,
        o: &str,
        a: u64,
        m: &str,
    ) -> Result<AuthorizeOutcome, PaymentError> {
        self.around(self.inner.authorize(k, o, a, m)).await
    }
    async fn capture(&self, k: &str, p: &str, a: u64) -> Result<(), PaymentError> {
        self.around(self.inner.capture(k, p, a)).await
    }
    async fn void(&self, k: &str, p: &str, a: u64) -> Result<(), PaymentError> {
        self.around(self.inner.void(k, p, a)).await
    }
    async fn refund(&self, k: &str, p: &str, a: u64) -> Result<(), PaymentError> {
        self.around(self.inner.refund(k, p, a)).await
    }
    async fn lookup(&self, k: &str) -> Result<Option<OperationOutcome>, PaymentError> {
        self.around(self.inner.lookup(k)).await
    }
    async fn events_since(&self, c: u64, l: usize) -> Result<EventPage, PaymentError> {
        self.around(self.inner.events_since(c, l)).await
    }
}

struct World {
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    provider: Arc<Crashing>,
    service: Option<CheckoutService>,
    seed: u64,
    restarts: u64,
}

impl World {
    fn open(&mut self) {
        let store = Arc::new(Store::open(self.dir.path()).expect("reopen"));
        self.service = Some(CheckoutService::with_payments(
            store,
            self.provider.clone(),
            PaymentsConfig {
                retry: RetryPolicy::default(),
                clock: self.clock.clone(),
                sleeper: self.clock.clone(),
                jitter_seed: self.seed ^ self.restarts,
            },
        ));
    }

    fn service(&self) -> &CheckoutService {
        self.service.as_ref().expect("open")
    }

    /// Runs one step; a crash drops the store (the writer finishes what was
    /// committed, nothing else) and reopens it.
    fn step(&mut self, f: impl FnOnce(&CheckoutService, i64)) {
        let now = self.clock.now_ms();
        let service = self.service();
        if catch_unwind(AssertUnwindSafe(|| f(service, now))).is_err() {
            self.service = None;
            self.restarts += 1;
            self.open();
        }
    }
}

/// Money authorized or captured at the provider for a released hold.
fn released_while_paid(world: &World) -> Vec<String> {
    let conn = rusqlite::Connection::open(world.service().store().db_path()).unwrap();
    let mut stmt = conn
        .prepare("SELECT order_id FROM reservations WHERE state = 'released'")
        .unwrap();
    let released: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    released
        .into_iter()
        .filter(|order_id| {
            world
                .provider
                .inner
                .payments_for_order(order_id)
                .iter()
                .any(|p| {
                    matches!(
                        p.state,
                        SimPaymentState::Authorized | SimPaymentState::Captured
                    )
                })
        })
        .collect()
}

/// Where an order may end: a terminal state, or `confirmed` (it leaves
/// only if the shopper cancels).
fn at_rest(state: OrderState) -> bool {
    state.is_terminal() || state == OrderState::Confirmed
}

fn run(seed: u64) -> (u64, usize) {
    let clock = Arc::new(ManualClock::new(T0_MS));
    let inner = Arc::new(SimulatedProvider::with(
        SimConfig {
            seed,
            slow_ms: 1_500,
            faults: Faults {
                timeout_per_mille: 150,
                error_5xx_per_mille: 100,
                refuse_capture_per_mille: 80,
                latency_ms: 20,
            },
        },
        clock.clone(),
        clock.clone(),
    ));
    let provider = Arc::new(Crashing {
        inner: inner.clone(),
        rng: Mutex::new(StdRng::seed_from_u64(seed.wrapping_mul(31))),
        crash_per_mille: Mutex::new(60),
    });
    let mut world = World {
        dir: tempfile::tempdir().unwrap(),
        clock: clock.clone(),
        provider: provider.clone(),
        service: None,
        seed,
        restarts: 0,
    };
    world.open();
    world
        .service()
        .store()
        .seed_products(&seeds(&[("sku-a", 30), ("sku-b", 5)]))
        .unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut orders: Vec<String> = Vec::new();
    let mut keys = 0;
    let orders_seen = Arc::new(Mutex::new(HashSet::new()));
    for _ in 0..STEPS_PER_SEED {
        let action = rng.random_range(0..100);
        match action {
            0..=39 => {
                keys += 1;
                let k = key(&format!("key-{keys:05}"));
                let sku = if rng.random_bool(0.5) {
                    "sku-a"
                } else {
                    "sku-b"
                };
                let body = request(
                    sku,
                    rng.random_range(1..=2),
                    METHODS[rng.random_range(0..METHODS.len())],
                );
                let seen = orders_seen.clone();
                world.step(move |s, now| {
                    if let Ok((order, _)) = s.checkout("sub", &k, &body, now) {
                        seen.lock().unwrap().insert(order.order_id);
                    }
                });
            }
            40..=49 if !orders.is_empty() => {
                let id = orders[rng.random_range(0..orders.len())].clone();
                world.step(move |s, now| {
                    let _ = s.cancel("sub", &id, now);
                });
            }
            50..=64 => {
                let events = inner.events();
                if !events.is_empty() {
                    // Any event, any number of times, in any order.
                    let event = events[rng.random_range(0..events.len())].event.clone();
                    world.step(move |s, now| {
                        let _ = apply_webhook(s.store(), &event, now);
                    });
                }
            }
            65..=74 => world.step(|s, now| {
                let _ = reconcile_once(s.store(), now, 60_000, 100);
            }),
            75..=84 => world.step(|s, now| {
                let _ = s.reconcile_payments_once(now, 100);
            }),
            _ => clock.advance_ms(rng.random_range(0..120_000)),
        }
        orders = orders_seen.lock().unwrap().iter().cloned().collect();
        orders.sort();
        let bad = released_while_paid(&world);
        assert!(
            bad.is_empty(),
            "seed {seed}: holds released while paid: {bad:?}"
        );
    }

    // Faults stop; the reconciler runs until everything is terminal.
    inner.set_faults(Faults::default());
    *provider.crash_per_mille.lock().unwrap() = 0;
    let store = Arc::clone(world.service().store());
    let mut terminal = false;
    for _ in 0..SETTLE_ROUNDS_MAX {
        clock.advance_ms(TTL_MS / 5);
        let now = clock.now_ms();
        reconcile_once(&store, now, 60_000, 1_000).unwrap();
        world.service().reconcile_payments_once(now, 1_000).unwrap();
        let counts = store.order_counts().unwrap();
        if counts.iter().all(|(state, n)| *n == 0 || at_rest(*state)) {
            terminal = true;
            break;
        }
    }
    let counts = store.order_counts().unwrap();
    assert!(terminal, "seed {seed}: orders not terminal: {counts:?}");

    let conn = rusqlite::Connection::open(store.db_path()).unwrap();
    let order_state = |order_id: &str| -> Option<OrderState> {
        conn.query_row(
            "SELECT state FROM orders WHERE order_id = ?1",
            [order_id],
            |r| r.get::<_, String>(0),
        )
        .ok()
        .and_then(|s| OrderState::parse(&s))
    };
    let payments = inner.payments();
    let mut by_order: std::collections::HashMap<String, u32> = Default::default();
    for p in &payments {
        *by_order.entry(p.order_id.clone()).or_default() += p.captures;
        assert!(p.captures <= 1, "seed {seed}: {p:?} captured twice");
        if p.captures == 1 {
            let state = order_state(&p.order_id);
            assert!(
                state == Some(OrderState::Confirmed) || p.refunds == 1,
                "seed {seed}: capture of {p:?} with order {state:?} and no refund"
            );
        }
        assert_ne!(
            p.state,
            SimPaymentState::Authorized,
            "seed {seed}: money left authorized: {p:?} (order {:?})",
            order_state(&p.order_id)
        );
    }
    for (order_id, captures) in by_order {
        assert!(
            captures <= 1,
            "seed {seed}: order {order_id} captured {captures} times"
        );
    }
    let bad = released_while_paid(&world);
    assert!(
        bad.is_empty(),
        "seed {seed}: holds released while paid: {bad:?}"
    );
    let violations = audit(world.dir.path(), clock.now_ms()).unwrap();
    assert!(violations.is_empty(), "seed {seed}: audit: {violations:?}");
    (world.restarts, payments.len())
}

#[test]
fn seeded_faults_and_crashes_never_break_the_payment_invariants() {
    // Simulated crashes are panics; keep their messages out of the output.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<Crash>().is_none() {
            default_hook(info);
        }
    }));
    let seeds = std::env::var("SLUICE_SIM_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(SEEDS_DEFAULT);
    let (mut restarts, mut payments) = (0, 0);
    for seed in 0..seeds {
        let (r, p) = run(seed);
        restarts += r;
        payments += p;
    }
    // The simulation exercised what it claims to.
    assert!(restarts > seeds, "only {restarts} crashes");
    assert!(payments > seeds as usize * 5, "only {payments} payments");
}
