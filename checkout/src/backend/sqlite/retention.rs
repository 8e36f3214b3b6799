//! Retention: what the store forgets, and when, so a month of campaigns
//! does not grow it without end. One bounded pass ([`prune_once`]) that
//! the reconciler runs; each kind deletes at most `limit` of its oldest
//! rows per pass, through an index on its age (schema migration 2), in
//! one transaction.
//!
//! | rows | kept after they end | why that long |
//! | --- | --- | --- |
//! | idempotency keys | [`IDEMPOTENCY_RETENTION_MS`] from creation | the contract's 24 h replay, plus slack |
//! | published outbox events | [`OUTBOX_RETENTION_MS`] from publication | an operator can re-read what was sent |
//! | webhook event ids | [`WEBHOOK_EVENT_RETENTION_MS`] from receipt | past any provider's redelivery window, so a late duplicate is still recognised |
//! | released / returned holds | [`ENDED_HOLD_RETENTION_MS`] from settling | they count for nothing; held and committed holds are kept, the conservation checks sum them |
//!
//! Orders, payment attempts and the payment ledger are the business record
//! and are never pruned here.

use rusqlite::{params, Transaction};

pub use crate::backend::pass::PruneOutcome;
use crate::backend::sqlite::store::Store;
use crate::clock::UnixMs;
use crate::error::StoreError;
use crate::limits::{
    ENDED_HOLD_RETENTION_MS, IDEMPOTENCY_RETENTION_MS, OUTBOX_RETENTION_MS, PASS_ROWS_MAX,
    WEBHOOK_EVENT_RETENTION_MS,
};

/// Deletes, per kind, at most `limit` rows past their retention as of
/// `now_ms`, oldest first, in one durable write.
pub fn prune_once(store: &Store, now_ms: UnixMs, limit: usize) -> Result<PruneOutcome, StoreError> {
    let limit = limit.clamp(1, PASS_ROWS_MAX);
    store.write(move |tx, _| prune(tx, now_ms, limit))
}

fn prune(tx: &Transaction<'_>, now_ms: UnixMs, limit: usize) -> Result<PruneOutcome, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let delete = |sql: &str, retention_ms: i64| -> Result<usize, StoreError> {
        Ok(tx
            .prepare_cached(sql)?
            .execute(params![now_ms.saturating_sub(retention_ms), limit])?)
    };
    Ok(PruneOutcome {
        idempotency_keys: delete(
            "DELETE FROM idempotency WHERE rowid IN (
                SELECT rowid FROM idempotency WHERE created_at_ms < ?1
                ORDER BY created_at_ms LIMIT ?2)",
            IDEMPOTENCY_RETENTION_MS,
        )?,
        outbox_events: delete(
            "DELETE FROM outbox WHERE seq IN (
                SELECT seq FROM outbox
                WHERE published_at_ms IS NOT NULL AND published_at_ms < ?1
                ORDER BY published_at_ms LIMIT ?2)",
            OUTBOX_RETENTION_MS,
        )?,
        webhook_events: delete(
            "DELETE FROM webhook_events WHERE rowid IN (
                SELECT rowid FROM webhook_events WHERE received_at_ms < ?1
                ORDER BY received_at_ms LIMIT ?2)",
            WEBHOOK_EVENT_RETENTION_MS,
        )?,
        ended_holds: delete(
            "DELETE FROM reservations WHERE rowid IN (
                SELECT rowid FROM reservations
                WHERE state IN ('released', 'returned') AND settled_at_ms < ?1
                ORDER BY settled_at_ms LIMIT ?2)",
            ENDED_HOLD_RETENTION_MS,
        )?,
    })
}
