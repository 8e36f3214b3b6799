//! The `Host` header, read one way (RFC 9112 §3.2): a server must answer
//! `400` to an HTTP/1.1 request without one and to any request with more
//! than one. Picking one of two would let the gateway and the origin (or a
//! cache in between) disagree about which site a request is for.
//!
//! HTTP/1.0 may leave it out, and HTTP/2 and HTTP/3 name the site in the
//! `:authority` pseudo-header, so only a repeated `Host` is refused there.

use http::{header, HeaderMap, Version};

/// Why the request's `Host` cannot be read one way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("An HTTP/1.1 request must carry a Host header.")]
    Missing,
    #[error("The request carries more than one Host header.")]
    Repeated,
}

/// Refuses an HTTP/1.1 request without `Host`, and any with two.
pub fn check_host(version: Version, headers: &HeaderMap) -> Result<(), HostError> {
    let mut values = headers.get_all(header::HOST).iter();
    match (values.next(), values.next()) {
        (Some(_), Some(_)) => Err(HostError::Repeated),
        (None, _) if version == Version::HTTP_11 => Err(HostError::Missing),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn with_hosts(hosts: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for h in hosts {
            headers.append(header::HOST, HeaderValue::from_static(h));
        }
        headers
    }

    #[test]
    fn http11_needs_exactly_one_host() {
        let v = Version::HTTP_11;
        assert_eq!(check_host(v, &with_hosts(&[])), Err(HostError::Missing));
        assert_eq!(check_host(v, &with_hosts(&["shop"])), Ok(()));
        assert_eq!(
            check_host(v, &with_hosts(&["shop", "evil"])),
            Err(HostError::Repeated)
        );
    }

    #[test]
    fn other_versions_may_omit_it_but_never_repeat_it() {
        for v in [Version::HTTP_10, Version::HTTP_2] {
            assert_eq!(check_host(v, &with_hosts(&[])), Ok(()), "{v:?}");
            assert_eq!(check_host(v, &with_hosts(&["shop"])), Ok(()), "{v:?}");
            assert_eq!(
                check_host(v, &with_hosts(&["shop", "shop"])),
                Err(HostError::Repeated),
                "{v:?}"
            );
        }
    }
}
