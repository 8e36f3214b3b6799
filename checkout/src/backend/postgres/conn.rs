//! A pooled connection and the statements it prepared: each SQL text is
//! prepared once per connection (Parse/Describe, one round trip) and from
//! then on only bound and executed (one round trip), instead of both for
//! every statement run.
//!
//! Every query of this back end goes through [`Db`], implemented by
//! [`Conn`] (autocommit reads) and [`Tx`] (a transaction or savepoint on
//! one, which reaches the connection's cache: a `postgres::Transaction`
//! borrows the client, so `Tx` carries the cache beside it). The SQL is
//! `&'static str`, so the cache holds at most the statements written in
//! this back end's source (about eighty): it needs no eviction for size.
//!
//! A cached statement can go stale: a migration that changes what a
//! statement returns makes the server refuse the old plan ("cached plan
//! must not change result type", 0A000), and a session reset (`DISCARD
//! ALL`) forgets prepared statements (26000). Either evicts the statement;
//! outside a transaction the call is retried once, prepared anew; inside
//! one the server has aborted the transaction, so the error is
//! [`Retryable`](super::Retryable) and the whole transaction runs again,
//! as after a deadlock. Preparation itself is not transactional: a
//! statement prepared in a transaction that rolls back stays valid.
//!
//! Behind a transaction pooler that cannot carry prepared statements
//! (PgBouncer in transaction mode before 1.21, or without
//! `max_prepared_statements`), a statement kept past its transaction can
//! be bound on another server session, where another gateway prepared
//! other SQL under the same name (the driver names them `s0`, `s1`, … in
//! every process). With `[cluster] postgres_prepared_statements = false`
//! ([`super::PgConfig::prepared_statements`]) nothing is kept: each
//! statement is prepared for its one use and closed after (the driver
//! closes a `Statement` when its last clone drops), and every use is in a
//! transaction: a [`Tx`]'s within it (the Close is sent before the next
//! statement, so before the commit), a [`Conn`]'s autocommit call in a
//! `BEGIN`…`COMMIT` of its own. Parse, bind and close then reach one
//! server session, which a transaction pooler keeps for the transaction.
//! It costs a Parse round trip per statement, and two more (`BEGIN`,
//! `COMMIT`) per autocommit call.
//!
//! Why our own and not a crate: `deadpool-postgres` has
//! `prepare_cached`, but it is async (`tokio-postgres`), and this core is
//! sync on the gateway's bounded blocking pool on purpose (see `mod.rs`);
//! `r2d2_postgres` caches nothing, and r2d2's `CustomizeConnection` cannot
//! hold per-connection state. The cache is a map beside the client in the
//! pooled connection, which `r2d2` already hands out.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, Row, Statement, Transaction};

use crate::core::stock::PartitionMove;

type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

/// The statements one connection prepared, by SQL text.
struct Statements {
    by_sql: HashMap<&'static str, Statement>,
    /// Statements prepared, shared by every connection of a back end.
    prepared: Arc<AtomicU64>,
    /// Whether statements are kept (`PgConfig::prepared_statements`);
    /// false: `by_sql` stays empty, each statement is prepared for one use.
    keep: bool,
}

impl Statements {
    fn new(prepared: Arc<AtomicU64>, keep: bool) -> Self {
        Self {
            by_sql: HashMap::new(),
            prepared,
            keep,
        }
    }

    /// `sql` prepared on this connection, through `prepare` (the client's
    /// or a transaction's: the statement outlives the transaction). Not
    /// kept unless `keep`: the caller's clone is then the only one, and
    /// dropping it closes the statement.
    fn get(
        &mut self,
        sql: &'static str,
        prepare: impl FnOnce(&str) -> Result<Statement, postgres::Error>,
    ) -> Result<Statement, postgres::Error> {
        if let Some(statement) = self.by_sql.get(sql) {
            return Ok(statement.clone());
        }
        let statement = prepare(sql)?;
        self.prepared.fetch_add(1, Ordering::Relaxed);
        if self.keep {
            self.by_sql.insert(sql, statement.clone());
        }
        Ok(statement)
    }

    /// Forgets what `e` says is stale; whether it was. A plan whose result
    /// type changed is this statement's alone; a statement the session no
    /// longer has (26000) means the session lost them all (`DISCARD ALL`, a
    /// pooler's reset), so every one is prepared anew.
    fn evict_if_stale(&mut self, sql: &'static str, e: &postgres::Error) -> bool {
        match staleness(e) {
            Some(Stale::Plan) => {
                self.by_sql.remove(sql);
                true
            }
            Some(Stale::Session) => {
                self.by_sql.clear();
                true
            }
            None => false,
        }
    }
}

/// How a prepared statement went stale.
enum Stale {
    /// Its plan's result type changed (0A000 from the server's
    /// `RevalidateCachedQuery`: the routine, not the message, which the
    /// server translates by its `lc_messages`).
    Plan,
    /// The session no longer has it (26000).
    Session,
}

fn staleness(e: &postgres::Error) -> Option<Stale> {
    let db = e.as_db_error()?;
    if *db.code() == SqlState::INVALID_SQL_STATEMENT_NAME {
        return Some(Stale::Session);
    }
    let plan = *db.code() == SqlState::FEATURE_NOT_SUPPORTED
        && (db.routine() == Some("RevalidateCachedQuery") || db.message().starts_with(STALE_PLAN));
    plan.then_some(Stale::Plan)
}

/// Whether `e` is a prepared statement gone stale (see [`Stale`]).
pub(crate) fn is_stale(e: &postgres::Error) -> bool {
    staleness(e).is_some()
}

/// The server's message (in English) for a cached plan whose result type
/// changed; the routine is what is checked first.
const STALE_PLAN: &str = "cached plan must not change result type";

/// How [`super::pg_err`] marks a stale statement's error, so a
/// transaction that met one runs again ([`super::Retryable`]).
pub(crate) const STALE_MARK: &str = "stale prepared statement";

/// Queries by SQL text, each statement prepared once per connection
/// (the driver's methods of the same names, on a cached statement).
pub(crate) trait Db {
    fn query(&mut self, sql: &'static str, params: Params<'_>)
        -> Result<Vec<Row>, postgres::Error>;
    fn query_one(&mut self, sql: &'static str, params: Params<'_>) -> Result<Row, postgres::Error>;
    fn query_opt(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Option<Row>, postgres::Error>;
    fn execute(&mut self, sql: &'static str, params: Params<'_>) -> Result<u64, postgres::Error>;
}

/// [`Db`] for a type with a `with(sql, |driver, statement| ..)` that runs
/// a driver call on `sql`'s cached statement.
macro_rules! db_through_with {
    ($ty:ty) => {
        impl Db for $ty {
            fn query(
                &mut self,
                sql: &'static str,
                params: Params<'_>,
            ) -> Result<Vec<Row>, postgres::Error> {
                self.with(sql, |driver, statement| driver.query(statement, params))
            }

            fn query_one(
                &mut self,
                sql: &'static str,
                params: Params<'_>,
            ) -> Result<Row, postgres::Error> {
                self.with(sql, |driver, statement| driver.query_one(statement, params))
            }

            fn query_opt(
                &mut self,
                sql: &'static str,
                params: Params<'_>,
            ) -> Result<Option<Row>, postgres::Error> {
                self.with(sql, |driver, statement| driver.query_opt(statement, params))
            }

            fn execute(
                &mut self,
                sql: &'static str,
                params: Params<'_>,
            ) -> Result<u64, postgres::Error> {
                self.with(sql, |driver, statement| driver.execute(statement, params))
            }
        }
    };
}

db_through_with!(Conn);
db_through_with!(Tx<'_>);

/// A pooled client and its prepared statements. One that failed its
/// check-out test is dropped on a thread of its own: the driver's drop
/// waits for the server to close the session, which a cut-off link never
/// does (the thread ends when the socket finally fails, `tcp_user_timeout`
/// or the link coming back).
pub(crate) struct Conn {
    client: Option<Client>,
    statements: Statements,
    /// The hold moves its transaction defers (see [`Tx::defer_hold_moves`]).
    deferred: Option<Vec<PartitionMove>>,
    pub(super) cut_off: bool,
}

impl Conn {
    /// `client` with an empty cache; `prepared` counts what it prepares;
    /// `keep`: whether it keeps them (see the module's doc).
    pub(super) fn new(client: Client, prepared: Arc<AtomicU64>, keep: bool) -> Self {
        Self {
            client: Some(client),
            statements: Statements::new(prepared, keep),
            deferred: None,
            cut_off: false,
        }
    }

    /// The driver's client, for what is not a cached query (simple
    /// queries, migrations, the check-out test).
    pub(super) fn client(&mut self) -> &mut Client {
        self.client.as_mut().expect("a client until dropped")
    }

    pub(super) fn is_closed(&self) -> bool {
        self.client.as_ref().is_none_or(Client::is_closed)
    }

    /// A transaction on this connection that prepares through its cache,
    /// writing its hold moves as they come.
    pub(crate) fn transaction(&mut self) -> Result<Tx<'_>, postgres::Error> {
        let client = self.client.as_mut().expect("a client until dropped");
        // Whatever an earlier transaction deferred and never wrote went
        // with its rollback.
        self.deferred = None;
        Ok(Tx {
            tx: client.transaction()?,
            statements: &mut self.statements,
            deferred: &mut self.deferred,
        })
    }

    /// Runs `run` with `sql`'s statement; a stale one is evicted and the
    /// call made once more, prepared anew (autocommit: nothing aborted).
    /// With statements not kept, in a transaction of its own (see the
    /// module's doc).
    fn with<T>(
        &mut self,
        sql: &'static str,
        mut run: impl FnMut(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        if self.statements.keep {
            return self.with_kept(sql, run);
        }
        let mut first = true;
        loop {
            let client = self.client.as_mut().expect("a client until dropped");
            client.batch_execute("BEGIN")?;
            let done = self
                .statements
                .get(sql, |sql| client.prepare(sql))
                .and_then(|statement| run(client, &statement));
            // The statement dropped: its Close is sent, in the transaction.
            match done {
                Ok(value) => return client.batch_execute("COMMIT").map(|()| value),
                Err(e) => {
                    // The statement's error is the one to answer; a
                    // rollback that fails too leaves a connection the pool
                    // drops.
                    let _ = client.batch_execute("ROLLBACK");
                    if !(first && is_stale(&e)) {
                        return Err(e);
                    }
                    first = false;
                }
            }
        }
    }

    /// [`Self::with`] on a connection that keeps its statements.
    fn with_kept<T>(
        &mut self,
        sql: &'static str,
        mut run: impl FnMut(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        let client = self.client.as_mut().expect("a client until dropped");
        let statement = self.statements.get(sql, |sql| client.prepare(sql))?;
        match run(client, &statement) {
            Err(e) if self.statements.evict_if_stale(sql, &e) => {
                let statement = self.statements.get(sql, |sql| client.prepare(sql))?;
                run(client, &statement)
            }
            done => done,
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        let statements = std::mem::take(&mut self.statements.by_sql);
        if !self.cut_off {
            drop(statements);
            return drop(client);
        }
        let dropped = std::thread::Builder::new()
            .name("pg-cut-off".into())
            .spawn(move || {
                drop(statements);
                drop(client);
            });
        if let Err(e) = dropped {
            tracing::warn!("a cut-off PostgreSQL connection is leaked: {e}");
        }
    }
}

/// A transaction (or savepoint) on a [`Conn`], preparing through its
/// cache. Dropped without [`Tx::commit`], it rolls back.
pub(crate) struct Tx<'a> {
    tx: Transaction<'a>,
    statements: &'a mut Statements,
    /// `Some` while the partition side of hold moves is deferred (shared
    /// with its savepoints).
    deferred: &'a mut Option<Vec<PartitionMove>>,
}

impl Tx<'_> {
    pub(crate) fn commit(self) -> Result<(), postgres::Error> {
        self.tx.commit()
    }

    pub(crate) fn rollback(self) -> Result<(), postgres::Error> {
        self.tx.rollback()
    }

    /// A savepoint in this transaction, sharing its cache.
    pub(crate) fn savepoint(&mut self, name: &str) -> Result<Tx<'_>, postgres::Error> {
        Ok(Tx {
            tx: self.tx.savepoint(name)?,
            statements: &mut *self.statements,
            deferred: &mut *self.deferred,
        })
    }

    /// From now on, the partition side of each hold move (`stock::move_hold`)
    /// is collected instead of written, for [`Tx::take_deferred`] to hand
    /// to `stock::apply_put_off` before the commit: a batch locks its hot
    /// partition rows once, at its end, not from its first capture on.
    pub(super) fn defer_hold_moves(&mut self) {
        *self.deferred = Some(Vec::new());
    }

    /// The hold moves deferred so far, when they are.
    pub(super) fn deferred_hold_moves(&mut self) -> Option<&mut Vec<PartitionMove>> {
        self.deferred.as_mut()
    }

    /// Stops deferring and returns what was deferred.
    pub(super) fn take_deferred(&mut self) -> Vec<PartitionMove> {
        self.deferred.take().unwrap_or_default()
    }

    /// Runs `run` with `sql`'s statement. A stale one is evicted and the
    /// error returned: the server aborted the transaction, which runs
    /// again from the start (`Retryable`).
    fn with<T>(
        &mut self,
        sql: &'static str,
        run: impl FnOnce(&mut Transaction<'_>, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        let tx = &mut self.tx;
        let statement = self.statements.get(sql, |sql| tx.prepare(sql))?;
        run(tx, &statement).inspect_err(|e| {
            self.statements.evict_if_stale(sql, e);
        })
    }
}
