//! Sluice checkout: the embedded reservation and payment core.
//!
//! This crate has no HTTP; the gateway calls it. Calls that write block
//! until their transaction is durable, so the gateway runs them on
//! `spawn_blocking`; the hot-path [`Store::try_submit_reservation`] answers
//! through a future ([`Pending::recv`]) instead.
//!
//! A checkout, as durable steps (see [`service`]): claim the idempotency key
//! → create the order and hold its stock (or `rejected`) → `authorizing` →
//! provider answer → `confirmed` (stock committed) or `declined` / `voided`
//! (stock released). Every order change writes its outbox event in the same
//! transaction; [`relay_once`] publishes them; [`reconcile_once`] expires
//! holds and reports what is stuck; [`audit()`] checks a data dir read-only.
//!
//! Map of the crate, one concept per file:
//!
//! - [`store`]: the SQLite stock authority (WAL, `synchronous=FULL`); opening,
//!   seeding products, inventory adjustments, the write path.
//! - `schema`: the tables and their CHECK constraints.
//! - [`stock`]: the atomic conditional reservation and the hold transitions
//!   (commit once, release once, return on refund), conservation checks.
//! - [`state`]: order and payment states, and the one transition table.
//! - [`order`]: the durable order row and its transitions, each writing its
//!   outbox event in the same transaction.
//! - [`idempotency`]: the validated `Idempotency-Key` and the request hash.
//! - [`payment`]: the `PaymentProvider` trait and the in-process simulator.
//! - [`service`]: the idempotent checkout, order lookup and cancel.
//! - [`outbox`]: the relay (`relay_once`) and the JSON-lines file sink.
//! - [`reconciler`]: `reconcile_once`: expiry, stuck orders, conservation.
//! - [`mod@audit`]: read-only offline checks of a data directory.
//! - [`group_commit`]: the single writer thread: every write (hot-path holds
//!   and service transactions) is committed in batches, one fsync each.
//! - [`limits`]: every bound, named with its unit.
//! - [`clock`]: time as an input.
//! - [`metrics`]: counters the gateway exports.
//! - [`error`]: error enums mapped to the contract's error codes.

pub mod audit;
pub mod clock;
pub mod error;
pub mod group_commit;
pub mod idempotency;
pub mod limits;
pub mod metrics;
pub mod order;
pub mod outbox;
pub mod payment;
pub mod reconciler;
mod schema;
pub mod service;
pub mod state;
pub mod stock;
pub mod store;

pub use audit::{audit, Violation};
pub use clock::{Clock, ManualClock, SystemClock, UnixMs};
pub use error::{CheckoutError, StoreError};
pub use group_commit::{GroupCommitConfig, Pending, ReserveRequest, WriterError};
pub use idempotency::{IdempotencyKey, InvalidKey};
pub use order::{Order, OrderView, PaymentView};
pub use outbox::{
    relay_once, JsonLinesSink, OutboxEvent, RelayError, RelayOutcome, Sink, SinkError,
};
pub use payment::{
    AuthorizeOutcome, PaymentError, PaymentProvider, SimulatedProvider, PM_DECLINE, PM_OK,
};
pub use reconciler::{reconcile_once, ReconcileOutcome};
pub use service::{CheckoutRequest, CheckoutService, Created};
pub use state::{transition_allowed, OrderState, PaymentState};
pub use stock::{ReserveOutcome, StockLevel};
pub use store::{ProductSeed, Store};
