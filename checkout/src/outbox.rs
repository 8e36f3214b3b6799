//! The outbox: events written in the same transaction as the order change
//! that caused them, and a relay that publishes them at least once. This
//! file holds what both back ends share (the event, the [`Sink`] and the
//! JSON-lines file sink, the relay's outcome); each back end writes and
//! relays its own rows (`backend/sqlite/outbox.rs`,
//! `backend/postgres/outbox.rs`).
//!
//! The store and the sink never share a commit: the relay marks events
//! published only after the sink acknowledged them, so a crash in between
//! publishes them again (consumers dedupe by event `id`).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::clock::UnixMs;
use crate::error::StoreError;
use crate::limits::OUTBOX_FILE_NAME;

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
