//! The credentials a request carries: `Authorization: Bearer` and cookies.
//!
//! A request with two or more `Authorization` headers is refused
//! ([`AuthError::Repeated`], a `400 bad_request`) instead of one being
//! picked: a CDN, a WAF or the origin may read another one than the
//! gateway, and then they disagree about who is calling.
//!
//! Cookies are read with the `cookie` crate (`Cookie::split_parse`, which
//! handles quoted values and stray separators). A credential cookie sent
//! twice with different values is refused as well
//! ([`check_single_cookie`], [`AuthError::CookieRepeated`]): a page on a
//! sibling subdomain can set a `Domain=` cookie of the same name with a
//! longer path ("cookie tossing"), which RFC 6265 §5.4 puts first, so a
//! first-wins reading would let it fix the shopper's pass to the attacker's
//! (and the shopper's order to the attacker's subject). The same value
//! twice is harmless and read once; otherwise the first wins.

use cookie::Cookie;
use http::{header, HeaderMap};

/// Longest `Cookie` header value read, in bytes; longer ones are ignored
/// (browsers send at most a few KiB).
pub const COOKIE_HEADER_BYTES_MAX: usize = 16 * 1024;

/// Why a request's credentials cannot be read one way only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("The request carries more than one Authorization header.")]
    Repeated,
    #[error(
        "The request carries two different {0} cookies; clear this site's cookies and try again."
    )]
    CookieRepeated(&'static str),
}

/// Refuses a request that sends any cookie of `names` twice with
/// different values (see the module's note on cookie tossing).
pub fn check_single_cookie(headers: &HeaderMap, names: &[&'static str]) -> Result<(), AuthError> {
    let values: Vec<&str> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter(|v| v.len() <= COOKIE_HEADER_BYTES_MAX)
        .filter_map(|v| v.to_str().ok())
        .collect();
    for &name in names {
        // Cheap first: a name that appears at most once needs no parsing.
        if values
            .iter()
            .map(|v| v.matches(name).count())
            .sum::<usize>()
            < 2
        {
            continue;
        }
        let mut first: Option<&str> = None;
        let sent = values
            .iter()
            .flat_map(|v| Cookie::split_parse(*v))
            .filter_map(Result::ok)
            .filter(|c| c.name() == name)
            .filter_map(|c| c.value_raw())
            .map(|v| v.trim_matches('"'));
        for value in sent {
            match first {
                None => first = Some(value),
                Some(seen) if seen != value => return Err(AuthError::CookieRepeated(name)),
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// Refuses a request whose `Authorization` header is repeated.
pub fn check_single_authorization(headers: &HeaderMap) -> Result<(), AuthError> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    match (values.next(), values.next()) {
        (Some(_), Some(_)) => Err(AuthError::Repeated),
        _ => Ok(()),
    }
}

/// The token of `Authorization: Bearer <token>` (the scheme in any case,
/// RFC 9110 §11.1), if the request has one. Another scheme is no bearer
/// token (`Ok(None)`); a repeated header is an error.
pub fn bearer(headers: &HeaderMap) -> Result<Option<&str>, AuthError> {
    check_single_authorization(headers)?;
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let Ok(value) = value.to_str() else {
        return Ok(None);
    };
    let Some((scheme, token)) = value.trim_start().split_once(' ') else {
        return Ok(None);
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Ok(None);
    }
    let token = token.trim_matches(|c: char| c == ' ' || c == '\t');
    Ok((!token.is_empty()).then_some(token))
}

/// The value of cookie `name`: the first one sent, over every `Cookie`
/// header; `None` when absent or empty.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter(|v| v.len() <= COOKIE_HEADER_BYTES_MAX)
        .filter_map(|v| v.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == name)
        .and_then(|c| c.value_raw())
        .map(|v| v.trim_matches('"'))
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_cookie_sent_twice_with_different_values_is_refused() {
        let names = ["sluice_pass", "sluice_ticket"];
        let ok = |pairs: &[(&str, &str)]| check_single_cookie(&headers(pairs), &names);
        assert_eq!(ok(&[("cookie", "sluice_pass=a; theme=dark")]), Ok(()));
        assert_eq!(ok(&[("cookie", "sluice_pass=a; sluice_pass=a")]), Ok(()));
        assert_eq!(ok(&[("cookie", "sluice_pass=a; sluice_ticket=b")]), Ok(()));
        assert_eq!(ok(&[("cookie", "x_sluice_pass=1; sluice_pass=a")]), Ok(()));
        assert_eq!(
            ok(&[("cookie", "sluice_pass=attacker; sluice_pass=mine")]),
            Err(AuthError::CookieRepeated("sluice_pass"))
        );
        assert_eq!(
            ok(&[
                ("cookie", "sluice_ticket=a"),
                ("cookie", "sluice_ticket=\"b\"")
            ]),
            Err(AuthError::CookieRepeated("sluice_ticket"))
        );
        assert_eq!(
            ok(&[("cookie", "other=1; other=2")]),
            Ok(()),
            "only the named cookies"
        );
    }
    use http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn bearer_reads_one_header_in_any_scheme_case() {
        assert_eq!(
            bearer(&headers(&[("authorization", "Bearer abc.def")])),
            Ok(Some("abc.def"))
        );
        assert_eq!(
            bearer(&headers(&[("authorization", "bearer  abc ")])),
            Ok(Some("abc"))
        );
        assert_eq!(
            bearer(&headers(&[("authorization", "BEARER x")])),
            Ok(Some("x"))
        );
        assert_eq!(bearer(&headers(&[("authorization", "Bearer ")])), Ok(None));
        assert_eq!(bearer(&headers(&[("authorization", "Bearer")])), Ok(None));
        assert_eq!(
            bearer(&headers(&[("authorization", "Basic dTpw")])),
            Ok(None)
        );
        assert_eq!(bearer(&HeaderMap::new()), Ok(None));
    }

    #[test]
    fn two_authorization_headers_are_refused_whatever_they_hold() {
        for second in ["Bearer b", "Basic dTpw", ""] {
            let h = headers(&[("authorization", "Bearer a"), ("authorization", second)]);
            assert_eq!(bearer(&h), Err(AuthError::Repeated), "{second:?}");
            assert_eq!(check_single_authorization(&h), Err(AuthError::Repeated));
        }
        assert_eq!(
            check_single_authorization(&headers(&[("authorization", "Bearer a")])),
            Ok(())
        );
    }

    #[test]
    fn cookies_are_split_and_the_first_of_a_name_wins() {
        let h = headers(&[
            ("cookie", "a=1; sluice_pass=p1;b=2"),
            ("cookie", "sluice_pass=p2"),
        ]);
        assert_eq!(cookie(&h, "sluice_pass"), Some("p1"));
        assert_eq!(cookie(&h, "b"), Some("2"));
        assert_eq!(cookie(&h, "c"), None);
        let quoted = headers(&[("cookie", "sluice_pass=\"tok\"")]);
        assert_eq!(cookie(&quoted, "sluice_pass"), Some("tok"));
        let empty = headers(&[("cookie", "sluice_pass=; x")]);
        assert_eq!(cookie(&empty, "sluice_pass"), None);
        let prefix = headers(&[("cookie", "xsluice_pass=no; sluice_passx=no")]);
        assert_eq!(cookie(&prefix, "sluice_pass"), None);
    }

    #[test]
    fn an_oversized_cookie_header_is_not_read() {
        let big = format!("sluice_pass=t; pad={}", "x".repeat(COOKIE_HEADER_BYTES_MAX));
        assert_eq!(cookie(&headers(&[("cookie", &big)]), "sluice_pass"), None);
    }
}
