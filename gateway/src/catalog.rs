//! The catalog: the files of `gateway.static_dir`, served from memory.
//!
//! [`Catalog::load`] walks the directory once (at start and on each config
//! reload) and keeps every file, with everything a response needs, in an
//! immutable map: the body, a strong `ETag`, `Last-Modified`, the
//! `Cache-Control` picked by the config's rules, and gzip and brotli variants
//! compressed once at load. A request never touches the file system, so a
//! slow or changing disk cannot stall it, a half-written deploy cannot be
//! served, and no request path can name a file outside the map.
//!
//! [`Catalog::lookup`] takes the request's [`CanonicalPath`]: the gateway
//! refuses a path that is malformed or looks like a traversal attempt
//! (`..`, encoded slashes, double encoding, control characters, drive
//! letters, ...) with `400 bad_request` before anything looks it up
//! (`sluice_edge::path`), so the catalog, the `protect` globs and the origin
//! all see the same one form.
//!
//! Every input is bounded: the number and size of files ([`CatalogLimits`]),
//! directory depth ([`MAX_DEPTH`]), path length ([`MAX_PATH_BYTES`]), and how
//! much of `Accept-Encoding` and `If-None-Match` is read.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};

mod load;
mod negotiate;
#[cfg(test)]
mod tests;

use sluice_edge::path::CanonicalPath;

/// How deep directories may nest below `static_dir`.
pub const MAX_DEPTH: usize = 32;

/// `Cache-Control` of a file that no [`CacheControlRule`] matches.
pub const DEFAULT_CACHE_CONTROL: &str = "public, max-age=60";

/// How much a catalog may hold; exceeding any limit fails the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogLimits {
    /// The largest file, in bytes.
    pub max_file_bytes: u64,
    /// All files together (uncompressed), in bytes.
    pub max_total_bytes: u64,
    /// How many files.
    pub max_files: usize,
}

/// A `Cache-Control` value for the files whose URL path matches a glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheControlRule {
    /// A glob over the URL path, e.g. `/catalog/**`, `*.html`, `/**`; `*`
    /// also matches `/`, as in the config's other path patterns.
    pub pattern: String,
    /// The header value, e.g. `public, max-age=300`.
    pub value: String,
}

/// Why a catalog could not be loaded. The previous catalog stays in use.
#[derive(thiserror::Error, Debug)]
pub enum CatalogError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is {size} bytes, more than the limit of {limit}", path.display())]
    FileTooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    #[error("the files add up to {total} bytes or more, more than the limit of {limit}")]
    TotalTooLarge { total: u64, limit: u64 },
    #[error("there are more than {limit} files")]
    TooManyFiles { limit: usize },
    #[error("{} is nested more than {limit} directories deep", path.display())]
    TooDeep { path: PathBuf, limit: usize },
    #[error("cache_control rule {pattern:?}: {reason}")]
    BadRule { pattern: String, reason: String },
}

/// What the catalog says about a request.
#[derive(Debug)]
pub enum Lookup {
    /// No catalog file has this path: proxy it.
    NotFound,
    /// A catalog file, but the method is not GET or HEAD: answer `405` with
    /// `Allow: GET, HEAD`.
    MethodNotAllowed,
    /// Answer with this.
    Hit(CatalogResponse),
}

/// A complete response for a catalog file.
#[derive(Debug, Clone)]
pub struct CatalogResponse {
    /// `200 OK` or `304 Not Modified`.
    pub status: StatusCode,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Empty for HEAD and 304; otherwise shared with the catalog (no copy).
    pub body: Bytes,
}

/// The files of `static_dir`, keyed by URL path (`/catalog/products.json`).
/// Immutable after [`load`](Catalog::load); share it in an `Arc`.
#[derive(Debug, Default)]
pub struct Catalog {
    files: HashMap<String, Entry>,
    total_bytes: u64,
}

/// One file and everything its responses need.
#[derive(Debug)]
struct Entry {
    cache_control: HeaderValue,
    /// Seconds since the epoch, and the same as an HTTP date.
    last_modified: Option<(u64, HeaderValue)>,
    /// The identity representation first, then the compressed ones kept.
    variants: Vec<Variant>,
}

/// One representation of a file: identity, gzip or brotli.
#[derive(Debug)]
struct Variant {
    coding: negotiate::Coding,
    etag: HeaderValue,
    body: Bytes,
    /// The headers of a `200` with this representation.
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Catalog {
    /// Reads every file below `dir` into memory: recursively, skipping
    /// dotfiles, dot-directories and symlinks that lead outside `dir`.
    /// Exceeding a limit or an unreadable file is an error, never a
    /// silently smaller catalog.
    pub fn load(
        dir: &Path,
        limits: &CatalogLimits,
        rules: &[CacheControlRule],
    ) -> Result<Catalog, CatalogError> {
        load::load(dir, limits, rules)
    }

    /// A catalog with no files: every well-formed path is [`Lookup::NotFound`].
    pub fn empty() -> Catalog {
        Catalog::default()
    }

    /// How many files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether there are no files.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The files' uncompressed bytes, together.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Whether `path` (a decoded URL path such as `/index.html`) is a file.
    pub fn contains(&self, path: &str) -> bool {
        self.files.contains_key(path)
    }

    /// Answers a request for `path`, matched on its decoded form. A path
    /// ending in `/` means its `index.html`.
    pub fn lookup(&self, method: &Method, path: &CanonicalPath, headers: &HeaderMap) -> Lookup {
        let path = path.decoded();
        let entry = if path.ends_with('/') {
            self.files.get(&format!("{path}index.html"))
        } else {
            self.files.get(path)
        };
        let Some(entry) = entry else {
            return Lookup::NotFound;
        };
        let head = if method == Method::GET {
            false
        } else if method == Method::HEAD {
            true
        } else {
            return Lookup::MethodNotAllowed;
        };
        Lookup::Hit(entry.respond(head, headers))
    }
}

impl Entry {
    fn respond(&self, head: bool, headers: &HeaderMap) -> CatalogResponse {
        let accept = negotiate::AcceptEncoding::parse(headers);
        let chosen = self.choose(&accept);
        if let Some(variant) = self.not_modified(chosen, headers) {
            return self.not_modified_response(variant);
        }
        CatalogResponse {
            status: StatusCode::OK,
            headers: chosen.headers.clone(),
            body: if head {
                Bytes::new()
            } else {
                chosen.body.clone()
            },
        }
    }

    /// The representation the client prefers; identity when it accepts
    /// none (serving it beats a `406` for a cacheable file).
    fn choose(&self, accept: &negotiate::AcceptEncoding) -> &Variant {
        self.variants
            .iter()
            .map(|v| (accept.quality(v.coding), v.coding.preference(), v))
            .filter(|(q, _, _)| *q > 0)
            .max_by_key(|(q, preference, _)| (*q, *preference))
            .map_or(&self.variants[0], |(_, _, v)| v)
    }

    /// The representation a `304` should name, if the request's conditions
    /// say the client's copy is current. `If-None-Match` matches when it
    /// names any representation of the file (the chosen one preferred);
    /// `If-Modified-Since` counts only without `If-None-Match`.
    fn not_modified<'a>(&'a self, chosen: &'a Variant, headers: &HeaderMap) -> Option<&'a Variant> {
        if let Some(condition) = negotiate::IfNoneMatch::parse(headers) {
            return if condition.matches(&chosen.etag) {
                Some(chosen)
            } else {
                self.variants.iter().find(|v| condition.matches(&v.etag))
            };
        }
        let since = negotiate::if_modified_since(headers)?;
        let (modified, _) = self.last_modified.as_ref()?;
        (*modified <= since).then_some(chosen)
    }

    fn not_modified_response(&self, variant: &Variant) -> CatalogResponse {
        let mut headers = vec![
            (header::ETAG, variant.etag.clone()),
            (header::CACHE_CONTROL, self.cache_control.clone()),
        ];
        if let Some((_, date)) = &self.last_modified {
            headers.push((header::LAST_MODIFIED, date.clone()));
        }
        if self.variants.len() > 1 {
            headers.push((header::VARY, HeaderValue::from_static("Accept-Encoding")));
        }
        CatalogResponse {
            status: StatusCode::NOT_MODIFIED,
            headers,
            body: Bytes::new(),
        }
    }
}
