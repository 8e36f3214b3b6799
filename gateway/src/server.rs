//! Wiring: one pingora server with eight services (public proxy behind the
//! connection cap, admin listener, control loop, origin DNS refresher,
//! release worker, orders worker, simulator webhooks, the systemd
//! readiness notice) around one [`Shared`] state.

use std::sync::Arc;

use anyhow::{anyhow, Context};
use pingora::listeners::tls::TlsSettings;
use pingora::server::configuration::ServerConf;
use pingora::server::Server;
use pingora::services::background::background_service;
use pingora::services::listening::Service;

use crate::admin::Admin;
use crate::connections::{
    default_max_connections, raise_fd_limit, BeforeTls, CapFilter, ConnectionCap, PerClient,
    Public, PublicLimits,
};
use crate::control::Control;
use crate::orders::{simulator_outside_demo, OrdersWorker};
use crate::proxy::Proxy;
use crate::queue::Releaser;
use crate::sim_webhooks::SimWebhooks;
pub use crate::state::Overrides;
use crate::state::Shared;

/// Loads the config and runs the gateway until SIGTERM (graceful drain) or
/// SIGINT (fast stop).
pub fn run(config_path: &std::path::Path, overrides: Overrides) -> anyhow::Result<()> {
    let mut config = sluice_policies::load_file(config_path).map_err(|d| anyhow!("{d}"))?;
    overrides.apply(&mut config).map_err(|e| anyhow!(e))?;
    let content = std::fs::read(config_path).ok();
    let handle =
        sluice_policies::ConfigHandle::with_config(config_path, config, content.as_deref());
    let shared = Shared::new(handle, overrides).map_err(|e| anyhow!(e))?;
    let gateway = shared.runtime().config.gateway.clone();
    std::fs::create_dir_all(&gateway.data_dir)
        .with_context(|| format!("creating data_dir {}", gateway.data_dir.display()))?;

    let conf = ServerConf {
        threads: gateway.threads.get(),
        // SIGTERM: stop accepting, let in-flight requests finish for this
        // long, then stop.
        grace_period_seconds: Some(gateway.shutdown_grace.as_secs()),
        graceful_shutdown_timeout_seconds: Some(1),
        pid_file: gateway.data_dir.join("sluice.pid").display().to_string(),
        upgrade_sock: gateway
            .data_dir
            .join("sluice-upgrade.sock")
            .display()
            .to_string(),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();

    let cap = ConnectionCap::new(max_connections(&gateway));
    cap.register(shared.metrics.registry())
        .context("registering the connection metrics")?;
    let per_client = gateway
        .max_connections_per_client
        .map(|max| PerClient::new(max.get(), gateway.trusted_proxies.clone()));
    if let Some(per_client) = &per_client {
        per_client
            .register(shared.metrics.registry())
            .context("registering the per-client connection metrics")?;
    }
    let public = Public::new(
        pingora::proxy::http_proxy(&server.configuration, Proxy::new(shared.clone())),
        cap.clone(),
        PublicLimits {
            proxy_protocol: gateway.proxy_protocol && gateway.tls.is_none(),
            header_timeout: gateway.header_timeout,
            per_client: per_client.clone(),
            counted_before_tls: gateway.tls.is_some(),
        },
    );
    public
        .register(shared.metrics.registry())
        .context("registering the head-timeout metric")?;
    let mut proxy = Service::new("sluice proxy".to_string(), public);
    proxy.set_connection_filter(Arc::new(CapFilter(cap.clone())));
    if gateway.tls.is_some() {
        proxy.endpoints().set_pre_tls_callback(Arc::new(BeforeTls {
            cap: cap.clone(),
            per_client,
            proxy_protocol: gateway.proxy_protocol,
        }));
    }
    let listen = gateway.listen.to_string();
    match &gateway.tls {
        Some(tls) => {
            let cert = tls.cert.to_str().context("tls_cert path is not UTF-8")?;
            let key = tls.key.to_str().context("tls_key path is not UTF-8")?;
            let mut settings = TlsSettings::intermediate(cert, key)
                .map_err(|e| anyhow!("loading TLS certificate and key: {e}"))?;
            settings.enable_h2();
            proxy.add_tls_with_settings(&listen, None, settings);
        }
        None => proxy.add_tcp(&listen),
    }

    let mut admin = Service::new("sluice admin".to_string(), Admin::new(shared.clone()));
    admin.add_tcp(&gateway.admin_listen.to_string());

    let runtime = shared.runtime();
    if let Some(target) = runtime.origin_host_target() {
        runtime.origin_dns().resolve_at_start(&target);
    }
    shared
        .metrics
        .registry()
        .register(Box::new(runtime.origin_dns().failures().clone()))
        .context("registering the origin DNS metric")?;
    let origin_dns = background_service(
        "sluice origin dns",
        crate::origin_dns::OriginDnsService::new({
            let shared = shared.clone();
            Box::new(move || {
                let runtime = shared.runtime();
                let target = runtime.origin_host_target()?;
                Some((target, runtime.origin_dns().clone()))
            })
        }),
    );
    let control = background_service("sluice control", Control::new(shared.clone()));
    let releaser = background_service("sluice release", Releaser::new(shared.rooms.clone()));
    let orders = background_service("sluice orders", OrdersWorker::new(shared.orders.clone()));
    let sim_webhooks = background_service("sluice sim webhooks", SimWebhooks::new(shared.clone()));

    server.add_service(proxy);
    server.add_service(admin);
    server.add_service(control);
    server.add_service(origin_dns);
    server.add_service(releaser);
    server.add_service(orders);
    server.add_service(sim_webhooks);
    let ready = format!(
        "listening on {}, admin on {}",
        gateway.listen, gateway.admin_listen
    );
    let ports = [gateway.listen.port(), gateway.admin_listen.port()];
    server.add_service(background_service(
        "sluice sd_notify",
        crate::sd_notify::Notify::new(&ports, ready),
    ));
    let config = shared.runtime().config.clone();
    let why = simulator_outside_demo(&config);
    if !why.is_empty() {
        tracing::warn!(
            reasons = why.join("; "),
            "payments.provider is the in-process simulator, which charges nothing, in a config that is not the demo's: set [payments] provider = \"http\" for real sales"
        );
    }
    tracing::info!(
        listen = %gateway.listen,
        admin = %gateway.admin_listen,
        tls = gateway.tls.is_some(),
        config = %config_path.display(),
        admissions = gateway.admissions.as_str(),
        region = %gateway.region,
        max_connections = cap.max(),
        proxy_protocol = gateway.proxy_protocol,
        "sluice starting"
    );
    server.run(pingora::server::RunArgs::default());
    tracing::info!("sluice stopped");
    Ok(())
}

/// Raises the fd limit and resolves `max_connections`: the configured
/// value, else [`default_max_connections`] of the raised limit.
fn max_connections(gateway: &sluice_policies::model::Gateway) -> usize {
    let nofile = match raise_fd_limit() {
        Ok(soft) => soft,
        Err(e) => {
            tracing::warn!("cannot raise the file-descriptor limit: {e}");
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
                .map_or(1024, |(soft, _)| soft)
        }
    };
    let derived = default_max_connections(nofile);
    match gateway.max_connections {
        Some(max) => {
            let max = u64::from(max.get());
            if max > derived {
                tracing::warn!(
                    max_connections = max,
                    nofile,
                    "max_connections is above what the file-descriptor limit leaves for connections ({derived}); raise LimitNOFILE"
                );
            }
            usize::try_from(max).unwrap_or(usize::MAX)
        }
        None => usize::try_from(derived).unwrap_or(usize::MAX),
    }
}

/// Checks config files; prints one `FILE:LINE:COL: message` per problem.
/// Returns whether every file is valid.
pub fn check(files: &[std::path::PathBuf]) -> bool {
    let mut ok = true;
    for file in files {
        match sluice_policies::load_file(file) {
            Ok(config) => {
                println!(
                    "{}: ok ({} rooms, {} products)",
                    file.display(),
                    config.rooms.len(),
                    config.products.len()
                );
            }
            Err(problems) => {
                eprintln!("{problems}");
                ok = false;
            }
        }
    }
    ok
}

/// `sluice audit`: checks the stored state offline: the SQLite store in
/// `data_dir`, or the one a config names (its `[cluster] postgres_url`,
/// else its `gateway.data_dir`). Prints one line per violation;
/// `Ok(true)` when clean.
pub fn audit(
    data_dir: Option<&std::path::Path>,
    config: Option<&std::path::Path>,
) -> anyhow::Result<bool> {
    let now = crate::clock::now_ms() as i64;
    let (what, violations) = match (data_dir, config) {
        (Some(dir), _) => (dir.display().to_string(), audit_sqlite(dir, now)?),
        (None, Some(path)) => {
            let config = sluice_policies::load_file(path)
                .map_err(|problems| anyhow::anyhow!("{problems}"))?;
            match &config.cluster.postgres_url {
                Some(url) => {
                    let pg = sluice_checkout::PgConfig {
                        prepared_statements: config.cluster.postgres_prepared_statements,
                        ..sluice_checkout::PgConfig::new(url.expose())
                    };
                    let violations = sluice_checkout::PgBackend::audit(&pg, now)
                        .context("auditing the PostgreSQL of [cluster] postgres_url")?;
                    ("[cluster] postgres_url".to_string(), violations)
                }
                None => {
                    let dir = &config.gateway.data_dir;
                    (dir.display().to_string(), audit_sqlite(dir, now)?)
                }
            }
        }
        (None, None) => anyhow::bail!("give --data-dir or --config"),
    };
    for v in &violations {
        println!("{v}");
    }
    if violations.is_empty() {
        println!("{what}: clean");
    }
    Ok(violations.is_empty())
}

fn audit_sqlite(data_dir: &std::path::Path, now: i64) -> anyhow::Result<Vec<String>> {
    Ok(sluice_checkout::audit(data_dir, now)
        .with_context(|| format!("auditing {}", data_dir.display()))?
        .iter()
        .map(|v| v.to_string())
        .collect())
}

pub type SharedState = Arc<Shared>;
