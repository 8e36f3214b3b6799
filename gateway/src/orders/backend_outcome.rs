//! How a checkout counts for adaptive release: did the backend do its job?
//!
//! A declined card, a sold-out product or a replayed key is an answer the
//! backend gave; a store failure, or a payment still `authorizing` because
//! the provider did not answer in time, is the backend failing. A
//! checkout refused for the pass's purchase limit never reached the
//! purchase flow and is not counted. A checkout refused with `503
//! overloaded` because the checkout pool was full is the backend failing
//! too: the shoppers already admitted are more than it can serve.

use sluice_admission::adaptive::Outcome;
use sluice_checkout::{CheckoutError, Created, Order, OrderState, StoreError};

/// A checkout the full checkout pool refused (`503 overloaded`).
pub const OVERLOADED: Outcome = Outcome::Failed;

pub fn of(result: &Result<(Order, Created), CheckoutError>) -> Option<Outcome> {
    Some(match result {
        Ok((order, _)) if order.state == OrderState::Authorizing => Outcome::Failed,
        Ok(_) => Outcome::Served,
        Err(CheckoutError::PurchaseLimit) => return None,
        Err(CheckoutError::Store(StoreError::UnknownSku(_))) => Outcome::Served,
        Err(CheckoutError::Store(_)) => Outcome::Failed,
        Err(
            CheckoutError::BadRequest(_)
            | CheckoutError::NotFound
            | CheckoutError::Conflict
            | CheckoutError::Mismatch,
        ) => Outcome::Served,
    })
}
