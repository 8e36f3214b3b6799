//! Sluice load and fault harness.
//!
//! - [`paysim`]: a payment-provider simulator that misbehaves on purpose
//!   (binary `paysim`).

pub mod load;
pub mod paysim;
