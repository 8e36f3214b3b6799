//! Where `now` comes from. The room itself only ever takes `now_ms` as an
//! argument; the gateway reads it from a [`Clock`] once per request, tests
//! make it up.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in milliseconds.
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> u64;
}

/// The machine's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        // Before 1970 only on a badly broken host: treat as the epoch.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}
