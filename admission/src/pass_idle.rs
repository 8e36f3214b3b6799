//! Passes that end (`pass_idle_s`, `Sluice-Pass: end`): when a pass gives
//! its slot back, one rule for both back ends.
//!
//! A pass is active while it has made a request (a protected path, a
//! status call) within `pass_idle_s`, or has a checkout in flight. Past
//! that it is idle: its slot goes back, and the pass is refused (`401
//! invalid_pass`) on every gateway until its `exp`.

/// Why a pass ended before its `exp` (the `reason` label of
/// `sluice_passes_ended_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassEnd {
    /// No activity for `pass_idle_s`.
    Idle,
    /// The origin answered `Sluice-Pass: end`.
    Origin,
}

impl PassEnd {
    pub fn reason(self) -> &'static str {
        match self {
            PassEnd::Idle => "idle",
            PassEnd::Origin => "origin",
        }
    }
}

/// Whether a pass last active at `last_active_ms`, with
/// `checkouts_in_flight` running, is idle at `now_ms` under `idle_ms`
/// (`None`: `pass_idle_s = 0`, never).
pub fn is_idle(
    idle_ms: Option<u64>,
    last_active_ms: u64,
    checkouts_in_flight: u32,
    now_ms: u64,
) -> bool {
    match idle_ms {
        None => false,
        Some(_) if checkouts_in_flight > 0 => false,
        Some(idle) => now_ms.saturating_sub(last_active_ms) >= idle,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_after_the_window_unless_a_checkout_runs_or_it_is_off() {
        let idle = Some(120_000);
        assert!(!is_idle(idle, 1_000, 0, 120_999));
        assert!(is_idle(idle, 1_000, 0, 121_000));
        assert!(
            !is_idle(idle, 1_000, 1, 10_000_000),
            "a checkout in flight holds it"
        );
        assert!(!is_idle(None, 0, 0, u64::MAX), "pass_idle_s = 0: never");
        assert!(
            !is_idle(idle, 5_000, 0, 1_000),
            "a clock behind the activity is no idleness"
        );
        assert_eq!(PassEnd::Origin.reason(), "origin");
    }
}
