//! How a checkout counts for adaptive release: did the backend do its job?
//!
//! A declined card or a sold-out product is an answer the backend gave; a
//! store failure, or a payment still `authorizing` because the provider did
//! not answer in time, is the backend failing. A checkout refused for the
//! pass's purchase limit never reached the purchase flow and is not
//! counted; neither is a replayed key (its stored answer, in about no time,
//! says nothing of the backend now), one whose first request is still in
//! progress (`409`), nor a request refused for what it asked (a bad body,
//! an unknown SKU, a key reused with another body): answered in about no
//! time, those would let one pass looping on them pull the window's p99
//! down and its served rate up, and so the release rate up for everyone. A checkout refused with `503
//! overloaded` because the checkout pool was full is the backend failing
//! too: the shoppers already admitted are more than it can serve.

use sluice_admission::adaptive::Outcome;
use sluice_checkout::{CheckoutError, Created, Order, OrderState, StoreError};

/// A checkout the full checkout pool refused (`503 overloaded`).
pub const OVERLOADED: Outcome = Outcome::Failed;

pub fn of(result: &Result<(Order, Created), CheckoutError>) -> Option<Outcome> {
    Some(match result {
        Ok((_, Created::Replay)) | Err(CheckoutError::Conflict) => return None,
        Ok((order, _)) if order.state == OrderState::Authorizing => Outcome::Failed,
        Ok(_) => Outcome::Served,
        Err(
            CheckoutError::PurchaseLimit
            | CheckoutError::Store(StoreError::UnknownSku(_))
            | CheckoutError::BadRequest(_)
            | CheckoutError::NotFound
            | CheckoutError::Mismatch,
        ) => return None,
        Err(CheckoutError::Store(_)) => Outcome::Failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_checkout::PaymentState;

    fn order(state: OrderState) -> Order {
        Order {
            order_id: "o".into(),
            subject: "s".into(),
            sku: "sku".into(),
            quantity: 1,
            payment_method: "pm_ok".into(),
            amount_cents: 100,
            state,
            payment_state: PaymentState::Pending,
            payment_id: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            reservation_expires_at_ms: None,
        }
    }

    #[test]
    fn a_new_order_left_authorizing_is_a_failure_a_replay_is_not_counted() {
        let new = |s| of(&Ok((order(s), Created::Created)));
        let replay = |s| of(&Ok((order(s), Created::Replay)));
        assert_eq!(new(OrderState::Authorizing), Some(Outcome::Failed));
        assert_eq!(new(OrderState::Confirmed), Some(Outcome::Served));
        assert_eq!(new(OrderState::Declined), Some(Outcome::Served));
        assert_eq!(replay(OrderState::Authorizing), None);
        assert_eq!(replay(OrderState::Confirmed), None);
        assert_eq!(of(&Err(CheckoutError::Conflict)), None);
        assert_eq!(of(&Err(CheckoutError::PurchaseLimit)), None);
        // Refused for what it asked: no sample, whatever it cost.
        assert_eq!(of(&Err(CheckoutError::BadRequest("quantity".into()))), None);
        assert_eq!(of(&Err(CheckoutError::Mismatch)), None);
        assert_eq!(of(&Err(CheckoutError::NotFound)), None);
        assert_eq!(
            of(&Err(CheckoutError::Store(StoreError::UnknownSku(
                "x".into()
            )))),
            None
        );
        assert_eq!(
            of(&Err(CheckoutError::Store(StoreError::WriterStopped))),
            Some(Outcome::Failed)
        );
    }
}
