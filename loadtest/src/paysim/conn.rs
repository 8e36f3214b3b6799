//! The accept loop: HTTP/1.1 connections that a handler can cut.
//!
//! axum's own `serve` gives a handler no way to drop its connection, and a
//! misbehaving provider needs exactly that. So each connection is served
//! here with hyper directly, and each request carries a [`ConnectionKill`]
//! in its extensions: [`ConnectionKill::reset`] ends the connection with a
//! TCP RST (zero linger), [`ConnectionKill::close`] with a plain FIN and no
//! answer. Either way the in-flight request is dropped unanswered.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tower::ServiceExt;

/// Connections served at once, at most; more wait in the listen backlog.
pub const CONNECTIONS_MAX: usize = 4_096;
/// How long a client may take to send a request's headers.
pub const HEADER_READ_TIMEOUT_MS: u64 = 10_000;

/// A handle that ends the connection a request came on.
#[derive(Debug, Clone, Default)]
pub struct ConnectionKill(Arc<KillState>);

#[derive(Debug, Default)]
struct KillState {
    fired: Notify,
    reset: AtomicBool,
}

impl ConnectionKill {
    /// Ends the connection abruptly: the peer sees a connection reset.
    pub fn reset(&self) {
        self.0.reset.store(true, Ordering::SeqCst);
        self.0.fired.notify_one();
    }

    /// Closes the connection without answering: the peer sees EOF.
    pub fn close(&self) {
        self.0.fired.notify_one();
    }

    async fn fired(&self) {
        self.0.fired.notified().await;
    }
}

/// A TCP stream that, when dropped after [`ConnectionKill::reset`], sends RST.
struct KillableStream {
    inner: TcpStream,
    kill: ConnectionKill,
}

impl Drop for KillableStream {
    fn drop(&mut self) {
        if self.kill.0.reset.load(Ordering::SeqCst) {
            // Best effort: if it fails the peer sees a FIN instead.
            let _ = self.inner.set_zero_linger();
        }
    }
}

impl AsyncRead for KillableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let permits = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return Ok(()),
            },
        };
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of descriptors and the like: pause instead of spinning.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        tokio::spawn(async move {
            let _permit = permit;
            serve_connection(stream, router).await;
        });
    }
}

async fn serve_connection(stream: TcpStream, router: Router) {
    let kill = ConnectionKill::default();
    let io = TokioIo::new(KillableStream {
        inner: stream,
        kill: kill.clone(),
    });
    let request_kill = kill.clone();
    let service = hyper::service::service_fn(move |mut request: http::Request<Incoming>| {
        request.extensions_mut().insert(request_kill.clone());
        router.clone().oneshot(request)
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(HEADER_READ_TIMEOUT_MS))
        .serve_connection(io, service);
    tokio::select! {
        // Errors here are the peer's doing (it hung up, sent garbage).
        _ = connection => {}
        _ = kill.fired() => {}
    }
}
