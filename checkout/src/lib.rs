//! Sluice checkout: the embedded reservation and payment core.
//!
//! This crate has no HTTP; the gateway calls it (from `spawn_blocking`, since
//! SQLite and the in-process payment simulator are synchronous).
//!
//! Map of the crate, one concept per file:
//!
//! - [`store`]: the SQLite stock authority (WAL, `synchronous=FULL`); opening,
//!   seeding products, inventory adjustments, the write-transaction helper.
//! - [`schema`]: the tables and their CHECK constraints.
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
//! - [`audit`]: read-only offline checks of a data directory.
//! - [`group_commit`]: the single writer that commits reservations in batches.
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
pub mod schema;
pub mod service;
pub mod state;
pub mod stock;
pub mod store;

pub use audit::{audit, Violation};
pub use clock::{Clock, ManualClock, SystemClock, UnixMs};
pub use error::{CheckoutError, StoreError};
pub use group_commit::{GroupCommitConfig, ReservationWriter, ReserveRequest, WriterError};
pub use idempotency::{IdempotencyKey, InvalidKey};
pub use order::{Order, OrderView};
pub use outbox::{relay_once, JsonLinesSink, OutboxEvent, RelayOutcome, Sink, SinkError};
pub use payment::{AuthorizeOutcome, PaymentError, PaymentProvider, SimulatedProvider};
pub use reconciler::{reconcile_once, ReconcileOutcome};
pub use service::{CheckoutRequest, CheckoutService, Created};
pub use state::{transition_allowed, OrderState, PaymentState};
pub use stock::{ReserveOutcome, StockLevel};
pub use store::{ProductSeed, Store};
