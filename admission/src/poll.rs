//! When a waiting person should ask again (the estimated wait it grows
//! with is [`crate::wait_estimate`]).
//!
//! Far from the front nothing will change for a while, so asking often is
//! only load: the interval grows with the expected wait (a quarter of it),
//! between `poll_min` at the front and `poll_max` far back. A random part
//! (up to a fifth, taken off) spreads out people who joined together, so
//! their polls do not arrive in waves.

use rand::Rng;

/// Seconds until the next poll for someone `wait_s` seconds from the front.
pub fn poll_after_s(wait_s: u64, min_s: u8, max_s: u8, rng: &mut impl Rng) -> u8 {
    let base = (wait_s / 4).clamp(u64::from(min_s), u64::from(max_s)) as u8;
    let jitter = rng.random_range(0..=base / 5);
    base.saturating_sub(jitter).max(min_s)
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
}
