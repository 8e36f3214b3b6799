//! The queue status page: one self-contained HTML file (no external
//! scripts, styles or fonts) compiled into the binary, so it works whatever
//! `static_dir` holds. The language comes from `Accept-Language`; the page
//! talks to the JSON routes and works without cookies.
//!
//! Once admitted the page goes to the `next` the gateway rendered into it
//! (already checked by [`crate::next_path`], HTML-escaped here), or to `/`:
//! it never reads its own address for one.

//!
//! A room with a join challenge: the proof of work is solved in a Web
//! Worker made from the page's own inline worker source (a `blob:` URL,
//! which the page's CSP allows as `worker-src`); a siteverify room's page
//! loads the widget's script from `script_url` and renders its element
//! with the room's `site_key`; the CSP names that script's origin
//! ([`csp`]).

use http::HeaderMap;
use sluice_policies::model::{Challenge, Widget};

const PAGE: &str = include_str!("../../assets/queue.html");

/// The CSP of a page without a widget.
const CSP_BASE: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'; worker-src blob:";

/// The page in the visitor's language, sending an admitted shopper to
/// `next` (a checked same-site path), or to `/` without one; with the
/// room's challenge widget when it has one.
pub fn render(headers: &HeaderMap, next: Option<&str>, challenge: &Challenge) -> String {
    let (attrs, script) = match challenge {
        Challenge::SiteVerify(sv) => {
            let class = match sv.widget {
                Widget::Turnstile => "cf-turnstile",
                Widget::Hcaptcha => "h-captcha",
                Widget::Recaptcha => "g-recaptcha",
            };
            (
                format!(
                    "class=\"{class}\" data-sitekey=\"{}\" data-callback=\"sluiceWidgetDone\"",
                    escape_html(&sv.site_key)
                ),
                format!(
                    "<script src=\"{}\" async defer></script>",
                    escape_html(&sv.script_url)
                ),
            )
        }
        _ => (String::new(), String::new()),
    };
    PAGE.replace("{{LANG}}", language(headers))
        .replace("{{NEXT}}", &escape_html(next.unwrap_or("/")))
        .replace("{{WIDGET_ATTRS}}", &attrs)
        .replace("{{WIDGET_SCRIPT}}", &script)
}

/// The page's Content-Security-Policy: its own inline script and styles,
/// calls to its own origin, the proof-of-work worker (`blob:`); for a
/// widget, its script's origin as a script, frame and connect source.
pub fn csp(challenge: &Challenge) -> String {
    match challenge {
        Challenge::SiteVerify(sv) => {
            let origin = origin_of(&sv.script_url);
            format!(
                "default-src 'none'; script-src 'unsafe-inline' {origin}; style-src 'unsafe-inline'; connect-src 'self' {origin}; img-src 'self' {origin}; frame-src {origin}; worker-src blob:"
            )
        }
        _ => CSP_BASE.to_owned(),
    }
}

/// `scheme://host[:port]` of an `http(s)://` URL (checked at load: no
/// whitespace, quotes or angle brackets).
fn origin_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| after_scheme + i);
    &url[..end]
}

/// `text` safe in HTML text and in a quoted attribute value.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
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
    fn a_widget_room_names_its_script_in_the_page_and_its_csp() {
        let sv = sluice_policies::model::SiteVerify {
            widget: Widget::Hcaptcha,
            verify_url: "https://api.hcaptcha.com/siteverify".into(),
            secret: sluice_policies::model::Secret::new("s".into()),
            site_key: "key-1".into(),
            script_url: "https://js.hcaptcha.com:8443/1/api.js?x=1".into(),
            hostnames: vec![],
            on_verifier_error: Default::default(),
            timeout: std::time::Duration::from_secs(1),
            in_flight_max: std::num::NonZeroU32::new(1).unwrap(),
        };
        let challenge = Challenge::SiteVerify(sv);
        let page = render(&HeaderMap::new(), None, &challenge);
        assert!(page.contains(
            "<script src=\"https://js.hcaptcha.com:8443/1/api.js?x=1\" async defer></script>"
        ));
        assert!(page.contains("class=\"h-captcha\" data-sitekey=\"key-1\""));
        let policy = csp(&challenge);
        assert!(policy.contains("script-src 'unsafe-inline' https://js.hcaptcha.com:8443;"));
        assert!(policy.contains("frame-src https://js.hcaptcha.com:8443;"));
        assert!(policy.contains("worker-src blob:"));
        assert!(csp(&Challenge::None).contains("worker-src blob:"));
        assert!(!csp(&Challenge::None).contains("frame-src"));
    }

    #[test]
    fn page_is_self_contained() {
        let page = render(&HeaderMap::new(), None, &Challenge::None);
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

    /// The `next` rendered into the page: the one value its script goes to.
    fn rendered_next(page: &str) -> &str {
        let start = page.find("data-next=\"").expect("data-next") + "data-next=\"".len();
        let len = page[start..].find('"').expect("closing quote");
        &page[start..start + len]
    }

    #[test]
    fn the_checked_next_is_rendered_escaped_and_nothing_else_is_followed() {
        let page = render(
            &HeaderMap::new(),
            Some("/orders/abc?x=1&y='2'"),
            &Challenge::None,
        );
        assert_eq!(rendered_next(&page), "/orders/abc?x=1&amp;y=&#39;2&#39;");
        assert_eq!(
            rendered_next(&render(&HeaderMap::new(), None, &Challenge::None)),
            "/"
        );
        // The script reads the rendered value only: never its own address.
        assert!(page.contains("getAttribute(\"data-next\")"));
        for own_address in ["location.search", "location.href", "URLSearchParams"] {
            assert!(!page.contains(own_address), "page reads {own_address}");
        }
        assert_eq!(
            escape_html("<a href=\"x\">&</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;"
        );
    }

    /// What the page's answer renders for a request's query.
    #[test]
    fn only_a_next_that_passes_the_check_is_rendered() {
        let h = HeaderMap::new();
        let rendered = |query: &str| {
            let next = crate::next_path::from_query(Some(query));
            rendered_next(&render(&h, next.as_deref(), &Challenge::None)).to_owned()
        };
        assert_eq!(rendered("next=%2Forders%2Fabc%3Fx%3D1"), "/orders/abc?x=1");
        for dropped in [
            "next=%2F%2Fevil.example%2Fx",
            "next=%2F%5Cevil",
            "next=https%3A%2F%2Fevil%2F",
            "next=%2Forders%2F..%2Fadmin",
            "next=%2F%22%3E%3Cscript%3E",
        ] {
            assert_eq!(rendered(dropped), "/", "{dropped}");
        }
    }
}
