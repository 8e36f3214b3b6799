//! Sluice admission: the waiting room.
//!
//! Pure logic, no I/O (a room's changes leave it as events, see
//! [`journal`]): every function that depends on time takes `now` as an
//! argument, and every random choice comes from an RNG the caller seeds. The
//! gateway wires it to HTTP.
//!
//! - [`tokens`]: tickets and passes as signed JWTs, several keys at once.
//! - [`enqueue`]: the store's enqueue tokens (one place per account) and
//!   the account hash.
//! - [`event_window`]: whether a room takes joins now (`prequeue_at`,
//!   `opens_at`, `closes_at`).
//! - [`standby`]: `mode = "standby"`: when the line forms and when a join
//!   is admitted at once.
//! - [`pass_idle`]: when a pass gives its slot back (`pass_idle_s`).
//! - [`challenge`]: the join's proof of work: issued, parsed, verified,
//!   spent once; the adaptive difficulty law.
//! - [`room`]: one room's line: join, poll, the release pass, pause, sold
//!   out, fair start. Everything about time takes `now_ms`.
//! - [`policy`]: the numbers a room runs on.
//! - [`pass_orders`]: when a pass has spent its right to start checkouts.
//! - [`store`]: where the line lives ([`store::QueueStore`]), 12 bytes per
//!   waiting person in the in-process [`store::MemoryStore`].
//! - [`stock`]: the stock authority the room asks whether anything is left.
//! - [`odds`]: the units left for a room and whether a place is likely
//!   beyond them (`show_units_left`).
//! - [`fair_start`]: the verifiable draw of the pre-queue at the opening.
//! - [`ticket_id`]: ticket ids derived from places, so none are stored.
//! - [`fleet_rate`]: one adaptive rate for a fleet: checkouts published
//!   and merged, one leader stepping the law.
//! - [`fleet`]: a room on a line shared by several gateways: decisions
//!   from the shared numbers a store returns.
//! - [`journal`]: the room's changes as events for a durable store to keep,
//!   and the room rebuilt from them after a restart.
//! - [`no_show`]: released places nobody collects, measured and made up
//!   for, for both back ends.
//! - [`poll`]: when to ask again.
//! - [`wait_estimate`]: the estimated wait, whether the rate or the
//!   `max_active` slots hold people back.
//! - [`join_limiter`]: joins per client address.
//! - [`lane_split`]: a release's places split between lanes by share,
//!   with a running deficit.
//! - [`lanes`]: a room's lanes: the lane a join goes to, each lane's line and
//!   position, the places a release takes from each, bypass admission.
//! - [`stats`]: the room's numbers for metrics.
//! - [`adaptive`]: the release rate that follows the backend's checkouts.
//! - [`pace`], [`rate_meter`]: the release pace (GCRA, as on the fleet) and
//!   its measurement.
//! - [`clock`]: the wall clock for callers (the room itself takes `now_ms`).

pub mod adaptive;
pub mod challenge;
pub mod clock;
pub mod enqueue;
pub mod event_window;
pub mod fair_start;
pub mod fleet;
pub mod fleet_draw;
pub mod fleet_rate;
pub mod join_limiter;
pub mod journal;
pub mod lane_split;
pub mod lanes;
pub mod no_show;
pub mod odds;
pub mod pace;
pub mod pass_idle;
pub mod pass_orders;
pub mod policy;
pub mod poll;
pub mod rate_meter;
pub mod room;
pub mod standby;
pub mod stats;
pub mod stock;
pub mod store;
pub mod ticket_id;
pub mod tokens;
pub mod wait_estimate;

pub use pass_idle::PassEnd;
pub use pass_orders::PassOrders;
pub use policy::{Policy, PolicyError};
pub use room::{
    Admitted, JoinError, Joined, PollError, PreQueue, ReleaseOutcome, RestoreError, RoomState,
    RoomView, Status, Stop, Wait, WaitingRoom, Watermark,
};
pub use stats::RoomStats;
pub use stock::{InMemoryStock, StockAuthority};
pub use ticket_id::TicketId;
