//! The outbox: events written in the same transaction as the order change
//! that caused them, and a relay that publishes them at least once.
//!
//! The store and the sink never share a commit: the relay marks events
//! published only after the sink acknowledged them, so a crash in between
//! publishes them again (consumers dedupe by event `id`).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use rusqlite::{params, Transaction};
use serde::{Deserialize, Serialize};

use crate::backend::sqlite::store::Store;
use crate::clock::UnixMs;
use crate::core::order::Order;
use crate::error::StoreError;
use crate::limits::{OUTBOX_FILE_NAME, PASS_ROWS_MAX};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxEvent {
    /// Unique per event (`evt_…`); the consumer's dedupe key.
    pub id: String,
    /// Commit order within this store.
    pub seq: i64,
    #[serde(rename = "type")]
    pub event_type: String,
    pub order_id: String,
    pub created_at_ms: UnixMs,
    /// The order as the contract shows it, after the change.
    pub data: serde_json::Value,
}

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

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("sink io: {0}")]
    Io(#[from] std::io::Error),
    #[error("sink refused: {0}")]
    Refused(String),
}

/// Where events go. `publish` returns `Ok` only once every event is durably
/// accepted; on error the whole batch is retried later.
pub trait Sink {
    fn publish(&mut self, events: &[OutboxEvent]) -> Result<(), SinkError>;
}

/// Appends one JSON object per line to `outbox.jsonl` in the data dir and
/// fsyncs before acknowledging.
#[derive(Debug)]
pub struct JsonLinesSink {
    file: File,
    path: PathBuf,
}

impl JsonLinesSink {
    pub fn open(data_dir: &Path) -> Result<Self, SinkError> {
        let path = data_dir.join(OUTBOX_FILE_NAME);
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&path)?;
        // A crash mid-write can leave a torn last line; start on a fresh one
        // so the next event stays parseable (the torn one is re-sent anyway,
        // since it was never acknowledged).
        let len = file.metadata()?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            file.seek(SeekFrom::Start(len - 1))?;
            file.read_exact(&mut last)?;
            if last[0] != b'\n' {
                file.write_all(b"\n")?;
                file.sync_data()?;
            }
        }
        Ok(Self { file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Sink for JsonLinesSink {
    fn publish(&mut self, events: &[OutboxEvent]) -> Result<(), SinkError> {
        let mut buf = Vec::new();
        for event in events {
            serde_json::to_writer(&mut buf, event)
                .map_err(|e| SinkError::Refused(e.to_string()))?;
            buf.push(b'\n');
        }
        // One write so a line is never interleaved with another writer's.
        self.file.write_all(&buf)?;
        self.file.sync_data()?;
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Sink(#[from] SinkError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RelayOutcome {
    pub published: usize,
    /// Events were left for the next pass (the limit was reached).
    pub more_pending: bool,
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
        tx.execute(
            "UPDATE outbox SET published_at_ms = ?3
             WHERE seq BETWEEN ?1 AND ?2 AND published_at_ms IS NULL",
            params![first_seq, last_seq, now_ms],
        )?;
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
