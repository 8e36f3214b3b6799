//! The store's enqueue tokens at the join (`[rooms.enqueue]`): where the
//! token is read from, what its absence or a bad one answers, and the
//! account hash a good one becomes.
//!
//! The token comes in the join's JSON body (`"enqueue_token"`) or in the
//! cookie `sluice_enqueue` the store sets (`Path=/queue`), never from a
//! URL (a URL ends up in logs and `Referer`). The checks themselves are
//! `sluice_admission::enqueue::EnqueueKeyring::read`; the `sub` leaves
//! here only as its keyed hash ([`AccountHasher`]): the key is
//! `[cluster] account_hash_key_env`, or for one gateway a key made once and
//! kept in `data_dir` ([`ACCOUNT_KEY_FILE`]), so it is the same on every
//! gateway and across restarts and enqueue key rotations.

use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use http::HeaderMap;
use serde::Deserialize;
use sluice_admission::enqueue::{AccountHash, AccountHasher, EnqueueError, EnqueueKeyring};
use sluice_policies::model::{Lane, Room};

use crate::error::{ApiError, ErrorCode};
use crate::response::LocalResponse;

/// The cookie a store may set with the shopper's enqueue token.
pub const ENQUEUE_COOKIE: &str = "sluice_enqueue";
/// The account hash key of a gateway without `[cluster]
/// account_hash_key_env`, kept in `data_dir`.
pub const ACCOUNT_KEY_FILE: &str = "account-hash.key";

/// The fields of a join body this module reads; others (a challenge's)
/// are left to their readers.
#[derive(Deserialize)]
struct JoinBody {
    enqueue_token: Option<String>,
}

/// A join body that is not a JSON object with a string `enqueue_token`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadJoinBody;

/// The enqueue token of a join body: none for an empty body.
pub fn token_in_body(body: &[u8]) -> Result<Option<String>, BadJoinBody> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice::<JoinBody>(body)
        .map(|b| b.enqueue_token)
        .map_err(|_| BadJoinBody)
}

/// The join's enqueue token: the body's, else the store's cookie.
pub fn token<'a>(from_body: Option<&'a str>, headers: &'a HeaderMap) -> Option<&'a str> {
    from_body.or_else(|| super::cookie(headers, ENQUEUE_COOKIE))
}

/// A room's enqueue settings in force (rebuilt on reload).
pub struct EnqueueRules {
    required: bool,
    keyring: EnqueueKeyring,
    lanes: Vec<Lane>,
}

impl EnqueueRules {
    pub fn of(room: &Room) -> Self {
        Self {
            required: room.enqueue.required,
            keyring: EnqueueKeyring::new(&room.enqueue.keys),
            lanes: room.lanes.clone(),
        }
    }
}

/// Who a good token says joins: the account's hash, and its lane (`None`:
/// the default lane).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entrant {
    pub account: AccountHash,
    pub lane: Option<String>,
}

/// A room's enqueue gate: its rules and what it refused.
pub struct EnqueueGate {
    rules: ArcSwap<EnqueueRules>,
    /// Joins refused for want of a token, and for a bad one.
    pub(crate) required_joins: AtomicU64,
    pub(crate) invalid_joins: AtomicU64,
}

impl EnqueueGate {
    pub fn new(room: &Room) -> Self {
        Self {
            rules: ArcSwap::from_pointee(EnqueueRules::of(room)),
            required_joins: AtomicU64::new(0),
            invalid_joins: AtomicU64::new(0),
        }
    }

    pub fn set(&self, room: &Room) {
        self.rules
            .store(std::sync::Arc::new(EnqueueRules::of(room)));
    }

    /// What the join's `token` means for room `room` at `now_s`: no
    /// account (`Ok(None)`), an entrant, or the `401` that refuses it.
    pub fn check(
        &self,
        room: &str,
        token: Option<&str>,
        hasher: &AccountHasher,
        now_s: u64,
    ) -> Result<Option<Entrant>, LocalResponse> {
        let rules = self.rules.load();
        match rules
            .keyring
            .read(token, rules.required, room, &rules.lanes, now_s)
        {
            Ok(None) => Ok(None),
            Ok(Some(claims)) => Ok(Some(Entrant {
                account: hasher.hash(&claims.sub),
                lane: claims.lane,
            })),
            Err(e) => {
                let counter = if e == EnqueueError::Missing {
                    &self.required_joins
                } else {
                    &self.invalid_joins
                };
                counter.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(room, reason = e.reason(), "enqueue token refused");
                Err(refused(e))
            }
        }
    }
}

/// The `401` for a join without a token, or with one refused.
fn refused(e: EnqueueError) -> LocalResponse {
    let (code, message) = match e {
        EnqueueError::Missing => (
            ErrorCode::EnqueueTokenRequired,
            "This waiting room needs a sign-in from the store first; join from the store's page.",
        ),
        _ => (
            ErrorCode::InvalidEnqueueToken,
            "The store's enqueue token is not valid here; get a fresh one from the store.",
        ),
    };
    LocalResponse::error(&ApiError::new(code, message))
}

/// `400` for a join body that cannot be read.
pub fn bad_body() -> LocalResponse {
    LocalResponse::error(&ApiError::new(
        ErrorCode::BadRequest,
        "A join body is a JSON object; \"enqueue_token\", when sent, a string.",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_comes_from_the_body_else_the_cookie() {
        assert_eq!(token_in_body(b""), Ok(None));
        assert_eq!(token_in_body(b" \n"), Ok(None));
        assert_eq!(token_in_body(b"{}"), Ok(None));
        assert_eq!(
            token_in_body(br#"{"enqueue_token":"a.b.c","challenge":"x"}"#),
            Ok(Some("a.b.c".into()))
        );
        assert_eq!(token_in_body(br#"{"enqueue_token":7}"#), Err(BadJoinBody));
        assert_eq!(token_in_body(b"enqueue_token=a.b.c"), Err(BadJoinBody));
        assert_eq!(token_in_body(b"[]"), Err(BadJoinBody));
        let mut headers = HeaderMap::new();
        headers.insert("cookie", "a=1; sluice_enqueue=c.d.e".parse().unwrap());
        assert_eq!(token(None, &headers), Some("c.d.e"));
        assert_eq!(token(Some("a.b.c"), &headers), Some("a.b.c"));
        assert_eq!(token(None, &HeaderMap::new()), None);
    }
}
