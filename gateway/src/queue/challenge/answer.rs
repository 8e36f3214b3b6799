//! The JSON of a challenge (`GET /queue/{room}/challenge`, kind `pow`) and
//! of `401 challenge_required`, whose body adds the challenge to solve.

use bytes::Bytes;
use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Value};
use sluice_admission::challenge::{IssuedChallenge, ALGORITHM};
use sluice_admission::room::Watermark;
use sluice_admission::Wait;
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

/// The wait shown to a retry of a join (same challenge and solution) that
/// came sooner than its place's next poll: place `seq` against the line's
/// public numbers, as the queue page estimates it from the watermark
/// (a released place shows first in line; its next poll collects).
pub fn retry_wait(seq: u64, mark: &Watermark, retry_after_s: u64, expires_at_s: u64) -> Wait {
    let ahead = seq.saturating_sub(mark.serving);
    let rate = u64::from(mark.release_per_second.max(1));
    Wait {
        position: ahead + 1,
        ahead,
        estimated_wait_s: ahead.div_ceil(rate),
        poll_after_s: retry_after_s.clamp(1, u64::from(u32::MAX)) as u32,
        expires_at_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_admission::room::RoomState;

    #[test]
    fn a_retry_is_shown_its_place_against_the_watermark() {
        let mark = Watermark {
            serving: 10,
            waiting: 50,
            release_per_second: 4,
            state: RoomState::Open,
            poll_after_s: 2,
        };
        let w = retry_wait(19, &mark, 3, 99);
        assert_eq!((w.position, w.ahead, w.estimated_wait_s), (10, 9, 3));
        assert_eq!((w.poll_after_s, w.expires_at_s), (3, 99));
        assert_eq!(retry_wait(5, &mark, 0, 99).position, 1);
    }
}
