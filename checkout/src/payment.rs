//! The payment provider seam and the in-process simulator.
//!
//! The trait is synchronous on purpose: the checkout runs on a blocking
//! thread (SQLite is synchronous), and each call must be finished — or known
//! to be ambiguous — before the next durable step is written. Every call
//! carries an idempotency key derived from (order, operation), so a retry
//! after an ambiguous answer can never charge twice.

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthorizeOutcome {
    Authorized { payment_id: String },
    Declined { reason: String },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PaymentError {
    /// The request may or may not have taken effect (timeout, reset, 5xx).
    /// Never read as a decline.
    #[error("payment provider answer was lost")]
    Ambiguous,
    /// The provider refused the operation (e.g. capture of a voided payment).
    #[error("payment provider refused: {0}")]
    Refused(String),
}

pub trait PaymentProvider: Send + Sync {
    fn authorize(
        &self,
        idempotency_key: &str,
        order_id: &str,
        amount_cents: u64,
        payment_method: &str,
    ) -> Result<AuthorizeOutcome, PaymentError>;
    fn capture(&self, idempotency_key: &str, payment_id: &str) -> Result<(), PaymentError>;
    fn void(&self, idempotency_key: &str, payment_id: &str) -> Result<(), PaymentError>;
    fn refund(&self, idempotency_key: &str, payment_id: &str) -> Result<(), PaymentError>;
}

/// Card-network style test methods (contract).
pub const PM_OK: &str = "pm_ok";
pub const PM_DECLINE: &str = "pm_decline";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SimPaymentState {
    Authorized,
    Captured,
    Voided,
    Refunded,
}

#[derive(Debug, Default)]
struct Ledger {
    /// Authorization answers by idempotency key, replayed on retry.
    authorizations: HashMap<String, AuthorizeOutcome>,
    payments: HashMap<String, SimPaymentState>,
    captures: HashMap<String, u32>,
    next_id: u64,
}

/// The in-process provider: `pm_ok` authorizes and captures, `pm_decline`
/// declines; any other method is declined as unknown. `pm_lost_response`
/// and `pm_slow` come with the payments issue. It keeps a ledger tests read.
#[derive(Debug, Default)]
pub struct SimulatedProvider {
    ledger: Mutex<Ledger>,
}

impl SimulatedProvider {
    pub fn new() -> Self {
        Self::default()
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many times `payment_id` was captured (the invariant: at most 1).
    pub fn captures(&self, payment_id: &str) -> u32 {
        self.ledger().captures.get(payment_id).copied().unwrap_or(0)
    }

    /// Captures across all payments.
    pub fn total_captures(&self) -> u32 {
        self.ledger().captures.values().sum()
    }

    fn moved(
        &self,
        payment_id: &str,
        from: &[SimPaymentState],
        to: SimPaymentState,
    ) -> Result<(), PaymentError> {
        let mut ledger = self.ledger();
        let Some(state) = ledger.payments.get(payment_id).copied() else {
            return Err(PaymentError::Refused(format!("no payment {payment_id}")));
        };
        if state == to {
            // Retried with the same key: the provider replays success.
            return Ok(());
        }
        if !from.contains(&state) {
            return Err(PaymentError::Refused(format!(
                "payment {payment_id} is {state:?}"
            )));
        }
        ledger.payments.insert(payment_id.to_owned(), to);
        if to == SimPaymentState::Captured {
            *ledger.captures.entry(payment_id.to_owned()).or_default() += 1;
        }
        Ok(())
    }
}

impl PaymentProvider for SimulatedProvider {
    fn authorize(
        &self,
        idempotency_key: &str,
        _order_id: &str,
        _amount_cents: u64,
        payment_method: &str,
    ) -> Result<AuthorizeOutcome, PaymentError> {
        let mut ledger = self.ledger();
        if let Some(previous) = ledger.authorizations.get(idempotency_key) {
            return Ok(previous.clone());
        }
        let outcome = match payment_method {
            PM_OK => {
                ledger.next_id += 1;
                let payment_id = format!("pay_sim_{}", ledger.next_id);
                ledger
                    .payments
                    .insert(payment_id.clone(), SimPaymentState::Authorized);
                AuthorizeOutcome::Authorized { payment_id }
            }
            PM_DECLINE => AuthorizeOutcome::Declined {
                reason: "card_declined".into(),
            },
            _ => AuthorizeOutcome::Declined {
                reason: "unknown_payment_method".into(),
            },
        };
        ledger
            .authorizations
            .insert(idempotency_key.to_owned(), outcome.clone());
        Ok(outcome)
    }

    fn capture(&self, _idempotency_key: &str, payment_id: &str) -> Result<(), PaymentError> {
        self.moved(
            payment_id,
            &[SimPaymentState::Authorized],
            SimPaymentState::Captured,
        )
    }

    fn void(&self, _idempotency_key: &str, payment_id: &str) -> Result<(), PaymentError> {
        self.moved(
            payment_id,
            &[SimPaymentState::Authorized],
            SimPaymentState::Voided,
        )
    }

    fn refund(&self, _idempotency_key: &str, payment_id: &str) -> Result<(), PaymentError> {
        self.moved(
            payment_id,
            &[SimPaymentState::Captured],
            SimPaymentState::Refunded,
        )
    }
}
