//! Reservations per second on one hot SKU across a fleet of three
//! gateways sharing one PostgreSQL, next to the naive baseline,
//! in alternating rounds of the same run.
//!
//! What is timed, and why it is the product's path: a reservation is
//! step 1 of a checkout on the PostgreSQL back end — the idempotency key
//! claimed, the subject's purchase limit counted, the units taken, the
//! order (`reserved`) and its hold created, in the batched transaction of
//! the gateway's checkout batchers (`backend/postgres/batch.rs`) —, reached
//! through `OrderBackend::begin_within` on a `PgBackend`. The gateway calls
//! `checkout_within`, whose step 1 is the same batch job (with the order
//! also moved to `authorizing` and its authorize attempt stored, then the
//! provider called): `begin_within` is that job without the payment.
//!
//! Setup, all started by this bench and removed at its end: one
//! throwaway PostgreSQL (`initdb` + `pg_ctl` in a temp dir, a free
//! loopback port, never the machine's server; `fsync` and
//! `synchronous_commit` on). "Three gateways": three `PgBackend`s on it,
//! each with its own pools and batchers, as three gateway processes would
//! have. CLIENTS threads spread over the three (thread `i` on gateway
//! `i % 3`), each reservation a new subject and key, one unit of one hot
//! SKU seeded with `partitions` 1 (`hot-p1`) or 8 (`hot-p8`).
//!
//! The baseline (`naive`): CLIENTS connections each running `UPDATE stock
//! SET available = available - 1 WHERE sku = 'hot' AND available >= 1` in
//! autocommit on one row (a database of its own on the same server).
//!
//! Each round runs naive, then partitions 1, then partitions 8, SECONDS
//! each. Every client thread opens its connection (or picks its gateway)
//! first; a barrier then starts them together, and the rate, latencies
//! and CPU times cover only the span between that barrier and the one
//! they meet when their SECONDS are over (not the connections' opening
//! and closing, which at hundreds of clients would weigh on the
//! baseline). Printed: per variant, the median over rounds of reservations/s
//! and of each round's per-reservation p50/p99 (from the call to its
//! answer), the ratio of the medians to the naive baseline's, and the
//! median CPU time per reservation of the server (all its processes,
//! from `/proc`) and of this process (clients and gateways): on a shared
//! machine the CPU per reservation is steadier than the rate. At the
//! end the books are checked: per SKU, free units plus held units equal
//! the total, and the holds are exactly the reservations answered.
//!
//! Run: `cargo bench -p sluice-checkout --bench fleet_reserve -- ROUNDS SECONDS CLIENTS
//! [BATCHERS]` (CLIENTS up to 768, three gateways at the default
//! `checkouts_in_flight_max`; the server's `max_connections` is sized for
//! them; BATCHERS: checkout batchers per gateway, the back end's
//! `CHECKOUT_BATCHERS` unless given).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use sluice_checkout::{
    CheckoutRequest, Created, IdempotencyKey, OrderBackend, OrderLimits, OrderState, PgBackend,
    PgConfig, ProductSeed, SimulatedProvider,
};
use sluice_loadtest::throwaway::{Durability, ThrowawayPostgres};

/// Shoppers reserving at once unless the third argument says otherwise.
const CLIENTS_DEFAULT: u64 = 64;
/// Clients at most: three gateways each at the default
/// `checkouts_in_flight_max` (256), the most checkouts a fleet of three
/// runs at once before answering `503 overloaded`.
const CLIENTS_MAX: u64 = 768;
/// Server connections beyond the baseline's one per client: the three
/// gateways' pools and the bench's own.
const FLEET_CONNECTIONS_MAX: u32 = 200;
/// Gateways of the fleet.
const GATEWAYS: usize = 3;
/// Units of each hot SKU: never sold out within a run.
const HOT_UNITS: u32 = 1_000_000_000;
const T0_MS: i64 = 1_800_000_000_000;
const TTL_MS: i64 = 600_000;
/// A pass may create this many orders (each reservation is a new subject:
/// the count is made, as in the product, and always passes).
const ORDERS_PER_SUBJECT_MAX: u32 = 4;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Naive,
    Fleet { partitions: u32 },
}

impl Variant {
    const ALL: [Variant; 3] = [
        Variant::Naive,
        Variant::Fleet { partitions: 1 },
        Variant::Fleet { partitions: 8 },
    ];

    fn name(self) -> String {
        match self {
            Variant::Naive => "naive UPDATE, autocommit".into(),
            Variant::Fleet { partitions } => {
                format!("3 gateways, batched step 1, partitions {partitions}")
            }
        }
    }
}

fn sku(partitions: u32) -> String {
    format!("hot-p{partitions}")
}

struct Round {
    per_second: f64,
    p50_us: u64,
    p99_us: u64,
    /// CPU time the PostgreSQL server spent per reservation (all its
    /// processes), µs.
    server_cpu_us: f64,
    /// CPU time this process (the clients and the three gateways'
    /// back ends) spent per reservation, µs.
    client_cpu_us: f64,
}

/// Linux's `USER_HZ`: the unit of the times in `/proc/<pid>/stat`.
const TICKS_PER_S: f64 = 100.0;

/// A process's CPU time in ticks (`/proc/<pid>/stat`): its own user and
/// system time, plus its reaped children's when `children`.
fn cpu_ticks(pid: u32, children: bool) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // Fields after the command's closing parenthesis, from `state` (3).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let at = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let own = at(14).unwrap_or(0) + at(15).unwrap_or(0);
    if children {
        own + at(16).unwrap_or(0) + at(17).unwrap_or(0)
    } else {
        own
    }
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The server's CPU time so far, in ticks: the postmaster's own and its
/// ended backends' (reaped), plus its live processes'.
fn server_ticks(postmaster: u32) -> u64 {
    let live: u64 = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| parent_of(pid) == Some(postmaster))
        .map(|pid| cpu_ticks(pid, false))
        .sum();
    cpu_ticks(postmaster, true) + live
}

/// Runs `clients` client threads for one round and times them. Each
/// thread sets itself up (`setup`: a connection, a request body), waits
/// at a barrier, then calls `reserve` until `seconds` have passed and
/// waits at the barrier again before it drops what it set up; the rate,
/// the latencies and the CPU times (server, this process) cover only the
/// span between the two barriers, not the connections opened and closed.
fn timed<S: Send + 'static>(
    postmaster: u32,
    clients: u64,
    seconds: u64,
    setup: impl Fn(u64) -> S + Send + Sync + 'static,
    reserve: impl Fn(&mut S) + Send + Sync + 'static,
) -> Round {
    let barrier = Arc::new(Barrier::new(clients as usize + 1));
    let (setup, reserve) = (Arc::new(setup), Arc::new(reserve));
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (barrier, setup, reserve) = (barrier.clone(), setup.clone(), reserve.clone());
            std::thread::spawn(move || {
                let mut state = setup(i);
                barrier.wait();
                let deadline = Instant::now() + Duration::from_secs(seconds);
                let mut latencies_us = Vec::new();
                while Instant::now() < deadline {
                    let asked = Instant::now();
                    reserve(&mut state);
                    latencies_us.push(asked.elapsed().as_micros() as u64);
                }
                barrier.wait();
                drop(state);
                latencies_us
            })
        })
        .collect();
    let me = std::process::id();
    barrier.wait();
    let (server, client, started) = (
        server_ticks(postmaster),
        cpu_ticks(me, false),
        Instant::now(),
    );
    barrier.wait();
    let elapsed = started.elapsed().as_secs_f64();
    let (server, client) = (
        server_ticks(postmaster).saturating_sub(server),
        cpu_ticks(me, false).saturating_sub(client),
    );
    let latencies: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("client thread"))
        .collect();
    let mut round = summarize(latencies, elapsed);
    let done = round.per_second * elapsed;
    let per = |ticks: u64| ticks as f64 / TICKS_PER_S * 1e6 / done.max(1.0);
    (round.server_cpu_us, round.client_cpu_us) = (per(server), per(client));
    round
}

fn summarize(mut latencies: Vec<u64>, elapsed: f64) -> Round {
    latencies.sort_unstable();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    Round {
        per_second: latencies.len() as f64 / elapsed,
        p50_us: at(0.50),
        p99_us: at(0.99),
        server_cpu_us: 0.0,
        client_cpu_us: 0.0,
    }
}

/// The baseline: each client its own connection, one autocommit UPDATE
/// of the one row at a time.
fn naive_round(postmaster: u32, url: &str, seconds: u64, clients: u64) -> Round {
    let url = url.to_owned();
    timed(
        postmaster,
        clients,
        seconds,
        move |_| {
            let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
            let update = client
                .prepare(
                    "UPDATE stock SET available = available - 1 \
                     WHERE sku = 'hot' AND available >= 1",
                )
                .expect("prepare");
            (client, update)
        },
        |(client, update)| {
            let changed = client.execute(&*update, &[]).expect("update");
            assert_eq!(changed, 1, "the naive row never runs out in a run");
        },
    )
}

/// CLIENTS threads over the fleet, each reservation a new subject and key.
fn fleet_round(
    postmaster: u32,
    fleet: &[Arc<PgBackend>],
    partitions: u32,
    seconds: u64,
    clients: u64,
    next: &Arc<AtomicU64>,
    reserved: &Arc<AtomicU64>,
) -> Round {
    let fleet = fleet.to_vec();
    let (next, reserved) = (Arc::clone(next), Arc::clone(reserved));
    let body = CheckoutRequest {
        sku: sku(partitions),
        quantity: 1,
        payment_method: "pm_ok".into(),
    };
    let limits = OrderLimits {
        orders_per_subject_max: ORDERS_PER_SUBJECT_MAX,
    };
    timed(
        postmaster,
        clients,
        seconds,
        move |i| Arc::clone(&fleet[i as usize % fleet.len()]),
        move |backend| {
            let n = next.fetch_add(1, Ordering::Relaxed);
            let subject = format!("sub-{n}");
            let key = IdempotencyKey::parse(&format!("key-{n:012}")).expect("key");
            let (order, created) = backend
                .begin_within(&subject, &key, &body, limits, T0_MS)
                .expect("reservation");
            assert_eq!(created, Created::Created);
            assert_eq!(order.state, OrderState::Reserved, "never sold out in a run");
            reserved.fetch_add(1, Ordering::Relaxed);
        },
    )
}

/// Nothing oversold: free + held = total on every SKU, every partition's
/// counts non-negative, and the holds are exactly the reservations
/// answered.
fn check_books(url: &str, partitions: u32, answered: u64) {
    let mut client = postgres::Client::connect(url, postgres::NoTls).expect("connect");
    let sku = sku(partitions);
    let row = client
        .query_one(
            "SELECT COALESCE(SUM(available), 0)::bigint, COALESCE(SUM(reserved), 0)::bigint,
                    COALESCE(SUM(committed), 0)::bigint, COUNT(*) FILTER (WHERE available < 0)
               FROM stock_partitions WHERE sku = $1",
            &[&sku],
        )
        .expect("stock");
    let (available, reserved, committed, negative): (i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let holds: i64 = client
        .query_one(
            "SELECT COALESCE(SUM(quantity), 0)::bigint FROM reservations
              WHERE sku = $1 AND state = 'held'",
            &[&sku],
        )
        .expect("holds")
        .get(0);
    assert_eq!(negative, 0, "{sku}: a partition below zero");
    assert_eq!(committed, 0, "{sku}: nothing was paid");
    assert_eq!(reserved, holds, "{sku}: the reserved counts are the holds");
    assert_eq!(
        available + holds,
        i64::from(HOT_UNITS),
        "{sku}: free + held is the total"
    );
    assert_eq!(
        holds as u64, answered,
        "{sku}: one hold per reservation answered"
    );
    println!("books of {sku}: {holds} held + {available} free = {HOT_UNITS}, none oversold");
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
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
        .clamp(1, CLIENTS_MAX);
    let batchers = numbers.get(3).map_or(
        sluice_checkout::backend::postgres::CHECKOUT_BATCHERS,
        |&n| n.clamp(1, 16) as usize,
    );
    let pg =
        ThrowawayPostgres::start_sized(Durability::Full, clients as u32 + FLEET_CONNECTIONS_MAX)
            .expect("a throwaway PostgreSQL (scripts/deps.sh --test installs its binaries)");
    assert_ne!(pg.port(), 5432, "never the machine's PostgreSQL");
    let naive_url = pg.create_database().expect("naive database");
    postgres::Client::connect(&naive_url, postgres::NoTls)
        .and_then(|mut c| {
            c.batch_execute(
                "CREATE TABLE stock (sku text PRIMARY KEY, available bigint NOT NULL);
                 INSERT INTO stock VALUES ('hot', 1000000000000);",
            )
        })
        .expect("naive table");
    // The postmaster: the parent of a backend (for its CPU time).
    let postmaster = postgres::Client::connect(&naive_url, postgres::NoTls)
        .and_then(|mut c| c.query_one("SELECT pg_backend_pid()", &[]))
        .ok()
        .and_then(|row| parent_of(row.get::<_, i32>(0) as u32))
        .expect("the server's postmaster");
    let fleet_url = pg.create_database().expect("fleet database");
    let fleet: Vec<Arc<PgBackend>> = (0..GATEWAYS)
        .map(|_| {
            let provider = Arc::new(SimulatedProvider::default());
            let config = PgConfig {
                checkout_batchers: batchers,
                ..PgConfig::new(fleet_url.clone())
            };
            let backend = PgBackend::open(&config, provider).expect("open");
            backend
                .seed_products_at(
                    &[1, 8].map(|partitions| ProductSeed {
                        sku: sku(partitions),
                        total: HOT_UNITS,
                        price_cents: 100,
                        reservation_ttl_ms: TTL_MS,
                        partitions,
                    }),
                    T0_MS,
                )
                .expect("seed");
            Arc::new(backend)
        })
        .collect();
    let next = Arc::new(AtomicU64::new(0));
    let reserved_p1 = Arc::new(AtomicU64::new(0));
    let reserved_p8 = Arc::new(AtomicU64::new(0));
    println!(
        "cores {} clients {clients} rounds {rounds} x {seconds} s, {batchers} checkout batchers \
         per gateway, load average at start {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    );
    let mut results: Vec<(Variant, Round)> = Vec::new();
    for r in 0..rounds {
        for variant in Variant::ALL {
            let result = match variant {
                Variant::Naive => naive_round(postmaster, &naive_url, seconds, clients),
                Variant::Fleet { partitions } => {
                    let reserved = if partitions == 1 {
                        &reserved_p1
                    } else {
                        &reserved_p8
                    };
                    fleet_round(
                        postmaster, &fleet, partitions, seconds, clients, &next, reserved,
                    )
                }
            };
            eprintln!(
                "round {r} {}: {:.0} reservations/s, p50 {} µs, p99 {} µs, CPU per reservation: \
                 server {:.0} µs, clients and gateways {:.0} µs",
                variant.name(),
                result.per_second,
                result.p50_us,
                result.p99_us,
                result.server_cpu_us,
                result.client_cpu_us
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
            of(|r| r.server_cpu_us),
            of(|r| r.client_cpu_us),
        )
    };
    let (naive, ..) = summary(Variant::Naive);
    for variant in Variant::ALL {
        let (rate, p50, p99, server, client) = summary(variant);
        println!(
            "{}: {rate:.0} reservations/s, p50 {:.2} ms, p99 {:.2} ms, {:.2}x naive; \
             CPU per reservation: server {server:.0} µs, clients and gateways {client:.0} µs",
            variant.name(),
            p50 / 1000.0,
            p99 / 1000.0,
            rate / naive
        );
    }
    for (g, backend) in fleet.iter().enumerate() {
        let s = backend.batch_stats();
        println!(
            "gateway {g}: {} jobs in {} batches (mean {:.1}, largest {}), {} reruns, {} split",
            s.jobs,
            s.batches,
            s.jobs as f64 / s.batches.max(1) as f64,
            s.largest,
            s.reruns(),
            s.split
        );
    }
    println!("load average at end {}", loadavg());
    drop(fleet);
    check_books(&fleet_url, 1, reserved_p1.load(Ordering::Relaxed));
    check_books(&fleet_url, 8, reserved_p8.load(Ordering::Relaxed));
}
