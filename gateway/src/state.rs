//! State shared by the listeners and the control loop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use sluice_policies::model::Admissions;
use sluice_policies::reload::ReloadOutcome;
use sluice_policies::{Config, ConfigHandle, ReloadError};

use crate::clock::now_ms;
use crate::metrics::Metrics;
use crate::orders::{Orders, OrdersCollector};
use crate::queue::{RoomCollector, Rooms};
use crate::readiness::Readiness;
use crate::runtime::{load_catalog, Runtime};

/// Command-line flags that win over the file, on every reload too.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub listen: Option<SocketAddr>,
    pub admin_listen: Option<SocketAddr>,
    pub data_dir: Option<PathBuf>,
}

impl Overrides {
    /// Puts the flags over `config`, and checks again what the file's
    /// validation checked of the addresses they replace: an admin listener
    /// off loopback needs `admin_token_env`, whether its address came from
    /// the file or from `--admin-listen` (at start, and at every reload,
    /// which could drop the token from the file).
    pub fn apply(&self, config: &mut Config) -> Result<(), String> {
        if let Some(a) = self.listen {
            config.gateway.listen = a;
        }
        if let Some(a) = self.admin_listen {
            config.gateway.admin_listen = a;
        }
        if let Some(d) = &self.data_dir {
            config.gateway.data_dir = d.clone();
        }
        let admin = config.gateway.admin_listen;
        if !admin.ip().is_loopback() && config.gateway.admin_token.is_none() {
            return Err(format!(
                "the admin listener {admin} is not a loopback address: set `admin_token_env` so the admin routes need a token"
            ));
        }
        Ok(())
    }
}

/// The outcome of the last reload, for `/admin/state`.
#[derive(Debug, Clone, Default)]
pub struct ReloadStatus {
    pub last_success_unix: u64,
    pub last_error: Option<String>,
}

pub struct Shared {
    pub config: ConfigHandle,
    runtime: ArcSwap<Runtime>,
    pub metrics: Metrics,
    pub overrides: Overrides,
    /// The public listener terminates TLS (fixed at start).
    pub tls: bool,
    pub shutting_down: AtomicBool,
    pub reload_status: Mutex<ReloadStatus>,
    /// The waiting rooms; kept across reloads.
    pub rooms: Arc<Rooms>,
    /// The reservation core.
    pub orders: Arc<Orders>,
    /// `/readyz`'s probes and their last outcome.
    pub readiness: Readiness,
}

impl Shared {
    pub fn new(config: ConfigHandle, overrides: Overrides) -> Result<Arc<Self>, String> {
        let current = config.current();
        let catalog = load_catalog(&current)?;
        let runtime = Runtime::build(current.clone(), Arc::new(catalog), None);
        let tls = current.gateway.tls.is_some();
        let metrics = Metrics::new(&current.gateway.region);
        let orders = Arc::new(Orders::open(&current, &metrics)?);
        let rooms = Arc::new(Rooms::open(&current, tls, orders.stock_authority())?);
        metrics
            .registry()
            .register(Box::new(RoomCollector::new(rooms.clone())))
            .map_err(|e| format!("room metrics: {e}"))?;
        metrics
            .registry()
            .register(Box::new(OrdersCollector::new(orders.clone())))
            .map_err(|e| format!("order metrics: {e}"))?;
        let shared = Arc::new(Self {
            rooms,
            orders,
            readiness: Readiness::default(),
            tls,
            config,
            runtime: ArcSwap::from_pointee(runtime),
            metrics,
            overrides,
            shutting_down: AtomicBool::new(false),
            reload_status: Mutex::new(ReloadStatus {
                last_success_unix: unix_now(),
                last_error: None,
            }),
        });
        shared.publish_gauges();
        Ok(shared)
    }

    /// The snapshot a request runs on.
    pub fn runtime(&self) -> Arc<Runtime> {
        self.runtime.load_full()
    }

    /// Re-reads the config file (and the catalog it points at) and swaps
    /// both in, or keeps the last good ones. `only_if_changed` is for the
    /// file watcher.
    pub fn reload(&self, only_if_changed: bool) -> Option<Result<ReloadOutcome, ReloadError>> {
        let catalog = Mutex::new(None);
        // All or nothing: every step that can fail runs before anything
        // running changes, and the one side effect that can fail (the store
        // write of prices and TTLs) is a single transaction, last of them.
        let prepare = |candidate: &mut Config| {
            self.overrides.apply(candidate)?;
            let next_catalog = load_catalog(candidate)?;
            let seeds = Orders::plan(candidate)?;
            let rooms = self.rooms.plan(candidate, now_ms())?;
            self.orders.commit(candidate, &seeds)?;
            // From here on nothing can fail.
            self.rooms.commit(rooms);
            *catalog.lock().unwrap_or_else(|p| p.into_inner()) = Some(next_catalog);
            Ok(())
        };
        let result = if only_if_changed {
            self.config.reload_if_changed(&prepare)?
        } else {
            self.config.reload(&prepare)
        };
        let mut status = self.reload_status.lock().unwrap_or_else(|p| p.into_inner());
        match &result {
            Ok(_) => {
                let catalog = catalog.into_inner().unwrap_or_else(|p| p.into_inner());
                let catalog = catalog.expect("prepare ran and succeeded");
                let previous = self.runtime();
                let next =
                    Runtime::build(self.config.current(), Arc::new(catalog), Some(&previous));
                self.runtime.store(Arc::new(next));
                self.metrics
                    .config_reloads
                    .with_label_values(&["success"])
                    .inc();
                status.last_success_unix = unix_now();
                status.last_error = None;
                drop(status);
                self.publish_gauges();
            }
            Err(e) => {
                self.metrics
                    .config_reloads
                    .with_label_values(&["failure"])
                    .inc();
                status.last_error = Some(e.to_string());
            }
        }
        Some(result)
    }

    fn publish_gauges(&self) {
        let rt = self.runtime();
        let m = &self.metrics;
        m.admissions_open
            .set(i64::from(rt.config.gateway.admissions == Admissions::Open));
        m.catalog_files.set(rt.catalog.len() as i64);
        m.catalog_bytes.set(rt.catalog.total_bytes() as i64);
        let last = self
            .reload_status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_success_unix;
        m.config_last_reload_success.set(last as i64);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Relaxed)
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
