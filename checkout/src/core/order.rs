//! The order with no store: its fields, the view the contract shows, and
//! its birth (`new_order`, which both back ends call).

use serde::Serialize;

use crate::clock::UnixMs;
use crate::core::request::CheckoutRequest;
use crate::core::state::{OrderState, PaymentState};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    pub order_id: String,
    /// The pass subject that created it; the only one who may see it.
    pub subject: String,
    pub sku: String,
    pub quantity: u32,
    pub payment_method: String,
    pub amount_cents: u64,
    pub state: OrderState,
    pub payment_state: PaymentState,
    pub payment_id: Option<String>,
    pub created_at_ms: UnixMs,
    pub updated_at_ms: UnixMs,
    /// None when no stock was ever held (`rejected`).
    pub reservation_expires_at_ms: Option<UnixMs>,
}

/// The order as the contract shows it (`order_id`, `sku`, `quantity`,
/// `state`, `created_at`, `reservation_expires_at`, `payment.state`); times
/// are Unix seconds. No subject: that names a person's pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrderView {
    pub order_id: String,
    pub sku: String,
    pub quantity: u32,
    pub state: OrderState,
    pub created_at: i64,
    pub reservation_expires_at: Option<i64>,
    pub payment: PaymentView,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PaymentView {
    pub state: PaymentState,
    pub amount_cents: u64,
}

impl Order {
    pub fn view(&self) -> OrderView {
        OrderView {
            order_id: self.order_id.clone(),
            sku: self.sku.clone(),
            quantity: self.quantity,
            state: self.state,
            created_at: self.created_at_ms.div_euclid(1000),
            reservation_expires_at: self.reservation_expires_at_ms.map(|ms| ms.div_euclid(1000)),
            payment: PaymentView {
                state: self.payment_state,
                amount_cents: self.amount_cents,
            },
        }
    }
}

/// A new order for `request` at `price_cents` a unit: `reserved` until
/// `held_until` when stock was held, else `rejected` (out of stock). Both
/// back ends create their orders through it.
pub(crate) fn new_order(
    order_id: String,
    subject: &str,
    request: &CheckoutRequest,
    price_cents: i64,
    held_until: Option<UnixMs>,
    now_ms: UnixMs,
) -> Order {
    Order {
        order_id,
        subject: subject.to_owned(),
        sku: request.sku.clone(),
        quantity: request.quantity,
        payment_method: request.payment_method.clone(),
        amount_cents: u64::try_from(price_cents)
            .unwrap_or(0)
            .saturating_mul(u64::from(request.quantity)),
        state: match held_until {
            Some(_) => OrderState::Reserved,
            None => OrderState::Rejected,
        },
        payment_state: PaymentState::None,
        payment_id: None,
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
        reservation_expires_at_ms: held_until,
    }
}
