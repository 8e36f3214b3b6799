//! A simulator on its own thread and runtime, for tests on any runtime (or
//! none): bound to `127.0.0.1:0` first, so its address is known before
//! anything is configured with it, and stopped when dropped.

use std::net::SocketAddr;

use anyhow::Context;

use super::Config;

/// A listener on a port the system chose, not yet served: its URL can go
/// into a gateway's config before the simulator's own config (the webhook
/// target, often that gateway) is known. Requests that arrive meanwhile wait
/// in the listen backlog.
#[derive(Debug)]
pub struct Bound {
    listener: std::net::TcpListener,
    addr: SocketAddr,
}

impl Bound {
    pub fn new() -> std::io::Result<Bound> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        Ok(Bound { listener, addr })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts serving with `config`; fails when the knobs are invalid.
    pub fn serve(self, config: Config) -> anyhow::Result<Background> {
        config.faults.validate()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("building the simulator's runtime")?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let listener = self.listener;
        std::thread::Builder::new()
            .name("paysim".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(e) => return eprintln!("paysim: {e}"),
                    };
                    let shutdown = async move {
                        let _ = stopped.await;
                    };
                    if let Err(e) = super::serve(listener, config, shutdown).await {
                        eprintln!("paysim: {e:#}");
                    }
                })
            })
            .context("starting the simulator's thread")?;
        Ok(Background {
            addr: self.addr,
            _stop: stop,
        })
    }
}

/// A running simulator; dropping it stops the server.
#[derive(Debug)]
pub struct Background {
    addr: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Background {
    /// Binds a free port and serves `config` on it.
    pub fn start(config: Config) -> anyhow::Result<Background> {
        Bound::new().context("binding 127.0.0.1:0")?.serve(config)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}
