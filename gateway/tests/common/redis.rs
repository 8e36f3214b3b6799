//! The gateway tests' throwaway `redis-server`: a thin face over
//! `sluice_loadtest::throwaway::ThrowawayRedis` (a free loopback port, its
//! own temp dir, no persistence unless asked, killed when dropped; never
//! the Redis the machine may already run), with the calls these tests make.

use std::net::SocketAddr;

use sluice_loadtest::throwaway::{Persistence, ThrowawayRedis};

use super::loopback;

pub struct Redis {
    inner: ThrowawayRedis,
    pub port: u16,
}

impl Redis {
    /// A new empty Redis without persistence.
    pub fn start() -> Redis {
        Self::start_with(Persistence::None)
    }

    /// A new empty Redis that keeps its data across [`Redis::restart`]
    /// (append-only file, `fsync` on every write).
    pub fn start_persistent() -> Redis {
        Self::start_with(Persistence::Aof)
    }

    fn start_with(persistence: Persistence) -> Redis {
        let inner = ThrowawayRedis::start(persistence)
            .expect("redis-server runs (scripts/deps.sh --test installs it)");
        let port = inner.port();
        Redis { inner, port }
    }

    pub fn url(&self) -> String {
        self.inner.url()
    }

    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    /// Kills the process (SIGKILL).
    pub fn stop(&mut self) {
        self.inner.kill();
    }

    /// Starts again on the same port with what it kept (after
    /// [`Redis::stop`]).
    pub fn restart(&mut self) {
        self.inner
            .restart(false)
            .expect("redis-server starts again");
    }

    /// Stops and starts again, empty, on the same port.
    pub fn restart_empty(&mut self) {
        self.inner.restart(true).expect("redis-server starts again");
    }

    /// One command; the raw answer, or `None` if nothing answers.
    pub fn command(&self, args: &[&str]) -> Option<String> {
        self.inner.command(&args.join(" ")).ok()
    }
}
