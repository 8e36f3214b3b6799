//! `GET /queue/{room}/watermark`: the room's shared numbers, public and
//! cacheable for a second, so a CDN in front of the gateways answers most
//! of a waiting line's polls.

use bytes::Bytes;
use http::{header, HeaderValue, StatusCode};
use serde_json::json;
use sluice_admission::Watermark;

use crate::response::LocalResponse;

/// Seconds a cache may serve the watermark: the same second everyone
/// polls at is one request to the gateway.
pub const MAX_AGE_S: u32 = 1;

/// The watermark of `room`, with the room's `heartbeat_s`: how often a
/// page that follows the line here still calls `/status` to stay in it.
pub fn answer(room: &str, w: &Watermark, heartbeat_s: u64) -> LocalResponse {
    let body = json!({
        "room": room,
        "serving": w.serving,
        "waiting": w.waiting,
        "release_per_second": w.release_per_second,
        "state": w.state.as_str(),
        "poll_after_s": w.poll_after_s.max(MAX_AGE_S),
        "heartbeat_s": heartbeat_s,
    });
    let mut bytes = serde_json::to_vec(&body).expect("JSON values serialize");
    bytes.push(b'\n');
    LocalResponse {
        status: StatusCode::OK,
        headers: vec![
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=1"),
            ),
        ],
        body: Bytes::from(bytes),
        source: "queue",
    }
}
