//! One HTTP exchange as a shopper sees it: a status (0 when the request
//! timed out or the connection failed), `Retry-After`, the JSON body, and
//! how long it took from when it was due.
//!
//! Latency counts from the moment the request was due, not from the moment
//! it went out: a request that waited for one of the [`IN_FLIGHT_MAX`]
//! slots, or an open-loop request sent late, is as slow as the shopper
//! found it (no coordinated omission).

use std::time::{Duration, Instant};

use serde_json::Value;

use super::record::Recorder;

/// Largest response body read, bytes (orders and queue answers are small).
pub const BODY_BYTES_MAX: usize = 64 * 1024;

/// Requests in flight at once, at most, across all shoppers. Every one
/// holds a connection on both ends; on one machine the harness, the gateway
/// and paysim share the file-descriptor limit (20,000 here), so a crowd of
/// 100,000 shoppers must not open a socket each. Time spent waiting for a
/// slot is counted in a request's latency.
pub const IN_FLIGHT_MAX: usize = 4_096;

static IN_FLIGHT: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(IN_FLIGHT_MAX);

/// What came back.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status, or 0 for a timeout or a connection error.
    pub status: u16,
    pub retry_after: Option<Duration>,
    pub body: Value,
    /// From when the request was due to its whole answer (or its failure).
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

/// Sends `req` now, counts its answer under `route` and returns it.
pub async fn send(rec: &Recorder, route: &str, req: reqwest::RequestBuilder) -> Reply {
    send_at(rec, route, req, Instant::now()).await
}

/// Sends `req`, due at `due` (an open-loop schedule's time): its latency
/// counts from `due`.
pub async fn send_at(
    rec: &Recorder,
    route: &str,
    req: reqwest::RequestBuilder,
    due: Instant,
) -> Reply {
    send_due(&IN_FLIGHT, rec, route, req, due).await
}

/// Sends `req`, due at `due`, through one of `slots`: its latency counts
/// from `due`, the wait for a slot included.
async fn send_due(
    slots: &tokio::sync::Semaphore,
    rec: &Recorder,
    route: &str,
    req: reqwest::RequestBuilder,
    due: Instant,
) -> Reply {
    // The semaphores are never closed, so acquiring cannot fail.
    let _slot = slots.acquire().await.ok();
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
                    elapsed: due.elapsed(),
                },
                // The body did not arrive: as good as a timeout.
                Err(_) => failed(due),
            }
        }
        Err(_) => failed(due),
    };
    rec.response(route, reply.status);
    reply
}

fn failed(due: Instant) -> Reply {
    Reply {
        status: 0,
        retry_after: None,
        body: Value::Null,
        elapsed: due.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An origin that answers each request after `hold`, one connection
    /// per request.
    async fn slow_origin(hold: Duration) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let _ = sock.read(&mut buf).await;
                    tokio::time::sleep(hold).await;
                    let body = b"{}";
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = sock.write_all(head.as_bytes()).await;
                    let _ = sock.write_all(body).await;
                });
            }
        });
        format!("http://{addr}/")
    }

    #[tokio::test]
    async fn the_wait_for_a_slot_counts_in_the_latency() {
        let hold = Duration::from_millis(300);
        let url = slow_origin(hold).await;
        let http = reqwest::Client::new();
        let rec = Recorder::new(Instant::now());
        // One slot: the second request waits for the first to end.
        let slots = tokio::sync::Semaphore::new(1);
        let due = Instant::now();
        let (a, b) = tokio::join!(
            send_due(&slots, &rec, "r", http.get(&url), due),
            send_due(&slots, &rec, "r", http.get(&url), due),
        );
        assert_eq!((a.status, b.status), (200, 200));
        let (fast, slow) = (a.elapsed.min(b.elapsed), a.elapsed.max(b.elapsed));
        assert!(fast >= hold, "{fast:?}");
        assert!(
            slow >= 2 * hold,
            "the second waited for the slot and that wait is its latency: {slow:?}"
        );
    }

    #[tokio::test]
    async fn an_open_loop_request_sent_late_counts_from_when_it_was_due() {
        let url = slow_origin(Duration::ZERO).await;
        let rec = Recorder::new(Instant::now());
        let late = Duration::from_millis(400);
        let due = Instant::now() - late;
        let r = send_due(
            &tokio::sync::Semaphore::new(1),
            &rec,
            "r",
            reqwest::Client::new().get(&url),
            due,
        )
        .await;
        assert_eq!(r.status, 200);
        assert!(r.elapsed >= late, "{:?}", r.elapsed);
        // A failed request counts from when it was due too.
        let r = send_due(
            &tokio::sync::Semaphore::new(1),
            &rec,
            "r",
            reqwest::Client::new().get("http://127.0.0.1:1/"),
            due,
        )
        .await;
        assert_eq!(r.status, 0);
        assert!(r.elapsed >= late, "{:?}", r.elapsed);
    }
}
