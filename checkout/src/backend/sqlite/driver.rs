//! Driving one payment attempt to a definite outcome, or as far as the
//! retry bound allows, and chaining its follow-ups (authorize → capture →
//! void). Used by the checkout call and by the reconciler.
//!
//! An ambiguous answer (timeout, reset, 5xx) is never read as a decline and
//! never gets a new key: the attempt is looked up first, and sent again
//! only when the provider says it never received it — always with the same
//! key and the stored parameters — with full-jitter backoff between tries.
//! Past the bound the attempt is recorded `timed_out` and the reconciler
//! owns it; the order stays where it is (`authorizing`, stock held).
//! An answer that finds its attempt settled already (a provider event came
//! first) changes nothing, and the drive goes on with the follow-up that
//! event stored (`settle::adopt_follow_up`), so the checkout still ends
//! `confirmed` in the same call.
//!
//! The drive is async ([`Driver::drive_on`]): each write goes straight to
//! the store's writer and is awaited, a read (when the drive was not handed
//! its attempt) goes to the caller's [`Blocking`], the provider calls and
//! the pauses between tries are awaited; [`Driver::drive`] runs it whole on
//! the calling thread.

use std::sync::Arc;

use crate::backend::sqlite::attempt::{self, Attempt, AttemptOutcome, Operation, Transport};
use crate::backend::sqlite::idempotency::ClaimedKey;
use crate::backend::sqlite::order::{self, Order};
use crate::backend::sqlite::settle::{self, FollowUp};
use crate::backend::sqlite::store::Store;
use crate::blocking::{step, Blocking, Inline};
use crate::clock::{Clock, SystemClock, UnixMs};
use crate::error::StoreError;
use crate::http_client::wait;
use crate::limits::PAYMENT_STEPS_MAX;
use crate::metrics::Metrics;
use crate::payment::{send_once, Call, OperationOutcome, PaymentError, PaymentProvider};
use crate::retry::{Jitter, RetryPolicy, Sleeper, ThreadSleeper};

/// How payments are retried and timed. Time and randomness are inputs.
#[derive(Clone)]
pub struct PaymentsConfig {
    pub retry: RetryPolicy,
    pub clock: Arc<dyn Clock>,
    pub sleeper: Arc<dyn Sleeper>,
    pub jitter_seed: u64,
}

impl Default for PaymentsConfig {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::default(),
            clock: Arc::new(SystemClock),
            sleeper: Arc::new(ThreadSleeper),
            // Decorrelates processes; tests pass a fixed seed.
            jitter_seed: uuid::Uuid::new_v4().as_u64_pair().0,
        }
    }
}

impl std::fmt::Debug for PaymentsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaymentsConfig")
            .field("retry", &self.retry)
            .field("jitter_seed", &self.jitter_seed)
            .finish_non_exhaustive()
    }
}

/// What one call could learn about an attempt.
#[derive(Debug)]
pub(crate) enum Learned {
    Definite(OperationOutcome),
    /// Every answer was lost; `error` is the last one.
    Unresolved {
        error: String,
    },
}

/// Where a drive starts.
pub(crate) enum First {
    /// The attempt with this key, read from the store.
    Key(String),
    /// This attempt, as the write that stored it read it back.
    Loaded(Attempt),
}

/// How a drive ended.
pub(crate) struct Driven {
    /// The claimed key was completed by the drive's last write.
    pub(crate) finished: bool,
    /// The order asked for (`show`), as that last write left it.
    pub(crate) order: Option<Order>,
}

impl Driven {
    const UNFINISHED: Driven = Driven {
        finished: false,
        order: None,
    };
}

/// `order_id`'s order read inside a transaction, when one is asked for.
fn shown(tx: &rusqlite::Connection, order_id: Option<&str>) -> Result<Option<Order>, StoreError> {
    match order_id {
        Some(id) => order::load_existing(tx, id).map(Some),
        None => Ok(None),
    }
}

/// The payment side of the checkout service: provider, retries, time.
pub(crate) struct Driver {
    pub(crate) store: Arc<Store>,
    pub(crate) provider: Arc<dyn PaymentProvider>,
    pub(crate) retry: RetryPolicy,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) sleeper: Arc<dyn Sleeper>,
    pub(crate) jitter: Jitter,
}

impl Driver {
    pub(crate) fn new(
        store: Arc<Store>,
        provider: Arc<dyn PaymentProvider>,
        config: PaymentsConfig,
    ) -> Self {
        Self {
            store,
            provider,
            retry: config.retry.clamped(),
            clock: config.clock,
            sleeper: config.sleeper,
            jitter: Jitter::seeded(config.jitter_seed),
        }
    }

    /// Drives `first` and its follow-ups, at most [`PAYMENT_STEPS_MAX`]
    /// steps. `now_ms` is the caller's time; pauses move it forward.
    /// `fresh`: the attempt was stored by this call and not yet sent;
    /// otherwise it may have been sent (a crash, a lost answer) and is
    /// looked up first.
    ///
    /// Each answer is recorded with everything it decides in one durable
    /// write, which also reads back the follow-up it stored (so the next
    /// step starts without a read of its own). `finish`: the checkout's
    /// claimed key, marked complete inside the write that ends the drive
    /// (the last answer, or the lost one the reconciler takes over), so the
    /// end costs no write of its own; `show`: an order read inside that
    /// same write, as it stands after it. [`Driven::finished`] says whether
    /// the key was completed; when not (nothing was left to drive), the
    /// caller completes it itself.
    ///
    /// Each write goes straight to the store's writer and is awaited
    /// ([`Store::write_on`]); a read (only for a [`First::Key`]) runs on
    /// `steps`; the provider calls and the pauses between tries are
    /// awaited, holding no thread.
    pub(crate) async fn drive_on(
        &self,
        steps: &dyn Blocking,
        first: First,
        now_ms: UnixMs,
        fresh: bool,
        finish: Option<&ClaimedKey>,
        show: Option<&str>,
    ) -> Result<Driven, StoreError> {
        let started = self.clock.now_ms();
        let (mut key, mut loaded) = match first {
            First::Key(key) => (key, None),
            First::Loaded(attempt) => (attempt.idempotency_key.clone(), Some(attempt)),
        };
        let mut fresh = fresh;
        for _ in 0..PAYMENT_STEPS_MAX {
            let attempt = match loaded.take() {
                Some(attempt) => attempt,
                None => {
                    let (store, k) = (Arc::clone(&self.store), key.clone());
                    let read = step(steps, move || store.read(|conn| attempt::load(conn, &k)));
                    match read.await?? {
                        Some(attempt) => attempt,
                        None => return Ok(Driven::UNFINISHED),
                    }
                }
            };
            if attempt.outcome != AttemptOutcome::Unknown {
                return Ok(Driven::UNFINISHED);
            }
            let (learned, tries) = self.learn(&attempt, fresh).await;
            // Follow-ups are stored by the settle below, never sent yet.
            fresh = true;
            let at_ms = now_ms.saturating_add(self.clock.now_ms().saturating_sub(started).max(0));
            let ends_key = finish.cloned();
            let show = show.map(str::to_owned);
            let k = key.clone();
            let (next, order) = match learned {
                Learned::Definite(outcome) => {
                    self.store
                        .write_on(steps, move |tx, metrics| {
                            let follow = FollowUp::Driven;
                            let settled_first = attempt::load(tx, &k)?
                                .is_some_and(|a| a.outcome != AttemptOutcome::Unknown);
                            let next = if settled_first {
                                // A webhook got there before our answer: go on
                                // with what it left for the reconciler.
                                settle::adopt_follow_up(tx, &k, at_ms)?
                            } else {
                                settle::settle(tx, metrics, &k, &outcome, tries, at_ms, follow)?
                            };
                            match &next {
                                Some(next_key) => {
                                    Ok::<_, StoreError>((attempt::load(tx, next_key)?, None))
                                }
                                None => {
                                    if let Some(claimed) = &ends_key {
                                        claimed.complete(tx, at_ms)?;
                                    }
                                    Ok((None, shown(tx, show.as_deref())?))
                                }
                            }
                        })
                        .await?
                }
                Learned::Unresolved { error } => {
                    let pause = self.jitter.pause_ms(&self.retry, attempt.tries + tries);
                    let next_at = at_ms.saturating_add(i64::try_from(pause).unwrap_or(i64::MAX));
                    self.store
                        .write_on(steps, move |tx, metrics| {
                            attempt::record_unresolved(
                                tx, metrics, &k, tries, &error, next_at, at_ms,
                            )?;
                            if let Some(claimed) = &ends_key {
                                claimed.complete(tx, at_ms)?;
                            }
                            Ok::<_, StoreError>((None, shown(tx, show.as_deref())?))
                        })
                        .await?
                }
            };
            match next {
                Some(next) => {
                    key = next.idempotency_key.clone();
                    loaded = Some(next);
                }
                None => {
                    return Ok(Driven {
                        finished: finish.is_some(),
                        order,
                    })
                }
            }
        }
        Ok(Driven::UNFINISHED)
    }

    /// [`Driver::drive_on`] with every step on the calling thread, for the
    /// synchronous callers (the reconciler, cancel, `pay`); whether it
    /// completed `finish`.
    pub(crate) fn drive(
        &self,
        key: String,
        now_ms: UnixMs,
        fresh: bool,
        finish: Option<&ClaimedKey>,
    ) -> Result<bool, StoreError> {
        let driven = wait(self.drive_on(&Inline, First::Key(key), now_ms, fresh, finish, None))?;
        Ok(driven.finished)
    }

    /// Tries to learn the attempt's outcome: one send for a fresh attempt,
    /// a look-up first for one that may have been sent, then the same
    /// request again, up to the retry bound. Returns what it learned and
    /// the tries it used.
    async fn learn(&self, attempt: &Attempt, fresh: bool) -> (Learned, u32) {
        if attempt.params_hash != attempt.expected_hash() {
            // Never send other parameters under a stored key, and never
            // guess an outcome: it stays unresolved and the audit flags it.
            let error = "stored parameters do not match their hash".to_owned();
            return (Learned::Unresolved { error }, 0);
        }
        let mut tries = 0;
        let mut look_up_first =
            !fresh || attempt.transport != Transport::Pending || attempt.tries > 0;
        loop {
            if tries > 0 {
                let pause = self.jitter.pause_ms(&self.retry, tries);
                self.sleeper.pause(pause).await;
            }
            tries += 1;
            if look_up_first {
                match self.provider.lookup(&attempt.idempotency_key).await {
                    Ok(Some(outcome)) => return (Learned::Definite(outcome), tries),
                    // Never received: sending it is safe.
                    Ok(None) => {}
                    Err(e) => {
                        self.ambiguous(&e);
                        if tries >= self.retry.tries_max {
                            let error = format!("look-up: {e}");
                            return (Learned::Unresolved { error }, tries);
                        }
                        continue;
                    }
                }
            }
            match self.send(attempt).await {
                Ok(outcome) => return (Learned::Definite(outcome), tries),
                Err(e) => {
                    self.ambiguous(&e);
                    if tries >= self.retry.tries_max {
                        let error = e.to_string();
                        return (Learned::Unresolved { error }, tries);
                    }
                }
            }
            look_up_first = true;
        }
    }

    fn ambiguous(&self, _error: &PaymentError) {
        Metrics::inc(&self.store.metrics().payment_ambiguous);
    }

    /// Sends the attempt's stored parameters once. `Err` only for an
    /// ambiguous answer; a refusal is a definite `Failed`.
    async fn send(&self, attempt: &Attempt) -> Result<OperationOutcome, PaymentError> {
        let key = attempt.idempotency_key.as_str();
        let provider = self.provider.as_ref();
        let started = self.clock.now_ms();
        let call = Call {
            operation: attempt.operation,
            key,
            order_id: &attempt.order_id,
            amount_cents: attempt.amount_cents,
            payment_method: attempt.payment_method.as_deref().unwrap_or(""),
            payment_id: attempt.payment_id.as_deref().unwrap_or(""),
        };
        let answer = send_once(provider, call).await;
        let answer = match answer {
            Err(PaymentError::Refused(reason)) => Ok(match attempt.operation {
                Operation::Authorize => OperationOutcome::Declined { reason },
                _ => OperationOutcome::Failed { reason },
            }),
            other => other,
        };
        if attempt.operation == Operation::Authorize {
            let elapsed = u64::try_from(self.clock.now_ms().saturating_sub(started)).unwrap_or(0);
            let result = match &answer {
                Ok(OperationOutcome::Succeeded { .. }) => "authorized",
                Ok(_) => "declined",
                Err(_) => "ambiguous",
            };
            self.store
                .metrics()
                .auth_latency
                .record(provider.name(), result, elapsed);
        }
        answer
    }
}
