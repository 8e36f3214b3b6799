//! The control loop: reload on SIGHUP and on a change of the config file or
//! of the deny list it names (`gateway.deny_cidrs_file`), and flag
//! readiness down when shutdown begins.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::signal::unix::{signal, SignalKind};

use crate::state::Shared;

/// How often the config file is checked for a change. A saved edit goes
/// live within this period (plus validation), well inside a second.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(250);

pub struct Control {
    shared: Arc<Shared>,
    /// The deny list file as last seen (its size and modification time),
    /// so an edit of that file alone reloads the config (which reads it
    /// again whole, bounded). Only its metadata is read every check.
    deny_seen: std::sync::Mutex<Option<(std::path::PathBuf, u64, std::time::SystemTime)>>,
}

impl Control {
    pub fn new(shared: Arc<Shared>) -> Self {
        let control = Self {
            shared,
            deny_seen: std::sync::Mutex::new(None),
        };
        control.deny_list_changed();
        control
    }

    /// Whether the config's deny list file changed since last looked at
    /// (the first look only notes it). An unreadable file is no change: the
    /// reload it would trigger would fail and keep the last good list.
    fn deny_list_changed(&self) -> bool {
        let runtime = self.shared.runtime();
        let Some(deny) = &runtime.config.gateway.deny_cidrs else {
            *self.deny_seen.lock().unwrap_or_else(|p| p.into_inner()) = None;
            return false;
        };
        let Ok(meta) = std::fs::metadata(&deny.path) else {
            return false;
        };
        let (len, modified) = (meta.len(), meta.modified().unwrap_or(std::time::UNIX_EPOCH));
        let mut seen = self.deny_seen.lock().unwrap_or_else(|p| p.into_inner());
        let changed = matches!(&*seen, Some((path, l, m)) if *path == deny.path && (*l != len || *m != modified));
        *seen = Some((deny.path.clone(), len, modified));
        changed
    }

    /// One reload attempt, logged. `trigger` names what asked for it.
    pub fn reload_once(&self, trigger: &str, only_if_changed: bool) {
        let path = self.shared.config.path().display().to_string();
        match self.shared.reload(only_if_changed) {
            None => {}
            Some(Ok(outcome)) => {
                let admissions = self.shared.runtime().config.gateway.admissions.as_str();
                tracing::info!(trigger, config = %path, admissions, "config reloaded");
                for key in outcome.restart_required {
                    tracing::warn!(
                        trigger,
                        key,
                        "this key changed but only takes effect after a restart"
                    );
                }
            }
            Some(Err(e)) => tracing::error!(trigger, config = %path, "{e}"),
        }
    }
}

#[async_trait]
impl BackgroundService for Control {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut hangup = match signal(SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::error!("cannot listen for SIGHUP, reload on file change only: {e}");
                None
            }
        };
        let mut tick = tokio::time::interval(WATCH_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.changed() => {
                    self.shared.shutting_down.store(true, Ordering::Relaxed);
                    tracing::info!("shutdown: readiness is now false, draining in-flight requests");
                    return;
                }
                Some(()) = async { match hangup.as_mut() { Some(s) => s.recv().await, None => std::future::pending().await } } => {
                    self.reload_once("SIGHUP", false);
                }
                _ = tick.tick() => {
                    self.reload_once("file change", true);
                    if self.deny_list_changed() {
                        self.reload_once("deny list change", false);
                    }
                }
            }
        }
    }
}
