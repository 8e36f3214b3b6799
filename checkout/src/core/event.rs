//! Provider events with no store: the event a webhook (or the provider's
//! event list) carries, what applying one did, and how it relates to the
//! payment as stored ([`fit`], the decision both back ends apply: "the
//! most advanced state wins").

use serde::{Deserialize, Serialize};

use crate::core::attempt::Operation;
use crate::core::state::PaymentState;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    #[serde(rename = "payment.authorized")]
    Authorized,
    #[serde(rename = "payment.declined")]
    Declined,
    #[serde(rename = "payment.captured")]
    Captured,
    #[serde(rename = "payment.voided")]
    Voided,
    #[serde(rename = "payment.refunded")]
    Refunded,
}

impl EventType {
    pub const ALL: [EventType; 5] = [
        EventType::Authorized,
        EventType::Declined,
        EventType::Captured,
        EventType::Voided,
        EventType::Refunded,
    ];

    /// The payment state the event says the payment is in.
    pub fn payment_state(self) -> PaymentState {
        match self {
            EventType::Authorized => PaymentState::Authorized,
            EventType::Declined => PaymentState::Declined,
            EventType::Captured => PaymentState::Captured,
            EventType::Voided => PaymentState::Voided,
            EventType::Refunded => PaymentState::Refunded,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Authorized => "payment.authorized",
            EventType::Declined => "payment.declined",
            EventType::Captured => "payment.captured",
            EventType::Voided => "payment.voided",
            EventType::Refunded => "payment.refunded",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventData {
    pub payment_id: String,
    pub order_id: String,
    pub amount_cents: u64,
}

/// `{"id":"evt_…","type":"payment.…","created":<unix>,"data":{…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookEvent {
    pub id: String,
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// Unix seconds.
    pub created: i64,
    pub data: EventData,
}

/// What applying one event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookOutcome {
    /// The event moved the payment (and maybe the order) forward, or
    /// scheduled a compensation for money with no live order.
    Processed,
    /// This event id was applied before; nothing changed.
    Duplicate,
    /// The payment is already at or past what the event says.
    Stale,
    /// The event contradicts what is stored (e.g. voided after captured,
    /// another amount); refused, counted, nothing changed.
    RejectedTransition,
}

impl WebhookOutcome {
    /// The `result` label of `sluice_webhook_events_total`.
    pub fn result(self) -> &'static str {
        match self {
            WebhookOutcome::Processed => "processed",
            WebhookOutcome::Duplicate => "duplicate",
            WebhookOutcome::Stale => "stale",
            WebhookOutcome::RejectedTransition => "rejected_transition",
        }
    }
}

/// How a provider event relates to the payment as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Move forward to the event's state.
    Advance,
    /// Already there or past it.
    Stale,
    /// Contradicts what is stored.
    Reject,
    /// Money for an order whose payment was declined.
    Orphan(Operation),
}

/// The decision, as a plain function (both back ends apply it), read off
/// the payment state machine ([`PaymentState::advances_to`]): an event
/// the payment can still reach is applied, one it is at or past is stale,
/// money for a declined payment is given back, anything else contradicts
/// what is stored.
pub fn fit(current: PaymentState, event: EventType) -> Fit {
    let to = event.payment_state();
    if current.advances_to(to) {
        return Fit::Advance;
    }
    if current == to || to.advances_to(current) {
        return Fit::Stale;
    }
    match (current, event) {
        (PaymentState::Declined, EventType::Authorized) => Fit::Orphan(Operation::Void),
        (PaymentState::Declined, EventType::Captured) => Fit::Orphan(Operation::Refund),
        _ => Fit::Reject,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table `fit` was written as before it was read off the state
    /// machine: every pair must still come out the same.
    fn table(current: PaymentState, event: EventType) -> Fit {
        use EventType as E;
        use PaymentState as P;
        match (current, event) {
            (P::None | P::Pending, _) => Fit::Advance,
            (P::Authorized, E::Captured | E::Voided | E::Refunded) => Fit::Advance,
            (P::Authorized, E::Authorized) => Fit::Stale,
            (P::Captured, E::Refunded) => Fit::Advance,
            (P::Captured, E::Authorized | E::Captured) => Fit::Stale,
            (P::Refunded, E::Authorized | E::Captured | E::Refunded) => Fit::Stale,
            (P::Voided, E::Authorized | E::Voided) => Fit::Stale,
            (P::Declined, E::Declined) => Fit::Stale,
            (P::Declined, E::Authorized) => Fit::Orphan(Operation::Void),
            (P::Declined, E::Captured) => Fit::Orphan(Operation::Refund),
            _ => Fit::Reject,
        }
    }

    #[test]
    fn every_payment_state_and_event_fits_as_the_table_says() {
        let mut checked = 0;
        for current in PaymentState::ALL {
            for event in EventType::ALL {
                assert_eq!(
                    fit(current, event),
                    table(current, event),
                    "{current:?} {event:?}"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 35);
    }
}
