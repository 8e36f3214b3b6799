//! A real crash: a child process runs concurrent checkouts and reports each
//! acknowledged order; the parent kills it with SIGKILL at a seeded random
//! moment, reopens the store, and checks that nothing acknowledged was lost,
//! the audit is clean, and every committed event is still published.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::{key, request, seeds, T0_MS};
use rand::{Rng, SeedableRng};
use sluice_checkout::{
    audit, relay_once, CheckoutService, JsonLinesSink, SimulatedProvider, Store,
};

const CHILD_ENV: &str = "SLUICE_CHECKOUT_CRASH_CHILD_DIR";
const CHILD_THREADS: usize = 4;
const UNITS: u32 = 1_000;

/// The child's body, started by the test below (ignored when run alone).
#[test]
#[ignore = "the child process of the SIGKILL test, which starts it"]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = Arc::new(Store::open(std::path::Path::new(&dir)).unwrap());
    store.seed_products(&seeds(&[("sku-a", UNITS)])).unwrap();
    let service = Arc::new(CheckoutService::new(
        Arc::clone(&store),
        Arc::new(SimulatedProvider::new()),
    ));
    let threads: Vec<_> = (0..CHILD_THREADS)
        .map(|t| {
            let service = Arc::clone(&service);
            std::thread::spawn(move || {
                // Bounded: the parent kills long before this ends.
                for i in 0..100_000u32 {
                    let method = if i % 3 == 0 { "pm_decline" } else { "pm_ok" };
                    let (order, _) = service
                        .checkout(
                            &format!("sub-{t}"),
                            &key(&format!("key-{t}-{i:06}")),
                            &request("sku-a", 1, method),
                            T0_MS,
                        )
                        .unwrap();
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ack {} {}", order.order_id, order.state).unwrap();
                    out.flush().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn sigkill_during_concurrent_checkouts_loses_nothing_acknowledged() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed_c0de);
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "crash_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let kill_after_acks = rng.random_range(5..200);
        let mut acked: HashMap<String, String> = HashMap::new();
        let stdout = child.stdout.take().unwrap();
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let mut parts = line.split_whitespace();
            if parts.next() == Some("ack") {
                let (id, state) = (parts.next().unwrap(), parts.next().unwrap());
                acked.insert(id.to_owned(), state.to_owned());
                if acked.len() >= kill_after_acks {
                    break;
                }
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        assert!(
            acked.len() >= kill_after_acks,
            "round {round}: child died early"
        );

        // Offline audit first, on the store exactly as the crash left it.
        let violations = audit(dir.path(), T0_MS).unwrap();
        assert!(violations.is_empty(), "round {round}: {violations:?}");

        let store = Arc::new(Store::open(dir.path()).unwrap());
        let service = CheckoutService::new(Arc::clone(&store), Arc::new(SimulatedProvider::new()));
        for (order_id, state) in &acked {
            let stored = (0..CHILD_THREADS)
                .find_map(|t| service.get_order(&format!("sub-{t}"), order_id).ok())
                .unwrap_or_else(|| panic!("round {round}: acknowledged {order_id} is gone"));
            assert_eq!(stored.state.as_str(), state, "round {round}: {order_id}");
        }
        let stock = store.stock("sku-a").unwrap();
        let confirmed = acked.values().filter(|s| *s == "confirmed").count() as i64;
        assert!(stock.committed >= confirmed, "round {round}");
        assert_eq!(stock.total, i64::from(UNITS));

        // Every committed event is published after the restart.
        let pending = store.outbox_pending().unwrap();
        let mut sink = JsonLinesSink::open(dir.path()).unwrap();
        let mut published = 0;
        loop {
            let outcome = relay_once(&store, &mut sink, 500, T0_MS).unwrap();
            published += outcome.published as u64;
            if !outcome.more_pending {
                break;
            }
        }
        assert_eq!(published, pending);
        assert_eq!(store.outbox_pending().unwrap(), 0);
        let outcomes: HashSet<String> = std::fs::read_to_string(sink.path())
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .filter(|event| event["type"] == "order.confirmed" || event["type"] == "order.declined")
            .map(|event| event["order_id"].as_str().unwrap().to_owned())
            .collect();
        for order_id in acked.keys() {
            assert!(
                outcomes.contains(order_id),
                "round {round}: no outcome event for {order_id}"
            );
        }
    }
}
