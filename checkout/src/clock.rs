//! Time is an input: every operation takes `now_ms`, and loops read it from
//! a [`Clock`] so tests can move time without sleeping.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, UTC.
pub type UnixMs = i64;

pub trait Clock: Send + Sync {
    fn now_ms(&self) -> UnixMs;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> UnixMs {
        // A clock before 1970 is a broken host; 0 keeps arithmetic sane.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to (tests, simulations).
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn new(start_ms: UnixMs) -> Self {
        Self(AtomicI64::new(start_ms))
    }
    pub fn advance_ms(&self, delta_ms: i64) {
        self.0.fetch_add(delta_ms, Ordering::SeqCst);
    }
    pub fn set_ms(&self, now_ms: UnixMs) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> UnixMs {
        self.0.load(Ordering::SeqCst)
    }
}
