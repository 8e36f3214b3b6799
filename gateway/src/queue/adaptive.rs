//! Adaptive release of one room: its window of admitted shoppers'
//! checkouts and the controller's last decision, kept across reloads.
//!
//! The orders handler counts each checkout of the room while it runs
//! ([`AdaptiveRelease::checkout_started`] / [`AdaptiveRelease::checkout_ended`],
//! through [`super::CheckoutInFlight`]) and records each one that reached
//! the backend; the release worker runs [`AdaptiveRelease::step`] once a
//! second and gives the room the rate. A room configured with a number or `"auto"` has no
//! bounds here: the configured rate is in force and nothing moves it.

use std::num::NonZeroU32;

use sluice_admission::adaptive::{
    self, Bounds, CheckoutWindow, Decision, InFlight, Measurements, Outcome,
};
use sluice_policies::model::{ReleaseSource, Room};

#[derive(Debug, Default)]
pub struct AdaptiveRelease {
    /// The bounds in force; `None` when the room's rate is pinned.
    bounds: Option<Bounds>,
    window: CheckoutWindow,
    /// The room's checkouts running now, counted whatever the room's rate
    /// source, so a room made adaptive by a reload starts with the truth.
    in_flight: InFlight,
    decision: Option<Decision>,
    /// `fixed` or `auto` for a pinned rate.
    pinned: &'static str,
}

/// What `/admin/state` and the metrics show of it (or of a fleet room's
/// one rate).
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveView {
    pub bounds: Bounds,
    pub decision: Decision,
    /// The whole rate the release runs at.
    pub in_force: u32,
    /// `Some` for a fleet room: the gateway that took the decision in
    /// force (`None` inside: none taken yet).
    pub fleet: Option<Option<String>>,
}

impl AdaptiveRelease {
    /// Takes a (re)loaded room's release source. A room that stays
    /// adaptive keeps its rate (the next step brings it inside new bounds);
    /// one that becomes adaptive starts at the configured start rate; one
    /// pinned to a number forgets the controller. Returns the rate the room
    /// must run at, when it is not the configured one.
    pub fn configure(&mut self, room: &Room, now_ms: u64) -> Option<NonZeroU32> {
        match &room.release_source {
            ReleaseSource::Adaptive(a) => {
                let bounds = Bounds {
                    target_p99_ms: a.target_p99_ms,
                    max_error_ratio: a.max_error_ratio,
                    min_per_second: a.min_per_second.get(),
                    max_per_second: a.max_per_second.get(),
                };
                self.bounds = Some(bounds);
                match self.decision {
                    Some(d) => NonZeroU32::new(d.per_second()),
                    None => {
                        self.decision = Some(Decision {
                            rate: f64::from(room.release_per_second.get()),
                            ..Decision::start(&bounds, now_ms)
                        });
                        None
                    }
                }
            }
            ReleaseSource::Fixed | ReleaseSource::Auto { .. } => {
                self.pinned = if room.release_source == ReleaseSource::Fixed {
                    "fixed"
                } else {
                    "auto"
                };
                self.bounds = None;
                self.decision = None;
                None
            }
        }
    }

    /// A checkout of an admitted shopper that reached the backend.
    pub fn record(&mut self, now_ms: u64, latency_ms: u32, outcome: Outcome) {
        if self.bounds.is_some() {
            self.window.record(now_ms, latency_ms, outcome);
        }
    }

    /// A checkout of the room started (before the backend is called).
    pub fn checkout_started(&mut self, now_ms: u64) {
        self.in_flight.start(now_ms);
    }

    /// A checkout counted by [`Self::checkout_started`] ended, however.
    pub fn checkout_ended(&mut self, now_ms: u64) {
        self.in_flight.end(now_ms);
    }

    /// The room's checkouts running now.
    #[cfg(test)]
    pub fn checkouts_running(&self) -> u32 {
        self.in_flight.current()
    }

    /// One controller step; the rate the room must take, if adaptive.
    pub fn step(&mut self, now_ms: u64, free_slots: u32) -> Option<NonZeroU32> {
        let span = self.in_flight.take(now_ms);
        let bounds = self.bounds?;
        let previous = self
            .decision
            .unwrap_or_else(|| Decision::start(&bounds, now_ms));
        let m = Measurements {
            in_flight: Some(span.average),
            started_per_second: span.started_per_second,
            ..self.window.measure(now_ms, free_slots)
        };
        let next = adaptive::step(&bounds, &previous, &m, now_ms);
        self.decision = Some(next);
        NonZeroU32::new(next.per_second())
    }

    /// The `reason` label of `sluice_release_rate_limit`: what last moved
    /// an adaptive rate, or `fixed`/`auto` for a pinned one.
    pub fn reason(&self) -> &'static str {
        match self.view() {
            Some(v) => v.decision.reason.as_str(),
            None => self.pinned_reason(),
        }
    }

    /// `fixed` or `auto`: what pins a rate that is not adaptive.
    pub fn pinned_reason(&self) -> &'static str {
        if self.pinned.is_empty() {
            "fixed"
        } else {
            self.pinned
        }
    }

    pub fn view(&self) -> Option<AdaptiveView> {
        let decision = self.decision?;
        Some(AdaptiveView {
            bounds: self.bounds?,
            decision,
            in_force: decision.per_second(),
            fleet: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_policies::validate::parse_with_env;

    fn room(rate: &str) -> Room {
        let src = format!("[gateway]\n[[rooms]]\nname = \"r\"\nrelease_per_second = {rate}\nmax_active = 10\nqueue_capacity = 10\n[rooms.adaptive]\ntarget_p99_ms = 100\nmin_per_second = 4\nmax_per_second = 100\n");
        let src = if rate == "\"adaptive\"" {
            src
        } else {
            src.split("[rooms.adaptive]").next().unwrap().to_string()
        };
        let c = parse_with_env(&src, std::path::Path::new("p.toml"), &|_| None).unwrap();
        c.room("r").unwrap().clone()
    }

    #[test]
    fn slow_checkouts_lower_the_rate_and_a_number_pins_it() {
        let mut a = AdaptiveRelease::default();
        assert_eq!(a.configure(&room("\"adaptive\""), 0), None);
        assert_eq!(a.view().unwrap().decision.per_second(), 20);
        for i in 0..50 {
            a.record(900 + i, 400, Outcome::Served);
        }
        let rate = a.step(1000, 5).unwrap().get();
        assert!(rate < 20, "{rate}");
        assert_eq!(a.view().unwrap().decision.reason, adaptive::Reason::Latency);
        // A reload that keeps it adaptive keeps the moved rate.
        assert_eq!(
            a.configure(&room("\"adaptive\""), 1500).map(|r| r.get()),
            Some(rate)
        );
        // A number pins it: nothing moves it any more.
        assert_eq!(a.configure(&room("7"), 2000), None);
        assert_eq!(a.step(3000, 5), None);
        assert!(a.view().is_none());
    }
}
