//! Retention on PostgreSQL: the same kinds and periods as the embedded
//! store ([`crate::backend::sqlite::retention`]), each kind deleting at most `limit` of its
//! oldest rows per pass through an index on its age, in one transaction.

use super::conn::Db;
use super::{pg_err, PgBackend};
use crate::backend::pass::PruneOutcome;
use crate::clock::UnixMs;
use crate::error::StoreError;
use crate::limits::{
    ENDED_HOLD_RETENTION_MS, IDEMPOTENCY_RETENTION_MS, OUTBOX_RETENTION_MS, PASS_ROWS_MAX,
    WEBHOOK_EVENT_RETENTION_MS,
};

pub(super) fn prune_once(
    backend: &PgBackend,
    now_ms: UnixMs,
    limit: usize,
) -> Result<PruneOutcome, StoreError> {
    let limit = i64::try_from(limit.clamp(1, PASS_ROWS_MAX)).unwrap_or(1);
    backend.write(|tx| {
        let mut delete = |sql: &'static str, retention_ms: i64| -> Result<usize, StoreError> {
            let before = now_ms.saturating_sub(retention_ms);
            let n = tx.execute(sql, &[&before, &limit]).map_err(pg_err)?;
            Ok(usize::try_from(n).unwrap_or(usize::MAX))
        };
        Ok(PruneOutcome {
            idempotency_keys: delete(
                "DELETE FROM idempotency WHERE (subject, key) IN (
                    SELECT subject, key FROM idempotency WHERE created_at_ms < $1
                    ORDER BY created_at_ms LIMIT $2)",
                IDEMPOTENCY_RETENTION_MS,
            )?,
            outbox_events: delete(
                "DELETE FROM outbox WHERE seq IN (
                    SELECT seq FROM outbox
                    WHERE published_at_ms IS NOT NULL AND published_at_ms < $1
                    ORDER BY published_at_ms LIMIT $2)",
                OUTBOX_RETENTION_MS,
            )?,
            webhook_events: delete(
                "DELETE FROM webhook_events WHERE event_id IN (
                    SELECT event_id FROM webhook_events WHERE received_at_ms < $1
                    ORDER BY received_at_ms LIMIT $2)",
                WEBHOOK_EVENT_RETENTION_MS,
            )?,
            ended_holds: delete(
                "DELETE FROM reservations WHERE order_id IN (
                    SELECT order_id FROM reservations
                    WHERE state IN ('released', 'returned') AND settled_at_ms < $1
                    ORDER BY settled_at_ms LIMIT $2)",
                ENDED_HOLD_RETENTION_MS,
            )?,
        })
    })
}
