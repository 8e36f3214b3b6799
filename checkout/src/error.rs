//! Errors by layer. [`StoreError`] is the storage's; [`CheckoutError`] is what
//! the gateway maps to the contract's `{"error": code}` with [`CheckoutError::code`]
//! and [`CheckoutError::status`].

use crate::core::state::OrderState;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// A statement the PostgreSQL server refused (constraint, syntax,
    /// deadlock): a bug or a damaged schema, not an outage.
    #[error("postgres: {0}")]
    Postgres(String),
    /// The shared store cannot be reached (connection refused or lost,
    /// no pooled connection in time): `503 store_unavailable`; nothing was
    /// acknowledged, so a retry with the same key is safe.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A stored row that this code did not write (or a bug wrote): refused,
    /// never unwrapped.
    #[error("corrupt row in {table}: {detail}")]
    Corrupt { table: &'static str, detail: String },
    #[error("stock conservation violated for sku {sku}: available {available} + reserved {reserved} + committed {committed} != total {total}")]
    Conservation {
        sku: String,
        total: i64,
        available: i64,
        reserved: i64,
        committed: i64,
    },
    #[error("unknown sku {0}")]
    UnknownSku(String),
    #[error("unknown order {0}")]
    UnknownOrder(String),
    #[error("illegal transition {from} -> {to}")]
    IllegalTransition { from: OrderState, to: OrderState },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The writer thread is gone (shutting down, or it died).
    #[error("store writer has stopped")]
    WriterStopped,
    /// The batch this transaction was part of did not commit.
    #[error("batch did not commit: {0}")]
    BatchFailed(String),
}

#[derive(Debug, thiserror::Error)]
pub enum CheckoutError {
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("no such order")]
    NotFound,
    /// Same key, still in flight.
    #[error("a request with this Idempotency-Key is still in progress")]
    Conflict,
    /// Same key, another body.
    #[error("this Idempotency-Key was used with a different request")]
    Mismatch,
    /// The subject has created as many orders as it may.
    #[error("this pass has started all the checkouts it may")]
    PurchaseLimit,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl CheckoutError {
    /// The contract's error code. A shared store that cannot be reached is
    /// `store_unavailable` (503, with `Retry-After`); other storage failures
    /// are `internal` (500) and must be logged by the caller.
    pub fn code(&self) -> &'static str {
        match self {
            CheckoutError::BadRequest(_) => "bad_request",
            CheckoutError::NotFound => "not_found",
            CheckoutError::Conflict => "idempotency_conflict",
            CheckoutError::Mismatch => "idempotency_mismatch",
            CheckoutError::PurchaseLimit => "purchase_limit",
            CheckoutError::Store(StoreError::UnknownSku(_)) => "not_found",
            CheckoutError::Store(StoreError::Unavailable(_)) => "store_unavailable",
            CheckoutError::Store(_) => "internal",
        }
    }

    /// The HTTP status for [`CheckoutError::code`].
    pub fn status(&self) -> u16 {
        match self.code() {
            "bad_request" => 400,
            "not_found" => 404,
            "idempotency_conflict" => 409,
            "idempotency_mismatch" => 422,
            "purchase_limit" => 403,
            "store_unavailable" => 503,
            _ => 500,
        }
    }
}

impl From<rusqlite::Error> for CheckoutError {
    fn from(e: rusqlite::Error) -> Self {
        CheckoutError::Store(StoreError::Sqlite(e))
    }
}
