//! Group commit: the store's single writer thread. It takes work from a
//! bounded queue — hot-path reservations and the service's transactions
//! alike — and commits it in batches: one transaction, one fsync per batch.
//! Each caller gets its answer only after its batch is durable.
//!
//! Durability is unchanged (WAL, `synchronous=FULL`); what is shared is the
//! fsync. Each reservation is still its own atomic conditional UPDATE, so
//! the database, not this thread, decides whether units are left; each
//! service transaction runs in its own SAVEPOINT, so one that fails is rolled
//! back alone and the rest of the batch commits.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, Transaction, TransactionBehavior};
use tokio::sync::oneshot;

use crate::backend::sqlite::partition;
use crate::backend::sqlite::stock::{self, ReserveOutcome};
use crate::blocking::{step, Blocking};
use crate::books::BooksCell;
use crate::clock::UnixMs;
use crate::error::StoreError;
use crate::limits::{
    GROUP_COMMIT_BATCH_MAX, GROUP_COMMIT_QUEUE_MAX, GROUP_COMMIT_WAIT_DEFAULT_US,
    GROUP_COMMIT_WAIT_MAX_US, ORDER_QUANTITY_MAX,
};
use crate::metrics::Metrics;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCommitConfig {
    /// Jobs in one transaction, at most.
    pub batch_max: usize,
    /// How long the first job of a batch waits for company, at most (only
    /// when the previous batch had company).
    pub wait_max: Duration,
    /// Jobs queued for the writer, at most; beyond it callers wait
    /// (`submit`) or are refused (`try_submit`).
    pub queue_max: usize,
    /// Test-only: extra time each batch takes to commit, as a slow disk
    /// would. Zero in production; the gateway accepts a non-zero value only
    /// when test knobs are explicitly allowed.
    pub commit_delay: Duration,
}

impl Default for GroupCommitConfig {
    fn default() -> Self {
        Self {
            batch_max: GROUP_COMMIT_BATCH_MAX,
            wait_max: Duration::from_micros(GROUP_COMMIT_WAIT_DEFAULT_US),
            queue_max: GROUP_COMMIT_QUEUE_MAX,
            commit_delay: Duration::ZERO,
        }
    }
}

impl GroupCommitConfig {
    fn clamped(self) -> Self {
        Self {
            batch_max: self.batch_max.clamp(1, GROUP_COMMIT_BATCH_MAX),
            wait_max: self
                .wait_max
                .min(Duration::from_micros(GROUP_COMMIT_WAIT_MAX_US)),
            queue_max: self.queue_max.clamp(1, GROUP_COMMIT_QUEUE_MAX),
            commit_delay: self.commit_delay.min(Duration::from_secs(10)),
        }
    }
}

/// A hold on the hot path: no order row, just the units and their expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReserveRequest {
    /// The hold's id (the order's id); unique.
    pub order_id: String,
    pub sku: String,
    pub quantity: u32,
    pub now_ms: UnixMs,
    pub expires_at_ms: UnixMs,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriterError {
    #[error("reservation queue is full")]
    Overloaded,
    #[error("reservation writer has stopped")]
    Stopped,
    #[error("invalid reservation: {0}")]
    Invalid(String),
    /// The batch did not commit; nothing of it happened.
    #[error("batch failed: {0}")]
    Batch(String),
}

type Reply = Result<ReserveOutcome, WriterError>;

/// Called once the batch's fate is known: `Ok` committed, `Err` rolled back.
pub(crate) type Deliver = Box<dyn FnOnce(Result<(), String>) + Send>;
/// A service transaction: runs inside the batch, returns how to answer.
pub(crate) type RunJob =
    Box<dyn FnOnce(&Transaction<'_>, &Metrics) -> Result<Deliver, StoreError> + Send>;

enum Job {
    Reserve {
        request: ReserveRequest,
        reply: oneshot::Sender<Reply>,
    },
    Run(RunJob),
}

/// A submitted reservation's answer, available once its batch has committed.
#[derive(Debug)]
pub struct Pending(oneshot::Receiver<Reply>);

impl Pending {
    /// Blocks the calling thread (not for use on an async runtime thread).
    pub fn wait(self) -> Reply {
        self.0.blocking_recv().unwrap_or(Err(WriterError::Stopped))
    }

    /// Awaits the answer.
    pub async fn recv(self) -> Reply {
        self.0.await.unwrap_or(Err(WriterError::Stopped))
    }
}

pub(crate) struct Writer {
    queue: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Starts the writer thread on `conn` (already opened with the store's
    /// durability settings).
    pub(crate) fn start(
        conn: Connection,
        config: GroupCommitConfig,
        metrics: Arc<Metrics>,
        books: Arc<BooksCell>,
    ) -> Result<Self, StoreError> {
        let config = config.clamped();
        let (queue, jobs) = mpsc::sync_channel(config.queue_max);
        let thread = std::thread::Builder::new()
            .name("sluice-checkout-writer".into())
            .spawn(move || run(conn, jobs, config, &metrics, &books))?;
        Ok(Self {
            queue: Some(queue),
            thread: Some(thread),
        })
    }

    fn queue(&self) -> Result<&SyncSender<Job>, WriterError> {
        self.queue.as_ref().ok_or(WriterError::Stopped)
    }

    /// Queues a reservation, waiting while the queue is full.
    pub(crate) fn submit(&self, request: ReserveRequest) -> Result<Pending, WriterError> {
        let (job, pending) = reserve_job(request)?;
        self.queue()?.send(job).map_err(|_| WriterError::Stopped)?;
        Ok(pending)
    }

    /// Queues a reservation, or refuses it at once when the queue is full.
    pub(crate) fn try_submit(&self, request: ReserveRequest) -> Result<Pending, WriterError> {
        let (job, pending) = reserve_job(request)?;
        self.queue()?.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => WriterError::Overloaded,
            TrySendError::Disconnected(_) => WriterError::Stopped,
        })?;
        Ok(pending)
    }

    /// Queues a service transaction, waiting while the queue is full.
    pub(crate) fn run_job(&self, job: RunJob) -> Result<(), WriterError> {
        self.queue()?
            .send(Job::Run(job))
            .map_err(|_| WriterError::Stopped)
    }

    /// Queues a service transaction from an async caller: at once when the
    /// queue has room (no thread is involved), else the wait for room runs
    /// on `steps`.
    pub(crate) async fn run_job_on(
        &self,
        steps: &dyn Blocking,
        job: RunJob,
    ) -> Result<(), WriterError> {
        let queue = self.queue()?;
        match queue.try_send(Job::Run(job)) {
            Ok(()) => Ok(()),
            Err(TrySendError::Disconnected(_)) => Err(WriterError::Stopped),
            Err(TrySendError::Full(job)) => {
                let queue = queue.clone();
                step(steps, move || {
                    queue.send(job).map_err(|_| WriterError::Stopped)
                })
                .await
                .map_err(|_| WriterError::Stopped)?
            }
        }
    }
}

impl Drop for Writer {
    /// Closing the queue lets the writer finish what is queued, then stop.
    fn drop(&mut self) {
        self.queue.take();
        if let Some(thread) = self.thread.take() {
            // A writer that panicked answered its callers with `Stopped`
            // (their reply channels dropped); nothing more to do here.
            let _ = thread.join();
        }
    }
}

fn reserve_job(request: ReserveRequest) -> Result<(Job, Pending), WriterError> {
    if !(1..=ORDER_QUANTITY_MAX).contains(&request.quantity) {
        return Err(WriterError::Invalid(format!(
            "quantity must be 1 to {ORDER_QUANTITY_MAX}"
        )));
    }
    let (reply, answer) = oneshot::channel();
    Ok((Job::Reserve { request, reply }, Pending(answer)))
}

fn run(
    mut conn: Connection,
    jobs: Receiver<Job>,
    config: GroupCommitConfig,
    metrics: &Metrics,
    books: &BooksCell,
) {
    let mut batch: Vec<Job> = Vec::with_capacity(config.batch_max);
    let mut last_batch_len = 0;
    while let Ok(first) = jobs.recv() {
        batch.push(first);
        // Wait for company only when there was some last time: a lone
        // caller is not delayed, a crowd fills the batch.
        let wait = if last_batch_len > 1 {
            config.wait_max
        } else {
            Duration::ZERO
        };
        let deadline = Instant::now() + wait;
        while batch.len() < config.batch_max {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(TryRecvError::Disconnected) => break,
                Err(TryRecvError::Empty) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    match jobs.recv_timeout(left) {
                        Ok(job) => batch.push(job),
                        Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
                    }
                }
            }
        }
        last_batch_len = batch.len();
        if !config.commit_delay.is_zero() {
            std::thread::sleep(config.commit_delay);
        }
        commit_batch(&mut conn, &mut batch, metrics, books);
    }
}

/// What one job of the batch is owed once the batch's fate is known.
enum Answer {
    Reserve(oneshot::Sender<Reply>, Reply),
    Run(Deliver),
}

/// Runs and commits one batch, then answers every job in it.
fn commit_batch(conn: &mut Connection, batch: &mut Vec<Job>, metrics: &Metrics, books: &BooksCell) {
    let mut answers = Vec::with_capacity(batch.len());
    let committed = execute(conn, batch, metrics, &mut answers);
    if committed.is_ok() {
        Metrics::inc(&metrics.batches_committed);
        // Before anyone hears "done": whoever sees their write acknowledged
        // sees it in the books too. A failed read keeps the previous books
        // until the next commit.
        if let Ok(read) = crate::backend::sqlite::books::read(conn) {
            books.publish(read);
        }
    }
    let fate = committed.map_err(|e| e.to_string());
    for answer in answers {
        match answer {
            // A caller that stopped waiting does not stop the batch.
            Answer::Reserve(reply, outcome) => {
                let _ = reply.send(match &fate {
                    Ok(()) => outcome,
                    Err(message) => Err(WriterError::Batch(message.clone())),
                });
            }
            Answer::Run(deliver) => deliver(fate.clone()),
        }
    }
    // Jobs not reached (the batch failed early) drop their reply channel,
    // which their callers read as "stopped, nothing happened".
    batch.clear();
}

fn execute(
    conn: &mut Connection,
    batch: &mut Vec<Job>,
    metrics: &Metrics,
    answers: &mut Vec<Answer>,
) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut touched = BTreeSet::new();
    let mut holds: Vec<(ReserveRequest, oneshot::Sender<Reply>)> = Vec::new();
    for job in batch.drain(..) {
        match job {
            Job::Reserve { request, reply } => holds.push((request, reply)),
            Job::Run(job) => {
                // Keep arrival order between holds and service transactions.
                reserve_all(&tx, &mut holds, metrics, &mut touched, answers)?;
                answers.push(Answer::Run(run_in_savepoint(&tx, metrics, job)?));
            }
        }
    }
    reserve_all(&tx, &mut holds, metrics, &mut touched, answers)?;
    // The assert after the hot-path reservations, once per SKU per batch
    // (service transactions verify their own SKUs).
    for sku in &touched {
        stock::verify(&tx, sku, metrics)?;
    }
    tx.commit()?;
    Ok(())
}

/// Takes the holds of a run of consecutive reservation jobs. When a SKU's
/// whole demand in the run fits, one conditional UPDATE takes it all; when
/// it does not, each request gets its own conditional UPDATE in arrival
/// order, so the first comers get the last units. Either way the database's
/// `available >= n` decides, never a value read earlier.
fn reserve_all(
    tx: &Transaction<'_>,
    holds: &mut Vec<(ReserveRequest, oneshot::Sender<Reply>)>,
    metrics: &Metrics,
    touched: &mut BTreeSet<String>,
    answers: &mut Vec<Answer>,
) -> Result<(), StoreError> {
    if holds.is_empty() {
        return Ok(());
    }
    let mut demand: BTreeMap<&str, i64> = BTreeMap::new();
    for (request, _) in holds.iter() {
        *demand.entry(request.sku.as_str()).or_default() += i64::from(request.quantity);
    }
    // SKU → the partition that took the run's whole demand.
    let mut taken_whole: BTreeMap<String, u32> = BTreeMap::new();
    for (sku, units) in demand {
        let start = holds
            .iter()
            .find(|(r, _)| r.sku == sku)
            .map_or(0, |(r, _)| partition::start_of(&r.order_id));
        if let Some(part) = partition::try_take(tx, sku, units, start)? {
            taken_whole.insert(sku.to_owned(), part);
        }
    }
    for (request, reply) in holds.drain(..) {
        let part = match taken_whole.get(&request.sku) {
            Some(part) => Some(*part),
            None => partition::take(
                tx,
                &request.sku,
                i64::from(request.quantity),
                partition::start_of(&request.order_id),
                request.now_ms,
            )?,
        };
        let outcome = match part {
            Some(part) => record_hold(tx, &request, part, metrics)?,
            None => refusal(tx, &request, metrics)?,
        };
        if matches!(outcome, Ok(ReserveOutcome::Reserved { .. })) {
            touched.insert(request.sku);
        }
        answers.push(Answer::Reserve(reply, outcome));
    }
    Ok(())
}

/// A service transaction in its own SAVEPOINT: a job that fails rolls back
/// to it (see `Store::write`), one that panics is rolled back here; either
/// way only its own writes are undone. An `Err` is a storage failure that
/// sinks the whole batch.
fn run_in_savepoint(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    job: RunJob,
) -> Result<Deliver, StoreError> {
    // Prepared once per connection, like every statement on the hot path.
    tx.prepare_cached("SAVEPOINT job")?.execute([])?;
    match catch_unwind(AssertUnwindSafe(|| job(tx, metrics))) {
        Ok(Ok(deliver)) => {
            tx.prepare_cached("RELEASE job")?.execute([])?;
            Ok(deliver)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => {
            // The job's reply channel was dropped while unwinding: its
            // caller hears "did not happen", and nothing of it remains.
            tx.execute_batch("ROLLBACK TO job; RELEASE job")?;
            Ok(Box::new(|_| {}))
        }
    }
}

/// Records a hold whose units were taken. The outer `Err` is a storage
/// failure that sinks the batch; the inner one is this request's refusal.
fn record_hold(
    tx: &Transaction<'_>,
    r: &ReserveRequest,
    part: u32,
    metrics: &Metrics,
) -> Result<Reply, StoreError> {
    let inserted = tx
        .prepare_cached(
            "INSERT INTO reservations
                (order_id, sku, quantity, state, created_at_ms, expires_at_ms, part)
             VALUES (?1, ?2, ?3, 'held', ?4, ?5, ?6) ON CONFLICT (order_id) DO NOTHING",
        )?
        .execute(params![
            r.order_id,
            r.sku,
            r.quantity,
            r.now_ms,
            r.expires_at_ms,
            part
        ])?;
    if inserted == 0 {
        // A second hold for the same order: give the units back.
        tx.prepare_cached(
            "UPDATE stock_partitions SET available = available + ?2, reserved = reserved - ?2
             WHERE sku = ?1 AND part = ?3",
        )?
        .execute(params![r.sku, r.quantity, part])?;
        return Ok(Err(WriterError::Invalid(format!(
            "order {} already holds stock",
            r.order_id
        ))));
    }
    Metrics::inc(&metrics.reservations_ok);
    Ok(Ok(ReserveOutcome::Reserved {
        expires_at_ms: r.expires_at_ms,
    }))
}

/// Why units could not be taken: sold out, or no such SKU.
fn refusal(
    tx: &Transaction<'_>,
    r: &ReserveRequest,
    metrics: &Metrics,
) -> Result<Reply, StoreError> {
    match stock::load(tx, &r.sku) {
        Ok(_) => {
            Metrics::inc(&metrics.reservations_sold_out);
            Ok(Ok(ReserveOutcome::SoldOut))
        }
        Err(StoreError::UnknownSku(sku)) => {
            Ok(Err(WriterError::Invalid(format!("unknown sku {sku}"))))
        }
        Err(e) => Err(e),
    }
}
