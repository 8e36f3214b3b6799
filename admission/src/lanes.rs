//! A room's lanes (`[[rooms.lanes]]`): which lane a join goes to, each
//! lane's own line, and the order a release takes their places in.
//!
//! - [`RoomLanes`] is the room's lanes as configured, the default lane
//!   first (index 0, [`DEFAULT_LANE`], share: what the configured shares
//!   leave); [`RoomLanes::index_of`] maps a token's `lane` claim to one
//!   (an unknown name is [`UnknownLane`], which the join answers
//!   `401 invalid_enqueue_token`).
//! - [`LaneLines`] keeps each lane's line: the room-wide places of the
//!   people in it, in join order, and how many the lane has released.
//!   Position is per lane ([`LaneLines::position`]), and
//!   [`LaneLines::take_release`] splits the places a release may give
//!   with [`crate::lane_split::split_release`] (deficits kept here, across
//!   releases) and hands back the places to release, in place order;
//!   [`LaneLines::release_part`] is the part a lane gets, for its wait.
//! - [`bypass_admits`]: a bypass lane's join is admitted at once when the
//!   room is open and a slot is free under `max_active`: the same rule as
//!   standby's ([`crate::standby::admits_at_once`]), so both use one path.
//!
//! Places stay room-wide (one store, one numbering): a lane only says who
//! is next. Both back ends call these functions; the fleet keeps the
//! deficits in Redis next to the lane lines.
//!
//! What lanes do not stop: a lane is only as private as the enqueue keys
//! that sign its claim; a store that signs `lane = "members"` for anyone
//! gives anyone the members' share.

use std::collections::VecDeque;

use sluice_policies::model::{Lane, Room, DEFAULT_LANE};

use crate::lane_split::{split_release, LaneDemand};

/// A token named a lane the room does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the room has no lane {0:?}")]
pub struct UnknownLane(pub String);

/// One lane of a room.
#[derive(Debug, Clone, PartialEq)]
pub struct LaneRule {
    pub name: String,
    pub share: f64,
    pub bypass: bool,
}

/// A room's lanes, the default lane first.
#[derive(Debug, Clone, PartialEq)]
pub struct RoomLanes {
    lanes: Vec<LaneRule>,
}

impl RoomLanes {
    /// The lanes of `room` (the default lane's share as
    /// [`Room::default_lane_share`] says).
    pub fn from_room(room: &Room) -> Self {
        Self::new(&room.lanes, room.default_lane_share())
    }

    /// The default lane with `default_share`, then `lanes` in file order.
    pub fn new(lanes: &[Lane], default_share: f64) -> Self {
        let default = LaneRule {
            name: DEFAULT_LANE.to_owned(),
            share: default_share,
            bypass: false,
        };
        let configured = lanes.iter().map(|l| LaneRule {
            name: l.name.clone(),
            share: if l.bypass { 0.0 } else { l.share },
            bypass: l.bypass,
        });
        Self {
            lanes: std::iter::once(default).chain(configured).collect(),
        }
    }

    /// The lane a join goes to: `None` (no claim) and `"default"` are the
    /// default lane.
    pub fn index_of(&self, claim: Option<&str>) -> Result<usize, UnknownLane> {
        let name = claim.unwrap_or(DEFAULT_LANE);
        self.lanes
            .iter()
            .position(|l| l.name == name)
            .ok_or_else(|| UnknownLane(name.to_owned()))
    }

    /// The lanes, default first: the `lane` metric label takes its names
    /// from here only.
    pub fn rules(&self) -> &[LaneRule] {
        &self.lanes
    }

    pub fn len(&self) -> usize {
        self.lanes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    /// Whether lane `i` is admitted at once.
    pub fn is_bypass(&self, i: usize) -> bool {
        self.lanes.get(i).is_some_and(|l| l.bypass)
    }
}

/// Whether a bypass lane's join is admitted at once: the room open (never
/// before `opens_at`) and a slot free under `max_active` (`held`: passes
/// out, collected or not). Otherwise the shopper waits at the front of the
/// bypass lane's line, which every release serves first.
pub fn bypass_admits(opened: bool, held: u64, max_active: u64) -> bool {
    crate::standby::admits_at_once(false, opened, held, max_active)
}

/// A lane in the watermark: `serving` people of the lane released so far,
/// `waiting` people in its line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LaneMark {
    pub name: String,
    pub serving: u64,
    pub waiting: u64,
}

#[derive(Debug, Clone, Default)]
struct LaneLine {
    /// Room-wide places of the people in line, in join order.
    places: VecDeque<u64>,
    /// People of the lane released (or passed over as gone).
    served: u64,
}

/// Each lane's line, and the deficits the split keeps across releases.
#[derive(Debug, Clone, Default)]
pub struct LaneLines {
    lines: Vec<LaneLine>,
    deficits: Vec<f64>,
}

impl LaneLines {
    pub fn new(lanes: &RoomLanes) -> Self {
        Self {
            lines: vec![LaneLine::default(); lanes.len()],
            deficits: vec![0.0; lanes.len()],
        }
    }

    /// Puts `place` (greater than any place pushed before) at the back of
    /// lane `lane`'s line.
    pub fn push(&mut self, lane: usize, place: u64) {
        if let Some(line) = self.lines.get_mut(lane) {
            line.places.push_back(place);
        }
    }

    /// The position of `place` in lane `lane` (1: next), counting the
    /// people still in that lane's line ahead of it; `None` when it is not
    /// in the line (released, or never there).
    pub fn position(&self, lane: usize, place: u64) -> Option<u64> {
        let places = &self.lines.get(lane)?.places;
        let (a, b) = places.as_slices();
        let i = match a.binary_search(&place) {
            Ok(i) => i,
            Err(_) => a.len() + b.binary_search(&place).ok()?,
        };
        Some(i as u64 + 1)
    }

    /// People in lane `lane`'s line.
    pub fn waiting(&self, lane: usize) -> u64 {
        self.lines.get(lane).map_or(0, |l| l.places.len() as u64)
    }

    /// The places to release now, at most `places` of them, in place
    /// order: people who left (`live` says no) are dropped from the
    /// fronts first for free; bypass lanes go first (they wait only for a
    /// slot); the rest is split by the lanes' shares with the deficits
    /// kept since the last release.
    pub fn take_release(
        &mut self,
        lanes: &RoomLanes,
        places: u64,
        live: impl Fn(u64) -> bool,
    ) -> Vec<u64> {
        for line in &mut self.lines {
            line.places.retain(|&p| live(p));
        }
        let mut out = Vec::new();
        let mut left = places;
        for (i, line) in self.lines.iter_mut().enumerate() {
            if !lanes.is_bypass(i) {
                continue;
            }
            while left > 0 {
                let Some(p) = line.places.pop_front() else {
                    break;
                };
                line.served += 1;
                out.push(p);
                left -= 1;
            }
        }
        let demand: Vec<LaneDemand> = lanes
            .rules()
            .iter()
            .zip(&self.lines)
            .map(|(rule, line)| LaneDemand {
                share: rule.share,
                waiting: line.places.len() as u64,
                bypass: rule.bypass,
            })
            .collect();
        let given = split_release(left, &demand, &mut self.deficits);
        for (line, n) in self.lines.iter_mut().zip(given) {
            for _ in 0..n {
                if let Some(p) = line.places.pop_front() {
                    line.served += 1;
                    out.push(p);
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// The part of each release lane `lane` gets while the lines stay as
    /// they are: its share among the lanes with people waiting (the split's
    /// weights; equal parts when none of them has a share), 1 for a bypass
    /// lane (served first). A lane's wait is its position at the release
    /// rate times this part ([`crate::wait_estimate`]).
    pub fn release_part(&self, lanes: &RoomLanes, lane: usize) -> f64 {
        if lanes.is_bypass(lane) {
            return 1.0;
        }
        let rules = lanes.rules();
        if lane >= rules.len() {
            return 0.0;
        }
        let open: Vec<usize> = (0..rules.len())
            .filter(|&i| !rules[i].bypass && (i == lane || self.waiting(i) > 0))
            .collect();
        let share = |i: usize| rules[i].share.max(0.0);
        let total: f64 = open.iter().map(|&i| share(i)).sum();
        if total > 0.0 {
            share(lane) / total
        } else {
            1.0 / open.len() as f64
        }
    }

    /// The lanes as the watermark shows them.
    pub fn marks(&self, lanes: &RoomLanes) -> Vec<LaneMark> {
        lanes
            .rules()
            .iter()
            .zip(&self.lines)
            .map(|(rule, line)| LaneMark {
                name: rule.name.clone(),
                serving: line.served,
                waiting: line.places.len() as u64,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(name: &str, share: f64, bypass: bool) -> Lane {
        Lane {
            name: name.to_owned(),
            share,
            bypass,
        }
    }

    fn members_70() -> RoomLanes {
        RoomLanes::new(&[lane("members", 0.7, false)], 0.3)
    }

    #[test]
    fn a_claim_picks_its_lane_and_an_unknown_one_is_refused() {
        let lanes = RoomLanes::new(&[lane("members", 0.3, false), lane("vip", 0.0, true)], 0.7);
        assert_eq!(lanes.index_of(None), Ok(0));
        assert_eq!(lanes.index_of(Some("default")), Ok(0));
        assert_eq!(lanes.index_of(Some("members")), Ok(1));
        assert_eq!(lanes.index_of(Some("vip")), Ok(2));
        assert_eq!(
            lanes.index_of(Some("staff")),
            Err(UnknownLane("staff".into()))
        );
        assert!(lanes.is_bypass(2) && !lanes.is_bypass(1) && !lanes.is_bypass(0));
    }

    #[test]
    fn shares_hold_over_many_releases() {
        let lanes = members_70();
        let mut lines = LaneLines::new(&lanes);
        let mut place = 0;
        for _ in 0..1000 {
            for l in [0, 1] {
                lines.push(l, place);
                place += 1;
            }
        }
        let mut got = [0u64; 2];
        // 3 places a release: neither lane's part is whole, so only the
        // deficits kept across releases give 30/70.
        for _ in 0..100 {
            for p in lines.take_release(&lanes, 3, |_| true) {
                got[(p % 2) as usize] += 1;
            }
        }
        assert_eq!(got[0] + got[1], 300);
        assert!((89..=91).contains(&got[0]), "default got {}", got[0]);
        assert!((209..=211).contains(&got[1]), "members got {}", got[1]);
        let marks = lines.marks(&lanes);
        assert_eq!(marks[1].serving, got[1]);
        assert_eq!(marks[1].waiting, 1000 - got[1]);
    }

    #[test]
    fn a_share_a_lane_cannot_use_flows_to_the_others() {
        let lanes = members_70();
        let mut lines = LaneLines::new(&lanes);
        for p in 0..10 {
            lines.push(0, p);
        }
        lines.push(1, 10);
        let out = lines.take_release(&lanes, 10, |_| true);
        assert_eq!(out.len(), 10, "members had one: the rest go to default");
        assert!(out.contains(&10));
        assert_eq!(lines.waiting(0), 1);
        assert_eq!(lines.waiting(1), 0);
    }

    #[test]
    fn position_is_per_lane_and_people_who_left_are_passed_over() {
        let lanes = members_70();
        let mut lines = LaneLines::new(&lanes);
        for p in 0..6 {
            lines.push(0, p);
        }
        lines.push(1, 6);
        lines.push(1, 7);
        assert_eq!(lines.position(1, 6), Some(1));
        assert_eq!(lines.position(1, 7), Some(2));
        assert_eq!(lines.position(0, 5), Some(6));
        assert_eq!(lines.position(0, 7), None);
        // 0 and 1 left: the release takes 2 and 3 for the default lane.
        let out = lines.take_release(&lanes, 3, |p| p > 1);
        assert_eq!(out, vec![2, 6, 7]);
        assert_eq!(lines.position(0, 5), Some(3));
    }

    #[test]
    fn bypass_lanes_go_first_and_only_within_max_active_after_opening() {
        let lanes = RoomLanes::new(&[lane("vip", 0.0, true)], 1.0);
        let mut lines = LaneLines::new(&lanes);
        lines.push(0, 0);
        lines.push(1, 1);
        assert_eq!(lines.take_release(&lanes, 1, |_| true), vec![1]);
        assert!(bypass_admits(true, 9, 10));
        assert!(!bypass_admits(true, 10, 10), "full: waits");
        assert!(!bypass_admits(false, 0, 10), "never before opens_at");
    }

    #[test]
    fn a_lane_waits_by_its_part_of_the_release() {
        let lanes = RoomLanes::new(&[lane("members", 0.7, false), lane("vip", 0.0, true)], 0.3);
        let mut lines = LaneLines::new(&lanes);
        assert_eq!(lines.release_part(&lanes, 1), 1.0, "alone: all of it");
        lines.push(0, 0);
        assert!((lines.release_part(&lanes, 1) - 0.7).abs() < 1e-9);
        assert_eq!(lines.release_part(&lanes, 0), 1.0, "members empty: all");
        lines.push(1, 1);
        assert!((lines.release_part(&lanes, 0) - 0.3).abs() < 1e-9);
        assert_eq!(lines.release_part(&lanes, 2), 1.0, "bypass: first");
        let zero = RoomLanes::new(&[lane("members", 1.0, false)], 0.0);
        let mut lines = LaneLines::new(&zero);
        assert_eq!(lines.release_part(&zero, 0), 1.0, "no share, alone: all");
        lines.push(1, 0);
        assert_eq!(
            lines.release_part(&zero, 0),
            0.0,
            "no share while others wait"
        );
    }
}
