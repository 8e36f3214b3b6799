//! A throwaway `redis-server` for tests: on a free loopback port, in its
//! own temp dir, without persistence unless asked, ready once it answers
//! `PING`, and killed when dropped (also when the test fails). Never the
//! Redis the machine may already run.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, loopback};

/// How long a start may take.
const READY_WAIT_MAX: Duration = Duration::from_secs(10);

pub struct Redis {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    /// Keeps its data in an append-only file synced on every write.
    persist: bool,
}

impl Redis {
    /// A new empty Redis without persistence (`--save ""`).
    pub fn start() -> Redis {
        Self::start_with(false)
    }

    /// A new empty Redis that keeps its data across [`Redis::restart`]
    /// (append-only file, `fsync` on every write).
    pub fn start_persistent() -> Redis {
        Self::start_with(true)
    }

    fn start_with(persist: bool) -> Redis {
        for _ in 0..5 {
            let mut redis = Redis {
                child: None,
                port: free_port(),
                dir: tempfile::tempdir().unwrap(),
                persist,
            };
            if redis.spawn() {
                return redis;
            }
        }
        panic!("redis-server did not start on 5 free ports");
    }

    /// Starts the process on `self.port`; `true` once it answers PING.
    fn spawn(&mut self) -> bool {
        let log = std::fs::File::create(self.dir.path().join("redis.log")).unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", ""])
            .args(if self.persist {
                ["--appendonly", "yes", "--appendfsync", "always"]
            } else {
                ["--appendonly", "no", "--appendfsync", "no"]
            })
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (scripts/deps.sh --test installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + READY_WAIT_MAX;
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false;
            }
            if self
                .command(&["PING"])
                .is_some_and(|r| r.starts_with("+PONG"))
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    /// Kills the process (its data, kept in memory only, is gone).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts again on the same port and data (after [`Redis::stop`]).
    pub fn restart(&mut self) {
        self.stop();
        assert!(
            self.spawn(),
            "redis-server did not start again on {}",
            self.port
        );
    }

    /// Stops and starts again, empty, on the same port.
    pub fn restart_empty(&mut self) {
        self.stop();
        for entry in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            if entry.file_name() != "redis.log" {
                let path = entry.path();
                let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
            }
        }
        assert!(
            self.spawn(),
            "redis-server did not start again on {}",
            self.port
        );
    }

    /// One command in RESP; the raw answer, or `None` if nothing answers.
    pub fn command(&self, args: &[&str]) -> Option<String> {
        let mut s = TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200)).ok()?;
        s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(req.as_bytes()).ok()?;
        let mut buf = [0u8; 65536];
        let n = s.read(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}
