//! Helpers shared by the integration tests: a fresh store in a temp dir per
//! test, and a provider whose behaviour the test scripts.
#![allow(dead_code)] // each test binary uses a different subset

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sluice_checkout::{
    AuthorizeOutcome, CheckoutRequest, CheckoutService, IdempotencyKey, PaymentError,
    PaymentProvider, ProductSeed, SimulatedProvider, Store,
};

pub const T0_MS: i64 = 1_800_000_000_000;
pub const TTL_MS: i64 = 600_000;
pub const PRICE_CENTS: u64 = 19_900;

/// `pm_lost_response` in these tests: the provider authorizes, the answer
/// is lost (the payments issue adds this to the real simulator).
pub const PM_LOST: &str = "pm_lost_response";

/// The simulator plus a scripted lost answer and a capture failure switch.
#[derive(Default)]
pub struct ScriptedProvider {
    pub sim: SimulatedProvider,
    pub fail_capture: AtomicBool,
    pub fail_refund: AtomicBool,
}

impl PaymentProvider for ScriptedProvider {
    fn authorize(
        &self,
        key: &str,
        order_id: &str,
        amount_cents: u64,
        method: &str,
    ) -> Result<AuthorizeOutcome, PaymentError> {
        if method == PM_LOST {
            self.sim.authorize(key, order_id, amount_cents, "pm_ok")?;
            return Err(PaymentError::Ambiguous);
        }
        self.sim.authorize(key, order_id, amount_cents, method)
    }
    fn capture(&self, key: &str, payment_id: &str) -> Result<(), PaymentError> {
        if self.fail_capture.load(Ordering::SeqCst) {
            return Err(PaymentError::Refused("scripted capture failure".into()));
        }
        self.sim.capture(key, payment_id)
    }
    fn void(&self, key: &str, payment_id: &str) -> Result<(), PaymentError> {
        self.sim.void(key, payment_id)
    }
    fn refund(&self, key: &str, payment_id: &str) -> Result<(), PaymentError> {
        if self.fail_refund.load(Ordering::SeqCst) {
            return Err(PaymentError::Ambiguous);
        }
        self.sim.refund(key, payment_id)
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
        let service = CheckoutService::new(Arc::clone(&store), provider.clone());
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
