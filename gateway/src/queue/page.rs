//! The queue status page: one self-contained HTML file (no external
//! scripts, styles or fonts) compiled into the binary, so it works whatever
//! `static_dir` holds. The language comes from `Accept-Language`; the page
//! talks to the JSON routes and works without cookies.

use http::HeaderMap;

const PAGE: &str = include_str!("../../assets/queue.html");

/// The page in the visitor's language.
pub fn render(headers: &HeaderMap) -> String {
    PAGE.replace("{{LANG}}", language(headers))
}

/// `pt-BR` when Portuguese is preferred over English, else `en`.
pub fn language(headers: &HeaderMap) -> &'static str {
    let Some(value) = headers
        .get(http::header::ACCEPT_LANGUAGE)
        .and_then(|v| v.to_str().ok())
    else {
        return "en";
    };
    let mut best = ("en", -1.0f32);
    for item in value.split(',').take(32) {
        let mut parts = item.split(';');
        let tag = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.parse::<f32>().ok())
            .unwrap_or(1.0);
        let lang = if tag.starts_with("pt") {
            "pt-BR"
        } else if tag.starts_with("en") {
            "en"
        } else {
            continue;
        };
        if q > best.1 {
            best = (lang, q);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn lang(v: &str) -> &'static str {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::ACCEPT_LANGUAGE,
            HeaderValue::from_str(v).unwrap(),
        );
        language(&h)
    }

    #[test]
    fn picks_portuguese_or_english_by_preference() {
        assert_eq!(lang("pt-BR,pt;q=0.9,en;q=0.8"), "pt-BR");
        assert_eq!(lang("en-US,en;q=0.9,pt;q=0.5"), "en");
        assert_eq!(lang("fr-FR, pt;q=0.4"), "pt-BR");
        assert_eq!(lang("de"), "en");
        assert_eq!(language(&HeaderMap::new()), "en");
    }

    #[test]
    fn page_is_self_contained() {
        let page = render(&HeaderMap::new());
        assert!(page.starts_with("<!doctype html>\n<html lang=\"en\">"));
        assert!(page.contains("aria-live=\"polite\""));
        for external in [
            "<script src",
            "<link rel=\"stylesheet\"",
            "@import",
            "http://",
            "https://",
        ] {
            assert!(!page.contains(external), "page loads {external}");
        }
    }
}
