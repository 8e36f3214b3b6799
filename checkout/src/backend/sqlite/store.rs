//! The embedded stock authority: one SQLite database in the data dir, in WAL
//! mode with `synchronous=FULL` so an acknowledged commit survives power loss.
//!
//! Every write goes to the one writer thread (see `group_commit`), which
//! commits concurrent callers' transactions together, one fsync per batch;
//! SQLite has a single writer anyway, and sharing the fsync is how throughput
//! is bought without weakening durability. Reads use their own connection
//! and see the last commit (WAL).

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Transaction};

use crate::backend::sqlite::attempt::{self, Attempt};
use crate::backend::sqlite::group_commit::{
    Deliver, GroupCommitConfig, Pending, ReserveRequest, RunJob, Writer, WriterError,
};
use crate::backend::sqlite::partition::{self, Partition};
use crate::backend::sqlite::stock::{self, ReserveOutcome, StockLevel};
use crate::blocking::Blocking;
use crate::books::BooksCell;
use crate::clock::{Clock, UnixMs};
use crate::core::state::OrderState;
pub use crate::core::stock::ProductSeed;
use crate::core::stock::{check_adjustment, check_seeds};
use crate::error::StoreError;
use crate::limits::{DB_FILE_NAME, PASS_ROWS_MAX, SQLITE_BUSY_TIMEOUT_MS, STOCK_UNITS_MAX};
use crate::metrics::Metrics;

pub struct Store {
    /// Declared first so it is dropped first: it drains its queue and
    /// commits before the reader closes.
    writer: Writer,
    reader: Mutex<Connection>,
    data_dir: PathBuf,
    metrics: Arc<Metrics>,
    /// Stock and order counts as of the last commit (the writer publishes
    /// them).
    books: Arc<BooksCell>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("data_dir", &self.data_dir)
            .finish_non_exhaustive()
    }
}

/// Prepared statements a connection keeps: above the number of distinct
/// statements the crate runs on one connection, so none is parsed twice.
pub(crate) const STATEMENT_CACHE_CAPACITY: usize = 256;

/// Opens a read-write connection with the durability settings every writer
/// must share.
pub(crate) fn open_connection(db_path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(db_path)?;
    conn.busy_timeout(Duration::from_millis(SQLITE_BUSY_TIMEOUT_MS))?;
    // journal_mode answers with a row, so it is a query, not an execute.
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::InvalidArgument(format!(
            "{} cannot use WAL (journal_mode={mode})",
            db_path.display()
        )));
    }
    // temp_store=MEMORY: the group commit runs each job in a SAVEPOINT,
    // and SQLite keeps a savepoint's sub-journal (the first image of each
    // page it changes) in a temp file otherwise — a file created, written
    // page by page and deleted for every batch: ~90 pwrite calls per
    // confirmed checkout in /var/tmp, measured. Nothing in it is durable
    // (a crash rolls the open transaction back from the WAL, not from it);
    // its size is bounded by the pages one batch touches.
    conn.execute_batch(
        "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY;",
    )?;
    // rusqlite's statement cache holds 16 by default and the writer runs
    // more distinct statements than that (a checkout, its settle, the
    // passes): with 16, `prepare_cached` evicted and parsed again on the hot
    // path — 17 % of the writer's CPU in `sqlite3_prepare_v3`, measured.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    Ok(conn)
}

/// Opens a connection that cannot write, for the audit.
pub(crate) fn open_read_only(db_path: &Path) -> Result<Connection, StoreError> {
    if !db_path.exists() {
        return Err(StoreError::InvalidArgument(format!(
            "no database at {}",
            db_path.display()
        )));
    }
    let conn = Connection::open_with_flags(
        db_path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_millis(SQLITE_BUSY_TIMEOUT_MS))?;
    Ok(conn)
}

/// `f` as a writer job: an `Err` undoes its writes (back to its savepoint);
/// `answer` gets its result once the batch's fate is known.
fn run_job<T, E, F>(f: F, answer: impl FnOnce(Result<T, E>) + Send + 'static) -> RunJob
where
    F: FnOnce(&Transaction<'_>, &Metrics) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: From<StoreError> + Send + 'static,
{
    Box::new(move |tx, metrics| {
        let result = f(tx, metrics);
        if result.is_err() {
            tx.prepare_cached("ROLLBACK TO job")?.execute([])?;
        }
        let deliver: Deliver = Box::new(move |fate| {
            answer(match fate {
                Ok(()) => result,
                Err(message) => Err(E::from(StoreError::BatchFailed(message))),
            })
        });
        Ok(deliver)
    })
}

impl Store {
    /// Opens (creating if needed) the store in `data_dir`, with the
    /// default group-commit bounds.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        Self::open_with(data_dir, GroupCommitConfig::default())
    }

    /// Opens the store with explicit group-commit bounds.
    pub fn open_with(data_dir: &Path, group_commit: GroupCommitConfig) -> Result<Self, StoreError> {
        std::fs::create_dir_all(data_dir)?;
        let db_path = data_dir.join(DB_FILE_NAME);
        let mut write_conn = open_connection(&db_path)?;
        crate::backend::sqlite::schema::migrate(&mut write_conn)?;
        crate::backend::sqlite::books::seed(&write_conn)?;
        let reader = open_connection(&db_path)?;
        let metrics = Arc::new(Metrics::default());
        let books = Arc::new(BooksCell::default());
        books.publish(crate::backend::sqlite::books::read(&write_conn)?);
        let writer = Writer::start(
            write_conn,
            group_commit,
            Arc::clone(&metrics),
            Arc::clone(&books),
        )?;
        Ok(Self {
            writer,
            reader: Mutex::new(reader),
            data_dir: data_dir.to_path_buf(),
            metrics,
            books,
        })
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join(DB_FILE_NAME)
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // Reads hold no transaction across a panic; the connection is sound.
        self.reader
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` as one atomic unit on the writer thread and returns once it
    /// is durable. `f` shares its batch's transaction inside its own
    /// SAVEPOINT: an `Err` from `f` undoes exactly its writes. It must not
    /// block or call out (the whole batch waits for it).
    pub(crate) fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&Transaction<'_>, &Metrics) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        Metrics::inc(&self.metrics.durable_writes);
        let (reply, answer) = mpsc::sync_channel::<Result<T, E>>(1);
        let job = run_job(f, move |result| {
            let _ = reply.send(result);
        });
        self.writer
            .run_job(job)
            .map_err(|_| E::from(StoreError::WriterStopped))?;
        answer
            .recv()
            .unwrap_or_else(|_| Err(E::from(StoreError::WriterStopped)))
    }

    /// [`Store::write`] for an async caller: the transaction goes straight
    /// to the writer thread and its answer is awaited, no thread held on
    /// the way (only a full writer queue is waited for on `steps`).
    pub(crate) async fn write_on<T, E, F>(&self, steps: &dyn Blocking, f: F) -> Result<T, E>
    where
        F: FnOnce(&Transaction<'_>, &Metrics) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        Metrics::inc(&self.metrics.durable_writes);
        let (reply, answer) = tokio::sync::oneshot::channel::<Result<T, E>>();
        let job = run_job(f, move |result| {
            let _ = reply.send(result);
        });
        self.writer
            .run_job_on(steps, job)
            .await
            .map_err(|_| E::from(StoreError::WriterStopped))?;
        answer
            .await
            .unwrap_or_else(|_| Err(E::from(StoreError::WriterStopped)))
    }

    /// Hot path: queues a hold (no order row) for the next batch, waiting
    /// while the queue is full. The answer arrives once it is durable.
    pub fn submit_reservation(&self, request: ReserveRequest) -> Result<Pending, WriterError> {
        self.writer.submit(request)
    }

    /// Like [`Store::submit_reservation`] but refuses at once with
    /// `Overloaded` when the queue is full (for async callers).
    pub fn try_submit_reservation(&self, request: ReserveRequest) -> Result<Pending, WriterError> {
        self.writer.try_submit(request)
    }

    /// Submits a hold and waits until it is durable.
    pub fn reserve(&self, request: ReserveRequest) -> Result<ReserveOutcome, WriterError> {
        self.writer.submit(request)?.wait()
    }

    /// Runs `f` on the connection for reads.
    pub(crate) fn read<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        f(&self.lock())
    }

    /// Seeds SKUs not seen before; returns how many were new. A SKU already
    /// stored keeps its counts (only `adjust` changes them) but takes the
    /// config's price and TTL.
    pub fn seed_products(&self, products: &[ProductSeed]) -> Result<usize, StoreError> {
        self.seed_products_at(products, crate::clock::SystemClock.now_ms())
    }

    /// [`Store::seed_products`] at `now_ms` (the time its rebalances are
    /// logged with).
    pub fn seed_products_at(
        &self,
        products: &[ProductSeed],
        now_ms: UnixMs,
    ) -> Result<usize, StoreError> {
        Self::check_seeds(products)?;
        let products = products.to_vec();
        self.write(move |tx, metrics| {
            let mut seeded = 0;
            for product in &products {
                let price_cents = i64::try_from(product.price_cents).map_err(|_| {
                    StoreError::InvalidArgument(format!("price of {} too large", product.sku))
                })?;
                // A new SKU starts empty with one empty partition; its
                // units arrive through the partition (whose trigger keeps
                // the `stock` row the sum) and are then spread.
                let new = tx.execute(
                    "INSERT INTO stock (sku, total, available, reserved, committed, price_cents, reservation_ttl_ms)
                     VALUES (?1, 0, 0, 0, 0, ?2, ?3)
                     ON CONFLICT (sku) DO NOTHING",
                    params![product.sku, price_cents, product.reservation_ttl_ms],
                )?;
                if new == 1 {
                    tx.execute(
                        "INSERT INTO stock_partitions (sku, part, share, available, reserved, committed)
                         VALUES (?1, 0, ?2, ?2, 0, 0)",
                        params![product.sku, product.total],
                    )?;
                }
                seeded += new;
                tx.execute(
                    "UPDATE stock SET price_cents = ?2, reservation_ttl_ms = ?3 WHERE sku = ?1",
                    params![product.sku, price_cents, product.reservation_ttl_ms],
                )?;
                partition::set_count(tx, &product.sku, product.partitions, now_ms)?;
                stock::verify(tx, &product.sku, metrics)?;
            }
            Ok(seeded)
        })
    }

    /// What [`Store::seed_products`] would refuse before writing anything,
    /// without touching the store: a reload checks its seeds with this
    /// before any of its steps changes the running state.
    pub fn check_seeds(products: &[ProductSeed]) -> Result<(), StoreError> {
        check_seeds(products)
    }

    /// Whether an adjustment's `delta` and `reason` may be applied at all
    /// (both back ends check it before writing).
    pub fn check_adjustment(delta: i64, reason: &str) -> Result<(), StoreError> {
        check_adjustment(delta, reason)
    }

    /// Changes a SKU's stock by `delta` units (added to or taken from
    /// `available` and `total`), recorded with `reason`. Taking more than is
    /// available is refused: held and sold units are not the operator's.
    pub fn adjust(
        &self,
        sku: &str,
        delta: i64,
        reason: &str,
        now_ms: UnixMs,
    ) -> Result<StockLevel, StoreError> {
        Self::check_adjustment(delta, reason)?;
        let (sku, reason) = (sku.to_owned(), reason.to_owned());
        self.write(move |tx, metrics| {
            let sku = sku.as_str();
            let before = stock::load(tx, sku)?;
            if before.total + delta > STOCK_UNITS_MAX {
                return Err(StoreError::InvalidArgument(format!(
                    "total of {sku} would exceed {STOCK_UNITS_MAX} units"
                )));
            }
            if !partition::adjust(tx, sku, delta, now_ms)? {
                return Err(StoreError::InvalidArgument(format!(
                    "cannot remove {} units from {sku}: only {} available",
                    -delta, before.available
                )));
            }
            tx.execute(
                "INSERT INTO adjustments (sku, delta, reason, at_ms) VALUES (?1, ?2, ?3, ?4)",
                params![sku, delta, reason, now_ms],
            )?;
            stock::verify(tx, sku, metrics)
        })
    }

    /// Rewrites the one row of `write_probe` through the writer and waits
    /// until it is durable: the readiness probe's "can the store be
    /// written" (a full disk, a lost lock or a dead writer all fail it).
    pub fn probe_write(&self, now_ms: UnixMs) -> Result<(), StoreError> {
        self.write(move |tx, _| {
            tx.prepare_cached(
                "INSERT INTO write_probe (id, at_ms) VALUES (1, ?1)
                 ON CONFLICT (id) DO UPDATE SET at_ms = excluded.at_ms",
            )?
            .execute(params![now_ms])?;
            Ok(())
        })
    }

    /// Every partition of `sku`, live and retired, read from the database.
    pub fn partitions(&self, sku: &str) -> Result<Vec<Partition>, StoreError> {
        self.read(|conn| {
            partition::live_count(conn, sku)?;
            partition::load(conn, sku)
        })
    }

    /// Evens out `sku`'s free units over its partitions (an operator's or
    /// the reconciler's explicit rebalance), each move logged. Returns the
    /// units moved.
    pub fn rebalance(&self, sku: &str, now_ms: UnixMs) -> Result<i64, StoreError> {
        let sku = sku.to_owned();
        self.write(move |tx, metrics| {
            let moved = partition::rebalance(tx, &sku, "rebalance", now_ms)?;
            stock::verify(tx, &sku, metrics)?;
            Ok(moved)
        })
    }

    /// Stock and order counts as of the last commit, from memory.
    pub fn books(&self) -> Arc<crate::books::Books> {
        self.books.get()
    }

    /// Every SKU's counts, read from the database.
    pub fn inventory(&self) -> Result<Vec<StockLevel>, StoreError> {
        self.read(stock::load_all)
    }

    pub fn stock(&self, sku: &str) -> Result<StockLevel, StoreError> {
        self.read(|conn| stock::load(conn, sku))
    }

    /// Orders per state (`/admin/state` `orders`), every state listed.
    pub fn order_counts(&self) -> Result<Vec<(OrderState, u64)>, StoreError> {
        self.read(|conn| {
            let mut counts: Vec<(OrderState, u64)> =
                OrderState::ALL.iter().map(|state| (*state, 0)).collect();
            let mut stmt = conn.prepare("SELECT state, COUNT(*) FROM orders GROUP BY state")?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let name: String = row.get(0)?;
                let count: i64 = row.get(1)?;
                let state = OrderState::parse(&name).ok_or_else(|| StoreError::Corrupt {
                    table: "orders",
                    detail: format!("unknown state {name:?}"),
                })?;
                if let Some(slot) = counts.iter_mut().find(|(s, _)| *s == state) {
                    slot.1 = u64::try_from(count).unwrap_or(0);
                }
            }
            Ok(counts)
        })
    }

    /// Age of the oldest hold still counted as reserved
    /// (`sluice_reservation_age_seconds`), 0 when nothing is held.
    pub fn oldest_hold_age_ms(&self, now_ms: UnixMs) -> Result<i64, StoreError> {
        self.read(|conn| {
            let oldest: Option<i64> = conn.query_row(
                "SELECT MIN(created_at_ms) FROM reservations WHERE state = 'held'",
                [],
                |row| row.get(0),
            )?;
            Ok(oldest.map_or(0, |at_ms| now_ms.saturating_sub(at_ms).max(0)))
        })
    }

    /// Outbox events not yet acknowledged by a sink (`sluice_outbox_pending`).
    pub fn outbox_pending(&self) -> Result<u64, StoreError> {
        self.read(|conn| {
            let count: i64 = conn.query_row(
                "SELECT COUNT(*) FROM outbox WHERE published_at_ms IS NULL",
                [],
                |row| row.get(0),
            )?;
            Ok(u64::try_from(count).unwrap_or(0))
        })
    }

    /// Age of the oldest unpublished outbox event (`sluice_outbox_lag_seconds`),
    /// 0 when nothing is pending.
    pub fn outbox_lag_ms(&self, now_ms: UnixMs) -> Result<i64, StoreError> {
        self.read(|conn| {
            let oldest: Option<i64> = conn.query_row(
                "SELECT MIN(created_at_ms) FROM outbox WHERE published_at_ms IS NULL",
                [],
                |row| row.get(0),
            )?;
            Ok(oldest.map_or(0, |at_ms| now_ms.saturating_sub(at_ms).max(0)))
        })
    }

    /// Every payment attempt of `order_id`, oldest first.
    pub fn payment_attempts(&self, order_id: &str) -> Result<Vec<Attempt>, StoreError> {
        self.read(|conn| attempt::load_for_order(conn, order_id))
    }

    /// Compensations past their budget that have not succeeded, oldest
    /// first, at most `limit` (what an operator looks at).
    pub fn stuck_compensations(&self, limit: usize) -> Result<Vec<Attempt>, StoreError> {
        self.read(|conn| attempt::load_stuck(conn, limit.clamp(1, PASS_ROWS_MAX)))
    }

    /// The price and reservation TTL configured for `sku`.
    pub(crate) fn product_terms(conn: &Connection, sku: &str) -> Result<(i64, i64), StoreError> {
        conn.prepare_cached("SELECT price_cents, reservation_ttl_ms FROM stock WHERE sku = ?1")?
            .query_row([sku], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?
            .ok_or_else(|| StoreError::UnknownSku(sku.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The durability the benchmark figures rely on: WAL and full sync on
    /// every connection this crate opens for writing.
    #[test]
    fn connections_are_wal_with_full_sync() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_connection(&dir.path().join(DB_FILE_NAME)).unwrap();
        let mode: String = conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        let synchronous: i64 = conn
            .pragma_query_value(None, "synchronous", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        assert_eq!(synchronous, 2, "2 is FULL");
        let foreign_keys: i64 = conn
            .pragma_query_value(None, "foreign_keys", |r| r.get(0))
            .unwrap();
        assert_eq!(foreign_keys, 1);
        let temp_store: i64 = conn
            .pragma_query_value(None, "temp_store", |r| r.get(0))
            .unwrap();
        assert_eq!(
            temp_store, 2,
            "2 is MEMORY: savepoint sub-journals off disk"
        );
    }
}
