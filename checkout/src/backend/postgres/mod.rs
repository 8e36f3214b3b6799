//! The PostgreSQL back end: one database shared by a fleet of gateways
//! (`[cluster] postgres_url`), behind [`OrderBackend`].
//!
//! Map:
//! - this file: the pool, opening (migrations at start), one transaction
//!   per durable wait, error mapping (unreachable → `Unavailable`, which
//!   the gateway answers `503 store_unavailable`);
//! - `conn`: the pooled connection and the statements it prepared: each
//!   SQL text is prepared once per connection, then only bound and
//!   executed (`Db`, on the connection or a `Tx` on it); a statement gone
//!   stale (a migration, a session reset) is evicted and its call or
//!   transaction run again;
//! - `schema`: numbered migrations recorded in `schema_migrations`;
//! - `stock`: partitions (seed, the conditional take, hold moves,
//!   logged rebalances, planned by `crate::core::partition`) and the
//!   books' sums;
//! - `order`: the order row, its guarded transitions and outbox events;
//! - `checkout`: the idempotent checkout in three transactions, provider
//!   calls between them with no transaction open;
//! - `batch`: group commit for the fleet: a gateway's concurrent checkouts
//!   (their units taken in one conditional UPDATE per SKU per batch) and
//!   provider answers, one transaction and one commit per batch, whose
//!   transaction defers the partition side of its hold moves to its end
//!   (`Tx::defer_hold_moves`);
//! - `settle`: payment attempts and what a definite answer does (the
//!   settlement `crate::core::settle::decide` returns, applied for
//!   checkouts, cancels, webhooks and the reconciler alike), and the drive
//!   that sends an attempt and its follow-ups;
//! - `webhook`: provider events, deduplicated by id in `webhook_events`;
//! - `payments`: the payments reconciler (provider event list, attempts
//!   left pending), leased with `SKIP LOCKED` so it runs once across a
//!   fleet;
//! - `cancel`: cancel and refund, idempotent;
//! - `outbox`: the relay, leased (`SKIP LOCKED`) so it runs once across
//!   a fleet;
//! - `retention`: bounded pruning passes (keys, published events,
//!   webhook ids, ended holds);
//! - `books`: the books, gauges, stuck orders and the readiness write
//!   (on a connection of its own, not the busy pool);
//! - `tally`: counters and operator log lines a transaction decides on,
//!   added to the metrics and the log after its commit (a transaction run
//!   again counts and logs once);
//! - `audit`: the books' checks (`sluice audit`);
//! - `reconcile`: the expiry pass, `FOR UPDATE SKIP LOCKED` so a fleet's
//!   passes split the work instead of repeating it, and the leased
//!   rebalance of partitions whose free units sit badly.
//!
//! The store steps are sync: the gateway runs them on its bounded
//! blocking pool (step 1 and the provider answers through the batch
//! threads, `batch`). The provider seam is async (`PaymentProvider`):
//! a checkout or a cancel ([`OrderBackend::checkout_on`],
//! [`OrderBackend::cancel_on`]) hands its store steps to the caller's
//! blocking threads one by one and awaits its provider calls in between,
//! with no transaction open across them. A confirmed checkout takes
//! three pooled connections (step 1's batch, each answer's batch) and
//! reads nothing on one of its own between them: each transaction reads
//! what the next step needs (`settle::drive_from`). The `postgres` crate
//! is the sync face of `tokio-postgres`, pooled by `r2d2` (whose pooled
//! connection carries its statement cache, `conn`). Not built yet (issue
//! 29 point 3): the checkout's hot path on the async driver
//! (`tokio-postgres`, pipelining, a pool such as `deadpool-postgres`);
//! the hot path and the background passes (reconcilers, outbox relay,
//! retention, books) all run on the sync pools.

mod audit;
mod batch;
mod books;
mod cancel;
mod checkout;
mod conn;
mod order;
mod outbox;
mod payments;
mod reconcile;
mod retention;
mod schema;
mod settle;
mod stock;
mod tally;
mod webhook;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use postgres::NoTls;
use r2d2_postgres::PostgresConnectionManager;

use self::conn::{Conn, Tx};
use crate::backend::pass::PaymentsReconcileOutcome;
use crate::backend::pass::PruneOutcome;
use crate::backend::pass::ReconcileOutcome;
use crate::backend::OrderBackend;
use crate::blocking::{Blocking, Inline};
use crate::books::{Books, Gauges};
use crate::clock::UnixMs;
use crate::core::event::{WebhookEvent, WebhookOutcome};
use crate::core::idempotency::IdempotencyKey;
use crate::core::order::Order;
use crate::core::partition::Partition;
use crate::core::request::{CheckoutRequest, Created, OrderLimits, SubjectOrders};
use crate::core::state::OrderState;
use crate::core::stock::StockLevel;
use crate::core::stock::{check_adjustment, check_seeds, ProductSeed};
use crate::error::{CheckoutError, StoreError};
use crate::http_client::wait;
use crate::metrics::Metrics;
use crate::outbox::{RelayError, RelayOutcome, Sink};
use crate::payment::PaymentProvider;

pub use batch::{
    BatchStats, ANSWER_BATCHERS, BATCH_MAX, BATCH_QUEUE_MAX, BATCH_WAIT, CHECKOUT_BATCHERS,
};
pub use outbox::OUTBOX_LEASE_MS;
pub use schema::SCHEMA_VERSION;

type Pool = r2d2::Pool<Manager>;
type Pooled = r2d2::PooledConnection<Manager>;

/// `r2d2_postgres`'s manager with a bounded check-out test: its own
/// `is_valid` waits for the server without end, so a pool whose idle
/// connections were cut off (a partition that still ACKs, a hung
/// primary) would hang every `get` instead of answering `Unavailable`.
/// Its connections are [`Conn`]s: a client and the statements it
/// prepared.
pub(crate) struct Manager {
    inner: PostgresConnectionManager<NoTls>,
    valid_within: Duration,
    /// Statements prepared on this back end's connections (every pool's).
    prepared: Arc<AtomicU64>,
    /// [`PgConfig::prepared_statements`].
    keep_statements: bool,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = postgres::Error;

    fn connect(&self) -> Result<Conn, postgres::Error> {
        Ok(Conn::new(
            self.inner.connect()?,
            self.prepared.clone(),
            self.keep_statements,
        ))
    }

    fn is_valid(&self, conn: &mut Conn) -> Result<(), postgres::Error> {
        let valid = conn.client().is_valid(self.valid_within);
        if valid.is_err() {
            conn.cut_off = true;
        }
        valid
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.is_closed()
    }
}

/// How to reach the database and how many connections to keep.
#[derive(Clone)]
pub struct PgConfig {
    /// `postgres://…` (a secret: never logged).
    pub url: String,
    /// Connections at most (each is one durable wait in flight).
    pub pool_max: u32,
    /// How long a caller waits for a connection before the store counts as
    /// unavailable (also the TCP connect's bound).
    pub connect_timeout: Duration,
    /// The server's bounds on every pooled session: `statement_timeout`,
    /// `lock_timeout`, `idle_in_transaction_session_timeout`.
    pub timeouts: SessionTimeouts,
    /// Whether each connection keeps the statements it prepared
    /// (`[cluster] postgres_prepared_statements`, default true). False:
    /// each statement is prepared for its one use and closed after, in a
    /// transaction, for a transaction pooler that cannot carry prepared
    /// statements (see `conn`).
    pub prepared_statements: bool,
    /// Threads batching this back end's checkouts
    /// ([`CHECKOUT_BATCHERS`] by default; the benchmarks compare others).
    pub checkout_batchers: usize,
}

/// Server-side bounds set on every pooled connection (startup
/// `options`), and the client's socket bounds. A statement, a lock wait or
/// a transaction left open past them is ended by the server, and the
/// caller gets `Unavailable` (`503 store_unavailable` with `Retry-After`)
/// instead of holding a blocking-pool permit for hours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionTimeouts {
    /// `statement_timeout` (SQLSTATE 57014 when it fires).
    pub statement: Duration,
    /// `lock_timeout` (SQLSTATE 55P03): a row, table or advisory lock
    /// waited for longer than this.
    pub lock: Duration,
    /// `idle_in_transaction_session_timeout`: a session whose client went
    /// quiet inside a transaction is ended and its locks freed.
    pub idle_in_transaction: Duration,
    /// TCP keepalive idle time (and interval); with `tcp_user_timeout`
    /// (Linux), a peer that stopped acknowledging is dropped after about
    /// this plus `user_timeout`.
    pub keepalive: Duration,
    /// `tcp_user_timeout`: sent data left unacknowledged this long closes
    /// the connection.
    pub user_timeout: Duration,
    /// How long the pool's check-out test (`SELECT` of nothing) waits for
    /// the server before the idle connection is dropped.
    pub check_out: Duration,
}

impl Default for SessionTimeouts {
    /// 5 s per statement, 2 s per lock wait, 10 s idle in a transaction,
    /// keepalives every 5 s, 10 s of unacknowledged data, 500 ms for the
    /// check-out test.
    fn default() -> Self {
        Self {
            statement: Duration::from_secs(5),
            lock: Duration::from_secs(2),
            idle_in_transaction: Duration::from_secs(10),
            keepalive: Duration::from_secs(5),
            user_timeout: Duration::from_secs(10),
            check_out: Duration::from_millis(500),
        }
    }
}

impl SessionTimeouts {
    /// The startup `options` that set the server-side bounds.
    fn options(&self) -> String {
        format!(
            "-c statement_timeout={} -c lock_timeout={} -c idle_in_transaction_session_timeout={}",
            self.statement.as_millis(),
            self.lock.as_millis(),
            self.idle_in_transaction.as_millis()
        )
    }

    /// `pg` with these bounds, and `connect_timeout` for the TCP connect
    /// unless the URL gives one.
    fn apply(&self, pg: &mut postgres::Config, connect_timeout: Duration) {
        let options = match pg.get_options() {
            Some(given) if !given.is_empty() => format!("{given} {}", self.options()),
            _ => self.options(),
        };
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(connect_timeout);
        }
        pg.options(&options)
            .keepalives(true)
            .keepalives_idle(self.keepalive)
            .keepalives_interval(self.keepalive)
            .keepalives_retries(2)
            .tcp_user_timeout(self.user_timeout);
    }
}

impl std::fmt::Debug for PgConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgConfig")
            .field("url", &"<secret>")
            .field("pool_max", &self.pool_max)
            .field("connect_timeout", &self.connect_timeout)
            .field("timeouts", &self.timeouts)
            .field("prepared_statements", &self.prepared_statements)
            .field("checkout_batchers", &self.checkout_batchers)
            .finish()
    }
}

impl PgConfig {
    /// 16 connections, 2 s to get one, [`SessionTimeouts::default`],
    /// statements kept, [`CHECKOUT_BATCHERS`] checkout batchers.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            pool_max: 16,
            connect_timeout: Duration::from_secs(2),
            timeouts: SessionTimeouts::default(),
            prepared_statements: true,
            checkout_batchers: batch::CHECKOUT_BATCHERS,
        }
    }
}

/// Stock, orders, holds, attempts and outbox in one PostgreSQL database.
/// Cheap to clone: every part is shared (an async checkout's store steps
/// each take a clone to their thread).
#[derive(Clone)]
pub struct PgBackend {
    pool: Pool,
    /// A few connections of their own for recording provider answers, so
    /// a rush of new checkouts holding `pool` cannot starve them.
    answers: Pool,
    /// One connection of its own for the readiness probe, so a sale
    /// keeping `pool` busy does not read as a store that cannot be
    /// written.
    probe: Pool,
    /// Step 1 of checkouts, batched (on `pool`).
    checkouts: Arc<batch::Batcher>,
    /// Provider answers settled, batched (on `answers`).
    settles: Arc<batch::Batcher>,
    batch_counters: Arc<batch::Counters>,
    provider: Arc<dyn PaymentProvider>,
    durable_writes: Arc<AtomicU64>,
    /// Statements prepared on this back end's connections.
    prepared: Arc<AtomicU64>,
    /// Counters the gateway exports (webhooks, compensations, …).
    metrics: Arc<Metrics>,
    /// This back end's name in outbox leases (one per process).
    node: String,
}

/// Whether a SQLSTATE says the server could not do it now, though the
/// statement is sound: 08 connection exception; 57P operator intervention
/// (shutdown, crash recovery, cannot connect now); 57014 a statement
/// cancelled (`statement_timeout`); 55P03 a lock not granted within
/// `lock_timeout`; 25006 a read-only transaction (a standby, or a primary
/// demoted mid-failover); 53 insufficient resources (too many
/// connections, disk or memory full).
pub(crate) fn unavailable_code(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("57P")
        || code.starts_with("53")
        || matches!(code, "57014" | "55P03" | "25006")
}

/// Maps a driver error: a refused statement is `Postgres`; a connection
/// that cannot be made, was lost or whose server is shutting down, and a
/// statement the server could not run in time or now
/// ([`unavailable_code`]), is `Unavailable`.
pub(crate) fn pg_err(e: postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(db) if unavailable_code(db.code().code()) => {
            StoreError::Unavailable(format!("{}: {}", db.code().code(), db.message()))
        }
        Some(db) if conn::is_stale(&e) => StoreError::Postgres(format!(
            "{}: {}: {}",
            db.code().code(),
            conn::STALE_MARK,
            db.message()
        )),
        Some(db) => StoreError::Postgres(format!("{}: {}", db.code().code(), db.message())),
        None if e.is_closed() || io_failure(&e) => StoreError::Unavailable(e.to_string()),
        // Client-side (a value that does not fit its column): a bug.
        None => StoreError::Postgres(e.to_string()),
    }
}

/// Whether the driver error comes from the socket (reset, refused, EOF).
fn io_failure(e: &postgres::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// How long the record of a provider's answer waits for a pooled
/// connection, at most (see [`PgBackend::write_answer_batched`]).
pub const ANSWER_CONNECT_WAIT: Duration = Duration::from_secs(10);
/// Connections kept for recording provider answers, besides
/// [`PgConfig::pool_max`].
pub const ANSWER_POOL_MAX: u32 = 8;

/// Runs of one transaction, at most, when the server aborts it as a
/// deadlock victim or a serialisation failure (SQLSTATE 40P01, 40001), or
/// for a cached statement gone stale (see `conn`).
pub const TX_TRIES_MAX: u32 = 5;

/// Errors after which running the whole transaction again is safe and
/// expected to succeed.
pub(crate) trait Retryable {
    fn is_retryable(&self) -> bool;
}

impl Retryable for StoreError {
    /// A deadlock victim or serialisation failure, or a cached statement
    /// gone stale (`conn` evicted it: the next run prepares it anew).
    fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Postgres(m) if m.starts_with("40P01")
            || m.starts_with("40001"))
            || is_stale_statement(self)
    }
}

/// Whether `e` is the error of a cached statement gone stale (see
/// `conn`), which [`Retryable`] runs again like a deadlock victim.
pub(crate) fn is_stale_statement(e: &StoreError) -> bool {
    matches!(e, StoreError::Postgres(m) if m.split(": ").nth(1) == Some(conn::STALE_MARK))
}

impl Retryable for CheckoutError {
    fn is_retryable(&self) -> bool {
        matches!(self, CheckoutError::Store(e) if e.is_retryable())
    }
}

/// Runs `f` in one transaction on `client` and commits it (see
/// [`PgBackend::write`]), counting the commit in `durable_writes`.
pub(crate) fn write_tx<T, E>(
    client: &mut Pooled,
    durable_writes: &AtomicU64,
    mut f: impl FnMut(&mut Tx<'_>) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<StoreError> + Retryable,
{
    let mut tries = 0;
    loop {
        tries += 1;
        let mut tx = client.transaction().map_err(pg_err)?;
        let value = match f(&mut tx) {
            Ok(value) => value,
            Err(e) if e.is_retryable() && tries < TX_TRIES_MAX => continue,
            Err(e) => return Err(e),
        };
        match tx.commit().map_err(pg_err) {
            Ok(()) => {}
            Err(e) if e.is_retryable() && tries < TX_TRIES_MAX => continue,
            Err(e) => return Err(e.into()),
        }
        durable_writes.fetch_add(1, Ordering::Relaxed);
        return Ok(value);
    }
}

fn pool_err(e: r2d2::Error) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

impl PgBackend {
    /// Connects, applies the migrations the database lacks, and keeps a
    /// pool. Fails with `Unavailable` when the server cannot be reached.
    pub fn open(config: &PgConfig, provider: Arc<dyn PaymentProvider>) -> Result<Self, StoreError> {
        let mut pg: postgres::Config = config
            .url
            .parse()
            .map_err(|_| StoreError::InvalidArgument("postgres_url is not a valid URL".into()))?;
        config.timeouts.apply(&mut pg, config.connect_timeout);
        let prepared = Arc::new(AtomicU64::new(0));
        let manager = |pg: postgres::Config| Manager {
            inner: PostgresConnectionManager::new(pg, NoTls),
            valid_within: config.timeouts.check_out,
            prepared: prepared.clone(),
            keep_statements: config.prepared_statements,
        };
        let pool = r2d2::Pool::builder()
            .max_size(config.pool_max.max(1))
            .min_idle(Some(0))
            .connection_timeout(config.connect_timeout)
            .build_unchecked(manager(pg.clone()));
        let answers = r2d2::Pool::builder()
            .max_size(ANSWER_POOL_MAX)
            .min_idle(Some(0))
            .connection_timeout(ANSWER_CONNECT_WAIT)
            .build_unchecked(manager(pg.clone()));
        let probe = r2d2::Pool::builder()
            .max_size(1)
            .min_idle(Some(0))
            .connection_timeout(config.connect_timeout)
            .build_unchecked(manager(pg));
        let durable_writes = Arc::new(AtomicU64::new(0));
        let metrics = Arc::new(Metrics::default());
        let batch_counters = Arc::new(batch::Counters::default());
        let shared = |pool: &Pool| batch::Shared {
            pool: pool.clone(),
            durable_writes: durable_writes.clone(),
            counters: batch_counters.clone(),
            metrics: metrics.clone(),
        };
        let checkouts = batch::Batcher::start(
            "sluice-pg-checkouts",
            shared(&pool),
            config.checkout_batchers.max(1),
        )?;
        let settles = batch::Batcher::start(
            "sluice-pg-answers",
            shared(&answers),
            batch::ANSWER_BATCHERS,
        )?;
        let backend = Self {
            pool,
            answers,
            probe,
            checkouts: Arc::new(checkouts),
            settles: Arc::new(settles),
            batch_counters,
            provider,
            durable_writes,
            prepared,
            metrics,
            node: format!("node_{}", uuid::Uuid::new_v4().simple()),
        };
        let mut client = backend.pool.get().map_err(pool_err)?;
        schema::migrate(client.client())?;
        Ok(backend)
    }

    /// `sluice audit`: the books' checks on the database at `config.url`,
    /// read only (nothing is migrated); a schema of another version than
    /// this binary's is refused.
    pub fn audit(config: &PgConfig, now_ms: UnixMs) -> Result<Vec<String>, StoreError> {
        let mut pg: postgres::Config = config
            .url
            .parse()
            .map_err(|_| StoreError::InvalidArgument("postgres_url is not a valid URL".into()))?;
        config.timeouts.apply(&mut pg, config.connect_timeout);
        let mut client = Conn::new(
            pg.connect(NoTls).map_err(pg_err)?,
            Arc::default(),
            config.prepared_statements,
        );
        // The checks scan every hold: an operator's command, not bound by
        // a shopper's statement timeout.
        client
            .client()
            .batch_execute("SET statement_timeout = 0")
            .map_err(pg_err)?;
        let version = schema::version(client.client())?;
        if version != SCHEMA_VERSION {
            return Err(StoreError::InvalidArgument(format!(
                "the PostgreSQL schema is at version {version}, this binary's is {SCHEMA_VERSION}"
            )));
        }
        audit::check_books(&mut client, now_ms)
    }

    /// The schema version stored in the database.
    pub fn schema_version(&self) -> Result<i32, StoreError> {
        let mut client = self.pool.get().map_err(pool_err)?;
        schema::version(client.client())
    }

    /// Runs `f` in one transaction and commits it: one durable wait. An
    /// `Err` from `f` rolls everything back; one the server chose as a
    /// deadlock victim or serialisation failure is run again, from the
    /// start, up to [`TX_TRIES_MAX`] times. No provider call may happen
    /// inside `f`: the rows it locks stay locked until the commit.
    pub(crate) fn write<T, E>(&self, f: impl FnMut(&mut Tx<'_>) -> Result<T, E>) -> Result<T, E>
    where
        E: From<StoreError> + Retryable,
    {
        let client = self.pool.get().map_err(pool_err)?;
        self.write_on(client, f)
    }

    fn write_on<T, E>(
        &self,
        mut client: Pooled,
        f: impl FnMut(&mut Tx<'_>) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<StoreError> + Retryable,
    {
        write_tx(&mut client, &self.durable_writes, f)
    }

    /// Step 1 of a checkout (claim, take, create) in the next batch of
    /// this gateway's checkouts (see `batch`); answered once it committed.
    fn begin_batched(&self, claim: checkout::Claim) -> Result<checkout::Begun, CheckoutError> {
        self.checkouts.checkout(claim)
    }

    /// The record of a provider's answer, in the next batch of answers
    /// (see `batch`): `f` runs in a SAVEPOINT of its own, maybe more than
    /// once. On the answers' own pool ([`ANSWER_POOL_MAX`] connections),
    /// waiting up to [`ANSWER_CONNECT_WAIT`] for one, since the answer is
    /// already given (a pool busy with new checkouts must not leave a paid
    /// order to the payments reconciler).
    fn write_answer_batched<T: Send + 'static>(
        &self,
        f: impl FnMut(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.settles.run(f)
    }

    /// Statements prepared so far on this back end's connections (each
    /// SQL text once per connection, and again after going stale; every
    /// use with [`PgConfig::prepared_statements`] off).
    pub fn statements_prepared(&self) -> u64 {
        self.prepared.load(Ordering::Relaxed)
    }

    /// What the batches did so far (this back end's).
    pub fn batch_stats(&self) -> BatchStats {
        self.batch_counters.stats()
    }

    /// [`Self::read`] on the answers' pool: the reads of a payment under
    /// way (see [`Self::write_answer_batched`]).
    pub(crate) fn read_answer<T>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut client = self.answers.get().map_err(pool_err)?;
        f(&mut client)
    }

    /// Runs `f` on a pooled connection outside any explicit transaction.
    pub(crate) fn read<T>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut client = self.pool.get().map_err(pool_err)?;
        f(&mut client)
    }

    pub(crate) fn provider(&self) -> &dyn PaymentProvider {
        self.provider.as_ref()
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

#[async_trait]
impl OrderBackend for PgBackend {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn seed_products_at(
        &self,
        products: &[ProductSeed],
        now_ms: UnixMs,
    ) -> Result<usize, StoreError> {
        check_seeds(products)?;
        self.write(|tx| stock::seed(tx, products, now_ms))
    }

    fn checkout_within(
        &self,
        subject: &str,
        key: &IdempotencyKey,
        request: &CheckoutRequest,
        limits: OrderLimits,
        now_ms: UnixMs,
    ) -> Result<(Order, Created), CheckoutError> {
        checkout::checkout(self, subject, key, request, limits, true, now_ms)
    }

    async fn checkout_on(
        &self,
        steps: &dyn Blocking,
        subject: &str,
        key: &IdempotencyKey,
        request: &CheckoutRequest,
        limits: OrderLimits,
        now_ms: UnixMs,
    ) -> Result<(Order, Created), CheckoutError> {
        checkout::checkout_on(self, steps, subject, key, request, limits, true, now_ms).await
    }

    fn begin_within(
        &self,
        subject: &str,
        key: &IdempotencyKey,
        request: &CheckoutRequest,
        limits: OrderLimits,
        now_ms: UnixMs,
    ) -> Result<(Order, Created), CheckoutError> {
        checkout::checkout(self, subject, key, request, limits, false, now_ms)
    }

    fn get_order(&self, subject: &str, order_id: &str) -> Result<Order, CheckoutError> {
        match self.read(|client| order::load(client, order_id))? {
            Some(order) if order.subject == subject => Ok(order),
            _ => Err(CheckoutError::NotFound),
        }
    }

    fn cancel(
        &self,
        subject: &str,
        order_id: &str,
        now_ms: UnixMs,
    ) -> Result<Order, CheckoutError> {
        wait(cancel::cancel_on(self, &Inline, subject, order_id, now_ms))
    }

    async fn cancel_on(
        &self,
        steps: &dyn Blocking,
        subject: &str,
        order_id: &str,
        now_ms: UnixMs,
    ) -> Result<Order, CheckoutError> {
        cancel::cancel_on(self, steps, subject, order_id, now_ms).await
    }

    fn subject_orders(&self, subject: &str) -> Result<SubjectOrders, CheckoutError> {
        let (started, open) = self.read(|client| order::subject_orders(client, subject))?;
        Ok(SubjectOrders { started, open })
    }

    fn stock(&self, sku: &str) -> Result<StockLevel, StoreError> {
        self.read(|client| stock::level(client, sku))
    }

    fn partitions(&self, sku: &str) -> Result<Vec<Partition>, StoreError> {
        self.read(|client| stock::partitions(client, sku))
    }

    fn rebalance(&self, sku: &str, now_ms: UnixMs) -> Result<i64, StoreError> {
        self.write(|tx| stock::rebalance(tx, sku, "rebalance", now_ms))
    }

    fn expire_holds(&self, now_ms: UnixMs, limit: usize) -> Result<usize, StoreError> {
        reconcile::expire_holds(self, now_ms, limit)
    }

    fn prune_once(&self, now_ms: UnixMs, limit: usize) -> Result<PruneOutcome, StoreError> {
        retention::prune_once(self, now_ms, limit)
    }

    fn relay_outbox_once(
        &self,
        sink: &mut dyn Sink,
        limit: usize,
        now_ms: UnixMs,
    ) -> Result<RelayOutcome, RelayError> {
        outbox::relay_once(self, sink, limit, now_ms)
    }

    fn order_counts(&self) -> Result<Vec<(OrderState, u64)>, StoreError> {
        self.read(order::counts)
    }

    fn check_books(&self, now_ms: UnixMs) -> Result<Vec<String>, StoreError> {
        self.read(|client| audit::check_books(client, now_ms))
    }

    fn apply_webhook(
        &self,
        event: &WebhookEvent,
        now_ms: UnixMs,
    ) -> Result<WebhookOutcome, StoreError> {
        let (outcome, tally) = self.write(|tx| {
            let mut tally = tally::Tally::default();
            let outcome = webhook::apply_event(tx, &mut tally, event, now_ms)?;
            Ok::<_, StoreError>((outcome, tally))
        })?;
        tally.apply(&self.metrics);
        self.metrics.count_webhook(outcome.result());
        Ok(outcome)
    }

    fn adjust(
        &self,
        sku: &str,
        delta: i64,
        reason: &str,
        now_ms: UnixMs,
    ) -> Result<StockLevel, StoreError> {
        check_adjustment(delta, reason)?;
        self.write(|tx| stock::adjust(tx, sku, delta, reason, now_ms))
    }

    fn reconcile_once(
        &self,
        now_ms: UnixMs,
        stuck_after_ms: i64,
        limit: usize,
    ) -> Result<ReconcileOutcome, StoreError> {
        let expired = self.expire_holds(now_ms, limit)?;
        let pruned = self.prune_once(now_ms, limit)?;
        let rebalanced = reconcile::rebalance_partitions(self, now_ms, limit)?;
        let before = now_ms.saturating_sub(stuck_after_ms);
        let stuck = self.read(|client| books::stuck(client, before))?;
        // Each partition's conservation is a CHECK the database enforces
        // on every write; holds against partitions (a scan of every hold)
        // are `sluice audit`'s, not every pass's.
        Ok(ReconcileOutcome {
            expired,
            rebalanced,
            stuck: stuck.into_iter().filter(|(_, n)| *n > 0).collect(),
            keys_purged: pruned.idempotency_keys,
            pruned,
            ..ReconcileOutcome::default()
        })
    }

    fn reconcile_payments_once(
        &self,
        now_ms: UnixMs,
        limit: usize,
    ) -> Result<PaymentsReconcileOutcome, StoreError> {
        payments::reconcile_payments_once(self, now_ms, limit)
    }

    fn stock_levels(&self) -> Result<Vec<StockLevel>, StoreError> {
        self.read(books::levels)
    }

    fn books_in_memory(&self) -> bool {
        false
    }

    fn books(&self) -> Result<Books, StoreError> {
        self.read(books::books)
    }

    fn gauges(&self, now_ms: UnixMs) -> Result<Gauges, StoreError> {
        self.read(|client| books::gauges(client, now_ms))
    }

    fn probe_write(&self, now_ms: UnixMs) -> Result<(), StoreError> {
        let client = self.probe.get().map_err(pool_err)?;
        self.write_on(client, |tx| books::probe(tx, now_ms))
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn durable_writes(&self) -> u64 {
        self.durable_writes.load(Ordering::Relaxed)
    }
}
