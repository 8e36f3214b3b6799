//! A deadline on the whole request head, against slowloris.
//!
//! pingora's `read_timeout` bounds each read of a request head, not the
//! head as a whole, so a client that sends one header byte every few
//! seconds keeps a connection, and a slot of the connection cap, for as
//! long as it likes. [`HeadDeadline`] wraps a public connection's stream
//! (after TLS, so it sees the plain HTTP bytes) and refuses to go on
//! reading a request head past `gateway.header_timeout_s`:
//!
//! - a new connection must deliver its first request head within the
//!   timeout, counted from the accept (as nginx's `client_header_timeout`);
//! - each later request on a kept-alive connection must deliver its head
//!   within the timeout counted from its first byte (the idle time between
//!   requests is pingora's keep-alive timeout's business);
//! - once the head's blank line has arrived the deadline is off: a request
//!   body and the response are bounded by pingora's per-read and per-write
//!   timeouts, as before.
//!
//! Past the deadline a read fails with `TimedOut`, pingora drops the
//! connection, and `sluice_connections_head_timeouts_total` counts it.
//! Over HTTP/2 the connection preface ends in a blank line, so only the
//! preface is timed; h2's own flow control bounds the rest.
//!
//! The end of a head is found by [`HeadEnd`], a three-state scanner over
//! the bytes as they are read, so a head split across any number of reads
//! is found without buffering it a second time.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use pingora::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, Ssl, Stream, UniqueID,
    UniqueIDType,
};
use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Finds the blank line that ends a request head, across reads. Lines may
/// end in CRLF or a bare LF (as httparse accepts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeadEnd {
    /// 0: inside a line; 1: just after a line's LF; 2: after LF then CR.
    state: u8,
}

impl HeadEnd {
    /// Feeds `bytes`; returns the index just past the blank line when the
    /// head ends inside them.
    pub fn feed(&mut self, bytes: &[u8]) -> Option<usize> {
        for (i, &b) in bytes.iter().enumerate() {
            self.state = match (self.state, b) {
                (1 | 2, b'\n') => {
                    self.state = 0;
                    return Some(i + 1);
                }
                (_, b'\n') => 1,
                (1, b'\r') => 2,
                _ => 0,
            };
        }
        None
    }
}

/// Where the connection is in its current request.
#[derive(Debug)]
enum Phase {
    /// Reading a head that must end by `deadline`.
    Head {
        deadline: Instant,
        /// Made the first time a read has to wait, so a head that arrives
        /// in one read never touches the timer wheel.
        sleep: Option<Pin<Box<Sleep>>>,
        end: HeadEnd,
    },
    /// The head is in; reads belong to the body or the next request's
    /// first bytes, until [`HeadDeadline::next_request`].
    Past,
    /// Between requests: the next byte read starts a head.
    Idle,
}

/// A public connection's stream with a deadline on each request head.
#[derive(Debug)]
pub struct HeadDeadline {
    inner: Stream,
    timeout: Duration,
    phase: Phase,
    timeouts: IntCounter,
}

impl HeadDeadline {
    /// Wraps a just-accepted connection: its first head is due `timeout`
    /// from now.
    pub fn new(inner: Stream, timeout: Duration, timeouts: IntCounter) -> Self {
        Self {
            inner,
            timeout,
            phase: Phase::Head {
                deadline: Instant::now() + timeout,
                sleep: None,
                end: HeadEnd::default(),
            },
            timeouts,
        }
    }

    /// The previous request is done and the connection is kept alive: the
    /// next head's deadline starts with its first byte.
    pub fn next_request(&mut self) {
        self.phase = Phase::Idle;
    }

    /// Takes a kept-alive stream back from pingora and readies it for the
    /// next request; gives `stream` back as it is when it is not one of ours.
    pub fn rearm(stream: Stream) -> Result<Stream, Stream> {
        if !stream.as_any().is::<HeadDeadline>() {
            return Err(stream);
        }
        let mut ours = stream
            .into_any()
            .downcast::<HeadDeadline>()
            .expect("checked by is::<HeadDeadline>");
        ours.next_request();
        Ok(ours)
    }

    /// Notes the `bytes` just read against the head in progress.
    fn saw(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if matches!(self.phase, Phase::Idle) {
            self.phase = Phase::Head {
                deadline: Instant::now() + self.timeout,
                sleep: None,
                end: HeadEnd::default(),
            };
        }
        if let Phase::Head { end, .. } = &mut self.phase {
            if end.feed(bytes).is_some() {
                self.phase = Phase::Past;
            }
        }
    }
}

fn head_timed_out() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "request head not complete within gateway.header_timeout_s",
    )
}

impl AsyncRead for HeadDeadline {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if let Phase::Head { deadline, .. } = &this.phase {
            if Instant::now() >= *deadline {
                this.timeouts.inc();
                return Poll::Ready(Err(head_timed_out()));
            }
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.saw(&buf.filled()[before..]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                if let Phase::Head {
                    deadline, sleep, ..
                } = &mut this.phase
                {
                    let sleep =
                        sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(*deadline)));
                    if sleep.as_mut().poll(cx).is_ready() {
                        this.timeouts.inc();
                        return Poll::Ready(Err(head_timed_out()));
                    }
                }
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for HeadDeadline {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[async_trait]
impl Shutdown for HeadDeadline {
    async fn shutdown(&mut self) {
        self.inner.shutdown().await
    }
}

impl UniqueID for HeadDeadline {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for HeadDeadline {
    fn get_ssl(&self) -> Option<&pingora::protocols::tls::TlsRef> {
        self.inner.get_ssl()
    }

    fn get_ssl_digest(&self) -> Option<std::sync::Arc<pingora::protocols::tls::SslDigest>> {
        self.inner.get_ssl_digest()
    }

    fn selected_alpn_proto(&self) -> Option<pingora::protocols::ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for HeadDeadline {
    fn get_timing_digest(&self) -> Vec<Option<pingora::protocols::TimingDigest>> {
        self.inner.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for HeadDeadline {
    fn get_proxy_digest(
        &self,
    ) -> Option<std::sync::Arc<pingora::protocols::raw_connect::ProxyDigest>> {
        self.inner.get_proxy_digest()
    }
}

impl GetSocketDigest for HeadDeadline {
    fn get_socket_digest(&self) -> Option<std::sync::Arc<pingora::protocols::SocketDigest>> {
        self.inner.get_socket_digest()
    }

    fn set_socket_digest(&mut self, socket_digest: pingora::protocols::SocketDigest) {
        self.inner.set_socket_digest(socket_digest)
    }
}

#[async_trait]
impl Peek for HeadDeadline {
    async fn try_peek(&mut self, buf: &mut [u8]) -> std::io::Result<bool> {
        self.inner.try_peek(buf).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(chunks: &[&[u8]]) -> Option<(usize, usize)> {
        let mut end = HeadEnd::default();
        chunks
            .iter()
            .enumerate()
            .find_map(|(i, c)| end.feed(c).map(|at| (i, at)))
    }

    #[test]
    fn the_blank_line_ends_a_head_however_it_is_split() {
        let head = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nBODY";
        assert_eq!(ends(&[head]), Some((0, head.len() - 4)));
        for cut in 1..head.len() - 4 {
            let (a, b) = head.split_at(cut);
            let found = ends(&[a, b]).expect("found across two reads");
            let at = if found.0 == 0 { found.1 } else { cut + found.1 };
            assert_eq!(at, head.len() - 4, "cut at {cut}");
        }
        assert_eq!(ends(&[b"GET / HTTP/1.0\n\n"]), Some((0, 16)));
        assert_eq!(ends(&[b"GET / HTTP/1.1\r\nHost: a\r\n"]), None);
        assert_eq!(ends(&[b"GET / HTTP/1.1\r\nX: \r\r\n"]), None);
        // Byte by byte, as a slowloris sends it.
        let mut end = HeadEnd::default();
        let at: Vec<usize> = (0..head.len())
            .filter(|&i| end.feed(&head[i..=i]).is_some())
            .collect();
        assert_eq!(at, vec![head.len() - 5]);
    }
}
