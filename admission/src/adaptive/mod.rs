//! Adaptive release: the rate that follows the backend.
//!
//! A room with `release_per_second = "adaptive"` lets the gateway move its
//! release rate, once a second, from what the admitted shoppers' checkouts
//! measure: their latency, the share that failed for the backend's sake
//! (errors and timeouts; a declined card is the shopper's, not the
//! backend's), the checkouts running at the backend now, and the free
//! `max_active` slots.
//!
//! The law ([`law::step`]) is BBR's (Cardwell et al., 2016) state machine
//! on a release rate: STARTUP grows the rate until the backend saturates,
//! DRAIN empties the queue that built and measures the backend's capacity
//! (what it serves while saturated), CRUISE holds the rate at a fixed share
//! of that capacity. Saturation is TCP Vegas's (Brakmo and Peterson, 1994)
//! queue estimate: checkouts in flight beyond what the arrival rate times
//! the no-queue latency explains (Little's law). See docs/waiting-room.md.
//!
//! - [`law`]: the controller, a pure function of the last decision and the
//!   measurements.
//! - [`window`]: the bounded window of finished checkouts it measures.
//! - [`in_flight`]: the checkouts running now, averaged between steps.

pub mod in_flight;
pub mod law;
pub mod window;

pub use in_flight::{InFlight, Span};
pub use law::step;
pub use window::{CheckoutWindow, Outcome};

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

/// What the window of admitted shoppers' checkouts, and the count of those
/// running, say.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurements {
    /// Checkouts that ended in the window.
    pub checkouts: u32,
    /// Their p99 latency; `None` with no checkout.
    pub p99_ms: Option<u32>,
    /// Their mean latency; `None` with no checkout.
    pub mean_ms: Option<f64>,
    /// Of them, those that failed for the backend's sake (errors, timeouts).
    pub backend_failures: u32,
    /// Checkouts the backend served per second over the window (failures
    /// not counted).
    pub served_per_second: f64,
    /// Checkouts the backend served in the last second alone.
    pub served_last_s: f64,
    /// Mean latency of the checkouts that ended in the last
    /// [`window::LONG_MS`]; `None` with none.
    pub long_mean_ms: Option<f64>,
    /// Their p99 latency; `None` with none.
    pub long_p99_ms: Option<u32>,
    /// With fewer than [`window::SLOW_ROOM_BELOW`] checkouts in the window
    /// and a horizon spanning [`window::SLOW_ROOM_SPAN_MS`]: the mean
    /// latency of the newest that many; `None` otherwise.
    pub slow_room_mean_ms: Option<f64>,
    /// Checkouts at the backend (started, not ended), averaged over the
    /// last step; `None` when the caller does not count them.
    pub in_flight: Option<f64>,
    /// Checkouts started per second over the last step.
    pub started_per_second: Option<f64>,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The latency moved it: down when a queue built at the backend (or
    /// the p99 passed its ceiling), up while none did.
    Latency,
    /// The error ratio was above `max_error_ratio`.
    Errors,
    /// No `max_active` slot was free: the rate may not grow.
    Slots,
    /// It would have left its bounds.
    Bound,
    /// Held: cruising, too few checkouts to judge, or no change worth the
    /// name.
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

/// Where the controller is in its cycle (BBR's states).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Growing the rate until the backend saturates.
    #[default]
    Startup,
    /// Emptying the queue that built, measuring the capacity.
    Drain,
    /// Holding a share of the measured capacity.
    Cruise,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Startup => "startup",
            Phase::Drain => "drain",
            Phase::Cruise => "cruise",
        }
    }
}

/// One step's result, and what the next step needs of the past (the
/// whole of it travels through a fleet's store: `fleet_rate`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Decision {
    /// Releases per second, exact; the room takes [`Decision::per_second`].
    pub rate: f64,
    pub reason: Reason,
    /// When it was taken (unix ms).
    pub at_ms: u64,
    pub phase: Phase,
    /// The backend's capacity (checkouts per second), as last measured.
    pub capacity: Option<f64>,
    /// The highest capacity measured: where a recovery returns to first.
    pub capacity_high: Option<f64>,
    /// The capacity STARTUP goes straight back to (CRUISE_GAIN × it, when
    /// below): the highest after a recovery, the one it cruised on after
    /// a false alarm in a cruise; `None` otherwise (it ramps).
    #[serde(default)]
    pub resume: Option<f64>,
    /// The checkouts' latency with no queue (ms): Vegas's base RTT.
    pub base_ms: Option<f64>,
    /// The queue estimate, smoothed.
    pub queue: Option<f64>,
    /// Steps in a row with the queue above its threshold.
    pub over_steps: u32,
    /// In DRAIN: the capacity samples taken, and their sum.
    pub capacity_samples: u32,
    pub capacity_sum: f64,
    /// In CRUISE: steps since it began, steps in a row of underload, and
    /// the long-window latency it cruises at.
    pub cruise_steps: u32,
    pub underload_steps: u32,
    pub cruise_latency_ms: Option<f64>,
    /// In CRUISE: steps in a row the backend served more than
    /// `law::OUTSERVED` × the capacity it cruises on.
    pub outserved_steps: u32,
    /// Whether the room has cruised before (a capacity was settled on).
    pub cruised: bool,
    /// In CRUISE: whether it resumed a capacity measured before (its
    /// first steps are judged as STARTUP's).
    #[serde(default)]
    pub resumed: bool,
    /// Steps so far with at least [`window::SAMPLES_WANTED`] checkouts
    /// while no base latency was learnt (an early base is taken at
    /// [`law::EARLY_BASE_STEPS`]).
    #[serde(default)]
    pub early_steps: u32,
}

impl Decision {
    /// The first decision of a room: the start rate, `steady`, in STARTUP.
    pub fn start(bounds: &Bounds, now_ms: u64) -> Self {
        Self {
            rate: bounds.start_per_second(),
            reason: Reason::Steady,
            at_ms: now_ms,
            phase: Phase::Startup,
            capacity: None,
            capacity_high: None,
            resume: None,
            base_ms: None,
            queue: None,
            over_steps: 0,
            capacity_samples: 0,
            capacity_sum: 0.0,
            cruise_steps: 0,
            underload_steps: 0,
            cruise_latency_ms: None,
            outserved_steps: 0,
            cruised: false,
            resumed: false,
            early_steps: 0,
        }
    }

    /// The whole rate the room's bucket runs at (at least 1).
    pub fn per_second(&self) -> u32 {
        self.rate.round().clamp(1.0, f64::from(u32::MAX)) as u32
    }
}

#[cfg(test)]
mod tests;
