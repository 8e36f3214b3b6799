//! The orders worker: outbox relay, reconciler and the sold-out snapshot,
//! each a bounded pass, run on a timer until shutdown. On a shared
//! PostgreSQL every gateway runs them; the back end makes each run once
//! across the fleet (leases and `SKIP LOCKED`, see `sluice-checkout`'s
//! `backend/postgres`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use sluice_checkout::{JsonLinesSink, Sink};

use super::sink::{Backoff, HttpSink};
use super::Orders;
use crate::clock::now_ms;

/// How often pending outbox events are handed to the sink.
pub const RELAY_EVERY: Duration = Duration::from_millis(200);
/// How often the reconciler passes over reservations and orders.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(1);
/// Rows one pass may touch.
pub const ROWS_PER_PASS_MAX: usize = 512;
/// An order resting this long in `reserved`, `authorizing` or `refunding`
/// is reported as stuck.
pub const STUCK_AFTER_MS: i64 = 120_000;

pub struct OrdersWorker {
    orders: Arc<Orders>,
}

impl OrdersWorker {
    pub fn new(orders: Arc<Orders>) -> Self {
        Self { orders }
    }

    /// One relay pass: the events published, or why none could be.
    pub fn relay(&self, sink: &mut dyn Sink) -> Result<usize, sluice_checkout::RelayError> {
        self.orders
            .backend()
            .relay_outbox_once(sink, ROWS_PER_PASS_MAX, now_ms() as i64)
            .map(|o| o.published)
    }

    /// The sink the config names: HTTP to the storefront, or the
    /// JSON-lines file in the data dir.
    fn sink(&self) -> Option<Box<dyn Sink + Send>> {
        let outbox = self.orders.outbox_config();
        match &outbox.url {
            Some(url) => match HttpSink::new(url, outbox.timeout) {
                Ok(sink) => Some(Box::new(sink)),
                Err(e) => {
                    tracing::error!("outbox sink unavailable, events stay pending: {e}");
                    None
                }
            },
            None => match JsonLinesSink::open(self.orders.data_dir()) {
                Ok(sink) => Some(Box::new(sink)),
                Err(e) => {
                    tracing::error!("outbox sink unavailable, events stay pending: {e}");
                    None
                }
            },
        }
    }

    /// One reconciler pass; logs what it found.
    pub fn reconcile(&self) {
        let backend = self.orders.backend();
        match backend.reconcile_once(now_ms() as i64, STUCK_AFTER_MS, ROWS_PER_PASS_MAX) {
            Ok(outcome) => {
                if outcome.expired > 0 {
                    tracing::info!(
                        expired = outcome.expired,
                        "reconciler released expired reservations"
                    );
                }
                for (state, count) in &outcome.stuck {
                    tracing::warn!(state = state.as_str(), count, "orders stuck in one state");
                }
                if outcome.conservation_violations > 0 {
                    tracing::error!(
                        skus = outcome.conservation_violations,
                        "stock does not add up"
                    );
                }
                self.orders.set_stuck(outcome.stuck);
            }
            Err(sluice_checkout::StoreError::Unavailable(e)) => {
                // The rest of the pass would wait on the store in turn.
                tracing::warn!("reconciler: store unavailable, pass skipped: {e}");
                return;
            }
            Err(e) => tracing::error!("reconciler: {e}"),
        }
        match backend.reconcile_payments_once(now_ms() as i64, ROWS_PER_PASS_MAX) {
            Ok(outcome) => {
                if outcome.events_processed
                    + outcome.attempts_resolved
                    + outcome.stuck_compensations
                    > 0
                {
                    tracing::info!(?outcome, "payments reconciler");
                }
            }
            Err(e) => tracing::error!("payments reconciler: {e}"),
        }
        self.orders.refresh_books();
        self.orders.refresh_gauges();
    }
}

#[async_trait]
impl BackgroundService for OrdersWorker {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut sink = self.sink();
        let mut backoff = Backoff::default();
        let mut next_relay = tokio::time::Instant::now();
        let mut relay = tokio::time::interval(RELAY_EVERY);
        let mut reconcile = tokio::time::interval(RECONCILE_EVERY);
        relay.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        reconcile.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = relay.tick() => {
                    let Some(sink) = sink.as_mut() else { continue };
                    if tokio::time::Instant::now() < next_relay {
                        continue;
                    }
                    // The store and the sink do blocking I/O (fsync, HTTP).
                    match tokio::task::block_in_place(|| self.relay(sink.as_mut())) {
                        Ok(_) => backoff.succeeded(),
                        Err(e) => {
                            let wait = backoff.failed(rand::random::<f64>());
                            tracing::warn!(retry_in = ?wait, "outbox relay: {e}");
                            next_relay = tokio::time::Instant::now() + wait;
                        }
                    }
                }
                _ = reconcile.tick() => tokio::task::block_in_place(|| self.reconcile()),
            }
        }
    }
}
