//! File → model: every check the config must pass, with every problem
//! reported at once and located in the file.

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

mod adaptive;
mod challenge;
mod cluster;
mod deny;
mod event;
mod keys;
mod lanes;

pub use challenge::{
    CHALLENGE_TTL_S, CHALLENGE_TTL_S_DEFAULT, DIFFICULTY_BITS, DIFFICULTY_BITS_DEFAULT,
    MAX_BITS_DEFAULT, MIN_BITS_DEFAULT, VERIFY_IN_FLIGHT_DEFAULT, VERIFY_TIMEOUT_MS_DEFAULT,
};
pub use event::{MESSAGE_CHARS_MAX, PASS_IDLE_MIN_S};
pub use keys::ENQUEUE_KEYS_MAX;
pub use lanes::LANES_MAX;

use crate::diagnostic::{Diagnostic, Diagnostics, Locator};
use crate::file::{
    BackendFile, ConfigFile, GatewayFile, OriginCacheFile, ProductFile, RateFile, RoomFile,
};
use crate::model::*;

const MIB: i64 = 1024 * 1024;
const DAY_S: i64 = 24 * 3600;
/// Most entries in `gateway.trusted_proxies`; each request is matched
/// against every one.
const TRUSTED_PROXIES_MAX: usize = 256;
/// Largest `gateway.max_connections` accepted.
const MAX_CONNECTIONS_MAX: i64 = 10_000_000;
/// `max_orders_per_pass`, at most: a pass is one shopper's turn, not a
/// reseller's account.
pub const ORDERS_PER_PASS_MAX: i64 = 1_000;
/// `max_per_order`, at most: the checkout core's bound on one order line.
pub const UNITS_PER_ORDER_MAX: i64 = 100;
/// `partitions`, at most: the checkout store's bound on rows per SKU.
pub const PARTITIONS_MAX: i64 = 1_024;

/// Reads and validates a config file.
pub fn load_file(path: &Path) -> Result<Config, Diagnostics> {
    let source = std::fs::read_to_string(path).map_err(|e| {
        Diagnostics(vec![Diagnostic {
            file: path.to_path_buf(),
            line: 0,
            col: 0,
            message: format!("cannot read config file: {e}"),
        }])
    })?;
    parse_str(&source, path)
}

/// Validates config text; `path` names it in diagnostics.
pub fn parse_str(source: &str, path: &Path) -> Result<Config, Diagnostics> {
    parse_with_env(source, path, &|name| std::env::var(name).ok())
}

/// Like [`parse_str`], with the environment injected (tests).
pub fn parse_with_env(
    source: &str,
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, Diagnostics> {
    let loc = Locator::new(path, source);
    let file: ConfigFile = match toml::from_str(source) {
        Ok(file) => file,
        Err(e) => {
            let message = e.message().trim().to_string();
            return Err(Diagnostics(vec![loc.at(e.span(), message)]));
        }
    };
    let mut v = Validator {
        loc,
        problems: Vec::new(),
        env,
    };
    let config = v.config(file, path);
    if v.problems.is_empty() {
        Ok(config)
    } else {
        v.problems.sort_by_key(|d| (d.line, d.col));
        Err(Diagnostics(v.problems))
    }
}

struct Validator<'a> {
    loc: Locator<'a>,
    problems: Vec<Diagnostic>,
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl Validator<'_> {
    fn problem<T>(&mut self, value: &Spanned<T>, message: impl Into<String>) {
        let d = self.loc.at(Some(value.span()), message);
        self.problems.push(d);
    }

    fn config(&mut self, file: ConfigFile, path: &Path) -> Config {
        let gateway = self.gateway(file.gateway.into_inner());
        let backends = self.backends(file.backends);
        let keys = self.keys(file.keys);
        let signing_kids: Vec<String> = keys.iter().map(|k| k.kid.clone()).collect();
        let rooms = self.rooms(file.rooms, &backends, &signing_kids);
        let products = self.products(file.products, &rooms);
        let outbox = self.outbox(file.outbox.map(Spanned::into_inner));
        let payments = self.payments(file.payments);
        let cluster = self.cluster(file.cluster);
        Config {
            source: path.to_path_buf(),
            gateway,
            rooms,
            products,
            keys,
            backends,
            outbox,
            payments,
            cluster,
        }
    }

    /// An integer within `range`, or `default` when absent. On a problem it
    /// records it and returns the default so validation can go on.
    fn int(
        &mut self,
        value: Option<Spanned<i64>>,
        key: &str,
        range: RangeInclusive<i64>,
        default: i64,
    ) -> i64 {
        match value {
            None => default,
            Some(v) if range.contains(v.get_ref()) => *v.get_ref(),
            Some(v) => {
                self.problem(
                    &v,
                    format!(
                        "`{key}` must be between {} and {}, got {}",
                        range.start(),
                        range.end(),
                        v.get_ref()
                    ),
                );
                default
            }
        }
    }

    fn addr(&mut self, value: Option<Spanned<String>>, key: &str, default: &str) -> SocketAddr {
        let fallback: SocketAddr = default.parse().expect("default address parses");
        match value {
            None => fallback,
            Some(v) => match v.get_ref().parse() {
                Ok(addr) => addr,
                Err(_) => {
                    self.problem(
                        &v,
                        format!(
                            "`{key}` must be IP:PORT (like \"{default}\"), got {:?}",
                            v.get_ref()
                        ),
                    );
                    fallback
                }
            },
        }
    }

    fn gateway(&mut self, g: GatewayFile) -> Gateway {
        let listen = self.addr(g.listen, "listen", "127.0.0.1:8080");
        let admin_listen_span = g.admin_listen.as_ref().map(|s| s.span());
        let admin_listen = self.addr(g.admin_listen, "admin_listen", "127.0.0.1:9090");
        if listen == admin_listen {
            self.problems.push(self.loc.at(
                admin_listen_span.clone(),
                "`admin_listen` must differ from `listen`",
            ));
        }
        let data_dir = self.dir(g.data_dir, "var");
        let static_dir = self.dir(g.static_dir, "static");
        let origin = g.origin.and_then(|o| self.origin(o));
        let admissions = match g.admissions {
            None => Admissions::Open,
            Some(v) => match v.get_ref().as_str() {
                "open" => Admissions::Open,
                "paused" => Admissions::Paused,
                other => {
                    self.problem(
                        &v,
                        format!("`admissions` must be \"open\" or \"paused\", got {other:?}"),
                    );
                    Admissions::Open
                }
            },
        };
        let token_configured = g.admin_token_env.is_some();
        let admin_token = g.admin_token_env.and_then(|name| self.admin_token(name));
        if !token_configured && !admin_listen.ip().is_loopback() {
            self.problems.push(self.loc.at(
                admin_listen_span,
                format!(
                    "`admin_listen` {admin_listen} is not a loopback address: set `admin_token_env` so the admin routes need a token"
                ),
            ));
        }
        let threads = self.int(g.threads, "threads", 1..=256, 2);
        let max_body_bytes = self.int(g.max_body_bytes, "max_body_bytes", 1..=1024 * MIB, MIB);
        let checkouts_in_flight_max = self.int(
            g.checkouts_in_flight_max,
            "checkouts_in_flight_max",
            1..=4096,
            256,
        );
        let connect_ms = self.int(
            g.origin_connect_timeout_ms,
            "origin_connect_timeout_ms",
            1..=60_000,
            2_000,
        );
        let read_ms = self.int(
            g.origin_read_timeout_ms,
            "origin_read_timeout_ms",
            1..=600_000,
            10_000,
        );
        let write_ms = self.int(
            g.origin_write_timeout_ms,
            "origin_write_timeout_ms",
            1..=600_000,
            10_000,
        );
        let idle_s = self.int(
            g.origin_idle_timeout_s,
            "origin_idle_timeout_s",
            1..=3_600,
            60,
        );
        let grace_s = self.int(g.shutdown_grace_s, "shutdown_grace_s", 0..=3_600, 10);
        let tls = self.tls(g.tls_cert, g.tls_key);
        let static_limits = StaticLimits {
            max_file_bytes: nz64(self.int(
                g.static_max_file_bytes,
                "static_max_file_bytes",
                1..=256 * MIB,
                8 * MIB,
            )),
            max_total_bytes: nz64(self.int(
                g.static_max_total_bytes,
                "static_max_total_bytes",
                1..=4096 * MIB,
                64 * MIB,
            )),
            max_files: nzusize(self.int(
                g.static_max_files,
                "static_max_files",
                1..=1_000_000,
                10_000,
            )),
        };
        let cache_control = g
            .cache_control
            .into_iter()
            .filter_map(|rule| {
                let rule = rule.into_inner();
                let pattern = self.path_glob(rule.pattern, "pattern")?;
                let value = self.header_value(rule.value, "value")?;
                Some(CacheControlRule { pattern, value })
            })
            .collect();
        let origin_cache = self.origin_cache(g.origin_cache.map(Spanned::into_inner));
        let test_store_commit_delay = self.test_knob_ms(g.test_store_commit_delay_ms);
        let region = self
            .label_value(g.region, "region", 63, |c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_'
            })
            .unwrap_or_else(|| "local".into());
        let node_id = self.label_value(g.node_id, "node_id", 128, |c| {
            c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':')
        });
        let trusted_proxies = self.trusted_proxies(g.trusted_proxies);
        let proxy_protocol = g.proxy_protocol.is_some_and(Spanned::into_inner);
        let max_connections = g.max_connections.map(|v| {
            nz32(self.int(
                Some(v),
                "max_connections",
                1..=MAX_CONNECTIONS_MAX,
                MAX_CONNECTIONS_MAX,
            ))
        });
        let max_connections_per_client = g.max_connections_per_client.map(|v| {
            nz32(self.int(
                Some(v),
                "max_connections_per_client",
                1..=MAX_CONNECTIONS_MAX,
                MAX_CONNECTIONS_MAX,
            ))
        });
        let header_timeout_s = self.int(g.header_timeout_s, "header_timeout_s", 1..=300, 10);
        let deny_cidrs = self.deny_cidrs(g.deny_cidrs_file);
        Gateway {
            listen,
            admin_listen,
            data_dir,
            static_dir,
            origin,
            admissions,
            admin_token,
            threads: nzusize(threads),
            max_body_bytes: nz64(max_body_bytes),
            checkouts_in_flight_max: nzusize(checkouts_in_flight_max),
            origin_connect_timeout: Duration::from_millis(connect_ms as u64),
            origin_read_timeout: Duration::from_millis(read_ms as u64),
            origin_write_timeout: Duration::from_millis(write_ms as u64),
            origin_idle_timeout: Duration::from_secs(idle_s as u64),
            shutdown_grace: Duration::from_secs(grace_s as u64),
            tls,
            static_limits,
            cache_control,
            origin_cache,
            test_store_commit_delay,
            region,
            node_id,
            trusted_proxies,
            proxy_protocol,
            max_connections,
            max_connections_per_client,
            header_timeout: Duration::from_secs(header_timeout_s as u64),
            deny_cidrs,
        }
    }

    /// A short value that becomes a metric label or an id: 1 to `len_max`
    /// characters, each passing `allowed`.
    fn label_value(
        &mut self,
        value: Option<Spanned<String>>,
        key: &str,
        len_max: usize,
        allowed: fn(char) -> bool,
    ) -> Option<String> {
        let v = value?;
        let text = v.get_ref();
        if text.is_empty() || text.len() > len_max || !text.chars().all(allowed) {
            self.problem(
                &v,
                format!("`{key}` must be 1 to {len_max} characters of a-z, 0-9, `-` or `_` (node_id also takes A-Z, `.` and `:`), got {text:?}"),
            );
            return None;
        }
        Some(v.into_inner())
    }

    /// `trusted_proxies`: CIDRs (`10.0.0.0/8`, `2001:db8::/32`) or single
    /// addresses, without host bits past the prefix.
    fn trusted_proxies(&mut self, values: Vec<Spanned<String>>) -> Vec<ipnet::IpNet> {
        if values.len() > TRUSTED_PROXIES_MAX {
            self.problem(
                &values[TRUSTED_PROXIES_MAX],
                format!("`trusted_proxies` holds at most {TRUSTED_PROXIES_MAX} entries"),
            );
        }
        let mut nets = Vec::with_capacity(values.len().min(TRUSTED_PROXIES_MAX));
        for value in values.into_iter().take(TRUSTED_PROXIES_MAX) {
            let text = value.get_ref().trim();
            let parsed = text
                .parse::<ipnet::IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from));
            match parsed {
                Ok(net) if net.trunc() != net => self.problem(
                    &value,
                    format!(
                        "`trusted_proxies` entry {text:?} has bits set past its prefix; did you mean \"{}\"?",
                        net.trunc()
                    ),
                ),
                Ok(net) => nets.push(net),
                Err(_) => self.problem(
                    &value,
                    format!(
                        "`trusted_proxies` entries must be CIDRs like \"10.0.0.0/8\" or addresses, got {text:?}"
                    ),
                ),
            }
        }
        nets
    }

    fn dir(&mut self, value: Option<Spanned<String>>, default: &str) -> PathBuf {
        match value {
            None => PathBuf::from(default),
            Some(v) if v.get_ref().trim().is_empty() => {
                self.problem(&v, "a directory must not be empty");
                PathBuf::from(default)
            }
            Some(v) => PathBuf::from(v.into_inner()),
        }
    }

    fn origin(&mut self, value: Spanned<String>) -> Option<Origin> {
        let text = value.get_ref().trim();
        let (tls, rest) = if let Some(rest) = text.strip_prefix("http://") {
            (false, rest)
        } else if let Some(rest) = text.strip_prefix("https://") {
            (true, rest)
        } else {
            self.problem(
                &value,
                format!("`origin` must start with http:// or https://, got {text:?}"),
            );
            return None;
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
            self.problem(
                &value,
                "`origin` must be scheme://host[:port] with no path, query or credentials",
            );
            return None;
        }
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            match v6.split_once(']') {
                Some((host, "")) => (host.to_string(), Some(default_port)),
                Some((host, port)) => (
                    host.to_string(),
                    port.strip_prefix(':').and_then(|p| p.parse().ok()),
                ),
                None => (String::new(), None),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host.to_string(), port.parse().ok()),
                None => (authority.to_string(), Some(default_port)),
            }
        };
        match port {
            Some(port) if port != 0 && !host.is_empty() => Some(Origin { tls, host, port }),
            _ => {
                self.problem(
                    &value,
                    format!("`origin` has no valid host and port: {text:?}"),
                );
                None
            }
        }
    }

    fn admin_token(&mut self, name: Spanned<String>) -> Option<Secret> {
        self.secret_env(name, "admin_token_env", "the admin token")
    }

    /// A secret of at least 16 characters from the environment variable
    /// `name` names (`key` is the config key, `what` says what it holds).
    fn secret_env(&mut self, name: Spanned<String>, key: &str, what: &str) -> Option<Secret> {
        let var = name.get_ref();
        let valid_name =
            !var.is_empty() && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_name {
            self.problem(
                &name,
                format!("`{key}` must name an environment variable, got {var:?}"),
            );
            return None;
        }
        match (self.env)(var) {
            Some(token) if token.len() >= 16 => Some(Secret::new(token)),
            Some(_) => {
                self.problem(
                    &name,
                    format!("environment variable {var} holds a token shorter than 16 characters"),
                );
                None
            }
            None => {
                self.problem(
                    &name,
                    format!("environment variable {var} ({what}) is not set"),
                );
                None
            }
        }
    }

    fn tls(&mut self, cert: Option<Spanned<String>>, key: Option<Spanned<String>>) -> Option<Tls> {
        match (cert, key) {
            (None, None) => None,
            (Some(c), None) => {
                self.problem(&c, "`tls_cert` needs `tls_key` too");
                None
            }
            (None, Some(k)) => {
                self.problem(&k, "`tls_key` needs `tls_cert` too");
                None
            }
            (Some(c), Some(k)) => {
                let mut ok = true;
                for (v, key) in [(&c, "tls_cert"), (&k, "tls_key")] {
                    if let Err(e) = std::fs::metadata(v.get_ref()) {
                        self.problem(v, format!("`{key}` {:?}: {e}", v.get_ref()));
                        ok = false;
                    }
                }
                ok.then(|| Tls {
                    cert: PathBuf::from(c.into_inner()),
                    key: PathBuf::from(k.into_inner()),
                })
            }
        }
    }

    /// A glob over URL paths, like `/catalog/**` or `*.css`.
    fn path_glob(&mut self, value: Spanned<String>, key: &str) -> Option<String> {
        let pattern = value.get_ref();
        if !(pattern.starts_with('/') || pattern.starts_with('*')) {
            self.problem(
                &value,
                format!("`{key}` must be a URL path pattern starting with / or *, got {pattern:?}"),
            );
            return None;
        }
        if let Err(e) = globset::Glob::new(pattern) {
            self.problem(
                &value,
                format!("`{key}` is not a valid pattern: {}", e.kind()),
            );
            return None;
        }
        Some(value.into_inner())
    }

    fn header_value(&mut self, value: Spanned<String>, key: &str) -> Option<String> {
        let text = value.get_ref();
        if text.is_empty() || !text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            self.problem(&value, format!("`{key}` must be non-empty printable ASCII"));
            return None;
        }
        Some(value.into_inner())
    }

    fn origin_cache(&mut self, file: Option<OriginCacheFile>) -> OriginCache {
        let file = file.unwrap_or(OriginCacheFile {
            paths: Vec::new(),
            max_bytes: None,
            max_object_bytes: None,
            max_ttl_s: None,
        });
        let paths = file
            .paths
            .into_iter()
            .filter_map(|p| self.path_glob(p, "origin_cache.paths"))
            .collect();
        let max_bytes = self.int(
            file.max_bytes,
            "origin_cache.max_bytes",
            1..=16 * 1024 * MIB,
            64 * MIB,
        );
        let max_object_bytes = self.int(
            file.max_object_bytes,
            "origin_cache.max_object_bytes",
            1..=256 * MIB,
            MIB,
        );
        let max_ttl_s = self.int(file.max_ttl_s, "origin_cache.max_ttl_s", 1..=DAY_S, 300);
        OriginCache {
            paths,
            max_bytes: nzusize(max_bytes),
            max_object_bytes: nzusize(max_object_bytes.min(max_bytes)),
            max_ttl: Duration::from_secs(max_ttl_s as u64),
        }
    }

    fn backends(&mut self, backends: Vec<Spanned<BackendFile>>) -> Vec<Backend> {
        let mut out: Vec<Backend> = Vec::with_capacity(backends.len());
        for backend in backends {
            let b = backend.into_inner();
            let name = b.name.get_ref().clone();
            if !is_identifier(&name) {
                self.problem(
                    &b.name,
                    format!("backend name must be 1-64 of a-z, 0-9, '-', '_', got {name:?}"),
                );
            } else if out.iter().any(|o| o.name == name) {
                self.problem(&b.name, format!("backend {name:?} is defined twice"));
            }
            let max_rps = *b.max_rps.get_ref();
            if !(max_rps > 0.0 && max_rps <= 1e9) {
                self.problem(
                    &b.max_rps,
                    format!("`max_rps` must be above 0 and at most 1e9, got {max_rps}"),
                );
            }
            let calls = *b.calls_per_checkout.get_ref();
            if !(calls > 0.0 && calls <= 1e6) {
                self.problem(
                    &b.calls_per_checkout,
                    format!("`calls_per_checkout` must be above 0 and at most 1e6, got {calls}"),
                );
            }
            out.push(Backend {
                name,
                max_rps,
                calls_per_checkout: calls,
            });
        }
        out
    }

    /// The release rate of a room and where it comes from.
    fn release_rate(
        &mut self,
        rate: Spanned<RateFile>,
        headroom: Option<Spanned<f64>>,
        adaptive: Option<Spanned<crate::file::AdaptiveFile>>,
        backends: &[Backend],
    ) -> (i64, ReleaseSource) {
        let is_adaptive = matches!(rate.get_ref(), RateFile::Word(w) if w == "adaptive");
        if let (Some(table), false) = (&adaptive, is_adaptive) {
            self.problem(
                table,
                "[rooms.adaptive] only applies to release_per_second = \"adaptive\"",
            );
        }
        let headroom_value = match &headroom {
            None => 0.8,
            Some(h) if *h.get_ref() > 0.0 && *h.get_ref() <= 1.0 => *h.get_ref(),
            Some(h) => {
                self.problem(
                    h,
                    format!(
                        "`headroom` must be above 0 and at most 1, got {}",
                        h.get_ref()
                    ),
                );
                0.8
            }
        };
        let span = rate.span();
        match rate.into_inner() {
            RateFile::Fixed(n) => {
                let n = self.int(
                    Some(Spanned::new(span, n)),
                    "release_per_second",
                    1..=1_000_000,
                    1,
                );
                if let Some(h) = &headroom {
                    self.problem(
                        h,
                        "`headroom` only applies to release_per_second = \"auto\"",
                    );
                }
                (n, ReleaseSource::Fixed)
            }
            RateFile::Word(w) if w == "auto" => {
                let tightest = backends
                    .iter()
                    .map(|b| (b, b.max_rps * headroom_value / b.calls_per_checkout))
                    .min_by(|a, b| a.1.total_cmp(&b.1));
                match tightest {
                    Some((b, exact)) if exact >= 1.0 => (
                        exact.floor().min(1_000_000.0) as i64,
                        ReleaseSource::Auto {
                            backend: b.name.clone(),
                            exact_per_second: exact,
                        },
                    ),
                    Some((b, exact)) => {
                        self.problems.push(self.loc.at(
                            Some(span),
                            format!("backend {:?} allows {exact:.2} checkouts per second, below 1: raise its max_rps or lower calls_per_checkout", b.name),
                        ));
                        (1, ReleaseSource::Fixed)
                    }
                    None => {
                        self.problems.push(self.loc.at(
                            Some(span),
                            "release_per_second = \"auto\" needs at least one [[backends]] entry",
                        ));
                        (1, ReleaseSource::Fixed)
                    }
                }
            }
            RateFile::Word(w) if w == "adaptive" => {
                if let Some(h) = &headroom {
                    self.problem(
                        h,
                        "`headroom` only applies to release_per_second = \"auto\"",
                    );
                }
                self.adaptive(adaptive, span)
            }
            RateFile::Word(w) => {
                self.problems.push(self.loc.at(
                    Some(span),
                    format!("`release_per_second` must be a number, \"auto\" or \"adaptive\", got {w:?}"),
                ));
                (1, ReleaseSource::Fixed)
            }
        }
    }

    fn rooms(
        &mut self,
        rooms: Vec<Spanned<RoomFile>>,
        backends: &[Backend],
        signing_kids: &[String],
    ) -> Vec<Room> {
        let mut out: Vec<Room> = Vec::with_capacity(rooms.len());
        for room in rooms {
            let r = room.into_inner();
            let name = r.name.get_ref().clone();
            if !is_identifier(&name) {
                self.problem(&r.name, format!("room name must be 1-64 of a-z, 0-9, '-', '_' starting with a letter or digit, got {name:?}"));
            } else if out.iter().any(|o| o.name == name) {
                self.problem(&r.name, format!("room {name:?} is defined twice"));
            }
            let mut protect = Vec::with_capacity(r.protect.len());
            for p in r.protect {
                // With case folded on either side, `/Cart/*` and `/cart/*`
                // are the same paths.
                let taken_by = out
                    .iter()
                    .find(|o| {
                        let fold = o.protect_case_insensitive || r.protect_case_insensitive;
                        o.protect.iter().any(|q| {
                            q == p.get_ref() || (fold && q.eq_ignore_ascii_case(p.get_ref()))
                        })
                    })
                    .map(|o| o.name.clone());
                if let Some(other) = taken_by {
                    self.problem(
                        &p,
                        format!(
                            "path {:?} is already protected by room {other:?}",
                            p.get_ref()
                        ),
                    );
                } else if let Some(p) = self.path_glob(p, "protect") {
                    protect.push(p);
                }
            }
            let (release, release_source) =
                self.release_rate(r.release_per_second, r.headroom, r.adaptive, backends);
            let burst = self.int(r.burst, "burst", 1..=1_000_000, release);
            let max_active = self.int(Some(r.max_active), "max_active", 1..=10_000_000, 1);
            let capacity = self.int(Some(r.queue_capacity), "queue_capacity", 1..=100_000_000, 1);
            let pass_ttl_s = self.int(r.pass_ttl_s, "pass_ttl_s", 1..=DAY_S, 600);
            let ticket_ttl_s = self.int(r.ticket_ttl_s, "ticket_ttl_s", 1..=7 * DAY_S, 3600);
            let poll_min_s = self.int(r.poll_min_s, "poll_min_s", 1..=60, 2);
            let poll_max_span = r.poll_max_s.as_ref().map(|s| s.span());
            let poll_max_s = self.int(r.poll_max_s, "poll_max_s", 1..=255, 60);
            if poll_max_s < poll_min_s {
                self.problems.push(self.loc.at(
                    poll_max_span.clone(),
                    "`poll_max_s` must be at least `poll_min_s`",
                ));
            }
            let idle_span = r
                .idle_timeout_s
                .as_ref()
                .map(|s| s.span())
                .or(poll_max_span);
            let idle_timeout_s = self.int(
                r.idle_timeout_s,
                "idle_timeout_s",
                1..=DAY_S,
                (3 * poll_max_s).max(180),
            );
            if idle_timeout_s < 2 * poll_max_s {
                self.problems.push(self.loc.at(
                    idle_span.clone(),
                    format!("`idle_timeout_s` ({idle_timeout_s}) must be at least twice `poll_max_s` ({poll_max_s}), or people still polling count as gone"),
                ));
            }
            let heartbeat_span = r.heartbeat_s.as_ref().map(|s| s.span());
            // 30 s, or less where `idle_timeout_s` is short: one missed
            // heartbeat must not count as gone.
            let heartbeat_default = 30.min((idle_timeout_s - 1) / 2).max(1);
            let heartbeat_s = self.int(r.heartbeat_s, "heartbeat_s", 1..=3600, heartbeat_default);
            if idle_timeout_s <= 2 * heartbeat_s {
                self.problems.push(self.loc.at(
                    heartbeat_span.or(idle_span.clone()),
                    format!("`idle_timeout_s` ({idle_timeout_s}) must be more than twice `heartbeat_s` ({heartbeat_s}), or a page that missed one heartbeat counts as gone"),
                ));
            }
            let joins = self.int(
                r.joins_per_minute_per_client,
                "joins_per_minute_per_client",
                1..=100_000,
                30,
            );
            let reservation_ttl_s =
                self.int(r.reservation_ttl_s, "reservation_ttl_s", 1..=DAY_S, 600);
            let orders_per_pass = self.int(
                r.max_orders_per_pass,
                "max_orders_per_pass",
                1..=ORDERS_PER_PASS_MAX,
                1,
            );
            let times = self.event_times(r.prequeue_at, r.opens_at, r.closes_at);
            let pass_idle = self.pass_idle(r.pass_idle_s, pass_ttl_s);
            let message = self.room_message(r.message);
            let mode = self.room_mode(r.mode, r.standby_above_per_second);
            let challenge = self.challenge(r.challenge);
            let enqueue = self.enqueue(r.enqueue, signing_kids);
            let lanes = self.lanes(r.lanes, !enqueue.keys.is_empty());
            out.push(Room {
                name,
                protect,
                protect_case_insensitive: r.protect_case_insensitive,
                release_per_second: nz32(release),
                release_source,
                burst: nz32(burst),
                max_active: nz32(max_active),
                queue_capacity: nz32(capacity),
                pass_ttl: Duration::from_secs(pass_ttl_s as u64),
                ticket_ttl: Duration::from_secs(ticket_ttl_s as u64),
                idle_timeout: Duration::from_secs(idle_timeout_s as u64),
                heartbeat: Duration::from_secs(heartbeat_s as u64),
                poll_min: Duration::from_secs(poll_min_s as u64),
                poll_max: Duration::from_secs(poll_max_s as u64),
                joins_per_minute_per_client: nz32(joins),
                opens_at_unix: times.opens_at_unix,
                reservation_ttl: Duration::from_secs(reservation_ttl_s as u64),
                max_orders_per_pass: nz32(orders_per_pass),
                pass_idle,
                prequeue_at_unix: times.prequeue_at_unix,
                closes_at_unix: times.closes_at_unix,
                message,
                mode,
                show_units_left: r.show_units_left.is_some_and(Spanned::into_inner),
                challenge,
                enqueue,
                lanes,
            });
        }
        out
    }

    fn products(&mut self, products: Vec<Spanned<ProductFile>>, rooms: &[Room]) -> Vec<Product> {
        let mut out: Vec<Product> = Vec::with_capacity(products.len());
        for product in products {
            let p = product.into_inner();
            let sku = p.sku.get_ref().clone();
            if !is_sku(&sku) {
                self.problem(
                    &p.sku,
                    format!("sku must be 1-64 of letters, digits, '.', '-', '_', got {sku:?}"),
                );
            } else if out.iter().any(|o| o.sku == sku) {
                self.problem(&p.sku, format!("product {sku:?} is defined twice"));
            }
            if !rooms.iter().any(|r| &r.name == p.room.get_ref()) {
                self.problem(
                    &p.room,
                    format!(
                        "product {sku:?} names room {:?}, which is not defined",
                        p.room.get_ref()
                    ),
                );
            }
            let stock = self.int(Some(p.stock), "stock", 0..=1_000_000_000, 0);
            let price = self.int(Some(p.price_cents), "price_cents", 0..=1_000_000_000_000, 0);
            let per_order = self.int(
                p.max_per_order,
                "max_per_order",
                1..=UNITS_PER_ORDER_MAX,
                10,
            );
            let partitions = self.int(p.partitions, "partitions", 1..=PARTITIONS_MAX, 1);
            out.push(Product {
                sku,
                stock: stock as u32,
                price_cents: price as u64,
                room: p.room.into_inner(),
                max_per_order: nz32(per_order),
                partitions: nz32(partitions),
            });
        }
        out
    }
}

impl Validator<'_> {
    fn outbox(&mut self, file: Option<crate::file::OutboxFile>) -> Outbox {
        let file = file.unwrap_or(crate::file::OutboxFile {
            url: None,
            timeout_ms: None,
        });
        let url = file.url.and_then(|u| {
            let text = u.get_ref().trim();
            let ok = (text.starts_with("http://") || text.starts_with("https://"))
                && text.len() > "http://".len()
                && !text.contains(char::is_whitespace);
            if ok {
                Some(text.to_string())
            } else {
                self.problem(
                    &u,
                    format!("`outbox.url` must be an http:// or https:// URL, got {text:?}"),
                );
                None
            }
        });
        let timeout_ms = self.int(file.timeout_ms, "outbox.timeout_ms", 1..=60_000, 5_000);
        Outbox {
            url,
            timeout: Duration::from_millis(timeout_ms as u64),
        }
    }
}

impl Validator<'_> {
    fn ratio(&mut self, value: Option<Spanned<f64>>, key: &str) -> f64 {
        match value {
            None => 0.0,
            Some(v) if (0.0..=1.0).contains(v.get_ref()) => *v.get_ref(),
            Some(v) => {
                self.problem(
                    &v,
                    format!("`{key}` must be between 0 and 1, got {}", v.get_ref()),
                );
                0.0
            }
        }
    }

    fn payments(&mut self, file: Option<Spanned<crate::file::PaymentsFile>>) -> Payments {
        let span = file.as_ref().map(|f| f.span());
        let file = file
            .map(Spanned::into_inner)
            .unwrap_or(crate::file::PaymentsFile {
                provider: None,
                simulated_slow_ms: None,
                simulated_timeout_ratio: None,
                simulated_error_ratio: None,
                simulated_latency_ms: None,
                url: None,
                timeout_ms: None,
                webhook_secrets: Vec::new(),
                currency: None,
                api_key_env: None,
                webhooks: Default::default(),
            });
        let provider = match file.provider {
            None => PaymentProviderKind::Simulated,
            Some(p) => {
                match p.get_ref().as_str() {
                    "simulated" => PaymentProviderKind::Simulated,
                    "http" => PaymentProviderKind::Http,
                    other => {
                        self.problem(&p, format!("`payments.provider` must be \"simulated\" or \"http\", got {other:?}"));
                        PaymentProviderKind::Simulated
                    }
                }
            }
        };
        let url = file.url.and_then(|u| {
            let text = u.get_ref().trim().trim_end_matches('/');
            if (text.starts_with("http://") || text.starts_with("https://"))
                && !text.contains(char::is_whitespace)
            {
                Some(text.to_string())
            } else {
                self.problem(
                    &u,
                    format!("`payments.url` must be an http:// or https:// URL, got {text:?}"),
                );
                None
            }
        });
        if provider == PaymentProviderKind::Http && url.is_none() {
            self.problems.push(self.loc.at(
                span.clone(),
                "`payments.provider = \"http\"` needs `payments.url`",
            ));
        }
        let mut webhook_secrets = Vec::new();
        for s in file.webhook_secrets {
            if s.get_ref().len() < 16 {
                self.problem(&s, "a webhook secret must be at least 16 characters");
            } else {
                webhook_secrets.push(Secret::new(s.into_inner()));
            }
        }
        let mut webhooks = Vec::new();
        for (name, section) in file.webhooks {
            if !is_webhook_provider_name(&name) {
                // The section itself has no span; its first secret does.
                let at = section.secrets.first().map(|s| s.span()).or(span.clone());
                self.problems.push(self.loc.at(
                    at,
                    format!("a webhook provider name must be 1 to 32 characters of a-z, 0-9, `-` or `_`, got {name:?}"),
                ));
                continue;
            }
            let mut secrets = Vec::new();
            for s in section.secrets {
                if s.get_ref().len() < 16 {
                    self.problem(&s, "a webhook secret must be at least 16 characters");
                } else {
                    secrets.push(Secret::new(s.into_inner()));
                }
            }
            webhooks.push(WebhookProvider { name, secrets });
        }
        let api_key = file.api_key_env.and_then(|name| {
            self.secret_env(
                name,
                "payments.api_key_env",
                "the payment provider's API key",
            )
        });
        let currency = match file.currency {
            None => "BRL".to_string(),
            Some(c)
                if c.get_ref().len() == 3
                    && c.get_ref().chars().all(|ch| ch.is_ascii_uppercase()) =>
            {
                c.into_inner()
            }
            Some(c) => {
                self.problem(
                    &c,
                    "`payments.currency` must be a three-letter code like \"BRL\"",
                );
                "BRL".to_string()
            }
        };
        Payments {
            provider,
            simulated_slow: Duration::from_millis(self.int(
                file.simulated_slow_ms,
                "payments.simulated_slow_ms",
                0..=120_000,
                3_000,
            ) as u64),
            simulated_timeout_ratio: self.ratio(
                file.simulated_timeout_ratio,
                "payments.simulated_timeout_ratio",
            ),
            simulated_error_ratio: self
                .ratio(file.simulated_error_ratio, "payments.simulated_error_ratio"),
            simulated_latency: Duration::from_millis(self.int(
                file.simulated_latency_ms,
                "payments.simulated_latency_ms",
                0..=60_000,
                0,
            ) as u64),
            url,
            timeout: Duration::from_millis(self.int(
                file.timeout_ms,
                "payments.timeout_ms",
                1..=120_000,
                5_000,
            ) as u64),
            webhook_secrets,
            currency,
            api_key,
            webhooks,
        }
    }
}

/// The environment variable that lets a release build take test knobs.
pub const ALLOW_TEST_KNOBS_ENV: &str = "SLUICE_ALLOW_TEST_KNOBS";

impl Validator<'_> {
    /// A test-only delay: debug builds take it; a release build refuses it
    /// unless `SLUICE_ALLOW_TEST_KNOBS=1`, so it never slows production by
    /// accident.
    fn test_knob_ms(&mut self, value: Option<Spanned<i64>>) -> Duration {
        let Some(v) = value else {
            return Duration::ZERO;
        };
        let allowed =
            cfg!(debug_assertions) || (self.env)(ALLOW_TEST_KNOBS_ENV).as_deref() == Some("1");
        if !allowed {
            self.problem(&v, format!("`test_store_commit_delay_ms` is a test knob: set {ALLOW_TEST_KNOBS_ENV}=1 to use it"));
            return Duration::ZERO;
        }
        Duration::from_millis(self.int(Some(v), "test_store_commit_delay_ms", 0..=10_000, 0) as u64)
    }

    /// A TOML offset date-time (`2026-11-29T12:00:00Z`) as unix seconds.
    fn datetime(&mut self, value: Spanned<toml::value::Datetime>, key: &str) -> Option<u64> {
        let d = value.get_ref();
        let (Some(date), Some(time), Some(offset)) = (d.date, d.time, d.offset) else {
            self.problem(
                &value,
                format!(
                    "`{key}` must be a full date-time with an offset, like 2026-11-29T12:00:00Z"
                ),
            );
            return None;
        };
        let days = days_from_civil(
            i64::from(date.year),
            i64::from(date.month),
            i64::from(date.day),
        );
        let offset_min = match offset {
            toml::value::Offset::Z => 0,
            toml::value::Offset::Custom { minutes } => i64::from(minutes),
        };
        let secs = days * 86_400
            + i64::from(time.hour) * 3600
            + i64::from(time.minute) * 60
            + i64::from(time.second.unwrap_or(0))
            - offset_min * 60;
        if secs < 0 {
            self.problem(&value, format!("`{key}` is before 1970"));
            return None;
        }
        Some(secs as u64)
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn is_identifier(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

fn is_sku(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

// The callers have range-checked these values to be at least 1.
fn nz64(v: i64) -> NonZeroU64 {
    NonZeroU64::new(v.max(1) as u64).expect("at least 1")
}
fn nz32(v: i64) -> NonZeroU32 {
    NonZeroU32::new(v.clamp(1, u32::MAX as i64) as u32).expect("at least 1")
}
fn nzusize(v: i64) -> NonZeroUsize {
    NonZeroUsize::new(v.max(1) as usize).expect("at least 1")
}
