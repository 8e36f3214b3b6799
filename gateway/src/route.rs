//! The routing decision, as a plain function of (runtime, request facts, now).
//!
//! The proxy phases only gather the request's facts, call [`read_request`]
//! and [`route`] and carry out the answer; everything that decides lives
//! here and is unit-tested without a server.
//!
//! [`read_request`] runs first and once: it turns the path into its one
//! canonical form (`sluice_edge::path`) and refuses a request that cannot be
//! read one way only. Everything after it (the `protect` globs, the local
//! routes, the catalog, the origin cache key, the target sent to the
//! origin) uses that form, so what was checked is what the origin serves.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, StatusCode, Version};

use sluice_edge::auth::{check_single_authorization, check_single_cookie};
use sluice_edge::host::check_host;
use sluice_edge::path::{normalize, CanonicalPath};

use crate::catalog::Lookup;
use crate::error::{ApiError, ErrorCode};
use crate::jwks;
use crate::next_path;
use crate::origin_cache::{CachedResponse, RequestKey};
use crate::response::LocalResponse;
use crate::runtime::Runtime;

/// What the gateway knows about a request when it decides.
pub struct RequestFacts<'a> {
    pub method: &'a Method,
    /// The request's canonical path, from [`read_request`].
    pub path: &'a CanonicalPath,
    pub query: Option<&'a str>,
    pub host: &'a str,
    pub headers: &'a HeaderMap,
}

pub enum Route {
    Local(LocalResponse),
    /// A fresh origin response from the cache; `not_modified` when the
    /// client's validator matches it.
    CacheHit {
        response: Arc<CachedResponse>,
        not_modified: bool,
    },
    /// Send to the origin; with a key when the response may be cached.
    Origin {
        cache: Option<RequestKey>,
    },
    /// A waiting-room route (`/queue/...`), answered by the rooms.
    Queue,
    /// `/checkout` or `/orders/...`, answered by the reservation core.
    Orders,
    /// `/webhooks/{provider}`: payment provider events.
    Webhook,
}

/// Whether the request carries a valid pass for a room.
pub trait PassCheck {
    fn has_pass(&self, room: &str) -> bool;
}

/// No request has a pass.
#[cfg(test)]
pub struct NoPasses;

#[cfg(test)]
impl PassCheck for NoPasses {
    fn has_pass(&self, _room: &str) -> bool {
        false
    }
}

/// What every later decision about a request reads, read once: that it
/// names one site (one `Host`; HTTP/1.1 must send it), its canonical path,
/// and that it names one caller (a single `Authorization` header, no
/// ticket or pass cookie sent twice with different values).
/// Otherwise `400 bad_request`, which is never proxied.
pub fn read_request(
    version: Version,
    raw_path: &str,
    headers: &HeaderMap,
) -> Result<CanonicalPath, LocalResponse> {
    let bad = |message: &str| LocalResponse::error(&ApiError::new(ErrorCode::BadRequest, message));
    check_host(version, headers).map_err(|e| bad(&e.to_string()))?;
    check_single_authorization(headers).map_err(|e| bad(&e.to_string()))?;
    check_single_cookie(
        headers,
        &[crate::queue::PASS_COOKIE, crate::queue::TICKET_COOKIE],
    )
    .map_err(|e| bad(&e.to_string()))?;
    normalize(raw_path).map_err(|e| bad(e.message()))
}

/// The request-target sent to the origin: the canonical path, and the
/// query as the client sent it.
pub fn origin_target(path: &CanonicalPath, query: Option<&str>) -> String {
    match query {
        Some(query) => format!("{}?{query}", path.encoded()),
        None => path.encoded().to_owned(),
    }
}

/// Whether `raw`, a request-target as received, already is
/// [`origin_target`] of `path` and `query`: then the request goes on as it
/// came, without a new target string built and parsed.
pub fn is_origin_target(raw: &[u8], path: &CanonicalPath, query: Option<&str>) -> bool {
    let path = path.encoded().as_bytes();
    match query {
        None => raw == path,
        Some(query) => {
            raw.len() == path.len() + 1 + query.len()
                && raw.starts_with(path)
                && raw[path.len()] == b'?'
                && raw.ends_with(query.as_bytes())
        }
    }
}

pub fn route(rt: &Runtime, req: &RequestFacts<'_>, passes: &dyn PassCheck, now: Instant) -> Route {
    let gateway = &rt.config.gateway;
    if let Some(len) = content_length(req.headers) {
        if len > gateway.max_body_bytes.get() {
            return error(ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!(
                    "The request body is larger than {} bytes.",
                    gateway.max_body_bytes
                ),
            ));
        }
    }
    let path = req.path.decoded();
    if path.starts_with("/queue/") {
        return Route::Queue;
    }
    if path.starts_with("/webhooks/") {
        return Route::Webhook;
    }
    // Public whatever `protect` says: an origin fetches it without a pass.
    if path == jwks::PATH {
        return Route::Local(jwks::answer(req.method, &rt.jwks));
    }
    if let Some(room) = rt.protecting_room_where(path, |room| !passes.has_pass(&room.name)) {
        let queue = format!("/queue/{}", room.name);
        if wants_html(req.headers) {
            // Back to the page asked for once admitted, spelled as the
            // origin would be sent it. Only a page that was read: the
            // admitted browser goes back with a GET, which would not redo
            // a form's POST (and would get its path's answer to a GET).
            let location = if matches!(*req.method, Method::GET | Method::HEAD) {
                next_path::queue_location(&room.name, &origin_target(req.path, req.query))
            } else {
                queue.clone()
            };
            return Route::Local(LocalResponse {
                status: StatusCode::SEE_OTHER,
                headers: vec![
                    (
                        header::LOCATION,
                        HeaderValue::from_str(&location)
                            .expect("room names and a form-encoded next are header-safe"),
                    ),
                    (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
                    (
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("text/plain; charset=utf-8"),
                    ),
                ],
                body: Bytes::from(format!("See {location}\n")),
                source: "local",
            });
        }
        return error(
            ApiError::new(
                ErrorCode::InvalidPass,
                "This page needs an admission pass from the waiting room.",
            )
            .with("join", format!("{queue}/join")),
        );
    }
    if crate::orders::OrderRoute::of(path).is_some() {
        return Route::Orders;
    }
    match rt.catalog.lookup(req.method, req.path, req.headers) {
        Lookup::Hit(hit) => {
            return Route::Local(LocalResponse {
                status: hit.status,
                headers: hit.headers,
                body: hit.body,
                source: "catalog",
            })
        }
        Lookup::MethodNotAllowed => {
            let mut local = LocalResponse::error(&ApiError::new(
                ErrorCode::MethodNotAllowed,
                "Catalog files can only be read with GET or HEAD.",
            ));
            local
                .headers
                .push((header::ALLOW, HeaderValue::from_static("GET, HEAD")));
            return Route::Local(local);
        }
        Lookup::NotFound => {}
    }
    if gateway.origin.is_none() {
        return error(ApiError::new(
            ErrorCode::NotFound,
            "Nothing is served at this path.",
        ));
    }
    // Keyed on what the origin is sent: two spellings it may tell apart
    // (`/a,b` and `/a%2Cb`) are two entries.
    let key = rt.origin_cache.request_key(
        req.method,
        req.host,
        req.path.encoded(),
        req.query,
        req.headers,
    );
    if let Some(k) = &key {
        if let Some(response) = rt.origin_cache.get(&k.key, now) {
            let not_modified = match (req.headers.get(header::IF_NONE_MATCH), response.etag()) {
                (Some(inm), Some(etag)) => etag_matches(inm, etag),
                _ => false,
            };
            return Route::CacheHit {
                response,
                not_modified,
            };
        }
    }
    Route::Origin { cache: key }
}

fn error(e: ApiError) -> Route {
    Route::Local(LocalResponse::error(&e))
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A browser navigating, as opposed to an API client.
pub fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.contains("text/html")))
}

/// Weak comparison of `If-None-Match` against one entity tag.
fn etag_matches(if_none_match: &HeaderValue, etag: &HeaderValue) -> bool {
    let Ok(list) = if_none_match.to_str() else {
        return false;
    };
    let Ok(etag) = etag.to_str() else {
        return false;
    };
    let opaque = |t: &str| t.trim().trim_start_matches("W/").to_string();
    list.split(',')
        .any(|t| t.trim() == "*" || opaque(t) == opaque(etag))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_policies::validate::parse_with_env;
    use std::path::Path;

    fn runtime(extra: &str) -> Runtime {
        let dir = std::env::temp_dir().join(format!("sluice-route-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("index.html"), "<h1>hi</h1>").unwrap();
        let src = format!(
            "[gateway]\nstatic_dir = {dir:?}\nmax_body_bytes = 100\n{extra}\n[[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\", \"/orders/*\"]\nrelease_per_second = 1\nmax_active = 1\nqueue_capacity = 1\n"
        );
        let config = parse_with_env(&src, Path::new("t.toml"), &|_| None).unwrap();
        let catalog = crate::runtime::load_catalog(&config).unwrap();
        Runtime::build(Arc::new(config), Arc::new(catalog), None)
    }

    /// What the proxy does: read the request, then route it.
    fn go(rt: &Runtime, method: &Method, raw_path: &str, headers: &HeaderMap) -> Route {
        go_query(rt, method, raw_path, None, headers)
    }

    /// [`go`] with a query.
    fn go_query(
        rt: &Runtime,
        method: &Method,
        raw_path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> Route {
        let mut headers = headers.clone();
        if !headers.contains_key(header::HOST) {
            headers.insert(header::HOST, HeaderValue::from_static("shop"));
        }
        let headers = &headers;
        let path = match read_request(Version::HTTP_11, raw_path, headers) {
            Ok(path) => path,
            Err(local) => return Route::Local(local),
        };
        let facts = RequestFacts {
            method,
            path: &path,
            query,
            host: "shop",
            headers,
        };
        route(rt, &facts, &NoPasses, Instant::now())
    }

    fn status(r: &Route) -> u16 {
        match r {
            Route::Local(l) => l.status.as_u16(),
            Route::CacheHit { .. } => 1,
            Route::Origin { .. } => 0,
            Route::Queue => 2,
            Route::Orders => 3,
            Route::Webhook => 4,
        }
    }

    #[test]
    fn catalog_then_origin_then_404() {
        let without = runtime("");
        let with = runtime("origin = \"http://127.0.0.1:1\"");
        let h = HeaderMap::new();
        assert_eq!(status(&go(&without, &Method::GET, "/", &h)), 200);
        assert_eq!(status(&go(&without, &Method::GET, "/nope", &h)), 404);
        assert_eq!(status(&go(&with, &Method::GET, "/nope", &h)), 0);
        assert_eq!(status(&go(&with, &Method::POST, "/index.html", &h)), 405);
    }

    #[test]
    fn traversal_is_refused_even_with_an_origin() {
        let rt = runtime("origin = \"http://127.0.0.1:1\"");
        let h = HeaderMap::new();
        for p in [
            "/../etc/passwd",
            "/%2e%2e/etc/passwd",
            "/a%2fb",
            "/a\\b",
            "/%00",
        ] {
            assert_eq!(status(&go(&rt, &Method::GET, p, &h)), 400, "{p}");
        }
    }

    #[test]
    fn protected_paths_send_browsers_to_the_queue_and_apis_to_join() {
        let rt = runtime("origin = \"http://127.0.0.1:1\"");
        let mut browser = HeaderMap::new();
        browser.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/html,application/xhtml+xml"),
        );
        let Route::Local(r) = go(&rt, &Method::GET, "/checkout", &browser) else {
            panic!()
        };
        assert_eq!(r.status, StatusCode::SEE_OTHER);
        assert!(r.headers.contains(&(
            header::LOCATION,
            HeaderValue::from_static("/queue/drop?next=%2Fcheckout")
        )));
        let api = HeaderMap::new();
        let Route::Local(r) = go(&rt, &Method::POST, "/orders/abc/cancel", &api) else {
            panic!()
        };
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            (v["error"].as_str(), v["join"].as_str()),
            (Some("invalid_pass"), Some("/queue/drop/join"))
        );
    }

    fn location(r: Route) -> String {
        let Route::Local(r) = r else {
            panic!("not answered")
        };
        assert_eq!(r.status, StatusCode::SEE_OTHER);
        let (_, location) = r
            .headers
            .iter()
            .find(|(name, _)| name == header::LOCATION)
            .expect("a Location");
        location.to_str().unwrap().to_owned()
    }

    #[test]
    fn a_browser_sent_to_the_queue_carries_the_path_it_asked_for_when_it_may() {
        let rt = runtime("origin = \"http://127.0.0.1:1\"");
        let mut browser = HeaderMap::new();
        browser.insert(header::ACCEPT, HeaderValue::from_static("text/html"));
        let to = |raw: &str, query: Option<&str>| {
            location(go_query(&rt, &Method::GET, raw, query, &browser))
        };
        assert_eq!(
            to("/orders/abc", Some("x=1")),
            "/queue/drop?next=%2Forders%2Fabc%3Fx%3D1"
        );
        // The canonical spelling, the one the origin would be sent.
        assert_eq!(
            to("/%6Frders/abc", None),
            "/queue/drop?next=%2Forders%2Fabc"
        );
        // Too long, or a query a browser would not send: no `next`.
        let long = format!("/orders/{}", "a".repeat(next_path::NEXT_BYTES_MAX));
        assert_eq!(to(&long, None), "/queue/drop");
        assert_eq!(to("/orders/abc", Some("a=<b>")), "/queue/drop");
        // A form posted without a pass: the queue, and then the home page.
        assert_eq!(
            location(go(&rt, &Method::POST, "/checkout", &browser)),
            "/queue/drop"
        );
        assert_eq!(
            location(go(&rt, &Method::HEAD, "/checkout", &browser)),
            "/queue/drop?next=%2Fcheckout"
        );
    }

    #[test]
    fn the_key_set_is_public_whatever_protect_says() {
        let rt = protecting("\"/**\"", false);
        let h = HeaderMap::new();
        let Route::Local(r) = go(&rt, &Method::GET, "/.well-known/sluice/jwks.json", &h) else {
            panic!("not answered")
        };
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(&r.body[..], br#"{"keys":[]}"#);
        assert_eq!(
            status(&go(&rt, &Method::GET, "/.well-known/jwks.json", &h)),
            401
        );
    }

    #[test]
    fn declared_oversized_bodies_are_refused_before_anything_else() {
        let rt = runtime("origin = \"http://127.0.0.1:1\"");
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("101"));
        assert_eq!(status(&go(&rt, &Method::POST, "/api", &h)), 413);
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("100"));
        assert_eq!(status(&go(&rt, &Method::POST, "/api", &h)), 0);
    }

    /// A runtime with an origin and a room protecting `/cart/**`.
    fn cart(fold_case: bool) -> Runtime {
        protecting("\"/cart/**\"", fold_case)
    }

    /// A runtime with an origin and a room protecting `patterns`.
    fn protecting(patterns: &str, fold_case: bool) -> Runtime {
        let dir = std::env::temp_dir().join(format!("sluice-route-cart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = format!(
            "[gateway]\nstatic_dir = {dir:?}\norigin = \"http://127.0.0.1:1\"\n[[rooms]]\nname = \"drop\"\nprotect = [{patterns}]\nprotect_case_insensitive = {fold_case}\nrelease_per_second = 1\nmax_active = 1\nqueue_capacity = 1\n"
        );
        let config = parse_with_env(&src, Path::new("t.toml"), &|_| None).unwrap();
        let catalog = crate::runtime::load_catalog(&config).unwrap();
        Runtime::build(Arc::new(config), Arc::new(catalog), None)
    }

    /// The passes of the rooms named.
    struct PassesOf(&'static [&'static str]);

    impl PassCheck for PassesOf {
        fn has_pass(&self, room: &str) -> bool {
            self.0.contains(&room)
        }
    }

    #[test]
    fn where_rooms_overlap_a_path_needs_the_pass_of_each() {
        let dir = std::env::temp_dir().join(format!("sluice-route-overlap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let room = |name: &str, pattern: &str| {
            format!("[[rooms]]\nname = \"{name}\"\nprotect = [\"{pattern}\"]\nrelease_per_second = 1\nmax_active = 1\nqueue_capacity = 1\n")
        };
        let src = format!(
            "[gateway]\nstatic_dir = {dir:?}\norigin = \"http://127.0.0.1:1\"\n{}{}",
            room("general", "/drops/**"),
            room("vip", "/drops/vip/**")
        );
        let config = parse_with_env(&src, Path::new("t.toml"), &|_| None).unwrap();
        let catalog = crate::runtime::load_catalog(&config).unwrap();
        let rt = Runtime::build(Arc::new(config), Arc::new(catalog), None);
        let headers = HeaderMap::new();
        let go_with = |passes: &'static [&'static str], raw: &str| {
            let path = read_request(Version::HTTP_11, raw, &{
                let mut h = headers.clone();
                h.insert(header::HOST, HeaderValue::from_static("shop"));
                h
            })
            .unwrap();
            let h = headers.clone();
            let facts = RequestFacts {
                method: &Method::GET,
                path: &path,
                query: None,
                host: "shop",
                headers: &h,
            };
            let r = route(&rt, &facts, &PassesOf(passes), Instant::now());
            match r {
                Route::Local(l) => {
                    let v: serde_json::Value = serde_json::from_slice(&l.body).unwrap();
                    (l.status.as_u16(), v["join"].as_str().map(str::to_owned))
                }
                other => (status(&other), None),
            }
        };
        // The general pass opens the general paths, not the vip ones.
        assert_eq!(go_with(&["general"], "/drops/x"), (0, None));
        assert_eq!(
            go_with(&["general"], "/drops/vip/x"),
            (401, Some("/queue/vip/join".into()))
        );
        // The vip path is the general room's too.
        assert_eq!(
            go_with(&["vip"], "/drops/vip/x"),
            (401, Some("/queue/general/join".into()))
        );
        assert_eq!(go_with(&["general", "vip"], "/drops/vip/x"), (0, None));
    }

    #[test]
    fn protect_matches_the_canonical_path() {
        let rt = cart(false);
        let h = HeaderMap::new();
        for p in [
            "/cart/x",
            "/%63art/x",
            "/%63%61%72%74/x",
            "/cart/%78",
            "/cart/",
            // Origins route these to the same page as `/cart/...`.
            "/cart",
        ] {
            assert_eq!(status(&go(&rt, &Method::GET, p, &h)), 401, "{p}");
        }
        for p in [
            "/cart;x/y",
            "/..;/cart/x",
            "/cart%3bx/y",
            "/x/../cart/x",
            "//cart/x",
            "/cart./x",
        ] {
            assert_eq!(status(&go(&rt, &Method::GET, p, &h)), 400, "{p}");
        }
        // Case matters unless the room folds it.
        assert_eq!(status(&go(&rt, &Method::GET, "/Cart/x", &h)), 0);
        let folding = cart(true);
        for p in ["/Cart/x", "/CART/x", "/%43art/x", "/cart/x"] {
            assert_eq!(status(&go(&folding, &Method::GET, p, &h)), 401, "{p}");
        }
        assert_eq!(status(&go(&folding, &Method::GET, "/carts", &h)), 0);
    }

    #[test]
    fn a_pattern_protects_its_directory_without_the_slash_at_any_length() {
        // The slashed spelling of a path is written on the stack up to 255
        // bytes and on the heap beyond: both protect alike.
        let (a, b) = (
            format!("/{}", "a".repeat(254)),
            format!("/{}", "b".repeat(255)),
        );
        assert_eq!((a.len(), b.len()), (255, 256));
        let rt = protecting(&format!("\"{a}/**\", \"{b}/**\""), false);
        let h = HeaderMap::new();
        for p in [&a, &b, &format!("{a}/"), &format!("{b}/x")] {
            assert_eq!(status(&go(&rt, &Method::GET, p, &h)), 401, "{}", p.len());
        }
        assert_eq!(status(&go(&rt, &Method::GET, &format!("{a}x"), &h)), 0);
    }

    #[test]
    fn local_routes_match_the_canonical_path() {
        let rt = runtime("origin = \"http://127.0.0.1:1\"");
        let h = HeaderMap::new();
        assert_eq!(status(&go(&rt, &Method::GET, "/%71ueue/drop", &h)), 2);
        assert_eq!(status(&go(&rt, &Method::POST, "/%77ebhooks/sim", &h)), 4);
        assert_eq!(status(&go(&rt, &Method::POST, "/%63heckout", &h)), 401);
    }

    #[test]
    fn a_target_already_canonical_is_recognised_as_the_origin_target() {
        for (raw, path, query) in [
            ("/a/b", "/a/b", None),
            ("/a/b?x=1", "/a/b", Some("x=1")),
            ("/%63art/x", "/%63art/x", None),
            ("/a/b?x=1", "/a/b", Some("x=2")),
            ("/a/b?", "/a/b", Some("")),
            ("http://shop/a/b", "/a/b", None),
            ("/a/b#f", "/a/b", None),
            ("/a/./b", "/a/./b", None),
        ] {
            let Ok(path) = normalize(path) else {
                continue;
            };
            let built = origin_target(&path, query);
            assert_eq!(
                is_origin_target(raw.as_bytes(), &path, query),
                built == raw,
                "{raw} {query:?}"
            );
        }
    }

    #[test]
    fn two_authorization_headers_are_a_bad_request() {
        let rt = runtime("origin = \"http://127.0.0.1:1\"");
        let mut h = HeaderMap::new();
        h.append(header::AUTHORIZATION, HeaderValue::from_static("Bearer a"));
        assert_eq!(status(&go(&rt, &Method::GET, "/api", &h)), 0);
        h.append(header::AUTHORIZATION, HeaderValue::from_static("Bearer b"));
        let Route::Local(r) = go(&rt, &Method::GET, "/api", &h) else {
            panic!("proxied")
        };
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["error"], "bad_request");
    }

    #[test]
    fn the_origin_is_sent_the_canonical_path_and_the_query_as_sent() {
        let p = normalize("/%63art/caf%c3%a9").unwrap();
        assert_eq!(origin_target(&p, None), "/cart/caf%C3%A9");
        assert_eq!(
            origin_target(&p, Some("a=%2f&b=..;")),
            "/cart/caf%C3%A9?a=%2f&b=..;"
        );
    }

    #[test]
    fn if_none_match_uses_weak_comparison() {
        let etag = HeaderValue::from_static("\"abc\"");
        assert!(etag_matches(&HeaderValue::from_static("W/\"abc\""), &etag));
        assert!(etag_matches(
            &HeaderValue::from_static("\"x\", \"abc\""),
            &etag
        ));
        assert!(etag_matches(&HeaderValue::from_static("*"), &etag));
        assert!(!etag_matches(&HeaderValue::from_static("\"abcd\""), &etag));
    }
}
