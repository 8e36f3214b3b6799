//! The seam between a room's HTTP side and where its line lives.
//!
//! The routes of a room (join, status, watermark, the pass checks of
//! protected paths and of a checkout) are written once, in [`super`], over
//! a [`RoomBackend`]. Two back ends implement it:
//!
//! - [`super::embedded::EmbeddedRoom`]: the line in this process (a
//!   `WaitingRoom` under a lock, durable by its journal in `data_dir`);
//! - [`super::fleet::SharedRoom`]: the line in Redis, shared by a fleet of
//!   gateways (`[cluster] redis_url`).
//!
//! Every decision both make (pace, no-shows, wait estimate, poll pacing,
//! the join limit's arithmetic, the adaptive law) is one plain function in
//! `sluice-admission` that both call; this trait is only where the state
//! is kept and how a transition reaches it.

use std::num::NonZeroU32;

use async_trait::async_trait;
use sluice_admission::enqueue::AccountHash;
use sluice_admission::fair_start::FairStartInfo;
use sluice_admission::fleet::Presented;
use sluice_admission::join_limiter::ClientKey;
use sluice_admission::room::{HeldPlace, Watermark};
use sluice_admission::tokens::Claims;
use sluice_admission::{
    JoinError, Joined, PassEnd, PassOrders, Policy, RoomStats, Status, TicketId,
};

use sluice_admission::adaptive::Outcome;

use super::adaptive::AdaptiveView;
use super::fleet::FleetLimits;
use super::journal::RoomJournal;

/// A poll the room does not answer with a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollRefused {
    /// Asked sooner than told: `429 rate_limited` with this `Retry-After`.
    TooEarly { retry_after_s: u64 },
    /// A place this room never gave out (or gave out before a restart that
    /// lost it): `401 invalid_ticket`.
    UnknownPlace,
}

/// Who asks for a place: the client (for the per-client join limit), and
/// for a join with a store's enqueue token, the account's keyed hash (one
/// place per account) and its lane.
#[derive(Debug, Clone, Default)]
pub struct JoinRequest {
    pub client: Option<ClientKey>,
    pub account: Option<AccountHash>,
}

/// What a join got: a new place, or the live place its account holds
/// already (answered as a poll of that place's ticket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entered {
    New(Joined),
    Held(HeldPlace),
}

/// A (re)loaded config's settings for one room, put in force at once.
pub struct Settings<'a> {
    /// The room's policy, checked already.
    pub policy: Policy,
    /// The kill switch.
    pub paused: bool,
    /// The event's close (unix s): from then on nobody more is released,
    /// as if paused.
    pub closes_at_s: Option<u64>,
    /// Joins per minute per client address.
    pub joins_per_minute: NonZeroU32,
    /// The room's config, for the adaptive release's bounds and start.
    pub config: &'a sluice_policies::model::Room,
}

/// Where a room's line lives, and its transitions. `now_ms` is always the
/// caller's (Unix milliseconds): no implementation reads the clock for a
/// decision.
#[async_trait]
pub trait RoomBackend: Send + Sync {
    /// `Some(retry_after_s)` when a waiting ticket polls sooner than told
    /// and the answer can be given without the room's lock or the store
    /// (the bulk of a refresh storm); `None` to ask [`Self::poll`].
    fn early_poll(&self, _ticket: &Presented, _now_ms: u64) -> Option<u64> {
        None
    }

    /// The state of a verified ticket's place; counts as the ticket's poll
    /// (it is still there). When admitted, the pass's slot is the ticket's.
    async fn poll(&self, ticket: &Presented, now_ms: u64) -> Result<Status, PollRefused>;

    /// A new place at the back of the line, for `req.client` (counted
    /// against the room's per-client limit where the store counts it); for
    /// `req.account`, the place it holds while that is live, on any
    /// gateway, else a new one kept as the account's.
    async fn join(&self, req: JoinRequest, now_ms: u64) -> Result<Entered, JoinError>;

    /// The pass of account place `seq` was minted, ending at
    /// `expires_at_s`: it holds the account until then (a back end that
    /// notes collection itself does nothing here).
    fn account_pass(&self, _account: &AccountHash, _seq: u64, _expires_at_s: u64) {}

    /// The public numbers of `GET /queue/{room}/watermark`.
    fn watermark(&self, now_ms: u64) -> Watermark;

    /// The fair-start draw, where the room has one.
    fn fair_start(&self) -> Option<FairStartInfo>;

    /// Whether the pass of place `seq` (verified) still holds its active
    /// slot, so may start a checkout.
    fn may_start(&self, seq: u64, ticket_id: &TicketId, now_ms: u64) -> bool;

    /// Notes a request made with pass `seq` (verified): it is in use.
    fn touch_pass(&self, seq: u64, ticket_id: &TicketId, now_ms: u64);

    /// A checkout of pass `seq` started (`running`) or ended: a pass with
    /// a checkout running is never idle.
    fn pass_checkout(&self, seq: u64, ticket_id: &TicketId, running: bool, now_ms: u64);

    /// Ends pass `seq` before its time: its slot goes back to the line and
    /// the pass is refused until its expiry, on every gateway. `true` if it
    /// held a slot.
    fn end_pass(&self, pass: &Claims, why: PassEnd, now_ms: u64) -> bool;

    /// Whether pass `seq` was ended before its time (and is not expired).
    fn pass_ended(&self, seq: u64, now_ms: u64) -> bool;

    /// Gives the pass's slot back when `orders` shows it spent its
    /// checkouts; `true` when a slot was freed.
    fn give_back_if_spent(&self, seq: u64, orders: PassOrders, now_ms: u64) -> bool;

    /// The policy in force (the fleet's: the smallest limits of its live
    /// gateways).
    fn policy(&self) -> Policy;

    /// The room's numbers for `/admin/state` and the metrics.
    fn stats(&self, now_ms: u64) -> RoomStats;

    /// Puts a reloaded config's settings in force (cannot fail: they were
    /// checked when the reload was planned); `now_ms` is the plan's.
    fn apply(&self, settings: Settings<'_>, now_ms: u64);

    /// One release pass (the release worker's tick); the passes released.
    /// A back end that releases on its own schedule only checks here that
    /// the event has not closed.
    fn release_once(&self, now_ms: u64, places_max: usize) -> u32;

    /// One adaptive-release step, where this gateway decides the room's
    /// rate (a fleet's rate is stepped by its own task).
    fn adapt_once(&self, now_ms: u64);

    /// The adaptive rate in force (a fleet room's: the fleet's one), when
    /// the room's rate is not pinned.
    fn adaptive_view(&self) -> Option<AdaptiveView>;

    /// The `reason` label of `sluice_release_rate_limit`.
    fn release_reason(&self) -> &'static str;

    /// A checkout of an admitted shopper started (adaptive release's
    /// in-flight signal).
    fn checkout_started(&self, now_ms: u64);

    /// A checkout counted by [`Self::checkout_started`] ended.
    fn checkout_ended(&self, now_ms: u64);

    /// A checkout that reached the backend, for the adaptive release.
    fn record_checkout(&self, now_ms: u64, latency_ms: u32, outcome: Outcome);

    /// The room's journal, for the release worker's syncs.
    fn journal(&self) -> Option<RoomJournal> {
        None
    }

    /// With a fleet: the limits the fleet's live gateways agree on.
    fn fleet_limits(&self) -> Option<FleetLimits> {
        None
    }

    /// The back end itself, for unit tests that drive it directly.
    #[cfg(test)]
    fn as_any(&self) -> &dyn std::any::Any;
}
