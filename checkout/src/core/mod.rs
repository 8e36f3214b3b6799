//! The checkout's rules with no store: plain functions and types that both
//! back ends (embedded SQLite and PostgreSQL) call, so a rule is written
//! once. Nothing here imports `rusqlite` or `postgres`, reads the clock or
//! does I/O.
//!
//! - [`attempt`]: a payment attempt's operation, transport and outcome,
//!   and its idempotency key.
//! - [`claim`]: what a request may do with an idempotency key already
//!   stored ([`claim::decide_claim`]).
//! - [`event`]: provider events and how one fits the payment as stored
//!   ([`event::fit`]).
//! - [`idempotency`]: the validated `Idempotency-Key` and the request
//!   hash.
//! - [`order`]: the order's fields, its contract view and its birth
//!   (`order::new_order`).
//! - [`request`]: the checkout request and its validation, the subject's
//!   bounds.
//! - [`state`]: the order and payment state machines, each an enum with
//!   one transition function.
//! - [`settle`]: what a definite outcome of an attempt decides
//!   ([`settle::decide`] → [`settle::Settlement`]).
//! - [`stock`]: a SKU's counts, a product's seed and its checks, a
//!   hold's moves.
//! - [`partition`]: where a hold starts looking, even shares, and the
//!   plans that move free units between partitions.

pub mod attempt;
pub mod claim;
pub mod event;
pub mod idempotency;
pub mod order;
pub mod partition;
pub mod request;
pub mod settle;
pub mod state;
pub mod stock;
