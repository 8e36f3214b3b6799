//! The checkout request with no store: its body, what every back end
//! refuses before it touches the store, and the bounds a subject buys
//! within.

use crate::core::idempotency::request_hash;
use crate::error::{CheckoutError, StoreError};
use crate::limits::{ORDER_QUANTITY_MAX, PAYMENT_METHOD_LEN_MAX, SKU_LEN_MAX, SUBJECT_LEN_MAX};

/// The body of `POST /checkout`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct CheckoutRequest {
    pub sku: String,
    pub quantity: u32,
    pub payment_method: String,
}

impl CheckoutRequest {
    /// What every back end refuses before it touches the store: an SKU
    /// that cannot exist, a quantity outside 1 to [`ORDER_QUANTITY_MAX`],
    /// a payment method that is not 1 to [`PAYMENT_METHOD_LEN_MAX`]
    /// visible ASCII characters. The gateway asks first, so such a request
    /// takes no place in the checkout pool.
    pub fn validate(&self) -> Result<(), CheckoutError> {
        validate_sku(&self.sku).map_err(|e| CheckoutError::BadRequest(e.to_string()))?;
        if !(1..=ORDER_QUANTITY_MAX).contains(&self.quantity) {
            return Err(CheckoutError::BadRequest(format!(
                "quantity must be 1 to {ORDER_QUANTITY_MAX}"
            )));
        }
        let method = &self.payment_method;
        if method.is_empty()
            || method.len() > PAYMENT_METHOD_LEN_MAX
            || !method.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(CheckoutError::BadRequest(format!(
                "payment_method must be 1 to {PAYMENT_METHOD_LEN_MAX} visible ASCII characters"
            )));
        }
        Ok(())
    }

    pub(crate) fn hash(&self) -> String {
        request_hash(&[&self.sku, &self.quantity.to_string(), &self.payment_method])
    }
}

/// Whether this call made the order (`201`) or replayed it (`200`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    Created,
    Replay,
}

impl Created {
    pub fn status(self) -> u16 {
        match self {
            Created::Created => 201,
            Created::Replay => 200,
        }
    }
}

/// Bounds one subject (an admission pass) buys within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderLimits {
    /// Orders the subject may create, every state counted: a declined or
    /// sold-out attempt was a checkout too. `0` lets it create none (its
    /// right was withdrawn) while replays of its keys still answer.
    pub orders_per_subject_max: u32,
}

impl OrderLimits {
    /// No bound on orders per subject (library use and tests; the gateway
    /// always passes the room's `max_orders_per_pass`).
    pub const UNLIMITED: OrderLimits = OrderLimits {
        orders_per_subject_max: u32::MAX,
    };
}

/// The orders of one subject, as counted in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SubjectOrders {
    /// Orders created under the subject.
    pub started: u32,
    /// Of those, the ones still `reserved` or `authorizing`.
    pub open: u32,
}

pub(crate) fn validate_subject(subject: &str) -> Result<(), CheckoutError> {
    if subject.is_empty() || subject.len() > SUBJECT_LEN_MAX {
        return Err(CheckoutError::BadRequest(format!(
            "subject must be 1 to {SUBJECT_LEN_MAX} bytes"
        )));
    }
    Ok(())
}

pub(crate) fn validate_sku(sku: &str) -> Result<(), StoreError> {
    if sku.is_empty() || sku.len() > SKU_LEN_MAX || !sku.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(StoreError::InvalidArgument(format!(
            "sku must be 1 to {SKU_LEN_MAX} visible ASCII characters"
        )));
    }
    Ok(())
}
