//! Helpers shared by the integration tests: a fresh store in a temp dir per
//! test, and a provider whose behaviour the test scripts.
#![allow(dead_code)] // each test binary uses a different subset

use async_trait::async_trait;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use sluice_checkout::{
    AuthorizeOutcome, CheckoutRequest, CheckoutService, EventPage, IdempotencyKey, ManualClock,
    OperationOutcome, PaymentError, PaymentProvider, PaymentsConfig, ProductSeed, RetryPolicy,
    SimulatedProvider, Store,
};

pub const T0_MS: i64 = 1_800_000_000_000;
pub const TTL_MS: i64 = 600_000;
pub const PRICE_CENTS: u64 = 19_900;

/// `pm_lost_response` in these tests: the provider authorizes, and the
/// answer and every look-up of it are lost (a provider unreachable after
/// the call), so the attempt stays ambiguous.
pub const PM_LOST: &str = "pm_lost_response";

/// The simulator plus a scripted unreachable provider and failure switches.
#[derive(Default)]
pub struct ScriptedProvider {
    pub sim: SimulatedProvider,
    pub fail_capture: AtomicBool,
    pub fail_refund: AtomicBool,
    /// Captures take effect but their answers, and look-ups of them, are
    /// lost.
    pub lose_captures: AtomicBool,
    lost_keys: Mutex<HashSet<String>>,
}

#[async_trait]
impl PaymentProvider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }
    async fn authorize(
        &self,
        key: &str,
        order_id: &str,
        amount_cents: u64,
        method: &str,
    ) -> Result<AuthorizeOutcome, PaymentError> {
        if method == PM_LOST {
            self.lost_keys.lock().unwrap().insert(key.to_owned());
        }
        self.sim
            .authorize(key, order_id, amount_cents, method)
            .await
    }
    async fn capture(
        &self,
        key: &str,
        payment_id: &str,
        amount_cents: u64,
    ) -> Result<(), PaymentError> {
        if self.fail_capture.load(Ordering::SeqCst) {
            return Err(PaymentError::Refused("scripted capture failure".into()));
        }
        if self.lose_captures.load(Ordering::SeqCst) {
            let _ = self.sim.capture(key, payment_id, amount_cents).await;
            return Err(PaymentError::Ambiguous);
        }
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
        if self.fail_refund.load(Ordering::SeqCst) {
            return Err(PaymentError::Ambiguous);
        }
        self.sim.refund(key, payment_id, amount_cents).await
    }
    async fn lookup(&self, key: &str) -> Result<Option<OperationOutcome>, PaymentError> {
        let capture_lost = key.ends_with(":capture") && self.lose_captures.load(Ordering::SeqCst);
        if capture_lost || self.lost_keys.lock().unwrap().contains(key) {
            return Err(PaymentError::Ambiguous);
        }
        self.sim.lookup(key).await
    }
    async fn events_since(&self, cursor: u64, limit: usize) -> Result<EventPage, PaymentError> {
        if self.lose_captures.load(Ordering::SeqCst) {
            return Err(PaymentError::Ambiguous);
        }
        self.sim.events_since(cursor, limit).await
    }
}

/// Retries that never sleep (a manual clock), with a fixed jitter seed.
pub fn test_payments() -> PaymentsConfig {
    let clock = Arc::new(ManualClock::new(T0_MS));
    PaymentsConfig {
        retry: RetryPolicy::default(),
        clock: clock.clone(),
        sleeper: clock,
        jitter_seed: 7,
    }
}

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub store: Arc<Store>,
    pub provider: Arc<ScriptedProvider>,
    pub service: CheckoutService,
}

impl Harness {
    /// A fresh store seeded with `products` of (sku, units).
    pub fn new(products: &[(&str, u32)]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Arc::new(Store::open(dir.path()).expect("open store"));
        store.seed_products(&seeds(products)).expect("seed");
        let provider = Arc::new(ScriptedProvider::default());
        let service =
            CheckoutService::with_payments(Arc::clone(&store), provider.clone(), test_payments());
        Self {
            dir,
            store,
            provider,
            service,
        }
    }
}

pub fn seeds(products: &[(&str, u32)]) -> Vec<ProductSeed> {
    products
        .iter()
        .map(|(sku, total)| ProductSeed {
            sku: (*sku).to_owned(),
            total: *total,
            price_cents: PRICE_CENTS,
            reservation_ttl_ms: TTL_MS,
            partitions: 1,
        })
        .collect()
}

pub fn key(raw: &str) -> IdempotencyKey {
    IdempotencyKey::parse(raw).expect("valid key")
}

pub fn request(sku: &str, quantity: u32, method: &str) -> CheckoutRequest {
    CheckoutRequest {
        sku: sku.to_owned(),
        quantity,
        payment_method: method.to_owned(),
    }
}
