//! The provider's books: payments, idempotency records and the event log.
//!
//! Everything here is synchronous and in memory behind one lock held by the
//! API layer, so each operation (check key, check state, change state,
//! append event, store answer) is atomic: two requests with the same key
//! cannot both process. Time comes in as an argument; nothing here reads a
//! clock or touches the network.

use std::collections::HashMap;

use http::StatusCode;
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::Serialize;
use serde_json::{json, Value};

use super::payment::{PaymentOp, PaymentStatus};

/// Longest accepted `order_id`, `currency` or `payment_method`, in bytes.
pub const FIELD_BYTES_MAX: usize = 255;

/// How much the ledger may hold; past any of these, new work is refused with
/// `503 ledger_full` (nothing is ever evicted, so the harness sees it all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub payments_max: usize,
    pub events_max: usize,
    pub idempotency_records_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            payments_max: 100_000,
            events_max: 400_000,
            idempotency_records_max: 400_000,
        }
    }
}

/// Test card numbers, as payment methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentMethod {
    /// Authorizes.
    Ok,
    /// Declines.
    Decline,
    /// Authorizes, but the first answer is never delivered.
    LostResponse,
    /// Authorizes, and the first answer takes `slow_ms`.
    Slow,
}

impl PaymentMethod {
    fn parse(name: &str) -> Option<PaymentMethod> {
        match name {
            "pm_ok" => Some(PaymentMethod::Ok),
            "pm_decline" => Some(PaymentMethod::Decline),
            "pm_lost_response" => Some(PaymentMethod::LostResponse),
            "pm_slow" => Some(PaymentMethod::Slow),
            _ => None,
        }
    }
}

/// The parameters of `POST /v1/authorizations`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizeRequest {
    pub order_id: String,
    pub amount_cents: u64,
    pub currency: String,
    pub payment_method: String,
}

/// The parameters of capture, void and refund.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationRequest {
    /// Required for capture and refund; void accepts and ignores it.
    #[serde(default)]
    pub amount_cents: Option<u64>,
    /// When sent, must be the authorization's currency.
    #[serde(default)]
    pub currency: Option<String>,
}

/// What a key was first used for; a replay must match it exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Params {
    Authorize(AuthorizeRequest),
    Operation {
        op: PaymentOp,
        payment_id: String,
        amount_cents: Option<u64>,
    },
}

/// An HTTP answer as first given; replays give it again.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
}

/// How the answer to a processed request should reach the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    Normal,
    /// Never delivered (`pm_lost_response`, first time only).
    Lost,
    /// Delivered after `slow_ms` (`pm_slow`, first time only).
    Slow,
}

/// The result of a request that the ledger accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct Processed {
    pub answer: Answer,
    pub delivery: Delivery,
    /// Events this request appended (none on a replay).
    pub events: Vec<Event>,
}

/// Refusals that change nothing and are not stored under the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    #[error("{0}")]
    BadRequest(String),
    #[error("no payment {0}")]
    NotFound(String),
    #[error("this Idempotency-Key was used with other parameters")]
    IdempotencyMismatch,
    #[error("the ledger is full ({0})")]
    LedgerFull(&'static str),
}

/// One entry of the event log. `seq` is its place in `/v1/events`; the
/// webhook body is [`EventBody`] alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub seq: u64,
    #[serde(flatten)]
    pub body: EventBody,
}

/// An event as webhooks send it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventBody {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub created: u64,
    pub data: EventData,
}

/// The payment an event is about.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventData {
    pub payment_id: String,
    pub order_id: String,
    pub amount_cents: u64,
}

/// One payment, as `GET /ledger` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Payment {
    pub id: String,
    pub order_id: String,
    pub amount_cents: u64,
    pub currency: String,
    pub status: PaymentStatus,
    /// The provider authorized it (whatever happened after).
    pub authorized: bool,
    pub captures: u32,
    pub refunds: u32,
    pub voided: bool,
}

/// `GET /v1/operations/{key}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OperationView {
    pub key: String,
    /// `authorize`, `capture`, `void` or `refund`.
    pub operation: &'static str,
    /// `authorized`, `declined`, `captured`, `voided`, `refunded`, or
    /// `rejected` when the operation was refused with `409 invalid_state`.
    pub status: &'static str,
    pub payment_id: String,
}

#[derive(Debug)]
struct Record {
    params: Params,
    answer: Answer,
    view: OperationView,
}

/// The books. See the module doc.
#[derive(Debug)]
pub struct Ledger {
    limits: Limits,
    payments: Vec<Payment>,
    payment_index: HashMap<String, usize>,
    records: HashMap<String, Record>,
    events: Vec<Event>,
    rng: StdRng,
}

impl Ledger {
    pub fn new(limits: Limits, seed: u64) -> Ledger {
        Ledger {
            limits,
            payments: Vec::new(),
            payment_index: HashMap::new(),
            records: HashMap::new(),
            events: Vec::new(),
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// `POST /v1/authorizations`: `201` first time, `200` on a replay.
    pub fn authorize(
        &mut self,
        key: &str,
        request: AuthorizeRequest,
        now_unix: u64,
    ) -> Result<Processed, LedgerError> {
        let params = Params::Authorize(request.clone());
        if let Some(replay) = self.replay(key, &params)? {
            return Ok(replay);
        }
        let method = PaymentMethod::parse(&request.payment_method).ok_or_else(|| {
            LedgerError::BadRequest(format!(
                "unknown payment_method {:?}",
                request.payment_method
            ))
        })?;
        check_field("order_id", &request.order_id)?;
        check_field("currency", &request.currency)?;
        if request.amount_cents == 0 {
            return Err(LedgerError::BadRequest(
                "amount_cents must be positive".into(),
            ));
        }
        self.check_room(1)?;

        let id = format!(
            "pay_{:08x}{:08x}",
            self.rng.random::<u32>(),
            self.payments.len()
        );
        let status = if method == PaymentMethod::Decline {
            PaymentStatus::Declined
        } else {
            PaymentStatus::Authorized
        };
        let payment = Payment {
            id: id.clone(),
            order_id: request.order_id.clone(),
            amount_cents: request.amount_cents,
            currency: request.currency.clone(),
            status,
            authorized: status == PaymentStatus::Authorized,
            captures: 0,
            refunds: 0,
            voided: false,
        };
        self.payment_index.insert(id.clone(), self.payments.len());
        self.payments.push(payment);
        let event = self.append_event(
            status,
            &id,
            &request.order_id,
            request.amount_cents,
            now_unix,
        );
        let answer = Answer {
            status: StatusCode::CREATED,
            body: json!({
                "id": id,
                "status": status.as_str(),
                "order_id": request.order_id,
                "amount_cents": request.amount_cents,
            }),
        };
        self.store(
            key,
            params,
            answer.clone(),
            "authorize",
            status.as_str(),
            &id,
        );
        let delivery = match method {
            PaymentMethod::LostResponse => Delivery::Lost,
            PaymentMethod::Slow => Delivery::Slow,
            PaymentMethod::Ok | PaymentMethod::Decline => Delivery::Normal,
        };
        Ok(Processed {
            answer,
            delivery,
            events: vec![event],
        })
    }

    /// Capture, void or refund `payment_id`.
    pub fn operate(
        &mut self,
        key: &str,
        op: PaymentOp,
        payment_id: &str,
        request: OperationRequest,
        now_unix: u64,
    ) -> Result<Processed, LedgerError> {
        let params = Params::Operation {
            op,
            payment_id: payment_id.to_owned(),
            amount_cents: request.amount_cents,
        };
        if let Some(replay) = self.replay(key, &params)? {
            return Ok(replay);
        }
        let index = *self
            .payment_index
            .get(payment_id)
            .ok_or_else(|| LedgerError::NotFound(payment_id.to_owned()))?;
        let authorized_cents = self.payments[index].amount_cents;
        if let Some(currency) = &request.currency {
            if *currency != self.payments[index].currency {
                return Err(LedgerError::BadRequest(format!(
                    "currency must be the authorization's, {}",
                    self.payments[index].currency
                )));
            }
        }
        let amount_cents = match (op, request.amount_cents) {
            (PaymentOp::Void, amount) => amount.unwrap_or(authorized_cents),
            (_, None) => {
                return Err(LedgerError::BadRequest("amount_cents is required".into()));
            }
            (_, Some(amount)) if amount == 0 || amount > authorized_cents => {
                return Err(LedgerError::BadRequest(format!(
                    "amount_cents must be between 1 and {authorized_cents}"
                )));
            }
            (_, Some(amount)) => amount,
        };
        self.check_room(0)?;

        let payment = &mut self.payments[index];
        let Some(next) = payment.status.apply(op) else {
            let answer = Answer {
                status: StatusCode::CONFLICT,
                body: json!({
                    "error": "invalid_state",
                    "message": format!(
                        "cannot {} a payment that is {}",
                        op_name(op),
                        payment.status.as_str()
                    ),
                }),
            };
            self.store(
                key,
                params,
                answer.clone(),
                op_name(op),
                "rejected",
                payment_id,
            );
            return Ok(Processed {
                answer,
                delivery: Delivery::Normal,
                events: Vec::new(),
            });
        };
        payment.status = next;
        match op {
            PaymentOp::Capture => payment.captures += 1,
            PaymentOp::Void => payment.voided = true,
            PaymentOp::Refund => payment.refunds += 1,
        }
        let order_id = payment.order_id.clone();
        let event = self.append_event(next, payment_id, &order_id, amount_cents, now_unix);
        let answer = Answer {
            status: StatusCode::OK,
            body: json!({ "id": payment_id, "status": next.as_str() }),
        };
        self.store(
            key,
            params,
            answer.clone(),
            op_name(op),
            next.as_str(),
            payment_id,
        );
        Ok(Processed {
            answer,
            delivery: Delivery::Normal,
            events: vec![event],
        })
    }

    /// `GET /v1/operations/{key}`.
    pub fn operation(&self, key: &str) -> Option<OperationView> {
        self.records.get(key).map(|record| record.view.clone())
    }

    /// `GET /v1/events`: up to `limit` events with `seq > after`, in order.
    pub fn events_after(&self, after: u64, limit: usize) -> &[Event] {
        let start = usize::try_from(after)
            .unwrap_or(usize::MAX)
            .min(self.events.len());
        let end = start.saturating_add(limit).min(self.events.len());
        &self.events[start..end]
    }

    /// `GET /ledger`: every payment, oldest first.
    pub fn payments(&self) -> &[Payment] {
        &self.payments
    }

    fn replay(&self, key: &str, params: &Params) -> Result<Option<Processed>, LedgerError> {
        let Some(record) = self.records.get(key) else {
            return Ok(None);
        };
        if record.params != *params {
            return Err(LedgerError::IdempotencyMismatch);
        }
        let mut answer = record.answer.clone();
        if answer.status == StatusCode::CREATED {
            answer.status = StatusCode::OK;
        }
        Ok(Some(Processed {
            answer,
            delivery: Delivery::Normal,
            events: Vec::new(),
        }))
    }

    /// Refuses new work that would take the ledger past a limit.
    fn check_room(&self, new_payments: usize) -> Result<(), LedgerError> {
        if self.payments.len() + new_payments > self.limits.payments_max {
            return Err(LedgerError::LedgerFull("payments_max"));
        }
        if self.events.len() >= self.limits.events_max {
            return Err(LedgerError::LedgerFull("events_max"));
        }
        if self.records.len() >= self.limits.idempotency_records_max {
            return Err(LedgerError::LedgerFull("idempotency_records_max"));
        }
        Ok(())
    }

    fn append_event(
        &mut self,
        status: PaymentStatus,
        payment_id: &str,
        order_id: &str,
        amount_cents: u64,
        now_unix: u64,
    ) -> Event {
        let seq = self.events.len() as u64 + 1;
        let event = Event {
            seq,
            body: EventBody {
                id: format!("evt_{:08x}{seq:08x}", self.rng.random::<u32>()),
                kind: format!("payment.{}", status.as_str()),
                created: now_unix,
                data: EventData {
                    payment_id: payment_id.to_owned(),
                    order_id: order_id.to_owned(),
                    amount_cents,
                },
            },
        };
        self.events.push(event.clone());
        debug_assert_eq!(self.events.len() as u64, seq);
        event
    }

    fn store(
        &mut self,
        key: &str,
        params: Params,
        answer: Answer,
        operation: &'static str,
        status: &'static str,
        payment_id: &str,
    ) {
        let view = OperationView {
            key: key.to_owned(),
            operation,
            status,
            payment_id: payment_id.to_owned(),
        };
        let previous = self.records.insert(
            key.to_owned(),
            Record {
                params,
                answer,
                view,
            },
        );
        debug_assert!(previous.is_none(), "a key is stored once");
    }
}

fn op_name(op: PaymentOp) -> &'static str {
    match op {
        PaymentOp::Capture => "capture",
        PaymentOp::Void => "void",
        PaymentOp::Refund => "refund",
    }
}

fn check_field(name: &str, value: &str) -> Result<(), LedgerError> {
    if value.is_empty() || value.len() > FIELD_BYTES_MAX {
        return Err(LedgerError::BadRequest(format!(
            "{name} must be 1 to {FIELD_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_UNIX: u64 = 1_800_000_000;

    fn auth(order: &str, method: &str) -> AuthorizeRequest {
        AuthorizeRequest {
            order_id: order.into(),
            amount_cents: 1_000,
            currency: "EUR".into(),
            payment_method: method.into(),
        }
    }

    fn amount(cents: u64) -> OperationRequest {
        OperationRequest {
            currency: None,
            amount_cents: Some(cents),
        }
    }

    #[test]
    fn replay_gives_the_first_answer_and_no_new_event() {
        let mut ledger = Ledger::new(Limits::default(), 1);
        let first = ledger
            .authorize("k1", auth("o1", "pm_ok"), NOW_UNIX)
            .unwrap();
        assert_eq!(first.answer.status, StatusCode::CREATED);
        assert_eq!(first.events.len(), 1);
        let again = ledger
            .authorize("k1", auth("o1", "pm_ok"), NOW_UNIX)
            .unwrap();
        assert_eq!(again.answer.status, StatusCode::OK);
        assert_eq!(again.answer.body, first.answer.body);
        assert!(again.events.is_empty());
        assert_eq!(
            ledger.authorize("k1", auth("o2", "pm_ok"), NOW_UNIX),
            Err(LedgerError::IdempotencyMismatch)
        );
        assert_eq!(ledger.payments().len(), 1);
        assert_eq!(ledger.events_after(0, 10).len(), 1);
    }

    #[test]
    fn a_capture_in_another_currency_is_refused() {
        let mut ledger = Ledger::new(Limits::default(), 1);
        let id = ledger
            .authorize("k1", auth("o1", "pm_ok"), NOW_UNIX)
            .unwrap()
            .answer
            .body["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let in_brl = OperationRequest {
            currency: Some("BRL".into()),
            amount_cents: Some(1_000),
        };
        assert!(matches!(
            ledger.operate("k2", PaymentOp::Capture, &id, in_brl, NOW_UNIX),
            Err(LedgerError::BadRequest(_))
        ));
        let in_eur = OperationRequest {
            currency: Some("EUR".into()),
            amount_cents: Some(1_000),
        };
        let captured = ledger
            .operate("k3", PaymentOp::Capture, &id, in_eur, NOW_UNIX)
            .unwrap();
        assert_eq!(captured.answer.status, StatusCode::OK);
    }

    #[test]
    fn a_key_used_for_another_operation_is_a_mismatch() {
        let mut ledger = Ledger::new(Limits::default(), 1);
        let id = ledger
            .authorize("k1", auth("o1", "pm_ok"), NOW_UNIX)
            .unwrap()
            .answer
            .body["id"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            ledger.operate("k1", PaymentOp::Capture, &id, amount(1_000), NOW_UNIX),
            Err(LedgerError::IdempotencyMismatch)
        );
    }

    #[test]
    fn a_refused_operation_is_stored_and_replayed() {
        let mut ledger = Ledger::new(Limits::default(), 1);
        let id = ledger
            .authorize("k1", auth("o1", "pm_decline"), NOW_UNIX)
            .unwrap()
            .answer
            .body["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let refused = ledger
            .operate("k2", PaymentOp::Capture, &id, amount(1_000), NOW_UNIX)
            .unwrap();
        assert_eq!(refused.answer.status, StatusCode::CONFLICT);
        assert_eq!(ledger.operation("k2").unwrap().status, "rejected");
        let again = ledger
            .operate("k2", PaymentOp::Capture, &id, amount(1_000), NOW_UNIX)
            .unwrap();
        assert_eq!(again.answer, refused.answer);
    }

    #[test]
    fn limits_refuse_new_work() {
        let limits = Limits {
            payments_max: 1,
            ..Limits::default()
        };
        let mut ledger = Ledger::new(limits, 1);
        ledger
            .authorize("k1", auth("o1", "pm_ok"), NOW_UNIX)
            .unwrap();
        assert_eq!(
            ledger.authorize("k2", auth("o2", "pm_ok"), NOW_UNIX),
            Err(LedgerError::LedgerFull("payments_max"))
        );
        assert!(ledger.operation("k2").is_none());
    }
}
