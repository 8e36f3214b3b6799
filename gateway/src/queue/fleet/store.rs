//! The shared store of a fleet's rooms: an async [`RoomStore`] whose every
//! operation is one whole transition of one room (join a batch, the release
//! tick, claim a pass, give a slot back, set the state), and its error.
//!
//! The decisions over what it returns are plain functions in
//! [`sluice_admission::fleet`]; the back end is [`super::redis::RedisStore`].

use async_trait::async_trait;
use sluice_admission::fleet::{ClaimReply, JoinReply, LineNumbers};
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
    /// This gateway's stock says the room is sold out.
    pub sold_out_seen: bool,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    /// `read_at_ms` is left 0: the caller stamps it with its own clock.
    pub numbers: LineNumbers,
    /// Places released by this tick.
    pub released: u32,
    /// The store's clock (unix ms).
    pub store_now_ms: u64,
}

/// A gateway of the fleet as the store last heard from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: String,
    pub region: String,
    /// Seconds since it was last heard from, by the store's clock.
    pub last_seen_s: u64,
}

/// One room's shared state, changed only in whole transitions.
#[async_trait]
pub trait RoomStore: Send + Sync + 'static {
    /// Up to `n` new places at the end of the line (fewer past
    /// `capacity`), never below `hw_next`.
    async fn join(
        &self,
        room: &str,
        n: u32,
        capacity: u32,
        hw_next: u64,
    ) -> Result<JoinReply, StoreError>;

    /// Frees ended slots, releases the next places as the rate and the
    /// free slots allow (idempotent in time: calling it more often
    /// releases no more), and reads the room's numbers.
    async fn tick(&self, room: &str, args: &TickArgs) -> Result<Tick, StoreError>;

    /// The pass of released place `seq`: the first claim takes a slot if
    /// one is free ([`ClaimReply::Full`] if not), and its slot then holds it until the
    /// returned end, the same on every later claim.
    async fn claim(&self, room: &str, seq: u64, args: &ClaimArgs)
        -> Result<ClaimReply, StoreError>;

    /// Frees the slot of pass `seq` (of a room whose passes live
    /// `pass_ttl_ms`); `true` if it held one.
    async fn give_back(&self, room: &str, seq: u64, pass_ttl_ms: u64) -> Result<bool, StoreError>;

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

    /// Marks gateway `id` (in `region`) alive and lists the fleet.
    async fn heartbeat(&self, id: &str, region: &str) -> Result<Vec<Member>, StoreError>;
}
