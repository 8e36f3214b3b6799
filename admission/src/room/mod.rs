//! The waiting room of one room: join, poll, release.
//!
//! - [`WaitingRoom::join`] gives a place at the end of the line (or in the
//!   fair-start pre-queue before the opening).
//! - [`WaitingRoom::status`] answers a poll: place, wait, when to ask again,
//!   or the pass once the place has been released (the first such answer
//!   collects it, and the pass then takes a `max_active` slot).
//! - [`WaitingRoom::release_once`] is the release worker's one bounded pass:
//!   it walks the line from the front, lets the next live people in while the
//!   rate limit and `max_active` allow, and passes over the people who left
//!   without spending any capacity on them; released places nobody comes
//!   back for are no-shows, made up for as [`crate::no_show`] says.
//! - [`WaitingRoom::watermark`] gives the numbers shared by every ticket,
//!   from which a client works out its own place.
//! - [`WaitingRoom::view`] is what the room publishes for readers without
//!   its lock: those numbers, and early polls answered ([`RoomView`]).
//! - [`WaitingRoom::restore`] rebuilds a room from its events, and
//!   [`WaitingRoom::snapshot`] sums it up in as few (see [`crate::journal`]).
//! - [`WaitingRoom::may_start`] says whether a pass still holds its active
//!   slot (and so may start a checkout); [`WaitingRoom::give_back_if_spent`]
//!   frees the slot once the pass can start no more.
//! - [`WaitingRoom::end_pass`] ends a pass before its time (the origin said
//!   so), and the release pass ends those idle for `pass_idle`; an ended
//!   pass is refused until its expiry ([`WaitingRoom::pass_ended`]).
//!
//! Time is always an argument (`now_ms`, unix milliseconds) and randomness
//! comes from the RNG given at creation, so tests drive everything.

mod accounts;
mod ending;
mod join;
mod outcome;
mod pass;
mod poll_dues;
mod pre_queue;
mod release;
mod restore;
mod status;
mod view;
mod watermark;

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::RngCore;

pub use accounts::{AccountJoin, HeldPlace};
pub use outcome::{
    Admitted, JoinError, Joined, PollError, PreQueue, ReleaseOutcome, Status, Stop, Wait,
};
pub use poll_dues::DUES_MAX;
pub use restore::RestoreError;
pub use view::RoomView;
pub use watermark::{RoomState, Watermark};

use crate::fair_start::FairStartInfo;
use crate::journal::{EventSink, RoomEvent};
use crate::no_show::{releasable, NoShowMeter};
use crate::pace::Pacer;
use crate::policy::{Policy, PolicyError};
use crate::rate_meter::RateMeter;
use crate::stats::{JoinCounts, RoomStats, WaitHistogram};
use crate::stock::StockAuthority;
use crate::store::{MemoryStore, QueueStore, Slot, SlotState};
use crate::ticket_id::{TicketId, TicketIdKey};
use crate::wait_estimate::{estimated_wait_s, SlotOutlook};
use pre_queue::PreQueueState;

/// Places looked at, per release pass, to notice people who left (beyond
/// the ones the release itself walks over).
pub const SWEEP_PLACES_PER_PASS: usize = 16_384;
/// Places looked at from the front to find the oldest live ticket.
const OLDEST_SCAN_PLACES: u64 = 1024;
/// Seconds of history behind the estimated wait.
const ESTIMATE_WINDOW_S: u32 = 30;
/// Seconds of history behind the `release_rate` gauge.
const RATE_GAUGE_WINDOW_S: u32 = 10;
/// Weight of the newest pass in the mean time a pass holds its slot.
const HOLD_EWMA_WEIGHT: f64 = 1.0 / 32.0;
/// Passes holding a slot looked at one by one for the estimate; beyond,
/// their ends are taken as evenly spread.
const ENDS_EXACT_MAX: u64 = 4096;
/// A poll up to this much sooner than told still counts as on time: clients
/// round, and requests take time to arrive.
const POLL_SLACK_S: u32 = 1;
/// A released place waits for its holder until the poll it was told to
/// make, plus this for the network; then it is a no-show.
const CLAIM_SLACK_S: u64 = 5;

/// The store's hard size: live tickets are held to `queue_capacity`, and the
/// places of people who left stay until the release walks past them. Twice
/// the capacity bounds memory even while a paused room keeps losing people.
pub fn store_places_max(policy: &Policy) -> usize {
    policy.queue_capacity.get() as usize * 2
}

/// A released place whose holder has not collected the pass yet: it takes
/// no slot, and counts toward them as the share expected to come
/// ([`crate::no_show`]).
#[derive(Debug, Clone, Copy)]
struct PendingPass {
    pass: ActivePass,
    /// Unix second after which the holder is a no-show.
    claim_by_s: u64,
}

#[derive(Debug, Clone, Copy)]
struct ActivePass {
    /// 1 for the room's first pass, 2 for the next: the release order.
    number: u64,
    issued_at_s: u64,
    expires_at_s: u64,
    /// Unix second of the pass's last request (in memory only: a restart
    /// counts from the restart).
    last_active_s: u64,
    /// Checkouts of the pass running now: it is not idle while one is.
    checkouts_running: u32,
}

/// The room's slots as the estimate sees them, in places: with a
/// no-show share `s` a slot stands for `1 / (1 - s)` released places.
struct RoomSlots<'a> {
    active: &'a BTreeMap<u64, ActivePass>,
    pending: &'a BTreeMap<u64, PendingPass>,
    max_active: u64,
    share_milli: u32,
    now_unix_s: u64,
    hold_s: f64,
}

impl SlotOutlook for RoomSlots<'_> {
    fn slots(&self) -> u64 {
        releasable(self.max_active, 0, 0, self.share_milli).max(1)
    }

    fn free(&self) -> u64 {
        releasable(
            self.max_active,
            self.active.len() as u64,
            self.pending.len() as u64,
            self.share_milli,
        )
    }

    fn end_in_s(&self, n: u64) -> Option<f64> {
        // The places the passes out stand for (collected ones and those
        // still to be collected), spread over those passes.
        let held = self.slots().saturating_sub(self.free());
        let passes = (self.active.len() + self.pending.len()) as u64;
        if n >= held || passes == 0 {
            return None;
        }
        if n >= ENDS_EXACT_MAX {
            return Some(self.hold_s * (n + 1) as f64 / held as f64);
        }
        // Release order is about place order; a pass is expected to end
        // after the mean hold, and surely at its expiry.
        let i = (n * passes / held) as usize;
        let pass = self
            .active
            .values()
            .chain(self.pending.values().map(|p| &p.pass))
            .nth(i)?;
        let expected = (pass.issued_at_s as f64 + self.hold_s).min(pass.expires_at_s as f64);
        Some(expected - self.now_unix_s as f64)
    }

    fn hold_s(&self) -> f64 {
        self.hold_s
    }
}

#[derive(Debug, Default)]
struct Counters {
    joins: JoinCounts,
    abandoned: u64,
    expired: u64,
    admitted: u64,
    /// Passes ended before their time, idle and by the origin.
    ended_idle: u64,
    ended_origin: u64,
    wait: WaitHistogram,
}

/// One room's line. Every operation takes `&mut self` and is short and
/// bounded: the gateway keeps each room behind its own mutex.
pub struct WaitingRoom<S: QueueStore = MemoryStore> {
    name: String,
    policy: Policy,
    store: S,
    stock: Arc<dyn StockAuthority>,
    ids: TicketIdKey,
    rng: StdRng,
    /// Unix second that room second 0 stands for.
    epoch_s: u64,
    /// The next place the release looks at; every place before it has been
    /// released or passed over.
    cursor: u64,
    /// Where the abandonment sweep continues.
    sweep_at: u64,
    /// The release pace (GCRA).
    pace: Pacer,
    /// Passes that may still start a checkout, by place; never more than
    /// `max_active`. A pass leaves when it expires or has spent its
    /// checkouts, and never comes back.
    active: BTreeMap<u64, ActivePass>,
    /// Released places whose pass was not collected yet, by place.
    uncollected: BTreeMap<u64, PendingPass>,
    /// Passes ended before their time (idle, or by the origin), by place:
    /// refused until their expiry (unix s), kept until then.
    ended: BTreeMap<u64, u64>,
    /// Released places collected and not: the share the release makes up.
    no_shows: NoShowMeter,
    paused: bool,
    meter: RateMeter,
    pre_queue: Option<PreQueueState>,
    counters: Counters,
    /// Where the room's changes are kept, when they are (see
    /// [`crate::journal`]); `None` for a room that lives in memory only.
    sink: Option<Box<dyn EventSink>>,
    /// Changes of the operation under way, or of earlier ones the sink
    /// refused; given to the sink, in order, before any answer.
    pending: Vec<RoomEvent>,
    /// The sink refused the last events: no joins, no releases until it
    /// takes them.
    sink_failing: bool,
    /// The place each account (enqueue token) holds ([`accounts`]).
    accounts: accounts::Accounts,
    /// Mean seconds a pass held its slot (expired or given back); `None`
    /// until one has, when `pass_ttl` stands in.
    hold_s_mean: Option<f64>,
    /// What readers without the lock see, written before every operation
    /// returns. It also keeps the latest `now` an operation (or an early
    /// poll it answered) was given: when a slot given back
    /// ([`Self::give_back_if_spent`] takes no time) was freed.
    view: Arc<RoomView>,
}

impl WaitingRoom<MemoryStore> {
    /// A room with the in-process store. `rng` seeds the ticket-id key, the
    /// fair-start seed and the poll jitter: give it OS entropy in
    /// production and a fixed seed in tests.
    pub fn new(
        name: &str,
        policy: Policy,
        stock: Arc<dyn StockAuthority>,
        rng: StdRng,
        now_ms: u64,
    ) -> Result<Self, PolicyError> {
        let store = MemoryStore::new(store_places_max(&policy));
        Self::with_store(name, policy, store, stock, rng, now_ms)
    }
}

impl<S: QueueStore> WaitingRoom<S> {
    /// A room over `store`, which must be empty.
    pub fn with_store(
        name: &str,
        policy: Policy,
        store: S,
        stock: Arc<dyn StockAuthority>,
        mut rng: StdRng,
        now_ms: u64,
    ) -> Result<Self, PolicyError> {
        let mut key = [0u8; 32];
        rng.fill_bytes(&mut key);
        let mut seed = [0u8; 32];
        rng.fill_bytes(&mut seed);
        Self::build(
            name,
            policy,
            store,
            stock,
            TicketIdKey::new(key),
            seed,
            rng,
            now_ms,
        )
    }

    /// A room over an empty `store` with its ticket-id key and fair-start
    /// seed given.
    #[allow(clippy::too_many_arguments)]
    fn build(
        name: &str,
        policy: Policy,
        store: S,
        stock: Arc<dyn StockAuthority>,
        ids: TicketIdKey,
        seed: [u8; 32],
        rng: StdRng,
        now_ms: u64,
    ) -> Result<Self, PolicyError> {
        policy.validate()?;
        let pre_queue = policy.opens_at_ms.map(|at| PreQueueState::new(at, seed));
        let pace = Pacer::new(policy.release_per_second.get(), policy.burst.get());
        let view = Arc::new(RoomView::new(
            name,
            stock.clone(),
            policy.queue_capacity.get() as usize,
            now_ms / 1000,
        ));
        let room = Self {
            name: name.to_owned(),
            store,
            stock,
            ids,
            rng,
            epoch_s: now_ms / 1000,
            cursor: 0,
            sweep_at: 0,
            pace,
            active: BTreeMap::new(),
            uncollected: BTreeMap::new(),
            ended: BTreeMap::new(),
            no_shows: NoShowMeter::default(),
            paused: false,
            meter: RateMeter::default(),
            pre_queue,
            counters: Counters::default(),
            policy,
            sink: None,
            pending: Vec::new(),
            sink_failing: false,
            hold_s_mean: None,
            accounts: accounts::Accounts::default(),
            view,
        };
        room.publish();
        Ok(room)
    }

    /// Records a change for the sink (nothing without one).
    fn emit(&mut self, event: RoomEvent) {
        if self.sink.is_some() {
            self.pending.push(event);
        }
    }

    /// Gives the pending changes to the sink; `false` if it refused them
    /// (they stay pending, and are offered again first next time). Every
    /// operation that changes the room ends with it, so it also publishes
    /// the room's [`RoomView`].
    fn flush(&mut self) -> bool {
        let kept = self.give_to_sink();
        self.publish();
        kept
    }

    fn give_to_sink(&mut self) -> bool {
        let Some(sink) = self.sink.as_mut() else {
            return true;
        };
        if self.pending.is_empty() {
            return true;
        }
        match sink.append(&self.pending) {
            Ok(()) => {
                self.pending.clear();
                self.sink_failing = false;
                true
            }
            // The sink says why where it can (it owns the I/O); the room
            // only stops taking work it could not keep.
            Err(_) => {
                self.sink_failing = true;
                false
            }
        }
    }

    /// Writes the room's state into its [`RoomView`].
    fn publish(&self) {
        let pre_queue = self.pre_queue.as_ref().filter(|p| !p.opened);
        self.view.publish(view::Published {
            epoch_s: self.epoch_s,
            cursor: self.cursor,
            waiting: self.store.live() + pre_queue.map_or(0, |p| p.entrants()),
            release_per_second: self.policy.release_per_second.get(),
            poll_min_s: self.policy.poll_min.as_secs() as u32,
            paused: self.paused,
            pre_queue_until_ms: pre_queue.map_or(0, |p| p.opens_at_ms),
            synced: self.pending.is_empty(),
        });
    }

    /// What the room publishes for readers that do not take its lock.
    pub fn view(&self) -> Arc<RoomView> {
        self.view.clone()
    }

    /// The time-outs in force, as the view records them with an answer.
    fn limits(&self) -> poll_dues::Limits {
        let secs = |d: std::time::Duration| u32::try_from(d.as_secs()).unwrap_or(u32::MAX);
        poll_dues::Limits {
            ticket_ttl_s: secs(self.policy.ticket_ttl),
            idle_timeout_s: secs(self.policy.idle_timeout),
        }
    }

    /// Records, for [`RoomView::early_poll`], the answer just given to
    /// ticket `seq` (with the id checked for it) that set its slot's next
    /// poll. Every write of a waiting slot's `last_poll_s` ends with this.
    fn record_due(&self, seq: u64, ticket_id: TicketId) {
        let (at, slot) = if self.before_opening() {
            let slot = self
                .pre_queue
                .as_ref()
                .and_then(|p| p.slots.get(usize::try_from(seq).ok()?).copied());
            (poll_dues::DueAt::PreQueue, slot)
        } else {
            let place = self.place_of(seq);
            (
                poll_dues::DueAt::Place(place.unwrap_or(u64::MAX)),
                place.and_then(|p| self.store.get(p)),
            )
        };
        if let Some(slot) = slot.filter(|s| s.state == SlotState::Waiting) {
            self.view.record(seq, ticket_id, at, &slot, self.limits());
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Applies a reloaded policy; the line, passes and counters stay.
    /// `opens_at_ms` is fixed when the room is created and is not changed.
    pub fn update_policy(&mut self, mut policy: Policy) -> Result<(), PolicyError> {
        policy.validate()?;
        policy.opens_at_ms = self.policy.opens_at_ms;
        let share = self.share_milli();
        self.pace
            .set(policy.release_per_second.get(), share, policy.burst.get());
        let limits = self.limits();
        self.policy = policy;
        if self.limits() != limits {
            self.view.next_generation();
        }
        self.publish();
        Ok(())
    }

    /// Sets the release rate alone (adaptive release, once a second); the
    /// line, passes, burst and the pace's state stay.
    pub fn set_release_per_second(&mut self, rate: std::num::NonZeroU32) {
        self.policy.release_per_second = rate;
        let share = self.share_milli();
        self.pace.set(rate.get(), share, self.policy.burst.get());
        self.publish();
    }

    /// Passes that can still be let in before `max_active` is reached.
    pub fn free_slots(&self) -> u32 {
        self.policy
            .max_active
            .get()
            .saturating_sub(self.active.len().min(u32::MAX as usize) as u32)
    }

    /// The kill switch: paused, nobody joins and nobody is let in; passes
    /// already given keep working. Reopening continues in order.
    pub fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
        self.publish();
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// What the room publishes about its fair-start draw, if it has one.
    pub fn fair_start(&self) -> Option<FairStartInfo> {
        self.pre_queue.as_ref().map(PreQueueState::info)
    }

    /// The room's numbers at `now_ms`.
    pub fn stats(&self, now_ms: u64) -> RoomStats {
        let now_s = self.room_s(now_ms);
        let pre = self
            .pre_queue
            .as_ref()
            .filter(|p| !p.opened)
            .map_or(0, |p| p.entrants());
        RoomStats {
            joins: self.counters.joins,
            waiting: self.store.live() + pre,
            oldest_wait_s: self.oldest_wait_s(now_s),
            abandoned_total: self.counters.abandoned,
            expired_total: self.counters.expired,
            admitted_total: self.counters.admitted,
            too_early_total: self.view.too_early_total(),
            active_passes: self.active.len() as u64,
            uncollected: self.uncollected.len() as u64,
            no_show_share: f64::from(self.no_shows.share_milli(Self::unix_s(now_ms))) / 1000.0,
            release_rate: self.meter.rate(now_s, RATE_GAUGE_WINDOW_S),
            release_per_second: self.policy.release_per_second.get(),
            serving: self.cursor,
            paused: self.paused,
            sold_out: !self.stock.can_sell(&self.name),
            wait: self.counters.wait.clone(),
            passes_ended_idle: self.counters.ended_idle,
            passes_ended_origin: self.counters.ended_origin,
        }
    }

    fn oldest_wait_s(&self, now_s: u32) -> u64 {
        let end = self.store.end().min(self.cursor + OLDEST_SCAN_PLACES);
        (self.cursor..end)
            .filter_map(|place| self.store.get(place))
            .find(|slot| self.fate(slot, now_s) == SlotState::Waiting)
            .map_or(0, |slot| u64::from(now_s.saturating_sub(slot.joined_s)))
    }

    /// Unix seconds.
    fn unix_s(now_ms: u64) -> u64 {
        now_ms / 1000
    }

    /// Room seconds (since `epoch_s`), as stored in slots.
    fn room_s(&self, now_ms: u64) -> u32 {
        view::room_s(Self::unix_s(now_ms), self.epoch_s)
    }

    fn expires_at_s(&self, slot: &Slot) -> u64 {
        self.epoch_s + u64::from(slot.joined_s) + self.policy.ticket_ttl.as_secs()
    }

    /// Draws the pre-queue once the opening has come.
    fn open_if_due(&mut self, now_ms: u64) {
        let now_s = self.room_s(now_ms);
        if let Some(pre) = self.pre_queue.as_mut() {
            if !pre.opened && now_ms >= pre.opens_at_ms {
                pre.open(&mut self.store, now_s);
                self.emit(RoomEvent::Opened { opening_s: now_s });
            }
        }
    }

    /// Still taking pre-queue tickets.
    fn before_opening(&self) -> bool {
        self.pre_queue.as_ref().is_some_and(|p| !p.opened)
    }

    /// The place of a ticket, once it has one.
    fn place_of(&self, seq: u64) -> Option<u64> {
        match &self.pre_queue {
            Some(pre) if !pre.opened => None,
            Some(pre) if seq < pre.entrants() => pre.place_of(seq),
            _ => Some(seq),
        }
    }

    /// What a slot is at `now_s`, counting time-outs that have not been
    /// written down yet.
    fn fate(&self, slot: &Slot, now_s: u32) -> SlotState {
        if slot.state != SlotState::Waiting {
            return slot.state;
        }
        if u64::from(now_s.saturating_sub(slot.joined_s)) >= self.policy.ticket_ttl.as_secs() {
            SlotState::Expired
        } else if u64::from(now_s.saturating_sub(slot.last_poll_s))
            > self.policy.idle_timeout.as_secs()
        {
            SlotState::Abandoned
        } else {
            SlotState::Waiting
        }
    }

    /// Writes down a time-out found by [`Self::fate`] and counts it.
    fn settle(&mut self, place: u64, slot: Slot, now_s: u32) -> SlotState {
        let state = self.fate(&slot, now_s);
        if state != slot.state {
            match state {
                SlotState::Abandoned => self.counters.abandoned += 1,
                SlotState::Expired => self.counters.expired += 1,
                SlotState::Waiting | SlotState::Released => {}
            }
            self.store.set(place, Slot { state, ..slot });
            self.emit(RoomEvent::Ended { place, state });
        }
        state
    }

    /// Admissions per second to plan with: measured while busy, else the
    /// configured rate; never below the rate in force (a rate just raised,
    /// as adaptive release does, releases at it from now on: planning with
    /// the older, lower measure tells people later turns than they get, so
    /// the places released early wait for their holders' later polls and
    /// reach checkout together).
    fn planning_rate(&self, now_s: u32) -> f64 {
        let in_force = f64::from(self.policy.release_per_second.get());
        self.meter
            .busy_rate(now_s, ESTIMATE_WINDOW_S)
            .map_or(in_force, |measured| measured.max(in_force))
    }

    fn estimate_s(&self, ahead: u64, now_s: u32) -> u64 {
        let slots = RoomSlots {
            active: &self.active,
            pending: &self.uncollected,
            share_milli: self.share_milli(),
            max_active: u64::from(self.policy.max_active.get()),
            now_unix_s: self.epoch_s + u64::from(now_s),
            hold_s: self.hold_s(),
        };
        estimated_wait_s(ahead, self.planning_rate(now_s), &slots)
    }

    /// The measured no-show share, in thousandths.
    fn share_milli(&self) -> u32 {
        self.no_shows.share_milli(self.view.seen_s())
    }

    fn hold_s(&self) -> f64 {
        self.hold_s_mean
            .unwrap_or(self.policy.pass_ttl.as_secs_f64())
    }

    /// A pass gave its slot back after holding it `held_s`.
    fn observe_hold(&mut self, held_s: u64) {
        let held = held_s as f64;
        self.hold_s_mean = Some(match self.hold_s_mean {
            Some(mean) => mean + HOLD_EWMA_WEIGHT * (held - mean),
            None => held,
        });
    }

    fn saw(&mut self, now_ms: u64) {
        self.view.saw(now_ms);
    }

    /// `Retry-After` for a full queue or a paused room: long enough for the
    /// line to move by a hundredth of its capacity, within the poll bounds.
    fn retry_after_s(&self) -> u64 {
        let rate = u64::from(self.policy.release_per_second.get());
        let hundredth = u64::from(self.policy.queue_capacity.get()) / 100;
        hundredth.div_ceil(rate).clamp(
            self.policy.poll_min.as_secs(),
            self.policy.poll_max.as_secs(),
        )
    }
}
