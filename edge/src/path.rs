//! The canonical request path: normalise once, or say why not.
//!
//! [`normalize`] reads a request path as sent (percent-encoded, without the
//! query) and returns its one [`CanonicalPath`], or the [`PathError`] that
//! makes the request a `400 bad_request`. The canonical form is RFC 3986
//! syntax-based normalisation (§6.2.2) and nothing more:
//!
//! - escapes of unreserved characters (`A-Z a-z 0-9 - . _ ~`) are decoded
//!   (`/%63art` is `/cart`), every other escape keeps its byte with
//!   uppercase hex (`%c3%a9` is `%C3%A9`);
//! - printable ASCII that a path may not hold raw (`"`, `<`, `>`, `[`, `]`,
//!   `^`, `` ` ``, `{`, `|`, `}`) is percent-encoded, as a browser does.
//!
//! Everything another reader could take two ways is refused instead of
//! guessed: an encoded `/` or `\` (`%2F`, `%5C`) and a raw `\`; any `;`
//! (path parameters, which servlet containers strip from each segment, so
//! `/..;/` is `/../` to them); NUL and other control characters, raw or
//! encoded; a malformed escape (`%zz`, `%4`); bytes that are not UTF-8 once
//! decoded (so overlong forms such as `%C0%AE` never become `.`); any `%25`
//! (a second layer of encoding); raw non-ASCII, space and `#`; characters
//! that look like a slash or a dot; drive letters; and, once decoded, any
//! path that Unicode normalisation would change (not in NFKC): an origin or
//! file system that normalises reads `/%E2%80%A5/` (`‥`) as `/../`,
//! `/%F0%9D%90%9Cart` (`𝐜art`) or `/%E2%93%92art` (`ⓒart`) as `/cart`, and
//! `e` + a combining accent as `é`, where the gateway's globs would not.
//!
//! Two spellings are refused although a resolver could rewrite them:
//!
//! - Dot segments (`.`, `..`, `%2e%2e`, and any segment of dots only). A
//!   client resolves them before it sends (RFC 3986 §5.2.4 applies when a
//!   reference is resolved), so browsers and HTTP libraries never put one on
//!   the wire; the requests that carry them are probes, and origins differ on
//!   what they mean (a file server climbs, a REST API may take `..` as an
//!   id). Refusing costs no real client anything and leaves no guess.
//! - Empty segments (`//cart`, `/a//b`). They are not an RFC 3986
//!   equivalence: some origins merge slashes (nginx `merge_slashes`), others
//!   keep them (object stores, where `a//b` is its own key). Collapsing them
//!   would send the origin a path the client did not ask for; refusing
//!   them means no origin can read the path differently from the gateway. A
//!   trailing slash (`/pt/`) is an ordinary, non-empty-segment path.
//!
//! The result is a fixed point: normalising [`CanonicalPath::encoded`] again
//! gives the same path, and percent-decoding it gives
//! [`CanonicalPath::decoded`].

use percent_encoding::{percent_decode_str, percent_encode_byte};
use unicode_normalization::is_nfkc;

/// The longest request path (without query) accepted, in bytes.
pub const MAX_PATH_BYTES: usize = 8 * 1024;

/// Characters that some file systems or normalisers turn into `/`, `\` or
/// `.`: division slash, set minus, fraction slash, fullwidth solidus and
/// reverse solidus, small reverse solidus, fullwidth full stop, one dot
/// leader, small full stop.
const LOOKALIKES: [char; 9] = [
    '\u{2215}', '\u{2216}', '\u{2044}', '\u{FF0F}', '\u{FF3C}', '\u{FE68}', '\u{FF0E}', '\u{2024}',
    '\u{FE52}',
];

/// Characters that look like nothing or like a space, or like another
/// ASCII character, once decoded: format characters (Unicode category Cf:
/// zero-width spaces and joiners, bidi controls, the BOM, the soft hyphen),
/// non-ASCII spaces (NBSP, the U+2000 block, the ideographic space) and the
/// fullwidth forms of ASCII (`ｃ`). An origin that applies NFKC or drops
/// format characters reads `/c%E2%80%8Bart` or `/%EF%BD%83art` as
/// `/cart`; the gateway's globs would not.
fn is_invisible_or_compatibility(c: char) -> bool {
    matches!(
        c,
        '\u{00A0}'
            | '\u{00AD}'
            | '\u{061C}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{1680}'
            | '\u{180E}'
            | '\u{2000}'..='\u{200F}'
            | '\u{2028}'..='\u{202F}'
            | '\u{205F}'..='\u{206F}'
            | '\u{3000}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FF01}'..='\u{FF5E}'
            | '\u{FFA0}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{E0000}'..='\u{E007F}'
    )
}

/// A request path in its one canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalPath {
    encoded: String,
    decoded: String,
}

impl CanonicalPath {
    /// The form sent to the origin and used in cache keys: percent-encoded,
    /// unreserved characters plain, other escapes in uppercase hex.
    pub fn encoded(&self) -> &str {
        &self.encoded
    }

    /// The form every check matches on: fully decoded, valid UTF-8, no `%`,
    /// `;`, `\`, control character, dot segment or empty segment.
    pub fn decoded(&self) -> &str {
        &self.decoded
    }
}

/// Why a request path was refused. Each is a `400 bad_request`; the request
/// is never proxied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    TooLong,
    NotAbsolute,
    Unencoded,
    BadEscape,
    EncodedSlash,
    Backslash,
    Semicolon,
    Control,
    NotUtf8,
    DoubleEncoded,
    Lookalike,
    EmptySegment,
    DotSegment,
    /// An invisible, space-like or fullwidth character once decoded
    /// ([`is_invisible_or_compatibility`]).
    Invisible,
    /// Decoded, the path is not in Unicode NFKC: it holds a compatibility
    /// character (`‥`, `𝐜`, `ⓒ`, `ſ`, `ﬁ`, the Kelvin sign) or a
    /// decomposed accent, which a normalising origin reads as another path.
    NotNormalized,
    /// A segment ending in `.` or a space (`/cart./x`): Windows and IIS
    /// origins drop those, so `/cart.` would be served as `/cart`.
    TrailingDot,
    Drive,
}

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for PathError {}

impl PathError {
    /// The sentence for the client (the contract's `message`).
    pub fn message(&self) -> &'static str {
        match self {
            PathError::TooLong => "The request path is too long.",
            PathError::NotAbsolute => "The request path must start with a slash.",
            PathError::Unencoded => {
                "The request path contains a character that must be percent-encoded."
            }
            PathError::BadEscape => "The request path has a malformed percent-encoding.",
            PathError::EncodedSlash => "The request path contains an encoded slash or backslash.",
            PathError::Backslash => "The request path contains a backslash.",
            PathError::Semicolon => {
                "The request path contains a ';' (path parameters are not accepted)."
            }
            PathError::Control => "The request path contains a control character.",
            PathError::NotUtf8 => "The request path is not valid UTF-8 once decoded.",
            PathError::DoubleEncoded => "The request path is percent-encoded more than once.",
            PathError::Lookalike => {
                "The request path contains a character that looks like a slash or a dot."
            }
            PathError::EmptySegment => "The request path contains an empty segment.",
            PathError::DotSegment => "The request path contains a '.' or '..' segment.",
            PathError::Invisible => {
                "The request path contains an invisible, space-like or fullwidth character."
            }
            PathError::NotNormalized => {
                "The request path contains a character that Unicode normalisation would change."
            }
            PathError::TrailingDot => "A segment of the request path ends in a dot or a space.",
            PathError::Drive => "The request path names a drive.",
        }
    }
}

/// Normalises `raw`, a request path as sent (no query), into its canonical
/// form, or says why it is refused.
pub fn normalize(raw: &str) -> Result<CanonicalPath, PathError> {
    if raw.len() > MAX_PATH_BYTES {
        return Err(PathError::TooLong);
    }
    if !raw.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    let bytes = raw.as_bytes();
    let mut encoded = String::with_capacity(raw.len());
    let mut decoded = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let byte = escape_at(bytes, i)?;
            i += 3;
            refuse_byte(byte, true)?;
            if is_unreserved(byte) {
                encoded.push(char::from(byte));
            } else {
                encoded.push_str(percent_encode_byte(byte));
            }
            decoded.push(byte);
            continue;
        }
        i += 1;
        refuse_byte(b, false)?;
        if b >= 0x80 || b == b' ' || b == b'#' {
            return Err(PathError::Unencoded);
        }
        if b == b'/' || is_pchar(b) {
            encoded.push(char::from(b));
        } else {
            encoded.push_str(percent_encode_byte(b));
        }
        decoded.push(b);
    }
    // Encoding raw characters can make the form sent longer than the one
    // received; the limit holds for what the origin is sent, so the
    // canonical form is itself a path this function accepts.
    if encoded.len() > MAX_PATH_BYTES {
        return Err(PathError::TooLong);
    }
    let decoded = String::from_utf8(decoded).map_err(|_| PathError::NotUtf8)?;
    check_decoded(&decoded)?;
    Ok(CanonicalPath { encoded, decoded })
}

/// Checks a decoded path: what [`CanonicalPath::decoded`] guarantees. The
/// catalog also checks its file keys with it at load.
pub fn check_decoded(path: &str) -> Result<(), PathError> {
    if path.len() > MAX_PATH_BYTES {
        return Err(PathError::TooLong);
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(PathError::NotAbsolute);
    };
    for c in rest.chars() {
        if c.is_control() {
            return Err(PathError::Control);
        }
        match c {
            '\\' => return Err(PathError::Backslash),
            ';' => return Err(PathError::Semicolon),
            '%' => return Err(PathError::DoubleEncoded),
            _ if LOOKALIKES.contains(&c) => return Err(PathError::Lookalike),
            _ if is_invisible_or_compatibility(c) => return Err(PathError::Invisible),
            _ => {}
        }
    }
    // ASCII is always in NFKC; only a path with other characters needs the
    // (table-driven, linear) check.
    if !rest.is_ascii() && !is_nfkc(rest) {
        return Err(PathError::NotNormalized);
    }
    let last = rest.split('/').count() - 1;
    for (i, segment) in rest.split('/').enumerate() {
        if segment.is_empty() {
            // Only a trailing slash (`/`, `/pt/`) ends with an empty segment.
            if i == last {
                continue;
            }
            return Err(PathError::EmptySegment);
        }
        if segment.bytes().all(|b| b == b'.') {
            return Err(PathError::DotSegment);
        }
        if segment.ends_with(['.', ' ']) {
            return Err(PathError::TrailingDot);
        }
        if is_drive(segment, i == 0) {
            return Err(PathError::Drive);
        }
    }
    Ok(())
}

/// Whether `path` is in canonical form: what the fuzz target and the tests
/// assert of every [`CanonicalPath::encoded`].
pub fn is_canonical(path: &CanonicalPath) -> bool {
    normalize(&path.encoded).as_ref() == Ok(path)
        && percent_decode_str(&path.encoded)
            .decode_utf8()
            .ok()
            .as_deref()
            == Some(&path.decoded)
}

/// The byte of the escape at `bytes[at]` (a `%`).
fn escape_at(bytes: &[u8], at: usize) -> Result<u8, PathError> {
    let hex = |i: usize| bytes.get(i).and_then(|b| char::from(*b).to_digit(16));
    match (hex(at + 1), hex(at + 2)) {
        // Both digits are below 16, so this fits a byte.
        (Some(hi), Some(lo)) => Ok((hi * 16 + lo) as u8),
        _ => Err(PathError::BadEscape),
    }
}

/// Refuses a byte that no spelling may carry; `escaped` when it came from a
/// `%XX`.
fn refuse_byte(b: u8, escaped: bool) -> Result<(), PathError> {
    match b {
        0x00..=0x1f | 0x7f => Err(PathError::Control),
        b';' => Err(PathError::Semicolon),
        b'/' | b'\\' if escaped => Err(PathError::EncodedSlash),
        b'\\' => Err(PathError::Backslash),
        b'%' if escaped => Err(PathError::DoubleEncoded),
        _ => Ok(()),
    }
}

/// RFC 3986 unreserved: decoding its escape changes nothing.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// RFC 3986 `pchar` that may appear raw (with `%` handled by the caller and
/// `;` refused before).
fn is_pchar(b: u8) -> bool {
    is_unreserved(b)
        || matches!(
            b,
            b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b'=' | b':' | b'@'
        )
}

/// `C:` anywhere, or `C:...` as the first segment (`/C:/`, `/c:windows`).
fn is_drive(segment: &str, first: bool) -> bool {
    let b = segment.as_bytes();
    b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' && (first || b.len() == 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(raw: &str) -> String {
        normalize(raw)
            .unwrap_or_else(|e| panic!("{raw:?}: {e}"))
            .encoded
    }

    fn dec(raw: &str) -> String {
        normalize(raw)
            .unwrap_or_else(|e| panic!("{raw:?}: {e}"))
            .decoded
    }

    #[test]
    fn unreserved_escapes_are_decoded_and_others_uppercased() {
        assert_eq!(enc("/%63art/x"), "/cart/x");
        assert_eq!(enc("/%7Euser/%41%2d%5F"), "/~user/A-_");
        assert_eq!(enc("/caf%c3%a9"), "/caf%C3%A9");
        assert_eq!(dec("/caf%c3%a9"), "/café");
        assert_eq!(enc("/a%20b"), "/a%20b");
        assert_eq!(dec("/a%20b"), "/a b");
        assert_eq!(enc("/a%2cb,c"), "/a%2Cb,c");
        assert_eq!(dec("/a%2cb,c"), "/a,b,c");
        assert_eq!(enc("/q%3Fx%23y"), "/q%3Fx%23y");
        assert_eq!(dec("/q%3Fx%23y"), "/q?x#y");
    }

    #[test]
    fn raw_characters_a_browser_would_encode_are_encoded() {
        assert_eq!(enc("/a|b^c"), "/a%7Cb%5Ec");
        assert_eq!(dec("/a|b^c"), "/a|b^c");
        assert_eq!(enc("/{x}[y]\"<>`"), "/%7Bx%7D%5By%5D%22%3C%3E%60");
    }

    #[test]
    fn ordinary_paths_are_their_own_canonical_form() {
        for ok in [
            "/",
            "/index.html",
            "/pt/",
            "/.well-known/security.txt",
            "/a..b",
            "/..a",
            "/v1/items:batch",
            "/wiki/File:Logo.png",
            "/~user/",
            "/ab:",
            "/cart/x",
            "/Cart/x",
            "/search/a+b",
            "/a@b!$&'()*,=",
        ] {
            assert_eq!(enc(ok), ok);
            assert_eq!(dec(ok), ok);
        }
    }

    #[test]
    fn every_ambiguous_spelling_has_its_reason() {
        use PathError::*;
        for (raw, why) in [
            ("/a%2fb", EncodedSlash),
            ("/a%2Fb", EncodedSlash),
            ("/a%5cb", EncodedSlash),
            ("/a\\b", Backslash),
            ("/cart;x/y", Semicolon),
            ("/..;/..;/secret.txt", Semicolon),
            ("/cart%3bx", Semicolon),
            ("/cart%3B", Semicolon),
            ("/a%00", Control),
            ("/a\0", Control),
            ("/a%0d%0aSet-Cookie:x", Control),
            ("/a%7f", Control),
            ("/a%c2%85", Control),
            ("/a%zz", BadEscape),
            ("/a%4", BadEscape),
            ("/a%", BadEscape),
            ("/%c0%ae%c0%ae/", NotUtf8),
            ("/%ff", NotUtf8),
            ("/%252e%252e/", DoubleEncoded),
            ("/%25", DoubleEncoded),
            ("/50%25off", DoubleEncoded),
            ("/%e2%88%95etc", Lookalike),
            ("/%ef%bc%8e%ef%bc%8e/", Lookalike),
            ("//cart", EmptySegment),
            ("/a//b", EmptySegment),
            ("/./cart", DotSegment),
            ("/x/../cart", DotSegment),
            ("/%2e%2e/cart", DotSegment),
            ("/.%2E/cart", DotSegment),
            ("/cart/.", DotSegment),
            ("/...", DotSegment),
            ("/cart./x", TrailingDot),
            ("/%EF%BD%83art/x", Invisible),
            ("/cart%E2%80%8B/x", Invisible),
            ("/cart%EF%BB%BF/x", Invisible),
            ("/cart%C2%A0/x", Invisible),
            ("/cart%C2%AD/x", Invisible),
            ("/cart%E2%80%AE/x", Invisible),
            ("/secret%2e", TrailingDot),
            ("/cart%20/x", TrailingDot),
            ("/C:/x", Drive),
            ("/x/c:", Drive),
            ("relative", NotAbsolute),
            ("", NotAbsolute),
            ("*", NotAbsolute),
            ("/a b", Unencoded),
            ("/a#b", Unencoded),
            ("/café", Unencoded),
        ] {
            assert_eq!(normalize(raw), Err(why), "{raw:?}");
        }
    }

    /// Characters NFKC folds into ASCII (or into dots) get past a list of
    /// look-alikes; an origin that normalises would serve `/cart` or climb
    /// with `..`. Each of these was accepted before the NFKC check.
    #[test]
    fn what_unicode_normalisation_would_change_is_refused() {
        for raw in [
            "/%E2%80%A5/cart/x",  // ‥ two dot leader: `..`
            "/x/%E2%80%A6/cart",  // … ellipsis: `...`
            "/%EF%B8%B0/cart",    // ︰ presentation form: `..`
            "/%F0%9D%90%9Cart/x", // 𝐜 mathematical bold small c
            "/%E2%93%92art/x",    // ⓒ circled small c
            "/%C5%BFecret",       // ſ long s: `s`
            "/%E2%84%AAey",       // K Kelvin sign: `K`
            "/%EF%AC%81le",       // ﬁ ligature: `fi`
            "/%C2%B2",            // ² superscript two: `2`
            "/cafe%CC%81",        // e + combining acute: `é` (NFC)
            "/%E2%84%A6hm",       // Ω ohm sign: Ω (a canonical singleton)
        ] {
            assert_eq!(normalize(raw), Err(PathError::NotNormalized), "{raw:?}");
        }
        // Normalised non-ASCII paths are still everyone's paths.
        for raw in [
            "/caf%C3%A9",
            "/%E6%97%A5%E6%9C%AC/x",
            "/pt/a%C3%A7%C3%A3o",
            "/%CE%A9",
        ] {
            assert!(normalize(raw).is_ok(), "{raw:?}");
        }
    }

    #[test]
    fn length_is_bounded() {
        let longest = format!("/{}", "a".repeat(MAX_PATH_BYTES - 1));
        assert_eq!(enc(&longest), longest);
        assert_eq!(
            normalize(&format!("/{}", "a".repeat(MAX_PATH_BYTES))),
            Err(PathError::TooLong)
        );
    }

    /// Found by the `path` fuzz target: 4 KiB of raw `{` and `|` encode to
    /// three times as many bytes, which normalising again refused.
    #[test]
    fn the_limit_holds_for_the_encoded_form_too() {
        let fits = format!("/{}", "|".repeat((MAX_PATH_BYTES - 1) / 3));
        assert!(is_canonical(&normalize(&fits).unwrap()));
        let expands = format!("/{}", "|".repeat((MAX_PATH_BYTES - 1) / 3 + 1));
        assert!(expands.len() < MAX_PATH_BYTES);
        assert_eq!(normalize(&expands), Err(PathError::TooLong));
    }

    #[test]
    fn the_canonical_form_is_a_fixed_point() {
        for raw in [
            "/%63art/x",
            "/caf%c3%a9/%7e",
            "/a|b",
            "/a%2cb",
            "/",
            "/pt/",
            "/%e6%97%a5%e6%9c%ac",
        ] {
            let path = normalize(raw).unwrap();
            assert!(is_canonical(&path), "{raw:?} -> {path:?}");
        }
    }

    #[test]
    fn messages_are_sentences_about_the_path() {
        let e = normalize("/a;b").unwrap_err();
        assert_eq!(e.to_string(), e.message());
        assert!(e.message().starts_with("The request path") && e.message().ends_with('.'));
    }
}
