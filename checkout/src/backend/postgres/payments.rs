//! The payments reconciler on PostgreSQL, once across a fleet: one bounded
//! pass that, like the embedded one (`crate::backend::sqlite::payment_reconciler`),
//!
//! 1. reads the provider's event list after the stored cursor and applies
//!    each event like a webhook, the events and the cursor in one
//!    transaction (a crash re-reads the page; its events are duplicates);
//! 2. drives every attempt still `pending` past
//!    [`PAYMENT_IN_FLIGHT_MS`] (an ambiguous answer, a gateway that died
//!    between storing and answering, a follow-up a webhook stored): the
//!    provider's look-up first, then the same request again with the same
//!    key, each answer settled by [`super::settle::settle`];
//! 3. counts the compensations the provider refused (an operator looks).
//!
//! Step 2 leases its attempts: one transaction moves their
//! `updated_at_ms` to now, choosing them `FOR UPDATE SKIP LOCKED`, so two
//! gateways' passes take different attempts and a taken attempt is not due
//! again for another [`PAYMENT_IN_FLIGHT_MS`]. A gateway dying mid-pass
//! leaves each attempt either settled (one transaction) or pending, due
//! again once its lease runs out.

use super::conn::Db;
use super::settle::drive;
use super::tally::Tally;
use super::webhook::apply_event;
use super::{pg_err, PgBackend};
use crate::backend::pass::PaymentsReconcileOutcome;
use crate::clock::UnixMs;
use crate::core::event::WebhookOutcome;
use crate::error::StoreError;
use crate::http_client::wait;
use crate::limits::{PASS_ROWS_MAX, PAYMENT_IN_FLIGHT_MS, PROVIDER_EVENTS_PAGE_MAX};

pub(super) fn reconcile_payments_once(
    backend: &PgBackend,
    now_ms: UnixMs,
    limit: usize,
) -> Result<PaymentsReconcileOutcome, StoreError> {
    let limit = limit.clamp(1, PASS_ROWS_MAX);
    let mut outcome = PaymentsReconcileOutcome::default();
    recover_events(backend, now_ms, limit, &mut outcome)?;
    let take = i64::try_from(limit).unwrap_or(i64::MAX);
    let due_before = now_ms.saturating_sub(PAYMENT_IN_FLIGHT_MS);
    let due: Vec<String> = backend.write(|tx| {
        Ok::<_, StoreError>(
            tx.query(
                "UPDATE payment_attempts SET updated_at_ms = $1
                 WHERE idempotency_key IN (
                    SELECT idempotency_key FROM payment_attempts
                     WHERE outcome = 'pending' AND updated_at_ms <= $2
                     ORDER BY updated_at_ms LIMIT $3
                     FOR UPDATE SKIP LOCKED)
                 RETURNING idempotency_key",
                &[&now_ms, &due_before, &take],
            )
            .map_err(pg_err)?
            .iter()
            .map(|row| row.get(0))
            .collect(),
        )
    })?;
    for key in due {
        outcome.attempts_driven += 1;
        if drive(backend, key, true, now_ms)? {
            outcome.attempts_resolved += 1;
        }
    }
    let stuck: i64 = backend.read(|client| {
        Ok(client
            .query_one(
                "SELECT COUNT(*) FROM payment_attempts
                 WHERE operation IN ('void', 'refund') AND outcome = 'failed'",
                &[],
            )
            .map_err(pg_err)?
            .get(0))
    })?;
    outcome.stuck_compensations = usize::try_from(stuck).unwrap_or(0);
    Ok(outcome)
}

fn recover_events(
    backend: &PgBackend,
    now_ms: UnixMs,
    limit: usize,
    outcome: &mut PaymentsReconcileOutcome,
) -> Result<(), StoreError> {
    let provider = backend.provider().name().to_owned();
    let cursor: i64 = backend.read(|client| {
        Ok(client
            .query_opt(
                "SELECT cursor FROM provider_cursor WHERE provider = $1",
                &[&provider],
            )
            .map_err(pg_err)?
            .map_or(0, |row| row.get(0)))
    })?;
    let cursor = u64::try_from(cursor).unwrap_or(0);
    let page = match wait(
        backend
            .provider()
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
    let (results, tally) = backend.write(|tx| {
        let mut tally = Tally::default();
        let mut results = Vec::with_capacity(page.events.len());
        for event in &page.events {
            results.push(apply_event(tx, &mut tally, &event.event, now_ms)?);
        }
        tx.execute(
            "INSERT INTO provider_cursor (provider, cursor) VALUES ($1, $2)
             ON CONFLICT (provider) DO UPDATE
             SET cursor = GREATEST(provider_cursor.cursor, excluded.cursor)",
            &[&provider, &next],
        )
        .map_err(pg_err)?;
        Ok::<_, StoreError>((results, tally))
    })?;
    tally.apply(backend.metrics());
    outcome.events_processed = results
        .iter()
        .filter(|r| **r == WebhookOutcome::Processed)
        .count();
    Ok(())
}
