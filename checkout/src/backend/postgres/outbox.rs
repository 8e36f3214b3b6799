//! The outbox relay on PostgreSQL, once across a fleet: a pass leases up to
//! `limit` pending events (`FOR UPDATE SKIP LOCKED`, so relays running on
//! several gateways at once take different events), commits the lease,
//! publishes with no transaction open, then marks what it published.
//!
//! A lease lasts [`OUTBOX_LEASE_MS`]: a gateway that dies mid-pass leaves
//! its events leased, and another relay takes them once the lease runs
//! out (at least once: the sink may see them twice; consumers dedupe by
//! event id). A sink that refuses gives its lease back at once.

use super::conn::Db;
use super::{pg_err, PgBackend};
use crate::clock::UnixMs;
use crate::error::StoreError;
use crate::limits::PASS_ROWS_MAX;
use crate::outbox::{OutboxEvent, RelayError, RelayOutcome, Sink};

/// How long a relay pass owns the events it took.
pub const OUTBOX_LEASE_MS: i64 = 30_000;

pub(super) fn relay_once(
    backend: &PgBackend,
    sink: &mut dyn Sink,
    limit: usize,
    now_ms: UnixMs,
) -> Result<RelayOutcome, RelayError> {
    let limit = limit.clamp(1, PASS_ROWS_MAX);
    let take = i64::try_from(limit + 1).unwrap_or(i64::MAX);
    let owner = backend.node.as_str();
    let until = now_ms.saturating_add(OUTBOX_LEASE_MS);
    let mut events = backend.write(|tx| {
        let rows = tx
            .query(
                "UPDATE outbox SET lease_owner = $3, lease_until_ms = $4
                 WHERE seq IN (
                    SELECT seq FROM outbox
                     WHERE published_at_ms IS NULL
                       AND (lease_until_ms IS NULL OR lease_until_ms <= $1)
                     ORDER BY seq LIMIT $2
                     FOR UPDATE SKIP LOCKED)
                 RETURNING seq, event_id, event_type, order_id, created_at_ms, payload",
                &[&now_ms, &take, &owner, &until],
            )
            .map_err(pg_err)?;
        rows.iter()
            .map(|row| {
                let payload: String = row.get(5);
                let data = serde_json::from_str(&payload).map_err(|e| StoreError::Corrupt {
                    table: "outbox",
                    detail: format!("payload is not JSON: {e}"),
                })?;
                Ok(OutboxEvent {
                    seq: row.get(0),
                    id: row.get(1),
                    event_type: row.get(2),
                    order_id: row.get(3),
                    created_at_ms: row.get(4),
                    data,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()
    })?;
    events.sort_by_key(|event| event.seq);
    let more_pending = events.len() > limit;
    if more_pending {
        // Leased one more than published, to know; give it back.
        let extra = events.split_off(limit);
        give_back(backend, &extra)?;
    }
    if events.is_empty() {
        return Ok(RelayOutcome::default());
    }
    if let Err(e) = sink.publish(&events) {
        give_back(backend, &events)?;
        return Err(e.into());
    }
    let seqs: Vec<i64> = events.iter().map(|event| event.seq).collect();
    backend.write(|tx| {
        tx.execute(
            "UPDATE outbox SET published_at_ms = $2, lease_owner = NULL, lease_until_ms = NULL
             WHERE seq = ANY($1) AND published_at_ms IS NULL",
            &[&seqs, &now_ms],
        )
        .map_err(pg_err)
    })?;
    Ok(RelayOutcome {
        published: events.len(),
        more_pending,
    })
}

fn give_back(backend: &PgBackend, events: &[OutboxEvent]) -> Result<(), StoreError> {
    let seqs: Vec<i64> = events.iter().map(|event| event.seq).collect();
    let owner = backend.node.as_str();
    backend.write(|tx| {
        tx.execute(
            "UPDATE outbox SET lease_owner = NULL, lease_until_ms = NULL
             WHERE seq = ANY($1) AND lease_owner = $2 AND published_at_ms IS NULL",
            &[&seqs, &owner],
        )
        .map_err(pg_err)
    })?;
    Ok(())
}
