//! A token bucket with injected time: the release rate limit.
//!
//! Integer micro-tokens so that no rounding ever lets one extra person
//! through; the bucket holds at most `burst` tokens and refills at `rate`
//! per second (in thousandths, so a rate made up for no-shows need not be
//! whole). Over any window of `t` seconds it grants at most
//! `rate * t + burst`.

/// One whole token, in micro-tokens.
const TOKEN_MICRO: u64 = 1_000_000;

#[derive(Debug, Clone)]
pub struct TokenBucket {
    /// Tokens per 1000 s: micro-tokens per millisecond.
    rate_milli: u64,
    capacity_micro: u64,
    level_micro: u64,
    last_ms: u64,
}

impl TokenBucket {
    /// A full bucket at `now_ms`.
    pub fn new(rate_per_s: u32, burst: u32, now_ms: u64) -> Self {
        let capacity_micro = u64::from(burst.max(1)) * TOKEN_MICRO;
        Self {
            rate_milli: u64::from(rate_per_s) * 1000,
            capacity_micro,
            level_micro: capacity_micro,
            last_ms: now_ms,
        }
    }

    /// Changes rate and burst (config reload) without refilling.
    pub fn reconfigure(&mut self, rate_per_s: u32, burst: u32) {
        self.rate_milli = u64::from(rate_per_s) * 1000;
        self.capacity_micro = u64::from(burst.max(1)) * TOKEN_MICRO;
        self.level_micro = self.level_micro.min(self.capacity_micro);
    }

    /// Changes the rate alone, in tokens per 1000 s, without refilling.
    pub fn set_rate_milli(&mut self, rate_milli: u64) {
        self.rate_milli = rate_milli;
    }

    fn refill(&mut self, now_ms: u64) {
        // A clock that goes backwards adds nothing.
        let elapsed_ms = now_ms.saturating_sub(self.last_ms);
        self.last_ms = self.last_ms.max(now_ms);
        // rate (tokens/1000 s) * elapsed (ms) = micro-tokens.
        let added = self.rate_milli.saturating_mul(elapsed_ms);
        self.level_micro = self
            .level_micro
            .saturating_add(added)
            .min(self.capacity_micro);
    }

    /// Takes one token if there is one.
    pub fn try_take(&mut self, now_ms: u64) -> bool {
        self.refill(now_ms);
        if self.level_micro >= TOKEN_MICRO {
            self.level_micro -= TOKEN_MICRO;
            true
        } else {
            false
        }
    }

    /// Milliseconds until one token is available (0 if one is now).
    pub fn wait_ms(&mut self, now_ms: u64) -> u64 {
        self.refill(now_ms);
        let missing = TOKEN_MICRO.saturating_sub(self.level_micro);
        missing.div_ceil(self.rate_milli.max(1))
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
    fn a_rate_in_thousandths_grants_its_fraction() {
        let mut b = TokenBucket::new(1, 2, 0);
        b.set_rate_milli(1500);
        assert!(b.try_take(0) && b.try_take(0));
        let granted = (1..=10_000).filter(|ms| b.try_take(*ms)).count();
        assert_eq!(granted, 15, "1.5/s over 10 s");
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
