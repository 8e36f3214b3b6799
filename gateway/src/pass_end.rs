//! `Sluice-Pass: end`: the origin ends the pass that made a request.
//!
//! A storefront that knows a session is over (the order is placed, the
//! account signed out, a bot recognised) answers with this header; the
//! gateway then gives the pass's slot back to the line at once (the next
//! shopper gets it), clears the pass cookie, and refuses the pass until it
//! expires, and the header never reaches the client. It is removed from
//! every origin answer, before the origin cache could keep it.

use http::{HeaderMap, HeaderName};

/// The header an origin ends a pass with.
pub const SLUICE_PASS: HeaderName = HeaderName::from_static("sluice-pass");

/// Whether the origin's answer asks to end the pass: a `Sluice-Pass`
/// header whose value is `end` (any case, surrounding blanks ignored).
pub fn origin_ends_pass(headers: &HeaderMap) -> bool {
    headers.get_all(&SLUICE_PASS).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.trim().eq_ignore_ascii_case("end"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn only_the_value_end_ends_a_pass() {
        let mut h = HeaderMap::new();
        assert!(!origin_ends_pass(&h));
        h.insert(SLUICE_PASS, HeaderValue::from_static("keep"));
        assert!(!origin_ends_pass(&h));
        h.append(SLUICE_PASS, HeaderValue::from_static(" End "));
        assert!(origin_ends_pass(&h));
        let mut other = HeaderMap::new();
        other.insert("sluice-passes", HeaderValue::from_static("end"));
        assert!(!origin_ends_pass(&other));
    }
}
