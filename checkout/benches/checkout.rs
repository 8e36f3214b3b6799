//! Confirmed checkouts per second through `CheckoutService::checkout`
//! (claim, reserve, authorize, capture, confirm against the in-process
//! simulator with `pm_ok`), with CLIENTS shoppers at once on one hot
//! SKU, the SQLite store durable (WAL, `synchronous=FULL`, group commit).
//!
//! Rounds alternate with the baseline, the same flow in four durable
//! writes instead of three: `begin` (claim + reserve) then `pay`
//! (`authorizing` + attempt, then one write per provider answer), as the
//! checkout ran before it folded `authorizing` into the claim (it also
//! completed the key in a fifth write; the baseline leaves that out, so
//! the ratio understates the change).
//!
//! Prints, per variant, the median over rounds of checkouts/s and of each
//! round's per-checkout p50/p99 latency (from the call to its answer).
//!
//! Run: `cargo bench -p sluice-checkout --bench checkout -- ROUNDS SECONDS CLIENTS`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_checkout::{
    CheckoutRequest, CheckoutService, IdempotencyKey, OrderState, ProductSeed, SimulatedProvider,
    Store,
};

const SKU: &str = "hot";
/// Shoppers checking out at once unless the third argument says otherwise
/// (the gateway's default `checkouts_in_flight_max` is of this order).
const CLIENTS_DEFAULT: u64 = 64;
const T0_MS: i64 = 1_800_000_000_000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    ThreeWrites,
    FourWrites,
}

struct Round {
    per_second: f64,
    p50_us: u64,
    p99_us: u64,
}

fn service(dir: &std::path::Path) -> CheckoutService {
    let store = Arc::new(Store::open(dir).expect("open store"));
    store
        .seed_products(&[ProductSeed {
            sku: SKU.into(),
            total: 1_000_000_000,
            price_cents: 100,
            reservation_ttl_ms: 600_000,
            partitions: 1,
        }])
        .expect("seed");
    CheckoutService::new(store, Arc::new(SimulatedProvider::default()))
}

fn round(variant: Variant, seconds: u64, clients: u64, next: &Arc<AtomicU64>) -> Round {
    let dir = tempfile::tempdir().expect("temp dir");
    let service = Arc::new(service(dir.path()));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let clients: Vec<_> = (0..clients)
        .map(|_| {
            let (service, next) = (Arc::clone(&service), Arc::clone(next));
            std::thread::spawn(move || {
                let body = CheckoutRequest {
                    sku: SKU.into(),
                    quantity: 1,
                    payment_method: "pm_ok".into(),
                };
                let mut latencies_us = Vec::new();
                while Instant::now() < deadline {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let subject = format!("sub-{n}");
                    let key = IdempotencyKey::parse(&format!("key-{n:012}")).expect("key");
                    let asked = Instant::now();
                    let order = match variant {
                        Variant::ThreeWrites => {
                            service
                                .checkout(&subject, &key, &body, T0_MS)
                                .expect("checkout")
                                .0
                        }
                        Variant::FourWrites => {
                            let (order, _) =
                                service.begin(&subject, &key, &body, T0_MS).expect("begin");
                            service.pay(&order.order_id, T0_MS).expect("pay")
                        }
                    };
                    latencies_us.push(asked.elapsed().as_micros() as u64);
                    assert_eq!(order.state, OrderState::Confirmed);
                }
                latencies_us
            })
        })
        .collect();
    let mut latencies: Vec<u64> = clients
        .into_iter()
        .flat_map(|c| c.join().expect("client"))
        .collect();
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    Round {
        per_second: latencies.len() as f64 / elapsed,
        p50_us: at(0.50),
        p99_us: at(0.99),
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; the numbers are ours.
    let numbers: Vec<u64> = std::env::args().filter_map(|a| a.parse().ok()).collect();
    let rounds = numbers.first().copied().unwrap_or(5).max(1);
    let seconds = numbers.get(1).copied().unwrap_or(5).max(1);
    let clients = numbers
        .get(2)
        .copied()
        .unwrap_or(CLIENTS_DEFAULT)
        .clamp(1, 1_024);
    let next = Arc::new(AtomicU64::new(0));
    let mut results: Vec<(Variant, Round)> = Vec::new();
    for r in 0..rounds {
        for variant in [Variant::ThreeWrites, Variant::FourWrites] {
            let result = round(variant, seconds, clients, &next);
            eprintln!(
                "round {r} {variant:?}: {:.0} checkouts/s, p50 {} µs, p99 {} µs",
                result.per_second, result.p50_us, result.p99_us
            );
            results.push((variant, result));
        }
    }
    let summary = |variant: Variant| {
        let of = |f: fn(&Round) -> f64| {
            median(
                results
                    .iter()
                    .filter(|(v, _)| *v == variant)
                    .map(|(_, r)| f(r))
                    .collect(),
            )
        };
        (
            of(|r| r.per_second),
            of(|r| r.p50_us as f64),
            of(|r| r.p99_us as f64),
        )
    };
    let (three, three_p50, three_p99) = summary(Variant::ThreeWrites);
    let (four, four_p50, four_p99) = summary(Variant::FourWrites);
    println!(
        "cores {} clients {clients} rounds {rounds} x {seconds} s",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "3 durable writes: {three:.0} checkouts/s, p50 {three_p50:.0} µs, p99 {three_p99:.0} µs"
    );
    println!("4 durable writes: {four:.0} checkouts/s, p50 {four_p50:.0} µs, p99 {four_p99:.0} µs");
    println!("ratio {:.2}", three / four);
}
