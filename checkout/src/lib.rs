//! Sluice checkout: the embedded reservation and payment core.
//!
//! This crate serves no HTTP; the gateway calls it. Calls that write block
//! until their transaction is durable, so the gateway runs them on
//! `spawn_blocking`; the checkout and the cancel
//! ([`OrderBackend::checkout_on`], [`OrderBackend::cancel_on`]) are async
//! instead: its store steps go to the caller's blocking threads one by one
//! ([`blocking`]) and its provider calls are awaited in between; the
//! hot-path [`Store::try_submit_reservation`] answers through a future
//! ([`Pending::recv`]).
//!
//! A checkout waits for three durable writes (see [`service`]): claim the
//! idempotency key, create the order holding its stock (or `rejected`) and
//! store its authorize attempt as `authorizing`, in one; each provider
//! answer with everything it decides (`confirmed` with stock committed, or
//! `declined` / `voided` with stock released, and the key completed), one
//! each. Every provider operation is a durable attempt stored
//! before it is sent; an ambiguous answer is looked up and retried with the
//! same key, never read as a decline. Every order change writes its outbox
//! event in the same transaction; [`relay_once`] publishes them; [`reconcile_once`] expires
//! holds and reports what is stuck; [`audit()`] checks a data dir read-only.
//!
//! Map of the crate, one concept per file:
//!
//! - [`mod@core`]: the rules with no store, which both back ends call: the
//!   checkout request and its validation, the order and its birth, the
//!   idempotency key's claim, the order and payment state machines, the
//!   settle decision ([`crate::core::settle::decide`]), provider events
//!   and how one fits the payment ([`crate::core::event::fit`]), stock
//!   counts, seeds and the partition plans. No `rusqlite`, no `postgres`,
//!   no clock. A new payment rule goes here, then into each back end's
//!   apply.
//! - [`backend`]: the store boundary ([`OrderBackend`]: everything the
//!   gateway asks of a store, from checkout to webhooks, the reconcilers'
//!   passes and the books) and its two back ends, each applying
//!   [`mod@core`]'s decisions in its own SQL:
//!   - [`backend::sqlite`]: embedded SQLite, one gateway: its store,
//!     group commit, schema, stock, partitions, orders, attempts, the
//!     checkout service and its payment driver, settle, events, outbox,
//!     books, the reconcilers, retention and the offline audit (the public
//!     ones re-exported here under their old paths: [`store`],
//!     [`group_commit`], [`stock`], [`partition`], [`order`], [`attempt`],
//!     [`service`], [`driver`], [`reconciler`], [`payment_reconciler`],
//!     [`retention`], [`mod@audit`]);
//!   - [`backend::postgres`]: PostgreSQL shared by a fleet;
//!   - [`backend::pass`]: what both back ends' background passes report.
//! - [`state`], [`idempotency`]: [`crate::core::state`] (the state
//!   machines) and [`crate::core::idempotency`] (the validated key) under
//!   their old paths.
//! - [`payment`]: the async `PaymentProvider` trait: authorize, capture,
//!   void, refund, look-up by key, the event list; ambiguous vs definite
//!   errors.
//! - [`simulator`]: the in-process provider (test cards, seeded faults,
//!   a readable ledger).
//! - [`http_provider`]: the adapter for a card-provider-shaped HTTP API.
//! - [`http_client`]: the workspace's one HTTP client (`reqwest`) on a
//!   runtime of its own, and [`http_client::wait`] for blocking callers.
//! - [`retry`]: retry policy, seeded jitter, injected sleeps.
//! - [`webhook`]: signature check, event parsing, `apply_webhook` (on the
//!   embedded store).
//! - [`blocking`]: where an async call's store steps run (the gateway's
//!   blocking threads, or inline for a synchronous caller).
//! - [`limits`]: every bound, named with its unit.
//! - [`clock`]: time as an input.
//! - [`metrics`]: counters the gateway exports.
//! - [`error`]: error enums mapped to the contract's error codes.
//! - [`books`]: stock and order counts in memory as of the last commit
//!   (the embedded [`Store`] publishes them after each commit), for
//!   scrapes and `/admin/state`; the store's backlog gauges.
//! - [`outbox`]: the outbox event, the [`Sink`] and the JSON-lines file
//!   sink, the relay's outcome (each back end writes and relays its own
//!   rows).

pub mod backend;
pub mod blocking;
pub mod books;
pub mod clock;
pub mod core;
pub mod error;
pub mod http_client;
pub mod http_provider;
pub mod limits;
pub mod metrics;
pub mod outbox;
pub mod payment;
pub mod retry;
pub mod simulator;
pub use crate::core::state;
pub mod webhook;

// The embedded SQLite back end's modules, under their old paths.
pub use crate::core::idempotency;
pub use backend::sqlite::{
    attempt, audit, driver, group_commit, order, partition, payment_reconciler, reconciler,
    retention, service, stock, store,
};

pub use attempt::{attempt_key, Attempt, AttemptOutcome, Operation, Transport};
pub use audit::{audit, Violation};
pub use backend::sqlite::outbox::relay_once;
pub use backend::{OrderBackend, PgBackend, PgConfig, SessionTimeouts, SqliteBackend};
pub use blocking::{Blocking, Inline};
pub use books::Books;
pub use clock::{Clock, ManualClock, SystemClock, UnixMs};
pub use driver::PaymentsConfig;
pub use error::{CheckoutError, StoreError};
pub use group_commit::{GroupCommitConfig, Pending, ReserveRequest, WriterError};
pub use http_client::{ClientError, HttpClient};
pub use http_provider::{classify_status, HttpProvider, HttpProviderConfig, StatusClass};
pub use idempotency::{IdempotencyKey, InvalidKey};
pub use metrics::{AuthLatency, LabeledCounters, LatencyHistogram, Metrics};
pub use order::{Order, OrderView, PaymentView};
pub use outbox::{JsonLinesSink, OutboxEvent, RelayError, RelayOutcome, Sink, SinkError};
pub use partition::{Partition, PARTITIONS_MAX};
pub use payment::{
    AuthorizeOutcome, EventPage, OperationOutcome, PaymentError, PaymentProvider, ProviderEvent,
};
pub use payment_reconciler::PaymentsReconcileOutcome;
pub use reconciler::{reconcile_once, ReconcileOutcome};
pub use retention::{prune_once, PruneOutcome};
pub use retry::{Jitter, RetryPolicy, Sleeper, ThreadSleeper};
pub use service::{CheckoutRequest, CheckoutService, Created, OrderLimits, SubjectOrders};
pub use simulator::{
    Faults, SimConfig, SimPayment, SimPaymentState, SimulatedProvider, PM_DECLINE,
    PM_LOST_RESPONSE, PM_OK, PM_SLOW,
};
pub use state::{transition_allowed, OrderState, PaymentState};
pub use stock::{ReserveOutcome, StockLevel};
pub use store::{ProductSeed, Store};
pub use webhook::{
    apply_webhook, parse_event, sign, verify_signature, EventData, EventType, WebhookError,
    WebhookEvent, WebhookOutcome, SIGNATURE_HEADER,
};
