//! `next`: where a browser sent to the waiting room from a protected path
//! goes back to once admitted.
//!
//! The gateway writes it (the `303` to `/queue/{room}?next=…`,
//! [`queue_location`]) and reads it back for the queue page
//! ([`from_query`]), which follows only the value the gateway rendered into
//! it. Both ends keep a `next` only when [`checked`] does: a path on this
//! site, spelled the one way the gateway forwards it. Anything else (another
//! host, `//host`, `/\host`, a scheme, an over-long or non-canonical path)
//! is dropped, never followed: the shopper then lands on `/`.

use sluice_edge::path::normalize;

/// The longest `next` kept, in bytes (path and query).
pub const NEXT_BYTES_MAX: usize = 2048;

/// The query parameter that carries it.
const PARAM: &str = "next";

/// `target` (a path, and a query after `?`) when it may be followed: it
/// starts with one `/` (not `//` or `/\`, which a browser reads as another
/// host), its path is canonical (`sluice_edge::path`: what [`normalize`]
/// returns, byte for byte, so nothing another reader could take two ways),
/// its query holds only the characters RFC 3986 allows there (visible
/// ASCII, well-formed escapes; no `#`, space or control character), and it
/// is at most [`NEXT_BYTES_MAX`] bytes.
pub fn checked(target: &str) -> Option<&str> {
    if target.len() > NEXT_BYTES_MAX {
        return None;
    }
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    };
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') || matches!(bytes.get(1), Some(b'/' | b'\\')) {
        return None;
    }
    if normalize(path).ok()?.encoded() != path {
        return None;
    }
    if let Some(query) = query {
        if !query.bytes().all(is_query_byte) || !escapes_are_well_formed(query) {
            return None;
        }
    }
    Some(target)
}

/// Where a browser without a pass for `room` is sent: the room's page,
/// with `target` (the path and query it asked for, as forwarded to the
/// origin) as `next` when [`checked`] keeps it, form-encoded
/// (`/orders/abc?x=1` is `%2Forders%2Fabc%3Fx%3D1`).
pub fn queue_location(room: &str, target: &str) -> String {
    let queue = format!("/queue/{room}");
    match checked(target) {
        Some(next) => {
            let encoded: String = form_urlencoded::byte_serialize(next.as_bytes()).collect();
            format!("{queue}?{PARAM}={encoded}")
        }
        None => queue,
    }
}

/// The `next` of a queue page request's query (the first one, form-decoded
/// as a browser encodes it), when [`checked`] keeps it.
pub fn from_query(query: Option<&str>) -> Option<String> {
    let (_, value) = form_urlencoded::parse(query?.as_bytes()).find(|(name, _)| name == PARAM)?;
    checked(&value).map(str::to_owned)
}

/// RFC 3986 §3.4: `query = *( pchar / "/" / "?" )`, with `pchar` =
/// unreserved / pct-encoded / sub-delims / ":" / "@".
fn is_query_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=:@/?".contains(&b)
}

/// Every `%` starts two hex digits.
fn escapes_are_well_formed(query: &str) -> bool {
    let bytes = query.as_bytes();
    bytes.iter().enumerate().all(|(i, b)| {
        *b != b'%'
            || bytes
                .get(i + 1..i + 3)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_site_canonical_paths_are_kept() {
        for next in [
            "/",
            "/orders/abc",
            "/orders/abc?x=1",
            "/cart/caf%C3%A9?q=a%20b&r=/x?y",
            "/pt/",
        ] {
            assert_eq!(checked(next), Some(next), "{next}");
        }
        let longest = format!("/{}", "a".repeat(NEXT_BYTES_MAX - 1));
        assert_eq!(checked(&longest), Some(longest.as_str()));
    }

    #[test]
    fn other_hosts_and_odd_spellings_are_dropped() {
        let too_long = format!("/{}", "a".repeat(NEXT_BYTES_MAX));
        for next in [
            "",
            "//evil.example/x",
            "/\\evil",
            "https://evil/",
            "javascript:alert(1)",
            "evil",
            " /x",
            "/\t/evil.example",
            too_long.as_str(),
            // Not canonical: dot segments, empty segments, a needless or
            // lowercase escape, an encoded slash, a path parameter.
            "/orders/../admin",
            "/orders//abc",
            "/%63art",
            "/caf%c3%a9",
            "/a%2fb",
            "/a;b",
            // A query a browser would not send as is.
            "/x?a b",
            "/x?a#b",
            "/x?a\"b",
            "/x?<script>",
            "/x?a%zz",
            "/x?a%4",
        ] {
            assert_eq!(checked(next), None, "{next:?}");
        }
    }

    #[test]
    fn the_queue_location_carries_the_target_form_encoded_or_nothing() {
        assert_eq!(
            queue_location("drop", "/orders/abc?x=1"),
            "/queue/drop?next=%2Forders%2Fabc%3Fx%3D1"
        );
        assert_eq!(
            queue_location("drop", "/a?b=c+d&e=%2F"),
            "/queue/drop?next=%2Fa%3Fb%3Dc%2Bd%26e%3D%252F"
        );
        let too_long = format!("/{}", "a".repeat(NEXT_BYTES_MAX));
        assert_eq!(queue_location("drop", &too_long), "/queue/drop");
        assert_eq!(queue_location("drop", "/a?<b>"), "/queue/drop");
    }

    #[test]
    fn the_page_reads_back_what_the_location_wrote() {
        for target in ["/orders/abc?x=1", "/a?b=c+d&e=%2F", "/"] {
            let location = queue_location("drop", target);
            let query = location.split_once('?').map(|(_, q)| q);
            assert_eq!(from_query(query).as_deref(), Some(target), "{location}");
        }
        assert_eq!(from_query(None), None);
        assert_eq!(from_query(Some("other=1")), None);
        assert_eq!(from_query(Some("next=%2F%2Fevil.example%2Fx")), None);
        assert_eq!(from_query(Some("next=%2F%5Cevil")), None);
        assert_eq!(from_query(Some("next=https%3A%2F%2Fevil%2F")), None);
        // The first `next` counts, as a browser's URLSearchParams reads it.
        assert_eq!(
            from_query(Some("next=%2Fa&next=%2Fb")).as_deref(),
            Some("/a")
        );
        // Not UTF-8 once decoded: dropped.
        assert_eq!(from_query(Some("next=%2F%FF")), None);
    }
}
