//! The embedded store's side of a claimed `Idempotency-Key`: marking its
//! request over.

use rusqlite::{params, Connection};

use crate::clock::UnixMs;
use crate::core::idempotency::IdempotencyKey;
use crate::error::StoreError;

/// A claimed key whose request is still running: `(subject, key)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClaimedKey {
    pub(crate) subject: String,
    pub(crate) key: IdempotencyKey,
}

impl ClaimedKey {
    /// The request is over: a retry now replays instead of `409`. Runs in
    /// the caller's transaction, so it costs no durable wait of its own.
    pub(crate) fn complete(&self, conn: &Connection, now_ms: UnixMs) -> Result<(), StoreError> {
        conn.prepare_cached(
            "UPDATE idempotency SET completed_at_ms = ?3 WHERE subject = ?1 AND key = ?2",
        )?
        .execute(params![self.subject, self.key.as_str(), now_ms])?;
        Ok(())
    }
}
