//! The headers that tell the origin which pass opened a protected path:
//! `Sluice-Room` (the room whose pass it is), `Sluice-Pass-Subject` (the
//! pass's `sub`, the ticket id it was minted for) and, for a place taken
//! with a store's enqueue token, `Sluice-Pass-Account` (the account's keyed
//! hash, the pass's `acct`: 32 hex digits, never the account id).
//!
//! An origin trusts them only because the gateway alone writes them: every
//! spelling of these names a client sends is removed from every forwarded
//! request ([`is_reserved`], applied with the other headers never
//! forwarded in [`crate::headers::not_forwarded_in`]), and the gateway sets
//! them ([`of_pass`]) only on a protected path whose pass it verified.

use http::{HeaderName, HeaderValue};
use sluice_admission::tokens::Claims;

const ROOM: &str = "sluice-room";
const PASS_SUBJECT: &str = "sluice-pass-subject";
const PASS_ACCOUNT: &str = "sluice-pass-account";

pub const SLUICE_ROOM: HeaderName = HeaderName::from_static(ROOM);
pub const SLUICE_PASS_SUBJECT: HeaderName = HeaderName::from_static(PASS_SUBJECT);
pub const SLUICE_PASS_ACCOUNT: HeaderName = HeaderName::from_static(PASS_ACCOUNT);

/// The names, lowercase with `-`.
static RESERVED: [&str; 3] = [ROOM, PASS_SUBJECT, PASS_ACCOUNT];

/// Whether `name` is one of the gateway's pass headers in any spelling.
/// Header names are case-insensitive (`http` keeps them lowercase); and
/// servers that hand headers to code as CGI-style variables (PHP, Rack,
/// WSGI, nginx with `underscores_in_headers`) map `_` and `-` alike, so a
/// client's `Sluice_Room` would reach the origin's code as the
/// gateway's `HTTP_SLUICE_ROOM`.
pub fn is_reserved(name: &HeaderName) -> bool {
    let name = name.as_str().as_bytes();
    RESERVED.iter().any(|reserved| {
        reserved.len() == name.len()
            && reserved
                .bytes()
                .zip(name)
                .all(|(r, n)| r == *n || (r == b'-' && *n == b'_'))
    })
}

/// The headers a request forwarded on a protected path carries: the room,
/// the `sub` of the pass verified for it and its account hash if it has
/// one. All are header-safe (a room name is `[a-z0-9_-]`, a `sub` and an
/// account hash 32 hex digits, from a token the gateway signed); one that
/// were not would be left out rather than sent mangled.
pub fn of_pass(room: &str, pass: &Claims) -> Vec<(HeaderName, HeaderValue)> {
    [
        (SLUICE_ROOM, Some(room)),
        (SLUICE_PASS_SUBJECT, Some(pass.sub.as_str())),
        (SLUICE_PASS_ACCOUNT, pass.acct.as_deref()),
    ]
    .into_iter()
    .filter_map(|(name, value)| Some((name, value?)))
    .filter_map(|(name, value)| Some((name, HeaderValue::from_str(value).ok()?)))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_admission::tokens::TokenType;

    #[test]
    fn every_spelling_of_the_pass_headers_is_reserved() {
        for name in [
            "Sluice-Room",
            "sluice_room",
            "SLUICE-PASS-SUBJECT",
            "Sluice_Pass-Subject",
            "sluice-pass-account",
            "SLUICE_PASS_ACCOUNT",
        ] {
            let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
            assert!(is_reserved(&name), "{name}");
        }
        for name in [
            "sluice-rooms",
            "sluice-roo",
            "x-sluice-room",
            "sluice-pass",
            "sluice-pass-subjec",
            "sluice.room",
            "room",
        ] {
            let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
            assert!(!is_reserved(&name), "{name}");
        }
    }

    #[test]
    fn a_pass_names_its_room_and_subject() {
        let sub = "0123456789abcdef0123456789abcdef";
        let pass = Claims::new(TokenType::Pass, "drop", sub, 7, 10, 20);
        assert_eq!(
            of_pass("drop", &pass),
            [
                (SLUICE_ROOM, HeaderValue::from_static("drop")),
                (SLUICE_PASS_SUBJECT, HeaderValue::from_static(sub)),
            ]
        );
        let hash = sluice_admission::enqueue::AccountHash([0xab; 16]);
        let held = pass.clone().for_account(Some(&hash));
        assert_eq!(
            of_pass("drop", &held)[2],
            (
                SLUICE_PASS_ACCOUNT,
                HeaderValue::from_str(&"ab".repeat(16)).unwrap()
            )
        );
        let odd = Claims::new(TokenType::Pass, "drop", "a\nb", 7, 10, 20);
        assert_eq!(
            of_pass("drop", &odd),
            [(SLUICE_ROOM, HeaderValue::from_static("drop"))]
        );
    }
}
