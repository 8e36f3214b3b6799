//! Ports for a `sluice` subprocess, without a bind race.
//!
//! pingora binds its listeners inside `Server::run` and reports no address,
//! so `sluice` cannot be asked to bind port 0 and say what it got. The
//! harness picks free ports instead, and trusts a start only once `/proc`
//! shows that the very process it spawned owns a listener on each; when
//! another socket took a port in between (pingora then logs
//! [`PORT_TAKEN_LOG`] and retries), the caller starts again on new ports.

use std::net::TcpListener;

/// What pingora logs while another socket holds its listen address.
pub const PORT_TAKEN_LOG: &str = "is in use, will try again";

/// A loopback port nothing listens on right now; someone else may take it
/// before the caller's subprocess binds it (see [`listens_on`]).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Whether process `pid` holds a socket listening on TCP `port` (IPv4 or
/// IPv6, any local address), read from `/proc` (Linux).
pub fn listens_on(pid: u32, port: u16) -> bool {
    let mut sockets = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
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
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
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
    fn this_process_owns_its_listener_and_not_a_free_port() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listens_on(std::process::id(), port));
        drop(listener);
        assert!(!listens_on(std::process::id(), port));
        // pid 1 is not this process: it does not own this process's socket.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(!listens_on(1, port));
    }
}
