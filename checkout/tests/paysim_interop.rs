//! `HttpProvider` against `paysim` (from `loadtest/`), served in-process on
//! a port the system chose: the adapter and the simulator agree on the
//! wire format, the test cards and the event list.

mod common;

use sluice_checkout::http_client::wait;
use std::sync::Arc;

use common::{key, request, seeds, test_payments, T0_MS};
use sluice_checkout::{
    CheckoutService, HttpProvider, HttpProviderConfig, OrderState, PaymentProvider, Store,
};
use sluice_loadtest::paysim;

#[test]
fn checkout_cancel_and_events_against_paysim() {
    let paysim = paysim::Background::start(paysim::Config {
        seed: 3,
        ..paysim::Config::default()
    })
    .unwrap();
    let provider = Arc::new(
        HttpProvider::new(HttpProviderConfig {
            base_url: paysim.url(),
            call_timeout_ms: 2_000,
            name: "paysim".into(),
            ..HttpProviderConfig::default()
        })
        .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    store.seed_products(&seeds(&[("sku-a", 10)])).unwrap();
    let service =
        CheckoutService::with_payments(Arc::clone(&store), provider.clone(), test_payments());
    let ok = |k: &str, method: &str| {
        service
            .checkout("sub-1", &key(k), &request("sku-a", 1, method), T0_MS)
            .unwrap()
            .0
    };
    assert_eq!(ok("key-00001", "pm_ok").state, OrderState::Confirmed);
    assert_eq!(ok("key-00002", "pm_decline").state, OrderState::Declined);
    // The answer is lost; the look-up finds the authorization.
    let lost = ok("key-00003", "pm_lost_response");
    assert_eq!(lost.state, OrderState::Confirmed);
    let refunded = service.cancel("sub-1", &lost.order_id, T0_MS + 1).unwrap();
    assert_eq!(refunded.state, OrderState::Refunded);
    // Capturing a refunded payment again is a definite refusal.
    let payment_id = refunded.payment_id.clone().unwrap();
    assert!(matches!(
        wait(provider.capture("other-key-1", &payment_id, refunded.amount_cents)),
        Err(sluice_checkout::PaymentError::Refused(_))
    ));
    let page = wait(provider.events_since(0, 100)).unwrap();
    assert!(page.events.len() >= 5, "{page:?}");
    let pass = service.reconcile_payments_once(T0_MS + 2, 100).unwrap();
    assert_eq!(pass.attempts_driven, 0);
    assert!(sluice_checkout::audit(dir.path(), T0_MS + 3)
        .unwrap()
        .is_empty());
}
