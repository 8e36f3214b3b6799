//! The PostgreSQL back end behind a transaction pooler that cannot carry
//! prepared statements: PgBouncer (older than 1.21, or without
//! `max_prepared_statements`) in `pool_mode = transaction`, which hands
//! each transaction any of its server sessions.
//!
//! It needs the `pgbouncer` binary (Debian 12's is 1.18), which
//! `scripts/deps.sh --test` installs without starting its service; the
//! test runs a pooler of its own on a free port in front of a throwaway
//! cluster.

mod common;
#[allow(dead_code)]
#[path = "common/pg.rs"]
mod pg;

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{key, request, PRICE_CENTS, T0_MS, TTL_MS};
use sluice_checkout::backend::postgres::BatchStats;
use sluice_checkout::{
    OrderBackend, OrderLimits, OrderState, PgBackend, PgConfig, ProductSeed, SimulatedProvider,
    PM_OK,
};

/// Shoppers at once, and checkouts each.
const SHOPPERS: usize = 8;
const EACH: usize = 15;
/// Server sessions the pooler keeps: fewer than the back end's
/// connections, so transactions move between sessions.
const SERVER_SESSIONS: usize = 3;

/// A PgBouncer in transaction mode in front of `database` on `port`,
/// stopped when dropped.
struct Pooler {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Pooler {
    fn start(port: &str, database: &str) -> Self {
        let listen = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir =
            std::env::temp_dir().join(format!("sluice-pgbouncer-{}-{listen}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the pooler's dir");
        std::fs::write(dir.join("users.txt"), "\"postgres\" \"\"\n").expect("users");
        // `options` (the back end's session timeouts) is refused by
        // PgBouncer before 1.20 unless ignored, and its -c settings from
        // 1.20 unless tracked; ignored, they are not applied.
        let ini = format!(
            "[databases]\n{database} = host=127.0.0.1 port={port} dbname={database} user=postgres\n\
             [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {listen}\nunix_socket_dir =\n\
             auth_type = trust\nauth_file = {dir}/users.txt\npool_mode = transaction\n\
             default_pool_size = {SERVER_SESSIONS}\nmax_client_conn = 200\n\
             ignore_startup_parameters = options,extra_float_digits\nlogfile = {dir}/pgbouncer.log\n",
            dir = dir.display()
        );
        std::fs::write(dir.join("pgbouncer.ini"), ini).expect("ini");
        // Debian puts it in /usr/sbin, which a user's PATH may lack.
        let bin = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap_or("pgbouncer");
        let mut command = Command::new(bin);
        // PgBouncer refuses to run as root: as the throwaway cluster's
        // owner then.
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
        if root {
            Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&dir)
                .status()
                .expect("chown");
            command.args(["-u", "postgres"]);
        }
        let child = command
            .arg(dir.join("pgbouncer.ini"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("pgbouncer (apt-get install pgbouncer)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", listen)).is_err() {
            assert!(Instant::now() < deadline, "pgbouncer did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            dir,
            port: listen,
        }
    }
}

impl Drop for Pooler {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Checkouts (each followed by a read of its order) from [`SHOPPERS`]
/// threads through a transaction pooler, statements kept or not: the
/// ones confirmed and read back, the errors, and the batches' stats.
fn sale_behind_the_pooler(keep: bool) -> (usize, Vec<String>, BatchStats) {
    let cluster = pg::own();
    let url = cluster.create_database();
    let (port, database) = {
        let (_, rest) = url.split_once('@').expect("a URL with a user");
        let (host_port, tail) = rest.split_once('/').expect("a database");
        let port = host_port.rsplit(':').next().expect("a port").to_owned();
        (port, tail.split('?').next().expect("a database").to_owned())
    };
    // Migrated and seeded directly, then sold through the pooler.
    let direct = PgBackend::open(
        &PgConfig::new(url.clone()),
        Arc::new(SimulatedProvider::default()),
    )
    .expect("open");
    direct
        .seed_products_at(
            &[ProductSeed {
                sku: "hot".into(),
                total: 10_000,
                price_cents: PRICE_CENTS,
                reservation_ttl_ms: TTL_MS,
                partitions: 4,
            }],
            T0_MS,
        )
        .expect("seed");
    drop(direct);
    let pooler = Pooler::start(&port, &database);
    let pooled = format!(
        "postgres://postgres@127.0.0.1:{}/{database}?connect_timeout=2",
        pooler.port
    );
    let backend = Arc::new(
        PgBackend::open(
            &PgConfig {
                prepared_statements: keep,
                ..PgConfig::new(pooled)
            },
            Arc::new(SimulatedProvider::default()),
        )
        .expect("open through the pooler"),
    );
    let shoppers: Vec<_> = (0..SHOPPERS)
        .map(|t| {
            let backend = backend.clone();
            std::thread::spawn(move || {
                let (mut confirmed, mut errors) = (0, Vec::new());
                for i in 0..EACH {
                    let n = t * 1_000 + i;
                    let subject = format!("buyer-{n}");
                    let bought = backend.checkout_within(
                        &subject,
                        &key(&format!("key-{n:08}")),
                        &request("hot", 1, PM_OK),
                        OrderLimits::UNLIMITED,
                        T0_MS,
                    );
                    match bought {
                        Ok((order, _)) if order.state == OrderState::Confirmed => {
                            match backend.get_order(&subject, &order.order_id) {
                                Ok(_) => confirmed += 1,
                                Err(e) => errors.push(format!("read: {e}")),
                            }
                        }
                        Ok((order, _)) => errors.push(format!("{:?}", order.state)),
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                (confirmed, errors)
            })
        })
        .collect();
    let (mut confirmed, mut errors) = (0, Vec::new());
    for shopper in shoppers {
        let (c, e) = shopper.join().expect("a shopper");
        confirmed += c;
        errors.extend(e);
    }
    let violations = backend.check_books(T0_MS).expect("books");
    assert!(violations.is_empty(), "{violations:?}");
    (confirmed, errors, backend.batch_stats())
}

#[test]
fn behind_a_transaction_pooler_only_statements_not_kept_work() {
    let (confirmed, errors, stats) = sale_behind_the_pooler(false);
    println!("not kept: {confirmed} confirmed, {stats:?}");
    assert!(errors.is_empty(), "{errors:#?}");
    assert_eq!(confirmed, SHOPPERS * EACH);
    assert_eq!(stats.stale_reruns, 0, "{stats:?}");

    // Kept (the default), the same sale meets statements its connection
    // prepared on another server session: else this proves nothing.
    let (confirmed, errors, stats) = sale_behind_the_pooler(true);
    println!(
        "kept: {confirmed} confirmed, {} failed, {stats:?}",
        errors.len()
    );
    assert!(
        stats.stale_reruns > 0 || errors.iter().any(|e| e.contains("26000")),
        "the pooler moved no kept statement between sessions: {stats:?}"
    );
}
