//! Provider webhooks, without HTTP: [`verify_signature`] checks the
//! `Sluice-Signature` header against the raw body before anything is read,
//! [`parse_event`] reads the body, and [`apply_webhook`] applies it to the
//! store (the crate-private `events` module says what each event does).
//!
//! The event id is stored in the same transaction as the state change and
//! its outbox rows, so a duplicate changes nothing; "the most advanced state
//! wins", so the order of arrival does not matter.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::backend::sqlite::events;
use crate::backend::sqlite::store::Store;
use crate::clock::UnixMs;
pub use crate::core::event::{EventData, EventType, WebhookEvent, WebhookOutcome};
use crate::error::StoreError;
use crate::limits::{
    PROVIDER_ID_LEN_MAX, WEBHOOK_BODY_BYTES_MAX, WEBHOOK_HEADER_BYTES_MAX, WEBHOOK_SIGNATURES_MAX,
};
use crate::metrics::Metrics;

/// The header that carries the signature.
pub const SIGNATURE_HEADER: &str = "Sluice-Signature";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    #[error("signature header is malformed: {0}")]
    Malformed(&'static str),
    #[error("signature timestamp is outside the tolerance")]
    Stale,
    #[error("no signature matches")]
    InvalidSignature,
    #[error("no webhook secret is configured")]
    NoSecret,
    #[error("body is not a valid event: {0}")]
    BadBody(String),
    #[error("body is larger than {WEBHOOK_BODY_BYTES_MAX} bytes")]
    TooLarge,
}

impl WebhookError {
    /// The `result` label of `sluice_webhook_events_total`.
    pub fn result(&self) -> &'static str {
        match self {
            WebhookError::Stale => "stale",
            WebhookError::BadBody(_) | WebhookError::TooLarge => "bad_request",
            _ => "invalid_signature",
        }
    }
}

/// Checks `Sluice-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]`: some `v1` must
/// equal `HMAC-SHA256(secret, "<t>.<raw body>")` for some secret (several
/// during rotation), compared in constant time, and `t` must be within
/// `tolerance_s` of `now_unix` (the contract's is
/// [`crate::limits::WEBHOOK_TOLERANCE_S`]).
pub fn verify_signature(
    header: &str,
    raw_body: &[u8],
    secrets: &[&[u8]],
    now_unix: i64,
    tolerance_s: i64,
) -> Result<(), WebhookError> {
    if header.len() > WEBHOOK_HEADER_BYTES_MAX {
        return Err(WebhookError::Malformed("too long"));
    }
    if raw_body.len() > WEBHOOK_BODY_BYTES_MAX {
        return Err(WebhookError::TooLarge);
    }
    if secrets.is_empty() {
        return Err(WebhookError::NoSecret);
    }
    let mut timestamp: Option<(&str, i64)> = None;
    let mut signatures: Vec<Vec<u8>> = Vec::new();
    for part in header.split(',') {
        let Some((name, value)) = part.trim().split_once('=') else {
            return Err(WebhookError::Malformed("expected name=value"));
        };
        match name {
            "t" => {
                let t = value
                    .parse::<i64>()
                    .map_err(|_| WebhookError::Malformed("t is not a number"))?;
                timestamp = Some((value, t));
            }
            "v1" => {
                if signatures.len() >= WEBHOOK_SIGNATURES_MAX {
                    return Err(WebhookError::Malformed("too many v1 values"));
                }
                // A value that is not hex can never match; skip it rather
                // than refuse the others.
                if let Ok(bytes) = hex::decode(value) {
                    signatures.push(bytes);
                }
            }
            // Other schemes (v0, future versions) are ignored.
            _ => {}
        }
    }
    let Some((t_text, t)) = timestamp else {
        return Err(WebhookError::Malformed("no t"));
    };
    if signatures.is_empty() {
        return Err(WebhookError::InvalidSignature);
    }
    // `abs_diff`: `(now - t).abs()` overflows when the difference is
    // `i64::MIN`, which a clock and a header together can reach.
    if now_unix.abs_diff(t) > u64::try_from(tolerance_s).unwrap_or(0) {
        return Err(WebhookError::Stale);
    }
    for secret in secrets {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
            continue;
        };
        mac.update(t_text.as_bytes());
        mac.update(b".");
        mac.update(raw_body);
        for signature in &signatures {
            // `verify_slice` compares in constant time.
            if mac.clone().verify_slice(signature).is_ok() {
                return Ok(());
            }
        }
    }
    Err(WebhookError::InvalidSignature)
}

/// The header value a provider sends for `raw_body` at `t` (tests, the
/// simulator, `paysim`).
pub fn sign(secret: &[u8], t: i64, raw_body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(raw_body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// Reads and bounds an event body (after its signature was checked).
pub fn parse_event(raw_body: &[u8]) -> Result<WebhookEvent, WebhookError> {
    if raw_body.len() > WEBHOOK_BODY_BYTES_MAX {
        return Err(WebhookError::TooLarge);
    }
    let event: WebhookEvent =
        serde_json::from_slice(raw_body).map_err(|e| WebhookError::BadBody(e.to_string()))?;
    for (name, value) in [
        ("id", &event.id),
        ("data.payment_id", &event.data.payment_id),
        ("data.order_id", &event.data.order_id),
    ] {
        if value.is_empty()
            || value.len() > PROVIDER_ID_LEN_MAX
            || !value.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(WebhookError::BadBody(format!(
                "{name} must be 1 to {PROVIDER_ID_LEN_MAX} visible ASCII characters"
            )));
        }
    }
    if i64::try_from(event.data.amount_cents).is_err() {
        return Err(WebhookError::BadBody("amount_cents too large".into()));
    }
    Ok(event)
}

/// Applies one verified event: the event id, the payment and order change
/// and their outbox rows commit in one transaction. Counted in
/// `webhook_events{result}`.
pub fn apply_webhook(
    store: &Store,
    event: &WebhookEvent,
    now_ms: UnixMs,
) -> Result<WebhookOutcome, StoreError> {
    let event = event.clone();
    let outcome =
        store.write(move |tx, metrics| events::apply_event(tx, metrics, &event, now_ms))?;
    store.metrics().count_webhook(outcome.result());
    Ok(outcome)
}

/// Counts a webhook refused before it reached the store.
pub fn count_refused(metrics: &Metrics, error: &WebhookError) {
    metrics.count_webhook(error.result());
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = br#"{"id":"evt_1","type":"payment.captured","created":1,"data":{"payment_id":"pay_1","order_id":"ord_1","amount_cents":100}}"#;

    #[test]
    fn a_good_signature_passes_and_anything_else_fails() {
        let header = sign(b"s1", 1_000, BODY);
        assert_eq!(
            verify_signature(&header, BODY, &[b"s1"], 1_000, 300),
            Ok(())
        );
        assert_eq!(
            verify_signature(&header, BODY, &[b"s2"], 1_000, 300),
            Err(WebhookError::InvalidSignature)
        );
        let mut tampered = BODY.to_vec();
        tampered[10] ^= 1;
        assert_eq!(
            verify_signature(&header, &tampered, &[b"s1"], 1_000, 300),
            Err(WebhookError::InvalidSignature)
        );
        assert_eq!(
            verify_signature(&header, BODY, &[b"s1"], 1_301, 300),
            Err(WebhookError::Stale)
        );
        assert_eq!(
            verify_signature(&header, BODY, &[b"s1"], 699, 300),
            Err(WebhookError::Stale)
        );
        assert_eq!(
            verify_signature(&header, BODY, &[b"s1"], 1_300, 300),
            Ok(())
        );
        // Extreme clocks and timestamps are stale, not an overflow.
        for (t, now) in [(1, i64::MIN), (i64::MIN, i64::MAX), (i64::MAX, i64::MIN)] {
            let header = sign(b"s1", t, BODY);
            assert_eq!(
                verify_signature(&header, BODY, &[b"s1"], now, 300),
                Err(WebhookError::Stale),
                "t={t} now={now}"
            );
        }
        assert!(matches!(
            verify_signature("v1=00", BODY, &[b"s1"], 1_000, 300),
            Err(WebhookError::Malformed(_))
        ));
        assert_eq!(
            verify_signature("t=1000", BODY, &[b"s1"], 1_000, 300),
            Err(WebhookError::InvalidSignature)
        );
        assert_eq!(
            verify_signature(&header, BODY, &[], 1_000, 300),
            Err(WebhookError::NoSecret)
        );
    }

    #[test]
    fn rotation_accepts_any_secret_and_any_v1() {
        let old = sign(b"old", 1_000, BODY);
        let new = sign(b"new", 1_000, BODY);
        let new_v1 = new.split_once(",v1=").unwrap().1;
        // The provider signs with both secrets during rotation.
        let both = format!("{old},v1={new_v1}");
        assert_eq!(verify_signature(&both, BODY, &[b"new"], 1_000, 300), Ok(()));
        assert_eq!(verify_signature(&both, BODY, &[b"old"], 1_000, 300), Ok(()));
        // Sluice accepts both secrets during rotation.
        assert_eq!(
            verify_signature(&old, BODY, &[b"new", b"old"], 1_000, 300),
            Ok(())
        );
        let garbage = format!("t=1000,v1=zz,v1={new_v1}");
        assert_eq!(
            verify_signature(&garbage, BODY, &[b"new"], 1_000, 300),
            Ok(())
        );
    }

    #[test]
    fn bodies_are_parsed_and_bounded() {
        let event = parse_event(BODY).unwrap();
        assert_eq!(event.event_type, EventType::Captured);
        assert_eq!(event.data.amount_cents, 100);
        assert!(parse_event(b"{}").is_err());
        let bad_id = String::from_utf8_lossy(BODY).replace("evt_1", "evt 1");
        assert!(parse_event(bad_id.as_bytes()).is_err());
        let unknown = String::from_utf8_lossy(BODY).replace("payment.captured", "payment.lost");
        assert!(parse_event(unknown.as_bytes()).is_err());
    }
}
