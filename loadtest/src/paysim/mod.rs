//! `paysim`: a payment provider over HTTP that misbehaves on purpose.
//!
//! It speaks a card-provider-shaped JSON API (authorize with an
//! `Idempotency-Key`, capture, void, refund, look up by key, list events),
//! sends signed webhooks, and injects the faults a real provider's network
//! has: timeouts after processing, 503s before and after processing, resets,
//! latency, lost and slow answers, duplicated, reordered, delayed and lost
//! webhooks. Every random choice comes from one seed. The harness reads the
//! provider's books at `GET /ledger` and turns knobs at `PUT /admin/faults`.
//!
//! Map:
//! - [`payment`]: one payment's state machine.
//! - [`ledger`]: payments, idempotency records, the event log; limits.
//! - [`faults`]: the knobs and the per-request fault draw.
//! - [`hold`]: capture answers held while `hold_captures` is on.
//! - [`workers`]: the provider's capacity (`workers` requests served at once).
//! - [`webhook`]: signing, the delivery schedule and the sender.
//! - [`api`]: routes; network faults applied around `/v1`.
//! - [`conn`]: the accept loop whose connections a handler can cut.
//! - [`background`]: a simulator on its own thread, for tests.
//!
//! State is in memory only; a restart starts with empty books.
//!
//! # API
//!
//! Errors are `{"error": code, "message": text}`.
//!
//! | route | answers |
//! | --- | --- |
//! | `POST /v1/authorizations` + `Idempotency-Key`, `{"order_id","amount_cents","currency","payment_method"}` | `201 {"id":"pay_…","status":"authorized"\|"declined","order_id","amount_cents"}`; same key and body: `200`, same JSON; same key, other body: `422 idempotency_mismatch` |
//! | `POST /v1/authorizations/{id}/capture\|void\|refund` + `Idempotency-Key`, `{"amount_cents","currency"?}` (a currency other than the authorization's: `400`) | `200 {"id","status"}`; illegal in this state: `409 invalid_state`; unknown id: `404 not_found`; same key: the first answer again (a `409` too) |
//! | `GET /v1/operations/{key}` | `200 {"key","operation","status","payment_id"}` (`status` is `rejected` for a `409`), `404` if never received |
//! | `GET /v1/events?after=<seq>&limit=<n>` | `{"events":[{"seq","id","type","created","data":{"payment_id","order_id","amount_cents"}}],"next"}` |
//! | `GET /ledger` | `{"payments":[{"id","order_id","amount_cents","currency","status","authorized","captures","refunds","voided"}]}` |
//! | `GET`/`PUT /admin/faults` | the [`Faults`] JSON; `PUT` replaces all knobs (missing ones reset), `400` if invalid |
//! | `GET /admin/webhooks` | [`WebhookStats`] |
//! | `GET /admin/held` | [`HeldStats`]: capture answers held by `hold_captures`, now and ever |
//! | `GET /healthz` | `{"status":"ok"}` |
//!
//! Other answers: `400 bad_request` (missing or invalid key, bad JSON,
//! unknown payment method, amount not in `1..=authorized`), `503
//! ledger_full` past a [`Limits`] value, `503 unavailable` (injected).
//! Network faults, latency and the `workers` capacity (requests beyond
//! it wait in line, first come first served; `503 unavailable` past
//! [`workers::WAITING_MAX`] waiting) apply to `/v1` only; the harness routes
//! are always answered at once.
//!
//! Test cards: `pm_ok` authorizes, `pm_decline` declines,
//! `pm_lost_response` authorizes and never answers the first request
//! (held `timeout_hold_ms`, then closed), `pm_slow` answers the first
//! request after `slow_ms`. Replays of either answer at once.

pub mod api;
pub mod background;
pub mod conn;
pub mod faults;
pub mod hold;
pub mod ledger;
pub mod payment;
pub mod webhook;
pub mod workers;

use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};

use rand::{rngs::StdRng, SeedableRng};
use tokio::net::TcpListener;

pub use background::{Background, Bound};
pub use faults::{Faults, FaultsError, NetworkFault};
pub use hold::HeldStats;
pub use ledger::{Event, Ledger, Limits};
pub use webhook::{WebhookStats, WebhookTarget};

/// Everything a simulator needs to start.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Seeds every random choice (faults, ids, webhook chaos).
    pub seed: u64,
    pub faults: Faults,
    pub limits: Limits,
    /// `None`: no webhooks are sent (events are still listed).
    pub webhook: Option<WebhookTarget>,
}

/// The shared state behind every route.
#[derive(Debug)]
pub struct Sim {
    ledger: Mutex<Ledger>,
    faults: Arc<RwLock<Faults>>,
    network_rng: Mutex<StdRng>,
    webhooks: Option<Arc<webhook::Webhooks>>,
    holds: hold::Holds,
    workers: Arc<workers::Workers>,
}

/// Streams of the seed, so that turning one knob does not shift the
/// random numbers another part draws.
const LEDGER_STREAM: u64 = 0x6c65_6467_6572;
const NETWORK_STREAM: u64 = 0x6e65_7477_6f72;
const WEBHOOK_STREAM: u64 = 0x7765_6268_6f6f;

impl Sim {
    /// Builds the state; fails when the knobs are invalid.
    pub fn new(config: Config) -> anyhow::Result<Sim> {
        config.faults.validate()?;
        let webhooks = match config.webhook {
            Some(target) => Some(Arc::new(webhook::Webhooks::new(
                target,
                config.seed ^ WEBHOOK_STREAM,
            )?)),
            None => None,
        };
        Ok(Sim {
            ledger: Mutex::new(Ledger::new(config.limits, config.seed ^ LEDGER_STREAM)),
            faults: Arc::new(RwLock::new(config.faults)),
            network_rng: Mutex::new(StdRng::seed_from_u64(config.seed ^ NETWORK_STREAM)),
            webhooks,
            holds: hold::Holds::default(),
            workers: Arc::default(),
        })
    }

    /// The knobs in force.
    pub fn faults(&self) -> Faults {
        self.faults
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Replaces all knobs at once, if they are valid.
    pub fn set_faults(&self, faults: Faults) -> Result<(), FaultsError> {
        faults.validate()?;
        *self
            .faults
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = faults;
        self.holds.knobs_changed();
        self.workers.knobs_changed();
        Ok(())
    }

    /// Holds a processed capture's answer while `hold_captures` is on.
    pub async fn hold_capture(&self) {
        self.holds
            .hold_capture(|| self.faults().hold_captures)
            .await;
    }

    /// Waits for one of the `workers` (the knob as it is while waiting);
    /// `None` when too many requests wait already.
    pub async fn worker(&self) -> Option<workers::Worker> {
        self.workers.enter(|| self.faults().workers).await
    }

    pub fn held_stats(&self) -> HeldStats {
        self.holds.stats()
    }

    /// Runs `f` with the ledger locked; `f` must not block.
    pub fn with_ledger<T>(&self, f: impl FnOnce(&mut Ledger) -> T) -> T {
        let mut ledger = self
            .ledger
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut ledger)
    }

    /// Draws the network fault for one API request.
    pub fn draw_network_fault(&self, faults: &Faults) -> NetworkFault {
        let mut rng = self
            .network_rng
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        faults.draw_network(&mut *rng)
    }

    /// Schedules the webhooks of new events.
    pub fn enqueue_webhooks(&self, events: &[Event]) {
        if let Some(webhooks) = &self.webhooks {
            let faults = self.faults();
            for event in events {
                webhooks.enqueue(&event.body, &faults);
            }
        }
    }

    pub fn webhook_stats(&self) -> Option<WebhookStats> {
        self.webhooks.as_ref().map(|webhooks| webhooks.stats())
    }
}

/// Serves the simulator on `listener` until `shutdown` completes, with the
/// webhook sender running beside it.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let sim = Arc::new(Sim::new(config)?);
    let sender = sim
        .webhooks
        .clone()
        .map(|webhooks| tokio::spawn(webhooks.run(sim.faults.clone())));
    let result = conn::serve(listener, api::router(sim), shutdown).await;
    if let Some(sender) = sender {
        sender.abort();
    }
    Ok(result?)
}
