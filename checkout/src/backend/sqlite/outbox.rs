//! The embedded store's outbox rows: an order change's event written in
//! its transaction (`insert_event`), and the relay's bounded pass
//! ([`relay_once`]) that marks events published only after the sink
//! acknowledged them.

use rusqlite::{params, Transaction};

use crate::backend::sqlite::store::Store;
use crate::clock::UnixMs;
use crate::core::order::Order;
use crate::error::StoreError;
use crate::limits::PASS_ROWS_MAX;
use crate::outbox::{OutboxEvent, RelayError, RelayOutcome, Sink};

pub(crate) fn insert_event(
    tx: &Transaction<'_>,
    order: &Order,
    event_type: &str,
    now_ms: UnixMs,
) -> Result<(), StoreError> {
    let event_id = format!("evt_{}", uuid::Uuid::new_v4().simple());
    let payload = serde_json::to_string(&order.view())
        .map_err(|e| StoreError::InvalidArgument(format!("order not serializable: {e}")))?;
    tx.prepare_cached(
        "INSERT INTO outbox (event_id, order_id, type, payload, created_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        event_id,
        order.order_id,
        event_type,
        payload,
        now_ms
    ])?;
    Ok(())
}

/// One bounded pass: publishes up to `limit` pending events, oldest first,
/// and marks them published after the sink acknowledged them.
pub fn relay_once(
    store: &Store,
    sink: &mut dyn Sink,
    limit: usize,
    now_ms: UnixMs,
) -> Result<RelayOutcome, RelayError> {
    let limit = limit.clamp(1, PASS_ROWS_MAX);
    let events = store.read(|conn| load_pending(conn, limit + 1))?;
    let more_pending = events.len() > limit;
    let batch = &events[..events.len().min(limit)];
    if batch.is_empty() {
        return Ok(RelayOutcome::default());
    }
    sink.publish(batch)?;
    let last_seq = batch[batch.len() - 1].seq;
    let first_seq = batch[0].seq;
    store.write(move |tx, _| -> Result<(), StoreError> {
        tx.prepare_cached(
            "UPDATE outbox SET published_at_ms = ?3
             WHERE seq BETWEEN ?1 AND ?2 AND published_at_ms IS NULL",
        )?
        .execute(params![first_seq, last_seq, now_ms])?;
        Ok(())
    })?;
    store
        .metrics()
        .outbox_published
        .fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
    Ok(RelayOutcome {
        published: batch.len(),
        more_pending,
    })
}

fn load_pending(conn: &rusqlite::Connection, limit: usize) -> Result<Vec<OutboxEvent>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, event_id, type, order_id, created_at_ms, payload FROM outbox
         WHERE published_at_ms IS NULL ORDER BY seq LIMIT ?1",
    )?;
    let mut rows = stmt.query([limit as i64])?;
    let mut events = Vec::new();
    while let Some(row) = rows.next()? {
        let payload: String = row.get(5)?;
        let data = serde_json::from_str(&payload).map_err(|e| StoreError::Corrupt {
            table: "outbox",
            detail: format!("payload is not JSON: {e}"),
        })?;
        events.push(OutboxEvent {
            seq: row.get(0)?,
            id: row.get(1)?,
            event_type: row.get(2)?,
            order_id: row.get(3)?,
            created_at_ms: row.get(4)?,
            data,
        });
    }
    Ok(events)
}
