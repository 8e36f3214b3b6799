//! One payment's state machine: which operation is legal in which state.
//!
//! ```text
//! (authorize) ──► authorized ──capture──► captured ──refund──► refunded
//!      │               │
//!      ▼               └──void──► voided
//!   declined
//! ```
//!
//! Every other (state, operation) pair is `409 invalid_state`.

use serde::Serialize;

/// Where a payment stands at the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PaymentStatus {
    Authorized,
    Declined,
    Captured,
    Voided,
    Refunded,
}

/// An operation on an existing payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PaymentOp {
    Capture,
    Void,
    Refund,
}

impl PaymentStatus {
    /// All states, for exhaustive tests.
    pub const ALL: [PaymentStatus; 5] = [
        PaymentStatus::Authorized,
        PaymentStatus::Declined,
        PaymentStatus::Captured,
        PaymentStatus::Voided,
        PaymentStatus::Refunded,
    ];

    /// The state `op` leads to from `self`, or `None` when `op` is illegal here.
    pub fn apply(self, op: PaymentOp) -> Option<PaymentStatus> {
        match (self, op) {
            (PaymentStatus::Authorized, PaymentOp::Capture) => Some(PaymentStatus::Captured),
            (PaymentStatus::Authorized, PaymentOp::Void) => Some(PaymentStatus::Voided),
            (PaymentStatus::Captured, PaymentOp::Refund) => Some(PaymentStatus::Refunded),
            _ => None,
        }
    }

    /// The name used on the wire (`"authorized"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            PaymentStatus::Authorized => "authorized",
            PaymentStatus::Declined => "declined",
            PaymentStatus::Captured => "captured",
            PaymentStatus::Voided => "voided",
            PaymentStatus::Refunded => "refunded",
        }
    }
}

impl PaymentOp {
    /// All operations, for exhaustive tests.
    pub const ALL: [PaymentOp; 3] = [PaymentOp::Capture, PaymentOp::Void, PaymentOp::Refund];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_operation_pair() {
        use PaymentOp::*;
        use PaymentStatus::*;
        let legal = [
            (Authorized, Capture, Captured),
            (Authorized, Void, Voided),
            (Captured, Refund, Refunded),
        ];
        for state in PaymentStatus::ALL {
            for op in PaymentOp::ALL {
                let expected = legal
                    .iter()
                    .find(|(s, o, _)| *s == state && *o == op)
                    .map(|(_, _, to)| *to);
                assert_eq!(state.apply(op), expected, "{state:?} + {op:?}");
            }
        }
    }
}
