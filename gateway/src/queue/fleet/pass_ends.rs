//! Passes that end before their time on a fleet (`pass_idle_s`,
//! `Sluice-Pass: end`), as this gateway holds them.
//!
//! The passes used here (a request carried them, a checkout of theirs
//! runs) are pushed to the store with every tick, which keeps each pass's
//! last activity and ends the idle ones by the one rule
//! (`sluice_admission::pass_idle::is_idle`, mirrored in `sluice.lua`). A
//! pass ended anywhere in the fleet is appended to the room's ended stream;
//! every gateway reads it from where it last read, every tick, into
//! [`PassEnds`]'s map, so checking a pass is one lookup in memory. A pass
//! ended on another gateway is refused here from the next tick on (at
//! most [`super::TICK`] plus one call later).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use sluice_admission::PassEnd;

use super::store::PassesReply;

/// Passes remembered as ended (each until its end), or as used since the
/// last tick, at most: beyond, the expired ones are dropped (ended), or
/// the newest are not noted (used; a pass holds its slot at most
/// `max_active` of them, so only a flood of passes of one room reaches it).
pub const PASSES_REMEMBERED_MAX: usize = 65_536;

/// Passes ended before their time and passes in use, for one room.
#[derive(Debug)]
pub struct PassEnds {
    /// Passes ended, here or on any gateway (seq → pass end, unix s).
    ended: Mutex<HashMap<u64, u64>>,
    /// Passes used here since the last tick.
    touched: Mutex<HashSet<u64>>,
    /// Checkouts running here, per pass: such a pass is in use every tick.
    running: Mutex<HashMap<u64, u32>>,
    /// The last id of the ended stream read (`"-"`: none yet).
    after: Mutex<String>,
    /// Passes ended by this gateway, idle and by the origin.
    idle: AtomicU64,
    origin: AtomicU64,
}

impl Default for PassEnds {
    fn default() -> Self {
        Self {
            ended: Mutex::default(),
            touched: Mutex::default(),
            running: Mutex::default(),
            after: Mutex::new("-".into()),
            idle: AtomicU64::new(0),
            origin: AtomicU64::new(0),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl PassEnds {
    /// Pass `seq` (ending at `ends_s`) ended; `false` if known already.
    pub fn insert(&self, seq: u64, ends_s: u64, now_ms: u64) -> bool {
        let mut ended = lock(&self.ended);
        if ended.len() >= PASSES_REMEMBERED_MAX {
            ended.retain(|_, end| *end > now_ms / 1000);
        }
        ended.insert(seq, ends_s).is_none()
    }

    /// Whether pass `seq` ended before its time and is not past its end.
    pub fn is_ended(&self, seq: u64, now_ms: u64) -> bool {
        lock(&self.ended)
            .get(&seq)
            .is_some_and(|&end| now_ms / 1000 < end)
    }

    /// Pass `seq` was used here now.
    pub fn touch(&self, seq: u64) {
        let mut touched = lock(&self.touched);
        if touched.len() < PASSES_REMEMBERED_MAX {
            touched.insert(seq);
        }
    }

    /// A checkout of pass `seq` started (`running`) or ended here; its end
    /// is a use too.
    pub fn checkout(&self, seq: u64, running: bool) {
        {
            let mut all = lock(&self.running);
            if running {
                if all.len() < PASSES_REMEMBERED_MAX || all.contains_key(&seq) {
                    *all.entry(seq).or_insert(0) += 1;
                }
            } else if let Some(n) = all.get_mut(&seq) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    all.remove(&seq);
                }
            }
        }
        self.touch(seq);
    }

    /// The passes in use since the last call (used, or a checkout
    /// running), sorted; forgets the used ones.
    pub fn take_in_use(&self) -> Vec<u64> {
        let mut seqs: Vec<u64> = lock(&self.touched).drain().collect();
        seqs.extend(lock(&self.running).keys().copied());
        seqs.sort_unstable();
        seqs.dedup();
        seqs
    }

    /// Where the next read of the ended stream starts.
    pub fn after(&self) -> String {
        lock(&self.after).clone()
    }

    /// Takes in what the store answered: the passes ended fleet-wide, and
    /// those this gateway's call ended idle (counted here). Returns the
    /// passes newly known as ended.
    pub fn note(&self, reply: &PassesReply, now_ms: u64) -> Vec<u64> {
        let mut news = Vec::new();
        for &(seq, ends_ms) in &reply.ended {
            if self.insert(seq, ends_ms.div_ceil(1000), now_ms) {
                news.push(seq);
            }
        }
        for _ in &reply.idle_ended {
            self.count(PassEnd::Idle);
        }
        if let Some(id) = &reply.last_id {
            *lock(&self.after) = id.clone();
        }
        news
    }

    /// Counts a pass ended by this gateway, by why.
    pub fn count(&self, why: PassEnd) {
        match why {
            PassEnd::Idle => &self.idle,
            PassEnd::Origin => &self.origin,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// Passes ended by this gateway, by why.
    pub fn total(&self, why: PassEnd) -> u64 {
        match why {
            PassEnd::Idle => &self.idle,
            PassEnd::Origin => &self.origin,
        }
        .load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_ended_anywhere_is_refused_until_its_end_and_idle_ones_are_counted_here() {
        let ends = PassEnds::default();
        let reply = PassesReply {
            now_ms: 10_000,
            idle_ended: vec![7],
            ended: vec![(7, 20_500), (9, 15_000)],
            last_id: Some("10000-0".into()),
        };
        assert_eq!(ends.note(&reply, 10_000), vec![7, 9]);
        assert!(ends.is_ended(7, 20_999), "refused to the end, rounded up");
        assert!(!ends.is_ended(7, 21_000));
        assert!(ends.is_ended(9, 14_999));
        assert!(!ends.is_ended(8, 10_000));
        assert_eq!(ends.total(PassEnd::Idle), 1);
        assert_eq!(ends.total(PassEnd::Origin), 0);
        assert_eq!(ends.after(), "10000-0");
        assert!(ends.note(&reply, 10_000).is_empty(), "read again: no news");
    }

    #[test]
    fn a_running_checkout_keeps_its_pass_in_use_every_tick() {
        let ends = PassEnds::default();
        ends.touch(3);
        ends.checkout(5, true);
        assert_eq!(ends.take_in_use(), vec![3, 5]);
        assert_eq!(ends.take_in_use(), vec![5], "still running");
        ends.checkout(5, false);
        assert_eq!(ends.take_in_use(), vec![5], "its end is a use");
        assert!(ends.take_in_use().is_empty());
    }
}
