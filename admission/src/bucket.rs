//! A token bucket with injected time: the release rate limit.
//!
//! Integer milli-tokens so that no rounding ever lets one extra person
//! through; the bucket holds at most `burst` tokens and refills at `rate`
//! per second. Over any window of `t` seconds it grants at most
//! `rate * t + burst`.

/// One whole token, in milli-tokens.
const TOKEN_MILLI: u64 = 1000;

#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate_per_s: u64,
    capacity_milli: u64,
    level_milli: u64,
    last_ms: u64,
}

impl TokenBucket {
    /// A full bucket at `now_ms`.
    pub fn new(rate_per_s: u32, burst: u32, now_ms: u64) -> Self {
        let capacity_milli = u64::from(burst.max(1)) * TOKEN_MILLI;
        Self {
            rate_per_s: u64::from(rate_per_s),
            capacity_milli,
            level_milli: capacity_milli,
            last_ms: now_ms,
        }
    }

    /// Changes rate and burst (config reload) without refilling.
    pub fn reconfigure(&mut self, rate_per_s: u32, burst: u32) {
        self.rate_per_s = u64::from(rate_per_s);
        self.capacity_milli = u64::from(burst.max(1)) * TOKEN_MILLI;
        self.level_milli = self.level_milli.min(self.capacity_milli);
    }

    fn refill(&mut self, now_ms: u64) {
        // A clock that goes backwards adds nothing.
        let elapsed_ms = now_ms.saturating_sub(self.last_ms);
        self.last_ms = self.last_ms.max(now_ms);
        // rate (tokens/s) * elapsed (ms) = milli-tokens.
        let added = self.rate_per_s.saturating_mul(elapsed_ms);
        self.level_milli = self
            .level_milli
            .saturating_add(added)
            .min(self.capacity_milli);
    }

    /// Takes one token if there is one.
    pub fn try_take(&mut self, now_ms: u64) -> bool {
        self.refill(now_ms);
        if self.level_milli >= TOKEN_MILLI {
            self.level_milli -= TOKEN_MILLI;
            true
        } else {
            false
        }
    }

    /// Milliseconds until one token is available (0 if one is now).
    pub fn wait_ms(&mut self, now_ms: u64) -> u64 {
        self.refill(now_ms);
        let missing = TOKEN_MILLI.saturating_sub(self.level_milli);
        missing.div_ceil(self.rate_per_s.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_burst_then_the_rate() {
        let mut b = TokenBucket::new(10, 3, 0);
        let first: usize = (0..10).filter(|_| b.try_take(0)).count();
        assert_eq!(first, 3);
        assert_eq!(b.wait_ms(0), 100);
        let mut granted = 0;
        for ms in (1..=1000).step_by(1) {
            if b.try_take(ms) {
                granted += 1;
            }
        }
        assert_eq!(granted, 10);
    }

    #[test]
    fn backwards_clock_adds_nothing() {
        let mut b = TokenBucket::new(1, 1, 10_000);
        assert!(b.try_take(10_000));
        assert!(!b.try_take(0));
        assert!(!b.try_take(10_999));
        assert!(b.try_take(11_000));
    }
}
