//! This gateway's name in a fleet: its node id.

/// `gateway.node_id`, else `<hostname>:<public port>`: stable across
/// restarts of the same gateway, distinct for two on one host.
pub fn node_id(gateway: &sluice_policies::model::Gateway) -> String {
    if let Some(id) = &gateway.node_id {
        return id.clone();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}:{}", gateway.listen.port())
}
