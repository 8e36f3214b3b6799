//! Catalog tests over a real temporary directory.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use sha2::{Digest, Sha256};

use sluice_edge::path::normalize;

use super::load::mime_for;
use super::*;

/// A directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("sluice-catalog-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The mtime of `index.html` (and of `link-in.html`, which points at it).
const MTIME_SECS: u64 = 1_700_000_000;
const MTIME_HTTP: &str = "Tue, 14 Nov 2023 22:13:20 GMT";

/// How many files the fixture serves.
const FIXTURE_FILES: usize = 11;

struct Fixture {
    _base: TempDir,
    dir: PathBuf,
    catalog: Catalog,
}

fn roomy() -> CatalogLimits {
    CatalogLimits {
        max_file_bytes: 1 << 20,
        max_total_bytes: 1 << 24,
        max_files: 1000,
    }
}

fn rules() -> Vec<CacheControlRule> {
    let rule = |pattern: &str, value: &str| CacheControlRule {
        pattern: pattern.into(),
        value: value.into(),
    };
    vec![
        rule("/catalog/**", "public, max-age=300"),
        rule("*.html", "no-cache"),
        // Never used: the first rule already matches.
        rule("/catalog/products.json", "private"),
    ]
}

fn index_html() -> Vec<u8> {
    let mut html = String::from("<!doctype html><title>Sluice</title>\n");
    for i in 0..60 {
        html.push_str(&format!(
            "<p class=\"item\">Item number {i} of the catalog</p>\n"
        ));
    }
    html.into_bytes()
}

fn products_json() -> Vec<u8> {
    let items: Vec<String> = (0..80)
        .map(|i| {
            format!(
                "{{\"sku\":\"SKU-{i:04}\",\"name\":\"Product {i}\",\"price_cents\":{}}}",
                1000 + i
            )
        })
        .collect();
    format!("[{}]", items.join(",")).into_bytes()
}

/// Bytes that do not compress.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn write(path: &Path, body: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, body).unwrap();
}

fn symlink(target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

/// Builds `base/static` with every case the catalog must handle, and files
/// outside it that symlinks point at.
fn make_dir(base: &Path) -> PathBuf {
    let dir = base.join("static");
    write(&dir.join("index.html"), &index_html());
    let mtime = UNIX_EPOCH + Duration::from_secs(MTIME_SECS);
    fs::File::options()
        .write(true)
        .open(dir.join("index.html"))
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    write(
        &dir.join("pt/index.html"),
        "<p>Olá, catálogo!</p>\n".repeat(30).as_bytes(),
    );
    write(&dir.join("catalog/products.json"), &products_json());
    write(&dir.join("small.css"), b"body{margin:0}");
    write(&dir.join("logo.png"), &noise(1000));
    write(&dir.join("random.txt"), &noise(1000));
    write(&dir.join("data.xyz"), b"opaque");
    write(&dir.join("caf\u{e9}.txt"), b"coffee");
    write(&dir.join("hello world.txt"), b"hello");
    write(&dir.join("sub/a.txt"), b"a");
    // Not served: dotfiles, dot-dirs, names no request can reach.
    write(&dir.join(".secret"), b"secret");
    write(&dir.join(".git/config"), b"[core]");
    write(&dir.join("50%.txt"), b"half");
    // Symlinks: inside (served), outside, looping, broken (all skipped).
    write(&base.join("outside/secret.txt"), b"outside secret");
    symlink(Path::new("index.html"), &dir.join("link-in.html"));
    symlink(&base.join("outside/secret.txt"), &dir.join("link-out.txt"));
    symlink(&base.join("outside"), &dir.join("dir-out"));
    symlink(Path::new("."), &dir.join("loop"));
    symlink(Path::new(".."), &dir.join("sub/up"));
    symlink(Path::new("nowhere.txt"), &dir.join("broken.txt"));
    symlink(Path::new(".git/config"), &dir.join("config.txt"));
    dir
}

fn fixture() -> Fixture {
    let base = TempDir::new();
    let dir = make_dir(&base.0);
    let catalog = Catalog::load(&dir, &roomy(), &rules()).unwrap();
    Fixture {
        _base: base,
        dir,
        catalog,
    }
}

fn request(
    catalog: &Catalog,
    method: Method,
    path: &str,
    headers: &[(HeaderName, &str)],
) -> Lookup {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.append(name.clone(), HeaderValue::from_str(value).unwrap());
    }
    // As the proxy does: the query is not part of the path.
    let path = path.split_once('?').map_or(path, |(path, _)| path);
    let path = normalize(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    catalog.lookup(&method, &path, &map)
}

fn hit(lookup: Lookup) -> CatalogResponse {
    match lookup {
        Lookup::Hit(response) => response,
        other => panic!("expected a hit, got {other:?}"),
    }
}

fn get(catalog: &Catalog, path: &str, headers: &[(HeaderName, &str)]) -> CatalogResponse {
    hit(request(catalog, Method::GET, path, headers))
}

fn header<'a>(response: &'a CatalogResponse, name: &HeaderName) -> Option<&'a str> {
    let mut values = response.headers.iter().filter(|(n, _)| n == name);
    let value = values.next().map(|(_, v)| v.to_str().unwrap());
    assert!(values.next().is_none(), "{name} appears twice");
    value
}

fn etag_of(body: &[u8]) -> String {
    format!("\"{}\"", &hex::encode(Sha256::digest(body))[..32])
}

fn gunzip(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn unbrotli(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    brotli::Decompressor::new(body, 4096)
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[test]
fn loads_files_recursively_keyed_by_url_path() {
    let f = fixture();
    let mut keys: Vec<&str> = f.catalog.files.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "/caf\u{e9}.txt",
            "/catalog/products.json",
            "/data.xyz",
            "/hello world.txt",
            "/index.html",
            "/link-in.html",
            "/logo.png",
            "/pt/index.html",
            "/random.txt",
            "/small.css",
            "/sub/a.txt",
        ]
    );
    assert_eq!(f.catalog.len(), FIXTURE_FILES);
    assert!(!f.catalog.is_empty());
    let total: u64 = keys
        .iter()
        .map(|k| fs::metadata(f.dir.join(&k[1..])).unwrap().len())
        .sum();
    assert_eq!(f.catalog.total_bytes(), total);
    assert_eq!(
        get(&f.catalog, "/catalog/products.json", &[]).body,
        products_json()
    );
    assert_eq!(get(&f.catalog, "/caf%C3%A9.txt", &[]).body, "coffee");
    assert_eq!(get(&f.catalog, "/hello%20world.txt", &[]).body, "hello");
}

#[test]
fn directories_map_to_their_index() {
    let f = fixture();
    assert_eq!(get(&f.catalog, "/", &[]).body, index_html());
    assert_eq!(
        get(&f.catalog, "/pt/", &[]).body,
        get(&f.catalog, "/pt/index.html", &[]).body
    );
    assert!(matches!(
        request(&f.catalog, Method::GET, "/pt", &[]),
        Lookup::NotFound
    ));
    assert!(matches!(
        request(&f.catalog, Method::GET, "/catalog/", &[]),
        Lookup::NotFound
    ));
}

#[test]
fn skips_dotfiles_outside_symlinks_loops_and_unreachable_names() {
    let f = fixture();
    for key in [
        "/.secret",
        "/.git/config",
        "/link-out.txt",
        "/dir-out/secret.txt",
        "/loop/index.html",
        "/sub/up/index.html",
        "/broken.txt",
        "/config.txt",
        "/50%.txt",
    ] {
        assert!(!f.catalog.contains(key), "{key} must not be loaded");
    }
    assert!(matches!(
        request(&f.catalog, Method::GET, "/.secret", &[]),
        Lookup::NotFound
    ));
    assert!(matches!(
        request(&f.catalog, Method::GET, "/link-out.txt", &[]),
        Lookup::NotFound
    ));
    assert!(matches!(
        request(&f.catalog, Method::GET, "/dir-out/secret.txt", &[]),
        Lookup::NotFound
    ));
    // A symlink that stays inside is served, with its target's content.
    assert_eq!(get(&f.catalog, "/link-in.html", &[]).body, index_html());
}

#[test]
fn serves_from_memory_after_the_directory_is_gone() {
    let f = fixture();
    fs::remove_dir_all(&f.dir).unwrap();
    assert_eq!(get(&f.catalog, "/index.html", &[]).body, index_html());
}

#[test]
fn limits_fail_the_load() {
    let base = TempDir::new();
    let dir = make_dir(&base.0);
    let total = Catalog::load(&dir, &roomy(), &[]).unwrap().total_bytes();
    let largest = products_json().len() as u64;
    let with = |change: &dyn Fn(&mut CatalogLimits)| {
        let mut limits = roomy();
        change(&mut limits);
        Catalog::load(&dir, &limits, &[])
    };

    assert_eq!(
        with(&|l| l.max_files = FIXTURE_FILES).unwrap().len(),
        FIXTURE_FILES
    );
    let err = with(&|l| l.max_files = FIXTURE_FILES - 1).unwrap_err();
    assert!(
        matches!(err, CatalogError::TooManyFiles { limit } if limit == FIXTURE_FILES - 1),
        "{err}"
    );

    assert!(with(&|l| l.max_file_bytes = largest).is_ok());
    let err = with(&|l| l.max_file_bytes = largest - 1).unwrap_err();
    match &err {
        CatalogError::FileTooLarge { path, size, limit } => {
            assert!(
                path.ends_with("catalog/products.json"),
                "{}",
                path.display()
            );
            assert_eq!((*size, *limit), (largest, largest - 1));
        }
        other => panic!("expected FileTooLarge, got {other}"),
    }
    assert!(err.to_string().contains("products.json"), "{err}");

    assert_eq!(
        with(&|l| l.max_total_bytes = total).unwrap().total_bytes(),
        total
    );
    let err = with(&|l| l.max_total_bytes = total - 1).unwrap_err();
    assert!(
        matches!(err, CatalogError::TotalTooLarge { limit, .. } if limit == total - 1),
        "{err}"
    );
}

#[test]
fn too_deep_directories_fail_the_load() {
    let base = TempDir::new();
    let mut deep = base.0.clone();
    for _ in 0..=MAX_DEPTH + 1 {
        deep.push("d");
    }
    write(&deep.join("x.txt"), b"x");
    let err = Catalog::load(&base.0, &roomy(), &[]).unwrap_err();
    assert!(
        matches!(
            err,
            CatalogError::TooDeep {
                limit: MAX_DEPTH,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_missing_directory_is_an_io_error_naming_it() {
    let base = TempDir::new();
    let missing = base.0.join("missing");
    let err = Catalog::load(&missing, &roomy(), &[]).unwrap_err();
    assert!(
        matches!(&err, CatalogError::Io { path, .. } if *path == missing),
        "{err}"
    );
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn bad_rules_fail_the_load() {
    let base = TempDir::new();
    for (pattern, value) in [("/a/[", "public"), ("/**", "bad\nvalue"), ("/**", "")] {
        let rule = CacheControlRule {
            pattern: pattern.into(),
            value: value.into(),
        };
        let err = Catalog::load(&base.0, &roomy(), &[rule]).unwrap_err();
        assert!(
            matches!(&err, CatalogError::BadRule { pattern: p, .. } if p == pattern),
            "{err}"
        );
    }
}

#[test]
fn traversal_spellings_are_bad_paths() {
    let spellings = [
        "/..",
        "/../etc/passwd",
        "/catalog/../index.html",
        "/catalog/..",
        "/catalog/.",
        "/./index.html",
        "/...",
        "/%2e%2e/etc/passwd",
        "/%2E%2E/",
        "/.%2e/index.html",
        "/%2e./index.html",
        "/catalog/%2e",
        "/..%2f..%2fetc/passwd",
        "/..%2F",
        "/catalog%2fproducts.json",
        "/..%5c..%5cwindows",
        "/%5C",
        "/..\\windows",
        "/catalog\\..\\index.html",
        "/%252e%252e/etc/passwd",
        "/%252f",
        "/%25",
        "/index.html%00.png",
        "/%00",
        "/a%0d%0aSet-Cookie:x=1",
        "/\u{7f}",
        "/a%7f",
        "//etc/passwd",
        "/catalog//products.json",
        "/C:/Windows/win.ini",
        "/c:",
        "/d:boot.ini",
        "/%c0%ae%c0%ae/",
        "/%ff",
        "/%ef%bc%8e%ef%bc%8e/index.html",
        "/..%ef%bc%8findex.html",
        "/%e2%88%95etc",
        "/%",
        "/%2",
        "/%g0",
        "/a b",
        "/a#b",
        "etc/passwd",
        "",
        "..",
        "/..?x=1",
    ];
    assert!(spellings.len() >= 15);
    // The gateway normalises every request path before the catalog (or
    // anything else) sees it; none of these has a canonical form, so no
    // lookup, file or origin ever sees them.
    for path in spellings {
        let path = path.split_once('?').map_or(path, |(path, _)| path);
        let refused = normalize(path).expect_err(path);
        let why = refused.message();
        assert!(
            why.starts_with("The request path") && why.ends_with('.'),
            "{why}"
        );
    }
}

#[test]
fn well_formed_misses_are_not_found() {
    let f = fixture();
    for path in [
        "/nope",
        "/a..b",
        "/.well-known/x",
        "/queue/main/join",
        "/index.htm",
        "/INDEX.HTML",
    ] {
        for method in [Method::GET, Method::POST] {
            let lookup = request(&f.catalog, method.clone(), path, &[]);
            assert!(
                matches!(lookup, Lookup::NotFound),
                "{method} {path} gave {lookup:?}"
            );
        }
    }
    // The query is not part of the path, whatever it holds.
    assert_eq!(
        get(&f.catalog, "/index.html?x=/../../etc%2fpasswd", &[]).status,
        StatusCode::OK
    );
}

#[test]
fn content_type_by_extension() {
    for (name, content_type) in [
        ("a.html", "text/html; charset=utf-8"),
        ("a.HTM", "text/html; charset=utf-8"),
        ("a.css", "text/css; charset=utf-8"),
        ("a.js", "text/javascript; charset=utf-8"),
        ("a.mjs", "text/javascript; charset=utf-8"),
        ("a.json", "application/json; charset=utf-8"),
        ("a.map", "application/json; charset=utf-8"),
        ("a.svg", "image/svg+xml; charset=utf-8"),
        ("a.txt", "text/plain; charset=utf-8"),
        ("a.xml", "application/xml; charset=utf-8"),
        ("a.webmanifest", "application/manifest+json; charset=utf-8"),
        ("a.png", "image/png"),
        ("a.jpg", "image/jpeg"),
        ("a.JPEG", "image/jpeg"),
        ("a.gif", "image/gif"),
        ("a.webp", "image/webp"),
        ("a.avif", "image/avif"),
        ("a.ico", "image/x-icon"),
        ("a.woff2", "font/woff2"),
        ("a.pdf", "application/pdf"),
        ("a.xyz", "application/octet-stream"),
        ("Makefile", "application/octet-stream"),
        ("archive.tar.gz", "application/octet-stream"),
    ] {
        assert_eq!(
            mime_for(&format!("/dir.d/{name}")).content_type,
            content_type,
            "{name}"
        );
    }
    for (ext, compressible) in [
        ("html", true),
        ("js", true),
        ("svg", true),
        ("webmanifest", true),
        ("png", false),
    ] {
        assert_eq!(
            mime_for(&format!("/a.{ext}")).compressible,
            compressible,
            "{ext}"
        );
    }
    let f = fixture();
    for (path, content_type) in [
        ("/catalog/products.json", "application/json; charset=utf-8"),
        ("/logo.png", "image/png"),
        ("/data.xyz", "application/octet-stream"),
    ] {
        let response = get(&f.catalog, path, &[]);
        assert_eq!(
            header(&response, &http::header::CONTENT_TYPE),
            Some(content_type)
        );
        assert_eq!(
            header(&response, &http::header::X_CONTENT_TYPE_OPTIONS),
            Some("nosniff")
        );
    }
}

#[test]
fn ok_responses_carry_every_header() {
    use http::header::*;
    let f = fixture();
    let body = index_html();
    let response = get(&f.catalog, "/index.html", &[]);
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(response.body, body);
    assert_eq!(
        header(&response, &CONTENT_TYPE),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(
        header(&response, &CONTENT_LENGTH),
        Some(body.len().to_string().as_str())
    );
    assert_eq!(header(&response, &CACHE_CONTROL), Some("no-cache"));
    let etag = etag_of(&body);
    assert_eq!(etag.len(), 34);
    assert_eq!(header(&response, &ETAG), Some(etag.as_str()));
    assert_eq!(header(&response, &LAST_MODIFIED), Some(MTIME_HTTP));
    assert_eq!(header(&response, &VARY), Some("Accept-Encoding"));
    assert_eq!(header(&response, &CONTENT_ENCODING), None);
    assert_eq!(header(&response, &X_CONTENT_TYPE_OPTIONS), Some("nosniff"));
    assert_eq!(header(&response, &ACCEPT_RANGES), Some("none"));

    // The first matching rule wins; no match gets the default.
    let products = get(&f.catalog, "/catalog/products.json", &[]);
    assert_eq!(
        header(&products, &CACHE_CONTROL),
        Some("public, max-age=300")
    );
    let css = get(&f.catalog, "/small.css", &[]);
    assert_eq!(header(&css, &CACHE_CONTROL), Some(DEFAULT_CACHE_CONTROL));
    // Same content, same ETag, whatever the path.
    let link = get(&f.catalog, "/link-in.html", &[]);
    assert_eq!(header(&link, &ETAG), Some(etag.as_str()));
}

#[test]
fn compressed_variants_decompress_to_the_original() {
    use http::header::*;
    let f = fixture();
    for (path, original) in [
        ("/index.html", index_html()),
        ("/catalog/products.json", products_json()),
    ] {
        let hash = etag_of(&original);
        let hash = hash.trim_matches('"');
        let br = get(&f.catalog, path, &[(ACCEPT_ENCODING, "br")]);
        assert_eq!(header(&br, &CONTENT_ENCODING), Some("br"));
        assert_eq!(header(&br, &ETAG), Some(format!("\"{hash}-br\"").as_str()));
        assert_eq!(
            header(&br, &CONTENT_LENGTH),
            Some(br.body.len().to_string().as_str())
        );
        assert_eq!(header(&br, &VARY), Some("Accept-Encoding"));
        assert!(br.body.len() < original.len());
        assert_eq!(unbrotli(&br.body), original);

        let gz = get(&f.catalog, path, &[(ACCEPT_ENCODING, "gzip")]);
        assert_eq!(header(&gz, &CONTENT_ENCODING), Some("gzip"));
        assert_eq!(
            header(&gz, &ETAG),
            Some(format!("\"{hash}-gzip\"").as_str())
        );
        assert_eq!(
            header(&gz, &CONTENT_LENGTH),
            Some(gz.body.len().to_string().as_str())
        );
        assert!(gz.body.len() < original.len());
        assert_eq!(gunzip(&gz.body), original);
    }
}

#[test]
fn accept_encoding_picks_the_representation() {
    use http::header::*;
    let f = fixture();
    let coding = |accept: Option<&str>| {
        let headers: Vec<(HeaderName, &str)> =
            accept.map(|a| (ACCEPT_ENCODING, a)).into_iter().collect();
        let response = get(&f.catalog, "/catalog/products.json", &headers);
        header(&response, &CONTENT_ENCODING)
            .unwrap_or("identity")
            .to_owned()
    };
    for (accept, expected) in [
        (None, "identity"),
        (Some(""), "identity"),
        (Some("gzip, deflate, br"), "br"),
        (Some("gzip"), "gzip"),
        (Some("GZIP"), "gzip"),
        (Some("x-gzip"), "gzip"),
        (Some("br;q=0, gzip"), "gzip"),
        (Some("gzip;q=0.5, identity"), "identity"),
        (Some("gzip;q=0.5, br;q=0.4"), "gzip"),
        (Some("gzip;q=0.001"), "gzip"),
        (Some("gzip;q=0.5, br;q=0.4, identity"), "identity"),
        (Some("identity;q=0.5, gzip;q=0.5"), "gzip"),
        (Some("*"), "br"),
        (Some("*;q=0.5, br;q=0"), "gzip"),
        (Some("*;q=0, identity"), "identity"),
        (Some("br;q=0, gzip;q=0, *"), "identity"),
        (Some("identity;q=0, *;q=0"), "identity"),
        (Some("deflate"), "identity"),
        (Some("br;q=1.5, gzip"), "gzip"),
    ] {
        assert_eq!(coding(accept), expected, "Accept-Encoding: {accept:?}");
    }
}

#[test]
fn small_and_incompressible_files_are_served_plain() {
    use http::header::*;
    let f = fixture();
    for path in ["/small.css", "/random.txt", "/logo.png", "/sub/a.txt"] {
        let response = get(&f.catalog, path, &[(ACCEPT_ENCODING, "br, gzip")]);
        assert_eq!(header(&response, &CONTENT_ENCODING), None, "{path}");
        assert_eq!(header(&response, &VARY), None, "{path}");
        assert_eq!(f.catalog.files[path].variants.len(), 1, "{path}");
    }
}

#[test]
fn compression_happens_once_at_load() {
    use http::header::*;
    let f = fixture();
    let first = get(&f.catalog, "/index.html", &[(ACCEPT_ENCODING, "br")]);
    let second = get(&f.catalog, "/index.html", &[(ACCEPT_ENCODING, "br")]);
    assert_eq!(first.body.as_ptr(), second.body.as_ptr());
    let plain = get(&f.catalog, "/index.html", &[]);
    assert_eq!(plain.body.as_ptr(), get(&f.catalog, "/", &[]).body.as_ptr());
}

#[test]
fn if_none_match_gives_304() {
    use http::header::*;
    let f = fixture();
    let etag = etag_of(&index_html());
    let hash = etag.trim_matches('"');
    let br_etag = format!("\"{hash}-br\"");
    let weak = format!("W/{etag}");
    let listed = format!("\"other\", {etag}");

    let not_modified = get(&f.catalog, "/index.html", &[(IF_NONE_MATCH, &etag)]);
    assert_eq!(not_modified.status, StatusCode::NOT_MODIFIED);
    assert!(not_modified.body.is_empty());
    assert_eq!(header(&not_modified, &ETAG), Some(etag.as_str()));
    assert_eq!(header(&not_modified, &CACHE_CONTROL), Some("no-cache"));
    assert_eq!(header(&not_modified, &LAST_MODIFIED), Some(MTIME_HTTP));
    assert_eq!(header(&not_modified, &VARY), Some("Accept-Encoding"));
    assert_eq!(header(&not_modified, &CONTENT_LENGTH), None);
    assert_eq!(header(&not_modified, &CONTENT_TYPE), None);

    let status_and_etag = |headers: &[(HeaderName, &str)]| {
        let response = get(&f.catalog, "/index.html", headers);
        (
            response.status,
            header(&response, &ETAG).unwrap().to_owned(),
        )
    };
    let nm = StatusCode::NOT_MODIFIED;
    assert_eq!(
        status_and_etag(&[(IF_NONE_MATCH, &weak)]),
        (nm, etag.clone())
    );
    assert_eq!(
        status_and_etag(&[(IF_NONE_MATCH, &listed)]),
        (nm, etag.clone())
    );
    assert_eq!(status_and_etag(&[(IF_NONE_MATCH, "*")]), (nm, etag.clone()));
    assert_eq!(
        status_and_etag(&[(IF_NONE_MATCH, "*"), (ACCEPT_ENCODING, "br")]),
        (nm, br_etag.clone())
    );
    assert_eq!(
        status_and_etag(&[(IF_NONE_MATCH, &br_etag), (ACCEPT_ENCODING, "br")]),
        (nm, br_etag.clone())
    );
    // Naming another representation of the file still matches; the 304
    // names the one the client has.
    assert_eq!(
        status_and_etag(&[(IF_NONE_MATCH, &br_etag)]),
        (nm, br_etag.clone())
    );
    assert_eq!(
        status_and_etag(&[(IF_NONE_MATCH, &etag), (ACCEPT_ENCODING, "br")]),
        (nm, etag.clone())
    );
    // Another file's ETag, or a changed file, does not match.
    let other = etag_of(&products_json());
    assert_eq!(
        status_and_etag(&[(IF_NONE_MATCH, &other)]),
        (StatusCode::OK, etag.clone())
    );
    assert_eq!(
        status_and_etag(&[(IF_NONE_MATCH, "\"nope\"")]),
        (StatusCode::OK, etag.clone())
    );
    assert_eq!(
        status_and_etag(&[(IF_NONE_MATCH, hash)]),
        (StatusCode::OK, etag.clone())
    );

    let head = hit(request(
        &f.catalog,
        Method::HEAD,
        "/index.html",
        &[(IF_NONE_MATCH, &etag)],
    ));
    assert_eq!(head.status, StatusCode::NOT_MODIFIED);
    let post = request(
        &f.catalog,
        Method::POST,
        "/index.html",
        &[(IF_NONE_MATCH, &etag)],
    );
    assert!(matches!(post, Lookup::MethodNotAllowed));
}

#[test]
fn if_modified_since_gives_304_without_if_none_match() {
    use http::header::*;
    let f = fixture();
    let date = |secs: u64| httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
    let status = |headers: &[(HeaderName, &str)]| get(&f.catalog, "/index.html", headers).status;
    let nm = StatusCode::NOT_MODIFIED;
    assert_eq!(status(&[(IF_MODIFIED_SINCE, MTIME_HTTP)]), nm);
    assert_eq!(status(&[(IF_MODIFIED_SINCE, &date(MTIME_SECS + 3600))]), nm);
    assert_eq!(
        status(&[(IF_MODIFIED_SINCE, &date(MTIME_SECS - 1))]),
        StatusCode::OK
    );
    assert_eq!(
        status(&[(IF_MODIFIED_SINCE, "last tuesday")]),
        StatusCode::OK
    );
    // If-None-Match, when present, decides alone.
    assert_eq!(
        status(&[(IF_MODIFIED_SINCE, MTIME_HTTP), (IF_NONE_MATCH, "\"nope\"")]),
        StatusCode::OK
    );
    let response = get(
        &f.catalog,
        "/index.html",
        &[(IF_MODIFIED_SINCE, MTIME_HTTP), (ACCEPT_ENCODING, "gzip")],
    );
    assert_eq!(response.status, nm);
    let etag = format!("\"{}-gzip\"", etag_of(&index_html()).trim_matches('"'));
    assert_eq!(header(&response, &ETAG), Some(etag.as_str()));

    // A file written just now is newer than the fixed date.
    let fresh = get(&f.catalog, "/small.css", &[(IF_MODIFIED_SINCE, MTIME_HTTP)]);
    assert_eq!(fresh.status, StatusCode::OK);
    let now = date(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 60,
    );
    let cached = get(&f.catalog, "/small.css", &[(IF_MODIFIED_SINCE, &now)]);
    assert_eq!(cached.status, nm);
}

#[test]
fn head_has_the_headers_of_get_and_no_body() {
    use http::header::*;
    let f = fixture();
    for accept in ["", "gzip", "br"] {
        for path in ["/index.html", "/", "/logo.png"] {
            let headers = [(ACCEPT_ENCODING, accept)];
            let get = get(&f.catalog, path, &headers);
            let head = hit(request(&f.catalog, Method::HEAD, path, &headers));
            assert_eq!(head.status, StatusCode::OK);
            assert_eq!(head.headers, get.headers, "{path} {accept}");
            assert!(head.body.is_empty());
            assert!(!get.body.is_empty());
            assert_eq!(
                header(&head, &CONTENT_LENGTH),
                Some(get.body.len().to_string().as_str())
            );
        }
    }
}

#[test]
fn other_methods_on_files_are_not_allowed() {
    let f = fixture();
    for method in [
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::OPTIONS,
    ] {
        for path in ["/index.html", "/", "/catalog/products.json"] {
            let lookup = request(&f.catalog, method.clone(), path, &[]);
            assert!(
                matches!(lookup, Lookup::MethodNotAllowed),
                "{method} {path} gave {lookup:?}"
            );
        }
    }
}

#[test]
fn the_empty_catalog_finds_nothing() {
    let catalog = Catalog::empty();
    assert_eq!(catalog.len(), 0);
    assert!(catalog.is_empty());
    assert_eq!(catalog.total_bytes(), 0);
    assert!(matches!(
        request(&catalog, Method::GET, "/index.html", &[]),
        Lookup::NotFound
    ));
    assert!(matches!(
        request(&catalog, Method::GET, "/", &[]),
        Lookup::NotFound
    ));
}
