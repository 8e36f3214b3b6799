//! When each shopper arrives: a pure function of the profile and the seed,
//! so a run can be replayed exactly (the plan; the network adds its own
//! timing on top).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::scenario::Arrivals;

/// Arrival offsets in seconds from the start, ascending, at most
/// `max_shoppers` of them and none after `max_duration_s`.
pub fn schedule(profile: &Arrivals, seed: u64, max_shoppers: u32, max_duration_s: f64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let cap = max_shoppers as usize;
    let mut times = match *profile {
        Arrivals::Spike { shoppers, over_s } => {
            let mut t: Vec<f64> = (0..shoppers.min(max_shoppers))
                .map(|_| rng.random::<f64>() * over_s)
                .collect();
            t.sort_by(f64::total_cmp);
            t
        }
        Arrivals::Constant { per_second, for_s } => {
            poisson(&mut rng, cap, for_s, per_second, |_| per_second)
        }
        Arrivals::Ramp {
            from_per_second,
            to_per_second,
            over_s,
        } => poisson(
            &mut rng,
            cap,
            over_s,
            from_per_second.max(to_per_second),
            |t| from_per_second + (to_per_second - from_per_second) * t / over_s,
        ),
    };
    times.retain(|t| *t <= max_duration_s);
    times.truncate(cap);
    times
}

/// A Poisson process of rate `rate(t)` (at most `rate_max`) over
/// `[0, for_s)`, by thinning; at most `cap` arrivals.
fn poisson(
    rng: &mut ChaCha8Rng,
    cap: usize,
    for_s: f64,
    rate_max: f64,
    rate: impl Fn(f64) -> f64,
) -> Vec<f64> {
    let mut out = Vec::new();
    if rate_max <= 0.0 {
        return out;
    }
    let mut t = 0.0;
    while out.len() < cap {
        // Exponential gap; `1 - u` is in (0, 1], so the log is finite.
        t += -(1.0 - rng.random::<f64>()).ln() / rate_max;
        if t >= for_s {
            break;
        }
        if rng.random::<f64>() * rate_max <= rate(t) {
            out.push(t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_plan() {
        let p = Arrivals::Spike {
            shoppers: 100,
            over_s: 5.0,
        };
        assert_eq!(schedule(&p, 7, 1000, 60.0), schedule(&p, 7, 1000, 60.0));
        assert_ne!(schedule(&p, 7, 1000, 60.0), schedule(&p, 8, 1000, 60.0));
    }

    #[test]
    fn a_spike_lands_inside_its_window_sorted() {
        let t = schedule(
            &Arrivals::Spike {
                shoppers: 500,
                over_s: 2.0,
            },
            1,
            1000,
            60.0,
        );
        assert_eq!(t.len(), 500);
        assert!(t.windows(2).all(|w| w[0] <= w[1]));
        assert!(t.iter().all(|x| (0.0..2.0).contains(x)));
    }

    #[test]
    fn a_constant_rate_gives_about_rate_times_duration() {
        let t = schedule(
            &Arrivals::Constant {
                per_second: 100.0,
                for_s: 20.0,
            },
            3,
            1_000_000,
            60.0,
        );
        assert!((1800..2200).contains(&t.len()), "{}", t.len());
    }

    #[test]
    fn a_ramp_puts_more_arrivals_late_and_respects_the_caps() {
        let p = Arrivals::Ramp {
            from_per_second: 0.0,
            to_per_second: 200.0,
            over_s: 10.0,
        };
        let t = schedule(&p, 5, 1_000_000, 60.0);
        let early = t.iter().filter(|x| **x < 5.0).count();
        assert!(early * 2 < t.len() - early, "{early} of {}", t.len());
        assert_eq!(schedule(&p, 5, 10, 60.0).len(), 10);
        assert!(schedule(&p, 5, 1_000_000, 3.0).iter().all(|x| *x <= 3.0));
    }
}
