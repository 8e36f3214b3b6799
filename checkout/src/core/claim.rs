//! The idempotency key's claim with no store: what a request may do with
//! a key someone already stored, as one plain function both back ends call
//! ([`decide_claim`]).

use crate::clock::UnixMs;
use crate::error::CheckoutError;
use crate::limits::IDEMPOTENCY_LOCK_STALE_MS;

/// What the stored key row says a request may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimDecision {
    /// Own the key (its owner died before creating the order): take it over.
    TakeOver,
    /// The key names an order that is done or abandoned: show it.
    Replay(String),
}

/// The decision on a key that is already stored, as a plain function.
pub fn decide_claim(
    stored_hash: &str,
    hash: &str,
    order_id: Option<String>,
    locked_at_ms: UnixMs,
    completed: bool,
    now_ms: UnixMs,
) -> Result<ClaimDecision, CheckoutError> {
    if stored_hash != hash {
        return Err(CheckoutError::Mismatch);
    }
    let abandoned = now_ms.saturating_sub(locked_at_ms) >= IDEMPOTENCY_LOCK_STALE_MS;
    match (order_id, completed || abandoned) {
        (Some(order_id), true) => Ok(ClaimDecision::Replay(order_id)),
        (None, true) => Ok(ClaimDecision::TakeOver),
        (_, false) => Err(CheckoutError::Conflict),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_key_replays_conflicts_or_is_taken_over() {
        let t = 1_000_000;
        let fresh = t - 1;
        let stale = t - IDEMPOTENCY_LOCK_STALE_MS;
        assert!(matches!(
            decide_claim("h", "other", None, fresh, false, t),
            Err(CheckoutError::Mismatch)
        ));
        assert!(matches!(
            decide_claim("h", "h", Some("o".into()), fresh, false, t),
            Err(CheckoutError::Conflict)
        ));
        assert_eq!(
            decide_claim("h", "h", Some("o".into()), fresh, true, t).unwrap(),
            ClaimDecision::Replay("o".into())
        );
        assert_eq!(
            decide_claim("h", "h", None, stale, false, t).unwrap(),
            ClaimDecision::TakeOver
        );
    }
}
