//! Adaptive release: the rate that follows the backend.
//!
//! A room with `release_per_second = "adaptive"` lets the gateway move its
//! release rate, once a second, from what the admitted shoppers' checkouts
//! measure: their p99 latency, the share that failed for the backend's sake
//! (errors and timeouts; a declined card is the shopper's, not the
//! backend's) and the free `max_active` slots.
//!
//! The law is the gradient of Envoy's adaptive concurrency filter (itself
//! after Netflix concurrency-limits' Gradient2), applied to a rate instead
//! of a concurrency limit, with the operator's `target_p99_ms` in the place
//! of the measured minimum RTT:
//!
//! ```text
//! gradient  = clamp(target_p99 / p99, 0.5, 2.0)
//!             (and, above max_error_ratio with at least 2 failures, at most
//!             max_error_ratio / error_ratio)
//! base      = rate                    when gradient ≥ 1
//!             min(rate, served/s)     when gradient < 1
//! rate'     = (1 − α) × rate + α × base × gradient,   α = 0.25
//! growing:  rate' ≤ max(rate + 1, (1 + 0.15 × (gradient − 1)) × served/s)
//! cutting:  not again within 3 s of the last cut
//! rate'     clamped to [min_per_second, max_per_second]
//! ```
//!
//! The rate moves down only while the latency is above the target and up
//! only while it is below, by at most `α` of the gap each second. The
//! served-rate bound (BBR's delivery rate) and the cut cooldown damp the
//! lag between a release and its checkout; against a saturating backend a
//! limit cycle of about ±20-50 % remains (see `tests/adaptive_sim.rs`).
//! [`window`] holds the measurements it runs on.

pub mod window;

pub use window::{CheckoutWindow, Outcome};

/// Smoothing of each step: the share of the proposed change taken.
pub const SMOOTHING: f64 = 0.25;
/// Largest cut of one step's gradient (the rate at most halves per proposal).
pub const GRADIENT_MIN: f64 = 0.5;
/// Largest growth of one step's gradient.
pub const GRADIENT_MAX: f64 = 2.0;
/// While growing, the rate stays within `1 + SERVED_HEADROOM × (gradient
/// − 1)` of what the backend served per second over the window (BBR's
/// delivery-rate bound, narrowing as the p99 nears the target): at most
/// 1.15 × served with the p99 at half the target, 1.0 × at the target.
pub const SERVED_HEADROOM: f64 = 0.15;
/// While growing, the served-rate bound still lets the rate grow by this
/// much per step (AIMD's additive increase, in releases per second).
pub const ADDITIVE_MIN: f64 = 1.0;
/// After a cut, the next waits this long: the window still holds the
/// checkouts released before it.
pub const COOLDOWN_MS: u64 = 3000;
/// Fewer backend failures than this in the window are not a ratio to act
/// on: at 2 checkouts a second one failure is 17 % of a 3 s window.
pub const FAILURES_MIN: u32 = 2;
/// Fewer checkouts than this in the window say nothing: the rate holds.
pub const SAMPLES_MIN: u32 = 5;
/// A relative change below this is reported as `steady`.
pub const STEADY_BAND: f64 = 0.01;
/// How often the gateway runs the controller.
pub const STEP_MS: u64 = 1000;

/// The operator's `[rooms.adaptive]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    pub target_p99_ms: u32,
    pub max_error_ratio: f64,
    pub min_per_second: u32,
    pub max_per_second: u32,
}

impl Bounds {
    /// Where the rate starts: the geometric middle of the bounds, far from
    /// both a stampede at `max` and a crawl at `min`, and at most a factor
    /// `sqrt(max / min)` from any rate the backend can take.
    pub fn start_per_second(&self) -> f64 {
        let (lo, hi) = (
            f64::from(self.min_per_second),
            f64::from(self.max_per_second),
        );
        (lo * hi).sqrt().clamp(lo, hi)
    }
}

/// What the window of admitted shoppers' checkouts says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurements {
    /// Checkouts that ended in the window.
    pub checkouts: u32,
    /// Their p99 latency; `None` with no checkout.
    pub p99_ms: Option<u32>,
    /// Of them, those that failed for the backend's sake (errors, timeouts).
    pub backend_failures: u32,
    /// Checkouts the backend served per second over the window (failures
    /// not counted).
    pub served_per_second: f64,
    /// `max_active` slots free now.
    pub free_slots: u32,
}

impl Measurements {
    pub fn error_ratio(&self) -> f64 {
        if self.checkouts == 0 {
            0.0
        } else {
            f64::from(self.backend_failures) / f64::from(self.checkouts)
        }
    }
}

/// Why the rate is what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The p99 latency moved it (down above the target, up below it).
    Latency,
    /// The error ratio was above `max_error_ratio`.
    Errors,
    /// No `max_active` slot was free: the rate may not grow.
    Slots,
    /// It would have left its bounds.
    Bound,
    /// Too few checkouts to judge, or no change worth the name.
    Steady,
}

impl Reason {
    pub const ALL: [Reason; 5] = [
        Reason::Latency,
        Reason::Errors,
        Reason::Slots,
        Reason::Bound,
        Reason::Steady,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Latency => "latency",
            Reason::Errors => "errors",
            Reason::Slots => "slots",
            Reason::Bound => "bound",
            Reason::Steady => "steady",
        }
    }
}

/// One step's result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    /// Releases per second, exact; the room takes [`Decision::per_second`].
    pub rate: f64,
    pub reason: Reason,
    /// When it was taken (unix ms).
    pub at_ms: u64,
    /// When the rate was last cut (unix ms).
    pub cut_at_ms: Option<u64>,
}

impl Decision {
    /// The first decision of a room: the start rate, `steady`.
    pub fn start(bounds: &Bounds, now_ms: u64) -> Self {
        Self {
            rate: bounds.start_per_second(),
            reason: Reason::Steady,
            at_ms: now_ms,
            cut_at_ms: None,
        }
    }

    /// The whole rate the room's bucket runs at (at least 1).
    pub fn per_second(&self) -> u32 {
        self.rate.round().clamp(1.0, f64::from(u32::MAX)) as u32
    }
}

/// The controller: the next rate from the last window, the previous rate
/// and the bounds. Pure; the caller runs it every [`STEP_MS`].
pub fn step(bounds: &Bounds, previous: &Decision, m: &Measurements, now_ms: u64) -> Decision {
    let lo = f64::from(bounds.min_per_second);
    let hi = f64::from(bounds.max_per_second.max(bounds.min_per_second));
    let rate = if previous.rate.is_finite() {
        previous.rate
    } else {
        bounds.start_per_second()
    };
    let decide = |next: f64, reason| Decision {
        rate: next,
        reason,
        at_ms: now_ms,
        cut_at_ms: if next < rate {
            Some(now_ms)
        } else {
            previous.cut_at_ms
        },
    };
    if rate < lo || rate > hi {
        return decide(rate.clamp(lo, hi), Reason::Bound);
    }
    let p99 = match m.p99_ms {
        Some(p99) if m.checkouts >= SAMPLES_MIN => f64::from(p99.max(1)),
        _ => return decide(rate, Reason::Steady),
    };
    let latency = (f64::from(bounds.target_p99_ms) / p99).clamp(GRADIENT_MIN, GRADIENT_MAX);
    let ratio = m.error_ratio();
    let (mut gradient, mut reason) = (latency, Reason::Latency);
    if ratio > bounds.max_error_ratio && m.backend_failures >= FAILURES_MIN {
        let errors = (bounds.max_error_ratio / ratio).clamp(GRADIENT_MIN, 1.0);
        if errors < gradient {
            (gradient, reason) = (errors, Reason::Errors);
        }
    }
    if gradient > 1.0 && m.free_slots == 0 {
        return decide(rate, Reason::Slots);
    }
    if gradient < 1.0
        && previous
            .cut_at_ms
            .is_some_and(|at| now_ms.saturating_sub(at) < COOLDOWN_MS)
    {
        return decide(rate, reason);
    }
    let base = if gradient < 1.0 {
        rate.min(m.served_per_second.max(lo))
    } else {
        rate
    };
    let mut next = (1.0 - SMOOTHING) * rate + SMOOTHING * base * gradient;
    if gradient > 1.0 {
        // At least one release per second more: a rate near its floor,
        // rounded to whole releases, would otherwise never get past what
        // it served.
        let headroom = 1.0 + SERVED_HEADROOM * (gradient - 1.0);
        next = next.min((rate + ADDITIVE_MIN).max(m.served_per_second * headroom));
    }
    if next > hi || next < lo {
        return decide(next.clamp(lo, hi), Reason::Bound);
    }
    if (next - rate).abs() < STEADY_BAND * rate {
        reason = Reason::Steady;
    }
    decide(next, reason)
}

#[cfg(test)]
mod tests;
