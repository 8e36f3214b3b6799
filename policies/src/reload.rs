//! The live config: one immutable snapshot, swapped whole.
//!
//! Readers call [`ConfigHandle::current`] once per request and keep that
//! `Arc` for the whole request, so a reload in the middle never mixes two
//! configs. A reload that fails validation changes nothing.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::diagnostic::Diagnostics;
use crate::model::Config;
use crate::validate;

/// Why a reload did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("config rejected, keeping the last good one:\n{0}")]
    Invalid(Diagnostics),
    /// The file is valid but what it points at is not (an unreadable
    /// catalog, say): the caller's `prepare` step refused it.
    #[error("config rejected, keeping the last good one: {0}")]
    Rejected(String),
}

/// Runs on a validated candidate before it goes live: re-applies
/// command-line overrides and prepares what depends on it. An error keeps
/// the last good snapshot.
pub type Prepare<'a> = &'a dyn Fn(&mut Config) -> Result<(), String>;

/// What a successful reload changed that only a restart applies.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReloadOutcome {
    /// Keys whose new value is ignored until the next start.
    pub restart_required: Vec<&'static str>,
}

pub struct ConfigHandle {
    path: PathBuf,
    current: ArcSwap<Config>,
    /// Hash of the file content last seen by `reload_if_changed`, so that
    /// a file watcher only reloads on a real change.
    seen: Mutex<Option<u64>>,
}

impl ConfigHandle {
    /// Loads the file for the first time.
    pub fn load(path: &Path) -> Result<Self, Diagnostics> {
        let content = std::fs::read(path).ok();
        let config = validate::load_file(path)?;
        Ok(Self::with_config(path, config, content.as_deref()))
    }

    /// Wraps an already validated config (the CLI may have overridden keys).
    pub fn with_config(path: &Path, config: Config, content: Option<&[u8]>) -> Self {
        Self {
            path: path.to_path_buf(),
            current: ArcSwap::from_pointee(config),
            seen: Mutex::new(content.map(hash)),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The snapshot in force now.
    pub fn current(&self) -> Arc<Config> {
        self.current.load_full()
    }

    /// Re-reads the file and swaps it in if valid and `prepare` accepts it.
    pub fn reload(&self, prepare: Prepare<'_>) -> Result<ReloadOutcome, ReloadError> {
        let content = std::fs::read(&self.path).ok();
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = content.as_deref().map(hash);
        let mut next = validate::load_file(&self.path).map_err(ReloadError::Invalid)?;
        prepare(&mut next).map_err(ReloadError::Rejected)?;
        let old = self.current();
        let outcome = ReloadOutcome {
            restart_required: restart_required(&old, &next),
        };
        self.current.store(Arc::new(next));
        Ok(outcome)
    }

    /// Reloads only if the file's content changed since it was last read.
    /// `None` when nothing changed (or the file is momentarily unreadable,
    /// as while an editor replaces it).
    pub fn reload_if_changed(
        &self,
        prepare: Prepare<'_>,
    ) -> Option<Result<ReloadOutcome, ReloadError>> {
        let content = std::fs::read(&self.path).ok()?;
        let h = hash(&content);
        if *self.seen.lock().unwrap_or_else(|p| p.into_inner()) == Some(h) {
            return None;
        }
        Some(self.reload(prepare))
    }
}

fn hash(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Listener-level keys are bound when the process starts.
fn restart_required(old: &Config, new: &Config) -> Vec<&'static str> {
    let (o, n) = (&old.gateway, &new.gateway);
    let mut keys = Vec::new();
    if o.listen != n.listen {
        keys.push("gateway.listen");
    }
    if o.admin_listen != n.admin_listen {
        keys.push("gateway.admin_listen");
    }
    if o.threads != n.threads {
        keys.push("gateway.threads");
    }
    if o.tls != n.tls {
        keys.push("gateway.tls_cert/tls_key");
    }
    if o.data_dir != n.data_dir {
        keys.push("gateway.data_dir");
    }
    if o.test_store_commit_delay != n.test_store_commit_delay {
        keys.push("gateway.test_store_commit_delay_ms");
    }
    if o.shutdown_grace != n.shutdown_grace {
        keys.push("gateway.shutdown_grace_s");
    }
    if o.region != n.region {
        keys.push("gateway.region");
    }
    if o.node_id != n.node_id {
        keys.push("gateway.node_id");
    }
    let (op, np) = (&old.payments, &new.payments);
    if (op.provider, &op.url, &op.api_key, &op.currency, op.timeout)
        != (np.provider, &np.url, &np.api_key, &np.currency, np.timeout)
    {
        keys.push("payments (provider, url, api_key_env, currency, timeout_ms)");
    }
    if o.proxy_protocol != n.proxy_protocol {
        keys.push("gateway.proxy_protocol");
    }
    if o.max_connections != n.max_connections {
        keys.push("gateway.max_connections");
    }
    if o.max_connections_per_client != n.max_connections_per_client {
        keys.push("gateway.max_connections_per_client");
    }
    if o.header_timeout != n.header_timeout {
        keys.push("gateway.header_timeout_s");
    }
    if old.cluster != new.cluster {
        keys.push("cluster");
    }
    keys
}
