//! The contract's JSON error shape, one place for every code and status.
//!
//! `{"error": "<code>", "message": "<one sentence>", "retry_after_s": N?}`;
//! 429 and 503 always carry `Retry-After`.

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, StatusCode};
use serde::Serialize;

/// Every error code the gateway answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    BadRequest,
    InvalidTicket,
    InvalidPass,
    Unauthorized,
    Forbidden,
    NotFound,
    UnknownRoom,
    MethodNotAllowed,
    IdempotencyConflict,
    SoldOut,
    PayloadTooLarge,
    RequestTimeout,
    IdempotencyMismatch,
    PurchaseLimit,
    RateLimited,
    Internal,
    BadGateway,
    QueueFull,
    AdmissionsPaused,
    Unavailable,
    StoreUnavailable,
    GatewayTimeout,
    Overloaded,
    NotOpen,
    EventClosed,
    EnqueueTokenRequired,
    InvalidEnqueueToken,
    ChallengeRequired,
    ChallengeFailed,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            BadRequest => "bad_request",
            InvalidTicket => "invalid_ticket",
            InvalidPass => "invalid_pass",
            Unauthorized => "unauthorized",
            Forbidden => "forbidden",
            NotFound => "not_found",
            UnknownRoom => "unknown_room",
            MethodNotAllowed => "method_not_allowed",
            IdempotencyConflict => "idempotency_conflict",
            SoldOut => "sold_out",
            PayloadTooLarge => "payload_too_large",
            RequestTimeout => "request_timeout",
            IdempotencyMismatch => "idempotency_mismatch",
            PurchaseLimit => "purchase_limit",
            RateLimited => "rate_limited",
            Internal => "internal",
            BadGateway => "bad_gateway",
            QueueFull => "queue_full",
            AdmissionsPaused => "admissions_paused",
            Unavailable => "unavailable",
            StoreUnavailable => "store_unavailable",
            GatewayTimeout => "gateway_timeout",
            Overloaded => "overloaded",
            NotOpen => "not_open",
            EventClosed => "event_closed",
            EnqueueTokenRequired => "enqueue_token_required",
            InvalidEnqueueToken => "invalid_enqueue_token",
            ChallengeRequired => "challenge_required",
            ChallengeFailed => "challenge_failed",
        }
    }

    pub fn status(self) -> StatusCode {
        use ErrorCode::*;
        match self {
            BadRequest => StatusCode::BAD_REQUEST,
            InvalidTicket | InvalidPass | Unauthorized | EnqueueTokenRequired
            | InvalidEnqueueToken | ChallengeRequired => StatusCode::UNAUTHORIZED,
            Forbidden | PurchaseLimit | ChallengeFailed => StatusCode::FORBIDDEN,
            NotFound | UnknownRoom => StatusCode::NOT_FOUND,
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            IdempotencyConflict => StatusCode::CONFLICT,
            SoldOut | EventClosed => StatusCode::GONE,
            PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            IdempotencyMismatch => StatusCode::UNPROCESSABLE_ENTITY,
            RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Internal => StatusCode::INTERNAL_SERVER_ERROR,
            BadGateway => StatusCode::BAD_GATEWAY,
            QueueFull | AdmissionsPaused | Unavailable | StoreUnavailable | Overloaded
            | NotOpen => StatusCode::SERVICE_UNAVAILABLE,
            GatewayTimeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }
}

/// An error answer, ready to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub retry_after_s: Option<u32>,
    /// Extra top-level JSON members (the `join` link of `invalid_pass`).
    pub extra: Vec<(&'static str, String)>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: &'a str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_s: Option<u32>,
    #[serde(flatten)]
    extra: serde_json::Map<String, serde_json::Value>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let retry_after_s = match code.status().as_u16() {
            429 | 503 => Some(1),
            _ => None,
        };
        Self {
            code,
            message: message.into(),
            retry_after_s,
            extra: Vec::new(),
        }
    }

    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after_s = Some(seconds.max(1));
        self
    }

    pub fn with(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.extra.push((key, value.into()));
        self
    }

    pub fn status(&self) -> StatusCode {
        self.code.status()
    }

    pub fn body(&self) -> Bytes {
        let mut json = Vec::with_capacity(ERROR_BODY_BYTES_HINT);
        if self.extra.is_empty() {
            let body = Plain {
                error: self.code.as_str(),
                message: &self.message,
                retry_after_s: self.retry_after_s,
            };
            serde_json::to_writer(&mut json, &body).expect("error body serializes");
        } else {
            let extra = self
                .extra
                .iter()
                .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.clone())))
                .collect();
            let body = Body {
                error: self.code.as_str(),
                message: &self.message,
                retry_after_s: self.retry_after_s,
                extra,
            };
            serde_json::to_writer(&mut json, &body).expect("error body serializes");
        }
        json.push(b'\n');
        Bytes::from(json)
    }

    /// Headers that go with the body (besides Content-Length).
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        // Retry-After goes with every answer that says when to retry.
        let mut headers = vec![
            ("content-type", "application/json".to_string()),
            ("cache-control", "no-store".to_string()),
        ];
        if let Some(s) = self.retry_after_s {
            headers.push(("retry-after", s.to_string()));
        }
        if self.code == ErrorCode::Unauthorized {
            headers.push(("www-authenticate", "Bearer".to_string()));
        }
        headers
    }

    /// [`Self::headers`] as header names and values, made without a string
    /// per header.
    pub fn header_values(&self) -> Vec<(HeaderName, HeaderValue)> {
        let mut headers = Vec::with_capacity(4);
        headers.push((
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        ));
        headers.push((header::CACHE_CONTROL, HeaderValue::from_static("no-store")));
        if let Some(s) = self.retry_after_s {
            headers.push((header::RETRY_AFTER, HeaderValue::from(s)));
        }
        if self.code == ErrorCode::Unauthorized {
            headers.push((header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer")));
        }
        headers
    }
}

/// An error body's usual size, for the buffer it is written into.
const ERROR_BODY_BYTES_HINT: usize = 160;

/// The body without extra members: the same JSON as [`Body`], without
/// serde's `flatten` (a map serializer and a `Value` per member).
#[derive(Serialize)]
struct Plain<'a> {
    error: &'a str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_s: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_the_contract_shape() {
        let e = ApiError::new(ErrorCode::QueueFull, "The queue is full.").retry_after(30);
        let v: serde_json::Value = serde_json::from_slice(&e.body()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error":"queue_full","message":"The queue is full.","retry_after_s":30})
        );
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(e.headers().contains(&("retry-after", "30".to_string())));
    }

    #[test]
    fn retry_after_is_only_default_for_429_and_503() {
        assert_eq!(
            ApiError::new(ErrorCode::RateLimited, "x").retry_after_s,
            Some(1)
        );
        assert_eq!(
            ApiError::new(ErrorCode::AdmissionsPaused, "x").retry_after_s,
            Some(1)
        );
        assert_eq!(ApiError::new(ErrorCode::NotFound, "x").retry_after_s, None);
        let v: serde_json::Value =
            serde_json::from_slice(&ApiError::new(ErrorCode::NotFound, "x").body()).unwrap();
        assert!(v.get("retry_after_s").is_none());
    }

    #[test]
    fn header_values_are_the_headers() {
        for code in [
            ErrorCode::RateLimited,
            ErrorCode::Unauthorized,
            ErrorCode::NotFound,
            ErrorCode::QueueFull,
        ] {
            let e = ApiError::new(code, "x").retry_after(7);
            for e in [
                e.clone(),
                ApiError {
                    retry_after_s: None,
                    ..e
                },
            ] {
                let values: Vec<(String, String)> = e
                    .header_values()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
                    .collect();
                let strings: Vec<(String, String)> = e
                    .headers()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect();
                assert_eq!(values, strings, "{code:?}");
            }
        }
    }

    #[test]
    fn a_body_without_extra_members_is_the_same_bytes_as_with_flatten() {
        for e in [
            ApiError::new(ErrorCode::RateLimited, "Asked \"sooner\" than told.").retry_after(3),
            ApiError::new(ErrorCode::NotFound, "Nothing here."),
        ] {
            let flattened = Body {
                error: e.code.as_str(),
                message: &e.message,
                retry_after_s: e.retry_after_s,
                extra: serde_json::Map::new(),
            };
            let mut expected = serde_json::to_vec(&flattened).unwrap();
            expected.push(b'\n');
            assert_eq!(e.body(), Bytes::from(expected));
        }
    }

    #[test]
    fn extra_members_sit_beside_the_error() {
        let e = ApiError::new(ErrorCode::InvalidPass, "No pass.").with("join", "/queue/drop/join");
        let v: serde_json::Value = serde_json::from_slice(&e.body()).unwrap();
        assert_eq!(v["join"], "/queue/drop/join");
        assert_eq!(e.status(), StatusCode::UNAUTHORIZED);
    }
}
