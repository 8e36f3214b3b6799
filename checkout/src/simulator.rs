//! The in-process payment provider: card-network test cards, provider-level
//! faults from a seeded RNG, and a ledger tests and the load harness read.
//!
//! Test cards (contract): `pm_ok` authorizes, `pm_decline` declines,
//! `pm_lost_response` authorizes but every answer to it is lost (the caller
//! sees a timeout; a look-up finds it), `pm_slow` answers after
//! [`SimConfig::slow_ms`]. Any other method is declined as unknown.
//!
//! Like a real provider it sends each event as it happens: a hook set with
//! [`SimulatedProvider::set_event_hook`] gets every event (the gateway
//! queues it and POSTs it, signed, to its own `/webhooks/simulated`); the
//! event list ([`PaymentProvider::events_since`]) has them all too.
//!
//! Like a real provider it keeps every operation by idempotency key: the
//! same key with the same parameters replays the first answer, with other
//! parameters it is refused (`idempotency_mismatch`). Faults (timeouts —
//! before or after the effect —, 5xx, latency) apply to every call,
//! look-ups and the event list included.
//!
//! Latency and `pm_slow` are the injected [`Sleeper`]'s pause
//! ([`Sleeper::pause`]: a timer when polled on a tokio runtime, as in the
//! gateway's async checkout, so a slow answer holds no thread).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::clock::{Clock, SystemClock};
use crate::core::idempotency::request_hash;
use crate::limits::PROVIDER_EVENTS_PAGE_MAX;
use crate::payment::{
    AuthorizeOutcome, EventPage, OperationOutcome, PaymentError, PaymentProvider, ProviderEvent,
};
use crate::retry::{Sleeper, ThreadSleeper};
use crate::webhook::{EventData, EventType, WebhookEvent};

/// Card-network style test methods (contract).
pub const PM_OK: &str = "pm_ok";
pub const PM_DECLINE: &str = "pm_decline";
pub const PM_LOST_RESPONSE: &str = "pm_lost_response";
pub const PM_SLOW: &str = "pm_slow";

/// Provider-level misbehaviour, changeable at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Faults {
    /// Calls that time out, per thousand; half of them after the effect.
    pub timeout_per_mille: u32,
    /// Calls answered 5xx (no effect), per thousand.
    pub error_5xx_per_mille: u32,
    /// Captures refused (as a real provider may, e.g. an expired
    /// authorization), per thousand.
    pub refuse_capture_per_mille: u32,
    /// Added to every call.
    pub latency_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimConfig {
    pub seed: u64,
    /// How long `pm_slow` takes to answer.
    pub slow_ms: u64,
    pub faults: Faults,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            slow_ms: 3_000,
            faults: Faults::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimPaymentState {
    Authorized,
    Captured,
    Voided,
    Refunded,
}

/// One payment as the provider's ledger holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimPayment {
    pub payment_id: String,
    pub order_id: String,
    pub amount_cents: u64,
    pub state: SimPaymentState,
    /// Times money was captured (the invariant: at most 1).
    pub captures: u32,
    pub refunds: u32,
    pub voids: u32,
}

#[derive(Debug, Default)]
struct Ledger {
    /// Every operation by idempotency key: its parameters' hash and answer.
    operations: HashMap<String, (String, OperationOutcome)>,
    payments: HashMap<String, SimPayment>,
    events: Vec<ProviderEvent>,
    next_id: u64,
    /// Drawn once per provider from the seed, so ids of two runs (a
    /// restart) never collide in the store's event and payment tables.
    run: u32,
}

/// What a roll of the fault dice decided for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Normal,
    /// Times out before anything happened.
    TimeoutBefore,
    /// Does its effect, then times out.
    TimeoutAfter,
    /// 5xx, nothing happened.
    ServerError,
}

/// Called with every event as it is emitted; must not block (it runs
/// under the ledger's lock).
pub type EventHook = Arc<dyn Fn(&WebhookEvent) + Send + Sync>;

pub struct SimulatedProvider {
    ledger: Mutex<Ledger>,
    hook: Mutex<Option<EventHook>>,
    config: Mutex<SimConfig>,
    rng: Mutex<StdRng>,
    clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
}

impl std::fmt::Debug for SimulatedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatedProvider")
            .field("config", &*lock(&self.config))
            .finish_non_exhaustive()
    }
}

impl Default for SimulatedProvider {
    fn default() -> Self {
        Self::new()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SimulatedProvider {
    /// No faults, wall clock, real sleeps.
    pub fn new() -> Self {
        Self::with(
            SimConfig::default(),
            Arc::new(SystemClock),
            Arc::new(ThreadSleeper),
        )
    }

    /// Explicit knobs, clock (event timestamps) and sleeper (latency).
    pub fn with(config: SimConfig, clock: Arc<dyn Clock>, sleeper: Arc<dyn Sleeper>) -> Self {
        Self {
            ledger: Mutex::new(Ledger {
                run: StdRng::seed_from_u64(config.seed ^ 0x05ee_d1d5).random(),
                ..Ledger::default()
            }),
            hook: Mutex::new(None),
            rng: Mutex::new(StdRng::seed_from_u64(config.seed)),
            config: Mutex::new(config),
            clock,
            sleeper,
        }
    }

    /// Every event emitted from now on is also handed to `hook`.
    pub fn set_event_hook(&self, hook: EventHook) {
        *lock(&self.hook) = Some(hook);
    }

    pub fn set_faults(&self, faults: Faults) {
        lock(&self.config).faults = faults;
    }

    pub fn set_slow_ms(&self, slow_ms: u64) {
        lock(&self.config).slow_ms = slow_ms;
    }

    /// How many times `payment_id` was captured (the invariant: at most 1).
    pub fn captures(&self, payment_id: &str) -> u32 {
        lock(&self.ledger)
            .payments
            .get(payment_id)
            .map_or(0, |p| p.captures)
    }

    /// Captures across all payments.
    pub fn total_captures(&self) -> u32 {
        lock(&self.ledger)
            .payments
            .values()
            .map(|p| p.captures)
            .sum()
    }

    /// Every payment, in no particular order.
    pub fn payments(&self) -> Vec<SimPayment> {
        lock(&self.ledger).payments.values().cloned().collect()
    }

    /// The payments made for `order_id`.
    pub fn payments_for_order(&self, order_id: &str) -> Vec<SimPayment> {
        lock(&self.ledger)
            .payments
            .values()
            .filter(|p| p.order_id == order_id)
            .cloned()
            .collect()
    }

    /// Every event the provider emitted (what it would send as webhooks).
    pub fn events(&self) -> Vec<ProviderEvent> {
        lock(&self.ledger).events.clone()
    }

    /// The call's latency (the configured one plus `extra_ms`), then its
    /// fate.
    async fn roll(&self, extra_ms: u64) -> Fate {
        let latency_ms = lock(&self.config).faults.latency_ms;
        let pause = latency_ms.saturating_add(extra_ms);
        if pause > 0 {
            self.sleeper.pause(pause).await;
        }
        let config = *lock(&self.config);
        let dice: u32 = lock(&self.rng).random_range(0..2_000);
        let (timeouts, errors) = (
            config.faults.timeout_per_mille.min(1_000) * 2,
            config.faults.error_5xx_per_mille.min(1_000) * 2,
        );
        if dice < timeouts {
            if dice & 1 == 0 {
                Fate::TimeoutBefore
            } else {
                Fate::TimeoutAfter
            }
        } else if dice < timeouts.saturating_add(errors) {
            Fate::ServerError
        } else {
            Fate::Normal
        }
    }

    fn refuse_capture(&self) -> bool {
        let per_mille = lock(&self.config).faults.refuse_capture_per_mille;
        per_mille > 0 && lock(&self.rng).random_range(0..1_000) < per_mille
    }

    /// Runs one keyed operation with faults: a replay answers what the
    /// first call did; `effect` runs at most once per key.
    async fn keyed(
        &self,
        key: &str,
        params_hash: String,
        extra_ms: u64,
        effect: impl FnOnce(
                &mut Ledger,
                &mut dyn FnMut(&mut Ledger, EventType, &SimPayment),
            ) -> OperationOutcome
            + Send,
    ) -> Result<OperationOutcome, PaymentError> {
        let fate = self.roll(extra_ms).await;
        if matches!(fate, Fate::TimeoutBefore | Fate::ServerError) {
            return Err(PaymentError::Ambiguous);
        }
        let now_s = self.clock.now_ms().div_euclid(1000);
        let hook = lock(&self.hook).clone();
        let mut ledger = lock(&self.ledger);
        let outcome = match ledger.operations.get(key) {
            Some((stored_hash, _)) if *stored_hash != params_hash => {
                return Err(PaymentError::Refused("idempotency_mismatch".into()));
            }
            Some((_, outcome)) => outcome.clone(),
            None => {
                let mut emit =
                    |ledger: &mut Ledger, event_type: EventType, payment: &SimPayment| {
                        ledger.next_id += 1;
                        let seq = ledger.events.len() as u64 + 1;
                        let event = WebhookEvent {
                            id: format!("evt_sim_{:08x}_{}", ledger.run, ledger.next_id),
                            event_type,
                            created: now_s,
                            data: EventData {
                                payment_id: payment.payment_id.clone(),
                                order_id: payment.order_id.clone(),
                                amount_cents: payment.amount_cents,
                            },
                        };
                        if let Some(hook) = &hook {
                            hook(&event);
                        }
                        ledger.events.push(ProviderEvent { seq, event });
                    };
                let outcome = effect(&mut ledger, &mut emit);
                ledger
                    .operations
                    .insert(key.to_owned(), (params_hash, outcome.clone()));
                outcome
            }
        };
        if fate == Fate::TimeoutAfter {
            return Err(PaymentError::Ambiguous);
        }
        Ok(outcome)
    }

    /// Moves a payment between states (capture, void, refund).
    async fn movement(
        &self,
        key: &str,
        payment_id: &str,
        amount_cents: u64,
        op: &'static str,
    ) -> Result<(), PaymentError> {
        let hash = request_hash(&[op, payment_id, &amount_cents.to_string()]);
        let refuse_capture = op == "capture" && self.refuse_capture();
        let outcome = self
            .keyed(key, hash, 0, |ledger, emit| {
                let Some(payment) = ledger.payments.get(payment_id).cloned() else {
                    return failed(format!("no payment {payment_id}"));
                };
                if payment.amount_cents != amount_cents {
                    return failed("amount does not match the authorization".into());
                }
                let (from, to, event) = match op {
                    "capture" => (
                        SimPaymentState::Authorized,
                        SimPaymentState::Captured,
                        EventType::Captured,
                    ),
                    "void" => (
                        SimPaymentState::Authorized,
                        SimPaymentState::Voided,
                        EventType::Voided,
                    ),
                    _ => (
                        SimPaymentState::Captured,
                        SimPaymentState::Refunded,
                        EventType::Refunded,
                    ),
                };
                if payment.state != from {
                    return failed(format!("payment {payment_id} is {:?}", payment.state));
                }
                if refuse_capture {
                    return failed("authorization expired".into());
                }
                let mut moved = payment;
                moved.state = to;
                match to {
                    SimPaymentState::Captured => moved.captures += 1,
                    SimPaymentState::Voided => moved.voids += 1,
                    _ => moved.refunds += 1,
                }
                ledger.payments.insert(payment_id.to_owned(), moved.clone());
                emit(ledger, event, &moved);
                OperationOutcome::Succeeded {
                    payment_id: payment_id.to_owned(),
                }
            })
            .await?;
        match outcome {
            OperationOutcome::Succeeded { .. } => Ok(()),
            OperationOutcome::Declined { reason } | OperationOutcome::Failed { reason } => {
                Err(PaymentError::Refused(reason))
            }
        }
    }
}

fn failed(reason: String) -> OperationOutcome {
    OperationOutcome::Failed { reason }
}

#[async_trait]
impl PaymentProvider for SimulatedProvider {
    fn name(&self) -> &str {
        "simulated"
    }

    async fn authorize(
        &self,
        idempotency_key: &str,
        order_id: &str,
        amount_cents: u64,
        payment_method: &str,
    ) -> Result<AuthorizeOutcome, PaymentError> {
        let hash = request_hash(&[order_id, &amount_cents.to_string(), payment_method]);
        let extra_ms = if payment_method == PM_SLOW {
            lock(&self.config).slow_ms
        } else {
            0
        };
        let outcome = self
            .keyed(idempotency_key, hash, extra_ms, |ledger, emit| {
                ledger.next_id += 1;
                let payment_id = format!("pay_sim_{:08x}_{}", ledger.run, ledger.next_id);
                let payment = SimPayment {
                    payment_id: payment_id.clone(),
                    order_id: order_id.to_owned(),
                    amount_cents,
                    state: SimPaymentState::Authorized,
                    captures: 0,
                    refunds: 0,
                    voids: 0,
                };
                match payment_method {
                    PM_OK | PM_LOST_RESPONSE | PM_SLOW => {
                        ledger.payments.insert(payment_id.clone(), payment.clone());
                        emit(ledger, EventType::Authorized, &payment);
                        OperationOutcome::Succeeded { payment_id }
                    }
                    _ => {
                        emit(ledger, EventType::Declined, &payment);
                        OperationOutcome::Declined {
                            reason: if payment_method == PM_DECLINE {
                                "card_declined".into()
                            } else {
                                "unknown_payment_method".into()
                            },
                        }
                    }
                }
            })
            .await?;
        if payment_method == PM_LOST_RESPONSE {
            return Err(PaymentError::Ambiguous);
        }
        match outcome {
            OperationOutcome::Succeeded { payment_id } => {
                Ok(AuthorizeOutcome::Authorized { payment_id })
            }
            OperationOutcome::Declined { reason } => Ok(AuthorizeOutcome::Declined { reason }),
            OperationOutcome::Failed { reason } => Err(PaymentError::Refused(reason)),
        }
    }

    async fn capture(
        &self,
        key: &str,
        payment_id: &str,
        amount_cents: u64,
    ) -> Result<(), PaymentError> {
        self.movement(key, payment_id, amount_cents, "capture")
            .await
    }

    async fn void(
        &self,
        key: &str,
        payment_id: &str,
        amount_cents: u64,
    ) -> Result<(), PaymentError> {
        self.movement(key, payment_id, amount_cents, "void").await
    }

    async fn refund(
        &self,
        key: &str,
        payment_id: &str,
        amount_cents: u64,
    ) -> Result<(), PaymentError> {
        self.movement(key, payment_id, amount_cents, "refund").await
    }

    async fn lookup(
        &self,
        idempotency_key: &str,
    ) -> Result<Option<OperationOutcome>, PaymentError> {
        if self.roll(0).await != Fate::Normal {
            return Err(PaymentError::Ambiguous);
        }
        Ok(lock(&self.ledger)
            .operations
            .get(idempotency_key)
            .map(|(_, outcome)| outcome.clone()))
    }

    async fn events_since(&self, cursor: u64, limit: usize) -> Result<EventPage, PaymentError> {
        if self.roll(0).await != Fate::Normal {
            return Err(PaymentError::Ambiguous);
        }
        let limit = limit.clamp(1, PROVIDER_EVENTS_PAGE_MAX);
        let ledger = lock(&self.ledger);
        let events: Vec<ProviderEvent> = ledger
            .events
            .iter()
            .filter(|e| e.seq > cursor)
            .take(limit)
            .cloned()
            .collect();
        let next = events.last().map_or(cursor, |e| e.seq);
        Ok(EventPage { events, next })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_client::wait;

    #[test]
    fn the_hook_gets_every_event_as_it_is_emitted() {
        let sim = SimulatedProvider::new();
        let seen: Arc<Mutex<Vec<WebhookEvent>>> = Arc::default();
        let sink = seen.clone();
        sim.set_event_hook(Arc::new(move |e: &WebhookEvent| {
            sink.lock().unwrap().push(e.clone())
        }));
        let AuthorizeOutcome::Authorized { payment_id } =
            wait(sim.authorize("k1", "ord_1", 500, PM_OK)).unwrap()
        else {
            panic!("pm_ok authorizes");
        };
        wait(sim.capture("k2", &payment_id, 500)).unwrap();
        // A replay emits nothing new.
        wait(sim.capture("k2", &payment_id, 500)).unwrap();
        wait(sim.authorize("k3", "ord_2", 700, PM_DECLINE)).unwrap();
        let seen = seen.lock().unwrap();
        let types: Vec<EventType> = seen.iter().map(|e| e.event_type).collect();
        assert_eq!(
            types,
            [
                EventType::Authorized,
                EventType::Captured,
                EventType::Declined
            ]
        );
        assert_eq!(seen[1].data.payment_id, payment_id);
        assert_eq!(seen[2].data.amount_cents, 700);
        assert_eq!(
            sim.events().len(),
            3,
            "the event list holds the same events"
        );
    }
}
