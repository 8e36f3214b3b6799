//! A throwaway PostgreSQL cluster: `initdb` into a temp dir, `postgres` on a
//! free loopback port, removed on drop.
//!
//! `initdb` refuses to run as root, so as root every server command runs
//! as the `postgres` user (`runuser -u postgres --`), which Debian's
//! package creates, on a directory handed to it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::{free_port, READY_WAIT_MAX, START_TRIES_MAX};

/// How durable the cluster's commits are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// As in production: `fsync` on, `synchronous_commit` on. For
    /// benchmarks and crash tests that must not flatter the store.
    Full,
    /// `fsync = off`: a commit's WAL is still written to the OS before the
    /// commit returns, so a killed *process* (even the server's) loses
    /// nothing it acknowledged; a power cut would. For functional tests.
    /// (`synchronous_commit = off` would lose the last commits at a server
    /// crash, which the crash tests must not hide.)
    Fast,
}

/// A PostgreSQL server of its own.
pub struct ThrowawayPostgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    running: AtomicBool,
    durability: Durability,
    max_connections: u32,
}

/// The server's `max_connections` unless [`ThrowawayPostgres::start_sized`]
/// says otherwise.
pub const MAX_CONNECTIONS_DEFAULT: u32 = 200;

impl ThrowawayPostgres {
    /// `initdb` and start; tries other ports when the chosen one was taken.
    pub fn start(durability: Durability) -> Result<Self> {
        Self::start_sized(durability, MAX_CONNECTIONS_DEFAULT)
    }

    /// [`Self::start`] with the server's `max_connections` (a benchmark
    /// whose baseline opens a connection per client).
    pub fn start_sized(durability: Durability, max_connections: u32) -> Result<Self> {
        let bin = bin_dir()?;
        let dir = tempfile::Builder::new()
            .prefix("sluice-pg-")
            .tempdir()
            .context("making the PostgreSQL directory")?;
        hand_over(dir.path())?;
        let data = dir.path().join("data");
        run(
            as_server_user(bin.join("initdb"))
                .arg("-D")
                .arg(&data)
                .args(["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"]),
            "initdb",
        )?;
        let mut pg = Self {
            dir,
            bin,
            port: 0,
            running: AtomicBool::new(false),
            durability,
            max_connections,
        };
        let mut last = None;
        for _ in 0..START_TRIES_MAX {
            pg.port = free_port()?;
            match pg.spawn() {
                Ok(()) => return Ok(pg),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("tried at least once"))
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        self.url_of("postgres")
    }

    /// The URL of `database` on this cluster (a 2 s connect timeout, so a
    /// stopped server is an error at once, not a hang).
    pub fn url_of(&self, database: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{database}?connect_timeout=2",
            self.port
        )
    }

    /// A new, empty database (a fresh name per call in this process);
    /// its URL. Tests sharing one cluster each take their own.
    pub fn create_database(&self) -> Result<String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        self.psql(&format!("CREATE DATABASE {name}"))?;
        Ok(self.url_of(&name))
    }

    /// The postmaster's process id (the first line of `postmaster.pid`).
    pub fn pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// Stops it at once (`pg_ctl stop -m immediate`: like a crash; the next
    /// start replays the WAL).
    pub fn stop(&self) {
        if !self.running.swap(false, Ordering::SeqCst) {
            return;
        }
        let _ = run(
            as_server_user(self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(self.data())
                .args(["stop", "-m", "immediate", "-w"]),
            "pg_ctl stop",
        );
    }

    /// Starts it again on the same port, with its data.
    pub fn restart(&self) -> Result<()> {
        self.stop();
        self.spawn()
    }

    /// Runs one SQL statement with `psql`, returning its unaligned output:
    /// for tests' checks.
    pub fn psql(&self, sql: &str) -> Result<String> {
        let out = Command::new(self.bin.join("psql"))
            .arg(self.url())
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .stdin(Stdio::null())
            .output()
            .context("running psql")?;
        if !out.status.success() {
            bail!("psql {sql:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// The server's log so far (what `log_min_duration_statement` and the
    /// like wrote), for tests that count what the server was sent.
    pub fn log(&self) -> Result<String> {
        Ok(std::fs::read_to_string(
            self.dir.path().join("postgres.log"),
        )?)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn spawn(&self) -> Result<()> {
        let socket_dir = self.dir.path().join("socket");
        std::fs::create_dir_all(&socket_dir)?;
        hand_over(&socket_dir)?;
        let mut options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c max_connections={}",
            self.port,
            socket_dir.display(),
            self.max_connections
        );
        if self.durability == Durability::Fast {
            options.push_str(" -c fsync=off -c full_page_writes=off");
        }
        let log = self.dir.path().join("postgres.log");
        let started = run(
            as_server_user(self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(self.data())
                .arg("-l")
                .arg(&log)
                .arg("-o")
                .arg(options)
                .args(["start", "-w", "-t", "30"]),
            "pg_ctl start",
        );
        if let Err(e) = started {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            bail!("{e}\n{log}");
        }
        self.running.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + READY_WAIT_MAX;
        while Instant::now() < deadline {
            if self.psql("SELECT 1").is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop();
        bail!(
            "PostgreSQL did not accept connections on port {}",
            self.port
        )
    }
}

impl Drop for ThrowawayPostgres {
    fn drop(&mut self) {
        self.stop();
    }
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `program`, as the `postgres` user when we are root.
fn as_server_user(program: PathBuf) -> Command {
    if is_root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

/// As root, gives `dir` to the `postgres` user (initdb and the server
/// must own their directories).
fn hand_over(dir: &Path) -> Result<()> {
    if !is_root() {
        return Ok(());
    }
    run(
        Command::new("chown").arg("postgres:postgres").arg(dir),
        "chown postgres",
    )
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Where `initdb`, `pg_ctl` and `psql` are: `PATH`, else the newest
/// `/usr/lib/postgresql/<version>/bin`.
fn bin_dir() -> Result<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .find(|d| d.join("initdb").is_file() && d.join("pg_ctl").is_file());
    if let Some(dir) = on_path {
        // Through a symlink farm (/usr/local/bin) to the real directory,
        // which also holds `postgres` and `psql` of the same version.
        let real = std::fs::canonicalize(dir.join("initdb"))?;
        return Ok(real.parent().map_or(dir, Path::to_path_buf));
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|d| d.join("initdb").is_file())
        .collect();
    versions.sort();
    versions
        .pop()
        .context("PostgreSQL's initdb not found (scripts/deps.sh --test installs it)")
}
