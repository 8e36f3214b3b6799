//! Building a [`Catalog`] from a directory: walk, read, hash, compress, and
//! precompute every header, so that a request only picks a ready response.

use std::collections::HashMap;
use std::fs::{self, File, Metadata};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use bytes::Bytes;
use globset::{Glob, GlobMatcher};
use http::{header, HeaderName, HeaderValue};
use sha2::{Digest, Sha256};

use super::negotiate::Coding;
use super::{
    CacheControlRule, Catalog, CatalogError, CatalogLimits, Entry, Variant, DEFAULT_CACHE_CONTROL,
    MAX_DEPTH,
};

/// Smaller compressible files are served as they are: compression would
/// save too little to pay for `Content-Encoding` and the client's work.
pub(super) const MIN_COMPRESS_BYTES: usize = 256;
/// Files up to this size get brotli's best (slow) quality; larger ones a
/// quality that keeps a reload of a big catalog within seconds.
const BROTLI_BEST_UP_TO: usize = 256 * 1024;

pub(super) fn load(
    dir: &Path,
    limits: &CatalogLimits,
    rules: &[CacheControlRule],
) -> Result<Catalog, CatalogError> {
    let rules = Rules::compile(rules)?;
    let root = fs::canonicalize(dir).map_err(io_error(dir))?;
    let mut walker = Walker {
        limits,
        root: root.clone(),
        found: Vec::new(),
        total: 0,
        chain: Vec::new(),
    };
    walker.walk(&root, root.clone(), "")?;

    let mut files = HashMap::with_capacity(walker.found.len());
    let mut total = 0u64;
    for found in walker.found {
        let body = read_bounded(&found.path, limits.max_file_bytes)?;
        // The file may have grown since it was listed.
        total += body.len() as u64;
        if total > limits.max_total_bytes {
            return Err(CatalogError::TotalTooLarge {
                total,
                limit: limits.max_total_bytes,
            });
        }
        let entry = build_entry(&found, body, rules.value_for(&found.key))?;
        files.insert(found.key, entry);
    }
    tracing::info!(
        dir = %dir.display(),
        files = files.len(),
        bytes = total,
        "catalog loaded"
    );
    Ok(Catalog {
        files,
        total_bytes: total,
    })
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> CatalogError + '_ {
    move |source| CatalogError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The compiled `Cache-Control` rules; the first match wins.
struct Rules {
    rules: Vec<(GlobMatcher, HeaderValue)>,
    default: HeaderValue,
}

impl Rules {
    fn compile(rules: &[CacheControlRule]) -> Result<Rules, CatalogError> {
        let bad = |rule: &CacheControlRule, reason: String| CatalogError::BadRule {
            pattern: rule.pattern.clone(),
            reason,
        };
        let rules = rules
            .iter()
            .map(|rule| {
                let glob = Glob::new(&rule.pattern)
                    .map_err(|e| bad(rule, format!("not a valid pattern: {}", e.kind())))?;
                let value = HeaderValue::from_str(&rule.value)
                    .ok()
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| bad(rule, format!("{:?} is not a header value", rule.value)))?;
                Ok((glob.compile_matcher(), value))
            })
            .collect::<Result<_, _>>()?;
        Ok(Rules {
            rules,
            default: HeaderValue::from_static(DEFAULT_CACHE_CONTROL),
        })
    }

    fn value_for(&self, key: &str) -> HeaderValue {
        self.rules
            .iter()
            .find(|(glob, _)| glob.is_match(key))
            .map_or(&self.default, |(_, value)| value)
            .clone()
    }
}

/// A file to load: its URL path, where to read it, and its metadata.
struct Found {
    key: String,
    path: PathBuf,
    meta: Metadata,
}

/// Lists the files to load, enforcing the limits on their listed sizes
/// before anything is read.
struct Walker<'a> {
    limits: &'a CatalogLimits,
    root: PathBuf,
    found: Vec<Found>,
    total: u64,
    /// The canonical paths of the directories being walked, root first.
    chain: Vec<PathBuf>,
}

impl Walker<'_> {
    /// Walks `dir` (whose canonical path is `real`), whose URL path is
    /// `prefix` (empty for the root).
    fn walk(&mut self, dir: &Path, real: PathBuf, prefix: &str) -> Result<(), CatalogError> {
        if self.chain.len() > MAX_DEPTH {
            return Err(CatalogError::TooDeep {
                path: dir.to_path_buf(),
                limit: MAX_DEPTH,
            });
        }
        let mut entries = fs::read_dir(dir)
            .and_then(|entries| entries.collect::<Result<Vec<_>, _>>())
            .map_err(io_error(dir))?;
        // A stable order, so the same directory always fails the same way.
        entries.sort_by_key(|e| e.file_name());
        self.chain.push(real.clone());
        for entry in entries {
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                tracing::warn!(path = %path.display(), "catalog skips a name that is not UTF-8");
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            let key = format!("{prefix}/{name}");
            if let Err(why) = sluice_edge::path::check_decoded(&key) {
                tracing::warn!(path = %path.display(), why = why.message(), "catalog skips a name no request could reach");
                continue;
            }
            let file_type = entry.file_type().map_err(io_error(&path))?;
            let (target, meta) = if file_type.is_symlink() {
                let Ok(target) = fs::canonicalize(&path) else {
                    tracing::warn!(path = %path.display(), "catalog skips a broken symlink");
                    continue;
                };
                let Ok(inside) = target.strip_prefix(&self.root) else {
                    tracing::warn!(path = %path.display(), "catalog skips a symlink that leads out of the directory");
                    continue;
                };
                if inside
                    .iter()
                    .any(|part| part.as_encoded_bytes().starts_with(b"."))
                {
                    tracing::warn!(path = %path.display(), "catalog skips a symlink to a hidden file");
                    continue;
                }
                let meta = fs::metadata(&target).map_err(io_error(&path))?;
                (target, meta)
            } else {
                let meta = entry.metadata().map_err(io_error(&path))?;
                (real.join(&name), meta)
            };
            if meta.is_dir() {
                // Only a symlink can lead back up; following it would loop.
                if self.chain.iter().any(|dir| dir.starts_with(&target)) {
                    tracing::warn!(path = %path.display(), "catalog skips a symlink that loops");
                    continue;
                }
                self.walk(&path, target, &key)?;
            } else if meta.is_file() {
                self.add(Found {
                    key,
                    path: target,
                    meta,
                })?;
            }
        }
        self.chain.pop();
        Ok(())
    }

    fn add(&mut self, found: Found) -> Result<(), CatalogError> {
        let limits = self.limits;
        if self.found.len() >= limits.max_files {
            return Err(CatalogError::TooManyFiles {
                limit: limits.max_files,
            });
        }
        let size = found.meta.len();
        if size > limits.max_file_bytes {
            return Err(CatalogError::FileTooLarge {
                path: found.path,
                size,
                limit: limits.max_file_bytes,
            });
        }
        self.total += size;
        if self.total > limits.max_total_bytes {
            return Err(CatalogError::TotalTooLarge {
                total: self.total,
                limit: limits.max_total_bytes,
            });
        }
        self.found.push(found);
        Ok(())
    }
}

/// Reads at most `limit` bytes; a file that grew past it is an error.
fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, CatalogError> {
    let mut body = Vec::new();
    File::open(path)
        .and_then(|file| file.take(limit.saturating_add(1)).read_to_end(&mut body))
        .map_err(io_error(path))?;
    let size = body.len() as u64;
    if size > limit {
        return Err(CatalogError::FileTooLarge {
            path: path.to_path_buf(),
            size,
            limit,
        });
    }
    Ok(body)
}

/// A file type: its `Content-Type` and whether compressing it pays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Mime {
    pub(super) content_type: &'static str,
    pub(super) compressible: bool,
}

/// The type of a URL path, by extension (case-insensitive).
pub(super) fn mime_for(key: &str) -> Mime {
    let name = key.rsplit('/').next().unwrap_or(key);
    let ext = name
        .rsplit_once('.')
        .map_or("", |(_, ext)| ext)
        .to_ascii_lowercase();
    let (content_type, compressible) = match ext.as_str() {
        "html" | "htm" => ("text/html; charset=utf-8", true),
        "css" => ("text/css; charset=utf-8", true),
        "js" | "mjs" => ("text/javascript; charset=utf-8", true),
        "json" | "map" => ("application/json; charset=utf-8", true),
        "webmanifest" => ("application/manifest+json; charset=utf-8", true),
        "svg" => ("image/svg+xml; charset=utf-8", true),
        "xml" => ("application/xml; charset=utf-8", true),
        "txt" => ("text/plain; charset=utf-8", true),
        "png" => ("image/png", false),
        "jpg" | "jpeg" => ("image/jpeg", false),
        "gif" => ("image/gif", false),
        "webp" => ("image/webp", false),
        "avif" => ("image/avif", false),
        "ico" => ("image/x-icon", false),
        "woff2" => ("font/woff2", false),
        "pdf" => ("application/pdf", false),
        _ => ("application/octet-stream", false),
    };
    Mime {
        content_type,
        compressible,
    }
}

fn build_entry(
    found: &Found,
    body: Vec<u8>,
    cache_control: HeaderValue,
) -> Result<Entry, CatalogError> {
    let mime = mime_for(&found.key);
    let hash = hex::encode(Sha256::digest(&body));
    let hash = &hash[..32];
    let last_modified = found.meta.modified().ok().and_then(|time| {
        let secs = time.duration_since(UNIX_EPOCH).ok()?.as_secs();
        let date = HeaderValue::from_str(&httpdate::fmt_http_date(time)).ok()?;
        Some((secs, date))
    });

    let mut encoded = Vec::new();
    if mime.compressible && body.len() > MIN_COMPRESS_BYTES {
        let br = brotli(&body).map_err(io_error(&found.path))?;
        let gz = gzip(&body).map_err(io_error(&found.path))?;
        for (coding, compressed) in [(Coding::Br, br), (Coding::Gzip, gz)] {
            if compressed.len() < body.len() {
                encoded.push((coding, Bytes::from(compressed)));
            }
        }
    }
    let vary = !encoded.is_empty();
    let identity = std::iter::once((Coding::Identity, Bytes::from(body)));
    let variants = identity
        .chain(encoded)
        .map(|(coding, body)| {
            let etag = match coding {
                Coding::Identity => format!("\"{hash}\""),
                other => format!("\"{hash}-{}\"", other.token()),
            };
            let etag = HeaderValue::from_str(&etag).expect("hex is a valid header value");
            let mut headers: Vec<(HeaderName, HeaderValue)> = vec![
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(mime.content_type),
                ),
                (header::CONTENT_LENGTH, HeaderValue::from(body.len())),
                (header::CACHE_CONTROL, cache_control.clone()),
                (header::ETAG, etag.clone()),
            ];
            if let Some((_, date)) = &last_modified {
                headers.push((header::LAST_MODIFIED, date.clone()));
            }
            if coding != Coding::Identity {
                headers.push((
                    header::CONTENT_ENCODING,
                    HeaderValue::from_static(coding.token()),
                ));
            }
            if vary {
                headers.push((header::VARY, HeaderValue::from_static("Accept-Encoding")));
            }
            headers.push((
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ));
            headers.push((header::ACCEPT_RANGES, HeaderValue::from_static("none")));
            Variant {
                coding,
                etag,
                body,
                headers,
            }
        })
        .collect();
    Ok(Entry {
        cache_control,
        last_modified,
        variants,
    })
}

fn gzip(body: &[u8]) -> io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(body)?;
    encoder.finish()
}

fn brotli(body: &[u8]) -> io::Result<Vec<u8>> {
    let params = brotli::enc::BrotliEncoderParams {
        quality: if body.len() <= BROTLI_BEST_UP_TO {
            11
        } else {
            9
        },
        lgwin: 22,
        size_hint: body.len(),
        ..Default::default()
    };
    let mut out = Vec::new();
    brotli::BrotliCompress(&mut &body[..], &mut out, &params)?;
    Ok(out)
}
