//! What the PostgreSQL back end sends per confirmed checkout, counted by
//! the server itself: a throwaway cluster of its own whose test database
//! logs every protocol step (`log_min_duration_statement = 0` logs each
//! extended-protocol `parse`, `bind` and `execute`, and each simple-query
//! `statement`). The sync driver waits for the answer to each Parse (the
//! statement's description) and to each Bind/Execute (its rows), and to
//! each simple query (`BEGIN`, `SAVEPOINT`, `COMMIT`, the pool's check-out
//! test), so a checkout's serial round trips are `parse + execute +
//! statement` lines.
//!
//! Run with `--nocapture` to see the counts (`docs/benchmarks.md`,
//! issue 11).

mod common;
#[allow(dead_code)]
#[path = "common/pg.rs"]
mod pg;

use std::collections::HashMap;
use std::sync::Arc;

use common::{key, request, PRICE_CENTS, T0_MS, TTL_MS};
use sluice_checkout::{
    OrderBackend, OrderLimits, OrderState, PgBackend, PgConfig, ProductSeed, SimulatedProvider,
    PM_OK,
};

/// Confirmed checkouts before counting (each pooled connection the
/// batches use prepares its statements during these).
const WARM_UP: usize = 5;
/// Confirmed checkouts counted.
const COUNTED: usize = 20;

/// The log's entries: a line that starts with the timestamp, and the
/// continuation lines of its statement's text.
fn entries(log: &str) -> Vec<String> {
    let mut entries: Vec<String> = Vec::new();
    for line in log.lines() {
        let starts = line.len() > 4 && line[..4].bytes().all(|b| b.is_ascii_digit());
        match entries.last_mut() {
            Some(entry) if !starts => {
                entry.push('\n');
                entry.push_str(line);
            }
            _ => entries.push(line.to_owned()),
        }
    }
    entries
}

/// One logged protocol step: the server process (one per connection,
/// `[pid]` in the default `log_line_prefix`), its kind and its SQL.
fn step(entry: &str) -> Option<(&str, &str, &str)> {
    let pid = entry.split_once('[')?.1.split_once(']')?.0;
    let (_, step) = entry.split_once("LOG:  duration: ")?;
    let (_, step) = step.split_once(" ms  ")?;
    if let Some(sql) = step.strip_prefix("statement: ") {
        return Some((pid, "statement", sql));
    }
    let (kind, rest) = step.split_once(' ')?;
    // `parse s12: SQL`: the statement's name differs each time it is
    // prepared; the SQL does not.
    let (_, sql) = rest.split_once(": ")?;
    Some((pid, kind, sql))
}

/// Protocol steps the server logged, by kind.
#[derive(Debug, Default, PartialEq, Eq)]
struct Steps {
    parse: usize,
    bind: usize,
    execute: usize,
    statement: usize,
}

impl Steps {
    fn of(log: &str) -> Self {
        let mut steps = Self::default();
        for entry in entries(log) {
            match step(&entry).map(|(_, kind, _)| kind) {
                Some("parse") => steps.parse += 1,
                Some("bind") => steps.bind += 1,
                Some("execute") => steps.execute += 1,
                Some("statement") => steps.statement += 1,
                _ => {}
            }
        }
        steps
    }

    /// The steps the client waits for, one round trip each.
    fn round_trips(&self) -> usize {
        self.parse + self.execute + self.statement
    }
}

/// Each protocol step the client waits for (bind is paired with its
/// execute), by kind and the first words of its SQL, with how often.
fn per_statement(log: &str) -> Vec<(String, usize)> {
    let mut by: HashMap<String, usize> = HashMap::new();
    for entry in entries(log) {
        if let Some((_, kind, sql)) = step(&entry) {
            if kind != "bind" {
                let sql: String = sql.split_whitespace().collect::<Vec<_>>().join(" ");
                let head: String = sql.chars().take(100).collect();
                *by.entry(format!("{kind}: {head}")).or_default() += 1;
            }
        }
    }
    let mut by: Vec<(String, usize)> = by.into_iter().collect();
    by.sort();
    by
}

/// SQL texts prepared more than once on one connection, with how often.
fn prepared_again(log: &str) -> Vec<(String, usize)> {
    let mut times: HashMap<(String, String), usize> = HashMap::new();
    for entry in entries(log) {
        if let Some((pid, "parse", sql)) = step(&entry) {
            *times.entry((pid.to_owned(), sql.to_owned())).or_default() += 1;
        }
    }
    let mut again: Vec<(String, usize)> = times
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|((_, sql), n)| (sql, n))
        .collect();
    again.sort();
    again
}

fn confirmed_checkout(backend: &PgBackend, i: usize) -> String {
    let (order, _) = backend
        .checkout_within(
            &format!("buyer-{i}"),
            &key(&format!("key-{i:08}")),
            &request("hot", 1, PM_OK),
            OrderLimits::UNLIMITED,
            T0_MS,
        )
        .expect("checkout");
    assert_eq!(order.state, OrderState::Confirmed, "checkout {i}");
    order.order_id
}

/// A cluster of its own whose test database logs every protocol step,
/// and a back end on it with one SKU of 1,000 units; `keep`:
/// [`PgConfig::prepared_statements`].
fn logged_sale(keep: bool) -> (pg::ThrowawayPg, PgBackend, String) {
    let cluster = pg::own();
    let url = cluster.create_database();
    let database = url
        .rsplit('/')
        .next()
        .and_then(|tail| tail.split('?').next())
        .expect("a database in the URL");
    cluster.psql(&format!(
        "ALTER DATABASE {database} SET log_min_duration_statement = 0"
    ));
    let backend = PgBackend::open(
        &PgConfig {
            prepared_statements: keep,
            ..PgConfig::new(url.clone())
        },
        Arc::new(SimulatedProvider::default()),
    )
    .expect("open");
    backend
        .seed_products_at(
            &[ProductSeed {
                sku: "hot".into(),
                total: 1_000,
                price_cents: PRICE_CENTS,
                reservation_ttl_ms: TTL_MS,
                partitions: 1,
            }],
            T0_MS,
        )
        .expect("seed");
    (cluster, backend, url)
}

#[test]
fn each_connection_prepares_a_statement_once_and_then_only_binds_it() {
    let (cluster, backend, _) = logged_sale(true);
    // The migrations at open ran once, unprepared (schema.rs).
    let opened = cluster.log().len();
    for i in 0..WARM_UP {
        confirmed_checkout(&backend, i);
    }
    let before = cluster.log().len();
    for i in WARM_UP..WARM_UP + COUNTED {
        confirmed_checkout(&backend, i);
    }
    let log = cluster.log();
    let steps = Steps::of(&log[before..]);
    // What each statement costs per checkout (seen with --nocapture).
    for (step, n) in per_statement(&log[before..]) {
        println!("{:5.1} {step}", n as f64 / COUNTED as f64);
    }
    println!(
        "{COUNTED} confirmed checkouts, one at a time, after {WARM_UP}: {steps:?}; \
         per checkout: {:.1} round trips, {:.1} parses, {:.1} executes, {:.1} simple queries",
        steps.round_trips() as f64 / COUNTED as f64,
        steps.parse as f64 / COUNTED as f64,
        steps.execute as f64 / COUNTED as f64,
        steps.statement as f64 / COUNTED as f64,
    );
    assert!(
        steps.execute >= COUNTED,
        "the log counts executes: {steps:?}"
    );
    // A pool may open another connection now and then (which prepares
    // its own): what must not happen is a connection preparing a
    // statement it already has.
    let again = prepared_again(&log[opened..]);
    assert!(
        again.is_empty(),
        "prepared again on one connection: {again:#?}"
    );
    assert!(
        steps.parse * 4 < COUNTED,
        "warm connections prepare (almost) nothing: {steps:?}"
    );
    // docs/orders.md states the count; a change that adds round trips to
    // every checkout shows here (a pool opening a connection now and then
    // adds a few parses, hence the half).
    assert!(
        steps.round_trips() * 2 <= (2 * ROUND_TRIPS_MAX + 1) * COUNTED,
        "more than {ROUND_TRIPS_MAX} round trips per confirmed checkout: {steps:?}"
    );
}

/// Round trips per confirmed checkout, one at a time on one partition,
/// warm connections (docs/orders.md).
const ROUND_TRIPS_MAX: usize = 25;

/// A migration that changes what cached statements return (here a column
/// of `orders` from `text` to `varchar`) makes the server refuse their old
/// plans: each is prepared anew and its call (a read) or its transaction
/// (a checkout's) run again, and nothing fails.
#[test]
fn a_statement_gone_stale_after_a_migration_is_prepared_again() {
    let (cluster, backend, url) = logged_sale(true);
    let first = confirmed_checkout(&backend, 0);
    for _ in 0..3 {
        backend.get_order("buyer-0", &first).expect("read");
    }
    let prepared = backend.statements_prepared();
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    admin
        .batch_execute("ALTER TABLE orders ALTER COLUMN payment_method TYPE varchar(255)")
        .expect("migrate");
    // In transactions (the checkout's batches) first, then a read.
    confirmed_checkout(&backend, 1);
    let order = backend
        .get_order("buyer-0", &first)
        .expect("read after the migration");
    assert_eq!(order.state, OrderState::Confirmed);
    assert_eq!(backend.stock("hot").expect("stock").committed, 2);
    let log = cluster.log();
    assert!(
        log.contains("cached plan must not change result type"),
        "the server refused a stale plan (else this test proves nothing)"
    );
    assert!(
        backend.statements_prepared() > prepared,
        "the stale statements were prepared again"
    );
    // The checkout's batches that met a stale plan ran again, counted as
    // such and not as deadlock victims.
    let stats = backend.batch_stats();
    assert!(
        stats.stale_reruns >= 1 && stats.deadlock_reruns == 0,
        "{stats:?}"
    );
    assert_eq!(stats.reruns(), stats.stale_reruns);
}

/// Parses, binds and executes the server logged outside a transaction of
/// their connection (`BEGIN` or the driver's `START TRANSACTION` …
/// `COMMIT`/`ROLLBACK`, savepoints inside).
fn outside_a_transaction(log: &str) -> Vec<String> {
    let mut open: HashMap<String, bool> = HashMap::new();
    let mut outside = Vec::new();
    for entry in entries(log) {
        let Some((pid, kind, sql)) = step(&entry) else {
            continue;
        };
        let in_tx = open.entry(pid.to_owned()).or_default();
        match kind {
            "statement" => {
                let sql = sql.trim().to_ascii_uppercase();
                if sql.starts_with("BEGIN") || sql.starts_with("START TRANSACTION") {
                    *in_tx = true;
                } else if sql.starts_with("COMMIT")
                    || (sql.starts_with("ROLLBACK") && !sql.starts_with("ROLLBACK TO"))
                {
                    *in_tx = false;
                }
            }
            "parse" | "bind" | "execute" if !*in_tx => outside.push(format!("{kind}: {sql}")),
            _ => {}
        }
    }
    outside
}

/// `postgres_prepared_statements = false` (behind a transaction pooler
/// that cannot carry prepared statements): nothing is kept, every
/// statement is prepared for its one use, as before the cache, and each
/// is prepared, bound and closed inside one transaction, so a pooler that
/// hands the server session to another client between transactions never
/// sees one of ours outlive it. Checkouts and reads still work.
#[test]
fn with_statements_not_kept_each_use_is_prepared_in_its_transaction() {
    let (cluster, backend, _) = logged_sale(false);
    let opened = cluster.log().len();
    let mut last = String::new();
    for i in 0..WARM_UP {
        last = confirmed_checkout(&backend, i);
    }
    let before = cluster.log().len();
    let prepared = backend.statements_prepared();
    for i in WARM_UP..WARM_UP + COUNTED {
        last = confirmed_checkout(&backend, i);
    }
    let order = backend
        .get_order(&format!("buyer-{}", WARM_UP + COUNTED - 1), &last)
        .expect("read");
    assert_eq!(order.state, OrderState::Confirmed);
    assert_eq!(
        backend.stock("hot").expect("stock").committed,
        (WARM_UP + COUNTED) as i64
    );
    let log = cluster.log();
    let steps = Steps::of(&log[before..]);
    println!(
        "{COUNTED} confirmed checkouts, statements not kept: {steps:?}; per checkout: \
         {:.1} round trips, {:.1} parses",
        steps.round_trips() as f64 / COUNTED as f64,
        steps.parse as f64 / COUNTED as f64,
    );
    // Every bound statement was prepared for it (the pool's check-out
    // test and BEGIN/COMMIT are simple queries, neither).
    assert!(steps.bind >= COUNTED, "the log counts binds: {steps:?}");
    assert_eq!(steps.parse, steps.bind, "one parse per use: {steps:?}");
    let counted = backend.statements_prepared() - prepared;
    assert!(
        counted >= steps.parse as u64 && counted >= 10 * COUNTED as u64,
        "prepared on every use, {counted} for {COUNTED} checkouts: {steps:?}"
    );
    let outside = outside_a_transaction(&log[opened..]);
    assert!(
        outside.is_empty(),
        "statements used outside a transaction: {outside:#?}"
    );
}
