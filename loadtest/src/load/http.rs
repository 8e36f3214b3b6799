//! One HTTP exchange as a shopper sees it: a status (0 when the request
//! timed out or the connection failed), `Retry-After`, and the JSON body.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::record::Recorder;

/// Largest response body read, bytes (orders and queue answers are small).
pub const BODY_BYTES_MAX: usize = 64 * 1024;

/// Requests in flight at once, at most, across all shoppers. Every one
/// holds a connection on both ends; on one machine the harness, the gateway
/// and paysim share the file-descriptor limit (20,000 here), so a crowd of
/// 100,000 shoppers must not open a socket each. Time spent waiting for a
/// slot is not counted in a request's latency.
pub const IN_FLIGHT_MAX: usize = 4_096;

static IN_FLIGHT: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(IN_FLIGHT_MAX);

/// What came back.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status, or 0 for a timeout or a connection error.
    pub status: u16,
    pub retry_after: Option<Duration>,
    pub body: Value,
    pub elapsed: Duration,
}

impl Reply {
    pub fn str(&self, key: &str) -> Option<&str> {
        self.body.get(key).and_then(Value::as_str)
    }

    /// `Retry-After`, or `retry_after_s` from the JSON error.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after.or_else(|| {
            self.body
                .get("retry_after_s")
                .and_then(Value::as_f64)
                .map(Duration::from_secs_f64)
        })
    }
}

/// Sends `req`, counts its answer under `route` and returns it.
pub async fn send(rec: &Recorder, route: &str, req: reqwest::RequestBuilder) -> Reply {
    // The semaphore is never closed, so acquiring cannot fail.
    let _slot = IN_FLIGHT.acquire().await.ok();
    let started = Instant::now();
    let reply = match req.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let retry_after = r
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            match r.bytes().await {
                Ok(bytes) => Reply {
                    status,
                    retry_after,
                    body: if bytes.len() <= BODY_BYTES_MAX {
                        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
                    } else {
                        Value::Null
                    },
                    elapsed: started.elapsed(),
                },
                // The body did not arrive: as good as a timeout.
                Err(_) => failed(started),
            }
        }
        Err(_) => failed(started),
    };
    rec.response(route, reply.status);
    reply
}

fn failed(started: Instant) -> Reply {
    Reply {
        status: 0,
        retry_after: None,
        body: Value::Null,
        elapsed: started.elapsed(),
    }
}
