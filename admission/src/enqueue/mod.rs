//! The store's enqueue tokens: one place per account.
//!
//! The store signs a JWT for a shopper's account (`sub`), for one room
//! (`aud`), with `iat`, `exp` (at most a day apart) and an optional `lane`;
//! the join carries it. [`EnqueueKeyring::read`] decides what a join's
//! token (or its absence) means; [`AccountHasher`] turns the `sub` into the
//! keyed hash that is all Sluice keeps of it.
//!
//! - [`keyring`]: the room's enqueue keys (HS256 secrets, Ed25519 public
//!   keys) by `kid`, and the checks, in order.
//! - [`claims`]: what a verified token says.
//! - [`error`]: why a token was refused, and the contract code.
//! - [`account`]: the account hash.
//!
//! Enqueue tokens and Sluice's own tickets and passes never stand for each
//! other: the kids differ (the config refuses a repeat), an enqueue token
//! carries no `typ` or `typ = "enqueue"` (a ticket or pass is refused
//! here), and a ticket or pass must carry `typ`, `seq` and `iss = sluice`
//! and nothing else ([`crate::tokens`] refuses an enqueue token).

mod account;
mod claims;
mod error;
mod keyring;

pub use account::{AccountHash, AccountHasher, ACCOUNT_KEY_BYTES_MIN};
pub use claims::EnqueueClaims;
pub use error::EnqueueError;
pub use keyring::{EnqueueKeyring, ENQUEUE_LIFETIME_MAX_S, ENQUEUE_TOKEN_BYTES_MAX, SUB_BYTES_MAX};

#[cfg(test)]
mod tests;
