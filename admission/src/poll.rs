//! When a waiting person should ask again (the estimated wait it grows
//! with is [`crate::wait_estimate`]).
//!
//! Far from the front nothing will change for a while, so asking often is
//! only load: the interval grows with the expected wait (a quarter of it),
//! between `poll_min` at the front and `poll_max` far back. A random part
//! (up to a fifth, taken off) spreads out people who joined together, so
//! their polls do not arrive in waves.
//!
//! At the front, pacing ([`paced_poll_after_s`]): someone whose turn comes
//! sooner than `poll_min` is told to come back at its turn (at least 1 s),
//! not `poll_min`. A released place is only collected at its holder's next
//! poll, and the people released one after the other joined one after the
//! other, so at a fixed `poll_min` they come back together: the releases of
//! a whole `poll_min` reach checkout in one round and the backend sees
//! bursts, whatever the release rate. Told their own turn, each comes back
//! about when it is released, so admitted shoppers reach checkout at the
//! pace they were released. It costs at most one poll more per admission
//! (the one that lands on the turn instead of `poll_min` after it).

use rand::Rng;

/// Seconds until the next poll for someone `wait_s` seconds from the front.
pub fn poll_after_s(wait_s: u64, min_s: u8, max_s: u8, rng: &mut impl Rng) -> u8 {
    let base = (wait_s / 4).clamp(u64::from(min_s), u64::from(max_s)) as u8;
    let jitter = rng.random_range(0..=base / 5);
    base.saturating_sub(jitter).max(min_s)
}

/// [`poll_after_s`], paced at the front: when the line is moving at the
/// rate (`releasing`: not paused, and the slots free now would take this
/// ticket too, so its turn is the rate's and not a slot's), someone whose
/// turn comes in less than `min_s` is told `max(wait_s, 1)`, so it comes
/// back at its turn. Otherwise (and far from the front) the same answer as
/// [`poll_after_s`], which draws from `rng` either way.
pub fn paced_poll_after_s(
    wait_s: u64,
    min_s: u8,
    max_s: u8,
    releasing: bool,
    rng: &mut impl Rng,
) -> u8 {
    let poll = poll_after_s(wait_s, min_s, max_s, rng);
    if releasing && wait_s < u64::from(min_s) {
        // wait_s < min_s ≤ 255
        wait_s.max(1) as u8
    } else {
        poll
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn grows_with_distance_and_stays_in_bounds() {
        let mut rng = StdRng::seed_from_u64(1);
        let near: Vec<u8> = (0..100).map(|_| poll_after_s(3, 2, 60, &mut rng)).collect();
        assert!(near.iter().all(|&p| p == 2));
        let far: Vec<u8> = (0..1000)
            .map(|_| poll_after_s(10_000, 2, 60, &mut rng))
            .collect();
        assert!(far.iter().all(|&p| (48..=60).contains(&p)));
        // The jitter actually spreads.
        assert!(far.iter().any(|&p| p != far[0]));
        let mid = poll_after_s(100, 2, 60, &mut rng);
        assert!((20..=25).contains(&mid), "{mid}");
    }

    #[test]
    fn at_the_front_of_a_moving_line_the_advice_is_the_turn() {
        let mut rng = StdRng::seed_from_u64(2);
        // Turns within poll_min: back at the turn, never sooner than 1 s.
        for wait in 0..10u64 {
            let poll = paced_poll_after_s(wait, 10, 20, true, &mut rng);
            assert_eq!(u64::from(poll), wait.max(1), "wait {wait}");
        }
        // From poll_min on, the unpaced advice (poll_min at least).
        for wait in [10u64, 39, 40, 80, 10_000] {
            let paced = paced_poll_after_s(wait, 10, 20, true, &mut StdRng::seed_from_u64(wait));
            let plain = poll_after_s(wait, 10, 20, &mut StdRng::seed_from_u64(wait));
            assert_eq!(paced, plain, "wait {wait}");
            assert!(paced >= 10);
        }
        // A line that does not move at the rate (paused, or the slots
        // bind): poll_min at the front, as before.
        for wait in 0..10u64 {
            assert_eq!(paced_poll_after_s(wait, 10, 20, false, &mut rng), 10);
        }
        // The same draws as the unpaced advice, so pacing does not move
        // anything else a seeded room decides.
        let (mut a, mut b) = (StdRng::seed_from_u64(3), StdRng::seed_from_u64(3));
        paced_poll_after_s(5, 10, 20, true, &mut a);
        poll_after_s(5, 10, 20, &mut b);
        assert_eq!(a.random::<u64>(), b.random::<u64>());
    }
}
