//! A throwaway PostgreSQL cluster for tests: `initdb` into a temp dir (as
//! the `postgres` user when run as root: initdb refuses root), `pg_ctl
//! start` on a free loopback port with its socket in the temp dir, and
//! `pg_ctl stop -m immediate` plus removal when the last user drops it —
//! also when a test panics. Never the machine's server: the port is a
//! fresh one, asserted not to be 5432. Each test gets its own database.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Where the PostgreSQL server binaries are: on `PATH`, in
/// `/usr/local/bin`, or where Debian's `postgresql` package puts them
/// (`/usr/lib/postgresql/<major>/bin`, the newest; `scripts/deps.sh
/// --test` installs it when none is found).
fn pg_bin() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.push(PathBuf::from("/usr/local/bin"));
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse().ok()?;
            Some((major, entry.path().join("bin")))
        })
        .collect();
    debian.sort();
    dirs.extend(debian.into_iter().rev().map(|(_, dir)| dir));
    dirs.into_iter()
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
        .expect("PostgreSQL server binaries (initdb, pg_ctl): run scripts/deps.sh --test")
}
const START_DEADLINE: Duration = Duration::from_secs(60);

pub struct ThrowawayPg {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    as_postgres: bool,
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port");
    let port = listener.local_addr().unwrap().port();
    assert_ne!(port, 5432, "never the machine's PostgreSQL port");
    port
}

impl ThrowawayPg {
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("sluice-pg-")
            .tempdir()
            .expect("temp dir");
        let as_postgres = is_root();
        let pg = Self {
            bin: pg_bin(),
            port: free_port(),
            dir,
            as_postgres,
        };
        if as_postgres {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(pg.dir.path())
                .status()
                .expect("chown");
            assert!(status.success(), "chown the temp dir to postgres");
        }
        let out = pg
            .command("initdb")
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
                "-D",
            ])
            .arg(pg.data())
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        pg.pg_ctl_start();
        pg.wait_accepting();
        pg
    }

    /// Starts (or restarts) the server on the same port and data dir.
    pub fn pg_ctl_start(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off -c max_connections=200",
            self.port,
            self.dir.path().display()
        );
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-l"])
            .arg(self.dir.path().join("log"))
            .args(["-o", &options, "-w", "-t", "60", "start"])
            .output()
            .expect("run pg_ctl start");
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Stops the server at once (`-m immediate`), as a crash would.
    pub fn pg_ctl_stop(&self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }

    fn wait_accepting(&self) {
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            match postgres::Client::connect(&self.url("postgres"), postgres::NoTls) {
                Ok(_) => return,
                Err(e) if Instant::now() > deadline => {
                    panic!("throwaway PostgreSQL never accepted: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    pub fn url(&self, database: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{database}?connect_timeout=2",
            self.port
        )
    }

    /// A new, empty database; returns its URL.
    pub fn create_database(&self) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!("t{}", NEXT.fetch_add(1, Ordering::SeqCst));
        let mut admin = postgres::Client::connect(&self.url("postgres"), postgres::NoTls)
            .expect("connect to the throwaway cluster");
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create a test database");
        self.url(&name)
    }
}

impl Drop for ThrowawayPg {
    fn drop(&mut self) {
        self.pg_ctl_stop();
        // The TempDir removes the data dir after this.
    }
}

/// The cluster shared by the tests of this binary that run at the same
/// time; started on first use, stopped and removed when the last of them
/// drops its handle (so a binary's end leaves nothing behind).
pub fn shared() -> Arc<ThrowawayPg> {
    static SHARED: Mutex<Weak<ThrowawayPg>> = Mutex::new(Weak::new());
    let mut slot = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(pg) = slot.upgrade() {
        return pg;
    }
    let pg = Arc::new(ThrowawayPg::start());
    *slot = Arc::downgrade(&pg);
    pg
}

/// A cluster of one's own (for tests that stop the server).
pub fn own() -> ThrowawayPg {
    ThrowawayPg::start()
}
