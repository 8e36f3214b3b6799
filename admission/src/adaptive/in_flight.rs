//! Checkouts at the backend now, averaged over time: the controller's
//! leading signal.
//!
//! The window of finished checkouts says what happened up to a checkout's
//! latency ago; the count of checkouts started and not yet ended says the
//! moment a queue builds at the backend (Little's law: in flight = arrival
//! rate × time in the system). A single reading at the step swings by
//! about its square root, so a step takes the time average since the last
//! one.

/// Checkouts started and not ended, and their time average between steps.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct InFlight {
    now: u32,
    /// Checkouts started since `since_ms`.
    started: u32,
    /// Since `since_ms`: the sum of `now × dt` (checkout-milliseconds).
    area: u64,
    changed_at_ms: u64,
    since_ms: u64,
}

impl InFlight {
    pub fn new(now_ms: u64) -> Self {
        Self {
            now: 0,
            started: 0,
            area: 0,
            changed_at_ms: now_ms,
            since_ms: now_ms,
        }
    }

    fn advance(&mut self, now_ms: u64) {
        let now_ms = now_ms.max(self.changed_at_ms);
        self.area += u64::from(self.now) * (now_ms - self.changed_at_ms);
        self.changed_at_ms = now_ms;
    }

    /// A checkout reached the backend.
    pub fn start(&mut self, now_ms: u64) {
        self.advance(now_ms);
        self.now += 1;
        self.started += 1;
    }

    /// A checkout ended (however it ended).
    pub fn end(&mut self, now_ms: u64) {
        self.advance(now_ms);
        self.now = self.now.saturating_sub(1);
    }

    /// Checkouts in flight right now.
    pub fn current(&self) -> u32 {
        self.now
    }

    /// Since the last call (or since `new`): the time average of the
    /// checkouts in flight and the checkouts started per second; starts
    /// the next span. With no time passed: the current count and no rate.
    pub fn take(&mut self, now_ms: u64) -> Span {
        self.advance(now_ms);
        let span = self.changed_at_ms.saturating_sub(self.since_ms);
        let taken = if span == 0 {
            Span {
                average: f64::from(self.now),
                started_per_second: None,
            }
        } else {
            Span {
                average: self.area as f64 / span as f64,
                started_per_second: Some(f64::from(self.started) * 1000.0 / span as f64),
            }
        };
        self.area = 0;
        self.started = 0;
        self.since_ms = self.changed_at_ms;
        taken
    }
}

/// What [`InFlight::take`] returns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    /// Checkouts in flight, averaged over the span.
    pub average: f64,
    /// Checkouts started per second over it.
    pub started_per_second: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_over_time_between_steps() {
        let mut f = InFlight::new(0);
        f.start(0);
        f.start(500);
        // 1 for 500 ms, then 2 for 500 ms; 2 started in 1 s.
        let s = f.take(1000);
        assert!((s.average - 1.5).abs() < 1e-9, "{s:?}");
        assert_eq!(s.started_per_second, Some(2.0));
        f.end(1250);
        assert_eq!(f.current(), 1);
        // 2 for 250 ms, then 1 for 750 ms; none started.
        let s = f.take(2000);
        assert!((s.average - 1.25).abs() < 1e-9, "{s:?}");
        assert_eq!(s.started_per_second, Some(0.0));
        f.end(2000);
        f.end(2000);
        assert_eq!(f.current(), 0, "an end without a start is ignored");
        assert_eq!(
            f.take(2000),
            Span {
                average: 0.0,
                started_per_second: None
            }
        );
    }
}
