//! The system under test: a `sluice` the harness starts from the scenario
//! (free loopback ports, a temp dir, a generated signing key so tokens
//! survive a restart), or a running deployment given by URL.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine;
use rand::RngCore;

use super::datetime::toml_datetime;
use super::ports::{free_port, listens_on, PORT_TAKEN_LOG};
use super::scenario::Scenario;

/// Starts on new ports when a chosen port was taken, at most this often.
pub const START_TRIES_MAX: usize = 5;
/// How long a started gateway gets to become ready.
pub const READY_WAIT_MAX: Duration = Duration::from_secs(30);
/// Per-request timeout of the harness's own admin calls.
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Joins per minute per client. Each virtual shopper joins with its own
/// `X-Forwarded-For` address (trusted from loopback), so this is a budget
/// per shopper; the harness does not measure the limiter, so it is high.
pub const JOINS_PER_MINUTE_PER_CLIENT: u32 = 100_000;

/// The `kid` of the store's enqueue key the harness writes and signs with.
pub const STORE_KID: &str = "store";

/// What the gateways of one run share: the signing key (a ticket from one
/// gateway is good at another), the `[cluster]` table (empty for a lone
/// gateway) and extra environment.
#[derive(Debug, Clone)]
pub struct Membership {
    /// Base64url HS256 secret of `[[keys]] kid = "load"`.
    pub key: String,
    /// Appended to the config verbatim (`[cluster]` with this gateway's
    /// relay addresses).
    pub cluster: String,
    pub env: Vec<(String, String)>,
}

impl Membership {
    /// A gateway of its own: a fresh key, no cluster.
    pub fn alone() -> Membership {
        Membership {
            key: new_key(),
            cluster: String::new(),
            env: Vec::new(),
        }
    }
}

/// A random 32-byte HS256 secret, base64url.
pub fn new_key() -> String {
    let mut secret = [0u8; 32];
    rand::rng().fill_bytes(&mut secret);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
}

/// How a start ended.
enum Start {
    Ready,
    /// Another socket holds a port: start again on new ones.
    PortTaken,
}

/// Where the harness finds the system under test.
pub struct Target {
    pub public: String,
    pub admin: String,
    pub admin_token: Option<String>,
    /// The config file the gateway watches (for the kill switch).
    pub config_path: Option<PathBuf>,
    /// The gateway's data dir (for `sluice audit`).
    pub data_dir: Option<PathBuf>,
    /// The `sluice` binary (for `sluice audit`).
    pub sluice: Option<PathBuf>,
    /// Present when the harness started the gateway itself.
    pub process: Option<std::sync::Mutex<Managed>>,
    /// paysim's URL, when the gateway pays through it.
    pub paysim_url: Option<String>,
    /// Present when the harness started paysim itself.
    pub paysim: Option<Paysim>,
    http: reqwest::Client,
}

/// A `paysim` the harness started; killed when dropped.
pub struct Paysim {
    child: Child,
    pub url: String,
}

impl Drop for Paysim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How long paysim gets to say where it listens.
pub const PAYSIM_START_MAX: Duration = Duration::from_secs(10);

/// A `sluice run` the harness started; killed when dropped.
pub struct Managed {
    sluice: PathBuf,
    child: Child,
    pub dir: tempfile::TempDir,
    pub config_path: PathBuf,
    pub log_path: PathBuf,
    env: Vec<(String, String)>,
}

impl Target {
    /// A running deployment; only loopback URLs are accepted.
    pub fn remote(
        public: &str,
        admin: &str,
        admin_token: Option<String>,
        config_path: Option<PathBuf>,
        data_dir: Option<PathBuf>,
        sluice: Option<PathBuf>,
        paysim_url: Option<String>,
    ) -> Result<Target> {
        for url in [Some(public), Some(admin), paysim_url.as_deref()]
            .into_iter()
            .flatten()
        {
            require_loopback(url)?;
        }
        Ok(Target {
            public: public.trim_end_matches('/').to_string(),
            admin: admin.trim_end_matches('/').to_string(),
            admin_token,
            config_path,
            data_dir,
            sluice,
            process: None,
            paysim_url: paysim_url.map(|u| u.trim_end_matches('/').to_string()),
            paysim: None,
            http: admin_client()?,
        })
    }

    /// Writes a config for `scenario` and starts `sluice` with it (and
    /// `paysim` first, when the scenario pays through it). When another
    /// socket took a chosen port before `sluice` bound it, starts again on
    /// new ports (see [`ports`](super::ports)).
    pub async fn start(
        sluice: &Path,
        paysim: Option<&Path>,
        scenario: &Scenario,
        member: &Membership,
    ) -> Result<Target> {
        for _ in 0..START_TRIES_MAX {
            if let Some(target) = Self::try_start(sluice, paysim, scenario, member).await? {
                return Ok(target);
            }
        }
        bail!("the gateway's ports were taken {START_TRIES_MAX} times in a row")
    }

    /// One start on new free ports; `None` when a port was taken.
    async fn try_start(
        sluice: &Path,
        paysim: Option<&Path>,
        scenario: &Scenario,
        member: &Membership,
    ) -> Result<Option<Target>> {
        let dir = tempfile::Builder::new()
            .prefix("sluice-load-")
            .tempdir()
            .context("creating a temp dir for the gateway")?;
        let listen = format!("127.0.0.1:{}", free_port()?);
        let admin = format!("127.0.0.1:{}", free_port()?);
        let static_dir = dir.path().join("static");
        std::fs::create_dir_all(&static_dir)?;
        std::fs::write(
            static_dir.join("index.html"),
            "<!doctype html><title>load</title>",
        )?;
        let data_dir = dir.path().join("var");
        let mut config = gateway_config(
            scenario,
            &listen,
            &admin,
            &data_dir,
            &static_dir,
            &member.key,
        );
        config.push_str(&member.cluster);
        let paysim = match (&scenario.paysim, paysim) {
            (Some(setup), Some(bin)) => {
                let mut secret = [0u8; 24];
                rand::rng().fill_bytes(&mut secret);
                let secret = format!("whsec_{}", hex::encode(secret));
                let faults_path = dir.path().join("paysim-faults.toml");
                std::fs::write(&faults_path, toml::to_string(&setup.faults)?)?;
                let p = start_paysim(bin, &listen, &secret, setup.seed, &faults_path, dir.path())
                    .await?;
                config.push_str(&format!(
                    "\n[payments]\nprovider = \"http\"\nurl = \"{}\"\ntimeout_ms = {}\nwebhook_secrets = [\"{secret}\"]\n",
                    p.url, setup.provider_timeout_ms
                ));
                Some(p)
            }
            _ => None,
        };
        let config_path = dir.path().join("sluice.toml");
        std::fs::write(&config_path, config)?;
        let mut env = vec![("SLUICE_LOG".to_string(), "warn".to_string())];
        env.extend(member.env.iter().cloned());
        if scenario.gateway.test_store_commit_delay_ms.is_some() {
            env.push(("SLUICE_ALLOW_TEST_KNOBS".into(), "1".into()));
        }
        let log_path = dir.path().join("sluice.log");
        let child = spawn(sluice, &config_path, &log_path, &env)?;
        let managed = Managed {
            sluice: sluice.to_path_buf(),
            child,
            config_path: config_path.clone(),
            log_path,
            env,
            dir,
        };
        let target = Target {
            public: format!("http://{listen}"),
            admin: format!("http://{admin}"),
            admin_token: None,
            config_path: Some(config_path),
            data_dir: Some(data_dir),
            sluice: Some(sluice.to_path_buf()),
            process: Some(std::sync::Mutex::new(managed)),
            paysim_url: paysim.as_ref().map(|p| p.url.clone()),
            paysim,
            http: admin_client()?,
        };
        match target.wait_started().await? {
            Start::Ready => Ok(Some(target)),
            // Dropping the target kills both processes.
            Start::PortTaken => Ok(None),
        }
    }

    /// Waits until `/readyz` answers 200 (bounded by [`READY_WAIT_MAX`])
    /// and, for a gateway the harness started, that process owns both
    /// listeners.
    pub async fn wait_ready(&self) -> Result<()> {
        match self.wait_started().await? {
            Start::Ready => Ok(()),
            Start::PortTaken => bail!(
                "another socket holds a port of the gateway ({} or {})",
                self.public,
                self.admin
            ),
        }
    }

    async fn wait_started(&self) -> Result<Start> {
        let deadline = Instant::now() + READY_WAIT_MAX;
        loop {
            let ok = self
                .http
                .get(format!("{}/readyz", self.admin))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            let owned = match &self.process {
                Some(p) => {
                    let mut p = lock(p);
                    if p.log().contains(PORT_TAKEN_LOG) {
                        return Ok(Start::PortTaken);
                    }
                    if let Some(log) = p.exited_log() {
                        bail!("sluice exited at start; its log:\n{log}");
                    }
                    let pid = p.child.id();
                    [&self.public, &self.admin]
                        .iter()
                        .filter_map(|url| url.rsplit(':').next()?.parse::<u16>().ok())
                        .all(|port| listens_on(pid, port))
                }
                None => true,
            };
            if ok && owned {
                return Ok(Start::Ready);
            }
            if Instant::now() > deadline {
                bail!(
                    "the gateway at {} was not ready within {READY_WAIT_MAX:?}",
                    self.admin
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `GET /admin/state` as JSON.
    pub async fn admin_state(&self) -> Result<serde_json::Value> {
        let mut req = self.http.get(format!("{}/admin/state", self.admin));
        if let Some(t) = &self.admin_token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.context("GET /admin/state")?;
        if !r.status().is_success() {
            bail!("GET /admin/state answered {}", r.status());
        }
        let body = r.bytes().await?;
        serde_json::from_slice(&body).context("/admin/state is not JSON")
    }

    /// paysim's `GET /ledger` payments, when the gateway pays through it.
    pub async fn paysim_ledger(&self) -> Option<Result<Vec<serde_json::Value>>> {
        let url = self.paysim_url.as_ref()?;
        Some(
            async {
                let r = self
                    .http
                    .get(format!("{url}/ledger"))
                    .send()
                    .await
                    .context("GET paysim /ledger")?;
                let body: serde_json::Value = serde_json::from_slice(&r.bytes().await?)
                    .context("paysim /ledger is not JSON")?;
                Ok(body["payments"].as_array().cloned().unwrap_or_default())
            }
            .await,
        )
    }

    /// Changes the paysim knobs named in `knobs` (`PUT /admin/faults` with
    /// the others as they are).
    pub async fn set_paysim_faults(&self, knobs: &toml::Table) -> Result<()> {
        let url = self
            .paysim_url
            .as_ref()
            .context("paysim knobs need paysim (a [paysim] table or --paysim-url)")?;
        let r = self
            .http
            .get(format!("{url}/admin/faults"))
            .send()
            .await
            .context("GET paysim /admin/faults")?;
        let mut faults: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&r.bytes().await?)
                .context("paysim /admin/faults is not JSON")?;
        for (k, v) in knobs {
            faults.insert(k.clone(), serde_json::to_value(v)?);
        }
        let r = self
            .http
            .put(format!("{url}/admin/faults"))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&faults)?)
            .send()
            .await
            .context("PUT paysim /admin/faults")?;
        if !r.status().is_success() {
            let status = r.status();
            bail!(
                "paysim refused the knobs ({status}): {}",
                r.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }

    /// Sets `gateway.admissions` in the watched config file.
    pub fn set_admissions(&self, open: bool) -> Result<()> {
        let path = self
            .config_path
            .as_ref()
            .context("pausing admissions needs the gateway's config file (--config)")?;
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let (from, to) = if open {
            ("admissions = \"paused\"", "admissions = \"open\"")
        } else {
            ("admissions = \"open\"", "admissions = \"paused\"")
        };
        if !text.contains(from) && !text.contains(to) {
            bail!("{} has no `admissions = ...` line to edit", path.display());
        }
        std::fs::write(path, text.replace(from, to))
            .with_context(|| format!("writing {}", path.display()))
    }

    /// Sets the room's `message` in the config file (the gateway reloads
    /// it live): replaces the `message = ...` line, or adds one after the
    /// room's `closes_at`.
    pub fn set_message(&self, message: &str) -> Result<()> {
        let path = self
            .config_path
            .as_ref()
            .context("changing the message needs the gateway's config file (--config)")?;
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let line = format!("message = \"{message}\"");
        let edited = match text.lines().find(|l| l.starts_with("message = ")) {
            Some(old) => text.replacen(old, &line, 1),
            None => match text.find("\ncloses_at = ") {
                Some(at) => {
                    let end = at + 1 + text[at + 1..].find('\n').unwrap_or(0) + 1;
                    format!("{}{line}\n{}", &text[..end], &text[end..])
                }
                None => bail!(
                    "{} has no room schedule to add a message to",
                    path.display()
                ),
            },
        };
        std::fs::write(path, edited).with_context(|| format!("writing {}", path.display()))
    }

    /// SIGKILL, wait `down`, start again on the same ports and data dir.
    pub async fn kill_restart(&self, down: Duration) -> Result<()> {
        let p = self
            .process
            .as_ref()
            .context("a restart needs a gateway the harness started")?;
        lock(p).kill();
        tokio::time::sleep(down).await;
        {
            let mut p = lock(p);
            p.child = spawn(&p.sluice, &p.config_path, &p.log_path, &p.env)?;
        }
        self.wait_ready().await
    }

    /// The gateway's log, when the harness started it.
    pub fn log(&self) -> Option<String> {
        let p = self.process.as_ref()?;
        std::fs::read_to_string(&lock(p).log_path).ok()
    }

    /// The gateway's process id, when the harness started it.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(|p| lock(p).child.id())
    }

    /// The gateway's config text, when the harness started it.
    pub fn config_text(&self) -> Option<String> {
        std::fs::read_to_string(self.config_path.as_ref()?).ok()
    }
}

impl Managed {
    fn kill(&mut self) {
        // `Child::kill` is SIGKILL on Unix: no drain, no goodbye.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The log, if the process has already exited.
    fn exited_log(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(_)) => Some(std::fs::read_to_string(&self.log_path).unwrap_or_default()),
            _ => None,
        }
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts paysim on a free port, webhooks to the gateway's `listen`; reads
/// `listening on ADDR` from its first line.
async fn start_paysim(
    bin: &Path,
    gateway_listen: &str,
    secret: &str,
    seed: u64,
    faults: &Path,
    dir: &Path,
) -> Result<Paysim> {
    use std::io::BufRead;
    let log = std::fs::File::create(dir.join("paysim.log"))?;
    let mut child = Command::new(bin)
        .args(["--listen", "127.0.0.1:0", "--webhook-url"])
        .arg(format!("http://{gateway_listen}/webhooks/paysim"))
        .arg("--webhook-secret")
        .arg(secret)
        .arg("--seed")
        .arg(seed.to_string())
        .arg("--faults")
        .arg(faults)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let stdout = child.stdout.take().context("paysim stdout")?;
    let line = tokio::time::timeout(
        PAYSIM_START_MAX,
        tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            std::io::BufReader::new(stdout)
                .read_line(&mut line)
                .map(|_| line)
        }),
    )
    .await;
    let addr = match line {
        Ok(Ok(Ok(l))) => l.trim().strip_prefix("listening on ").map(str::to_string),
        _ => None,
    };
    let mut paysim = Paysim {
        child,
        url: String::new(),
    };
    match addr {
        Some(a) => {
            paysim.url = format!("http://{a}");
            Ok(paysim)
        }
        None => {
            let log = std::fs::read_to_string(dir.join("paysim.log")).unwrap_or_default();
            bail!("paysim did not say where it listens; its log:\n{log}")
        }
    }
}

fn lock(m: &std::sync::Mutex<Managed>) -> std::sync::MutexGuard<'_, Managed> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn spawn(sluice: &Path, config: &Path, log: &Path, env: &[(String, String)]) -> Result<Child> {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let mut cmd = Command::new(sluice);
    cmd.arg("run").arg("--config").arg(config);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file);
    cmd.spawn()
        .with_context(|| format!("starting {}", sluice.display()))
}

/// The gateway config a scenario asks for.
pub fn gateway_config(
    scenario: &Scenario,
    listen: &str,
    admin: &str,
    data_dir: &Path,
    static_dir: &Path,
    key: &str,
) -> String {
    let g = &scenario.gateway;
    let mut out = format!(
        "# Written by sluice-load for scenario `{}`.\n[gateway]\nlisten = \"{listen}\"\nadmin_listen = \"{admin}\"\ndata_dir = {:?}\nstatic_dir = {:?}\nadmissions = \"open\"\nshutdown_grace_s = 1\ntrusted_proxies = [\"127.0.0.0/8\"]\n",
        scenario.name,
        data_dir.display().to_string(),
        static_dir.display().to_string(),
    );
    if let Some(ms) = g.test_store_commit_delay_ms {
        out.push_str(&format!("test_store_commit_delay_ms = {ms}\n"));
    }
    if !g.extra.is_empty() {
        out.push_str(&g.extra);
        out.push('\n');
    }
    let release = match g.adaptive {
        Some(_) => "\"adaptive\"".to_string(),
        None => g.release_per_second.to_string(),
    };
    out.push_str(&format!(
        "\n[[rooms]]\nname = \"{}\"\nprotect = [\"/checkout\", \"/orders/*\"]\nrelease_per_second = {}\nmax_active = {}\nqueue_capacity = {}\npoll_min_s = {}\npoll_max_s = {}\npass_ttl_s = {}\nreservation_ttl_s = {}\njoins_per_minute_per_client = {}\n",
        g.room, release, g.max_active, g.queue_capacity, g.poll_min_s, g.poll_max_s, g.pass_ttl_s, g.reservation_ttl_s,
        g.joins_per_minute_per_client.unwrap_or(JOINS_PER_MINUTE_PER_CLIENT),
    ));
    if let Some(s) = g.pass_idle_s {
        out.push_str(&format!("pass_idle_s = {s}\n"));
    }
    if let Some(b) = g.burst {
        out.push_str(&format!("burst = {b}\n"));
    }
    if let Some(t) = g.idle_timeout_s {
        out.push_str(&format!("idle_timeout_s = {t}\n"));
    }
    if let Some(n) = g.max_orders_per_pass {
        out.push_str(&format!("max_orders_per_pass = {n}\n"));
    }
    if let Some(e) = &scenario.event {
        let start = e.start_unix_s.unwrap_or(0);
        out.push_str(&format!(
            "prequeue_at = {}\nopens_at = {}\ncloses_at = {}\n",
            toml_datetime(start + e.prequeue_after_s),
            toml_datetime(start + e.opens_after_s),
            toml_datetime(start + e.closes_after_s),
        ));
        if let Some(m) = &e.message {
            out.push_str(&format!("message = \"{m}\"\n"));
        }
    }
    // Last of the room: keys after it would belong to this table.
    if let Some(a) = &g.adaptive {
        out.push_str(&format!(
            "[rooms.adaptive]\ntarget_p99_ms = {}\nmax_error_ratio = {}\nmin_per_second = {}\nmax_per_second = {}\n",
            a.target_p99_ms, a.max_error_ratio, a.min_per_second, a.max_per_second
        ));
    }
    if let Some(c) = &g.challenge {
        out.push_str(&format!(
            "[rooms.challenge]\nkind = \"pow\"\ndifficulty_bits = {}\n",
            c.difficulty_bits
        ));
        if let Some(t) = c.challenge_ttl_s {
            out.push_str(&format!("challenge_ttl_s = {t}\n"));
        }
    }
    if let Some(e) = &g.enqueue {
        out.push_str(&format!(
            "[rooms.enqueue]\nrequired = {}\n[[rooms.enqueue.keys]]\nkid = \"{STORE_KID}\"\nalg = \"HS256\"\nsecret = \"{}\"\n",
            e.required,
            e.store_key.as_deref().unwrap_or_default()
        ));
    }
    for p in &scenario.products {
        out.push_str(&format!(
            "\n[[products]]\nsku = \"{}\"\nstock = {}\nprice_cents = {}\nroom = \"{}\"\n",
            p.sku, p.stock, p.price_cents, g.room
        ));
        if let Some(k) = p.partitions {
            out.push_str(&format!("partitions = {k}\n"));
        }
    }
    out.push_str(&format!(
        "\n[[keys]]\nkid = \"load\"\nalg = \"HS256\"\nsecret = \"{key}\"\n"
    ));
    out
}

/// Refuses any URL that is not `http://` on a loopback address.
pub fn require_loopback(url: &str) -> Result<()> {
    let parsed = reqwest::Url::parse(url).with_context(|| format!("`{url}` is not a URL"))?;
    let host = parsed.host_str().unwrap_or("");
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        bail!("`{url}`: sluice-load only drives loopback addresses (127.0.0.1, ::1, localhost)");
    }
    Ok(())
}

fn admin_client() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .no_proxy()
        .timeout(ADMIN_TIMEOUT)
        .build()?)
}

/// Finds the `sluice` binary: next to this executable, then on `PATH`.
pub fn find_sluice() -> PathBuf {
    sibling("sluice")
}

/// The binary `name` next to this executable, else `name` (from `PATH`).
pub fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            let p = exe.parent()?.join(name);
            p.is_file().then_some(p)
        })
        .unwrap_or_else(|| PathBuf::from(name))
}
