//! The adaptive difficulty: `min_bits` while joins arrive at or under the
//! target rate, one bit more for each doubling of the rate above it, at
//! most `max_bits`:
//!
//! ```text
//! bits(r) = min_bits                                  r ≤ target
//!         = min(max_bits, min_bits + ceil(log2(r / target)))   r > target
//! ```
//!
//! One bit doubles the expected work of a join (`2^bits` hashes), so a
//! flood at `2^k × target` pays `2^k` times the work per join it pays at
//! the target: the total work a flood must spend grows with the square of
//! its rate.

use sluice_policies::model::Difficulty;

/// The law above. A rate that is not a number counts as none (`min_bits`);
/// `min_bits` above `max_bits` is read as `max_bits`.
pub fn adaptive_bits(
    joins_per_second: f64,
    target_joins_per_second: f64,
    min_bits: u8,
    max_bits: u8,
) -> u8 {
    let min_bits = min_bits.min(max_bits);
    let no_flood = joins_per_second.is_nan()
        || target_joins_per_second.is_nan()
        || target_joins_per_second <= 0.0
        || joins_per_second <= target_joins_per_second;
    if no_flood {
        return min_bits;
    }
    let doublings = (joins_per_second / target_joins_per_second).log2().ceil();
    // `doublings` is at least 1 here (the ratio is above 1); infinity
    // saturates.
    let extra = if doublings >= f64::from(max_bits - min_bits) {
        max_bits - min_bits
    } else {
        doublings as u8
    };
    min_bits + extra
}

/// The difficulty a room asks of a challenge issued now, given the joins
/// per second measured lately.
pub fn bits_now(difficulty: &Difficulty, joins_per_second: f64) -> u8 {
    match *difficulty {
        Difficulty::Fixed(bits) => bits,
        Difficulty::Adaptive {
            min_bits,
            max_bits,
            target_joins_per_second,
        } => adaptive_bits(
            joins_per_second,
            f64::from(target_joins_per_second.get()),
            min_bits,
            max_bits,
        ),
    }
}
