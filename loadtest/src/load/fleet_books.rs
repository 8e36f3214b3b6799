//! The books of the line, fleet-wide: admissions across the fleet within
//! the room's rate (and burst), passes able to buy at once within
//! `max_active` on every gateway's `/admin/state`, FIFO across gateways,
//! and no place lost when a shopper had to move gateways. Plain functions
//! of what the run recorded.

use super::books::Check;
use super::record::{FleetSample, Sample, TicketLife};

/// What the line was configured to do.
#[derive(Debug, Clone, Copy)]
pub struct Line {
    pub rate: f64,
    pub burst: f64,
    pub max_active: u64,
    /// Longest wait between two polls of one shopper, seconds (the room's
    /// `poll_max_s`, jitter and a request's time): how late a shopper can
    /// see its admission.
    pub poll_s: f64,
}

/// The gateways' views of the fleet's numbers lag Redis by up to this
/// much (one tick), seconds.
pub const VIEW_LAG_S: f64 = 1.0;

/// Passes collected across the fleet (Redis's count; the places released
/// may run ahead of it by the measured no-show make-up, which is not an
/// admission) over every stretch of the run within `rate · Δt + burst`
/// (plus one poll interval, as a released place is collected at its
/// holder's next poll, one tick of lag, and a fresh burst after each time
/// a store came back empty). A stretch runs from when its
/// first sample was asked for to when its last one was in, so a slow
/// `/admin/state` never makes it look shorter than it was.
pub fn rate_check(samples: &[Sample], line: Line, resets_s: &[f64]) -> Check {
    // Released so far: a watermark that went down (a store back empty)
    // adds nothing. (start of the reading, end of it, released.)
    let mut cum: Vec<(f64, f64, f64)> = Vec::new();
    let (mut total, mut prev) = (0.0, None::<u64>);
    for s in samples.iter().filter(|s| s.up) {
        if let Some(p) = prev {
            if s.admitted_total > p {
                total += (s.admitted_total - p) as f64;
            }
        }
        prev = Some(s.admitted_total);
        cum.push((s.t_s - s.read_s, s.t_s, total));
    }
    let mut v = Vec::new();
    for (a, &(t1, _, c1)) in cum.iter().enumerate() {
        for &(_, t2, c2) in &cum[a + 1..] {
            let resets = resets_s.iter().filter(|r| **r > t1 && **r <= t2).count() as f64;
            // A place released is collected at its holder's next poll, up
            // to one poll interval later: collections bunch by that much.
            let bound =
                line.rate * (t2 - t1 + line.poll_s + VIEW_LAG_S) + line.burst * (1.0 + resets);
            if c2 - c1 > bound + 0.5 {
                v.push(format!(
                    "{:.0} passes collected from {t1:.1} s to {t2:.1} s, bound {bound:.0}",
                    c2 - c1
                ));
                break;
            }
        }
    }
    Check::new(
        "admissions across the fleet within the rate",
        v,
        format!(
            "{total:.0} passes collected; any stretch ≤ {}/s × (Δt + {:.1} s poll lag + {VIEW_LAG_S} s) + burst {}",
            line.rate, line.poll_s, line.burst
        ),
    )
}

/// Shoppers who saw `admitted`, by second: in any stretch of at least
/// `poll_s`, no more than the rate allows over it plus the poll lag (an
/// admission is seen up to one poll late).
pub fn seen_rate_check(admitted_seen: &[u32], line: Line, resets_s: &[f64]) -> Check {
    let mut prefix = vec![0u64];
    for n in admitted_seen {
        prefix.push(prefix.last().copied().unwrap_or(0) + u64::from(*n));
    }
    let mut v = Vec::new();
    let len = admitted_seen.len();
    'outer: for a in 0..len {
        for b in a + 1..=len {
            let seen = (prefix[b] - prefix[a]) as f64;
            let (t1, t2) = (a as f64, b as f64);
            let resets = resets_s.iter().filter(|r| **r > t1 && **r <= t2).count() as f64;
            let bound =
                line.rate * (t2 - t1 + line.poll_s + VIEW_LAG_S) + line.burst * (1.0 + resets);
            if seen > bound + 0.5 {
                v.push(format!(
                    "{seen:.0} shoppers saw `admitted` from {t1:.0} s to {t2:.0} s, bound {bound:.0}"
                ));
                break 'outer;
            }
        }
    }
    Check::new(
        "admissions seen by shoppers within the rate",
        v,
        format!(
            "{} shoppers let in; any stretch ≤ {}/s × (Δt + {:.1} s poll lag + {VIEW_LAG_S} s) + burst",
            prefix[len], line.rate, line.poll_s
        ),
    )
}

/// Every gateway's `active` (passes able to start a checkout) within
/// `max_active` at every sample.
pub fn max_active_check(samples: &[FleetSample], lone: &[Sample], max_active: u64) -> Check {
    let mut v: Vec<String> = samples
        .iter()
        .filter(|s| s.up && s.active > max_active)
        .map(|s| {
            format!(
                "{:.1} s: gateway {} shows {} active > {max_active}",
                s.t_s, s.gateway, s.active
            )
        })
        .collect();
    v.extend(
        lone.iter()
            .filter(|s| s.up && s.active > max_active)
            .map(|s| format!("{:.1} s: {} active > {max_active}", s.t_s, s.active)),
    );
    let n = samples.iter().filter(|s| s.up).count() + lone.iter().filter(|s| s.up).count();
    Check::new(
        "passes active within max_active",
        v,
        format!("{n} samples of /admin/state, every gateway"),
    )
}

/// FIFO across gateways: no ticket let in more than `poll_s` (one poll
/// interval) before one that joined more than `poll_s` earlier, on any
/// gateway, unless that one left. Measured by cause, not by when shoppers
/// happened to look: a violation is an earlier ticket told "still waiting"
/// by a poll *sent* more than `poll_s` after the later one saw its pass
/// (so a slow answer under load is no violation, and a shopper who left
/// is never told anything again).
pub fn fifo_check(tickets: &[TicketLife], poll_s: f64) -> Check {
    let mut order: Vec<&TicketLife> = tickets.iter().collect();
    order.sort_by(|a, b| a.joined_s.total_cmp(&b.joined_s));
    // Earliest admission among tickets joined at or after each position.
    let mut suffix = vec![(f64::INFINITY, usize::MAX); order.len() + 1];
    for k in (0..order.len()).rev() {
        let here = order[k]
            .admitted_s
            .map_or((f64::INFINITY, usize::MAX), |a| (a, k));
        suffix[k] = if here.0 < suffix[k + 1].0 {
            here
        } else {
            suffix[k + 1]
        };
    }
    let mut v = Vec::new();
    for a in &order {
        let Some(told_waiting) = a.last_waiting_s else {
            continue;
        };
        let later = order.partition_point(|t| t.joined_s <= a.joined_s + poll_s);
        let (first_in, k) = suffix[later];
        if told_waiting > first_in + poll_s {
            let b = order[k];
            v.push(format!(
                "shopper {} (joined {:.1} s at gateway {}) was let in at {first_in:.1} s; \
                 shopper {} (joined {:.1} s at gateway {}) was still told to wait at {told_waiting:.1} s",
                b.shopper, b.joined_s, b.gateway, a.shopper, a.joined_s, a.gateway,
            ));
        }
    }
    let gateways: std::collections::BTreeSet<usize> = tickets.iter().map(|t| t.gateway).collect();
    Check::new(
        "FIFO across gateways",
        v,
        format!(
            "{} tickets on {} gateways; one poll interval = {poll_s:.1} s",
            tickets.len(),
            gateways.len()
        ),
    )
}

/// Shoppers who moved gateways while waiting kept their place.
pub fn places_check(moved_waiting: u64, lost: &[String]) -> Check {
    Check::new(
        "no place lost when a shopper moved gateways",
        lost.to_vec(),
        format!("{moved_waiting} waiting shoppers answered by another gateway after a move"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: Line = Line {
        rate: 10.0,
        burst: 5.0,
        max_active: 3,
        poll_s: 2.0,
    };

    fn sample(t_s: f64, released: u64) -> Sample {
        Sample {
            t_s,
            up: true,
            admitted_total: released,
            ..Sample::default()
        }
    }

    #[test]
    fn releases_beyond_the_rate_fail_and_a_wiped_store_gets_a_new_burst() {
        let ok: Vec<Sample> = (0..20)
            .map(|k| sample(f64::from(k) * 0.5, 5 + 5 * k as u64))
            .collect();
        assert!(!rate_check(&ok, LINE, &[]).failed());
        // Twice the rate.
        let fast: Vec<Sample> = (0..20)
            .map(|k| sample(f64::from(k) * 0.5, 10 * k as u64))
            .collect();
        assert!(rate_check(&fast, LINE, &[]).failed());
        // A second burst right after a store came back empty is allowed,
        // and a watermark that went down adds nothing.
        let mut reset = ok.clone();
        reset.push(sample(10.0, 3));
        reset.push(sample(10.5, 3 + 43));
        assert!(rate_check(&reset, LINE, &[]).failed());
        assert!(!rate_check(&reset, LINE, &[10.2]).failed());
        // One and a half times the rate fails when read at once, not when
        // each reading took 5 s (the stretches were that much longer).
        let quick: Vec<Sample> = (0..20)
            .map(|k| sample(f64::from(k) * 0.5, 15 * k as u64 / 2))
            .collect();
        assert!(rate_check(&quick, LINE, &[]).failed());
        let slow: Vec<Sample> = quick
            .iter()
            .map(|x| Sample {
                read_s: 5.0,
                ..x.clone()
            })
            .collect();
        assert!(!rate_check(&slow, LINE, &[]).failed());
    }

    #[test]
    fn admissions_seen_beyond_the_rate_fail() {
        assert!(!seen_rate_check(&[10; 30], LINE, &[]).failed());
        assert!(seen_rate_check(&[20; 30], LINE, &[]).failed());
    }

    #[test]
    fn an_active_count_above_max_active_on_any_gateway_fails() {
        let s = |g, active| FleetSample {
            t_s: 1.0,
            gateway: g,
            up: true,
            active,
            ..FleetSample::default()
        };
        assert!(!max_active_check(&[s(0, 3), s(1, 2)], &[], 3).failed());
        assert!(max_active_check(&[s(0, 3), s(1, 4)], &[], 3).failed());
    }

    fn life(
        shopper: u32,
        gateway: usize,
        joined_s: f64,
        admitted_s: Option<f64>,
        last_waiting_s: Option<f64>,
    ) -> TicketLife {
        TicketLife {
            shopper,
            gateway,
            joined_s,
            admitted_s,
            last_waiting_s,
            left_s: None,
        }
    }

    #[test]
    fn fifo_fails_only_for_an_earlier_joiner_told_to_wait_well_after_a_later_one_got_in() {
        // In order, and a later one let in a little sooner (within a poll).
        let ok = [
            life(0, 0, 0.0, Some(5.0), Some(3.0)),
            life(1, 1, 1.0, Some(6.0), Some(4.0)),
            life(2, 2, 4.0, Some(5.5), Some(4.5)),
        ];
        assert!(!fifo_check(&ok, 2.0).failed());
        // Shopper 1 at gateway 1 is still told to wait at 19 s while 2,
        // who joined 3 s later elsewhere, got in at 5.5 s.
        let bad = [
            life(0, 0, 0.0, Some(5.0), Some(3.0)),
            life(1, 1, 1.0, Some(20.0), Some(19.0)),
            life(2, 2, 4.0, Some(5.5), Some(4.5)),
        ];
        let c = fifo_check(&bad, 2.0);
        assert!(c.failed());
        assert!(
            c.violations[0].starts_with("shopper 2"),
            "{:?}",
            c.violations
        );
        // Told to wait only until shortly after (or it left, never told
        // again): no violation. A shopper who joined within a poll
        // interval of the other may go either way.
        let left = [
            life(1, 1, 1.0, None, Some(7.0)),
            life(2, 2, 4.0, Some(5.5), None),
        ];
        assert!(!fifo_check(&left, 2.0).failed());
        let close = [
            life(1, 1, 1.0, Some(30.0), Some(29.0)),
            life(2, 2, 2.5, Some(5.5), None),
        ];
        assert!(!fifo_check(&close, 2.0).failed());
    }
}
