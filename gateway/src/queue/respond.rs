//! The waiting room's answers in the contract's JSON, with their cookies.

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde_json::{json, Value};
use sluice_admission::fair_start::FairStartInfo;
use sluice_admission::Status;

use super::{page, PASS_COOKIE, TICKET_COOKIE};
use crate::error::{ApiError, ErrorCode};
use crate::route::LocalResponse;

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
}

pub fn ticket(a: TicketAnswer<'_>) -> LocalResponse {
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
    let mut headers = vec![
        (
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
    ];
    if a.joined {
        body["ticket"] = json!(a.ticket);
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
        body["pass"] = json!(pass);
        body["pass_expires_at"] = json!(expires_at);
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
    let mut bytes = serde_json::to_vec(&body).expect("JSON values serialize");
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

pub fn page(headers: &HeaderMap) -> LocalResponse {
    LocalResponse {
        status: StatusCode::OK,
        headers: vec![
            (header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            (header::VARY, HeaderValue::from_static("Accept-Language")),
            (
                HeaderName::from_static("content-security-policy"),
                HeaderValue::from_static(
                    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'",
                ),
            ),
        ],
        body: Bytes::from(page::render(headers)),
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
