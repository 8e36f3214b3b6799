//! The Sluice gateway: everything the `sluice` binary wires together.
//!
//! - [`server`] builds one pingora server from a policy file: the public
//!   [`proxy`], the [`admin`] listener and the [`control`] loop.
//! - [`route`] decides what a request gets, from the current [`runtime`]
//!   snapshot (config + [`catalog`] + [`origin_cache`]).
//! - [`error`] is the contract's JSON error shape; [`headers`] the
//!   forwarding headers; [`metrics`] the Prometheus registry.
//! - [`queue`] is the waiting room over HTTP, [`orders`] the reservation
//!   core over HTTP (on a bounded blocking pool, `orders::pool`), [`state`]
//!   what the listeners share (and the all-or-nothing reload), and
//!   [`readiness`] the probes behind `/readyz`.
pub mod admin;
pub mod catalog;
pub mod control;
pub mod error;
pub mod headers;
pub mod keygen;
pub mod logging;
pub mod metrics;
pub mod orders;
pub mod origin_cache;
pub mod proxy;
pub mod queue;
pub mod readiness;
pub mod route;
pub mod runtime;
pub mod scrape;
pub mod server;
pub mod state;
