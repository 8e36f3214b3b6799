//! The path normaliser: never panics, and whatever it accepts is canonical
//! (normalising again is the identity) and free of everything it refuses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_edge::path::{is_canonical, normalize};

fuzz_target!(|raw: &str| {
    let Ok(path) = normalize(raw) else {
        return;
    };
    assert!(is_canonical(&path), "{raw:?} -> {path:?}");
    let encoded = path.encoded();
    let decoded = path.decoded();
    for form in [encoded, decoded] {
        assert!(form.starts_with('/'));
        assert!(!form.contains(';') && !form.contains('\\') && !form.contains('\0'));
        assert!(!form.chars().any(char::is_control));
        let segments: Vec<&str> = form[1..].split('/').collect();
        for (i, segment) in segments.iter().enumerate() {
            assert!(!segment.is_empty() || i == segments.len() - 1, "{form:?}");
            assert!(!segment.bytes().all(|b| b == b'.') || segment.is_empty(), "{form:?}");
        }
    }
    let upper = encoded.to_ascii_uppercase();
    assert!(!upper.contains("%2F") && !upper.contains("%5C") && !upper.contains("%25"));
    assert!(!upper.contains("%00") && !upper.contains("%3B"));
    assert!(!decoded.contains('%'));
});
