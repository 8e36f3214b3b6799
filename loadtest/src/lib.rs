//! Sluice load and fault harness.
//!
//! - [`paysim`]: a payment-provider simulator that misbehaves on purpose
//!   (binary `paysim`).
//! - [`load`]: `sluice-load`, the campaign rehearsal.
//! - [`throwaway`]: throwaway Redis and PostgreSQL servers on free ports,
//!   and [`relay`], a TCP relay that can cut a link: what the harness and
//!   the workspace's tests start instead of touching a server the machine
//!   already runs.

pub mod load;
pub mod paysim;
pub mod relay;
pub mod throwaway;
