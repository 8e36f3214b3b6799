//! Request path checks: decode a raw path once, or say why it is refused.
//!
//! The rules are strict on purpose. A refused path gets `400`, and is never
//! proxied, so anything an origin or a file system might read as a way up
//! or out (`..`, an encoded `/` or `\`, a second layer of encoding, a drive
//! letter, a control character, a look-alike slash) stops here.

use std::borrow::Cow;

/// The longest request path (without query) accepted, in bytes.
pub const MAX_PATH_BYTES: usize = 8 * 1024;

const TOO_LONG: &str = "The request path is too long.";
const NOT_ABSOLUTE: &str = "The request path must start with a slash.";
const MALFORMED: &str = "The request path contains a character that must be percent-encoded.";
const BAD_ESCAPE: &str = "The request path has a malformed percent-encoding.";
const ENCODED_SLASH: &str = "The request path contains an encoded slash or backslash.";
const NOT_UTF8: &str = "The request path is not valid UTF-8 once decoded.";
const CONTROL: &str = "The request path contains a control character.";
const BACKSLASH: &str = "The request path contains a backslash.";
const DOUBLE_ENCODED: &str = "The request path is percent-encoded more than once.";
const LOOKALIKE: &str = "The request path contains a character that looks like a slash or a dot.";
const EMPTY_SEGMENT: &str = "The request path contains an empty segment.";
const DOT_SEGMENT: &str = "The request path contains a '.' or '..' segment.";
const DRIVE: &str = "The request path names a drive.";

/// Characters that some file systems or normalizers turn into `/`, `\` or
/// `.`: division slash, set minus, fraction slash, fullwidth solidus and
/// reverse solidus, small reverse solidus, fullwidth full stop, one dot
/// leader, small full stop.
const LOOKALIKES: [char; 9] = [
    '\u{2215}', '\u{2216}', '\u{2044}', '\u{FF0F}', '\u{FF3C}', '\u{FE68}', '\u{FF0E}', '\u{2024}',
    '\u{FE52}',
];

/// Decodes `raw` (a request path as sent, maybe with a `?query`) once and
/// checks it, or says in one sentence why it is refused.
pub(super) fn decode(raw: &str) -> Result<Cow<'_, str>, &'static str> {
    let raw = raw.split_once('?').map_or(raw, |(path, _)| path);
    if raw.len() > MAX_PATH_BYTES {
        return Err(TOO_LONG);
    }
    if !raw.starts_with('/') {
        return Err(NOT_ABSOLUTE);
    }
    for c in raw.chars() {
        if c.is_control() {
            return Err(CONTROL);
        }
        if c == '\\' {
            return Err(BACKSLASH);
        }
        if c == ' ' || c == '#' {
            return Err(MALFORMED);
        }
    }
    let decoded = if raw.contains('%') {
        Cow::Owned(percent_decode(raw)?)
    } else {
        Cow::Borrowed(raw)
    };
    check_decoded(&decoded)?;
    Ok(decoded)
}

/// Decodes every `%XX` once; refuses a malformed escape and an encoded `/`
/// or `\` (which would make one segment look like two, or the reverse).
fn percent_decode(raw: &str) -> Result<String, &'static str> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = |at: usize| bytes.get(at).and_then(|b| (*b as char).to_digit(16));
            let (Some(hi), Some(lo)) = (hex(i + 1), hex(i + 2)) else {
                return Err(BAD_ESCAPE);
            };
            // Both digits are < 16, so this fits a byte.
            let byte = (hi * 16 + lo) as u8;
            if byte == b'/' || byte == b'\\' {
                return Err(ENCODED_SLASH);
            }
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| NOT_UTF8)
}

/// Checks a decoded path (also used at load, for file keys).
pub(super) fn check_decoded(path: &str) -> Result<(), &'static str> {
    if path.len() > MAX_PATH_BYTES {
        return Err(TOO_LONG);
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(NOT_ABSOLUTE);
    };
    for c in rest.chars() {
        if c.is_control() {
            return Err(CONTROL);
        }
        if c == '\\' {
            return Err(BACKSLASH);
        }
        if c == '%' {
            return Err(DOUBLE_ENCODED);
        }
        if LOOKALIKES.contains(&c) {
            return Err(LOOKALIKE);
        }
    }
    let segments: Vec<&str> = rest.split('/').collect();
    let last = segments.len() - 1;
    for (i, segment) in segments.iter().enumerate() {
        if segment.is_empty() {
            // Only a trailing slash (`/`, `/pt/`) may end with an empty segment.
            if i == last {
                continue;
            }
            return Err(EMPTY_SEGMENT);
        }
        if segment.chars().all(|c| c == '.') {
            return Err(DOT_SEGMENT);
        }
        if is_drive(segment, i == 0) {
            return Err(DRIVE);
        }
    }
    Ok(())
}

/// `C:` anywhere, or `C:...` as the first segment (`/C:/`, `/c:windows`).
fn is_drive(segment: &str, first: bool) -> bool {
    let b = segment.as_bytes();
    b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' && (first || b.len() == 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_once() {
        assert_eq!(decode("/a%20b/caf%C3%A9.txt").unwrap(), "/a b/café.txt");
        assert_eq!(decode("/plain/path.json").unwrap(), "/plain/path.json");
        assert!(matches!(decode("/plain").unwrap(), Cow::Borrowed(_)));
        assert_eq!(decode("/x.json?a=../../b&c=%2f").unwrap(), "/x.json");
        assert_eq!(decode("/").unwrap(), "/");
        assert_eq!(decode("/pt/").unwrap(), "/pt/");
    }

    #[test]
    fn ordinary_paths_pass() {
        for ok in [
            "/",
            "/index.html",
            "/pt/",
            "/.well-known/security.txt",
            "/a..b",
            "/..a",
            "/a.",
            "/v1/items:batch",
            "/wiki/File:Logo.png",
            "/%7Euser/",
            "/%41",
            "/ab:",
        ] {
            assert!(decode(ok).is_ok(), "{ok} should pass: {:?}", decode(ok));
        }
    }

    #[test]
    fn reasons_are_specific() {
        assert_eq!(decode("/a/%2e%2e/b"), Err(DOT_SEGMENT));
        assert_eq!(decode("/a%2fb"), Err(ENCODED_SLASH));
        assert_eq!(decode("/a%zz"), Err(BAD_ESCAPE));
        assert_eq!(decode("/a%2"), Err(BAD_ESCAPE));
        assert_eq!(decode("/%252e%252e/"), Err(DOUBLE_ENCODED));
        assert_eq!(decode("/%ff"), Err(NOT_UTF8));
        assert_eq!(decode("/a//b"), Err(EMPTY_SEGMENT));
        assert_eq!(decode("/C:/x"), Err(DRIVE));
        assert_eq!(decode("relative"), Err(NOT_ABSOLUTE));
        assert_eq!(
            decode(&format!("/{}", "a".repeat(MAX_PATH_BYTES))),
            Err(TOO_LONG)
        );
        assert!(decode(&format!("/{}", "a".repeat(MAX_PATH_BYTES - 1))).is_ok());
    }

    #[test]
    fn keys_are_checked_like_decoded_paths() {
        assert!(check_decoded("/catalog/products.json").is_ok());
        assert_eq!(check_decoded("/50%.txt"), Err(DOUBLE_ENCODED));
        assert_eq!(check_decoded("/a\nb"), Err(CONTROL));
        assert_eq!(check_decoded("/a\\b"), Err(BACKSLASH));
    }
}
