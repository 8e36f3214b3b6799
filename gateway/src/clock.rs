//! The gateway's wall clock, read in one place.
//!
//! Decisions take the time as an argument (`now_ms`); only the edges (a
//! request arriving, a background pass starting) read it here.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
