//! The shared store of a fleet's rooms: an async [`RoomStore`] whose every
//! operation is one whole transition of one room (join a batch, the release
//! tick, claim a pass, give a slot back, set the state), and its error.
//!
//! The decisions over what it returns are plain functions in
//! [`sluice_admission::fleet`]; the back end is [`super::redis::RedisStore`].

use async_trait::async_trait;
use sluice_admission::adaptive::Decision;
use sluice_admission::fleet::{ClaimReply, JoinReply, LineNumbers};
use sluice_admission::join_limiter::ClientKey;
use thiserror::Error;

/// Why the store did not answer.
#[derive(Debug, Error)]
pub enum StoreError {
    /// Not reachable, timed out, or refusing work (connection, timeout,
    /// loading, read-only replica): the room waits and tries again.
    #[error("the room store is unavailable: {0}")]
    Unavailable(String),
    /// It answered, but not in the shape the Functions give: a bug or a
    /// foreign library under our name.
    #[error("the room store answered something unexpected: {0}")]
    Protocol(String),
}

/// What the release tick needs from the room's config and this gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TickArgs {
    pub release_per_second: u32,
    pub burst: u32,
    pub max_active: u32,
    /// The room's `queue_capacity`: published with the rest, the smallest
    /// live one bounds the joins.
    pub queue_capacity: u32,
    /// How long a released place waits for its holder (a no-show after).
    pub claim_window_ms: u64,
    /// The no-show share this gateway measured, in thousandths: the
    /// release makes up for it (bounded, see `sluice_admission::no_show`).
    pub share_milli: u32,
    /// What a pass that ran out held its slot for (the mean hold).
    pub pass_ttl_ms: u64,
    /// The highest `next` and `serving` this gateway has seen: a store
    /// restarted empty starts again from them, never below.
    pub hw_next: u64,
    pub hw_serving: u64,
    /// The highest theoretical arrival time of the release's GCRA this
    /// gateway has seen (unix µs): a store restarted empty does not let
    /// the release run ahead of its pace.
    pub hw_tat_us: u64,
    /// The gateways alive by this gateway's heartbeat (itself included):
    /// after a loss the slots stay held until that many have re-seeded
    /// (bounded; 0 counts none).
    pub members_live: u32,
    /// This gateway's stock says the room is sold out.
    pub sold_out_seen: bool,
    /// `Some((min_per_second, max_per_second))` for an adaptive room: the
    /// release runs at the stored decision, inside these bounds
    /// (`release_per_second` only until one is stored). `None`: the rate
    /// is pinned at `release_per_second`, and a stored decision is
    /// forgotten.
    pub adaptive: Option<(u32, u32)>,
}

/// The adaptive decision in force for a fleet room, as the store holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDecision {
    pub decision: Decision,
    /// The gateway (node id) that took it.
    pub by: String,
}

/// What one adaptive call (`adapt`) gave back.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptReply {
    /// The store's clock (unix ms).
    pub now_ms: u64,
    /// This gateway holds the room's lease: it steps the rate.
    pub leads: bool,
    /// Who holds the lease.
    pub leader: String,
    pub stored: Option<StoredDecision>,
    /// The batches published since the `after` asked for: (stream id,
    /// batch text), oldest first.
    pub batches: Vec<(String, String)>,
}

/// What a claim needs from the room's config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimArgs {
    pub pass_ttl_ms: u64,
    pub max_active: u32,
    /// A holder who found no slot free gets this long again.
    pub claim_window_ms: u64,
}

/// What one tick did, and the room's numbers after it.
#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    /// `read_at_ms` is left 0: the caller stamps it with its own clock.
    pub numbers: LineNumbers,
    /// Places released by this tick.
    pub released: u32,
    /// The smallest limits the live gateways' configs give the room: the
    /// tick ran at these.
    pub limits: FleetLimits,
    /// The gateways whose config gives a smaller limit than the caller's
    /// (their store ids, `<node id>/<random>`).
    pub tighter_by: Vec<String>,
    /// The store's clock (unix ms).
    pub store_now_ms: u64,
    /// The whole rate the release ran at.
    pub rate_in_force: u32,
    /// The room's adaptive decision in force, if one is stored.
    pub adaptive: Option<StoredDecision>,
    /// The release's GCRA state after the tick (unix µs).
    pub tat_us: u64,
    /// When the store (re)made the room (unix ms): a change means it lost
    /// the room and is warming up, and this gateway re-counts its passes
    /// ([`RoomStore::reseed`]).
    pub born_ms: u64,
}

/// A room's limits as the fleet runs it: the smallest the configs of the
/// gateways heard within 3 s give (`rate` is an adaptive gateway's
/// `max_per_second`), so a reload rolling over the fleet passes no one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FleetLimits {
    pub rate: u32,
    pub burst: u32,
    pub max_active: u32,
    pub queue_capacity: u32,
}

/// What a gateway brings back to a room the store lost
/// ([`RoomStore::reseed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reseed<'a> {
    /// This gateway's id: it counts once as re-seeded.
    pub id: &'a str,
    /// Released places uncollected in its last numbers before the loss.
    pub pending_seen: u64,
    /// The `serving` it saw one claim window before those numbers: places
    /// from here on may still be collected.
    pub lost_from: u64,
    /// The store's clock when it read those numbers (only the freshest
    /// reads of the fleet count).
    pub read_at_ms: u64,
    /// Its passes still alive: `(seq, ends at unix ms)`.
    pub passes: &'a [(u64, u64)],
    /// Places it knows are spent (passes given back, windows over): never
    /// taken back.
    pub spent: &'a [u64],
}

/// What a heartbeat answers: the store's clock and the fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct Heartbeat {
    /// The store's clock when it answered (unix ms).
    pub store_now_ms: u64,
    pub members: Vec<Member>,
}

/// A gateway of the fleet as the store last heard from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: String,
    pub region: String,
    /// Seconds since it was last heard from, by the store's clock.
    pub last_seen_s: u64,
}

/// A batch of joins, as the store takes it.
#[derive(Debug, Clone, Copy)]
pub struct JoinBatch<'a> {
    /// The client of each join (`None`: not known, no limit).
    pub clients: &'a [Option<ClientKey>],
    pub capacity: u32,
    pub hw_next: u64,
    /// The fleet's per-client join limit: a client may join `burst` times
    /// at once, then once per `period_us`
    /// ([`sluice_admission::join_limiter::fleet_client_join`]).
    pub period_us: u64,
    pub burst: u32,
}

/// What one [`RoomStore::passes`] call sends.
#[derive(Debug, Clone, Copy)]
pub struct PassesArgs<'a> {
    /// `pass_idle_s` in ms (0: off, no activity is kept).
    pub idle_ms: u64,
    pub pass_ttl_ms: u64,
    /// The last ended-stream id read (`"-"`: none yet).
    pub after: &'a str,
    /// Passes used on this gateway since its last call.
    pub touched: &'a [u64],
}

/// What one [`RoomStore::passes`] call gave back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PassesReply {
    /// The store's clock (unix ms).
    pub now_ms: u64,
    /// Passes this call ended for being idle (this gateway counts them).
    pub idle_ended: Vec<u64>,
    /// Passes ended before their time, fleet-wide, after the id asked for:
    /// `(seq, ends at unix ms)`, oldest first.
    pub ended: Vec<(u64, u64)>,
    /// The last stream id read (the `after` of the next call).
    pub last_id: Option<String>,
}

/// One room's shared state, changed only in whole transitions.
#[async_trait]
pub trait RoomStore: Send + Sync + 'static {
    /// New places at the end of the line for the joins of `batch` within
    /// their client's limit (fewer past `capacity`), never below
    /// `hw_next`.
    async fn join(&self, room: &str, batch: &JoinBatch<'_>) -> Result<JoinReply, StoreError>;

    /// Frees ended slots, releases the next places as the rate and the
    /// free slots allow (idempotent in time: calling it more often
    /// releases no more), and reads the room's numbers.
    async fn tick(&self, room: &str, args: &TickArgs) -> Result<Tick, StoreError>;

    /// The pass of released place `seq`: the first claim takes a slot if
    /// one is free ([`ClaimReply::Full`] if not), and its slot then holds it until the
    /// returned end, the same on every later claim.
    async fn claim(&self, room: &str, seq: u64, args: &ClaimArgs)
        -> Result<ClaimReply, StoreError>;

    /// After the store lost the room: the passes this gateway handed out
    /// that are still alive take their slots again (a slot only ever ends
    /// later; bounded calls of [`super::redis::RESEED_BATCH_MAX`]; the
    /// gateway counts as re-seeded with the last), the places it knows
    /// spent are never taken back, and the released places it last saw
    /// uncollected (`pending_seen`) count as pending until their holders'
    /// claim window after the loss is over. `lost_from` is the `serving` it
    /// saw one claim window before the loss: only places from there up may
    /// still be collected. Of the fleet's reseeds only the freshest reads
    /// count (the highest pending, the lowest `lost_from` among them).
    /// Returns the slots it changed.
    async fn reseed(&self, room: &str, seed: &Reseed<'_>) -> Result<u64, StoreError>;

    /// Frees the slot of pass `seq` (of a room whose passes live
    /// `pass_ttl_ms`); `true` if it held one.
    async fn give_back(&self, room: &str, seq: u64, pass_ttl_ms: u64) -> Result<bool, StoreError>;

    /// Ends pass `seq` (ending at `ends_ms`) before its time, for the
    /// fleet: its slot goes back and every gateway reads that it ended
    /// ([`Self::passes`]). `true` if it held a slot.
    async fn pass_end(
        &self,
        room: &str,
        seq: u64,
        ends_ms: u64,
        pass_ttl_ms: u64,
    ) -> Result<bool, StoreError>;

    /// Every tick: the passes used here since the last call are active
    /// now; passes idle for `idle_ms` are ended (by the one rule,
    /// `sluice_admission::pass_idle::is_idle`); the passes ended
    /// fleet-wide since `after` are read.
    async fn passes(&self, room: &str, args: &PassesArgs<'_>) -> Result<PassesReply, StoreError>;

    /// The kill switch and sold out; returns the state's new version.
    /// With `only_if_new`, changes nothing when the store already holds
    /// a state for the room (a gateway starting adopts the fleet's).
    async fn set_state(
        &self,
        room: &str,
        paused: bool,
        sold_out: bool,
        only_if_new: bool,
    ) -> Result<u64, StoreError>;

    /// An adaptive room's step on gateway `id`: publishes `batch` (its
    /// checkouts since its last call, `sluice_admission::fleet_rate`'s
    /// text), takes or renews the room's lease for `lease_ms` if it is free
    /// or `id`'s, and reads the batches published after stream id `after`
    /// (`"-"`: the whole horizon) and the decision in force.
    async fn adapt(
        &self,
        room: &str,
        id: &str,
        lease_ms: u64,
        after: &str,
        batch: &str,
    ) -> Result<AdaptReply, StoreError>;

    /// The leader's next decision, written only while `id` holds the lease
    /// and the stored decision is still the one taken at `previous_at_ms`
    /// (`None`: none stored). `true` if written.
    async fn decide(
        &self,
        room: &str,
        id: &str,
        next: &Decision,
        previous_at_ms: Option<u64>,
    ) -> Result<bool, StoreError>;

    /// A join with an account (`fleet::enqueue`): its live place, or one
    /// new place by [`Self::join`]'s rules kept as the account's.
    async fn enqueue(
        &self,
        room: &str,
        join: &super::AccountJoinArgs<'_>,
    ) -> Result<super::AccountReply, StoreError>;

    /// The account's place `seq` collected its pass, ending at
    /// `pass_expires_ms`: it holds the account until then. `true` if
    /// recorded (the account still held `seq`).
    async fn enqueue_pass(
        &self,
        room: &str,
        account: &sluice_admission::enqueue::AccountHash,
        seq: u64,
        pass_expires_ms: u64,
    ) -> Result<bool, StoreError>;

    /// Marks gateway `id` (in `region`) alive and lists the fleet.
    async fn heartbeat(&self, id: &str, region: &str) -> Result<Heartbeat, StoreError>;
}
