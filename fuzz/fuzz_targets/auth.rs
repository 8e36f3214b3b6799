//! Bearer, cookie and `Authorization` parsing over arbitrary header values:
//! never panics, a repeated `Authorization` is always refused, and a token
//! found is a trimmed, non-empty piece of the header it came from.
#![no_main]

use http::{header, HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use sluice_edge::auth::{bearer, check_single_authorization, cookie, AuthError};

fuzz_target!(|values: Vec<(bool, &[u8])>| {
    let mut headers = HeaderMap::new();
    let mut authorizations = 0;
    for (is_auth, bytes) in values.into_iter().take(8) {
        let Ok(value) = HeaderValue::from_bytes(bytes) else {
            continue;
        };
        if is_auth {
            authorizations += 1;
            headers.append(header::AUTHORIZATION, value);
        } else {
            headers.append(header::COOKIE, value);
        }
    }
    let token = bearer(&headers);
    assert_eq!(
        token.is_err(),
        authorizations >= 2,
        "repeated Authorization must be refused"
    );
    assert_eq!(
        check_single_authorization(&headers),
        if authorizations >= 2 { Err(AuthError::Repeated) } else { Ok(()) }
    );
    if let Ok(Some(token)) = token {
        assert!(!token.is_empty() && token.trim() == token);
        let header = headers[header::AUTHORIZATION].to_str().unwrap();
        assert!(header.contains(token));
    }
    if let Some(value) = cookie(&headers, "sluice_pass") {
        assert!(!value.is_empty());
        assert!(headers
            .get_all(header::COOKIE)
            .iter()
            .any(|h| h.to_str().is_ok_and(|h| h.contains(value))));
    }
});
