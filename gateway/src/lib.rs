//! The Sluice gateway: everything the `sluice` binary wires together.
//!
//! Modules are private: the binary uses [`server`] (`run`, `check`,
//! `audit`, [`server::Overrides`]), [`keygen`] and [`logging`]; the fleet
//! store's tests use [`fleet_store`]. Imports point one way, from the
//! wiring down to the leaves (`scripts/circles.py` fails on a circle):
//!
//! - `server` builds one pingora server from a policy file: the public
//!   `proxy`, the `admin` listener and the `control` loop (reload on SIGHUP
//!   or a file change), around `state` (what the listeners share, and the
//!   all-or-nothing reload).
//! - `route` decides what a request gets, from the current `runtime`
//!   snapshot (config + `catalog` + `origin_cache` + the `jwks` document);
//!   `next_path` is the checked `next` of the `303` to the queue and of the
//!   queue page; `origin_dns` resolves an origin given by host name off the
//!   proxy threads.
//! - `connections` caps open public connections, per gateway and per
//!   client (and raises the fd limit); `head_deadline` bounds the time a
//!   request head may take to arrive (slowloris), `body` the size and time
//!   of a body the gateway reads itself; `proxy_protocol` reads a load
//!   balancer's PROXY header; `client` decides who the client of a request
//!   is.
//! - Leaves every handler uses: `response` (an answer the gateway writes
//!   itself), `error` (the contract's JSON error shape), `headers` (the
//!   forwarding headers), `pass_headers` (`Sluice-Room`,
//!   `Sluice-Pass-Subject`: which pass opened a protected path),
//!   `pass_end` (`Sluice-Pass: end` from the origin), `clock` (the one
//!   place the wall clock is read), `node` (this gateway's id in a fleet),
//!   `metrics` (the Prometheus
//!   registry, every family labelled with the gateway's `region`) and
//!   `scrape` (families built at scrape time from live state).
//! - `queue` is the waiting room over HTTP (its tokens checked through
//!   `verified`, a keyring with a bounded cache of accepted tokens; the
//!   fleet's room on Redis in `queue::fleet`), `orders` the reservation
//!   core over HTTP (on a bounded blocking pool, `orders::pool`), and
//!   `readiness` the probes behind `/readyz`.
//! - `sim_webhooks` sends the in-process payment simulator's signed
//!   webhooks to the gateway's own `/webhooks/simulated`; `sd_notify` tells
//!   systemd (`Type=notify`) the gateway is ready once both listeners are
//!   bound, and when it starts draining; `keygen` prints a fresh signing
//!   key; `logging` sets up `tracing`.
mod admin;
mod body;
mod catalog;
mod client;
mod clock;
mod connections;
mod control;
mod error;
mod head_deadline;
mod headers;
mod jwks;
pub mod keygen;
pub mod logging;
mod metrics;
mod next_path;
mod node;
mod orders;
mod origin_cache;
mod origin_dns;
mod pass_end;
mod pass_headers;
mod proxy;
mod proxy_protocol;
mod queue;
mod readiness;
mod response;
mod route;
mod runtime;
mod scrape;
mod sd_notify;
pub mod server;
mod sim_webhooks;
mod state;
mod verified;

/// The fleet's shared room store on Redis, for the tests that drive it
/// without a gateway around it.
pub mod fleet_store {
    pub use crate::queue::fleet::redis::{client_key, RedisStore};
    pub use crate::queue::fleet::{ClaimArgs, JoinBatch, Reseed, RoomStore, TickArgs};
}
