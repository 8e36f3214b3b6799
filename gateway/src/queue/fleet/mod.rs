//! Rooms on a line shared by a fleet of gateways (`[cluster] redis_url`).
//!
//! - [`store`]: the async [`RoomStore`] (whole transitions) and its error.
//! - [`redis`]: the Redis back end, state changed only by the Functions of
//!   `sluice.lua`.
//! - [`SharedRoom`] (here): one room as this gateway sees it. A task per
//!   room runs the release tick every [`TICK`] (any gateway may: the
//!   Function paces by Redis's clock, so no leader is needed) and keeps the
//!   shared numbers in memory; polls answer from them and never wait on
//!   the store, except to collect a released place's pass. Joins go to a
//!   second task that sends all the joins waiting at once as one call.
//!   Every call carries the highest numbers this gateway saw, and when the
//!   store lost the room (Redis restarted empty) the tick brings back the
//!   slots of the passes collected here ([`RoomStore::reseed`]).
//!
//! - An adaptive room (`release_per_second = "adaptive"`) has one rate for
//!   the fleet ([`sluice_admission::fleet_rate`]): a second task per room
//!   publishes this gateway's checkouts once a second and reads everyone's
//!   into its window; the gateway holding the room's lease steps the law
//!   and stores the decision, and every gateway's tick paces by it.
//!
//! - [`backend`]: such a room as the gateway's `RoomBackend` (its join,
//!   poll and pass checks); [`config`]: what a fleet's config must hold.
//! - [`pass_ends`]: passes ended before their time (idle, or by the
//!   origin), fleet-wide: the passes used here, pushed every tick, and the
//!   room's ended stream read back, so a pass is checked in memory.
//! - [`poll_due`]: when each ticket that polled this gateway may poll
//!   next, so an early poll is refused without a record in the store.
//! - [`serving_seen`]: the room's `serving` over the last claim windows,
//!   so a reseed says which released places may still be collected.
//! - [`fair_start`]: a room's fair-start draw (`opens_at`) as the store
//!   holds it, and where a ticket stands by it.
//!
//! The store's tasks run on a runtime of their own ([`Fleet`]), never on a
//! pingora worker: request handlers only send to them and await answers.

mod backend;
pub mod challenge;
mod config;
mod enqueue;
mod fair_start;
mod pass_ends;
mod poll_due;
pub mod redis;
mod serving_seen;
pub mod store;

pub use backend::FleetRoom;
pub use config::check_config;
pub use enqueue::{AccountJoinArgs, AccountPlace, AccountReply};

use std::collections::{HashMap, HashSet, VecDeque};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use sluice_admission::adaptive::{self, Bounds, CheckoutWindow, Outcome};
use sluice_admission::fleet::{
    self as decide, ClaimReply, LineNumbers, Presented, STORE_RETRY_AFTER_S,
};
use sluice_admission::fleet_rate::{self, Sample};
use sluice_admission::join_limiter::{client_period_us, ClientKey};
use sluice_admission::no_show::NoShowMeter;
use sluice_admission::stats::JoinCounts;
use sluice_admission::{JoinError, Policy, StockAuthority};
use tokio::sync::{mpsc, oneshot};

use crate::clock::now_ms;
use pass_ends::PassEnds;
use poll_due::PollDue;
use serving_seen::ServingSeen;
pub use store::{
    ClaimArgs, FleetLimits, JoinBatch, Member, PassesArgs, Reseed, RoomStore, StoreError,
    StoredDecision, TickArgs,
};

/// How often each gateway runs the release tick and refreshes the shared
/// numbers: polls answer from numbers at most this old (plus one call).
pub const TICK: Duration = Duration::from_millis(100);
/// Joins sent to the store in one call, at most.
pub const JOIN_BATCH_MAX: usize = 512;
/// Joins waiting for the batcher, at most; beyond, a join is refused with
/// `store_unavailable` rather than queued without bound.
pub const JOINS_WAITING_MAX: usize = 8192;
/// A claim waits this long for the store at most.
pub const ANSWER_WAIT_MAX: Duration = Duration::from_secs(3);
/// A join waits this long at most: the call before its own (a batch in
/// flight), its own call (each bounded at 1.5 s by the store) and a
/// margin, so a joiner is still waiting when its place is given (a place
/// granted to a joiner who gave up would be a ghost that later spends rate
/// and a slot). A store warming up (a new room, or Redis back without its
/// data: see `WARM_UP_MS` in `sluice.lua`) is not waited for: its joins
/// are answered `store_unavailable` with `Retry-After` at once.
pub const JOIN_WAIT_MAX: Duration = Duration::from_millis(1_500 + 1_500 + 500);
/// Passes given back that this gateway remembers (each until it expires).
const GIVEN_BACK_MAX: usize = 65_536;
/// Claim answers a room remembers (a pass until it expires, a spent place
/// for good), so a ticket polled again and again after its release asks the
/// store once; beyond, the memory is emptied and filled again.
const CLAIMS_REMEMBERED_MAX: usize = 131_072;
/// A gateway whose heartbeat (every second) was heard this recently counts
/// as alive: after a loss the slots wait for its re-seed.
const MEMBER_LIVE_S: u64 = 3;
/// How long a heartbeat's count of live gateways stands (see
/// [`Fleet::members_live`]).
const MEMBERS_RECENT: Duration = Duration::from_secs(10);
/// Claims of one room in flight to the store at once, at most; beyond, a
/// poll is answered "at the front, ask again" without a store call, so a
/// flood of polls cannot queue without bound in front of Redis.
const CLAIMS_IN_FLIGHT_MAX: usize = 256;

const STATE_NONE: u8 = 0;
const STATE_OPEN: u8 = 1;
const STATE_PAUSED: u8 = 2;
/// At start, or after the store lost the room: written only if the store
/// holds no state for the room yet; otherwise the fleet's state stands.
const STATE_INIT_OPEN: u8 = 3;
const STATE_INIT_PAUSED: u8 = 4;

/// A released place with less than this of its claim window left when the
/// store lost the room is not taken back (it would get a whole new window).
pub const CLAIM_LEFT_MIN: Duration = Duration::from_secs(1);
/// How often a gateway tells the store it is alive (`/admin/state`
/// `"fleet"`).
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// The store counts as up while a heartbeat answered within this.
pub const STORE_UP_WITHIN: Duration = Duration::from_secs(3);

/// The room store as this gateway last reached it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreHealth {
    Up,
    /// No heartbeat answered for `for_ms` (since the gateway started, if
    /// none ever did); the last error, if any.
    Unreachable {
        for_ms: u64,
        error: Option<String>,
    },
}

/// The store's health at `now_ms` from the last answered heartbeat
/// (`last_ok_ms`, 0: none yet) and when the fleet started.
pub fn store_health(
    now_ms: u64,
    last_ok_ms: u64,
    started_ms: u64,
    error: Option<&str>,
) -> StoreHealth {
    let since = last_ok_ms.max(started_ms);
    let for_ms = now_ms.saturating_sub(since);
    if last_ok_ms > 0 && for_ms <= STORE_UP_WITHIN.as_millis() as u64 {
        return StoreHealth::Up;
    }
    if last_ok_ms == 0 && for_ms <= STORE_UP_WITHIN.as_millis() as u64 {
        // Starting: the first heartbeat has not had its chance yet.
        return StoreHealth::Up;
    }
    StoreHealth::Unreachable {
        for_ms,
        error: error.map(str::to_owned),
    }
}

/// The fleet's store and the runtime its tasks run on.
pub struct Fleet {
    rt: tokio::runtime::Handle,
    store: Arc<dyn RoomStore>,
    /// The same store, for the record of spent join challenges
    /// ([`challenge`]).
    redis: Arc<redis::RedisStore>,
    /// This gateway's id in the fleet (its node id).
    id: String,
    /// The fleet as the last heartbeat listed it.
    members: ArcSwap<Vec<Member>>,
    /// The store's clock less this machine's, in ms, as the last heartbeat
    /// measured it (`i64::MIN`: not yet). Passes end by the store's clock
    /// and are checked by this one: this is how late or early that is.
    clock_offset_ms: AtomicI64,
    /// Live gateways counted by each heartbeat of the last
    /// [`MEMBERS_RECENT`]: `(local unix ms, count)`.
    live_counts: Mutex<VecDeque<(u64, u32)>>,
    /// When the fleet was made, and when a heartbeat last answered (local
    /// unix ms; 0: never), with the last heartbeat's error.
    started_ms: u64,
    heartbeat_ok_ms: AtomicU64,
    heartbeat_error: Mutex<Option<String>>,
}

impl Fleet {
    /// A fleet on the Redis at `url`. Does not connect yet: the rooms'
    /// tasks do, and keep trying while Redis is away.
    /// `id` and `region` name this gateway in the fleet's list.
    pub fn redis(url: &str, id: String, region: String) -> Result<Arc<Self>, String> {
        let store = Arc::new(redis::RedisStore::for_gateway(url, &id)?);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sluice-fleet")
            .enable_all()
            .build()
            .map_err(|e| format!("the fleet's runtime: {e}"))?;
        // Lives as long as the process: dropping a runtime from inside
        // another one (pingora's) panics.
        let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(rt));
        let fleet = Arc::new(Self {
            rt: rt.handle().clone(),
            store: store.clone(),
            redis: store,
            id: id.clone(),
            members: ArcSwap::from_pointee(Vec::new()),
            clock_offset_ms: AtomicI64::new(i64::MIN),
            live_counts: Mutex::new(VecDeque::new()),
            started_ms: now_ms(),
            heartbeat_ok_ms: AtomicU64::new(0),
            heartbeat_error: Mutex::new(None),
        });
        rt.spawn(heartbeat_loop(Arc::downgrade(&fleet), id, region));
        Ok(fleet)
    }

    /// Whether this gateway reaches the room store (`/readyz`'s
    /// `degraded`, `sluice_fleet_store_up`).
    pub fn store_health(&self) -> StoreHealth {
        let error = self
            .heartbeat_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        store_health(
            now_ms(),
            self.heartbeat_ok_ms.load(Ordering::Relaxed),
            self.started_ms,
            error.as_deref(),
        )
    }

    /// The gateways heard from within [`MEMBER_LIVE_S`] (this one at
    /// least): the most counted over the last [`MEMBERS_RECENT`]: a store
    /// restarted empty lists only the gateways heard since, so the count
    /// from before the loss still stands for a while.
    pub fn members_live(&self) -> u32 {
        let recent = self.live_counts.lock().unwrap_or_else(|p| p.into_inner());
        recent.iter().map(|&(_, n)| n).max().unwrap_or(0).max(1)
    }

    /// Notes a heartbeat's list: how many of it are alive.
    fn count_live(&self, members: &[Member], now_ms: u64) {
        let live = members
            .iter()
            .filter(|m| m.last_seen_s <= MEMBER_LIVE_S)
            .count() as u32;
        let mut recent = self.live_counts.lock().unwrap_or_else(|p| p.into_inner());
        recent.push_back((now_ms, live));
        let horizon = now_ms.saturating_sub(MEMBERS_RECENT.as_millis() as u64);
        while recent.front().is_some_and(|&(at, _)| at < horizon) {
            recent.pop_front();
        }
    }

    /// The store's clock less this machine's (ms), once measured.
    pub fn clock_offset_ms(&self) -> Option<i64> {
        Some(self.clock_offset_ms.load(Ordering::Relaxed)).filter(|&o| o != i64::MIN)
    }

    pub fn members(&self) -> Vec<Member> {
        self.members.load().as_ref().clone()
    }

    /// Room `name` on the shared line, its tasks started.
    pub fn room(
        self: &Arc<Self>,
        name: &str,
        policy: Policy,
        joins_per_minute: NonZeroU32,
        stock: Arc<dyn StockAuthority>,
    ) -> Arc<SharedRoom> {
        let (joins, waiting) = mpsc::channel(JOINS_WAITING_MAX);
        let room = Arc::new(SharedRoom {
            draw: fair_start::DrawState::new(policy.opens_at_ms),
            name: name.to_owned(),
            fleet: self.clone(),
            config: ArcSwap::from_pointee(policy.clone()),
            policy: ArcSwap::from_pointee(policy),
            stock,
            numbers: ArcSwap::from_pointee(LineNumbers::default()),
            hw_next: AtomicU64::new(0),
            hw_serving: AtomicU64::new(0),
            hw_tat_us: AtomicU64::new(0),
            born_seen: AtomicU64::new(0),
            numbers_store_ms: AtomicU64::new(0),
            joins,
            joins_per_minute: AtomicU32::new(joins_per_minute.get()),
            limits: Mutex::new(None),
            state_wanted: AtomicU8::new(STATE_NONE),
            config_paused: Mutex::new(None),
            claims: Mutex::new(HashMap::new()),
            claims_in_flight: Arc::new(tokio::sync::Semaphore::new(CLAIMS_IN_FLIGHT_MAX)),
            version_seen: AtomicU64::new(0),
            given_back: Mutex::new(HashMap::new()),
            pass_ends: PassEnds::default(),
            reachable: AtomicBool::new(true),
            accounts_noted: Mutex::new(HashSet::new()),
            joins_counted: Mutex::new(JoinCounts::default()),
            no_shows: Mutex::new(NoShowMeter::default()),
            poll_due: Mutex::new(PollDue::new(poll_due::GENERATION_MAX)),
            too_early: AtomicU64::new(0),
            adaptive: Mutex::new(FleetAdaptive::default()),
            decision: ArcSwap::from_pointee(None),
            serving_seen: Mutex::new(ServingSeen::default()),
        });
        self.rt.spawn(tick_loop(Arc::downgrade(&room)));
        self.rt.spawn(adapt_loop(Arc::downgrade(&room)));
        self.rt.spawn(batch_joins(Arc::downgrade(&room), waiting));
        room
    }
}

/// An adaptive room's part of this gateway in the fleet's one rate.
#[derive(Debug)]
struct FleetAdaptive {
    /// The bounds and the configured start rate; `None`: the rate is
    /// pinned by a number (or `"auto"`).
    config: Option<(Bounds, u32)>,
    /// This gateway's checkouts not yet published (this gateway's clock).
    outbox: VecDeque<Sample>,
    /// The fleet's checkouts, as read back from the store (its clock).
    window: CheckoutWindow,
    /// The last stream id read (`"-"`: none yet).
    after: String,
    /// The newest checkout the window holds (store clock).
    floor_ms: u64,
}

impl Default for FleetAdaptive {
    fn default() -> Self {
        Self {
            config: None,
            outbox: VecDeque::new(),
            window: CheckoutWindow::new(),
            after: "-".into(),
            floor_ms: 0,
        }
    }
}

/// A join waiting for its `seq`, and its client (for the fleet's
/// per-client limit).
struct JoinWaiter {
    client: Option<ClientKey>,
    answer: oneshot::Sender<Result<u64, JoinError>>,
}

/// One room of the shared line, as this gateway holds it.
pub struct SharedRoom {
    name: String,
    fleet: Arc<Fleet>,
    /// The room's policy as this gateway's config gives it: what its ticks
    /// publish.
    config: ArcSwap<Policy>,
    /// The policy the room runs at, as the last tick read it: the config's
    /// with the fleet's rate in force and its smallest limits (see
    /// [`FleetLimits`]). Estimates, the watermark and the pacing of polls
    /// use this one.
    policy: ArcSwap<Policy>,
    stock: Arc<dyn StockAuthority>,
    /// The shared numbers, as the last tick read them.
    numbers: ArcSwap<LineNumbers>,
    /// The highest `next`, `serving` and GCRA state seen: pushed with
    /// every call, so a store restarted empty never gives a place twice,
    /// nor releases a place again, nor runs ahead of the release's pace.
    hw_next: AtomicU64,
    hw_serving: AtomicU64,
    hw_tat_us: AtomicU64,
    /// When the store made the room, as last seen (0: never): a change
    /// means it lost the room, and this gateway's passes re-count their
    /// slots ([`RoomStore::reseed`]) during the store's warm-up.
    born_seen: AtomicU64,
    /// The store's clock (unix ms) when `numbers` were read: passes this
    /// gateway collected since then are still pending in them.
    numbers_store_ms: AtomicU64,
    joins: mpsc::Sender<JoinWaiter>,
    /// The limits the fleet ran the room at on the last tick.
    limits: Mutex<Option<FleetLimits>>,
    /// `joins_per_minute_per_client` in force: the fleet's per-client join
    /// limit, counted in the store, all of it usable at once.
    joins_per_minute: AtomicU32,
    /// The pause the config wants written to the store, until it is.
    state_wanted: AtomicU8,
    /// This gateway's config's kill switch as last applied (`None`: not
    /// yet, at start). Only a change of it is written to the store, so a
    /// restart or an unrelated reload of one gateway never un-pauses the
    /// fleet.
    config_paused: Mutex<Option<bool>>,
    /// Claim answers already known (seq → answer).
    claims: Mutex<HashMap<u64, ClaimReply>>,
    claims_in_flight: Arc<tokio::sync::Semaphore>,
    /// The store's state version last seen: going backwards means the
    /// store lost the room (restarted empty), and the config's state is
    /// written again.
    version_seen: AtomicU64,
    /// Passes whose slot this gateway gave back (seq → pass expiry, unix
    /// s): they may start no more checkouts here.
    given_back: Mutex<HashMap<u64, u64>>,
    /// Passes ended before their time, here or anywhere in the fleet, and
    /// the passes used here since the last tick ([`PassEnds`]).
    pass_ends: PassEnds,
    /// The store answered the last call (for logging the changes only).
    reachable: AtomicBool,
    /// Account places whose pass end this gateway wrote to the store.
    accounts_noted: Mutex<HashSet<u64>>,
    /// This gateway's joins by result (`sluice_queue_joins_total`).
    joins_counted: Mutex<JoinCounts>,
    /// The room's no-show share, from the store's totals at every tick
    /// (every gateway reads the same totals, so they measure alike).
    no_shows: Mutex<NoShowMeter>,
    /// When each waiting ticket that polled here may poll next.
    poll_due: Mutex<PollDue>,
    /// Polls refused here for coming sooner than told
    /// (`sluice_queue_polls_too_early_total`).
    too_early: AtomicU64,
    /// `serving` over the last claim windows (see [`ServingSeen`]).
    serving_seen: Mutex<ServingSeen>,
    /// The fleet's adaptive rate: this gateway's checkouts and window.
    adaptive: Mutex<FleetAdaptive>,
    /// The adaptive decision in force, as the last tick read it.
    decision: ArcSwap<Option<StoredDecision>>,
    /// The fair start's draw, as the last tick read it.
    draw: fair_start::DrawState,
}

/// What `/admin/state` shows of a fleet room's adaptive rate.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetRateView {
    pub bounds: Bounds,
    /// The stored decision; the start (reason `steady`) until the first.
    pub decision: adaptive::Decision,
    /// The gateway that took it (`None`: none taken yet).
    pub by: Option<String>,
    /// The whole rate the release runs at.
    pub in_force: u32,
}

impl SharedRoom {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn policy(&self) -> Arc<Policy> {
        self.policy.load_full()
    }

    /// The shared numbers in memory (`read_at_ms == 0`: never read).
    pub fn numbers(&self) -> LineNumbers {
        **self.numbers.load()
    }

    /// The limits the fleet ran the room at on the last tick
    /// (`/admin/state` `fleet_limits`); `None` before the first.
    pub fn fleet_limits(&self) -> Option<FleetLimits> {
        *self.limits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps the fleet's limits from a tick; says so in the log when they
    /// start or stop being tighter than this gateway's config (another
    /// gateway's config gives less: a reload rolling over the fleet, or
    /// files that differ).
    fn saw_limits(&self, args: &TickArgs, fleet: FleetLimits, tighter_by: &[String]) {
        let mine = FleetLimits {
            rate: args
                .adaptive
                .map_or(args.release_per_second, |(lo, hi)| hi.max(lo)),
            burst: args.burst,
            max_active: args.max_active,
            queue_capacity: args.queue_capacity,
        };
        let before = self
            .limits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(fleet);
        let tighter = |l: &FleetLimits| *l != mine;
        match (before.as_ref().is_some_and(tighter), tighter(&fleet)) {
            (false, true) => tracing::warn!(
                room = self.name.as_str(),
                rate = fleet.rate,
                burst = fleet.burst,
                max_active = fleet.max_active,
                queue_capacity = fleet.queue_capacity,
                by = tighter_by.join(" "),
                "another gateway's config gives this room smaller limits: the fleet runs at the \
                 smallest live ones until every gateway has the same config"
            ),
            (true, false) => tracing::info!(
                room = self.name.as_str(),
                "the fleet runs this room at this gateway's limits again"
            ),
            _ => {}
        }
    }

    /// A reloaded `joins_per_minute_per_client`.
    pub fn set_joins_per_minute(&self, per_minute: NonZeroU32) {
        self.joins_per_minute
            .store(per_minute.get(), Ordering::Relaxed);
    }

    /// A reloaded room's policy (the config's); the one it runs at follows
    /// from the next tick. For an adaptive room, the rate in force stays
    /// the fleet's (the configured one is its start).
    pub fn set_policy(&self, mut policy: Policy) {
        self.config.store(Arc::new(policy.clone()));
        if let Some(view) = self.adaptive_view() {
            if let Some(rate) = std::num::NonZeroU32::new(view.in_force) {
                policy.release_per_second = rate;
            }
        }
        self.policy.store(Arc::new(policy));
    }

    /// A reloaded room's adaptive bounds and configured start rate
    /// (`None`: its rate is pinned; the fleet's decision is then
    /// forgotten by the next tick).
    pub fn set_adaptive(&self, config: Option<(Bounds, u32)>) {
        let mut a = self.adaptive();
        if config.is_none() {
            a.outbox.clear();
            self.decision.store(Arc::new(None));
        }
        a.config = config;
    }

    fn adaptive(&self) -> std::sync::MutexGuard<'_, FleetAdaptive> {
        self.adaptive.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A checkout of an admitted shopper that reached the backend here:
    /// published with the next batch.
    pub fn record_checkout(&self, now_ms: u64, latency_ms: u32, outcome: Outcome) {
        let mut a = self.adaptive();
        if a.config.is_none() {
            return;
        }
        if a.outbox.len() >= fleet_rate::BATCH_MAX {
            a.outbox.pop_front();
        }
        a.outbox.push_back(Sample {
            at_ms: now_ms,
            latency_ms,
            failed: outcome == Outcome::Failed,
        });
    }

    /// The fleet's adaptive rate as this gateway last read it; `None` when
    /// the room's rate is pinned.
    pub fn adaptive_view(&self) -> Option<FleetRateView> {
        let (bounds, start) = self.adaptive().config?;
        let stored = self.decision.load();
        Some(match stored.as_ref() {
            Some(s) => FleetRateView {
                bounds,
                decision: s.decision,
                by: Some(s.by.clone()),
                in_force: fleet_rate::rate_in_force(
                    Some(s.decision.rate),
                    bounds.min_per_second,
                    bounds.max_per_second,
                    start,
                ),
            },
            None => FleetRateView {
                bounds,
                decision: fleet_rate::previous(None, &bounds, start, 0),
                by: None,
                in_force: start,
            },
        })
    }

    /// One adaptive step of this gateway: publish its checkouts, read the
    /// fleet's, and, holding the lease, step the law from the stored
    /// decision and store the next. A store that does not answer changes
    /// nothing: the rate stored stays in force (and the batch is kept for
    /// the next call).
    async fn adapt_once(&self) {
        let (config, batch, after, sent) = {
            let mut a = self.adaptive();
            let Some(config) = a.config else { return };
            let sent: Vec<Sample> = a.outbox.drain(..).collect();
            let batch = fleet_rate::encode_batch(&sent, now_ms());
            (config, batch, a.after.clone(), sent)
        };
        let (bounds, start) = config;
        let store = &self.fleet.store;
        let id = &self.fleet.id;
        let reply = match store
            .adapt(&self.name, id, fleet_rate::LEASE_MS, &after, &batch)
            .await
        {
            Ok(reply) => reply,
            Err(e) => {
                let mut a = self.adaptive();
                for s in sent.into_iter().rev() {
                    a.outbox.push_front(s);
                }
                while a.outbox.len() > fleet_rate::BATCH_MAX {
                    a.outbox.pop_front();
                }
                return self.answered(Err(&e));
            }
        };
        let numbers = self.numbers();
        let next = {
            let mut a = self.adaptive();
            let mut samples = Vec::new();
            for (stream_id, text) in &reply.batches {
                let at = fleet_rate::stream_id_ms(stream_id).unwrap_or(reply.now_ms);
                match fleet_rate::decode_batch(text, at) {
                    Ok(mut batch) => samples.append(&mut batch),
                    Err(e) => tracing::warn!(room = self.name, "a checkout batch unread: {e:?}"),
                }
                a.after.clone_from(stream_id);
            }
            let floor = a.floor_ms;
            let samples = fleet_rate::merge(samples, floor);
            a.floor_ms = fleet_rate::feed(&mut a.window, &samples, floor);
            // A paused or sold-out room releases nobody whatever the rate,
            // and has no checkouts to judge: its rate holds.
            if !reply.leads || numbers.paused || numbers.sold_out || a.config.is_none() {
                return;
            }
            let free = u64::from(self.policy.load().max_active.get()).saturating_sub(numbers.held);
            let m = a
                .window
                .measure(reply.now_ms, free.min(u64::from(u32::MAX)) as u32);
            let previous = reply.stored.as_ref().map(|s| s.decision);
            // A store that lost the decision (restarted empty) goes on from
            // the last one this gateway read, not from the start.
            let known =
                previous.or_else(|| self.decision.load().as_ref().as_ref().map(|s| s.decision));
            let from = fleet_rate::previous(known.as_ref(), &bounds, start, reply.now_ms);
            (
                adaptive::step(&bounds, &from, &m, reply.now_ms),
                previous.map(|p| p.at_ms),
            )
        };
        if let Err(e) = store.decide(&self.name, id, &next.0, next.1).await {
            self.answered(Err(&e));
        }
    }

    /// The config's kill switch, applied (at start and on every reload).
    /// The next tick writes it to the store when it changed here; at start
    /// only when the store has no state for the room yet (the fleet's
    /// pause stands over a gateway that merely restarted).
    pub fn want_paused(&self, paused: bool) {
        let mut last = self.config_paused.lock().unwrap_or_else(|p| p.into_inner());
        let state = match (*last, paused) {
            (Some(before), _) if before == paused => return,
            (Some(_), true) => STATE_PAUSED,
            (Some(_), false) => STATE_OPEN,
            (None, true) => STATE_INIT_PAUSED,
            (None, false) => STATE_INIT_OPEN,
        };
        *last = Some(paused);
        self.state_wanted.store(state, Ordering::Relaxed);
    }

    /// The store forgot the room: write the config's state again, unless
    /// another gateway has done so first.
    fn store_lost_state(&self) {
        let last = *self.config_paused.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(paused) = last {
            let state = if paused {
                STATE_INIT_PAUSED
            } else {
                STATE_INIT_OPEN
            };
            let _ = self.state_wanted.compare_exchange(
                STATE_NONE,
                state,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// The no-show share the release makes up for, in thousandths.
    pub fn share_milli(&self) -> u32 {
        self.numbers.load().share_milli
    }

    /// Polls this gateway refused for coming sooner than told.
    pub fn too_early_total(&self) -> u64 {
        self.too_early.load(Ordering::Relaxed)
    }

    /// This gateway's joins by result.
    pub fn join_counts(&self) -> JoinCounts {
        *self.joins_counted.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new place at the end of the shared line for `client`, within the
    /// fleet's per-client join limit.
    pub async fn join(&self, client: Option<ClientKey>) -> Result<u64, JoinError> {
        let answer = self.join_uncounted(client).await;
        self.count_join(&answer);
        answer
    }

    /// Counts a join's answer in this gateway's joins by result.
    fn count_join(&self, answer: &Result<u64, JoinError>) {
        let mut counts = self.joins_counted.lock().unwrap_or_else(|p| p.into_inner());
        match answer {
            Ok(_) => counts.queued += 1,
            Err(JoinError::QueueFull { .. }) => counts.queue_full += 1,
            Err(JoinError::Paused { .. }) => counts.paused += 1,
            Err(JoinError::SoldOut) => counts.sold_out += 1,
            Err(JoinError::StoreUnavailable { .. }) => counts.store_unavailable += 1,
            // Counted by the caller with the gateway's own refusals.
            Err(JoinError::RateLimited { .. }) => {}
        }
    }

    async fn join_uncounted(&self, client: Option<ClientKey>) -> Result<u64, JoinError> {
        let unavailable = JoinError::StoreUnavailable {
            retry_after_s: STORE_RETRY_AFTER_S,
        };
        let (tx, rx) = oneshot::channel();
        if self
            .joins
            .try_send(JoinWaiter { client, answer: tx })
            .is_err()
        {
            return Err(unavailable);
        }
        match tokio::time::timeout(JOIN_WAIT_MAX, rx).await {
            Ok(Ok(answer)) => answer,
            _ => Err(unavailable),
        }
    }

    /// The pass of released place `seq`, from the store.
    pub async fn claim(&self, seq: u64) -> Result<ClaimReply, StoreError> {
        if let Some(known) = self.known_claim(seq) {
            return Ok(known);
        }
        let Ok(permit) = self.claims_in_flight.clone().try_acquire_owned() else {
            return Err(StoreError::Unavailable("too many claims in flight".into()));
        };
        let reply = self.claim_from_store(seq).await;
        drop(permit);
        if let Ok(answer @ (ClaimReply::Admitted { .. } | ClaimReply::Gone)) = &reply {
            let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
            if claims.len() >= CLAIMS_REMEMBERED_MAX {
                // Spent places and ended passes go; live passes stay (the
                // reseed after a store loss counts their slots from here),
                // unless there are so many that only a clear bounds it.
                let now = now_ms();
                claims.retain(|_, known| {
                    matches!(known, ClaimReply::Admitted { expires_at_ms } if *expires_at_ms > now)
                });
                if claims.len() >= CLAIMS_REMEMBERED_MAX {
                    claims.clear();
                }
            }
            claims.insert(seq, *answer);
        }
        reply
    }

    /// What the store already answered for `seq`, while it still holds: a
    /// pass until it expires, a spent place for good.
    fn known_claim(&self, seq: u64) -> Option<ClaimReply> {
        let claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        match claims.get(&seq)? {
            ClaimReply::Admitted { expires_at_ms } if *expires_at_ms <= now_ms() => None,
            known => Some(*known),
        }
    }

    async fn claim_from_store(&self, seq: u64) -> Result<ClaimReply, StoreError> {
        let store = self.fleet.store.clone();
        let name = self.name.clone();
        let policy = self.policy.load();
        let args = ClaimArgs {
            pass_ttl_ms: policy.pass_ttl.as_millis() as u64,
            max_active: policy.max_active.get(),
            claim_window_ms: decide::claim_window_ms(&policy),
        };
        let call = self
            .fleet
            .rt
            .spawn(async move { store.claim(&name, seq, &args).await });
        match tokio::time::timeout(ANSWER_WAIT_MAX, call).await {
            // A store that lost the room and has not had this gateway's
            // numbers yet says a released place is still in line: it is at
            // the front, not `seq` places back.
            Ok(Ok(Ok(ClaimReply::Waiting { serving })))
                if seq < self.hw_serving.load(Ordering::Relaxed) && serving <= seq =>
            {
                Ok(ClaimReply::Full)
            }
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => Err(StoreError::Unavailable(format!("claim task: {e}"))),
            Err(_) => Err(StoreError::Unavailable("timed out".into())),
        }
    }

    /// Whether pass `seq` may still start a checkout here: not given back.
    pub fn may_start(&self, seq: u64) -> bool {
        !self.given_back().contains_key(&seq)
    }

    /// Frees the slot of pass `seq` (expiring at `expires_at_s`) in the
    /// store, in the background; at once for this gateway's `may_start`.
    pub fn give_back(&self, seq: u64, expires_at_s: u64) -> bool {
        {
            let mut given = self.given_back();
            if given.insert(seq, expires_at_s).is_some() {
                return false;
            }
            if given.len() > GIVEN_BACK_MAX {
                let now_s = now_ms() / 1000;
                given.retain(|_, exp| *exp > now_s);
            }
        }
        let store = self.fleet.store.clone();
        let name = self.name.clone();
        let ttl_ms = self.policy.load().pass_ttl.as_millis() as u64;
        self.fleet.rt.spawn(async move {
            if let Err(e) = store.give_back(&name, seq, ttl_ms).await {
                // The slot then ends with the pass, as if never given back.
                tracing::warn!(room = name, "a pass's slot could not be given back: {e}");
            }
        });
        true
    }

    fn given_back(&self) -> std::sync::MutexGuard<'_, HashMap<u64, u64>> {
        self.given_back.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends pass `seq` (expiring at `expires_at_s`) before its time: this
    /// gateway refuses it at once, its slot goes back in the store (in the
    /// background), and every gateway of the fleet refuses it from its next
    /// tick (the room's ended stream). `false` if it ended here already.
    pub fn end_pass(&self, seq: u64, expires_at_s: u64) -> bool {
        let now = now_ms();
        if !self.pass_ends.insert(seq, expires_at_s, now) {
            return false;
        }
        self.forget_claim(seq);
        {
            let mut given = self.given_back();
            given.insert(seq, expires_at_s);
            if given.len() > GIVEN_BACK_MAX {
                given.retain(|_, exp| *exp > now / 1000);
            }
        }
        let store = self.fleet.store.clone();
        let name = self.name.clone();
        let ttl_ms = self.policy.load().pass_ttl.as_millis() as u64;
        self.fleet.rt.spawn(async move {
            let ends_ms = expires_at_s.saturating_mul(1000);
            if let Err(e) = store.pass_end(&name, seq, ends_ms, ttl_ms).await {
                // The slot then ends with the pass, and only this gateway
                // refuses it.
                tracing::warn!(
                    room = name,
                    "an ended pass could not be told to the fleet: {e}"
                );
            }
        });
        true
    }

    /// Never shown again from memory: a status poll of its ticket asks the
    /// store, which answers the place gone.
    fn forget_claim(&self, seq: u64) {
        self.claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&seq);
    }

    /// Whether pass `seq` was ended before its time (here or on another
    /// gateway) and has not expired.
    pub fn pass_ended(&self, seq: u64, now_ms: u64) -> bool {
        self.pass_ends.is_ended(seq, now_ms)
    }

    /// A request with pass `seq` (verified) reached this gateway: it is in
    /// use (told to the store with the next tick, where `pass_idle_s` is on).
    pub fn touch_pass(&self, seq: u64) {
        if !self.config.load().pass_idle.is_zero() {
            self.pass_ends.touch(seq);
        }
    }

    /// A checkout of pass `seq` started (`running`) or ended here.
    pub fn pass_checkout(&self, seq: u64, running: bool) {
        self.pass_ends.checkout(seq, running);
    }

    /// Counts a pass ended here, by why.
    pub fn count_ended(&self, why: sluice_admission::PassEnd) {
        self.pass_ends.count(why);
    }

    /// Passes ended here, by why.
    pub fn ended_total(&self, why: sluice_admission::PassEnd) -> u64 {
        self.pass_ends.total(why)
    }

    /// Every tick: tells the store the passes used here, lets it end the
    /// idle ones, and reads the passes ended fleet-wide since the last call.
    async fn passes_once(&self) {
        let policy = self.config.load_full();
        let in_use = self.pass_ends.take_in_use();
        let after = self.pass_ends.after();
        let args = PassesArgs {
            idle_ms: policy.pass_idle.as_millis() as u64,
            pass_ttl_ms: policy.pass_ttl.as_millis() as u64,
            after: &after,
            touched: &in_use,
        };
        match self.fleet.store.passes(&self.name, &args).await {
            Ok(reply) => {
                for seq in self.pass_ends.note(&reply, now_ms()) {
                    self.forget_claim(seq);
                }
                if !reply.idle_ended.is_empty() {
                    tracing::info!(
                        room = self.name,
                        passes = reply.idle_ended.len(),
                        "idle passes gave their slots back"
                    );
                }
            }
            Err(e) => tracing::debug!(room = self.name, "passes not synced: {e}"),
        }
    }

    /// Presented ticket → what to do, from memory only.
    pub fn decide_poll(&self, ticket: &Presented, now_ms: u64) -> decide::PollDecision {
        let numbers = self.numbers();
        let policy = self.policy.load();
        decide::poll(ticket, Some(&numbers), &policy, now_ms, &mut rand::rng())
    }

    /// A waiting answer for place `seq` at `now_ms` (in line, or released
    /// and told to wait at the front), unless the place asks sooner than
    /// its last answer here told it (`Err(retry_after_s)`: the early poll
    /// is not answered). Any other answer is never early. The next poll is
    /// timed from now, when the answer leaves (a join or a claim may have
    /// waited on the store since `now_ms`, the request's arrival).
    pub fn on_time(
        &self,
        seq: u64,
        status: &sluice_admission::Status,
        now_ms: u64,
    ) -> Result<(), u64> {
        let Some(next_due) = decide::poll_due_ms(status, crate::clock::now_ms().max(now_ms)) else {
            return Ok(());
        };
        let mut due = self.poll_due.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(retry_after_s) = due.get(seq).and_then(|d| decide::too_early(d, now_ms)) {
            self.too_early.fetch_add(1, Ordering::Relaxed);
            return Err(retry_after_s);
        }
        due.set(seq, next_due);
        Ok(())
    }

    fn saw(&self, next: u64, serving: u64) {
        self.hw_next.fetch_max(next, Ordering::Relaxed);
        self.hw_serving.fetch_max(serving, Ordering::Relaxed);
    }

    /// The passes this gateway handed out that still hold a slot by its
    /// knowledge, `(seq, ends at unix ms)`: collected here, alive at
    /// `now_ms`, not given back. At most [`CLAIMS_REMEMBERED_MAX`].
    fn passes_out(&self, now_ms: u64) -> Vec<(u64, u64)> {
        // One lock at a time, and the sort outside both.
        let mut passes: Vec<(u64, u64)> = {
            let claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
            claims
                .iter()
                .filter_map(|(&seq, reply)| match reply {
                    ClaimReply::Admitted { expires_at_ms } if *expires_at_ms > now_ms => {
                        Some((seq, *expires_at_ms))
                    }
                    _ => None,
                })
                .collect()
        };
        {
            let given_back = self.given_back();
            passes.retain(|(seq, _)| !given_back.contains_key(seq));
        }
        passes.sort_unstable();
        passes
    }

    /// The places from `from` on that this gateway knows are spent: passes
    /// it gave back, and places whose window ended before collection.
    fn spent_since(&self, from: u64) -> Vec<u64> {
        let mut spent: Vec<u64> = self
            .given_back()
            .keys()
            .copied()
            .filter(|&seq| seq >= from)
            .collect();
        {
            let claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
            spent.extend(
                claims
                    .iter()
                    .filter(|&(&seq, reply)| seq >= from && *reply == ClaimReply::Gone)
                    .map(|(&seq, _)| seq),
            );
        }
        spent.sort_unstable();
        spent.dedup();
        spent
    }

    /// The store (re)made the room at `born_ms`: if that is news, the
    /// passes out from here take their slots again, and the released
    /// places uncollected in `before` (the numbers read before the store
    /// lost them) count as pending. Remembered only once done, so a failed
    /// call is tried again at the next tick, still within the store's
    /// warm-up (then with the store's new, smaller pending count).
    /// `before_store_ms` is the store's clock when `before` was read.
    async fn reseed_if_reborn(
        &self,
        born_ms: u64,
        before: &LineNumbers,
        before_store_ms: u64,
    ) -> Result<(), StoreError> {
        let seen = self.born_seen.load(Ordering::Relaxed);
        if seen == born_ms {
            return Ok(());
        }
        let passes = self.passes_out(now_ms());
        let ttl_ms = self.policy.load().pass_ttl.as_millis() as u64;
        let pending_seen =
            decide::uncollected_when_lost(before.pending, &passes, ttl_ms, before_store_ms);
        // The places whose claim window was still open when the store lost
        // them: released from `serving` as it was one window before (less
        // the last [`CLAIM_LEFT_MIN`] of it: this gateway saw each release
        // up to a tick late).
        let window_ms = decide::claim_window_ms(&self.policy.load());
        let from_ms =
            before.read_at_ms.saturating_sub(window_ms) + CLAIM_LEFT_MIN.as_millis() as u64;
        let lost_from = self
            .serving_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .at(from_ms);
        // Without a `serving` that old (not seen here yet) it takes no place
        // back (its highest `serving`: an empty range), but its passes
        // still hold their slots, and it counts as re-seeded.
        let lost_from = lost_from.unwrap_or_else(|| self.hw_serving.load(Ordering::Relaxed));
        let spent = self.spent_since(lost_from);
        let seed = Reseed {
            id: &self.fleet.id,
            pending_seen,
            lost_from,
            read_at_ms: before_store_ms,
            passes: &passes,
            spent: &spent,
        };
        let changed = self.fleet.store.reseed(&self.name, &seed).await?;
        tracing::warn!(
            room = self.name,
            passes = passes.len(),
            changed,
            uncollected = pending_seen,
            "the room store lost the room: this gateway's passes hold their slots again"
        );
        self.born_seen.store(born_ms, Ordering::Relaxed);
        Ok(())
    }

    fn answered(&self, result: Result<(), &StoreError>) {
        let ok = result.is_ok();
        if self.reachable.swap(ok, Ordering::Relaxed) != ok {
            match result {
                Ok(()) => tracing::info!(room = self.name, "the room store answers again"),
                Err(e) => tracing::warn!(room = self.name, "{e}; waiting shoppers see paused"),
            }
        }
    }

    /// One tick: the pause the config wants, the release, the numbers.
    async fn tick_once(&self) {
        let store = &self.fleet.store;
        let wanted = self.state_wanted.load(Ordering::Relaxed);
        if wanted != STATE_NONE {
            let sold_out = !self.stock.can_sell(&self.name);
            let paused = matches!(wanted, STATE_PAUSED | STATE_INIT_PAUSED);
            let only_if_new = matches!(wanted, STATE_INIT_OPEN | STATE_INIT_PAUSED);
            match store
                .set_state(&self.name, paused, sold_out, only_if_new)
                .await
            {
                Ok(_) => {
                    let _ = self.state_wanted.compare_exchange(
                        wanted,
                        STATE_NONE,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                Err(e) => return self.answered(Err(&e)),
            }
        }
        // What this gateway's config gives, never the fleet's smallest (which
        // would then be published back and could never rise again).
        let policy = self.config.load_full();
        let share_milli = self.share_milli();
        let mut args = TickArgs {
            release_per_second: policy.release_per_second.get(),
            burst: policy.burst.get(),
            max_active: policy.max_active.get(),
            queue_capacity: policy.queue_capacity.get(),
            claim_window_ms: decide::claim_window_ms(&policy),
            hw_next: self.hw_next.load(Ordering::Relaxed),
            hw_serving: self.hw_serving.load(Ordering::Relaxed),
            hw_tat_us: self.hw_tat_us.load(Ordering::Relaxed),
            members_live: self.fleet.members_live(),
            sold_out_seen: !self.stock.can_sell(&self.name),
            share_milli,
            pass_ttl_ms: policy.pass_ttl.as_millis() as u64,
            adaptive: None,
        };
        let adaptive = self.adaptive().config;
        if let Some((bounds, start)) = adaptive {
            args.release_per_second = start;
            args.adaptive = Some((bounds.min_per_second, bounds.max_per_second));
        }
        match store.tick(&self.name, &args).await {
            Ok(tick) => {
                self.saw_limits(&args, tick.limits, &tick.tighter_by);
                let version = tick.numbers.version;
                if version < self.version_seen.swap(version, Ordering::Relaxed) {
                    self.store_lost_state();
                }
                let mut numbers = tick.numbers;
                numbers.read_at_ms = now_ms();
                numbers.share_milli = {
                    let now_s = tick.store_now_ms / 1000;
                    let mut meter = self.no_shows.lock().unwrap_or_else(|p| p.into_inner());
                    meter.observe_totals(now_s, numbers.shows, numbers.no_shows);
                    meter.share_milli(now_s)
                };
                self.saw(numbers.next, numbers.serving);
                // Two windows kept: the reseed looks one back from the
                // last numbers before a loss.
                self.serving_seen
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .saw(
                        numbers.read_at_ms,
                        numbers.serving,
                        2 * args.claim_window_ms,
                    );
                self.hw_tat_us.fetch_max(tick.tat_us, Ordering::Relaxed);
                let before = self.numbers.swap(Arc::new(numbers));
                let before_store_ms = self
                    .numbers_store_ms
                    .swap(tick.store_now_ms, Ordering::Relaxed);
                if adaptive.is_some() {
                    self.decision.store(Arc::new(tick.adaptive));
                }
                // Estimates, the watermark and the pacing of polls follow
                // the rate in force and the fleet's limits.
                let runs_at = decide::runs_at(
                    &policy,
                    tick.rate_in_force,
                    tick.limits.burst,
                    tick.limits.max_active,
                    tick.limits.queue_capacity,
                );
                if *self.policy.load_full() != runs_at {
                    self.policy.store(Arc::new(runs_at));
                }
                let reseeded = self
                    .reseed_if_reborn(tick.born_ms, &before, before_store_ms)
                    .await;
                self.answered(reseeded.as_ref().map(drop));
            }
            Err(e) => self.answered(Err(&e)),
        }
    }
}

/// This gateway's heartbeat, every [`HEARTBEAT_EVERY`].
async fn heartbeat_loop(fleet: Weak<Fleet>, id: String, region: String) {
    let mut every = tokio::time::interval(HEARTBEAT_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(fleet) = fleet.upgrade() else { return };
        let sent_ms = now_ms();
        match fleet.store.heartbeat(&id, &region).await {
            Ok(beat) => {
                let offset = decide::clock_offset_ms(beat.store_now_ms, sent_ms, now_ms());
                fleet.clock_offset_ms.store(offset, Ordering::Relaxed);
                fleet.count_live(&beat.members, now_ms());
                fleet.members.store(Arc::new(beat.members));
                fleet.heartbeat_ok_ms.store(now_ms(), Ordering::Relaxed);
            }
            Err(e) => {
                *fleet
                    .heartbeat_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
            }
        }
    }
}

/// The room's tick, every [`TICK`], until the room is dropped.
async fn tick_loop(room: Weak<SharedRoom>) {
    let mut every = tokio::time::interval(TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(room) = room.upgrade() else { return };
        room.draw_once().await;
        room.tick_once().await;
        room.passes_once().await;
    }
}

/// The room's adaptive step, every [`adaptive::STEP_MS`], until the room
/// is dropped (nothing to do while its rate is pinned).
async fn adapt_loop(room: Weak<SharedRoom>) {
    let mut every = tokio::time::interval(Duration::from_millis(adaptive::STEP_MS));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(room) = room.upgrade() else { return };
        room.adapt_once().await;
    }
}

/// Sends every join waiting at once as one call, until the room is
/// dropped: under load one round trip serves many joins.
async fn batch_joins(room: Weak<SharedRoom>, mut waiting: mpsc::Receiver<JoinWaiter>) {
    let mut batch = Vec::with_capacity(JOIN_BATCH_MAX);
    while waiting.recv_many(&mut batch, JOIN_BATCH_MAX).await > 0 {
        let Some(room) = room.upgrade() else { return };
        let policy = room.policy.load_full();
        // Joiners who gave up meanwhile get no place.
        batch.retain(|waiter| !waiter.answer.is_closed());
        if batch.is_empty() {
            continue;
        }
        let clients: Vec<Option<ClientKey>> = batch.iter().map(|w| w.client).collect();
        let per_minute = room.joins_per_minute.load(Ordering::Relaxed).max(1);
        let join = JoinBatch {
            clients: &clients,
            capacity: policy.queue_capacity.get(),
            hw_next: room.hw_next.load(Ordering::Relaxed),
            period_us: client_period_us(NonZeroU32::new(per_minute).expect("at least 1")),
            burst: per_minute,
        };
        // A store warming up gives no places and says so at once
        // (`join_answers`): the joiners hear `503` now, not after the
        // warm-up.
        let reply = room.fleet.store.join(&room.name, &join).await;
        match reply {
            Ok(reply) => {
                room.saw(reply.first + u64::from(reply.granted), reply.serving);
                room.answered(Ok(()));
                let answers = decide::join_answers(&reply, batch.len(), &policy);
                for (waiter, answer) in batch.drain(..).zip(answers) {
                    let _ = waiter.answer.send(answer);
                }
            }
            Err(e) => {
                room.answered(Err(&e));
                for waiter in batch.drain(..) {
                    let _ = waiter.answer.send(Err(JoinError::StoreUnavailable {
                        retry_after_s: STORE_RETRY_AFTER_S,
                    }));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_is_up_while_a_heartbeat_answered_within_3_s() {
        let start = 1_000_000;
        // Starting: up for the first 3 s without an answer, then not.
        assert_eq!(store_health(start + 2_000, 0, start, None), StoreHealth::Up);
        assert_eq!(
            store_health(start + 3_500, 0, start, Some("refused")),
            StoreHealth::Unreachable {
                for_ms: 3_500,
                error: Some("refused".into())
            }
        );
        // Answered at +10 s: up until +13 s, then counted from the answer.
        let ok = start + 10_000;
        assert_eq!(
            store_health(ok + 3_000, ok, start, Some("old")),
            StoreHealth::Up
        );
        assert_eq!(
            store_health(ok + 7_000, ok, start, None),
            StoreHealth::Unreachable {
                for_ms: 7_000,
                error: None
            }
        );
    }
}
