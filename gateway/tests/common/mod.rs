//! Test harness: the real `sluice` binary on free ports, in front of a real
//! HTTP origin run by the test.
//!
//! Ports: servers run in the test process (the origin, paysim) bind
//! `127.0.0.1:0` and report the port they got. A subprocess cannot hand
//! its port back (pingora binds its listeners inside `Server::run` and
//! tells nobody the address), so [`Gateway::start`] picks free ports,
//! starts `sluice`, and accepts the start only once `/proc` shows that
//! very process owns both listening sockets; if another socket took a
//! port in between, it starts again on new ones.
#![allow(dead_code)]

pub mod pg;
pub mod redis;

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

/// A port nothing listens on right now. Someone else may take it before
/// the caller binds it: give it to a subprocess only with a check that the
/// subprocess got it ([`listens_on`]) and a retry.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A port that refuses connections for as long as this lives: bound, never
/// listening, so nothing else can take it meanwhile.
pub struct DeadPort {
    _socket: tokio::net::TcpSocket,
    pub port: u16,
}

pub fn dead_port() -> DeadPort {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    DeadPort {
        _socket: socket,
        port,
    }
}

/// Whether process `pid` holds a socket listening on TCP `port`, read
/// from `/proc`: proof that a subprocess bound the port it was given, not
/// some other socket.
pub use sluice_loadtest::load::ports::{listens_on, PORT_TAKEN_LOG};

/// How a subprocess's start on given ports ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Started {
    /// It owns a listener on every port.
    Listening,
    /// Another socket holds one of the ports.
    PortTaken,
    /// It exited.
    Exited,
    /// Neither within the deadline.
    TimedOut,
}

/// Waits until `child` listens on every port of `ports`, exits, or
/// `port_taken()` says a port went to someone else.
pub fn wait_listening(
    child: &mut Child,
    ports: &[u16],
    within: Duration,
    mut port_taken: impl FnMut() -> bool,
) -> Started {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if port_taken() {
            return Started::PortTaken;
        }
        if child.try_wait().ok().flatten().is_some() {
            return if port_taken() {
                Started::PortTaken
            } else {
                Started::Exited
            };
        }
        if ports.iter().all(|p| listens_on(child.id(), *p)) {
            return Started::Listening;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Started::TimedOut
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
    /// A public port chosen beforehand, kept across start attempts (a start
    /// fails if another socket holds it). Peers that call back need not
    /// pin it: bind the peer first, start the gateway, then give the peer
    /// `Gateway::url` (as `payments.rs` does with paysim).
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

/// Starts on new ports when a chosen port was taken, at most this often.
const START_TRIES_MAX: usize = 5;
/// How long one start may take.
const START_WAIT_MAX: Duration = Duration::from_secs(20);

impl Gateway {
    /// Writes the config and starts `sluice` on free ports (the public one
    /// pinned by `listen_port` if given); returns once the process owns
    /// both listeners.
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
        let origin = opts
            .origin
            .as_ref()
            .map(|o| format!("origin = \"{o}\"\n"))
            .unwrap_or_default();
        let config_path = dir.path().join("sluice.toml");
        let log_path = dir.path().join("sluice.log");
        for _ in 0..START_TRIES_MAX {
            let listen = loopback(opts.listen_port.unwrap_or_else(free_port));
            let admin = loopback(free_port());
            let config = format!(
                "[gateway]\nlisten = \"{listen}\"\nadmin_listen = \"{admin}\"\ndata_dir = {:?}\nstatic_dir = {:?}\nshutdown_grace_s = 2\n{origin}{}\n\n{}",
                dir.path().join("var"),
                static_dir,
                opts.extra_gateway,
                opts.rest
            );
            std::fs::write(&config_path, config).unwrap();
            let mut child = spawn(&config_path, dir.path(), &opts.env, opts.nofile_limit);
            let ports = [listen.port(), admin.port()];
            match wait_listening(&mut child, &ports, START_WAIT_MAX, || {
                port_taken_in(&log_path, None)
            }) {
                Started::Listening => {
                    return Gateway {
                        child,
                        env: opts.env,
                        nofile_limit: opts.nofile_limit,
                        listen,
                        admin,
                        config_path,
                        dir,
                    }
                }
                // A pinned public port cannot move; a taken admin port can.
                Started::PortTaken
                    if opts.listen_port.is_none() || port_taken_in(&log_path, Some(admin)) =>
                {
                    let _ = child.kill();
                    let _ = child.wait();
                    let _ = std::fs::remove_file(&log_path);
                    let _ = std::fs::remove_dir_all(dir.path().join("var"));
                }
                other => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "gateway did not start ({other:?}) on {listen} and {admin}; log:\n{}",
                        std::fs::read_to_string(&log_path).unwrap_or_default()
                    )
                }
            }
        }
        panic!("gateway ports taken {START_TRIES_MAX} times in a row");
    }

    /// SIGKILL, then start again with the same config, ports and data.
    pub fn kill9_and_restart(&mut self) {
        self.kill9();
        self.restart();
    }

    /// SIGKILL, and wait until the process is gone.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the process again with the same config, ports and data (after
    /// [`Gateway::kill9`] or an exit).
    pub fn restart(&mut self) {
        self.child = spawn(
            &self.config_path,
            self.dir.path(),
            &self.env,
            self.nofile_limit,
        );
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let ports = [self.listen.port(), self.admin.port()];
        let log_path = self.dir.path().join("sluice.log");
        let started = wait_listening(&mut self.child, &ports, START_WAIT_MAX, || {
            port_taken_in(&log_path, None)
        });
        assert_eq!(
            started,
            Started::Listening,
            "gateway did not start on {} and {}; log:\n{}",
            self.listen,
            self.admin,
            self.log()
        );
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

    /// The admin listener's `/metrics` text, as served.
    pub async fn metrics_text(&self) -> String {
        client()
            .get(self.admin_url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The value of an unlabelled (or first-labelled-match) metric line,
    /// matched without the `region` label every sample carries.
    pub fn metric(&self, line_prefix: &str) -> Option<f64> {
        let text = without_region(&reqwest::blocking_get(&self.admin_url("/metrics")));
        text.lines()
            .find(|l| l.starts_with(line_prefix) && l[line_prefix.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }
}

/// Metrics text with the gateway's `region` label taken out of every
/// sample (`x{a="1",region="r"} 2` → `x{a="1"} 2`, `x{region="r"} 2` →
/// `x 2`), so tests match on the labels they are about.
pub fn without_region(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let line = match line.find("region=\"") {
            Some(start) if !line.starts_with('#') => {
                let end = line[start + 8..]
                    .find('"')
                    .map_or(line.len(), |e| start + 8 + e + 1);
                let (mut before, mut after) = (&line[..start], &line[end..]);
                if before.ends_with(',') {
                    before = &before[..before.len() - 1];
                } else if after.starts_with(',') {
                    after = &after[1..];
                } else if before.ends_with('{') && after.starts_with('}') {
                    before = &before[..before.len() - 1];
                    after = &after[1..];
                }
                format!("{before}{after}")
            }
            _ => line.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Whether the log says a port (`addr`'s, or any) is held by another socket.
fn port_taken_in(log_path: &Path, addr: Option<SocketAddr>) -> bool {
    std::fs::read_to_string(log_path).is_ok_and(|log| {
        log.lines()
            .any(|l| l.contains(PORT_TAKEN_LOG) && addr.is_none_or(|a| l.contains(&a.to_string())))
    })
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
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

/// How often the `eventually` helpers look again.
const POLL_EVERY: Duration = Duration::from_millis(20);

/// Polls `f` until it returns true or `within` passes; returns how long it
/// took. Sleeps the thread between looks: for tests without a runtime (in
/// an async test use [`eventually_async`], which lets other tasks run).
pub fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if f() {
            return Some(start.elapsed());
        }
        if start.elapsed() >= within {
            return None;
        }
        std::thread::sleep(POLL_EVERY);
    }
}

/// [`eventually`] for async tests: `f` is a quick check (a local call), and
/// the wait between looks yields to the runtime.
pub async fn eventually_async(within: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    eventually_await(within, || std::future::ready(f())).await
}

/// [`eventually`] for a check that itself awaits (an HTTP call).
pub async fn eventually_await<F: std::future::Future<Output = bool>>(
    within: Duration,
    mut f: impl FnMut() -> F,
) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if f().await {
            return Some(start.elapsed());
        }
        if start.elapsed() >= within {
            return None;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

pub fn repo_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// How long [`admitted_pass`] waits in line, at most.
const ADMISSION_WAIT_MAX: Duration = Duration::from_secs(30);

/// Joins `room` at `base_url` and polls when told to (`poll_after_s`, as a
/// browser does; sooner is refused) until admitted: the pass.
pub async fn admitted_pass(base_url: &str, client: &::reqwest::Client, room: &str) -> String {
    let deadline = Instant::now() + ADMISSION_WAIT_MAX;
    let joined = loop {
        let joined: serde_json::Value = client
            .post(format!("{base_url}/queue/{room}/join"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        // A fleet room warming up (just made, or Redis back empty) takes
        // no joins for a moment and says so at once: ask again.
        if joined["error"] != "store_unavailable" || Instant::now() >= deadline {
            break joined;
        }
        tokio::time::sleep(POLL_EVERY).await;
    };
    let ticket = joined["ticket"]
        .as_str()
        .unwrap_or_else(|| panic!("join gives a ticket: {joined}"))
        .to_string();
    let mut poll_after_s = joined["poll_after_s"].as_u64().unwrap_or(1);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(poll_after_s)).await;
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
        poll_after_s = status["poll_after_s"].as_u64().unwrap_or(1);
    }
    panic!("not admitted to {room} within {ADMISSION_WAIT_MAX:?}");
}

/// An origin that records the request-target of every request it gets,
/// byte for byte, and answers `200` with `origin saw <target>`. Plain TCP,
/// so nothing between the wire and the record normalises anything.
pub struct RecordingOrigin {
    pub addr: SocketAddr,
    targets: Arc<std::sync::Mutex<Vec<String>>>,
}

/// Bytes of a request head the recording origin reads, at most.
const RECORDED_HEAD_BYTES_MAX: usize = 64 * 1024;

impl RecordingOrigin {
    pub fn start() -> RecordingOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let targets = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = targets.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let record = record.clone();
                std::thread::spawn(move || Self::serve(stream, &record));
            }
        });
        RecordingOrigin { addr, targets }
    }

    /// One request per connection (`Connection: close`).
    fn serve(mut stream: TcpStream, record: &std::sync::Mutex<Vec<String>>) {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < RECORDED_HEAD_BYTES_MAX {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let target = head
            .split("\r\n")
            .next()
            .and_then(|line| line.split(' ').nth(1))
            .unwrap_or("")
            .to_string();
        record.lock().unwrap().push(target.clone());
        let body = format!("origin saw {target}");
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request-target received so far, in order.
    pub fn targets(&self) -> Vec<String> {
        self.targets.lock().unwrap().clone()
    }
}

/// Polls `ticket`'s status in room `drop` every 500 ms for up to `within`;
/// the pass once admitted, `None` if still waiting then.
pub async fn pass_within(
    client: &::reqwest::Client,
    gw: &Gateway,
    ticket: &str,
    within: Duration,
) -> Option<String> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let body: serde_json::Value = client
            .get(gw.url("/queue/drop/status"))
            .bearer_auth(ticket)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if body["state"] == "admitted" {
            return body["pass"].as_str().map(str::to_string);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    None
}
