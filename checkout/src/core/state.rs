//! The order and payment state machines: each an enum of states, one table
//! of legal moves and one function that says whether a move is legal.
//!
//! An order is born `reserved` (stock held) or `rejected` (out of stock);
//! every later change is a row of [`TRANSITIONS`] ([`transition_allowed`]).
//! Terminal states have no outgoing row.
//!
//! A payment starts at `none` and moves along [`PAYMENT_STEPS`]; the
//! provider may report a state further along than the last one stored
//! (its events can skip steps we never saw), so the payment's function
//! ([`PaymentState::advances_to`]) allows any state reachable from the
//! current one.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderState {
    Reserved,
    Authorizing,
    Confirmed,
    Declined,
    Cancelled,
    Expired,
    Refunding,
    Refunded,
    Voided,
    Rejected,
}

/// Every legal `(from, to)`. Why each row exists:
/// - reserved: payment starts, the buyer cancels, or the hold times out;
/// - authorizing: the provider answers (captured → confirmed, declined), or
///   an authorization that cannot be completed is voided;
/// - confirmed: a paid order is cancelled, so its money goes back;
/// - refunding: the refund went through.
pub const TRANSITIONS: &[(OrderState, OrderState)] = &[
    (OrderState::Reserved, OrderState::Authorizing),
    (OrderState::Reserved, OrderState::Cancelled),
    (OrderState::Reserved, OrderState::Expired),
    (OrderState::Authorizing, OrderState::Confirmed),
    (OrderState::Authorizing, OrderState::Declined),
    (OrderState::Authorizing, OrderState::Voided),
    (OrderState::Confirmed, OrderState::Refunding),
    (OrderState::Refunding, OrderState::Refunded),
];

/// The one function that says whether an order may move from `from` to `to`.
pub fn transition_allowed(from: OrderState, to: OrderState) -> bool {
    TRANSITIONS.contains(&(from, to))
}

impl OrderState {
    pub const ALL: [OrderState; 10] = [
        OrderState::Reserved,
        OrderState::Authorizing,
        OrderState::Confirmed,
        OrderState::Declined,
        OrderState::Cancelled,
        OrderState::Expired,
        OrderState::Refunding,
        OrderState::Refunded,
        OrderState::Voided,
        OrderState::Rejected,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OrderState::Reserved => "reserved",
            OrderState::Authorizing => "authorizing",
            OrderState::Confirmed => "confirmed",
            OrderState::Declined => "declined",
            OrderState::Cancelled => "cancelled",
            OrderState::Expired => "expired",
            OrderState::Refunding => "refunding",
            OrderState::Refunded => "refunded",
            OrderState::Voided => "voided",
            OrderState::Rejected => "rejected",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == s)
    }

    /// No transition leaves this state.
    pub fn is_terminal(self) -> bool {
        !TRANSITIONS.iter().any(|(from, _)| *from == self)
    }

    /// The outbox event type written when an order enters this state.
    pub fn event_type(self) -> &'static str {
        match self {
            OrderState::Reserved => "order.reserved",
            OrderState::Authorizing => "order.authorizing",
            OrderState::Confirmed => "order.confirmed",
            OrderState::Declined => "order.declined",
            OrderState::Cancelled => "order.cancelled",
            OrderState::Expired => "order.expired",
            OrderState::Refunding => "order.refunding",
            OrderState::Refunded => "order.refunded",
            OrderState::Voided => "order.voided",
            OrderState::Rejected => "order.rejected",
        }
    }
}

impl std::fmt::Display for OrderState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The payment's state, kept apart from the order's (`payment.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PaymentState {
    /// No provider call yet.
    None,
    /// Authorization sent, answer not yet recorded.
    Pending,
    Authorized,
    Captured,
    Declined,
    Voided,
    Refunded,
}

/// Every step of a payment's path. Why each row exists:
/// - none: the authorize attempt is stored (`pending`);
/// - pending: the provider authorizes or declines;
/// - authorized: the money is captured, or the authorization voided;
/// - captured: the money is refunded.
pub const PAYMENT_STEPS: &[(PaymentState, PaymentState)] = &[
    (PaymentState::None, PaymentState::Pending),
    (PaymentState::Pending, PaymentState::Authorized),
    (PaymentState::Pending, PaymentState::Declined),
    (PaymentState::Authorized, PaymentState::Captured),
    (PaymentState::Authorized, PaymentState::Voided),
    (PaymentState::Captured, PaymentState::Refunded),
];

impl PaymentState {
    /// The one function that says whether a payment may move from `self`
    /// to `to`: `to` is one or more [`PAYMENT_STEPS`] ahead.
    pub fn advances_to(self, to: PaymentState) -> bool {
        // The path has no cycle, so this ends within its length.
        PAYMENT_STEPS
            .iter()
            .filter(|(from, _)| *from == self)
            .any(|&(_, next)| next == to || next.advances_to(to))
    }

    pub const ALL: [PaymentState; 7] = [
        PaymentState::None,
        PaymentState::Pending,
        PaymentState::Authorized,
        PaymentState::Captured,
        PaymentState::Declined,
        PaymentState::Voided,
        PaymentState::Refunded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PaymentState::None => "none",
            PaymentState::Pending => "pending",
            PaymentState::Authorized => "authorized",
            PaymentState::Captured => "captured",
            PaymentState::Declined => "declined",
            PaymentState::Voided => "voided",
            PaymentState::Refunded => "refunded",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == s)
    }

    /// Money is (or may be) held or taken: the stock must not be released.
    pub fn holds_money(self) -> bool {
        matches!(
            self,
            PaymentState::Pending | PaymentState::Authorized | PaymentState::Captured
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_payment_pair_against_the_path() {
        use PaymentState::*;
        let legal = [
            (None, Pending),
            (None, Authorized),
            (None, Declined),
            (None, Captured),
            (None, Voided),
            (None, Refunded),
            (Pending, Authorized),
            (Pending, Declined),
            (Pending, Captured),
            (Pending, Voided),
            (Pending, Refunded),
            (Authorized, Captured),
            (Authorized, Voided),
            (Authorized, Refunded),
            (Captured, Refunded),
        ];
        let mut checked = 0;
        for from in PaymentState::ALL {
            for to in PaymentState::ALL {
                assert_eq!(
                    from.advances_to(to),
                    legal.contains(&(from, to)),
                    "{from:?} -> {to:?}"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 49);
    }

    #[test]
    fn every_order_pair_against_the_table() {
        use OrderState::*;
        let legal = [
            (Reserved, Authorizing),
            (Reserved, Cancelled),
            (Reserved, Expired),
            (Authorizing, Confirmed),
            (Authorizing, Declined),
            (Authorizing, Voided),
            (Confirmed, Refunding),
            (Refunding, Refunded),
        ];
        for from in OrderState::ALL {
            for to in OrderState::ALL {
                assert_eq!(
                    transition_allowed(from, to),
                    legal.contains(&(from, to)),
                    "{from} -> {to}"
                );
            }
        }
    }
}
