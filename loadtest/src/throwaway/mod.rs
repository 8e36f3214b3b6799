//! Throwaway stores for tests and rehearsals: a [`ThrowawayRedis`] and a
//! [`ThrowawayPostgres`], each on a free loopback port with a directory of
//! its own, stopped and removed when dropped (also when a test fails).
//! Never the machine's own servers on their standard ports.

mod postgres;
mod redis;

use std::process::Child;
use std::time::Duration;

pub use postgres::{Durability, ThrowawayPostgres};
pub use redis::{Persistence, ThrowawayRedis};

/// A start whose port was taken in between is tried on a new one, at most
/// this often.
const START_TRIES_MAX: usize = 5;
/// How long a server gets to answer after it was started.
const READY_WAIT_MAX: Duration = Duration::from_secs(30);

fn free_port() -> std::io::Result<u16> {
    crate::load::ports::free_port()
}

fn kill_and_wait(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}
