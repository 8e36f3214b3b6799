//! Tickets and passes as signed JWTs.
//!
//! A ticket says "this person holds place `seq` in room `aud`"; a pass says
//! "this person's place has been released: let them through the protected
//! paths of `aud` until `exp`". Both carry the same claims (see
//! [`Claims`]) and differ only in `typ`, so a ticket can never be replayed as
//! a pass or the other way round.
//!
//! The [`Keyring`] holds every configured key: the first signs, all verify,
//! so keys rotate without logging anyone out.

mod claims;
mod error;
pub(crate) mod jws;
mod keygen;
mod keyring;

pub use claims::{Claims, TokenType, ISSUER};
pub use error::{KeyError, TokenError};
pub use keygen::{generate_ed25519_pkcs8_der, generate_hs256_secret};
pub use keyring::{
    Expected, KeyMaterial, KeySpec, Keyring, ED25519_PUBLIC_KEY_BYTES, IAT_LEEWAY_S,
};
