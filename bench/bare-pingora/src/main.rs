//! `bare-pingora LISTEN ORIGIN [THREADS]`: the baseline of
//! `scripts/bench-proxy.sh`. Every request goes to `ORIGIN` (`host:port`,
//! plain HTTP) unchanged; nothing is decided, logged or counted. It uses
//! what `sluice` uses for the same path: pingora with the workspace's
//! features, one `ServerConf` with `threads`, mimalloc, the origin
//! timeouts of Sluice's defaults and pooled upstream connections, so the
//! difference between the two is Sluice's own work per request.

use std::time::Duration;

use async_trait::async_trait;
use pingora::prelude::*;
use pingora::server::configuration::ServerConf;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Bare {
    origin: String,
}

#[async_trait]
impl ProxyHttp for Bare {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        let mut peer = HttpPeer::new(self.origin.as_str(), false, String::new());
        // Sluice's defaults (gateway.origin_*_timeout_ms).
        peer.options.connection_timeout = Some(Duration::from_secs(2));
        peer.options.read_timeout = Some(Duration::from_secs(10));
        peer.options.write_timeout = Some(Duration::from_secs(10));
        peer.options.idle_timeout = Some(Duration::from_secs(60));
        Ok(Box::new(peer))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(listen), Some(origin)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: bare-pingora LISTEN ORIGIN [THREADS]");
        std::process::exit(2);
    };
    let threads = args.get(3).and_then(|t| t.parse().ok()).unwrap_or(1);
    let conf = ServerConf {
        threads,
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut proxy = pingora::proxy::http_proxy_service(
        &server.configuration,
        Bare {
            origin: origin.clone(),
        },
    );
    proxy.add_tcp(listen);
    server.add_service(proxy);
    server.run_forever();
}
