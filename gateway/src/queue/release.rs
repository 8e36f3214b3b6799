//! The release worker: a loop of bounded `release_once` passes over every
//! room, until shutdown; once a second it also runs the adaptive release
//! controller of each adaptive room (`adapt_once`) and lets the join
//! limiters forget idle clients. For durable rooms it also compacts a
//! journal grown well past its room (`release_once`, under the room's lock)
//! and syncs the journals every [`journal::SYNC_EVERY`] on a blocking
//! thread (`sync_once`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use super::{journal, Rooms};
use crate::clock::now_ms;

/// How often each room is given a release pass. Short enough that a rate
/// of thousands per second is spread over the second, not released in one
/// burst per tick.
pub const TICK: Duration = Duration::from_millis(20);
/// Places one pass may look at, so a long run of abandoned places cannot
/// hold the room's lock for long.
pub const PLACES_PER_PASS_MAX: usize = 4096;
/// How often the join limiters forget idle clients and the adaptive
/// controllers run ([`sluice_admission::adaptive::STEP_MS`]).
pub const JOIN_RETAIN_EVERY: Duration = Duration::from_millis(sluice_admission::adaptive::STEP_MS);

pub struct Releaser {
    rooms: Arc<Rooms>,
}

impl Releaser {
    pub fn new(rooms: Arc<Rooms>) -> Self {
        Self { rooms }
    }

    /// One pass over every room; returns the passes minted.
    pub fn release_once(&self, now_ms: u64) -> u32 {
        self.rooms
            .all()
            .values()
            .map(|entry| entry.backend.release_once(now_ms, PLACES_PER_PASS_MAX))
            .sum()
    }

    /// Syncs every durable room's journal (and writes a pending snapshot).
    /// Blocking I/O: runs on a blocking thread, one room after another.
    pub async fn sync_once(&self) {
        let journals: Vec<journal::RoomJournal> = self
            .rooms
            .all()
            .values()
            .filter_map(|e| e.backend.journal())
            .collect();
        if journals.is_empty() {
            return;
        }
        let synced = tokio::task::spawn_blocking(move || {
            for j in &journals {
                if let Err(e) = j.sync() {
                    tracing::error!("room journal sync failed: {e}");
                }
            }
        })
        .await;
        if let Err(e) = synced {
            tracing::error!("room journal sync task failed: {e}");
        }
    }

    /// One adaptive-release step for every adaptive room: the controller
    /// moves the rate, the room takes it at once. A paused room releases
    /// nobody whatever the rate, so its controller holds; a sold-out one
    /// releases nobody either and has no checkouts, so its rate holds too.
    /// A fleet room's rate is the fleet's, stepped by its own task
    /// (`fleet::SharedRoom`), not here.
    pub fn adapt_once(&self, now_ms: u64) {
        for entry in self.rooms.all().values() {
            entry.backend.adapt_once(now_ms);
        }
    }
}

#[async_trait]
impl BackgroundService for Releaser {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut retain = tokio::time::interval(JOIN_RETAIN_EVERY);
        retain.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sync = tokio::time::interval(journal::SYNC_EVERY);
        sync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.changed() => {
                    self.sync_once().await;
                    return;
                }
                _ = tick.tick() => {
                    self.release_once(now_ms());
                }
                _ = retain.tick() => {
                    self.adapt_once(now_ms());
                    self.rooms.retain_recent_joins();
                }
                _ = sync.tick() => {
                    self.sync_once().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::embedded::EmbeddedRoom;
    use crate::queue::RoomEntry;
    use sluice_admission::adaptive::Outcome;
    use sluice_admission::InMemoryStock;
    use sluice_policies::validate::parse_with_env;

    fn config(admissions: &str) -> sluice_policies::Config {
        let src = format!("[gateway]\nadmissions = \"{admissions}\"\n[[rooms]]\nname = \"r\"\nmax_active = 10\nqueue_capacity = 10\nrelease_per_second = \"adaptive\"\n[rooms.adaptive]\ntarget_p99_ms = 100\nmin_per_second = 4\nmax_per_second = 100\n");
        parse_with_env(&src, std::path::Path::new("p.toml"), &|_| None).unwrap()
    }

    fn slow_checkouts(rooms: &Rooms) {
        for _ in 0..50 {
            rooms.record_checkout("r", 900, Outcome::Served);
        }
    }

    fn embedded(entry: &RoomEntry) -> &EmbeddedRoom {
        entry
            .backend
            .as_any()
            .downcast_ref()
            .expect("an embedded room")
    }

    fn rate(rooms: &Rooms) -> u32 {
        let entry = rooms.get("r").unwrap();
        let line = embedded(&entry).line();
        line.policy().release_per_second.get()
    }

    /// `n` people waiting in room `r` (joined while open).
    fn waiting(rooms: &Rooms, n: usize, now_ms: u64) {
        let entry = rooms.get("r").unwrap();
        let mut line = embedded(&entry).line();
        for _ in 0..n {
            line.join(now_ms).unwrap();
        }
    }

    #[test]
    fn the_kill_switch_stops_releases_at_once_whatever_the_controller_says() {
        let stock = Arc::new(InMemoryStock::new());
        let rooms = Arc::new(Rooms::new(&config("open"), false, stock).unwrap());
        let releaser = Releaser::new(rooms.clone());
        let now = now_ms();
        waiting(&rooms, 10, now);
        // The controller's rate is well above zero (20/s, a burst of 20).
        assert_eq!(rate(&rooms), 20);
        rooms.apply(&config("paused"), now).unwrap();
        for step in 1..=5u64 {
            releaser.adapt_once(now + step * 1000);
            assert_eq!(
                releaser.release_once(now + step * 1000),
                0,
                "paused: nobody is let in"
            );
        }
        rooms.apply(&config("open"), now + 6000).unwrap();
        assert!(
            releaser.release_once(now + 6000) > 0,
            "reopened: releases resume"
        );
    }

    #[test]
    fn sold_out_stops_releases_at_once_and_holds_the_controller() {
        let stock = Arc::new(InMemoryStock::new());
        let rooms = Arc::new(Rooms::new(&config("open"), false, stock.clone()).unwrap());
        let releaser = Releaser::new(rooms.clone());
        let now = now_ms();
        waiting(&rooms, 10, now);
        stock.set_sold_out("r", true);
        for step in 1..=5u64 {
            releaser.adapt_once(now + step * 1000);
            assert_eq!(releaser.release_once(now + step * 1000), 0, "sold out");
        }
        assert_eq!(rate(&rooms), 20, "no checkouts: the rate holds");
        stock.set_sold_out("r", false);
        assert!(
            releaser.release_once(now + 6000) > 0,
            "stock back: releases resume"
        );
    }

    #[test]
    fn the_kill_switch_holds_the_controller_and_reopening_lets_it_act() {
        let rooms =
            Arc::new(Rooms::new(&config("paused"), false, Arc::new(InMemoryStock::new())).unwrap());
        let releaser = Releaser::new(rooms.clone());
        assert_eq!(rate(&rooms), 20);
        slow_checkouts(&rooms);
        releaser.adapt_once(now_ms());
        assert_eq!(rate(&rooms), 20, "paused: the controller holds");
        rooms.apply(&config("open"), now_ms()).unwrap();
        releaser.adapt_once(now_ms());
        // 900 ms against a 100 ms target, 50 in 3 s: the rate comes down to
        // what the backend served.
        assert!(rate(&rooms) < 20, "open again: slow checkouts cut the rate");
        assert_eq!(
            rooms.adaptive_view("r").unwrap().decision.per_second(),
            rate(&rooms),
            "the room runs at the controller's rate"
        );
    }

    #[test]
    fn a_checkout_counts_as_running_until_its_guard_drops() {
        let rooms = Rooms::new(&config("open"), false, Arc::new(InMemoryStock::new())).unwrap();
        let running = || {
            let entry = rooms.get("r").unwrap();
            let a = embedded(&entry).adaptive();
            a.checkouts_running()
        };
        let pass = sluice_admission::tokens::Claims::new(
            sluice_admission::tokens::TokenType::Pass,
            "r",
            "not a ticket id",
            0,
            0,
            0,
        );
        let first = rooms.checkout_started("r", &pass);
        let second = rooms.checkout_started("r", &pass);
        assert_eq!(running(), 2);
        drop(first);
        assert_eq!(running(), 1);
        drop(second);
        assert_eq!(running(), 0);
        // A room that does not exist counts nothing and does not panic.
        drop(rooms.checkout_started("nope", &pass));
    }

    #[tokio::test]
    async fn a_grown_journal_is_compacted_and_the_room_comes_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let src = format!(
            "[gateway]\ndata_dir = {:?}\n[[rooms]]\nname = \"r\"\nmax_active = 5\nqueue_capacity = 400000\nrelease_per_second = 5\nticket_ttl_s = 1\n",
            dir.path()
        );
        let config = parse_with_env(&src, std::path::Path::new("p.toml"), &|_| None).unwrap();
        let stock: Arc<dyn sluice_admission::StockAuthority> = Arc::new(InMemoryStock::new());
        let rooms = Arc::new(Rooms::open(&config, false, stock.clone()).unwrap());
        let now = now_ms();
        // Each join and each ending is an event: past the minimum
        // generation, with a room left nearly empty.
        let joins = journal::COMPACT_EVENTS_MIN / 2 + 1000;
        {
            let entry = rooms.get("r").unwrap();
            let mut line = embedded(&entry).line();
            for _ in 0..joins {
                line.join(now).unwrap();
            }
        }
        let releaser = Releaser::new(rooms.clone());
        // Every ticket has outlived its 1 s: the release walks past them all.
        let later = now + 2_000;
        let passes = joins as usize / PLACES_PER_PASS_MAX + 2;
        let released: u32 = (0..passes).map(|_| releaser.release_once(later)).sum();
        assert_eq!(released, 0);
        releaser.sync_once().await;
        let room_dir = dir.path().join("rooms").join("r");
        assert!(room_dir.join("snapshot.1").exists(), "compacted");
        assert!(
            !room_dir.join("journal.0").exists(),
            "the old generation went"
        );
        let before = rooms.stats("r", later).unwrap();
        assert_eq!((before.waiting, before.serving), (0, joins));
        drop((releaser, rooms));
        let again = Rooms::open(&config, false, stock).unwrap();
        let after = again.stats("r", later).unwrap();
        assert_eq!((after.waiting, after.serving), (0, joins));
        // The line goes on after the last place.
        let entry = again.get("r").unwrap();
        let next = embedded(&entry).line().join(later).unwrap();
        assert_eq!(next.seq, joins);
    }
}
