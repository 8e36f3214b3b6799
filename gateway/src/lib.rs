//! The Sluice gateway: everything the `sluice` binary wires together.
//!
//! - [`server`] builds one pingora server from a policy file: the public
//!   [`proxy`], the [`admin`] listener and the [`control`] loop.
//! - [`route`] decides what a request gets, from the current [`runtime`]
//!   snapshot (config + [`catalog`] + [`origin_cache`]); [`origin_dns`]
//!   resolves an origin given by host name off the proxy threads.
//! - [`connections`] caps open public connections, per gateway and per
//!   client (and raises the fd limit); [`head_deadline`] bounds the time a
//!   request head may take to arrive (slowloris), [`body`] the size and
//!   time of a body the gateway reads itself; [`proxy_protocol`] reads a load balancer's PROXY header;
//!   [`client`] decides who the client of a request is.
//! - [`error`] is the contract's JSON error shape; [`headers`] the
//!   forwarding headers; [`metrics`] the Prometheus registry (every
//!   family labelled with the gateway's `region`).
//! - [`queue`] is the waiting room over HTTP (its tokens checked through
//!   [`verified`], a keyring with a bounded cache of accepted tokens),
//!   [`orders`] the reservation
//!   core over HTTP (on a bounded blocking pool, `orders::pool`), [`state`]
//!   what the listeners share (and the all-or-nothing reload), and
//!   [`readiness`] the probes behind `/readyz`.
//! - `sd_notify` tells systemd (`Type=notify`) the gateway is ready once
//!   both listeners are bound, and when it starts draining.
//! - [`sim_webhooks`] sends the in-process payment simulator's signed
//!   webhooks to the gateway's own `/webhooks/simulated`.
pub mod admin;
pub mod body;
pub mod catalog;
pub mod client;
pub mod connections;
pub mod control;
pub mod error;
pub mod head_deadline;
pub mod headers;
pub mod keygen;
pub mod logging;
pub mod metrics;
pub mod orders;
pub mod origin_cache;
pub mod origin_dns;
pub mod proxy;
pub mod proxy_protocol;
pub mod queue;
pub mod readiness;
pub mod route;
pub mod runtime;
pub mod scrape;
mod sd_notify;
pub mod server;
pub mod sim_webhooks;
pub mod state;
pub mod verified;
