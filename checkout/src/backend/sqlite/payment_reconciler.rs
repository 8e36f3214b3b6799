//! The payments half of the reconciler: one bounded pass
//! ([`CheckoutService::reconcile_payments_once`]) that
//!
//! 1. reads the provider's event list after the stored cursor and applies
//!    each event like a webhook (missed webhooks are recovered; money with
//!    no live order gets its compensation scheduled — orphan charges);
//! 2. drives every unresolved attempt that is due (ambiguous answers,
//!    crashes between storing and answering, compensations past their
//!    budget): look-up first, then the same request again;
//! 3. reports the compensations stuck past their budget.
//!
//! It runs next to [`crate::reconcile_once`] (holds, stuck orders,
//! conservation), which needs no provider.
//!
//! A stuck compensation (a void or refund past
//! [`crate::limits::COMPENSATION_TRIES_BUDGET`]) shows in
//! `compensation_failures`, in [`crate::Store::stuck_compensations`] and in
//! `sluice audit`. Still `unknown`: the provider keeps not answering; this
//! pass keeps retrying it with the same key, so fix the connection and it
//! resolves. `failed`: the provider refused it for good (its `detail` says
//! why); an operator settles the money in the provider's dashboard, and
//! the next provider event about it (or this pass's event list) records it.

use rusqlite::{params, OptionalExtension};

pub use crate::backend::pass::PaymentsReconcileOutcome;
use crate::backend::sqlite::attempt::{self, AttemptOutcome};
use crate::backend::sqlite::events;
use crate::backend::sqlite::service::CheckoutService;
use crate::clock::UnixMs;
use crate::error::StoreError;
use crate::http_client::wait;
use crate::limits::{PASS_ROWS_MAX, PROVIDER_EVENTS_PAGE_MAX};
use crate::webhook::WebhookOutcome;

impl CheckoutService {
    /// One pass over at most `limit` events and `limit` attempts.
    pub fn reconcile_payments_once(
        &self,
        now_ms: UnixMs,
        limit: usize,
    ) -> Result<PaymentsReconcileOutcome, StoreError> {
        let limit = limit.clamp(1, PASS_ROWS_MAX);
        let mut outcome = PaymentsReconcileOutcome::default();
        self.recover_events(now_ms, limit, &mut outcome)?;
        let store = &self.driver.store;
        let due = store.read(|conn| attempt::load_due(conn, now_ms, limit))?;
        for attempt in due {
            let key = attempt.idempotency_key.clone();
            let k = key.clone();
            store.write(move |tx, _| attempt::mark_sent(tx, &k, now_ms))?;
            self.driver.drive(key.clone(), now_ms, false, None)?;
            outcome.attempts_driven += 1;
            let after = store.read(|conn| attempt::load(conn, &key))?;
            if after.is_some_and(|a| a.outcome != AttemptOutcome::Unknown) {
                outcome.attempts_resolved += 1;
            }
        }
        outcome.stuck_compensations = store.read(|conn| attempt::load_stuck(conn, limit))?.len();
        Ok(outcome)
    }

    fn recover_events(
        &self,
        now_ms: UnixMs,
        limit: usize,
        outcome: &mut PaymentsReconcileOutcome,
    ) -> Result<(), StoreError> {
        let store = &self.driver.store;
        let provider = self.driver.provider.name().to_owned();
        let cursor: u64 = {
            let name = provider.clone();
            store.read(move |conn| {
                let stored: Option<i64> = conn
                    .query_row(
                        "SELECT cursor FROM provider_cursor WHERE provider = ?1",
                        [&name],
                        |row| row.get(0),
                    )
                    .optional()?;
                Ok(u64::try_from(stored.unwrap_or(0)).unwrap_or(0))
            })?
        };
        let page = match wait(
            self.driver
                .provider
                .events_since(cursor, limit.min(PROVIDER_EVENTS_PAGE_MAX)),
        ) {
            Ok(page) => page,
            Err(_) => {
                outcome.events_unavailable = true;
                return Ok(());
            }
        };
        outcome.events_read = page.events.len();
        if page.events.is_empty() {
            return Ok(());
        }
        let next = i64::try_from(page.next.max(cursor)).unwrap_or(i64::MAX);
        // The events and the cursor commit together: a crash re-reads the
        // page, and its already-applied events are duplicates.
        let results = store.write(move |tx, metrics| {
            let mut results = Vec::with_capacity(page.events.len());
            for event in &page.events {
                results.push(events::apply_event(tx, metrics, &event.event, now_ms)?);
            }
            tx.execute(
                "INSERT INTO provider_cursor (provider, cursor) VALUES (?1, ?2)
                 ON CONFLICT (provider) DO UPDATE SET cursor = MAX(cursor, excluded.cursor)",
                params![provider, next],
            )?;
            Ok::<_, StoreError>(results)
        })?;
        outcome.events_processed = results
            .iter()
            .filter(|r| **r == WebhookOutcome::Processed)
            .count();
        // Orphan compensations just scheduled are due now.
        Ok(())
    }
}
