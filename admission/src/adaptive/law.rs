//! The control law: BBR's state machine on a release rate, with TCP
//! Vegas's queue estimate as the congestion signal.
//!
//! ```text
//! base     = the checkouts' mean latency with no queue (Vegas's BaseRTT,
//!            BBR's RTprop): min-filtered over windows of ≥ BASE_SAMPLES
//!            checkouts (a slower room: over its newest BASE_SAMPLES of
//!            the horizon), base += BASE_DOWN × (mean − base) below it,
//!            and creeping up by BASE_DRIFT a second above it; before
//!            that, a STARTUP with windows of SAMPLES_WANTED to
//!            EARLY_BASE_BELOW checkouts takes its window's mean at the
//!            EARLY_BASE_STEPSth such step (a slow room's opening)
//! queue    = in_flight − started/s × base        (Little's law: the
//!            checkouts waiting at the backend, Vegas's diff)
//! saturated: released > served / OUTPACED and queue > QUEUE_STARTUP (one
//!            step, in STARTUP and a resumed cruise's first PROBE_STEPS)
//!            or > QUEUE_SATURATED (SATURATED_STEPS in a row, otherwise);
//!            or p99 > P99_CEILING × target_p99_ms (in STARTUP: p99 >
//!            STARTUP_P99 × target_p99_ms); or backend failures above
//!            max_error_ratio by ERROR_SIGMAS
//! STARTUP  rate' = min(rate × (1 + STARTUP_GROWTH), max(rate, STARTUP_SERVED × served))
//!          while p99 < STARTUP_GROW_BELOW × target or p99 < STARTUP_RISING
//!          × the 10 s p99 (Gradient2's short/long ratio); else it holds
//!          resuming a capacity (after a recovery the highest measured,
//!          CUBIC's return to W_max; after a false alarm in a cruise the
//!          one it cruised on): within RETURN_MAX × of the rate, straight
//!          to CRUISE on it (a "resumed" cruise); otherwise × RETURN_MAX
//!          a step towards CRUISE_GAIN × it
//!          saturated → DRAIN, capacity = served
//! DRAIN    capacity = mean of served-in-the-last-second while queue > QUEUE_CAPACITY
//!          rate' = min(rate, max(DRAIN_FLOOR × capacity, capacity − queue / DRAIN_S))
//!          queue < QUEUE_DRAINED → CRUISE at CRUISE_GAIN × capacity, the
//!          capacity raised to what the window serves as the drain ends
//!          (a collapse's seconds, its calls timing out, serve next to
//!          nothing: their mean says nothing of the backend's capacity)
//!          (once it has cruised, a drain that never saw queue >
//!          QUEUE_CAPACITY was a false alarm — once the window p99 is
//!          back under P99_CEILING × target, waiting at the same rate
//!          until then —: back to STARTUP, same rate,
//!          resuming the capacity of the cruise it interrupted, if any: a
//!          false alarm is no evidence that a lost capacity came back)
//! CRUISE   rate' = rate
//!          saturated → DRAIN
//!          the 10 s mean latency below UNDERLOAD_DROP × the one it cruised
//!          at, and the smoothed queue below UNDERLOAD_QUEUE, for
//!          UNDERLOAD_STEPS in a row → STARTUP resuming the highest
//!          capacity (it came back)
//!          the window served > OUTSERVED × the capacity it cruises on
//!          (from cruise step OUTSERVED_FROM_STEP on),
//!          OUTSERVED_STEPS in a row → STARTUP resuming that served rate,
//!          capacity (and the highest capacity, if lower) = it (a delivery
//!          rate is a lower bound of the capacity: shoppers who learn of
//!          their pass at their next poll check out in rounds, and the
//!          backend serves a round as fast as it can)
//!          probe: every PROBE_EVERY steps, while the window's and the
//!          10 s p99 are under PROBE_P99 × target, no backend failure in
//!          the window and the smoothed queue under PROBE_QUEUE, capacity
//!          ×(1 + PROBE_GAIN) (at least + 1/CRUISE_GAIN), rate' =
//!          CRUISE_GAIN × it (Gradient2's headroom, BBR's bandwidth probe);
//!          not a measurement: the highest capacity stays what drains and
//!          deliveries measured
//! rate'    clamped to [min_per_second, max_per_second]; no growth without
//!          a free max_active slot
//! ```

use super::{Bounds, Decision, Measurements, Phase, Reason};

/// Fewer checkouts than this in the window say nothing: the rate holds.
pub const SAMPLES_MIN: u32 = 5;
/// A relative change below this is reported as `steady`.
pub const STEADY_BAND: f64 = 0.01;
/// The base latency is learnt only on windows of at least this many
/// checkouts (a smaller window's mean is too noisy for a minimum filter).
pub const BASE_SAMPLES: u32 = 200;
/// Share of the gap the base moves down by when a window is faster.
pub const BASE_DOWN: f64 = 0.25;
/// How fast the base creeps up (per step) while every window is slower.
pub const BASE_DRIFT: f64 = 0.0005;
/// Smoothing of the queue estimate (the share of the new reading).
pub const QUEUE_SMOOTHING: f64 = 0.2;
/// Released above served by this factor: the backend is not keeping up.
pub const OUTPACED: f64 = 0.9;
/// In STARTUP, a queue of this many checkouts is saturation.
pub const QUEUE_STARTUP: f64 = 4.0;
/// Otherwise, a queue of this many, for [`SATURATED_STEPS`] in a row.
pub const QUEUE_SATURATED: f64 = 16.0;
pub const SATURATED_STEPS: u32 = 3;
/// A window p99 above this many times `target_p99_ms` is saturation too.
pub const P99_CEILING: f64 = 3.0;
/// Backend failures count when above `max_error_ratio` by this many
/// standard deviations (Poisson: `failures − k√failures`).
pub const ERROR_SIGMAS: f64 = 2.0;
/// STARTUP's growth per step.
pub const STARTUP_GROWTH: f64 = 0.2;
/// STARTUP's rate stays within this factor of what was served.
pub const STARTUP_SERVED: f64 = 1.5;
/// A recovery's return to the highest capacity grows the rate this many
/// times at most in one step.
pub const RETURN_MAX: f64 = 4.0;
/// In DRAIN, the capacity is sampled while the queue is above this.
pub const QUEUE_CAPACITY: f64 = 8.0;
/// DRAIN empties the queue over about this many seconds...
pub const DRAIN_S: f64 = 8.0;
/// ...at no less than this share of the capacity.
pub const DRAIN_FLOOR: f64 = 0.5;
/// DRAIN ends below this queue.
pub const QUEUE_DRAINED: f64 = 4.0;
/// CRUISE holds this share of the measured capacity.
pub const CRUISE_GAIN: f64 = 0.85;
/// In STARTUP, a window p99 above `target_p99_ms` (× this) is saturation:
/// the rate passed the one the target allows.
pub const STARTUP_P99: f64 = 1.0;
/// STARTUP grows only while the window p99 is under this share of the
/// target (between the two, it holds)...
pub const STARTUP_GROW_BELOW: f64 = 0.6;
/// ...or while it is not rising: the 3 s p99 under this many times the
/// 10 s one (Gradient2's short against long latency). A backend whose own
/// no-queue p99 is near the gate (exponential service times: 4.6 × the
/// mean) is not loaded yet, and holding there only moves the ramp later,
/// where it comes all at once.
pub const STARTUP_RISING: f64 = 1.1;
/// A cruise resumed on a capacity measured before (not just now) is
/// judged as STARTUP is for this many steps: one step over the queue
/// threshold drains. (10, a poll interval, drained healthy cruises on a
/// one-second queue reading on the real binaries.)
pub const PROBE_STEPS: u32 = 3;
/// CRUISE learns the latency it cruises at after this many steps (the
/// 10 s window then holds no drain)...
pub const CRUISE_SETTLE_STEPS: u32 = 15;
/// ...smoothed by this share per step.
pub const CRUISE_LATENCY_SMOOTHING: f64 = 0.05;
/// Underload: the 10 s mean latency below this share of the cruise one...
pub const UNDERLOAD_DROP: f64 = 0.8;
/// ...and the smoothed queue below this...
pub const UNDERLOAD_QUEUE: f64 = 0.5;
/// ...for this many steps in a row.
pub const UNDERLOAD_STEPS: u32 = 10;
/// CRUISE: the window served more than this many times the capacity it
/// cruises on...
pub const OUTSERVED: f64 = 1.5;
/// ...for this many steps in a row: the capacity is at least what was
/// served (a delivery rate is a lower bound of the capacity, BBR's
/// bottleneck bandwidth), back to STARTUP from there.
pub const OUTSERVED_STEPS: u32 = 2;
/// ...counted only from this cruise step on: the served window (3 s) must
/// first roll past the DRAIN's last backlog, which a paced line serves
/// at the backend's full pace for a few seconds after the queue count
/// fell under the cruise threshold.
pub const OUTSERVED_FROM_STEP: u32 = 5;

/// CRUISE probes for more (Gradient2's headroom, BBR's bandwidth probe):
/// every [`PROBE_EVERY`] steps, when the window's and the 10 s p99 are
/// under this share of `target_p99_ms`, no checkout failed for the
/// backend's sake in the window and the smoothed queue is under
/// [`PROBE_QUEUE`]...
pub const PROBE_P99: f64 = 0.5;
/// ...the capacity it cruises on grows by this share, and by at least one
/// release a second (a room at a few per second moves in whole steps).
pub const PROBE_GAIN: f64 = 0.05;
pub const PROBE_QUEUE: f64 = 4.0;
pub const PROBE_EVERY: u32 = 10;

/// Before a base latency is learnt the usual way (a room under ~67/s
/// waits 20 s for it), STARTUP takes the window's mean as its base at the
/// EARLY_BASE_STEPSth step with at least `window::SAMPLES_WANTED`
/// checkouts: without it the queue count is blind through the opening.
pub const EARLY_BASE_STEPS: u32 = 3;
/// ...in a room slow enough to wait that long: its window holds fewer
/// checkouts than this (a faster room learns its base within seconds, on
/// windows of BASE_SAMPLES; an early window of a fast room is biased
/// towards the fast checkouts that ended first).
pub const EARLY_BASE_BELOW: usize = 100;

/// Enters CRUISE on `capacity` (the rate is the caller's).
fn cruise(d: &mut Decision, capacity: f64) {
    d.phase = Phase::Cruise;
    d.cruised = true;
    d.capacity = Some(capacity);
    d.cruise_steps = 0;
    d.underload_steps = 0;
    d.outserved_steps = 0;
    d.cruise_latency_ms = None;
    d.resumed = false;
}

/// The controller: the next decision from the last one and the latest
/// measurements. Pure; the caller runs it every [`super::STEP_MS`].
pub fn step(bounds: &Bounds, previous: &Decision, m: &Measurements, now_ms: u64) -> Decision {
    let lo = f64::from(bounds.min_per_second);
    let hi = f64::from(bounds.max_per_second.max(bounds.min_per_second));
    let rate = if previous.rate.is_finite() {
        previous.rate
    } else {
        bounds.start_per_second()
    };
    let hold = |next: f64, reason| Decision {
        rate: next,
        reason,
        at_ms: now_ms,
        ..*previous
    };
    if rate < lo || rate > hi {
        return hold(rate.clamp(lo, hi), Reason::Bound);
    }
    let (p99, mean) = match (m.p99_ms, m.mean_ms) {
        (Some(p99), Some(mean)) if m.checkouts >= SAMPLES_MIN => {
            (f64::from(p99.max(1)), mean.max(1.0))
        }
        _ => return hold(rate, Reason::Steady),
    };
    // A room under ~67/s never has BASE_SAMPLES in one window: it learns
    // on its newest ones over a longer span instead.
    let learnt = if m.checkouts >= BASE_SAMPLES {
        Some(mean)
    } else {
        m.slow_room_mean_ms
    };
    let early_steps = if previous.base_ms.is_none()
        && previous.phase == Phase::Startup
        && (super::window::SAMPLES_WANTED..EARLY_BASE_BELOW).contains(&(m.checkouts as usize))
    {
        previous.early_steps + 1
    } else {
        previous.early_steps
    };
    let learnt = match learnt {
        None if previous.base_ms.is_none() && early_steps >= EARLY_BASE_STEPS => Some(mean),
        l => l,
    };
    let base_ms = match (previous.base_ms, learnt) {
        (b, None) => b,
        (None, Some(x)) => Some(x),
        (Some(b), Some(x)) if x < b => Some(b + BASE_DOWN * (x - b)),
        (Some(b), Some(x)) => Some(x.min(b * (1.0 + BASE_DRIFT))),
    };
    let queue = match (base_ms, m.in_flight) {
        (None, _) => 0.0,
        (Some(base), Some(n)) => {
            n - m.started_per_second.unwrap_or(m.served_per_second) * base / 1000.0
        }
        (Some(base), None) => m.served_per_second * (mean - base) / 1000.0,
    };
    let smoothed = previous.queue.map_or(queue, |q| {
        (1.0 - QUEUE_SMOOTHING) * q.min(QUEUE_SATURATED) + QUEUE_SMOOTHING * queue
    });
    let failures = f64::from(m.backend_failures);
    let errors = m.error_ratio() > bounds.max_error_ratio
        && failures - ERROR_SIGMAS * failures.sqrt()
            > bounds.max_error_ratio * f64::from(m.checkouts);
    let outpaced = m.served_per_second < OUTPACED * rate;
    // A cruise just resumed on a capacity it did not measure now is
    // judged as STARTUP is for its first steps: one step over the queue
    // threshold drains.
    let starting = previous.phase == Phase::Startup
        || (previous.phase == Phase::Cruise
            && previous.resumed
            && previous.cruise_steps < PROBE_STEPS);
    let over = outpaced
        && queue
            > if starting {
                QUEUE_STARTUP
            } else {
                QUEUE_SATURATED
            };
    let over_steps = if over { previous.over_steps + 1 } else { 0 };
    let target = f64::from(bounds.target_p99_ms);
    let ceiling = P99_CEILING * target;
    let saturated = errors
        || over_steps >= if starting { 1 } else { SATURATED_STEPS }
        || p99 > ceiling
        // (not a STARTUP resuming a capacity: it goes straight to a
        // probed cruise, and its window still holds the p99 that ended
        // the last one)
        || (previous.phase == Phase::Startup
            && previous.resume.is_none()
            && p99 > STARTUP_P99 * target);
    let cut = if errors {
        Reason::Errors
    } else {
        Reason::Latency
    };
    let served = m.served_per_second.max(lo);
    let drain =
        |capacity: f64| rate.min((capacity - queue.max(0.0) / DRAIN_S).max(DRAIN_FLOOR * capacity));
    let mut d = Decision {
        base_ms,
        early_steps,
        queue: Some(smoothed),
        over_steps,
        ..*previous
    };
    let (next, reason) = match previous.phase {
        _ if saturated && previous.phase != Phase::Drain => {
            d.phase = Phase::Drain;
            // Should this prove a false alarm, what STARTUP goes back to:
            // the cruise it interrupts, not the highest capacity ever
            // measured (the backend may have lost it since); from STARTUP,
            // what that was going back to.
            if previous.phase == Phase::Cruise {
                d.resume = previous.capacity;
            }
            d.capacity = Some(served);
            d.capacity_samples = 0;
            d.capacity_sum = 0.0;
            (drain(served), cut)
        }
        Phase::Drain => {
            if queue > QUEUE_CAPACITY {
                d.capacity_sum += m.served_last_s;
                d.capacity_samples += 1;
                d.capacity = Some(d.capacity_sum / f64::from(d.capacity_samples));
            }
            let capacity = d.capacity.unwrap_or(served);
            if queue >= QUEUE_DRAINED || errors {
                (drain(capacity), cut)
            } else if d.capacity_samples == 0 && previous.cruised && p99 > ceiling {
                // No queue, but the window still holds the checkouts that
                // ended the last phase: wait for it to roll past, at the
                // same rate (a STARTUP now would see the same p99 and
                // drain again, and each new cruise forgets the latency it
                // would have learnt).
                (rate, Reason::Steady)
            } else if d.capacity_samples == 0 && previous.cruised {
                // Never saturated for a whole second: a false alarm.
                d.phase = Phase::Startup;
                (rate, Reason::Latency)
            } else {
                // A collapse (calls timing out and retried) serves next
                // to nothing while saturated; what the window serves as
                // the backlog clears is a lower bound of the capacity.
                let capacity = capacity.max(m.served_per_second);
                cruise(&mut d, capacity);
                d.capacity_high =
                    Some(previous.capacity_high.map_or(capacity, |h| h.max(capacity)));
                (CRUISE_GAIN * capacity, Reason::Latency)
            }
        }
        Phase::Cruise => {
            d.cruise_steps = previous.cruise_steps + 1;
            let long = m.long_mean_ms.unwrap_or(mean);
            let cruising = previous.cruise_latency_ms.unwrap_or(long);
            let dropped = d.cruise_steps > CRUISE_SETTLE_STEPS && long < UNDERLOAD_DROP * cruising;
            d.cruise_latency_ms = if d.cruise_steps < CRUISE_SETTLE_STEPS {
                None
            } else if dropped {
                Some(cruising)
            } else {
                Some(cruising + CRUISE_LATENCY_SMOOTHING * (long - cruising))
            };
            d.underload_steps = if dropped && smoothed < UNDERLOAD_QUEUE {
                previous.underload_steps + 1
            } else {
                0
            };
            if d.underload_steps >= UNDERLOAD_STEPS {
                d.phase = Phase::Startup;
                d.underload_steps = 0;
                d.resume = previous.capacity_high;
            }
            // Shoppers who learn of their pass at their next poll check
            // out in rounds: the backend is busy through each round, so
            // what it serves then is what it can serve, whatever the
            // latency it cruised at was learnt on.
            let cruised_on = previous.capacity.unwrap_or(rate / CRUISE_GAIN);
            d.outserved_steps = if d.cruise_steps >= OUTSERVED_FROM_STEP
                && m.served_per_second > OUTSERVED * cruised_on
            {
                previous.outserved_steps + 1
            } else {
                0
            };
            if d.outserved_steps >= OUTSERVED_STEPS {
                d.phase = Phase::Startup;
                d.outserved_steps = 0;
                d.underload_steps = 0;
                d.capacity = Some(m.served_per_second);
                d.capacity_high = Some(
                    previous
                        .capacity_high
                        .map_or(m.served_per_second, |h| h.max(m.served_per_second)),
                );
                // From what was served, not the highest capacity: after
                // a collapse the drain measured almost nothing, and what
                // a backend serves once the backlog clears is all it
                // says (the highest may be a healthy phase's, and going
                // back there collapses it again). The probe finds more.
                d.resume = Some(m.served_per_second);
            }
            let long_p99 = m.long_p99_ms.map_or(p99, |l| f64::from(l.max(1)));
            // (A probe's effect reaches the 10 s p99 within the next
            // probe's interval; the queue and failures act at once.)
            if d.phase == Phase::Cruise
                && d.cruise_steps.is_multiple_of(PROBE_EVERY)
                && long_p99.max(p99) < PROBE_P99 * target
                && m.backend_failures == 0
                && smoothed < PROBE_QUEUE
                && m.free_slots > 0
            {
                let c = (cruised_on * (1.0 + PROBE_GAIN)).max(cruised_on + 1.0 / CRUISE_GAIN);
                d.capacity = Some(c);
                (CRUISE_GAIN * c, Reason::Latency)
            } else {
                (rate, Reason::Steady)
            }
        }
        Phase::Startup if m.free_slots == 0 => (rate, Reason::Slots),
        Phase::Startup => {
            // Growing only while the p99 is well under the target or not
            // rising: a release reaches checkout a poll later, so a rate
            // that grows on until the p99 passes the target has already
            // released a poll interval's worth too many.
            let long = m.long_p99_ms.map_or(p99, |l| f64::from(l.max(1)));
            let ramp = if p99 < STARTUP_GROW_BELOW * target || p99 < STARTUP_RISING * long {
                (rate * (1.0 + STARTUP_GROWTH)).min((served * STARTUP_SERVED).max(rate))
            } else {
                rate
            };
            match previous.resume {
                // Back to a capacity it knows, within RETURN_MAX × of the
                // rate: straight to the cruise on it (STARTUP growing past
                // it would only drain again a poll interval later); its
                // first PROBE_STEPS are judged as STARTUP's, and the
                // out-served rule is what finds a higher capacity.
                Some(resume) if rate * RETURN_MAX >= CRUISE_GAIN * resume => {
                    cruise(&mut d, resume);
                    d.resume = None;
                    d.resumed = true;
                    (CRUISE_GAIN * resume, Reason::Latency)
                }
                // Further: × RETURN_MAX a step towards it.
                Some(resume) => (
                    (rate * RETURN_MAX).min(CRUISE_GAIN * resume).max(ramp),
                    Reason::Latency,
                ),
                None => (ramp, Reason::Latency),
            }
        }
    };
    if next > hi || next < lo {
        return Decision {
            rate: next.clamp(lo, hi),
            reason: Reason::Bound,
            at_ms: now_ms,
            ..d
        };
    }
    let reason = if reason != Reason::Slots && (next - rate).abs() < STEADY_BAND * rate {
        Reason::Steady
    } else {
        reason
    };
    Decision {
        rate: next,
        reason,
        at_ms: now_ms,
        ..d
    }
}
