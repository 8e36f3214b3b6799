//! Retries as data: a bounded [`RetryPolicy`], full-jitter backoff from a
//! seeded RNG, and pauses through an injected [`Sleeper`] so tests and
//! simulations move a manual clock instead of sleeping.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::clock::ManualClock;
use crate::limits::{PAYMENT_BACKOFF_MAX_MS, PAYMENT_TRIES_MAX};

/// How one provider operation is retried inside one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Sends plus look-ups in one call, at most (clamped to
    /// [`PAYMENT_TRIES_MAX`]); past it the reconciler owns the attempt.
    pub tries_max: u32,
    /// Backoff before the second try; doubles per try.
    pub backoff_base_ms: u64,
    /// Backoff cap (clamped to [`PAYMENT_BACKOFF_MAX_MS`]).
    pub backoff_cap_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            tries_max: 3,
            backoff_base_ms: 50,
            backoff_cap_ms: 1_000,
        }
    }
}

impl RetryPolicy {
    pub(crate) fn clamped(self) -> Self {
        Self {
            tries_max: self.tries_max.clamp(1, PAYMENT_TRIES_MAX),
            backoff_base_ms: self.backoff_base_ms.min(PAYMENT_BACKOFF_MAX_MS),
            backoff_cap_ms: self.backoff_cap_ms.min(PAYMENT_BACKOFF_MAX_MS),
        }
    }

    /// The ceiling of the pause after try number `tries` (1-based):
    /// `base * 2^(tries-1)`, capped.
    pub fn ceiling_ms(&self, tries: u32) -> u64 {
        let shift = tries.saturating_sub(1).min(32);
        self.backoff_base_ms
            .saturating_mul(1u64 << shift)
            .min(self.backoff_cap_ms)
    }
}

/// Full jitter: a pause drawn uniformly from `0..=ceiling`, so callers that
/// failed together do not retry together.
#[derive(Debug)]
pub struct Jitter(Mutex<StdRng>);

impl Jitter {
    pub fn seeded(seed: u64) -> Self {
        Self(Mutex::new(StdRng::seed_from_u64(seed)))
    }

    pub fn pause_ms(&self, policy: &RetryPolicy, tries: u32) -> u64 {
        let ceiling = policy.ceiling_ms(tries);
        let mut rng = self.0.lock().unwrap_or_else(|p| p.into_inner());
        rng.random_range(0..=ceiling)
    }
}

/// Waits between tries.
pub trait Sleeper: Send + Sync {
    fn sleep_ms(&self, ms: u64);

    /// The same wait inside an async call. By default it is
    /// [`Sleeper::sleep_ms`] when polled (a sleeper that only moves a
    /// clock does not block).
    fn pause(&self, ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move { self.sleep_ms(ms) })
    }
}

/// Really waits (production): a thread sleep, or a timer of the tokio
/// runtime the pause is polled in, so an async checkout's retry pause
/// holds no thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct ThreadSleeper;

impl Sleeper for ThreadSleeper {
    fn sleep_ms(&self, ms: u64) {
        std::thread::sleep(Duration::from_millis(ms));
    }

    fn pause(&self, ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let wait = Duration::from_millis(ms);
        match tokio::runtime::Handle::try_current() {
            Ok(_) => Box::pin(tokio::time::sleep(wait)),
            Err(_) => Box::pin(async move { std::thread::sleep(wait) }),
        }
    }
}

/// A manual clock "sleeps" by moving forward.
impl Sleeper for ManualClock {
    fn sleep_ms(&self, ms: u64) {
        self.advance_ms(i64::try_from(ms).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_and_jitter_stays_under_it() {
        let policy = RetryPolicy {
            tries_max: 10,
            backoff_base_ms: 100,
            backoff_cap_ms: 1_000,
        };
        let ceilings: Vec<u64> = (1..=6).map(|t| policy.ceiling_ms(t)).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1_000, 1_000]);
        let jitter = Jitter::seeded(7);
        for tries in 1..=6 {
            assert!(jitter.pause_ms(&policy, tries) <= policy.ceiling_ms(tries));
        }
        let same: Vec<u64> = {
            let a = Jitter::seeded(7);
            (1..=6).map(|t| a.pause_ms(&policy, t)).collect()
        };
        let again: Vec<u64> = {
            let b = Jitter::seeded(7);
            (1..=6).map(|t| b.pause_ms(&policy, t)).collect()
        };
        assert_eq!(same, again, "seeded jitter is reproducible");
    }
}
