//! Durable holds per second on one hot SKU through the embedded store's
//! `Store::submit_reservation`: a ceiling of SQLite's group commit, NOT
//! what the product does. The gateway never calls that path (a hold
//! with no order, no key, no purchase limit), so this is no reservation
//! figure and its ratio to the PostgreSQL loop below is no fleet figure:
//! reservations as the product makes them, across a fleet on PostgreSQL,
//! are `benches/fleet_reserve.rs`.
//!
//! - `sqlite_group_commit`: the store's group-commit writer (WAL,
//!   `synchronous=FULL`, one fsync per batch); client threads keep many
//!   requests in flight, as many concurrent shoppers would.
//! - `postgres_update_loop`: the baseline of the issue, one client running
//!   `UPDATE stock SET available = available - 1 WHERE sku = $1 AND
//!   available >= 1` in autocommit against a throwaway PostgreSQL that this
//!   bench starts itself (initdb + pg_ctl in a temp dir, Unix socket only, a
//!   free port number) and stops at the end. Skipped, with a message, when
//!   no PostgreSQL binaries are found.
//! - `postgres_update_4_clients`: the same statement from 4 connections at
//!   once, to show the hot row does not scale with clients.
//!
//! Run: `cargo bench -p sluice-checkout --bench reserve`

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice_checkout::{ProductSeed, ReserveOutcome, ReserveRequest, Store};

const HOT_SKU: &str = "hot";
const HOT_UNITS: u32 = 4_000_000_000;
/// Client threads submitting to the writer (the machine has 2 cores; the
/// writer needs one of them).
const CLIENTS: u64 = 2;
/// Requests one client keeps in flight before waiting for their answers.
const WINDOW: u64 = 2_048;
const T0_MS: i64 = 1_800_000_000_000;
/// Connections of the concurrent PostgreSQL variant.
const PG_CLIENTS: usize = 4;

fn sqlite_store(dir: &Path) -> Store {
    let store = Store::open(dir).expect("open store");
    store
        .seed_products(&[ProductSeed {
            sku: HOT_SKU.into(),
            total: HOT_UNITS,
            price_cents: 100,
            reservation_ttl_ms: 600_000,
            partitions: 1,
        }])
        .expect("seed");
    store
}

/// `iters` reservations spread over the clients; returns the wall time.
fn reserve_many(store: &Arc<Store>, next_id: &Arc<AtomicU64>, iters: u64) -> Duration {
    let start = Instant::now();
    let per_client = iters.div_ceil(CLIENTS);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let store = Arc::clone(store);
            let next_id = Arc::clone(next_id);
            std::thread::spawn(move || {
                let mut left = per_client;
                while left > 0 {
                    let n = left.min(WINDOW);
                    let pending: Vec<_> = (0..n)
                        .map(|_| {
                            let id = next_id.fetch_add(1, Ordering::Relaxed);
                            store
                                .submit_reservation(ReserveRequest {
                                    order_id: format!("b{id:012}"),
                                    sku: HOT_SKU.into(),
                                    quantity: 1,
                                    now_ms: T0_MS,
                                    expires_at_ms: T0_MS + 600_000,
                                })
                                .expect("submit")
                        })
                        .collect();
                    for p in pending {
                        assert!(matches!(p.wait(), Ok(ReserveOutcome::Reserved { .. })));
                    }
                    left -= n;
                }
            })
        })
        .collect();
    for c in clients {
        c.join().expect("client");
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("durable_reserve_hot_sku");
    group.throughput(Throughput::Elements(1));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));

    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(sqlite_store(dir.path()));
    let next_id = Arc::new(AtomicU64::new(0));
    group.bench_function("sqlite_group_commit", |b| {
        b.iter_custom(|iters| reserve_many(&store, &next_id, iters))
    });
    let reserved = store.metrics().reservations_ok.load(Ordering::Relaxed);
    let batches = store.metrics().batches_committed.load(Ordering::Relaxed);
    eprintln!(
        "sqlite_group_commit: {reserved} durable reservations in {batches} batches (mean {} per fsync)",
        reserved / batches.max(1)
    );
    drop(store);

    match Postgres::start() {
        Ok(pg) => {
            let mut client = pg.connect().expect("connect to throwaway postgres");
            client
                .batch_execute(
                    "CREATE TABLE stock (sku text PRIMARY KEY, available bigint NOT NULL);
                     INSERT INTO stock VALUES ('hot', 1000000000000);",
                )
                .expect("create table");
            let update = client
                .prepare(
                    "UPDATE stock SET available = available - 1 WHERE sku = $1 AND available >= 1",
                )
                .expect("prepare");
            group.bench_function("postgres_update_loop", |b| {
                b.iter(|| {
                    let changed = client.execute(&update, &[&HOT_SKU]).expect("update");
                    assert_eq!(changed, 1);
                })
            });
            // Not the baseline, but the fair question: does
            // PostgreSQL catch up with concurrent clients? On one hot row
            // the row lock is held until each commit's fsync, so no.
            let mut clients: Vec<_> = (0..PG_CLIENTS)
                .map(|_| pg.connect().expect("connect"))
                .collect();
            group.bench_function("postgres_update_4_clients", |b| {
                b.iter_custom(|iters| {
                    let per_client = iters.div_ceil(PG_CLIENTS as u64);
                    let start = Instant::now();
                    std::thread::scope(|scope| {
                        for client in clients.iter_mut() {
                            scope.spawn(move || {
                                let update = client
                                    .prepare("UPDATE stock SET available = available - 1 WHERE sku = $1 AND available >= 1")
                                    .expect("prepare");
                                for _ in 0..per_client {
                                    client.execute(&update, &[&HOT_SKU]).expect("update");
                                }
                            });
                        }
                    });
                    start.elapsed()
                })
            });
        }
        Err(why) => eprintln!("postgres_update_loop: skipped: {why}"),
    }
    group.finish();
}

/// A throwaway PostgreSQL cluster in a temp dir, stopped on drop.
struct Postgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    run_as_postgres: bool,
}

impl Postgres {
    fn start() -> Result<Self, String> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .map_err(|e| format!("no /usr/lib/postgresql: {e}"))?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .find(|p| p.join("initdb").exists())
            .ok_or("no initdb under /usr/lib/postgresql/*/bin")?;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        // initdb refuses to run as root; then run it as the `postgres` user.
        let run_as_postgres = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false);
        if run_as_postgres {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .map_err(|e| e.to_string())?;
            if !status.success() {
                return Err("chown of the temp dir to postgres failed".into());
            }
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let pg = Self {
            bin,
            dir,
            port,
            run_as_postgres,
        };
        pg.run(
            "initdb",
            &[
                "-D",
                &pg.data(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-instructions",
            ],
        )?;
        let options = format!(
            "-p {} -k {} -c listen_addresses='' -c fsync=on -c synchronous_commit=on",
            pg.port,
            pg.dir.path().display()
        );
        pg.run(
            "pg_ctl",
            &[
                "-D",
                &pg.data(),
                "-o",
                &options,
                "-l",
                &format!("{}/log", pg.dir.path().display()),
                "-w",
                "start",
            ],
        )?;
        Ok(pg)
    }

    fn data(&self) -> String {
        format!("{}/data", self.dir.path().display())
    }

    fn run(&self, tool: &str, args: &[&str]) -> Result<(), String> {
        let path = self.bin.join(tool);
        let mut cmd = if self.run_as_postgres {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", "postgres", "--"]).arg(&path);
            cmd
        } else {
            Command::new(&path)
        };
        let out = cmd
            .args(args)
            .output()
            .map_err(|e| format!("{tool}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{tool} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }

    fn connect(&self) -> Result<postgres::Client, postgres::Error> {
        postgres::Config::new()
            .host_path(self.dir.path())
            .port(self.port)
            .user("postgres")
            .dbname("postgres")
            .connect(postgres::NoTls)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Best effort: a leftover server dies with its temp dir anyway.
        let _ = self.run("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "stop"]);
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
