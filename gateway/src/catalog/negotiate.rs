//! The request headers a catalog response depends on: `Accept-Encoding`
//! (which representation), `If-None-Match` and `If-Modified-Since` (whether
//! the client's copy is current). Each reads a bounded number of items.

use std::time::UNIX_EPOCH;

use http::{header, HeaderMap, HeaderValue};

/// How many `Accept-Encoding` items are read; the rest are ignored.
const MAX_CODINGS: usize = 32;
/// How many `If-None-Match` entity-tags are read; the rest are ignored.
const MAX_ETAGS: usize = 64;
/// The q-value (thousandths) of identity when `Accept-Encoding` names
/// neither it nor `*`: acceptable, but the last choice.
const UNLISTED_IDENTITY: u16 = 1;

/// A content coding the catalog can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Coding {
    Identity,
    Gzip,
    Br,
}

impl Coding {
    /// Breaks ties between equal q-values: br, then gzip, then identity.
    pub(super) fn preference(self) -> u8 {
        match self {
            Coding::Identity => 0,
            Coding::Gzip => 1,
            Coding::Br => 2,
        }
    }

    /// The `Content-Encoding` token and the `ETag` suffix.
    pub(super) fn token(self) -> &'static str {
        match self {
            Coding::Identity => "identity",
            Coding::Gzip => "gzip",
            Coding::Br => "br",
        }
    }
}

/// The q-values (in thousandths) that `Accept-Encoding` gives.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct AcceptEncoding {
    br: Option<u16>,
    gzip: Option<u16>,
    identity: Option<u16>,
    any: Option<u16>,
}

impl AcceptEncoding {
    /// Reads every `Accept-Encoding` line. Without the header only identity
    /// is acceptable here (RFC 9110 allows anything, but a client that sends
    /// nothing is safest served plain). Malformed items are ignored; for a
    /// coding listed twice the first counts.
    pub(super) fn parse(headers: &HeaderMap) -> AcceptEncoding {
        let mut accept = AcceptEncoding::default();
        let items = headers
            .get_all(header::ACCEPT_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .take(MAX_CODINGS);
        for item in items {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim();
            let mut q = Some(1000);
            for param in parts {
                let Some((name, value)) = param.split_once('=') else {
                    continue;
                };
                if name.trim().eq_ignore_ascii_case("q") {
                    q = parse_q(value.trim());
                }
            }
            let Some(q) = q else { continue };
            let slot = if coding.eq_ignore_ascii_case("br") {
                &mut accept.br
            } else if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
                &mut accept.gzip
            } else if coding.eq_ignore_ascii_case("identity") {
                &mut accept.identity
            } else if coding == "*" {
                &mut accept.any
            } else {
                continue;
            };
            slot.get_or_insert(q);
        }
        accept
    }

    /// The q-value of `coding`, in thousandths; 0 means not acceptable.
    /// Identity is acceptable unless excluded (`identity;q=0`, or `*;q=0`
    /// without an `identity` item), but when neither names it, it ranks
    /// below every coding the client does list: `gzip;q=0.5` asks for gzip.
    pub(super) fn quality(&self, coding: Coding) -> u16 {
        match coding {
            Coding::Identity => self.identity.or(self.any).unwrap_or(UNLISTED_IDENTITY),
            Coding::Gzip => self.gzip.or(self.any).unwrap_or(0),
            Coding::Br => self.br.or(self.any).unwrap_or(0),
        }
    }
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in
/// thousandths.
fn parse_q(text: &str) -> Option<u16> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths = frac
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(3)
        .fold(0u16, |acc, b| acc * 10 + u16::from(b - b'0'));
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// A parsed `If-None-Match`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum IfNoneMatch<'a> {
    Any,
    /// Opaque tags with their quotes, without any `W/`: the weak comparison
    /// RFC 9110 asks for.
    Tags(Vec<&'a [u8]>),
}

impl<'a> IfNoneMatch<'a> {
    /// `None` when the request has no `If-None-Match`; a present but
    /// unreadable header matches nothing (so it still turns off
    /// `If-Modified-Since`).
    pub(super) fn parse(headers: &'a HeaderMap) -> Option<IfNoneMatch<'a>> {
        let mut values = headers.get_all(header::IF_NONE_MATCH).iter().peekable();
        values.peek()?;
        let mut tags = Vec::new();
        for value in values {
            let mut rest = value.as_bytes();
            loop {
                rest = trim_start(rest, |b| b == b',' || b == b' ' || b == b'\t');
                if rest.is_empty() || tags.len() >= MAX_ETAGS {
                    break;
                }
                if rest[0] == b'*' {
                    return Some(IfNoneMatch::Any);
                }
                let tag = rest.strip_prefix(b"W/").unwrap_or(rest);
                let end = match tag.strip_prefix(b"\"") {
                    Some(inner) => inner.iter().position(|&b| b == b'"').map(|at| at + 2),
                    None => None,
                };
                match end {
                    Some(end) => {
                        tags.push(&tag[..end]);
                        rest = &tag[end..];
                    }
                    // Malformed: skip to the next comma.
                    None => {
                        let next = rest.iter().position(|&b| b == b',').unwrap_or(rest.len());
                        rest = &rest[next..];
                    }
                }
            }
        }
        Some(IfNoneMatch::Tags(tags))
    }

    /// Whether `etag` (a strong tag of ours) is named, comparing weakly.
    pub(super) fn matches(&self, etag: &HeaderValue) -> bool {
        match self {
            IfNoneMatch::Any => true,
            IfNoneMatch::Tags(tags) => tags.iter().any(|t| *t == etag.as_bytes()),
        }
    }
}

fn trim_start(mut bytes: &[u8], strip: impl Fn(u8) -> bool) -> &[u8] {
    while let [first, rest @ ..] = bytes {
        if !strip(*first) {
            break;
        }
        bytes = rest;
    }
    bytes
}

/// `If-Modified-Since` as seconds since the epoch; `None` when absent or
/// not an HTTP date (which RFC 9110 says to ignore).
pub(super) fn if_modified_since(headers: &HeaderMap) -> Option<u64> {
    let value = headers.get(header::IF_MODIFIED_SINCE)?.to_str().ok()?;
    let date = httpdate::parse_http_date(value.trim()).ok()?;
    date.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: header::HeaderName, values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append(name.clone(), HeaderValue::from_str(v).unwrap());
        }
        map
    }

    fn accept(values: &[&str]) -> AcceptEncoding {
        AcceptEncoding::parse(&headers(header::ACCEPT_ENCODING, values))
    }

    #[test]
    fn q_values() {
        for (text, q) in [
            ("1", Some(1000)),
            ("1.", Some(1000)),
            ("1.000", Some(1000)),
            ("0", Some(0)),
            ("0.5", Some(500)),
            ("0.05", Some(50)),
            ("0.001", Some(1)),
            ("1.5", None),
            ("1.0001", None),
            ("0.0001", None),
            ("2", None),
            ("abc", None),
            ("", None),
            ("-0", None),
        ] {
            assert_eq!(parse_q(text), q, "{text:?}");
        }
    }

    #[test]
    fn accept_encoding_qualities() {
        let none = accept(&[]);
        assert_eq!(none.quality(Coding::Identity), UNLISTED_IDENTITY);
        assert_eq!(none.quality(Coding::Gzip), 0);
        assert_eq!(none.quality(Coding::Br), 0);

        let a = accept(&["gzip;q=0.5, BR ; Q=0.8", "identity;q=0"]);
        assert_eq!(a.quality(Coding::Gzip), 500);
        assert_eq!(a.quality(Coding::Br), 800);
        assert_eq!(a.quality(Coding::Identity), 0);

        let star = accept(&["*;q=0.3, br;q=0"]);
        assert_eq!(star.quality(Coding::Br), 0);
        assert_eq!(star.quality(Coding::Gzip), 300);
        assert_eq!(star.quality(Coding::Identity), 300);

        let excluded = accept(&["*;q=0"]);
        assert_eq!(excluded.quality(Coding::Identity), 0);
        let listed = accept(&["gzip;q=0.001"]);
        assert_eq!(listed.quality(Coding::Identity), UNLISTED_IDENTITY);

        // A malformed q drops the item; the first of duplicates counts.
        let odd = accept(&["gzip;q=2, br, br;q=0, x-gzip"]);
        assert_eq!(odd.quality(Coding::Gzip), 1000);
        assert_eq!(odd.quality(Coding::Br), 1000);

        // Only the first MAX_CODINGS items are read.
        let mut long = vec!["foo"; MAX_CODINGS];
        long.push("br");
        assert_eq!(accept(&[&long.join(",")]).quality(Coding::Br), 0);
    }

    #[test]
    fn if_none_match_parsing() {
        let map = headers(
            header::IF_NONE_MATCH,
            &[r#"W/"a", "b,c" , junk, "d""#, r#""e""#],
        );
        let parsed = IfNoneMatch::parse(&map).unwrap();
        let expected: Vec<&[u8]> = vec![b"\"a\"", b"\"b,c\"", b"\"d\"", b"\"e\""];
        assert_eq!(parsed, IfNoneMatch::Tags(expected));
        assert!(parsed.matches(&HeaderValue::from_static("\"a\"")));
        assert!(!parsed.matches(&HeaderValue::from_static("\"b\"")));

        let any = headers(header::IF_NONE_MATCH, &["*"]);
        assert_eq!(IfNoneMatch::parse(&any), Some(IfNoneMatch::Any));
        assert_eq!(IfNoneMatch::parse(&HeaderMap::new()), None);

        let unterminated = headers(header::IF_NONE_MATCH, &["\"abc"]);
        assert_eq!(
            IfNoneMatch::parse(&unterminated),
            Some(IfNoneMatch::Tags(vec![]))
        );

        let many: Vec<String> = (0..MAX_ETAGS + 5).map(|i| format!("\"{i}\"")).collect();
        let map = headers(header::IF_NONE_MATCH, &[&many.join(", ")]);
        let Some(IfNoneMatch::Tags(tags)) = IfNoneMatch::parse(&map) else {
            panic!("tags expected");
        };
        assert_eq!(tags.len(), MAX_ETAGS);
    }

    #[test]
    fn if_modified_since_parsing() {
        let map = headers(
            header::IF_MODIFIED_SINCE,
            &["Sun, 06 Nov 1994 08:49:37 GMT"],
        );
        assert_eq!(if_modified_since(&map), Some(784111777));
        let bad = headers(header::IF_MODIFIED_SINCE, &["yesterday"]);
        assert_eq!(if_modified_since(&bad), None);
    }
}
