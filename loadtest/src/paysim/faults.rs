//! The chaos knobs: what goes wrong, how often, and how late.
//!
//! One [`Faults`] value is the whole set; it is read from a TOML file or CLI
//! flags at start and replaced whole by `PUT /admin/faults` at run time.
//! Ratios are probabilities in `[0, 1]`; every random draw comes from the
//! simulator's seeded RNG.

use rand::Rng;
use serde::{Deserialize, Serialize};

/// Longest delay any knob may ask for: ten minutes.
pub const DELAY_MS_MAX: u64 = 600_000;
/// Largest reorder window, in events.
pub const REORDER_WINDOW_MAX: u32 = 1_000;
/// Largest timestamp skew a webhook signature may be given, in seconds.
pub const SIGNATURE_SKEW_S_MAX: i64 = 86_400;

/// All fault knobs. Missing fields take their default (no fault).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// Share of API requests processed and then never answered: the
    /// connection is held for `timeout_hold_ms`, then closed.
    pub timeout_ratio: f64,
    /// Share of API requests answered `503` without being processed.
    pub error_5xx_ratio: f64,
    /// Share of API requests processed and then answered `503`.
    pub error_5xx_after_processing_ratio: f64,
    /// Share of API requests whose connection is reset (TCP RST); half of
    /// them are processed first, half are not.
    pub reset_ratio: f64,
    /// Added before every API answer (while a worker is held).
    pub latency_ms: u64,
    /// API requests served at once; the others wait their turn, first come
    /// first served (`0`: no limit). With `latency_ms`, the provider's
    /// capacity is about `workers × 1000 / latency_ms` requests per second.
    pub workers: u32,
    /// How long `pm_slow` authorizations take to answer.
    pub slow_ms: u64,
    /// How long a timed-out or lost answer holds its connection before
    /// closing it; longer than any sane client timeout.
    pub timeout_hold_ms: u64,
    /// Share of webhook events sent a second time, later.
    pub webhook_duplicate_ratio: f64,
    /// Webhook events are shuffled in groups of this many (0 and 1: in order).
    pub webhook_reorder_window: u32,
    /// Delay before an event's first webhook delivery.
    pub webhook_delay_ms: u64,
    /// Share of events whose webhook is never sent (they stay in `/v1/events`).
    pub webhook_loss_ratio: f64,
    /// Share of webhook deliveries signed with a wrong signature.
    pub webhook_bad_signature_ratio: f64,
    /// Added to the signature timestamp `t` (negative: a stale signature).
    pub webhook_signature_skew_s: i64,
    /// While on, capture requests are processed and their answers held
    /// unsent; turning it off sends them. A test sees the capture arrive
    /// (`GET /admin/held`) and can crash the caller at exactly that step.
    pub hold_captures: bool,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            timeout_ratio: 0.0,
            error_5xx_ratio: 0.0,
            error_5xx_after_processing_ratio: 0.0,
            reset_ratio: 0.0,
            latency_ms: 0,
            workers: 0,
            slow_ms: 2_000,
            timeout_hold_ms: 60_000,
            webhook_duplicate_ratio: 0.0,
            webhook_reorder_window: 0,
            webhook_delay_ms: 0,
            webhook_loss_ratio: 0.0,
            webhook_bad_signature_ratio: 0.0,
            webhook_signature_skew_s: 0,
            hold_captures: false,
        }
    }
}

/// Why a set of knobs was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FaultsError {
    #[error("{0} must be between 0 and 1")]
    RatioOutOfRange(&'static str),
    #[error("timeout, 5xx and reset ratios add up to more than 1")]
    RatiosOverOne,
    #[error("{0} must be at most {DELAY_MS_MAX} ms")]
    DelayTooLong(&'static str),
    #[error("webhook_reorder_window must be at most {REORDER_WINDOW_MAX}")]
    WindowTooLarge,
    #[error("webhook_signature_skew_s must be within ±{SIGNATURE_SKEW_S_MAX}")]
    SkewTooLarge,
}

/// What the network does to one API request, drawn before it is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkFault {
    None,
    /// Answer `503` and do not process.
    Unavailable,
    /// Process, then answer `503`.
    UnavailableAfterProcessing,
    /// Process, then hold the connection past the client's timeout.
    Timeout,
    /// Reset the connection, after processing or before.
    Reset {
        after_processing: bool,
    },
}

impl Faults {
    /// Checks every knob; the simulator only ever runs validated knobs.
    pub fn validate(&self) -> Result<(), FaultsError> {
        let ratios = [
            ("timeout_ratio", self.timeout_ratio),
            ("error_5xx_ratio", self.error_5xx_ratio),
            (
                "error_5xx_after_processing_ratio",
                self.error_5xx_after_processing_ratio,
            ),
            ("reset_ratio", self.reset_ratio),
            ("webhook_duplicate_ratio", self.webhook_duplicate_ratio),
            ("webhook_loss_ratio", self.webhook_loss_ratio),
            (
                "webhook_bad_signature_ratio",
                self.webhook_bad_signature_ratio,
            ),
        ];
        for (name, ratio) in ratios {
            if !(0.0..=1.0).contains(&ratio) {
                return Err(FaultsError::RatioOutOfRange(name));
            }
        }
        let network = self.timeout_ratio
            + self.error_5xx_ratio
            + self.error_5xx_after_processing_ratio
            + self.reset_ratio;
        if network > 1.0 + f64::EPSILON {
            return Err(FaultsError::RatiosOverOne);
        }
        let delays = [
            ("latency_ms", self.latency_ms),
            ("slow_ms", self.slow_ms),
            ("timeout_hold_ms", self.timeout_hold_ms),
            ("webhook_delay_ms", self.webhook_delay_ms),
        ];
        for (name, ms) in delays {
            if ms > DELAY_MS_MAX {
                return Err(FaultsError::DelayTooLong(name));
            }
        }
        if self.webhook_reorder_window > REORDER_WINDOW_MAX {
            return Err(FaultsError::WindowTooLarge);
        }
        if self.webhook_signature_skew_s.abs() > SIGNATURE_SKEW_S_MAX {
            return Err(FaultsError::SkewTooLarge);
        }
        Ok(())
    }

    /// Draws the network fault for one API request.
    pub fn draw_network(&self, rng: &mut impl Rng) -> NetworkFault {
        let total = self.timeout_ratio
            + self.error_5xx_ratio
            + self.error_5xx_after_processing_ratio
            + self.reset_ratio;
        if total <= 0.0 {
            return NetworkFault::None;
        }
        let roll: f64 = rng.random();
        let mut edge = self.timeout_ratio;
        if roll < edge {
            return NetworkFault::Timeout;
        }
        edge += self.error_5xx_ratio;
        if roll < edge {
            return NetworkFault::Unavailable;
        }
        edge += self.error_5xx_after_processing_ratio;
        if roll < edge {
            return NetworkFault::UnavailableAfterProcessing;
        }
        edge += self.reset_ratio;
        if roll < edge {
            return NetworkFault::Reset {
                after_processing: rng.random_bool(0.5),
            };
        }
        NetworkFault::None
    }
}

/// `true` with probability `ratio`; draws nothing when the ratio is 0, so a
/// run with a knob off draws the same numbers as a run without the knob.
pub fn chance(rng: &mut impl Rng, ratio: f64) -> bool {
    ratio > 0.0 && rng.random_bool(ratio.min(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};

    #[test]
    fn defaults_are_valid_and_fault_free() {
        let faults = Faults::default();
        assert_eq!(faults.validate(), Ok(()));
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..100 {
            assert_eq!(faults.draw_network(&mut rng), NetworkFault::None);
        }
    }

    #[test]
    fn out_of_range_knobs_are_refused() {
        let bad_ratio = Faults {
            reset_ratio: 1.5,
            ..Faults::default()
        };
        assert_eq!(
            bad_ratio.validate(),
            Err(FaultsError::RatioOutOfRange("reset_ratio"))
        );
        let over_one = Faults {
            timeout_ratio: 0.6,
            error_5xx_ratio: 0.6,
            ..Faults::default()
        };
        assert_eq!(over_one.validate(), Err(FaultsError::RatiosOverOne));
        let too_slow = Faults {
            slow_ms: DELAY_MS_MAX + 1,
            ..Faults::default()
        };
        assert_eq!(
            too_slow.validate(),
            Err(FaultsError::DelayTooLong("slow_ms"))
        );
    }

    #[test]
    fn draws_follow_the_ratios() {
        let faults = Faults {
            timeout_ratio: 0.25,
            error_5xx_ratio: 0.25,
            reset_ratio: 0.25,
            ..Faults::default()
        };
        let mut rng = StdRng::seed_from_u64(42);
        let draws_total = 4_000;
        let mut timeouts = 0;
        let mut clean = 0;
        for _ in 0..draws_total {
            match faults.draw_network(&mut rng) {
                NetworkFault::Timeout => timeouts += 1,
                NetworkFault::None => clean += 1,
                _ => {}
            }
        }
        assert!((800..1200).contains(&timeouts), "timeouts {timeouts}");
        assert!((800..1200).contains(&clean), "clean {clean}");
    }
}
