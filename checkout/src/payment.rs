//! The payment provider seam: one trait that every provider adapter
//! implements (the in-process [`crate::simulator::SimulatedProvider`], the
//! [`crate::http_provider::HttpProvider`] for a card-provider-shaped HTTP API).
//!
//! The calls are async: the HTTP adapter's are futures on the workspace's
//! one HTTP client ([`crate::http_client`]), awaitable from any executor.
//! The checkout drivers are synchronous (their store steps are), run on a
//! blocking thread and wait for each call there
//! ([`crate::http_client::wait`]): each call must be finished — or known
//! to be ambiguous — before the next durable step is written. Every call
//! carries an idempotency key derived from (order, operation) (see
//! [`crate::backend::sqlite::attempt`]), so a retry after an ambiguous answer never charges
//! twice.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::core::attempt::Operation;
use crate::core::event::WebhookEvent;

/// The provider's answer to an authorization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthorizeOutcome {
    Authorized { payment_id: String },
    Declined { reason: String },
}

/// What the provider says became of one operation (answer or look-up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperationOutcome {
    /// It took effect; `payment_id` names the payment it touched.
    Succeeded { payment_id: String },
    /// An authorization the card network refused.
    Declined { reason: String },
    /// The provider definitely refused the operation (e.g. capture of a
    /// voided payment): nothing happened.
    Failed { reason: String },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PaymentError {
    /// The request may or may not have taken effect (timeout, reset, 5xx).
    /// Never read as a decline and never answered with a new key: look the
    /// attempt up, then retry it with the same key and parameters.
    #[error("payment provider answer was lost")]
    Ambiguous,
    /// The provider definitely refused the operation; nothing happened.
    #[error("payment provider refused: {0}")]
    Refused(String),
}

/// One event of the provider's event list, with its place in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderEvent {
    pub seq: u64,
    #[serde(flatten)]
    pub event: WebhookEvent,
}

/// A page of the provider's event list: events after the cursor asked
/// for, and the cursor to ask with next.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EventPage {
    pub events: Vec<ProviderEvent>,
    pub next: u64,
}

#[async_trait]
pub trait PaymentProvider: Send + Sync {
    /// A short name for metrics labels (`sluice_payment_auth_seconds{provider}`).
    fn name(&self) -> &str;
    async fn authorize(
        &self,
        idempotency_key: &str,
        order_id: &str,
        amount_cents: u64,
        payment_method: &str,
    ) -> Result<AuthorizeOutcome, PaymentError>;
    async fn capture(
        &self,
        idempotency_key: &str,
        payment_id: &str,
        amount_cents: u64,
    ) -> Result<(), PaymentError>;
    async fn void(
        &self,
        idempotency_key: &str,
        payment_id: &str,
        amount_cents: u64,
    ) -> Result<(), PaymentError>;
    async fn refund(
        &self,
        idempotency_key: &str,
        payment_id: &str,
        amount_cents: u64,
    ) -> Result<(), PaymentError>;
    /// What became of the operation sent with `idempotency_key`; `None`
    /// when the provider never received it (safe to send again).
    async fn lookup(&self, idempotency_key: &str)
        -> Result<Option<OperationOutcome>, PaymentError>;
    /// Events after `cursor`, at most `limit`, oldest first.
    async fn events_since(&self, cursor: u64, limit: usize) -> Result<EventPage, PaymentError>;
}

/// One provider operation with its stored parameters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call<'a> {
    pub operation: Operation,
    pub key: &'a str,
    pub order_id: &'a str,
    pub amount_cents: u64,
    /// An authorization's; empty for the others.
    pub payment_method: &'a str,
    /// The payment a capture, void or refund moves; empty for an
    /// authorization.
    pub payment_id: &'a str,
}

/// Sends `call` once; its answer as an outcome (`Err`: ambiguous, or
/// refused — the callers read a refusal per operation).
pub(crate) async fn send_once(
    provider: &dyn PaymentProvider,
    call: Call<'_>,
) -> Result<OperationOutcome, PaymentError> {
    let (key, amount, payment_id) = (call.key, call.amount_cents, call.payment_id);
    let moved = match call.operation {
        Operation::Authorize => {
            let authorized = provider
                .authorize(key, call.order_id, amount, call.payment_method)
                .await?;
            return Ok(match authorized {
                AuthorizeOutcome::Authorized { payment_id } => {
                    OperationOutcome::Succeeded { payment_id }
                }
                AuthorizeOutcome::Declined { reason } => OperationOutcome::Declined { reason },
            });
        }
        Operation::Capture => provider.capture(key, payment_id, amount).await,
        Operation::Void => provider.void(key, payment_id, amount).await,
        Operation::Refund => provider.refund(key, payment_id, amount).await,
    };
    moved.map(|()| OperationOutcome::Succeeded {
        payment_id: payment_id.to_owned(),
    })
}
