//! systemd's readiness protocol for `Type=notify` units: `READY=1` once this
//! process listens on its public and admin ports, `STOPPING=1` when the
//! drain begins (SIGTERM). Nothing is sent, and nothing is looked at, unless
//! the service manager set `NOTIFY_SOCKET`; the datagram itself is the
//! `sd-notify` crate's.
//!
//! pingora binds each listener inside its service's own runtime and tells
//! nobody when that is done (a listening service reports itself ready to
//! pingora's dependency graph before it binds), so [`Notify`] looks in
//! `/proc`: a port is bound when a listening socket on it is one of this
//! process's own descriptors ([`listening`]).

use std::time::Duration;

use ::sd_notify::NotifyState;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

/// How often the listeners are looked for until both are bound.
const POLL_EVERY: Duration = Duration::from_millis(10);

/// The notifier: a background service that waits for `ports`.
pub struct Notify {
    ports: Vec<u16>,
    status: String,
}

impl Notify {
    /// `ports`: the listeners to wait for (a port 0 is bound anywhere and
    /// cannot be looked for: it is not waited on). `status` is shown by
    /// `systemctl status` once ready.
    pub fn new(ports: &[u16], status: String) -> Self {
        Self {
            ports: ports.iter().copied().filter(|p| *p != 0).collect(),
            status,
        }
    }
}

#[async_trait]
impl BackgroundService for Notify {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        if std::env::var_os("NOTIFY_SOCKET").is_none() {
            return;
        }
        loop {
            if self.ports.iter().all(|p| listening(*p)) {
                send(&[NotifyState::Ready, NotifyState::Status(&self.status)]);
                break;
            }
            tokio::select! {
                _ = shutdown.changed() => break,
                _ = tokio::time::sleep(POLL_EVERY) => {}
            }
        }
        if !*shutdown.borrow() {
            let _ = shutdown.changed().await;
        }
        send(&[NotifyState::Stopping, NotifyState::Status("draining")]);
    }
}

fn send(state: &[NotifyState]) {
    if let Err(e) = ::sd_notify::notify(state) {
        tracing::warn!("cannot notify the service manager (NOTIFY_SOCKET): {e}");
    }
}

/// Whether this process holds a socket listening on TCP `port` (IPv4 or
/// IPv6), read from `/proc/self`.
pub fn listening(port: u16) -> bool {
    let mut sockets = Vec::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let local_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            // State 0A is TCP_LISTEN.
            if local_port == Some(port) && *state == "0A" {
                sockets.push(format!("socket:[{inode}]"));
            }
        }
    }
    if sockets.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| sockets.iter().any(|s| target.as_os_str() == s.as_str()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_listening_only_while_this_process_listens_on_it() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listening(port));
        drop(listener);
        assert!(!listening(port));
    }

    #[test]
    fn a_bound_socket_that_does_not_listen_is_not_ready() {
        let tcp = tokio::net::TcpSocket::new_v4().unwrap();
        tcp.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        assert!(!listening(tcp.local_addr().unwrap().port()));
    }
}
