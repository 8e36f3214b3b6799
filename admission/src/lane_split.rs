//! How a release's places are split between a room's lanes.
//!
//! Each lane has a `share` of every release (the default lane: what the
//! configured shares leave) and a number of people waiting. The places go
//! to the lanes with people waiting in proportion to their shares: a share
//! a lane cannot use (nobody waiting, or fewer than its part) flows to the
//! others, in proportion to theirs. Bypass lanes take no part: their
//! shoppers are admitted at once, outside the release.
//!
//! Shares rarely divide a release into whole places, so each lane keeps a
//! running deficit across releases (deficit round robin): what it was owed
//! and not given, in fractions of a place. Places go first by whole parts
//! of what each lane is owed, then one at a time to the lanes owed the most.
//! While every lane has people waiting, a lane's total stays within one
//! place of `share × total` over any run of releases. A lane with nobody
//! waiting banks nothing (its deficit is cleared), and one that took
//! everyone it had is owed nothing more; deficits stay within one place
//! either way, so a lane that got the others' unused share does not pay it
//! back later.
//!
//! [`split_release`] is a plain function over the deficits, which the
//! caller keeps: in the room for one gateway, in Redis for a fleet (the
//! one gateway that runs the release), so both back ends split the same
//! way.

/// One lane as a release sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LaneDemand {
    /// Of each release: 0 to 1 (the shares of the non-bypass lanes add up
    /// to at most 1).
    pub share: f64,
    /// People waiting in the lane.
    pub waiting: u64,
    /// Admitted at once; never given places by a release.
    pub bypass: bool,
}

/// Splits `places` between `lanes` (in a fixed order, the same every
/// release), updating `deficits` (one per lane, resized to fit; start
/// them at zero). Returns the places of each lane: never more than it has
/// waiting, and adding up to `places` unless fewer people wait in all.
pub fn split_release(places: u64, lanes: &[LaneDemand], deficits: &mut Vec<f64>) -> Vec<u64> {
    deficits.resize(lanes.len(), 0.0);
    let mut given = vec![0u64; lanes.len()];
    let active: Vec<usize> = (0..lanes.len())
        .filter(|&i| !lanes[i].bypass && lanes[i].waiting > 0)
        .collect();
    for (i, d) in deficits.iter_mut().enumerate() {
        if !active.contains(&i) {
            *d = 0.0;
        }
    }
    if active.is_empty() || places == 0 {
        return given;
    }
    // The shares of the lanes that can take places, made to add up to 1
    // (so an idle lane's share flows to the others); equal parts when
    // none of them has a share (a default lane left with 0, say).
    let share = |i: usize| lanes[i].share.max(0.0);
    let total_share: f64 = active.iter().map(|&i| share(i)).sum();
    let weight = |i: usize| {
        if total_share > 0.0 {
            share(i) / total_share
        } else {
            1.0 / active.len() as f64
        }
    };
    for &i in &active {
        deficits[i] += places as f64 * weight(i);
    }
    let mut left = places;
    // Whole places owed, within what each lane has waiting.
    for &i in &active {
        let owed = deficits[i].floor().max(0.0) as u64;
        let n = owed.min(lanes[i].waiting).min(left);
        given[i] = n;
        left -= n;
    }
    // The rest: while more places are left than lanes can take them
    // (some lanes ran out of people), by the shares of the lanes still
    // open, in rounds that each fill a lane or hand out all but a few;
    // the last few one at a time to the lanes owed the most (ties to the
    // earlier lane), so the fractions round the way the deficits say.
    while left > 0 {
        let open: Vec<usize> = active
            .iter()
            .copied()
            .filter(|&i| given[i] < lanes[i].waiting)
            .collect();
        if open.is_empty() {
            break;
        }
        let mut handed = 0;
        if left > open.len() as u64 {
            let open_weight: f64 = open.iter().map(|&i| weight(i)).sum();
            for &i in &open {
                let part = if open_weight > 0.0 {
                    (left as f64 * weight(i) / open_weight).floor() as u64
                } else {
                    left / open.len() as u64
                };
                let n = part.min(lanes[i].waiting - given[i]).min(left - handed);
                given[i] += n;
                handed += n;
            }
        }
        if handed == 0 {
            let mut order = open;
            order.sort_by(|&a, &b| {
                let owed = |i: usize| deficits[i] - given[i] as f64;
                owed(b).total_cmp(&owed(a)).then(a.cmp(&b))
            });
            for i in order {
                if handed == left {
                    break;
                }
                given[i] += 1;
                handed += 1;
            }
        }
        left -= handed;
    }
    for &i in &active {
        deficits[i] -= given[i] as f64;
        if given[i] == lanes[i].waiting {
            // It took everyone it had: owed nothing it could not use.
            deficits[i] = deficits[i].min(0.0);
        }
        deficits[i] = deficits[i].clamp(-1.0, 1.0);
    }
    given
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn lane(share: f64, waiting: u64) -> LaneDemand {
        LaneDemand {
            share,
            waiting,
            bypass: false,
        }
    }

    #[test]
    fn a_release_follows_the_shares() {
        let mut d = Vec::new();
        let lanes = [lane(0.3, 1000), lane(0.7, 1000)];
        assert_eq!(split_release(10, &lanes, &mut d), vec![3, 7]);
        assert_eq!(split_release(0, &lanes, &mut d), vec![0, 0]);
    }

    #[test]
    fn fractions_carry_over_so_small_releases_still_follow_the_shares() {
        let mut d = Vec::new();
        let lanes = [lane(0.3, u64::MAX), lane(0.7, u64::MAX)];
        let mut totals = [0u64; 2];
        for _ in 0..10 {
            let got = split_release(1, &lanes, &mut d);
            totals[0] += got[0];
            totals[1] += got[1];
        }
        assert_eq!(totals, [3, 7]);
    }

    #[test]
    fn a_share_nobody_can_use_flows_to_the_others() {
        let mut d = Vec::new();
        // Nobody waits in the first lane: its 0.5 goes to the other two,
        // 1:3.
        let lanes = [lane(0.5, 0), lane(0.125, 100), lane(0.375, 100)];
        assert_eq!(split_release(8, &lanes, &mut d), vec![0, 2, 6]);
        // Two wait in the first lane: it takes them, the rest flows.
        let lanes = [lane(0.5, 2), lane(0.125, 100), lane(0.375, 100)];
        let got = split_release(8, &lanes, &mut d);
        assert_eq!(got[0], 2);
        assert_eq!(got.iter().sum::<u64>(), 8);
        // Fewer waiting than places: everyone goes.
        let lanes = [lane(0.5, 1), lane(0.25, 2), lane(0.25, 0)];
        assert_eq!(split_release(100, &lanes, &mut d), vec![1, 2, 0]);
    }

    #[test]
    fn bypass_lanes_take_no_part_and_a_zero_default_still_drains() {
        let mut d = Vec::new();
        let lanes = [
            LaneDemand {
                share: 0.0,
                waiting: 50,
                bypass: true,
            },
            lane(1.0, 3),
            lane(0.0, 10),
        ];
        // The only share-holding lane has 3; the default lane with share 0
        // takes what it leaves.
        assert_eq!(split_release(10, &lanes, &mut d), vec![0, 3, 7]);
        // Only lanes with share 0 wait: equal parts.
        let lanes = [lane(0.0, 10), lane(0.0, 10)];
        let got = split_release(4, &lanes, &mut d);
        assert_eq!(got, vec![2, 2]);
    }

    proptest! {
        /// Over many releases with every lane always holding people, each
        /// lane's total is within one place of share × total.
        #[test]
        fn totals_stay_within_one_place_of_the_shares(
            raw in prop::collection::vec(1u32..1000, 1..6),
            releases in prop::collection::vec(0u64..50, 1..400),
        ) {
            let sum: u32 = raw.iter().sum();
            let shares: Vec<f64> = raw.iter().map(|&r| f64::from(r) / f64::from(sum)).collect();
            let lanes: Vec<LaneDemand> = shares.iter().map(|&s| lane(s, u64::MAX / 2)).collect();
            let mut d = Vec::new();
            let mut totals = vec![0u64; lanes.len()];
            let mut total = 0u64;
            for places in releases {
                let got = split_release(places, &lanes, &mut d);
                prop_assert_eq!(got.iter().sum::<u64>(), places);
                for (t, g) in totals.iter_mut().zip(&got) {
                    *t += g;
                }
                total += places;
                for (i, &t) in totals.iter().enumerate() {
                    let ideal = shares[i] * total as f64;
                    prop_assert!((t as f64 - ideal).abs() <= 1.0 + 1e-6,
                        "lane {} got {} of {}, ideal {:.3}", i, t, total, ideal);
                }
            }
        }

        /// Whatever the lanes hold: never more than a lane has waiting, all
        /// places given while anyone waits, nothing to a bypass lane.
        #[test]
        fn a_release_never_overgives_and_never_wastes(
            lanes in prop::collection::vec((0.0f64..1.0, 0u64..30, any::<bool>()), 1..6),
            releases in prop::collection::vec(0u64..60, 1..50),
        ) {
            let lanes: Vec<LaneDemand> = lanes
                .into_iter()
                .map(|(share, waiting, bypass)| LaneDemand { share, waiting, bypass })
                .collect();
            let mut d = Vec::new();
            for places in releases {
                let got = split_release(places, &lanes, &mut d);
                let can_take: u64 = lanes.iter().filter(|l| !l.bypass).map(|l| l.waiting).sum();
                prop_assert_eq!(got.iter().sum::<u64>(), places.min(can_take));
                for (l, g) in lanes.iter().zip(&got) {
                    prop_assert!(*g <= l.waiting);
                    prop_assert!(!l.bypass || *g == 0);
                }
                prop_assert!(d.iter().all(|x| x.abs() <= 1.0));
            }
        }
    }
}
