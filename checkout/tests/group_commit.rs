//! The group-commit writer: answers only after commit, bounded batches,
//! backpressure, per-job isolation inside a batch, and durability across a
//! SIGKILL.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{key, request, seeds, ScriptedProvider, T0_MS, TTL_MS};
use sluice_checkout::{
    reconcile_once, CheckoutService, Created, GroupCommitConfig, OrderState, ReserveOutcome,
    ReserveRequest, Store, WriterError,
};

fn hold(id: usize, sku: &str, quantity: u32) -> ReserveRequest {
    ReserveRequest {
        order_id: format!("hold-{id}"),
        sku: sku.into(),
        quantity,
        now_ms: T0_MS,
        expires_at_ms: T0_MS + TTL_MS,
    }
}

const CHILD_ENV: &str = "SLUICE_GROUP_COMMIT_CRASH_CHILD_DIR";
const CHILD_THREADS: usize = 4;
const HOT_UNITS: u32 = 100_000;

/// The child's body, started by the test below (ignored when run alone):
/// hot-path holds from several threads, each printed once acknowledged.
#[test]
#[ignore = "the child process of the SIGKILL test, which starts it"]
fn hot_path_crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = Arc::new(Store::open(std::path::Path::new(&dir)).unwrap());
    store.seed_products(&seeds(&[("hot", HOT_UNITS)])).unwrap();
    let threads: Vec<_> = (0..CHILD_THREADS)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                // Bounded: the parent kills long before this ends.
                for i in 0..(HOT_UNITS as usize / 2 / CHILD_THREADS) {
                    let id = t * 1_000_000 + i;
                    let outcome = store.submit_reservation(hold(id, "hot", 2)).unwrap();
                    if let ReserveOutcome::Reserved { .. } = outcome.wait().unwrap() {
                        let mut out = std::io::stdout().lock();
                        writeln!(out, "ack hold-{id}").unwrap();
                        out.flush().unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// The hot path (`submit_reservation`, which the benchmark times) killed
/// with SIGKILL mid-stream: every acknowledged hold is still held after
/// the restart, the books balance, and expiry releases them. The
/// product's own checkout path gets the same treatment in `crash.rs`.
#[test]
fn acknowledged_hot_path_holds_survive_sigkill() {
    for kill_after_acks in [7, 150] {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "hot_path_crash_child",
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
        let mut acked = 0;
        let stdout = child.stdout.take().unwrap();
        for line in BufReader::new(stdout).lines() {
            if line.unwrap().starts_with("ack ") {
                acked += 1;
                if acked >= kill_after_acks {
                    break;
                }
            }
        }
        child.kill().unwrap(); // SIGKILL, with holds still queued and in flight
        child.wait().unwrap();
        assert_eq!(acked, kill_after_acks, "the child died early");

        assert!(sluice_checkout::audit(dir.path(), T0_MS)
            .unwrap()
            .is_empty());
        let store = Store::open(dir.path()).unwrap();
        let stock = store.stock("hot").unwrap();
        assert_eq!(stock.total, i64::from(HOT_UNITS));
        assert_eq!(stock.available + stock.reserved, i64::from(HOT_UNITS));
        assert!(
            stock.reserved >= 2 * acked as i64,
            "{} units held for {acked} acknowledged holds of 2",
            stock.reserved
        );
        // Hot-path holds have no order row; expiry still releases them.
        let outcome = reconcile_once(&store, T0_MS + TTL_MS, 60_000, 10_000).unwrap();
        assert_eq!(outcome.expired as i64 * 2, stock.reserved);
        assert_eq!(store.stock("hot").unwrap().available, i64::from(HOT_UNITS));
    }
}

#[test]
fn per_request_errors_do_not_spoil_the_batch() {
    // Four submissions back to back usually share one batch; which batch
    // each lands in is up to the writer thread, so the test counts the
    // batches and tries again on a fresh store until all four shared one.
    // The answers must be right in every try, however they were batched.
    const TRIES_MAX: usize = 20;
    let mut shared_one_batch = false;
    for _ in 0..TRIES_MAX {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.seed_products(&seeds(&[("hot", 10)])).unwrap();
        let batches_before = store.metrics().batches_committed.load(Ordering::SeqCst);
        let a = store.submit_reservation(hold(1, "hot", 1)).unwrap();
        let dup = store.submit_reservation(hold(1, "hot", 1)).unwrap();
        let unknown = store.submit_reservation(hold(2, "nope", 1)).unwrap();
        let b = store.submit_reservation(hold(3, "hot", 1)).unwrap();
        assert!(matches!(a.wait(), Ok(ReserveOutcome::Reserved { .. })));
        assert!(matches!(dup.wait(), Err(WriterError::Invalid(_))));
        assert!(matches!(unknown.wait(), Err(WriterError::Invalid(_))));
        assert!(matches!(b.wait(), Ok(ReserveOutcome::Reserved { .. })));
        assert!(matches!(
            store.submit_reservation(hold(4, "hot", 0)),
            Err(WriterError::Invalid(_))
        ));
        let stock = store.stock("hot").unwrap();
        assert_eq!((stock.available, stock.reserved), (8, 2));
        let batches = store.metrics().batches_committed.load(Ordering::SeqCst) - batches_before;
        if batches == 1 {
            shared_one_batch = true;
            break;
        }
    }
    assert!(
        shared_one_batch,
        "in {TRIES_MAX} tries the four submissions never shared a batch"
    );
}

#[test]
fn a_full_queue_refuses_try_submit() {
    let dir = tempfile::tempdir().unwrap();
    let config = GroupCommitConfig {
        batch_max: 1,
        wait_max: Duration::ZERO,
        queue_max: 2,
        commit_delay: Duration::ZERO,
    };
    let store = Store::open_with(dir.path(), config).unwrap();
    store.seed_products(&seeds(&[("hot", 1_000_000)])).unwrap();
    let mut accepted = Vec::new();
    let mut refused = 0;
    for i in 0..10_000 {
        match store.try_submit_reservation(hold(i, "hot", 1)) {
            Ok(p) => accepted.push(p),
            Err(WriterError::Overloaded) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(refused > 0, "a queue of 2 took 10000 requests");
    let done = accepted.len();
    for p in accepted {
        assert!(matches!(p.wait(), Ok(ReserveOutcome::Reserved { .. })));
    }
    assert_eq!(store.stock("hot").unwrap().reserved, done as i64);
    // batch_max 1: one commit per job (seed + each hold).
    let batches = store.metrics().batches_committed.load(Ordering::Relaxed);
    assert_eq!(batches, done as u64 + 1);
}

#[test]
fn concurrent_checkouts_share_batches_and_failures_stay_their_own() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 25;
    let dir = tempfile::tempdir().unwrap();
    let config = GroupCommitConfig {
        wait_max: Duration::from_millis(2),
        ..GroupCommitConfig::default()
    };
    let store = Arc::new(Store::open_with(dir.path(), config).unwrap());
    store.seed_products(&seeds(&[("sku-a", 1_000)])).unwrap();
    let service = Arc::new(CheckoutService::new(
        Arc::clone(&store),
        Arc::new(ScriptedProvider::default()),
    ));
    let batches_before = store.metrics().batches_committed.load(Ordering::Relaxed);
    let barrier = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (service, barrier) = (Arc::clone(&service), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..PER_THREAD {
                    let k = key(&format!("key-{t}-{i:05}"));
                    let (order, created) = service
                        .checkout(
                            &format!("sub-{t}"),
                            &k,
                            &request("sku-a", 1, "pm_ok"),
                            T0_MS,
                        )
                        .unwrap();
                    assert_eq!(
                        (created, order.state),
                        (Created::Created, OrderState::Confirmed)
                    );
                    // A failing transaction (mismatch) in the same batches.
                    assert!(service
                        .checkout(
                            &format!("sub-{t}"),
                            &k,
                            &request("sku-a", 2, "pm_ok"),
                            T0_MS
                        )
                        .is_err());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let orders = (THREADS * PER_THREAD) as i64;
    let stock = store.stock("sku-a").unwrap();
    assert_eq!((stock.available, stock.committed), (1_000 - orders, orders));
    // Each checkout is 6 write transactions (claim, create, authorizing,
    // authorized, confirmed, key done) plus one refused claim.
    let transactions = orders as u64 * 7;
    let batches = store.metrics().batches_committed.load(Ordering::Relaxed) - batches_before;
    assert!(
        batches < transactions,
        "{batches} batches for {transactions} transactions: nothing was grouped"
    );
    assert!(sluice_checkout::audit(dir.path(), T0_MS)
        .unwrap()
        .is_empty());
}

#[test]
fn async_callers_await_their_answer() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store.seed_products(&seeds(&[("hot", 3)])).unwrap();
    let pending: Vec<_> = (0..5)
        .map(|i| store.try_submit_reservation(hold(i, "hot", 1)).unwrap())
        .collect();
    let answers: Vec<_> = pending.into_iter().map(|p| block_on(p.recv())).collect();
    // First come, first served: the last units go in arrival order.
    let reserved: Vec<bool> = answers
        .iter()
        .map(|a| matches!(a, Ok(ReserveOutcome::Reserved { .. })))
        .collect();
    assert_eq!(reserved, [true, true, true, false, false]);
    assert!(matches!(answers[4], Ok(ReserveOutcome::SoldOut)));
}

/// Drives one future to completion on this thread (no runtime needed: the
/// writer thread wakes it).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::pin::pin;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return value;
        }
        std::thread::park();
    }
}
