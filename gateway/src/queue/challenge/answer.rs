//! The JSON of a challenge (`GET /queue/{room}/challenge`, kind `pow`) and
//! of `401 challenge_required`, whose body adds the challenge to solve.

use bytes::Bytes;
use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Value};
use sluice_admission::challenge::{IssuedChallenge, ALGORITHM};
use sluice_policies::model::SiteVerify;

use crate::error::{ApiError, ErrorCode};
use crate::response::LocalResponse;

/// The challenge object: `{"room","challenge","algorithm",
/// "difficulty_bits","expires_at"}`.
pub fn object(room: &str, issued: &IssuedChallenge) -> Value {
    json!({
        "room": room,
        "challenge": issued.text,
        "algorithm": ALGORITHM,
        "difficulty_bits": issued.challenge.difficulty_bits,
        "expires_at": issued.challenge.expires_at_s,
    })
}

/// `200` with the challenge object, never stored by a cache.
pub fn challenge(room: &str, issued: &IssuedChallenge) -> LocalResponse {
    json_answer(StatusCode::OK, &object(room, issued))
}

/// What a siteverify room's `challenge_required` names: the widget the
/// page renders and the key it renders it with.
pub fn widget(room: &str, sv: &SiteVerify) -> LocalResponse {
    json_answer(
        StatusCode::OK,
        &json!({
            "room": room,
            "kind": "siteverify",
            "widget": sv.widget.as_str(),
            "site_key": sv.site_key,
            "script_url": sv.script_url,
        }),
    )
}

/// `401 challenge_required` whose `challenge` is the body of `fresh` (a
/// `200` challenge answer); any other `fresh` is passed on as it is (a
/// room that issues none).
pub fn required(fresh: LocalResponse) -> LocalResponse {
    if fresh.status != StatusCode::OK {
        return fresh;
    }
    let challenge: Value = serde_json::from_slice(&fresh.body).unwrap_or(Value::Null);
    let error = ApiError::new(
        ErrorCode::ChallengeRequired,
        "This waiting room asks a challenge of each join: solve it and join again.",
    );
    let mut body: Value = serde_json::from_slice(&error.body()).unwrap_or(Value::Null);
    body["challenge"] = challenge;
    let mut answer = LocalResponse::error(&error);
    answer.body = to_bytes(&body);
    answer
}

fn json_answer(status: StatusCode, body: &Value) -> LocalResponse {
    LocalResponse {
        status,
        headers: vec![
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        body: to_bytes(body),
        source: "queue",
    }
}

fn to_bytes(body: &Value) -> Bytes {
    let mut out = serde_json::to_vec(body).expect("JSON value serializes");
    out.push(b'\n');
    Bytes::from(out)
}
