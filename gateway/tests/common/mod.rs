//! Test harness: the real `sluice` binary on free ports, in front of a real
//! HTTP origin run by the test.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{any, get};
use axum::Router;

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The test origin: a storefront stand-in with routes that misbehave on
/// purpose. `hits` counts requests per route family.
pub struct Origin {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicUsize>,
    /// Client ports of the connections `/echo` was asked on.
    pub peers: Arc<std::sync::Mutex<std::collections::HashSet<u16>>>,
    /// Bodies `/outbox` accepted (it refuses its first two calls).
    pub outbox: Arc<std::sync::Mutex<Vec<String>>>,
    /// Dropping the Origin stops its server.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Origin {
    /// Starts the origin on its own thread and runtime, so that tests on
    /// any runtime (or none) can use it.
    pub fn start() -> Origin {
        let hits = Arc::new(AtomicUsize::new(0));
        let peers = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
        let outbox = Arc::new(std::sync::Mutex::new(Vec::new()));
        let state = OriginState {
            hits: hits.clone(),
            peers: peers.clone(),
            outbox: outbox.clone(),
            outbox_calls: Arc::new(AtomicUsize::new(0)),
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let app = Router::new()
                    .route("/echo", any(echo))
                    .route("/echo/{*rest}", any(echo))
                    .route("/slow", get(slow))
                    .route("/hop", get(hop))
                    .route("/upload", any(upload))
                    .route("/api/catalog/{name}", get(catalog))
                    .route("/outbox", axum::routing::post(outbox_sink))
                    .with_state(state);
                let service = app.into_make_service_with_connect_info::<SocketAddr>();
                axum::serve(listener, service)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        Origin {
            addr,
            hits,
            peers,
            outbox,
            _stop: stop,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    pub fn peer_ports(&self) -> std::collections::HashSet<u16> {
        self.peers.lock().unwrap().clone()
    }
}

#[derive(Clone)]
struct OriginState {
    hits: Arc<AtomicUsize>,
    peers: Arc<std::sync::Mutex<std::collections::HashSet<u16>>>,
    outbox: Arc<std::sync::Mutex<Vec<String>>>,
    outbox_calls: Arc<AtomicUsize>,
}

/// A storefront's event endpoint that is down for its first two calls.
async fn outbox_sink(State(state): State<OriginState>, body: String) -> StatusCode {
    if state.outbox_calls.fetch_add(1, Ordering::SeqCst) < 2 {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    state.outbox.lock().unwrap().push(body);
    StatusCode::OK
}

impl axum::extract::FromRef<OriginState> for Arc<AtomicUsize> {
    fn from_ref(s: &OriginState) -> Self {
        s.hits.clone()
    }
}

/// Answers with the request's headers as JSON.
async fn echo(
    State(state): State<OriginState>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> impl IntoResponse {
    state.hits.fetch_add(1, Ordering::SeqCst);
    state.peers.lock().unwrap().insert(peer.port());
    // A header sent several times comes back as its values joined by "\n".
    let map: serde_json::Map<String, serde_json::Value> = headers
        .keys()
        .map(|k| {
            let values: Vec<&str> = headers
                .get_all(k)
                .iter()
                .map(|v| v.to_str().unwrap_or(""))
                .collect();
            (k.to_string(), serde_json::Value::String(values.join("\n")))
        })
        .collect();
    axum::Json(serde_json::Value::Object(map))
}

async fn slow(State(hits): State<Arc<AtomicUsize>>) -> &'static str {
    hits.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    "slow answer"
}

async fn hop() -> impl IntoResponse {
    (
        [
            ("connection", "x-hop-header"),
            ("x-hop-header", "1"),
            ("keep-alive", "timeout=5"),
            ("x-end-to-end", "kept"),
        ],
        "hop",
    )
}

async fn upload(body: Bytes) -> String {
    format!("got {} bytes", body.len())
}

/// `/api/catalog/{name}`: the name picks the caching headers.
async fn catalog(
    State(hits): State<Arc<AtomicUsize>>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> impl IntoResponse {
    let n = hits.fetch_add(1, Ordering::SeqCst) + 1;
    let mut headers = HeaderMap::new();
    let cache_control = match name.as_str() {
        "public" => "public, max-age=60",
        "private" => "private, max-age=60",
        "nostore" => "no-store",
        "cookie" => "public, max-age=60",
        "short" => "public, max-age=1",
        _ => "",
    };
    if !cache_control.is_empty() {
        headers.insert("cache-control", cache_control.parse().unwrap());
    }
    if name == "cookie" {
        headers.insert("set-cookie", "session=abc".parse().unwrap());
    }
    headers.insert("etag", format!("\"v{n}\"").parse().unwrap());
    (
        StatusCode::OK,
        headers,
        format!("{name} response number {n}"),
    )
}

/// A running `sluice run`, killed when dropped.
pub struct Gateway {
    pub child: Child,
    /// Environment given to the process, for restarts.
    env: Vec<(String, String)>,
    nofile_limit: Option<(u64, u64)>,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub config_path: PathBuf,
    pub dir: tempfile::TempDir,
}

pub struct GatewayOptions {
    pub origin: Option<String>,
    pub extra_gateway: String,
    pub rest: String,
    pub env: Vec<(String, String)>,
    pub static_files: Vec<(&'static str, Vec<u8>)>,
    /// Serve the repository's own `static/` (the demo store) instead.
    pub repo_static: bool,
    /// A public port chosen beforehand (for peers that call back).
    pub listen_port: Option<u16>,
    /// `RLIMIT_NOFILE` (soft, hard) the process starts with.
    pub nofile_limit: Option<(u64, u64)>,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            origin: None,
            extra_gateway: String::new(),
            rest: "[[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\", \"/orders/*\"]\nrelease_per_second = 10\nmax_active = 10\nqueue_capacity = 100\n".into(),
            env: Vec::new(),
            static_files: vec![
                ("index.html", b"<!doctype html><title>Shop</title><h1>Shop</h1>".to_vec()),
                ("catalog/products.json", br#"{"products":[{"sku":"sneaker-42","name":"Runner"}]}"#.repeat(20)),
                ("catalog/img/a.svg", b"<svg xmlns='http://www.w3.org/2000/svg'/>".to_vec()),
            ],
            repo_static: false,
            listen_port: None,
            nofile_limit: None,
        }
    }
}

impl Gateway {
    pub fn start(opts: GatewayOptions) -> Gateway {
        let dir = tempfile::tempdir().unwrap();
        let static_dir = if opts.repo_static {
            repo_root().join("static")
        } else {
            dir.path().join("static")
        };
        for (name, content) in opts.static_files.iter().filter(|_| !opts.repo_static) {
            let path = static_dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        let listen: SocketAddr =
            format!("127.0.0.1:{}", opts.listen_port.unwrap_or_else(free_port))
                .parse()
                .unwrap();
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let origin = opts
            .origin
            .map(|o| format!("origin = \"{o}\"\n"))
            .unwrap_or_default();
        let config = format!(
            "[gateway]\nlisten = \"{listen}\"\nadmin_listen = \"{admin}\"\ndata_dir = {:?}\nstatic_dir = {:?}\nshutdown_grace_s = 2\n{origin}{}\n\n{}",
            dir.path().join("var"),
            static_dir,
            opts.extra_gateway,
            opts.rest
        );
        let config_path = dir.path().join("sluice.toml");
        std::fs::write(&config_path, config).unwrap();
        let child = spawn(&config_path, dir.path(), &opts.env, opts.nofile_limit);
        let gw = Gateway {
            child,
            env: opts.env,
            nofile_limit: opts.nofile_limit,
            listen,
            admin,
            config_path,
            dir,
        };
        gw.wait_ready();
        gw
    }

    /// SIGKILL, then start again with the same config, ports and data.
    pub fn kill9_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(
            &self.config_path,
            self.dir.path(),
            &self.env,
            self.nofile_limit,
        );
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if TcpStream::connect(self.listen).is_ok() && TcpStream::connect(self.admin).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("gateway did not start; log:\n{}", self.log());
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.listen)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sluice.log")).unwrap_or_default()
    }

    pub fn static_dir(&self) -> PathBuf {
        self.dir.path().join("static")
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig).unwrap();
    }

    /// Rewrites the config file with `f` applied to its text.
    pub fn edit_config(&self, f: impl FnOnce(String) -> String) {
        let text = std::fs::read_to_string(&self.config_path).unwrap();
        std::fs::write(&self.config_path, f(text)).unwrap();
    }

    /// GETs an admin route as JSON.
    pub fn admin_json(&self, path: &str) -> serde_json::Value {
        let body = reqwest::blocking_get(&self.admin_url(path));
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
    }

    /// The value of an unlabelled (or first-labelled-match) metric line.
    pub fn metric(&self, line_prefix: &str) -> Option<f64> {
        let text = reqwest::blocking_get(&self.admin_url("/metrics"));
        text.lines()
            .find(|l| l.starts_with(line_prefix) && l[line_prefix.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }
}

fn spawn(
    config_path: &Path,
    dir: &Path,
    env: &[(String, String)],
    nofile_limit: Option<(u64, u64)>,
) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    if let Some((soft, hard)) = nofile_limit {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit is one system call, safe between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::resource::setrlimit(
                    nix::sys::resource::Resource::RLIMIT_NOFILE,
                    soft,
                    hard,
                )
                .map_err(std::io::Error::from)
            });
        }
    }
    cmd.arg("run").arg("--config").arg(config_path);
    cmd.env("SLUICE_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("sluice.log"))
        .unwrap();
    cmd.stdout(Stdio::null()).stderr(log);
    cmd.spawn().expect("sluice binary starts")
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Minimal blocking GET used by the harness itself (tests use reqwest).
mod reqwest {
    pub fn blocking_get(url: &str) -> String {
        let rest = url.strip_prefix("http://").unwrap();
        let (host, path) = rest
            .split_once('/')
            .map(|(h, p)| (h, format!("/{p}")))
            .unwrap();
        super::raw_request(
            host.parse().unwrap(),
            &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        )
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
    }
}

/// Sends raw bytes and returns everything the server answers until it
/// closes: for requests a client library would normalise.
pub fn raw_request(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Status code of a raw HTTP/1.1 response.
pub fn raw_status(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

pub fn client() -> ::reqwest::Client {
    ::reqwest::Client::builder().no_proxy().build().unwrap()
}

/// Polls `f` until it returns true or `within` passes; returns how long it took.
pub fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < within {
        if f() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

pub fn repo_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Joins `room` at `base_url` and polls as told until admitted: the pass.
pub async fn admitted_pass(base_url: &str, client: &::reqwest::Client, room: &str) -> String {
    let joined: serde_json::Value = client
        .post(format!("{base_url}/queue/{room}/join"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ticket = joined["ticket"]
        .as_str()
        .expect("join gives a ticket")
        .to_string();
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let status: serde_json::Value = client
            .get(format!("{base_url}/queue/{room}/status"))
            .bearer_auth(&ticket)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if status["state"] == "admitted" {
            return status["pass"].as_str().unwrap().to_string();
        }
    }
    panic!("not admitted to {room}");
}
