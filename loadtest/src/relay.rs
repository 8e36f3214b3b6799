//! A TCP relay the harness controls, to cut one gateway off from Redis or
//! PostgreSQL while the others go on, with no firewall.
//!
//! A gateway is configured with the relay's address instead of the
//! store's; the relay forwards each connection to the store. Its link is
//! in one of three [`Link`] states:
//!
//! - `Up`: bytes flow both ways;
//! - `Refused`: every open connection is closed and new ones are closed as
//!   soon as they are accepted (a store that is down: clients see resets
//!   and reconnect at once);
//! - `Blackholed`: open connections stay open but nothing is forwarded and
//!   new ones are accepted and left hanging (a network partition: clients
//!   see nothing and must rely on their own timeouts).
//!
//! Setting `Up` again lets new connections through; connections that were
//! cut stay closed, as after a real outage.
//!
//! The relay runs on a thread of its own with its own tokio runtime, so a
//! synchronous test and the harness use it alike; dropping it stops it.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The state of a relay's link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    Up,
    Refused,
    Blackholed,
}

/// A running relay from [`Relay::addr`] to its target.
pub struct Relay {
    addr: SocketAddr,
    link: Arc<watch::Sender<Link>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Relay {
    /// Listens on a free loopback port and forwards to `target`.
    pub fn start(target: SocketAddr) -> Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding the relay")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (link, _) = watch::channel(Link::Up);
        let link = Arc::new(link);
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("the relay's runtime")?;
        let serving = link.clone();
        let thread = std::thread::Builder::new()
            .name(format!("relay {addr}"))
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = TcpListener::from_std(listener).expect("a nonblocking listener");
                    tokio::select! {
                        _ = stopped => {}
                        _ = serve(listener, target, serving) => {}
                    }
                })
            })
            .context("the relay's thread")?;
        Ok(Self {
            addr,
            link,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn link(&self) -> Link {
        *self.link.borrow()
    }

    pub fn set(&self, link: Link) {
        self.link.send_replace(link);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(listener: TcpListener, target: SocketAddr, link: Arc<watch::Sender<Link>>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let watching = link.subscribe();
        tokio::spawn(connection(client, target, watching));
    }
}

/// One client connection, for as long as the link lets it live.
async fn connection(mut client: TcpStream, target: SocketAddr, mut link: watch::Receiver<Link>) {
    let state = *link.borrow_and_update();
    match state {
        Link::Refused => {
            let _ = client.shutdown().await;
            return;
        }
        Link::Blackholed => {
            // Hold it, say nothing, until the relay stops or the link
            // changes (then close: it was never connected).
            let _ = link.changed().await;
            return;
        }
        Link::Up => {}
    }
    let Ok(mut upstream) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (mut client_read, mut client_write) = client.split();
    let (mut upstream_read, mut upstream_write) = upstream.split();
    let forward = async {
        tokio::select! {
            _ = tokio::io::copy(&mut client_read, &mut upstream_write) => {}
            _ = tokio::io::copy(&mut upstream_read, &mut client_write) => {}
        }
    };
    tokio::pin!(forward);
    loop {
        tokio::select! {
            _ = &mut forward => return,
            changed = link.changed() => {
                if changed.is_err() {
                    return;
                }
                match *link.borrow_and_update() {
                    Link::Up => {}
                    // Dropping the sockets closes both sides.
                    Link::Refused => return,
                    Link::Blackholed => break,
                }
            }
        }
    }
    // Blackholed: keep both sockets open, forward nothing, until the link
    // changes again; then close (a partition that healed finds its old
    // connections dead).
    let _ = link.changed().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::time::Duration;

    /// An echo server on a free port.
    fn echo() -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 || conn.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    fn round_trip(s: &mut std::net::TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        s.write_all(msg)?;
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got)?;
        Ok(got)
    }

    #[test]
    fn the_link_forwards_refuses_and_blackholes() {
        let relay = Relay::start(echo()).unwrap();
        let mut a = std::net::TcpStream::connect(relay.addr()).unwrap();
        a.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        assert_eq!(round_trip(&mut a, b"ping").unwrap(), b"ping");

        relay.set(Link::Refused);
        // The open connection is closed by the relay: a read sees EOF.
        let mut byte = [0u8];
        let closed = (0..50).any(|_| {
            matches!(a.read(&mut byte), Ok(0) | Err(_)) || {
                std::thread::sleep(Duration::from_millis(10));
                false
            }
        });
        assert!(closed, "an open connection is cut");
        let mut b = std::net::TcpStream::connect(relay.addr()).unwrap();
        b.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        assert!(
            round_trip(&mut b, b"ping").is_err(),
            "a new connection is closed unanswered"
        );

        relay.set(Link::Up);
        let mut c = std::net::TcpStream::connect(relay.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        assert_eq!(round_trip(&mut c, b"back").unwrap(), b"back");

        relay.set(Link::Blackholed);
        let err = round_trip(&mut c, b"lost").expect_err("nothing comes back");
        assert!(
            matches!(
                err.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "the connection hangs rather than closing: {err:?}"
        );
        let mut d = std::net::TcpStream::connect(relay.addr()).unwrap();
        d.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let err = round_trip(&mut d, b"lost").expect_err("nothing comes back");
        assert!(matches!(
            err.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ));

        relay.set(Link::Up);
        let mut e = std::net::TcpStream::connect(relay.addr()).unwrap();
        e.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        assert_eq!(round_trip(&mut e, b"healed").unwrap(), b"healed");
    }
}
