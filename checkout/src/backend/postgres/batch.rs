//! Group commit for the fleet: one gateway's concurrent writes to
//! PostgreSQL collected into batches, each batch one transaction and one
//! commit, every caller answered only after its batch committed.
//!
//! A batch of checkouts (step 1) runs in three phases, each a few
//! set-based statements for the whole batch (`INSERT … SELECT FROM
//! unnest(…)`, one per table), not a few per checkout, so the hot stock
//! rows are locked once per batch, late, and never while waiting on
//! anything but stock rows:
//! 1. every claim at once (`checkout::claim_all`: keys, subject locks in
//!    subject order, purchase limits): a mismatch, a conflict, a limit or
//!    an unknown SKU is that checkout's answer and leaves nothing behind;
//! 2. every order, outbox event, authorize attempt written
//!    (`checkout::create_all`), then per SKU (in order) the batch's whole
//!    demand in ONE conditional UPDATE on one partition (`available >=
//!    sum`, `stock::take_whole`), then every hold on the partition its
//!    units came from (`checkout::insert_holds`);
//! 3. when no partition has the sum (or it went since the read), that is
//!    rolled back and each checkout takes its own units in arrival order
//!    (`stock::take`), so exactly the units left are sold, then the
//!    orders and holds are written (one statement: `create_all` with
//!    `taken`).
//!
//! A batch holds one checkout per subject (a second waits for the next
//! batch), so the claims' purchase-limit counts are exact.
//! Other writes (`Run`: a provider's answer settled) each run in a
//! SAVEPOINT of their own, one that fails rolled back alone; a job alone
//! in its batch runs in the transaction itself, rolled back when it
//! fails. A batch with one checkout ready to create takes its units
//! first and creates after (as `checkout::claim_and_create`: nothing to
//! undo when none are left, so no savepoint). A batch the
//! server aborts as a deadlock victim, or one that met a stale cached
//! statement, is run again from the start (counted apart:
//! [`BatchStats::deadlock_reruns`], [`BatchStats::stale_reruns`]; what a
//! run counts is added only once it committed); one
//! that fails otherwise (not `Unavailable`) is run again one job per
//! transaction, so a bad job fails alone. Collection is bounded like
//! SQLite's group commit (`group_commit`): up to [`BATCH_MAX`] jobs, the
//! first waiting up to [`BATCH_WAIT`] for company only when the previous
//! batch had some. Callers are on the gateway's bounded blocking pool
//! (they wait for their answer there), never on a pingora worker.

use std::any::Any;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::checkout::{self, Begun, Claim, Claimed};
use super::conn::Tx;
use super::{is_stale_statement, pg_err, pool_err, stock, write_tx, Pool, Retryable, TX_TRIES_MAX};
use crate::error::{CheckoutError, StoreError};
use crate::metrics::Metrics;

/// Jobs in one batch, at most.
pub const BATCH_MAX: usize = 256;
/// How long a batch's first job waits for company, at most (only when the
/// previous batch had company).
pub const BATCH_WAIT: Duration = Duration::from_micros(500);
/// Threads batching checkouts (each a connection of the pool while it
/// writes): one collects while the other writes, and a batch waiting on
/// a lock does not stop the gateway's every checkout. Two, not more: on
/// one hot row every further batcher is one more transaction queued on
/// its lock with a smaller batch (three gateways on one partition: 8,000
/// to 8,500 reservations/s with 2, 4,600 to 4,750 with 4; one gave 10,200
/// to 11,400 in a closed loop; docs/benchmarks.md).
pub const CHECKOUT_BATCHERS: usize = 2;
/// Threads batching provider answers (on the answers' pool).
pub const ANSWER_BATCHERS: usize = 2;
/// Jobs queued for one batcher, at most; beyond it callers wait.
pub const BATCH_QUEUE_MAX: usize = 4_096;

/// What the batches did, for tests and metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchStats {
    /// Batches committed.
    pub batches: u64,
    /// Jobs in them.
    pub jobs: u64,
    /// The most jobs one batch committed.
    pub largest: u64,
    /// Conditional UPDATEs that took the whole demand of two or more
    /// checkouts at once, in committed batches (a batch run again counts
    /// its last run's).
    pub summed_takes: u64,
    /// Checkouts whose units such a summed UPDATE took (committed).
    pub summed_holds: u64,
    /// Batches run again from the start because the server chose them as
    /// a deadlock victim or failed them for serialisation (40P01, 40001).
    pub deadlock_reruns: u64,
    /// Batches run again from the start because a cached statement had
    /// gone stale (a migration, a session reset: see `conn`).
    pub stale_reruns: u64,
    /// Batches whose jobs then ran one per transaction (a failure that
    /// was neither retryable nor `Unavailable`).
    pub split: u64,
}

impl BatchStats {
    /// Batches run again from the start, for either cause.
    pub fn reruns(&self) -> u64 {
        self.deadlock_reruns + self.stale_reruns
    }
}

#[derive(Default)]
pub(super) struct Counters {
    batches: AtomicU64,
    jobs: AtomicU64,
    largest: AtomicU64,
    summed_takes: AtomicU64,
    summed_holds: AtomicU64,
    deadlock_reruns: AtomicU64,
    stale_reruns: AtomicU64,
    split: AtomicU64,
}

impl Counters {
    pub(super) fn stats(&self) -> BatchStats {
        BatchStats {
            batches: self.batches.load(Ordering::Relaxed),
            jobs: self.jobs.load(Ordering::Relaxed),
            largest: self.largest.load(Ordering::Relaxed),
            summed_takes: self.summed_takes.load(Ordering::Relaxed),
            summed_holds: self.summed_holds.load(Ordering::Relaxed),
            deadlock_reruns: self.deadlock_reruns.load(Ordering::Relaxed),
            stale_reruns: self.stale_reruns.load(Ordering::Relaxed),
            split: self.split.load(Ordering::Relaxed),
        }
    }
}

type Value = Box<dyn Any + Send>;
type RunFn = Box<dyn FnMut(&mut Tx<'_>) -> Result<Value, StoreError> + Send>;

enum Job {
    Checkout {
        claim: Box<Claim>,
        reply: mpsc::Sender<Result<Begun, CheckoutError>>,
    },
    Run {
        f: RunFn,
        reply: mpsc::Sender<Result<Value, StoreError>>,
    },
}

impl Job {
    fn subject(&self) -> Option<&str> {
        match self {
            Job::Checkout { claim, .. } => Some(&claim.subject),
            Job::Run { .. } => None,
        }
    }
}

/// What the batch thread shares with the back end.
pub(super) struct Shared {
    pub pool: Pool,
    pub durable_writes: Arc<AtomicU64>,
    pub counters: Arc<Counters>,
    pub metrics: Arc<Metrics>,
}

/// Batching threads sharing one bounded queue: the one that holds the
/// queue collects a batch, then lets the next collect while it writes.
pub(super) struct Batcher {
    queue: Option<SyncSender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

fn stopped() -> StoreError {
    StoreError::Unavailable("the PostgreSQL batch writer has stopped".into())
}

impl Batcher {
    /// `threads` batching threads (each writes on a connection of
    /// `shared.pool` while its batch runs).
    pub(super) fn start(name: &str, shared: Shared, threads: usize) -> Result<Self, StoreError> {
        let (queue, jobs) = mpsc::sync_channel(BATCH_QUEUE_MAX);
        let inbox = Inbox {
            jobs,
            pending: VecDeque::new(),
            open: true,
        };
        let (jobs, shared) = (Arc::new(Mutex::new(inbox)), Arc::new(shared));
        let in_flight = Arc::new(Mutex::new(HashSet::new()));
        let mut batcher = Self {
            queue: Some(queue),
            threads: Vec::with_capacity(threads),
        };
        for _ in 0..threads.max(1) {
            let (jobs, shared, in_flight) = (jobs.clone(), shared.clone(), in_flight.clone());
            let thread = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || run(&jobs, &in_flight, &shared))?;
            batcher.threads.push(thread);
        }
        Ok(batcher)
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        self.queue
            .as_ref()
            .ok_or_else(stopped)?
            .send(job)
            .map_err(|_| stopped())
    }

    /// Step 1 of a checkout in the next batch; blocks the calling thread
    /// (the blocking pool's) until its batch committed.
    pub(super) fn checkout(&self, claim: Claim) -> Result<Begun, CheckoutError> {
        let (reply, answer) = mpsc::channel();
        self.send(Job::Checkout {
            claim: Box::new(claim),
            reply,
        })?;
        answer.recv().unwrap_or_else(|_| Err(stopped().into()))
    }

    /// `f` in the next batch, in a SAVEPOINT of its own (alone in its
    /// batch: in the transaction itself); blocks until its batch
    /// committed (or, `f` failing alone, rolled back). `f` may run more than once (a batch run again).
    pub(super) fn run<T: Send + 'static>(
        &self,
        mut f: impl FnMut(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (reply, answer) = mpsc::channel();
        self.send(Job::Run {
            f: Box::new(move |tx| f(tx).map(|t| Box::new(t) as Value)),
            reply,
        })?;
        let value = answer.recv().unwrap_or_else(|_| Err(stopped()))?;
        value
            .downcast::<T>()
            .map(|t| *t)
            .map_err(|_| StoreError::Postgres("a batch answered with another type".into()))
    }
}

impl Drop for Batcher {
    /// Closing the queue lets the thread finish what is queued, then stop.
    fn drop(&mut self) {
        self.queue.take();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// The queue and the jobs a batch left for the next (a second checkout
/// of a subject), shared by the batching threads.
struct Inbox {
    jobs: Receiver<Job>,
    pending: VecDeque<Job>,
    open: bool,
}

fn run(inbox: &Mutex<Inbox>, in_flight: &Mutex<HashSet<String>>, shared: &Shared) {
    let mut last_len = 0;
    loop {
        // A panic while collecting must not stop every batcher.
        let mut inbox = inbox
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(batch) = collect(&mut inbox, in_flight, last_len) else {
            return;
        };
        drop(inbox);
        last_len = batch.len();
        let subjects: Vec<String> = batch
            .iter()
            .filter_map(|job| job.subject().map(str::to_owned))
            .collect();
        // A job that panics (a row that does not decode, a bug) fails its
        // batch, whose callers then hear `Unavailable` (their answer
        // channels dropped), and not the batcher: the next batch runs.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| execute(batch, shared)))
            .is_err()
        {
            tracing::error!(
                "a PostgreSQL batch panicked: its callers are answered unavailable, the batcher goes on"
            );
        }
        let mut busy = in_flight.lock().unwrap_or_else(|p| p.into_inner());
        for subject in &subjects {
            busy.remove(subject);
        }
    }
}

/// How long a batcher whose queued jobs all belong to subjects in another
/// batcher's batch waits for a new job before looking again.
const IN_FLIGHT_WAIT: Duration = Duration::from_millis(1);

/// The next batch (`None`: the queue is closed and empty). A subject with
/// a checkout in a batch being written (`in_flight`, by any batcher) has
/// its next checkout kept back until that batch ends: in a batch of its
/// own it would make the whole batch wait on the first one's locks.
fn collect(
    inbox: &mut Inbox,
    in_flight: &Mutex<HashSet<String>>,
    last_len: usize,
) -> Option<Vec<Job>> {
    if inbox.pending.is_empty() {
        if !inbox.open {
            return None;
        }
        match inbox.jobs.recv() {
            Ok(job) => inbox.pending.push_back(job),
            Err(_) => {
                inbox.open = false;
                return None;
            }
        }
    }
    // Wait for company only when there was some last time: a lone caller
    // is not delayed, a crowd fills the batch.
    let wait = if last_len > 1 {
        BATCH_WAIT
    } else {
        Duration::ZERO
    };
    let deadline = Instant::now() + wait;
    while inbox.open && inbox.pending.len() < BATCH_MAX {
        match inbox.jobs.try_recv() {
            Ok(job) => inbox.pending.push_back(job),
            Err(TryRecvError::Disconnected) => inbox.open = false,
            Err(TryRecvError::Empty) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                match inbox.jobs.recv_timeout(left) {
                    Ok(job) => inbox.pending.push_back(job),
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => inbox.open = false,
                }
            }
        }
    }
    loop {
        // One checkout per subject per batch, none of a subject in flight;
        // the others keep their place.
        let mut batch = Vec::with_capacity(inbox.pending.len().min(BATCH_MAX));
        let mut rest = VecDeque::new();
        let mut busy = in_flight.lock().unwrap_or_else(|p| p.into_inner());
        for job in inbox.pending.drain(..) {
            let fits =
                batch.len() < BATCH_MAX && job.subject().is_none_or(|s| busy.insert(s.to_owned()));
            if fits {
                batch.push(job);
            } else {
                rest.push_back(job);
            }
        }
        drop(busy);
        inbox.pending = rest;
        if !batch.is_empty() {
            return Some(batch);
        }
        // Only checkouts of subjects in flight: a new job, or a moment.
        if !inbox.open {
            std::thread::sleep(IN_FLIGHT_WAIT);
            continue;
        }
        match inbox.jobs.recv_timeout(IN_FLIGHT_WAIT) {
            Ok(job) => inbox.pending.push_back(job),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => inbox.open = false,
        }
    }
}

/// One job's answer, sent once the batch's fate is known.
enum Answer {
    Checkout(Result<Begun, CheckoutError>),
    Run(Result<Value, StoreError>),
}

fn execute(batch: Vec<Job>, shared: &Shared) {
    let mut client = match shared.pool.get() {
        Ok(client) => client,
        Err(e) => return fail_all(batch, &pool_err(e).to_string()),
    };
    let mut batch = batch;
    let mut tries = 0;
    loop {
        tries += 1;
        let attempt = (|| {
            let mut tx = client.transaction().map_err(pg_err)?;
            let ran = in_batch(&mut tx, &mut batch)?;
            if ran.roll_back {
                tx.rollback().map_err(pg_err)?;
            } else {
                tx.commit().map_err(pg_err)?;
            }
            Ok::<_, StoreError>(ran)
        })();
        match attempt {
            Ok(Ran {
                answers,
                roll_back: true,
                ..
            }) => {
                // A lone job that failed: nothing was written.
                drop(client);
                return deliver(batch, answers);
            }
            Ok(Ran {
                answers, summed, ..
            }) => {
                shared.durable_writes.fetch_add(1, Ordering::Relaxed);
                Metrics::inc(&shared.metrics.batches_committed);
                // Counted once committed: a batch run again counts once.
                let c = &shared.counters;
                c.batches.fetch_add(1, Ordering::Relaxed);
                c.jobs.fetch_add(batch.len() as u64, Ordering::Relaxed);
                c.largest.fetch_max(batch.len() as u64, Ordering::Relaxed);
                c.summed_takes.fetch_add(summed.takes, Ordering::Relaxed);
                c.summed_holds.fetch_add(summed.holds, Ordering::Relaxed);
                // Back to the pool before the callers hear: a caller's
                // next step then finds it idle, and its statements
                // prepared, instead of opening another connection.
                drop(client);
                return deliver(batch, answers);
            }
            Err(e) if e.is_retryable() && tries < TX_TRIES_MAX => {
                let c = &shared.counters;
                let cause = if is_stale_statement(&e) {
                    &c.stale_reruns
                } else {
                    &c.deadlock_reruns
                };
                cause.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(StoreError::Unavailable(why)) => return fail_all(batch, &why),
            Err(e) => {
                shared.counters.split.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("a PostgreSQL batch failed ({e}); its jobs run one by one");
                return one_by_one(&mut client, batch, shared);
            }
        }
    }
}

/// Summed takes a batch's run made (see [`BatchStats::summed_takes`]),
/// counted only once its transaction committed.
#[derive(Default)]
struct Summed {
    takes: u64,
    holds: u64,
}

/// One run of a batch: every job's answer, and its summed takes.
struct Ran {
    answers: Vec<Answer>,
    summed: Summed,
    /// The batch's one job, run without a savepoint, failed: the
    /// transaction is rolled back, not committed.
    roll_back: bool,
}

/// Runs the batch's jobs in `tx`: the `Run` jobs, then the checkouts'
/// three phases. An `Err` is the batch's (rolled back as a whole); what
/// an `Ok` reports is counted by the caller after the commit.
fn in_batch(tx: &mut Tx<'_>, batch: &mut [Job]) -> Result<Ran, StoreError> {
    let mut answers: Vec<Option<Answer>> = (0..batch.len()).map(|_| None).collect();
    // The partition side of hold moves waits for the end of the jobs, so
    // the hot rows are locked once, just before the commit.
    tx.defer_hold_moves();
    let ran = run_jobs(tx, batch, &mut answers);
    let moves = tx.take_deferred();
    if ran? == Jobs::Failed {
        return Ok(Ran {
            answers: answers
                .into_iter()
                .map(|a| a.expect("the lone job answered"))
                .collect(),
            summed: Summed::default(),
            roll_back: true,
        });
    }
    stock::apply_put_off(tx, moves)?;
    // Phase 1: every claim at once (`checkout::claim_all`: a few
    // statements for the batch, keys and subject locks taken in subject
    // order, so two batches never wait on each other in a cycle). A
    // claim's own failure (mismatch, conflict, limit, unknown SKU) is its
    // answer and leaves nothing behind; a statement that fails is the
    // batch's (a deadlock: run again; otherwise one job per transaction).
    let checkouts: Vec<(usize, &Claim)> = batch
        .iter()
        .enumerate()
        .filter_map(|(i, job)| match job {
            Job::Checkout { claim, .. } => Some((i, &**claim)),
            Job::Run { .. } => None,
        })
        .collect();
    let mut ready: Vec<(usize, checkout::Terms)> = Vec::new();
    if !checkouts.is_empty() {
        let claims: Vec<&Claim> = checkouts.iter().map(|(_, c)| *c).collect();
        let claimed = checkout::claim_all(tx, &claims)?;
        for (&(i, _), claimed) in checkouts.iter().zip(claimed) {
            match claimed {
                Ok(Claimed::Ready(terms)) => ready.push((i, terms)),
                Ok(Claimed::Replay(order_id)) => {
                    answers[i] = Some(Answer::Checkout(Ok(Begun::Replay(order_id))));
                }
                Err(e) => answers[i] = Some(Answer::Checkout(Err(e))),
            }
        }
    }
    // The stock goes in arrival order.
    ready.sort_unstable_by_key(|(i, _)| *i);
    let claim_of = |i: usize| match &batch[i] {
        Job::Checkout { claim, .. } => &**claim,
        Job::Run { .. } => unreachable!("only checkouts are ready"),
    };
    let mut by_sku: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (n, (i, _)) in ready.iter().enumerate() {
        by_sku.entry(&claim_of(*i).request.sku).or_default().push(n);
    }
    let units = |n: usize| i64::from(claim_of(ready[n].0).request.quantity);
    let demand: Vec<(&str, i64)> = by_sku
        .iter()
        .map(|(sku, holds)| (*sku, holds.iter().map(|&n| units(n)).sum()))
        .collect();
    let finish = |answers: Vec<Option<Answer>>, summed| Ran {
        answers: answers
            .into_iter()
            .map(|a| a.expect("every job answered"))
            .collect(),
        summed,
        roll_back: false,
    };
    if ready.is_empty() {
        return Ok(finish(answers, Summed::default()));
    }
    if let [(i, terms)] = ready.as_slice() {
        // One checkout to create: its units taken first (`stock::take`,
        // which waits for a busy partition or spreads over free ones),
        // then its order, events, attempt and hold in one statement, as
        // `checkout::claim_and_create` does. Nothing to undo when the
        // take finds no units (the order is created `rejected`), so no
        // savepoint: three round trips fewer than the summed take's, and
        // the partition's row locked for two (that statement, `COMMIT`),
        // not three (the holds, `RELEASE`, `COMMIT`).
        let claim = claim_of(*i);
        let part = stock::take(
            tx,
            &claim.request.sku,
            units(0),
            &terms.order_id,
            claim.now_ms,
        )?;
        let (begun, _) = checkout::create_all(tx, vec![(claim, terms.clone(), part)], true)?;
        let begun = begun.into_iter().next().expect("one order per claim");
        answers[*i] = Some(Answer::Checkout(Ok(begun)));
        return Ok(finish(answers, Summed::default()));
    }
    // Phases 2 and 3, the usual way round: the orders, events, keys and
    // attempts written first (one statement per table for the batch),
    // then each SKU's whole demand taken in ONE conditional UPDATE, then
    // the holds, on the partitions the units came from, in one statement:
    // the hot rows stay locked only from that UPDATE to the commit
    // (`checkout::insert_holds`).
    let mut fits = true;
    let mut seen = Vec::with_capacity(demand.len());
    for &(sku, sum) in &demand {
        let snapshot = stock::snapshot(tx, sku)?;
        fits &= snapshot.largest_free() >= sum;
        seen.push(snapshot);
    }
    if fits {
        let mut sp = tx.savepoint("whole").map_err(pg_err)?;
        let jobs = ready
            .iter()
            .map(|(i, terms)| (claim_of(*i), terms.clone(), Some(0)))
            .collect();
        let (begun, mut holds) = checkout::create_all(&mut sp, jobs, false)?;
        let mut taken = true;
        let mut summed = Summed::default();
        for ((&(sku, sum), of_sku), seen) in demand.iter().zip(by_sku.values()).zip(&seen) {
            let (first, now_ms) = (
                &ready[of_sku[0]].1.order_id,
                claim_of(ready[of_sku[0]].0).now_ms,
            );
            let Some(part) = stock::take_whole(&mut sp, seen, sku, sum, first, now_ms)? else {
                taken = false;
                break;
            };
            for hold in holds.iter_mut().filter(|h| h.sku == sku) {
                hold.part = part;
            }
            if of_sku.len() > 1 {
                summed.takes += 1;
                summed.holds += of_sku.len() as u64;
            }
        }
        if taken {
            checkout::insert_holds(&mut sp, &holds)?;
            sp.commit().map_err(pg_err)?;
            for ((i, _), b) in ready.iter().zip(begun) {
                answers[*i] = Some(Answer::Checkout(Ok(b)));
            }
            return Ok(finish(answers, summed));
        }
        // Someone else took units since the snapshot: the careful way.
        sp.rollback().map_err(pg_err)?;
    }
    // Short of units: each checkout takes its own, per SKU in arrival
    // order, so exactly the units left are sold; then the orders. The
    // SKU's partitions are locked first, in ascending order, as everyone
    // who holds two partitions at once takes them (a hold taken from one
    // while waiting for another would deadlock with them).
    let mut parts: Vec<Option<i32>> = vec![None; ready.len()];
    for (sku, holds) in &by_sku {
        stock::lock_all(tx, sku)?;
        for &n in holds {
            let claim = claim_of(ready[n].0);
            parts[n] = stock::take(tx, sku, units(n), &ready[n].1.order_id, claim.now_ms)?;
        }
    }
    let jobs = ready
        .iter()
        .zip(parts)
        .map(|((i, terms), part)| (claim_of(*i), terms.clone(), part))
        .collect();
    let (begun, _) = checkout::create_all(tx, jobs, true)?;
    for ((i, _), b) in ready.iter().zip(begun) {
        answers[*i] = Some(Answer::Checkout(Ok(b)));
    }
    Ok(finish(answers, Summed::default()))
}

/// How a batch's `Run` jobs went.
#[derive(Debug, PartialEq, Eq)]
enum Jobs {
    /// Each answered; what succeeded is to be committed.
    Ran,
    /// The batch's one job failed, run without a savepoint: the
    /// transaction is to be rolled back.
    Failed,
}

/// The batch's `Run` jobs, each in a SAVEPOINT of its own (its put-off
/// hold moves forgotten with it when it is rolled back), unless it is the
/// batch's only job: then in the transaction itself (two round trips
/// fewer), whose rollback undoes it when it fails ([`Jobs::Failed`]).
fn run_jobs(
    tx: &mut Tx<'_>,
    batch: &mut [Job],
    answers: &mut [Option<Answer>],
) -> Result<Jobs, StoreError> {
    if let [Job::Run { f, .. }] = batch {
        return Ok(match f(tx) {
            Ok(value) => {
                answers[0] = Some(Answer::Run(Ok(value)));
                Jobs::Ran
            }
            // The batch's, run again as a deadlock victim (see below).
            Err(e) if e.is_retryable() => return Err(e),
            Err(e) => {
                answers[0] = Some(Answer::Run(Err(e)));
                Jobs::Failed
            }
        });
    }
    for (i, job) in batch.iter_mut().enumerate() {
        let Job::Run { f, .. } = job else {
            continue;
        };
        let mark = tx.deferred_hold_moves().map_or(0, |moves| moves.len());
        let mut sp = tx.savepoint("job").map_err(pg_err)?;
        answers[i] = Some(Answer::Run(match f(&mut sp) {
            Ok(value) => {
                sp.commit().map_err(pg_err)?;
                Ok(value)
            }
            // A deadlock is the batch's: retried in place, the jobs before
            // keep their locks and the cycle stays; the batch runs again.
            Err(e) if e.is_retryable() => return Err(e),
            Err(e) => {
                sp.rollback().map_err(pg_err)?;
                if let Some(moves) = tx.deferred_hold_moves() {
                    moves.truncate(mark);
                }
                Err(e)
            }
        }));
    }
    Ok(Jobs::Ran)
}

fn deliver(batch: Vec<Job>, answers: Vec<Answer>) {
    // A caller that stopped waiting does not stop the others.
    for (job, answer) in batch.into_iter().zip(answers) {
        match (job, answer) {
            (Job::Checkout { reply, .. }, Answer::Checkout(a)) => {
                let _ = reply.send(a);
            }
            (Job::Run { reply, .. }, Answer::Run(a)) => {
                let _ = reply.send(a);
            }
            _ => unreachable!("answers follow their jobs"),
        }
    }
}

/// Every job of a batch that could not be written answers `Unavailable`
/// (nothing of it happened, or — a commit whose answer was lost — its
/// outcome is unknown, as with any transaction's).
fn fail_all(batch: Vec<Job>, why: &str) {
    let e = || StoreError::Unavailable(why.to_owned());
    for job in batch {
        match job {
            Job::Checkout { reply, .. } => {
                let _ = reply.send(Err(e().into()));
            }
            Job::Run { reply, .. } => {
                let _ = reply.send(Err(e()));
            }
        }
    }
}

/// The batch's jobs, each in a transaction of its own.
fn one_by_one(client: &mut super::Pooled, batch: Vec<Job>, shared: &Shared) {
    for job in batch {
        match job {
            Job::Checkout { claim, reply } => {
                let begun = write_tx(client, &shared.durable_writes, |tx| {
                    checkout::claim_and_create(tx, &claim)
                });
                let _ = reply.send(begun);
            }
            Job::Run { mut f, reply } => {
                let _ = reply.send(write_tx(client, &shared.durable_writes, |tx| f(tx)));
            }
        }
    }
}
