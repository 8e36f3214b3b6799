//! The room's numbers, as plain values for the gateway to export
//! (`sluice_queue_*`, `sluice_admissions_total`, ...). Nothing here names a
//! person.

/// Upper bounds (seconds) of the wait histogram buckets; a last, unbounded
/// bucket follows.
pub const WAIT_BUCKETS_S: [u64; 10] = [1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600];

/// Time from joining (or the opening, for the pre-queue) to admission.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WaitHistogram {
    /// Admissions per bucket, not cumulative: `counts[i]` waited at most
    /// `WAIT_BUCKETS_S[i]` and more than the bucket before; the last entry
    /// waited longer than every bound.
    pub counts: [u64; WAIT_BUCKETS_S.len() + 1],
    pub sum_s: u64,
}

impl WaitHistogram {
    pub fn observe(&mut self, wait_s: u64) {
        let i = WAIT_BUCKETS_S
            .iter()
            .position(|&b| wait_s <= b)
            .unwrap_or(WAIT_BUCKETS_S.len());
        self.counts[i] += 1;
        self.sum_s = self.sum_s.saturating_add(wait_s);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// Joins by result (`sluice_queue_joins_total{result}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JoinCounts {
    pub queued: u64,
    pub queue_full: u64,
    pub paused: u64,
    pub sold_out: u64,
    /// Refused because the room's store could not keep the join.
    pub store_unavailable: u64,
}

/// A snapshot of one room.
#[derive(Debug, Clone, PartialEq)]
pub struct RoomStats {
    pub joins: JoinCounts,
    /// Live tickets in line (`sluice_queue_waiting`).
    pub waiting: u64,
    /// Age of the oldest live ticket in line (`sluice_queue_oldest_wait_seconds`).
    pub oldest_wait_s: u64,
    /// Tickets that stopped polling (`sluice_queue_abandoned_total`).
    pub abandoned_total: u64,
    /// Tickets that outlived `ticket_ttl` in line.
    pub expired_total: u64,
    /// Passes minted (`sluice_admissions_total`).
    pub admitted_total: u64,
    /// Polls refused for coming sooner than told.
    pub too_early_total: u64,
    /// Passes valid now (`sluice_active_passes`): collected, holding a
    /// `max_active` slot.
    pub active_passes: u64,
    /// Released places whose pass was not collected yet.
    pub uncollected: u64,
    /// The measured no-show share the release makes up for, 0 to 0.5.
    pub no_show_share: f64,
    /// Admissions per second over the last 10 s (`sluice_release_rate`).
    pub release_rate: f64,
    /// The configured ceiling.
    pub release_per_second: u32,
    /// The place being served next (`/admin/state` `serving`).
    pub serving: u64,
    pub paused: bool,
    pub sold_out: bool,
    pub wait: WaitHistogram,
    /// Passes ended before their time (`sluice_passes_ended_total`): idle
    /// for `pass_idle_s`, and ended by the origin (`Sluice-Pass: end`).
    pub passes_ended_idle: u64,
    pub passes_ended_origin: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observe_fills_the_right_bucket() {
        let mut h = WaitHistogram::default();
        h.observe(0);
        h.observe(5);
        h.observe(6);
        h.observe(99_999);
        assert_eq!(h.counts[0], 1);
        assert_eq!(h.counts[1], 1);
        assert_eq!(h.counts[2], 1);
        assert_eq!(h.counts[WAIT_BUCKETS_S.len()], 1);
        assert_eq!(h.count(), 4);
        assert_eq!(h.sum_s, 100_010);
    }
}
