//! One adaptive release rate for a fleet of gateways on one store.
//!
//! Every gateway of an adaptive fleet room publishes, once a second, the
//! checkouts its admitted shoppers ended since its last batch ([`Sample`]s,
//! as [`encode_batch`] writes them) and reads every gateway's batches back
//! ([`decode_batch`], [`merge`]) into its own
//! [`CheckoutWindow`](crate::adaptive::CheckoutWindow): each gateway's
//! window then holds the fleet's checkouts, the raw samples and not a
//! summary of them, so the window's p99 is the fleet's exactly (no
//! merging of quantiles).
//!
//! One gateway at a time, the holder of the room's lease in the store
//! ([`leads`]), runs the law ([`crate::adaptive::step`]) from the decision
//! in the store ([`previous`]) and writes the next one there; every
//! gateway's release tick paces by the stored rate ([`rate_in_force`]). A
//! leader that dies stops renewing its lease; after [`LEASE_MS`] the next
//! gateway to step takes it and goes on from the stored decision, its
//! window already full of the fleet's checkouts.
//!
//! The store's Functions (`sluice.lua` in the gateway) mirror
//! [`leads`] and [`rate_in_force`].

use crate::adaptive::{Bounds, CheckoutWindow, Decision, Outcome, Reason};

/// A leader's lease lives this long from its last step: a leader that
/// stops stepping (killed, cut off from the store) is replaced within it
/// plus one step.
pub const LEASE_MS: u64 = 2_000;
/// Checkouts a gateway keeps for its next batch, at most (the newest): a
/// store away for long does not grow it without bound.
pub const BATCH_MAX: usize = 8192;

/// One checkout, as the window records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// When it ended: this gateway's clock while it waits to be
    /// published, the store's clock once read back.
    pub at_ms: u64,
    pub latency_ms: u32,
    pub failed: bool,
}

impl Sample {
    pub fn outcome(&self) -> Outcome {
        if self.failed {
            Outcome::Failed
        } else {
            Outcome::Served
        }
    }
}

/// A batch the store holds that is not one [`encode_batch`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadBatch(pub String);

/// The batch text of `samples` published at `now_ms` (this gateway's
/// clock): `age_ms:latency_ms:failed` joined by `,`, the age counted back
/// from the publication, so the reader dates each from the store's clock
/// at publication (the stream entry's id) and gateways' clocks do not
/// matter. About 10 bytes a checkout.
pub fn encode_batch(samples: &[Sample], now_ms: u64) -> String {
    let mut out = String::with_capacity(samples.len() * 10);
    for (i, s) in samples.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let age = now_ms.saturating_sub(s.at_ms);
        out.push_str(&format!("{age}:{}:{}", s.latency_ms, u8::from(s.failed)));
    }
    out
}

/// The samples of a batch published at `published_at_ms` (the store's
/// clock).
pub fn decode_batch(text: &str, published_at_ms: u64) -> Result<Vec<Sample>, BadBatch> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|item| {
            let bad = || BadBatch(item.to_string());
            let mut parts = item.split(':');
            let mut next = || parts.next().ok_or_else(bad);
            let age: u64 = next()?.parse().map_err(|_| bad())?;
            let latency_ms: u32 = next()?.parse().map_err(|_| bad())?;
            let failed = match next()? {
                "0" => false,
                "1" => true,
                _ => return Err(bad()),
            };
            if parts.next().is_some() {
                return Err(bad());
            }
            Ok(Sample {
                at_ms: published_at_ms.saturating_sub(age),
                latency_ms,
                failed,
            })
        })
        .collect()
}

/// The unix ms of a Redis stream entry id (`<ms>-<n>`).
pub fn stream_id_ms(id: &str) -> Option<u64> {
    id.split('-').next()?.parse().ok()
}

/// The samples of several gateways' batches as one run in time order, none
/// before `floor_ms` (the newest the window already holds): the window
/// takes its samples in order, and a batch published late by one gateway
/// may hold checkouts older than another's already read; those count as
/// ending at `floor_ms` (at most a step late).
pub fn merge(mut samples: Vec<Sample>, floor_ms: u64) -> Vec<Sample> {
    samples.sort_by_key(|s| s.at_ms);
    for s in &mut samples {
        s.at_ms = s.at_ms.max(floor_ms);
    }
    samples
}

/// Records merged `samples` in `window`; returns the new floor.
pub fn feed(window: &mut CheckoutWindow, samples: &[Sample], floor_ms: u64) -> u64 {
    for s in samples {
        window.record(s.at_ms, s.latency_ms, s.outcome());
    }
    samples.last().map_or(floor_ms, |s| s.at_ms.max(floor_ms))
}

/// Whether a gateway `me` steps the room's rate, the lease being held by
/// `holder` (`None`: nobody, or it lapsed): it does when the lease is free
/// or already its own, and then takes or renews it.
pub fn leads(holder: Option<&str>, me: &str) -> bool {
    holder.is_none_or(|h| h == me)
}

/// The decision the leader steps from: the one in the store, else the
/// room's start at `start_per_second` (the configured start rate).
pub fn previous(
    stored: Option<&Decision>,
    bounds: &Bounds,
    start_per_second: u32,
    now_ms: u64,
) -> Decision {
    stored.copied().unwrap_or(Decision {
        rate: f64::from(start_per_second),
        ..Decision::start(bounds, now_ms)
    })
}

/// The whole rate the release runs at: the stored decision's, inside the
/// bounds the caller's config gives (a reload may have narrowed them
/// before the next step), at least 1; without a stored decision, the
/// caller's `configured` rate.
pub fn rate_in_force(stored: Option<f64>, min: u32, max: u32, configured: u32) -> u32 {
    match stored {
        Some(rate) if rate.is_finite() => {
            let r = (rate + 0.5).floor().clamp(0.0, f64::from(u32::MAX)) as u32;
            r.clamp(min, max.max(min)).max(1)
        }
        _ => configured,
    }
}

/// The store's text of a decision: rate, reason, when (the fields the
/// tick and `/admin/state` read), and the law's whole state as JSON, so a
/// gateway that takes the lease steps on from exactly where the last
/// leader was (phase, capacities, base latency, counters).
pub fn encode_decision(d: &Decision) -> [String; 4] {
    [
        format!("{:.6}", d.rate),
        d.reason.as_str().to_string(),
        d.at_ms.to_string(),
        serde_json::to_string(d).unwrap_or_default(),
    ]
}

/// A decision from the store's text (`None`: none stored, or not one
/// [`encode_decision`] wrote). The first three fields stand over the
/// state's copies of them.
pub fn decode_decision(rate: &str, reason: &str, at_ms: &str, state: &str) -> Option<Decision> {
    let rate: f64 = rate.parse().ok().filter(|r: &f64| r.is_finite())?;
    let reason = Reason::ALL.into_iter().find(|r| r.as_str() == reason)?;
    let at_ms = at_ms.parse().ok()?;
    let state: Decision = serde_json::from_str(state).ok()?;
    Some(Decision {
        rate,
        reason,
        at_ms,
        ..state
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at_ms: u64, latency_ms: u32, failed: bool) -> Sample {
        Sample {
            at_ms,
            latency_ms,
            failed,
        }
    }

    #[test]
    fn a_batch_is_dated_by_the_store_clock() {
        // Gateway clock 10_000 at publication; the store's 50_000.
        let text = encode_batch(&[s(9_000, 120, false), s(9_990, 5, true)], 10_000);
        assert_eq!(text, "1000:120:0,10:5:1");
        assert_eq!(
            decode_batch(&text, 50_000).unwrap(),
            vec![s(49_000, 120, false), s(49_990, 5, true)]
        );
        assert_eq!(decode_batch("", 1).unwrap(), vec![]);
        for bad in ["1:2", "1:2:3", "x:1:0", "1:2:0:4", "1:2:0,"] {
            assert!(decode_batch(bad, 1).is_err(), "{bad}");
        }
        assert_eq!(stream_id_ms("1700000000123-7"), Some(1_700_000_000_123));
        assert_eq!(stream_id_ms("x-1"), None);
    }

    #[test]
    fn merged_batches_are_in_order_and_never_before_the_floor() {
        let merged = merge(
            vec![s(300, 1, false), s(100, 2, false), s(200, 3, true)],
            150,
        );
        assert_eq!(
            merged,
            vec![s(150, 2, false), s(200, 3, true), s(300, 1, false)]
        );
    }

    #[test]
    fn the_fleets_window_is_the_union_of_its_gateways() {
        // Gateway A: 99 fast checkouts; gateway B: 3 slow ones. Alone, A
        // sees a p99 of 10 ms; the fleet's is B's 900 ms, and the fleet's
        // window is exactly the window of all the checkouts in one place.
        let a: Vec<Sample> = (0..99).map(|i| s(1_000 + i, 10, false)).collect();
        let b: Vec<Sample> = (0..3).map(|i| s(1_100 + i, 900, i == 0)).collect();
        let mut fleet = CheckoutWindow::new();
        let mut floor = 0;
        for batch in [&a, &b] {
            let text = encode_batch(batch, 2_000);
            let samples = merge(decode_batch(&text, 2_000).unwrap(), floor);
            floor = feed(&mut fleet, &samples, floor);
        }
        assert_eq!(floor, 1_102);
        let mut one = CheckoutWindow::new();
        let all: Vec<Sample> = a.iter().chain(&b).copied().collect();
        feed(&mut one, &all, 0);
        let (mf, mo) = (fleet.measure(2_500, 4), one.measure(2_500, 4));
        assert_eq!(mf, mo);
        assert_eq!(mf.checkouts, 102);
        assert_eq!(mf.p99_ms, Some(900));
        assert_eq!(mf.backend_failures, 1);
        let mut alone = CheckoutWindow::new();
        feed(&mut alone, &a, 0);
        assert_eq!(alone.measure(2_500, 4).p99_ms, Some(10));
    }

    #[test]
    fn the_lease_is_taken_when_free_and_kept_by_its_holder() {
        assert!(leads(None, "a"));
        assert!(leads(Some("a"), "a"));
        assert!(!leads(Some("b"), "a"));
    }

    #[test]
    fn the_rate_in_force_is_the_stored_one_inside_the_callers_bounds() {
        assert_eq!(rate_in_force(None, 2, 50, 10), 10);
        assert_eq!(rate_in_force(Some(7.49), 2, 50, 10), 7);
        assert_eq!(rate_in_force(Some(7.5), 2, 50, 10), 8);
        assert_eq!(rate_in_force(Some(80.0), 2, 50, 10), 50);
        assert_eq!(rate_in_force(Some(0.2), 0, 50, 10), 1);
        assert_eq!(rate_in_force(Some(f64::NAN), 2, 50, 10), 10);
    }

    #[test]
    fn decisions_round_trip_through_the_store() {
        let bounds = Bounds {
            target_p99_ms: 100,
            max_error_ratio: 0.05,
            min_per_second: 4,
            max_per_second: 100,
        };
        let d = Decision {
            rate: 12.345678,
            reason: Reason::Latency,
            at_ms: 42,
            phase: crate::adaptive::Phase::Cruise,
            capacity: Some(17.5),
            base_ms: Some(120.0),
            outserved_steps: 1,
            cruised: true,
            ..Decision::start(&bounds, 40)
        };
        let [r, why, at, state] = encode_decision(&d);
        assert_eq!(decode_decision(&r, &why, &at, &state), Some(d));
        let start = Decision::start(&bounds, 7);
        let [r, why, at, state] = encode_decision(&start);
        assert_eq!(decode_decision(&r, &why, &at, &state), Some(start));
        assert_eq!(decode_decision(&r, &why, &at, ""), None, "no law state");
        assert_eq!(decode_decision("", "", "", ""), None);
        assert_eq!(decode_decision("1.0", "sideways", "1", ""), None);
        // A leader with nothing stored starts from the configured rate;
        // one that takes over goes on from the stored decision.
        let p = previous(None, &bounds, 20, 7);
        assert_eq!((p.rate, p.reason, p.at_ms), (20.0, Reason::Steady, 7));
        assert_eq!(previous(Some(&d), &bounds, 20, 7), d);
    }
}
