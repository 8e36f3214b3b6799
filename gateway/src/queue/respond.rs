//! The waiting room's answers in the contract's JSON, with their cookies.

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde::Serialize;
use sluice_admission::fair_start::FairStartInfo;
use sluice_admission::Status;

use super::{page, PASS_COOKIE, TICKET_COOKIE};
use crate::error::{ApiError, ErrorCode};
use crate::response::LocalResponse;

pub struct TicketAnswer<'a> {
    pub room: &'a str,
    pub ticket: &'a str,
    pub ticket_expires_at: u64,
    pub status: Status,
    /// The pass and its expiry, when admitted.
    pub pass: Option<(&'a str, u64)>,
    pub fair_start: Option<&'a FairStartInfo>,
    /// A join (202, ticket echoed, ticket cookie) rather than a poll.
    pub joined: bool,
    pub secure: bool,
    pub now_s: u64,
    /// The event closed: a shopper still in line is told `closed`.
    pub closed: bool,
    /// The room's message and close, when configured.
    pub message: Option<&'a str>,
    pub closes_at: Option<u64>,
    /// `show_units_left`: the room's units nobody holds (informative).
    pub units_left: Option<u64>,
    /// `show_units_left`, waiting: those ahead would likely buy them all.
    pub likely_beyond_stock: Option<bool>,
}

/// The JSON of a ticket's answer, members in the order `serde_json`'s
/// sorted map used to write them (the bytes on the wire are unchanged),
/// serialized straight from the answer: no `serde_json::Value` is built.
#[derive(Serialize, Default)]
struct TicketBody<'a> {
    ahead: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    closes_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    draw_commitment: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    draw_seed: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    entrants: Option<u64>,
    estimated_wait_s: Option<u64>,
    expires_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    likely_beyond_stock: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    opens_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pass: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pass_expires_at: Option<u64>,
    poll_after_s: Option<u32>,
    position: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pre_queue: Option<bool>,
    room: &'a str,
    state: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ticket: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    units_left: Option<u64>,
}

/// Longest answer expected, for the buffer it is written into.
const TICKET_BODY_BYTES_HINT: usize = 1024;

pub fn ticket(a: TicketAnswer<'_>) -> LocalResponse {
    let mut body = TicketBody {
        room: a.room,
        state: a.status.state(),
        expires_at: a.ticket_expires_at,
        ..TicketBody::default()
    };
    match a.status {
        Status::Waiting(w) | Status::Paused(w) => {
            body.position = Some(w.position);
            body.ahead = Some(w.ahead);
            body.estimated_wait_s = Some(w.estimated_wait_s);
            body.poll_after_s = Some(w.poll_after_s);
            body.expires_at = w.expires_at_s;
        }
        Status::PreQueue(p) => {
            body.pre_queue = Some(true);
            body.opens_at = Some(p.opens_at_ms / 1000);
            body.entrants = Some(p.entrants);
            body.poll_after_s = Some(p.poll_after_s);
            body.expires_at = p.expires_at_s;
        }
        Status::Admitted(_) => {
            body.position = Some(0);
            body.ahead = Some(0);
            body.estimated_wait_s = Some(0);
        }
        Status::Expired | Status::SoldOut => {}
    }
    if a.closed {
        // Nobody more is let in: no place, no wait to tell.
        body = TicketBody {
            room: a.room,
            state: "closed",
            expires_at: body.expires_at,
            ..TicketBody::default()
        };
    }
    body.message = a.message;
    body.closes_at = a.closes_at;
    body.units_left = a.units_left;
    body.likely_beyond_stock = a.likely_beyond_stock;
    if let Some(f) = a.fair_start {
        body.draw_commitment = Some(&f.commitment_hex);
        body.draw_seed = f.seed_hex.as_deref();
    }
    let mut headers = vec![
        (
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
    ];
    if a.joined {
        body.ticket = Some(a.ticket);
        let max_age = a.ticket_expires_at.saturating_sub(a.now_s);
        let path = format!("/queue/{}", a.room);
        headers.push(set_cookie(
            TICKET_COOKIE,
            a.ticket,
            &path,
            max_age,
            a.secure,
        ));
    }
    if let Some((pass, expires_at)) = a.pass {
        body.pass = Some(pass);
        body.pass_expires_at = Some(expires_at);
        headers.push(set_cookie(
            PASS_COOKIE,
            pass,
            "/",
            expires_at.saturating_sub(a.now_s),
            a.secure,
        ));
    }
    let status = if a.joined {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    let mut bytes = Vec::with_capacity(TICKET_BODY_BYTES_HINT);
    serde_json::to_writer(&mut bytes, &body).expect("a ticket answer serializes");
    bytes.push(b'\n');
    LocalResponse {
        status,
        headers,
        body: Bytes::from(bytes),
        source: "queue",
    }
}

fn set_cookie(
    name: &str,
    value: &str,
    path: &str,
    max_age_s: u64,
    secure: bool,
) -> (HeaderName, HeaderValue) {
    let secure = if secure { "; Secure" } else { "" };
    let cookie =
        format!("{name}={value}; Path={path}; Max-Age={max_age_s}; HttpOnly; SameSite=Lax{secure}");
    // Tokens are base64url and room names are identifiers: always valid.
    (
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).expect("cookie is header-safe"),
    )
}

/// The `Set-Cookie` that clears the pass cookie (a pass ended).
pub fn clear_pass_cookie(secure: bool) -> (HeaderName, HeaderValue) {
    set_cookie(PASS_COOKIE, "", "/", 0, secure)
}

/// The queue page; `query` may carry the `next` it sends an admitted
/// shopper to, kept only when [`crate::next_path`] checks it.
pub fn page(
    headers: &HeaderMap,
    query: Option<&str>,
    challenge: &sluice_policies::model::Challenge,
) -> LocalResponse {
    let csp = HeaderValue::from_str(&page::csp(challenge))
        .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'"));
    LocalResponse {
        status: StatusCode::OK,
        headers: vec![
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            (header::VARY, HeaderValue::from_static("Accept-Language")),
            (HeaderName::from_static("content-security-policy"), csp),
        ],
        body: Bytes::from(page::render(
            headers,
            crate::next_path::from_query(query).as_deref(),
            challenge,
        )),
        source: "queue",
    }
}

pub fn method_not_allowed(allow: &'static str) -> LocalResponse {
    let mut r = LocalResponse::error(&ApiError::new(
        ErrorCode::MethodNotAllowed,
        "This method is not allowed here.",
    ));
    r.headers
        .push((header::ALLOW, HeaderValue::from_static(allow)));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use sluice_admission::{Admitted, PreQueue, TicketId, Wait};

    /// The answer as it was written before, through a `serde_json::Value`.
    fn through_value(a: &TicketAnswer<'_>) -> Vec<u8> {
        let mut body = json!({
            "room": a.room,
            "state": a.status.state(),
            "position": Value::Null,
            "ahead": Value::Null,
            "estimated_wait_s": Value::Null,
            "poll_after_s": Value::Null,
            "expires_at": a.ticket_expires_at,
        });
        match a.status {
            Status::Waiting(w) | Status::Paused(w) => {
                body["position"] = json!(w.position);
                body["ahead"] = json!(w.ahead);
                body["estimated_wait_s"] = json!(w.estimated_wait_s);
                body["poll_after_s"] = json!(w.poll_after_s);
                body["expires_at"] = json!(w.expires_at_s);
            }
            Status::PreQueue(p) => {
                body["pre_queue"] = json!(true);
                body["opens_at"] = json!(p.opens_at_ms / 1000);
                body["entrants"] = json!(p.entrants);
                body["poll_after_s"] = json!(p.poll_after_s);
                body["expires_at"] = json!(p.expires_at_s);
            }
            Status::Admitted(_) => {
                body["position"] = json!(0);
                body["ahead"] = json!(0);
                body["estimated_wait_s"] = json!(0);
            }
            Status::Expired | Status::SoldOut => {}
        }
        if let Some(f) = a.fair_start {
            body["draw_commitment"] = json!(f.commitment_hex);
            if let Some(seed) = &f.seed_hex {
                body["draw_seed"] = json!(seed);
            }
        }
        if a.joined {
            body["ticket"] = json!(a.ticket);
        }
        if let Some((pass, expires_at)) = a.pass {
            body["pass"] = json!(pass);
            body["pass_expires_at"] = json!(expires_at);
        }
        let mut bytes = serde_json::to_vec(&body).unwrap();
        bytes.push(b'\n');
        bytes
    }

    #[test]
    fn every_answer_is_the_same_bytes_as_through_a_json_value() {
        let wait = Wait {
            position: 12,
            ahead: 11,
            estimated_wait_s: u64::MAX,
            poll_after_s: 60,
            expires_at_s: 1_800_000_100,
        };
        let statuses = [
            Status::Waiting(wait),
            Status::Paused(wait),
            Status::PreQueue(PreQueue {
                opens_at_ms: 1_800_000_500_123,
                entrants: 42,
                poll_after_s: 5,
                expires_at_s: 1_800_003_600,
            }),
            Status::Admitted(Admitted {
                seq: 3,
                ticket_id: TicketId::parse(&"ab".repeat(16)).unwrap(),
                number: 1,
                issued_at_s: 1_800_000_000,
                expires_at_s: 1_800_000_600,
            }),
            Status::Expired,
            Status::SoldOut,
        ];
        let fair = [
            None,
            Some(FairStartInfo {
                opens_at_ms: 1_800_000_500_000,
                commitment_hex: "c0".repeat(32),
                seed_hex: None,
                entrants: 42,
            }),
            Some(FairStartInfo {
                opens_at_ms: 1_800_000_500_000,
                commitment_hex: "c0".repeat(32),
                seed_hex: Some("5e".repeat(32)),
                entrants: 42,
            }),
        ];
        for status in statuses {
            for fair_start in &fair {
                for joined in [false, true] {
                    let pass = matches!(status, Status::Admitted(_))
                        .then_some(("pass.tok.en", 1_800_000_600));
                    let answer = || TicketAnswer {
                        room: "drop",
                        ticket: "tick.et.token",
                        ticket_expires_at: 1_800_003_600,
                        status,
                        pass,
                        fair_start: fair_start.as_ref(),
                        joined,
                        secure: false,
                        now_s: 1_800_000_000,
                        closed: false,
                        message: None,
                        closes_at: None,
                        units_left: None,
                        likely_beyond_stock: None,
                    };
                    let expected = through_value(&answer());
                    let written = ticket(answer());
                    assert_eq!(
                        String::from_utf8_lossy(&written.body),
                        String::from_utf8_lossy(&expected),
                        "{status:?} joined {joined}"
                    );
                }
            }
        }
    }
}
