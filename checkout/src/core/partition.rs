//! Partitioned stock with no store: where a hold starts looking, each
//! partition's even share, and the plans that move free units between
//! partitions (both back ends run them; each logs every move in
//! `rebalances`).

/// Partitions of one SKU, at most (the schema's CHECK says the same).
pub const PARTITIONS_MAX: u32 = 1024;

/// One partition's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    pub part: u32,
    pub share: i64,
    pub available: i64,
    pub reserved: i64,
    pub committed: i64,
}

/// Where a reservation starts looking: spreads shoppers over the
/// partitions (FNV-1a of the order id; any stable spread will do).
pub fn start_of(order_id: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in order_id.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// Partition `part`'s share of `total` split over `parts`: the remainder
/// goes to the first ones.
pub fn even_share(total: i64, parts: i32, part: i32) -> i64 {
    let parts = i64::from(parts.max(1));
    let part = i64::from(part);
    total / parts + i64::from(part < total % parts)
}

/// The moves `(from, to, units)` that leave `available[i]` even over the
/// first `live` partitions and empty on the rest (retired ones).
pub fn plan_even(available: &[i64], live: usize) -> Vec<(usize, usize, i64)> {
    let live = live.clamp(1, available.len().max(1));
    let free: i64 = available.iter().sum();
    let target = |i: usize| -> i64 {
        if i >= live {
            0
        } else {
            free / live as i64 + i64::from((i as i64) < free % live as i64)
        }
    };
    let mut surplus: Vec<(usize, i64)> = Vec::new();
    let mut deficit: Vec<(usize, i64)> = Vec::new();
    for (i, &have) in available.iter().enumerate() {
        let want = target(i);
        if have > want {
            surplus.push((i, have - want));
        } else if have < want {
            deficit.push((i, want - have));
        }
    }
    plan_moves(surplus, deficit)
}

/// The moves that bring `need` units into partition `into`, taken from the
/// others in order; empty when the others do not have them.
pub fn plan_gather(available: &[i64], into: usize, need: i64) -> Vec<(usize, usize, i64)> {
    let Some(&have) = available.get(into) else {
        return Vec::new();
    };
    let missing = need - have;
    let others: i64 = available.iter().sum::<i64>() - have;
    if missing <= 0 || others < missing {
        return Vec::new();
    }
    let surplus = available
        .iter()
        .enumerate()
        .filter(|&(i, &units)| i != into && units > 0)
        .map(|(i, &units)| (i, units))
        .collect();
    plan_moves(surplus, vec![(into, missing)])
}

fn plan_moves(
    mut surplus: Vec<(usize, i64)>,
    deficit: Vec<(usize, i64)>,
) -> Vec<(usize, usize, i64)> {
    let mut moves = Vec::new();
    let mut from = 0;
    for (to, mut want) in deficit {
        while want > 0 && from < surplus.len() {
            let (part, ref mut spare) = surplus[from];
            let units = want.min(*spare);
            moves.push((part, to, units));
            *spare -= units;
            want -= units;
            if *spare == 0 {
                from += 1;
            }
        }
    }
    moves
}

/// Whether free units sit badly: some in a retired partition (after
/// `partitions` was lowered: a hold is taken only from live ones), or a live
/// partition empty while another has 2 or more.
pub fn needs_rebalance(available: &[i64], live: usize) -> bool {
    let live = live.clamp(1, available.len().max(1));
    let retired_free = available.iter().skip(live).any(|&a| a > 0);
    let live_parts = &available[..live.min(available.len())];
    let empty = live_parts.contains(&0);
    let rich = live_parts.iter().any(|&a| a >= 2);
    retired_free || (empty && rich)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(available: &mut [i64], moves: &[(usize, usize, i64)]) {
        for &(from, to, units) in moves {
            assert!(units > 0 && available[from] >= units);
            available[from] -= units;
            available[to] += units;
        }
    }

    #[test]
    fn even_plans_spread_free_units_and_empty_retired_partitions() {
        let mut available = vec![10, 0, 1, 5];
        let moves = plan_even(&available, 3);
        apply(&mut available, &moves);
        assert_eq!(available, vec![6, 5, 5, 0]);
        assert!(plan_even(&available, 3).is_empty(), "already even");
    }

    #[test]
    fn gather_plans_bring_the_units_or_nothing() {
        let mut available = vec![1, 2, 0, 3];
        let moves = plan_gather(&available, 2, 5);
        apply(&mut available, &moves);
        assert_eq!(available[2], 5);
        assert_eq!(available.iter().sum::<i64>(), 6);
        assert!(plan_gather(&[1, 1], 0, 3).is_empty(), "not enough in all");
        assert!(plan_gather(&[4, 1], 0, 3).is_empty(), "enough already");
    }

    #[test]
    fn free_units_in_retired_or_beside_an_empty_partition_need_a_rebalance() {
        assert!(needs_rebalance(&[3, 3, 0, 1], 2), "a retired unit");
        assert!(needs_rebalance(&[0, 2], 2), "empty beside rich");
        assert!(!needs_rebalance(&[0, 1], 2), "one unit cannot spread");
        assert!(!needs_rebalance(&[3, 3, 0, 0], 2));
        assert!(!needs_rebalance(&[5], 1));
    }

    #[test]
    fn even_shares_add_up_to_the_total() {
        let shares: Vec<i64> = (0..4).map(|p| even_share(10, 4, p)).collect();
        assert_eq!(shares, vec![3, 3, 2, 2]);
    }
}
