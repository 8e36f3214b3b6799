//! Request bodies the gateway reads itself (checkout and order calls,
//! provider webhooks, inventory adjustments): bounded in size and in total
//! time.
//!
//! pingora bounds each read of a body, not the body as a whole, so a
//! client dripping one byte at a time would keep its connection and the
//! handler for as long as it liked (the head has its own deadline,
//! [`crate::head_deadline`]). A body read here must arrive whole within
//! `gateway.header_timeout_s` of its first read (the end of its head); past it the request is
//! answered `408 request_timeout` ([`BodyError::TimedOut`]) and the
//! connection is closed after the answer. Bodies the gateway forwards to
//! the origin are the origin's business (pingora streams them).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pingora::protocols::http::ServerSession;

use crate::error::{ApiError, ErrorCode};

/// Why a body was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// Over the route's limit.
    TooLarge,
    /// Not whole within the deadline.
    TimedOut,
    /// The connection failed mid-body.
    Unreadable,
}

impl BodyError {
    /// The answer for it; `too_large` says what the route accepts.
    pub fn answer(self, too_large: &str, deadline: Duration) -> ApiError {
        match self {
            BodyError::TooLarge => ApiError::new(ErrorCode::PayloadTooLarge, too_large),
            BodyError::TimedOut => ApiError::new(
                ErrorCode::RequestTimeout,
                format!(
                    "The request body did not arrive within {} s.",
                    deadline.as_secs()
                ),
            ),
            BodyError::Unreadable => {
                ApiError::new(ErrorCode::BadRequest, "The request body could not be read.")
            }
        }
    }
}

/// Reads the whole body, at most `max_bytes`, within `deadline`. On a
/// timeout the connection is not kept for another request (the rest of the
/// body may still be on its way).
pub async fn read(
    session: &mut ServerSession,
    max_bytes: usize,
    deadline: Duration,
) -> Result<Bytes, BodyError> {
    let read = async {
        let mut body = BytesMut::new();
        while let Some(chunk) = session
            .read_request_body()
            .await
            .map_err(|_| BodyError::Unreadable)?
        {
            if body.len() + chunk.len() > max_bytes {
                return Err(BodyError::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.freeze())
    };
    let result = tokio::time::timeout(deadline, read)
        .await
        .unwrap_or(Err(BodyError::TimedOut));
    if result.is_err() {
        session.set_keepalive(None);
    }
    result
}
