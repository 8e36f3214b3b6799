//! A throwaway `redis-server`: its own port, its own directory, gone on
//! drop.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::{free_port, kill_and_wait, READY_WAIT_MAX, START_TRIES_MAX};

/// Whether a Redis keeps its data across a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// Nothing on disk: a restart starts empty (`--save "" --appendonly
    /// no`), as a cache-only deployment does.
    None,
    /// Append-only file, fsync on every write: a restart, even after
    /// SIGKILL, keeps every acknowledged write.
    Aof,
}

/// A `redis-server` on a free loopback port.
pub struct ThrowawayRedis {
    child: Option<Child>,
    dir: tempfile::TempDir,
    port: u16,
    persistence: Persistence,
}

impl ThrowawayRedis {
    /// Starts one; tries other ports when the chosen one was taken first.
    pub fn start(persistence: Persistence) -> Result<Self> {
        let mut dir = tempfile::Builder::new()
            .prefix("sluice-redis-")
            .tempdir()
            .context("making the Redis directory")?;
        let mut last = None;
        for _ in 0..START_TRIES_MAX {
            let port = free_port()?;
            let mut redis = Self {
                child: None,
                dir,
                port,
                persistence,
            };
            match redis.spawn() {
                Ok(()) => return Ok(redis),
                Err(e) => {
                    last = Some(e);
                    dir = std::mem::replace(&mut redis.dir, tempfile::tempdir()?);
                }
            }
        }
        Err(last.expect("tried at least once"))
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where its files are.
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// Stops it with SIGKILL (no goodbye to clients, no final save).
    pub fn kill(&mut self) {
        if let Some(child) = self.child.take() {
            kill_and_wait(child);
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Starts it again on the same port. With [`Persistence::None`] it
    /// comes back empty; with [`Persistence::Aof`] with every write it had
    /// acknowledged. `wipe` also removes its files first (a Redis replaced
    /// by a new, empty one).
    pub fn restart(&mut self, wipe: bool) -> Result<()> {
        self.kill();
        if wipe {
            for entry in std::fs::read_dir(self.dir.path())? {
                let path = entry?.path();
                if path.is_dir() {
                    std::fs::remove_dir_all(&path)?;
                } else if path.file_name().is_some_and(|n| n != "redis.log") {
                    std::fs::remove_file(&path)?;
                }
            }
        }
        self.spawn()
    }

    /// One command, answered (inline protocol): for tests' checks, such as
    /// `DBSIZE` or `INFO memory`.
    pub fn command(&self, line: &str) -> Result<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(format!("{line}\r\n").as_bytes())?;
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        // A reply is complete when it parses; RESP bulk strings say their
        // length, and the replies wanted here are small.
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
            if resp_complete(&out) {
                break;
            }
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    fn spawn(&mut self) -> Result<()> {
        let dir = self.dir.path();
        let mut cmd = Command::new(redis_server()?);
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--protected-mode", "no"])
            .arg("--dir")
            .arg(dir)
            .args(["--daemonize", "no", "--save", ""])
            .arg("--logfile")
            .arg(dir.join("redis.log"));
        match self.persistence {
            Persistence::None => cmd.args(["--appendonly", "no"]),
            Persistence::Aof => cmd.args(["--appendonly", "yes", "--appendfsync", "always"]),
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting redis-server (scripts/deps.sh --test installs it)")?;
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if self.command("PING").is_ok_and(|r| r.starts_with("+PONG")) {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    self.child = None;
                    let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
                    bail!(
                        "redis-server exited ({status}) on port {}:\n{log}",
                        self.port
                    );
                }
            }
            if started.elapsed() > READY_WAIT_MAX {
                self.kill();
                bail!("redis-server did not answer PING on port {}", self.port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ThrowawayRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether `out` holds one whole RESP reply.
fn resp_complete(out: &[u8]) -> bool {
    let Some(line_end) = out.windows(2).position(|w| w == b"\r\n") else {
        return false;
    };
    match out.first() {
        Some(b'$') => {
            let len: i64 = std::str::from_utf8(&out[1..line_end])
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            len < 0 || out.len() >= line_end + 2 + len as usize + 2
        }
        _ => true,
    }
}

/// The `redis-server` binary: on `PATH`, else Debian's path.
fn redis_server() -> Result<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("redis-server"))
        .find(|p| p.is_file());
    on_path
        .or_else(|| Some(PathBuf::from("/usr/bin/redis-server")).filter(|p| p.is_file()))
        .context("redis-server not found (scripts/deps.sh --test installs it)")
}
